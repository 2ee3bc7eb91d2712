"""Run a planned call: pin the shared prefix, send the prompts left to run as one relQuery,
store the new answers in the result cache, and give every input row its value in input order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from relserve.errors import RowError
from relserve.functions import LLMCall
from relserve.planner.cache import ResultCache, shared_cache
from relserve.planner.engine_ref import EngineRef
from relserve.planner.explain import Explain, explain_plan
from relserve.planner.label_prior import label_options
from relserve.planner.plan import CallPlan, plan_call
from relserve.planner.prompts import Renderer, null_error
from relserve.planner.tokens import token_source
from relserve.progress import progress_bar


@dataclass
class CallOutcome:
    """Values and errors of every input row, in input order, plus what it took."""

    values: list[Any]
    errors: list[str | None]
    plan: CallPlan
    #: the engine's statistics of the relQuery (None when nothing ran)
    engine_stats: Any = None
    explain: Explain | None = None
    #: prompts the engine answered (cache misses)
    ran: int = 0

    @property
    def failures(self) -> list[tuple[int, str]]:
        return [(i, e) for i, e in enumerate(self.errors) if e is not None]


def run_call(
    call: LLMCall,
    columns: Sequence[Sequence[object]],
    *,
    engine: Any = None,
    cache: ResultCache | bool | None = True,
    optimize: bool = True,
    progress: bool = True,
    pin_prefix: bool = True,
    explain_only: bool = False,
) -> CallOutcome:
    """Plan and run ``call`` over rows given as columns aligned with ``call.template.columns``.

    ``engine`` may be an engine, an ``EngineRef`` or None (the default engine, started only if a
    row is not in the result cache). With ``explain_only`` nothing runs: the outcome carries the
    EXPLAIN and NULL values.
    """
    ref = engine if isinstance(engine, EngineRef) else EngineRef(engine, call.options.model)
    store = shared_cache() if cache is True else (cache or None)
    plan = plan_call(call, columns, model_id=ref.model_id, cache=store, optimize=optimize)

    if explain_only:
        running = ref.peek()
        ex = explain_plan(plan, token_source(running, ref.model), engine=running)
        return CallOutcome([None] * plan.rows, [None] * plan.rows, plan, explain=ex)

    if call.options.on_error == "raise" and plan.row_errors:
        first = min(plan.row_errors)
        raise RowError(f"{_row_label(plan, first)}: {plan.row_errors[first]}")

    answers: dict[int, str] = dict(plan.cached)
    failed: dict[int, str] = {}
    stats = None
    if plan.run_order:
        engine_obj = ref.get()
        stats = _run_on_engine(plan, engine_obj, answers, failed, progress=progress, pin_prefix=pin_prefix)
        if store is not None and call.deterministic:
            new = [(plan.prompts[p], answers[p]) for p in plan.run_order if p in answers]
            store.put_many(plan.model_id, call.sampling_settings(), new)

    outcome = _fan_out(plan, answers, failed)
    outcome.engine_stats = stats
    outcome.ran = len(plan.run_order)
    if call.options.on_error == "raise" and outcome.failures:
        i, err = outcome.failures[0]
        raise RowError(f"{_row_label(plan, i)}: {err}")
    return outcome


def _row_label(plan: CallPlan, row: int) -> str:
    """'row 3 (review='Great film')': names the row by position and placeholder values."""
    values = plan.distinct.values[plan.distinct.row_to_distinct[row]]
    shown = ", ".join(f"{name}={_short(v)}" for name, v in zip(plan.call.template.columns, values))
    return f"row {row} ({shown})"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."



def cached_values(
    call: LLMCall, values: Sequence[tuple], *, model_id: str, cache: ResultCache | None
) -> dict[int, tuple[Any, str | None]]:
    """(value, error) of the rows whose answer is in the result cache, by position in ``values``.

    For surfaces that meet rows a chunk at a time: known rows need not wait for the relQuery.
    Field reordering decides prompts over the whole table, so such calls are not looked up here.
    """
    if cache is None or not call.deterministic or call.options.reorder_fields or not values:
        return {}
    render = Renderer(call)
    runnable = [i for i, v in enumerate(values) if null_error(call, v) is None]
    hits = cache.get_many(model_id, call.sampling_settings(), [render(values[i]) for i in runnable])
    out: dict[int, tuple[Any, str | None]] = {}
    for j, text in hits.items():
        try:
            out[runnable[j]] = (call.convert(text), None)
        except RowError as e:
            out[runnable[j]] = (None, str(e))
    return out


def _run_on_engine(
    plan: CallPlan,
    engine: Any,
    answers: dict[int, str],
    failed: dict[int, str],
    *,
    progress: bool,
    pin_prefix: bool,
) -> Any:
    try:
        from relserve import RelQuery
    except ImportError:  # the engine package exports it; the module is enough here
        from relserve.relquery import RelQuery

    call = plan.call
    prompts = plan.run_prompts
    if pin_prefix and len(prompts) > 1:
        prefix = plan.shared_prefix()
        if prefix:
            # prefill the shared prefix once, before the rows, instead of in every row of the
            # first batch (the engine skips prefixes shorter than one KV block)
            engine.warm_prefix(prefix)
    scoring = label_options(call, engine, plan.model_id)
    rq = RelQuery.from_prompts(
        prompts,
        max_tokens=call.max_tokens,
        temperature=call.options.temperature,
        choices=list(call.choices) if call.choices else None,
        json_schema=call.json_schema,
        on_error="null",
        **scoring,
    )
    handle = engine.submit(rq)
    fail_fast = call.options.on_error == "raise"
    with progress_bar(len(prompts), call.function.name, show=progress) as bar:
        for row in handle:
            bar.update(1)
            if fail_fast and row.error is not None:
                handle.cancel()
                break
    result = handle.result()
    for row in result.rows:
        p = plan.run_order[row.index]
        if row.error is None and row.text is not None:
            answers[p] = row.text
        else:
            failed[p] = f"{call.function.name}: {row.error or 'no answer'}"
    return result.stats


def _fan_out(plan: CallPlan, answers: dict[int, str], failed: dict[int, str]) -> CallOutcome:
    call = plan.call
    converted: dict[int, tuple[Any, str | None]] = {}
    values: list[Any] = [None] * plan.rows
    errors: list[str | None] = [None] * plan.rows
    for i, p in enumerate(plan.row_to_prompt):
        if p < 0:
            errors[i] = plan.row_errors[i]
            continue
        got = converted.get(p)
        if got is None:
            if p in answers:
                try:
                    got = (call.convert(answers[p]), None)
                except RowError as e:
                    got = (None, str(e))
            else:
                got = (None, failed.get(p, f"{call.function.name}: no answer (cancelled)"))
            converted[p] = got
        values[i], errors[i] = got
    return CallOutcome(values, errors, plan)
