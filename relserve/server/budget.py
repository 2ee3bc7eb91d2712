"""What a request will cost, from the sizes of what it carries, before anything is rendered.

A template's placeholders are rendered once per row, so a small body can ask for a very large
amount of text (``"{a}" * 20000`` with a 5 MB value). ``Cost`` is computed from lengths only
(rows x the length each row's prompt will have: the template's literal text plus, for every
placeholder occurrence, the length of the value it gets), in time linear in the body, and is
checked against the tenant's limits before the planner renders anything. The same figures
(engine rows and tokens: estimated prompt tokens plus the most answer tokens each row may
produce) count against the tenant while a request is planned and while it runs. A filter's or a
classify's rows count what its label path sends besides them (``label_cost``): a first pass, and
one engine request per label-trie node a scored prompt reads, counted on the engine's own trie.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from relserve.server.tenants import Tenant
from relserve.template import Template, format_value

if TYPE_CHECKING:  # imported at run time where it is used
    from relserve.budget import Allowance

#: characters per prompt token assumed when counting tokens before tokenizing. SmolLM2's
#: tokenizer averages about 4 on English; 3 over-counts ordinary text a little and under-counts
#: adversarial text (one token per character) by at most a factor of three, which ``max_rendered_chars`` bounds.
CHARS_PER_TOKEN = 3
#: the chat template's own tokens around every prompt (SmolLM2: about 30 with its system message)
CHAT_OVERHEAD_TOKENS = 32
#: {"name": value} JSON around each value when fields are reordered (quotes, colon, comma)
_FIELD_OVERHEAD = 8
#: "Answer: " and the separators around an example
_EXAMPLE_OVERHEAD = 32


@dataclass(frozen=True)
class Cost:
    """A request's size: rows, rendered prompt characters, tokens (prompt estimate + answers)."""

    rows: int
    chars: int
    tokens: int
    #: of ``rows``, the prompts a ``bootstrap`` first pass scores a second time (no new text)
    first_pass: int = 0
    #: of ``rows``, the requests that score a prompt's labels beyond its first (one per
    #: label-trie node read: relserve/engine/label_scoring.asks)
    scoring: int = 0

    @classmethod
    def of(cls, rows: int, chars: int, max_tokens: int) -> Cost:
        prompt_tokens = -(-chars // CHARS_PER_TOKEN) + rows * CHAT_OVERHEAD_TOKENS
        return cls(rows, chars, prompt_tokens + rows * max_tokens)

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.rows + other.rows, self.chars + other.chars, self.tokens + other.tokens,
                    self.first_pass + other.first_pass, self.scoring + other.scoring)

    @property
    def own_rows(self) -> int:
        """The request's own rows, without the first pass's second scoring of some of them."""
        return self.rows - self.first_pass - self.scoring

    @property
    def per_prompt(self) -> int:
        """The engine requests each prompt sends (its scoring requests; 1 when decoded)."""
        prompts = self.rows - self.scoring
        return self.rows // prompts if prompts else 1

    def describe_rows(self) -> str:
        """"100 rows", or "100 rows, and 32 first-pass scoring requests", and the requests that
        score each prompt's labels when there are several."""
        out = f"{self.own_rows} rows" + (f", and {self.first_pass} first-pass scoring requests" if self.first_pass else "")
        if self.scoring:
            out += f", each prompt scored by {self.per_prompt} requests (its labels' trie)"
        return out


ZERO = Cost(0, 0, 0)


class RequestTooLarge(Exception):
    """One request alone is over a per-request size limit: it could never run (HTTP 413)."""


class LimitExceeded(Exception):
    """A tenant's rows- or tokens-in-flight limit would be passed (HTTP 429)."""


def _value_len(value: object, as_json: bool = False) -> int:
    """The length ``value`` has in a prompt: as text, or (fields reordered) as a JSON string,
    where quotes and control characters take more room."""
    if value is None:
        return 0
    if isinstance(value, str):
        return len(json.dumps(value, ensure_ascii=False)) if as_json else len(value)
    text = format_value(value)
    return len(json.dumps(text, ensure_ascii=False)) if as_json else len(text)


def _reordered(call: object) -> bool:
    return bool(getattr(getattr(call, "options", None), "reorder_fields", False))


def check_template(template: str, system: str | None, tenant: Tenant, what: str = "template") -> Template:
    """The template parsed, if it is within the tenant's size and placeholder limits (413)."""
    lim = tenant.limits
    size = len(template) + len(system or "")
    if size > lim.max_template_chars:
        raise RequestTooLarge(
            f"{what} too large: {size} characters (template plus system message); "
            f"the limit max_template_chars is {lim.max_template_chars}",
        )
    parsed = Template.parse(template)  # TemplateError: 400
    if len(parsed.fields) > lim.max_placeholders:
        raise RequestTooLarge(
            f"{what} has {len(parsed.fields)} placeholders; the limit max_placeholders is {lim.max_placeholders}",
        )
    return parsed


