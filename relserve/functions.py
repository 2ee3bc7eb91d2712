"""What ``llm_map``, ``llm_filter``, ``llm_classify`` and ``llm_extract`` mean, for every surface.

DuckDB, polars and any other surface build an ``LLMCall`` (function + template + labels or schema +
options) and hand it, with the rows' placeholder values, to ``relserve.planner``. This module owns
the parts that decide an answer: the options and their defaults, the validation of labels and
schemas, the line appended to the prompt that states the answer format, and the conversion of the
model's text into the declared type.

===============  ==========================  ======================================
function         answer constrained to       returned value
===============  ==========================  ======================================
``llm_map``      nothing (free text)         ``str``
``llm_filter``   ``yes`` / ``no``            ``bool``
``llm_classify`` one of the given labels     ``str`` (one of the labels)
``llm_extract``  JSON valid for the schema   ``str`` holding that JSON
===============  ==========================  ======================================
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from relserve import validation as check
from relserve.call_key import call_key_of
from relserve.errors import ConfigError, RowError, TemplateError
from relserve.label_names import PLAN_ACTIONS, LabelMethodName, cache_key_settings, checked_method, label_method
from relserve.template import Template
from relserve.validation import OnError

if TYPE_CHECKING:
    from relserve.json_schema_check import BoundedValidator


@dataclass(frozen=True, kw_only=True)
class CallOptions:
    """Per-call settings shared by all four functions, checked once when built.

    ``None`` for ``max_tokens`` means the function's own default (a yes/no answer needs fewer
    tokens than free text). ``model`` None means the default engine's model. Everything here but
    ``on_error`` and the budget (``max_tokens_total``, ``max_seconds``, ``on_budget``) can change
    an answer; those only say what a failed row, or a call over its budget, does.
    """

    model: str | None = None
    max_tokens: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    #: a system message put before every prompt
    system: str | None = None
    #: "null": a failed row gives NULL and its error is recorded; "raise": the call fails
    on_error: OnError = OnError.NULL
    #: allow per-row field reordering (prompt becomes instruction + {"field": value} JSON)
    reorder_fields: bool = False
    #: how llm_filter / llm_classify pick a label: see relserve/label_names.py (None: the default)
    method: str | None = None
    #: few-shot examples: rows (placeholder values plus "answer") shown before every row; they
    #: are the same text in every prompt, so the prefix cache prefills them once
    examples: Any = None
    #: how a scoring request is laid out around the prompt (filter/classify with a scoring
    #: method): "chat", "chat_answer", "completion" or "question_first" (None: the default); see
    #: relserve.prompt_shapes.py
    prompt_shape: str | None = None
    #: the name of the field the label is scored after, in the shapes that have one
    #: ("Sentiment" ends the request "Sentiment:" instead of "Answer:"); None: relserve's
    answer_field: str | None = None
    #: llm_filter / llm_classify: the agreement with the LLM's own answers a model cascade must
    #: keep (0.95: a light proxy answers the rows it is sure of, the rest go to the LLM;
    #: relserve/cascade/); None: every row to the LLM
    cascade: float | None = None
    #: llm_filter only: recall and precision targets of a cascade for the rows the LLM would keep
    #: ("yes"), instead of the agreement (relserve/cascade/targets.py); None: not asked
    cascade_recall: float | None = None
    cascade_precision: float | None = None
    #: the probability that a cascade misses its target (None: 0.05); it needs a cascade
    cascade_failure: float | None = None
    #: issue 47, a budget of the call (None: none): the engine's prompt tokens plus answer tokens
    #: it may spend, and the seconds it may take; like ``on_error`` they never change an answer
    max_tokens_total: int | None = None
    max_seconds: float | None = None
    #: "refuse": refuse before starting when the estimate exceeds the budget; "partial": run until
    #: the budget is reached, the rows not answered NULL with the error 'budget exceeded'
    on_budget: str = "refuse"
    #: llm_filter / llm_classify: what the call does with its label plan (relserve/labels/plan.py):
    #: "auto" uses the kept plan or makes one; "refresh" makes a new one from these rows; "pin" and
    #: "unpin" as "auto", then pin or unpin it. Never changes an answer by itself: a new plan does
    label_plan: str = "auto"

    def __post_init__(self) -> None:
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise ConfigError(f"model must be a non-empty string, got {self.model!r}")
        if self.max_tokens is not None:
            check.max_tokens(self.max_tokens)
        if not isinstance(self.reorder_fields, bool):
            raise ConfigError(f"reorder_fields must be true or false, got {self.reorder_fields!r}")
        object.__setattr__(self, "method", checked_method(self.method))
        from relserve.prompt_shapes import check_answer_field, check_shape

        check_shape(self.prompt_shape)
        if self.answer_field is not None and self.prompt_shape == "chat":
            raise ConfigError("answer_field needs a prompt shape with an answer field (chat_answer, completion, "
                              "question_first); prompt_shape 'chat' has none")
        object.__setattr__(self, "answer_field", check_answer_field(self.answer_field))
        check.seed(self.seed)
        check.max_tokens_total(self.max_tokens_total)
        object.__setattr__(self, "max_seconds", check.max_seconds(self.max_seconds))
        check.on_budget(self.on_budget)
        object.__setattr__(self, "label_plan", _check_plan_action(self.label_plan))
        check.text_or_none("system", self.system)
        object.__setattr__(self, "temperature", check.temperature(self.temperature))
        object.__setattr__(self, "top_p", check.top_p(self.top_p))
        object.__setattr__(self, "on_error", check.on_error(self.on_error))
        object.__setattr__(self, "examples", _freeze_examples(self.examples))
        object.__setattr__(self, "cascade", check.cascade(self.cascade))
        for name in check.CASCADE_SHARES:
            object.__setattr__(self, name, check.cascade_share(name, getattr(self, name)))

    def updated(self, settings: Mapping[str, object] | None = None, **more: object) -> CallOptions:
        """These options with the given settings applied; ``None`` values leave a setting as it is."""
        given = {**(settings or {}), **more}
        unknown = sorted(set(given) - set(OPTION_NAMES))
        if unknown:
            raise ConfigError(f"unknown option(s) {', '.join(unknown)}; known options: {', '.join(OPTION_NAMES)}")
        changes = {k: v for k, v in given.items() if v is not None}
        return replace(self, **changes) if changes else self


OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in fields(CallOptions))


@dataclass(frozen=True)
class SchedulingHints:
    """How soon a call should run. Not part of the call's answer (nor of the result-cache key)."""

    #: the relQuery's priority class (``relserve.relquery.RelQuery.priority`` states which way it runs)
    priority: int = 0
    #: seconds from submission by which the answers are wanted
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        check.priority(self.priority)
        check.deadline_s(self.deadline_s)


