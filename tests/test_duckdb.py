"""The DuckDB surface on real DuckDB, with the scripted engine (test_duckdb_engine.py uses vLLM)."""

from __future__ import annotations

import json

import duckdb
import pytest
from engine_doubles import ScriptedEngine, own_text

import relserve.duckdb
from relserve.errors import ConfigError, RowError, TemplateError


@pytest.fixture(autouse=True)
def private_home(tmp_path, monkeypatch):
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))


def answer(prompt, rq):
    """'yes' for reviews containing 'good'; labels by length; otherwise echo what follows ':'."""
    if rq.json_schema is not None:
        return json.dumps({"length": len(prompt)})
    if rq.choices == ["yes", "no"]:
        return "yes" if "good" in prompt else "no"
    if rq.choices:
        return rq.choices[len(prompt) % len(rq.choices)]
    return prompt.split(":", 1)[1].split("\n")[0].strip()


#: rows of the reviews table: past one DuckDB chunk (2,048 rows), and every (review, movie) pair
#: (840 ids repeat them all)
ROWS = 2100


@pytest.fixture
def engine():
    return ScriptedEngine(answer=answer)


@pytest.fixture
def con(engine):
    c = duckdb.connect()
    relserve.duckdb.install(c, engine=engine)
    c.execute(
        "CREATE TABLE reviews AS SELECT range::INTEGER AS id, "
        "CASE WHEN range % 3 = 0 THEN 'good film ' ELSE 'bad film ' END || (range % 40) AS review, "
        f"'movie ' || (range % 7) AS movie FROM range({ROWS})"
    )
    yield c
    c.close()


def expected_review(i: int) -> str:
    return ("good film " if i % 3 == 0 else "bad film ") + str(i % 40)


# -- plain connection ----------------------------------------------------------------------------


def test_functions_work_on_a_plain_connection(con, engine):
    rows = con.sql("SELECT id, llm_map('Echo: {review}', review) FROM reviews ORDER BY id").fetchall()
    assert rows == [(i, expected_review(i)) for i in range(ROWS)]
    # per chunk of 2,048 rows, each deduplicated: 80 distinct reviews ('good film k' and
    # 'bad film k' for 40 k), all in the first chunk; the result cache answers the later chunks
    assert [len(p) for p in engine.submitted] == [80]


def test_filter_in_where_cte_and_join_on_a_plain_connection(con):
    con.execute("CREATE TABLE movies AS SELECT 'movie ' || range AS movie, range AS year FROM range(7)")
    rows = con.execute(
        """
        WITH liked AS (SELECT id, movie FROM reviews WHERE llm_filter('Is {review} positive?', review))
        SELECT count(*), min(l.id), max(m.year) FROM liked l JOIN movies m USING (movie)
        """
    ).fetchone()
    liked = [i for i in range(ROWS) if i % 3 == 0]
    assert rows == (len(liked), 0, 6)


def test_declared_result_types(con):
    types = con.execute(
        """SELECT typeof(llm_map('Echo: {review}', review)), typeof(llm_filter('Is {review} good?', review)),
                  typeof(llm_classify('Kind of {review}', ['a', 'b'], review)),
                  typeof(llm_extract('Facts: {review}', '{"type": "object"}', review))
           FROM reviews LIMIT 1"""
    ).fetchone()
    assert types == ("VARCHAR", "BOOLEAN", "VARCHAR", "JSON")


def test_struct_argument_binds_by_field_name(con):
    rows = con.sql(
        "SELECT llm_map('Echo: {movie} / {review}', r), llm_map('Echo: {m}', {'m': movie}) FROM reviews r WHERE id = 4"
    ).fetchall()
    assert rows == [(f"movie 4 / {expected_review(4)}", "movie 4")]


def test_positional_arguments_fill_placeholders_in_order(con):
    rows = con.sql("SELECT llm_map('Echo: {a} then {b} then {a}', movie, id) FROM reviews WHERE id = 2").fetchall()
    assert rows == [("movie 2 then 2 then movie 2",)]


def test_unknown_struct_field_is_a_clear_error(con):
    with pytest.raises(duckdb.Error, match=r"unknown column\(s\) 'rating'; the struct argument has fields 'id', 'review', 'movie'"):
        con.sql("SELECT llm_map('Echo: {rating}', r) FROM reviews r").fetchall()


