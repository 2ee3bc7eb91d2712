"""The limit (sim/clairvoyant.py): the provable lower bound and the clairvoyant schedule.

Tiny traces worked out by hand. Prompts are space-separated words (one token each, see
test_sim.py); blocks of 4 tokens. Step costs: prefill(u) = 0.001 u + 0.02,
decode(n) = 0.002 n + 0.02, a mixed step 0.001 u + 0.002 n + 0.02.
"""

from __future__ import annotations

import random

import pytest

from relserve.policy import POLICY_NAMES, PRESETS, CostModel, Limits
from relserve.sim import default_limits, prepare_trace, simulate
from relserve.sim.clairvoyant import clairvoyant, lower_bound, srpt_mean_flow, the_limit
from relserve.sim.report import markdown_table
from relserve.workloads import TraceQuery, generate_trace

COST = CostModel(alpha_p=0.001, beta_p=0.02, alpha_d=0.002, beta_d=0.02)
APPROX = dict(rel=1e-9, abs=1e-12)


def limits(seqs=10, kv=1024, mnbt=1000) -> Limits:
    return Limits(max_num_batched_tokens=mnbt, max_num_seqs=seqs, kv_capacity_tokens=kv, kv_free_tokens=kv, block_size=4)


def rq(rel_id: str, arrival: float, prompts: list[str], max_tokens: int) -> TraceQuery:
    return TraceQuery(id=rel_id, arrival_s=arrival, template="{x}", max_tokens=max_tokens, rows=[{"x": p} for p in prompts])


