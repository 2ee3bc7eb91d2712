"""relserve_fdw (udfs/relserve_fdw): LLM answers as foreign tables, on the real PostgreSQL 15
cluster and relserve server of test_postgres.py (the session's real engine).

A scan is one relQuery over the source rows that reach it; quals on source columns go into the
source query; the key comes from the caller's user mapping; cancel, a dead server and bad options
end with clear errors."""

from __future__ import annotations

import re
import socket

import psycopg
import pytest
from test_postgres import KEY, REPO, REVIEWS, ROLE_KEYS, cluster, connect, expected, server, wait_until_done  # noqa: F401 (fixtures)
from waits import Worker, wait_until

from relserve.client import Client
from relserve.replies import JobDescription

pytestmark = [pytest.mark.postgres, pytest.mark.engine]

TONE = "Is this review positive or negative? {review}"
LABELS = ["positive", "negative"]


def jobs(server, key: str = KEY) -> dict[str, JobDescription]:
    with Client(server.url, api_key=key) as c:
        return {j.id: j for j in c.list()}


def new_jobs(server, before: set[str], key: str = KEY) -> list[JobDescription]:
    return [j for k, j in jobs(server, key).items() if k not in before]


@pytest.fixture(scope="module")
def fdw(cluster, server):
    """A server (its url set by a superuser), mappings for postgres and alice, and tables."""
    with connect(cluster) as db:
        db.execute(f"CREATE SERVER relserve FOREIGN DATA WRAPPER relserve_fdw OPTIONS (url '{server.url}')")
        db.execute(f"CREATE USER MAPPING FOR postgres SERVER relserve OPTIONS (api_key '{KEY}')")
        db.execute(f"CREATE USER MAPPING FOR alice SERVER relserve OPTIONS (api_key '{ROLE_KEYS['alice']}')")
        db.execute(
            "CREATE FOREIGN TABLE review_tone (id int, review text, tone text) SERVER relserve OPTIONS ("
            "source 'SELECT id, review FROM reviews WHERE review IS NOT NULL', "
            f"template '{TONE}', kind 'classify', labels '{','.join(LABELS)}', max_tokens '4')"
        )
        db.execute(
            "CREATE FOREIGN TABLE review_good (id int, good boolean, stars int) SERVER relserve OPTIONS ("
            "source 'SELECT id, review, stars FROM reviews WHERE review IS NOT NULL', "
            "template 'Is this review positive? {review}', kind 'filter', output 'good')"
        )
        db.execute(
            "CREATE FOREIGN TABLE review_facts (id int, facts jsonb) SERVER relserve OPTIONS ("
            "source 'SELECT id, review FROM reviews WHERE id <= 2', template 'Facts of: {review}', kind 'extract', "
            "json_schema '{\"type\": \"object\", \"properties\": {\"liked\": {\"type\": \"boolean\"}}, \"required\": [\"liked\"]}', "
            "max_tokens '24')"
        )
        db.execute("GRANT SELECT ON review_tone, review_good TO PUBLIC")
    return cluster


def test_a_foreign_table_answers_like_the_set_returning_function(engine, server, fdw):
    texts = [r for _, r, _ in REVIEWS]
    want = expected(engine, "llm_classify", TONE, texts, labels=LABELS, max_tokens=4)
    before = set(jobs(server))
    with connect(fdw) as db:
        got = db.execute("SELECT id, review, tone FROM review_tone ORDER BY id").fetchall()
        srf = db.execute(
            f"SELECT (input->>'id')::int, answer FROM llm_classify_query('{TONE}', ARRAY{LABELS}, "
            "'SELECT id, review FROM reviews WHERE review IS NOT NULL', '{\"max_tokens\": 4}') ORDER BY 1"
        ).fetchall()
    assert got == [(i, r, w) for (i, r, _), w in zip(REVIEWS, want)]
    assert [(i, t) for i, _, t in got] == srf
    new = new_jobs(server, before)
    # one relQuery for the whole scan (and one for the function): never one request per row
    assert sorted(j.progress.total for j in new) == [6, 6]


