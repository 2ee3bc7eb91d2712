"""A DuckDB value reaches the prompt as DuckDB writes it, on the planned path and on a plain
connection, and a row holding NaN is known again in the planner's next pass (found by an audit of
the surfaces; each test but the guards failed before its fix).

* DuckDB's Arrow export is not the value for some types (UHUGEINT from 2**127 wrapped negative,
  BIT and BIGNUM arrived as bytes, INTERVAL as MonthDayNano(...), TIMETZ without its offset), and
  those prompts were sent without an error. A planned site now gets such an argument as DuckDB's
  own text (``v::VARCHAR``); an INTERVAL inside a STRUCT or a LIST, and any INTERVAL on a plain
  connection, is written as DuckDB writes it; a BIGNUM on a plain connection is refused, naming
  the function, the placeholder and the type.
* NaN equals nothing, so the planner's key of a row holding it never found the row again: every
  collection pass asked it anew, and the statement ran to its pass limit.
* The planned path's result was its last pass read back from Arrow, so a statement's own columns
  came back other than DuckDB returns them (a large UHUGEINT as Decimal('-1'), a TIMETZ without
  its offset, a BIT as bytes, a HUGEINT as DECIMAL, an ENUM, a UUID or a JSON as VARCHAR, and so
  inside a LIST, a STRUCT, a MAP or a UNION). The last pass is now held by DuckDB itself
  (``relation.materialize()``); the tests compare with plain DuckDB's result of the statement.
* llm_reduce and llm_topk read their values apart from the row functions and still sent such
  values wrongly. On the planned path their list now passes through a macro that gives the same
  texts (``operator_functions.VALUES_MACRO``); an INTERVAL is written as DuckDB writes it and a
  BIGNUM is refused on a plain connection too."""

from __future__ import annotations

import itertools
import json
import math

import duckdb
import pytest
from engine_doubles import ScriptedEngine

import relserve.duckdb
from relserve.duckdb_ext.arguments import hashable_key
from relserve.duckdb_ext.connections import session_of
from relserve.planner.cache import ResultCache


def connect(engine: ScriptedEngine, **kw):
    return relserve.duckdb.connect(engine=engine, progress=False, **{"cache": False, **kw})


def prompts_of(expr: str, *, planned: bool = True) -> list[str]:
    eng = ScriptedEngine()
    con = connect(eng)
    (con if planned else con.con).sql(f"SELECT llm_map('Describe {{v}}', {expr})").fetchall()
    return [p for rq in eng.submitted for p in rq]


@pytest.mark.parametrize(("expr", "shown"), [
    ("340282366920938463463374607431768211455::UHUGEINT", "340282366920938463463374607431768211455"),
    ("'101'::BIT", "101"),
    ("123456789012345678901234567890123456789012345::VARINT", "123456789012345678901234567890123456789012345"),
    ("INTERVAL 3 DAY", "3 days"),
    ("'12:00:00+02'::TIMETZ", "12:00:00+02"),
], ids=["UHUGEINT", "BIT", "VARINT", "INTERVAL", "TIMETZ"])
def test_a_planned_value_duckdb_exports_otherwise_is_sent_as_duckdb_writes_it(expr, shown):
    assert prompts_of(expr) == [f"Describe {shown}"]


@pytest.mark.parametrize(("type_name", "literal", "shown"), [
    ("GEOMETRY", "'POINT(1 2)'", "POINT (1 2)"),
    ("VARIANT", "42", "42"),
])
def test_a_planned_geometry_or_variant_is_sent_as_duckdb_writes_it(type_name, literal, shown):
    try:
        duckdb.sql(f"SELECT {literal}::{type_name}").fetchall()
    except duckdb.Error:
        pytest.skip(f"this DuckDB has no {type_name} type")
    assert prompts_of(f"{literal}::{type_name}") == [f"Describe {shown}"]


