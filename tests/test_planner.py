"""Planner logic without the engine: GGR, dependencies, hit-rate prediction, dedup, cache, EXPLAIN.

Calls that need an engine use ``ScriptedEngine`` (the engine's API, answers from a function);
the same behaviour on the real engine is in test_planner_engine.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from engine_doubles import ScriptedEngine

from relserve.errors import ConfigError, RowError, TemplateError
from relserve.functions import CallOptions, make_call
from relserve.planner import (
    ResultCache,
    explain_plan,
    ggr,
    plan_call,
    predict_hits,
    run_call,
    shared_cache,
    sort_rows,
)
from relserve.planner.dependencies import find_dependencies
from relserve.planner.hit_rate import PrefixCacheModel
from relserve.planner.tokens import TokenSource
from relserve.progress import enabled, progress_bar


@pytest.fixture(autouse=True)
def private_home(tmp_path, monkeypatch):
    """Each test gets its own RELSERVE_HOME, hence its own result cache."""
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))


# -- GGR ----------------------------------------------------------------------------------------


def test_ggr_groups_rows_sharing_the_longest_value():
    a = ["long-shared-value", "long-shared-value", "other", "long-shared-value"]
    b = ["1", "2", "1", "3"]
    order = ggr([a, b], min_rows=2)
    assert order.rows == [0, 1, 3, 2]
    assert order.fields == [(0, 1)] * 4


def test_ggr_moves_a_shared_field_in_front_of_a_unique_one():
    ids = ["r1", "r2", "r3", "r4"]
    text = ["the same long description of the product"] * 4
    order = ggr([ids, text], min_rows=2)
    assert sorted(order.rows) == [0, 1, 2, 3]
    assert order.fields == [(1, 0)] * 4


def test_functional_dependencies_are_found_in_the_data():
    movie = np.array([0, 0, 1, 1])
    synopsis = np.array([0, 0, 1, 1])
    review = np.array([0, 1, 2, 3])  # a key: determines everything, so it is left out
    rating = np.array([0, 1, 0, 1])
    assert find_dependencies([movie, synopsis, review, rating]) == [(1,), (0,), (), ()]


def test_ggr_moves_determined_fields_with_their_group():
    movie = ["m1", "m1", "m2", "m2"]
    synopsis = ["a long synopsis of the first movie", "a long synopsis of the first movie",
                "another long synopsis, second movie", "another long synopsis, second movie"]
    review = ["great", "dull", "fine", "bad"]
    with_fd = ggr([movie, synopsis, review], min_rows=2)
    # grouping on the movie id brings its synopsis along: both lead every row
    assert with_fd.fields == [(0, 1, 2)] * 4
    # the second movie's synopsis is one character longer, so its group scores higher;
    # inside a group the rows are sorted on the remaining field
    assert with_fd.rows == [3, 2, 1, 0]
    without_fd = ggr([movie, synopsis, review], min_rows=2, use_dependencies=False)
    # without the refinement the longer synopsis is chosen first and the id follows
    assert without_fd.fields == [(1, 0, 2)] * 4


def test_ggr_early_stop_sorts_small_tables_on_their_best_fields():
    a = ["x", "y", "x"]
    b = ["shared long value", "shared long value", "other long value"]
    order = ggr([a, b])  # 3 rows < min_rows: no recursion
    assert order.fields == [(1, 0)] * 3
    assert order.rows == [2, 0, 1]


def test_ggr_returns_a_permutation_for_a_large_table():
    # (its speed is a benchmark figure: bench/bench_planner.py prints GGR's seconds per 10,000 rows)
    rng = np.random.default_rng(0)
    n = 10_000
    cols = [
        [f"style-{v}" for v in rng.integers(0, 50, n)],
        [f"brewery name {v}" for v in rng.integers(0, 400, n)],
        [str(v) for v in rng.integers(1, 6, n)],
        [f"user{v}" for v in rng.integers(0, 3000, n)],
        [f"review text number {i}" for i in range(n)],
    ]
    order = ggr(cols)
    assert sorted(order.rows) == list(range(n))
    assert all(sorted(f) == [0, 1, 2, 3, 4] for f in order.fields)


def test_sort_rows_orders_by_text():
    assert sort_rows(["b", "a", "c", "ab"]) == [1, 3, 0, 2]


# -- hit-rate prediction ----------------------------------------------------------------------


def test_prefix_cache_counts_whole_leading_blocks():
    cache = PrefixCacheModel(block_size=4)
    first = [1, 2, 3, 4, 5, 6, 7, 8]
    assert cache.admit(first) == 0
    assert cache.admit(first + [9]) == 8
    # a fully cached prompt still recomputes its last token, so gives up its last block
    assert cache.admit(first) == 4
    # equal tokens after a different first block are a different block
    assert cache.admit([9, 9, 9, 9, 5, 6, 7, 8]) == 0


def test_prefix_cache_evicts_least_recently_used_blocks():
    cache = PrefixCacheModel(block_size=4, capacity_blocks=2)
    cache.admit([1, 2, 3, 4, 5, 6, 7, 8, 0])
    cache.admit([10, 11, 12, 13, 14, 15, 16, 17, 0])
    assert cache.admit([1, 2, 3, 4, 5, 6, 7, 8, 0]) == 0


def test_predict_hits_with_warm_prefix():
    stats = predict_hits([[1, 2, 3, 4, 9], [1, 2, 3, 4, 8]], block_size=4, warm=[[1, 2, 3, 4, 0]])
    assert (stats.prompts, stats.prompt_tokens, stats.hit_tokens) == (2, 10, 8)
    assert stats.rate == 0.8


# -- functions: validation ----------------------------------------------------------------------


def test_template_without_placeholder_is_rejected():
    with pytest.raises(TemplateError, match="no {column} placeholder"):
        make_call("llm_map", "Is this positive?")


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (None, "needs labels"),
        ("positive", "non-empty list of strings"),
        ([], "empty list"),
        (["pos", 1], "bad label"),
        (["pos", ""], "bad label"),
        (["pos", "pos"], "distinct"),
    ],
)
def test_bad_labels_are_rejected(labels, message):
    with pytest.raises(ConfigError, match=message):
        make_call("llm_classify", "Sentiment of {review}", labels=labels)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"type": "nonsense"}', "invalid JSON schema"),
        ("[1, 2]", "must be a JSON object"),
        (None, "needs a JSON schema"),
    ],
)
def test_bad_json_schema_is_rejected(schema, message):
    with pytest.raises(ConfigError, match=message):
        make_call("llm_extract", "Extract from {review}", json_schema=schema)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": -1}, "temperature"),
        ({"on_error": "ignore"}, "on_error"),
        ({"reorder_fields": "yes"}, "reorder_fields"),
        ({"colour": "red"}, "unknown option"),
    ],
)
def test_bad_options_are_rejected(options, message):
    with pytest.raises(ConfigError, match=message):
        make_call("llm_map", "Summarize {review}", **options)


def test_answers_convert_to_the_declared_types():
    f = make_call("llm_filter", "Is {r} good?")
    assert (f.convert("yes"), f.convert(" No."), f.choices) == (True, False, ("yes", "no"))
    with pytest.raises(RowError, match="neither yes nor no"):
        f.convert("maybe")
    c = make_call("llm_classify", "Kind of {r}", labels=["Positive", "Negative"])
    assert (c.convert("Positive"), c.convert("negative")) == ("Positive", "Negative")
    with pytest.raises(RowError, match="not one of the labels"):
        c.convert("neutral")
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    e = make_call("llm_extract", "Count in {r}", json_schema=schema)
    assert e.convert('{"n": 3}') == '{"n": 3}'
    with pytest.raises(RowError, match="does not match the schema"):
        e.convert('{"n": "three"}')
    with pytest.raises(RowError, match="not valid JSON"):
        e.convert("three")


def test_sampling_settings_distinguish_cache_entries():
    a = make_call("llm_map", "Summarize {r}", max_tokens=8)
    b = make_call("llm_map", "Summarize {r}", max_tokens=9)
    assert a.sampling_settings() != b.sampling_settings()
    assert a.sampling_settings()["max_tokens"] == 8


# -- planning --------------------------------------------------------------------------------------


def test_plan_deduplicates_sorts_and_sets_aside_null_rows():
    call = make_call("llm_map", "Summarize {review}")
    plan = plan_call(call, [["b", "a", "b", None, "c", "a"]], model_id="m")
    assert plan.prompts == ["Summarize b", "Summarize a", "Summarize c"]
    assert plan.row_to_prompt == [0, 1, 0, -1, 2, 1]
    assert plan.row_errors == {3: "llm_map: placeholder {review} is NULL in this row"}
    assert plan.run_prompts == ["Summarize a", "Summarize b", "Summarize c"]
    assert plan.reorder == "rows"


def test_plan_without_optimizing_keeps_first_seen_order():
    call = make_call("llm_map", "Summarize {review}")
    plan = plan_call(call, [["b", "a", "b"]], model_id="m", optimize=False)
    assert plan.run_prompts == ["Summarize b", "Summarize a"]
    assert plan.reorder == "off"


def test_plan_with_field_reordering_renders_json_fields():
    call = make_call("llm_map", "Review {review} of {movie}", reorder_fields=True)
    plan = plan_call(call, [["good", "bad"], ["Alien", "Alien"]], model_id="m")
    assert plan.reorder == "rows+fields"
    assert plan.run_prompts == [
        'Review {review} of {movie}\n{"movie": "Alien", "review": "bad"}',
        'Review {review} of {movie}\n{"movie": "Alien", "review": "good"}',
    ]


def test_plan_uses_the_result_cache_for_greedy_calls_only(tmp_path):
    cache = ResultCache(tmp_path / "c.sqlite")
    call = make_call("llm_map", "Summarize {review}")
    cache.put_many("m", call.sampling_settings(), [("Summarize a", "A!")])
    plan = plan_call(call, [["a", "b"]], model_id="m", cache=cache)
    assert plan.cached == {0: "A!"}
    assert plan.run_prompts == ["Summarize b"]
    sampled = make_call("llm_map", "Summarize {review}", temperature=0.7)
    assert plan_call(sampled, [["a", "b"]], model_id="m", cache=cache).cached == {}
    other_model = plan_call(call, [["a", "b"]], model_id="other", cache=cache)
    assert other_model.cached == {}


# -- running (scripted engine) -----------------------------------------------------------------


def echo_review(prompt, rq):
    if rq.choices:
        return "yes" if "good" in prompt else "no"
    return prompt.split(":", 1)[1].strip()


def test_results_come_back_in_input_order_after_reordering_and_dedup():
    engine = ScriptedEngine(answer=echo_review)
    call = make_call("llm_map", "Echo: {review}")
    reviews = ["zeta", "alpha", "zeta", "mid", None, "alpha"]
    out = run_call(call, [reviews], engine=engine)
    assert out.values == ["zeta", "alpha", "zeta", "mid", None, "alpha"]
    assert out.errors[4] == "llm_map: placeholder {review} is NULL in this row"
    assert [e is None for i, e in enumerate(out.errors) if i != 4] == [True] * 5
    # one relQuery, distinct prompts only, in sorted order
    assert engine.submitted == [["Echo: alpha", "Echo: mid", "Echo: zeta"]]


def test_a_repeated_call_is_answered_from_the_cache_without_the_engine():
    engine = ScriptedEngine(answer=echo_review)
    call = make_call("llm_map", "Echo: {review}")
    first = run_call(call, [["a", "b"]], engine=engine)
    again = run_call(call, [["b", "a", "b"]], engine=engine)
    assert again.values == ["b", "a", "b"]
    assert first.ran == 2 and again.ran == 0
    assert len(engine.submitted) == 1
    assert again.plan.cache_hits == 2


def test_an_empty_result_cache_of_the_users_own_is_written_and_then_answers(tmp_path):
    # an empty ResultCache has len 0: it must not be taken for "no cache" (it was, and stayed empty)
    engine = ScriptedEngine(answer=echo_review)
    cache = ResultCache(tmp_path / "own.sqlite")
    assert len(cache) == 0
    call = make_call("llm_map", "Echo: {review}")
    first = run_call(call, [["a", "b"]], engine=engine, cache=cache)
    assert first.ran == 2 and len(cache) == 2
    again = run_call(call, [["b", "a"]], engine=engine, cache=cache)
    assert again.values == ["b", "a"] and again.ran == 0
    assert len(engine.submitted) == 1


def test_the_cache_is_shared_across_processes(tmp_path, monkeypatch):
    home = tmp_path / "shared-home"
    monkeypatch.setenv("RELSERVE_HOME", str(home))
    call = make_call("llm_map", "Echo: {review}")
    code = (
        "from relserve.planner import shared_cache\n"
        "from relserve.functions import make_call\n"
        "call = make_call('llm_map', 'Echo: {review}')\n"
        "shared_cache().put_many('m', call.sampling_settings(), [('Echo: a', 'from the other process')])\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "RELSERVE_HOME": str(home)}, timeout=120)
    assert shared_cache().get_many("m", call.sampling_settings(), ["Echo: a", "Echo: b"]) == {0: "from the other process"}
    mode = shared_cache()._db.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_sampled_calls_are_not_cached():
    engine = ScriptedEngine(answer=echo_review)
    call = make_call("llm_map", "Echo: {review}", temperature=0.8)
    run_call(call, [["a"]], engine=engine)
    run_call(call, [["a"]], engine=engine)
    assert len(engine.submitted) == 2


def test_clearing_the_cache_forgets_answers():
    engine = ScriptedEngine(answer=echo_review)
    call = make_call("llm_map", "Echo: {review}")
    run_call(call, [["a"]], engine=engine)
    assert shared_cache().clear() == 1
    run_call(call, [["a"]], engine=engine)
    assert len(engine.submitted) == 2


def test_a_failing_row_gets_null_and_the_others_keep_their_answers():
    def answer(prompt, rq):
        if "bad" in prompt:
            raise RuntimeError("model exploded")
        return "ok " + prompt[-1]

    engine = ScriptedEngine(answer=answer)
    out = run_call(make_call("llm_map", "Row {x}"), [["1", "bad", "2"]], engine=engine)
    assert out.values == ["ok 1", None, "ok 2"]
    assert out.errors == [None, "llm_map: model exploded", None]
    # the good answers were cached, the failure was not
    again = run_call(make_call("llm_map", "Row {x}"), [["1", "bad", "2"]], engine=engine)
    assert again.plan.cache_hits == 2 and again.ran == 1


def test_on_error_raise_names_the_row_before_running():
    engine = ScriptedEngine(answer=echo_review)
    call = make_call("llm_map", "Echo: {review}", on_error="raise")
    with pytest.raises(RowError, match=r"row 1 \(review=None\): llm_map: placeholder \{review\} is NULL"):
        run_call(call, [["a", None]], engine=engine)
    assert engine.submitted == []


def test_on_error_raise_names_a_row_the_engine_failed():
    def answer(prompt, rq):
        if prompt.endswith("b"):
            raise RuntimeError("boom")
        return "fine"

    engine = ScriptedEngine(answer=answer)
    call = make_call("llm_map", "Echo: {review}", on_error="raise")
    with pytest.raises(RowError, match=r"row 1 \(review='b'\): llm_map: boom"):
        run_call(call, [["a", "b"]], engine=engine)


def test_filter_classify_extract_return_their_declared_types():
    def answer(prompt, rq):
        if rq.json_schema is not None:
            return json.dumps({"stars": len(prompt) % 5})
        if rq.choices:
            return rq.choices[0]
        return "text"

    engine = ScriptedEngine(answer=answer)
    rows = [["good", "bad"]]
    assert run_call(make_call("llm_filter", "Is {r} good?"), rows, engine=engine).values == [True, True]
    labels = ["pos", "neg"]
    assert run_call(make_call("llm_classify", "Kind {r}", labels=labels), rows, engine=engine).values == ["pos", "pos"]
    schema = {"type": "object", "properties": {"stars": {"type": "integer"}}}
    values = run_call(make_call("llm_extract", "Stars {r}", json_schema=schema), rows, engine=engine).values
    assert [sorted(json.loads(v)) for v in values] == [["stars"], ["stars"]]


def test_the_shared_prefix_is_pinned_before_the_rows_run():
    engine = ScriptedEngine(answer=echo_review)
    run_call(make_call("llm_map", "Echo: {review}"), [["a", "b"]], engine=engine)
    assert engine.warmed == ["Echo: "]
    run_call(make_call("llm_map", "Echo: {review}"), [["c", "d"]], engine=engine, pin_prefix=False)
    assert engine.warmed == ["Echo: "]


# -- EXPLAIN ------------------------------------------------------------------------------------


def test_explain_does_not_run_and_reports_counts():
    engine = ScriptedEngine(answer=echo_review)
    call = make_call("llm_map", "Echo: {review}")
    run_call(call, [["a"]], engine=engine)
    out = run_call(call, [["a", "b", "b", None]], engine=engine, explain_only=True)
    ex = out.explain
    assert len(engine.submitted) == 1
    assert out.values == [None] * 4
    assert (ex.rows, ex.error_rows, ex.distinct_prompts, ex.cache_hits, ex.to_run) == (4, 1, 2, 1, 1)
    assert ex.to_dict()["distinct_prompts"] == 2
    text = str(ex)
    assert "distinct prompts               2" in text
    assert "result-cache hits              1" in text


def test_explain_predicts_more_prefix_hits_in_planned_order():
    # two long documents, questions interleaved; the cache holds about one document
    doc = {d: " ".join(f"{d}word{i}" for i in range(120)) for d in ("red", "blue")}
    rows = [doc["red" if i % 2 == 0 else "blue"] for i in range(20)]
    questions = [f"question {i}" for i in range(20)]
    call = make_call("llm_map", "{doc}\nQ: {q}")
    plan = plan_call(call, [rows, questions], model_id="m")
    engine = ScriptedEngine(block_size=16, kv_capacity_tokens=16 * 30)
    ex = explain_plan(plan, TokenSource(engine.prompt_token_ids, "engine"), engine=engine)
    assert ex.cache_capacity_blocks == 30
    assert ex.hit_rate_original < 0.1
    assert ex.hit_rate_planned > 0.8
    assert ex.estimate_planned_s < ex.estimate_original_s


def test_explain_counts_the_pinned_prefix():
    call = make_call("llm_map", " ".join(f"instruction{i}" for i in range(60)) + " {q}")
    plan = plan_call(call, [["a", "b", "c"]], model_id="m")
    engine = ScriptedEngine(block_size=16)
    ex = explain_plan(plan, TokenSource(engine.prompt_token_ids, "engine"), engine=engine)
    assert ex.pinned_prefix_tokens > 0 and ex.pinned_prefix_tokens % 16 == 0


# -- progress -----------------------------------------------------------------------------------


def test_progress_is_quiet_when_nobody_watches(monkeypatch, capsys):
    monkeypatch.delenv("RELSERVE_PROGRESS", raising=False)
    assert enabled() is False  # pytest captures stderr: not a terminal
    with progress_bar(3, "llm_map", delay=0) as bar:
        bar.update(3)
    assert capsys.readouterr().err == ""


def test_progress_shows_rows_rate_and_eta_when_forced(monkeypatch, capsys):
    monkeypatch.setenv("RELSERVE_PROGRESS", "1")
    with progress_bar(3, "llm_map", delay=0) as bar:
        bar.update(3)
        bar.refresh()
    err = capsys.readouterr().err
    assert "llm_map" in err and "3/3" in err and "row/s" in err


def test_progress_can_be_switched_off(monkeypatch):
    import relserve.progress

    # where someone is watching (a terminal), bars are on unless the setting turns them off
    monkeypatch.setattr(relserve.progress, "_stderr_is_terminal", lambda: True)
    monkeypatch.delenv("RELSERVE_PROGRESS", raising=False)
    assert enabled() is True
    for off in ("0", "false", "no", "off", " OFF "):
        monkeypatch.setenv("RELSERVE_PROGRESS", off)
        assert enabled() is False, off
    # and nobody watching (stderr not a terminal, no notebook): off unless forced on
    monkeypatch.setattr(relserve.progress, "_stderr_is_terminal", lambda: False)
    monkeypatch.delenv("RELSERVE_PROGRESS")
    assert enabled() is False
    monkeypatch.setenv("RELSERVE_PROGRESS", "1")
    assert enabled() is True


def test_options_update_ignores_unset_values():
    base = CallOptions(max_tokens=5)
    assert base.updated({"max_tokens": None, "temperature": 0.5}) == CallOptions(max_tokens=5, temperature=0.5)


def test_fast_renderer_matches_the_template():
    import datetime
    from decimal import Decimal

    from relserve.prompt_rendering import Renderer, render

    call = make_call("llm_filter", "A {a}, b {b}, a again {a}; {{literal}} {c}")
    rows = [
        ("text", 3, 2.0),
        (1.5, [1, "x"], {"k": "v"}),
        (datetime.date(2024, 5, 1), Decimal("1.10"), b"bytes"),
    ]
    # written out: str() for scalars (2.0 as 2), JSON for lists and dicts, bytes decoded; the default
    # completion shape adds no "Answer yes or no." line (relserve/prompt_shapes.py)
    expected = [
        "A text, b 3, a again text; {literal} 2",
        'A 1.5, b [1, "x"], a again 1.5; {literal} {"k": "v"}',
        "A 2024-05-01, b 1.10, a again 2024-05-01; {literal} bytes",
    ]
    fast = Renderer(call)
    assert [fast(values) for values in rows] == expected
    assert [render(call, values) for values in rows] == expected


def test_a_fully_cached_call_never_starts_the_default_engine(monkeypatch):
    import relserve.model
    from relserve.backend import registry
    from relserve.planner import engine_ref

    def no_engine(**options):
        raise AssertionError("the default engine was started")

    spec = relserve.model.ModelSpec("/nowhere", "cached-model")
    monkeypatch.setattr(relserve.model, "resolve_model", lambda name=None, prepare=True: spec)
    monkeypatch.setattr(registry, "default_engine", no_engine)
    monkeypatch.setattr(engine_ref, "_resolved", {})
    call = make_call("llm_map", "Echo: {review}")
    shared_cache().put_many("cached-model", call.sampling_settings(), [("Echo: a", "A"), ("Echo: b", "B")])
    out = run_call(call, [["b", "a", "b"]])  # no engine given: the default one would be used
    assert out.values == ["B", "A", "B"] and out.ran == 0
    with pytest.raises(AssertionError, match="default engine was started"):
        run_call(call, [["c"]])
