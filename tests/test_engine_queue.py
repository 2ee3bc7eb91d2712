"""``Engine.queued()``: the engine's work in flight as the estimates replay it (issue 47), against
the scheduler's own view. vLLM schedules a request under its submitted id plus a random suffix; a
queue that missed it showed every unfinished request as waiting from scratch, so an estimate under
load replayed the running requests' prompts and answers again."""

from __future__ import annotations

import pytest
from waits import wait_until

from relserve import RelQuery
from relserve.engine.engine import _submitted_id


def test_the_id_vllm_schedules_maps_back_to_the_submitted_one():
    submitted = {"4f2a-0", "4f2a-1", "beef0123-2-3"}
    assert _submitted_id("4f2a-0-a947d309", submitted) == "4f2a-0"
    assert _submitted_id("beef0123-2-3-0b1c2d3e", submitted) == "beef0123-2-3"
    # vLLM run with VLLM_DISABLE_REQUEST_ID_RANDOMIZATION keeps the id as submitted
    assert _submitted_id("beef0123-2-3", submitted) == "beef0123-2-3"


@pytest.mark.engine
def test_a_running_request_shows_what_it_computed_and_answered(engine):
    # 1,500 tokens a row, cancelled once seen: the rows run for minutes, so the poll below sees
    # them running however fast the machine decodes (48 tokens could end between two looks)
    rq = RelQuery("Count slowly from one to one hundred, item {i}.", [{"i": i} for i in range(4)],
                  max_tokens=1500, ignore_eos=True)
    handle = engine.submit(rq)
    try:
        def answering():
            mine = [q for q in engine.queued() if q.rel_id == handle.rel_id]
            return [r for q in mine for r in q.requests if r.running and r.generated >= 2]

        running = wait_until(answering, "the engine's queue to show a running request that answered 2 tokens")
        for r in running:
            assert r.computed >= len(r.prompt_ids), (r.computed, len(r.prompt_ids))
            assert 2 <= r.generated <= 1500
    finally:
        handle.cancel()
    assert engine.wait_idle(60), "the engine still busy 60 s after the relQuery was cancelled"
    assert [q for q in engine.queued() if q.rel_id == handle.rel_id and q.requests] == []
