"""The scheduling policies as plain Python, with expectations worked out by hand from the paper.

Cost model used throughout (seconds): L_prefill(p) = 0.001 * utok + 0.01,
L_decode(d) = 0.002 * req + 0.02.
"""

from __future__ import annotations

import pytest

from relserve.policy import CostModel, Limits, PolicySettings, Req, StepKind, StepView, make_policy
from relserve.policy.aba import transitional_delta
from relserve.policy.decompose import batch_decompose
from relserve.policy.relqueries import RelQueryTracker

COST = CostModel(alpha_p=0.001, beta_p=0.01, alpha_d=0.002, beta_d=0.02)
BIG = Limits(max_num_batched_tokens=4096, max_num_seqs=256, kv_capacity_tokens=100_000, kv_free_tokens=100_000)


def reqs(rel_id: str, n: int, prompt: int = 100, max_tokens: int = 10, arrival: float = 0.0, start: int = 0) -> list[Req]:
    return [Req(f"{rel_id}{i}", rel_id, arrival, n, prompt, max_tokens) for i in range(start, start + n)]


def view(waiting=(), running=(), now=1.0, limits=BIG, cached=lambda r: 0) -> StepView:
    return StepView(now, list(waiting), list(running), limits, cached)


def running(rs: list[Req], output_tokens: int = 1) -> list[Req]:
    for r in rs:
        r.output_tokens = output_tokens
        r.computed_tokens = r.prompt_tokens
    return rs


# ----------------------------------------------------------------- Algorithm 1 and PEM


def test_batch_decomposition_by_hand():
    # cap 250 tokens, prefill batches of at most 150 tokens, 4 requests of 100 uncached tokens.
    # r1: p=[r1], accum 100. r2: fits the cap (200); p would hold 200 > 150 -> P=[100], p=[r2].
    # r3: 100 + 200 > cap -> P=[100,100], decode d={r1,r2} to completion (OL=3 steps), reset.
    # r4: p=[r3] would hold 200 > 150 -> P gets r3's batch, p=[r4]. End: P gets r4, D 3 x {r3,r4}.
    dec = batch_decompose([100, 100, 100, 100], 3, cap=250, max_num_seqs=10, max_num_batched_tokens=150)
    assert dec.prefill_batches == [100, 100, 100, 100]
    assert dec.decode_batches == [2, 2, 2, 2, 2, 2]
    # PEM (Eq. 10): 4 x (0.1 + 0.01) + 6 x (0.004 + 0.02)
    assert dec.duration(COST) == pytest.approx(4 * 0.11 + 6 * 0.024)


def test_accum_restarts_after_decode_to_completion():
    # With accum reset (MISSION.md erratum): 3 waves of 2. Without it, every request after the
    # first wave would trigger its own wave of 1.
    dec = batch_decompose([100] * 6, 2, cap=200, max_num_seqs=10, max_num_batched_tokens=1000)
    assert dec.prefill_batches == [200, 200, 200]
    assert dec.decode_batches == [2, 2, 2, 2, 2, 2]


def test_max_num_seqs_splits_waves():
    dec = batch_decompose([10] * 5, 1, cap=10_000, max_num_seqs=2, max_num_batched_tokens=1000)
    assert dec.prefill_batches == [20, 20, 10]
    assert dec.decode_batches == [2, 2, 1]


def test_pem_uses_sampled_miss_ratio():
    # 4 requests of 200 tokens, half of every prompt cached -> utok* = 100 each, one prefill
    # batch of 400 and 10 decode steps of 4: 0.41 + 10 x 0.028
    p = make_policy("relserve", COST, PolicySettings(starvation_threshold=None))
    plan = p.schedule(view(waiting=reqs("A", 4, prompt=200), cached=lambda r: 100))
    assert plan.priorities["A"] == pytest.approx(0.41 + 10 * 0.028)


def test_running_requests_leave_the_decomposition():
    p = make_policy("relserve", COST, PolicySettings(starvation_threshold=None))
    a = reqs("A", 4)
    plan = p.schedule(view(waiting=a[2:], running=running(a[:2])))
    # Only the 2 waiting requests count: 0.21 + 10 x 0.024
    assert plan.priorities["A"] == pytest.approx(0.21 + 10 * 0.024)
    # The setting that counts remaining decode steps adds 9 steps of a 2-request batch.
    p2 = make_policy("relserve", COST, PolicySettings(starvation_threshold=None, count_running_decode=True))
    plan2 = p2.schedule(view(waiting=a[2:], running=a[:2]))
    assert plan2.priorities["A"] == pytest.approx(0.21 + 10 * 0.024 + 9 * 0.024)


