"""llm_reduce through a DuckDB connection uses the connection's result cache, as its row
functions do: ``connect(cache=False)`` asks the engine again, the default answers a repeat from
the cache (before: the operator always read and wrote relserve's shared cache)."""

from __future__ import annotations

import pytest
from engine_doubles import ScriptedEngine

import relserve.duckdb

REDUCE = "SELECT g, llm_reduce('Sum up: {v}', v) AS s FROM t GROUP BY g ORDER BY g"


@pytest.fixture(autouse=True)
def private_home(tmp_path, monkeypatch):
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))


def run_twice(**kw) -> tuple[ScriptedEngine, list, list]:
    eng = ScriptedEngine()
    con = relserve.duckdb.connect(engine=eng, progress=False, **kw)
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES (1, 'a'), (1, 'b'), (2, 'c')) v(g, v)")
    first = con.sql(REDUCE).fetchall()
    second = con.sql(REDUCE).fetchall()
    return eng, first, second


def test_a_connection_without_a_cache_asks_the_engine_again():
    eng, first, second = run_twice(cache=False)
    assert first == second
    assert [sorted(rq) for rq in eng.submitted] == [["Sum up: - a\n- b", "Sum up: - c"]] * 2


def test_a_connection_with_the_cache_answers_the_repeat_from_it():
    eng, first, second = run_twice()
    assert first == second
    assert [sorted(rq) for rq in eng.submitted] == [["Sum up: - a\n- b", "Sum up: - c"]]
