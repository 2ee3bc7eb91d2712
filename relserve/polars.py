"""LLM functions as polars expressions: ``pl.col("review").llm.map(...)``, one relQuery per call.

    import polars as pl
    import relserve.polars  # registers the .llm namespaces

    df.with_columns(pl.col("review").llm.filter("Is {review} positive?").alias("positive"))
    df.with_columns(pl.struct("title", "text").llm.map("Summarize {title}: {text}").alias("summary"))
    df.llm.classify("Sentiment of {text}", ["positive", "negative"], alias="sentiment")

Binding: a struct expression binds placeholders by field name; any other expression must fill a
template with exactly one placeholder. The frame namespace (``df.llm`` / ``lf.llm``) binds by
column name and checks the columns before anything runs.

The expression sees the whole column (``map_batches`` is not elementwise), so eager and lazy
frames alike send one relQuery per call (per group inside ``group_by().agg``).
(This module is ``relserve.polars``; ``import polars`` inside the package still means polars.)
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import polars as pl

from relserve import settings
from relserve.backend.protocol import Backend
from relserve.binding import Binding
from relserve.cell_values import polars_values
from relserve.errors import ConfigError
from relserve.functions import (
    LLM_CLASSIFY,
    LLM_EXTRACT,
    LLM_FILTER,
    LLM_MAP,
    LLM_SCORE,
    LLMCall,
    LLMFunction,
    make_call,
)
from relserve.planner.explain import Analyzed, Explain
from relserve.planner.plan_and_run import CallOutcome, analyzed, run_call
from relserve.results import RowResult
from relserve.template import Template

__all__ = ["LLMExpr", "LLMFrame", "configure", "details", "errors", "explain"]

_UNSET: Any = object()


def configure(*, engine: Backend | None = _UNSET, optimize: bool | None = None, progress: bool | None = None) -> None:
    """Process-wide defaults for polars calls (``relserve.configure`` with these keys): the
    engine (None: the default engine), whether to order rows for prefix sharing, and whether to
    show progress bars. A key not given keeps its value.

    >>> import relserve.polars
    >>> relserve.polars.configure(progress=False)
    >>> relserve.settings.current().progress
    False
    >>> relserve.polars.configure(progress=True)
    """
    given = {"optimize": optimize, "progress": progress}
    changes = {k: v for k, v in given.items() if v is not None}
    if engine is not _UNSET:
        changes["engine"] = engine
    settings.configure(**changes)


@dataclass(frozen=True)
class _Failure:
    call: int
    function: str
    template: str
    row: int
    error: str


_failures: deque = deque(maxlen=10_000)
_calls = [0]
_lock = threading.Lock()


def errors() -> pl.DataFrame:
    """Rows that got NULL in recent polars LLM calls: call number, function, template, row index
    within the call's input, and the error."""
    with _lock:
        items = list(_failures)
    return _frame(items, {"call": pl.Int64, "function": pl.String, "template": pl.String, "row": pl.Int64,
                          "error": pl.String})


