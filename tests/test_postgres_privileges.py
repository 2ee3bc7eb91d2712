"""What a less-privileged role reaches through the extension (issue 63), each run as that role
(``mallory``: LOGIN, a tenant key of its own, nothing else) on a real PostgreSQL 15 cluster and a
real server on loopback. The engine is the stand-in (``FakeEngine``): what matters is what
reaches the server, which it records.

1. The operators obey the role's ceiling in ``relserve.budget_limits`` and a budget the role
   lowers (each failed before: the operators took no budget).
3. A caller's settings do not steer another role's ``SECURITY DEFINER`` function: its call reads
   the values its definer chose and its definer's defaults.
7. A role row of ``relserve.budget_limits`` that sets only ``max_seconds`` keeps the ``'*'`` row's
   token ceiling.
"""

from __future__ import annotations

import re

import psycopg
import pytest
from server_fixtures import FakeEngine, running_server
from test_postgres import KEY, ROLE_KEYS, cluster, connect  # noqa: F401 (fixtures)

from relserve.planner.cache import ResultCache

pytestmark = [pytest.mark.postgres]

MALLORY_KEY = "mallory-tenant-key"
SUMMARY = "Summarize these reviews:\\n{review}"


class TenantsEngine(FakeEngine):
    """The stand-in engine, with the tenancy each relQuery came with (``tenancies``, beside
    ``submitted``)."""

    supports_tenancy = True

    def __init__(self) -> None:
        super().__init__()
        self.tenancies: list = []

    def warm_prefix(self, text: str = "", system: str | None = None, tenancy=None) -> int:
        return 0

    def submit(self, rq, tenancy=None):
        self.tenancies.append(tenancy)
        return super().submit(rq)


@pytest.fixture(scope="module")
def fake():
    return TenantsEngine()


@pytest.fixture(scope="module")
def server(fake, tmp_path_factory):
    """The cluster's server (test_postgres.py's fixture of the same name is replaced here), on the
    stand-in engine, with a tenant for mallory."""
    cache = ResultCache(tmp_path_factory.mktemp("pg-cache") / "results.sqlite")
    tenants = {"pg": {"key": KEY}, "mallory": {"key": MALLORY_KEY},
               **{role: {"key": key} for role, key in ROLE_KEYS.items()}}
    with running_server(fake, tenants={"tenants": tenants}, cache=cache) as srv:
        yield srv


@pytest.fixture(scope="module")
def roles(cluster):
    with connect(cluster) as admin:
        admin.execute("INSERT INTO relserve.api_keys (role, api_key) VALUES ('mallory', %s)", [MALLORY_KEY])
        admin.execute("CREATE SCHEMA alice AUTHORIZATION alice")
    return cluster


@pytest.fixture
def ceilings(roles):
    """Rows of relserve.budget_limits for the test, removed after it."""
    def put(*rows: tuple[str, int | None, float | None]) -> None:
        with connect(roles) as admin:
            for row in rows:
                admin.execute("INSERT INTO relserve.budget_limits (role, max_tokens_total, max_seconds) VALUES (%s, %s, %s)", row)
    yield put
    with connect(roles) as admin:
        admin.execute("DELETE FROM relserve.budget_limits")


def budget_of(rq) -> tuple[int | None, float | None]:
    """The tightest token and seconds budget a relQuery's rows spend from."""
    chain = rq.budget.chain if rq.budget is not None else []
    tokens = [a.max_tokens for a in chain if a.max_tokens is not None]
    seconds = [a.max_seconds for a in chain if a.max_seconds is not None]
    return (min(tokens) if tokens else None, min(seconds) if seconds else None)


# ---------------------------------------------------------------- 1. the operators obey the ceilings


OPERATOR_CALLS = {
    "llm_reduce": f"SELECT llm_reduce('{SUMMARY}', review) FROM reviews",
    "llm_topk": "SELECT llm_topk('Is this review enthusiastic? {review}', review, 2) FROM reviews",
    # (another template than llm_reduce's: its answers would come from the result cache)
    "llm_reduce_query": "SELECT * FROM llm_reduce_query('Sum these reviews up:\\n{review}', 'SELECT review FROM reviews', %s)",
}


