"""The scheduling policies: RelServe, its ablations, and the paper's baselines."""

from __future__ import annotations

import enum
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import ClassVar

from relserve.policy.aba import AdaptiveBatchArranger, Transitional, decode_hold
from relserve.policy.batching import fill_prefill_batch
from relserve.policy.cost_model import CostModel
from relserve.policy.dpu import DynamicPriorityUpdater
from relserve.policy.relqueries import RelQueryGroup, RelQueryTracker
from relserve.policy.settings import PolicySettings
from relserve.policy.tenant_cap import TenantCaps
from relserve.policy.types import StepKind, StepPlan, StepView


class PolicyName(enum.StrEnum):
    """Every scheduling policy, by the name users give it (``Engine(policy=...)``, the CLI)."""

    VLLM = "vllm"
    FCFS = "fcfs"
    SARATHI = "sarathi"
    SP = "sp"
    RELSERVE = "relserve"
    RELSERVE_PP = "relserve-pp"
    RELSERVE_DP = "relserve-dp"


class Policy(ABC):
    """Decides each step's batch from the host's queues.

    A host (the vLLM scheduler plug-in or the simulator) calls ``schedule`` once per step and
    applies the plan it returns; the policy keeps whatever state it needs between steps.
    """

    name: ClassVar[PolicyName]
    #: whether the policy runs through relserve's scheduler plug-in (False: vLLM's own scheduler)
    uses_plugin: ClassVar[bool] = True

    def __init__(self, cost: CostModel | None = None, settings: PolicySettings | None = None) -> None:
        self.cost = cost or CostModel()
        self.settings = settings or PolicySettings()
        self.tracker = RelQueryTracker(self.settings.learn_output, self.settings.output_history)
        self.tenant_caps = TenantCaps(self.cost, self.settings)
        #: seconds spent deciding, split as the paper's Table 6 does
        self.dpu_seconds = 0.0
        self.aba_seconds = 0.0
        self.steps = 0

    def schedule(self, view: StepView) -> StepPlan:
        """Plan one step.

        Args:
            view: the host's waiting and running requests, limits and prefix-cache lookup at the
                start of the step.

        Returns:
            The step's plan: what to admit and whether to prefill, decode, mix or idle.
        """
        self.steps += 1
        if not self.uses_plugin:
            return self._schedule(view)
        caps = self.tenant_caps.decide(view)
        if caps is None:
            return self._schedule(view)
        return self.tenant_caps.trim(self._schedule(caps.view), caps)

    @abstractmethod
    def _schedule(self, view: StepView) -> StepPlan:
        """The policy's own decision (``schedule`` counts the step)."""

    def _charge(self, t0: float, t1: float) -> None:
        """Book the decision time since ``t0`` as the paper's Table 6 splits it: the priority
        update (DPU) until ``t1``, the batch arrangement (ABA) from then to now."""
        t2 = time.perf_counter()
        self.dpu_seconds += t1 - t0
        self.aba_seconds += t2 - t1

    @staticmethod
    def _mixed(view: StepView, token_budget: int | None) -> StepPlan:
        """vLLM's continuous batching: every waiting request may be admitted, within ``token_budget``."""
        if not view.waiting and not view.running:
            return StepPlan(StepKind.IDLE, reason="idle")
        return StepPlan(StepKind.MIXED, admit=list(view.waiting), token_budget=token_budget, reason="mixed")

    @property
    def overhead_seconds(self) -> float:
        return self.dpu_seconds + self.aba_seconds


class FCFSPolicy(Policy):
    """The paper's vLLM baseline: arrival order, each step a prefill or a decode, prefill first."""

    name = PolicyName.FCFS

    def _schedule(self, view: StepView) -> StepPlan:
        t0 = time.perf_counter()
        batch, _ = fill_prefill_batch(view.waiting, view)
        plan = self._prefill_first(view, batch)
        self._charge(t0, t0)  # no priorities to update: all of it is arranging the batch
        return plan

    @staticmethod
    def _prefill_first(view: StepView, batch, priorities: Mapping[str, float] | None = None) -> StepPlan:
        prios = dict(priorities or {})
        if batch:
            return StepPlan(StepKind.PREFILL, admit=batch, priorities=prios, reason="prefill-first")
        if view.running:
            return StepPlan(StepKind.DECODE, priorities=prios, reason="decode")
        return StepPlan(StepKind.IDLE, priorities=prios, reason="idle")


