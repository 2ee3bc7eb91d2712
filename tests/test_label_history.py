"""Label means pooled over a template's relQueries (relserve/labels/pools.py): hand-computed
picks, and the pool kept apart per prefix-cache namespace (one server tenant cannot move another's
answers)."""

from __future__ import annotations

import math

from engine_doubles import ScriptedEngine

from relserve.functions import make_call
from relserve.labels.pools import forget_means, pooled_picks, pooled_rows
from relserve.planner.executor import CallExecutor
from relserve.planner.plan import plan_call
from relserve.planner.planned_rows import PlannedRows
from relserve.results import RowResult


def lp(yes: float) -> dict[str, float]:
    return {"yes": math.log(yes), "no": math.log(1 - yes)}


# a mixed relQuery: 8 rows the model half believes are "yes", 8 it is sure are "no"
MIXED = [lp(0.5)] * 8 + [lp(0.1)] * 8
# a relQuery of "yes" rows only: 8 at 0.6, 8 at 0.5
ALL_YES = [lp(0.6)] * 8 + [lp(0.5)] * 8


def test_a_relquery_of_one_kind_is_half_flipped_by_its_own_means():
    # own means: yes (log .6 + log .5) / 2, no (log .4 + log .5) / 2; a 0.5 row is 0.09 below
    # the yes mean and 0.11 above the no mean: "no"
    assert pooled_picks(None, ALL_YES) == ["yes"] * 8 + ["no"] * 8
    assert pooled_rows(("k",)) == 0  # key None remembers nothing


def test_pooled_means_over_the_earlier_relquery_answer_it_right():
    key = ("tenant-a", "template")
    assert pooled_picks(key, MIXED) == ["yes"] * 8 + ["no"] * 8
    assert pooled_rows(key) == 16
    # means over all 32 rows: yes (2 log .5 + log .1 + log .6) / 4 = -1.050,
    # no (2 log .5 + log .9 + log .4) / 4 = -0.602; a 0.5 row: yes +0.357, no -0.091
    assert pooled_picks(key, ALL_YES) == ["yes"] * 16
    assert pooled_rows(key) == 32
    forget_means()
    assert pooled_rows(key) == 0


def test_another_key_or_other_labels_start_their_own_pool():
    pooled_picks(("a",), MIXED)
    assert pooled_picks(("b",), ALL_YES) == ["yes"] * 8 + ["no"] * 8
    # the same key asked with other labels: the old sums cannot apply, the pool starts again
    three = [{"x": -1.0, "y": -2.0, "z": -3.0}] * 2
    assert pooled_picks(("a",), three) == ["x", "x"]
    assert pooled_rows(("a",)) == 2


class TenantAwareEngine(ScriptedEngine):
    supports_tenancy = True

    def submit(self, rq, tenancy=None):
        return super().submit(rq)


def tenant(eng: ScriptedEngine, name: str):
    """``eng`` as the server's job for tenant ``name`` sees it (its prefix-cache namespace)."""
    from relserve.policy.types import Tenancy
    from relserve.server.tenant_engine import engine_for_tenant

    return engine_for_tenant(eng, Tenancy(name, cache_salt=f"salt-{name}"))


def _run(engine, call, lps) -> list[bool]:
    rows = [f"r{i}" for i in range(len(lps))]
    plan = plan_call(call, [rows], model_id="m", cache=None, optimize=False)
    ex = CallExecutor(PlannedRows.of(plan, None), model_id="m")
    ex.submit(engine)  # sets the key its picks pool under
    out = [r for i, lp_ in enumerate(lps) for r in ex.answer(RowResult(i, text="no", label_logprobs=lp_, finish_reason="scored"))]
    return [r.value for r in sorted(out, key=lambda r: r.index)]


def test_a_tenants_rows_never_move_another_tenants_answers():
    call = make_call("llm_filter", "Is {r} good, pooled?", method="batch")
    eng = TenantAwareEngine()
    a, b = tenant(eng, "alice"), tenant(eng, "bob")
    assert _run(a, call, MIXED) == [True] * 8 + [False] * 8
    # tenant b's first relQuery of the same template: its own means only, as if a had not run
    assert _run(b, call, ALL_YES) == [True] * 8 + [False] * 8
    # tenant a's second: pooled with its first
    assert _run(a, call, ALL_YES) == [True] * 16


def test_the_pool_is_per_template_and_per_examples():
    a = tenant(TenantAwareEngine(), "alice")
    _run(a, make_call("llm_filter", "Is {r} good, pooled?", method="batch"), MIXED)
    other = make_call("llm_filter", "Is {r} any good, pooled?", method="batch")
    assert _run(a, other, ALL_YES) == [True] * 8 + [False] * 8
    given = make_call("llm_filter", "Is {r} good, pooled?", method="batch",
                      examples=[{"r": "fine", "answer": "yes"}, {"r": "awful", "answer": "no"}])
    assert _run(a, given, ALL_YES) == [True] * 8 + [False] * 8
