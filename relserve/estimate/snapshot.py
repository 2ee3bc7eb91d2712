"""The work an engine holds right now, as the simulator replays it: every relQuery in flight with
its unfinished requests (prompt token ids, tokens computed and answered so far).

``Engine.queued()`` builds it from the relQueries the engine object tracks and the scheduler
plug-in's own view of its queues (one RPC between two steps), in the types of
relserve/engine/queued.py; this module turns them into the simulator's relQueries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from relserve.block_hashes import BlockHash, block_hashes, salt_seed
from relserve.engine.queued import QueuedRelQuery, QueuedRequest
from relserve.sim.engine import request_id
from relserve.sim.prepared_trace import PreparedRelQuery

#: the most queued requests an estimate replays (issue 63). Beyond it the replay holds every
#: running request (at most the engine's ``max_num_seqs``) and a sample of the waiting ones (the
#: first rows of each relQuery, or of every few relQueries when there are many); the rest is summed
#: up as tokens (``Unreplayed``), so an estimate's CPU does not grow with the queue
#: (bench/bench_estimate_queue.py)
MAX_REPLAYED_REQUESTS = 1024
#: the fewest waiting requests a sampled relQuery keeps: many relQueries of a request or two would
#: cost the replayed policy more per step than the engine's own queue does (it weighs running
#: relQueries against each other), and look smaller to it than they are
MIN_KEPT_PER_RELQUERY = 16


@dataclass(frozen=True)
class Unreplayed:
    """Queued requests the replay leaves out, added up. The estimate adds their seconds at the
    engine's full throughput, in the share of the sampled waiting requests the policy admitted
    before the call's own (relserve/estimate/timing.py): the sample stands for the rest."""

    requests: int = 0
    prompt_tokens: int = 0
    answer_tokens: int = 0


@dataclass
class Background:
    """Queued work in the simulator's terms: relQueries that arrived before now (negative
    arrival times) and the prompt blocks already in the KV cache."""

    relqueries: list[PreparedRelQuery] = field(default_factory=list)
    #: per running request, the hashes of its computed prompt blocks (cached when the replay starts)
    cached: list[tuple[int, ...]] = field(default_factory=list)
    #: the queued requests the replay leaves out (none when the queue is small)
    rest: Unreplayed = field(default_factory=Unreplayed)
    #: the simulator's ids of the waiting requests the replay holds when it leaves some out (the
    #: sample the share of the rest ahead of a call is read from)
    sampled_waiting: frozenset[str] = frozenset()

    @property
    def replayed(self) -> int:
        return sum(q.size for q in self.relqueries)

    @property
    def requests(self) -> int:
        """Every queued request, replayed or not."""
        return self.replayed + self.rest.requests


def background_of(queued: Sequence[QueuedRelQuery], now: float, block_size: int,
                  answer_tokens, limit: int = MAX_REPLAYED_REQUESTS) -> Background:
    """``queued`` as of ``now`` (``time.monotonic()``). ``answer_tokens(relquery, n)``: the answer
    lengths expected of ``n`` requests of a decoded relQuery (relserve/answer_lengths.py),
    or None for ``max_tokens``. A request that has answered some tokens has the rest of its
    expected answer to go (at least one). Each request's blocks are hashed in its relQuery's
    prefix-cache namespace (``cache_salt``), as the engine keys them: another tenant's prompts
    are found by nobody else's. At most ``limit`` requests are replayed (``kept``)."""
    out = Background()
    rest = [0, 0, 0]
    sampled: list[str] = []
    for q, keep in zip(queued, kept(queued, limit)):
        if not q.requests:
            continue
        lens, hashes, outs = [], [], []
        expected = None if q.scored else answer_tokens(q, len(q.requests))
        for i, r in enumerate(q.requests):
            total = 1 if q.scored else (expected[i] if expected else q.max_tokens)
            answer = max(1, min(q.max_tokens - r.generated, total - r.generated))
            if keep is not None and i not in keep:
                rest[0] += 1
                rest[1] += len(r.prompt_ids) + r.generated
                rest[2] += answer
                continue
            # the prompt the replay starts from: what it had, and what it answered (kept in the KV cache)
            length, h, cached = resumed(r, i, block_size, q.cache_salt)
            if keep is not None and not r.running:
                sampled.append(request_id(q.rel_id, len(lens)))
            lens.append(length)
            hashes.append(h)
            outs.append(answer)
            if cached:
                out.cached.append(h[:cached])
        if lens:
            # a sample keeps its relQuery's size in the policy's eyes (its starvation rule)
            out.relqueries.append(PreparedRelQuery(q.rel_id, min(q.arrival - now, 0.0), q.max_tokens, tuple(lens),
                                                   tuple(hashes), tuple(outs), q.call_key,
                                                   len(q.requests) if keep is not None else 0))
    out.rest = Unreplayed(*rest)
    out.sampled_waiting = frozenset(sampled)
    return out