def test_a_planned_column_of_such_values_keeps_its_nulls_and_its_other_arguments():
    eng = ScriptedEngine()
    con = connect(eng)
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES (1, 340282366920938463463374607431768211455::UHUGEINT, "
                "'12:00:00+02'::TIMETZ), (2, NULL, '23:59:59-05:30'::TIMETZ), (3, 7::UHUGEINT, NULL)) v(i, u, z)")
    rows = con.sql("SELECT i, llm_map('{i}: {u} at {z}', i, u, z) AS a FROM t ORDER BY i").fetchall()
    assert eng.submitted == [["1: 340282366920938463463374607431768211455 at 12:00:00+02"]]
    assert [r[1] is None for r in rows] == [False, True, True]
    assert sorted(r[3] for r in con.errors().fetchall()) == ["llm_map: placeholder {u} is NULL in this row",
                                                             "llm_map: placeholder {z} is NULL in this row"]


def test_a_planned_interval_in_a_struct_or_a_list_is_written_as_duckdb_writes_it():
    assert prompts_of("{'v': INTERVAL 3 DAY}") == ["Describe 3 days"]
    assert prompts_of("[INTERVAL 3 DAY, INTERVAL 1 MONTH]") == ['Describe ["3 days", "1 month"]']


INTERVALS = ["INTERVAL 0 DAY", "INTERVAL 1 DAY", "INTERVAL 1 MONTH", "INTERVAL 14 MONTH", "INTERVAL 24 MONTH",
             "INTERVAL (-1) YEAR", "INTERVAL (-13) MONTH", "INTERVAL (-2) DAY", "INTERVAL 90 MINUTE", "-INTERVAL 90 MINUTE",
             "INTERVAL 1 MICROSECOND", "INTERVAL 1500 MILLISECOND", "INTERVAL 123 HOUR",
             "INTERVAL 1 YEAR + INTERVAL 2 MONTH + INTERVAL 3 DAY + INTERVAL 14706789 MILLISECOND",
             "INTERVAL 1 DAY - INTERVAL 1 SECOND"]


@pytest.mark.parametrize("planned", [True, False], ids=["relserve.duckdb.sql", "plain connection"])
def test_intervals_in_a_list_read_as_duckdb_writes_each_one(planned):
    con = duckdb.connect()
    texts = [con.sql(f"SELECT ({iv})::VARCHAR").fetchall()[0][0] for iv in INTERVALS]
    assert prompts_of(f"[{', '.join(INTERVALS)}]", planned=planned) == [f"Describe {json.dumps(texts)}"]


def test_an_interval_on_a_plain_connection_is_written_as_duckdb_writes_it():
    assert prompts_of("INTERVAL 3 DAY", planned=False) == ["Describe 3 days"]


def test_a_bignum_on_a_plain_connection_is_refused_naming_the_placeholder_and_the_type():
    eng = ScriptedEngine()
    con = connect(eng)
    with pytest.raises(duckdb.Error, match=r"llm_map: placeholder \{v\} is DuckDB's BIGNUM, which reaches Python "
                                           r"as opaque bytes; cast it to VARCHAR"):
        con.con.sql("SELECT llm_map('Describe {v}', 12345678901234567890123::VARINT)").fetchall()
    assert eng.submitted == []


@pytest.mark.parametrize("planned", [True, False], ids=["relserve.duckdb.sql", "plain connection"])
@pytest.mark.parametrize(("expr", "shown"), [
    ("'ab'::BLOB", "ab"),
    ("{'v': {'a': 1, 'b': 'x'}}", '{"a": 1, "b": "x"}'),
    ("[[1], [2, 3]]", "[[1], [2, 3]]"),
    ("[1, 2]::INTEGER[2]", "[1, 2]"),
    ("123.456::DECIMAL(38,3)", "123.456"),
    ("(-170141183460469231731687303715884105728)::HUGEINT", "-170141183460469231731687303715884105728"),
    ("'nan'::DOUBLE", "nan"),
    ("'-inf'::DOUBLE", "-inf"),
    ("'00000000-0000-0000-0000-000000000001'::UUID", "00000000-0000-0000-0000-000000000001"),
    ("'x'::ENUM('x', 'y')", "x"),
    ("1::UNION(a INTEGER, b VARCHAR)", "1"),
    ("'2020-01-02 03:04:05+00'::TIMESTAMPTZ", "2020-01-02 03:04:05+00:00"),
    ("'2020-01-02 03:04:05.123456'::TIMESTAMP_NS", "2020-01-02 03:04:05.123456"),
    ("'0001-01-01'::DATE", "0001-01-01"),
    ("'12:00:00'::TIME", "12:00:00"),
    ("1::UHUGEINT", "1"),
    ("1.5::DOUBLE", "1.5"),
    ("true", "True"),
])
def test_the_types_that_were_right_are_sent_as_before(expr, shown, planned):
    # a guard, not a reproduction: these prompts are the ones sent before the fix
    assert prompts_of(expr, planned=planned) == [f"Describe {shown}"]


