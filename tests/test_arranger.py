"""The Adaptive Batch Arranger's candidates beyond the paper's: filled prefill, mixed steps,
the Eq. 16 gain, and choosing among them by simulation. Expectations worked out by hand.

Cost model: L_prefill = 0.001 utok + 0.01, L_decode = 0.002 req + 0.02; a mixed step pays both
variable parts and the larger fixed cost (0.02).
"""

from __future__ import annotations

import pytest
from test_policy import BIG, COST, reqs, running, view

from relserve.policy import POLICY_NAMES, CostModel, Limits, Policy, PolicyName, PolicySettings, StepKind, make_policy
from relserve.policy.aba import StepTimes, mixed_delta, mixed_vs_prefill
from relserve.sim import word_tokenizer
from relserve.sim.tune import MIN_THROUGHPUT_SHARE, candidate_settings, tune_arranger, tuning_markdown
from relserve.workloads import TraceQuery

MIXED = PolicySettings(starvation_threshold=None, mixed_steps=True)


def test_policy_names_and_factory():
    assert POLICY_NAMES == ("vllm", "fcfs", "sarathi", "sp", "relserve", "relserve-pp", "relserve-dp")
    assert all(make_policy(n).name == PolicyName(n) for n in POLICY_NAMES)
    with pytest.raises(TypeError):
        Policy()  # the base class is abstract


def test_mixed_against_prefill_by_hand():
    # L_D = 0.028 (4 decodes), L_P = 0.21 (200 tokens), L_M = 0.2 + 0.008 + 0.02 = 0.228
    t = StepTimes(decode=0.028, prefill=0.21, mixed=0.228, mixed_prefill=0.21)
    # one waiting relQuery loses 0.018; each running one gains L_P + L_D - L_M = 0.01
    assert mixed_vs_prefill(t, num_running=1, num_waiting=1) == pytest.approx(0.008)
    assert mixed_vs_prefill(t, num_running=3, num_waiting=1) == pytest.approx(-0.012)
    # transitional, against decoding first: running lose L_M - L_D = 0.2 plus the bigger batch
    # (0.02); the merged steps (0.30) and the saved step (3 x 0.01) go to three waiting relQueries
    assert mixed_delta(t, bigger=0.02, merged=0.30, num_running=1, num_waiting=3) == pytest.approx(-0.11)


def _transitional(settings: PolicySettings, n_waiting_rel: int):
    p = make_policy("relserve", COST, settings)
    r1 = running(reqs("R1", 4, max_tokens=6))
    waiting = reqs("R2", 2, prompt=100, max_tokens=50, arrival=0.2)
    for k in range(1, n_waiting_rel):
        waiting += reqs(f"W{k}", 60, prompt=100, max_tokens=50, arrival=0.3 + k)
    return p, p.schedule(view(waiting=waiting, running=r1))


def test_transitional_mixed_step_beats_prefill_first():
    # The paper's rule prefills first here (Delta = -0.07); the mixed step scores -0.11.
    p, plan = _transitional(PolicySettings(starvation_threshold=None), 3)
    assert plan.kind is StepKind.PREFILL and p.aba.last_delta[0] == pytest.approx(-0.07)
    _, plan = _transitional(MIXED, 3)
    assert plan.kind is StepKind.MIXED and plan.reason == "transitional-mixed"
    assert [r.req_id for r in plan.admit] == ["R20", "R21"]
    # the running requests take one token each of the budget, the chunk the rest
    assert plan.token_budget == 4 + (BIG.max_num_batched_tokens - 4)


def test_transitional_decode_stays_when_mixing_does_not_pay():
    # one waiting relQuery: Delta_P = +0.13, Delta_M = 0.2 + 0.02 - 0.10 - 0.01 = +0.11 -> decode
    _, plan = _transitional(MIXED, 1)
    assert plan.kind is StepKind.DECODE and plan.reason == "transitional-decode"


def test_eq16_gain_tips_the_transitional_choice():
    # Delta_P = 0.23 - g x 0.10: decode at g = 1, prefill at g = 4 (0.23 - 0.40 < 0)
    _, plan = _transitional(PolicySettings(starvation_threshold=None), 1)
    assert plan.kind is StepKind.DECODE
    p, plan = _transitional(PolicySettings(starvation_threshold=None, transitional_gain=4.0), 1)
    assert plan.kind is StepKind.PREFILL and p.aba.last_delta == pytest.approx((-0.17, 0.23, 0.40))