def test_typed_answers_boolean_and_jsonb_and_an_output_column_in_the_middle(server, fdw):
    with connect(fdw) as db:
        rows = db.execute("SELECT id, good, stars FROM review_good ORDER BY id").fetchall()
        facts = db.execute("SELECT id, facts FROM review_facts ORDER BY id").fetchall()
        kinds = db.execute("SELECT pg_typeof(good)::text, pg_typeof(stars)::text FROM review_good LIMIT 1").fetchone()
    assert [(i, s) for i, _, s in rows] == [(i, s) for i, _, s in REVIEWS]
    assert all(isinstance(g, bool) for _, g, _ in rows)
    assert kinds == ("boolean", "integer")
    assert [i for i, _ in facts] == [1, 2]
    assert all(isinstance(f, dict) and isinstance(f["liked"], bool) for _, f in facts)


def test_quals_on_source_columns_reach_the_source_query(server, fdw):
    before = set(jobs(server))
    with connect(fdw) as db:
        got = db.execute("SELECT id FROM review_tone WHERE id < 4 AND review <> 'x' ORDER BY id").fetchall()
        plan = "\n".join(r for (r,) in db.execute("EXPLAIN SELECT * FROM review_tone WHERE id < 4 AND tone = 'positive'"))
    assert got == [(1,), (2,), (3,)]
    (job,) = new_jobs(server, before)
    assert job.progress.total == 3  # 3 rows sent to the model, not the table's 6
    # the answer column's qual stays here; the source column's goes into the source query
    assert re.search(r"Source Query: SELECT \* FROM \(SELECT id, review FROM reviews WHERE review IS NOT NULL\) AS s "
                     r"WHERE \(s\.id OPERATOR\(pg_catalog\.<\) '4'::integer\)", plan), plan
    assert "Filter: (tone = 'positive'::text)" in plan
    assert "Template: Is this review positive or negative? {review}" in plan and "relserve Kind: classify" in plan


def test_in_lists_null_tests_and_or_are_pushed_too(server, fdw):
    before = set(jobs(server))
    with connect(fdw) as db:
        got = db.execute("SELECT id FROM review_tone WHERE id IN (2, 5) OR id IS NULL ORDER BY id").fetchall()
    assert got == [(2,), (5,)]
    (job,) = new_jobs(server, before)
    assert job.progress.total == 2


def test_explain_analyze_reports_the_relquery(server, fdw):
    with connect(fdw) as db:
        db.execute("CREATE FOREIGN TABLE review_mood (id int, review text, mood text) SERVER relserve OPTIONS ("
                   "source 'SELECT id, review FROM reviews', template 'The mood of {review} in one word:', "
                   "kind 'map', max_tokens '3')")
        db.execute("SELECT count(*) FROM review_mood WHERE id <= 2")  # these two answers are cached now
        before = set(jobs(server))
        dry = "\n".join(r for (r,) in db.execute("EXPLAIN SELECT * FROM review_mood WHERE id <= 3"))
        assert set(jobs(server)) == before  # plain EXPLAIN runs nothing and sends nothing
        plan = "\n".join(r for (r,) in db.execute("EXPLAIN ANALYZE SELECT * FROM review_mood WHERE id <= 3"))
    assert "Window Rows: 2000" in dry and "Rows Sent" not in dry, dry
    fields = dict(re.findall(r"^\s*(relQueries|Rows Sent|Distinct Prompts|Cached Rows|Latency \(s\)|Core Running \(s\)|"
                             r"Estimated \(s\)|Estimated Prompt Tokens|Prompt Tokens): (\S+)", plan, re.M))
    assert fields["relQueries"] == "1", plan
    assert fields["Rows Sent"] == "3", plan
    assert fields["Distinct Prompts"] == "1", plan  # ids 1 and 2 came from the result cache
    assert fields["Cached Rows"] == "2", plan
    assert float(fields["Latency (s)"]) > 0 and "Core Running (s)" in fields
    # issue 47: the estimate the window's relQuery had when it started, beside what it took
    assert float(fields["Estimated (s)"]) > 0, plan
    assert fields["Estimated Prompt Tokens"] == fields["Prompt Tokens"], plan  # the engine's own count