def test_a_call_whose_arguments_duckdb_counts_and_its_site_functions_go_after_the_statement():
    # guards of the site's macro: *COLUMNS(*) gives DuckDB's own count of arguments (the site
    # then takes them as Arrow gives them), and a statement leaves no function of its sites
    eng = ScriptedEngine()
    con = connect(eng)
    con.execute("CREATE TABLE t AS SELECT 'x' AS a, 1 AS b")
    assert con.sql("SELECT llm_map('{a} and {b}', *COLUMNS(*)) FROM t").fetchall() == [("answer to: x and 1",)]
    assert con.sql("SELECT llm_map('{a} or {b}', a, b) FROM t").fetchall() == [("answer to: x or 1",)]
    assert con.con.sql("SELECT function_name FROM duckdb_functions() WHERE function_name LIKE 'llm_site%'").fetchall() == []


def test_the_result_cache_tells_a_large_uhugeint_from_minus_one(tmp_path):
    cache = ResultCache(tmp_path / "cache.sqlite")
    eng = ScriptedEngine(answer=lambda prompt, rq: f"about {prompt}")
    con = connect(eng, cache=cache)
    con.sql("SELECT llm_map('Describe {v}', -1)").fetchall()
    (answer,) = con.sql("SELECT llm_map('Describe {v}', 340282366920938463463374607431768211455::UHUGEINT)").fetchall()[0]
    assert eng.submitted == [["Describe -1"], ["Describe 340282366920938463463374607431768211455"]]
    assert answer == "about Describe 340282366920938463463374607431768211455"


def test_nan_rows_are_asked_once_and_the_statement_settles():
    eng = ScriptedEngine()
    con = connect(eng)
    con.execute("CREATE TABLE t AS SELECT i, CASE WHEN i % 2 = 0 THEN 'nan'::DOUBLE ELSE i END AS v FROM range(100) r(i)")
    rows = con.sql("SELECT i, llm_map('Describe {v}', v) FROM t ORDER BY i").fetchall()
    assert [len(p) for p in eng.submitted] == [51]
    assert eng.submitted[0].count("Describe nan") == 1
    # one pass records the rows, the second finds every row known (none left for a third)
    assert session_of(con.con).last_run.passes == 2
    assert rows[:2] == [(0, "answer to: Describe nan"), (1, "answer to: Describe 1")]


def test_hashable_key_finds_nan_again_and_keeps_other_values_apart():
    nan_a, nan_b = float("nan"), float("nan")
    assert nan_a is not nan_b
    assert hashable_key(("x", nan_a)) == hashable_key(("x", nan_b))
    assert hash(hashable_key(("x", nan_a))) == hash(hashable_key(("x", nan_b)))
    assert hashable_key(nan_a) == hashable_key(nan_b)
    assert hashable_key(("x", nan_a)) != hashable_key(("x", "nan"))
    assert hashable_key(("x", nan_a)) != hashable_key(("x", math.inf))
    assert hashable_key((-0.0,)) == hashable_key((0.0,))  # both are written "0"
    assert hashable_key(([nan_a], 1)) == hashable_key(([nan_b], 1))
    assert hashable_key(([nan_a], 1)) != hashable_key((["nan"], 1))
    assert hashable_key(({"a": nan_a},)) == hashable_key(({"a": nan_b},))
    assert hashable_key(("x", 1)) == ("x", 1)  # rows without NaN keep themselves as their key