HINT_NAMES: tuple[str, ...] = tuple(f.name for f in fields(SchedulingHints))


def _check_plan_action(value: object) -> str:
    if value is None:
        return PLAN_ACTIONS[0]
    if value not in PLAN_ACTIONS:
        raise ConfigError(f"label_plan must be one of {', '.join(PLAN_ACTIONS)}, got {value!r}")
    return str(value)


def _freeze_examples(examples: object) -> tuple[tuple[tuple[str, object], ...], ...] | None:
    """Examples as a hashable tuple of rows, each a sorted tuple of (column, value) pairs."""
    if examples is None:
        return None
    if isinstance(examples, (str, bytes, Mapping)) or not hasattr(examples, "__iter__"):
        raise ConfigError(
            "examples must be a list of rows, each a mapping of the template's columns plus 'answer', "
            f"got {type(examples).__name__}"
        )
    out = []
    for i, ex in enumerate(examples):
        if isinstance(ex, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in ex):
            out.append(ex)  # already frozen
            continue
        if not isinstance(ex, Mapping):
            raise ConfigError(f"example {i} is a {type(ex).__name__}, not a mapping of column to value plus 'answer'")
        out.append(tuple(sorted((str(k), _hashable(v)) for k, v in ex.items())))
    return tuple(out) or None


def _hashable(value: object) -> object:
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return value


@dataclass(frozen=True)
class LLMFunction:
    """One of the four functions: its name, its answer constraint and its return type."""

    name: str
    #: "map" | "filter" | "classify" | "extract"
    kind: str
    default_max_tokens: int
    returns: str
    #: name of the extra argument after the template (labels or schema), if any
    spec_argument: str | None = None

    def __repr__(self) -> str:
        return f"<{self.name}>"


