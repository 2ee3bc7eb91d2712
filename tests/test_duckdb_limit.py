"""Spending LLM calls only where they change the answer (issue 64): a DuckDB statement that needs
only its first rows (``WHERE llm_filter(...) LIMIT k``) streams its filter's rows and cancels the
rest once k rows pass. Scripted engines (tests/label_doubles.py); the real engine and the
measurement: bench/bench_limit.py."""

from __future__ import annotations

import random
import zlib
from statistics import NormalDist

import pytest
from label_doubles import MarginEngine, strong_engine

import relserve.duckdb
from relserve.duckdb_ext.connections import session_of
from relserve.duckdb_ext.statement import analyze

FILTER = "Is this news article about athletics? Article: {a}"


@pytest.mark.parametrize(("sql", "needed"), [
    (f"SELECT a FROM t WHERE llm_filter('{FILTER}', a) LIMIT 10", 10),
    (f"SELECT a, llm_map('Sum {{a}}', a) FROM t WHERE n > 3 AND llm_filter('{FILTER}', a) LIMIT 7 OFFSET 5", 7),
    (f"SELECT a FROM t WHERE llm_filter('{FILTER}', a) ORDER BY n LIMIT 10", None),
    (f"SELECT a FROM t WHERE llm_filter('{FILTER}', a) OR n > 3 LIMIT 10", None),
    (f"SELECT count(*) FROM t WHERE llm_filter('{FILTER}', a) LIMIT 10", None),
    (f"SELECT DISTINCT a FROM t WHERE llm_filter('{FILTER}', a) LIMIT 10", None),
    (f"SELECT a FROM t WHERE llm_filter('{FILTER}', a)", None),
    (f"SELECT a FROM (SELECT a FROM t WHERE llm_filter('{FILTER}', a)) LIMIT 10", None),
])
def test_a_limit_over_the_rows_a_where_passes_is_what_stops_early(sql, needed):
    assert analyze(sql).rows_needed == needed


@pytest.mark.parametrize(("sql", "decided"), [
    (f"SELECT EXISTS (SELECT 1 FROM t WHERE llm_filter('{FILTER}', a))", True),
    (f"SELECT NOT EXISTS (SELECT a FROM t WHERE n > 3 AND llm_filter('{FILTER}', a) LIMIT 5) AS none", True),
    (f"SELECT EXISTS (SELECT 1 FROM t WHERE llm_filter('{FILTER}', a) OR n > 3)", False),
    (f"SELECT EXISTS (SELECT count(*) FROM t WHERE llm_filter('{FILTER}', a))", False),
    (f"SELECT EXISTS (SELECT 1 FROM t WHERE llm_filter('{FILTER}', a) LIMIT 0)", False),
    # correlated with an outer row: each outer row has its own answer
    (f"SELECT n FROM t AS o WHERE EXISTS (SELECT 1 FROM t WHERE t.n = o.n + 1 AND llm_filter('{FILTER}', a))", False),
    (f"SELECT EXISTS (SELECT 1 FROM t WHERE llm_filter('{FILTER}', a)), llm_map('Sum {{a}}', 'x')", False),
])
def test_an_exists_over_an_llm_filter_is_decided_by_its_first_passing_row(sql, decided):
    st = analyze(sql)
    assert (st.rows_needed, st.exists_query is not None) == ((1, True) if decided else (None, False))