# -- the statement's own result -----------------------------------------------------------------

#: columns whose DuckDB value or type did not survive the planned path's trip through Arrow (the
#: result was DuckDB's Arrow export read back: a large UHUGEINT as Decimal('-1'), a TIMETZ without
#: its offset, a BIT as bytes, a HUGEINT as DECIMAL(38,0), an ENUM, a UUID or a JSON as VARCHAR),
#: alone and inside a LIST, a STRUCT, a MAP and a UNION
RESULT_COLUMNS = {
    "UHUGEINT": "340282366920938463463374607431768211455::UHUGEINT",
    "TIMETZ": "'12:00:00+02'::TIMETZ",
    "BIT": "'101'::BIT",
    "HUGEINT": "170141183460469231731687303715884105727::HUGEINT",
    "ENUM": "'x'::ENUM('x', 'y')",
    "UUID": "'00000000-0000-0000-0000-000000000001'::UUID",
    "JSON": "'{\"a\": 1}'::JSON",
    "LIST": "[340282366920938463463374607431768211455::UHUGEINT, NULL]",
    "STRUCT": "{'t': '23:59:59-05:30'::TIMETZ, 'b': '0110'::BIT}",
    "MAP": "MAP {'k': '12:00:00+02'::TIMETZ}",
    "UNION": "'101'::BIT::UNION(b BIT, s VARCHAR)",
}


def duckdb_result(sql: str, setup: str = "") -> duckdb.DuckDBPyRelation:
    """``sql`` on plain DuckDB (no relserve): what the planned path must return."""
    con = duckdb.connect()
    if setup:
        con.execute(setup)
    return con.sql(sql).materialize()


def same_result(got: duckdb.DuckDBPyRelation, want: duckdb.DuckDBPyRelation) -> None:
    """The same rows, column names and DuckDB types, as ``fetchall``, ``typeof`` and Arrow read them."""
    assert got.fetchall() == want.fetchall()
    assert got.columns == want.columns
    assert [str(t) for t in got.types] == [str(t) for t in want.types]
    typeof = ", ".join(f'typeof("{c}")' for c in want.columns)
    assert got.query("r", f"SELECT {typeof} FROM r").fetchall() == want.query("r", f"SELECT {typeof} FROM r").fetchall()
    assert got.to_arrow_table() == want.to_arrow_table()


def fill(statement: str, **parts: str) -> str:
    """``statement`` with each ``<name>`` replaced by ``parts[name]``."""
    for name, text in parts.items():
        statement = statement.replace(f"<{name}>", text)
    return statement


def about(prompt: str, rq) -> str:
    return "yes" if getattr(rq, "choices", None) else f"about {prompt}"


@pytest.mark.parametrize("expr", RESULT_COLUMNS.values(), ids=RESULT_COLUMNS.keys())
def test_a_planned_statement_returns_each_column_as_duckdb_does(expr):
    eng = ScriptedEngine(answer=about)
    con = connect(eng)
    statement = f"SELECT {expr} AS c, typeof(c) AS t, <map> AS m"
    got = con.sql(fill(statement, map="llm_map('Describe {a}', 'x')"))
    same_result(got, duckdb_result(fill(statement, map="'about Describe x'")))
    assert eng.submitted == [["Describe x"]]  # read again and again, the rows are not asked again


TABLE = ("CREATE TABLE s AS SELECT * FROM (VALUES (1, 340282366920938463463374607431768211455::UHUGEINT, "
         "'12:00:00+02'::TIMETZ, '101'::BIT), (2, NULL, NULL, NULL)) v(i, u, z, b)")
#: each call of the statements below, and what the engine double answers it with, in plain SQL
CALLS = {"map": "llm_map('Describe {u}', u)", "filter": "llm_filter('Is {i} fine?', i)",
         "reduce": "llm_reduce('Sum up {i}', i)"}
