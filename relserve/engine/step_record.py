"""``StepRecord``: one entry of the scheduler plug-in's step log.

The plug-in (``RelServeScheduler``, in vLLM's engine-core process) writes one record per step it
scheduled; the host reads them back through the ``stats`` RPC (JSON, so the records cross as
``to_dict``) for the step-model calibration (``relserve.engine.calibrate``), the per-relQuery
trace (``SchedulerStep``) and the benchmark's step-model check, which also reads the logs that
earlier runs saved. ``from_dict`` therefore accepts the older logs too: a field an older
plug-in did not write takes its default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields


@dataclass(frozen=True, slots=True)
class RelQueryCounts:
    """Which relQueries a step served, and how (rel_id -> number of its requests)."""

    #: requests that computed prompt tokens in this step
    prefilled: Mapping[str, int] = field(default_factory=dict)
    #: requests that decoded a token in this step
    decoded: Mapping[str, int] = field(default_factory=dict)
    #: running requests that sat out this step, keeping their KV blocks
    held: Mapping[str, int] = field(default_factory=dict)
    #: requests vLLM preempted (KV blocks freed) in this step
    preempted: Mapping[str, int] = field(default_factory=dict)
    #: requests waiting (not admitted) when the step was planned
    waiting: Mapping[str, int] = field(default_factory=dict)
    #: relQueries the policy put first (starvation prevention, a deadline at risk)
    starved: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "prefilled": dict(self.prefilled),
            "decoded": dict(self.decoded),
            "held": dict(self.held),
            "preempted": dict(self.preempted),
            "waiting": dict(self.waiting),
            "starved": list(self.starved),
        }

    @classmethod
    def from_dict(cls, entry: Mapping[str, object] | None) -> RelQueryCounts:
        entry = entry or {}

        def counts(key: str) -> dict[str, int]:
            return dict(entry.get(key) or {})  # type: ignore[call-overload]

        return cls(
            prefilled=counts("prefilled"),
            decoded=counts("decoded"),
            held=counts("held"),
            preempted=counts("preempted"),
            waiting=counts("waiting"),
            starved=tuple(entry.get("starved") or ()),  # type: ignore[call-overload]
        )


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One scheduled step: its shape, the work in it and its timings (monotonic seconds)."""

    #: prefill, decode, mixed, idle
    kind: str = ""
    #: the policy's case (``StepPlan.reason``) or the plug-in's ("kv-blocked", "kv-blocked-decode")
    reason: str = ""
    #: prompt tokens computed in the step, and the requests they belong to
    prefill_tokens: int = 0
    prefill_reqs: int = 0
    #: (query, key) pairs the step's prompt tokens attend to: sum over them of their position
    prefill_pairs: float = 0.0
    #: requests that decoded a token, and the tokens their decodes attend to in all
    decode_reqs: int = 0
    decode_context: int = 0
    #: the policy's decision time
    policy_s: float = 0.0
    #: when vLLM's scheduling of the step returned (the model run starts)
    start: float = 0.0
    #: when the step's scheduling call was entered (None: logged before this was recorded)
    entered: float | None = None
    #: the whole scheduling call (the view, the policy, vLLM's scheduling)
    schedule_s: float = 0.0
    #: requests the policy planned to admit, held out, left waiting, running after the step
    planned_admit: int = 0
    held: int = 0
    waiting: int = 0
    running: int = 0
    free_blocks: int = 0
    relqueries: RelQueryCounts = field(default_factory=RelQueryCounts)
    #: the model run and output update (None until the step's output came back)
    duration: float | None = None
    #: the step's number in the engine's life (increasing, never reset; 0 until logged)
    seq: int = 0

    @property
    def works(self) -> bool:
        """Whether the step computed anything (prompt tokens or decodes)."""
        return bool(self.prefill_tokens or self.decode_reqs)

    def to_dict(self) -> dict[str, object]:
        """The record as the ``stats`` RPC sends it (JSON)."""
        out: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["relqueries"] = self.relqueries.to_dict()
        return out

    @classmethod
    def from_dict(cls, entry: Mapping[str, object]) -> StepRecord:
        """A record from the RPC's JSON or a saved log (an older one may lack fields)."""
        known = {f.name for f in fields(cls)} - {"relqueries"}
        values = {k: v for k, v in entry.items() if k in known}
        return cls(**values, relqueries=RelQueryCounts.from_dict(entry.get("relqueries")))  # type: ignore[arg-type]
