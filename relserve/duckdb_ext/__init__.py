"""LLM functions in DuckDB; the public names are re-exported by ``relserve.duckdb``."""

from relserve.duckdb_ext.api import Connection, SiteExplain, StatementExplain, connect, errors, explain, sql
from relserve.duckdb_ext.connections import install

__all__ = ["Connection", "SiteExplain", "StatementExplain", "connect", "errors", "explain", "install", "sql"]
