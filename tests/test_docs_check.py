"""The project's prose points where it says: every Markdown link and anchor, every path, module
and doc section named in relserve/'s comments and docstrings resolves, and no comment or docstring
quotes a measured figure (scripts/check_docs.py; the figures live in docs/)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _checker():
    spec = importlib.util.spec_from_file_location("check_docs", ROOT / "scripts" / "check_docs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_every_pointer_resolves_and_no_docstring_quotes_a_figure():
    broken = _checker().check()
    assert not broken, "\n".join(map(str, broken))


def test_the_checker_reads_anchors_as_github_makes_them(tmp_path):
    check = _checker()
    assert check.slug("The floor: every statement alone") == "the-floor-every-statement-alone"
    assert check.slug("Riders: one-token relQueries in the head's prefill step") == \
        "riders-one-token-relqueries-in-the-heads-prefill-step"
    assert check.slug("The default: `adaptive` (a filter, and a classify of two labels)") == \
        "the-default-adaptive-a-filter-and-a-classify-of-two-labels"
    doc = tmp_path / "doc.md"
    doc.write_text("# A\n\n## Same\n\n## Same\n\n```\n# not a heading\n```\n<a id=\"kept\"></a>\n")
    assert check.anchors(doc) == {"a", "same", "same-1", "kept"}


def test_the_checker_finds_what_it_is_for():
    check = _checker()
    readme = ROOT / "README.md"
    assert check._check_target(readme, 1, "docs/benchmarks.md#no-such-section", relative_to=ROOT)
    assert check._check_target(readme, 1, "docs/no-such-page.md", relative_to=ROOT)
    assert check._check_target(readme, 1, "docs/benchmarks.md#planner", relative_to=ROOT) is None
    assert check._check_paths(readme, 1, "see relserve/labels/no_such_module.py")
    assert check._check_paths(readme, 1, "see relserve/labels/plan.no_such_name")
    assert not check._check_paths(readme, 1, "see relserve/labels/plan.LabelPlan and relserve/labels/decide.py")
    assert check._check_dotted(readme, 1, "relserve.labels.no_such_module")
    assert not check._check_dotted(readme, 1, "relserve.timeout, a PostgreSQL setting")
    assert check._FIGURE.search("an AUC of 0.96") and check._FIGURE.search("3.6x faster")
    assert check._FIGURE.search("kept 61-64% right") and not check._FIGURE.search("the share of rows")


def test_the_reference_pages_stay_short():
    """A newcomer reads the README whole, and the benchmark reference holds what holds now; the
    dated passes go to docs/notebook/ (issue 67)."""
    assert (ROOT / "README.md").stat().st_size <= 10_000
    assert (ROOT / "docs" / "benchmarks.md").stat().st_size <= 25_000
