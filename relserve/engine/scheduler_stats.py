"""``SchedulerStats``: the scheduler plug-in's counters, as ``Engine.scheduler_stats()`` returns them.

The plug-in (``RelServeScheduler``, in vLLM's engine-core process) fills one and sends its
``model_dump()`` through the ``stats`` RPC (JSON); the engine reads it back with
``model_validate``. A ``Cluster`` reports one per replica (``ClusterSchedulerStats``), which cross
Ray the same way. The step log's entries are ``StepRecord``s, sent as ``StepRecord.to_dict``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, PlainSerializer, PlainValidator

from relserve.engine.step_record import StepRecord


def _step_record(value: object) -> StepRecord:
    # the RPC's JSON or a saved log: ``from_dict`` also reads an older plug-in's records
    return value if isinstance(value, StepRecord) else StepRecord.from_dict(value)  # type: ignore[arg-type]


#: a step-log entry: a ``StepRecord`` in Python, its ``to_dict`` on the wire
LoggedStep = Annotated[StepRecord, PlainValidator(_step_record), PlainSerializer(StepRecord.to_dict)]


class _ReadAsMapping(BaseModel):
    """Read as a mapping too (``stats["last_step"]``), as callers outside the package did when
    this was a dict: a key gives the value as the dict had it (its JSON form)."""

    def __getitem__(self, name: str) -> object:
        if name not in type(self).model_fields:
            raise KeyError(name)
        return self.model_dump(include={name})[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in type(self).model_fields

    def get(self, name: str, default: object = None) -> object:
        return self[name] if name in self else default


class SchedulerStats(_ReadAsMapping):
    """The scheduler plug-in's counters (and, if asked, its step log) at one moment."""

    # fields in the order the plug-in's dict had its keys
    #: the policy's name
    policy: str = ""
    #: steps the policy planned, and its decision time split into its two parts, since the last reset
    steps: int = 0
    dpu_seconds: float = 0.0
    aba_seconds: float = 0.0
    #: the per-step log, when asked for (``steps=True``); empty otherwise
    step_log: list[LoggedStep] = []
    #: tokens the KV cache holds
    kv_capacity_tokens: int = 0
    #: requests vLLM preempted since the last reset
    preemptions: int = 0
    #: the newest logged step's number (``StepRecord.seq``; never reset)
    last_step: int = 0
    #: tokens in one KV block
    block_size: int = 0
    #: the plug-in's class (``RelServeScheduler`` or ``RelServeAsyncScheduler``)
    scheduler: str = ""
    async_scheduling: bool = False

    @property
    def policy_s(self) -> float:
        """The policy's whole decision time (both parts)."""
        return self.dpu_seconds + self.aba_seconds


class ClusterSchedulerStats(_ReadAsMapping):
    """A cluster's scheduler counters: its replicas' own."""

    #: each replica's, in replica order (None: the replica runs vLLM's own scheduler)
    replicas: list[SchedulerStats | None] = []
