"""How sure the model is, on every surface: ``llm_score`` (the probability of "yes" of a filter's
question), each row's confidence, the warning when the model does not tell the rows apart, and
EXPLAIN ANALYZE's estimated prior - over scripted engines (the real engine and PostgreSQL:
tests/test_labels_engine.py)."""

from __future__ import annotations

import warnings

import duckdb
import polars as pl
import pytest
from label_doubles import noise_engine, strong_engine
from server_fixtures import running_server
from waits import BoundedClient

import relserve.duckdb
import relserve.polars  # noqa: F401 (registers the .llm namespaces)
from relserve.errors import ConfigError, LabelWarning
from relserve.functions import make_call
from relserve.labels.memory import forget_all
from relserve.planner.plan_and_run import analyzed, run_call

ROWS = [f"sports story {i}" if i % 5 == 0 else f"other story {i}" for i in range(40)]
SPORTS = "Is this news article about sports? Article: {a}"


@pytest.fixture(autouse=True)
def _fresh_memory():
    forget_all()
    yield
    forget_all()




def test_llm_score_is_the_probability_of_yes_and_agrees_with_llm_filter():
    eng = strong_engine(lambda text: "sports story" in text)
    score = run_call(make_call("llm_score", SPORTS, method="adaptive"), [ROWS], engine=eng, cache=False, progress=False)
    forget_all()
    keep = run_call(make_call("llm_filter", SPORTS, method="adaptive"), [ROWS], engine=eng, cache=False, progress=False)
    assert all(isinstance(p, float) and 0.0 <= p <= 1.0 for p in score.values)
    assert [p > 0.5 for p in score.values] == keep.values == [r.startswith("sports") for r in ROWS]
    assert min(p for p, r in zip(score.values, ROWS) if r.startswith("sports")) > 0.99
    assert max(p for p, r in zip(score.values, ROWS) if not r.startswith("sports")) < 0.01


def test_llm_score_is_cached_apart_from_llm_filter():
    a = make_call("llm_score", SPORTS).sampling_settings()
    b = make_call("llm_filter", SPORTS).sampling_settings()
    assert a != b and a["function"] == "llm_score" and "function" not in b


def test_llm_score_needs_a_scoring_method():
    with pytest.raises(ConfigError, match="llm_score reads the model's probability"):
        make_call("llm_score", SPORTS, method="generate")
    with pytest.raises(ConfigError, match="llm_score reads the model's probability"):
        make_call("llm_score", SPORTS, temperature=0.5)


@pytest.mark.parametrize("method", ["score", "prior", "batch", "bootstrap", "adaptive"])
def test_every_label_method_gives_each_row_a_confidence_of_its_answer(method):
    eng = strong_engine(lambda text: "sports story" in text)
    out = run_call(make_call("llm_score", SPORTS, method=method), [ROWS], engine=eng, cache=False, progress=False)
    assert out.failures == []
    # the probability of yes ranks every sports story above every other one
    sports = [p for p, r in zip(out.values, ROWS) if r.startswith("sports")]
    others = [p for p, r in zip(out.values, ROWS) if not r.startswith("sports")]
    assert min(sports) > max(others)


def test_duckdb_orders_by_llm_score_on_a_plain_and_a_planned_connection():
    eng = strong_engine(lambda text: "sports story" in text)
    con = duckdb.connect()
    relserve.duckdb.install(con, engine=eng, progress=False)
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES " + ",".join(f"('{r}')" for r in ROWS) + ") v(a)")
    sql = f"SELECT a, llm_score('{SPORTS}', a, llm_options(method := 'adaptive')) AS p FROM t ORDER BY p DESC, a LIMIT 8"
    plain = con.sql(sql).fetchall()
    planned = relserve.duckdb.sql(con, sql).fetchall()
    expected = sorted(r for r in ROWS if r.startswith("sports"))
    assert sorted(a for a, _ in plain) == expected == sorted(a for a, _ in planned)
    assert con.execute(f"SELECT typeof(llm_score('{SPORTS}', a)) FROM t LIMIT 1").fetchall() == [("DOUBLE",)]


def test_polars_score_expression_and_frame_method():
    eng = strong_engine(lambda text: "sports story" in text)
    df = pl.DataFrame({"a": ROWS})
    out = df.llm.score(SPORTS, method="adaptive", engine=eng)
    assert out.schema["llm_score"] == pl.Float64
    top = out.sort("llm_score", descending=True).head(8)["a"].to_list()
    assert sorted(top) == sorted(r for r in ROWS if r.startswith("sports"))
    expr = df.with_columns(p=pl.col("a").llm.score(SPORTS, method="adaptive", engine=eng))
    assert expr["p"].to_list() == out["llm_score"].to_list()


def test_a_model_that_cannot_separate_the_rows_answers_them_and_warns():
    with pytest.warns(LabelWarning, match=r"llm_filter\('Is this news article about sports.*close to guesses"):
        out = run_call(make_call("llm_filter", SPORTS, method="adaptive"), [ROWS], engine=noise_engine(),
                       cache=False, progress=False)
    assert out.failures == [] and all(isinstance(v, bool) for v in out.values)
    assert out.warning is not None and "Check a sample of the answers by hand" in out.warning
    assert "answered by the model's own score against its score on content-free rows" in out.warning
    assert "not by a share picked in advance" in out.warning
    ana = str(analyzed(out.plan.call, out))
    assert "(calibrated against content-free rows)" in ana and "warning" in ana


def test_no_warning_and_the_estimated_prior_where_the_model_separates_the_rows():
    eng = strong_engine(lambda text: "sports story" in text)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LabelWarning)
        out = run_call(make_call("llm_filter", SPORTS, method="adaptive"), [ROWS], engine=eng, cache=False, progress=False)
    assert out.warning is None
    ana = str(analyzed(out.plan.call, out))
    assert "'yes' above a margin of" in ana and "(two crowds), 20.0% of the 40 sampled rows 'yes'" in ana
    assert "plan (made by this relQuery's first pass over 40 rows)" in ana


def test_the_server_answers_llm_score_and_reports_the_labels_and_the_warning():
    eng = noise_engine()
    with running_server(eng, cache=False) as srv, BoundedClient(srv.url) as c:
        res = c.run(SPORTS, [{"a": r} for r in ROWS], function="score", method="adaptive")
    assert len(res.rows) == len(ROWS) and all(0.0 <= r.value <= 1.0 for r in res.rows)
    assert all(r.confidence is not None for r in res.rows)
    assert "close to guesses" in res.stats["warning"]
    assert res.stats["labels"].startswith("plan (made by this relQuery's first pass over 40 rows): method adaptive, layout ")
