"""Sessions on DuckDB connections: ``install(con)`` registers ``llm_map``, ``llm_filter``,
``llm_classify``, ``llm_extract`` and the ``llm_options(...)`` macro and attaches a ``Session``;
``session_of(con)`` finds it again (installing the defaults on a connection that has none)."""

from __future__ import annotations

import threading
import weakref

import duckdb

from relserve.backend.protocol import Backend
from relserve.duckdb_ext.arguments import options_macro_sql
from relserve.duckdb_ext.count_tokens import NAME as COUNT_TOKENS
from relserve.duckdb_ext.count_tokens import CountTokens
from relserve.duckdb_ext.remote import http_runner
from relserve.duckdb_ext.session import CallRunner, LocalRunner, Session
from relserve.duckdb_ext.udf import PlainFunction, create_function, return_type
from relserve.errors import ConfigError
from relserve.functions import FUNCTIONS, CallOptions
from relserve.planner.cache import ResultCache

# a connection's session lives as long as the connection
_sessions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_sessions_lock = threading.Lock()


def install(
    con: duckdb.DuckDBPyConnection,
    *,
    engine: Backend | None = None,
    model: str | None = None,
    max_tokens: int | None = None,
    temperature: float = 0.0,
    system: str | None = None,
    on_error: str = "null",
    reorder_fields: bool = False,
    method: str | None = None,
    examples: list[dict] | None = None,
    prompt_shape: str | None = None,
    answer_field: str | None = None,
    cascade: float | None = None,
    optimize: bool = True,
    progress: bool = True,
    cache: ResultCache | bool | None = None,
    server: str | None = None,
    api_key: str | None = None,
    order_filters: bool = True,
) -> duckdb.DuckDBPyConnection:
    """Register the LLM functions on ``con`` (again, to change the defaults) and return ``con``.

    The keyword arguments are the connection's defaults; ``llm_options(...)`` in a call
    overrides them for that call. ``server="http://host:8000"`` (and ``api_key``) sends the
    calls to a running ``relserve serve`` instead of an engine in this process
    (``relserve.duckdb_ext.remote``); ``cache=False`` then turns the server's result cache off.
    ``order_filters=False`` keeps the AND-ed llm filters of a WHERE in the order written (by
    default they run in the order of LLM cost per row removed; docs/sql-and-dataframes.md).
    """
    defaults = CallOptions(
        model=model, max_tokens=max_tokens, temperature=temperature, system=system, on_error=on_error,
        reorder_fields=reorder_fields, method=method, examples=examples, prompt_shape=prompt_shape,
        answer_field=answer_field, cascade=cascade,
    )
    runner: CallRunner
    if server is not None:
        if engine is not None:
            raise ConfigError("give engine or server, not both")
        runner = http_runner(server, api_key=api_key, cache=cache, optimize=optimize, progress=progress)
    else:
        runner = LocalRunner(engine, cache, optimize, progress)
    session = Session(defaults, runner, order_filters=order_filters)
    with _sessions_lock:
        old = _sessions.get(con)
        if old is not None:
            session.failures = old.failures
        _sessions[con] = session
    for fn in FUNCTIONS.values():
        create_function(con, fn.name, PlainFunction(session, fn), return_type(fn), replace=True)
    create_function(con, COUNT_TOKENS, CountTokens(session), "BIGINT", replace=True)
    con.execute(options_macro_sql())
    return con


def session_of(con: duckdb.DuckDBPyConnection) -> Session:
    with _sessions_lock:
        session = _sessions.get(con)
    if session is None:
        install(con)
        session = _sessions[con]
    return session