def test_wrong_number_of_values_is_a_clear_error(con):
    with pytest.raises(duckdb.Error, match=r"has 2 placeholder\(s\) \(\{a\}, \{b\}\) but 1 value\(s\) were given"):
        con.sql("SELECT llm_map('{a} {b}', review) FROM reviews").fetchall()


def test_null_argument_gives_null_and_a_logged_error(con):
    rows = con.sql(
        "SELECT id, llm_map('Echo: {review}', CASE WHEN id = 1 THEN NULL ELSE review END) FROM reviews WHERE id < 3 ORDER BY id"
    ).fetchall()
    assert rows == [(0, expected_review(0)), (1, None), (2, expected_review(2))]
    failures = relserve.duckdb.errors(con).fetchall()
    assert failures == [("llm_map", "Echo: {review}", '{"review": null}', "llm_map: placeholder {review} is NULL in this row")]


def test_options_override_the_connection_defaults(con, engine):
    con.sql("SELECT llm_map('Echo: {review}', review, llm_options(max_tokens := 7)) FROM reviews WHERE id < 2").fetchall()
    assert engine.relqueries[-1].max_tokens == 7
    relserve.duckdb.install(con, engine=engine, max_tokens=11)
    con.sql("SELECT llm_map('Echo again: {review}', review) FROM reviews WHERE id < 2").fetchall()
    assert engine.relqueries[-1].max_tokens == 11


def test_on_error_raise_fails_the_statement(con):
    with pytest.raises(duckdb.Error, match="placeholder {review} is NULL"):
        con.sql("SELECT llm_map('Echo: {review}', NULL::VARCHAR, llm_options(on_error := 'raise')) FROM reviews").fetchall()


def test_bad_labels_and_schema_are_clear_errors(con):
    with pytest.raises(duckdb.Error, match="labels must be a non-empty list of strings"):
        con.sql("SELECT llm_classify('Kind {review}', 'positive', review) FROM reviews").fetchall()
    with pytest.raises(duckdb.Error, match="invalid JSON schema"):
        con.sql("""SELECT llm_extract('Facts {review}', '{"type": "nonsense"}', review) FROM reviews""").fetchall()


# -- planned statements --------------------------------------------------------------------------


def test_planned_statement_sends_one_relquery_per_call_site(con, engine):
    rel = relserve.duckdb.sql(con, "SELECT id, llm_map('Echo: {review} in {movie}', review, movie) AS s FROM reviews ORDER BY id")
    assert rel.fetchall() == [(i, f"{expected_review(i)} in movie {i % 7}") for i in range(ROWS)]
    # 2,100 rows in 2 chunks, 560 distinct (review, movie) pairs: one relQuery with all of them
    assert [len(p) for p in engine.submitted] == [560]
    assert engine.submitted[0] == sorted(engine.submitted[0])


def test_filter_runs_before_the_calls_it_guards(con, engine):
    rows = relserve.duckdb.sql(
        con,
        """SELECT id, llm_map('Echo: {review}', review) AS s FROM reviews
           WHERE llm_filter('Is {review} positive?', review) ORDER BY id""",
    ).fetchall()
    assert rows == [(i, expected_review(i)) for i in range(0, ROWS, 3)]
    filter_prompts, map_prompts = engine.submitted
    # 80 distinct reviews: the label plan's sample of 64 answered them first, the other 16 after
    assert len(filter_prompts) == 80 - 64
    # the map ran only on the reviews the filter kept (every third id: all 40 'good film k')
    assert map_prompts == sorted(f"Echo: good film {k}" for k in range(40))
    run = con_run(con)
    assert run.passes == 3 and [s.relqueries for s in run.sites] == [1, 1]


def con_run(con):
    from relserve.duckdb_ext.connections import session_of

    return session_of(con).last_run


