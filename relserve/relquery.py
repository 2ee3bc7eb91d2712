"""``RelQuery``: one task template over N rows, the unit the engine schedules."""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from relserve import validation as check
from relserve.binding import Binding
from relserve.call_key import template_call_key
from relserve.errors import ConfigError, RowError
from relserve.template import Template
from relserve.validation import OnError

if TYPE_CHECKING:
    from relserve.budget import Allowance


def encodable(prompt: str) -> str | RowError:
    """``prompt``, or a RowError if it is not valid Unicode text (a lone surrogate, which JSON and
    Python strings allow, fails the tokenizer for the whole batch: it must fail its row only)."""
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as e:
        return RowError(f"the prompt is not valid Unicode text: {e.reason} {prompt[e.start:e.end]!a} at character {e.start}")
    return prompt


def rows_to_dicts(rows: object) -> list[dict[str, object]]:
    """Accept a list of mappings, a dict of columns, a pyarrow Table/RecordBatch, or a
    polars/pandas DataFrame, and return one dict per row."""
    if rows is None:
        raise ConfigError("rows must be given (a list of mappings, an Arrow table or a data frame)")
    mod = type(rows).__module__
    if mod.startswith("pyarrow"):
        return rows.to_pylist()
    if mod.startswith("polars"):
        if hasattr(rows, "collect"):  # LazyFrame
            rows = rows.collect()
        return rows.to_dicts()
    if mod.startswith("pandas"):
        return [{k: _pandas_null(v) for k, v in r.items()} for r in rows.to_dict("records")]
    if isinstance(rows, Mapping):
        cols = {k: list(v) for k, v in rows.items()}
        lengths = {len(v) for v in cols.values()}
        if len(lengths) > 1:
            raise ConfigError(f"columns have different lengths: { {k: len(v) for k, v in cols.items()} }")
        n = lengths.pop() if lengths else 0
        return [{k: v[i] for k, v in cols.items()} for i in range(n)]
    if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence | tuple | list) and not hasattr(rows, "__iter__"):
        raise ConfigError(f"rows must be a list of mappings or a table, got {type(rows).__name__}")
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping):
            raise ConfigError(f"row {i} is a {type(r).__name__}, not a mapping of column to value")
        out.append(dict(r))
    return out


def _pandas_null(v: object) -> object:
    return None if isinstance(v, float) and math.isnan(v) else v