LLM_MAP = LLMFunction("llm_map", "map", 64, "text")
LLM_FILTER = LLMFunction("llm_filter", "filter", 2, "boolean")
LLM_CLASSIFY = LLMFunction("llm_classify", "classify", 16, "one of the labels", spec_argument="labels")
LLM_EXTRACT = LLMFunction("llm_extract", "extract", 256, "JSON valid against the schema", spec_argument="json_schema")
#: a filter's question answered with how sure the model is: the probability of "yes" (the same
#: label method and decision as llm_filter, whose answer is "yes" exactly where this is above 0.5)
LLM_SCORE = LLMFunction("llm_score", "filter", 2, "the probability that the answer is yes")

FUNCTIONS: dict[str, LLMFunction] = {f.name: f for f in (LLM_MAP, LLM_FILTER, LLM_CLASSIFY, LLM_EXTRACT, LLM_SCORE)}

FILTER_CHOICES = ("yes", "no")


def function(name: str) -> LLMFunction:
    try:
        return FUNCTIONS[name.lower()]
    except KeyError:
        raise ConfigError(f"unknown LLM function {name!r}; known: {', '.join(FUNCTIONS)}") from None


@dataclass(frozen=True)
class LLMCall:
    """The call specification: everything that fixes the answer for a row except the row's
    own values (function, template, labels or schema, model, sampling settings, system message).

    Immutable and hashable, so surfaces can group rows by call; built and checked once, with
    ``make_call``, by every surface (the server maps its request body onto it field by field).
    ``sampling_settings()`` is exactly what of it keys the result cache. Scheduling hints
    (``SchedulingHints``) travel beside it, never in it.
    """

    function: LLMFunction
    template: Template
    labels: tuple[str, ...] | None = None
    #: canonical JSON text of the schema (hashable); see ``json_schema`` for the object
    schema_json: str | None = None
    options: CallOptions = field(default_factory=CallOptions)
    #: the id of the label plan its rows are decided with, once the planner knows it
    #: (relserve/labels/plan.py; None: none yet, or no labels): in the result cache's key, so that
    #: a refreshed plan's answers are not an old plan's
    plan_id: str | None = None

    @property
    def max_tokens(self) -> int:
        return self.options.max_tokens or self.function.default_max_tokens

    @property
    def choices(self) -> tuple[str, ...] | None:
        if self.function.kind == "filter":
            return FILTER_CHOICES
        if self.function.kind == "classify":
            return self.labels
        return None

    @property
    def label_method(self) -> str | None:
        """How the label is chosen (filter and classify), None for free text and JSON
        (relserve/label_names.py)."""
        return label_method(self.choices is not None, self.options.temperature, self.options.method)

    @property
    def prompt_shape(self) -> str:
        """How the engine lays out a scoring request ("chat" when the label is decoded)."""
        from relserve.prompt_shapes import DEFAULT_PROMPT_SHAPE

        if self.label_method in (None, LabelMethodName.GENERATE):
            return "chat"
        return self.options.prompt_shape or DEFAULT_PROMPT_SHAPE

    @property
    def answer_field(self) -> str:
        """The text the label is scored after in the shapes with an answer field ("Answer:", or
        the user's ``answer_field`` with a colon)."""
        from relserve.prompt_shapes import answer_field_text

        return answer_field_text(self.options.answer_field)

    @property
    def json_schema(self) -> dict | None:
        return json.loads(self.schema_json) if self.schema_json is not None else None

    @property
    def answer_instruction(self) -> str:
        """The line appended to every prompt that states the answer format.

        The engine constrains the answer anyway; saying so in the prompt keeps a small model's
        probability mass on the allowed answers. It is a suffix, so it never splits a shared prefix.
        """
        kind = self.function.kind
        if kind == "filter":
            return "\nAnswer yes or no."
        if kind == "classify":
            return "\nAnswer with one of: " + ", ".join(self.labels or ()) + "."
        if kind == "extract":
            return "\nAnswer with JSON that matches this schema: " + (self.schema_json or "")
        return ""

    @property
    def examples_prefix(self) -> str:
        """The few-shot examples as the text every prompt starts with ("" without examples).

        Each example is the prompt as the row would get it, then its answer; the row's own
        prompt follows. Being the first text of every prompt, it is the shared prefix the planner
        pins and the prefix cache serves.
        """
        if not self.options.examples:
            return ""
        shown = []
        for ex in self.options.examples:
            values = dict(ex)
            shown.append(self.template.render(values) + self.answer_instruction + "\nAnswer: " + values["answer"])
        return "Examples:\n\n" + "\n\n".join(shown) + "\n\nNow answer this one.\n"

    @property
    def deterministic(self) -> bool:
        """Greedy decoding: the same prompt always gets the same answer, so results may be cached."""
        return self.options.temperature == 0.0

    def sampling_settings(self) -> dict[str, object]:
        """The settings that change an answer, besides the model and the prompt: the result-cache key.

        Only greedy answers are cached (``deterministic``), so ``top_p`` and ``seed``, which
        greedy decoding ignores, are not in it. The system message is, under the same name the
        server's cache used before, so answers stored then are still found.
        """
        out = {
            "max_tokens": self.max_tokens,
            "temperature": self.options.temperature,
            "choices": list(self.choices) if self.choices else None,
            "json_schema": self.schema_json,
            **self._label_settings(),
        }
        if self.options.system is not None:
            out["system"] = self.options.system
        if self.scores:
            out["function"] = self.function.name  # a probability, not llm_filter's label
        o = self.options
        if (o.cascade is not None or o.cascade_recall is not None or o.cascade_precision is not None) and self.choices:
            # a proxy's answers, and which rows it answered (its random sample: the seed)
            out["cascade"] = o.cascade
            out["cascade_seed"] = o.seed
            for name in ("cascade_recall", "cascade_precision", "cascade_failure"):
                if getattr(o, name) is not None:  # absent when unset: older keys stay as they were
                    out[name] = getattr(o, name)
        return out

    def call_key(self) -> str:
        """The key the scheduler learns this call's answer lengths under (``RelQuery.call_key``):
        the function, the template and every setting that changes an answer."""
        return call_key_of(self.function.name, self.template.source, self.sampling_settings())

    def engine_options(self) -> dict[str, object]:
        """The ``RelQuery`` settings this call asks of the engine (besides label scoring)."""
        o = self.options
        return {
            "call_key": self.call_key(),
            "max_tokens": self.max_tokens,
            "temperature": o.temperature,
            "top_p": o.top_p,
            "seed": o.seed,
            "choices": list(self.choices) if self.choices else None,
            "json_schema": self.json_schema,
            "system": o.system,
        }

    def _label_settings(self) -> Mapping[str, object]:
        return cache_key_settings(self.label_method, prompt_shape=self.prompt_shape,
                                  answer_field=self.options.answer_field, template=self.template.source,
                                  examples=self.examples_prefix, plan_id=self.plan_id)

    def answer(self, text: str) -> tuple[Any, str | None]:
        """(value, None) for the model's text, or (None, why) when it does not fit the type."""
        try:
            return self.convert(text), None
        except RowError as e:
            return None, str(e)

    @property
    def scores(self) -> bool:
        """Whether the call answers with the probability of "yes" (``llm_score``) instead of the label."""
        return self.function is LLM_SCORE

    def convert(self, text: str) -> Any:
        """The model's text as the function's declared type; ``RowError`` if it does not fit."""
        kind = self.function.kind
        if kind == "map":
            return text
        answer = text.strip()
        if self.scores:
            try:
                p = float(answer)
            except ValueError:
                raise RowError(f"llm_score answer {text!r} is not a probability") from None
            if not 0.0 <= p <= 1.0:
                raise RowError(f"llm_score answer {text!r} is not a probability between 0 and 1")
            return p
        if kind == "filter":
            low = answer.lower().rstrip(".!")
            if low in ("yes", "true"):
                return True
            if low in ("no", "false"):
                return False
            raise RowError(f"llm_filter answer {text!r} is neither yes nor no")
        if kind == "classify":
            if answer in (self.labels or ()):
                return answer
            for label in self.labels or ():
                if answer.lower() == label.lower():
                    return label
            raise RowError(f"llm_classify answer {text!r} is not one of the labels {list(self.labels or ())!r}")
        if kind == "extract":
            try:
                value = json.loads(answer)
            except json.JSONDecodeError as e:
                raise RowError(f"llm_extract answer is not valid JSON ({e.msg}): {text[:200]!r}") from None
            # the error jsonschema.validate would raise, without checking the schema itself again
            # for every row (make_call checked it; that check was most of an extract row's cost)
            from relserve.json_schema_check import SchemaTooCostly

            try:
                error = _schema_validator(self.schema_json).best_error(value)
            except SchemaTooCostly as e:
                raise RowError(f"llm_extract answer cannot be checked against the schema: {e}") from None
            if error is not None:
                raise RowError(f"llm_extract answer does not match the schema: {error}") from None
            return json.dumps(value, ensure_ascii=False)
        raise AssertionError(kind)


