"""The polars surface on the real engine: few rows, short answers."""

from __future__ import annotations

import polars as pl
import pytest
from engine_doubles import RecordingEngine

import relserve.polars

pytestmark = [pytest.mark.engine, pytest.mark.usefixtures("engine_home")]


@pytest.fixture
def recording(engine):
    rec = RecordingEngine(engine)
    relserve.polars.configure(engine=rec)
    yield rec
    relserve.polars.configure(engine=None)


@pytest.fixture
def df():
    return pl.DataFrame(
        {
            "movie": ["Alien", "Heat", "Alien", "Up"],
            "review": ["A wonderful, moving film.", "Boring and far too long.", "A wonderful, moving film.", None],
        }
    )


def test_eager_and_lazy_calls_are_one_relquery_each(df, recording):
    eager = df.with_columns(pl.col("review").llm.map("One word for: {review}", max_tokens=4).alias("word"))
    assert [len(p) for p in recording.submitted] == [2]
    assert eager["word"].to_list() == [
        recording.answers["One word for: A wonderful, moving film."],
        recording.answers["One word for: Boring and far too long."],
        recording.answers["One word for: A wonderful, moving film."],
        None,
    ]
    lazy = (
        df.lazy()
        .with_columns(pl.struct("movie", "review").llm.filter("Is the review of {movie} positive? {review}", method="score").alias("pos"))
        .collect()
    )
    assert [len(p) for p in recording.submitted] == [2, 2]
    assert lazy.schema["pos"] == pl.Boolean
    answers = recording.answers
    [good, bad] = [
        next(answers[p] for p in recording.submitted[1] if p.startswith(f"Is the review of {m} positive? {r}"))
        for m, r in (("Alien", "A wonderful"), ("Heat", "Boring"))
    ]
    assert lazy["pos"].to_list() == [good == "yes", bad == "yes", good == "yes", None]


def test_classify_returns_labels_and_repeats_come_from_the_cache(df, recording):
    out = df.llm.classify("Sentiment of: {review}", ["positive", "negative"], alias="sentiment", method="score")
    assert out.schema["sentiment"] == pl.Enum(["positive", "negative"])
    # each row's label is the engine's answer to that row's prompt (the Enum dtype only says it is
    # a label; ``score``: the best-scored label, which the engine answers as its text)
    [prompts] = recording.submitted
    answer = {r: next(recording.answers[p] for p in prompts if p.startswith(f"Sentiment of: {r}"))
              for r in ("A wonderful, moving film.", "Boring and far too long.")}
    assert out["sentiment"].to_list() == [answer["A wonderful, moving film."], answer["Boring and far too long."],
                                          answer["A wonderful, moving film."], None]
    again = df.llm.classify("Sentiment of: {review}", ["positive", "negative"], alias="sentiment", method="score")
    assert again.equals(out)
    assert len(recording.submitted) == 1
    # the default (adaptive): its 2 distinct reviews are its plan's sample and answered by it (the
    # plan's first pass: 7 requests of layouts and probes); the same review gets the same label,
    # and a repeat comes from the result cache
    default = df.llm.classify("Sentiment of: {review}", ["positive", "negative"], alias="sentiment")
    labels = default["sentiment"].to_list()
    assert labels[0] == labels[2] in ("positive", "negative") and labels[1] in ("positive", "negative") and labels[3] is None
    passes = len(recording.first_passes)
    assert passes == 7 and len(recording.submitted) == 1
    assert df.llm.classify("Sentiment of: {review}", ["positive", "negative"], alias="sentiment").equals(default)
    assert len(recording.first_passes) == passes and len(recording.submitted) == 1


def test_extract_errors_and_explain_on_the_engine(df, recording):
    # the real-engine twin of test_polars.py's extract, error log and EXPLAIN
    import json

    schema = {"type": "object", "properties": {"mood": {"type": "string"}}, "required": ["mood"]}
    lazy = df.lazy().with_columns(pl.col("review").llm.extract("Extract the mood of: {review}", schema, max_tokens=48).alias("mood"))
    [plan] = relserve.polars.explain(lazy)
    assert recording.submitted == []
    assert (plan.rows, plan.error_rows, plan.distinct_prompts, plan.to_run) == (4, 1, 2, 2)
    out = lazy.collect()
    [prompts] = recording.submitted
    answer = {r: json.loads(next(recording.answers[p] for p in prompts if p.startswith(f"Extract the mood of: {r}")))
              for r in ("A wonderful, moving film.", "Boring and far too long.")}
    moods = out["mood"].to_list()
    assert moods[3] is None
    assert [json.loads(m) for m in moods[:3]] == [answer["A wonderful, moving film."], answer["Boring and far too long."],
                                                 answer["A wonderful, moving film."]]
    errors = relserve.polars.errors()
    last = errors.filter(pl.col("call") == errors["call"].max())
    assert last.select("function", "row", "error").rows() == [("llm_extract", 3, "llm_extract: placeholder {review} is NULL in this row")]
