"""Sizes no test fed before (issue 63): a 1 MB value among short ones, and 10,000 labels, through
DuckDB, polars and PostgreSQL on the real engine. The 1 MB row fails alone, with the engine's
message naming its tokens and the context, and the other rows are answered; 10,000 labels are
refused before anything runs, naming the labels and the limit (scoring a row reads every label:
about 11,000 engine requests a row for 10,000 numbered labels)."""

from __future__ import annotations

import re

import duckdb
import polars as pl
import psycopg
import pytest
from test_postgres import KEY, ROLE_KEYS, cluster, connect, server  # noqa: F401 (fixtures)

import relserve.duckdb
import relserve.polars
from relserve.validation import MAX_LABELS

pytestmark = [pytest.mark.engine, pytest.mark.usefixtures("engine_home")]

BIG = "word " * 200_000  # 1 MB: some 200,000 tokens, far past the model's context
ROWS = [(1, "A short review."), (2, BIG), (3, "Another short one.")]
LABELS = [f"label{i}" for i in range(10_000)]
TOO_MANY = rf"labels: at most {MAX_LABELS:,} labels, got 10,000"
TOO_LONG = r"prompt has [\d,]+ tokens; with max_tokens=4 it exceeds the model's context of [\d,]+ tokens"


def test_duckdb(engine):
    con = duckdb.connect()
    relserve.duckdb.install(con, engine=engine, cache=False, progress=False)
    con.execute("CREATE TABLE t (id int, txt text)")
    con.executemany("INSERT INTO t VALUES (?, ?)", ROWS)
    got = con.execute("SELECT id, llm_map('In two words: {t}', txt, llm_options(max_tokens := 4)) FROM t ORDER BY id").fetchall()
    assert [r[0] for r in got] == [1, 2, 3] and got[1][1] is None and got[0][1] and got[2][1]
    (error,) = [e for (e,) in relserve.duckdb.errors(con).project("error").fetchall()]
    assert re.search(TOO_LONG, error), error
    with pytest.raises(duckdb.Error, match=TOO_MANY):
        con.execute("SELECT llm_classify('Pick for {t}', ?, txt) FROM t WHERE id <> 2", [LABELS]).fetchall()


def test_polars(engine):
    relserve.polars.configure(engine=engine)
    try:
        df = pl.DataFrame({"id": [r[0] for r in ROWS], "txt": [r[1] for r in ROWS]})
        out = df.with_columns(pl.col("txt").llm.map("In two words: {txt}", max_tokens=4).alias("a"))
        answers = out["a"].to_list()
        assert answers[1] is None and answers[0] and answers[2]
        assert re.search(TOO_LONG, relserve.polars.errors()["error"].to_list()[-1])
        with pytest.raises(Exception, match=TOO_MANY):
            df.filter(pl.col("id") != 2).with_columns(pl.col("txt").llm.classify("Pick for {txt}", LABELS).alias("c"))
    finally:
        relserve.polars.configure(engine=None)


def test_postgresql(cluster):
    with connect(cluster) as admin:
        admin.execute("CREATE TABLE sizes (id int, txt text)")
        with admin.cursor() as cur:
            cur.executemany("INSERT INTO sizes VALUES (%s, %s)", ROWS)
        admin.execute("GRANT SELECT ON sizes TO alice")
    with connect(cluster, "alice") as db:
        db.execute("SET relserve.max_tokens = 4")
        db.execute("SET relserve.cache = off")
        notices: list[str] = []
        db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        got = db.execute("SELECT id, llm_map('In two words: {t}', txt) FROM sizes ORDER BY id").fetchall()
        assert [r[0] for r in got] == [1, 2, 3] and got[1][1] is None and got[0][1] and got[2][1]
        assert any(re.search(TOO_LONG, n) for n in notices), notices
        rows = db.execute("SELECT ord, answer, error FROM llm_map_query('In two words: {txt}', 'SELECT txt FROM sizes ORDER BY id')"
                          ).fetchall()
        assert rows[1][1] is None and re.search(TOO_LONG, rows[1][2]) and rows[0][1] and rows[2][1]
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            db.execute("SELECT llm_classify('Pick for {t}', (SELECT array_agg('label' || g) FROM generate_series(0, 9999) g), "
                       "txt) FROM sizes WHERE id <> 2")
        assert re.match(rf"llm_classify {TOO_MANY}", e.value.diag.message_primary), e.value.diag.message_primary