def _frame(items: list, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Records (dataclasses with these fields) as a frame of ``schema``'s columns."""
    return pl.DataFrame({name: [getattr(x, name) for x in items] for name in schema}, schema=schema)


@dataclass(frozen=True)
class _Detail:
    call: int
    function: str
    template: str
    row: int
    answered_by: str
    confidence: float | None


#: rows of recent cascaded calls, for ``details()`` (bounded: the oldest are dropped)
_details: deque = deque(maxlen=200_000)


def details() -> pl.DataFrame:
    """Who answered each row of recent calls that ran a model cascade (``cascade=...``): call
    number, function, template, row index within the call's input, ``answered_by`` ('llm',
    'proxy' or 'cache') and the proxy's ``confidence`` (its probability of the answer it gave)."""
    with _lock:
        items = list(_details)
    return _frame(items, {"call": pl.Int64, "function": pl.String, "template": pl.String, "row": pl.Int64,
                          "answered_by": pl.String, "confidence": pl.Float64})


class _ExplainRecorder:
    """While active, calls plan and record their EXPLAIN instead of running (``analyze``: they
    run, and record what ran)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.items: list[Explain | Analyzed] = []

    def add(self, item: Explain | Analyzed) -> None:
        with self.lock:
            self.items.append(item)

    def record(self, frame: pl.LazyFrame | Callable[[], object]) -> list:
        with self.lock:
            self.active += 1
            start = len(self.items)
        try:
            result = frame() if callable(frame) and not isinstance(frame, pl.LazyFrame) else frame
            if isinstance(result, pl.LazyFrame):
                result.collect()
        finally:
            with self.lock:
                self.active -= 1
                found = self.items[start:]
                if not self.active:
                    self.items.clear()
        return found


_recorder = _ExplainRecorder()
_analyzer = _ExplainRecorder()


def explain(frame: pl.LazyFrame | Callable[[], object], *, analyze: bool = False) -> list[Explain] | list[Analyzed]:
    """EXPLAIN every LLM call of a lazy frame (or of a function that builds a frame), without
    calling the engine. Each element prints as a text block and has ``to_dict()``.

    With ``analyze`` (EXPLAIN ANALYZE) the frame is collected and each call says what ran: rows,
    rows the LLM answered, time, and the model cascade's sample, audit, threshold, proxy rows
    and estimated agreement."""
    return (_analyzer if analyze else _recorder).record(frame)


# -- the batch function ---------------------------------------------------------------------------


def _dtype(call: LLMCall) -> pl.DataType:
    kind = call.function.kind
    if call.scores:
        return pl.Float64()
    if kind == "filter":
        return pl.Boolean()
    if kind == "classify":
        return pl.Enum(list(call.labels or ()))
    return pl.String()


def _columns(call: LLMCall, series: pl.Series) -> list[object]:
    binding = Binding(call.template, call.function.name)
    if isinstance(series.dtype, pl.Struct):
        struct_null = series.is_null().to_list() if series.null_count() else None
        fields = {name: series.struct.field(name) for name in series.struct.fields}
        cols = binding.columns(fields=fields, described_as="the struct has fields")
        out = []
        for col in cols:
            values = polars_values(col)
            if struct_null is not None:  # a NULL struct makes every placeholder NULL
                values = [None if gone else v for v, gone in zip(values, struct_null)]
            out.append(values)
        return out
    hint = f"use pl.struct(...) or df.llm.{call.function.kind}(...) to bind by column name"
    return binding.columns(positional=[polars_values(series)], hint=hint)


def _batch_function(call: LLMCall, engine: Backend) -> Callable[[pl.Series], pl.Series]:
    dtype = _dtype(call)

    def run(series: pl.Series) -> pl.Series:
        columns = _columns(call, series)
        now = settings.current()
        use_engine = engine if engine is not None else now.engine
        optimize, progress = now.optimize, now.progress
        explaining = _recorder.active > 0
        outcome: CallOutcome = run_call(
            call, columns, engine=use_engine, optimize=optimize, progress=progress, explain_only=explaining
        )
        if explaining:
            _recorder.add(outcome.explain)
        else:
            number = _record(call.function.name, call.template.source, outcome.failures)
            if outcome.details is not None:
                _record_details(number, call, outcome.details)
            if _analyzer.active > 0:
                _analyzer.add(analyzed(call, outcome))
        return pl.Series(series.name, outcome.values, dtype=dtype)

    return run


def _record(function: str, template: str, failures: Iterable[tuple[int, str]]) -> int:
    """Count one finished call and keep its failed rows for ``errors()``; the call's number."""
    with _lock:
        _calls[0] += 1
        number = _calls[0]
        for row, err in failures:
            _failures.append(_Failure(number, function, template, row, err))
    return number


def _record_details(number: int, call: LLMCall, rows: list[RowResult | None]) -> None:
    """Keep who answered each row of a cascaded call, for ``details()``."""
    name, template = call.function.name, call.template.source
    with _lock:
        for i, r in enumerate(rows):
            if r is None or r.error is not None:
                continue
            who = r.answered_by or ("cache" if r.cached else "llm")
            _details.append(_Detail(number, name, template, i, who, r.confidence))


def _limited_filter(call: LLMCall, engine: Backend | None, limit: int) -> Callable[[pl.DataFrame], pl.DataFrame]:
    """``df.llm.filter(..., limit=k)``: the frame's rows stream through one relQuery, cancelled
    once k rows are kept; the kept rows in frame order, at most k."""

    def run(frame: pl.DataFrame) -> pl.DataFrame:
        columns = [frame.get_column(name).to_list() for name in call.template.columns]
        now = settings.current()
        kept = answered = 0

        def until(rows: list[RowResult]) -> bool:
            nonlocal kept, answered
            answered += len(rows)
            kept += sum(r.error is None and r.value is True for r in rows)
            return kept >= limit

        if _recorder.active > 0:
            _recorder.add(run_call(call, columns, engine=engine if engine is not None else now.engine,
                                   optimize=now.optimize, explain_only=True).explain)
            return frame.clear()
        outcome = run_call(call, columns, engine=engine if engine is not None else now.engine,
                           optimize=now.optimize, progress=now.progress, until=until)
        stopped = kept >= limit
        # rows the cancel left unanswered are not failures: the statement did not need them
        _record(call.function.name, call.template.source,
                [(i, e) for i, e in outcome.failures if not (stopped and e.endswith("cancelled"))])
        if _analyzer.active > 0:
            record = analyzed(call, outcome)
            why = (f"stopped: limit={limit} had its rows after {answered:,} of {frame.height:,} rows;"
                   f" the other {frame.height - answered:,} were cancelled") if stopped else None
            _analyzer.add(replace(record, llm_rows=min(record.llm_rows, answered), stopped=why))
        mask = pl.Series([v is True for v in outcome.values], dtype=pl.Boolean)
        return frame.filter(mask).head(limit)

    return run


def _expr(expr: pl.Expr, call: LLMCall, engine: Backend) -> pl.Expr:
    return expr.map_batches(_batch_function(call, engine), return_dtype=_dtype(call))


# -- namespaces -------------------------------------------------------------------------------
# Every option is keyword-only and forwarded by name to ``make_call``, which checks it: a typo is
# a TypeError here, a bad value a ConfigError naming it, both before any row runs.


@pl.api.register_expr_namespace("llm")
class LLMExpr:
    """``expr.llm.map/filter/classify/extract``: an LLM call over the expression's values.

    Options are checked when the expression is built, before any row runs:

    >>> import polars as pl
    >>> import relserve.polars
    >>> pl.col("review").llm.map("Summarize {review}", temperature=-1)
    Traceback (most recent call last):
    ...
    relserve.errors.ConfigError: temperature must be a number >= 0, got -1; the largest allowed is 10
    """

    def __init__(self, expr: pl.Expr) -> None:
        self._expr = expr

    def map(
        self,
        template: str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        system: str | None = None,
        on_error: str | None = None,
        reorder_fields: bool | None = None,
        examples: list[dict] | None = None,
        max_tokens_total: int | None = None,
        max_seconds: float | None = None,
        on_budget: str | None = None,
        engine: Backend | None = None,
    ) -> pl.Expr:
        """Free-text answer per row (String).

        >>> lf = pl.LazyFrame({"review": ["Great film!", "Too long."]})
        >>> lf.with_columns(summary=pl.col("review").llm.map("Summarize {review}", max_tokens=16, system="Be brief.")).collect_schema()
        Schema([('review', String), ('summary', String)])
        """
        call = make_call(
            LLM_MAP, template, model=model, max_tokens=max_tokens, temperature=temperature, system=system,
            on_error=on_error, reorder_fields=reorder_fields, examples=examples,
            max_tokens_total=max_tokens_total, max_seconds=max_seconds, on_budget=on_budget,
        )
        return _expr(self._expr, call, engine)

    def filter(
        self,
        template: str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        system: str | None = None,
        on_error: str | None = None,
        reorder_fields: bool | None = None,
        method: str | None = None,
        examples: list[dict] | None = None,
        prompt_shape: str | None = None,
        answer_field: str | None = None,
        cascade: float | None = None,
        cascade_recall: float | None = None,
        cascade_precision: float | None = None,
        cascade_failure: float | None = None,
        seed: int | None = None,
        max_tokens_total: int | None = None,
        max_seconds: float | None = None,
        on_budget: str | None = None,
        label_plan: str | None = None,
        engine: Backend | None = None,
    ) -> pl.Expr:
        """Yes/no answer per row (Boolean). ``cascade=0.95``: a model cascade answers the rows a
        light proxy is sure of (``seed``: its random sample; docs/sql-and-dataframes.md).
        ``cascade_recall=0.9`` / ``cascade_precision=0.9``: a cascade that keeps that share of the
        rows the LLM would keep / whose kept rows the LLM would keep that often, missing it with
        probability ``cascade_failure`` (0.05 by default).

        >>> lf = pl.LazyFrame({"review": ["Great film!", "Too long."]})
        >>> lf.with_columns(good=pl.col("review").llm.filter("Is {review} positive?", method="score")).collect_schema()
        Schema([('review', String), ('good', Boolean)])
        """
        call = make_call(
            LLM_FILTER, template, model=model, max_tokens=max_tokens, temperature=temperature, system=system,
            on_error=on_error, reorder_fields=reorder_fields, method=method, examples=examples,
            prompt_shape=prompt_shape, answer_field=answer_field, cascade=cascade, cascade_recall=cascade_recall,
            cascade_precision=cascade_precision, cascade_failure=cascade_failure, seed=seed,
            max_tokens_total=max_tokens_total, max_seconds=max_seconds, on_budget=on_budget, label_plan=label_plan,
        )
        return _expr(self._expr, call, engine)

    def score(
        self,
        template: str,
        *,
        model: str | None = None,
        system: str | None = None,
        on_error: str | None = None,
        reorder_fields: bool | None = None,
        method: str | None = None,
        examples: list[dict] | None = None,
        prompt_shape: str | None = None,
        answer_field: str | None = None,
        engine: Backend | None = None,
    ) -> pl.Expr:
        """The probability that the answer to a yes/no question is yes, per row (Float64): the
        same question and decision as ``filter`` (whose answer is yes exactly where this is above
        0.5), for ``sort``, ``top_k`` and thresholds of your own.

        >>> lf = pl.LazyFrame({"review": ["Great film!", "Too long."]})
        >>> lf.with_columns(p=pl.col("review").llm.score("Is {review} positive?")).collect_schema()
        Schema([('review', String), ('p', Float64)])
        """
        call = make_call(
            LLM_SCORE, template, model=model, system=system, on_error=on_error, reorder_fields=reorder_fields,
            method=method, examples=examples, prompt_shape=prompt_shape, answer_field=answer_field,
        )
        return _expr(self._expr, call, engine)

    def classify(
        self,
        template: str,
        labels: list[str],
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        system: str | None = None,
        on_error: str | None = None,
        reorder_fields: bool | None = None,
        method: str | None = None,
        examples: list[dict] | None = None,
        prompt_shape: str | None = None,
        answer_field: str | None = None,
        cascade: float | None = None,
        cascade_failure: float | None = None,
        seed: int | None = None,
        max_tokens_total: int | None = None,
        max_seconds: float | None = None,
        on_budget: str | None = None,
        label_plan: str | None = None,
        engine: Backend | None = None,
    ) -> pl.Expr:
        """One of ``labels`` per row (Enum of the labels); ``cascade``, ``cascade_failure`` and
        ``seed`` as for ``filter``.

        >>> lf = pl.LazyFrame({"review": ["Great film!", "Too long."]})
        >>> lf.with_columns(tone=pl.col("review").llm.classify("Tone of {review}", ["positive", "negative"])).collect_schema()
        Schema([('review', String), ('tone', Enum(categories=['positive', 'negative']))])
        >>> pl.col("review").llm.classify("Tone of {review}", ["positive", "positive"])
        Traceback (most recent call last):
        ...
        relserve.errors.ConfigError: llm_classify labels must be distinct; repeated: ['positive']
        """
        call = make_call(
            LLM_CLASSIFY, template, labels=labels, model=model, max_tokens=max_tokens, temperature=temperature,
            system=system, on_error=on_error, reorder_fields=reorder_fields, method=method, examples=examples,
            prompt_shape=prompt_shape, answer_field=answer_field, cascade=cascade, cascade_failure=cascade_failure,
            seed=seed, max_tokens_total=max_tokens_total, max_seconds=max_seconds, on_budget=on_budget,
            label_plan=label_plan,
        )
        return _expr(self._expr, call, engine)

    def extract(
        self,
        template: str,
        json_schema: dict | str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        system: str | None = None,
        on_error: str | None = None,
        reorder_fields: bool | None = None,
        examples: list[dict] | None = None,
        max_tokens_total: int | None = None,
        max_seconds: float | None = None,
        on_budget: str | None = None,
        engine: Backend | None = None,
    ) -> pl.Expr:
        """JSON text valid against ``json_schema`` per row (String; ``.str.json_decode()`` it).

        >>> lf = pl.LazyFrame({"review": ["Great film!", "Too long."]})
        >>> lf.with_columns(facts=pl.col("review").llm.extract("Facts in {review}", {"type": "object"})).collect_schema()
        Schema([('review', String), ('facts', String)])
        >>> pl.col("review").llm.extract("Facts in {review}", {"type": "thing"})
        Traceback (most recent call last):
        ...
        relserve.errors.ConfigError: llm_extract: invalid JSON schema: 'thing' is not valid under any of the given schemas
        """
        call = make_call(
            LLM_EXTRACT, template, json_schema=json_schema, model=model, max_tokens=max_tokens,
            temperature=temperature, system=system, on_error=on_error, reorder_fields=reorder_fields,
            examples=examples,
            max_tokens_total=max_tokens_total, max_seconds=max_seconds, on_budget=on_budget,
        )
        return _expr(self._expr, call, engine)

    # -- issue 26: operators past one row (relserve/operators/) -------------------------------
    # polars calls a function once per group inside group_by().agg, so there ``reduce`` runs one
    # reduction per group; ``reduce_list`` over a List column (one group per row, e.g. after
    # ``group_by().agg(pl.col(v))``, or ``df.llm.reduce``) reduces every group together, each
    # level of the tree ONE relQuery for all groups.

    def reduce(self, template: str, *, engine: Backend | None = None, context_tokens: int | None = None, **options: object) -> pl.Expr:
        """One answer (String) for all the expression's values: in ``group_by().agg`` one per group.

        >>> lf = pl.LazyFrame({"g": [1, 1, 2], "review": ["Great film!", "Too long.", "Fine."]})
        >>> lf.group_by("g").agg(pl.col("review").llm.reduce("Summarize:\\n{review}")).collect_schema()
        Schema([('g', Int64), ('review', String)])
        """
        from relserve.operators.reduce import reduce_call

        rc = reduce_call(template, context_tokens=context_tokens, **options)
        return self._expr.map_batches(_reduce_batch(rc, engine, one_group=True), return_dtype=pl.String(), returns_scalar=True)

    def reduce_list(self, template: str, *, engine: Backend | None = None, context_tokens: int | None = None, **options: object) -> pl.Expr:
        """One answer (String) per row of a List column, each row a group; all groups together."""
        from relserve.operators.reduce import reduce_call

        rc = reduce_call(template, context_tokens=context_tokens, **options)
        return self._expr.map_batches(_reduce_batch(rc, engine, one_group=False), return_dtype=pl.String())

    def topk(self, template: str, k: int, *, engine: Backend | None = None, pool: int | None = None, **options: object) -> pl.Expr:
        """The ``k`` values (List(String), best first) that best answer the yes/no question
        ``template``: in ``group_by().agg`` one list per group."""
        from relserve.operators.topk import topk_call

        tc = topk_call(template, k, pool=pool, **options)
        return self._expr.map_batches(_topk_batch(tc, engine), return_dtype=pl.List(pl.String()), returns_scalar=True)



class LLMFrame:
    """``df.llm`` / ``lf.llm``: placeholders bind to the frame's columns by name."""

    def __init__(self, frame: pl.DataFrame | pl.LazyFrame) -> None:
        self._frame = frame

    def _struct(self, template: str, fn: LLMFunction) -> pl.Expr:
        """The struct of the columns the template names, checked before any data is touched."""
        parsed = Template.parse(template)
        names = (
            self._frame.collect_schema().names() if isinstance(self._frame, pl.LazyFrame) else self._frame.columns
        )
        Binding(parsed, fn.name).check_names(names)
        return pl.struct(list(parsed.columns))

    def map(self, template: str, *, alias: str = "llm_map", **options: object):
        """The frame with a new String column ``alias``."""
        expr = self._struct(template, LLM_MAP).llm.map(template, **options)
        return self._frame.with_columns(expr.alias(alias))

    def filter(self, template: str, *, limit: int | None = None, **options: object):
        """The rows for which the answer is yes (rows whose call failed are dropped too).

        ``limit=k``: at most k of those rows, and the LLM stops once it has found k (the rest of
        the relQuery is cancelled). They are rows the filter without ``limit`` keeps, in frame
        order among themselves, but not necessarily its first k: like SQL's ``LIMIT`` without
        ``ORDER BY``. (``.head(k)`` after the filter cannot stop the LLM early: polars runs a
        Python function over every row it is given and slices after.)

        >>> pl.LazyFrame({"review": ["Great film!"]}).llm.filter("Is {review} positive?", limit=0)
        Traceback (most recent call last):
        ...
        relserve.errors.ConfigError: limit must be a whole number of rows >= 1, got 0
        """
        if limit is None:
            expr = self._struct(template, LLM_FILTER).llm.filter(template, **options)
            return self._frame.filter(expr)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"limit must be a whole number of rows >= 1, got {limit!r}")
        self._struct(template, LLM_FILTER)  # the columns, checked before any data is touched
        engine = options.pop("engine", None)
        call = make_call(LLM_FILTER, template, **options)
        kept = _limited_filter(call, engine, limit)
        if isinstance(self._frame, pl.DataFrame):
            return kept(self._frame)
        # not past this node: a slice or predicate moved below it would change which rows it keeps
        return self._frame.map_batches(kept, predicate_pushdown=False, projection_pushdown=False,
                                       slice_pushdown=False, streamable=False)

    def score(self, template: str, *, alias: str = "llm_score", **options: object):
        """The frame with a new Float64 column ``alias``: the probability of yes per row."""
        expr = self._struct(template, LLM_SCORE).llm.score(template, **options)
        return self._frame.with_columns(expr.alias(alias))

    def classify(self, template: str, labels: list[str], *, alias: str = "llm_classify", **options: object):
        """The frame with a new Enum column ``alias`` holding one of ``labels`` per row."""
        expr = self._struct(template, LLM_CLASSIFY).llm.classify(template, labels, **options)
        return self._frame.with_columns(expr.alias(alias))

    def extract(self, template: str, json_schema: dict | str, *, alias: str = "llm_extract", **options: object):
        """The frame with a new String column ``alias`` of JSON valid against ``json_schema``."""
        expr = self._struct(template, LLM_EXTRACT).llm.extract(template, json_schema, **options)
        return self._frame.with_columns(expr.alias(alias))

    def reduce(self, template: str, *, by: str | list[str], value: str | None = None, alias: str = "llm_reduce", **options: object):
        """One row per group of ``by`` with a String column ``alias``: the group's ``value``s
        (default: the template's placeholder column) reduced; all groups at once, each level of a
        tree reduction ONE relQuery."""
        from relserve.operators.reduce import reduce_call

        # the template and options are checked before any data is touched
        rc = reduce_call(template, **{k: v for k, v in options.items() if k != "engine"})
        column = value or rc.placeholder
        grouped = self._frame.group_by(by, maintain_order=True).agg(pl.col(column).alias(alias))
        return grouped.with_columns(pl.col(alias).llm.reduce_list(template, **options))