def _examples_chars(parsed: Template, call: object) -> int:
    """The few-shot examples' text (the template rendered for each, plus its answer), from
    lengths: rendering them is what an oversized request must not get to do."""
    examples = getattr(getattr(call, "options", None), "examples", None) or ()
    literal = sum(map(len, parsed.literals))
    total = 0
    for ex in examples:
        values = dict(ex)
        total += literal + sum(_value_len(values.get(n)) for n in parsed.fields)
        total += len(str(values.get("answer", ""))) + _instruction_chars(call) + _EXAMPLE_OVERHEAD
    return total


def _static_chars(parsed: Template, call: object) -> int:
    """Characters every row's prompt carries besides its values: the template's literal text,
    the system message and the few-shot examples."""
    system = getattr(getattr(call, "options", None), "system", None) or ""
    names = sum(len(n) + _FIELD_OVERHEAD for n in parsed.fields)  # reorder_fields: {"name": value}
    instruction = _instruction_chars(call)  # appended to every prompt (labels, schema)
    return sum(map(len, parsed.literals)) + len(system) + instruction + _examples_chars(parsed, call) + names


def _instruction_chars(call: object) -> int:
    try:
        return len(call.answer_instruction or "")
    except Exception:
        return 0


def rows_cost(parsed: Template, call: object, rows: Sequence[Mapping[str, object]], max_tokens: int,
              engine: object) -> Cost:
    """``template`` over ``rows`` (by name), computed from lengths, with what its label path sends
    on ``engine`` (``label_cost``)."""
    return label_cost(rows_size(parsed, call, rows, max_tokens), call, max_tokens, engine)


def rows_size(parsed: Template, call: object, rows: Sequence[Mapping[str, object]], max_tokens: int) -> Cost:
    """``template`` over ``rows`` (by name), computed from lengths: the prompts alone."""
    static = _static_chars(parsed, call)
    counts: dict[str, int] = {}
    for name in parsed.fields:
        counts[name] = counts.get(name, 0) + 1
    chars = static * len(rows)
    as_json = _reordered(call)
    for row in rows:
        get = row.get
        for name, n in counts.items():
            chars += n * _value_len(get(name), as_json)
    return Cost.of(len(rows), chars, max_tokens)


def prompts_cost(prompts: Iterable[str | None], call: object, max_tokens: int, engine: object) -> Cost:
    """Already-rendered prompts (plus the system message each carries), with what the label
    path sends on ``engine`` (``label_cost``)."""
    system = len(getattr(getattr(call, "options", None), "system", None) or "") + _instruction_chars(call)
    n = chars = 0
    for p in prompts:
        n += 1
        chars += len(p or "") + system
    return label_cost(Cost.of(n, chars, max_tokens), call, max_tokens, engine)


def first_pass_rows(call: object, rows: int) -> int:
    """The prompts a call of ``rows`` prompts scores before its rows: a ``bootstrap`` or an
    ``adaptive`` call's first pass (relserve/labels/methods.first_pass_requests); 0 for
    every other method."""
    from relserve.labels.methods import first_pass_requests

    if getattr(call, "options", None) is None:
        return 0
    return first_pass_requests(call, rows)