def test_joins_run_one_scan(server, fdw):
    before = set(jobs(server))
    with connect(fdw) as db:
        got = db.execute(
            "SELECT r.id, r.stars, t.tone IS NOT NULL FROM reviews r JOIN review_tone t ON t.id = r.id "
            "WHERE r.stars >= 4 ORDER BY r.id"
        ).fetchall()
    assert got == [(1, 5, True), (3, 4, True), (5, 5, True)]
    assert len(new_jobs(server, before)) == 1  # a rescan replays the answers, it never asks again


def test_the_key_comes_from_the_callers_user_mapping(server, fdw):
    before_alice = set(jobs(server, ROLE_KEYS["alice"]))
    with connect(fdw, "alice") as db:
        assert db.execute("SELECT count(*) FROM review_tone WHERE id = 1").fetchone() == (1,)
        # another role's key is not hers to read
        theirs = db.execute("SELECT umoptions FROM pg_user_mappings WHERE srvname = 'relserve' AND usename = 'postgres'").fetchone()
    assert theirs == (None,)
    assert len(new_jobs(server, before_alice, ROLE_KEYS["alice"])) == 1  # under alice's tenant


def test_a_role_without_a_user_mapping_is_denied(fdw):
    with connect(fdw) as db:
        db.execute("GRANT SELECT ON review_tone TO mallory")
    with connect(fdw, "mallory") as db:
        with pytest.raises(psycopg.errors.UndefinedObject, match=r'user mapping not found for "mallory"'):
            db.execute("SELECT * FROM review_tone")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_that_is_down_gives_a_clear_error(fdw):
    with connect(fdw) as db:
        db.execute(f"CREATE SERVER relserve_down FOREIGN DATA WRAPPER relserve_fdw OPTIONS (url 'http://127.0.0.1:{_closed_port()}')")
        db.execute("CREATE USER MAPPING FOR postgres SERVER relserve_down")
        db.execute("CREATE FOREIGN TABLE tone_down (id int, tone text) SERVER relserve_down OPTIONS ("
                   "source 'SELECT id, review FROM reviews', template 'Tone? {review}', kind 'map')")
        with pytest.raises(psycopg.errors.SqlclientUnableToEstablishSqlconnection,
                           match=r"^relserve_fdw \(map\): cannot reach the relserve server at http://127\.0\.0\.1:\d+") as e:
            db.execute("SELECT * FROM tone_down")
        assert "Is the relserve server running" in (e.value.diag.message_hint or "")


# 300 long answers, scanned while the test holds the engine (``engine.paused``): no row starts
# before the hold ends, after the statement was ended, so how it ends does not depend on how
# fast the engine runs. (The template starts with its placeholder: no shared prefix to warm,
# which would wait for the held engine before the relQuery is submitted.)
LONG_TABLE = (
    "CREATE FOREIGN TABLE stories (n int, story text) SERVER relserve OPTIONS ("
    "source 'SELECT g AS n FROM generate_series(1, 300) g', template '{n}: write a long story about this number.', "
    "kind 'map', max_tokens '64', cache 'false')"
)


def test_statement_timeout_cancels_the_relquery_on_the_server(engine, server, fdw):
    with connect(fdw) as db:
        db.execute(LONG_TABLE)
        db.execute("GRANT SELECT ON stories TO alice")
    before = set(jobs(server, ROLE_KEYS["alice"]))
    with connect(fdw, "alice") as db:
        db.execute("SET statement_timeout = '10s'")
        # (10 s: the request reaches the server well within it on a loaded machine; the engine is held)
        with engine.paused(120), pytest.raises(psycopg.errors.QueryCanceled, match=r"canceling statement due to statement timeout"):
            db.execute("SELECT count(*) FROM stories")
    (job,) = new_jobs(server, before, ROLE_KEYS["alice"])
    job = wait_until_done(server, job.id, key=ROLE_KEYS["alice"])
    assert job.status == "cancelled", job
    answered = job.stats.rows - job.stats.errors
    assert answered == 0, job  # the cancel was queued on the held engine behind the relQuery's start


