"""Riders (``PolicySettings.fill_one_token``, policy/aba.py ``ride_along``): a prefill step takes,
past the head relQuery, the waiting relQueries that answer in that step and cost at most its fixed
cost. Expectations worked out by hand with tests/test_policy.py's cost model: a prefill step costs
0.001 s per uncached token plus 0.01 s, so a rider holds at most 10 uncached tokens."""

from __future__ import annotations

from dataclasses import replace

from test_policy import BIG, COST, reqs, running, view

from relserve.policy import PolicySettings, StepKind, make_policy

OFF = PolicySettings(starvation_threshold=None, fill_one_token=False)
ON = PolicySettings(starvation_threshold=None)


def prioritised(rs, priority: int):
    for r in rs:
        r.priority = priority
    return rs


def queue():
    """The head H (ranked first by its priority class), then one-token relQueries that fit
    (S1: 8 tokens; S3: two rows of 5), one that decodes (D) and one that costs too much (S2)."""
    return (prioritised(reqs("H", 2, prompt=100, max_tokens=10), -1) + reqs("S1", 1, prompt=8, max_tokens=1, arrival=0.1)
            + reqs("D", 1, prompt=8, max_tokens=5, arrival=0.2) + reqs("S2", 1, prompt=30, max_tokens=1, arrival=0.3)
            + reqs("S3", 2, prompt=5, max_tokens=1, arrival=0.4))


def admitted(settings: PolicySettings, **kw) -> tuple[StepKind, list[str]]:
    plan = make_policy("relserve", COST, settings).schedule(view(**kw))
    return plan.kind, [r.req_id for r in plan.admit]


def test_one_token_relqueries_that_cost_at_most_the_fixed_cost_ride_in_the_heads_prefill_step():
    assert admitted(ON, waiting=queue()) == (StepKind.PREFILL, ["H0", "H1", "S10", "S30", "S31"])


def test_without_the_setting_the_step_holds_the_head_alone():
    assert admitted(OFF, waiting=queue()) == (StepKind.PREFILL, ["H0", "H1"])


def test_a_rider_that_does_not_fit_whole_in_the_steps_token_budget_waits():
    # 200 of the head, 8 of S1: S3's 10 more tokens would pass the budget of 210
    assert admitted(ON, waiting=queue(), limits=replace(BIG, max_num_batched_tokens=210)) == (
        StepKind.PREFILL, ["H0", "H1", "S10"])


def test_a_relquery_with_a_row_already_running_does_not_ride():
    # one of S3's rows runs (it decodes after all): its other row is not a whole relQuery done in the step
    rows = queue()
    s3_running = running([r for r in rows if r.rel_id == "S3"][:1], output_tokens=0)
    waiting = [r for r in rows if r not in s3_running]
    kind, ids = admitted(ON, waiting=waiting, running=s3_running)
    assert "S31" not in ids and "S10" in ids
