"""The policy's memory accounting in whole KV blocks, and the running order it gives vLLM (pure logic)."""

from __future__ import annotations

from relserve.policy import Limits, Req, StepView
from relserve.policy.batching import fill_prefill_batch, kv_headroom
from relserve.policy.preemption import preemption_order


def req(i: int, prompt: int, max_tokens: int, rel: str = "A", **kw) -> Req:
    return Req(f"{rel}#{i}", rel, 0.0, 8, prompt, max_tokens, **kw)


def view(waiting, running=(), free_blocks=4, watermark=0, cached=lambda r: 0) -> StepView:
    lim = Limits(4096, 256, kv_capacity_tokens=1024, kv_free_tokens=free_blocks * 16, block_size=16, watermark_blocks=watermark)
    return StepView(0.0, list(waiting), list(running), lim, cached)


def test_requests_take_whole_blocks():
    # 17 + 3 tokens: 2 blocks each. In tokens three would fit in 64 (60); in blocks two do.
    waiting = [req(i, 17, 3) for i in range(3)]
    batch, tokens = fill_prefill_batch(waiting, view(waiting))
    assert batch == waiting[:2] and tokens == 34


def test_the_watermark_stays_free_once_anything_runs():
    waiting = [req(i, 17, 3) for i in range(3)]
    # the first request of an idle engine is always admitted; the second would leave 0 < 1 free
    batch, _ = fill_prefill_batch(waiting, view(waiting, watermark=1))
    assert batch == waiting[:1]
    # beside a running request (which needs no new block), even the first keeps the watermark
    running = [req(9, 16, 16, "R", output_tokens=16, computed_tokens=32)]
    assert kv_headroom(view(waiting, running)) == 4
    assert fill_prefill_batch(waiting, view(waiting, running, watermark=3))[0] == []
    assert fill_prefill_batch(waiting, view(waiting, running, watermark=2))[0] == waiting[:1]


def test_running_requests_reserve_the_blocks_to_finish():
    # 20 computed tokens hold 2 blocks; 20 + 30 output tokens need 4: 2 more are reserved
    running = [req(0, 20, 30, "R", computed_tokens=20)]
    assert kv_headroom(view([], running, free_blocks=5)) == 3


def test_prefix_cached_blocks_are_not_allocated_again():
    waiting = [req(i, 40, 8) for i in range(3)]  # 48 tokens: 3 blocks, 2 of them cached
    batch, tokens = fill_prefill_batch(waiting, view(waiting, free_blocks=3, cached=lambda r: 32))
    assert batch == waiting and tokens == 24


def test_running_order_puts_the_relquery_ranked_last_at_the_end():
    a1, b1, a2, c1 = req(1, 8, 8, "A"), req(1, 8, 8, "B"), req(2, 8, 8, "A"), req(1, 8, 8, "C")
    handles = ["a1", "b1", "a2", "c1"]
    # B runs first; A before C; within A, admission order; a relQuery without priority goes last
    assert preemption_order(handles, [a1, b1, a2, c1], {"A": 2.0, "B": 1.0}) == ["b1", "a1", "a2", "c1"]
    # the user's priority class outranks the estimate
    c1.priority = -1
    assert preemption_order(handles, [a1, b1, a2, c1], {"A": 2.0, "B": 1.0, "C": 9.0})[0] == "c1"
