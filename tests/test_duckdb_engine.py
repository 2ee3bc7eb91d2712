"""The DuckDB surface on the real engine and real DuckDB: few rows, short answers."""

from __future__ import annotations

import json

import duckdb
import pytest

import relserve.duckdb

pytestmark = [pytest.mark.engine, pytest.mark.usefixtures("engine_home")]

SCHEMA = '{"type": "object", "properties": {"mood": {"type": "string"}}, "required": ["mood"]}'


@pytest.fixture
def con(recording):
    c = duckdb.connect()
    relserve.duckdb.install(c, engine=recording, max_tokens=6)
    c.execute(
        """CREATE TABLE reviews AS SELECT * FROM (VALUES
             (1, 'Alien', 'A wonderful, moving film.'),
             (2, 'Heat', 'Boring and far too long.'),
             (3, 'Alien', 'A wonderful, moving film.'),
             (4, 'Up', NULL),
             (5, 'Up', 'I loved every minute.')) t(id, movie, review)"""
    )
    yield c
    c.close()


def test_plain_connection_answers_every_row(con, recording):
    rows = con.sql("SELECT id, llm_map('Summarize in three words: {review}', review) FROM reviews ORDER BY id").fetchall()
    answers = recording.answers
    assert rows == [
        (1, answers["Summarize in three words: A wonderful, moving film."]),
        (2, answers["Summarize in three words: Boring and far too long."]),
        (3, answers["Summarize in three words: A wonderful, moving film."]),
        (4, None),
        (5, answers["Summarize in three words: I loved every minute."]),
    ]
    assert [len(p) for p in recording.submitted] == [3]


