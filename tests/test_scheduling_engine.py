"""The scheduling decisions that are on by default, on the real engine (the session's SmolLM2
engine): the small relQuery first, the user's priority class, a deadline at risk, starvation
prevention, a short relQuery preempting a long one's decode, and decode-hold.

Each is read from the order of the steps the engine reports (``Engine.scheduler_steps``: which
relQuery each step prefilled, decoded or held), never from time. The relQueries whose order is
decided must all be waiting when the engine chooses: a *blocker* (one relQuery holding every
sequence slot, decoding far longer than any test runs) keeps them waiting until the engine
reports them all queued, and is then cancelled, so the first choice is the policy's alone.
The pure-policy versions of these decisions are in test_policy*.py; the plug-in's handling of a
plan in test_scheduler_plugin.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from conftest import TEST_ENGINE_OPTIONS
from waits import result_within, wait_until

from relserve import RelQuery
from relserve.engine import SchedulerStep
from relserve.engine.scheduler_steps import first_step, last_step

pytestmark = pytest.mark.engine

SEQS = TEST_ENGINE_OPTIONS["max_num_seqs"]
#: the blocker's answer length: its rows cannot finish within any test (ignore_eos)
BLOCKER_TOKENS = 1200


def _rows(n: int, word: str) -> list[dict]:
    return [{"name": f"{word}{i}"} for i in range(n)]


#: a big relQuery takes every sequence slot (FCFS's prefill-first batching cannot put the small
#: one beside it in its first step); a small one two
def _rq(n: int, word: str, max_tokens: int = 8, **hints) -> RelQuery:
    # ignore_eos: every row runs its max_tokens, so the steps a relQuery needs do not depend on
    # what the model answers
    return RelQuery("Write a story about a dragon named {name}.", _rows(n, word), max_tokens=max_tokens, ignore_eos=True, **hints)


def _steps(engine, since: int) -> list[SchedulerStep]:
    return engine.scheduler_steps(since)


def _decoding(engine, since: int, rel_id: str, n: int) -> bool:
    return any(s.decoded.get(rel_id, 0) >= n for s in _steps(engine, since))


@contextlib.contextmanager
def held_engine(engine) -> Iterator[tuple[int, object]]:
    """Every sequence slot taken by a blocker that decodes (yields the step number before it and
    its handle); the block submits the relQueries to order and calls ``release``."""
    assert engine.wait_idle(120), "the engine did not become idle"
    mark = engine.scheduler_stats()["last_step"]
    rows = [{"name": f"Blocker{i}"} for i in range(SEQS)]
    blocker = engine.submit(RelQuery("Count from one to ten thousand, {name}.", rows, max_tokens=BLOCKER_TOKENS, ignore_eos=True))
    try:
        wait_until(lambda: _decoding(engine, mark, blocker.rel_id, SEQS), f"the blocker's {SEQS} rows decoding together")
        yield mark, blocker
    finally:
        blocker.cancel()
        result_within(blocker, 120, "the cancelled blocker to end")


def release(engine, mark: int, blocker, queued: dict[str, int]) -> None:
    """Cancel the blocker once a step shows every relQuery of ``queued`` (rel_id -> rows) waiting
    whole behind it; fail if the blocker's rows finished first (they cannot, by far)."""

    def all_waiting() -> bool:
        for s in _steps(engine, mark):
            if s.decoded.get(blocker.rel_id) == SEQS and all(s.waiting.get(r) == n for r, n in queued.items()):
                return True
        return False

    wait_until(all_waiting, f"a step with {sorted(queued)} all waiting behind the blocker")
    assert not blocker.done(), "the blocker finished before the relQueries to order were queued"
    blocker.cancel()


def _first_prefills(steps: list[SchedulerStep], *rel_ids: str) -> list[str]:
    """The relQueries in the order of their first prefill step; no two may start in one step
    (then the order would not be a choice)."""
    firsts = {r: first_step(steps, r) for r in rel_ids}
    assert all(v is not None for v in firsts.values()), f"never ran: {[r for r, v in firsts.items() if v is None]}"
    assert len(set(firsts.values())) == len(firsts), f"started in one step: {steps[:2]}"
    return sorted(rel_ids, key=lambda r: firsts[r])


def _race(engine, first: RelQuery, second: RelQuery) -> list[SchedulerStep]:
    """``first`` then ``second`` submitted behind the blocker, released together, run to the end."""
    with held_engine(engine) as (mark, blocker):
        h1 = engine.submit(first)
        h2 = engine.submit(second)
        release(engine, mark, blocker, {first.rel_id: len(first.rows), second.rel_id: len(second.rows)})
        for h in (h1, h2):
            res = result_within(h, 300, f"relQuery {h.rel_id}, released from behind the blocker, to finish")
            assert res.stats.num_errors == 0, [r.error for r in res.rows if r.error]
    return [s for s in _steps(engine, mark) if s.ran(first.rel_id) or s.ran(second.rel_id)]


#: starvation prevention off where it is not the decision under test: it ranks by seconds waited,
#: and the order must not depend on how fast the machine is
NO_STARVATION = {"starvation_threshold": None}


def test_a_small_relquery_goes_before_a_big_one_that_arrived_first_under_relserve_not_fcfs(engine, with_policy):
    with with_policy("relserve", **NO_STARVATION):
        big, small = _rq(SEQS, "Big"), _rq(2, "Small")
        steps = _race(engine, big, small)
    assert _first_prefills(steps, big.rel_id, small.rel_id) == [small.rel_id, big.rel_id]
    assert last_step(steps, small.rel_id) < last_step(steps, big.rel_id)
    assert not any(s.starved for s in steps)
    with with_policy("fcfs"):
        big, small = _rq(SEQS, "Big"), _rq(2, "Small")
        steps = _race(engine, big, small)
    # arrival order: the big one's rows are prefilled first
    assert _first_prefills(steps, big.rel_id, small.rel_id) == [big.rel_id, small.rel_id]


