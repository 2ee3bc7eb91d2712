"""Dynamic Priority Updater (paper Section 4.2).

Every step, each relQuery's priority is its estimated remaining execution time (PEM over the
batch decomposition of its unprefilled requests; once every request of it runs, the decode they
still need, ``count_admitted_decode``), with three cheapenings from the paper:
uncached tokens from a sampled miss ratio (Eq. 11), reuse of last step's value while the relQuery
only waits (Eq. 12), and starvation prevention by unit waiting time (Eq. 13).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from relserve.policy.cost_model import CostModel
from relserve.policy.decompose import batch_decompose
from relserve.policy.relqueries import RelQueryGroup
from relserve.policy.settings import PolicySettings
from relserve.policy.types import Req, StepView


@dataclass(slots=True)
class _Memo:
    priority: float
    all_waiting: bool
    num_waiting: int


class DynamicPriorityUpdater:
    def __init__(self, cost: CostModel, settings: PolicySettings) -> None:
        self.cost = cost
        self.settings = settings
        self._rng = random.Random(settings.seed)
        self._memo: dict[str, _Memo] = {}
        #: counters for tests and reports
        self.num_estimates = 0
        self.num_reused = 0
        self.num_starved = 0
        #: rel_ids given priority 0 by starvation prevention in the last step
        self.starved: set[str] = set()

    def miss_ratio(self, group: RelQueryGroup, view: StepView) -> float:
        """Eq. 11: uncached share of prompt tokens over a random sample of waiting requests."""
        reqs = group.waiting
        k = self.settings.cache_sample_size
        sample = reqs if len(reqs) <= k else self._rng.sample(reqs, k)
        total = sum(r.prompt_tokens for r in sample)
        if total == 0:
            return 1.0
        uncached = sum(max(r.prompt_tokens - view.cached_tokens(r), 0) for r in sample)
        return uncached / total

    def estimate(self, group: RelQueryGroup, view: StepView) -> float:
        """PEM(R_t), Eq. 10, with utok* from Eq. 11."""
        self.num_estimates += 1
        prio = 0.0
        if group.waiting:
            ratio = self.miss_ratio(group, view)
            prompts = [r.prompt_tokens for r in group.waiting]
            utoks = [(p - r.computed_tokens) * ratio for p, r in zip(prompts, group.waiting)]
            lim = view.limits
            dec = batch_decompose(
                utoks,
                group.output_len,
                cap=lim.kv_capacity_tokens,
                max_num_seqs=lim.max_num_seqs,
                max_num_batched_tokens=lim.max_num_batched_tokens,
                prompts=prompts,
            )
            prio = dec.duration(self.cost)
        if group.running and (self.settings.count_running_decode or (self.settings.count_admitted_decode and not group.waiting)):
            context = sum(r.prompt_tokens + r.output_tokens for r in group.running)
            prio += self.cost.decode_run(len(group.running), context, group.remaining_output_len)
        return prio

    def update(self, groups: dict[str, RelQueryGroup], view: StepView) -> dict[str, float]:
        prios: dict[str, float] = {}
        memo: dict[str, _Memo] = {}
        threshold = self.settings.starvation_threshold
        self.starved = set()
        for rel_id, g in groups.items():
            all_waiting = not g.running
            prev = self._memo.get(rel_id)
            if (
                self.settings.reuse_priorities
                and prev is not None
                and prev.all_waiting
                and all_waiting
                and prev.num_waiting == len(g.waiting)
            ):
                prio = prev.priority
                self.num_reused += 1
            else:
                prio = self.estimate(g, view)
            memo[rel_id] = _Memo(prio, all_waiting, len(g.waiting))
            if threshold is not None and g.waiting and (view.now - g.arrival) / max(g.size, 1) > threshold:
                prio = 0.0
                self.starved.add(rel_id)
            elif g.deadline is not None and view.now + prio >= g.deadline:
                # Its deadline is at risk: run it now, as a starved relQuery would.
                prio = 0.0
                self.starved.add(rel_id)
            prios[rel_id] = prio
        self.num_starved += len(self.starved)
        self._memo = memo
        return prios


def uncached_tokens(req: Req, view: StepView) -> int:
    """Exact uncached prompt tokens of one waiting request (a prefix-cache lookup)."""
    return max(req.prompt_tokens - max(view.cached_tokens(req), req.computed_tokens), 0)
