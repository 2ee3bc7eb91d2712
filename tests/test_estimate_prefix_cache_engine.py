"""The estimates and the engine's prefix cache (issue 47): the engine says, for a call's prompts,
how many leading tokens its prefix cache holds now (vLLM's own lookup, exact to the token), and
an estimate of prompts the engine has just run replays them with those blocks cached."""

from __future__ import annotations

import random
import uuid

import pytest

from relserve.estimate.call_work import ROWS
from relserve.estimate.estimate import estimate_call, work_of
from relserve.functions import make_call
from relserve.planner.plan_and_run import run_rows
from relserve.prompt_rendering import render

pytestmark = [pytest.mark.engine, pytest.mark.usefixtures("engine_home")]

STORY = ("was reviewed by a reader who wrote at length about the plot, the pacing of the middle chapters, "
         "the careful dialogue and the ending, which some found abrupt and others found exactly right. The same "
         "reader went on to compare it with the author's earlier books, and closed with a recommendation.")
#: the call's template: a head every row shares (more than a block with the chat template's own)
TEMPLATE = ("Read the following book review carefully, then say in plain words what the reviewer thought of "
            "the book as a whole. Review: {review} Summarize that in three words.")
#: distinct first words: the rows' prompts part where their review starts
WORDS = ["Apples", "Bridges", "Candles", "Deserts", "Engines", "Forests", "Gardens", "Harbors", "Islands", "Jungles",
         "Kettles", "Lanterns", "Meadows", "Needles", "Oceans", "Pebbles", "Quilts", "Rivers", "Saddles", "Tunnels"]


def rows_of(words: list[str]) -> list[tuple[str]]:
    nonce = uuid.uuid4().hex[:12]  # never run before in this engine
    return [(f"{w} ({nonce}) {STORY} {STORY}",) for w in words]


def prompt_ids(engine, call, rows) -> list[list[int]]:
    work = work_of(call, [render(call, r) for r in rows], engine=engine, model_id=engine.model_id)
    return next(w for w in work.relqueries if w.kind == ROWS).prompt_ids


def run_cached_tokens(engine, call, rows) -> list[int]:
    """Run ``call`` over ``rows``; per row, the prompt tokens vLLM found in its prefix cache."""
    sent = []

    class Keeping:
        def submit(self, rq, *args, **kwargs):
            handle = engine.submit(rq, *args, **kwargs)
            sent.append((rq, handle))
            return handle

        def __getattr__(self, name):
            return getattr(engine, name)

    run_rows(call, rows, engine=Keeping(), cache=False, progress=False)
    found = {p: row.cached_tokens for rq, h in sent for p, row in zip(rq.prompts, h.result(120).rows)}
    return [found[render(call, r)] for r in rows]


def test_the_engine_says_how_much_of_each_prompt_its_prefix_cache_holds(engine):
    block = engine.block_size
    call = make_call("llm_map", TEMPLATE, max_tokens=2)
    # a first row puts every prefix the rows share (the template's head) in the cache
    run_cached_tokens(engine, call, rows_of(["Zebras"]))
    rows = rows_of(WORDS[:6])
    ids = prompt_ids(engine, call, rows)
    assert all(len(p) > 4 * block for p in ids)
    before = engine.cached_prefix_tokens(ids)
    # what vLLM itself found cached when it ran them: the shared head's whole blocks
    assert run_cached_tokens(engine, call, rows) == before
    assert all(0 < n < len(p) - block and n % block == 0 for n, p in zip(before, ids))
    # once run, every whole block of each prompt is cached, but for its last token (vLLM computes it
    # again for the logits), and a run again finds exactly that
    after = engine.cached_prefix_tokens(ids)
    assert after == [(len(p) - 1) // block * block for p in ids]
    assert run_cached_tokens(engine, call, rows) == after
    # another tenant's prefix-cache namespace (its salt) holds none of them
    assert engine.cached_prefix_tokens(ids, salt=uuid.uuid4().hex) == [0] * len(ids)
    # a prompt that shares its first three blocks with one run, then differs; and one never seen
    rng = random.Random(uuid.uuid4().int)
    never = [rng.randrange(1000, 40000) for _ in range(5 * block)]
    assert engine.cached_prefix_tokens([ids[0][: 3 * block] + never, never]) == [3 * block, 0]
    assert engine.cached_prefix_tokens([]) == []


def test_an_estimate_of_prompts_just_run_counts_them_cached(engine):
    block = engine.block_size
    call = make_call("llm_map", TEMPLATE, max_tokens=4)
    rows = rows_of(WORDS)
    prompts = [render(call, r) for r in rows]
    ids = prompt_ids(engine, call, rows)
    before = estimate_call(call, prompts, engine=engine, model_id=engine.model_id)
    run_rows(call, rows, engine=engine, cache=False, progress=False)
    after = estimate_call(call, prompts, engine=engine, model_id=engine.model_id)
    # the engine's prefix cache holds every whole block of each prompt (but for its last token) ...
    assert after.engine_cached_tokens == sum((len(p) - 1) // block * block for p in ids)
    assert "the engine's prefix cache holds now" in after.lines()[0]
    # ... so the replay computes at most one block of each prompt, where before it computed each
    # prompt's own part (everything after the head the prompts share)
    assert after.computed_prompt_tokens <= len(rows) * block < before.computed_prompt_tokens
    assert after.prompt_tokens == before.prompt_tokens
    assert after.idle_s < before.idle_s and after.now_s < before.now_s


def test_an_engine_that_does_not_answer_in_time_leaves_the_estimate_without_its_view(engine):
    # a job that wants an estimate starts on time behind a held loop (or a long step): the view
    # it could not get counts nothing cached and every unfinished request as waiting
    import time

    from relserve.engine.engine import VIEW_WAIT_S

    call = make_call("llm_map", TEMPLATE, max_tokens=4)
    rows = rows_of(WORDS[:3])
    run_rows(call, rows, engine=engine, cache=False, progress=False)
    ids = prompt_ids(engine, call, rows)
    assert all(n > 0 for n in engine.cached_prefix_tokens(ids))
    with engine.paused(30):
        t0 = time.monotonic()
        held = engine.cached_prefix_tokens(ids)
        waited = time.monotonic() - t0
    assert held == [0, 0, 0]
    # it waited its limit for the view, then gave up while the loop was still held (the hold ends
    # when the block does, or after its own 30 s): it did not wait for the engine
    assert VIEW_WAIT_S <= waited < 30
    assert all(n > 0 for n in engine.cached_prefix_tokens(ids))  # the engine answers again once free
