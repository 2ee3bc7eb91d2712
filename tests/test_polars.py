"""The polars surface on real polars, with the scripted engine (test_polars_engine.py uses vLLM)."""

from __future__ import annotations

import json

import polars as pl
import pytest
from engine_doubles import ScriptedEngine

import relserve.polars
from relserve.errors import ConfigError, RowError, TemplateError


@pytest.fixture(autouse=True)
def private_home(tmp_path, monkeypatch):
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))


def answer(prompt, rq):
    if rq.json_schema is not None:
        return json.dumps({"words": len(prompt.split())})
    if rq.choices == ["yes", "no"]:
        return "yes" if "great" in prompt else "no"
    if rq.choices:
        return rq.choices[0] if "great" in prompt else rq.choices[-1]
    return prompt.split(":", 1)[1].split("\n")[0].strip()


@pytest.fixture
def engine():
    e = ScriptedEngine(answer=answer)
    relserve.polars.configure(engine=e)
    yield e
    relserve.polars.configure(engine=None)


@pytest.fixture
def df():
    return pl.DataFrame(
        {
            "id": list(range(6)),
            "review": ["great plot", "dull", "great cast", None, "dull", "fine"],
            "movie": ["Alien", "Alien", "Heat", "Heat", "Up", "Up"],
        }
    )


def test_expression_answers_land_on_their_rows(df, engine):
    out = df.with_columns(pl.col("review").llm.map("Echo: {review}").alias("echo"))
    assert out["echo"].to_list() == ["great plot", "dull", "great cast", None, "dull", "fine"]
    # one relQuery, deduplicated and sorted
    assert engine.submitted == [["Echo: dull", "Echo: fine", "Echo: great cast", "Echo: great plot"]]


def test_struct_binds_placeholders_by_field_name(df, engine):
    out = df.select(pl.struct("movie", "review").llm.map("Echo: {movie} / {review}").alias("s"))
    assert out["s"].to_list() == [
        "Alien / great plot", "Alien / dull", "Heat / great cast", None, "Up / dull", "Up / fine",
    ]


def test_lazy_frames_send_one_relquery_per_call(df, engine):
    lf = df.lazy().with_columns(pl.col("review").llm.filter("Is {review} good?").alias("good")).filter(pl.col("id") < 5)
    out = lf.collect()
    assert out["good"].to_list() == [True, False, True, None, False]
    # one relQuery for the call, not one per batch: its 4 distinct reviews are the adaptive first
    # pass's whole sample (the model's concept, one relQuery per layout, each with every review
    # once, the content-free rows), and its plan's sample, whose scores answer them: nothing after it
    assert engine.submitted == [] and [len(p) for p in engine.first_passes] == [1] + [4] * 5 + [3, 4]


def test_declared_dtypes(df, engine):
    schema = {"type": "object", "properties": {"words": {"type": "integer"}}, "required": ["words"]}
    out = df.select(
        pl.col("review").llm.filter("Is {review} good?").alias("f"),
        pl.col("review").llm.classify("Kind of {review}", ["positive", "negative"]).alias("c"),
        pl.col("review").llm.extract("Facts: {review}", schema).alias("e"),
    )
    assert out.schema == {"f": pl.Boolean, "c": pl.Enum(["positive", "negative"]), "e": pl.String}
    assert out["c"].to_list() == ["positive", "negative", "positive", None, "negative", "negative"]
    assert [sorted(json.loads(v)) if v is not None else None for v in out["e"]] == [["words"]] * 3 + [None] + [["words"]] * 2


def test_frame_namespace_binds_by_column_name(df, engine):
    out = df.llm.map("Echo: {movie}: {review}", alias="both")
    assert out.columns == ["id", "review", "movie", "both"]
    assert out["both"][0] == "Alien: great plot"
    kept = df.lazy().llm.filter("Is {review} good?").collect()
    assert kept["id"].to_list() == [0, 2]
    labelled = df.llm.classify("Kind of {review}", ["up", "down"], alias="kind")
    assert labelled["kind"].to_list() == ["up", "down", "up", None, "down", "down"]


def test_unknown_column_is_an_error_before_running(df, engine):
    with pytest.raises(TemplateError, match=r"unknown column\(s\) 'rating'; available columns: 'id', 'review', 'movie'"):
        df.llm.map("Rate {rating}")
    with pytest.raises(TemplateError, match=r"unknown column\(s\) 'rating'; the struct has fields 'movie', 'review'"):
        df.select(pl.struct("movie", "review").llm.map("Rate {rating}"))
    with pytest.raises(TemplateError, match=r"has 2 placeholder\(s\) \(\{review\}, \{movie\}\) but 1 value\(s\) were given; use pl.struct"):
        df.select(pl.col("review").llm.map("{review} {movie}"))
    assert engine.submitted == []


def test_bad_labels_schema_and_options_fail_when_the_expression_is_built(engine):
    with pytest.raises(ConfigError, match="non-empty list of strings"):
        pl.col("review").llm.classify("Kind {review}", "positive")
    with pytest.raises(ConfigError, match=r"labels must be a list, not a set \(a set has no fixed order\); got \['down', 'up'\]"):
        pl.col("review").llm.classify("Kind {review}", {"up", "down"})
    with pytest.raises(ConfigError, match=r"labels must differ by more than case or surrounding spaces; 'Up' and 'up' read"):
        pl.col("review").llm.classify("Kind {review}", ["Up", "down", "up"])
    with pytest.raises(ConfigError, match="invalid JSON schema"):
        pl.col("review").llm.extract("Facts {review}", {"type": "nonsense"})
    with pytest.raises(ConfigError, match="on_error"):
        pl.col("review").llm.map("Echo: {review}", on_error="ignore")
    with pytest.raises(TemplateError, match="no {column} placeholder"):
        pl.col("review").llm.map("Echo")


def test_null_rows_are_listed_in_errors(df, engine):
    df.select(pl.col("review").llm.map("Echo: {review}"))
    errors = relserve.polars.errors()
    last = errors.filter(pl.col("call") == errors["call"].max())
    assert last.select("function", "template", "row", "error").rows() == [
        ("llm_map", "Echo: {review}", 3, "llm_map: placeholder {review} is NULL in this row")
    ]


def test_on_error_raise(df, engine):
    with pytest.raises(RowError, match=r"row 3 \(review=None\)"):
        df.select(pl.col("review").llm.map("Echo: {review}", on_error="raise"))


def test_repeated_call_is_answered_from_the_cache(df, engine):
    first = df.select(pl.col("review").llm.map("Echo: {review}"))
    second = df.select(pl.col("review").llm.map("Echo: {review}"))
    assert first.equals(second)
    assert len(engine.submitted) == 1


def test_explain_runs_nothing(df, engine):
    plans = relserve.polars.explain(df.lazy().with_columns(pl.col("review").llm.map("Echo: {review}")))
    assert engine.submitted == []
    assert [(p.rows, p.error_rows, p.distinct_prompts, p.to_run) for p in plans] == [(6, 1, 4, 4)]