def test_filled_prefill_takes_the_next_relqueries_in_priority_order():
    small = reqs("S", 2, prompt=100, max_tokens=5, arrival=0.5)
    big = reqs("B", 3, prompt=100, max_tokens=5, arrival=0.1)
    plan = make_policy("relserve", COST, PolicySettings(starvation_threshold=None)).schedule(view(waiting=big + small))
    assert [r.rel_id for r in plan.admit] == ["S", "S"]  # the paper's candidate: one relQuery
    filled = make_policy("relserve", COST, PolicySettings(starvation_threshold=None, fill_prefill=True))
    plan = filled.schedule(view(waiting=big + small))
    assert [r.rel_id for r in plan.admit] == ["S", "S", "B", "B", "B"]
    # within the step's token budget, stopping at the first request that does not fit
    tight = Limits(max_num_batched_tokens=350, max_num_seqs=256, kv_capacity_tokens=100_000, kv_free_tokens=100_000)
    plan = filled.schedule(view(waiting=big + small, limits=tight))
    assert [r.rel_id for r in plan.admit] == ["S", "S", "B"]


def _tiny_trace() -> list[TraceQuery]:
    rows = lambda k, n: [{"x": " ".join(f"{k}{j}w{i}" for i in range(12))} for j in range(n)]  # noqa: E731
    return [
        TraceQuery(id="big", arrival_s=0.0, template="{x}", max_tokens=8, rows=rows("b", 24)),
        TraceQuery(id="small", arrival_s=0.05, template="{x}", max_tokens=4, rows=rows("s", 2)),
        TraceQuery(id="mid", arrival_s=0.1, template="{x}", max_tokens=6, rows=rows("m", 8)),
    ]


def test_tuning_picks_the_best_scoring_candidate_and_reports_the_margin():
    lim = Limits(max_num_batched_tokens=128, max_num_seqs=32, kv_capacity_tokens=4096, kv_free_tokens=4096, block_size=4)
    cost = CostModel(alpha_p=0.001, beta_p=0.05, alpha_d=0.001, beta_d=0.05)
    t = tune_arranger(cost, lim, _tiny_trace(), loads=(1.0, 2.0), tokenize=word_tokenizer, base=PolicySettings(starvation_threshold=None))
    cands = [r for r in t.rows if r.settings is not None]
    assert len(cands) == len(candidate_settings()) == 16
    assert {r.name for r in t.rows if r.settings is None} == {"fcfs", "sp", "sarathi", "vllm"}
    # the lowest score among the candidates that keep MIN_THROUGHPUT_SHARE (97%) of the best
    # baseline's rows/s at the higher load (on this tiny trace none does: then the one with the most rows/s)
    assert min(r.score for r in cands) == pytest.approx(1.0)
    by_name = {r.name: r for r in t.rows}
    top = max(t.loads)
    # the best baseline here is sarathi; shares are worked out from the rows/s the tuner measured
    assert max((r for r in t.rows if r.settings is None), key=lambda r: r.rows_per_s[top]).name == "sarathi"
    base = by_name["sarathi"].rows_per_s[top]
    for r in cands:
        assert r.throughput_share == pytest.approx(r.rows_per_s[top] / base), r.name
    # no candidate keeps 97% (the mixed-step ones come closest, all at the same share): the first
    # of those in candidate order is chosen, and with one candidate kept there is no margin
    assert MIN_THROUGHPUT_SHARE == 0.97 and all(r.throughput_share < MIN_THROUGHPUT_SHARE for r in cands)
    mixed = [r for r in cands if r.settings["mixed_steps"]]
    assert len({r.throughput_share for r in mixed}) == 1
    assert all(r.throughput_share < mixed[0].throughput_share for r in cands if not r.settings["mixed_steps"])
    assert t.chosen == {"fill_prefill": False, "mixed_chunk_tokens": None, "transitional_gain": 1.0,
                        "mixed_steps": True, "backlog_weight": 0.0}
    assert t.chosen == dict(mixed[0].settings) and t.margin == 0.0
    assert "**(chosen)**" in tuning_markdown(t)