def test_cte_classification_feeds_an_outer_map(con, engine):
    rows = relserve.duckdb.sql(
        con,
        """WITH s AS (SELECT id, review, llm_classify('Kind: {review}', ['x', 'y'], review, llm_options(method := 'bootstrap')) AS kind FROM reviews)
           SELECT id, kind, llm_map('Echo: {review}', review) FROM s WHERE kind = 'x' ORDER BY id LIMIT 3""",
    ).fetchall()
    # each prompt's own text, after the examples bootstrap put in front
    classify_prompts = [own_text(p) for p in engine.submitted[0]]
    # the label plan's sample (16 rows, scored behind the examples) answered its rows first
    first = engine.submitted[0][0]
    shown = first[: len(first) - len(classify_prompts[0])].split("\n\n")[:-1]
    assert len(classify_prompts) == 80 - 16 and len(shown) == 2
    # the double's answer for each review (its prompt's length picks the label)
    # (a 2-label classify of 16 rows or more is laid out question first: "Question: Kind: <review>")
    assert all(p.startswith("Question: Kind: ") for p in classify_prompts)
    # every review's own prompt: the plan's sample (behind the examples) and the rest
    scored = classify_prompts + [own_text(p) for p in engine.first_passes[1]]
    kind_of = {p.rsplit("Kind: ", 1)[1].split("\n")[0]: answer(p, engine.relqueries[0]) for p in scored}
    assert len(kind_of) == 80
    x_reviews = {r for r, k in kind_of.items() if k == "x"}
    assert 0 < len(x_reviews) < 80
    expected = [(i, "x", expected_review(i)) for i in range(ROWS) if kind_of[expected_review(i)] == "x"][:3]
    assert len(expected) == 3 and rows == expected
    assert sorted(p.removeprefix("Echo: ") for p in engine.submitted[1]) == sorted(x_reviews)


def test_independent_call_sites_run_in_one_stage(con, engine):
    relserve.duckdb.sql(
        con, "SELECT llm_map('Echo: {review}', review), llm_map('Echo: {movie}', movie) FROM reviews"
    ).fetchall()
    run = con_run(con)
    assert run.passes == 2  # one collection pass, both relQueries together, one answering pass
    assert sorted(len(p) for p in engine.submitted) == [7, 80]


def test_nested_calls_run_inner_first(con, engine):
    rows = relserve.duckdb.sql(
        con, "SELECT llm_map('Echo: again {x}', llm_map('Echo: {m}', movie)) FROM reviews WHERE id < 3 ORDER BY id"
    ).fetchall()
    assert rows == [("again movie 0",), ("again movie 1",), ("again movie 2",)]
    assert engine.submitted == [
        ["Echo: movie 0", "Echo: movie 1", "Echo: movie 2"],
        ["Echo: again movie 0", "Echo: again movie 1", "Echo: again movie 2"],
    ]


def test_a_repeated_planned_query_does_not_call_the_engine(con, engine):
    query = "SELECT id, llm_filter('Is {review} positive?', review) FROM reviews ORDER BY id"
    first = relserve.duckdb.sql(con, query).fetchall()
    calls = len(engine.submitted)
    second = relserve.duckdb.sql(con, query).fetchall()
    assert first == second == [(i, i % 3 == 0) for i in range(ROWS)]
    assert len(engine.submitted) == calls == 1


def test_create_insert_update_run_once_with_planned_calls(con, engine):
    relserve.duckdb.sql(con, "CREATE TABLE echoed AS SELECT id, llm_map('Echo: {review}', review) AS s FROM reviews WHERE id < 10")
    assert con.execute("SELECT count(*), min(s) FROM echoed").fetchall() == [(10, min(expected_review(i) for i in range(10)))]
    relserve.duckdb.sql(con, "INSERT INTO echoed SELECT id, llm_map('Echo: {movie}', movie) FROM reviews WHERE id = 10")
    assert con.sql("SELECT s FROM echoed WHERE id = 10").fetchall() == [("movie 3",)]
    relserve.duckdb.sql(
        con, "UPDATE echoed SET s = llm_map('Echo: {m}', {'m': s}) || '!' WHERE llm_filter('Is {s} positive?', s, llm_options(method := 'bootstrap'))"
    )
    assert con.execute("SELECT count(*) FROM echoed WHERE s LIKE '%!'").fetchall() == [(4,)]  # ids 0, 3, 6, 9
    assert con.execute("SELECT count(*) FROM echoed").fetchall() == [(11,)]


def test_planned_errors_are_nulls_with_messages(con):
    rows = relserve.duckdb.sql(
        con,
        "SELECT id, llm_map('Echo: {review}', CASE WHEN id = 1 THEN NULL ELSE review END) FROM reviews WHERE id < 3 ORDER BY id",
    ).fetchall()
    assert rows == [(0, expected_review(0)), (1, None), (2, expected_review(2))]
    assert relserve.duckdb.errors(con).fetchall() == [
        ("llm_map", "Echo: {review}", '{"review": null}', "llm_map: placeholder {review} is NULL in this row")
    ]


