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

    @property
    def output_len(self) -> int:
        """OL(R): the longest output any of its requests may produce."""
        return max(r.max_tokens for r in (self.waiting or self.running))

    @property
    def remaining_output_len(self) -> int:
        """Decode steps its running requests may still need."""
        return max((r.remaining_output for r in self.running), default=0)


class RelQueryTracker:
    """Groups each step's requests by relQuery and remembers the order relQueries appeared in."""

    def __init__(self) -> None:
        self._seq: dict[str, int] = {}
        self._next = 0

    def group(self, view: StepView) -> dict[str, RelQueryGroup]:
        groups: dict[str, RelQueryGroup] = {}
        for queue_name, queue in (("waiting", view.waiting), ("running", view.running)):
            for req in queue:
                g = groups.get(req.rel_id)
                if g is None:
                    seq = self._seq.get(req.rel_id)
                    if seq is None:
                        seq = self._seq[req.rel_id] = self._next
                        self._next += 1
                    g = groups[req.rel_id] = RelQueryGroup(
                        req.rel_id, req.arrival, req.rel_size, seq, hint=req.hint, deadline=req.deadline
                    )
                getattr(g, queue_name).append(req)
        # Forget relQueries that have finished, so the table stays as small as the engine's queues.
        if len(self._seq) > 2 * len(groups) + 64:
            self._seq = {k: v for k, v in self._seq.items() if k in groups}
        return groups

    def seq(self, rel_id: str) -> int:
        return self._seq.get(rel_id, -1)
