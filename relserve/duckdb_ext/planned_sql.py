"""The planned path of a statement: each LLM call site sent as one relQuery over all its rows
(``sql``), and its EXPLAIN (``explain``). ``relserve.duckdb_ext.api`` routes the statements
that take another path (``llm_reduce`` / ``llm_topk``, a blocked join) before they reach here."""

from __future__ import annotations

import duckdb

from relserve.duckdb_ext.connections import session_of
from relserve.duckdb_ext.estimates import measured_run, statement_estimate
from relserve.duckdb_ext.params import Params
from relserve.duckdb_ext.planned import StatementRun, explain_planned, run_planned
from relserve.duckdb_ext.script import Script
from relserve.duckdb_ext.statement import statement_of
from relserve.duckdb_ext.statement_explain import StatementExplain, statement_explain
from relserve.errors import ConfigError


def sql(con: duckdb.DuckDBPyConnection, script: Script, params: Params = None) -> duckdb.DuckDBPyRelation | None:
    """Run ``query`` with each LLM call site sent as one relQuery over all its rows.

    Like ``con.sql``: the statement's result as a relation (``.fetchall()``, ``.pl()``,
    ``.to_arrow_table()``, ``.show()``). Several statements separated by ``;`` run in order;
    the last one's result is returned. Failed rows are NULL; ``errors(con)`` lists them.
    """
    session = session_of(con)
    if params is not None and len(script.statements) > 1:
        raise ConfigError("parameters can only be given for a single statement")
    with session.lock:
        session.failures.clear()
    result = None
    for parsed in script.statements:
        statement = statement_of(parsed)
        if not statement.planned:
            # no LLM call, or a kind of statement that does not run now (CREATE VIEW, ...):
            # DuckDB runs it, and any calls run per chunk
            text = parsed.text
            result = con.sql(text, params=params) if params is not None else con.sql(text)
            continue
        result, run = run_planned(con, session, statement, params)
        _read_share(run, script)
        session.last_run = run
    return result


def explain(con: duckdb.DuckDBPyConnection, script: Script, params: Params = None, *, analyze: bool = False) -> StatementExplain:
    """What ``sql(con, query)`` would do, without calling the engine (the rows are read once).

    With ``analyze`` (EXPLAIN ANALYZE) the statement then runs, as ``sql`` runs it: each site shows
    what its relQueries did (rows, rows the LLM answered, time, the model cascade's sample, audit,
    threshold, proxy rows and estimated agreement) beside its estimate, and the statement its
    seconds and the engine's tokens beside the statement's estimate."""
    session = session_of(con)
    if len(script.statements) != 1:
        raise ConfigError(f"explain takes one statement, got {len(script.statements)}")
    statement = statement_of(script.statements[0])
    if not statement.planned:
        return StatementExplain(statement.text, [], statement.unplanned_reason if statement.sites else None, 0.0)
    run = explain_planned(con, session, statement, params)
    out = statement_explain(run)
    out.estimate = statement_estimate(run, session)
    if analyze:
        with session.lock:
            session.failures.clear()
        out.measured, ran = measured_run(con, session, statement, params)
        _read_share(ran, script)
        session.last_run = ran
        out.trace = ran.trace
        for site, state in zip(out.sites, ran.sites):
            site.analyzed = list(state.analyzed)
        out.filter_orders = list(ran.filter_orders)
    return out


def _read_share(run: StatementRun, script: Script) -> None:
    """The statement's share of reading its script (sqlglot), in its trace."""
    run.trace.add_reading(script.read_s / len(script.statements), script.parses)
