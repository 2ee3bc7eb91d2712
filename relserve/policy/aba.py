"""Adaptive Batch Arranger (paper Section 4.3).

Each step it builds a decode candidate (every running request) and a prefill candidate (requests
of the first relQuery in priority order, within the batch and KV limits), then picks one:

* m- < m+  (a shorter relQuery waits)              -> prefill: preempt the running relQueries
* m- == m+ (the candidate's relQuery is the top one) -> prefill: keep its core phase going
* m- > m+  (transitional)                           -> prefill iff Delta < 0 (Eq. 15-17)

Priorities compare as (user priority class, priority, arrival, first-seen order), so equal
priorities of two different relQueries still order one before the other.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from relserve.policy.batching import fill_prefill_batch
from relserve.policy.cost_model import CostModel
from relserve.policy.relqueries import RelQueryGroup
from relserve.policy.types import StepKind, StepPlan, StepView


class Transitional(enum.Enum):
    ADAPTIVE = "adaptive"  # RelServe: decide by Delta
    PREFILL = "prefill"  # RelServe (PP) ablation: always prefill first
    DECODE = "decode"  # RelServe (DP) ablation: always decode first


def priority_key(g: RelQueryGroup, prios: Mapping[str, float]) -> tuple[int, float, float, int]:
    """The user's priority class first, then the estimated remaining time, then arrival."""
    return (g.hint, prios[g.rel_id], g.arrival, g.seq)


def transitional_delta(
    cost: CostModel,
    cand: RelQueryGroup,
    cand_uncached: float,
    cand_count: int,
    running: list[RelQueryGroup],
    num_waiting_relqueries: int,
) -> tuple[float, float, float]:
    """Latency change of running the prefill candidate before the decode candidate.

    Returns (delta, delta_plus, delta_minus). delta_plus (Eq. 15) is what the running relQueries
    lose: they pause for the prefill, then decode a bigger batch while the candidate's requests
    overlap theirs. delta_minus (Eq. 16) is what the waiting relQueries gain from decoding
    together earlier. The decision is delta = delta_plus - delta_minus, prefill when negative
    (the paper's Eq. 17 adds the two, which can never be negative; see MISSION.md).
    OL(R) of a running relQuery is its remaining decode steps, the part the candidate overlaps.
    """
    ol_p = cand.output_len
    plus = cost.prefill(cand_uncached) * len(running)
    plus += sum(cost.alpha_d * cand_count * min(g.remaining_output_len, ol_p) for g in running)
    longest_running = max((g.remaining_output_len for g in running), default=0)
    minus = num_waiting_relqueries * cost.beta_d * min(ol_p, longest_running)
    return plus - minus, plus, minus


class AdaptiveBatchArranger:
    def __init__(self, cost: CostModel, transitional: Transitional = Transitional.ADAPTIVE) -> None:
        self.cost = cost
        self.transitional = transitional
        #: last transitional decision's figures, for tests and traces
        self.last_delta: tuple[float, float, float] | None = None

    def arrange(self, view: StepView, groups: dict[str, RelQueryGroup], prios: Mapping[str, float]) -> StepPlan:
        waiting = sorted((g for g in groups.values() if g.waiting), key=lambda g: priority_key(g, prios))
        prios = dict(prios)
        if waiting:
            head = waiting[0]
            batch, uncached = fill_prefill_batch(head.waiting, view)
        else:
            head, batch, uncached = None, [], 0
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
        if m_minus < m_plus:
            prefill.reason = "preemption"
            return prefill
        if head is top:
            prefill.reason = "internal"
            return prefill
        if self.transitional is Transitional.PREFILL:
            prefill.reason = "transitional-prefill"
            return prefill
        if self.transitional is Transitional.DECODE:
            return StepPlan(StepKind.DECODE, priorities=prios, reason="transitional-decode")
        others = [g for g in running if g is not head]
        self.last_delta = transitional_delta(self.cost, head, uncached, len(batch), others, len(waiting))
        if self.last_delta[0] < 0:
            prefill.reason = "transitional-prefill"
            return prefill
        return StepPlan(StepKind.DECODE, priorities=prios, reason="transitional-decode")