@functools.lru_cache(maxsize=256)
def _schema_validator(schema_json: str) -> BoundedValidator:
    # the call's canonical schema text: the schema its rows were always checked against
    from relserve.json_schema_check import BoundedValidator

    return BoundedValidator(json.loads(schema_json))


def make_call(
    fn: LLMFunction | str,
    template: str | Template,
    *,
    labels: object = None,
    json_schema: object = None,
    options: CallOptions | None = None,
    **settings: object,
) -> LLMCall:
    """Validate everything that can be checked before any row runs, with errors that name the problem."""
    fn = function(fn) if isinstance(fn, str) else fn
    parsed = template if isinstance(template, Template) else Template.parse(template)
    if not parsed.fields:
        raise TemplateError(
            f"{fn.name}: template {parsed.source!r} has no {{column}} placeholder, so every row would get the "
            "same prompt; name the column(s) to use, e.g. 'Is {review} positive?'"
        )
    opts = (options or CallOptions()).updated(settings)
    # the call's own options only (a bad value is named first): ``options`` holds defaults (a
    # connection's), which hold for every function
    check_given_options(fn, settings)
    checked_labels = validate_labels(labels) if fn.kind == "classify" else None
    if fn.kind != "classify" and labels is not None:
        raise ConfigError(f"{fn.name} takes no labels")
    schema_json = None
    if fn.kind == "extract":
        schema_json = json.dumps(validate_schema(json_schema), sort_keys=True, separators=(",", ":"))
    elif json_schema is not None:
        raise ConfigError(f"{fn.name} takes no JSON schema")
    call = LLMCall(fn, parsed, checked_labels, schema_json, opts)
    if call.scores and call.label_method == LabelMethodName.GENERATE:
        raise ConfigError("llm_score reads the model's probability of each answer, which decoding does not give: "
                          "use a scoring method (the default) and temperature 0")
    _check_cascade_targets(fn, opts)
    if opts.examples:
        call = replace(call, options=replace(opts, examples=_checked_examples(call, opts.examples)))
    return call