# ----------------------------------------------------------------- reuse and starvation


def test_priority_is_reused_while_the_relquery_only_waits():
    p = make_policy("relserve", COST, PolicySettings(starvation_threshold=None))
    a, b = reqs("A", 2), reqs("B", 3, arrival=0.5)
    # B never reaches the running queue here, so its priority is estimated once and reused.
    p.schedule(view(waiting=a + b))
    assert p.dpu.num_estimates == 2 and p.dpu.num_reused == 0
    p.schedule(view(waiting=b, running=running(a)))
    assert p.dpu.num_estimates == 3 and p.dpu.num_reused == 1  # A re-estimated (it runs), B reused
    p.schedule(view(waiting=b[1:], running=running(a + b[:1])))
    assert p.dpu.num_estimates == 5  # B now has a running request: re-estimated


def test_starvation_sets_priority_zero():
    # B: 10 requests waiting 25 s -> unit waiting time 2.5 s > threshold 2 -> priority 0,
    # so it goes before A (priority 0.21 + 10 x 0.024 > 0).
    p = make_policy("relserve", COST, PolicySettings(starvation_threshold=2.0))
    a = reqs("A", 2, arrival=22.0)  # unit waiting time 1.5 s
    b = reqs("B", 10, arrival=0.0)
    plan = p.schedule(view(waiting=b + a, now=25.0))
    assert plan.priorities["B"] == 0.0
    assert plan.priorities["A"] == pytest.approx(0.21 + 10 * 0.024)
    assert [r.rel_id for r in plan.admit] == ["B"] * 10
    # Below the threshold, the shorter relQuery (A) goes first.
    p = make_policy("relserve", COST, PolicySettings(starvation_threshold=3.0))
    plan = p.schedule(view(waiting=b + a, now=25.0))
    assert [r.rel_id for r in plan.admit] == ["A", "A"]


# ----------------------------------------------------------------- ABA: the three cases


def test_preemption_case_prefills_the_shorter_waiting_relquery():
    p = make_policy("relserve", COST, PolicySettings(starvation_threshold=None))
    big = reqs("BIG", 50)
    small = reqs("S", 2, arrival=0.1)
    plan = p.schedule(view(waiting=big[10:] + small, running=running(big[:10])))
    assert plan.reason == "preemption"
    assert plan.kind is StepKind.PREFILL and [r.rel_id for r in plan.admit] == ["S", "S"]


def test_internal_case_keeps_prefilling_the_top_relquery():
    p = make_policy("relserve", COST, PolicySettings(starvation_threshold=None))
    a = reqs("A", 50, prompt=100)
    limits = Limits(max_num_batched_tokens=1000, max_num_seqs=256, kv_capacity_tokens=100_000, kv_free_tokens=100_000)
    plan = p.schedule(view(waiting=a[10:], running=running(a[:10]), limits=limits))
    assert plan.reason == "internal"
    assert plan.kind is StepKind.PREFILL and len(plan.admit) == 10  # 1000-token budget


def test_equal_priorities_break_ties_by_arrival():
    # Two identical relQueries: same priority; the earlier one is the head.
    p = make_policy("relserve", COST, PolicySettings(starvation_threshold=None))
    later, earlier = reqs("L", 2, arrival=1.0), reqs("E", 2, arrival=0.5)
    plan = p.schedule(view(waiting=later + earlier, now=2.0))
    assert plan.priorities["L"] == plan.priorities["E"]
    assert [r.rel_id for r in plan.admit] == ["E", "E"]


def _transitional(ol_running: int, cand_n: int, cand_prompt: int, cand_ol: int, n_waiting_rel: int, policy="relserve"):
    """R1 has finished its prefills and decodes; R2 (and maybe others) wait."""
    p = make_policy(policy, COST, PolicySettings(starvation_threshold=None))
    r1 = running(reqs("R1", 4, max_tokens=ol_running + 1))
    waiting = reqs("R2", cand_n, prompt=cand_prompt, max_tokens=cand_ol, arrival=0.2)
    for k in range(1, n_waiting_rel):
        waiting += reqs(f"W{k}", 60, prompt=cand_prompt, max_tokens=cand_ol, arrival=0.3 + k)
    plan = p.schedule(view(waiting=waiting, running=r1))
    return p, plan


