"""A tenant's cap on the running batch while another tenant has work (policy/tenant_cap.py).

Plain Python: the policy's decision each step, with exact expectations. Cost model (seconds):
L_decode(d) = 0.01 * req + 0.09, so a decode step of 11 requests costs 0.2 = 2 x a step of one.
"""

from __future__ import annotations

import pytest

from relserve.policy import CostModel, Limits, PolicySettings, Req, StepKind, StepView, make_policy
from relserve.policy.tenant_cap import auto_cap

COST = CostModel(alpha_p=0.001, beta_p=0.01, alpha_d=0.01, beta_d=0.09)
LIMITS = Limits(max_num_batched_tokens=4096, max_num_seqs=256, kv_capacity_tokens=100_000, kv_free_tokens=100_000)


def reqs(tenant: str, rel_id: str, n: int, *, cap: int | None = None, arrival: float = 0.0) -> list[Req]:
    return [
        Req(f"{rel_id}-{i}", rel_id, arrival, n, 20, 8, tenant=tenant, max_running_shared=cap)
        for i in range(n)
    ]


def decoding(rs: list[Req]) -> list[Req]:
    """Running requests, the i-th having produced i + 1 tokens (so the last ones are the least
    advanced)."""
    for i, r in enumerate(rs):
        r.computed_tokens = r.prompt_tokens
        r.output_tokens = i + 1
    return rs


def view(waiting=(), running=(), now: float = 10.0) -> StepView:
    return StepView(now, list(waiting), list(running), LIMITS)


def policy(name: str = "relserve", **settings):
    return make_policy(name, COST, PolicySettings(**settings))


def test_auto_cap_is_the_batch_whose_decode_step_costs_the_given_slowdown():
    # 0.01 * (n + 1) + 0.09 <= 2 * 0.1  ->  n = 10
    assert auto_cap(COST, 2.0, 256) == 10
    assert COST.decode(11) == pytest.approx(2 * COST.decode(1))
    # 3x: 0.01 * (n + 1) + 0.09 <= 0.3  ->  n = 20; never above max_num_seqs, never below 1
    assert auto_cap(COST, 3.0, 256) == 20
    assert auto_cap(COST, 3.0, 16) == 16
    assert auto_cap(CostModel(alpha_d=1.0, beta_d=0.0), 1.5, 256) == 1


def test_flood_over_its_cap_holds_its_least_advanced_rows_and_admits_none_while_another_tenant_waits():
    flood_run = decoding(reqs("flood", "F", 10, cap=4))
    flood_wait = reqs("flood", "G", 5, cap=4)
    small = reqs("small", "S", 1)
    plan = policy().schedule(view(flood_wait + small, flood_run))
    # the small tenant's row is admitted, none of the flood's (it is at its cap already)
    assert plan.kind is StepKind.PREFILL
    assert [r.req_id for r in plan.admit] == ["S-0"]
    # the four most advanced flood rows (most tokens produced) keep running; six sit out
    assert sorted(r.req_id for r in plan.hold) == sorted(f"F-{i}" for i in range(6))


def test_decode_steps_keep_holding_while_the_small_row_decodes():
    flood_run = decoding(reqs("flood", "F", 10, cap=4))
    small = decoding(reqs("small", "S", 1))
    plan = policy().schedule(view(reqs("flood", "G", 5, cap=4), flood_run + small))
    assert plan.kind is StepKind.DECODE
    assert sorted(r.req_id for r in plan.hold) == sorted(f"F-{i}" for i in range(6))


def test_a_tenant_alone_is_never_capped():
    flood_run = decoding(reqs("flood", "F", 10, cap=4))
    plan = policy().schedule(view(reqs("flood", "G", 5, cap=4), flood_run))
    assert plan.hold == []
    # alone it may prefill beside its running rows (the arranger decides; the cap does not cut it)
    p = policy().schedule(view(reqs("flood", "G", 5, cap=4), []))
    assert p.kind is StepKind.PREFILL and len(p.admit) == 5 and p.hold == []


