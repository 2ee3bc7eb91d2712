"""The work an engine holds right now, as the simulator replays it: every relQuery in flight with
its unfinished requests (prompt token ids, tokens computed and answered so far).

``Engine.queued()`` builds it from the relQueries the engine object tracks and the scheduler
plug-in's own view of its queues (one RPC between two steps), in the types of
relserve/engine/queued.py; this module turns them into the simulator's relQueries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from relserve.block_hashes import block_hashes
from relserve.engine.queued import QueuedRelQuery
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
            h = block_hashes(r.prompt_ids, block_size)
            total = 1 if q.scored else (expected[i] if expected else q.max_tokens)
            # the prompt the replay starts from: what it had, and what it answered (kept in the KV cache)
            lens.append(len(r.prompt_ids) + r.generated)
            hashes.append(h)
            outs.append(max(1, min(q.max_tokens - r.generated, total - r.generated)))
            if r.running and r.computed:
                out.cached.append(h[: r.computed // block_size])
        out.relqueries.append(PreparedRelQuery(q.rel_id, min(q.arrival - now, 0.0), q.max_tokens, tuple(lens), tuple(hashes),
                                               tuple(outs), q.call_key))
    return out
