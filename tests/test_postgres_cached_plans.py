"""Cached plans (a ``PREPARE``d statement, one a driver prepares, a PL/pgSQL function's statements)
on a real PostgreSQL 15 cluster and a real server on the stand-in engine (``FakeEngine``), which
records each relQuery's tenancy: whose key it came with, and whether it went out isolated.

A plan is made once and run many times, as whichever role is current then. What the extension
decides while planning (whether to batch, which calls are a policy's and go out isolated, the
templates, a foreign table's options) must not carry the planning role's key, tenant, ceiling or
settings into another role's run:

1. A statement prepared by one role and run by another (``SET ROLE``, ``SET SESSION
   AUTHORIZATION``), both ways, sends the running role's key and obeys its ceiling.
2. A row-level security policy's calls: PostgreSQL plans again when the role changes, so a plan
   made by a role the policy does not apply to applies it, isolated, for a role it does apply to.
3. A PL/pgSQL function's cached statements: the caller's key for a SECURITY INVOKER function, the
   owner's for a SECURITY DEFINER one, whoever called it first.
4. A caller's settings do not steer how a definer function's calls are batched (``batch_calls``,
   ``batch_window``; read by the C part), as they do not steer its other settings; nor does a
   reader's ``on_error`` a foreign table read through another role's view (failed before).
5. A foreign table's options changed after the plan was made, and the settings read when the
   statement runs (a prepared statement and ``EXPLAIN EXECUTE`` see a later ``SET``).
"""

from __future__ import annotations

import pytest
from server_fixtures import running_server
from test_postgres import KEY, ROLE_KEYS, cluster, connect  # noqa: F401 (fixtures)
from test_postgres_privileges import TenantsEngine, budget_of

from relserve.planner.cache import ResultCache

pytestmark = [pytest.mark.postgres]

MALLORY_KEY = "mallory-tenant-key"
CEILING = 100000  # mallory's max_tokens_total in relserve.budget_limits
HIDDEN = "HIDDEN: the merger closes in March"
# the stand-in engine echoes its prompt: the policy keeps the rows whose answer does not say HIDDEN
POLICY = "llm_map('Say ok to {b}', body) NOT LIKE '%HIDDEN%'"
TWO_REVIEWS = [("echo: {} I loved every minute of it.",), ("echo: {} Boring and far too long.",)]


@pytest.fixture(scope="module")
def fake():
    return TenantsEngine()


@pytest.fixture(scope="module")
def server(fake, tmp_path_factory):
    """The cluster's server (test_postgres.py's fixture of the same name is replaced here)."""
    cache = ResultCache(tmp_path_factory.mktemp("pg-cache") / "results.sqlite")
    tenants = {"pg": {"key": KEY}, "mallory": {"key": MALLORY_KEY},
               **{role: {"key": key} for role, key in ROLE_KEYS.items()}}
    with running_server(fake, tenants={"tenants": tenants}, cache=cache) as srv:
        yield srv


@pytest.fixture(scope="module")
def roles(cluster, server):
    """mallory's key and ceiling, a table with an llm policy, alice's schema, a foreign table."""
    with connect(cluster) as admin:
        admin.execute("INSERT INTO relserve.api_keys (role, api_key) VALUES ('mallory', %s)", [MALLORY_KEY])
        admin.execute("INSERT INTO relserve.budget_limits (role, max_tokens_total) VALUES ('mallory', %s)", [CEILING])
        admin.execute("CREATE TABLE notes (id int, body text)")
        admin.execute("INSERT INTO notes VALUES (1, 'lunch at noon'), (2, %s), (3, 'the printer is fixed')", [HIDDEN])
        admin.execute("ALTER TABLE notes ENABLE ROW LEVEL SECURITY")
        admin.execute(f"CREATE POLICY readable ON notes USING ({POLICY})")
        admin.execute("GRANT SELECT ON notes TO mallory")
        admin.execute("CREATE SCHEMA alice AUTHORIZATION alice")
        admin.execute("GRANT USAGE ON SCHEMA alice TO mallory")
        admin.execute(f"CREATE SERVER rs FOREIGN DATA WRAPPER relserve_fdw OPTIONS (url '{server.url}')")
        for role, key in (("postgres", KEY), ("mallory", MALLORY_KEY), ("alice", ROLE_KEYS["alice"])):
            admin.execute(f"CREATE USER MAPPING FOR {role} SERVER rs OPTIONS (api_key '{key}')")
    return cluster


