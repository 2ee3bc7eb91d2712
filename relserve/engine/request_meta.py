"""``RequestMeta``: what the scheduler plug-in learns about each vLLM request of a relQuery.

The engine writes it into ``SamplingParams.extra_args``, which crosses into vLLM's engine-core
process; the plug-in (``scheduler.py``) reads it back there. ``extra_args`` must stay a plain
dict of JSON values, so the conversion both ways lives here and nowhere else.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from relserve.policy.types import RelQueryTags

#: the key of ``SamplingParams.extra_args`` the metadata travels under
EXTRA_ARGS_KEY = "relserve"


@dataclass(slots=True)
class RequestMeta(RelQueryTags):
    """The relQuery's id, size and arrival, and its tags (``RelQueryTags``, keyword-only; the
    deadline absolute, on the arrival clock)."""

    #: the relQuery the request belongs to
    rel_id: str
    #: how many requests the relQuery sends (the scheduler waits for them all before planning)
    rel_size: int = 1
    #: when the relQuery arrived (time.monotonic of the engine's host)
    arrival: float = 0.0

    def to_extra_args(self) -> dict[str, object]:
        return {EXTRA_ARGS_KEY: asdict(self)}

    @classmethod
    def from_extra_args(cls, extra_args: dict[str, Any] | None, request_id: str, now: float) -> RequestMeta:
        """The metadata of a request; one sent without it (a warm-up, a plain vLLM caller) is a
        relQuery of its own, arriving ``now``."""
        raw = (extra_args or {}).get(EXTRA_ARGS_KEY) or {}
        return cls(
            rel_id=raw.get("rel_id", request_id),
            rel_size=int(raw.get("rel_size", 1)),
            arrival=float(raw.get("arrival", now)),
            priority=int(raw.get("priority", 0)),
            deadline=raw.get("deadline"),
            tenant=str(raw.get("tenant", "")),
            weight=float(raw.get("weight", 1.0)),
            max_running_shared=raw.get("max_running_shared"),
            call_key=str(raw.get("call_key") or ""),
        )