def test_planned_on_error_raise_names_the_arguments(con):
    with pytest.raises(RowError, match=r"llm_map\('Echo: \{review\}'.*row 0 \(review=None\)"):
        relserve.duckdb.sql(
            con, "SELECT llm_map('Echo: {review}', NULL::VARCHAR, llm_options(on_error := 'raise')) FROM reviews"
        )


def test_planned_template_errors_surface_as_themselves(con):
    with pytest.raises(TemplateError, match="unknown column"):
        relserve.duckdb.sql(con, "SELECT llm_map('Echo: {rating}', r) FROM reviews r")
    with pytest.raises(ConfigError, match="labels"):
        relserve.duckdb.sql(con, "SELECT llm_classify('Kind {review}', [], review) FROM reviews")


def test_several_statements_and_the_connection_wrapper(engine):
    with relserve.duckdb.connect(engine=engine) as rcon:
        result = rcon.sql(
            "CREATE TABLE t AS SELECT 'good ' || range AS v FROM range(3); "
            "SELECT llm_filter('Is {v} good?', v) FROM t"
        )
        assert result.fetchall() == [(True,), (True,), (True,)]
        assert rcon.execute("SELECT count(*) FROM t").fetchall() == [(3,)]


def test_statements_without_calls_pass_through(con):
    assert relserve.duckdb.sql(con, "SELECT 42").fetchall() == [(42,)]
    relserve.duckdb.sql(con, "CREATE TABLE empty_t (a INT)")
    assert con.execute("SELECT count(*) FROM empty_t").fetchall() == [(0,)]


def test_a_script_is_routed_by_its_parsed_calls_not_by_its_words():
    from relserve.duckdb_ext.routing import Route, route_of

    assert route_of("SELECT 'llm_reduce' AS llm_topk_text, 'block' AS llm_options_note") is Route.PLANNED
    assert route_of("SELECT g, llm_reduce('Sum up {v}', v) FROM t GROUP BY g") is Route.OPERATORS
    assert route_of("SELECT 1; SELECT llm_topk('Best {v}?', list(v), 2) FROM t") is Route.OPERATORS
    assert route_of(
        "SELECT r.id FROM r JOIN t ON llm_filter('{a} / {b}?', r.a, t.b, llm_options(block := 3))"
    ) is Route.BLOCKED_JOIN
    assert route_of("SELECT llm_filter('{a}?', a, llm_options(max_tokens := 2)) FROM blocks") is Route.PLANNED
    assert route_of("SELEC llm_reduce(") is Route.PLANNED  # DuckDB says what is wrong with it


def test_an_unknown_llm_options_name_is_named_with_the_nearest_option(con, engine):
    from relserve.errors import ConfigError

    with pytest.raises(ConfigError, match=r"llm_options: unknown option 'max_token' \(did you mean max_tokens\?\); known options: model, max_tokens,"):
        relserve.duckdb.sql(con, "SELECT llm_filter('Good? {review}', review, llm_options(max_token := 3)) FROM reviews")
    with pytest.raises(ConfigError, match=r"unknown option 'colour'; known options:"):
        relserve.duckdb.explain(con, "SELECT llm_map('{review}', review, llm_options(colour := 'red')) FROM reviews")
    assert engine.submitted == []  # refused before anything ran
    # a known name, and the blocked join's block, pass the check
    from relserve.duckdb_ext.option_names import check_option_names

    check_option_names("SELECT r.id FROM r JOIN t ON llm_filter('{a} / {b}?', r.a, t.b, llm_options(block := 3))")
    assert relserve.duckdb.sql(
        con, "SELECT count(*) FROM reviews WHERE llm_filter('Good? {review}', review, llm_options(max_tokens := 3))"
    ).fetchall() == [(len(range(0, ROWS, 3)),)]  # the rows with "good" (range % 3 == 0)


def test_a_statement_sqlglot_does_not_model_runs_without_its_warning(con, engine, caplog):
    # DuckDB's own EXPLAIN is a statement sqlglot keeps as a raw command (and warns about);
    # relserve leaves it to DuckDB, and the user sees DuckDB's plan, not a sqlglot warning
    import logging

    with caplog.at_level(logging.WARNING):
        plan = relserve.duckdb.sql(con, "EXPLAIN SELECT llm_classify('Kind of {review}?', ['a', 'b'], review) FROM reviews").fetchall()
    assert "llm_classify" in plan[0][-1]
    assert [r.getMessage() for r in caplog.records if r.name.startswith("sqlglot")] == []
    assert engine.submitted == []


