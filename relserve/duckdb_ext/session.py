"""Per-connection state and the functions registered on a plain DuckDB connection.

``install(con)`` registers ``llm_map``, ``llm_filter``, ``llm_classify``, ``llm_extract`` and the
``llm_options(...)`` macro. DuckDB calls a Python UDF once per chunk of 2,048 rows, so on a plain
connection each chunk is one relQuery (deduplicated, cached and ordered within the chunk; the
result cache carries answers across chunks). ``relserve.duckdb.sql`` plans whole statements.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa

from relserve.errors import ConfigError, RowError
from relserve.functions import FUNCTIONS, CallOptions, LLMCall, LLMFunction
from relserve.planner.cache import ResultCache, shared_cache
from relserve.planner.engine_ref import EngineRef
from relserve.planner.execute import CallOutcome, cached_values, run_call
from relserve.duckdb_ext.arguments import DecodedChunk, decode_chunk, options_macro_sql

#: DuckDB return type of each function
RETURN_TYPES = {"map": "VARCHAR", "filter": "BOOLEAN", "classify": "VARCHAR", "extract": "JSON"}
_ARROW_TYPES = {"map": pa.string(), "filter": pa.bool_(), "classify": pa.string(), "extract": pa.json_(pa.string())}

MAX_LOGGED_ERRORS = 10_000


@dataclass(frozen=True)
class RowFailure:
    function: str
    template: str
    #: the row's placeholder values, as JSON text
    arguments: str
    error: str


@dataclass
class Session:
    """What ``install`` attaches to a connection: defaults, engine, cache and the error log."""

    defaults: CallOptions
    engine: Any = None
    cache: ResultCache | None = None
    #: order rows (and fields, where allowed) for prefix sharing
    optimize: bool = True
    progress: bool = True
    failures: deque = field(default_factory=lambda: deque(maxlen=MAX_LOGGED_ERRORS))
    #: record of the last planned statement (``relserve.duckdb_ext.planned.StatementRun``)
    last_run: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def engine_for(self, call: LLMCall) -> EngineRef:
        return EngineRef(self.engine, call.options.model)

    def run(self, call: LLMCall, values: list[tuple], *, explain_only: bool = False) -> CallOutcome:
        columns = [list(c) for c in zip(*values)] if values else [[] for _ in call.template.columns]
        return run_call(
            call,
            columns,
            engine=self.engine_for(call),
            cache=self.cache if self.cache is not None else True,
            optimize=self.optimize,
            progress=self.progress,
            explain_only=explain_only,
        )

    def cached(self, call: LLMCall, values: list[tuple]) -> dict[int, tuple[Any, str | None]]:
        """Answers already in the result cache, by position in ``values``."""
        cache = self.cache if self.cache is not None else shared_cache()
        return cached_values(call, values, model_id=self.engine_for(call).model_id, cache=cache)

    def record_failures(self, call: LLMCall, values: list[tuple], errors: list[str | None]) -> None:
        names = call.template.columns
        with self.lock:
            for vals, err in zip(values, errors):
                if err is not None:
                    args = json.dumps(dict(zip(names, vals)), ensure_ascii=False, default=str)
                    self.failures.append(RowFailure(call.function.name, call.template.source, args, err))

    def record_chunk_errors(self, fn: LLMFunction, errors: dict[int, str]) -> None:
        with self.lock:
            for err in errors.values():
                self.failures.append(RowFailure(fn.name, "", "{}", err))


_sessions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_sessions_lock = threading.Lock()


def install(
    con: duckdb.DuckDBPyConnection,
    *,
    engine: Any = None,
    model: str | None = None,
    max_tokens: int | None = None,
    temperature: float = 0.0,
    system: str | None = None,
    on_error: str = "null",
    reorder_fields: bool = False,
    method: str | None = None,
    examples: list[dict] | None = None,
    prompt_shape: str | None = None,
    optimize: bool = True,
    progress: bool = True,
    cache: ResultCache | bool | None = None,
    server: str | None = None,
    api_key: str | None = None,
) -> duckdb.DuckDBPyConnection:
    """Register the LLM functions on ``con`` (again, to change the defaults) and return ``con``.

    The keyword arguments are the connection's defaults; ``llm_options(...)`` in a call
    overrides them for that call. ``server="http://host:8000"`` (and ``api_key``) sends the
    calls to a running ``relserve serve`` instead of an engine in this process
    (``relserve.duckdb_ext.remote``); ``cache=False`` then turns the server's result cache off.
    """
    defaults = CallOptions(
        model=model, max_tokens=max_tokens, temperature=temperature, system=system, on_error=on_error,
        reorder_fields=reorder_fields, method=method, examples=examples, prompt_shape=prompt_shape,
    )
    if server is not None:
        if engine is not None:
            raise ConfigError("give engine or server, not both")
        from relserve.duckdb_ext.remote import remote_session

        session: Session = remote_session(defaults, server, api_key=api_key, cache=cache, optimize=optimize, progress=progress)
    else:
        session = Session(defaults, engine, cache, optimize, progress)
    with _sessions_lock:
        old = _sessions.get(con)
        if old is not None:
            session.failures = old.failures
        _sessions[con] = session
    for fn in FUNCTIONS.values():
        _register(con, fn.name, PlainFunction(session, fn), fn)
    con.execute(options_macro_sql())
    return con


def session_of(con: duckdb.DuckDBPyConnection) -> Session:
    with _sessions_lock:
        session = _sessions.get(con)
    if session is None:
        install(con)
        session = _sessions[con]
    return session


def _register(con: duckdb.DuckDBPyConnection, name: str, udf: Any, fn: LLMFunction) -> None:
    try:
        con.remove_function(name)
    except (duckdb.InvalidInputException, duckdb.CatalogException):
        pass
    con.create_function(
        name,
        udf,
        None,  # any number of arguments of any type
        RETURN_TYPES[fn.kind],
        type="arrow",
        null_handling="special",  # NULL arguments reach us, so the row gets an error message
        side_effects=True,  # never fold or skip a call: each row's answer comes from the model
    )


def to_arrow(fn: LLMFunction, values: list[Any]) -> pa.Array:
    return pa.array(values, type=_ARROW_TYPES[fn.kind])


class PlainFunction:
    """The UDF on a plain connection: each chunk is planned and run as one relQuery."""

    def __init__(self, session: Session, fn: LLMFunction) -> None:
        self.session = session
        self.fn = fn

    def __call__(self, *arrays: pa.Array) -> pa.Array:
        chunk = decode_chunk(self.fn, arrays, self.session.defaults)
        out = answer_chunk(self.fn, chunk, self.session, lambda call, values: self.session.run(call, values))
        return to_arrow(self.fn, out)


def answer_chunk(fn: LLMFunction, chunk: DecodedChunk, session: Session, run) -> list[Any]:
    """Values for every row of a chunk; failed rows are NULL and logged (or raise, if asked)."""
    if chunk.errors:
        modes = {g.call.options.on_error for g in chunk.groups} or {session.defaults.on_error}
        if "raise" in modes:
            raise RowError(chunk.errors[min(chunk.errors)])
        session.record_chunk_errors(fn, chunk.errors)
    out: list[Any] = [None] * chunk.size
    for group in chunk.groups:
        outcome = run(group.call, group.values)
        for r, v in zip(group.rows, outcome.values):
            out[r] = v
        session.record_failures(group.call, group.values, outcome.errors)
    return out