ANSWERS = {"map": "'about Describe ' || u", "filter": "true", "reduce": "'about Sum up - ' || any_value(i)"}


@pytest.mark.parametrize("statement", [
    # settled in a collection pass, whose rows are the result
    "SELECT i, u, z, b, <map> AS m FROM s ORDER BY i",
    # a LIMIT's filter, which stops early
    "SELECT i, u, z, b FROM s WHERE <filter> LIMIT 1",
    # a data-changing statement's own rows, from its final pass
    "INSERT INTO s SELECT i + 10, u, z, b FROM s WHERE <filter> RETURNING *, <map> AS m",
    # llm_reduce's path, grouped by such columns
    "SELECT u, z, b, <reduce> AS r FROM s GROUP BY ALL ORDER BY u NULLS LAST",
], ids=["collected", "limit", "insert returning", "llm_reduce"])
def test_every_planned_path_returns_such_columns_as_duckdb_does(statement):
    con = connect(ScriptedEngine(answer=about))
    con.execute(TABLE)
    same_result(con.sql(fill(statement, **CALLS)), duckdb_result(fill(statement, **ANSWERS), TABLE))


def test_a_planned_statement_with_parameters_returns_such_columns_as_duckdb_does():
    con = connect(ScriptedEngine(answer=about))
    con.execute(TABLE)
    statement = "SELECT u, z, b, <map> AS m FROM s WHERE i = ?"
    got = con.sql(fill(statement, map="llm_map('Describe {a}', ?)"), params=["x", 1])
    assert session_of(con.con).last_run is not None  # (planned)
    want = duckdb.connect()
    want.execute(TABLE)
    same_result(got, want.sql(fill(statement, map="'about Describe ' || ?"), params=["x", 1]).materialize())


def test_create_table_and_insert_through_the_planned_path_keep_the_types():
    # a guard, not a reproduction: these statements ran in DuckDB itself before the fix too
    con = connect(ScriptedEngine(answer=about))
    con.execute(TABLE)
    con.sql(fill("CREATE TABLE t AS SELECT i, u, z, b, <map> AS m FROM s", **CALLS))
    con.sql(fill("INSERT INTO t SELECT i + 10, u, z, b, <map> FROM s", **CALLS))
    want = duckdb_result(fill("SELECT i, u, z, b, <map> AS m FROM s UNION ALL SELECT i + 10, u, z, b, <map> FROM s "
                              "ORDER BY i", **ANSWERS), TABLE)
    same_result(con.sql("SELECT * FROM t ORDER BY i"), want)


# -- llm_reduce and llm_topk --------------------------------------------------------------------

#: two values of each type whose Arrow form is not the value, and their text (``v::VARCHAR``);
#: llm_reduce and llm_topk read their values apart from the row functions, and sent
#: MonthDayNano(...), -1, bytes and a TIMETZ without its offset
OPERATOR_VALUES = {
    "UHUGEINT": ("340282366920938463463374607431768211455::UHUGEINT", "7::UHUGEINT",
                 "340282366920938463463374607431768211455", "7"),
    "BIT": ("'101'::BIT", "'0011'::BIT", "101", "0011"),
    "VARINT": ("123456789012345678901234567890123456789012345::VARINT", "(-5)::VARINT",
               "123456789012345678901234567890123456789012345", "-5"),
    "INTERVAL": ("INTERVAL 3 DAY", "INTERVAL 14 MONTH", "3 days", "1 year 2 months"),
    "TIMETZ": ("'12:00:00+02'::TIMETZ", "'23:59:59-05:30'::TIMETZ", "12:00:00+02", "23:59:59-05:30"),
    "GEOMETRY": ("'POINT(1 2)'::GEOMETRY", "'POINT(3 4)'::GEOMETRY", "POINT (1 2)", "POINT (3 4)"),
    "VARIANT": ("42::VARIANT", "'x'::VARIANT", "42", "x"),
}


