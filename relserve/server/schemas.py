"""HTTP request bodies (pydantic). Unknown fields are rejected so that a typo names itself,
except in the OpenAI-compatible bodies, whose clients send many optional fields. The replies a
client reads back are in relserve/replies.py."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from relserve import validation as check
from relserve.functions import FUNCTIONS, HINT_NAMES, OPTION_NAMES, LLMCall, SchedulingHints, make_call
from relserve.validation import OnError

#: the functions by their short names ("llm_" is stripped), as ``relserve.functions`` defines them
FunctionName = Literal[tuple(f.name.removeprefix("llm_") for f in FUNCTIONS.values())]  # type: ignore[valid-type]


#: body fields that carry per-row data (checked per row, or per cell by ``Cell``): a value there
#: that cannot run fails its row, not the request
ROW_DATA = frozenset({"rows", "prompts", "cells", "args", "values", "groups", "prompt", "messages"})


def _bad_value(value: object, path: str = "", in_rows: bool = False) -> str | None:
    """What is wrong with the first bad value in a parsed JSON body, or None.

    Python's JSON parser accepts ``NaN`` and ``Infinity``; JSON does not, and they break the
    responses that echo them, so no body may carry one anywhere. A lone surrogate (``"\\ud800"``)
    cannot be encoded; in row data it fails its row only (see ``RelQuery.render``), elsewhere
    (template, system message, labels) it fails the request here.
    """
    where = path or "body"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where}: NaN and Infinity are not JSON numbers; send a finite number or null"
    if isinstance(value, str) and not in_rows:
        problem = check.unicode_problem(value)
        return f"{where}: {problem}" if problem is not None else None
    if isinstance(value, dict):
        items = [(k, v, f"{path}.{k}" if path else str(k), in_rows or (not path and k in ROW_DATA)) for k, v in value.items()]
    elif isinstance(value, list):
        items = [(i, v, f"{path}[{i}]", in_rows) for i, v in enumerate(value)]
    else:
        return None
    for _, v, sub, rows in items:
        found = _bad_value(v, sub, rows)
        if found:
            return found
    return None


class Body(BaseModel):
    """Every request body: finite numbers, and valid text outside the rows (see ``_bad_value``)."""

    model_config = ConfigDict(allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _valid_values(cls, data: Any) -> Any:
        problem = _bad_value(data)
        if problem is not None:
            raise ValueError(problem)
        return data


def _function_name(value: object) -> object:
    # "llm_filter" and "filter" both name the function, as in SQL
    if isinstance(value, str) and value.lower().startswith("llm_"):
        return value[4:].lower()
    return value


class CallBody(Body):
    """The call part of a request body, as the server parses it: what every LLM call says, the
    call specification (``relserve.functions.LLMCall``) field by field under the names
    ``make_call`` takes, and the scheduling hints (``SchedulingHints``). Clients encode the same
    names with ``relserve.call_fields.CallFields``.

    pydantic checks the JSON types and the bounds (``relserve.validation``'s constants, 422);
    ``call()`` hands every field to ``make_call``, which checks the rest as for every surface
    (400). The one option a request cannot set is ``model``: a server serves one.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    #: map: free text; filter: yes/no -> boolean; classify: one of ``labels``; extract: JSON for ``json_schema``
    function: FunctionName = "map"
    labels: list[str] | None = None
    json_schema: dict[str, Any] | str | None = None
    #: None: the function's default (map 64, filter 2, classify 16, extract 256)
    max_tokens: int | None = Field(None, ge=1, le=check.MAX_TOKENS_LIMIT)
    temperature: float = Field(0.0, ge=0.0, le=check.TEMPERATURE_LIMIT)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int | None = None
    system: str | None = None
    #: filter/classify: "generate", "score", "prior", "batch", "bootstrap" or "adaptive" (None: the default)
    method: str | None = None
    #: filter/classify: "chat", "chat_answer", "completion" or "question_first" (None: the default)
    prompt_shape: str | None = None
    #: filter/classify: the field the label is scored after ("Sentiment"; None: "Answer")
    answer_field: str | None = None
    reorder_fields: bool | None = None
    examples: list[dict[str, Any]] | None = None
    #: filter/classify: the agreement with the LLM's answers a model cascade keeps (0.95; 0: off);
    #: None: the server's default (``relserve serve --cascade``), off unless it sets one
    cascade: float | None = Field(None, ge=0.0, le=check.CASCADE_MAX)
    #: filter only: recall and precision targets of a cascade for the rows the LLM would keep,
    #: and the probability it misses them (None: 0.05); each strictly between 0 and 1, checked by
    #: ``make_call`` (400 naming the option)
    cascade_recall: float | None = None
    cascade_precision: float | None = None
    cascade_failure: float | None = None
    #: filter/classify: what the call does with its label plan: "auto" (use the kept one, or make
    #: one), "refresh" (a new one from these rows), "pin", "unpin" (None: "auto")
    label_plan: Literal["auto", "refresh", "pin", "unpin"] | None = None
    #: a budget (issue 47): engine tokens (prompt + answer) and seconds the request may take, and
    #: what happens when the estimate exceeds it: "refuse" (422) or "partial" (the rows that fit)
    max_tokens_total: int | None = Field(None, ge=1)
    max_seconds: float | None = Field(None, gt=0.0)
    on_budget: Literal["refuse", "partial"] | None = None
    #: scheduling hints: the priority class (its direction: ``relserve.relquery.RelQuery.priority``);
    #: deadline in seconds from submission
    priority: int = Field(0, ge=-check.PRIORITY_LIMIT, le=check.PRIORITY_LIMIT)
    deadline_s: float | None = Field(None, gt=0.0)

    @field_validator("function", mode="before")
    @classmethod
    def _strip_llm_prefix(cls, value: Any) -> Any:
        return _function_name(value)

    def call(self, template: str) -> LLMCall:
        """The call specification this body describes, with ``template``; ConfigError or
        TemplateError (HTTP 400) name what is wrong."""
        options = {name: getattr(self, name) for name in OPTION_NAMES if name in type(self).model_fields}
        return make_call(f"llm_{self.function}", template, labels=self.labels, json_schema=self.json_schema, **options)

    def hints(self) -> SchedulingHints:
        return SchedulingHints(**{name: getattr(self, name) for name in HINT_NAMES})


class RelQueryRequest(CallBody):
    """One template over rows (``template`` + ``rows``), or already-rendered ``prompts``."""

    template: str | None = None
    rows: list[dict[str, Any]] | None = None
    prompts: list[str | None] | None = None
    #: "null": a failed row gets value null and an error; "raise": the first failed row fails the relQuery
    on_error: OnError = OnError.NULL
    #: answer repeated greedy prompts from the server's result cache
    cache: bool = True
    #: estimate the relQuery when it starts (its stats then carry ``estimated_s`` and
    #: ``estimated_prompt_tokens`` beside what it took: PostgreSQL's EXPLAIN ANALYZE; issue 47)
    estimate: bool = False
    #: run out of the tenant's caches (issue 63): no result cache read or written, a prefix-cache
    #: namespace and a label memory of its own, used once; what PostgreSQL sends for a policy's
    #: call, over rows its reader may not see, so that the reader cannot probe them
    isolated: bool = False
    #: stream the rows back in this response as they finish; None: return the id at once
    stream: Literal["ndjson", "sse"] | None = None

    @model_validator(mode="after")
    def _rows_or_prompts(self) -> RelQueryRequest:
        if self.prompts is not None:
            if self.template is not None or self.rows is not None:
                raise ValueError("give either template and rows, or prompts, not both")
        elif self.template is None or self.rows is None:
            raise ValueError("give template and rows (a list of objects), or prompts (a list of strings)")
        return self

    @property
    def size(self) -> int:
        return len(self.prompts if self.prompts is not None else self.rows or [])


class Cell(Body):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    #: the cell's address (e.g. "B2"); answers come back under it
    id: str = Field(min_length=1, max_length=128)
    template: str
    #: values bound to the template's placeholders in order of first appearance
    args: list[Any] = Field(default_factory=list)
    #: or values by placeholder name
    values: dict[str, Any] | None = None


class CellsRequest(CallBody):
    """The formula cells of one recalculation: one relQuery per template, answered per cell."""

    cells: list[Cell] = Field(min_length=1)
    #: NDJSON lines as cells finish (true), or one JSON answer at the end (false)
    stream: bool = True

    @model_validator(mode="after")
    def _unique_ids(self) -> CellsRequest:
        seen: set[str] = set()
        dupes = sorted({c.id for c in self.cells if c.id in seen or seen.add(c.id)})  # type: ignore[func-returns-value]
        if dupes:
            raise ValueError(f"cell ids must be unique; repeated: {', '.join(dupes[:10])}")
        return self


class _OpenAIBase(Body):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1, le=check.MAX_TOKENS_LIMIT)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = Field(1, ge=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    # relserve extensions
    priority: int = Field(0, ge=-check.PRIORITY_LIMIT, le=check.PRIORITY_LIMIT)
    deadline_s: float | None = Field(None, gt=0.0)

    @model_validator(mode="after")
    def _supported(self) -> _OpenAIBase:
        if self.n != 1:
            raise ValueError("n > 1 is not supported: send the prompt n times (as a list of prompts)")
        if self.stop:
            raise ValueError("stop sequences are not supported by this server")
        return self


class CompletionRequest(_OpenAIBase):
    prompt: str | list[str]

    @field_validator("prompt")
    @classmethod
    def _some_prompt(cls, value: str | list[str]) -> str | list[str]:
        # "" is a prompt (the model answers it); [] is none, and would get a reply of no choices
        if isinstance(value, list) and not value:
            raise ValueError("an empty list holds no prompt: send a string or a list of at least one string")
        return value

    @property
    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart]

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class ChatRequest(_OpenAIBase):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=check.MAX_TOKENS_LIMIT)
    response_format: ResponseFormat | None = None

    @model_validator(mode="after")
    def _single_turn(self) -> ChatRequest:
        *before, last = self.messages
        if last.role != "user":
            raise ValueError("the last message must come from the user")
        others = [m.role for m in before if m.role not in ("system", "developer")]
        if others:
            raise ValueError(
                "only single-turn chats are supported: system messages, then one user message "
                f"(got earlier {', '.join(others)} message(s))"
            )
        return self

    @property
    def system(self) -> str | None:
        parts = [m.text for m in self.messages[:-1]]
        return "\n\n".join(parts) if parts else None

    @property
    def user(self) -> str:
        return self.messages[-1].text