def test_explain_reports_each_call_site_without_running(con, engine):
    ex = relserve.duckdb.explain(
        con,
        """SELECT llm_map('Echo: {review}', review) FROM reviews
           WHERE llm_filter('Is {review} positive?', review)""",
    )
    assert engine.submitted == []
    assert [(s.index, s.depends_on, s.stage) for s in ex.sites] == [(0, [1], 2), (1, [], 1)]
    map_plan, filter_plan = ex.sites[0].plans[0], ex.sites[1].plans[0]
    assert (filter_plan.rows, filter_plan.distinct_prompts, filter_plan.cache_hits) == (ROWS, 80, 0)
    assert map_plan.rows == ROWS  # an upper bound: every row counted as passing the filter
    text = str(ex)
    assert "2 call site(s) in 2 stage(s)" in text
    assert "#0 stage 2, waits for #1: llm_map('Echo: {review}', review)" in text
    assert ex.to_dict()["sites"][1]["plans"][0]["distinct_prompts"] == 80


def test_parameters_reach_the_planned_statement(con, engine):
    rows = relserve.duckdb.sql(
        con, "SELECT id, llm_map('Echo: {movie}', movie) FROM reviews WHERE id < ? ORDER BY id", params=[2]
    ).fetchall()
    assert rows == [(0, "movie 0"), (1, "movie 1")]
    assert engine.submitted == [["Echo: movie 0", "Echo: movie 1"]]


def test_an_unknown_model_is_a_clear_error(con, engine):
    with pytest.raises(ConfigError, match="unknown model 'no-such-model'"):
        relserve.duckdb.sql(con, "SELECT llm_map('Echo: {review}', review, llm_options(model := 'no-such-model')) FROM reviews")
    assert engine.submitted == []


@pytest.mark.parametrize("cache", [False, True])
def test_a_planned_statement_runs_with_the_result_cache_off_or_on(engine, cache, tmp_path, monkeypatch):
    # install(cache=False/True) once made the planned path's cache look-up call get_many on a bool
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path))
    c = duckdb.connect()
    relserve.duckdb.install(c, engine=engine, cache=cache)
    c.execute("CREATE TABLE t AS SELECT 'good film ' || range AS review FROM range(3)")
    query = "SELECT llm_map('Echo: {review}', review) AS s FROM t ORDER BY s"
    assert relserve.duckdb.sql(c, query).fetchall() == [("good film 0",), ("good film 1",), ("good film 2",)]
    assert relserve.duckdb.sql(c, query).fetchall() == [("good film 0",), ("good film 1",), ("good film 2",)]
    # off: both statements reach the engine; on: the second is answered from the cache
    assert [len(p) for p in engine.submitted] == ([3, 3] if cache is False else [3])


def test_errors_of_a_connect_connection_lists_its_failures_and_keeps_its_engine(engine):
    # relserve.duckdb.errors(con) on connect()'s Connection read an empty log, and set up a second
    # session on the same DuckDB connection whose functions replaced the first's (its engine lost)
    con = relserve.duckdb.connect(engine=engine, progress=False)
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES (1, 'good a'), (2, NULL)) v(id, review)")
    assert con.sql("SELECT id, llm_map('Echo: {review}', review) FROM t ORDER BY id").fetchall() == [(1, "good a"), (2, None)]
    expected = [("llm_map", "Echo: {review}", '{"review": null}', "llm_map: placeholder {review} is NULL in this row")]
    assert relserve.duckdb.errors(con).fetchall() == expected
    assert con.errors().fetchall() == expected
    asked = len(engine.relqueries)
    # DuckDB's own execute runs the functions installed on the connection: still the session's
    assert con.execute("SELECT llm_map('Again: {review}', review) FROM t WHERE id = 1").fetchall() == [("good a",)]
    assert len(engine.relqueries) == asked + 1  # the connection's own engine, not the default one


def test_a_connection_relserve_does_not_know_is_refused_by_name():
    with pytest.raises(TypeError, match=r"a DuckDB connection \(duckdb\.connect\(\) or relserve\.duckdb\.connect\(\)\), got 'str'"):
        relserve.duckdb.errors("my.db")
