"""Running relQueries ranked behind sit out decode steps when that shortens the total latency
(``aba.decode_hold``, issue 28 item 1: a 3-row statement decoding in the steps of a 100-row one).

Cost model (seconds): prefill(u) = 0.001 u + 0.01, decode(n) = 0.002 n + 0.02, so holding a
relQuery of n requests saves each relQuery ranked ahead 0.002 n a step and costs it 0.02 a step:
it pays from n > 10 (one relQuery ahead).
"""

from __future__ import annotations

import pytest

from relserve.policy import CostModel, Limits, PolicySettings, Req, StepKind, StepView, make_policy
from relserve.policy.aba import decode_hold
from relserve.policy.relqueries import RelQueryTracker
from relserve.sim import simulate
from relserve.workloads import TraceQuery

COST = CostModel(alpha_p=0.001, beta_p=0.01, alpha_d=0.002, beta_d=0.02)
LIMITS = Limits(max_num_batched_tokens=1000, max_num_seqs=64, kv_capacity_tokens=100_000, kv_free_tokens=100_000, block_size=4)


def decoding(rel_id: str, n: int, left: int, arrival: float = 0.0) -> list[Req]:
    rs = [Req(f"{rel_id}{i}", rel_id, arrival, n, 10, left + 1) for i in range(n)]
    for r in rs:
        r.computed_tokens, r.output_tokens = 10, 1
    return rs


def groups(*reqs: list[Req]):
    view = StepView(1.0, [], [r for rs in reqs for r in rs], LIMITS)
    return RelQueryTracker().group(view), view


@pytest.mark.parametrize("n_big,held", [(10, False), (11, True), (40, True)])
def test_a_big_relquery_is_held_exactly_when_its_requests_cost_more_than_a_fixed_step(n_big, held):
    g, _ = groups(decoding("big", n_big, 20), decoding("small", 1, 5, arrival=0.5))
    out = decode_hold(COST, [x for x in g.values()], {})
    # the small relQuery ranks first (less decode left); holding big saves it 0.002 * n_big a step
    # and costs big 0.02 a step: 0.02 vs 0.02 at 10 (no gain, no hold), 0.022 at 11
    assert [x.rel_id for x in out] == (["big"] if held else [])


def test_two_small_relqueries_ahead_make_holding_pay_sooner():
    # k = 2 relQueries ahead: 2 * 0.002 * 6 = 0.024 > 0.02
    g, _ = groups(decoding("big", 6, 20), decoding("s1", 1, 5, 0.5), decoding("s2", 1, 5, 0.6))
    assert [x.rel_id for x in decode_hold(COST, list(g.values()), {})] == ["big"]
    assert decode_hold(COST, [g["big"], g["s1"]], {}) == []  # one ahead: 0.012 < 0.02
    # a starved relQuery is never held
    assert decode_hold(COST, list(g.values()), {}, starved={"big"}) == []


def test_the_policy_decodes_only_the_small_relquery_and_holds_the_big_one():
    big, small = decoding("big", 40, 20), decoding("small", 1, 5, arrival=0.5)
    plan = make_policy("relserve", COST).schedule(StepView(1.0, [], big + small, LIMITS))
    assert plan.kind is StepKind.DECODE and plan.reason == "only-decode-subset"
    assert sorted(r.req_id for r in plan.hold) == sorted(r.req_id for r in big)
    off = make_policy("relserve", COST, PolicySettings(decode_subset=False)).schedule(StepView(1.0, [], big + small, LIMITS))
    assert off.hold == []


def _rq(rel_id: str, arrival: float, n: int, words: int, max_tokens: int) -> TraceQuery:
    rows = [{"x": " ".join(f"{rel_id}{k}w{i}" for i in range(words))} for k in range(n)]
    return TraceQuery(id=rel_id, arrival_s=arrival, template="{x}", max_tokens=max_tokens, rows=rows)


def test_simulated_small_statement_behind_a_decoding_extract_runs_as_if_alone():
    """Issue 28's case in small: a 40-row relQuery decoding 30-token answers, then a 3-row one
    with 10-token answers. Held, the 3 rows decode in steps of their own: after its prefill the
    small relQuery takes 9 decode steps of 3 requests (0.026 s each), as alone."""
    trace = [_rq("extract", 0.0, 40, 8, 30), _rq("map", 0.5, 3, 8, 10)]
    pol = make_policy("relserve", COST, PolicySettings(starvation_threshold=None))
    res = simulate(trace, pol, COST, LIMITS, isolated=False)
    t = {x.id: x for x in res.relqueries}
    m = t["map"]
    assert m.finish - m.last_prefill_end == pytest.approx(9 * COST.decode(3), rel=0, abs=1e-9)
    off = simulate(trace, make_policy("relserve", COST, PolicySettings(starvation_threshold=None, decode_subset=False)), COST, LIMITS, isolated=False)
    t_off = {x.id: x for x in off.relqueries}
    # decoding beside the extract's 40 rows each step costs 0.106 instead of 0.026
    assert t_off["map"].finish - t_off["map"].last_prefill_end == pytest.approx(9 * COST.decode(43), rel=0, abs=1e-9)
    # the extract pays one fixed step cost per held step: 9 x 0.02 later
    assert t["extract"].finish - t_off["extract"].finish == pytest.approx(9 * COST.beta_d, rel=0, abs=1e-9)
    assert res.summary.mean_latency < off.summary.mean_latency


def test_a_small_relquery_is_not_ranked_behind_one_whose_rows_all_decode():
    """The paper ranks a relQuery by its unprefilled requests only, so one whose rows all run has
    priority 0 and every waiting relQuery ranks behind it: a 3-row relQuery arriving while a 40-row
    one decodes 30-token answers waited for all of it (the transitional rule chose decode every
    step). Ranked by the decode it still needs (``count_admitted_decode``), the big one is behind:
    the small relQuery is prefilled in the step after it arrives."""
    trace = [_rq("big", 0.0, 40, 8, 30), _rq("small", 0.5, 3, 8, 1)]
    settings = dict(starvation_threshold=None, decode_subset=False)
    res = simulate(trace, make_policy("relserve", COST, PolicySettings(**settings)), COST, LIMITS, isolated=False)
    t = {x.id: x for x in res.relqueries}
    small, big = t["small"], t["big"]
    # its prefill step (its one-token answers come with it) starts by the end of the decode step
    # under way when it arrived
    step = small.last_prefill_end - small.first_prefill_start
    assert small.first_prefill_start - small.arrival <= COST.decode(40) + 1e-9
    assert small.finish == pytest.approx(small.last_prefill_end)
    paper = simulate(trace, make_policy("relserve", COST, PolicySettings(**settings, count_admitted_decode=False)),
                     COST, LIMITS, isolated=False)
    p = {x.id: x for x in paper.relqueries}
    # the paper's rule: the small relQuery starts once the big one is done
    assert p["small"].first_prefill_start >= p["big"].finish - 1e-9
    # and ranked right, the big relQuery pays exactly the small one's prefill step for it
    assert big.finish - p["big"].finish == pytest.approx(step, abs=1e-9)
