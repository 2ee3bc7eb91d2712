"""A tenant's cap on the running batch while another tenant has work (issue 23).

Ranking a small tenant's rows first is not enough on hardware where a decode step costs in
proportion to its batch (CPUs): the small tenant's row still decodes in steps shared with up to
``max_num_seqs`` rows of a flooding tenant. So while another tenant has work (waiting or running,
or had some within ``PolicySettings.tenant_linger_s``), each tenant may hold at most its cap of
running requests:

* its requests beyond the cap are *held*: they keep their KV blocks but sit out the step (the
  most advanced ones keep running, so they finish and free their blocks first);
* it admits at most ``cap - running`` new requests, and prefills at most ``prefill_budget``
  uncached tokens a step beyond its first request (the step another tenant's new row arrives
  during is the one it waits out: 2.2 s for a full 1024-token prefill on these CPUs).

Alone, a tenant is never capped (work-conserving). The cap is the tenant's own
(``Req.max_running_shared``, from the server's tenants file) or, by default, derived from the
cost model: the largest batch whose decode step costs at most ``tenant_step_slowdown`` times a
step of one request. On a CPU that is a few dozen requests; on a GPU, where a decode step costs
about the same up to large batches, it is larger than ``max_num_seqs``, i.e. no cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from relserve.policy.cost_model import CostModel
from relserve.policy.settings import PolicySettings
from relserve.policy.types import Req, StepKind, StepPlan, StepView


def auto_cap(cost: CostModel, slowdown: float, max_num_seqs: int) -> int:
    """Largest ``n`` with ``decode(n + 1) <= slowdown * decode(1)``: the capped tenant's ``n``
    requests plus one of another tenant's cost that one at most ``slowdown`` times its step
    alone (context terms left out: they grow with both batches alike)."""
    if cost.alpha_d <= 0:
        return max_num_seqs
    n = math.floor((slowdown * (cost.alpha_d + cost.beta_d) - cost.beta_d) / cost.alpha_d + 1e-9) - 1
    return max(1, min(n, max_num_seqs))


def prefill_budget(cost: CostModel, slowdown: float | None) -> int | None:
    """Uncached tokens a capped tenant may prefill in one step: a prefill step costing at most
    ``slowdown`` times a decode step of one request (another tenant's new row may arrive during
    it and wait it out); None without a slowdown."""
    if slowdown is None or cost.alpha_p <= 0:
        return None
    return max(int((slowdown * cost.decode(1) - cost.beta_p) / cost.alpha_p), 1)


@dataclass(slots=True)
class CapDecision:
    """What the caps change in one step."""

    #: the view the policy plans from: the held requests left out of ``running``
    view: StepView
    #: running requests that sit out this step (host: hide them from the step)
    hold: list[Req] = field(default_factory=list)
    #: capped tenant -> how many more requests it may admit this step
    allowance: dict[str, int] = field(default_factory=dict)
    #: uncached prompt tokens a capped tenant may prefill this step (None: no bound), so that the
    #: step another tenant's new row waits behind stays short
    prefill_tokens: int | None = None


class TenantCaps:
    """Decides each step which tenants are capped, what they hold back and may admit."""

    def __init__(self, cost: CostModel, settings: PolicySettings) -> None:
        self.cost = cost
        self.settings = settings
        #: tenant -> host time it last had work (for ``tenant_linger_s``)
        self._seen: dict[str, float] = {}

    def cap_of(self, req: Req, max_num_seqs: int) -> int | None:
        if req.max_running_shared is not None:
            return req.max_running_shared
        slowdown = self.settings.tenant_step_slowdown
        return None if slowdown is None else auto_cap(self.cost, slowdown, max_num_seqs)

    def decide(self, view: StepView) -> CapDecision | None:
        """None when no tenant is capped this step (one tenant, or every one within its cap)."""
        now = view.now
        first: dict[str, Req] = {}
        for r in view.running:
            first.setdefault(r.tenant, r)
        for r in view.waiting:
            first.setdefault(r.tenant, r)
        for t in first:
            self._seen[t] = now
        linger = self.settings.tenant_linger_s
        active = {t for t, seen in self._seen.items() if now - seen <= linger} | set(first)
        if len(self._seen) > 2 * len(active) + 64:
            self._seen = {t: s for t, s in self._seen.items() if t in active}
        if len(active) < 2:
            return None
        running: dict[str, list[Req]] = {}
        for r in view.running:
            running.setdefault(r.tenant, []).append(r)
        hold: list[Req] = []
        allowance: dict[str, int] = {}
        for t, req in first.items():
            cap = self.cap_of(req, view.limits.max_num_seqs)
            if cap is None:
                continue
            mine = running.get(t, [])
            if len(mine) > cap:
                # the most advanced keep running: they finish and free their KV blocks first
                mine = sorted(mine, key=lambda r: (-r.output_tokens, -r.computed_tokens))
                hold.extend(mine[cap:])
            allowance[t] = max(cap - len(mine), 0)
        tokens = prefill_budget(self.cost, self.settings.tenant_step_slowdown)
        if not hold and tokens is None and all(
            n >= sum(1 for r in view.waiting if r.tenant == t) for t, n in allowance.items()
        ):
            return None
        held = {id(r) for r in hold}
        kept = [r for r in view.running if id(r) not in held]
        return CapDecision(replace(view, running=kept), hold, allowance, tokens)

    @staticmethod
    def trim(plan: StepPlan, decision: CapDecision) -> StepPlan:
        """The plan with each capped tenant's admissions cut to its allowance and the holds set;
        a prefill left with nothing to admit decodes (or idles) instead."""
        left = dict(decision.allowance)
        budget = decision.prefill_tokens
        spent: dict[str, int] = {}
        cached = decision.view.cached_tokens
        admit: list[Req] = []
        for r in plan.admit:
            n = left.get(r.tenant)
            if n is None:
                admit.append(r)
                continue
            if n <= 0:
                continue
            if budget is not None:
                u = max(r.prompt_tokens - max(cached(r), r.computed_tokens), 0)
                used = spent.get(r.tenant)
                if used is not None and used + u > budget:  # its first request always goes
                    continue
                spent[r.tenant] = (used or 0) + u
            left[r.tenant] = n - 1
            admit.append(r)
        plan.admit = admit
        plan.hold = plan.hold + decision.hold  # the policy's own holds come from the kept requests
        if plan.kind is StepKind.PREFILL and not admit:
            plan.kind = StepKind.DECODE if decision.view.running else StepKind.IDLE
            plan.reason = f"{plan.reason}-tenant-cap"
        return plan