def test_pg_cancel_backend_cancels_the_relquery_on_the_server(engine, server, fdw):
    before = set(jobs(server, ROLE_KEYS["alice"]))
    with connect(fdw, "alice") as db:
        pid = db.execute("SELECT pg_backend_pid()").fetchone()[0]

        def cancel_once_it_runs() -> None:  # the relQuery is on the server: now cancel the statement
            wait_until(lambda: new_jobs(server, before, ROLE_KEYS["alice"]), "alice's relQuery on the server")
            with connect(fdw, "alice") as other:
                other.execute("SELECT pg_cancel_backend(%s)", [pid])

        canceller = Worker(cancel_once_it_runs, what="the cancel of alice's statement")
        canceller.start()
        try:
            with engine.paused(120), pytest.raises(psycopg.errors.QueryCanceled, match=r"canceling statement due to user request"):
                db.execute("SELECT count(*) FROM stories")
        finally:  # the canceller's own failure (its relQuery never seen) is the cause of any above
            canceller.finish(120)
    (job,) = new_jobs(server, before, ROLE_KEYS["alice"])
    job = wait_until_done(server, job.id, key=ROLE_KEYS["alice"])
    assert job.status == "cancelled", job


@pytest.mark.parametrize(
    ("ddl", "error"),
    [
        ("OPTIONS (source 'SELECT 1 AS x', template '{x}', kind 'summarize')",
         r'option "kind" must be one of map, filter, classify, extract, got "summarize"'),
        ("OPTIONS (source 'SELECT 1 AS x', template '{x}', kind 'map', temprature '0')",
         r'invalid option "temprature"'),
        ("OPTIONS (source 'SELECT 1 AS x', kind 'map')", r'a foreign table needs the option "template"'),
        ("OPTIONS (source 'SELECT 1 AS x', template '{x}', kind 'classify')", r"kind 'classify' needs the option \"labels\""),
        ("OPTIONS (source 'SELECT 1 AS x', template '{x}', kind 'classify', labels 'a,,b')",
         r'option "labels" must be a comma-separated list of labels, none of them empty'),
        ("OPTIONS (source 'SELECT 1 AS x', template '{x}', kind 'extract', json_schema '{\"type\": ')",
         r'option "json_schema" is not valid JSON'),
        ("OPTIONS (source 'SELECT 1 AS x', template '{x}', kind 'map', max_tokens '-3')",
         r'option "max_tokens" must be a whole number from 1 to 1000000, got "-3"'),
        ("OPTIONS (source 'SELECT 1 AS x', template '{x}', kind 'map', labels 'a,b')",
         r"option \"labels\" is only for kind 'classify', not 'map'"),
    ],
)
def test_bad_options_fail_at_create_naming_the_option(fdw, ddl, error):
    with connect(fdw) as db:
        with pytest.raises(psycopg.Error, match=error) as e:
            db.execute(f"CREATE FOREIGN TABLE bad (x int, y text) SERVER relserve {ddl}")
    assert e.value.sqlstate.startswith("HV")  # the FDW error class


def test_bad_server_and_mapping_options_fail_too(fdw):
    with connect(fdw) as db:
        with pytest.raises(psycopg.errors.FdwInvalidAttributeValue, match=r'option "url" must be an http:// or https:// address with a host and port only, got "localhost:8000"'):
            db.execute("CREATE SERVER bad_url FOREIGN DATA WRAPPER relserve_fdw OPTIONS (url 'localhost:8000')")
        # a key on the server would be readable by every role with USAGE on it
        with pytest.raises(psycopg.errors.FdwInvalidOptionName, match=r'invalid option "api_key"') as e:
            db.execute("CREATE SERVER key_on_server FOREIGN DATA WRAPPER relserve_fdw OPTIONS (url 'http://x', api_key 'k')")
        assert e.value.diag.message_hint == "Valid options here are: url."
        with pytest.raises(psycopg.errors.FdwInvalidOptionName, match=r'invalid option "url"') as e:
            db.execute("ALTER USER MAPPING FOR alice SERVER relserve OPTIONS (ADD url 'http://x')")
        assert e.value.diag.message_hint == "Valid options here are: api_key."


