"""The model cascade in PostgreSQL (issue 46): the ``cascade`` option of a ``*_query`` call, the
``relserve.cascade`` session setting (for those calls and the batch node's scalar calls), its
``0`` over a server's default, a bad value, a role's own session, and a row the engine fails.

The real cluster and extension of test_postgres.py; behind its relserve server the rule engine and
embedder of tests/cascade_doubles.py, with the policy's sizes at about a seventh as
test_cascade_engine.py sets them (a cascade from 400 rows, 100 training and 150 audit rows; the
logic is the same, relserve/cascade/policy.py only sizes it). ``RuleEngine.submitted`` shows which
rows the LLM got: 250 of the 450 when the cascade runs, every row when it does not.
"""

from __future__ import annotations

import contextlib
import json
import re

import psycopg
import pytest
from cascade_doubles import RuleEmbedder, RuleEngine, own_text, reviews
from server_fixtures import running_server
from test_postgres import KEY, ROLE_KEYS, cluster, connect  # noqa: F401 (fixtures)

from relserve.cascade import embedding, policy

pytestmark = [pytest.mark.postgres]

MIN_ROWS, TRAIN, AUDIT = 400, 100, 150
SAMPLE = TRAIN + AUDIT
N = 450  # over the 400 rows a cascade needs: 100 training + 150 audit rows, 200 for the proxy
TEMPLATE = "Is it worth it? Review: {review}"
SOURCE = "SELECT review FROM cascade_reviews ORDER BY id"
BATCHED = f"SELECT id, llm_filter('{TEMPLATE}', review) FROM cascade_reviews ORDER BY id"
TENANTS = {"tenants": {"pg": {"key": KEY}, **{role: {"key": key} for role, key in ROLE_KEYS.items()}}}
#: every row answered by the rule (every third review is 'good'), as (ord, answer, error)
RULE = [(i + 1, i % 3 == 0, None) for i in range(N)]
#: relserve.validation.cascade's message, after the name of the setting or option
RULE_TEXT = ("must be an agreement target between 0.5 and 0.999 (0.95: 95% of the rows answered as the LLM "
             "would), or 0 for off")


@pytest.fixture(scope="module", autouse=True)
def small_cascades():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(policy, "MIN_ROWS", MIN_ROWS)
        for name, value in (("MIN_TRAIN", TRAIN), ("MAX_TRAIN", TRAIN), ("MIN_AUDIT", AUDIT), ("MAX_AUDIT", AUDIT)):
            mp.setattr(policy, name, value)
        yield


@pytest.fixture(scope="module")
def rule_embedder():
    # (no result cache to keep apart: the servers here have none; the batch node's estimates
    # count tokens with the default model's tokenizer, from the real relserve home)
    previous = embedding.use_embedder(RuleEmbedder())
    yield
    embedding.use_embedder(previous)


@pytest.fixture(scope="module")
def rule_engine():
    return RuleEngine()


@pytest.fixture(scope="module")
def server(rule_engine, rule_embedder):
    """The cluster's server (test_postgres.py's fixture of the same name is replaced here), with
    no server default of its own and no result cache: every call runs."""
    with running_server(rule_engine, tenants=TENANTS, cache=False) as srv:
        yield srv


@pytest.fixture(scope="module")
def table(cluster):
    with connect(cluster) as db:
        db.execute("CREATE TABLE cascade_reviews (id int PRIMARY KEY, review text)")
        db.execute("GRANT SELECT ON cascade_reviews TO PUBLIC")
        with db.cursor() as cur:
            cur.executemany("INSERT INTO cascade_reviews VALUES (%s, %s)", list(enumerate(reviews(N))))
    return "cascade_reviews"


@pytest.fixture
def eng(rule_engine, table):
    """The module's rule engine with nothing submitted yet and no row failing."""
    rule_engine.submitted.clear()
    rule_engine.rel_ids.clear()
    rule_engine.fails = None
    yield rule_engine
    rule_engine.fails = None


def filter_query(db, options: dict | None = None) -> list[tuple]:
    given = "" if options is None else f", '{json.dumps(options)}'"
    sql = f"SELECT ord, answer, error FROM llm_filter_query('{TEMPLATE}', '{SOURCE}'{given}) ORDER BY ord"
    return db.execute(sql).fetchall()


def noticed(db) -> list[str]:
    notices: list[str] = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    return notices


def sent_rows(prompts: list[str]) -> list[int]:
    """The cascade_reviews ids of the prompts the engine got."""
    return [int(re.match(r" item (\d+) ", own_text(p)).group(1)) for p in prompts]