class StaticPriorityPolicy(FCFSPolicy):
    """vLLM-SP: a priority fixed at arrival (Eq. 6-7), prefill first, batches across relQueries."""

    name = PolicyName.SP

    def __init__(self, cost: CostModel | None = None, settings: PolicySettings | None = None) -> None:
        super().__init__(cost, settings)
        self._static: dict[str, float] = {}

    def request_priority(self, prompt_tokens: int, max_tokens: int) -> float:
        """Eq. 6 with linear L1, L2: prefill time of the prompt plus decode time of the output alone."""
        return self.cost.alpha_p * prompt_tokens + (self.cost.alpha_d + self.cost.beta_d) * max_tokens

    def _schedule(self, view: StepView) -> StepPlan:
        t0 = time.perf_counter()
        groups = self.tracker.group(view)
        for g in groups.values():
            if g.rel_id not in self._static:
                # Eq. 7: the sum over the relQuery's requests; scaled to its announced size
                # in case the host has not seen all of them yet.
                reqs = g.waiting + g.running
                mean = sum(self.request_priority(r.prompt_tokens, r.max_tokens) for r in reqs) / len(reqs)
                self._static[g.rel_id] = mean * g.size
        if len(self._static) > 4 * len(groups) + 256:
            self._static = {k: v for k, v in self._static.items() if k in groups}
        prios = {rid: self._static[rid] for rid in groups}
        t1 = time.perf_counter()
        shares = {g.rel_id: g.share for g in groups.values()}
        queue = sorted(view.waiting, key=lambda r: (r.priority, shares[r.rel_id], prios[r.rel_id], r.arrival, self.tracker.seq(r.rel_id)))
        batch, _ = fill_prefill_batch(queue, view)
        plan = self._prefill_first(view, batch, prios)
        self._charge(t0, t1)
        return plan


class SarathiPolicy(Policy):
    """Sarathi-Serve: FCFS, chunked prefill mixed into decode steps within a small token budget."""

    name = PolicyName.SARATHI

    def _schedule(self, view: StepView) -> StepPlan:
        return self._mixed(view, self.settings.sarathi_chunk_tokens)


class StockVLLMPolicy(Policy):
    """Stock vLLM v1 as installed: FCFS continuous batching with its default token budget.

    The engine runs vLLM's own scheduler for this policy; the simulator uses this description.
    """

    name = PolicyName.VLLM
    uses_plugin = False

    def _schedule(self, view: StepView) -> StepPlan:
        return self._mixed(view, None)  # None: the host's own token budget


class RelServePolicy(Policy):
    """RelServe: Dynamic Priority Updater + Adaptive Batch Arranger + starvation prevention."""

    name = PolicyName.RELSERVE
    transitional = Transitional.ADAPTIVE

    def __init__(self, cost: CostModel | None = None, settings: PolicySettings | None = None) -> None:
        super().__init__(cost, settings)
        self.dpu = DynamicPriorityUpdater(self.cost, self.settings)
        self.aba = AdaptiveBatchArranger(self.cost, self.transitional, self.settings)

    def _schedule(self, view: StepView) -> StepPlan:
        t0 = time.perf_counter()
        groups: dict[str, RelQueryGroup] = self.tracker.group(view)
        prios = self.dpu.update(groups, view)
        t1 = time.perf_counter()
        plan = self.aba.arrange(view, groups, prios)
        if plan.kind is StepKind.DECODE and self.settings.decode_subset:
            running = [g for g in groups.values() if g.running]
            # a held relQuery's extra decode steps delay the waiting relQueries, and (with
            # ``backlog_weight``) those expected to arrive before the queued work is done
            waiting = sum(1 for g in groups.values() if g.waiting) + self.aba.expected_arrivals(view.now, prios)
            held = decode_hold(self.cost, running, prios, self.dpu.starved, waiting)
            plan.hold = [r for g in held for r in g.running]
            if plan.hold:
                plan.reason = f"{plan.reason}-subset"
        self._charge(t0, t1)
        return plan


class RelServePrefillFirst(RelServePolicy):
    """Ablation RelServe (PP): the transitional case always prefills first."""

    name = PolicyName.RELSERVE_PP
    transitional = Transitional.PREFILL


class RelServeDecodeFirst(RelServePolicy):
    """Ablation RelServe (DP): the transitional case always decodes first."""

    name = PolicyName.RELSERVE_DP
    transitional = Transitional.DECODE
