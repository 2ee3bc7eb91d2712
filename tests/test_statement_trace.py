"""Where a planned DuckDB statement's time goes (issue 65): the script read once by sqlglot, and
the per-statement trace (relserve/duckdb_ext/trace.py) of its passes, waves of relQueries, label
first passes and a server's round trips, in EXPLAIN ANALYZE. Scripted engines only."""

from __future__ import annotations

import re

import duckdb
import pytest
import sqlglot.parser
from engine_doubles import ScriptedEngine
from label_doubles import strong_engine
from server_fixtures import running_server

import relserve.duckdb
from relserve.duckdb_ext.connections import session_of
from relserve.duckdb_ext.script import read_script
from relserve.duckdb_ext.trace import call_trace
from relserve.job_stats import JobStats
from relserve.planner.plan_and_run import CallOutcome

ROWS = 2100
FILTER = "llm_filter('Is {review} positive?', review)"
MAP = "llm_map('Echo: {review}', review)"
#: site #0 the map (first in the text), #1 the filter it waits for
TWO_SITES = f"SELECT id, {MAP} FROM reviews WHERE {FILTER}"


@pytest.fixture(autouse=True)
def private_home(tmp_path, monkeypatch):
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))


def answer(prompt, rq):
    if rq.choices == ["yes", "no"]:
        return "yes" if "good" in prompt else "no"
    return prompt.split(":", 1)[1].split("\n")[0].strip()


def reviews(con) -> None:
    # 80 distinct reviews, 40 of them 'good'
    con.execute("CREATE TABLE reviews AS SELECT range::INTEGER AS id, "
                "CASE WHEN range % 3 = 0 THEN 'good film ' ELSE 'bad film ' END || (range % 40) AS review "
                f"FROM range({ROWS})")


@pytest.fixture
def con():
    c = relserve.duckdb.connect(engine=ScriptedEngine(answer=answer), cache=False, progress=False)
    reviews(c)
    yield c
    c.close()


@pytest.fixture
def parses(monkeypatch) -> list[str]:
    """Every call of sqlglot's parser over these tests' SQL (sqlglot.parse, parse_one and a
    dialect's parse all end in it); sqlglot's own expressions, parsed once a process as it first
    needs them, are left out."""
    seen: list[str] = []
    real = sqlglot.parser.Parser.parse

    def counted(self, raw_tokens, sql=None):
        if sql and "llm_" in sql:
            seen.append(sql)
        return real(self, raw_tokens, sql)

    monkeypatch.setattr(sqlglot.parser.Parser, "parse", counted)
    return seen


# -- one parse per script ------------------------------------------------------------------------


def test_a_planned_statement_is_parsed_once(con, parses):
    rows = con.sql(TWO_SITES).fetchall()
    assert len(rows) == ROWS // 3
    assert parses == [TWO_SITES]
    assert session_of(con.con).last_run.trace.parses == 1


def test_a_script_of_three_statements_is_parsed_once(con, parses):
    script = (f"CREATE TABLE liked AS SELECT id, review FROM reviews WHERE {FILTER}; "
              f"SELECT count(*) FROM liked; SELECT max(id), {MAP} AS m FROM liked GROUP BY m ORDER BY m LIMIT 1")
    assert con.sql(script).fetchall() == [(2040, "good film 0")]
    assert parses == [script]


def test_explain_and_explain_analyze_parse_once(con, parses):
    relserve.duckdb.explain(con, TWO_SITES)
    assert len(parses) == 1
    relserve.duckdb.explain(con, TWO_SITES, analyze=True)
    assert len(parses) == 2


def test_read_script_keeps_the_statements_and_their_places():
    query = "SELECT 1;\n  -- a note\n SELECT llm_map('{a}', a) FROM t ;; SELECT (((("
    script = read_script(query)
    assert [s.text for s in script.statements] == ["SELECT 1", "\n  -- a note\n SELECT llm_map('{a}', a) FROM t ", " SELECT (((("]
    assert [query[s.offset:].startswith(s.text) for s in script.statements] == [True, True, True]
    # the script does not parse as a whole (the last statement), so each is parsed alone after it
    assert script.parses == 1 + 3
    assert [s.tree is not None for s in script.statements] == [True, True, False]
    assert relserve.duckdb_ext.statement.statement_of(script.statements[1]).sites[0].text == "llm_map('{a}', a)"


# -- the trace -----------------------------------------------------------------------------------


def shape(trace) -> tuple:
    return ([p.kind for p in trace.passes], [(s.kind, s.sites) for s in trace.stages],
            [(c.site, c.function, c.rows) for c in trace.calls])


def test_the_trace_of_two_sites_names_each_pass_wave_and_relquery(con):
    con.sql(TWO_SITES).fetchall()
    trace = session_of(con.con).last_run.trace
    # pass 1 records every site's rows, the filter's wave runs; pass 2 the map's rows (those
    # the filter kept), its wave; pass 3 meets no unknown row and is the result
    assert shape(trace) == (["collect", "collect", "collect"],
                            [("relqueries", (1,)), ("relqueries", (0,))],
                            [(1, "llm_filter", 80), (0, "llm_map", 40)])
    filt, mapped = trace.calls
    # the filter made its label plan first (a first pass before its rows), the map has none
    assert filt.first_pass_s is not None and filt.first_pass_s > 0 and mapped.first_pass_s is None
    assert filt.round_trip_s is None and filt.server_s is None  # a local engine
    assert trace.parses == 1 and trace.parse_s > 0
    assert trace.other_s >= -1e-9
    assert trace.total_s == pytest.approx(trace.parse_s + trace.passes_s + trace.stages_s + trace.other_s)
    # nothing ran inside a pass: every relQuery in a wave
    assert [p.llm_s for p in trace.passes] == [0.0, 0.0, 0.0]

    con.sql(TWO_SITES).fetchall()
    again = session_of(con.con).last_run.trace
    assert shape(again) == shape(trace)
    # the plan is kept: no first pass the second time
    assert [c.first_pass_s for c in again.calls] == [None, None]