def sent(fake, mark: int) -> list[tuple[str, bool, tuple, int | None]]:
    """Each relQuery the engine got since ``mark``: (tenant, isolated, budget, max_tokens)."""
    return [(t.tenant, ":isolated:" in (t.cache_salt or ""), budget_of(rq), rq.max_tokens)
            for t, rq in zip(fake.tenancies[mark:], fake.submitted[mark:])]


def answers(prefix: str) -> list[tuple[str]]:
    return [(row.format(prefix),) for (row,) in TWO_REVIEWS]


# ---------------------------------------------------------------- 1. prepared by one role, run by another


@pytest.mark.parametrize("become, back", [("SET ROLE mallory", "RESET ROLE"),
                                          ("SET SESSION AUTHORIZATION mallory", "RESET SESSION AUTHORIZATION")])
def test_a_statement_prepared_by_one_role_runs_with_the_key_and_ceiling_of_the_role_running_it(roles, fake, become, back):
    how = become.split()[1].lower()
    with connect(roles) as db:
        db.execute(f"PREPARE by_postgres_{how} AS SELECT llm_map('By postgres {how} {{r}}', review) FROM reviews "
                   "WHERE id <= 2 ORDER BY id")
        mark = len(fake.submitted)
        assert db.execute(f"EXECUTE by_postgres_{how}").fetchall() == answers(f"By postgres {how}")
        assert sent(fake, mark) == [("pg", False, (None, None), 64)]
        db.execute(become)
        mark = len(fake.submitted)
        assert db.execute(f"EXECUTE by_postgres_{how}").fetchall() == answers(f"By postgres {how}")
        assert sent(fake, mark) == [("mallory", False, (CEILING, None), 64)]
        # the reverse: prepared by mallory, run by the superuser: its key, no ceiling of mallory's
        db.execute(f"PREPARE by_mallory_{how} AS SELECT llm_map('By mallory {how} {{r}}', review) FROM reviews "
                   "WHERE id <= 2 ORDER BY id")
        db.execute(back)
        mark = len(fake.submitted)
        assert db.execute(f"EXECUTE by_mallory_{how}").fetchall() == answers(f"By mallory {how}")
        assert sent(fake, mark) == [("pg", False, (None, None), 64)]


# ---------------------------------------------------------------- 2. a policy's calls


@pytest.mark.parametrize("batching", ["on", "off"])
def test_a_policy_plan_made_for_a_role_it_does_not_apply_to_applies_it_isolated_for_one_it_does(roles, fake, batching):
    with connect(roles) as db:
        db.execute(f"SET relserve.batch_calls = {batching}")
        db.execute("PREPARE notes_by_postgres AS SELECT id FROM notes ORDER BY id")
        mark = len(fake.submitted)
        assert db.execute("EXECUTE notes_by_postgres").fetchall() == [(1,), (2,), (3,)]  # a superuser: no policy
        assert sent(fake, mark) == []
        db.execute("SET ROLE mallory")
        assert "relserve batch" in "\n".join(r for (r,) in db.execute("EXPLAIN EXECUTE notes_by_postgres"))
        mark = len(fake.submitted)
        assert db.execute("EXECUTE notes_by_postgres").fetchall() == [(1,), (3,)]
        assert sent(fake, mark) == [("mallory", True, (CEILING, None), 64)]
        db.execute("PREPARE notes_by_mallory AS SELECT id FROM notes ORDER BY id")
        db.execute("RESET ROLE")
        mark = len(fake.submitted)
        assert db.execute("EXECUTE notes_by_mallory").fetchall() == [(1,), (2,), (3,)]
        assert sent(fake, mark) == []


# ---------------------------------------------------------------- 3. PL/pgSQL functions


