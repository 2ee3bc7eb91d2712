"""Adaptive Batch Arranger (paper Section 4.3), with the candidates a real step can be.

Each step it builds the candidates and picks the one with the lowest projected change in total
relQuery latency:

* D: decode every running request;
* P: prefill the head relQuery's next batch (the paper's candidate) or, with ``fill_prefill``,
  that batch filled up with the next relQueries' requests in priority order (a step costs a
  fixed ``beta`` however little it holds, so a half-empty prefill step wastes it);
* M: with ``mixed_steps``, decode every running request *and* prefill a chunk of the waiting
  requests in priority order in one step (one fixed cost instead of two).

The paper's three cases decide between prefilling (P or M) and decoding (D):

* m- < m+  (a shorter relQuery waits)              -> prefill: preempt the running relQueries
* m- == m+ (the candidate's relQuery is the top one) -> prefill: keep its core phase going
* m- > m+  (transitional)                           -> prefill iff Delta < 0 (Eq. 15-17)

and the projected latency change decides between P and M (see ``mixed_vs_prefill`` and
``mixed_delta``). Priorities compare as (user priority class, tenant share, priority, arrival,
first-seen order), so equal priorities of two different relQueries still order one before the other.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace

from relserve.policy.batching import kv_headroom, prefill_candidate
from relserve.policy.cost_model import CostModel
from relserve.policy.relqueries import RelQueryGroup
from relserve.policy.settings import PolicySettings
from relserve.policy.types import StepKind, StepPlan, StepView


class Transitional(enum.Enum):
    ADAPTIVE = "adaptive"  # RelServe: decide by Delta
    PREFILL = "prefill"  # RelServe (PP) ablation: always prefill first
    DECODE = "decode"  # RelServe (DP) ablation: always decode first


def priority_key(g: RelQueryGroup, prios: Mapping[str, float]) -> tuple[int, float, float, float, int]:
    """The user's priority class first, then the tenant's share (see ``relqueries``), then the
    estimated remaining time, then arrival."""
    return (g.priority, g.share, prios[g.rel_id], g.arrival, g.seq)


def overlap_terms(
    cost: CostModel, cand: RelQueryGroup, cand_count: int, running: list[RelQueryGroup], num_waiting: float, gain: float
) -> tuple[float, float]:
    """Eq. 15's second term (the running relQueries decode a bigger batch while the candidate's
    requests overlap theirs) and Eq. 16 times ``gain`` (the fixed cost of the decode steps that
    merge, which every waiting relQuery gets back)."""
    ol_p = cand.output_len
    bigger = sum(cost.alpha_d * cand_count * min(g.remaining_output_len, ol_p) for g in running)
    longest_running = max((g.remaining_output_len for g in running), default=0)
    return bigger, gain * num_waiting * cost.beta_d * min(ol_p, longest_running)


def transitional_delta(
    cost: CostModel,
    cand: RelQueryGroup,
    cand_uncached: float,
    cand_count: int,
    running: list[RelQueryGroup],
    num_waiting_relqueries: float,
    *,
    cand_pairs: float = 0.0,
    gain: float = 1.0,
) -> tuple[float, float, float]:
    """Latency change of running the prefill candidate before the decode candidate.

    Returns (delta, delta_plus, delta_minus). delta_plus (Eq. 15) is what the running relQueries
    lose: they pause for the prefill, then decode a bigger batch while the candidate's requests
    overlap theirs. delta_minus (Eq. 16, times ``gain``) is what the waiting relQueries gain from
    decoding together earlier. The decision is delta = delta_plus - delta_minus, prefill when
    negative (the paper's Eq. 17 adds the two, which can never be negative; see MISSION.md).
    OL(R) of a running relQuery is its remaining decode steps, the part the candidate overlaps.
    """
    bigger, minus = overlap_terms(cost, cand, cand_count, running, num_waiting_relqueries, gain)
    plus = cost.prefill(cand_uncached, cand_pairs) * len(running) + bigger
    return plus - minus, plus, minus


@dataclass(frozen=True, slots=True)
class StepTimes:
    """Predicted durations of the three candidate steps this iteration."""

    decode: float  # L_D: every running request decodes
    prefill: float  # L_P: the prefill candidate alone
    mixed: float  # L_M: the decode candidate plus the mixed step's prefill chunk
    mixed_prefill: float  # L_P of that chunk alone


def mixed_vs_prefill(t: StepTimes, num_running: int, num_waiting: int, later: float = 0.0) -> float:
    """Latency change of M instead of P when the policy has chosen to prefill.

    With P, the running relQueries get their next token only after P and a decode step
    (``L_P + L_D``); with M they get it at ``L_M``. The waiting relQueries (the candidate's and
    those queued behind it) see the step end at ``L_M`` instead of ``L_P``. The step M saves
    (one fixed cost) also reaches the ``later`` relQueries expected to arrive before the
    backlog clears.
    """
    return num_waiting * (t.mixed - t.mixed_prefill) - (num_running + later) * (t.prefill + t.decode - t.mixed)


def mixed_delta(t: StepTimes, bigger: float, merged: float, num_running: int, num_waiting: float) -> float:
    """Latency change of M against decoding first (the transitional case).

    P delays each running relQuery by ``L_P``; M only by what its chunk adds to their decode step
    (``L_M - L_D``). M also saves the work of a step (``L_P + L_D - L_M``: one fixed cost), which
    every waiting relQuery gets back. ``bigger`` and ``merged`` are Eq. 15's second term and
    Eq. 16 for the chunk (``overlap_terms``). ``num_waiting`` may count expected arrivals too.
    """
    return num_running * (t.mixed - t.decode) + bigger - merged - num_waiting * (t.mixed_prefill + t.decode - t.mixed)


def decode_hold(
    cost: CostModel, running: list[RelQueryGroup], prios: Mapping[str, float], starved: set[str] = frozenset(), num_waiting: float = 0.0
) -> list[RelQueryGroup]:
    """The running relQueries that sit out a decode step so the ones ranked ahead decode faster.

    Holding relQueries H while the relQueries T ranked ahead decode alone, until the last of T
    is done (``S`` steps of ``d_T`` each): each held ``h`` (``s_h`` decode steps left) then
    finishes ``max(S - s_h, 0) * d_T + min(S, s_h) * beta_d`` later (it waits out the steps it
    would have shared, and pays the fixed cost again for its own), while each ``k`` of T saves
    the held requests' share of the steps they would have shared,
    ``min(s_k, s_h) * (alpha_d * n_h + gamma_d * c_h)``. The engine does ``min(S, s_h) * beta_d``
    more work for each held ``h``, which each of the ``num_waiting`` relQueries queued behind
    waits out too. Hold the H (a tail of the ranking) whose
    change is the most negative. On a CPU (a decode step's cost grows with its batch) a 3-row
    relQuery then no longer decodes in steps of a 100-row one (issue 28); on a GPU (``alpha_d``
    tiny) nothing is held. Running relQueries rank by the time their running requests still need
    to decode, plus the policy's priority; a starved relQuery is never held.
    """
    if len(running) < 2:
        return []

    def info(g: RelQueryGroup) -> tuple[int, float, int]:
        ctx = sum(r.prompt_tokens + r.output_tokens for r in g.running)
        return len(g.running), ctx, max(g.remaining_output_len, 1)

    data = {g.rel_id: info(g) for g in running}

    def rank(g: RelQueryGroup) -> tuple[int, float, float, float, int]:
        n, ctx, steps = data[g.rel_id]
        return (g.priority, g.share, prios.get(g.rel_id, 0.0) + cost.decode_run(n, ctx, steps), g.arrival, g.seq)

    ordered = sorted(running, key=rank)
    best, cut = 0.0, len(ordered)
    for k in range(len(ordered) - 1, 0, -1):  # hold ordered[k:]
        if ordered[k].rel_id in starved:
            break
        kept, held = ordered[:k], ordered[k:]
        n_t = sum(data[g.rel_id][0] for g in kept)
        c_t = sum(data[g.rel_id][1] for g in kept)
        s_t = max(data[g.rel_id][2] for g in kept)
        d_t = cost.decode(n_t, c_t)
        delta = 0.0
        for h in held:
            n_h, c_h, s_h = data[h.rel_id]
            per_step = cost.alpha_d * n_h + cost.gamma_d * c_h
            delta += max(s_t - s_h, 0) * d_t + (1 + num_waiting) * min(s_t, s_h) * cost.beta_d
            delta -= sum(min(data[g.rel_id][2], s_h) for g in kept) * per_step
        if delta < best:
            best, cut = delta, k
    return ordered[cut:]


#: waiting relQueries ``ride_along`` looks at past the head (a bound on its work per step)
RIDE_ALONG_SCAN = 64


def answers_in_its_prefill(g: RelQueryGroup) -> bool:
    """Whether every request of ``g`` waits and has one token left: it is done when its prefill
    step ends (label scoring, probes, one-token answers)."""
    return not g.running and all(r.remaining_output <= 1 for r in g.waiting)


def ride_along(
    cost: CostModel, view: StepView, followers: list[RelQueryGroup], batch: list, tokens: int, pairs: float,
    headroom: int | None = None,
) -> tuple[list, int, float]:
    """The prefill batch ``batch`` (``tokens`` uncached, ``pairs`` attention pairs) with whole
    relQueries of ``followers`` (in priority order) added that answer in this step
    (``answers_in_its_prefill``) and whose own prefill costs at most the fixed cost of a prefill
    step, while the step's limits hold.

    Each rider delays the step by at most one fixed cost and saves a step of its own, whose fixed
    cost and wait behind the head it would otherwise pay: for relQueries of equal size the sum
    of latencies breaks even exactly at that bound. It never decodes, so no decode step grows.
    """
    for g in followers[:RIDE_ALONG_SCAN]:
        if not answers_in_its_prefill(g):
            continue
        cand, t2, p2 = prefill_candidate(itertools.chain(batch, g.waiting), view, headroom=headroom)
        if len(cand) < len(batch) + len(g.waiting):
            continue  # not whole within the step's limits
        if cost.prefill(t2 - tokens, p2 - pairs) - cost.beta_p > cost.beta_p:
            continue
        batch, tokens, pairs = cand, t2, p2
    return batch, tokens, pairs


def decode_work(view: StepView) -> tuple[int, int]:
    """Requests of the decode candidate and the context they attend to."""
    return len(view.running), sum(r.prompt_tokens + r.output_tokens for r in view.running)


class ArrivalRate:
    """relQueries per second over the last few arrivals and the silence since."""

    def __init__(self, window: int = 16) -> None:
        self._times: deque[float] = deque(maxlen=window)
        self._seen: set[str] = set()

    def observe(self, groups: Mapping[str, RelQueryGroup]) -> None:
        for rel_id, g in groups.items():
            if rel_id not in self._seen:
                self._seen.add(rel_id)
                self._times.append(g.arrival)
        if len(self._seen) > 4 * len(groups) + 256:
            self._seen &= set(groups)

    def rate(self, now: float) -> float:
        if not self._times:
            return 0.0
        span = now - min(self._times)
        return len(self._times) / span if span > 0 else 0.0


class AdaptiveBatchArranger:
    def __init__(
        self,
        cost: CostModel,
        transitional: Transitional = Transitional.ADAPTIVE,
        settings: PolicySettings | None = None,
    ) -> None:
        self.cost = cost
        self.transitional = transitional
        self.settings = settings or PolicySettings()
        #: last transitional decision's figures, for tests and traces
        self.last_delta: tuple[float, float, float] | None = None
        self.arrivals = ArrivalRate()

    def expected_arrivals(self, now: float, prios: Mapping[str, float]) -> float:
        """relQueries expected to arrive before the work queued now is done (arrival rate times
        the queued work's estimated time), times ``backlog_weight``: under saturation a fixed
        cost saved now shortens their waits too."""
        weight = self.settings.backlog_weight
        if not weight:
            return 0.0
        return weight * self.arrivals.rate(now) * sum(prios.values())

    def _queue(self, waiting: list[RelQueryGroup]):
        """The prefill candidate's source: the head relQuery, or every waiting one in order."""
        if self.settings.fill_prefill:
            return itertools.chain.from_iterable(g.waiting for g in waiting)
        return waiting[0].waiting

    def _mixed_plan(
        self, view: StepView, waiting: list[RelQueryGroup], prios: dict[str, float], headroom: int | None = None
    ) -> tuple[StepPlan, int, float]:
        """M: decode every running request plus a chunk of waiting ones in priority order."""
        chunk = self.settings.mixed_chunk_tokens or view.limits.max_num_batched_tokens
        chunk = min(chunk, max(view.limits.max_num_batched_tokens - len(view.running), 0))
        # the running requests take one token each of the step's budget; the chunk the rest
        sub = StepView(view.now, view.waiting, view.running, replace(view.limits, max_num_batched_tokens=chunk), view.cached_tokens)
        batch, tokens, pairs = prefill_candidate(self._queue(waiting), sub, headroom=headroom) if chunk > 0 else ([], 0, 0.0)
        plan = StepPlan(StepKind.MIXED, admit=batch, token_budget=len(view.running) + chunk, priorities=prios)
        return plan, tokens, pairs

    def arrange(self, view: StepView, groups: dict[str, RelQueryGroup], prios: Mapping[str, float]) -> StepPlan:
        self.arrivals.observe(groups)
        waiting = sorted((g for g in groups.values() if g.waiting), key=lambda g: priority_key(g, prios))
        prios = dict(prios)
        # the KV blocks the running requests still need: the same for every candidate this step
        headroom = kv_headroom(view)
        if waiting:
            head = waiting[0]
            batch, uncached, pairs = prefill_candidate(self._queue(waiting), view, headroom=headroom)
            head_count = len(batch)  # riders answer in the step: they add nothing to decode
            if self.settings.fill_one_token and not self.settings.fill_prefill and batch:
                batch, uncached, pairs = ride_along(self.cost, view, waiting[1:], batch, uncached, pairs, headroom)
        else:
            head, batch, uncached, pairs, head_count = None, [], 0, 0.0, 0
        if not batch and not view.running:
            return StepPlan(StepKind.IDLE, priorities=prios, reason="idle")
        if not batch:
            return StepPlan(StepKind.DECODE, priorities=prios, reason="only-decode")
        prefill = StepPlan(StepKind.PREFILL, admit=batch, priorities=prios)
        if not view.running:
            prefill.reason = "only-prefill"
            return prefill

        running = [g for g in groups.values() if g.running]
        top = min(running, key=lambda g: priority_key(g, prios))
        m_plus, m_minus = priority_key(top, prios), priority_key(head, prios)
        others = [g for g in running if g is not head]
        mixed = times = None
        if self.settings.mixed_steps:
            mixed, m_tokens, m_pairs = self._mixed_plan(view, waiting, prios, headroom)
            n, ctx = decode_work(view)
            times = StepTimes(
                decode=self.cost.decode(n, ctx),
                prefill=self.cost.prefill(uncached, pairs),
                mixed=self.cost.mixed(m_tokens, n, m_pairs, ctx),
                mixed_prefill=self.cost.prefill(m_tokens, m_pairs),
            )
            if not mixed.admit:
                mixed = None

        later = self.expected_arrivals(view.now, prios) if mixed is not None else 0.0
        if m_minus < m_plus or head is top or self.transitional is Transitional.PREFILL:
            reason = "preemption" if m_minus < m_plus else "internal" if head is top else "transitional-prefill"
            if mixed is not None and mixed_vs_prefill(times, len(others), len(waiting), later) < 0:
                mixed.reason = f"{reason}-mixed"
                return mixed
            prefill.reason = reason
            return prefill
        if self.transitional is Transitional.DECODE:
            return StepPlan(StepKind.DECODE, priorities=prios, reason="transitional-decode")
        if (top.priority, top.share) < (head.priority, head.share) and top.share != head.share:
            # a tenant ranked ahead (less work in the engine per weight) is decoding: the prefill
            # of a tenant ranked behind it waits until its running relQueries finish
            return StepPlan(StepKind.DECODE, priorities=prios, reason="tenant-decode")
        self.last_delta = transitional_delta(
            self.cost, head, uncached, head_count, others, len(waiting),
            cand_pairs=pairs, gain=self.settings.transitional_gain,
        )
        best, choice = 0.0, StepPlan(StepKind.DECODE, priorities=prios, reason="transitional-decode")
        if self.last_delta[0] < best:
            best, choice = self.last_delta[0], prefill
            prefill.reason = "transitional-prefill"
        if mixed is not None:
            # the chunk may hold fewer requests than P: the overlap terms of the chunk itself
            w = len(waiting) + later
            bigger, merged = overlap_terms(self.cost, head, len(mixed.admit), others, w, self.settings.transitional_gain)
            d = mixed_delta(times, bigger, merged, len(others), w)
            if d < best:
                best, choice = d, mixed
                mixed.reason = "transitional-mixed"
        return choice