def kept(queued: Sequence[QueuedRelQuery], limit: int) -> list[frozenset[int] | None]:
    """Per relQuery, the requests the replay holds (None: all of them). All, when the queue has at
    most ``limit`` requests. Else every running request, and the first waiting requests of each
    relQuery up to a cap that fills what is left of ``limit`` (the rows the engine admits first);
    when that cap would be below ``MIN_KEPT_PER_RELQUERY``, the first ``MIN_KEPT_PER_RELQUERY`` of
    one relQuery in every few instead (an even sample in arrival order)."""
    if sum(len(q.requests) for q in queued) <= limit:
        return [None] * len(queued)
    running = [[i for i, r in enumerate(q.requests) if r.running] for q in queued]
    waiting = [[i for i, r in enumerate(q.requests) if not r.running] for q in queued]
    room = max(limit - sum(map(len, running)), 0)
    cap = _cap(list(map(len, waiting)), room)
    every = 1
    if cap < MIN_KEPT_PER_RELQUERY:
        cap = MIN_KEPT_PER_RELQUERY
        wanted = sum(min(len(w), cap) for w in waiting)
        every = -(-wanted // room) if room else len(queued) + 1
    out, nth = [], 0
    for run, wait in zip(running, waiting):
        take = 0
        if wait:
            take = min(len(wait), cap) if nth % every == 0 else 0
            nth += 1
        out.append(frozenset(run) | frozenset(wait[:take]))
    return out


def _cap(sizes: list[int], room: int) -> int:
    """The largest ``c`` with ``sum(min(n, c) for n in sizes) <= room`` (water-filling)."""
    low, high = 0, max(sizes, default=0)
    while low < high:
        mid = (low + high + 1) // 2
        if sum(min(n, mid) for n in sizes) <= room:
            low = mid
        else:
            high = mid - 1
    return low


def resumed(r: QueuedRequest, index: int, block_size: int,
            salt: str | None = None) -> tuple[int, tuple[BlockHash, ...], int]:
    """A request as the replay starts it: its length (prompt and answer so far), its blocks'
    hashes (in the namespace of ``salt``) and how many of those are in the cache. A waiting
    request has none cached; a running one its computed whole blocks (its answer's blocks get
    hashes of their own, no other prompt holds them). A decoding request (everything but its
    newest token computed) starts from its last whole block plus the one token its next step
    computes: the replay caches whole blocks only, and would otherwise compute its part-filled
    last block and answer so far again, a prefill of up to a block per request before anything
    else runs, which the engine does not do (at most a block of its context is left out)."""
    length = len(r.prompt_ids) + r.generated
    h = block_hashes(r.prompt_ids, block_size, salt)
    if not (r.running and r.computed):
        return length, h, 0
    whole = min(r.computed, length) // block_size
    parent = h[-1] if h else salt_seed(salt)
    answered = []
    for b in range(len(h), whole):
        parent = hash((parent, index, b))  # ints only: not salted per process, so replays repeat
        answered.append(parent)
    hashes = h + tuple(answered)
    if r.generated and r.computed >= length - 1:
        return whole * block_size + 1, hashes, whole
    return length, hashes, whole