@pytest.fixture(scope="module")
def functions(roles):
    with connect(roles) as admin:
        admin.execute("CREATE FUNCTION public.read_notes() RETURNS SETOF int LANGUAGE plpgsql AS "
                      "$$ BEGIN RETURN QUERY SELECT id FROM notes ORDER BY id; END $$")
        admin.execute("CREATE FUNCTION public.ask(tag text) RETURNS SETOF text LANGUAGE plpgsql AS $$ BEGIN "
                      "RETURN QUERY SELECT llm_map('Invoker {t} {r}', tag, review) FROM reviews WHERE id <= 2 ORDER BY id; END $$")
    with connect(roles, "alice") as db:
        # pinned search_path, as the docs ask of a definer function
        db.execute("CREATE FUNCTION alice.ask(tag text) RETURNS SETOF text LANGUAGE plpgsql SECURITY DEFINER "
                   "SET search_path = public, pg_temp AS $$ BEGIN "
                   "RETURN QUERY SELECT llm_map('Definer {t} {r}', tag, review) FROM reviews WHERE id <= 2 ORDER BY id; END $$")
        db.execute("GRANT EXECUTE ON FUNCTION alice.ask(text) TO mallory")
    return roles


def test_a_plpgsql_functions_cached_statements_run_as_the_caller_or_the_definer(functions, fake):
    with connect(functions) as db:
        n = 0
        for who in ("postgres", "mallory", "postgres", "mallory"):
            db.execute("RESET ROLE" if who == "postgres" else "SET ROLE mallory")
            n += 1
            mark = len(fake.submitted)
            if who == "postgres":
                assert db.execute("SELECT * FROM read_notes()").fetchall() == [(1,), (2,), (3,)]
                assert sent(fake, mark) == []
            else:
                assert db.execute("SELECT * FROM read_notes()").fetchall() == [(1,), (3,)]
                assert sent(fake, mark) == [("mallory", True, (CEILING, None), 64)]
            mark = len(fake.submitted)
            assert db.execute("SELECT * FROM ask(%s)", [f"i{n}"]).fetchall() == answers(f"Invoker i{n}")
            invoker = ("pg", False, (None, None), 64) if who == "postgres" else ("mallory", False, (CEILING, None), 64)
            assert sent(fake, mark) == [invoker]
            mark = len(fake.submitted)
            assert db.execute("SELECT * FROM alice.ask(%s)", [f"d{n}"]).fetchall() == answers(f"Definer d{n}")
            assert sent(fake, mark) == [("alice", False, (None, None), 64)]


# ---------------------------------------------------------------- 4. a caller does not steer a definer's batching


@pytest.mark.parametrize("setting", ["batch_window = 1", "batch_calls = off"])
def test_a_callers_batch_settings_do_not_steer_a_definer_functions_calls(functions, fake, setting):
    """Read by the C part (batch_calls when the function's statement is planned, batch_window when
    it runs), they were the caller's: one relQuery per row of alice's function, on alice's key.
    Her own default still applies there, whoever calls."""
    tag = setting.split()[0]
    with connect(functions, "mallory") as db:
        db.execute(f"SET relserve.{setting}")
        mark = len(fake.submitted)
        assert db.execute("SELECT * FROM alice.ask(%s)", [f"{tag} 1"]).fetchall() == answers(f"Definer {tag} 1")
        assert sent(fake, mark) == [("alice", False, (None, None), 64)]
        # mallory's own calls keep her setting
        mark = len(fake.submitted)
        assert db.execute("SELECT * FROM ask(%s)", [f"{tag} 2"]).fetchall() == answers(f"Invoker {tag} 2")
        assert sent(fake, mark) == [("mallory", False, (CEILING, None), 64)] * 2
    with connect(functions) as admin:
        admin.execute(f"ALTER ROLE alice SET relserve.{setting}")
    try:
        with connect(functions, "mallory") as db:
            db.execute(f"SET relserve.{setting.replace('= 1', '= 2000').replace('= off', '= on')}")
            mark = len(fake.submitted)
            assert db.execute("SELECT * FROM alice.ask(%s)", [f"{tag} 3"]).fetchall() == answers(f"Definer {tag} 3")
            assert sent(fake, mark) == [("alice", False, (None, None), 64)] * 2
    finally:
        with connect(functions) as admin:
            admin.execute(f"ALTER ROLE alice RESET relserve.{tag}")