def test_transitional_delta_negative_prefills_first():
    # R1 has 5 decode steps left. Candidate R2: 2 requests x 100 tokens, OL 50, 3 relQueries waiting.
    # Delta+ = L_p(200) x |R+| + alpha_d x req(p) x min(5, 50) = 0.21 + 0.002 x 2 x 5 = 0.23
    # Delta- = |R-| x beta_d x min(50, 5) = 3 x 0.02 x 5 = 0.30  -> Delta = -0.07 < 0: prefill
    groups = RelQueryTracker().group(
        view(waiting=reqs("R2", 2, max_tokens=50, arrival=0.2), running=running(reqs("R1", 4, max_tokens=6)))
    )
    delta, plus, minus = transitional_delta(COST, groups["R2"], 200, 2, [groups["R1"]], 3)
    assert (plus, minus) == (pytest.approx(0.23), pytest.approx(0.30))
    assert delta == pytest.approx(-0.07)
    p, plan = _transitional(ol_running=5, cand_n=2, cand_prompt=100, cand_ol=50, n_waiting_rel=3)
    assert plan.reason == "transitional-prefill" and plan.kind is StepKind.PREFILL
    assert p.aba.last_delta[0] == pytest.approx(-0.07)


def test_transitional_delta_positive_decodes_first():
    # Same, but one waiting relQuery: Delta- = 1 x 0.02 x 5 = 0.10 < Delta+ = 0.23 -> decode
    p, plan = _transitional(ol_running=5, cand_n=2, cand_prompt=100, cand_ol=50, n_waiting_rel=1)
    assert p.aba.last_delta == (pytest.approx(0.13), pytest.approx(0.23), pytest.approx(0.10))
    assert plan.reason == "transitional-decode" and plan.kind is StepKind.DECODE


def test_ablations_fix_the_transitional_choice():
    _, plan = _transitional(ol_running=5, cand_n=2, cand_prompt=100, cand_ol=50, n_waiting_rel=1, policy="relserve-pp")
    assert plan.kind is StepKind.PREFILL and plan.reason == "transitional-prefill"
    _, plan = _transitional(ol_running=5, cand_n=2, cand_prompt=100, cand_ol=50, n_waiting_rel=3, policy="relserve-dp")
    assert plan.kind is StepKind.DECODE and plan.reason == "transitional-decode"


def test_empty_candidates():
    p = make_policy("relserve", COST)
    assert p.schedule(view()).kind is StepKind.IDLE
    assert p.schedule(view(running=running(reqs("A", 2)))).kind is StepKind.DECODE
    assert p.schedule(view(waiting=reqs("A", 2))).reason == "only-prefill"


def test_prefill_candidate_respects_seats_and_kv():
    p = make_policy("relserve", COST, PolicySettings(starvation_threshold=None))
    seats = Limits(max_num_batched_tokens=4096, max_num_seqs=12, kv_capacity_tokens=100_000, kv_free_tokens=100_000)
    # short prompts, so relserve's arranger picks the prefill: 12 seats, 10 taken, 2 admitted
    plan = p.schedule(view(waiting=reqs("A", 20, prompt=10), running=running(reqs("B", 10, max_tokens=3)), limits=seats))
    assert plan.kind is StepKind.PREFILL
    assert [r.req_id for r in plan.admit] == ["A0", "A1"]
    plan = make_policy("fcfs", COST).schedule(view(waiting=reqs("A", 20), running=running(reqs("B", 10, max_tokens=3)), limits=seats))
    assert plan.kind is StepKind.PREFILL
    assert [r.req_id for r in plan.admit] == ["A0", "A1"]
    # KV: 1000 free tokens, running B reserves 2 x 10 decode tokens; each A needs 100 + 10.
    kv = Limits(max_num_batched_tokens=4096, max_num_seqs=256, kv_capacity_tokens=5000, kv_free_tokens=1000)
    plan = make_policy("fcfs", COST).schedule(view(waiting=reqs("A", 20), running=running(reqs("B", 2, max_tokens=11)), limits=kv))
    assert len(plan.admit) == (1000 - 20) // 110


# ----------------------------------------------------------------- baselines


def test_fcfs_is_arrival_order_and_prefill_first():
    p = make_policy("fcfs", COST)
    a, b = reqs("A", 3, arrival=0.0), reqs("B", 2, arrival=0.1)
    plan = p.schedule(view(waiting=a + b, running=running(reqs("C", 2))))
    assert plan.kind is StepKind.PREFILL and [r.rel_id for r in plan.admit] == ["A"] * 3 + ["B"] * 2


