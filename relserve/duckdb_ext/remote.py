"""Where a DuckDB connection's LLM calls run when it is connected to a ``relserve serve`` server
instead of an engine in this process: ``HttpRunner``, the runner its ``Session`` holds.

    con = relserve.duckdb.connect(server="http://127.0.0.1:8000", api_key="...")
    con.sql("SELECT id, llm_map('Summarize: {review}', review) FROM reviews")   # planned, as locally

The statement is planned here exactly as on a local connection (``relserve.duckdb.sql``: one
relQuery per call site over the site's distinct argument tuples); each relQuery goes to the server
as ``template`` + ``rows`` through ``relserve.client.Client`` (``POST /v1/relqueries``, rows
streamed back). The server renders, deduplicates, orders and caches the prompts with the same
planner, and chooses filter/classify labels the same way (calibrated label scoring), so an answer
is the one a local connection would get. The result cache is the server's (``cache=False`` turns
it off for this connection's calls); the engine, its scheduler and its prefix cache are the
server's, shared with its other clients.

The whole call specification travels field by field (``relserve.call_fields.CallFields``, the
encoder the Python client and the PostgreSQL extension use too): ``system``, ``method``,
``prompt_shape``, ``answer_field``, ``reorder_fields``, ``examples``, ``top_p``, ``seed`` and the rest, and the
server accepts every one of them; ``model`` must name the model the server serves.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from relserve.budget import Allowance, BudgetExceeded
from relserve.call_fields import CallFields, jsonable_row
from relserve.cascade.report import CascadeReport
from relserve.client import Client, ServerError
from relserve.errors import ConfigError, RowError
from relserve.estimate.estimate import CallEstimate, estimate_of
from relserve.functions import LLMCall
from relserve.job_stats import JobStats
from relserve.planner.plan_and_run import CallOutcome
from relserve.progress import progress_bar
from relserve.results import RowResult, in_input_order


@dataclass
class RemoteCall:
    """What one call sent to the server cost (``HttpRunner.calls``; the benchmark reads it)."""

    function: str
    rows: int
    #: rows the server sent to its engine (distinct prompts not in its result cache)
    engine_rows: int
    #: rows answered from the server's result cache
    cached_rows: int
    prompt_tokens: int
    #: prompt tokens the engine's prefix cache served
    cached_tokens: int
    output_tokens: int
    seconds: float
    relquery_id: str


@dataclass(frozen=True)
class RemoteExplain:
    """EXPLAIN of a call on a server connection: what the server would send to its engine."""

    function: str
    template: str
    server: str
    rows: int
    engine_rows: int
    cached_rows: int
    failed_rows: int
    #: issue 47: the server's estimate (its engine's tokens, the seconds alone and behind its work)
    estimate: CallEstimate | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["estimate"] = self.estimate.to_dict() if self.estimate is not None else None
        return d

    def __str__(self) -> str:
        head = (
            f"{self.function} on the server {self.server}: {self.rows} row(s), {self.engine_rows} distinct "
            f"prompt(s) to run, {self.cached_rows} from the server's result cache, {self.failed_rows} that cannot run"
        )
        return "\n".join([head, *self.estimate.lines()]) if self.estimate is not None else head


@dataclass
class HttpRunner:
    """Runs a session's calls on a relserve server (see the module docstring)."""

    client: Client
    #: use the server's result cache for this connection's calls
    server_cache: bool = True
    progress: bool = True
    calls: list[RemoteCall] = field(default_factory=list)
    _model_id: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, call: LLMCall, values: list[tuple], *, explain_only: bool = False,
            budget: Allowance | None = None, until: Callable[[list[RowResult]], bool] | None = None) -> CallOutcome:
        self._check(call)
        if not values:
            return CallOutcome([], [], None)  # type: ignore[arg-type]
        names = call.template.columns
        rows = [jsonable_row(names, vals) for vals in values]
        # row errors come back per row; what a failed row does is applied here
        fields = CallFields.of_call(call, on_error="null", cache=self.server_cache)
        if budget is not None:
            fields = within(fields, budget)
            if fields is None:  # the statement's budget is spent: nothing is sent
                why = f"{call.function.name}: " + (budget.seconds_message() if budget.expired() else budget.tokens_message(1))
                return CallOutcome([None] * len(values), [why] * len(values), None)  # type: ignore[arg-type]
        if explain_only:
            got = self.client.plan(call.template.source, rows, fields)
            ex = RemoteExplain(call.function.name, call.template.source, self.client.url, got.rows,
                               got.engine_rows, got.cached_rows, got.failed_rows, estimate_of(got.estimate))
            return CallOutcome([None] * len(values), [None] * len(values), None, explain=ex)  # type: ignore[arg-type]
        t0 = time.perf_counter()
        try:
            with self.client.stream(call.template.source, rows, fields) as stream, \
                    progress_bar(len(values), call.function.name, show=self.progress) as bar:
                answers = in_input_order(_counted(stream, bar, until), len(values))
                # the job's figures (its ``done`` event; a stream that ended without one has raised)
                stats = stream.done.stats if stream.done is not None else JobStats()
                engine_rows = stream.header.engine_rows
                cached_rows = stream.header.cached_rows or 0
        except ServerError as e:
            if e.status in (422, 429) and "refused before starting" in e.message:
                raise BudgetExceeded(e.message) from None
            raise
        if budget is not None:  # what the server's engine spent, against the statement's budget
            prompt = sum(r.prompt_tokens or 0 for r in answers if not r.cached)
            rows_spent = prompt + sum(r.output_tokens or 0 for r in answers if not r.cached)
            budget.charge(stats.get("budget_tokens_spent", rows_spent), stats.get("budget_prompt_tokens_spent", prompt))
        record = RemoteCall(
            call.function.name, len(values), engine_rows, cached_rows,
            sum(r.prompt_tokens or 0 for r in answers),
            sum(r.cached_tokens or 0 for r in answers),
            sum(r.output_tokens or 0 for r in answers),
            time.perf_counter() - t0, stream.id,
        )
        with self._lock:
            self.calls.append(record)
        out = [r.value if r.error is None else None for r in answers]
        errors = [r.error for r in answers]
        if call.options.on_error == "raise":
            for i, err in enumerate(errors):
                if err is not None:
                    raise RowError(f"row {i}: {err}")
        cascade = stats.get("cascade")
        report = CascadeReport.from_dict(cascade) if isinstance(cascade, dict) and "rows" in cascade else None
        return CallOutcome(out, errors, None, engine_stats=stats, ran=report.llm_rows if report else engine_rows,  # type: ignore[arg-type]
                           cascade=report, seconds=time.perf_counter() - t0)

    def cached(self, call: LLMCall, values: list[tuple]) -> dict[int, tuple[Any, str | None]]:
        # the result cache is the server's: rows it knows come back at once from the relQuery
        return {}

    @property
    def model_id(self) -> str:
        if self._model_id is None:
            self._model_id = self.client.health().model
        return self._model_id

    def _check(self, call: LLMCall) -> None:
        o = call.options
        where = f"{call.function.name} on a connection to the server {self.client.url}"
        if o.model is not None:
            from relserve.planner.engine_ref import _model_id_of

            wanted = _model_id_of(o.model) or o.model
            if wanted != self.model_id:
                raise ConfigError(f"{where}: model {o.model!r} was asked for, but the server serves {self.model_id!r}")


