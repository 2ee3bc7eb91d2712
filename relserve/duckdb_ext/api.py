"""The DuckDB surface (``relserve.duckdb`` hands it on): ``install``, ``sql``, ``explain``,
``errors``, and ``connect`` for a connection whose ``sql`` is the planned one.

``sql`` and ``explain`` route a script by its parsed statements (``routing.py``): ``llm_reduce``
/ ``llm_topk`` are rewritten and run in two passes (``operator_functions.py``), a join's
``llm_filter`` with ``llm_options(block := k)`` runs with blocking (``blocked_join.py``), and
every other statement goes to the planner (``planned_sql.py``)."""

from __future__ import annotations

from typing import Any, Union

import duckdb
import pyarrow as pa

from relserve.budget import Budget
from relserve.duckdb_ext import blocked_join, operator_functions, planned_sql
from relserve.duckdb_ext.blocked_join import JoinExplain
from relserve.duckdb_ext.connections import install as install_functions
from relserve.duckdb_ext.connections import session_of
from relserve.duckdb_ext.estimates import statement_budget
from relserve.duckdb_ext.operator_functions import OperatorExplain
from relserve.duckdb_ext.option_names import check_option_names
from relserve.duckdb_ext.params import Params
from relserve.duckdb_ext.routing import Route, route_of
from relserve.duckdb_ext.script import Script, read_script
from relserve.duckdb_ext.statement_explain import SiteExplain, StatementExplain
from relserve.errors import ConfigError, remember_statement

#: a plain DuckDB connection, or one of ``connect``'s
AnyConnection = Union["Connection", duckdb.DuckDBPyConnection]
#: what EXPLAIN says, by the statement's route
AnyExplain = StatementExplain | OperatorExplain | JoinExplain

__all__ = ["Connection", "SiteExplain", "StatementExplain", "connect", "errors", "explain", "install", "sql"]


def install(con: AnyConnection, **defaults: Any) -> duckdb.DuckDBPyConnection:
    """Register the row-level LLM functions and ``llm_reduce`` / ``llm_topk`` (list form) on
    ``con`` and return it; the defaults are ``relserve.duckdb_ext.connections.install``'s."""
    return operator_functions.install(install_functions(_duckdb_connection(con), **defaults))


def sql(con: AnyConnection, query: str, params: Params = None, *, max_tokens_total: int | None = None,
        max_seconds: float | None = None, on_budget: str = "refuse") -> duckdb.DuckDBPyRelation | None:
    """Run ``query`` with each LLM call site sent as one relQuery over all its rows.

    Like ``con.sql``: the statement's result as a relation (``.fetchall()``, ``.pl()``,
    ``.to_arrow_table()``, ``.show()``). Several statements separated by ``;`` run in order;
    the last one's result is returned. Failed rows are NULL; ``errors(con)`` lists them.

    ``max_tokens_total`` / ``max_seconds``: the statement's budget (engine tokens, seconds), checked
    against its estimate before it starts and held while it runs; ``on_budget``: "refuse" (the
    default: BudgetExceeded before anything runs, with the estimate and the budget) or "partial"
    (the rows the budget allows; the others NULL with the error 'budget exceeded').
    """
    con = _duckdb_connection(con)
    remember_statement()  # DuckDB may call the functions on its own threads: warnings name this line
    script = read_script(query)  # the one sqlglot parse of the script: every step below reads it
    check_option_names(script)
    budget = Budget(max_tokens_total, max_seconds, on_budget)
    route = route_of(script)
    if not budget.limited:
        return _run(con, script, params, route)
    if route is Route.OPERATORS:
        raise ConfigError("a statement budget (max_tokens_total, max_seconds) is not supported with llm_reduce or llm_topk yet")
    with statement_budget(con, query, params, budget, lambda c, _q, p: _explain(c, script, p, route=route)):
        return _run(con, script, params, route)


def _run(con: duckdb.DuckDBPyConnection, script: Script, params: Params, route: Route) -> duckdb.DuckDBPyRelation | None:
    # the operators and a blocked join rewrite the text and read it again themselves
    if route is Route.OPERATORS:
        return operator_functions.run_sql(con, script.text, params)
    if route is Route.BLOCKED_JOIN:
        return blocked_join.run_sql(con, script.text, params)
    return planned_sql.sql(con, script, params)