def test_static_priority_is_fixed_at_arrival():
    p = make_policy("sp", COST)
    a, b = reqs("A", 10, arrival=0.0), reqs("B", 2, arrival=0.1)
    plan = p.schedule(view(waiting=a + b))
    # Eq. 6-7: per request 0.001 x 100 + (0.002 + 0.02) x 10 = 0.32; A: 10 requests, B: 2.
    assert plan.priorities == {"A": pytest.approx(3.2), "B": pytest.approx(0.64)}
    assert [r.rel_id for r in plan.admit][:2] == ["B", "B"]
    # It does not change as A makes progress.
    plan = p.schedule(view(waiting=a[5:], running=running(a[:5])))
    assert plan.priorities["A"] == pytest.approx(3.2)


def test_sarathi_mixes_with_its_chunk_budget():
    plan = make_policy("sarathi", COST, PolicySettings(sarathi_chunk_tokens=256)).schedule(view(waiting=reqs("A", 2)))
    assert plan.kind is StepKind.MIXED and plan.token_budget == 256
    assert make_policy("vllm", COST).schedule(view(waiting=reqs("A", 2))).token_budget is None


def test_policy_package_does_not_import_vllm():
    import subprocess
    import sys

    code = "import sys, relserve.policy, relserve.sim; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False"


# ----------------------------------------------------------------- user hints


def test_priority_class_goes_before_estimated_time():
    p = make_policy("relserve", COST, PolicySettings(starvation_threshold=None))
    big = reqs("BIG", 20)
    for r in big:
        r.priority = -1  # the user marked it urgent
    plan = p.schedule(view(waiting=reqs("S", 2) + big))
    assert {r.rel_id for r in plan.admit} == {"BIG"}


def test_deadline_at_risk_runs_first():
    # BIG's estimate: 20 x 100 tokens in one batch + 10 decode steps of 20 = 2.01 + 10 x 0.06 = 2.61 s.
    # With a deadline 2 s away it cannot wait behind S: priority 0.
    p = make_policy("relserve", COST, PolicySettings(starvation_threshold=None))
    big = reqs("BIG", 20)
    for r in big:
        r.deadline = 3.0
    plan = p.schedule(view(waiting=reqs("S", 2) + big, now=1.0))
    assert plan.priorities["BIG"] == 0.0 and {r.rel_id for r in plan.admit} == {"BIG"}
    # A deadline far away changes nothing.
    for r in big:
        r.deadline = 100.0
    plan = make_policy("relserve", COST, PolicySettings(starvation_threshold=None)).schedule(view(waiting=reqs("S", 2) + big, now=1.0))
    assert plan.priorities["BIG"] == pytest.approx(2.61) and {r.rel_id for r in plan.admit} == {"S"}


def test_least_squares_fit_and_outlier_rejection():
    from relserve.policy.cost_model import fit_line, fit_line_robust

    xs = [100, 200, 300, 400, 500, 600]
    ys = [0.002 * x + 0.05 for x in xs]
    fit = fit_line(xs, ys)
    assert (fit.slope, fit.intercept, fit.r_squared) == (pytest.approx(0.002), pytest.approx(0.05), pytest.approx(1.0))
    # one stalled step (20 s) tilts plain least squares but not the robust fit
    ys_bad = ys[:3] + [20.0] + ys[4:]
    assert fit_line(xs, ys_bad).slope != pytest.approx(0.002, rel=0.1)
    robust = fit_line_robust(xs, [y + 0.001 * (-1) ** i for i, y in enumerate(ys_bad)])
    assert robust.dropped == 1 and robust.slope == pytest.approx(0.002, rel=0.02)


def test_mixed_steps_use_the_fitted_plane_when_calibrated():
    from relserve.policy.cost_model import fit_plane

    us, vs = [100, 200, 300, 100, 400, 250], [4, 8, 2, 16, 10, 1]
    ys = [0.0006 * u + 0.0018 * n + 0.06 for u, n in zip(us, vs)]
    fit = fit_plane(us, vs, ys)
    assert (fit.a, fit.b, fit.c, fit.r_squared) == (pytest.approx(0.0006), pytest.approx(0.0018), pytest.approx(0.06), pytest.approx(1.0))
    plain = CostModel(alpha_p=0.001, beta_p=0.01, alpha_d=0.002, beta_d=0.02)
    assert plain.mixed(100, 5) == pytest.approx(0.1 + 0.01 + 0.02)  # the two lines, one fixed cost
    assert plain.mixed(100, 0) == plain.prefill(100) and plain.mixed(0, 5) == plain.decode(5)
    fitted = plain.model_copy(update={"alpha_mp": fit.a, "alpha_md": fit.b, "beta_m": fit.c})
    assert fitted.mixed(100, 5) == pytest.approx(0.06 + 0.009 + 0.06)
