"""Request bodies of the operator endpoints (/v1/operators/reduce, /v1/operators/topk).

The fields are the operators' own arguments (``relserve.operators``) under the names they take;
pydantic checks the JSON types and bounds (422), the operators check the rest (400).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from relserve import validation as check
from relserve.server.schemas import Body

#: a value of a group: what a SQL cell holds (NULLs are skipped, as SQL aggregates skip them)
Value = str | int | float | bool | None


class _OperatorFields(Body):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    #: one placeholder: where the group's values (reduce) or the value (topk) go
    template: str
    max_tokens: int | None = Field(None, ge=1, le=check.MAX_TOKENS_LIMIT)
    system: str | None = None
    #: "null": a failed group (or value) is NULL with its error; "raise": the request fails (400)
    on_error: Literal["null", "raise"] = "null"
    #: the operator's budget (issue 63): engine tokens and seconds over all its relQueries, and
    #: "refuse" (422 when its estimate exceeds it) or "partial" (what fits; the rest fails)
    max_tokens_total: int | None = Field(None, ge=1)
    max_seconds: float | None = Field(None, gt=0.0)
    on_budget: Literal["refuse", "partial"] | None = None

    def options(self) -> dict[str, object]:
        return {"max_tokens": self.max_tokens, "system": self.system, "on_error": self.on_error,
                "max_tokens_total": self.max_tokens_total, "max_seconds": self.max_seconds, "on_budget": self.on_budget}


class ReduceRequest(_OperatorFields):
    """One answer per group: ``groups`` is a list of groups, each a list of values."""

    groups: list[list[Value] | None]
    #: optional label per group, echoed back in errors (same length as ``groups``)
    keys: list[str | int | None] | None = None
    temperature: float = Field(0.0, ge=0.0, le=check.TEMPERATURE_LIMIT)
    #: shrink the context a prompt must fit (never above the engine's)
    context_tokens: int | None = Field(None, ge=1)
    #: structured output: every answer is JSON valid against this schema
    json_schema: dict[str, Any] | None = None

    @property
    def size(self) -> int:
        return sum(len(g) for g in self.groups if g is not None)


class TopKRequest(_OperatorFields):
    """The ``k`` values that best answer the yes/no question ``template``, best first."""

    values: list[Value]
    k: int = Field(ge=1)
    #: candidates of the compare round (default 2k)
    pool: int | None = Field(None, ge=1)