def words(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


def test_srpt_preempts_the_longer_job():
    # job 0 runs 0-1, job 1 (1 s) arrives and preempts it: finishes at 2, job 0 at 4
    assert srpt_mean_flow([(0.0, 3.0), (1.0, 1.0)]) == pytest.approx((1.0 + 4.0) / 2, **APPROX)
    # an idle gap: the second job starts at its release
    assert srpt_mean_flow([(0.0, 1.0), (5.0, 2.0)]) == pytest.approx(1.5, **APPROX)


def test_two_relqueries_bound_and_clairvoyant_by_hand():
    """A: one 6-token row answering 3 tokens; B: two 6-token rows answering 2; both at t=0.

    Bound, each alone: A's row: prefill 0.02 + 0.006, two decodes 0.022 each = 0.070; its work
    0.006 + 0.004 plus 3 steps x 0.02 = 0.070. B: a row's chain 0.026 + 0.022 = 0.048; work
    0.012 + 0.004 plus 2 steps = 0.056. Mean 0.063.
    SRPT: shares by requests (3/10 and 4/10 of a 0.02 step): A 0.016, B 0.024: mean (0.016 + 0.040)/2.
    Combined: taking A out of SRPT gives 0.024 + 0.070, then B too: back to the floors, 0.063.
    The optimum: prefill all three rows (0.038), decode three (0.026: B done at 0.064), decode A
    (0.022: 0.086): mean 0.075 (prefilling B first, or A first, gives 0.084). The clairvoyant
    policy ranks B (0.056 left) before A (0.070) and fills the prefill with A: the same 0.075.
    """
    lim = limits()
    trace = prepare_trace([rq("A", 0.0, [words("a", 6)], 3), rq("B", 0.0, [words("b", 6), words("c", 6)], 2)], block_size=4)
    lb = lower_bound(trace, COST, lim)
    by_id = {f.id: f for f in lb.relqueries}
    assert by_id["A"].min_latency == pytest.approx(0.070, **APPROX)
    assert by_id["B"].min_latency == pytest.approx(0.056, **APPROX)
    assert lb.isolated_mean == pytest.approx(0.063, **APPROX)
    assert lb.srpt_mean == pytest.approx(0.028, **APPROX)
    assert lb.share_weights == (0.0, 1.0, 0.0)
    assert lb.combined_mean == pytest.approx(0.063, **APPROX)
    assert lb.outside_srpt == 2
    assert lb.mean == pytest.approx(0.063, **APPROX)
    cv = clairvoyant(trace, COST, lim)
    assert cv.mean == pytest.approx(0.075, **APPROX)
    assert cv.arrangement == "prefill-first"
    assert cv.latencies["B"] == pytest.approx(0.064, **APPROX)
    assert cv.latencies["A"] == pytest.approx(0.086, **APPROX)


def test_one_request_at_a_time_makes_the_srpt_bound_exact():
    """Three one-row relQueries (6 tokens, 1 answer token) at t=0 and max_num_seqs = 1: every
    step holds one request and costs 0.026, so the fixed cost is all theirs: SRPT gives
    (0.026 + 0.052 + 0.078) / 3 = 0.052, which FCFS reaches."""
    lim = limits(seqs=1)
    trace = prepare_trace([rq(k, 0.0, [words(k, 6)], 1) for k in "xyz"], block_size=4)
    lb = lower_bound(trace, COST, lim)
    assert lb.isolated_mean == pytest.approx(0.026, **APPROX)
    assert lb.srpt_mean == pytest.approx(0.052, **APPROX)
    assert lb.combined_mean == pytest.approx(0.052, **APPROX)
    assert lb.outside_srpt == 0
    assert lb.mean == pytest.approx(0.052, **APPROX)
    assert simulate(trace, "fcfs", COST, lim, isolated=False).summary.mean_latency == pytest.approx(0.052, **APPROX)
    assert clairvoyant(trace, COST, lim).mean == pytest.approx(0.052, **APPROX)


def test_the_combination_beats_both_relaxations():
    """max_num_seqs = 2. X: one 6-token row answering 10 tokens (alone: 0.026 + 9 x 0.022 = 0.224;
    SRPT work 0.024 + 10 samples x 0.02 / 2 = 0.124); Y1-Y3: one 6-token row answering 1 (alone
    0.026; work 0.006 + 0.01 = 0.016). All at t=0. SRPT: 0.016, 0.032, 0.048, X 0.172: mean 0.067;
    floors: mean 0.0755; X by its floor, the Ys by SRPT: (0.096 + 0.224) / 4 = 0.080.
    The best schedule found by hand: Y1+Y2 (0.032), Y3+X (0.064), 9 decodes: mean 0.0975."""
    lim = limits(seqs=2)
    trace = prepare_trace([rq("X", 0.0, [words("x", 6)], 10)] + [rq(f"Y{k}", 0.0, [words(f"y{k}", 6)], 1) for k in range(3)], block_size=4)
    lb = lower_bound(trace, COST, lim)
    assert lb.srpt_mean == pytest.approx(0.268 / 4, **APPROX)
    assert lb.isolated_mean == pytest.approx(0.302 / 4, **APPROX)
    assert lb.combined_mean == pytest.approx(0.080, **APPROX)
    assert lb.outside_srpt == 1
    assert lb.mean == pytest.approx(0.080, **APPROX)
    assert clairvoyant(trace, COST, lim).mean == pytest.approx(0.0975, **APPROX)


def test_a_block_two_rows_share_is_paid_once():
    """Two rows "s0..s3 x0 x1" and "s0..s3 y0 y1": the shared first block is computed once, so
    the relQuery needs 8 prompt tokens in one step: 0.008 + 0.02 = 0.028, what FCFS takes."""
    lim = limits()
    trace = prepare_trace([rq("S", 0.0, [words("s", 4) + " x0 x1", words("s", 4) + " y0 y1"], 1)], block_size=4)
    lb = lower_bound(trace, COST, lim)
    (f,) = lb.relqueries
    assert f.tokens == 8
    assert f.min_latency == pytest.approx(0.028, **APPROX)
    assert simulate(trace, "fcfs", COST, lim, isolated=False).summary.mean_latency == pytest.approx(0.028, **APPROX)


def test_recomputing_after_a_preemption_can_be_the_cheaper_source_of_a_token():
    """A 4-token prompt (one full block, no tail) answering 2: the second token could come from
    a preemption and a prefill of the 1 generated token (0.001 + 0.02) instead of a decode
    (0.002 + 0.02); the bound takes the cheaper: 0.024 + 0.021."""
    trace = prepare_trace([rq("P", 0.0, [words("p", 4)], 2)], block_size=4)
    (f,) = lower_bound(trace, COST, limits()).relqueries
    assert f.min_latency == pytest.approx(0.045, **APPROX)


@pytest.mark.parametrize("preset", ["smollm2-135m-cpu", "opt-13b-a100"])
def test_no_policy_beats_the_bound_on_held_out_traces(preset):
    """Traces used to tune nothing (seeds of no benchmark), answers of random length: every
    policy's mean is at least the bound's, every relQuery at least its own floor, and the
    clairvoyant schedule is no better than the bound either."""
    cost = PRESETS[preset]
    lim = default_limits(kv_capacity_tokens=16_384, max_num_batched_tokens=512, max_num_seqs=64)
    rng = random.Random(97)
    raw = generate_trace(["rotten_tomatoes", "beer_reviews"], 14, 2.0 if preset.startswith("opt") else 0.2, rows=(1, 12), seed=97)
    lengths = {q.id: [rng.randint(1, q.max_tokens) for _ in q.rows] for q in raw}
    trace = prepare_trace(raw, block_size=lim.block_size, output_lengths=lengths)
    limit = the_limit(trace, cost, lim)
    assert limit.bound.mean > 0
    assert limit.clairvoyant is not None and limit.clairvoyant.mean >= limit.bound.mean
    floors = {f.id: f.min_latency for f in limit.bound.relqueries}
    for name in POLICY_NAMES:
        res = simulate(trace, name, cost, lim, isolated=False)
        assert res.summary.mean_latency >= limit.bound.mean, name
        for t in res.relqueries:
            assert t.latency >= floors[t.id] - 1e-12, (name, t.id)
    for rid, lat in limit.clairvoyant.latencies.items():
        assert lat >= floors[rid] - 1e-12


def test_table_reports_each_policys_ratio_to_both_references():
    lim = limits()
    trace = prepare_trace([rq("A", 0.0, [words("a", 6)], 3), rq("B", 0.0, [words("b", 6), words("c", 6)], 2)], block_size=4)
    limit = the_limit(trace, COST, lim)
    res = {"fcfs": simulate(trace, "fcfs", COST, lim, isolated=False)}
    table = markdown_table(res, limit=limit)
    # fcfs prefills all three rows in one step, as the optimum does
    assert res["fcfs"].summary.mean_latency == pytest.approx(0.075, **APPROX)
    row = [line for line in table.splitlines() if line.startswith("| fcfs ")][0]
    assert row.endswith("| 1.19x | 1.00x |")  # 0.075 / 0.063 and 0.075 / 0.075
    assert "bound 0.063 s" in table and "clairvoyant schedule 0.075 s (prefill-first;" in table