def assert_cascade_notice(notice: str, name: str) -> None:
    """The cascade's figures over the 450 rows: what EXPLAIN ANALYZE shows on the other surfaces."""
    assert notice.startswith(f"{name}: model cascade\n"), notice
    for line in (r"cascade\s+target 0\.95 ", r"sample\s+100\s+rows the LLM answered to train the proxy",
                 r"audit\s+150\s+rows the LLM answered to check it", r"proxy rows\s+200\s+answered by the proxy",
                 r"estimated agreement\s+100\.00%", r"LLM rows\s+250\s+of 450 \(0 after the proxy\)"):
        assert re.search(line, notice), (line, notice)


@contextlib.contextmanager
def served_by(cluster, srv):
    """The cluster's calls go to ``srv`` for the block (the superuser's relserve.config), with the
    postgres role's key stored for it (a key is sent only to the server it was stored for)."""
    with connect(cluster) as admin:
        (before,) = admin.execute("SELECT value FROM relserve.config WHERE name = 'url'").fetchone()
        admin.execute("UPDATE relserve.config SET value = %s WHERE name = 'url'", [srv.url])
        admin.execute("INSERT INTO relserve.api_keys (role, api_key, url) VALUES ('postgres', %s, %s)", [KEY, srv.url])
    try:
        yield
    finally:
        with connect(cluster) as admin:
            admin.execute("UPDATE relserve.config SET value = %s WHERE name = 'url'", [before])
            admin.execute("DELETE FROM relserve.api_keys WHERE url = %s", [srv.url])


def test_a_query_call_with_the_cascade_option_answers_as_the_llm_and_notices_the_figures(cluster, eng):
    with connect(cluster) as db:
        notices = noticed(db)
        got = filter_query(db, {"cascade": 0.95})
    assert got == RULE
    # the LLM got the 250 sample rows, each once, as one relQuery; the proxy answered the other 200
    assert [len(p) for p in eng.submitted] == [SAMPLE] and len(set(sent_rows(eng.submitted[0]))) == SAMPLE
    (notice,) = [n for n in notices if "model cascade" in n]
    assert_cascade_notice(notice, "llm_filter_query")


def test_the_session_setting_applies_to_query_calls_and_to_batched_scalar_calls(cluster, eng):
    with connect(cluster) as db:
        notices = noticed(db)
        db.execute("SET relserve.cascade = 0.95")
        assert filter_query(db) == RULE
        assert [len(p) for p in eng.submitted] == [SAMPLE]
        # the batch node's windows are relQueries: one of 450 rows runs as a cascade
        db.execute("SET relserve.batch_window = 450")
        plan = "\n".join(r for (r,) in db.execute(f"EXPLAIN {BATCHED}"))
        batched = db.execute(BATCHED).fetchall()
        assert [len(p) for p in eng.submitted] == [SAMPLE, SAMPLE]
        # windows of 300 rows are under the 400 a cascade needs: every row to the LLM
        db.execute("SET relserve.batch_window = 300")
        assert db.execute(BATCHED).fetchall() == batched
        assert [len(p) for p in eng.submitted] == [SAMPLE, SAMPLE, 300, 150]
        # the call's own 0 turns the session's cascade off
        assert filter_query(db, {"cascade": 0}) == RULE
    assert "Custom Scan (relserve batch)" in plan and "Window Rows: 450" in plan, plan
    assert batched == [(i, i % 3 == 0) for i in range(N)]
    assert [len(p) for p in eng.submitted] == [SAMPLE, SAMPLE, 300, 150, N]
    cascades = [n for n in notices if "model cascade" in n]
    assert len(cascades) == 2
    assert_cascade_notice(cascades[0], "llm_filter_query")
    assert_cascade_notice(cascades[1], "llm_filter")


def test_zero_turns_the_servers_default_off_for_the_session(cluster, eng):
    defaulting = RuleEngine()
    with running_server(defaulting, cascade=0.9, tenants=TENANTS, cache=False) as srv, served_by(cluster, srv):
        with connect(cluster) as db:
            assert filter_query(db) == RULE  # the server's default: a cascade
            assert [len(p) for p in defaulting.submitted] == [SAMPLE]
            db.execute("SET relserve.cascade = 0")
            assert filter_query(db) == RULE
            db.execute("SET relserve.batch_window = 450")
            assert db.execute(BATCHED).fetchall() == [(i, i % 3 == 0) for i in range(N)]
    # with the setting at 0, every row of both calls went to the LLM
    assert [len(p) for p in defaulting.submitted] == [SAMPLE, N, N]
    assert eng.submitted == []


