"""Run a call synchronously (DuckDB, polars): plan it, hand the prompts left to run to the
``CallExecutor``, and give every input row its value in input order."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from relserve.backend.protocol import Backend
from relserve.budget import Allowance
from relserve.cascade import policy as cascade_policy
from relserve.cascade.report import CascadeReport
from relserve.errors import RowError, warn_at_caller
from relserve.estimate.budgeted import call_allowance
from relserve.functions import LLMCall
from relserve.labels.keys import namespace_of
from relserve.labels.memory import process_memory
from relserve.labels.resolution import resolve
from relserve.planner.cache import ResultCache, shared_cache
from relserve.planner.engine_ref import EngineRef
from relserve.planner.executor import CallExecutor
from relserve.planner.explain import Analyzed, Explain, describe_labels, explain_plan
from relserve.planner.plan import CallPlan, plan_rows, rows_of
from relserve.planner.planned_rows import PlannedRows
from relserve.planner.tokens import token_source
from relserve.prompt_rendering import Renderer, null_error
from relserve.results import RowResult


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
    #: what the model cascade did (``cascade`` option; None when it did not run)
    cascade: CascadeReport | None = None
    #: per input row, its result with who answered it (``answered_by``, ``confidence``); kept
    #: when a cascade ran, for the surfaces that show per-row details (polars)
    details: list[RowResult | None] | None = None
    #: wall time of the call (planning and running)
    seconds: float = 0.0
    #: what the label method learned (the adaptive method: layout, estimated prior; None: nothing)
    labels: Any = None
    #: why the labels are close to guesses (None: they are not); also raised as a LabelWarning
    warning: str | None = None
    #: seconds of the label method's first pass before the rows ran (None: no plan was made)
    first_pass_s: float | None = None

    @property
    def failures(self) -> list[tuple[int, str]]:
        return [(i, e) for i, e in enumerate(self.errors) if e is not None]


def run_call(
    call: LLMCall,
    columns: Sequence[Sequence[object]],
    *,
    engine: Backend | None = None,
    cache: ResultCache | bool | None = True,
    optimize: bool = True,
    progress: bool = True,
    pin_prefix: bool = True,
    explain_only: bool = False,
    until: Callable[[list[RowResult]], bool] | None = None,
) -> CallOutcome:
    """Plan and run ``call`` over rows given as columns aligned with ``call.template.columns``
    (see ``run_rows``)."""
    return run_rows(call, rows_of(call, columns), engine=engine, cache=cache, optimize=optimize,
                    progress=progress, pin_prefix=pin_prefix, explain_only=explain_only, until=until)


def run_rows(
    call: LLMCall,
    rows: Sequence[tuple],
    *,
    engine: Backend | None = None,
    cache: ResultCache | bool | None = True,
    optimize: bool = True,
    progress: bool = True,
    pin_prefix: bool = True,
    explain_only: bool = False,
    budget: Allowance | None = None,
    until: Callable[[list[RowResult]], bool] | None = None,
) -> CallOutcome:
    """Plan and run ``call`` over row tuples aligned with ``call.template.columns``.

    ``engine`` may be an engine, an ``EngineRef`` or None (the default engine, started only if a
    row is not in the result cache). With ``explain_only`` nothing runs: the outcome carries the
    EXPLAIN and NULL values. ``budget``: a statement's budget the call spends from, besides its
    own (``llm_options(max_tokens_total := ..., max_seconds := ...)``; relserve/budget.py).
    ``until``: given the rows as they are answered (their ``index`` the input row's); once it
    returns True the rest are cancelled and come back unanswered (a statement that needs only
    some rows: ``LIMIT``; not under a model cascade, which answers its rows in two relQueries).
    """
    t0 = time.perf_counter()
    ref = engine if isinstance(engine, EngineRef) else EngineRef(engine, call.options.model)
    # (not `cache or None`: an empty ResultCache has len 0, and would never be written)
    store = shared_cache() if cache is True else (None if cache is None or cache is False else cache)
    plan = plan_rows(call, rows, model_id=ref.model_id, cache=store, optimize=optimize, namespace=namespace_of(ref.peek()),
                     memory=process_memory())

    if explain_only:
        running = ref.peek()
        ex = explain_plan(plan, token_source(running, ref.model), engine=running)
        return CallOutcome([None] * plan.rows, [None] * plan.rows, plan, explain=ex)

    if call.options.on_error == "raise" and plan.row_errors:
        first = min(plan.row_errors)
        raise RowError(f"{_row_label(plan, first)}: {plan.row_errors[first]}")

    rows = PlannedRows.of(plan, store if call.deterministic else None)
    if until is not None:
        rows.spread()  # a statement that stops early meets the kinds of rows in turn, not in groups
    done: list[RowResult | None] = [None] * plan.rows
    for row in rows.ready:
        done[row.index] = row
    stats = report = label_report = warning = first_pass_s = None
    fail_fast = call.options.on_error == "raise"
    allowance = None
    if rows.prompts:
        # issue 47: the call's budget, checked against its estimate; every relQuery spends from it
        allowance = call_allowance(plan.call, rows.prompts, ref.get(), plan.model_id,
                                   plan.shared_prefix() if pin_prefix else "", budget, values=rows.values)

    def executor_for(some: PlannedRows) -> CallExecutor:
        # a cascade's relQueries run subsets of the plan's prompts: each pins its own shared prefix
        return CallExecutor(some, model_id=plan.model_id, prefix=some.shared_prefix() if pin_prefix else "",
                            error_prefix=f"{call.function.name}: ", budget=allowance)

    cascade = cascade_policy.plan(plan.call, len(rows.prompts))
    if rows.prompts and cascade.applies:
        # (imported here: the cascade runner imports the planner's modules)
        from relserve.planner.cascade_drive import make_cascade, run_cascade

        ran = run_cascade(make_cascade(rows, cascade, seed=call.options.seed or 0), ref.get(), executor_for,
                          progress=progress, fail_fast=fail_fast)
        for row in ran.rows:
            done[row.index] = row
        stats, report = ran.stats, ran.report
        if ran.last is not None:
            label_report, warning = ran.last.label_report, ran.last.warning
    elif rows.prompts:
        executor = CallExecutor(
            rows,
            model_id=plan.model_id,
            prefix=plan.shared_prefix() if pin_prefix else "",
            error_prefix=f"{call.function.name}: ",
            budget=allowance,
        )
        for row in executor.run(ref.get(), progress=progress, fail_fast=fail_fast, until=until):
            done[row.index] = row
        stats = executor.stats
        label_report, warning = executor.label_report, executor.warning
        first_pass_s = executor.first_pass_s

    if warning is None:
        # every row came from the cache (or the relQuery did not warn): the cache's own warning
        warning = rows.cached_warning
    unanswered = f"{call.function.name}: no answer (cancelled)"
    values = [r.value if r is not None else None for r in done]
    errors = [r.error if r is not None else unanswered for r in done]
    engine_rows = report.llm_rows if report is not None else len(rows.prompts)
    outcome = CallOutcome(values, errors, plan, engine_stats=stats, ran=engine_rows, cascade=report,
                          details=done if report is not None else None, seconds=time.perf_counter() - t0,
                          labels=label_report, warning=warning, first_pass_s=first_pass_s)
    if warning is not None:
        # the rows are answered all the same; the warning says how little they can be trusted
        warn_at_caller(warning)
    if call.options.on_error == "raise" and outcome.failures:
        # name the row that failed, not a row left unanswered because the run stopped at that failure
        i, err = next(((i, e) for i, e in outcome.failures if e != unanswered), outcome.failures[0])
        raise RowError(f"{_row_label(plan, i)}: {err}")
    return outcome


def analyzed(call: LLMCall, outcome: CallOutcome) -> Analyzed:
    """EXPLAIN ANALYZE of a call that ran (``outcome``): rows, LLM rows, time, the cascade."""
    planned = outcome.plan.call if outcome.plan is not None else call
    skipped = cascade_policy.plan(planned, outcome.ran).describe() if outcome.cascade is None else "off"
    return Analyzed(call.function.name, call.template.source, len(outcome.values), outcome.ran, outcome.seconds,
                    outcome.cascade, skipped, labels=describe_labels(outcome.labels), warning=outcome.warning)


def _row_label(plan: CallPlan, row: int) -> str:
    """'row 3 (review='Great film')': names the row by position and placeholder values."""
    values = plan.distinct.values[plan.distinct.row_to_distinct[row]]
    shown = ", ".join(f"{name}={_short(v)}" for name, v in zip(plan.call.template.columns, values))
    return f"row {row} ({shown})"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."



def cached_values(
    call: LLMCall, values: Sequence[tuple], *, model_id: str, cache: ResultCache | None, namespace: str | None = None
) -> dict[int, tuple[Any, str | None]]:
    """(value, error) of the rows whose answer is in the result cache, by position in ``values``.

    For surfaces that meet rows a chunk at a time: known rows need not wait for the relQuery.
    Field reordering decides prompts over the whole table, so such calls are not looked up here.
    """
    if cache is None or not call.deterministic or call.options.reorder_fields or not values:
        return {}
    # a closed question's answers are cached under the label plan that decided them
    labels = resolve(call, len(values), memory=process_memory(), namespace=namespace, model_id=model_id)
    if labels.key is not None:
        call = replace(call, plan_id=labels.plan_id)
    render = Renderer(call)
    runnable = [i for i, v in enumerate(values) if null_error(call, v) is None]
    prompts = [render(values[i]) for i in runnable]
    hits = cache.get_many(model_id, call.sampling_settings(), prompts)
    if hits:
        # answers a label method warned about say so again when they come from the cache
        warning = cache.cached_warning(model_id, call.sampling_settings(), [prompts[j] for j in hits])
        if warning is not None:
            warn_at_caller(warning)
    return {runnable[j]: call.answer(text) for j, text in hits.items()}