@pytest.mark.parametrize("operator", sorted(OPERATOR_CALLS))
def test_the_operators_obey_the_roles_ceiling_and_a_budget_it_lowers(roles, ceilings, fake, operator):
    ceilings(("mallory", 100, None))
    sql = OPERATOR_CALLS[operator]
    params = ['{"max_tokens_total": 9999999}'] if "%s" in sql else None
    with connect(roles, "mallory") as db:
        db.execute("SET relserve.max_tokens = 500")
        db.execute("SET relserve.max_tokens_total = 9999999")  # far above the ceiling: changes nothing
        before = len(fake.submitted)
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            db.execute(sql, params)
        assert re.fullmatch(rf"{operator}: refused before starting: it may spend about [\d,]+ engine tokens "
                            r".* the budget is max_tokens_total 100\. .*\(HTTP 422\)", e.value.diag.message_primary)
        assert len(fake.submitted) == before  # nothing reached the engine
        # partial: the operator runs, every relQuery's rows spending from the ceiling
        db.execute("SET relserve.on_budget = partial")
        db.execute(sql, params).fetchall()
        sent = fake.submitted[before:]
        assert sent and all(budget_of(rq) == (100, None) for rq in sent)
        # a budget of its own below the ceiling holds instead (the query form: from its options too)
        db.execute("SET relserve.max_tokens_total = 40")
        db.execute(sql, ['{"max_seconds": 30}'] if params else None).fetchall()
        assert all(budget_of(rq) == (40, 30.0 if params else None) for rq in fake.submitted[before + len(sent):])


# ---------------------------------------------------------------- 3. a definer's call is the definer's


@pytest.fixture
def definer(roles):
    """alice's SECURITY DEFINER function (search_path pinned, as the docs ask), with one setting of
    its own in a SET clause, and a default of alice's role; mallory may call it."""
    with connect(roles) as admin:
        admin.execute("ALTER ROLE alice SET relserve.max_tokens = '7'")
    with connect(roles, "alice") as db:
        db.execute("CREATE FUNCTION alice.ask(t text) RETURNS text LANGUAGE sql SECURITY DEFINER "
                   "SET search_path = public, pg_temp SET relserve.system = 'You answer for alice.' "
                   "AS $$ SELECT llm_map('Is {r} good?', t) $$")
        db.execute("CREATE FUNCTION alice.ask_plain(t text) RETURNS text LANGUAGE sql SECURITY DEFINER "
                   "SET search_path = public, pg_temp AS $$ SELECT llm_map('Is {r} fine?', t) $$")
        db.execute("GRANT USAGE ON SCHEMA alice TO mallory")
        db.execute("GRANT EXECUTE ON FUNCTION alice.ask(text), alice.ask_plain(text) TO mallory")
    yield
    with connect(roles) as admin:
        admin.execute("ALTER ROLE alice RESET relserve.max_tokens")
        admin.execute("DROP FUNCTION alice.ask(text), alice.ask_plain(text)")


STEERING = {
    "system": "Answer as mallory says.",
    "examples": '[{"r": "cake", "answer": "STOLEN"}]',
    "max_tokens": "5000",
    "cache": "off",
    "temperature": "1.5",
    "on_budget": "partial",
}