def _table(con, n: int, share: float) -> list[str]:
    rng = random.Random(4)
    rows = [f"sports story {i}" if rng.random() < share else f"other story {i}" for i in range(n)]
    con.execute("CREATE TABLE t (a VARCHAR, n INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [[a, i] for i, a in enumerate(rows)])
    return rows


def test_a_filter_under_limit_answers_a_few_rows_and_returns_only_rows_that_pass():
    eng = strong_engine(lambda text: "sports" in text)
    con = relserve.duckdb.connect(engine=eng, progress=False, cache=False)
    _table(con, 2000, 0.25)
    sql = f"SELECT a FROM t WHERE llm_filter('{FILTER}', a) LIMIT 10"
    got = [r[0] for r in con.sql(sql).fetchall()]
    assert len(got) == 10 and all("sports" in a for a in got)
    run = session_of(getattr(con, "con", con)).last_run
    (site,) = run.sites
    (rec,) = site.analyzed
    # the plan's first pass, then its sample of 64 rows (spread over the table) answered first:
    # they hold more than 10 passing rows, so nothing after them is asked
    assert rec.llm_rows <= 200, rec
    assert rec.stopped is not None and rec.stopped.startswith("stopped: the LIMIT had its rows after ")
    explained = str(relserve.duckdb.explain(con, sql, analyze=True))
    assert "rows the LLM answered" in explained and "stopped: the LIMIT had its rows" in explained


def test_a_limit_the_first_rows_cannot_fill_reads_on_and_returns_what_passes():
    eng = strong_engine(lambda text: "sports" in text)
    con = relserve.duckdb.connect(engine=eng, progress=False, cache=False)
    rows = _table(con, 300, 0.02)
    truth = sorted(a for a in rows if "sports" in a)
    got = sorted(r[0] for r in con.sql(f"SELECT a FROM t WHERE llm_filter('{FILTER}', a) LIMIT 50").fetchall())
    assert got == truth  # fewer than 50 pass: every row was read, every passing row returned


def test_a_limit_with_a_map_after_the_filter_answers_the_map_for_passing_rows_only():
    eng = strong_engine(lambda text: "sports" in text)
    con = relserve.duckdb.connect(engine=eng, progress=False, cache=False)
    _table(con, 1000, 0.3)
    sql = f"SELECT a, llm_score('{FILTER}', a) AS p FROM t WHERE llm_filter('{FILTER}', a) LIMIT 5"
    got = con.sql(sql).fetchall()
    assert len(got) == 5 and all("sports" in a and p > 0.5 for a, p in got)
    filt, score = session_of(getattr(con, "con", con)).last_run.sites
    assert sum(r.llm_rows for r in score.analyzed) <= 64 + 5 * 4  # a few chunks' passing rows, not 1,000


def _two_filter_table(con, n: int) -> list[tuple[str, int]]:
    # "common" in 60% of rows, "rare" in 10%, independently
    rng = random.Random(9)
    rows = [(("common " if rng.random() < 0.6 else "") + ("rare " if rng.random() < 0.1 else "") + f"row {i}", i)
            for i in range(n)]
    con.execute("CREATE TABLE t (a VARCHAR, n INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [list(r) for r in rows])
    return rows


COMMON = "Is this text about the common topic? Text: {a}"
RARE = "Is this text about the rare topic? Text: {a}"


@pytest.mark.parametrize("first, second", [(COMMON, RARE), (RARE, COMMON)])
def test_two_llm_filters_run_the_selective_one_first_whatever_the_written_order(first, second):
    def margin(text, rq) -> float:
        # the question asked, from the layout's words or the question itself; its rows carry its word
        asked = " ".join([text, *rq.choices])
        word = "rare " if "rare topic" in asked else "common "
        spread = 4 + (sum(text.encode()) % 97) / 24
        return spread if word in text.replace("rare topic", "").replace("common topic", "") else -spread

    eng = MarginEngine(margin)
    con = relserve.duckdb.connect(engine=eng, progress=False, cache=False)
    rows = _two_filter_table(con, 1000)
    sql = f"SELECT a FROM t WHERE llm_filter('{first}', a) AND llm_filter('{second}', a) ORDER BY n"
    got = [r[0] for r in con.sql(sql).fetchall()]
    assert got == [a for a, _ in rows if "common " in a and "rare " in a]
    run = session_of(getattr(con, "con", con)).last_run
    rare_site = 0 if first == RARE else 1
    assert run.filter_orders[0].startswith(f"llm filters in the order of LLM cost per row removed: #{rare_site}, ")
    assert ("written" in run.filter_orders[0]) == (first == COMMON)
    # the common filter (after the rare one) answered only the rows the rare one kept, and its
    # estimating sample
    common = run.sites[1 - rare_site]
    asked = sum(r.llm_rows for r in common.analyzed)
    assert asked <= 64 + 0.1 * 1000 * 1.5, asked


def test_order_filters_off_keeps_the_written_order_and_the_same_rows():
    eng = strong_engine(lambda text: "rare " in text or "common " in text.replace("common topic", ""))
    con = relserve.duckdb.connect(engine=eng, progress=False, cache=False, order_filters=False)
    rows = _two_filter_table(con, 400)
    sql = f"SELECT a FROM t WHERE llm_filter('{COMMON}', a) AND llm_filter('{RARE}', a) ORDER BY n"
    got = [r[0] for r in con.sql(sql).fetchall()]
    run = session_of(getattr(con, "con", con)).last_run
    # both plans made from the same spread sample of the table's rows (every 6th of 400, 64 rows)
    keeps = sum("common " in a or "rare " in a for a, _ in rows[::400 // 64][:64]) / 64
    made = f"keeps {keeps:.0%} (its label plan, made from 64 rows now)"
    assert run.filter_orders == [f"llm filters in the order written: #0, #1 (order_filters=False; #0 {made}; #1 {made})"]
    # this engine keeps a row for either question when it holds either word: both filters keep the same rows
    assert got == [a for a, _ in rows if "common " in a or "rare " in a]
    common, rare = run.sites
    assert sum(r.llm_rows for r in common.analyzed) == 400  # the first written ran over every row


def test_plain_predicates_run_before_an_llm_filter_whatever_the_written_order():
    eng = strong_engine(lambda text: "sports" in text)
    con = relserve.duckdb.connect(engine=eng, progress=False, cache=False)
    _table(con, 1000, 0.3)
    for sql in (f"SELECT a FROM t WHERE llm_filter('{FILTER}', a) AND n < 100",
                f"SELECT a FROM t WHERE n < 100 AND llm_filter('{FILTER}', a)"):
        con.sql(sql).fetchall()
        (site,) = session_of(getattr(con, "con", con)).last_run.sites
        assert site.rows_seen <= 100 * 2, (sql, site.rows_seen)  # DuckDB evaluated n < 100 first


def _one_lump_margin(prompt: str, rq) -> float:
    """A weak model whose scores form one lump and move with the worked examples in front of the
    row (the whole prompt is read): which rows a filter keeps depends on the plan it made."""
    u = (zlib.crc32(prompt.encode()) + 0.5) / 2**32
    return NormalDist(0, 0.3).inv_cdf(u)


def test_two_llm_filters_keep_the_same_rows_in_every_order_from_plans_made_on_the_table():
    from relserve.labels.memory import forget_all

    got, plans = {}, {}
    for first, second, order in [(COMMON, RARE, False), (COMMON, RARE, True), (RARE, COMMON, False), (RARE, COMMON, True)]:
        memory = forget_all()
        con = relserve.duckdb.connect(engine=MarginEngine(_one_lump_margin, whole_prompt=True), progress=False,
                                      cache=False, order_filters=order)
        _two_filter_table(con, 600)
        sql = f"SELECT a FROM t WHERE llm_filter('{first}', a) AND llm_filter('{second}', a) ORDER BY n"
        got[first, order] = [r[0] for r in con.sql(sql).fetchall()]
        plans[first, order] = sorted((p.key.template, p.plan.id) for p in memory.plans())
    # each call's plan comes from the same spread sample of the table's rows, whichever filter
    # runs first and whichever order is written: the same plans, so the same rows
    assert len(set(map(tuple, plans.values()))) == 1, plans
    first_rows = got[COMMON, False]
    assert 0 < len(first_rows) < 600
    assert all(rows == first_rows for rows in got.values()), {k: len(v) for k, v in got.items()}


def test_exists_stops_at_its_first_passing_row_and_answers_as_the_full_statement():
    eng = strong_engine(lambda text: "sports" in text)
    con = relserve.duckdb.connect(engine=eng, progress=False, cache=False)
    rows = _table(con, 2000, 0.25)
    sql = f"SELECT EXISTS (SELECT 1 FROM t WHERE llm_filter('{FILTER}', a)) AS found"
    assert con.sql(sql).fetchall() == [(True,)]
    (site,) = session_of(getattr(con, "con", con)).last_run.sites
    (rec,) = site.analyzed
    # the stream's first rows hold a passing one: nothing after it is asked
    assert (rec.llm_rows, rec.stopped) == (
        2, "stopped: the EXISTS had its row after 2 of 2,000 rows (1 passed); the other 1,998 were cancelled"), rec
    assert "stopped: the EXISTS had its row" in str(relserve.duckdb.explain(con, sql, analyze=True))
    # NOT EXISTS, and a filter no row passes: every row is read, the answer is the full statement's
    none = f"SELECT NOT EXISTS (SELECT 1 FROM t WHERE n < 300 AND llm_filter('{FILTER}', a) AND a LIKE 'other%') AS none"
    assert con.sql(none).fetchall() == [(True,)]
    (site,) = session_of(getattr(con, "con", con)).last_run.sites
    assert sum(r.llm_rows for r in site.analyzed) == sum(1 for a in rows[:300] if a.startswith("other"))
    assert all(r.stopped is None for r in site.analyzed)


def test_a_limit_meets_rows_whose_prefix_sorts_last_as_soon_as_any_other():
    # the planned (prefix-sharing) order puts every "news about cooking" row before the 2% of
    # "news about sports" rows, and the plan's sample holds none of them: streamed in that order,
    # LIMIT 1 would answer 4,900 rows first
    eng = strong_engine(lambda text: "sports" in text)
    con = relserve.duckdb.connect(engine=eng, progress=False, cache=False)
    con.execute("CREATE TABLE t AS SELECT CASE WHEN i % 50 = 7 THEN 'news about sports ' || i "
                "ELSE 'news about cooking ' || i END AS a, i AS n FROM range(5000) r(i)")
    got = con.sql(f"SELECT a FROM t WHERE llm_filter('{FILTER}', a) LIMIT 1").fetchall()
    assert len(got) == 1 and "sports" in got[0][0]
    (site,) = session_of(getattr(con, "con", con)).last_run.sites
    (rec,) = site.analyzed
    assert (rec.llm_rows, rec.stopped) == (
        84, "stopped: the LIMIT had its rows after 84 of 5,000 rows (1 passed); the other 4,916 were cancelled"), rec