def test_a_statement_that_writes_ends_with_its_final_pass(con):
    con.sql(f"CREATE TABLE echoed AS SELECT {MAP} AS m FROM reviews")
    trace = session_of(con.con).last_run.trace
    assert shape(trace) == (["collect", "collect", "final"], [("relqueries", (0,))], [(0, "llm_map", 80)])


def test_and_ed_filters_show_the_wave_that_chose_their_order(con):
    q = f"SELECT id FROM reviews WHERE {FILTER} AND llm_filter('Is {{review}} about a film?', review)"
    con.sql(q).fetchall()
    trace = session_of(con.con).last_run.trace
    kinds = [s.kind for s in trace.stages]
    assert kinds[0] == "filter order" and trace.stages[0].sites == (0, 1)
    assert kinds[1:] == ["relqueries", "relqueries"]


def test_a_limit_shows_its_checks():
    con = relserve.duckdb.connect(engine=strong_engine(lambda text: "good" in text), cache=False, progress=False)
    reviews(con)
    con.sql(f"SELECT id FROM reviews WHERE {FILTER} LIMIT 5").fetchall()
    trace = session_of(con.con).last_run.trace
    (stage,) = trace.stages
    assert stage.kind == "limit" and stage.sites == (0,)
    # the filter's rows stream and the statement is checked as rows pass, at least once
    assert stage.checks >= 1 and 0 < stage.checks_s <= stage.seconds


def test_explain_analyze_prints_the_trace(con):
    text = str(relserve.duckdb.explain(con, TWO_SITES, analyze=True))
    assert re.search(r"^time: \d+\.\d{3} s = reading the SQL \d+ ms \(1 parse\(s\)\) \+ 3 DuckDB pass\(es\) \d+ ms "
                     r"\+ 2 wave\(s\) of relQueries \d+ ms \+ other -?\d+ ms$", text, re.M), text
    assert re.search(r"^   passes: collect \d+ ms, collect \d+ ms, collect \d+ ms$", text, re.M), text
    assert re.search(r"^   waves: relqueries #1 \d+ ms, relqueries #0 \d+ ms$", text, re.M), text
    assert re.search(r"^   relQuery of #1 llm_filter, 80 row\(s\): \d+\.\d{3} s, .*label first pass \d+ ms$", text, re.M), text
    assert re.search(r"^   relQuery of #0 llm_map, 40 row\(s\): \d+\.\d{3} s$", text, re.M), text


def test_explain_analyze_trace_in_its_dict(con):
    d = relserve.duckdb.explain(con, TWO_SITES, analyze=True).to_dict()
    assert d["trace"]["parses"] == 1 and len(d["trace"]["passes"]) == 3 and len(d["trace"]["calls"]) == 2


# -- a server connection -------------------------------------------------------------------------


def test_a_server_connection_traces_the_round_trip_and_the_servers_first_pass():
    engine = ScriptedEngine(answer=answer)
    with running_server(engine, cache=False) as srv:
        con = relserve.duckdb.connect(server=srv.url, cache=False, progress=False)
        reviews(con)
        assert len(con.sql(f"SELECT id FROM reviews WHERE {FILTER}").fetchall()) == ROWS // 3
        trace = session_of(con.con).last_run.trace
        explained = str(relserve.duckdb.explain(con, f"SELECT {MAP} FROM reviews", analyze=True))
    (call,) = trace.calls
    assert (call.site, call.function, call.rows) == (0, "llm_filter", 80)
    # the server's job and, beside it, the HTTP both ways; the server's label first pass
    assert call.server_s is not None and call.round_trip_s == pytest.approx(call.seconds - call.server_s)
    assert call.first_pass_s is not None and call.first_pass_s > 0
    # EXPLAIN ANALYZE on a server connection: the server's part of the relQuery and the round trip
    assert re.search(r"^   relQuery of #0 llm_map, 80 row\(s\): \d+\.\d{3} s, server \d+\.\d{3} s, round trip \d+ ms",
                     explained, re.M), explained


def test_call_trace_of_a_servers_stats():
    stats = JobStats(latency_s=0.25, engine_latency_s=0.2, waiting_s=0.05, first_pass_s=0.1)
    outcome = CallOutcome([True], [None], None, engine_stats=stats, seconds=0.4)  # type: ignore[arg-type]
    t = call_trace(3, "llm_filter", 1, outcome, remote=True)
    assert (t.site, t.function, t.rows, t.seconds, t.server_s, t.engine_s, t.queued_s, t.first_pass_s) == (
        3, "llm_filter", 1, 0.4, 0.25, 0.2, 0.05, 0.1)
    assert t.round_trip_s == pytest.approx(0.15)
    # nothing reached the engine (every row from the cache): only the call's own time
    cached = call_trace(0, "llm_map", 2, CallOutcome(["a", "b"], [None, None], None, seconds=0.01), remote=False)  # type: ignore[arg-type]
    assert (cached.engine_s, cached.server_s, cached.round_trip_s, cached.first_pass_s) == (None, None, None, None)


def test_a_plain_duckdb_connection_is_untouched():
    c = duckdb.connect()
    relserve.duckdb.install(c, engine=ScriptedEngine(answer=answer), cache=False, progress=False)
    assert relserve.duckdb.sql(c, "SELECT 1 AS one").fetchall() == [(1,)]
    assert session_of(c).last_run is None  # no call site: DuckDB ran it, nothing planned
