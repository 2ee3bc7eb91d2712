"""Which engine replica runs which rows of a relQuery (plain Python: no ray, no vllm).

The cluster (``relserve.cluster.cluster``) and the simulator (``relserve.sim.cluster``) drive the
same ``Dispatcher`` objects: each keeps a ``ReplicaBook`` per replica (what it holds, its
measured speed, the prompt blocks it has cached) and places every relQuery when it arrives.

* ``round-robin``, ``least-loaded`` (fewest rows outstanding) and ``power-of-two`` (two replicas
  drawn at random, the one with fewer rows outstanding: Ray Serve's router) are the baselines.
* ``relquery`` scores each replica by the relQuery's own finish estimate there: its queue (the
  remaining-time estimates of what the replica holds, as the scheduler's DPU computes them) plus
  its compute time (batch decomposition and the cost model) with the prompt blocks the replica
  already caches taken off, both scaled by the replica's measured speed, plus the delay it
  imposes on the held relQueries it overtakes. A large relQuery is split over idle replicas when
  the slowest part still finishes sooner; each part's compute counts its own prefill of the
  static prefix, so the prefix sharing a split loses is in the comparison.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from relserve.errors import ConfigError
from relserve.policy.cost_model import CostModel
from relserve.policy.decompose import batch_decompose

#: the limits a replica's scheduler batches within (``EngineSettings`` defaults)
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_MAX_NUM_BATCHED_TOKENS = 1024


@dataclass(frozen=True)
class Work:
    """What the dispatcher needs of a relQuery (or of the rows of one still to run)."""

    rel_id: str
    #: per row: prompt length in tokens
    prompt_tokens: Sequence[int]
    #: per row: chained hashes of its full prompt blocks (empty tuples: no prefix knowledge)
    hashes: Sequence[Sequence[int]]
    #: output tokens expected per row (max_tokens, or an estimate)
    output_len: int

    @property
    def size(self) -> int:
        return len(self.prompt_tokens)

    def subset(self, rows: Sequence[int]) -> Work:
        return Work(self.rel_id, [self.prompt_tokens[i] for i in rows], [self.hashes[i] for i in rows], self.output_len)


@dataclass
class _Held:
    rows: int
    #: estimated seconds the replica needs for it, alone (at dispatch)
    estimate: float
    #: estimated seconds still to go
    remaining: float
    dispatched_at: float
    #: predicted latency at dispatch (queue + compute), to measure the replica's speed
    predicted: float


@dataclass
class ReplicaBook:
    """The dispatcher's picture of one replica."""

    index: int
    #: prompt blocks the replica's prefix cache can hold
    cache_blocks: int = 2048
    alive: bool = True
    #: measured seconds per predicted second (EWMA): 2.0 means twice as slow as the cost model says
    speed: float = 1.0
    held: dict[str, _Held] = field(default_factory=dict)
    #: block hashes the replica has been sent, least recently used first
    cache: OrderedDict = field(default_factory=OrderedDict)
    last: float = 0.0

    def advance(self, now: float) -> None:
        """Age the estimates: time passed is work done, shortest remaining first (as the
        replica's relserve scheduler runs it)."""
        dt = (now - self.last) / max(self.speed, 1e-9)
        self.last = max(self.last, now)
        if dt <= 0 or not self.held:
            return
        for h in sorted(self.held.values(), key=lambda h: h.remaining):
            used = min(dt, h.remaining)
            h.remaining -= used
            dt -= used
            if dt <= 0:
                break

    def outstanding_rows(self) -> float:
        return sum(h.rows * (h.remaining / h.estimate if h.estimate > 0 else 0.0) for h in self.held.values())

    def queue_seconds(self, own: float) -> float:
        """Seconds a newcomer needing ``own`` seconds waits: each held relQuery delays it by its
        remaining time, but by no more than ``own`` (longer ones wait behind it in the DPU)."""
        return sum(min(h.remaining, own) for h in self.held.values()) * self.speed

    def cached_leading_blocks(self, hashes: Sequence[int]) -> int:
        n = 0
        for h in hashes:
            if h not in self.cache:
                break
            n += 1
        return n

    def remember(self, hashes: Sequence[int]) -> None:
        cache = self.cache
        for h in hashes:
            if h in cache:
                cache.move_to_end(h)
            else:
                cache[h] = None
        while len(cache) > self.cache_blocks:
            cache.popitem(last=False)


@dataclass(frozen=True)
class Part:
    replica: int
    #: positions in the Work's rows
    rows: tuple[int, ...]


