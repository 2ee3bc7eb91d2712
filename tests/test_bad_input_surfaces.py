"""Bad input on every surface gets a clear error naming the problem, and one bad row never loses
the others (found by an audit of the surfaces, 7 Dec; each test failed before its fix):

* a spreadsheet cell with a malformed template failed the whole recalculation (400, no cell
  named) instead of its own cell; one with a NULL value failed alone but without naming itself;
* ``llm_reduce`` / ``llm_topk`` refused ``llm_options(temperature := 0.7)``: DuckDB hands the
  literal over as DECIMAL;
* ``llm_topk`` on a plain connection over a text column ranked each string's characters, and a
  bad ``k`` raised Python's own ``int()`` error or ran with 2 for 2.7;
* a DuckDB ``'infinity'`` timestamp or a polars date past the year 9999 lost every row of the
  statement with a bare OverflowError;
* ``run_call`` cut value columns of different lengths to the shortest, and read a string as a
  column of characters;
* ``method``, ``label_plan``, ``prompt_shape``, ``answer_field`` and ``cascade``, which only a
  call that picks a label reads, were taken and ignored on ``llm_map``, ``llm_extract``,
  ``llm_reduce`` and the server's map (a connection's, session's or server's default of them
  still holds for the calls that read it)."""

from __future__ import annotations

import re

import duckdb
import httpx
import polars as pl
import pytest
from engine_doubles import ScriptedEngine
from server_fixtures import FakeEngine, running_server

import relserve.duckdb
import relserve.polars  # noqa: F401  (registers .llm)
from relserve.errors import ConfigError
from relserve.functions import make_call
from relserve.planner.plan_and_run import run_call


def connect(engine: ScriptedEngine | None = None):
    return relserve.duckdb.connect(engine=engine or ScriptedEngine(), progress=False, cache=False)


@pytest.mark.parametrize(("bad", "why"), [
    ("Is {A positive?", "unclosed '{'"),
    ("Is {A} } positive?", "single '}'"),
    ("Is {} positive?", "empty placeholder"),
])
def test_a_cell_with_a_malformed_template_fails_alone_naming_itself(bad, why):
    body = {"cells": [{"id": "B2", "template": "Is {A} positive?", "args": ["Great film"]},
                      {"id": "B3", "template": bad, "args": ["x"]}], "stream": False}
    with running_server(FakeEngine(), cache=False) as srv:
        r = httpx.post(srv.url + "/v1/cells", json=body, timeout=30)
    assert r.status_code == 200, r.text
    cells = {c["id"]: c for c in r.json()["cells"]}
    assert (cells["B2"]["error"], cells["B2"]["text"]) == (None, "echo: Is Great film positive?")
    assert cells["B3"]["value"] is None and cells["B3"]["error"].startswith("cell B3: ")
    assert why in cells["B3"]["error"], cells["B3"]["error"]


def test_a_cell_with_a_null_value_names_itself_as_a_cell_with_a_bad_formula_does():
    body = {"cells": [{"id": "B2", "template": "Is {A} positive?", "args": ["Great film"]},
                      {"id": "B3", "template": "Is {A} positive?", "args": [None]},
                      {"id": "B4", "template": "Is {A} good?", "values": {"A": None}}], "stream": False}
    with running_server(FakeEngine(), cache=False) as srv:
        r = httpx.post(srv.url + "/v1/cells", json=body, timeout=30)
    assert r.status_code == 200, r.text
    cells = {c["id"]: c for c in r.json()["cells"]}
    assert (cells["B2"]["error"], cells["B2"]["text"]) == (None, "echo: Is Great film positive?")
    assert cells["B3"]["error"] == "cell B3: llm_map: placeholder {A} is NULL in this row"
    assert cells["B4"]["error"] == "cell B4: llm_map: placeholder {A} is NULL in this row"


@pytest.mark.parametrize("planned", [True, False], ids=["relserve.duckdb.sql", "plain connection"])
def test_the_operators_take_decimal_literals_in_their_options(planned):
    eng = ScriptedEngine()
    con = connect(eng)
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('x'), ('y')) v(a)")
    values = "a" if planned else "list(a)"
    rows = (con if planned else con.con).sql(
        f"SELECT llm_reduce('Sum up:\n{{a}}', {values}, llm_options(temperature := 0.7, top_p := 0.9)) FROM t").fetchall()
    assert rows[0][0] is not None
    assert {(rq.temperature, rq.top_p) for rq in eng.relqueries} == {(0.7, 0.9)}