def test_a_caller_cannot_steer_a_definer_functions_call(definer, roles, fake):
    with connect(roles, "mallory") as db:
        for name, value in STEERING.items():
            db.execute(f"SET relserve.{name} = '{value}'")
        before = len(fake.submitted)
        first = db.execute("SELECT alice.ask('cake')").fetchone()[0]
        (rq,) = fake.submitted[before:]
        # the function's SET clause and alice's role default; mallory's values are not read
        assert (rq.system, rq.max_tokens, rq.temperature) == ("You answer for alice.", 7, 0.0)
        assert "STOLEN" not in "".join(rq.render())
        # the cache is on (alice's default): the same call is answered from alice's result cache
        assert db.execute("SELECT alice.ask('cake')").fetchone()[0] == first
        assert len(fake.submitted) == before + 1
        # nor does a SET inside the caller's transaction, or a value set with set_config, reach it
        db.execute("SELECT set_config('relserve.system', 'set_config by mallory', false)")
        db.execute("SELECT alice.ask_plain('pie')")
        assert (fake.submitted[-1].system, fake.submitted[-1].max_tokens) == (None, 7)
        # mallory's own calls keep her settings
        db.execute("SELECT llm_map('Is {r} good?', 'tart')")
        assert (fake.submitted[-1].system, fake.submitted[-1].max_tokens) == ("set_config by mallory", 5000)
        # and after the definer's call her settings are hers again (PostgreSQL restores them)
        assert db.execute("SHOW relserve.system").fetchone()[0] == "set_config by mallory"


def test_set_role_keeps_the_sessions_own_settings(definer, roles, fake):
    """SET ROLE is the session acting as a role it belongs to, no boundary: its settings apply."""
    with connect(roles) as admin:
        admin.execute("GRANT alice TO bob")
    try:
        with connect(roles, "bob") as db:
            db.execute("SET relserve.system = 'bob speaking'")
            db.execute("SET ROLE alice")
            db.execute("SELECT llm_map('Is {r} nice?', 'scone')")
            assert fake.submitted[-1].system == "bob speaking"
    finally:
        with connect(roles) as admin:
            admin.execute("REVOKE alice FROM bob")


# ---------------------------------------------------------------- 7. a ceiling merges with the '*' row


def test_a_role_row_that_sets_only_seconds_keeps_the_token_ceiling_of_every_role(roles, ceilings, fake):
    ceilings(("mallory", None, 20.0), ("*", 300, None))
    with connect(roles, "mallory") as db:
        assert db.execute("SELECT own, max_tokens_total, max_seconds FROM relserve.my_budget_limit ORDER BY own DESC"
                          ).fetchall() == [(True, None, 20.0), (False, 300, None)]
        db.execute("SET relserve.on_budget = partial")
        before = len(fake.submitted)
        db.execute("SELECT * FROM llm_map_query('Is {review} good?', 'SELECT review FROM reviews')").fetchall()
        (rq,) = fake.submitted[before:]
        assert budget_of(rq) == (300, 20.0)


# ---------------------------------------------------------------- 6. a policy's calls stay out of the reader's caches


HIDDEN = "HIDDEN: the merger closes in March"
# the stand-in engine echoes its prompt: the policy keeps the rows whose answer does not say HIDDEN
POLICY = "llm_map('Say ok to {b}', body) NOT LIKE '%HIDDEN%'"


@pytest.fixture
def notes(roles):
    with connect(roles) as admin:
        admin.execute("CREATE TABLE notes (id int, body text)")
        admin.execute("INSERT INTO notes VALUES (1, 'lunch at noon'), (2, %s), (3, 'the printer is fixed')", [HIDDEN])
        admin.execute("ALTER TABLE notes ENABLE ROW LEVEL SECURITY")
        admin.execute(f"CREATE POLICY readable ON notes USING ({POLICY})")
        admin.execute("GRANT SELECT ON notes TO mallory")
    yield
    with connect(roles) as admin:
        admin.execute("DROP TABLE notes")


def probe(db, text: str) -> int:
    """What mallory's own estimate of the policy's prompt over ``text`` says the result cache holds."""
    plan = db.execute("SELECT llm_estimate_query('Say ok to {b}', 'SELECT ' || quote_literal(%s) || '::text AS b')",
                      [text]).fetchone()[0]
    return plan["cached_rows"]