pl.api.register_dataframe_namespace("llm")(LLMFrame)
pl.api.register_lazyframe_namespace("llm")(LLMFrame)


# -- issue 26: batch functions of the operators (logic in relserve/operators/) ----------------------


def _reduce_batch(rc: object, engine: Backend, *, one_group: bool) -> Callable[[pl.Series], pl.Series]:
    from relserve.operators.reduce import explain_reduce, run_reduce

    def run(series: pl.Series) -> pl.Series:
        groups = [series.to_list()] if one_group else series.to_list()
        use_engine = engine if engine is not None else settings.current().engine
        if _recorder.active > 0:
            _recorder.add(explain_reduce(rc, groups, engine=use_engine))
            return pl.Series(series.name, [None] * len(groups), dtype=pl.String())
        outcome = run_reduce(rc, groups, engine=use_engine, progress=settings.current().progress)
        _record("llm_reduce", rc.call.template.source, outcome.failures)
        return pl.Series(series.name, outcome.values, dtype=pl.String())

    return run


def _topk_batch(tc: object, engine: Backend) -> Callable[[pl.Series], pl.Series]:
    from relserve.operators.topk import explain_topk, run_topk

    def run(series: pl.Series) -> pl.Series:
        values = series.to_list()
        use_engine = engine if engine is not None else settings.current().engine
        if _recorder.active > 0:
            _recorder.add(explain_topk(tc, values))
            return pl.Series(series.name, [None], dtype=pl.List(pl.String()))
        outcome = run_topk(tc, values, engine=use_engine, progress=settings.current().progress)
        failed = [(row, err) for row, err in enumerate(outcome.errors) if err is not None]
        _record("llm_topk", tc.score.template.source, failed)
        top = [v if isinstance(v, str) else str(v) for v in outcome.values]
        return pl.Series(series.name, [top], dtype=pl.List(pl.String()))

    return run
