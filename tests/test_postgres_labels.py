"""How sure the model is, from PostgreSQL (issue 43): ``llm_score`` per row and batched by the
executor node, equal to ``llm_filter``'s answers where it is above 0.5, and the NOTICE naming what
to check when the model does not tell a call's rows apart; on the real cluster and server of
test_postgres.py."""

from __future__ import annotations

import pytest
from test_postgres import cluster, connect, server  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.postgres, pytest.mark.engine]

SCORE = "SELECT id, llm_score('Is this review positive? Review: {review}', review) FROM reviews WHERE id <= 6 ORDER BY id"
KEEP = "SELECT id, llm_filter('Is this review positive? Review: {review}', review) FROM reviews WHERE id <= 6 ORDER BY id"


@pytest.mark.parametrize("batched", ["on", "off"])
def test_llm_score_is_a_probability_and_llm_filter_keeps_the_rows_above_one_half(server, cluster, batched):
    notices = []
    with connect(cluster) as db:
        db.add_notice_handler(lambda d: notices.append(d.message_primary))
        db.execute("SET relserve.cache = off")
        db.execute(f"SET relserve.batch_calls = {batched}")
        scores = db.execute(SCORE).fetchall()
        kept = db.execute(KEEP).fetchall()
    assert [i for i, _ in scores] == [i for i, _ in kept] == [1, 2, 3, 4, 5, 6]
    assert all(isinstance(p, float) and 0.0 <= p <= 1.0 for _, p in scores)
    # six rows: too few for two crowds, so each row is decided by its own score against the
    # content-free rows' (and a NOTICE says so, naming no share picked in advance); the score and
    # the filter are the same decision
    assert [p > 0.5 for _, p in scores] == [k for _, k in kept]
    assert any("the model's scores do not split these rows into two groups" in n and "content-free rows" in n
               and "not by a share picked in advance" in n for n in notices), notices


def test_the_batch_node_runs_llm_score_as_one_relquery(server, cluster):
    with connect(cluster) as db:
        db.execute("SET relserve.cache = off")
        plan = "\n".join(r for (r,) in db.execute(f"EXPLAIN {SCORE}"))
    assert "Custom Scan (relserve batch)" in plan and "llm_score" in plan, plan


CLASSIFY = ("SELECT id, llm_classify('Which kind of film is this review about? {review}', "
            "ARRAY['comedy','horror','drama'], review) FROM reviews WHERE id <= 6 ORDER BY id")


@pytest.mark.parametrize("batched", ["on", "off"])
def test_a_classify_of_three_labels_says_when_a_few_rows_leave_the_model_unsure(server, cluster, batched):
    notices = []
    with connect(cluster) as db:
        db.add_notice_handler(lambda d: notices.append(d.message_primary))
        db.execute("SET relserve.cache = off")
        db.execute(f"SET relserve.batch_calls = {batched}")
        got = db.execute(CLASSIFY).fetchall()
    # every row answered with one of the labels, and a NOTICE naming the call says why to doubt them
    assert [i for i, _ in got] == [1, 2, 3, 4, 5, 6]
    assert all(label in ("comedy", "horror", "drama") for _, label in got)
    guesses = [n for n in notices if n.startswith("llm_classify") and "close to guesses" in n]
    assert guesses and "no earlier ones of this call" in guesses[0], notices


def test_a_classify_answered_from_the_cache_says_again_that_its_answers_are_guesses(server, cluster):
    # (a template of its own: the module's server keeps one result cache for all its tests)
    query = CLASSIFY.replace("Which kind of film is this review about?", "What kind of film does this review describe?")
    said: list[list[str]] = []
    for _ in range(2):
        notices: list[str] = []
        with connect(cluster) as db:
            db.add_notice_handler(lambda d, notices=notices: notices.append(d.message_primary))
            db.execute("SET relserve.cache = on")
            got = db.execute(query).fetchall()
        assert [i for i, _ in got] == [1, 2, 3, 4, 5, 6]
        said.append([n for n in notices if n.startswith("llm_classify") and "close to guesses" in n])
    first, second = said
    assert len(first) == 1 and "no earlier ones of this call" in first[0], first
    # the second run's rows all came from the result cache, and the cache kept the warning
    assert second == [f"{first[0]} (answers from the result cache, which kept this warning with them)"]