def with_first_pass(cost: Cost, call: object) -> Cost:
    """``cost`` plus a label call's first pass, as a share of its rows (the sample is spread
    over them), so a tenant's limits count every request the engine runs for it."""
    if not cost.rows:
        return cost  # nothing for the engine (every row cached or NULL): no first pass either
    k = first_pass_rows(call, cost.rows)
    if not k:
        return cost
    # the first pass sends prompts the request already renders: rows and tokens, no new text
    return cost + Cost(k, 0, -(-cost.tokens * k // cost.rows), k)


def label_cost(cost: Cost, call: object, max_tokens: int, engine: object,
               values: Sequence[tuple] | None = None) -> Cost:
    """``cost``, one relQuery's prompts of ``call``, plus what its label path sends besides them:
    a first pass (``with_first_pass``), and when a scored prompt reads several label-trie nodes
    on ``engine``, one request per node (``values``: the prompts' values, whose column labels a
    filter's layout may score on)."""
    per = prompt_requests(call, cost.rows, engine, values)
    cost = with_first_pass(cost, call)
    if per <= 1:
        return cost
    prompts = cost.rows
    # each request answers one token (the engine's budget counts a scored row as its prompt
    # plus its requests); a prompt keeps max_tokens when that is more, as before
    extra_tokens = prompts * max(0, per - max_tokens)
    return Cost(prompts * per, cost.chars, cost.tokens + extra_tokens, cost.first_pass, prompts * (per - 1))


def prompt_requests(call: object, prompts: int, engine: object, values: Sequence[tuple] | None = None) -> int:
    """The engine requests one prompt of ``call``'s relQuery of ``prompts`` prompts sends: one per
    label-trie node its scoring reads, on ``engine``'s trie (relserve/estimate/label_work.py
    ``scoring_requests``); 1 for a call without labels."""
    if call is None or getattr(call, "choices", None) is None or not prompts:
        return 1
    from relserve.estimate.label_work import scoring_requests

    return scoring_requests(call, prompts, _tokenizer(engine), engine, values)


class _ByteTokens:
    """A tokenizer of one token per byte, for a server that cannot load its model's: a label has
    no fewer bytes than tokens, so its requests are counted on the long side."""

    eos_token_id = None

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        data = text.encode()
        if data[:1] == b" " and len(data) > 1:
            # a leading space folds into the first token, as in BPE tokenizers (" yes", " no"):
            # else every label after an answer field would share a node
            return {"input_ids": [256 + data[1], *data[2:]]}
        return {"input_ids": list(data)}


def _tokenizer(engine: object) -> object:
    """The tokenizer ``engine`` builds its label tries with: its own, else the default model's
    (a backend that shows none), else bytes."""
    tokenizer = getattr(engine, "tokenizer", None)
    if tokenizer is not None:
        return tokenizer
    from relserve.errors import ConfigError
    from relserve.estimate.prompt_tokens import prompt_tokenizer

    try:
        return prompt_tokenizer(None, None).tokenizer
    except ConfigError:
        return _ByteTokens()


def values_cost(parsed: Template, call: object, values: Sequence[object], max_tokens: int) -> Cost:
    """One spreadsheet cell: ``values`` bound by position (or a mapping by name). Its prompt
    alone: the cells of a request share one label path (``label_cost`` of them all)."""
    if isinstance(values, Mapping):
        return rows_size(parsed, call, [values], max_tokens)
    by_name = dict(zip(parsed.columns, values))
    return rows_size(parsed, call, [by_name], max_tokens)


def check_request(cost: Cost, tenant: Tenant) -> None:
    """413 if one request alone is over a per-request limit (it could never run)."""
    lim = tenant.limits
    if cost.chars > lim.max_rendered_chars:
        raise RequestTooLarge(
            f"request too large: its prompts would render to {cost.chars} characters "
            f"({cost.own_rows} rows); the limit max_rendered_chars is {lim.max_rendered_chars}. "
            "Send fewer or shorter rows.",
        )
    if cost.tokens > lim.max_tokens_in_flight:
        raise RequestTooLarge(
            f"request too large: {cost.tokens} tokens (prompts, estimated at {CHARS_PER_TOKEN} characters per "
            f"token, plus max_tokens per row{', or a token per scoring request when more' if cost.scoring else ''}, "
            f"{cost.describe_rows()}); the limit max_tokens_in_flight is "
            f"{lim.max_tokens_in_flight}. Send fewer rows or a smaller max_tokens.",
        )


def call_max_tokens(call: object) -> int:
    try:
        return int(call.engine_options()["max_tokens"])
    except (AttributeError, KeyError, TypeError):
        return int(getattr(call, "max_tokens", 64) or 64)



# ---------------------------------------------------------------- tokens per tenant and day (issue 47)


class DailyBudgetExceeded(Exception):
    """A request its tenant's tokens left today cannot cover (HTTP 429 until the day turns)."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class DayBudgets:
    """Each tenant's engine tokens of the current UTC day, as an ``Allowance`` every job of the
    tenant spends from (relserve/budget.py): the engine starts a row only when its most
    tokens fit what is left of the day, and counts what it used. Kept in the server's memory: a
    restarted server starts the day's count afresh."""

    def __init__(self) -> None:
        import threading

        self._days: dict[str, tuple[str, Allowance]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def today() -> str:
        import datetime

        return datetime.datetime.now(datetime.UTC).date().isoformat()

    @staticmethod
    def seconds_to_midnight() -> int:
        import datetime

        now = datetime.datetime.now(datetime.UTC)
        midnight = (now + datetime.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
        return max(1, int((midnight - now).total_seconds()) + 1)

    def allowance(self, tenant: Tenant) -> Allowance | None:
        """The tenant's allowance for today (None: no daily limit)."""
        from relserve.budget import Allowance

        limit = tenant.limits.max_tokens_per_day
        if limit is None:
            return None
        day = self.today()
        with self._lock:
            got = self._days.get(tenant.name)
            if got is None or got[0] != day or got[1].max_tokens != limit:
                spent = got[1].spent_tokens if got is not None and got[0] == day else 0
                allowance = Allowance(limit, name=f"tenant {tenant.name}", tokens_limit="max_tokens_per_day")
                allowance.charge(spent)
                got = self._days[tenant.name] = (day, allowance)
            return got[1]

    def check(self, tenant: Tenant, most_tokens: int, on_budget: str) -> Allowance | None:
        """The day's allowance a request of at most ``most_tokens`` spends from; raises
        DailyBudgetExceeded when it may not fit and the request refuses (``on_budget``)."""
        allowance = self.allowance(tenant)
        if allowance is None:
            return None
        left = allowance.left() or 0
        if on_budget == "refuse" and most_tokens > left:
            raise DailyBudgetExceeded(
                f"tenant {tenant.name!r}: refused before starting: this request may spend {most_tokens:,} engine tokens "
                f"(prompt tokens plus max_tokens per request) and {left:,} of the tenant's max_tokens_per_day "
                f"{tenant.limits.max_tokens_per_day:,} are left today (UTC). Send fewer rows, or set on_budget 'partial' "
                "to answer the rows that fit.",
                self.seconds_to_midnight(),
            )
        return allowance
