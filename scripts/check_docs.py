"""Check the project's prose: links in its Markdown, and the files, modules and doc sections its
code and docs name, resolve; the code's comments and docstrings quote no measured figure.

* Markdown links (``[text](target)``) in README.md, docs/ and bench/README.md: a relative target
  is a file or folder of the repository, and its ``#anchor`` (or a bare ``#anchor``) is a heading
  of that file, as GitHub spells it, or an ``<a id="...">``.
* Paths named in relserve/'s code (comments, docstrings) and in the Markdown outside the lab
  notebook: ``relserve/x/y.py`` (and ``tests/``, ``bench/``, ``scripts/``, ``docs/`` ones) exist;
  ``relserve/x/y.name`` names something y.py defines; ``docs/page.md#anchor`` has that heading,
  and ``docs/page.md, "Title"`` a section whose title starts so; a file named without its folder
  in relserve/'s code (``adaptive.py``) is the name of some file of the repository.
* No comment or docstring in relserve/ quotes a measured figure (an AUC, an F1, a percentage, a
  ratio such as "1.9x", "N of M rows"): code says what it does and why, and points to the doc
  section that holds the figure.
* Dotted module names in relserve/'s code (``relserve.labels.plan``, or
  ``relserve.labels.plan.LabelPlan``): the longest importable prefix is a module of the tree and
  the rest, if any, a name it defines.

``python scripts/check_docs.py`` prints one line per broken pointer and exits 1 if there is
any; ``tests/test_docs_check.py`` runs it in the fast tier.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: the Markdown whose links are checked (globs under the repository)
MARKDOWN = ("README.md", "docs/**/*.md", "bench/README.md")
#: the code whose comments and docstrings are checked
CODE = ("relserve/**/*.py",)
#: top-level folders a path mention may start with
PATH_ROOTS = ("relserve", "tests", "bench", "scripts", "docs", "sql", "udfs", "datasets")

_LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ID = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
_PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(PATH_ROOTS) + r")/[\w./-]*\w)(#[\w-]+)?")
_DOTTED = re.compile(r"(?<![\w.])(relserve(?:\.\w+)+)")
_FENCE = re.compile(r"^\s*(```|~~~)")
#: a doc section named by its title: docs/quality.md, "Fourth pass"
_SECTION = re.compile(r"((?:docs|bench)/[\w/.-]+\.md),?\s+\(?\"([^\"]+)\"")


@dataclass(frozen=True)
class Broken:
    file: str
    line: int
    what: str
    why: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.what}: {self.why}"


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: markup dropped, lower case, punctuation removed,
    spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor of a Markdown file (headings, with GitHub's -1, -2 for repeats; HTML ids)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        out.update(_HTML_ID.findall(line))
        m = _HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def _files(globs: tuple[str, ...]) -> list[Path]:
    found: set[Path] = set()
    for g in globs:
        found.update(p for p in ROOT.glob(g) if p.is_file())
    return sorted(found)


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _check_target(source: Path, line: int, target: str, *, relative_to: Path) -> Broken | None:
    """A link or path ``target`` (with an optional #anchor) read relative to ``relative_to``."""
    where, _, anchor = target.partition("#")
    path = (relative_to / where).resolve() if where else source
    if where:
        try:
            path.relative_to(ROOT)
        except ValueError:
            return Broken(_rel(source), line, target, "points outside the repository")
        if not path.exists():
            return Broken(_rel(source), line, target, "no such file or folder")
    if anchor:
        if path.is_dir() or path.suffix != ".md":
            return None  # an anchor into code or a folder: GitHub's line anchors, not checked
        if anchor not in anchors(path):
            return Broken(_rel(source), line, target, f"no heading #{anchor} in {_rel(path)}")
    return None


def check_markdown(path: Path) -> list[Broken]:
    """Its links; and, outside the lab notebook (dated records that name the code of their day),
    the paths its prose names."""
    notebook = "notebook" in path.relative_to(ROOT).parts
    out: list[Broken] = []
    fenced = False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        targets = _LINK.findall(line) + _IMAGE.findall(line)
        for target in targets:
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
                continue
            broken = _check_target(path, n, target, relative_to=path.parent)
            if broken:
                out.append(broken)
        if not notebook:
            out.extend(_check_paths(path, n, _without_links(line)))
    return out


def _without_links(line: str) -> str:
    return _IMAGE.sub("", _LINK.sub("", line))


def _check_paths(source: Path, line: int, text: str) -> list[Broken]:
    """The repository paths a line of prose or code names (``relserve/x/y.py``, ``docs/a.md#b``)."""
    out: list[Broken] = []
    for m in _PATH.finditer(text):
        path, anchor = m.group(1), m.group(2) or ""
        if any(c in path for c in "*{}<>") or path.endswith("/"):
            continue
        if "/out/" in path or path.startswith("bench/out"):
            continue  # benchmark outputs are not kept in git
        attr = re.fullmatch(r"(.+)\.(\w+)", path)
        if attr and not (ROOT / path).exists() and not attr.group(2).isdigit():
            # relserve/x/y.name: a name defined in relserve/x/y.py
            module = ROOT / (attr.group(1) + ".py")
            if attr.group(2) in {"py", "md", "sql", "toml", "json", "csv", "sh", "js", "c", "h"}:
                pass
            elif not module.is_file():
                out.append(Broken(_rel(source), line, path, f"no such module {attr.group(1)}.py"))
                continue
            elif not _defines(module, attr.group(2)):
                out.append(Broken(_rel(source), line, path, f"{attr.group(1)}.py defines no {attr.group(2)!r}"))
                continue
            else:
                continue
        broken = _check_target(source, line, path + anchor, relative_to=ROOT)
        if broken:
            out.append(broken)
    for m in _SECTION.finditer(text):
        doc = ROOT / m.group(1)
        title = slug(m.group(2))
        if doc.is_file() and not any(a.startswith(title) for a in anchors(doc)):
            out.append(Broken(_rel(source), line, f'{m.group(1)}, "{m.group(2)}"', f"no section so titled in {m.group(1)}"))
    return out


@cache
def _module_file(dotted: str) -> Path | None:
    base = ROOT.joinpath(*dotted.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def _defines(module: Path, name: str) -> bool:
    text = module.read_text(encoding="utf-8")
    pattern = rf"^\s*(?:async\s+def|def|class)\s+{re.escape(name)}\b|^\s*{re.escape(name)}\s*[:=]|\bimport\b.*\b{re.escape(name)}\b"
    return re.search(pattern, text, re.M) is not None


def _check_dotted(source: Path, line: int, text: str) -> list[Broken]:
    out: list[Broken] = []
    for m in _DOTTED.finditer(text):
        parts = m.group(1).split(".")
        if parts[-1] in {"py", "md"}:
            continue
        if _module_file(".".join(parts[:2])) is None:
            if len(parts) > 2:
                out.append(Broken(_rel(source), line, m.group(1), f"no module {'.'.join(parts[:2])}"))
            continue  # relserve.timeout and the like: a PostgreSQL setting, not a module
        for k in range(len(parts), 1, -1):
            module = _module_file(".".join(parts[:k]))
            if module is not None:
                break
        rest = parts[k:]
        if rest and not _defines(module, rest[0]):
            out.append(Broken(_rel(source), line, m.group(1),
                              f"{'.'.join(parts[:k])} defines no {rest[0]!r}"))
    return out


#: a file named without its folder (``adaptive.py``): some file of the repository has that name
_BARE_FILE = re.compile(r"(?<![\w/.-])([a-z_][a-z0-9_]*\.py)\b")


@cache
def _file_names() -> frozenset[str]:
    return frozenset(p.name for top in PATH_ROOTS for p in (ROOT / top).glob("**/*.py"))


def check_code(path: Path) -> list[Broken]:
    out: list[Broken] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        out.extend(_check_paths(path, n, line))
        out.extend(Broken(_rel(path), n, m.group(1), "no file of that name in the repository")
                   for m in _BARE_FILE.finditer(line) if m.group(1) not in _file_names())
        if "import" not in line.split("#")[0]:
            out.extend(_check_dotted(path, n, line))
    return out


#: what a measured figure looks like in prose: an AUC, an F1, a percentage, a ratio ("1.9x"),
#: "N of M rows"
_FIGURE = re.compile(r"\bAUC\b|\bF1\b|\d%|\b\d+(?:\.\d+)?x\b(?! ?\w*\()|\b\d+ of (?:the )?\d+ (?:rows|right|tasks)")


def _prose(path: Path) -> list[tuple[int, str]]:
    """The comments and docstrings of a Python file, line by line (strings that are code's
    values, f-strings and messages, are not prose)."""
    import ast
    import io
    import tokenize

    text = path.read_text(encoding="utf-8")
    out: list[tuple[int, str]] = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                first = body[0].lineno
                out.extend((first + i, line) for i, line in enumerate(body[0].value.value.splitlines()))
    return sorted(out)


def check_figures(path: Path) -> list[Broken]:
    """Measured figures quoted in a Python file's comments and docstrings: they belong in the
    docs, which the comment points to."""
    return [Broken(_rel(path), n, line.strip()[:80], "quotes a measured figure (point to the doc that holds it)")
            for n, line in _prose(path) if _FIGURE.search(line)]


def check() -> list[Broken]:
    out: list[Broken] = []
    for p in _files(MARKDOWN):
        out.extend(check_markdown(p))
    for p in _files(CODE):
        out.extend(check_code(p))
        out.extend(check_figures(p))
    return out


def main() -> int:
    broken = check()
    for b in broken:
        print(b)
    print(f"{len(broken)} broken pointer(s)", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