def test_admission_is_cut_to_the_room_under_the_cap():
    flood_run = decoding(reqs("flood", "F", 2, cap=4))
    small = decoding(reqs("small", "S", 1))
    # nothing of the small tenant waits, so the flood's prefill is the candidate; 2 rows of room
    plan = policy("sp").schedule(view(reqs("flood", "G", 5, cap=4), flood_run + small))
    assert plan.kind is StepKind.PREFILL
    assert [r.req_id for r in plan.admit] == ["G-0", "G-1"]
    assert plan.hold == []


def test_default_cap_comes_from_the_cost_model_and_none_turns_it_off():
    flood_run = decoding(reqs("flood", "F", 14))  # no cap of its own: auto_cap = 10
    small = reqs("small", "S", 1)
    plan = policy().schedule(view(small, flood_run))
    assert sorted(r.req_id for r in plan.hold) == sorted(f"F-{i}" for i in range(4))
    plan = policy(tenant_step_slowdown=None).schedule(view(small, flood_run))
    assert plan.hold == []


def test_the_cap_lingers_after_the_other_tenant_leaves_then_lifts():
    p = policy(tenant_linger_s=1.0)
    small = decoding(reqs("small", "S", 1))
    flood = decoding(reqs("flood", "F", 10, cap=4))
    assert len(p.schedule(view([], flood + small, now=10.0)).hold) == 6
    # the small tenant's row has finished: within the linger the flood stays capped ...
    assert len(p.schedule(view([], flood, now=10.9)).hold) == 6
    # ... and after it the flood has the whole engine again
    assert p.schedule(view([], flood, now=11.1)).hold == []


def test_a_prefill_left_empty_by_the_cap_decodes_instead():
    # the flood's rows are ranked first (the small tenant's only row is running), but the flood
    # is at its cap: the plan decodes rather than prefilling nothing
    flood_run = decoding(reqs("flood", "F", 4, cap=4))
    small = decoding(reqs("small", "S", 1))
    plan = policy("fcfs").schedule(view(reqs("flood", "G", 3, cap=4), flood_run + small))
    assert plan.kind is StepKind.DECODE
    assert plan.admit == [] and plan.hold == []
    assert plan.reason == "prefill-first-tenant-cap"


def test_stock_vllm_runs_without_the_plugin_so_without_caps():
    flood_run = decoding(reqs("flood", "F", 10, cap=4))
    plan = policy("vllm").schedule(view(reqs("small", "S", 1), flood_run))
    assert plan.hold == []


def test_the_tenants_file_sets_a_tenants_cap_and_refuses_a_cap_below_one():
    from relserve.errors import ConfigError
    from relserve.server.tenants import Tenants

    t = Tenants.from_dict({
        "limits": {"max_running_shared": 8},
        "tenants": {"flood": {"key": "flood-secret", "max_running_shared": 2}, "small": {"key": "small-secret"}},
    })
    caps = {x.name: x.limits.max_running_shared for x in t.by_hash.values()}
    assert caps == {"flood": 2, "small": 8}
    assert Tenants.from_dict({"tenants": {"a": {"key": "a-secret-key"}}}).by_hash.popitem()[1].limits.max_running_shared is None
    with pytest.raises(ConfigError, match="max_running_shared"):
        Tenants.from_dict({"tenants": {"a": {"key": "a-secret-key", "max_running_shared": 0}}})


def test_a_capped_tenant_prefills_at_most_the_budgets_tokens_beyond_its_first_row():
    from relserve.policy.tenant_cap import prefill_budget

    # prefill(u) = 0.001 u + 0.01 <= 2 x decode(1) = 0.2  ->  u = 190 (int of 189.99...)
    assert prefill_budget(COST, 2.0) in (189, 190)
    budget = prefill_budget(COST, 2.0)
    flood = reqs("flood", "G", 20, cap=100)  # 20-token prompts, nothing cached
    small = decoding(reqs("small", "S", 1))
    plan = policy("sp").schedule(view(flood, small))
    assert plan.kind is StepKind.PREFILL
    assert len(plan.admit) == budget // 20
    # a prompt bigger than the budget still goes, alone
    big = [Req("B-0", "B", 0.0, 2, 500, 8, tenant="flood"), Req("B-1", "B", 0.0, 2, 500, 8, tenant="flood")]
    plan = policy("sp").schedule(view(big, small))
    assert [r.req_id for r in plan.admit] == ["B-0"]
