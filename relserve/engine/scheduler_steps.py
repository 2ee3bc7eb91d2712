"""``SchedulerStep``: one step of the scheduler plug-in as the engine reports it, per relQuery.

The plug-in logs every step it scheduled (``RelServeScheduler._per_relquery``): which relQueries
it prefilled, decoded, held out or preempted, which waited, and which starvation prevention (or a
deadline at risk) raised to the front. Read in order (``Engine.scheduler_steps``), these show the
policy's decisions by the order of events, whatever the machine's speed: a relQuery ranked first
is prefilled in an earlier step than one ranked behind it, a held relQuery sits out steps in
which another decodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from relserve.engine.step_record import StepRecord


@dataclass(frozen=True, slots=True)
class SchedulerStep:
    #: the step's number in the engine's life (increasing; never reset)
    seq: int
    #: prefill, decode, mixed
    kind: str
    #: the policy's case (``StepPlan.reason``), e.g. "preemption", "only-decode-subset"
    reason: str
    #: rel_id -> its requests that computed prompt tokens in this step
    prefilled: Mapping[str, int] = field(default_factory=dict)
    #: rel_id -> its requests that decoded a token in this step
    decoded: Mapping[str, int] = field(default_factory=dict)
    #: rel_id -> its running requests that sat out this step, keeping their KV blocks
    held: Mapping[str, int] = field(default_factory=dict)
    #: rel_id -> its requests vLLM preempted (KV blocks freed) in this step
    preempted: Mapping[str, int] = field(default_factory=dict)
    #: rel_id -> its requests waiting (not admitted) when the step was planned
    waiting: Mapping[str, int] = field(default_factory=dict)
    #: relQueries the policy put first this step because they waited too long for their size
    #: (starvation prevention) or their deadline was at risk
    starved: tuple[str, ...] = ()

    @classmethod
    def from_record(cls, step: StepRecord) -> SchedulerStep:
        """A step from the plug-in's step log (the ``stats`` RPC's ``step_log``)."""
        rel = step.relqueries
        return cls(
            seq=step.seq,
            kind=step.kind,
            reason=step.reason,
            prefilled=dict(rel.prefilled),
            decoded=dict(rel.decoded),
            held=dict(rel.held),
            preempted=dict(rel.preempted),
            waiting=dict(rel.waiting),
            starved=tuple(rel.starved),
        )

    def ran(self, rel_id: str) -> bool:
        """Whether any request of ``rel_id`` computed in this step (prefill or decode)."""
        return rel_id in self.prefilled or rel_id in self.decoded


def first_step(steps: Iterable[SchedulerStep], rel_id: str) -> int | None:
    """``seq`` of the first step that computed for ``rel_id`` (None: none did)."""
    return next((s.seq for s in steps if s.ran(rel_id)), None)


def last_step(steps: Iterable[SchedulerStep], rel_id: str) -> int | None:
    """``seq`` of the last step that computed for ``rel_id``: the step its last request finished in."""
    seqs = [s.seq for s in steps if s.ran(rel_id)]
    return seqs[-1] if seqs else None