#: the options only a function that picks a label reads (llm_filter, llm_score, llm_classify, and
#: the operators built on them), with what each decides; another function would ignore them
LABEL_OPTIONS: dict[str, str] = {
    "method": "how the label is picked",
    "label_plan": "what the call does with its label plan",
    "prompt_shape": "how a request that scores the labels is laid out",
    "answer_field": "the field the label is scored after",
    "cascade": "a proxy answers the rows whose label it is sure of",
}


def takes_option(fn: LLMFunction, name: str) -> bool:
    """Whether ``fn`` reads the option ``name``: every function reads every option but the label ones."""
    return name not in LABEL_OPTIONS or fn.kind in ("filter", "classify")


def check_given_options(fn: LLMFunction, given: Mapping[str, object], who: str | None = None) -> None:
    """Refuse a label option a call names (not None) for a function that would ignore it; ``who``
    names the operator built on ``fn``. Only the call's own options: a default (a connection's, a
    session's, a server's) is for every function and applies where it can."""
    for name, what in LABEL_OPTIONS.items():
        if given.get(name) is not None and not takes_option(fn, name):
            raise ConfigError(f"{name} applies to llm_filter and llm_classify ({what}), not to {who or fn.name}")


def _check_cascade_targets(fn: LLMFunction, opts: CallOptions) -> None:
    """Recall and precision are of a filter's kept rows: another function has none; a failure
    probability is of a cascade's target: a call without one has none to miss."""
    for name in ("cascade_recall", "cascade_precision"):
        if getattr(opts, name) is not None and fn is not LLM_FILTER:
            hint = "; llm_classify takes an agreement target (cascade)" if fn is LLM_CLASSIFY else ""
            raise ConfigError(f"{name} applies to llm_filter only (the recall or precision of the rows it keeps), "
                              f"not to {fn.name}{hint}")
    on = opts.cascade is not None or opts.cascade_recall is not None or opts.cascade_precision is not None
    if opts.cascade_failure is not None and not on:
        raise ConfigError("cascade_failure is the probability that a cascade misses its target: set cascade, "
                          "cascade_recall or cascade_precision with it")


