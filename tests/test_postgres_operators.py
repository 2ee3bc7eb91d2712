"""llm_reduce / llm_topk aggregates and llm_reduce_query (issue 26) in a real PostgreSQL 15
cluster (test_postgres.py's), calling a real server on the session engine: answers per group,
NULLs and empty groups, one request for all groups with llm_reduce_query, bad arguments as SQL
errors naming the problem, and a role without superuser rights calling them with its own key.

The server here records what reaches the engine (tests/reference_scores.py), so values are
checked: a group's answer is the engine's answer to the last prompt the tree sent for it, and
top-k's order is the one scores computed outside relserve (transformers) give on the prompts
its rounds sent."""

from __future__ import annotations

import json

import psycopg
import pytest
from reference_scores import ScoreRecorder, reference_topk
from server_fixtures import running_server
from test_operators_engine import traced_answers
from test_postgres import KEY, REVIEWS, ROLE_KEYS, cluster, connect  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.postgres, pytest.mark.engine]


@pytest.fixture(scope="module")
def recording(engine):
    return ScoreRecorder(engine)


@pytest.fixture(scope="module")
def server(recording):
    """test_postgres.py's server (its tenants), on the recording engine; the module's cluster
    calls this one. No result cache: each test's prompts reach the engine whatever ran before
    (the operators' calls from SQL have no option to skip the cache)."""
    tenants = {"pg": {"key": KEY}, **{role: {"key": key} for role, key in ROLE_KEYS.items()}}
    with running_server(recording, tenants={"tenants": tenants}, cache=False) as srv:
        yield srv


@pytest.fixture
def fresh_recording(recording):
    """The recording of this test alone."""
    recording.recorded.clear()
    return recording

SUMMARY = "Summarize these reviews in a few words:\n{review}"


def test_reduce_per_group_nulls_and_empty_groups(cluster, fresh_recording):
    with connect(cluster) as db:
        db.execute("SET relserve.max_tokens = 12")
        rows = db.execute(
            f"SELECT stars, llm_reduce('{SUMMARY}', review ORDER BY id) FROM reviews GROUP BY stars ORDER BY stars"
        ).fetchall()
        by_stars = dict(rows)
        assert sorted(by_stars) == [1, 2, 3, 4, 5]
        assert by_stars[3] is None  # the group holds only a NULL review: NULL, as SQL aggregates give
        # each group's answer is the engine's answer to its group's prompt
        groups = [[r for _, r, s in sorted(REVIEWS) if s == stars] for stars in (1, 2, 4, 5)]
        assert [by_stars[s] for s in (1, 2, 4, 5)] == traced_answers(fresh_recording, SUMMARY, groups)
        # no rows at all: NULL
        assert db.execute(f"SELECT llm_reduce('{SUMMARY}', review) FROM reviews WHERE false").fetchone() == (None,)
        assert db.execute("SELECT llm_topk('Good? {r}', review, 2) FROM reviews WHERE id = 7").fetchone() == ([],)


def test_topk_order_is_the_reference_scores_order(cluster, fresh_recording, reference_scorer):
    with connect(cluster) as db:
        top = db.execute("SELECT llm_topk('Is this review enthusiastic? {review}', review, 2 ORDER BY id) FROM reviews").fetchone()[0]
    values = [r for _, r, _ in sorted(REVIEWS)] + [None]  # id order; id 7 is NULL
    assert top == [values[i] for i in reference_topk(reference_scorer, fresh_recording, values, 2)]


def test_reduce_query_sends_every_group_in_one_request(cluster, server, fresh_recording):
    with connect(cluster) as db:
        rows = db.execute(
            f"SELECT grp->>'stars', answer, error FROM llm_reduce_query('{SUMMARY}', "
            "'SELECT stars, review FROM reviews ORDER BY id', '{\"max_tokens\": 12}')"
        ).fetchall()
        assert [g for g, _, _ in rows] == ["5", "1", "4", "2", "3"]  # groups in order of first appearance
        answers = {g: (a, e) for g, a, e in rows}
        assert answers["3"] == (None, None)
        assert all(answers[s][1] is None for s in ("1", "2", "4", "5"))
        # one request, one relQuery for every group; each answer the engine's to its group's prompt
        assert len(fresh_recording.submitted) == 1
        groups = [[r for _, r, s in sorted(REVIEWS) if s == stars] for stars in (5, 1, 4, 2)]
        assert [answers[g][0] for g in ("5", "1", "4", "2")] == traced_answers(fresh_recording, SUMMARY, groups)
        out = db.execute(
            "SELECT answer FROM llm_reduce_query('List the words:\n{review}', 'SELECT review FROM reviews WHERE id < 3', "
            "'{\"json_schema\": {\"type\": \"object\", \"properties\": {\"words\": {\"type\": \"array\", "
            "\"items\": {\"type\": \"string\"}}}, \"required\": [\"words\"]}, \"max_tokens\": 40}')"
        ).fetchone()[0]
        assert "words" in json.loads(out)


