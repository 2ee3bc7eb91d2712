"""An LLM call as a relserve server's request body carries it: the one encoder of every client
(``relserve.client``, DuckDB's server mode, the PostgreSQL extension).

The server parses the same names (``relserve.server.schemas.CallBody``, pydantic, which checks
them); this side only encodes, so a value the server refuses comes back as the server's 400/422
naming the field, whichever client sent it. The names are the call options
(``relserve.functions.OPTION_NAMES`` but ``model``: a server serves one model and says which in
``/health``), the scheduling hints (``HINT_NAMES``), the function with its labels or schema, and
the relQuery's ``cache``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from relserve.functions import LABEL_OPTIONS, OPTION_NAMES, LLMCall, takes_option

#: call options a request carries (the server serves one model, so ``model`` is not sent)
SENT_OPTION_NAMES: tuple[str, ...] = tuple(n for n in OPTION_NAMES if n != "model")


@dataclass(frozen=True, kw_only=True)
class CallFields:
    """One call's fields; None is "not sent" (the server's default)."""

    #: map, filter, classify or extract ("llm_" prefix allowed)
    function: str | None = None
    labels: Sequence[str] | None = None
    json_schema: Mapping[str, object] | str | None = None
    # the call options (relserve.functions.CallOptions)
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    system: str | None = None
    on_error: str | None = None
    reorder_fields: bool | None = None
    method: str | None = None
    examples: Sequence[Mapping[str, object]] | None = None
    prompt_shape: str | None = None
    answer_field: str | None = None
    cascade: float | None = None
    cascade_recall: float | None = None
    cascade_precision: float | None = None
    cascade_failure: float | None = None
    #: what the call does with its label plan ("refresh", "pin", "unpin"; None: "auto")
    label_plan: str | None = None
    # the budget (issue 47)
    max_tokens_total: int | None = None
    max_seconds: float | None = None
    on_budget: str | None = None
    # the scheduling hints (relserve.functions.SchedulingHints)
    priority: int | None = None
    deadline_s: float | None = None
    #: answer repeated greedy prompts from the server's result cache
    cache: bool | None = None
    #: the server estimates the relQuery when it starts and reports it in its stats (issue 47)
    estimate: bool | None = None
    #: run out of the tenant's caches (issue 63): a PostgreSQL policy's call over rows its
    #: reader may not see
    isolated: bool | None = None

    @classmethod
    def of_call(cls, call: LLMCall, *, on_error: str | None = None, cache: bool | None = None) -> CallFields:
        """The whole call specification of ``call``, field by field, as a local run would use it."""
        o = call.options
        options = {name: getattr(o, name) for name in SENT_OPTION_NAMES}
        # empty text or False is the option's default: not sent, as the server's default is the same
        for name in ("system", "method", "prompt_shape", "answer_field", "reorder_fields", "examples"):
            options[name] = options[name] or None
        if options["examples"] is not None:
            # kept frozen as tuples of (column, value) pairs; values render as on a local run
            options["examples"] = [{k: _jsonable(v) for k, v in ex} for ex in options["examples"]]
        if options["on_budget"] == "refuse":  # the default: not sent
            options["on_budget"] = None
        if options["label_plan"] == "auto":  # the default: not sent
            options["label_plan"] = None
        # a connection's default the function ignores (method on llm_map) is not sent: the server
        # would refuse it as the call's own
        for name in LABEL_OPTIONS:
            if not takes_option(call.function, name):
                options[name] = None
        options["max_tokens"] = call.max_tokens  # the function's own default resolved
        options["on_error"] = on_error if on_error is not None else o.on_error
        kind = call.function.kind
        return cls(
            function=call.function.name.removeprefix("llm_"),
            labels=list(call.labels or ()) if kind == "classify" else None,
            json_schema=call.json_schema if kind == "extract" else None,
            cache=cache,
            **options,
        )

    def to_json(self) -> dict[str, object]:
        """The fields that are set, as the request body's JSON object (before the rows)."""
        out: dict[str, object] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = list(value) if f.name == "labels" else value
        return out


#: every name ``CallFields`` sends
CALL_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(CallFields))


def _jsonable(value: object) -> object:
    """A value the server renders as a local run would: JSON has no NaN or Infinity, so those
    travel as the text Python renders them with."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def jsonable_row(names: Sequence[str], values: Sequence[object]) -> dict[str, object]:
    """One row's placeholder values by name, rendered by the server as a local run would."""
    return {n: _jsonable(v) for n, v in zip(names, values)}


__all__ = ["CALL_FIELD_NAMES", "CallFields", "SENT_OPTION_NAMES", "jsonable_row"]
