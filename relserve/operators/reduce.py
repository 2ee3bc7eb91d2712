"""``llm_reduce``: fold each group's values into one prompt, as a tree when a group is too big.

A group whose values fit in one prompt (the engine's context minus ``max_tokens`` for the
answer) is answered by one prompt. A bigger group is cut into consecutive chunks that fit
(``packing.pack``); each chunk's answer is a partial result, and the partial results are folded
again with the same template, level after level, until one prompt holds them all.

Every level is ONE relQuery for all groups at once: a small group's only prompt runs beside a
big group's first chunks, so it does not wait for them, and the scheduler sees the level whole.
Each level goes through the planner (``run_call``): identical prompts run once, answers come from
the result cache where they can, prompts are ordered for prefix sharing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from relserve.backend.protocol import Backend
from relserve.budget import Allowance, Budget
from relserve.errors import ConfigError, RowError
from relserve.functions import LLM_EXTRACT, LLM_MAP, LLMCall, check_given_options, make_call
from relserve.operators.budget import TokenCounter, context_of, item_budget, placeholders
from relserve.operators.packing import TooLong, estimate_levels, fold, pack
from relserve.operators.spending import OperatorWork, operator_allowance, relquery_work, without_budget
from relserve.operators.values import Group, GroupKey, Value
from relserve.planner.cache import ResultCache
from relserve.planner.cost import cost_model_of, engine_limits, estimate_seconds
from relserve.planner.engine_ref import EngineRef
from relserve.planner.plan import rows_of
from relserve.planner.plan_and_run import run_rows
from relserve.template import format_value
from relserve.validation import OnError, unicode_problem

#: a tree over values that each fit a prompt has at most log2(values) levels; far beyond any
#: real group, so reaching it means partial answers stopped shrinking (a bug, not a big group)
MAX_LEVELS = 40
WHO = "llm_reduce"


@dataclass(frozen=True)
class ReduceCall:
    """A reduction: the ``llm_map`` call each prompt runs, and the context it must fit in."""

    call: LLMCall
    #: shrink the context below the engine's (None: the engine's ``max_model_len``)
    context_tokens: int | None = None

    @property
    def placeholder(self) -> str:
        return self.call.template.columns[0]


def reduce_call(
    template: str, *, context_tokens: int | None = None, json_schema: object = None, **options: Any
) -> ReduceCall:
    """Check a reduction before anything runs: the template names exactly one placeholder (where
    the group's values go), the options are those of ``llm_map``. With ``json_schema`` every
    prompt is an ``llm_extract`` (structured output): a group's answer is JSON valid against the
    schema, and a tree's partial answers are that JSON, folded as text at the next level."""
    if "reorder_fields" in options and options["reorder_fields"]:
        raise ConfigError(f"{WHO} takes no reorder_fields: its prompt has one placeholder")
    check_given_options(LLM_MAP, options, WHO)  # here, naming llm_reduce, not the llm_map it runs
    placeholders(template, WHO, 1, "Summarize these reviews:\n{review}")
    if json_schema is not None:
        try:
            call = make_call(LLM_EXTRACT, template, json_schema=json_schema, **options)
        except ConfigError as e:
            raise ConfigError(f"{WHO}: json_schema: {str(e).removeprefix('llm_extract: ')}") from None
    else:
        call = make_call(LLM_MAP, template, **options)
    if call.options.examples:
        raise ConfigError(f"{WHO} takes no examples")
    context_of(None, context_tokens)  # checks the value
    return ReduceCall(call, context_tokens)


@dataclass
class LevelRun:
    """What one level of the tree did (one relQuery)."""

    level: int
    prompts: int
    groups_finishing: int
    prompts_run: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    latency_s: float = 0.0


@dataclass
class ReduceOutcome:
    """One value and one error per group, in input order (a key per group when given a mapping)."""

    values: list[str | None]
    errors: list[str | None]
    levels: list[LevelRun] = field(default_factory=list)
    keys: list[GroupKey] | None = None

    @property
    def failures(self) -> list[tuple[GroupKey, str]]:
        keys = self.keys if self.keys is not None else list(range(len(self.values)))
        return [(k, e) for k, e in zip(keys, self.errors) if e is not None]

    def as_dict(self) -> dict[GroupKey, str | None]:
        keys = self.keys if self.keys is not None else list(range(len(self.values)))
        return dict(zip(keys, self.values))

    @property
    def relqueries(self) -> int:
        return sum(1 for lv in self.levels if lv.prompts_run)


def _items(group: Group) -> list[str]:
    """The group's values as text, NULLs skipped (as SQL aggregates skip them)."""
    if group is None:
        return []
    if isinstance(group, (str, bytes)):
        raise ConfigError(f"{WHO}: a group must be a list of values, got a single {type(group).__name__}")
    return [v if isinstance(v, str) else format_value(v) for v in group if v is not None]


def _group_label(keys: list[GroupKey] | None, g: int) -> str:
    return f"group {keys[g]!r}" if keys is not None else f"group {g}"


def split_groups(groups: Mapping[GroupKey, Sequence[Value]] | Sequence[Group]) -> tuple[list[GroupKey] | None, list[Group]]:
    if isinstance(groups, Mapping):
        return list(groups.keys()), list(groups.values())
    if isinstance(groups, (str, bytes)) or not hasattr(groups, "__iter__"):
        raise ConfigError(f"{WHO}: groups must be a list of lists of values, or a mapping of key to values")
    return None, list(groups)


@dataclass(frozen=True)
class _Budget:
    counter: TokenCounter
    context: int
    overhead: int
    budget: int


def _budget(rc: ReduceCall, engine: Backend) -> _Budget:
    counter = TokenCounter.of(engine, rc.call.options.model)
    context = context_of(engine, rc.context_tokens)
    # the prompt around the values: the template with nothing folded in, plus a system message
    overhead = counter.prompt(rc.call.template.render({rc.placeholder: ""}))
    if rc.call.options.system:
        overhead += counter.count([rc.call.options.system])[0] + 8
    return _Budget(counter, context, overhead, item_budget(context, rc.call.max_tokens, overhead, WHO))


def _not_unicode(texts: Sequence[str]) -> str | None:
    """What is wrong with the first value that cannot be encoded (a lone surrogate from JSON), or None."""
    for i, text in enumerate(texts):
        problem = unicode_problem(text)
        if problem is not None:
            return f"value {i} is {problem}"
    return None


def run_reduce(
    rc: ReduceCall,
    groups: Sequence[Group],
    *,
    keys: list[GroupKey] | None = None,
    engine: Backend | None = None,
    cache: ResultCache | bool | None = True,
    progress: bool = False,
    cancel: threading.Event | None = None,
    budget: Allowance | None = None,
    budget_name: str = "call",
) -> ReduceOutcome:
    """Reduce every group; each level of the tree is one relQuery over all groups' chunks.

    ``cancel`` (a ``threading.Event``) is checked before every level: once set, the groups not
    yet answered get NULL and the error "cancelled" (a level already sent runs to its end).
    The call's budget (``max_tokens_total``, ``max_seconds``, ``on_budget``) holds over every
    level (relserve/operators/spending.py), under ``budget`` (a tenant's day) when given;
    ``budget_name`` is how its messages name it. Raises BudgetExceeded when it refuses the
    reduction before it starts."""
    ref = engine if isinstance(engine, EngineRef) else EngineRef(engine, rc.call.options.model)
    # the running engine's context and tokenizer; without one (all answers cached, say) the
    # defaults of the engine that would start, so nothing is started only to count tokens
    b = _budget(rc, ref.peek())
    raising = rc.call.options.on_error == OnError.RAISE
    # every prompt runs with on_error null: a failed chunk fails its group, not the others; the
    # budget is held over all levels at once (below), not by each level again
    call = without_budget(replace(rc.call, options=replace(rc.call.options, on_error=OnError.NULL)))

    n = len(groups)
    values: list[str | None] = [None] * n
    errors: list[str | None] = [None] * n
    items: dict[int, list[str]] = {}
    unreadable: dict[int, str] = {}
    for g, group in enumerate(groups):
        texts = _items(group)
        problem = _not_unicode(texts)
        if problem is not None:
            unreadable[g] = problem  # fails its group below, before the tokenizer meets it
        elif texts:
            items[g] = texts  # an empty group (no values, or only NULLs) is NULL, as in SQL
    tokens = dict(zip(items, b.counter.count_each(list(items.values()))))
    own = Budget.of(rc.call.options)
    work = _work(rc, b, list(tokens.values()), ref) if own.limited else None
    allowance = operator_allowance(own, WHO, work, budget, budget_name)

    def fail(g: int, message: str) -> None:
        errors[g] = f"{WHO}: {message}"
        items.pop(g, None)
        if raising:
            raise RowError(f"{WHO}: {_group_label(keys, g)}: {message}")

    for g, problem in unreadable.items():
        fail(g, problem)
    out = ReduceOutcome(values, errors, keys=keys)
    level = 0
    while items:
        if cancel is not None and cancel.is_set():
            for g in list(items):
                fail(g, f"cancelled before level {level}")
            break
        if level >= MAX_LEVELS:
            for g in list(items):
                fail(g, f"no answer after {MAX_LEVELS} levels")
            break
        jobs: list[tuple[int, str, bool]] = []  # (group, folded text, is the group's last prompt)
        for g in list(items):
            try:
                chunks = pack(tokens[g], b.budget)
            except TooLong as e:
                what = "a value" if level == 0 else "a partial answer"
                fail(g, f"{what} ({e.tokens} tokens) does not fit in a prompt ({e.budget} tokens for values in a "
                     f"context of {b.context}, after the template and max_tokens={rc.call.max_tokens})")
                continue
            for c in chunks:
                jobs.append((g, fold(items[g][c.start : c.stop]), len(chunks) == 1))
        if not jobs:
            break
        record = LevelRun(level, len(jobs), sum(1 for _, _, final in jobs if final))
        outcome = run_rows(call, rows_of(call, [[text for _, text, _ in jobs]]), engine=ref, cache=cache,
                           progress=progress, budget=allowance)
        record.prompts_run = outcome.ran
        if outcome.engine_stats is not None:
            s = outcome.engine_stats
            record.prompt_tokens, record.output_tokens = s.prompt_tokens, s.output_tokens
            record.cached_tokens, record.latency_s = s.cached_tokens, getattr(s, "latency_s", 0.0)
        out.levels.append(record)
        partial: dict[int, list[str]] = {}
        for (g, _, final), value, err in zip(jobs, outcome.values, outcome.errors):
            if g not in items:
                continue  # an earlier chunk of this group failed
            if err is not None or value is None:
                fail(g, f"level {level}: {err or 'no answer'}")
            elif final:
                values[g] = value
                items.pop(g)
            else:
                # structured output: the partial answer is folded as its JSON text
                partial.setdefault(g, []).append(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
        items = {g: partial[g] for g in items if g in partial}
        tokens = dict(zip(items, b.counter.count_each(list(items.values()))))
        level += 1
    return out


def _work(rc: ReduceCall, b: _Budget, per_group: list[list[int]], ref: EngineRef) -> OperatorWork:
    """Every level's prompts and tokens, as EXPLAIN predicts them (partial answers at their
    most: an upper bound), and their seconds alone on the engine."""
    fitting = [toks for toks in per_group if all(t + 3 <= b.budget for t in toks)]
    running = ref.peek()
    work = OperatorWork()
    for lv in estimate_levels(fitting, b.budget, rc.call.max_tokens):
        tokens = lv.value_tokens + lv.prompts * b.overhead
        work += relquery_work(running, ref.model_id, lv.prompts, tokens, rc.call.max_tokens)
    return work


# -- EXPLAIN ------------------------------------------------------------------------------------


@dataclass
class ReduceExplain:
    """What a reduction would run: groups, the tree's levels, prompts and tokens per level."""

    template: str
    model_id: str | None
    groups: int
    empty_groups: int
    values: int
    null_values: int
    #: groups holding a value too long for any prompt (they would get NULL and an error)
    too_long_groups: int
    context_tokens: int
    #: tokens a prompt has for folded values (context - template - max_tokens - safety)
    value_budget: int
    template_tokens: int
    max_tokens: int
    token_source: str
    #: per level: prompts (one relQuery), groups finishing, estimated prompt tokens and seconds
    levels: list[dict[str, Any]]
    cost_model: str

    @property
    def estimated_prompt_tokens(self) -> int:
        return sum(lv["prompt_tokens"] for lv in self.levels)

    @property
    def estimated_seconds(self) -> float:
        return sum(lv["estimated_s"] for lv in self.levels)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["estimated_prompt_tokens"] = self.estimated_prompt_tokens
        d["estimated_seconds"] = self.estimated_seconds
        return d

    def __str__(self) -> str:
        lines = [
            f"{WHO}({self.template!r})  model={self.model_id}",
            f"  groups                {self.groups:>10,}   ({self.empty_groups} empty: NULL, no prompt)",
            f"  values                {self.values:>10,}   ({self.null_values} NULL, skipped)",
            f"  groups too long       {self.too_long_groups:>10,}   (a value does not fit a prompt: NULL + error)",
            f"  context               {self.context_tokens:>10,} tokens   ({self.value_budget:,} for values after the "
            f"template ({self.template_tokens}) and max_tokens={self.max_tokens}; tokens: {self.token_source})",
            f"  levels                {len(self.levels):>10,}   (each ONE relQuery over all groups)",
        ]
        for lv in self.levels:
            lines.append(
                f"    level {lv['level']}: {lv['prompts']:>6,} prompts, {lv['groups_finishing']:>5,} groups finish, "
                f"~{lv['prompt_tokens']:,} prompt tokens, ~{lv['estimated_s']:.1f}s"
            )
        lines.append(
            f"  estimated             {self.estimated_prompt_tokens:>10,} prompt tokens, ~{self.estimated_seconds:.1f}s "
            f"(cost model: {self.cost_model}; levels after the first assume answers of max_tokens)"
        )
        return "\n".join(lines)


def _model_id(running: Backend | None, model: str | None) -> str | None:
    if running is not None:
        return running.model_id
    try:  # the model's name without loading it (EXPLAIN never starts the engine)
        from relserve.model import resolve_model

        return resolve_model(model, prepare=False).model_id
    except Exception:
        return None


def explain_reduce(
    rc: ReduceCall, groups: Sequence[Group], *, engine: Backend | None = None
) -> ReduceExplain:
    """The tree each group would need and what each level costs; never starts the engine."""
    ref = engine if isinstance(engine, EngineRef) else EngineRef(engine, rc.call.options.model)
    running = ref.peek()
    b = _budget(rc, running)
    texts = [_items(g) for g in groups]
    nulls = sum(sum(1 for v in g if v is None) for g in groups if g is not None)
    per_group, too_long = [], 0
    for toks in b.counter.count_each(texts):
        if any(t + 3 > b.budget for t in toks):
            too_long += 1
            toks = []
        per_group.append(toks)
    model_id = _model_id(running, rc.call.options.model)
    cost = cost_model_of(running, model_id)
    seqs, step_budget = engine_limits(running)
    levels = []
    for lv in estimate_levels(per_group, b.budget, rc.call.max_tokens):
        tokens = lv.value_tokens + lv.prompts * b.overhead
        secs = estimate_seconds(cost, lv.prompts, tokens, rc.call.max_tokens, max_seqs=seqs, token_budget=step_budget)
        levels.append({**asdict(lv), "prompt_tokens": tokens, "estimated_s": secs})
    return ReduceExplain(
        template=rc.call.template.source,
        model_id=model_id,
        groups=len(groups),
        empty_groups=sum(1 for g in texts if not g),
        values=sum(len(g) for g in texts),
        null_values=nulls,
        too_long_groups=too_long,
        context_tokens=b.context,
        value_budget=b.budget,
        template_tokens=b.overhead,
        max_tokens=rc.call.max_tokens,
        token_source=b.counter.kind,
        levels=levels,
        cost_model=getattr(cost, "source", "default"),
    )