def test_bad_arguments_are_sql_errors_naming_the_problem(cluster):
    with connect(cluster) as db:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"^llm_reduce: template .* must have exactly one placeholder"):
            db.execute("SELECT llm_reduce('No placeholder here', review) FROM reviews")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"^llm_topk: k must be a positive integer, got 0"):
            db.execute("SELECT llm_topk('Good? {r}', review, 0) FROM reviews")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"^llm_reduce: the template is NULL"):
            db.execute("SELECT llm_reduce(NULL, review) FROM reviews")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"^llm_reduce_query: unknown option\(s\) colour"):
            db.execute("SELECT * FROM llm_reduce_query('{review}', 'SELECT review FROM reviews', '{\"colour\": 1}')")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"^llm_reduce_query takes no option\(s\) examples"):
            db.execute("SELECT * FROM llm_reduce_query('{review}', 'SELECT review FROM reviews', '{\"examples\": []}')")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"^llm_reduce_query: the query has no column 'text'"):
            db.execute("SELECT * FROM llm_reduce_query('{text}', 'SELECT review FROM reviews', '{}')")
        with pytest.raises(psycopg.errors.UndefinedTable, match=r"^llm_reduce_query: the query failed"):
            db.execute("SELECT * FROM llm_reduce_query('{x}', 'SELECT x FROM no_such_table', '{}')")
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match=r"^llm_reduce_query: a context of \d+ tokens .* room for two partial answers .*\(HTTP 400\)"):
            db.execute("SELECT * FROM llm_reduce_query('{review}', 'SELECT review FROM reviews', '{\"max_tokens\": 1900}')")


def test_a_role_without_superuser_rights_uses_its_own_key(cluster, server, fresh_recording):
    role = "alice"
    with connect(cluster, role) as db:
        db.execute("SET relserve.max_tokens = 8")
        got = db.execute(f"SELECT llm_reduce('{SUMMARY}', review ORDER BY id) FROM reviews WHERE id < 3").fetchone()[0]
        # the engine's answer to the group's prompt, sent under alice's tenant
        assert [got] == traced_answers(fresh_recording, SUMMARY, [[r for i, r, _ in sorted(REVIEWS) if i < 3]])
        # the internal support functions are not the caller's to call
        for call in ("relserve._reduce_final(ARRAY['{x}', 'a'])", "relserve._topk_final(ARRAY['{x}', '1', 'a'])"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                db.execute(f"SELECT {call}")
    with connect(cluster, "mallory") as db:  # no key stored: the server refuses it
        with pytest.raises(psycopg.errors.InvalidAuthorizationSpecification, match=r"^llm_reduce: .*\(HTTP 401\)"):
            db.execute(f"SELECT llm_reduce('{SUMMARY}', review) FROM reviews")
        with pytest.raises(psycopg.errors.InvalidAuthorizationSpecification, match=r"^llm_reduce_query: .*\(HTTP 401\)"):
            db.execute(f"SELECT * FROM llm_reduce_query('{SUMMARY}', 'SELECT review FROM reviews', '{{}}')")
        # a role cannot point the call elsewhere: the url is not a setting
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.execute("SET relserve.url = 'http://127.0.0.1:1'")


def test_statement_timeout_cancels_a_reduction(cluster):
    with connect(cluster) as db:
        db.execute("SET statement_timeout = '2s'")
        # 40 groups of long answers: minutes of engine work, far past the timeout
        with pytest.raises(psycopg.errors.QueryCanceled):
            db.execute(
                "SELECT * FROM llm_reduce_query('Write a long story about these numbers:\n{n}', "
                "'SELECT g % 40 AS grp, g::text AS n FROM generate_series(1, 400) g', '{\"max_tokens\": 64}')"
            )
        db.execute("RESET statement_timeout")
        assert db.execute("SELECT 1").fetchone() == (1,)