def test_a_bad_value_is_refused_by_relserves_rule_naming_the_setting(cluster, eng):
    with connect(cluster, "alice") as db:
        for value, shown in (("0.3", "0.3"), ("'abc'", "'abc'"), ("1", "1.0")):
            db.execute(f"SET relserve.cascade = {value}")  # kept as text: relserve's rule checks it at the call
            for sql in (f"SELECT * FROM llm_filter_query('{TEMPLATE}', '{SOURCE}')", BATCHED):
                with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
                    db.execute(sql)
                assert e.value.diag.message_primary == f"relserve.cascade {RULE_TEXT}; got {shown}"
        db.execute("RESET relserve.cascade")
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            filter_query(db, {"cascade": 0.3})
        assert e.value.diag.message_primary == f"llm_filter_query: option cascade {RULE_TEXT}; got 0.3"
    assert eng.submitted == []  # nothing was sent


def test_a_role_sets_it_for_its_own_session_only(cluster, eng):
    with connect(cluster, "alice") as alice, connect(cluster, "bob") as bob:
        alice.execute("SET relserve.cascade = 0.95")
        assert alice.execute("SHOW relserve.cascade").fetchone() == ("0.95",)
        assert bob.execute("SHOW relserve.cascade").fetchone() == ("",)
        assert filter_query(alice) == RULE
        assert filter_query(bob) == RULE
        # another role's default is not alice's to set
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            alice.execute("ALTER ROLE bob SET relserve.cascade = 0.95")
    # alice's call ran as a cascade, bob's sent every row to the LLM
    assert [len(p) for p in eng.submitted] == [SAMPLE, N]
    with connect(cluster, "alice") as again:
        assert again.execute("SHOW relserve.cascade").fetchone() == ("",)


def test_a_row_the_engine_fails_loses_no_other_row(cluster, eng):
    with connect(cluster) as db:
        notices = noticed(db)
        db.execute("SET relserve.cascade = 0.95")
        assert filter_query(db) == RULE
        sample = sent_rows(eng.submitted[0])
        bad = min(sample)  # a row the LLM answers (the proxy's rows never reach the engine)
        eng.fails = lambda text: text.startswith(f" item {bad} ")
        got = filter_query(db)
        with pytest.raises(psycopg.errors.DataException) as e:
            filter_query(db, {"on_error": "raise"})
        db.execute("SET relserve.batch_window = 450")
        batched = db.execute(BATCHED).fetchall()
    # the same sample every time (the cascade's seed), so the same row fails in each call
    assert [sent_rows(p) for p in eng.submitted] == [sample] * 4
    failed = "engine: row too long for the model"
    assert got == [(bad + 1, None, failed) if i == bad else r for i, r in enumerate(RULE)]
    assert e.value.diag.message_primary == f"llm_filter_query: row {bad + 1}: {failed}"
    assert batched == [(i, None if i == bad else i % 3 == 0) for i in range(N)]
    assert f"llm_filter: NULL for this row: {failed}" in notices


def test_a_foreign_table_takes_the_cascade_as_a_table_option(cluster, server, eng):
    with connect(cluster) as db:
        notices = noticed(db)
        db.execute(f"CREATE SERVER cascade_srv FOREIGN DATA WRAPPER relserve_fdw OPTIONS (url '{server.url}')")
        db.execute(f"CREATE USER MAPPING FOR postgres SERVER cascade_srv OPTIONS (api_key '{KEY}')")
        db.execute("CREATE FOREIGN TABLE worth_it (id int, ok boolean) SERVER cascade_srv OPTIONS ("
                   f"source 'SELECT id, review FROM cascade_reviews', template '{TEMPLATE}', kind 'filter', "
                   "window_rows '450', cascade '0.95')")
        got = sorted(db.execute("SELECT id, ok FROM worth_it").fetchall())
        db.execute("ALTER FOREIGN TABLE worth_it OPTIONS (SET cascade '0.3')")
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            db.execute("SELECT id, ok FROM worth_it").fetchall()
    assert got == [(i, i % 3 == 0) for i in range(N)]
    assert [len(p) for p in eng.submitted] == [SAMPLE]
    (notice,) = [n for n in notices if "model cascade" in n]
    assert_cascade_notice(notice, "relserve_fdw (filter)")
    assert e.value.diag.message_primary == f"relserve_fdw (filter): option cascade {RULE_TEXT}; got 0.3"
