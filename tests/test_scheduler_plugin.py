"""The scheduler plug-in on vLLM's real Scheduler code, without a model (tests/sched_harness.py).

Each test forces one path a GPU deployment hits: a PREFILL batch that does not fit, the
watermark, vLLM's second waiting queue, async scheduling, and preemption. Where a test forces
the policy's answer it replaces ``_policy.schedule``: the policy's own logic is tested in
test_policy.py; here the question is what the plug-in and vLLM do with a given plan.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
from sched_harness import build_scheduler, finish_step, make_request
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.request import RequestStatus

from relserve.engine.scheduler import RelServeAsyncScheduler, RelServeScheduler
from relserve.policy import StepKind, StepPlan


def force(sched, plan_for):
    """Make the policy answer ``plan_for(view)`` every step."""
    policy = sched.relserve_policy

    def schedule(view):
        policy.steps += 1
        return plan_for(view)

    policy.schedule = schedule


def run_until_done(sched, max_steps: int = 500, check=None):
    """Schedule and feed back one step at a time until the scheduler holds no request."""
    for _ in range(max_steps):
        if not sched.has_requests():
            return
        out = sched.schedule()
        if check is not None:
            check(sched, out)
        finish_step(sched, out)
    raise AssertionError("requests did not finish")


# -- 1. one step, one call of the base scheduler ----------------------------------------------------


def test_blocked_prefill_step_keeps_finished_ids_and_decodes_next():
    sched = build_scheduler(RelServeScheduler, num_blocks=8)  # 7 usable blocks of 16 tokens
    a1, a2 = make_request(16, 2, "A", 2), make_request(16, 50, "A", 2)
    sched.add_request(a1)
    sched.add_request(a2)
    out = sched.schedule()  # the real policy: prefill both
    assert set(out.num_scheduled_tokens) == {a1.request_id, a2.request_id}
    finish_step(sched, out)
    finish_step(sched, sched.schedule())  # decode: a1 reaches max_tokens=2 and finishes
    assert a1.status == RequestStatus.FINISHED_LENGTH_CAPPED
    # b needs 7 blocks for its prompt, 4 are free: a PREFILL of b cannot be admitted by vLLM.
    b = make_request(100, 5, "B")
    sched.add_request(b)
    force(sched, lambda view: StepPlan(StepKind.PREFILL, admit=[r for r in view.waiting]))
    step_before = sched.current_step
    out = sched.schedule()
    # The workers must hear that a1 finished, in the output they are given.
    assert out.finished_req_ids == {a1.request_id}
    assert out.total_num_scheduled_tokens == 0
    assert sched.current_step == step_before + 1  # the base class ran once
    finish_step(sched, out)
    out = sched.schedule()  # the policy still says PREFILL; the plug-in decodes instead
    assert out.num_scheduled_tokens == {a2.request_id: 1}
    assert sched.current_step == step_before + 2
    finish_step(sched, out)
    last = sched.relserve_rpc("stats", {"steps": True})["step_log"][-1]
    assert last["reason"] == "kv-blocked-decode" and last["relqueries"]["decoded"] == {"A": 1}
    assert b.status == RequestStatus.WAITING


# -- 2. memory in whole blocks, and the watermark -------------------------------------------------------


def test_prefill_beside_running_requests_keeps_vllms_watermark():
    sched = build_scheduler(RelServeScheduler, num_blocks=11, watermark=0.3)  # 10 usable, watermark 3
    assert sched.kv_cache_manager.watermark_blocks == 3
    a = make_request(32, 40, "A")  # 2 blocks
    sched.add_request(a)
    finish_step(sched, sched.schedule())
    free = sched.kv_cache_manager.block_pool.get_num_free_blocks()
    assert free == 8
    # b's prompt takes 6 blocks: 8 are free, but only 5 once the watermark is kept
    b = make_request(96, 1, "B")
    sched.add_request(b)
    force(sched, lambda view: StepPlan(StepKind.PREFILL, admit=list(view.waiting)))
    out = sched.schedule()
    assert out.num_scheduled_tokens == {}
    assert sched.kv_cache_manager.block_pool.get_num_free_blocks() == 8


def test_real_policy_plans_only_batches_vllm_admits():
    """Short answers (shorter than a block) and a watermark: every planned batch fits."""
    sched = build_scheduler(RelServeScheduler, num_blocks=17, watermark=0.125, max_num_seqs=8)  # watermark 2
    reqs = [make_request(24, 5, "Q1", 6) for _ in range(6)] + [make_request(40, 10, "Q2", 6) for _ in range(6)]
    for r in reqs:
        sched.add_request(r)
    run_until_done(sched)
    log = sched.relserve_rpc("stats", {"steps": True})["step_log"]
    assert [s for s in log if s["reason"] == "kv-blocked-decode"] == []
    assert all(r.status == RequestStatus.FINISHED_LENGTH_CAPPED for r in reqs)
    assert [len(r.output_token_ids) for r in reqs] == [5] * 6 + [10] * 6
    # the policy's batches are what vLLM admitted
    for s in log:
        if s["kind"] == "prefill":
            assert s["prefill_reqs"] == s["planned_admit"], s


# -- 3. vLLM's second waiting queue ---------------------------------------------------------------------


def test_kv_holding_queue_is_seen_by_the_policy_and_hidden_in_decode_steps():
    sched = build_scheduler(RelServeScheduler)
    a = make_request(16, 20, "A")
    sched.add_request(a)
    finish_step(sched, sched.schedule())
    # vLLM admits from kv_holding_waiting before waiting; a request parked there must wait for
    # the policy like any other.
    h = make_request(16, 3, "H")
    sched.requests[h.request_id] = h
    sched.kv_holding_waiting.add_request(h)
    seen = []
    force(sched, lambda view: seen.append([r.req_id for r in view.waiting]) or StepPlan(StepKind.DECODE))
    out = sched.schedule()
    assert seen == [[h.request_id]]
    assert out.num_scheduled_tokens == {a.request_id: 1}
    assert list(sched.kv_holding_waiting) + list(sched.waiting) == [h]
    finish_step(sched, out)
    force(sched, lambda view: StepPlan(StepKind.PREFILL, admit=list(view.waiting)))
    out = sched.schedule()
    assert out.num_scheduled_tokens == {h.request_id: 16}


def test_kv_holding_queue_stays_empty_with_the_engines_configuration():
    """No KV connector, no streaming input: vLLM puts even preempted requests back in ``waiting``."""
    sched = build_scheduler(RelServeScheduler, num_blocks=6)
    reqs = [make_request(16, 30, f"R{i}") for i in range(4)]
    for r in reqs:
        sched.add_request(r)
    # vLLM's own continuous batching over-admits and has to preempt (the policy would not)
    force(sched, lambda view: StepPlan(StepKind.MIXED, admit=list(view.waiting)))
    run_until_done(sched, check=lambda s, out: not s.kv_holding_waiting or pytest.fail("kv_holding_waiting used"))
    assert sched.relserve_rpc("stats", {})["preemptions"] > 0  # the path that could have used it ran
    assert all(len(r.output_token_ids) == 30 for r in reqs)


# -- 4. async scheduling ---------------------------------------------------------------------------------


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_the_base_class_follows_the_async_scheduling_config(async_scheduling):
    sched = build_scheduler(RelServeScheduler, async_scheduling=async_scheduling)
    assert isinstance(sched, RelServeScheduler)
    assert isinstance(sched, AsyncScheduler) is async_scheduling
    assert (type(sched) is RelServeAsyncScheduler) is async_scheduling


def test_async_scheduler_runs_two_steps_in_flight():
    """As vLLM's batch queue does on GPUs: step n+1 is scheduled before step n's output arrives."""
    sched = build_scheduler(RelServeScheduler, async_scheduling=True, num_blocks=32)
    reqs = [make_request(20, 6, "A", 3) for _ in range(3)] + [make_request(30, 4, "B", 2) for _ in range(2)]
    for r in reqs:
        sched.add_request(r)
    in_flight = []
    scheduled = 0
    for _ in range(200):
        if not sched.has_requests() and not in_flight:
            break
        out = sched.schedule()
        scheduled += out.total_num_scheduled_tokens > 0
        in_flight.append(out)
        if len(in_flight) == 2 or out.total_num_scheduled_tokens == 0:
            finish_step(sched, in_flight.pop(0))
    assert [len(r.output_token_ids) for r in reqs] == [6, 6, 6, 4, 4]
    # every scheduled step's log entry was matched with its own output
    stats = sched.relserve_rpc("stats", {"steps": True})
    log = stats["step_log"]
    # every scheduled step was logged once its output came back (none left pending), in order
    assert [s["seq"] for s in log] == list(range(1, scheduled + 1)) and stats["last_step"] == scheduled
    assert sum(s["prefill_reqs"] for s in log) == 5
    assert all("duration" in s for s in log)


# -- 5. preemption follows the policy ------------------------------------------------------------------


@pytest.mark.parametrize("ranks,victim", [({"A": 5.0, "B": 1.0}, "A"), ({"A": 1.0, "B": 5.0}, "B")])
def test_vllm_preempts_a_request_of_the_relquery_ranked_last(ranks, victim):
    sched = build_scheduler(RelServeScheduler, num_blocks=3)  # 2 usable blocks of 16 tokens
    a, b = make_request(16, 10, "A"), make_request(16, 10, "B")
    sched.add_request(a)
    sched.add_request(b)
    force(sched, lambda view: StepPlan(StepKind.PREFILL, admit=list(view.waiting)))
    out = sched.schedule()
    assert list(out.num_scheduled_tokens) == [a.request_id, b.request_id]  # b admitted last
    finish_step(sched, out)
    # Both hold one full block; decoding needs a second block each and there is none.
    force(sched, lambda view: StepPlan(StepKind.DECODE, priorities=ranks))
    out = sched.schedule()
    loser = a if victim == "A" else b
    winner = b if victim == "A" else a
    assert out.preempted_req_ids == {loser.request_id}
    assert out.num_scheduled_tokens == {winner.request_id: 1}
    assert loser.status == RequestStatus.PREEMPTED
    assert list(sched.waiting) == [loser]


@pytest.mark.engine
def test_the_cpu_engine_runs_the_plain_variant(engine):
    """vLLM-CPU turns async scheduling off; the engine core then runs the plain plug-in."""
    stats = engine.scheduler_stats()
    assert stats["scheduler"] == "RelServeScheduler"
    assert stats["async_scheduling"] is False


@pytest.mark.parametrize("fill_one_token", [True, False])
def test_one_token_relqueries_ride_in_one_prefill_step_through_vllms_scheduler(fill_one_token):
    """Three one-row relQueries that answer in one token (label scoring) arrive together: with
    riders (the default) vLLM schedules all three in the first step; without, the head alone."""
    sched = build_scheduler(RelServeScheduler)
    sched.relserve_rpc("set_policy", {"policy": "relserve", "settings": {"fill_one_token": fill_one_token}})
    reqs = [make_request(20, 1, rel, arrival=k * 0.01) for k, rel in enumerate("ABC")]
    for r in reqs:
        sched.add_request(r)
    out = sched.schedule()
    first = [reqs[0].request_id] if not fill_one_token else [r.request_id for r in reqs]
    assert sorted(out.num_scheduled_tokens) == sorted(first)
    assert all(out.num_scheduled_tokens[i] == 20 for i in first)
