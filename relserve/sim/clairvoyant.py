"""The limit: how fast any scheduler could serve a trace under the simulator's step model.

Two references, both computed with the true answer length of every row:

* ``lower_bound``: a **provable** lower bound on the mean relQuery latency of *any* schedule the
  simulator can run (``engine.py``: steps priced by ``CostModel.mixed``, at most
  ``max_num_batched_tokens`` tokens and ``max_num_seqs`` requests per step, a request samples at
  most one token per step, prefix hits only on full prompt blocks and never on the last prompt
  token). It is the larger of two relaxations:

  1. *each relQuery alone*: its steps lie inside [arrival, finish] and do not overlap, so its
     latency is at least (a) the chain of its slowest row (one step that completes the prompt,
     then one step per further token, each at least its fixed cost plus that row's own token
     terms) and (b) its own token work plus one fixed cost per step it needs at least (its
     longest answer, its tokens over the step budget, its samples over ``max_num_seqs``);
  2. *one machine, preemptive SRPT*: a step of duration D holds each relQuery's own token work
     plus a share of the fixed cost that sums to at most 1 per step (weights over tokens/budget,
     requests/max_num_seqs and KV tokens only that request can hold/KV capacity); serialising
     every step's pieces gives a one-machine preemptive schedule finishing each relQuery no
     later, and SRPT minimises the mean flow time there.

  and, stronger than both, their combination: for any subset A of the relQueries, the sum of
  latencies is at least SRPT's flow-time sum over A alone plus the others' relaxation-1 floors
  (the best A a greedy search finds).

  Prompt work is counted generously to the scheduler: a block any other request also holds is
  assumed cached; a block only one relQuery holds is paid once by that relQuery. A token after a
  preemption may come from a recomputing prefill instead of a decode; the cheaper of the two is
  used. Both relaxations drop everything that couples relQueries beyond that (KV pressure,
  the other relQueries in a step), so the bound is loose at high load and under long prompts.

* ``clairvoyant``: the best of a few *achievable* schedules in the simulator itself (same host,
  same KV cache and prefix cache): relQueries ranked by their exact remaining work alone
  (shortest remaining work first), the step arranged by one of a handful of rules (prefill
  first, mixed steps, protect the head relQuery's decodes) or by RelServe's own arranger fed
  the exact priorities and answer lengths (four of its settings); and RelServe's whole policy
  told the true lengths (two settings). It is a
  strong clairvoyant heuristic, not a bound: an implemented policy may beat it, and the true
  optimum lies between ``lower_bound`` and it.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from relserve.policy import CostModel, Limits, Policy, PolicySettings, Req, StepKind, StepPlan, StepView, make_policy
from relserve.policy.aba import AdaptiveBatchArranger, Transitional
from relserve.policy.batching import prefill_candidate
from relserve.policy.relqueries import RelQueryGroup
from relserve.sim.engine import EngineSim, SimRequest
from relserve.sim.prepared_trace import PreparedTrace

#: weights of a step's fixed cost shared out by tokens/step budget, requests/max_num_seqs and
#: KV tokens held/KV capacity (each weight triple sums to 1, so a step's shares sum to at most 1)
SHARE_WEIGHTS: tuple[tuple[float, float, float], ...] = tuple(
    (a / 4, b / 4, (4 - a - b) / 4) for a in range(5) for b in range(5 - a)
)
#: relaxations 1 and 2 combine over a subset of relQueries; at most this many are moved in or out
COMBINE_CANDIDATES = 200


@dataclass(frozen=True, slots=True)
class _Floors:
    """The cheapest a unit of work can be in any step, whatever else the step holds."""

    a_p: float  # per uncached prompt token
    a_d: float  # per decoded request
    g_p: float
    g_d: float
    b_p: float  # fixed cost of a step that computes prompt tokens
    b_d: float  # fixed cost of a step that decodes
    b: float  # fixed cost of any step

    @classmethod
    def of(cls, cost: CostModel) -> _Floors:
        a_mp = cost.alpha_p if cost.alpha_mp is None else cost.alpha_mp
        a_md = cost.alpha_d if cost.alpha_md is None else cost.alpha_md
        b_mix = max(cost.beta_p, cost.beta_d) if cost.beta_m is None else cost.beta_m
        b_p, b_d = min(cost.beta_p, b_mix), min(cost.beta_d, b_mix)
        return cls(min(cost.alpha_p, a_mp), min(cost.alpha_d, a_md), cost.gamma_p, cost.gamma_d, b_p, b_d, min(b_p, b_d))


class RelQueryFloor(BaseModel):
    id: str
    arrival: float
    #: no schedule finishes it sooner after its arrival (relaxation 1)
    min_latency: float
    #: seconds of step time only its own tokens account for (token terms, no fixed cost)
    token_work: float
    #: tokens it must schedule at least, request-steps (samples) it needs, and the sum over its
    #: samples of the KV tokens only that request can be holding in that step
    tokens: int
    samples: int
    kv_tokens: float


class LowerBound(BaseModel):
    relqueries: list[RelQueryFloor]
    #: mean of ``min_latency`` (relaxation 1)
    isolated_mean: float
    #: mean flow time of one-machine preemptive SRPT (relaxation 2), best share weights
    srpt_mean: float
    share_weights: tuple[float, float, float]
    #: both at once: SRPT over a subset A of the relQueries, ``min_latency`` for the others
    #: (every schedule's sum of latencies is at least that, for any A); the best A found
    combined_mean: float
    #: relQueries counted by ``min_latency`` in ``combined_mean``
    outside_srpt: int
    #: speed of the one machine (N replicas: N)
    replicas: int = 1

    @property
    def mean(self) -> float:
        return max(self.isolated_mean, self.srpt_mean, self.combined_mean)


def _prefill_pairs(u: float, c: float) -> float:
    return u * (c + (u + 1) / 2)


def lower_bound(trace: PreparedTrace, cost: CostModel, limits: Limits, *, replicas: int = 1) -> LowerBound:
    """The provable lower bound on the mean relQuery latency (module docstring).

    ``replicas`` > 1: N engines behind any dispatcher (a relQuery may be split across them);
    relaxation 1 keeps only the per-row chains and relaxation 2 runs on one machine N times as fast.
    """
    f = _Floors.of(cost)
    bs = limits.block_size
    qs = trace.relqueries
    # in how many requests, and in how many relQueries, each prompt block occurs
    in_requests: Counter = Counter()
    in_relqueries: Counter = Counter()
    for q in qs:
        seen = set()
        for hs in q.hashes:
            in_requests.update(hs)
            seen.update(hs)
        in_relqueries.update(seen)
    kv_tokens_total = (limits.kv_capacity_tokens // bs) * bs
    floors = []
    for q in qs:
        kv = 0.0
        tokens_forced = 0
        pairs = 0.0
        decode_work = 0.0
        samples = 0
        decoded = 0
        chain = 0.0
        forced_hashes: set = set()
        leading: set = set()
        for p, hs, o in zip(q.prompt_tokens, q.hashes, q.output_tokens):
            cap = min(len(hs), (p - 1) // bs)
            # leading blocks another request also holds: possibly cached when this row starts
            k = 0
            while k < cap and in_requests[hs[k]] > 1:
                k += 1
            leading.update(hs[:k])
            forced_hashes.update(hs[k:])
            u = p - k * bs
            tokens_forced += u
            row_pairs = _prefill_pairs(u, k * bs)
            pairs += row_pairs
            tail = p - len(hs) * bs  # prompt tokens no block hash covers: recomputed after a preemption
            # KV only this request can hold: blocks no other request has, its tail, its answer
            own = p - bs * sum(1 for h in hs if in_requests[h] > 1)
            kv += o * own + o * (o - 1) / 2
            row_decode, row_chain = _later_samples(f, p, tail, o - 1)
            decode_work += row_decode
            samples += o
            decoded += o - 1
            chain = max(chain, f.b_p + f.a_p * u + f.g_p * row_pairs + row_chain)
        # blocks only this relQuery holds, available to a row only if another of its rows computed them
        own_shared = sum(1 for h in leading if in_relqueries[h] == 1 and h not in forced_hashes)
        tokens = tokens_forced + own_shared * bs
        work = f.a_p * tokens + f.g_p * pairs + decode_work
        steps = max(max(q.output_tokens), math.ceil((tokens + decoded) / limits.max_num_batched_tokens), math.ceil(samples / limits.max_num_seqs))
        alone = chain if replicas > 1 else max(chain, work + f.b * steps)
        floors.append(
            RelQueryFloor(
                id=q.id, arrival=q.arrival, min_latency=alone, token_work=work, tokens=tokens + decoded, samples=samples, kv_tokens=kv
            )
        )
    n = len(floors)
    if not n:
        return LowerBound(relqueries=[], isolated_mean=0.0, srpt_mean=0.0, share_weights=(0.0, 0.0, 1.0), combined_mean=0.0, outside_srpt=0)
    iso = sum(x.min_latency for x in floors) / n
    best_jobs: list[tuple[float, float]] = []
    best, best_w = -1.0, SHARE_WEIGHTS[0]
    for w in SHARE_WEIGHTS:
        jobs = [
            (
                x.arrival,
                (
                    x.token_work
                    + f.b * (w[0] * x.tokens / limits.max_num_batched_tokens + w[1] * x.samples / limits.max_num_seqs + w[2] * x.kv_tokens / kv_tokens_total)
                )
                / replicas,
            )
            for x in floors
        ]
        m = sum(srpt_flows(jobs)) / n
        if m > best:
            best, best_w, best_jobs = m, w, jobs
    combined, outside = _combine(best_jobs, [x.min_latency for x in floors])
    return LowerBound(
        relqueries=floors, isolated_mean=iso, srpt_mean=best, share_weights=best_w, combined_mean=combined / n, outside_srpt=outside, replicas=replicas
    )


def _combine(jobs: list[tuple[float, float]], alone: list[float]) -> tuple[float, int]:
    """max over subsets A of (SRPT's flow-time sum over A alone + the others' ``alone``), searched
    greedily from three starts (everyone in A; no one; those whose SRPT flow exceeds their own
    floor): one sweep over the relQueries (at most ``COMBINE_CANDIDATES``, those whose floor most
    exceeds their SRPT flow first), moving each in or out of A if that raises the sum. Returns the
    best sum found and how many relQueries it leaves out of A."""
    everyone = range(len(jobs))

    def value(members: set[int]) -> float:
        idx = sorted(members)
        return sum(srpt_flows([jobs[i] for i in idx])) + sum(alone[i] for i in everyone if i not in members)

    flows = srpt_flows(jobs)
    order = sorted(everyone, key=lambda i: flows[i] - alone[i])[:COMBINE_CANDIDATES]
    best_total, best_out = -1.0, 0
    for start in (set(everyone), set(), {i for i in everyone if flows[i] > alone[i]}):
        inside = set(start)
        total = value(inside)
        for i in order:
            trial_set = inside - {i} if i in inside else inside | {i}
            trial = value(trial_set)
            if trial > total:
                inside, total = trial_set, trial
        if total > best_total:
            best_total, best_out = total, len(jobs) - len(inside)
    return best_total, best_out


def _later_samples(f: _Floors, prompt: int, tail: int, n: int) -> tuple[float, float]:
    """A row's tokens after the first: each comes from a decode step or (after a preemption)
    from a prefill that recomputes at least the generated tokens and the unhashed prompt tail.
    Returns the least token terms (the cheaper source per token) and the least step time of
    the chain of steps (fixed cost included, again the cheaper source per token)."""
    token = chain = 0.0
    for j in range(1, n + 1):
        dec = f.a_d + f.g_d * (prompt + j)
        rec = f.a_p * (j + tail)
        token += min(dec, rec)
        chain += min(f.b_d + dec, f.b_p + rec)
    return token, chain


def srpt_flows(jobs: Sequence[tuple[float, float]]) -> list[float]:
    """Each job's (finish - release) under preemptive shortest-remaining-processing-time on one
    machine, which minimises their sum there (Schrage 1968). ``jobs``: (release, processing time)."""
    order = sorted(range(len(jobs)), key=lambda k: jobs[k])
    flows = [0.0] * len(jobs)
    heap: list[tuple[float, int]] = []  # (remaining, job)
    t = jobs[order[0]][0] if order else 0.0
    i = 0
    while i < len(order) or heap:
        if not heap:
            t = max(t, jobs[order[i]][0])
        while i < len(order) and jobs[order[i]][0] <= t:
            k = order[i]
            heapq.heappush(heap, (jobs[k][1], k))
            i += 1
        rem, k = heapq.heappop(heap)
        nxt = jobs[order[i]][0] if i < len(order) else math.inf
        if t + rem <= nxt:
            t += rem
            flows[k] = t - jobs[k][0]
        else:
            heapq.heappush(heap, (rem - (nxt - t), k))
            t = nxt
    return flows


def srpt_mean_flow(jobs: Iterable[tuple[float, float]]) -> float:
    """Mean of ``srpt_flows``."""
    flows = srpt_flows(list(jobs))
    return sum(flows) / len(flows) if flows else 0.0


# -- the clairvoyant schedule ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Arrangement:
    """How the clairvoyant policy builds a step from its ranking."""

    name: str
    #: MIXED steps (decode every running request plus a prefill chunk) instead of PREFILL/DECODE
    mixed: bool
    #: prefill tokens per mixed step (None: the step's whole budget)
    chunk: int | None = None
    #: while the head relQuery only decodes, decode alone (PREFILL/DECODE) or with at most this
    #: chunk (MIXED): the head's tokens are not slowed down by others' prompts
    protect_head: bool = False
    protect_chunk: int = 32
    #: RelServe's Adaptive Batch Arranger with these PolicySettings knobs, fed the true
    #: remaining work as priorities and the true answer lengths (None: the rules above)
    aba: Mapping[str, object] | None = None
    #: RelServe's whole policy (its own priority estimates, arranger, starvation guard) with
    #: these PolicySettings knobs, told each row's true answer length as its max_tokens
    relserve: Mapping[str, object] | None = None


ARRANGEMENTS: tuple[Arrangement, ...] = (
    Arrangement("prefill-first", mixed=False),
    Arrangement("prefill-first, head decodes alone", mixed=False, protect_head=True),
    Arrangement("mixed", mixed=True),
    Arrangement("relserve's arranger", mixed=False, aba={}),
    Arrangement("relserve's arranger, fill+mixed", mixed=True, aba={"fill_prefill": True, "mixed_steps": True}),
    Arrangement("relserve's arranger, mixed, gain 4", mixed=True, aba={"mixed_steps": True, "transitional_gain": 4.0}),
    Arrangement("relserve's arranger, mixed, backlog 1", mixed=True, aba={"mixed_steps": True, "backlog_weight": 1.0}),
    Arrangement("relserve, true lengths", mixed=False, relserve={}),
    Arrangement("relserve fill+mixed, true lengths", mixed=True, relserve={"fill_prefill": True, "mixed_steps": True}),
)


class ClairvoyantPolicy(Policy):
    """Shortest remaining work first over relQueries, from the rows' true answer lengths.

    Only the simulator can run it: it reads each request's true output length from the
    simulator's own record (``Req.handle``).
    """

    name = "clairvoyant"  # type: ignore[assignment]

    def __init__(self, cost: CostModel, arrangement: Arrangement) -> None:
        super().__init__(cost, PolicySettings(starvation_threshold=None))
        self.arrangement = arrangement
        self.aba = None
        if arrangement.aba is not None:
            knobs = PolicySettings(starvation_threshold=None).model_copy(update=dict(arrangement.aba))
            self.aba = AdaptiveBatchArranger(cost, Transitional.ADAPTIVE, knobs)
        #: remaining work of a relQuery's waiting rows, keyed by (relQuery, rows waiting)
        self._waiting_work: dict[tuple[str, int], tuple[float, int]] = {}

    def _remaining(self, rel_id: str, waiting: list[Req], running: list[Req], view: StepView) -> float:
        """Seconds the relQuery's unfinished rows take alone: prefill the waiting ones, then one
        decode batch that shrinks as rows finish (true lengths)."""
        c = self.cost
        key = (rel_id, len(waiting))
        hit = self._waiting_work.get(key)
        if hit is None:
            sample = waiting[0] if waiting else None
            miss = 1.0
            if sample is not None and sample.prompt_tokens:
                miss = 1.0 - min(view.cached_tokens(sample), sample.prompt_tokens) / sample.prompt_tokens
            utok = miss * sum(r.prompt_tokens for r in waiting)
            # attention pairs of each row's uncached part after its cached part (long prompts pay them)
            pairs = sum(miss * r.prompt_tokens * ((1 - miss) * r.prompt_tokens + (miss * r.prompt_tokens + 1) / 2) for r in waiting)
            pre = c.alpha_p * utok + c.gamma_p * pairs + c.beta_p * math.ceil(utok / view.limits.max_num_batched_tokens) if waiting else 0.0
            left = [_left(r) - 1 for r in waiting]
            hit = self._waiting_work[key] = (pre + c.alpha_d * sum(left), max(left, default=0))
        pre_dec, longest = hit
        lefts = [_left(r) for r in running]
        longest = max(longest, max(lefts, default=0))
        return pre_dec + c.alpha_d * sum(lefts) + c.beta_d * longest

    def _schedule(self, view: StepView) -> StepPlan:
        if not view.waiting and not view.running:
            return StepPlan(StepKind.IDLE, reason="idle")
        groups = self.tracker.group(view)
        work = {rid: self._remaining(rid, g.waiting, g.running, view) for rid, g in groups.items()}
        if self.aba is not None:
            for g in groups.values():
                _true_lengths(g)
            return self.aba.arrange(view, groups, work)
        order = sorted(groups.values(), key=lambda g: (work[g.rel_id], g.arrival, g.seq))
        head = order[0]
        queue = (r for g in order for r in g.waiting)
        a = self.arrangement
        head_decoding = not head.waiting and bool(head.running)
        if not a.mixed:
            if head_decoding and a.protect_head:
                return StepPlan(StepKind.DECODE, priorities=work, reason="head decodes")
            batch = _fit(queue, view, view.limits.max_num_batched_tokens)
            if batch:
                return StepPlan(StepKind.PREFILL, admit=batch, priorities=work, reason="prefill")
            return StepPlan(StepKind.DECODE, priorities=work, reason="decode")
        room = max(view.limits.max_num_batched_tokens - len(view.running), 0)
        chunk = min(a.chunk or room, room)
        if head_decoding and a.protect_head:
            chunk = min(chunk, a.protect_chunk)
        batch = _fit(queue, view, chunk) if chunk > 0 else []
        if not batch and not view.running:
            return StepPlan(StepKind.IDLE, reason="nothing fits")
        return StepPlan(StepKind.MIXED, admit=batch, token_budget=len(view.running) + chunk, priorities=work, reason="mixed")


class ClairvoyantRelServe(Policy):
    """RelServe's policy as it is, except that every row's max_tokens is its true answer length
    (the simulator finishes a row by its own record, so only the policy's estimates change)."""

    name = "clairvoyant"  # type: ignore[assignment]

    def __init__(self, cost: CostModel, settings: PolicySettings) -> None:
        super().__init__(cost, settings)
        self.inner = make_policy("relserve", cost, settings)

    def _schedule(self, view: StepView) -> StepPlan:
        for r in view.waiting:
            r.max_tokens = r.handle.out_len  # type: ignore[attr-defined]
        return self.inner.schedule(view)


def _true_lengths(g: RelQueryGroup) -> None:
    """The group's answer lengths (Eq. 15-16's OL) from the rows' true lengths, not max_tokens."""
    lefts = [_left(r) for r in g.running]
    g.remaining_output_len = max(lefts, default=0)
    g.remaining_output_total = sum(lefts)
    g.output_len = max((r.handle.out_len for r in (*g.waiting, *g.running)), default=0)  # type: ignore[attr-defined]


def _left(r: Req) -> int:
    """Tokens the request will still sample (true length)."""
    sr: SimRequest = r.handle  # type: ignore[assignment]
    return max(sr.out_len - r.output_tokens, 0)


def _fit(queue: Iterable[Req], view: StepView, budget: int) -> list[Req]:
    """Waiting requests from the front of ``queue`` while the token budget, max_num_seqs and the
    KV cache (reserving each running and admitted row's true remaining length) allow."""
    return prefill_candidate(queue, view, token_budget=budget, output_left=_left)[0]


class ClairvoyantResult(BaseModel):
    #: mean relQuery latency of the best arrangement, and which one
    mean: float
    arrangement: str
    #: every arrangement's mean
    means: dict[str, float]
    #: per relQuery latency of the best arrangement
    latencies: dict[str, float]


def clairvoyant(
    trace: PreparedTrace, cost: CostModel, limits: Limits, arrangements: Sequence[Arrangement] = ARRANGEMENTS
) -> ClairvoyantResult:
    """Run the clairvoyant policy under each arrangement in the simulator; keep the best mean."""
    means: dict[str, float] = {}
    best: tuple[float, str, dict[str, float]] | None = None
    for a in arrangements:
        if a.relserve is not None:
            policy: Policy = ClairvoyantRelServe(cost, PolicySettings().model_copy(update=dict(a.relserve)))
        else:
            policy = ClairvoyantPolicy(cost, a)
        engine = EngineSim(policy, cost, limits, trace.relqueries)
        engine.run()
        lat = {log.id: log.finish - log.arrival for log in engine.logs}  # type: ignore[operator]
        mean = sum(lat.values()) / len(lat) if lat else 0.0
        means[a.name] = mean
        if best is None or mean < best[0]:
            best = (mean, a.name, lat)
    assert best is not None, "give at least one arrangement"
    return ClairvoyantResult(mean=best[0], arrangement=best[1], means=means, latencies=best[2])


class Limit(BaseModel):
    """Both references for one trace, cost model and limits."""

    bound: LowerBound
    clairvoyant: ClairvoyantResult | None = None

    def ratios(self, mean_latency: float) -> tuple[float, float | None]:
        """A policy's mean over the bound's, and over the clairvoyant schedule's."""
        b = mean_latency / self.bound.mean if self.bound.mean > 0 else math.inf
        c = mean_latency / self.clairvoyant.mean if self.clairvoyant and self.clairvoyant.mean > 0 else None
        return b, c


def the_limit(trace: PreparedTrace, cost: CostModel, limits: Limits, *, with_clairvoyant: bool = True) -> Limit:
    """The provable bound and (unless ``with_clairvoyant`` is False) the best clairvoyant schedule."""
    return Limit(bound=lower_bound(trace, cost, limits), clairvoyant=clairvoyant(trace, cost, limits) if with_clairvoyant else None)