def test_planned_statement_one_relquery_per_site_and_declared_types(con, recording):
    rows = relserve.duckdb.sql(
        con,
        f"""SELECT id,
                  llm_filter('Is this review positive? {{review}}', review, llm_options(method := 'score')) AS positive,
                  llm_classify('Sentiment of: {{review}}', ['positive', 'negative'], review, llm_options(method := 'score')) AS sentiment,
                  llm_extract('Extract the mood of: {{review}}', '{SCHEMA}', review, llm_options(max_tokens := 32)) AS mood
           FROM reviews ORDER BY id""",
    ).fetchall()
    assert [len(p) for p in recording.submitted] == [3, 3, 3]
    assert [r[0] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[3][1:] == (None, None, None)
    reviews = {1: "A wonderful, moving film.", 2: "Boring and far too long.", 3: "A wonderful, moving film.",
               5: "I loved every minute."}
    for row in [rows[i] for i in (0, 1, 2, 4)]:
        review = reviews[row[0]]
        # each value is the engine's answer for that row's prompt, in the column's type
        assert row[1:3] == (
            _answer(recording, "Is this review positive? ", review) == "yes",
            _answer(recording, "Sentiment of: ", review),
        )
        assert row[2] in ("positive", "negative")
        # the engine's JSON, parsed and written again (so compared as values)
        assert json.loads(row[3]) == json.loads(_answer(recording, "Extract the mood of: ", review))
        assert isinstance(json.loads(row[3])["mood"], str)
    assert rows[0][1:] == rows[2][1:]  # equal reviews, equal answers
    failures = relserve.duckdb.errors(con).fetchall()
    assert ("llm_filter", "Is this review positive? {review}", '{"review": null}',
            "llm_filter: placeholder {review} is NULL in this row") in failures


def _answer(recording, prefix: str, review: str):
    """The engine's answer to the one prompt that starts with ``prefix`` + ``review``."""
    [prompt] = {p for ps in recording.submitted for p in ps if p.startswith(prefix + review)}
    return recording.answers[prompt]


def test_filter_then_map_and_a_cached_rerun(con, recording):
    # the map must run on the rows the filter keeps and on no other. Which rows those are is the
    # model's answer (it has changed with the scoring prompt), so the predicate keeps the answer
    # the model gave at least once (the map always runs on something), and row 2 is always left
    # out (the map must never see it, whatever the model says)
    positive = "llm_filter('Is this review positive? {review}', review)"
    answers = dict(relserve.duckdb.sql(con, f"SELECT review, {positive} FROM reviews WHERE review IS NOT NULL").fetchall())
    keep = any(yes for review, yes in answers.items() if review != "Boring and far too long.")
    kept = {review for review, yes in answers.items() if yes == keep and review != "Boring and far too long."}
    query = f"""SELECT id, llm_map('One word for: {{review}}', review) AS word FROM reviews
                WHERE {"" if keep else "NOT "}{positive} AND id <> 2 ORDER BY id"""
    first = relserve.duckdb.sql(con, query).fetchall()
    reviews = {1: "A wonderful, moving film.", 2: "Boring and far too long.", 3: "A wonderful, moving film.",
               5: "I loved every minute."}
    assert first == [(i, recording.answers[f"One word for: {r}"]) for i, r in reviews.items() if r in kept]
    # the filter's answers came from the result cache (its 4 distinct reviews were answered by its
    # first pass: no relQuery of its own); the map ran once on the kept reviews only
    (map_prompts,) = recording.submitted
    assert sorted(p.removeprefix("One word for: ") for p in map_prompts) == sorted(kept)
    calls = len(recording.submitted)
    assert relserve.duckdb.sql(con, query).fetchall() == first
    assert len(recording.submitted) == calls


def test_struct_binding_and_explain(con, recording):
    ex = relserve.duckdb.explain(con, "SELECT llm_map('Movie {movie}: {review}. One word:', r) FROM reviews r")
    assert recording.submitted == []
    plan = ex.sites[0].plans[0]
    assert (plan.rows, plan.error_rows, plan.distinct_prompts) == (5, 1, 3)
    assert plan.token_source == "engine"
    rows = relserve.duckdb.sql(con, "SELECT id, llm_map('Movie {movie}: {review}. One word:', r) FROM reviews r ORDER BY id").fetchall()
    assert rows[1] == (2, recording.answers["Movie Heat: Boring and far too long.. One word:"])


def test_bad_input_fails_before_the_engine_is_reached(con, recording):
    from relserve.errors import ConfigError, TemplateError

    with pytest.raises(TemplateError, match=r"unknown column\(s\) 'rating'"):
        relserve.duckdb.sql(con, "SELECT llm_map('Rate {rating}', r) FROM reviews r")
    with pytest.raises(ConfigError, match="labels must be a non-empty list of strings"):
        relserve.duckdb.sql(con, "SELECT llm_classify('Tone of {review}', 'positive', review) FROM reviews")
    with pytest.raises(ConfigError, match="invalid JSON schema"):
        relserve.duckdb.sql(con, """SELECT llm_extract('Facts {review}', '{"type": 5}', review) FROM reviews""")
    with pytest.raises(TemplateError, match="no {column} placeholder"):
        relserve.duckdb.sql(con, "SELECT llm_map('Say hello', review) FROM reviews")
    assert recording.submitted == []


def test_nested_calls_cte_parameters_and_create_insert_update(con, recording):
    # the real-engine twin of test_duckdb.py's statement shapes: every value is the engine's
    # answer to the prompt its row produced
    answers = recording.answers
    nested = relserve.duckdb.sql(
        con,
        """WITH m AS (SELECT id, movie FROM reviews WHERE id <= ?)
           SELECT id, llm_map('Shorten: {x}', llm_map('Describe the film {m} in three words.', movie)) FROM m ORDER BY id""",
        params=[2],
    ).fetchall()
    inner = {m: answers[f"Describe the film {m} in three words."] for m in ("Alien", "Heat")}
    assert nested == [(1, answers[f"Shorten: {inner['Alien']}"]), (2, answers[f"Shorten: {inner['Heat']}"])]
    assert recording.submitted[:2] == [sorted(f"Describe the film {m} in three words." for m in ("Alien", "Heat")),
                                       sorted(f"Shorten: {inner[m]}" for m in ("Alien", "Heat"))]
    relserve.duckdb.sql(con, "CREATE TABLE words AS SELECT id, llm_map('One word for: {movie}', movie) AS w FROM reviews WHERE id < 3")
    relserve.duckdb.sql(con, "INSERT INTO words SELECT id, llm_map('One word for: {movie}', movie) FROM reviews WHERE id = 5")
    one = {m: answers[f"One word for: {m}"] for m in ("Alien", "Heat", "Up")}
    assert con.sql("SELECT id, w FROM words ORDER BY id").fetchall() == [(1, one["Alien"]), (2, one["Heat"]), (5, one["Up"])]
    relserve.duckdb.sql(con, "UPDATE words SET w = llm_map('Say {w} in capitals.', w) WHERE id = 2")
    assert con.sql("SELECT id, w FROM words ORDER BY id").fetchall() == [
        (1, one["Alien"]), (2, answers[f"Say {one['Heat']} in capitals."]), (5, one["Up"])]


def test_dedup_across_2048_row_chunks_on_a_plain_connection(con, recording):
    # the real-engine twin of test_duckdb.py's chunked dedup: DuckDB hands the function 2,048 rows
    # at a time; the three distinct prompts run once, the later chunks come from the result cache
    rows = con.sql(
        "SELECT i, llm_map('One word for: {x}', x) FROM (SELECT range AS i, 'colour ' || (range % 3) AS x FROM range(5000)) ORDER BY i"
    ).fetchall()
    assert recording.submitted == [[f"One word for: colour {k}" for k in range(3)]]
    one = [recording.answers[f"One word for: colour {k}"] for k in range(3)]
    assert rows == [(i, one[i % 3]) for i in range(5000)]
