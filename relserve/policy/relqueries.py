"""Grouping a step's requests by relQuery: the policy's view of "R_t" for every relQuery.

When several tenants share the engine (the HTTP server), each relQuery also carries its
tenant's *share*: the work the tenant has in the engine (tokens still to prefill or decode,
waiting and running) divided by its weight. Policies rank the user's priority class first, then
the share, then their own priority: a tenant with less work in the engine per unit of weight goes
first, so one tenant's flood cannot starve another's small relQueries (max-min fairness across
tenants, RelServe's ranking within each). With one tenant every share is 0 and nothing changes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from relserve.policy.types import Req, StepView


@dataclass(slots=True)
class RelQueryGroup:
    """The unfinished requests of one relQuery at this step (R_t)."""

    rel_id: str
    arrival: float
    size: int  # req(R_0)
    #: order in which the policy first saw the relQuery; breaks priority ties
    seq: int
    waiting: list[Req] = field(default_factory=list)
    running: list[Req] = field(default_factory=list)
    #: user hints carried by its requests: priority class (``Req.priority``) and deadline
    priority: int = 0
    deadline: float | None = None
    #: OL(R): the longest output any of its requests may produce
    output_len: int = 0
    #: decode steps its running requests may still need
    remaining_output_len: int = 0
    #: sum over its running requests of the decode tokens they may still produce
    remaining_output_total: int = 0
    #: its tenant's work in the engine per unit of weight (0 with a single tenant)
    share: float = 0.0


def tenant_shares(reqs: Iterable[Req]) -> dict[str, float]:
    """Each tenant's work left (tokens to prefill and decode) divided by its weight; empty when
    the requests belong to one tenant (or none), so a single tenant ranks as before."""
    load: dict[str, float] = {}
    weight: dict[str, float] = {}
    for r in reqs:
        left = max(r.prompt_tokens - r.computed_tokens, 0) + max(r.max_tokens - r.output_tokens, 0)
        load[r.tenant] = load.get(r.tenant, 0.0) + left
        weight[r.tenant] = r.weight
    if len(load) < 2:
        return {}
    return {t: w / max(weight[t], 1e-9) for t, w in load.items()}


class RelQueryTracker:
    """Groups each step's requests by relQuery and remembers the order relQueries appeared in.

    A relQuery's answer length is ``max_tokens`` unless one of two estimates is on:

    * ``learn_output``: from its own finished rows (a relQuery asking for up to 256 tokens whose
      rows answer in 5 is short, not long): the output length of its waiting rows is the longest
      answer seen so far (finished, or still being produced), and a running row has at least one
      token left. Rows that finish first are the short ones, so the estimate errs low at first
      and rises as longer answers come in.
    * ``output_history``: from the earlier relQueries of the same call (``Req.call_key``: the
      same template and options) of the same tenant (another tenant's answers must not move
      this tenant's priority): the longest answer of each of the call's last
      ``HISTORY_RELQUERIES`` finished relQueries, their maximum; raised by any longer answer the
      relQuery itself has produced or is producing. A relQuery of a call not seen finish yet
      keeps ``max_tokens`` (or ``learn_output``'s estimate). Whole finished relQueries are what
      it learns from, so it does not share the first estimate's low start.

    Neither ever exceeds ``max_tokens``. A cancelled relQuery's rows count as answers of the
    length they had.
    """

    #: finished relQueries per call whose longest answers ``output_history`` keeps
    HISTORY_RELQUERIES = 8
    #: calls it keeps a history for (the oldest is forgotten past this)
    HISTORY_CALLS = 1024

    def __init__(self, learn_output: bool = False, output_history: bool = False) -> None:
        self._seq: dict[str, int] = {}
        self._next = 0
        self.learn_output = learn_output
        self.output_history = output_history
        #: requests seen last step and the answer tokens they had then (to notice the ones that
        #: finished since; hosts update ``Req`` at different times, so the figure is copied)
        self._live: dict[str, tuple[str, int]] = {}
        #: rel_id -> longest answer among its finished rows
        self._longest: dict[str, int] = {}
        #: rel_id -> its (tenant, call), for the relQueries of the last step that have a call
        self._call_of: dict[str, tuple[str, str]] = {}
        #: (tenant, call_key) -> the longest answer of each of its last finished relQueries
        self._history: dict[tuple[str, str], list[int]] = {}

    def _learn(self, view: StepView) -> None:
        live = {r.req_id: (r.rel_id, r.output_tokens) for r in view.waiting}
        live.update((r.req_id, (r.rel_id, r.output_tokens)) for r in view.running)
        longest = self._longest
        for req_id, (rel_id, seen) in self._live.items():
            if req_id not in live:
                # gone since last step: it finished in that step, which gave it one more token
                # (a waiting row gone was admitted and answered in one token)
                n = seen + 1
                if n > longest.get(rel_id, 0):
                    longest[rel_id] = n
        self._live = live

    def _remember_finished(self, groups: dict[str, RelQueryGroup], view: StepView) -> None:
        """Add the relQueries that were there last step and are gone now to their call's history."""
        for rel_id, call in self._call_of.items():
            if rel_id not in groups and rel_id in self._longest:
                past = self._history.pop(call, [])  # re-inserted: the dict keeps calls by last use
                past.append(self._longest[rel_id])
                self._history[call] = past[-self.HISTORY_RELQUERIES:]
                if len(self._history) > self.HISTORY_CALLS:
                    self._history.pop(next(iter(self._history)))
        calls = {}
        for queue in (view.waiting, view.running):
            for req in queue:
                if req.call_key:
                    calls[req.rel_id] = (req.tenant, req.call_key)
        self._call_of = calls

    def output_estimate(self, rel_id: str) -> int | None:
        """The learned answer length of the relQuery's rows, None before any row finished."""
        return self._longest.get(rel_id)

    def call_estimate(self, call_key: str, tenant: str = "") -> int | None:
        """The answer length the call's earlier relQueries of ``tenant`` give (None: none finished yet)."""
        past = self._history.get((tenant, call_key))
        return max(past) if past else None

    def _new_group(self, req: Req) -> RelQueryGroup:
        seq = self._seq.get(req.rel_id)
        if seq is None:
            seq = self._seq[req.rel_id] = self._next
            self._next += 1
        return RelQueryGroup(req.rel_id, req.arrival, req.rel_size, seq, priority=req.priority, deadline=req.deadline)

    def _estimates(self, view: StepView) -> dict[str, int]:
        """rel_id -> its estimated answer length, for the relQueries that have one."""
        self._learn(view)
        longest = self._longest
        learned: dict[str, int] = {}
        if self.learn_output:
            for req in view.running:  # answers still being produced count as seen lengths
                if req.output_tokens > longest.get(req.rel_id, 0) and req.rel_id in longest:
                    longest[req.rel_id] = req.output_tokens
            learned = dict(longest) if self.output_history else longest  # a copy only to add to
        if self.output_history:
            for queue in (view.waiting, view.running):
                for req in queue:
                    past = self._history.get((req.tenant, req.call_key)) if req.call_key else None
                    if not past:
                        continue
                    est = max(max(past), longest.get(req.rel_id, 0), req.output_tokens)
                    if est > learned.get(req.rel_id, 0):
                        learned[req.rel_id] = est
        return learned

    def group(self, view: StepView) -> dict[str, RelQueryGroup]:
        groups: dict[str, RelQueryGroup] = {}
        get = groups.get
        learned = self._estimates(view) if self.learn_output or self.output_history else {}
        # every row joins its relQuery's group and bounds its answer length; a running row also
        # counts the output it has still to produce. A queue holds a relQuery's rows next to each
        # other, so the last group is tried first (this runs for every request every step).
        g = None
        for req in view.waiting:
            rel_id = req.rel_id
            if g is None or g.rel_id != rel_id:
                g = get(rel_id)
                if g is None:
                    g = groups[rel_id] = self._new_group(req)
            out = req.max_tokens
            if learned:
                out = min(out, learned.get(rel_id, out))
            if out > g.output_len:
                g.output_len = out
            g.waiting.append(req)
        g = None
        for req in view.running:
            rel_id = req.rel_id
            if g is None or g.rel_id != rel_id:
                g = get(rel_id)
                if g is None:
                    g = groups[rel_id] = self._new_group(req)
            est = learned.get(rel_id) if learned else None
            out = req.max_tokens if est is None else min(req.max_tokens, est)
            if out > g.output_len:
                g.output_len = out
            g.running.append(req)
            left = req.max_tokens - req.output_tokens
            if est is not None and left > 0:
                left = max(min(est, req.max_tokens) - req.output_tokens, 1)
            if left > 0:
                g.remaining_output_total += left
                if left > g.remaining_output_len:
                    g.remaining_output_len = left
        # one tenant (or none): every share is 0, so the per-tenant loads are not counted
        tenants = {r.tenant for r in view.waiting}
        tenants.update({r.tenant for r in view.running})
        shares = tenant_shares(list(view.waiting) + list(view.running)) if len(tenants) > 1 else {}
        if shares:
            for g in groups.values():
                req = g.waiting[0] if g.waiting else g.running[0]
                g.share = shares.get(req.tenant, 0.0)
        if self.output_history:
            self._remember_finished(groups, view)
        # Forget relQueries that have finished, so the table stays as small as the engine's queues.
        if len(self._seq) > 2 * len(groups) + 64:
            self._seq = {k: v for k, v in self._seq.items() if k in groups}
        if len(self._longest) > 2 * len(groups) + 64:
            self._longest = {k: v for k, v in self._longest.items() if k in groups}
        return groups

    def seq(self, rel_id: str) -> int:
        return self._seq.get(rel_id, -1)