@pytest.mark.parametrize("batching", ["on", "off"])
def test_a_policys_calls_over_hidden_rows_stay_out_of_the_readers_caches(notes, roles, fake, batching):
    with connect(roles, "mallory") as db:
        db.execute(f"SET relserve.batch_calls = {batching}")
        before = len(fake.submitted)
        assert db.execute("SELECT id FROM notes ORDER BY id").fetchall() == [(1,), (3,)]
        # the policy's relQuery carried every row, in a namespace of its own (not mallory's)
        (rq,) = fake.submitted[before:]
        assert any(HIDDEN in p for p in rq.render())
        salt = fake.tenancies[before].cache_salt
        assert salt.startswith("tenant:mallory:isolated:") and fake.tenancies[before].tenant == "mallory"
        # mallory's guess of the hidden text finds nothing in her result cache (nor does a right
        # guess of a row she may read: the policy's answers are nobody's)
        assert probe(db, HIDDEN) == probe(db, "HIDDEN: the merger closes in April") == probe(db, "lunch at noon") == 0
        # the next statement's policy calls get a namespace of their own again
        db.execute("SELECT id FROM notes").fetchall()
        assert fake.tenancies[-1].cache_salt.startswith("tenant:mallory:isolated:") and fake.tenancies[-1].cache_salt != salt
        # her own calls keep her caches: the same prompt twice is answered from her result cache
        own = f"a note of her own, batching {batching}"
        db.execute("SELECT llm_map('Say ok to {b}', %s)", [own])
        assert probe(db, own) == 1


# ---------------------------------------------------------------- a view over a foreign table is its owner's


@pytest.fixture
def alices_view(roles, server):
    """alice's foreign table (her key in her user mapping) and a view of hers over it that mallory
    may read; alice's role default sets max_tokens, and her ceiling is 100 tokens."""
    with connect(roles) as admin:
        admin.execute(f"CREATE SERVER view_srv FOREIGN DATA WRAPPER relserve_fdw OPTIONS (url '{server.url}')")
        admin.execute(f"CREATE USER MAPPING FOR alice SERVER view_srv OPTIONS (api_key '{ROLE_KEYS['alice']}')")
        admin.execute("GRANT USAGE ON FOREIGN SERVER view_srv TO alice")
        admin.execute("ALTER ROLE alice SET relserve.max_tokens = '7'")
        admin.execute("INSERT INTO relserve.budget_limits (role, max_tokens_total, max_seconds) VALUES ('alice', 100, NULL)")
    with connect(roles, "alice") as db:
        db.execute("CREATE TABLE alice.notes (id int, body text)")
        db.execute("INSERT INTO alice.notes VALUES (1, 'the parcel came late'), (2, 'all fine')")
        db.execute("CREATE FOREIGN TABLE alice.note_tone (id int, body text, tone text) SERVER view_srv OPTIONS "
                   "(source 'SELECT id, body FROM alice.notes', template 'Tone of this note? {body}', kind 'map')")
        db.execute("CREATE VIEW alice.v_tone AS SELECT id, tone FROM alice.note_tone")
        db.execute("GRANT USAGE ON SCHEMA alice TO mallory")
        # (a foreign table's source runs with the reader's rights, as a view's functions do)
        db.execute("GRANT SELECT ON alice.v_tone, alice.notes TO mallory")
    yield
    with connect(roles) as admin:
        admin.execute("DROP VIEW alice.v_tone")
        admin.execute("DROP FOREIGN TABLE alice.note_tone")
        admin.execute("DROP TABLE alice.notes")
        admin.execute("DROP USER MAPPING FOR alice SERVER view_srv")
        admin.execute("DROP SERVER view_srv")
        admin.execute("ALTER ROLE alice RESET relserve.max_tokens")
        admin.execute("DELETE FROM relserve.budget_limits")