def _checked_examples(call: LLMCall, examples: tuple) -> tuple:
    """Every example names each placeholder column and gives an answer the function could give;
    answers are stored as the text the model would answer (filter: yes/no)."""
    out = []
    for i, ex in enumerate(examples):
        values = dict(ex)
        missing = [c for c in call.template.columns if c not in values]
        if missing:
            raise TemplateError(f"{call.function.name}: example {i} has no value for column(s) {', '.join(map(repr, missing))}")
        if "answer" not in values:
            raise ConfigError(f"{call.function.name}: example {i} has no 'answer'")
        values["answer"] = _example_answer(call, i, values["answer"])
        out.append(tuple(sorted(values.items())))
    return tuple(out)


def _example_answer(call: LLMCall, i: int, answer: object) -> str:
    kind = call.function.kind
    who = f"{call.function.name}: example {i}"
    if kind == "filter":
        if isinstance(answer, bool):
            return "yes" if answer else "no"
        if isinstance(answer, str) and answer.strip().lower() in ("yes", "no", "true", "false"):
            return "yes" if answer.strip().lower() in ("yes", "true") else "no"
        raise ConfigError(f"{who}: answer must be true/false or yes/no, got {answer!r}")
    if kind == "classify":
        if answer not in (call.labels or ()):
            raise ConfigError(f"{who}: answer {answer!r} is not one of the labels {list(call.labels or ())!r}")
        return answer
    if kind == "extract":
        text = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
        try:
            call.convert(text)
        except RowError as e:
            raise ConfigError(f"{who}: {e}") from None
        return text
    if not isinstance(answer, str):
        raise ConfigError(f"{who}: answer must be text, got {answer!r}")
    return answer


def validate_labels(labels: object, who: str = "llm_classify") -> tuple[str, ...]:
    """Labels must be a non-empty list of distinct, non-empty strings."""
    if labels is None:
        raise ConfigError(f"{who} needs labels: a non-empty list of strings, e.g. ['positive', 'negative']")
    if isinstance(labels, (set, frozenset)):
        # a set's order changes from one process to the next, and the labels' order is in every
        # prompt and cache key: the same row would get another prompt in another process
        raise ConfigError(f"{who} labels must be a list, not a set (a set has no fixed order); got {sorted(labels)!r}")
    if isinstance(labels, (str, bytes)) or not isinstance(labels, (Sequence, tuple)) and not _is_array_like(labels):
        raise ConfigError(f"{who} labels must be a non-empty list of strings, got {labels!r}")
    items = list(labels)
    if not items:
        raise ConfigError(f"{who} labels must be a non-empty list of strings, got an empty list")
    if len(items) > check.MAX_LABELS:
        raise ConfigError(f"{who} labels: at most {check.MAX_LABELS:,} labels, got {len(items):,} (every row's answer "
                          "is scored against every label); group them, or ask llm_map for a free answer")
    bad = [x for x in items if not isinstance(x, str) or not x.strip()]
    if bad:
        raise ConfigError(f"{who} labels must be non-empty strings; bad label(s): {bad!r}")
    dupes = sorted({x for x in items if items.count(x) > 1})
    if dupes:
        raise ConfigError(f"{who} labels must be distinct; repeated: {dupes!r}")
    # an answer is matched to a label after trimming spaces and ignoring case, so two labels that
    # differ only there cannot both be answered
    folded: dict[str, str] = {}
    for x in items:
        other = folded.setdefault(x.strip().lower(), x)
        if other != x:
            raise ConfigError(f"{who} labels must differ by more than case or surrounding spaces; "
                              f"{other!r} and {x!r} read the same")
    return tuple(items)


def validate_schema(schema: object, who: str = "llm_extract") -> dict:
    """A JSON schema given as an object or as JSON text, checked against its metaschema."""
    if schema is None:
        raise ConfigError(f"{who} needs a JSON schema, e.g. '{{\"type\": \"object\", \"properties\": {{...}}}}'")
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{who}: the JSON schema is not valid JSON: {e}") from None
    if not isinstance(schema, dict):
        raise ConfigError(f"{who}: the JSON schema must be a JSON object, got {type(schema).__name__}")
    import jsonschema

    from relserve.json_schema_check import SchemaTooCostly, check_schema

    try:
        check_schema(schema)
    except jsonschema.SchemaError as e:
        raise ConfigError(f"{who}: invalid JSON schema: {e.message}") from None
    except SchemaTooCostly as e:
        raise ConfigError(f"{who}: the JSON schema cannot be used: {e}") from None
    return schema


def _is_array_like(value: object) -> bool:
    # numpy arrays and Arrow/polars lists arrive as non-Sequence iterables
    return hasattr(value, "__iter__") and hasattr(value, "__len__") and not isinstance(value, Mapping)
