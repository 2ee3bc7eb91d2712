"""Label scoring and calibration on the real engine (issue 12, item 2)."""

from __future__ import annotations

import math

import pytest

from relserve.engine.label_scoring import pick
from relserve.relquery import RelQuery

ROWS = [
    {"review": "Wonderful, I love it."},
    {"review": "Broke after a day. Awful."},
    {"review": "It is a kettle."},
]
Q = "Review: {review}\nIs this review positive?"


def test_every_label_is_scored_and_the_answer_is_the_best_after_the_prior(engine):
    plain = engine.run(RelQuery(Q, ROWS, choices=["yes", "no"], score_labels=True))
    assert plain.stats.num_errors == 0
    for row in plain.rows:
        assert set(row.label_logprobs) == {"yes", "no"}
        assert sum(math.exp(v) for v in row.label_logprobs.values()) == pytest.approx(1.0)
        assert row.text == pick(row.label_logprobs, None)
    # a prior that favours the model's answer of every row flips them all: each row's
    # scores are the same, only the division by the prior changed
    flipped_prior = {"yes": 0.999, "no": 0.001} if plain.rows[0].text == "yes" else {"yes": 0.001, "no": 0.999}
    cal = engine.run(RelQuery(Q, ROWS, choices=["yes", "no"], score_labels=True, label_prior=flipped_prior))
    for a, b in zip(plain.rows, cal.rows):
        assert b.label_logprobs == pytest.approx(a.label_logprobs, abs=1e-3)
        assert b.text == pick(b.label_logprobs, flipped_prior)
    assert [r.text for r in cal.rows][0] != plain.rows[0].text


def test_multi_token_labels_are_scored_whole(engine):
    labels = ["very positive", "very negative", "neutral"]
    res = engine.run(RelQuery(Q, ROWS, choices=labels, score_labels=True))
    assert res.stats.num_errors == 0
    for row in res.rows:
        assert row.text in labels
        assert sum(math.exp(v) for v in row.label_logprobs.values()) == pytest.approx(1.0)


def test_filter_and_classify_default_to_calibrated_scores(engine):
    import tempfile
    from pathlib import Path

    import duckdb

    import relserve.duckdb
    from relserve.planner.cache import ResultCache
    from relserve.planner.label_prior import known_priors
    from engine_doubles import RecordingEngine

    rec = RecordingEngine(engine)
    con = duckdb.connect()
    with tempfile.TemporaryDirectory() as tmp:
        relserve.duckdb.install(con, engine=rec, cache=ResultCache(Path(tmp) / "c.sqlite"), progress=False)
        con.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('Wonderful, I love it.'), ('Awful.')) v(review)")
        got = relserve.duckdb.sql(
            con, "SELECT llm_filter('Review: {review}\nIs this review positive?', review) AS a FROM t"
        ).fetchall()
        gen = relserve.duckdb.sql(
            con, "SELECT llm_filter('Review: {review}\nIs this review positive?', review, llm_options(method := 'generate')) AS a FROM t"
        ).fetchall()
    assert all(isinstance(a, bool) for (a,) in got + gen)
    assert len(rec.probes) == 1 and len(rec.probes[0]) == 3
    scored, generated = rec.relqueries
    assert scored.score_labels and set(scored.label_prior) == {"yes", "no"}
    assert not generated.score_labels
    prior = next(p for k, p in known_priors().items() if k[2] == "Review: {review}\nIs this review positive?")
    assert sum(prior.values()) == pytest.approx(1.0)


def test_many_labels_are_scored_past_vllms_twenty_logprobs_per_request(engine):
    # 14 labels and their capitalised spellings: 28 first tokens, more than one request returns
    labels = ["red", "green", "blue", "black", "white", "pink", "gray", "brown", "gold", "silver", "cyan", "teal", "navy", "lime"]
    res = engine.run(RelQuery("What colour is {thing}?", [{"thing": "grass"}, {"thing": "snow"}], choices=labels, score_labels=True))
    assert res.stats.num_errors == 0, [r.error for r in res.rows]
    for row in res.rows:
        assert set(row.label_logprobs) == set(labels)
        assert sum(math.exp(v) for v in row.label_logprobs.values()) == pytest.approx(1.0)