def test_columns_missing_from_the_source_and_a_missing_output_column_are_named(fdw):
    with connect(fdw) as db:
        db.execute("CREATE FOREIGN TABLE wrong_cols (id int, title text, tone text) SERVER relserve OPTIONS ("
                   "source 'SELECT id, review FROM reviews', template 'Tone? {review}', kind 'map')")
        with pytest.raises(psycopg.errors.UndefinedColumn, match=r'column "title" of foreign table "wrong_cols" is not among the source query\'s columns'):
            db.execute("SELECT * FROM wrong_cols")
        db.execute("CREATE FOREIGN TABLE wrong_out (id int, tone text) SERVER relserve OPTIONS ("
                   "source 'SELECT id, review FROM reviews', template 'Tone? {review}', kind 'map', output 'mood')")
        with pytest.raises(psycopg.errors.UndefinedColumn, match=r'option "output" names column "mood", which foreign table "wrong_out" does not have'):
            db.execute("SELECT * FROM wrong_out")


def test_answers_stream_so_limit_stops_the_relquery_early(engine, server, fdw):
    """Answers reach the executor as they finish. Two of 300 rows are in the result cache: with a
    qual on the answers (LIMIT cannot go into the source) LIMIT 2 returns them first (a materialized
    scan would wait for all 300 long answers) and ending the scan cancels the other 298 on the server."""
    with connect(fdw) as db:
        db.execute(LONG_TABLE.replace("stories", "stories_cached").replace(", cache 'false'", ""))
        db.execute("SELECT count(*) FROM stories_cached WHERE n <= 2")  # puts two answers in the cache
    before = set(jobs(server))
    with connect(fdw) as db, engine.paused(120):  # only the two cached answers can arrive
        got = db.execute("SELECT n FROM stories_cached WHERE story <> '' LIMIT 2").fetchall()
    assert sorted(got) == [(1,), (2,)]
    (job,) = new_jobs(server, before)
    assert job.progress.total == 300
    # the server learns of the closed stream and aborts the rows in the engine a moment later
    job = wait_until_done(server, job.id)
    assert job.status == "cancelled", job
    assert job.stats.cached_rows == 2 and job.stats.rows - job.stats.errors == 2, job


def test_limit_goes_into_the_source_when_the_scan_rows_are_the_query_rows(server, fdw):
    with connect(fdw) as db:
        plan = "\n".join(r for (r,) in db.execute("EXPLAIN SELECT * FROM review_tone LIMIT 2 OFFSET 1"))
        kept = "\n".join(r for (r,) in db.execute("EXPLAIN SELECT * FROM review_tone WHERE tone = 'x' LIMIT 2"))
        ordered = "\n".join(r for (r,) in db.execute("EXPLAIN SELECT * FROM review_tone ORDER BY id LIMIT 2"))
        before = set(jobs(server))
        assert len(db.execute("SELECT * FROM review_tone WHERE id > 1 LIMIT 2").fetchall()) == 2
    assert "Source Query: SELECT * FROM (SELECT id, review FROM reviews WHERE review IS NOT NULL) AS s LIMIT 3" in plan, plan
    assert "LIMIT" not in kept.split("Source Query:")[1].split("\n")[0], kept  # a qual on the answers stays here
    assert "LIMIT" not in ordered.split("Source Query:")[1].split("\n")[0], ordered  # the sort needs every row
    (job,) = new_jobs(server, before)
    assert job.progress.total == 2


