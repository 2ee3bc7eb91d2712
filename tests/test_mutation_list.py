"""The mutation check's list (scripts/mutation_check.py) still fits the code: each mutant's text
occurs exactly once in its file, so a refactor that moves a mutated line is caught here, not
when someone next runs the check (a mutant that cannot apply stops the whole run)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _mutants():
    spec = importlib.util.spec_from_file_location("mutation_check", REPO / "scripts" / "mutation_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutation_check", module)  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module.MUTANTS


@pytest.mark.parametrize("mutant", _mutants(), ids=lambda m: m.name)
def test_each_mutant_replaces_one_place_that_exists(mutant):
    text = (REPO / mutant.path).read_text()
    assert text.count(mutant.old) == 1, f"{mutant.name}: {mutant.old!r} occurs {text.count(mutant.old)} times in {mutant.path}"
    assert mutant.new != mutant.old