def explain(con: AnyConnection, query: str, params: Params = None, *, analyze: bool = False) -> AnyExplain:
    """What ``sql(con, query)`` would do, without calling the engine (the rows are read once); for
    a statement with ``llm_reduce`` / ``llm_topk``, their groups, levels and estimated prompt
    tokens; for a blocked join, also the pairs the join met and those blocking kept.

    With ``analyze`` (EXPLAIN ANALYZE, planned statements of llm_* calls) the statement then runs,
    as ``sql`` runs it: each site shows what its relQueries did (rows, rows the LLM answered,
    time, the model cascade's sample, audit, threshold, proxy rows and estimated agreement)
    beside its estimate, and the statement its seconds and the engine's tokens beside the
    statement's estimate."""
    con = _duckdb_connection(con)
    script = read_script(query)
    check_option_names(script)
    if analyze:
        return planned_sql.explain(con, script, params, analyze=True)
    return _explain(con, script, params, route=route_of(script))


def _explain(con: duckdb.DuckDBPyConnection, script: Script, params: Params, *, route: Route) -> AnyExplain:
    if route is Route.OPERATORS:
        return operator_functions.explain_sql(con, script.text, params)
    if route is Route.BLOCKED_JOIN:
        return blocked_join.explain_sql(con, script.text, params)
    return planned_sql.explain(con, script, params)


def _duckdb_connection(con: AnyConnection) -> duckdb.DuckDBPyConnection:
    """The DuckDB connection itself: a session belongs to it, never to ``connect``'s wrapper (a
    second session there would replace the first's functions on the same connection)."""
    con = con.con if isinstance(con, Connection) else con
    if not isinstance(con, duckdb.DuckDBPyConnection):
        raise TypeError("relserve.duckdb takes a DuckDB connection (duckdb.connect() or relserve.duckdb.connect()), "
                        f"got {type(con).__name__!r}")
    return con


def errors(con: AnyConnection) -> duckdb.DuckDBPyRelation:
    """Rows that got NULL because their call failed: since the last ``sql(con, ...)`` statement
    (or, for calls on the plain connection, since then), as a relation with the columns
    function, template, arguments (the placeholder values as JSON) and error."""
    con = _duckdb_connection(con)
    session = session_of(con)
    with session.lock:
        items = list(session.failures)
    table = pa.table(
        {
            "function": pa.array([f.function for f in items], pa.string()),
            "template": pa.array([f.template for f in items], pa.string()),
            "arguments": pa.array([f.arguments for f in items], pa.string()),
            "error": pa.array([f.error for f in items], pa.string()),
        }
    )
    return con.from_arrow(table)


class Connection:
    """A DuckDB connection whose ``sql`` plans LLM calls (and ``llm_reduce`` / ``llm_topk``);
    everything else is DuckDB's own.

    >>> con = relserve.duckdb.connect()
    >>> con.sql("SELECT llm_filter('Is {review} positive?', review) FROM reviews").fetchall()
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, **defaults: Any) -> None:
        self.con = install(con, **defaults)

    def sql(self, query: str, params: Params = None, *, max_tokens_total: int | None = None,
            max_seconds: float | None = None, on_budget: str = "refuse") -> duckdb.DuckDBPyRelation | None:
        return sql(self.con, query, params, max_tokens_total=max_tokens_total, max_seconds=max_seconds,
                   on_budget=on_budget)

    def explain(self, query: str, params: Params = None, *, analyze: bool = False) -> AnyExplain:
        return explain(self.con, query, params, analyze=analyze)

    def errors(self) -> duckdb.DuckDBPyRelation:
        return errors(self.con)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.con, name)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.con.close()


def connect(database: str = ":memory:", *, read_only: bool = False, config: dict | None = None, **defaults: Any) -> Connection:
    """``duckdb.connect`` with the LLM functions installed and statement planning in ``sql``."""
    con = duckdb.connect(database, read_only=read_only, config=config or {})
    return Connection(con, **defaults)
