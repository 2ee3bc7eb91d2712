"""LLM functions in DuckDB.

    import duckdb, relserve.duckdb

    con = duckdb.connect()
    relserve.duckdb.install(con)                      # llm_map & co. work in any statement
    con.sql("SELECT llm_filter('Is {review} positive?', review) FROM reviews")   # per chunk
    relserve.duckdb.sql(con, "SELECT ...")            # planned: one relQuery per call site
    print(relserve.duckdb.explain(con, "SELECT ...")) # what the plan does, nothing runs
    relserve.duckdb.errors(con)                       # rows that got NULL, and why

See docs/sql-and-dataframes.md. (This module is ``relserve.duckdb``; ``import duckdb`` inside the
package still means DuckDB itself, as imports are absolute.)
"""

from typing import Any

from relserve.duckdb_ext import (
    Connection as _Connection,
)
from relserve.duckdb_ext import (
    SiteExplain,
    StatementExplain,
    errors,
)
from relserve.duckdb_ext import (
    explain as _explain,
)
from relserve.duckdb_ext import (
    install as _install,
)
from relserve.duckdb_ext import (
    sql as _sql,
)
from relserve.estimate.budget import Budget, BudgetExceeded

__all__ = ["BudgetExceeded", "Connection", "SiteExplain", "StatementExplain", "connect", "errors", "explain", "install", "sql"]


# -- issue 26: llm_reduce / llm_topk (relserve/duckdb_ext/operator_functions.py) ----------------------
# A statement that names an operator is rewritten (aggregate form -> list form) and the
# operator functions are registered on the connection; one with llm_options(block := k) on a
# JOIN's llm_filter runs with blocking (duckdb_ext/blocked_join.py); any other goes through as before.


def install(con: Any, **defaults: Any) -> Any:
    """Register the row-level LLM functions (``relserve.duckdb_ext``) and ``llm_reduce`` /
    ``llm_topk`` (list form) on ``con``; see ``relserve.duckdb_ext.connections.install``."""
    from relserve.duckdb_ext.operator_functions import install as install_operators

    return install_operators(_install(con, **defaults))


def sql(con: Any, query: str, params: Any = None, *, max_tokens_total: int | None = None,
        max_seconds: float | None = None, on_budget: str = "refuse") -> Any:
    if isinstance(con, _Connection):
        con = con.con
    budget = Budget(max_tokens_total, max_seconds, on_budget)
    if not budget.limited:
        return _route(con, query, params)
    from relserve.duckdb_ext.estimates import statement_budget

    with statement_budget(con, query, params, budget, explain):
        return _route(con, query, params)


def _route(con: Any, query: str, params: Any) -> Any:
    from relserve.duckdb_ext.operator_functions import mentions_operator, run_sql

    if mentions_operator(query):
        return run_sql(con, query, _sql, params)
    from relserve.duckdb_ext.blocked_join import mentions_block
    from relserve.duckdb_ext.blocked_join import run_sql as run_join_sql

    if mentions_block(query):
        return run_join_sql(con, query, _sql, params)
    return _sql(con, query, params)


sql.__doc__ = (_sql.__doc__ or "") + """
    ``max_tokens_total`` / ``max_seconds``: the statement's budget (engine tokens, seconds), checked
    against its estimate before it starts and held while it runs; ``on_budget``: "refuse" (the
    default: BudgetExceeded before anything runs, with the estimate and the budget) or "partial"
    (the rows the budget allows; the others NULL with the error 'budget exceeded').
"""


def explain(con: Any, query: str, params: Any = None, *, analyze: bool = False) -> Any:
    """What ``sql(con, query)`` would do, without calling the engine; for a statement with
    ``llm_reduce`` / ``llm_topk``, their groups, levels and estimated prompt tokens. With
    ``analyze`` (EXPLAIN ANALYZE, planned statements of llm_* calls) the statement runs and each
    call shows what ran (rows, rows the LLM answered, time, the model cascade's figures) beside
    its estimate, and the statement its measured seconds and engine tokens beside its own."""
    if isinstance(con, _Connection):
        con = con.con
    if analyze:
        return _explain(con, query, params, analyze=True)
    from relserve.duckdb_ext.operator_functions import explain_sql, mentions_operator

    if mentions_operator(query):
        return explain_sql(con, query, params)
    from relserve.duckdb_ext.blocked_join import explain_sql as explain_join_sql
    from relserve.duckdb_ext.blocked_join import mentions_block

    if mentions_block(query):
        return explain_join_sql(con, query, params)
    return _explain(con, query, params)


class Connection(_Connection):
    """A DuckDB connection whose ``sql`` plans LLM calls (and llm_reduce / llm_topk)."""

    def __init__(self, con: Any, **defaults: Any) -> None:
        self.con = install(con, **defaults)

    def sql(self, query: str, params: Any = None, **budget: Any) -> Any:
        return sql(self.con, query, params, **budget)

    def explain(self, query: str, params: Any = None, *, analyze: bool = False) -> Any:
        return explain(self.con, query, params, analyze=analyze)


def connect(database: str = ":memory:", *, read_only: bool = False, config: dict | None = None, **defaults: Any) -> Connection:
    """``duckdb.connect`` with the LLM functions installed and statement planning in ``sql``."""
    import duckdb

    return Connection(duckdb.connect(database, read_only=read_only, config=config or {}), **defaults)
