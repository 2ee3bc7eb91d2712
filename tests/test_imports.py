"""The package's import graph stays a set of layers: no module imports, directly or through others,
a module that imports it back, and the scheduling policy stays plain Python.

Every import counts, including those inside functions (an import deferred into a function still
ties the two modules together; it only hides the circle from Python). Imports under
``if TYPE_CHECKING:`` are left out: they exist for annotations only and never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "relserve"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """The relserve modules a module's code imports (absolute names), TYPE_CHECKING blocks aside."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            # "from relserve.planner import cost" imports the submodule relserve.planner.cost
            found.update(f"{target}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {name for name in found if name == "relserve" or name.startswith("relserve.")}


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        targets = _imports(ast.parse(path.read_text()), name, path.name == "__init__.py")
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return found


def _without_package_faces(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """A package's ``__init__`` that only re-exports is a face, not a layer: an edge into a package
    goes on to what its ``__init__`` imports. Submodules importing their own package's face would
    otherwise make every package a circle with itself."""
    return {
        name: {t for t in targets if not (name.startswith(t + ".") and graph.get(t, set()) <= _submodules(graph, t))}
        for name, targets in graph.items()
    }


def _submodules(graph: dict[str, set[str]], package: str) -> set[str]:
    return {m for m in graph if m.startswith(package + ".")}


def test_the_circle_finder_finds_a_circle_and_a_self_contained_chain():
    # the test's own tool, on hand-made graphs: it must be able to fail
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_relative_imports_resolve_to_absolute_module_names():
    tree = ast.parse("from . import cost\nfrom ..engine import Engine\nif TYPE_CHECKING:\n    from relserve.x import Y\n")
    assert _imports(tree, "relserve.planner.executor", False) == {
        "relserve.planner",
        "relserve.planner.cost",
        "relserve.engine",
        "relserve.engine.Engine",
    }


def test_no_import_circle_in_the_package():
    found = circles(_without_package_faces(import_graph()))
    assert found == [], "import circles: " + "; ".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize("module", sorted(m for m in import_graph() if m.startswith("relserve.policy")))
def test_the_scheduling_policy_imports_neither_vllm_nor_the_layers_above_it(module):
    # the policy is shared by the engine plug-in and the simulator: it must not reach either
    path = PACKAGE.parent / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = PACKAGE.parent / module.replace(".", "/") / "__init__.py"
    tree = ast.parse(path.read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level}
    assert not {m for m in imported if m.split(".")[0] in ("vllm", "torch")}, imported
    above = {t for t in import_graph()[module] if not t.startswith("relserve.policy") and t not in ("relserve", "relserve.errors")}
    assert above == set(), f"{module} imports {sorted(above)}"
