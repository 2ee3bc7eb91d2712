"""Grouping a step's requests by relQuery: the policy's view of "R_t" for every relQuery."""

from __future__ import annotations

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
    #: user hints carried by its requests: priority class and deadline
    hint: int = 0
    deadline: float | None = None
    #: OL(R): the longest output any of its requests may produce
    output_len: int = 0
    #: decode steps its running requests may still need
    remaining_output_len: int = 0
    #: sum over its running requests of the decode tokens they may still produce
    remaining_output_total: int = 0


class RelQueryTracker:
    """Groups each step's requests by relQuery and remembers the order relQueries appeared in."""

    def __init__(self) -> None:
        self._seq: dict[str, int] = {}
        self._next = 0

    def _new_group(self, req: Req) -> RelQueryGroup:
        seq = self._seq.get(req.rel_id)
        if seq is None:
            seq = self._seq[req.rel_id] = self._next
            self._next += 1
        return RelQueryGroup(req.rel_id, req.arrival, req.rel_size, seq, hint=req.hint, deadline=req.deadline)

    def group(self, view: StepView) -> dict[str, RelQueryGroup]:
        groups: dict[str, RelQueryGroup] = {}
        get = groups.get
        for req in view.waiting:
            g = get(req.rel_id)
            if g is None:
                g = groups[req.rel_id] = self._new_group(req)
            g.waiting.append(req)
            if req.max_tokens > g.output_len:
                g.output_len = req.max_tokens
        for req in view.running:
            g = get(req.rel_id)
            if g is None:
                g = groups[req.rel_id] = self._new_group(req)
            g.running.append(req)
            left = req.max_tokens - req.output_tokens
            if left > 0:
                g.remaining_output_total += left
                if left > g.remaining_output_len:
                    g.remaining_output_len = left
            if req.max_tokens > g.output_len:
                g.output_len = req.max_tokens
        # Forget relQueries that have finished, so the table stays as small as the engine's queues.
        if len(self._seq) > 2 * len(groups) + 64:
            self._seq = {k: v for k, v in self._seq.items() if k in groups}
        return groups

    def seq(self, rel_id: str) -> int:
        return self._seq.get(rel_id, -1)