def test_source_values_round_trip_exactly_nan_arrays_bytea_json_and_nulls(server, fdw):
    with connect(fdw) as db:
        db.execute(
            "CREATE FOREIGN TABLE odd (id int, f float8, a int[], b bytea, j jsonb, t text, answer text) SERVER relserve "
            "OPTIONS (source 'SELECT * FROM (VALUES (1, ''NaN''::float8, ARRAY[1,2], ''\\x00ff''::bytea, ''{\"k\": [1]}''::jsonb, ''one''), "
            "(2, ''Infinity'', NULL, NULL, NULL, ''two'')) AS v(id, f, a, b, j, t)', template 'Say {t} and {f}', kind 'map', max_tokens '2')"
        )
        got = db.execute("SELECT id, f::text, a, b, j, t, answer IS NOT NULL FROM odd ORDER BY id").fetchall()
    assert got == [(1, "NaN", [1, 2], b"\x00\xff", {"k": [1]}, "one", True), (2, "Infinity", None, None, None, "two", True)]


def test_an_answer_that_does_not_fit_the_column_type_fails_that_row_only(server, fdw):
    with connect(fdw) as db:
        warnings: list[str] = []
        db.add_notice_handler(lambda d: warnings.append(d.message_primary or ""))
        db.execute("CREATE FOREIGN TABLE tone_num (id int, n int) SERVER relserve OPTIONS ("
                   "source 'SELECT id, review FROM reviews WHERE id <= 2', template 'Tone of {review} in one word:', "
                   "kind 'map', max_tokens '2')")
        rows = db.execute("SELECT id, n FROM tone_num ORDER BY id").fetchall()
        assert rows == [(1, None), (2, None)]
        assert len(warnings) == 2 and all(re.match(r'relserve_fdw: row \d: the answer ".*" is not a valid integer', w) for w in warnings), warnings
        db.execute("ALTER FOREIGN TABLE tone_num OPTIONS (ADD on_error 'raise')")
        with pytest.raises(psycopg.errors.InvalidTextRepresentation, match=r"invalid input syntax for type integer"):
            db.execute("SELECT id, n FROM tone_num")


def test_a_large_source_is_sent_in_windows_each_one_relquery(engine, server, fdw):
    with connect(fdw) as db:
        db.execute("CREATE FOREIGN TABLE tone_windows (id int, review text, tone text) SERVER relserve OPTIONS ("
                   f"source 'SELECT id, review FROM reviews WHERE review IS NOT NULL', template '{TONE}', kind 'classify', "
                   f"labels '{','.join(LABELS)}', max_tokens '4', window_rows '4')")
        before = set(jobs(server))
        plan = "\n".join(r for (r,) in db.execute("EXPLAIN ANALYZE SELECT * FROM tone_windows"))
        got = db.execute("SELECT id, tone FROM tone_windows ORDER BY id").fetchall()
        whole = db.execute("SELECT id, tone FROM review_tone ORDER BY id").fetchall()
    assert got == whole
    assert re.search(r"relQueries: 2\b", plan) and re.search(r"Rows Sent: 6\b", plan), plan
    sizes = sorted(j.progress.total for j in new_jobs(server, before))
    assert sizes == [2, 2, 4, 4, 6]  # 6 rows in windows of 4, twice, and review_tone's one relQuery


def test_the_result_cache_can_be_turned_off_per_session_and_per_call(server, cluster):
    query = "SELECT count(*) FROM llm_map_query('Is {review} good?', 'SELECT review FROM reviews WHERE id <= 2', '{\"max_tokens\": 2}')"
    with connect(cluster) as db:
        db.execute(query)  # now in the cache
        before = set(jobs(server))
        db.execute(query)
        db.execute("SET relserve.cache = off")
        db.execute(query)
        db.execute("RESET relserve.cache")
        db.execute(query.replace('"max_tokens": 2', '"max_tokens": 2, "cache": false'))
    cached = [j.stats.cached_rows for j in sorted(new_jobs(server, before), key=lambda j: j.id)]
    assert sorted(cached) == [0, 0, 2], cached
