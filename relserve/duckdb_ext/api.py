"""The DuckDB surface: ``install``, ``sql``, ``explain``, ``errors`` and a connection wrapper."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import duckdb
import pyarrow as pa

from relserve.duckdb_ext.connections import install, session_of
from relserve.duckdb_ext.estimates import Measured, measured_run, site_stages, statement_estimate
from relserve.duckdb_ext.planned import StatementRun, explain_planned, run_planned
from relserve.duckdb_ext.statement import analyze as parse_statement
from relserve.duckdb_ext.statement import split_statements
from relserve.errors import ConfigError
from relserve.estimate.statement import StatementEstimate
from relserve.planner.explain import Analyzed, Explain


def sql(con: duckdb.DuckDBPyConnection, query: str, params: Any = None) -> duckdb.DuckDBPyRelation | None:
    """Run ``query`` with each LLM call site sent as one relQuery over all its rows.

    Like ``con.sql``: the statement's result as a relation (``.fetchall()``, ``.pl()``,
    ``.to_arrow_table()``, ``.show()``). Several statements separated by ``;`` run in order;
    the last one's result is returned. Failed rows are NULL; ``errors(con)`` lists them.
    """
    session = session_of(con)
    texts = split_statements(query)
    if params is not None and len(texts) > 1:
        raise ConfigError("parameters can only be given for a single statement")
    with session.lock:
        session.failures.clear()
    result = None
    for text in texts:
        statement = parse_statement(text)
        if not statement.planned:
            # no LLM call, or a kind of statement that does not run now (CREATE VIEW, ...):
            # DuckDB runs it, and any calls run per chunk
            result = con.sql(text, params=params) if params is not None else con.sql(text)
            continue
        table, run = run_planned(con, session, statement, params)
        session.last_run = run
        result = con.from_arrow(table) if table is not None else None
    return result


@dataclass
class SiteExplain:
    index: int
    call: str
    depends_on: list[int]
    stage: int
    #: rows the collection pass sent to this site (an upper bound when it depends on other sites)
    rows_seen: int
    plans: list[Explain] = field(default_factory=list)
    #: EXPLAIN ANALYZE: what the site's relQueries did when the statement ran
    analyzed: list[Analyzed] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["plans"] = [p.to_dict() for p in self.plans]
        d["analyzed"] = [a.to_dict() for a in self.analyzed]
        return d


@dataclass
class StatementExplain:
    statement: str
    sites: list[SiteExplain]
    #: why the statement is not planned, if it is not
    unplanned_reason: str | None
    #: reading the rows (one collection pass)
    collect_s: float
    #: the whole EXPLAIN, tokenizing the prompts included
    explain_s: float = 0.0
    #: issue 47: the statement's tokens and seconds, its sites replayed together (None: unknown)
    estimate: StatementEstimate | None = None
    #: EXPLAIN ANALYZE: what running it took (None: not run)
    measured: Measured | None = None

    @property
    def stages(self) -> int:
        return max((s.stage for s in self.sites), default=0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "statement": self.statement,
            "stages": self.stages,
            "unplanned_reason": self.unplanned_reason,
            "collect_s": self.collect_s,
            "explain_s": self.explain_s,
            "sites": [s.to_dict() for s in self.sites],
            "estimate": self.estimate.to_dict() if self.estimate is not None else None,
            "measured": asdict(self.measured) if self.measured is not None else None,
        }

    def __str__(self) -> str:
        if self.unplanned_reason:
            return f"LLM EXPLAIN: not planned: {self.unplanned_reason}"
        if not self.sites:
            return "LLM EXPLAIN: no LLM calls in this statement"
        lines = [
            f"LLM EXPLAIN: {len(self.sites)} call site(s) in {self.stages} stage(s); "
            f"reading the rows {self.collect_s * 1000:.0f} ms, explaining {self.explain_s * 1000:.0f} ms"
        ]
        if self.estimate is not None:
            lines.append(self.estimate.line())
        if self.measured is not None:
            lines.append(self.measured.line(self.estimate))
        for s in self.sites:
            waits = f", waits for #{', #'.join(map(str, s.depends_on))}" if s.depends_on else ""
            lines.append(f"#{s.index} stage {s.stage}{waits}: {s.call}")
            if s.depends_on:
                lines.append(
                    "   (rows counted as if the sites it waits for let every row through: an upper bound)"
                )
            if not s.plans and not s.analyzed:
                lines.append("   no rows reach this call")
            for plan in s.plans:
                lines.extend("   " + line for line in str(plan).splitlines())
            for ran in s.analyzed:
                lines.extend("   " + line for line in str(ran).splitlines())
            if s.analyzed:
                lines.append(f"   measured              {sum(a.seconds for a in s.analyzed):>9.2f}s   (its relQueries, when the "
                             f"statement ran; estimated above: {_site_estimate(s)})")
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


def explain(con: duckdb.DuckDBPyConnection, query: str, params: Any = None, *, analyze: bool = False) -> StatementExplain:
    """What ``sql(con, query)`` would do, without calling the engine (the rows are read once).

    With ``analyze`` (EXPLAIN ANALYZE) the statement then runs, as ``sql`` runs it: each site shows
    what its relQueries did (rows, rows the LLM answered, time, the model cascade's sample, audit,
    threshold, proxy rows and estimated agreement) beside its estimate, and the statement its
    seconds and the engine's tokens beside the statement's estimate."""
    session = session_of(con)
    texts = split_statements(query)
    if len(texts) != 1:
        raise ConfigError(f"explain takes one statement, got {len(texts)}")
    statement = parse_statement(texts[0])
    if not statement.planned:
        return StatementExplain(statement.text, [], statement.unplanned_reason if statement.sites else None, 0.0)
    run = explain_planned(con, session, statement, params)
    out = _statement_explain(run)
    out.estimate = statement_estimate(run, session)
    if analyze:
        with session.lock:
            session.failures.clear()
        out.measured, ran = measured_run(con, session, statement, params)
        session.last_run = ran
        for site, state in zip(out.sites, ran.sites):
            site.analyzed = list(state.analyzed)
    return out


def _site_estimate(site: SiteExplain) -> str:
    ests = [p.estimate for p in site.plans if getattr(p, "estimate", None) is not None]
    if not ests or any(e.idle_s is None for e in ests):
        return "none"
    idle = sum(e.idle_s for e in ests)
    now = [e.now_s for e in ests if e.now_s is not None]
    return f"{idle:.2f}s alone" + (f", {sum(now):.2f}s now" if now else "")


def _statement_explain(run: StatementRun) -> StatementExplain:
    stages = site_stages(run)
    out = [
        SiteExplain(
            s.site.index, s.site.text, sorted(s.site.depends_on), stages[s.site.index], s.rows_seen, list(s.explains),
            list(s.analyzed),
        )
        for s in run.sites
    ]
    return StatementExplain(run.statement.text, out, None, run.collect_s, run.seconds)


def errors(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyRelation:
    """Rows that got NULL because their call failed: since the last ``sql(con, ...)`` statement
    (or, for calls on the plain connection, since then), as a relation with the columns
    function, template, arguments (the placeholder values as JSON) and error."""
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
    """A DuckDB connection whose ``sql`` plans LLM calls; everything else is DuckDB's own.

    >>> con = relserve.duckdb.connect()
    >>> con.sql("SELECT llm_filter('Is {review} positive?', review) FROM reviews").fetchall()
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, **defaults: Any) -> None:
        self.con = install(con, **defaults)

    def sql(self, query: str, params: Any = None) -> duckdb.DuckDBPyRelation | None:
        return sql(self.con, query, params)

    def explain(self, query: str, params: Any = None, *, analyze: bool = False) -> StatementExplain:
        return explain(self.con, query, params, analyze=analyze)

    def errors(self) -> duckdb.DuckDBPyRelation:
        return errors(self.con)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.con, name)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.con.close()


def connect(database: str = ":memory:", *, read_only: bool = False, config: dict | None = None, **defaults: Any) -> Connection:
    """``duckdb.connect`` with the LLM functions installed and statement planning in ``sql``."""
    con = duckdb.connect(database, read_only=read_only, config=config or {})
    return Connection(con, **defaults)
