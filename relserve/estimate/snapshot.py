"""The work an engine holds right now, as the simulator replays it: every relQuery in flight with
its unfinished requests (prompt token ids, tokens computed and answered so far).

``Engine.queued()`` builds it from the relQueries the engine object tracks and the scheduler
plug-in's own view of its queues (one RPC between two steps), in the types of
relserve/engine/queued.py; this module turns them into the simulator's relQueries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from relserve.block_hashes import BlockHash, block_hashes
from relserve.engine.queued import QueuedRelQuery, QueuedRequest
from relserve.sim.prepared_trace import PreparedRelQuery


@dataclass
class Background:
    """Queued work in the simulator's terms: relQueries that arrived before now (negative
    arrival times) and the prompt blocks already in the KV cache."""

    relqueries: list[PreparedRelQuery] = field(default_factory=list)
    #: per running request, the hashes of its computed prompt blocks (cached when the replay starts)
    cached: list[tuple[int, ...]] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return sum(q.size for q in self.relqueries)


def background_of(queued: Sequence[QueuedRelQuery], now: float, block_size: int,
                  answer_tokens) -> Background:
    """``queued`` as of ``now`` (``time.monotonic()``). ``answer_tokens(relquery, n)``: the answer
    lengths expected of ``n`` requests of a decoded relQuery (relserve/answer_lengths.py),
    or None for ``max_tokens``. A request that has answered some tokens has the rest of its
    expected answer to go (at least one)."""
    out = Background()
    for q in queued:
        if not q.requests:
            continue
        lens, hashes, outs = [], [], []
        expected = None if q.scored else answer_tokens(q, len(q.requests))
        for i, r in enumerate(q.requests):
            total = 1 if q.scored else (expected[i] if expected else q.max_tokens)
            # the prompt the replay starts from: what it had, and what it answered (kept in the KV cache)
            length, h, cached = resumed(r, i, block_size)
            lens.append(length)
            hashes.append(h)
            outs.append(max(1, min(q.max_tokens - r.generated, total - r.generated)))
            if cached:
                out.cached.append(h[:cached])
        out.relqueries.append(PreparedRelQuery(q.rel_id, min(q.arrival - now, 0.0), q.max_tokens, tuple(lens), tuple(hashes),
                                               tuple(outs), q.call_key))
    return out


def resumed(r: QueuedRequest, index: int, block_size: int) -> tuple[int, tuple[BlockHash, ...], int]:
    """A request as the replay starts it: its length (prompt and answer so far), its blocks'
    hashes and how many of those are in the cache. A waiting request has none cached; a running
    one its computed whole blocks (its answer's blocks get hashes of their own, no other prompt
    holds them). A decoding request (everything but its newest token computed) starts from its
    last whole block plus the one token its next step computes: the replay caches whole blocks
    only, and would otherwise compute its part-filled last block and answer so far again, a
    prefill of up to a block per request before anything else runs, which the engine does not do
    (at most a block of its context is left out)."""
    length = len(r.prompt_ids) + r.generated
    h = block_hashes(r.prompt_ids, block_size)
    if not (r.running and r.computed):
        return length, h, 0
    whole = min(r.computed, length) // block_size
    parent = h[-1] if h else 0
    answered = []
    for b in range(len(h), whole):
        parent = hash((parent, index, b))  # ints only: not salted per process, so replays repeat
        answered.append(parent)
    hashes = h + tuple(answered)
    if r.generated and r.computed >= length - 1:
        return whole * block_size + 1, hashes, whole
    return length, hashes, whole