class Dispatcher:
    """Base: keeps the books; subclasses choose replicas in ``_place``."""

    name = "base"

    def __init__(
        self,
        num_replicas: int,
        cost: CostModel | None = None,
        *,
        block_size: int = 32,
        cache_blocks: int = 2048,
        kv_capacity_tokens: int = 65_536,
        max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
        max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
        seed: int = 0,
    ) -> None:
        if num_replicas < 1:
            raise ConfigError(f"need at least one replica, got {num_replicas}")
        self.cost = cost or CostModel()
        self.block_size = block_size
        self.kv_capacity_tokens = kv_capacity_tokens
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.books = [ReplicaBook(i, cache_blocks) for i in range(num_replicas)]
        self.rng = random.Random(seed)
        self._memo: tuple[Work | None, tuple[float, ...]] = (None, ())

    # ----------------------------------------------------------------- estimates

    def compute_seconds(self, work: Work, book: ReplicaBook | None = None) -> float:
        """The relQuery alone on a replica (the DPU's estimate), its cached prefix taken off."""
        utoks = self._uncached(work, book)
        dec = batch_decompose(
            utoks, work.output_len, cap=self.kv_capacity_tokens,
            max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens,
        )
        return dec.duration(self.cost)

    def _uncached(self, work: Work, book: ReplicaBook | None) -> list[float]:
        """Per row: prompt tokens not served from the prefix cache, counting blocks shared with
        earlier rows of the same relQuery and, on ``book``'s replica, blocks it already holds
        (the first row's chain exactly, other rows from a sample of up to ``_SAMPLE``, as the
        DPU samples miss ratios: placing must stay cheap at 64 replicas)."""
        bs = self.block_size
        if self._memo[0] is not work:  # the same Work is costed on every replica in turn
            self._memo = (work, _intra_uncached(work, bs))
        base = self._memo[1]
        if book is None or not book.cache or not base:
            return list(base)
        out = list(base)
        out[0] = max(out[0] - book.cached_leading_blocks(work.hashes[0]) * bs, 1)
        n = len(out)
        if n > 1:
            step = max((n - 1) // _SAMPLE, 1)
            sample = range(1, n, step)
            extra = 0.0
            for i in sample:
                shared = (work.prompt_tokens[i] - base[i]) // bs
                extra += max(book.cached_leading_blocks(work.hashes[i]) - shared, 0) * bs
            if extra:
                share = extra / len(sample)
                for i in range(1, n):
                    out[i] = max(out[i] - share, 1)
        return out

    # ----------------------------------------------------------------- placing

    def place(self, work: Work, now: float) -> list[Part]:
        """Where ``work``'s rows run; the books count them from now on."""
        live = [b for b in self.books if b.alive]
        if not live:
            raise ConfigError("no replica is alive to run the relQuery")
        for b in live:
            b.advance(now)
        if work.size == 0:
            return []
        parts = self._place(work, live)
        for p in parts:
            self._book(self.books[p.replica], work.subset(p.rows), now)
        return parts

    def _place(self, work: Work, live: list[ReplicaBook]) -> list[Part]:
        raise NotImplementedError

    def _book(self, book: ReplicaBook, part: Work, now: float) -> None:
        est = self.compute_seconds(part, book)
        predicted = book.queue_seconds(est) + est * book.speed
        key = part.rel_id
        while key in book.held:  # the same relQuery's rows sent again (re-dispatch)
            key += "+"
        book.held[key] = _Held(part.size, est, est, now, predicted)
        for hs in part.hashes:
            book.remember(hs)

    # ----------------------------------------------------------------- feedback (real cluster)

    def progress(self, replica: int, rel_id: str, done: int, total: int) -> None:
        """``done`` of the ``total`` rows sent to ``replica`` have finished."""
        h = self.books[replica].held.get(rel_id)
        if h is not None and total:
            h.remaining = min(h.remaining, h.estimate * (1 - done / total))

    def finished(self, replica: int, rel_id: str, now: float) -> None:
        """The replica finished its rows of ``rel_id``: learn its speed from the real latency."""
        book = self.books[replica]
        h = book.held.pop(rel_id, None)
        if h is None or h.predicted <= 0:
            return
        ratio = (now - h.dispatched_at) / h.predicted * book.speed
        book.speed = min(max(0.8 * book.speed + 0.2 * ratio, 0.1), 10.0)

    def forget(self, replica: int, rel_id: str) -> None:
        self.books[replica].held.pop(rel_id, None)

    def mark_dead(self, replica: int) -> None:
        """The replica died or stopped answering: place nothing on it, its cache is gone."""
        b = self.books[replica]
        b.alive = False
        b.held.clear()
        b.cache.clear()

    def mark_alive(self, replica: int) -> None:
        self.books[replica].alive = True


class RoundRobin(Dispatcher):
    name = "round-robin"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._next = 0

    def _place(self, work: Work, live: list[ReplicaBook]) -> list[Part]:
        for _ in range(len(self.books)):
            b = self.books[self._next % len(self.books)]
            self._next += 1
            if b.alive:
                return [Part(b.index, tuple(range(work.size)))]
        return [Part(live[0].index, tuple(range(work.size)))]


class LeastLoaded(Dispatcher):
    """The replica with the fewest rows outstanding."""

    name = "least-loaded"

    def _place(self, work: Work, live: list[ReplicaBook]) -> list[Part]:
        b = min(live, key=lambda b: (b.outstanding_rows(), b.index))
        return [Part(b.index, tuple(range(work.size)))]


class PowerOfTwo(Dispatcher):
    """Two replicas drawn at random, the one with fewer rows outstanding (Ray Serve's router)."""

    name = "power-of-two"

    def _place(self, work: Work, live: list[ReplicaBook]) -> list[Part]:
        pair = self.rng.sample(live, min(2, len(live)))
        b = min(pair, key=lambda b: (b.outstanding_rows(), b.index))
        return [Part(b.index, tuple(range(work.size)))]


class RelQueryAware(Dispatcher):
    """Per relQuery: the placement (one replica, or a split over several) that adds the least
    latency to the cluster: the relQuery's own finish time (its slowest part: queue + compute,
    compute counting the prefix blocks the replica already caches) plus ``others`` times the
    delay each part imposes on the relQueries it overtakes (the replica's scheduler runs
    shorter remaining work first, so a part delays every held relQuery longer than itself)."""

    name = "relquery"

    def __init__(self, *args, others: float = 1.0, min_split_rows: int = 32, max_split: int = 8, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if others < 0:
            raise ConfigError(f"others must be >= 0, got {others}")
        self.others = others
        self.min_split_rows = min_split_rows
        self.max_split = max_split

    def _option(self, work: Work, book: ReplicaBook) -> tuple[float, float]:
        """(finish, delay imposed on others) in seconds for ``work`` on ``book``'s replica."""
        own = self.compute_seconds(work, book)
        overtaken = sum(1 for h in book.held.values() if h.remaining > own)
        return book.queue_seconds(own) + own * book.speed, overtaken * own * book.speed

    def _place(self, work: Work, live: list[ReplicaBook]) -> list[Part]:
        w = self.others
        whole = [(self._option(work, b), b) for b in live]
        (finish, imposed), best = min(whole, key=lambda x: (x[0][0] + w * x[0][1], x[1].index))
        choice = [Part(best.index, tuple(range(work.size)))]
        score = finish + w * imposed
        k_max = min(len(live), self.max_split, work.size // max(self.min_split_rows, 1))
        if k_max < 2:
            return choice
        # candidates for a split: idle replicas (a part sent to a busy one overtakes work the
        # books can only estimate; simulated, that cost more than it saved)
        ranked = [b for _, b in sorted(whole, key=lambda x: (x[0][0] + w * x[0][1], x[1].index)) if not b.held]
        k_max = min(k_max, len(ranked))
        for k in range(2, k_max + 1):
            parts = _chunks(work.size, k)
            opts = [self._option(work.subset(rows), b) for rows, b in zip(parts, ranked[:k])]
            s = max(f for f, _ in opts) + w * sum(d for _, d in opts)
            if s < score:
                score = s
                choice = [Part(b.index, tuple(rows)) for rows, b in zip(parts, ranked[:k])]
        return choice


_SAMPLE = 8


def _intra_uncached(work: Work, bs: int) -> tuple[float, ...]:
    """Per row: uncached prompt tokens when earlier rows of the relQuery are the only cache."""
    seen: set[int] = set()
    out = []
    for toks, hs in zip(work.prompt_tokens, work.hashes):
        hit = 0
        for h in hs:
            if h in seen:
                hit += 1
            else:
                break
        seen.update(hs)
        out.append(max(toks - hit * bs, 1))
    return tuple(out)


def _chunks(n: int, k: int) -> list[range]:
    """``range(n)`` in ``k`` contiguous parts of near-equal size (neighbouring rows, which share
    the most prefix when rows are sorted, stay together)."""
    bounds = [round(i * n / k) for i in range(k + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(k)]


DISPATCHERS: dict[str, type[Dispatcher]] = {
    cls.name: cls for cls in (RelQueryAware, RoundRobin, LeastLoaded, PowerOfTwo)
}
DISPATCHER_NAMES: tuple[str, ...] = tuple(DISPATCHERS)


def make_dispatcher(name: str, num_replicas: int, cost: CostModel | None = None, **options) -> Dispatcher:
    try:
        cls = DISPATCHERS[name]
    except KeyError:
        raise ConfigError(f"unknown dispatcher {name!r}; choose one of {', '.join(DISPATCHER_NAMES)}") from None
    return cls(num_replicas, cost, **options)