def test_a_readers_on_error_does_not_steer_a_foreign_table_read_through_another_roles_view(roles, fake):
    """The answers (the stand-in's echo) do not fit the integer column: NULL and a WARNING under
    alice's on_error; mallory's 'raise' failed the statement before."""
    with connect(roles) as admin:
        admin.execute("CREATE FOREIGN TABLE counts (id int, n int) SERVER rs OPTIONS ("
                      "source 'SELECT id, review FROM reviews WHERE id <= 2', template 'Count the words of {review}', kind 'map')")
        admin.execute("GRANT SELECT ON counts TO alice")
    with connect(roles, "alice") as db:
        db.execute("CREATE VIEW alice.counts AS SELECT id, n FROM public.counts")
        db.execute("GRANT SELECT ON alice.counts TO mallory")
    with connect(roles, "mallory") as db:
        db.execute("SET relserve.on_error = 'raise'")
        mark = len(fake.submitted)
        assert db.execute("SELECT id, n FROM alice.counts ORDER BY id").fetchall() == [(1, None), (2, None)]
        assert sent(fake, mark) == [("alice", False, (None, None), 64)]


# ---------------------------------------------------------------- 5. what changes after planning


def test_a_prepared_foreign_scan_reads_the_tables_options_and_the_readers_mapping_when_it_runs(roles, fake):
    with connect(roles) as admin:
        admin.execute("CREATE FOREIGN TABLE moods (id int, review text, mood text) SERVER rs OPTIONS ("
                      "source 'SELECT id, review FROM reviews WHERE id <= 2', template 'Mood one {review}', kind 'map')")
        admin.execute("GRANT SELECT ON moods TO mallory")
    with connect(roles) as db:
        db.execute("PREPARE moods AS SELECT mood FROM moods ORDER BY id")
        mark = len(fake.submitted)
        assert db.execute("EXECUTE moods").fetchall() == answers("Mood one")
        assert sent(fake, mark) == [("pg", False, (None, None), 64)]
        db.execute("SET ROLE mallory")
        mark = len(fake.submitted)
        assert db.execute("EXECUTE moods").fetchall() == answers("Mood one")
        assert sent(fake, mark) == [("mallory", False, (CEILING, None), 64)]
        db.execute("RESET ROLE")
        # another session changes the options (psycopg deallocates its prepared statements after an ALTER)
        with connect(roles) as admin:
            admin.execute("ALTER FOREIGN TABLE moods OPTIONS (SET template 'Mood two {review}', ADD max_tokens '5')")
        mark = len(fake.submitted)
        assert db.execute("EXECUTE moods").fetchall() == answers("Mood two")
        assert sent(fake, mark) == [("pg", False, (None, None), 5)]


def test_a_prepared_batch_reads_the_settings_when_it_runs_and_explain_execute_shows_them(roles, fake):
    with connect(roles) as db:
        db.execute("PREPARE later AS SELECT llm_map('Later {r}', review) FROM reviews WHERE id <= 2 ORDER BY id")
        db.execute("SET relserve.batch_window = 1")
        db.execute("SET relserve.max_tokens = 3")
        plan = "\n".join(r for (r,) in db.execute("EXPLAIN EXECUTE later"))
        assert "Window Rows: 1\n" in plan
        mark = len(fake.submitted)
        assert db.execute("EXECUTE later").fetchall() == answers("Later")
        assert sent(fake, mark) == [("pg", False, (None, None), 3)] * 2
        # a driver's own prepared statement (psycopg's, after five runs) likewise
        db.execute("RESET relserve.batch_window")
        query = "SELECT llm_map('Driver {r}', review) FROM reviews WHERE id <= 2 ORDER BY id"
        db.execute(query, prepare=True).fetchall()
        db.execute("SET relserve.max_tokens = 4")
        db.execute("SET ROLE mallory")
        mark = len(fake.submitted)
        assert db.execute(query, prepare=True).fetchall() == answers("Driver")
        assert sent(fake, mark) == [("mallory", False, (CEILING, None), 4)]