@pytest.mark.parametrize("column", ["a", "n"])
def test_topk_on_a_plain_connection_asks_for_a_list(column):
    con = connect()
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('xylophone', 1), ('zebra', 2)) v(a, n)")
    with pytest.raises(Exception, match=r"llm_topk: the values must be a list \(list\(column\) on a plain "
                                        r"connection\), got (string|int32)"):
        con.con.sql(f"SELECT llm_topk('Is {{a}} good?', {column}, 2) FROM t").fetchall()


@pytest.mark.parametrize("k", ["'x'", "2.7", "0", "-1"])
def test_a_bad_k_is_refused_naming_k(k):
    con = connect()
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('x'), ('y'), ('z')) v(a)")
    with pytest.raises(Exception, match="llm_topk: k must be a positive integer, got "):
        con.sql(f"SELECT llm_topk('Is {{a}} good?', a, {k}) FROM t").fetchall()


@pytest.mark.parametrize("value", ["'infinity'::TIMESTAMP", "'-infinity'::DATE"])
@pytest.mark.parametrize("planned", [True, False], ids=["relserve.duckdb.sql", "plain connection"])
def test_a_value_python_cannot_hold_fails_its_row_only(value, planned):
    con = connect()
    con.execute(f"CREATE TABLE t AS SELECT 1 AS n, {value} AS v UNION ALL SELECT 2, TIMESTAMP '2020-01-01'")
    rows = (con if planned else con.con).sql("SELECT n, llm_map('When {v}?', v) FROM t ORDER BY n").fetchall()
    assert rows == [(1, None), (2, "answer to: When 2020-01-01 00:00:00?")]


def test_a_polars_date_past_9999_fails_its_row_only_naming_the_placeholder():
    s = pl.Series("a", [0, 2**62], dtype=pl.Int64).cast(pl.Datetime("us"))
    call = make_call("llm_map", "When {a}?")
    from relserve.polars import _columns

    (values,) = _columns(call, s)
    assert values[0].year == 1970
    out = run_call(call, [values], engine=ScriptedEngine(), cache=False, progress=False)
    assert out.values[0] == "answer to: When 1970-01-01 00:00:00?" and out.values[1] is None
    assert out.errors[1].startswith("llm_map: placeholder {a} holds a Datetime(time_unit='us', time_zone=None) "
                                    "value Python cannot read (year 148108 is out of range)")
    frame = pl.DataFrame({"a": s}).llm.map("When {a}?", engine=ScriptedEngine())
    assert frame["llm_map"].to_list() == ["answer to: When 1970-01-01 00:00:00?", None]


def test_run_call_refuses_columns_it_would_cut_or_split():
    two = make_call("llm_map", "A {a} B {b}")
    with pytest.raises(ConfigError, match=r"llm_map: the value columns must have one value per row each, "
                                          r"got 3 for \{a\}, 1 for \{b\}"):
        run_call(two, [["1", "2", "3"], ["x"]], engine=ScriptedEngine(), cache=False, progress=False)
    with pytest.raises(ConfigError, match=r"llm_map: the values of \{a\} must be a list of values, one per row, "
                                          r"got the string 'abc'; a single row is \['abc'\]"):
        run_call(make_call("llm_map", "A {a}"), ["abc"], engine=ScriptedEngine(), cache=False, progress=False)


#: each label option a call may name (relserve.functions.LABEL_OPTIONS) with a valid value, and
#: the refusal's text up to the function it names
LABEL_OPTIONS_GIVEN = {
    "method": ("'score'", r"method applies to llm_filter and llm_classify \(how the label is picked\)"),
    "prompt_shape": ("'completion'", r"prompt_shape applies to llm_filter and llm_classify \(how a request that "
                                     r"scores the labels is laid out\)"),
    "label_plan": ("'refresh'", r"label_plan applies to llm_filter and llm_classify \(what the call does with its "
                                r"label plan\)"),
    "answer_field": ("'Sentiment'", r"answer_field applies to llm_filter and llm_classify \(the field the label is "
                                    r"scored after\)"),
    "cascade": ("0.9", r"cascade applies to llm_filter and llm_classify \(a proxy answers the rows whose label it is "
                       r"sure of\)"),
}