def test_a_foreign_table_read_through_its_owners_view_is_the_owners_call(alices_view, roles, fake):
    """The view reads alice's foreign table with alice's rights, so its calls go out with alice's
    key (PostgreSQL's rule, as postgres_fdw's); they read alice's settings and ceiling too, not
    those of the reader, who could otherwise spend alice's tenant past her ceiling with a system
    message of her own (found by an audit, 7 Dec)."""
    with connect(roles, "mallory") as db:
        for name, value in STEERING.items():
            db.execute(f"SET relserve.{name} = '{value}'")
        db.execute("SET relserve.max_tokens_total = 9999999")
        before = len(fake.submitted)
        rows = db.execute("SELECT id, tone FROM alice.v_tone ORDER BY id").fetchall()
        (rq,) = fake.submitted[before:]
        assert [r[0] for r in rows] == [1, 2]
        assert (rq.system, rq.max_tokens, rq.temperature, budget_of(rq)) == (None, 7, 0.0, (100, None))
        assert "STOLEN" not in "".join(rq.render())
        # her own calls keep her settings
        db.execute("SELECT llm_map('Is {r} good?', 'tart')")
        assert (fake.submitted[-1].system, fake.submitted[-1].max_tokens) == ("Answer as mallory says.", 5000)
    with connect(roles, "alice") as db:  # alice reading her own table: her session, as always
        db.execute("SET relserve.system = 'alice here'")
        db.execute("SELECT id, tone FROM alice.note_tone").fetchall()
        assert (fake.submitted[-1].system, fake.submitted[-1].max_tokens, budget_of(fake.submitted[-1])) == (
            "alice here", 7, (100, None))


# ---------------------------------------------------------------- a view's source is read in its owner's search_path


TONE = "Tone of this review? {review}"
ALICES = ["I loved every minute of it.", "Boring and far too long."]  # public.reviews, ids 1 and 2
MALLORYS = ["mallory's first row", "mallory's second row"]


@pytest.fixture
def unqualified_source(roles, server):
    """alice's foreign table whose source names ``reviews`` unqualified (public.reviews, the
    template's), a view of hers over it that mallory may read, and mallory's own schema (named
    ``mallory``: her "$user") with a ``reviews`` of her own, and a foreign table of hers with the
    same source on her own key."""
    with connect(roles) as admin:
        admin.execute(f"CREATE SERVER path_srv FOREIGN DATA WRAPPER relserve_fdw OPTIONS (url '{server.url}')")
        admin.execute(f"CREATE USER MAPPING FOR alice SERVER path_srv OPTIONS (api_key '{ROLE_KEYS['alice']}')")
        admin.execute(f"CREATE USER MAPPING FOR mallory SERVER path_srv OPTIONS (api_key '{MALLORY_KEY}')")
        admin.execute("GRANT USAGE ON FOREIGN SERVER path_srv TO alice, mallory")
        admin.execute("CREATE SCHEMA mallory AUTHORIZATION mallory")
    source = "SELECT id, review FROM reviews WHERE id <= 2"
    with connect(roles, "alice") as db:
        db.execute(f"CREATE FOREIGN TABLE alice.review_tone (id int, review text, tone text) SERVER path_srv OPTIONS "
                   f"(source '{source}', template '{TONE}', kind 'map')")
        db.execute("CREATE VIEW alice.v_review_tone AS SELECT id, review, tone FROM alice.review_tone")
        db.execute("GRANT USAGE ON SCHEMA alice TO mallory")
        db.execute("GRANT SELECT ON alice.v_review_tone TO mallory")
    with connect(roles, "mallory") as db:
        db.execute("CREATE TABLE mallory.reviews (id int, review text)")
        db.execute("INSERT INTO mallory.reviews VALUES (1, %s), (2, %s)", MALLORYS)
        db.execute(f"CREATE FOREIGN TABLE mallory.my_tone (id int, review text, tone text) SERVER path_srv OPTIONS "
                   f"(source '{source}', template '{TONE}', kind 'map')")
    yield
    with connect(roles) as admin:
        admin.execute("DROP VIEW alice.v_review_tone")
        admin.execute("DROP FOREIGN TABLE alice.review_tone")
        admin.execute("DROP SCHEMA mallory CASCADE")
        admin.execute("DROP USER MAPPING FOR alice SERVER path_srv")
        admin.execute("DROP USER MAPPING FOR mallory SERVER path_srv")
        admin.execute("DROP SERVER path_srv")
        admin.execute("ALTER ROLE alice RESET search_path")


