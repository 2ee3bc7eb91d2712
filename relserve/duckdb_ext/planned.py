"""Planned execution of a statement: every call site is one relQuery over all its rows.

DuckDB calls a UDF per chunk of 2,048 rows and has no Python table functions, so the statement
runs in passes. Each call site gets its own UDF for the statement. In a pass, a site answers the
rows it already knows and records the others, answering them with a stand-in (TRUE for
``llm_filter``, so rows still reach later sites). After a pass, every site with recorded rows
whose upstream sites (``statement.py``) have none becomes one relQuery over its distinct
argument tuples. The pass in which no site meets an unknown row computed the true result.

A statement that changes data runs its read-only query for the collection passes and then the
statement itself once, with every site answering from what was collected (rows that still turn
up unknown, for instance through ``random()``, are answered per chunk on the spot).

A query that needs only its first rows (``SELECT ... WHERE llm_filter(...) LIMIT k``: no ORDER
BY, grouping, DISTINCT or window; ``Statement.rows_needed``) stops early. Its filters answer
unknown rows with FALSE (so every row the query returns passed them for real) and still record
them. A filter's rows then run as one relQuery, in the planner's order after the label plan's
sample, streamed: once the query over the rows answered so far returns k rows, the rest are
cancelled. Every row it returns is one the whole statement could return (each row's answer is
its own: the label plan decides it alone), and EXPLAIN ANALYZE says how many rows the LLM
answered and why it stopped.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import duckdb
import pyarrow as pa

from relserve.duckdb_ext.arguments import decode_chunk, hashable_key
from relserve.duckdb_ext.params import Params
from relserve.duckdb_ext.session import Session
from relserve.duckdb_ext.statement import CallSite, Statement
from relserve.duckdb_ext.trace import StatementTrace, call_trace
from relserve.duckdb_ext.udf import (
    answer_chunk,
    create_site_function,
    remove_site_function,
    return_type,
    settle_chunk_errors,
    to_arrow,
    with_texts,
)
from relserve.errors import RowError
from relserve.estimate import selectivity
from relserve.functions import LLMCall, LLMFunction
from relserve.planner.explain import Analyzed, Explain
from relserve.planner.plan_and_run import analyzed

#: stand-in answers during collection passes
_STAND_IN = {"map": "", "filter": True, "classify": None, "extract": "{}"}


@dataclass
class SiteState:
    """What one call site knows and what it still needs, across the passes of a statement."""

    site: CallSite
    session: Session
    answers: dict[LLMCall, dict[Hashable, tuple[object, str | None]]] = field(default_factory=dict)
    pending: dict[LLMCall, dict[Hashable, tuple]] = field(default_factory=dict)
    #: "collect": unknown rows get a stand-in; "inline": unknown rows run at once, per chunk;
    #: "limit": a LIMIT's filter, whose unknown rows are FALSE (recorded all the same)
    mode: str = "collect"
    #: in "limit" mode, what a stopped relQuery had its rows for (EXPLAIN ANALYZE)
    stops_at: str = "the LIMIT had its rows"
    lock: threading.Lock = field(default_factory=threading.Lock)
    explains: list[Explain] = field(default_factory=list)
    #: EXPLAIN ANALYZE: what each of this site's relQueries did
    analyzed: list[Analyzed] = field(default_factory=list)
    #: for EXPLAIN: every row's values in arrival order, so the unplanned baseline is exact
    arrivals: dict[LLMCall, list[tuple]] | None = None
    relqueries: int = 0
    rows_seen: int = 0
    #: the exception this site raised inside DuckDB, re-raised as is by ``run_planned``
    failure: BaseException | None = None
    #: the statement's trace, which each relQuery this site sends is added to
    trace: StatementTrace | None = None
    #: whether DuckDB calls this site through its macro, which adds the arguments' texts
    #: (``udf.create_site_function``)
    texts: bool = False

    @property
    def function(self) -> LLMFunction:
        return self.site.function

    def __call__(self, *arrays: pa.Array) -> pa.Array:
        try:
            return self._answer(with_texts(arrays) if self.texts else arrays)
        except Exception as e:
            self.failure = e
            raise

    def _answer(self, arrays: tuple[pa.Array, ...]) -> pa.Array:
        fn = self.function
        chunk = decode_chunk(fn, arrays, self.session.defaults)
        if self.mode == "inline":
            return to_arrow(fn, answer_chunk(fn, chunk, self.session, self._answer_or_run))
        settle_chunk_errors(fn, chunk, self.session, f"{self.site.text}: ")
        out: list[object] = [None] * chunk.size
        stand_in = False if self.mode == "limit" else _STAND_IN[fn.kind]
        with self.lock:
            self.rows_seen += chunk.size
            for group in chunk.groups:
                if self.arrivals is not None:
                    self.arrivals.setdefault(group.call, []).extend(group.values)
                known = self.answers.setdefault(group.call, {})
                keys = [hashable_key(v) for v in group.values]
                unknown: dict[Hashable, tuple] = {}
                for k, values in zip(keys, group.values):
                    if k not in known:
                        unknown.setdefault(k, values)
                if unknown and self.arrivals is None:
                    self._take_cached(group.call, known, unknown)
                if unknown:
                    self.pending.setdefault(group.call, {}).update(unknown)
                filler = 0.5 if group.call.scores else stand_in if fn.kind != "classify" else group.call.labels[0]
                for r, k in zip(group.rows, keys):
                    hit = known.get(k)
                    out[r] = hit[0] if hit is not None else filler
        return to_arrow(fn, out)

    def _take_cached(self, call: LLMCall, known: dict, unknown: dict) -> None:
        """Move rows whose answer is in the result cache from ``unknown`` to ``known``: they
        need no relQuery, and when every row is cached the statement settles in this pass."""
        missing = list(unknown.items())
        values = [v for _, v in missing]
        found = self.session.cached(call, values)
        for i, answer in found.items():
            known[missing[i][0]] = answer
            del unknown[missing[i][0]]
        failed = [(values[i], a[1]) for i, a in found.items() if a[1] is not None]
        if failed:
            self.session.record_failures(call, [v for v, _ in failed], [e for _, e in failed])

    def _answer_or_run(self, call: LLMCall, values: list[tuple]):
        """Inline mode: known rows from the answers, the rest run now as one relQuery."""
        known = self.answers.get(call, {})
        missing = [v for v in values if hashable_key(v) not in known]
        if missing:
            # answer_chunk logs these rows' errors, so _run_call does not
            self._run_call(call, list({hashable_key(v): v for v in missing}.values()), record=False)
            known = self.answers[call]
        return _Outcome([known[hashable_key(v)][0] for v in values], [known[hashable_key(v)][1] for v in values])

    def has_pending(self) -> bool:
        return any(self.pending.values())

    def run_pending(self, enough: Callable[[], bool] | None = None) -> None:
        """One relQuery per call (normally one per site) over the distinct unknown argument tuples;
        with ``enough`` (a LIMIT's filter) the rows stream in and the rest are cancelled once it
        says the statement has its rows."""
        todo, self.pending = self.pending, {}
        for call, wanted in todo.items():
            if enough is None:
                self._run_call(call, list(wanted.values()))
            else:
                self._run_until(call, list(wanted.values()), enough)

    def _run_until(self, call: LLMCall, values: list[tuple], enough: Callable[[], bool]) -> None:
        """``values`` as one relQuery whose answers are kept as they stream in; the statement is
        asked whether it has its rows each time a row passes (the only answers that can change it)."""
        answered = 0
        passed = 0
        stopped = False

        def until(rows) -> bool:
            nonlocal answered, passed, stopped
            with self.lock:
                known = self.answers.setdefault(call, {})
                for r in rows:
                    known[hashable_key(values[r.index])] = (r.value, r.error)
                    answered += 1
                    passed += r.error is None and r.value is True
            if not any(r.error is None and r.value is True for r in rows):
                return False
            stopped = enough()
            return stopped

        try:
            outcome = self.session.run(call, values, until=until)
        except RowError as e:
            raise RowError(f"{self.site.text}: {e}") from None
        self.relqueries += 1
        self._traced(call, len(values), outcome)
        why = (f"stopped: {self.stops_at} after {answered:,} of {len(values):,} rows ({passed:,} passed);"
               f" the other {len(values) - answered:,} were cancelled" if stopped else None)
        record = analyzed(call, outcome)
        self.analyzed.append(replace(record, llm_rows=min(record.llm_rows, answered), stopped=why))
        with self.lock:
            known = self.answers.setdefault(call, {})
            # rows answered (or failed) on their own are kept; those the cancel left are not
            for v, value, err in zip(values, outcome.values, outcome.errors):
                if hashable_key(v) not in known and not (stopped and err is not None and err.endswith("cancelled")):
                    known[hashable_key(v)] = (value, err)
        self.session.record_failures(call, [v for v in values if known.get(hashable_key(v), (0, None))[1] is not None],
                                     [known[hashable_key(v)][1] for v in values
                                      if known.get(hashable_key(v), (0, None))[1] is not None])

    def _traced(self, call: LLMCall, rows: int, outcome) -> None:
        if self.trace is not None:
            self.trace.add_call(call_trace(self.site.index, call.function.name, rows, outcome,
                                           remote=not self.session.plans_locally))

    def explain_arrivals(self) -> None:
        for call, values in (self.arrivals or {}).items():
            outcome = self.session.run(call, values, explain_only=True)
            self.explains.append(outcome.explain)

    def _run_call(self, call: LLMCall, values: list[tuple], *, record: bool = True) -> None:
        try:
            outcome = self.session.run(call, values)
        except RowError as e:
            raise RowError(f"{self.site.text}: {e}") from None
        self.relqueries += 1
        self._traced(call, len(values), outcome)
        self.analyzed.append(analyzed(call, outcome))
        if call.function.kind == "filter":  # how many rows the sites after it will meet (issue 47)
            selectivity.record(call.call_key(), outcome.values)
        if record:
            self.session.record_failures(call, values, outcome.errors)
        with self.lock:
            known = self.answers.setdefault(call, {})
            for v, value, err in zip(values, outcome.values, outcome.errors):
                known[hashable_key(v)] = (value, err)


@dataclass
class _Outcome:
    values: list
    errors: list


@dataclass(frozen=True)
class FilterEstimate:
    """What the planner expects of one llm filter of an AND: the share of rows it keeps and what
    a row costs the LLM (the prompt's characters, plus a KV block's worth per request)."""

    site: int
    keeps: float
    row_chars: float
    #: where ``keeps`` comes from: the call's label plan, or a sample of its rows run now
    source: str

    @property
    def rank(self) -> float:
        """Cost per row removed: the cheapest first (Hellerstein and Stonebraker's rank)."""
        return (self.row_chars + ROW_OVERHEAD_CHARS) / max(1.0 - self.keeps, 0.01)


#: what a scoring request costs beside its prompt, in characters (about one KV block of tokens)
ROW_OVERHEAD_CHARS = 128
#: rows of a filter without a plan run first to read the share it keeps (and make its plan)
ESTIMATE_SAMPLE_ROWS = 64


@dataclass
class StatementRun:
    """What planned execution did, for EXPLAIN and tests."""

    statement: Statement
    sites: list[SiteState]
    passes: int = 0
    seconds: float = 0.0
    #: time of the collection passes alone
    collect_s: float = 0.0
    #: the order the AND-ed llm filters of a WHERE ran in, and why (EXPLAIN)
    filter_orders: list[str] = field(default_factory=list)
    #: where the statement's time went (EXPLAIN ANALYZE, the benchmark's report)
    trace: StatementTrace = field(default_factory=StatementTrace)


class PlannedStatement:
    """Registers one UDF per call site for the life of a statement run."""

    def __init__(self, con: duckdb.DuckDBPyConnection, session: Session, statement: Statement) -> None:
        self.con = con
        self.session = session
        self.statement = statement
        token = uuid.uuid4().hex[:10]
        self.names = [f"llm_site_{token}_{s.index}" for s in statement.sites]
        self.trace = StatementTrace()
        self.states = [SiteState(s, session, trace=self.trace) for s in statement.sites]
        #: site -> the site whose call stands in its place in the text (the AND-ed llm filters of
        #: a WHERE in the order they run in; ``_order_filters``)
        self.placed: dict[int, int] = {}

    def __enter__(self) -> PlannedStatement:
        for name, state in zip(self.names, self.states):
            state.texts = create_site_function(self.con, name, state, return_type(state.function), state.site.arity)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in self.names:
            remove_site_function(self.con, name)

    def collect(self, params: Params = None) -> duckdb.DuckDBPyRelation | None:
        return self.fetch(self.statement.collection_sql(self.names, self.placed), params)

    def fetch(self, sql: str, params: Params = None) -> duckdb.DuckDBPyRelation | None:
        """Run ``sql`` (``_fetch``); an error a site raised surfaces as itself, not wrapped by DuckDB."""
        try:
            return _fetch(self.con, sql, params)
        except duckdb.Error:
            for state in self.states:
                if state.failure is not None:
                    raise state.failure from None
            raise

    def rows_for_limit(self, collected: duckdb.DuckDBPyRelation, params: Params = None) -> int:
        """The rows that count towards the statement's ``rows_needed``: those it collected, or
        those of its EXISTS subquery (run now)."""
        if self.statement.exists_query is None:
            return len(collected)
        table = self.fetch(self.statement.limit_check_sql(self.names, self.placed), params)
        return 0 if table is None else len(table)

    def ready_sites(self) -> list[SiteState]:
        """Sites with unknown rows whose upstream sites have none (all of them if none qualify)."""
        pending = {s.site.index for s in self.states if s.has_pending()}
        ready = [s for s in self.states if s.site.index in pending and not (s.site.depends_on & pending)]
        return ready or [s for s in self.states if s.site.index in pending]


def _fetch(con: duckdb.DuckDBPyConnection, sql: str, params: Params) -> duckdb.DuckDBPyRelation | None:
    """Run ``sql`` now; the rows it returns, held by DuckDB in its own types (None if it returns
    none). Held, not passed through Arrow: DuckDB's Arrow export is not the value for some types
    (a UHUGEINT from 2**127 comes back negative, a TIMETZ without its offset, a BIT as bytes, an
    ENUM as VARCHAR), and the last pass's rows are the user's result. Run once: the site
    functions are gone when the user reads them."""
    relation = con.sql(sql, params=params) if params is not None else con.sql(sql)
    return relation.materialize() if relation is not None else None


def run_planned(
    con: duckdb.DuckDBPyConnection,
    session: Session,
    statement: Statement,
    params: Params = None,
    *,
    max_passes: int | None = None,
) -> tuple[duckdb.DuckDBPyRelation | None, StatementRun]:
    """Run a statement with one relQuery per call site; returns (its result, run record).

    The result is what DuckDB gives for the statement, held (``_fetch``): its rows, or for a
    data-changing statement what DuckDB reports (None if DuckDB gives nothing).
    """
    t0 = time.perf_counter()
    needed = statement.rows_needed
    limit = max_passes or len(statement.sites) + 2
    with PlannedStatement(con, session, statement) as planned:
        trace = planned.trace
        run = StatementRun(statement, planned.states, trace=trace)
        table = None
        settled = False
        if needed is not None:
            for state in planned.states:
                if state.site.index in statement.limit_sites:
                    state.mode, state.stops_at = "limit", statement.stops_at
            # every chunk of rows may take a relQuery of its own before k rows pass
            limit = max_passes or 4 * len(statement.sites) + 8
        while run.passes < limit:
            for state in planned.states:
                # what a site met while waiting for an upstream site may be rows that never
                # reach it; each pass records afresh
                state.pending = {}
            with trace.timed_pass("collect"):
                table = planned.collect(params)
            run.passes += 1
            if needed is not None and table is not None and planned.rows_for_limit(table, params) >= needed:
                # the LIMIT has its rows: its filters' unknown rows are not needed
                for state in planned.states:
                    if state.mode == "limit":
                        state.pending = {}
            if run.passes == 1 and statement.conjunct_groups:
                with trace.timed_stage("filter order", _grouped(statement)):
                    run.filter_orders = _order_filters(planned)
            ready = planned.ready_sites()
            if not ready:
                settled = True
                break
            sites = tuple(s.site.index for s in ready)
            if needed is not None:
                with trace.timed_stage("limit", sites) as checks:
                    _run_limited(planned, ready, needed, params, checks)
            else:
                with trace.timed_stage("relqueries", sites):
                    _run_sites(ready)
        if statement.writes or not settled:
            # data-changing statements run once; an unsettled query runs with answers filled in
            for state in planned.states:
                state.mode = "inline"
            with trace.timed_pass("final"):
                table = planned.fetch(statement.with_site_names(planned.names, planned.placed), params)
            run.passes += 1
    for state in run.sites:
        state.answers = {}  # the run record is kept (last_run); the answers are not needed
    run.seconds = time.perf_counter() - t0
    trace.total_s = run.seconds
    return table, run


def _grouped(statement: Statement) -> tuple[int, ...]:
    return tuple(i for group in statement.conjunct_groups for i in group)


def _order_filters(planned: PlannedStatement) -> list[str]:
    """The AND-ed llm filters of each WHERE (``Statement.conjunct_groups``) in the order of LLM
    cost per row removed (the written order under ``order_filters=False``): each waits for the
    ones before it. A filter's share comes from its call's label plan, else from a spread sample
    of the WHERE's rows run now, whose answers are kept and which makes the plan, so the rows that
    pass them all are the same in any order. Returns what EXPLAIN says of each group."""
    notes = []
    for group in planned.statement.conjunct_groups:
        states = [planned.states[i] for i in group]
        if not all(s.has_pending() and s.mode != "limit" for s in states) or not planned.session.plans_locally:
            continue
        # every filter's plan is made from a spread sample of the rows the WHERE's llm filters
        # all see, not from the rows another llm filter kept: the same plans, so the same rows,
        # in any order (at most a sample's rows answered that an earlier filter would remove)
        estimates = [_estimate_filter(s) for s in states]
        if not planned.session.order_filters:
            said = "; ".join(f"#{e.site} keeps {e.keeps:.0%} ({e.source})" for e in estimates)
            notes.append(f"llm filters in the order written: #{', #'.join(map(str, group))} (order_filters=False; {said})")
            continue
        order = [e.site for e in sorted(estimates, key=lambda e: (e.rank, group.index(e.site)))]
        for k, index in enumerate(order):
            site = planned.states[index].site
            others = site.depends_on - set(group)
            site.depends_on = frozenset(others | set(order[:k]))
            # the k-th written place holds the k-th to run
            planned.placed[group[k]] = index
        said = "; ".join(f"#{e.site} keeps {e.keeps:.0%} ({e.source}), {e.row_chars:,.0f} characters a row"
                         for e in sorted(estimates, key=lambda e: order.index(e.site)))
        written = "" if list(order) == list(group) else f"; written #{', #'.join(map(str, group))}"
        notes.append(f"llm filters in the order of LLM cost per row removed: #{', #'.join(map(str, order))}"
                     f" ({said}){written}")
    return notes


def _estimate_filter(state: SiteState) -> FilterEstimate:
    from relserve.prompt_rendering import Renderer

    (call, wanted), *_ = state.pending.items()
    values = list(wanted.values())
    render = Renderer(call)
    row_chars = sum(len(render(v)) for v in values[:256]) / min(len(values), 256)
    plan = state.session.kept_plan(call)
    if plan is not None:
        return FilterEstimate(state.site.index, plan.share, row_chars, "its label plan")
    step = max(1, len(values) // ESTIMATE_SAMPLE_ROWS)
    sample = values[::step][:ESTIMATE_SAMPLE_ROWS]
    state._run_call(call, sample)
    with state.lock:
        known = state.answers.get(call, {})
        got = [known[hashable_key(v)][0] for v in sample if hashable_key(v) in known]
        for v in sample:  # answered now: no longer pending
            wanted.pop(hashable_key(v), None)
    plan = state.session.kept_plan(call)
    if plan is not None:
        return FilterEstimate(state.site.index, plan.share, row_chars, f"its label plan, made from {len(sample)} rows now")
    keeps = sum(v is True for v in got) / max(len(got), 1)
    return FilterEstimate(state.site.index, keeps, row_chars, f"{len(got)} of its rows run now")


def _run_limited(planned: PlannedStatement, ready: list[SiteState], needed: int, params: Params,
                 checks: list[float]) -> None:
    """A LIMIT statement's ready sites, one after the other (a filter's check runs the statement
    on this connection): a filter's rows stream until the statement returns ``needed`` rows.
    ``checks`` gets the seconds of each check."""

    def enough() -> bool:
        t0 = time.perf_counter()
        table = planned.fetch(planned.statement.limit_check_sql(planned.names, planned.placed), params)
        checks.append(time.perf_counter() - t0)
        return table is not None and len(table) >= needed

    for state in ready:
        state.run_pending(enough if state.mode == "limit" else None)


def _run_sites(ready: list[SiteState]) -> None:
    """Submit every ready site's relQuery at once: the engine schedules them side by side."""
    if len(ready) == 1:
        ready[0].run_pending()
        return
    with ThreadPoolExecutor(max_workers=len(ready)) as pool:
        for future in [pool.submit(s.run_pending) for s in ready]:
            future.result()


def explain_planned(
    con: duckdb.DuckDBPyConnection, session: Session, statement: Statement, params: Params = None
) -> StatementRun:
    """One collection pass, then an EXPLAIN of each site's relQuery (nothing runs on the engine)."""
    t0 = time.perf_counter()
    with PlannedStatement(con, session, statement) as planned:
        run = StatementRun(statement, planned.states, trace=planned.trace)
        for state in planned.states:
            state.arrivals = {}
        t1 = time.perf_counter()
        with planned.trace.timed_pass("explain"):
            planned.collect(params)
        run.collect_s = time.perf_counter() - t1
        run.passes = 1
        for state in planned.states:
            state.explain_arrivals()
    run.seconds = time.perf_counter() - t0
    run.trace.total_s = run.seconds
    return run
