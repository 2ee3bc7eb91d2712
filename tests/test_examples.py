"""Few-shot ``examples=`` (issue 12, item 3): rendered before every row as one shared prefix."""

from __future__ import annotations

import tempfile
from pathlib import Path

import duckdb
import pytest
from engine_doubles import ScriptedEngine

import relserve.duckdb
from relserve.errors import ConfigError, TemplateError
from relserve.functions import make_call
from relserve.planner.cache import ResultCache

EXAMPLES = [{"review": "loved it", "answer": True}, {"review": "hated it", "answer": "no"}]
PREFIX = (
    "Examples:\n\nIs loved it positive?\nAnswer yes or no.\nAnswer: yes\n\n"
    "Is hated it positive?\nAnswer yes or no.\nAnswer: no\n\nNow answer this one.\n"
)


def test_examples_render_as_one_prefix_with_answers_in_the_models_words():
    call = make_call("llm_filter", "Is {review} positive?", examples=EXAMPLES)
    assert call.examples_prefix == PREFIX
    # hashable (surfaces group rows by call), and the same call whatever form the answers took
    assert hash(call) == hash(make_call("llm_filter", "Is {review} positive?", examples=[
        {"review": "loved it", "answer": "yes"}, {"review": "hated it", "answer": False}]))


def test_bad_examples_say_what_is_wrong():
    with pytest.raises(ConfigError, match="examples must be a list of rows"):
        make_call("llm_filter", "Is {review} ok?", examples="loved it")
    with pytest.raises(TemplateError, match="example 0 has no value for column\\(s\\) 'review'"):
        make_call("llm_filter", "Is {review} ok?", examples=[{"text": "x", "answer": True}])
    with pytest.raises(ConfigError, match="example 0 has no 'answer'"):
        make_call("llm_filter", "Is {review} ok?", examples=[{"review": "x"}])
    with pytest.raises(ConfigError, match="answer 'meh' is not one of the labels"):
        make_call("llm_classify", "{review}", labels=["good", "bad"], examples=[{"review": "x", "answer": "meh"}])
    with pytest.raises(ConfigError, match="example 1: answer must be true/false or yes/no"):
        make_call("llm_filter", "Is {review} ok?", examples=[{"review": "x", "answer": True}, {"review": "y", "answer": 3}])
    with pytest.raises(ConfigError, match="example 0: llm_extract answer does not match the schema"):
        make_call("llm_extract", "{review}", json_schema={"type": "object", "required": ["n"]},
                  examples=[{"review": "x", "answer": {"m": 1}}])


def filter_with_examples(options: str = "") -> tuple[ScriptedEngine, str, list]:
    """A three-row llm_filter with two examples in SQL (and ``options`` besides): the engine,
    EXPLAIN's text and the rows."""
    eng = ScriptedEngine()
    con = duckdb.connect()
    q = (
        f"SELECT llm_filter('Is {{review}} positive?', review, llm_options({options}examples := "
        "[{'review': 'loved it', 'answer': true}, {'review': 'hated it', 'answer': false}])) FROM t"
    )
    with tempfile.TemporaryDirectory() as tmp:
        relserve.duckdb.install(con, engine=eng, cache=ResultCache(Path(tmp) / "c.sqlite"), progress=False)
        con.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('good film'), ('bad film'), ('okay')) v(review)")
        text = str(relserve.duckdb.explain(con, q))
        rows = relserve.duckdb.sql(con, q).fetchall()
    return eng, text, rows


def test_sql_list_of_structs_puts_the_examples_in_the_shared_prefix_and_explain():
    eng, text, rows = filter_with_examples()
    assert len(rows) == 3
    (prompts,) = eng.submitted
    assert all(p.startswith(PREFIX) for p in prompts)
    # the default scoring layout has no chat template in front of the rows: a prefix warmed
    # behind the template would fill KV blocks no row reads, so none is warmed
    assert eng.warmed == []
    assert "few-shot examples              2" in text
    # the calibration probes carry the examples too: the prior is the prior with them
    assert all(p.startswith(PREFIX) for p in eng.probes[0])


def test_a_call_behind_the_chat_template_warms_its_examples_once_before_the_rows():
    eng, _, rows = filter_with_examples("prompt_shape := 'chat', system := 'Be brief.', ")
    assert len(rows) == 3
    (prompts,) = eng.submitted
    assert all(p.startswith(PREFIX) for p in prompts)
    # the rows' shared text, examples first, warmed once before the rows, behind their system message
    (warmed,) = eng.warmed
    assert warmed.startswith(PREFIX) and all(p.startswith(warmed) for p in prompts)
    assert eng.warmed_systems == ["Be brief."]


def test_examples_change_the_result_cache_key():
    a = make_call("llm_filter", "Is {review} positive?", method="generate")
    b = make_call("llm_filter", "Is {review} positive?", method="generate", examples=EXAMPLES)
    from relserve.prompt_rendering import render

    # with generate the key is the prompt: the examples are in it
    assert render(a, ("x",)) != render(b, ("x",))
    c = make_call("llm_filter", "Is {review} positive?", examples=EXAMPLES)
    assert c.sampling_settings()["examples"] == PREFIX