def within(fields: CallFields, budget: Allowance) -> CallFields | None:
    """``fields`` with a budget no larger than what is left of ``budget`` (a statement's), which
    the server enforces as a partial run (the statement was checked against its estimate before
    it started); None when nothing is left."""
    from dataclasses import replace

    if budget.expired():
        return None
    tokens = budget.left()
    if tokens is not None and tokens <= 0:
        return None
    deadline = budget.earliest_deadline
    seconds = deadline - time.monotonic() if deadline is not None else None
    own_tokens, own_seconds = fields.max_tokens_total, fields.max_seconds
    return replace(
        fields,
        max_tokens_total=min(t for t in (tokens, own_tokens) if t is not None) if tokens is not None or own_tokens else None,
        max_seconds=min(t for t in (seconds, own_seconds) if t is not None) if seconds is not None or own_seconds else None,
        on_budget="partial" if (tokens is not None or seconds is not None) else fields.on_budget,
    )


def _counted(rows: Iterable[RowResult], bar: Any,
             until: Callable[[list[RowResult]], bool] | None = None) -> Iterator[RowResult]:
    """The stream's rows, counted on the bar; once ``until`` says so the stream is left (the
    server cancels a relQuery whose stream is closed) and the rest come back unanswered."""
    for row in rows:
        bar.update(1)
        yield row
        if until is not None and until([row]):
            return


def http_runner(
    server: str,
    *,
    api_key: str | None = None,
    cache: Any = None,
    optimize: bool = True,
    progress: bool = True,
    timeout: float = 3600.0,
) -> HttpRunner:
    """The runner of ``install(con, server=...)``: ``cache`` None/True uses the server's result
    cache, False turns it off for this connection's calls."""
    if cache is not None and not isinstance(cache, bool):
        raise ConfigError(
            "cache: on a connection to a server the result cache is the server's; give cache=True or cache=False"
        )
    if not isinstance(server, str) or not server.startswith(("http://", "https://")):
        raise ConfigError(f"server must be the server's address, e.g. 'http://127.0.0.1:8000', got {server!r}")
    client = Client(server, api_key=api_key, timeout=timeout)
    # optimize: the server plans (and orders) every relQuery itself
    return HttpRunner(client, server_cache=cache is not False, progress=progress)


__all__ = ["HttpRunner", "RemoteCall", "RemoteExplain", "http_runner"]
