"""``python -m relserve.postgres.python_path``: the value of ``python_path`` in ``relserve.config``
for the Python environment it runs in (docs/server-postgres-spreadsheet.md, Install).

The extension's ``relserve._load()`` adds each folder with ``site.addsitedir``, in order, in front
of the server's own Python paths, so a folder's ``.pth`` files run as they would for a Python
started in the environment. That makes the environment's site-packages enough for both kinds of
install: a non-editable one has relserve in it, an editable one a ``.pth`` file pointing at the
checkout. A relserve installed in a folder of its own (``pip install --target``, found through
``PYTHONPATH``) comes first, so that it is the relserve the database loads, with the environment's
site-packages after it for the dependencies.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

import relserve


def site_packages() -> list[Path]:
    """This environment's folders of installed packages (pure and platform-specific, once each)."""
    paths = sysconfig.get_paths()
    out: list[Path] = []
    for key in ("purelib", "platlib"):
        folder = Path(paths[key]).resolve()
        if folder not in out:
            out.append(folder)
    return out


def installed_from() -> Path | None:
    """The folder holding the relserve imported here when this environment's site-packages would not
    load that one (a ``--target`` folder or a checkout on ``PYTHONPATH``); None when it would (relserve
    installed there, or an editable install of this very checkout)."""
    own = Path(relserve.__file__).resolve().parent.parent
    if own in site_packages():
        return None
    for dist in metadata.distributions(name="relserve", path=[str(p) for p in site_packages()]):
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
        if direct.get("dir_info", {}).get("editable") and Path(unquote(urlparse(direct["url"]).path)).resolve() == own:
            return None
    return own


def python_path() -> str:
    own = installed_from()
    return ":".join(str(p) for p in ([own] if own else []) + site_packages())


def main() -> None:
    print(python_path())
    print(f"(Python {sys.version_info.major}.{sys.version_info.minor}: the database server's plpython3u must run "
          "the same minor version)", file=sys.stderr)


if __name__ == "__main__":
    main()