@dataclass
class RelQuery:
    """An LLM call over rows: ``template`` rendered for every row, one request per row.

    >>> RelQuery("Is this review positive? {review}", [{"review": "Great!"}], max_tokens=4)
    """

    template: str | None
    rows: Any = None
    max_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    #: constrained decoding: the answer is one of these strings
    choices: Sequence[str] | None = None
    #: structured output: the answer is JSON valid against this schema
    json_schema: dict | str | None = None
    #: "null": a failed row gets text None and an error; "raise": the first failed row raises
    on_error: OnError = OnError.NULL
    rel_id: str | None = None
    #: optional system message put before every prompt
    system: str | None = None
    #: generate exactly max_tokens tokens (benchmarks and calibration)
    ignore_eos: bool = False
    #: priority class: lower runs sooner (0 is normal; -1 runs before 0); FCFS policies ignore it.
    #: The one statement of its direction: ``SchedulingHints.priority``, ``RequestMeta.priority``
    #: and the policy's ``Req.priority`` carry this value unchanged, and the policies that rank
    #: (relserve's, vLLM-SP) sort by it first, ascending, before the tenant share and their own
    #: per-step priority (``StepPlan.priorities``)
    priority: int = 0
    #: seconds from submission by which the user wants the answers; a relQuery at risk of
    #: missing it is scheduled first (relserve policies)
    deadline_s: float | None = None
    #: closed questions (``choices``): score every choice by the model's log-probability of it
    #: instead of decoding one (see relserve/engine/label_scoring.py)
    score_labels: bool = False
    #: with ``score_labels``: the model's prior over the choices (probabilities), divided out
    #: before picking (contextual calibration)
    label_prior: Mapping[str, float] | None = None
    #: with ``score_labels``: how the scoring request is laid out around the prompt ("chat",
    #: "chat_answer", "completion", "question_first"; see relserve/prompt_shapes.py)
    prompt_shape: str = "chat"
    #: with ``score_labels`` and a shape other than "chat": the text the label is scored after
    #: ("Answer:", or a call's ``answer_field`` with its colon)
    answer_field: str = "Answer:"
    #: already-rendered prompts (see ``from_prompts``); then ``template`` is None
    prompts: list[str] | None = field(default=None, repr=False)
    #: the call the relQuery runs: relQueries of one call answer at alike lengths, which the
    #: scheduler can learn (``PolicySettings.output_history``). The planner sets its own key;
    #: None: one made of ``template`` and the output settings ("" for prompts with no key)
    call_key: str | None = None
    #: issue 47: the budget the rows spend from (``relserve.budget.Allowance``): a row
    #: starts only when its most tokens fit, and the rows left when its seconds run out are
    #: cancelled with the error 'budget exceeded' (None: no budget)
    budget: Allowance | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.prompts is None:
            self.parsed = Template.parse(self.template)  # type: ignore[arg-type]
            self.parsed.require_placeholders()
            self.rows = rows_to_dicts(self.rows)
            Binding(self.parsed).check_rows(self.rows)
        else:
            self.parsed = None
            self.rows = [{"prompt": p} for p in self.prompts]
        check.max_tokens(self.max_tokens)
        self.temperature = check.temperature(self.temperature)
        self.top_p = check.top_p(self.top_p)
        check.seed(self.seed)
        check.priority(self.priority)
        check.deadline_s(self.deadline_s)
        self.on_error = check.on_error(self.on_error)
        check.text_or_none("system", self.system)
        from relserve.functions import validate_labels, validate_schema

        if self.choices is not None:
            self.choices = list(validate_labels(self.choices, "RelQuery"))
        if self.json_schema is not None:
            self.json_schema = validate_schema(self.json_schema, "RelQuery")
        if self.choices and self.json_schema:
            raise ConfigError("give either choices or json_schema, not both")
        if self.score_labels and not self.choices:
            raise ConfigError("score_labels needs choices: the labels to score")
        from relserve.prompt_shapes import check_shape

        self.prompt_shape = check_shape(self.prompt_shape) or "chat"
        if self.prompt_shape != "chat" and not self.score_labels:
            raise ConfigError("prompt_shape applies only with score_labels=True")
        from relserve.prompt_shapes import ANSWER_FIELD, answer_field_text, check_answer_field

        if self.answer_field != ANSWER_FIELD:
            self.answer_field = answer_field_text(check_answer_field(self.answer_field))
        if self.label_prior is not None:
            if not self.score_labels:
                raise ConfigError("label_prior applies only with score_labels=True")
            prior = dict(self.label_prior)
            if set(prior) != set(self.choices or ()):
                raise ConfigError(f"label_prior must give a probability for each choice {self.choices!r}, got {sorted(prior)!r}")
            if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in prior.values()):
                raise ConfigError(f"label_prior probabilities must be positive numbers, got {prior!r}")
            self.label_prior = {k: float(v) for k, v in prior.items()}
        if self.rel_id is None:
            self.rel_id = uuid.uuid4().hex[:12]
        if self.call_key is None:
            self.call_key = "" if self.template is None else template_call_key(
                self.template, self.max_tokens, self.choices, self.json_schema, self.system)

    @classmethod
    def from_prompts(cls, prompts: Sequence[str], **options: object) -> RelQuery:
        """A relQuery whose prompts are already rendered (for example by the planner)."""
        prompts = list(prompts)
        for i, p in enumerate(prompts):
            if p is not None and not isinstance(p, str):
                raise ConfigError(f"prompt {i} is a {type(p).__name__}, not a string")
        return cls(None, prompts=prompts, **options)

    def __len__(self) -> int:
        return len(self.rows)

    def render(self) -> list[str | RowError]:
        """The prompt of every row, or the ``RowError`` that row has."""
        if self.prompts is not None:
            return [encodable(p) if p is not None else RowError("prompt is NULL") for p in self.prompts]
        out: list[str | RowError] = []
        for row in self.rows:
            try:
                out.append(encodable(self.parsed.render(row)))
            except RowError as e:
                out.append(e)
        return out

    @property
    def sampling_key(self) -> dict[str, object]:
        """The settings that change an answer (for result caches)."""
        return {
            "max_tokens": self.max_tokens,
            "temperature": float(self.temperature),
            "top_p": float(self.top_p),
            "seed": self.seed,
            "choices": self.choices,
            "json_schema": self.json_schema,
            "system": self.system,
            "score_labels": self.score_labels,
            "label_prior": self.label_prior,
            "prompt_shape": self.prompt_shape,
            "answer_field": self.answer_field,
        }