@pytest.mark.parametrize("option", list(LABEL_OPTIONS_GIVEN))
@pytest.mark.parametrize(("call", "who"), [
    ("llm_map('Say {a}', {values}", "llm_map"),
    ("llm_extract('Facts in {a}', '{\"type\": \"object\"}', {values}", "llm_extract"),
    ("llm_reduce('Sum up:\n{a}', {values}", "llm_reduce"),
], ids=["llm_map", "llm_extract", "llm_reduce"])
@pytest.mark.parametrize("planned", [True, False], ids=["relserve.duckdb.sql", "plain connection"])
def test_a_label_option_a_call_without_labels_names_is_refused_before_anything_runs(option, call, who, planned):
    eng = ScriptedEngine()
    # the connection's own defaults of the same options are not the call's: they still run
    con = relserve.duckdb.connect(engine=eng, progress=False, cache=False, method="score", prompt_shape="completion",
                                  answer_field="Sentiment", cascade=0.9)
    con.execute("CREATE TABLE t AS SELECT 'x' AS a")
    sql = con if planned else con.con
    values = "list(a)" if who == "llm_reduce" and not planned else "a"
    head = call.replace("{values}", values)
    assert sql.sql(f"SELECT {head}) FROM t").fetchall()[0][0] is not None
    asked = len(eng.relqueries)
    value, why = LABEL_OPTIONS_GIVEN[option]
    with pytest.raises(ConfigError if planned else duckdb.Error, match=f"{why}, not to {who}$"):
        sql.sql(f"SELECT {head}, llm_options({option} := {value})) FROM t").fetchall()
    assert len(eng.relqueries) == asked


def test_polars_reduce_refuses_a_label_option_naming_itself():
    why = LABEL_OPTIONS_GIVEN["method"][1]
    frame = pl.DataFrame({"g": [1, 1], "a": ["x", "y"]})
    with pytest.raises(ConfigError, match=f"^{why}, not to llm_reduce$"):
        pl.col("a").llm.reduce("Sum up:\n{a}", method="score")
    with pytest.raises(ConfigError, match=f"^{why}, not to llm_reduce$"):
        frame.llm.reduce("Sum up:\n{a}", by="g", method="score", engine=ScriptedEngine())
    with pytest.raises(ConfigError, match=f"^{LABEL_OPTIONS_GIVEN['prompt_shape'][1]}, not to llm_reduce$"):
        pl.col("a").llm.reduce_list("Sum up:\n{a}", prompt_shape="completion")
    # map and extract have no such keyword at all; a filter's is its own
    with pytest.raises(TypeError, match="method"):
        pl.col("a").llm.map("Say {a}", method="score")
    assert frame.llm.filter("Is {a} good?", method="score", engine=ScriptedEngine()).columns == ["g", "a"]


def test_the_server_refuses_a_label_option_of_a_map_and_gives_its_default_cascade_to_label_calls_only():
    rows = [{"x": "a"}]
    with running_server(FakeEngine(), cascade=0.9, cache=False) as srv:
        def post(path, body):
            return httpx.post(srv.url + path, json=body, timeout=30)

        r = post("/v1/relqueries", {"template": "Say {x}", "rows": rows, "method": "score"})
        assert r.status_code == 400 and re.fullmatch(f"{LABEL_OPTIONS_GIVEN['method'][1]}, not to llm_map",
                                                     r.json()["error"]["message"]), r.text
        r = post("/v1/relqueries/plan", {"function": "extract", "json_schema": {"type": "object"}, "template": "Say {x}",
                                         "rows": rows, "cascade": 0.9})
        assert r.status_code == 400 and r.json()["error"]["message"].endswith("not to llm_extract"), r.text
        r = post("/v1/cells", {"cells": [{"id": "B2", "template": "Say {A}", "args": ["a"]}], "stream": False,
                               "label_plan": "refresh"})
        assert r.status_code == 400 and r.json()["error"]["message"].startswith("label_plan applies to llm_filter"), r.text
        # the server's default cascade: a map's plan has none, a filter's has it
        r = post("/v1/relqueries/plan", {"template": "Say {x}", "rows": rows})
        assert r.status_code == 200 and "cascade" not in r.json(), r.text
        assert post("/v1/relqueries/plan", {"function": "filter", "template": "Is {x} good?", "rows": rows}).json()[
            "cascade"]["target"] == 0.9
        # a DuckDB connection's defaults are not sent with its maps (the server would refuse them)
        remote = relserve.duckdb.connect(server=srv.url, method="score", cascade=0.9, cache=False, progress=False)
        assert remote.sql("SELECT llm_map('Say {x}', 'a')").fetchall() == [("echo: Say a",)]
