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

from relserve.budget import BudgetExceeded
from relserve.duckdb_ext.api import Connection, SiteExplain, StatementExplain, connect, errors, explain, install, sql

__all__ = ["BudgetExceeded", "Connection", "SiteExplain", "StatementExplain", "connect", "errors", "explain", "install", "sql"]