def tones(rows: list) -> list[tuple]:
    """(id, review, whether the answer is the echo of that review's prompt)."""
    return [(i, review, tone is not None and review in tone) for i, review, tone in rows]


def test_a_views_source_is_read_in_its_owners_search_path_not_the_readers(unqualified_source, roles, fake):
    """Through alice's view, the foreign table's source ``FROM reviews`` is read in alice's
    search_path (her role's default, else the server's "$user", public with "$user" = alice, and
    pg_temp last), as the names of a view's own SQL are bound by its owner: mallory, with a
    ``reviews`` of her own first in her path (or her "$user" schema, or a temporary table), must
    not have alice's key answer her rows (found by an audit, 7 Dec). Before, the source was
    parsed in mallory's search_path and alice's tenant answered mallory's rows."""
    want = [(1, ALICES[0], True), (2, ALICES[1], True)]
    with connect(roles, "mallory") as db:
        db.execute("SET search_path = mallory, public")
        before = len(fake.submitted)
        rows = db.execute("SELECT id, review, tone FROM alice.v_review_tone ORDER BY id").fetchall()
        (rq,) = fake.submitted[before:]
        assert sorted(rq.render()) == sorted(TONE.format(review=r) for r in ALICES)
        assert fake.tenancies[before].tenant == "alice"
        assert tones(rows) == want
        # her default path ("$user", public: her schema first) is not alice's "$user" either
        db.execute("RESET search_path")
        assert tones(db.execute("SELECT id, review, tone FROM alice.v_review_tone ORDER BY id").fetchall()) == want
        # nor does a temporary table of hers come first (pg_temp is searched last)
        db.execute("CREATE TEMP TABLE reviews (id int, review text)")
        db.execute("INSERT INTO reviews VALUES (1, %s), (2, %s)", MALLORYS)
        assert tones(db.execute("SELECT id, review, tone FROM alice.v_review_tone ORDER BY id").fetchall()) == want
        # her search_path is hers again after the scan
        assert db.execute("SHOW search_path").fetchone()[0] == '"$user", public'
    # alice's role default search_path is the one her view's source is read in
    with connect(roles) as admin:  # (a default that names mallory's schema, to tell it apart)
        admin.execute("ALTER ROLE alice SET search_path = mallory, public")
    with connect(roles, "mallory") as db:
        db.execute("SET search_path = public")
        assert tones(db.execute("SELECT id, review, tone FROM alice.v_review_tone ORDER BY id").fetchall()) == [
            (1, MALLORYS[0], True), (2, MALLORYS[1], True)]


def test_a_foreign_table_read_directly_reads_its_source_in_the_readers_search_path(unqualified_source, roles, fake):
    """Read directly (no other role's view), a foreign table's source is the reader's query and is
    read in the reader's search_path, as before."""
    with connect(roles, "mallory") as db:
        db.execute("SET search_path = mallory, public")
        before = len(fake.submitted)
        rows = db.execute("SELECT id, review, tone FROM my_tone ORDER BY id").fetchall()
        (rq,) = fake.submitted[before:]
        assert sorted(rq.render()) == sorted(TONE.format(review=r) for r in MALLORYS)
        assert fake.tenancies[before].tenant == "mallory"
        assert tones(rows) == [(1, MALLORYS[0], True), (2, MALLORYS[1], True)]
        db.execute("SET search_path = public, mallory")
        assert tones(db.execute("SELECT id, review, tone FROM mallory.my_tone ORDER BY id").fetchall()) == [
            (1, ALICES[0], True), (2, ALICES[1], True)]
