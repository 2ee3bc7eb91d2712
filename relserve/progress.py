"""Progress bars for long LLM calls: rows done, rows/s and ETA, in a terminal or a notebook.

A bar appears only where someone is watching (stderr is a terminal, or a Jupyter kernel is
running) and only once a call has run for ``delay`` seconds, so short calls, scripts, logs and CI
stay quiet. ``RELSERVE_PROGRESS=1`` forces bars on, ``RELSERVE_PROGRESS=0`` turns them off.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

DEFAULT_DELAY_S = 2.0


def enabled() -> bool:
    setting = os.environ.get("RELSERVE_PROGRESS", "").strip().lower()
    if setting in ("0", "false", "no", "off"):
        return False
    if setting in ("1", "true", "yes", "on"):
        return True
    return _in_notebook() or _stderr_is_terminal()


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ip = shell.get_ipython()
    except Exception:
        return False
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


class _Quiet:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _bar_class() -> Any:
    if _in_notebook():
        try:
            import ipywidgets  # noqa: F401  (tqdm's notebook bar needs it)
            from tqdm.notebook import tqdm

            return tqdm
        except ImportError:
            pass
    from tqdm import tqdm

    return tqdm


@contextmanager
def progress_bar(total: int, description: str, *, delay: float = DEFAULT_DELAY_S, show: bool = True) -> Iterator[Any]:
    """A bar with ``update(n)``; a silent stand-in where nobody is watching (or ``show`` is False)."""
    if not show or total <= 0 or not enabled():
        yield _Quiet()
        return
    bar = _bar_class()(total=total, desc=description, unit="row", delay=delay, leave=False, dynamic_ncols=True)
    try:
        yield bar
    finally:
        bar.close()