@pytest.fixture
def run_operator(tmp_path, monkeypatch):
    """``run(sql)``: the rows of ``sql`` and the prompts sent, with a result cache of its own for
    each run: the operators use relserve's, which ``cache=False`` does not turn off, and a
    statement run twice would find its answers there."""
    homes = itertools.count()

    def run(sql: str, *, planned: bool = True) -> tuple[list[tuple], list[list[str]]]:
        monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / f"home{next(homes)}"))
        eng = ScriptedEngine()
        con = connect(eng)
        rows = (con if planned else con.con).sql(sql).fetchall()
        return rows, eng.submitted

    return run


def skip_without(expr: str) -> None:
    try:
        duckdb.sql(f"SELECT {expr}").fetchall()
    except duckdb.Error:
        pytest.skip(f"this DuckDB cannot read {expr}")


@pytest.mark.parametrize(("first", "second", "first_text", "second_text"), OPERATOR_VALUES.values(),
                         ids=OPERATOR_VALUES.keys())
def test_llm_reduce_sends_each_value_as_duckdb_writes_it(run_operator, first, second, first_text, second_text):
    skip_without(first)
    statement = "SELECT llm_reduce('Sum up {v}', v) FROM (SELECT * FROM (VALUES (1, <a>), (2, <b>)) t(i, v) ORDER BY i)"
    rows, prompts = run_operator(fill(statement, a=first, b=second))
    assert prompts == [[f"Sum up - {first_text}\n- {second_text}"]]
    # the same prompts and answer as for DuckDB's own text of the values
    as_text = run_operator(fill(statement, a=f"CAST({first} AS VARCHAR)", b=f"CAST({second} AS VARCHAR)"))
    assert (rows, prompts) == as_text


@pytest.mark.parametrize(("first", "second", "first_text", "second_text"), OPERATOR_VALUES.values(),
                         ids=OPERATOR_VALUES.keys())
def test_llm_topk_sends_and_returns_each_value_as_duckdb_writes_it(run_operator, first, second, first_text, second_text):
    skip_without(first)
    statement = "SELECT llm_topk('Best {v}', v, 1) FROM (VALUES (<a>), (<b>)) t(v)"
    rows, prompts = run_operator(fill(statement, a=first, b=second))
    assert rows in ([([first_text],)], [([second_text],)])
    shown = [p for rq in prompts for p in rq]
    assert any(first_text in p for p in shown) and any(second_text in p for p in shown)
    assert (rows, prompts) == run_operator(fill(statement, a=f"CAST({first} AS VARCHAR)", b=f"CAST({second} AS VARCHAR)"))


def test_llm_reduce_writes_an_interval_in_a_struct_and_keeps_a_written_aggregate(run_operator):
    rows, prompts = run_operator("SELECT llm_reduce('Sum up {v}', {'d': v}) FROM (VALUES (INTERVAL 3 DAY)) t(v)")
    assert prompts == [['Sum up - {"d": "3 days"}']]
    # an aggregate written out keeps its order, and its values are written as DuckDB writes them
    rows, prompts = run_operator("SELECT llm_reduce('Sum up {v}', list(v ORDER BY i DESC)) "
                                 "FROM (VALUES (1, INTERVAL 3 DAY), (2, INTERVAL 1 MONTH)) t(i, v)")
    assert prompts == [["Sum up - 1 month\n- 3 days"]]


def test_operators_on_a_plain_connection_write_an_interval_and_refuse_a_bignum(run_operator):
    rows, prompts = run_operator("SELECT llm_reduce('Sum up {v}', list(v)) FROM (VALUES (INTERVAL 3 DAY)) t(v)",
                                 planned=False)
    assert prompts == [["Sum up - 3 days"]]
    eng = ScriptedEngine()
    con = connect(eng)
    with pytest.raises(duckdb.Error, match=r"llm_topk: the values are DuckDB's BIGNUM, which reaches Python as "
                                           r"opaque bytes; cast them to VARCHAR"):
        con.con.sql("SELECT llm_topk('Best {v}', list(v), 1) FROM (VALUES (5::VARINT), (6::VARINT)) t(v)").fetchall()
    assert eng.submitted == []