def test_the_users_priority_class_goes_before_the_smaller_relquery_that_arrived_first(engine):
    # (the test above: without a class the smaller one goes first even when it arrives second)
    small, urgent = _rq(2, "Small"), _rq(SEQS, "Urgent", priority=-1)
    steps = _race(engine, small, urgent)
    assert _first_prefills(steps, small.rel_id, urgent.rel_id) == [urgent.rel_id, small.rel_id]


def test_a_relquery_whose_deadline_is_at_risk_goes_first(engine, with_policy):
    # its deadline (10 ms after arrival) is sooner than its estimated remaining time from the
    # first step on: at risk whatever the machine's speed
    with with_policy("relserve", **NO_STARVATION):
        small, late = _rq(2, "Small"), _rq(SEQS, "Late", deadline_s=0.01)
        steps = _race(engine, small, late)
    assert _first_prefills(steps, small.rel_id, late.rel_id) == [late.rel_id, small.rel_id]
    admitting = next(s for s in steps if s.ran(late.rel_id))
    assert admitting.starved == (late.rel_id,), admitting


def test_starvation_prevention_puts_the_relquery_that_waited_first(engine, with_policy):
    # A threshold of a microsecond per row: both relQueries have waited too long by the first
    # step, both rank first (priority 0), and arrival order decides: the big one, which without
    # starvation prevention goes after the small one (the first test, same queue).
    with with_policy("relserve", starvation_threshold=1e-6):
        big, small = _rq(SEQS, "Big"), _rq(2, "Small")
        steps = _race(engine, big, small)
    assert _first_prefills(steps, big.rel_id, small.rel_id) == [big.rel_id, small.rel_id]
    admitting = next(s for s in steps if s.ran(big.rel_id))
    assert set(admitting.starved) == {big.rel_id, small.rel_id}, admitting


#: The preset CPU cost model holds a running relQuery only for more than 25 rows (the fixed cost
#: of the held rows' extra decode steps, 72 ms, against 2.9 ms per row a step); the test engine
#: runs at most 16 sequences. With the fixed cost at 10 ms, as on hardware whose decode step
#: grows faster with its batch, holding 8 rows pays.
def _hold_pays(engine):
    return engine.cost_model.model_copy(update={"beta_d": 0.010})


def _short_beside_long(engine) -> tuple[RelQuery, RelQuery, list[SchedulerStep]]:
    """A long relQuery decoding all its rows, then a short one; the long one is cancelled once the
    short one has finished (it would decode 1,200 tokens)."""
    assert engine.wait_idle(120), "the engine did not become idle"
    mark = engine.scheduler_stats()["last_step"]
    long_rq, short = _rq(8, "Long", max_tokens=BLOCKER_TOKENS), _rq(2, "Short", max_tokens=8)
    h_long = engine.submit(long_rq)
    try:
        wait_until(lambda: _decoding(engine, mark, long_rq.rel_id, 8), "the long relQuery's 8 rows decoding")
        res = result_within(engine.submit(short), 300, "the short relQuery beside the long one")
        assert res.stats.num_errors == 0
        assert not h_long.done(), "the long relQuery (1,200 tokens a row) finished before the short one"
    finally:
        h_long.cancel()
        result_within(h_long, 120, "the cancelled long relQuery to end")
    steps = [s for s in _steps(engine, mark) if s.ran(long_rq.rel_id) or s.ran(short.rel_id)]
    return long_rq, short, steps


def test_a_short_relquery_preempts_a_long_ones_decode_and_the_long_one_is_held_while_it_decodes(engine, with_policy):
    with with_policy("relserve", _hold_pays(engine), **NO_STARVATION):
        long_rq, short, steps = _short_beside_long(engine)
    start, end = first_step(steps, short.rel_id), last_step(steps, short.rel_id)
    # preemption (ABA's first case): the short one is prefilled while the long one is decoding,
    # as soon as it arrives, not after the long one's answers
    admitting = next(s for s in steps if s.seq == start)
    assert admitting.kind == "prefill" and admitting.reason == "preemption", admitting
    assert admitting.prefilled == {short.rel_id: 2} and long_rq.rel_id not in admitting.decoded
    assert last_step(steps, long_rq.rel_id) > end  # the long one was still running, and ran on after
    # decode-hold: while the short one decodes, the long one's 8 rows sit out (keeping their KV)
    during = [s for s in steps if start < s.seq <= end]
    assert during, "the short relQuery never decoded"
    assert all(s.decoded == {short.rel_id: 2} and s.held == {long_rq.rel_id: 8} for s in during), \
        [(s.seq, s.reason, dict(s.decoded), dict(s.held)) for s in during]


def test_without_decode_hold_the_long_relquery_decodes_beside_the_short_one(engine, with_policy):
    """The control of the test above: the same queues and cost model with decode-hold off."""
    with with_policy("relserve", _hold_pays(engine), decode_subset=False, **NO_STARVATION):
        long_rq, short, steps = _short_beside_long(engine)
    start, end = first_step(steps, short.rel_id), last_step(steps, short.rel_id)
    during = [s for s in steps if start < s.seq <= end]
    assert during and all(s.decoded == {short.rel_id: 2, long_rq.rel_id: 8} and not s.held for s in during), \
        [(s.seq, s.reason, dict(s.decoded), dict(s.held)) for s in during]
