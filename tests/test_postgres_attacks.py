"""The attacks of issue 21, each run as the role ``mallory`` (LOGIN, no superuser, no key, no
grants) against the real PostgreSQL cluster and relserve server of test_postgres.py, with a TCP
listener on loopback standing for an address mallory controls. Each failed on relserve 0.2."""

from __future__ import annotations

import socket
import threading

import psycopg
import pytest
from test_fdw import fdw, jobs  # noqa: F401 (fixtures)
from test_postgres import KEY, ROLE_KEYS, cluster, connect, server  # noqa: F401 (fixtures)
from waits import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.engine]


class Listener:
    """A loopback port that records every connection and what it was sent."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.received: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1.0)
                try:
                    self.received.append(conn.recv(65536))
                except OSError:
                    self.received.append(b"")

    def settled(self, timeout: float = 30.0) -> list[bytes]:
        """What it received before now: a last connection of the test's own is accepted after
        every connection made before it (one backlog, served in order), so once that one is
        recorded nothing sent earlier is still on its way."""
        marker = f"the test's own last connection {len(self.received)}".encode()
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as own:
            own.sendall(marker)
        wait_until(lambda: marker in self.received, "the listener to record the test's own connection", timeout=timeout)
        return [r for r in self.received[: self.received.index(marker)] if not r.startswith(b"the test's own last connection")]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)  # its accept and recv time out within about a second
        self.sock.close()
        assert not self._thread.is_alive(), "the listener's thread did not stop within 30 s"


@pytest.fixture
def listener():
    lst = Listener()
    yield lst
    lst.close()


def test_no_role_can_make_the_database_send_a_request_to_an_address_of_its_choosing(cluster, fdw, listener):
    with connect(cluster, "mallory") as db:
        # the functions the foreign data wrapper calls take an address: no role may call them
        for sql in (
            f"SELECT relserve._scan_open('{listener.url}/x?', NULL, 'map', '{{a}}', NULL, '{{}}', '[{{\"a\": 1}}]')",
            "SELECT relserve._scan_poll('x', 0.1)",
            "SELECT relserve._scan_close('x')",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match=r"permission denied for function _scan_"):
                db.execute(sql)
        # 0.2's functions that took a url and a key as arguments are gone
        assert db.execute("SELECT count(*) FROM pg_proc WHERE proname IN ('fdw_plan', 'fdw_scan', 'fdw_cancel')").fetchone() == (0,)
        db.execute("SELECT relserve.library_version()")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=r"^relserve.url is not a setting") as e:
            db.execute(f"SET relserve.url = '{listener.url}/any?'")
        assert "relserve.config" in (e.value.diag.message_hint or "")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=r"permission denied for foreign-data wrapper relserve_fdw"):
            db.execute(f"CREATE SERVER evil FOREIGN DATA WRAPPER relserve_fdw OPTIONS (url '{listener.url}')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.execute("INSERT INTO relserve.config VALUES ('url', 'http://127.0.0.1:1') "
                       "ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value")
    # even with USAGE on the wrapper (a superuser's grant), a server's url is a superuser's to set
    with connect(cluster) as admin:
        admin.execute("GRANT USAGE ON FOREIGN DATA WRAPPER relserve_fdw TO mallory")
    try:
        with connect(cluster, "mallory") as db:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match=r"only a superuser may set a server's url"):
                db.execute(f"CREATE SERVER evil FOREIGN DATA WRAPPER relserve_fdw OPTIONS (url '{listener.url}')")
            db.execute("CREATE SERVER evil FOREIGN DATA WRAPPER relserve_fdw")  # allowed, but useless without a url
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match=r"only a superuser may set a server's url"):
                db.execute(f"ALTER SERVER evil OPTIONS (ADD url '{listener.url}')")
            db.execute("DROP SERVER evil")
    finally:
        with connect(cluster) as admin:
            admin.execute("REVOKE USAGE ON FOREIGN DATA WRAPPER relserve_fdw FROM mallory")
    assert listener.settled() == []


def test_a_security_definer_function_sends_its_owners_key_only_to_the_configured_server(cluster, server, listener):
    with connect(cluster) as admin:
        admin.execute("CREATE SCHEMA IF NOT EXISTS alice AUTHORIZATION alice")
    with connect(cluster, "alice") as db:
        db.execute("CREATE OR REPLACE FUNCTION alice.ask(t text) RETURNS text LANGUAGE sql SECURITY DEFINER "
                   "AS $$ SELECT llm_map('Is {r} good?', t) $$")
        db.execute("GRANT USAGE ON SCHEMA alice TO mallory")
        db.execute("GRANT EXECUTE ON FUNCTION alice.ask(text) TO mallory")
    before = set(jobs(server, ROLE_KEYS["alice"]))
    with connect(cluster, "mallory") as db:
        db.execute("SELECT relserve.library_version()")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.execute(f"SET relserve.url = '{listener.url}'")
        answer = db.execute("SELECT alice.ask('A fine chair.')").fetchone()[0]
    assert isinstance(answer, str) and answer
    # the call went to the configured server, as alice's tenant
    assert len(set(jobs(server, ROLE_KEYS["alice"])) - before) == 1
    # the superuser moves the database to another address: alice's key stays with the server it was stored for
    with connect(cluster) as admin:
        admin.execute("UPDATE relserve.config SET value = %s WHERE name = 'url'", [listener.url])
    try:
        with connect(cluster, "mallory") as db:
            with pytest.raises(psycopg.errors.InvalidAuthorizationSpecification,
                               match=rf"^relserve: this role's key is stored for {server.url}, not for the configured "
                                     rf"server {listener.url}; it is not sent there"):
                db.execute("SELECT alice.ask('A fine chair.')")
    finally:
        with connect(cluster) as admin:
            admin.execute("UPDATE relserve.config SET value = %s WHERE name = 'url'", [server.url])
    assert not any(ROLE_KEYS["alice"].encode() in r for r in listener.settled())


def test_a_security_definer_function_with_a_pinned_search_path_runs_the_extensions_llm_map(cluster, server):
    """The Security section's advice: a SECURITY DEFINER function that calls llm_* pins its search_path.
    Unpinned, the caller's own llm_map runs in its place, as the definer, and reads the definer's key."""
    with connect(cluster) as admin:
        admin.execute("CREATE SCHEMA IF NOT EXISTS alice AUTHORIZATION alice")
        admin.execute("CREATE SCHEMA IF NOT EXISTS mallory AUTHORIZATION mallory")
    with connect(cluster, "alice") as db:
        for name, pin in (("ask_pinned", "SET search_path = public, pg_temp"), ("ask_unpinned", "")):
            db.execute(f"CREATE OR REPLACE FUNCTION alice.{name}(t text) RETURNS text LANGUAGE sql SECURITY DEFINER {pin} "
                       "AS $$ SELECT llm_map('Is {r} good?', t) $$")
            db.execute(f"GRANT EXECUTE ON FUNCTION alice.{name}(text) TO mallory")
        db.execute("GRANT USAGE ON SCHEMA alice TO mallory")
    try:
        with connect(cluster, "mallory") as db:
            db.execute("CREATE OR REPLACE FUNCTION mallory.llm_map(template text, VARIADIC vals text[]) RETURNS text "
                       "LANGUAGE plpgsql AS $$ BEGIN RAISE NOTICE 'SHADOW as %: %', current_user, "
                       "(SELECT string_agg(api_key, ',') FROM relserve.my_api_key); RETURN 'shadow'; END $$")
            # the definer runs with mallory's search_path but its own rights: a schema it may not use
            # is skipped, so mallory opens hers to everyone (hers to grant)
            db.execute("GRANT USAGE ON SCHEMA mallory TO PUBLIC")
            db.execute("SET search_path = mallory, public")
            notices: list[str] = []
            db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
            before = set(jobs(server, ROLE_KEYS["alice"]))
            answer = db.execute("SELECT alice.ask_pinned('A fine chair.')").fetchone()[0]
            assert answer != "shadow" and notices == []
            assert len(set(jobs(server, ROLE_KEYS["alice"])) - before) == 1  # the extension's llm_map, as alice
            assert db.execute("SELECT alice.ask_unpinned('A fine chair.')").fetchone()[0] == "shadow"
            assert notices == [f"SHADOW as alice: {ROLE_KEYS['alice']}"]
    finally:
        with connect(cluster) as admin:
            admin.execute("DROP FUNCTION IF EXISTS mallory.llm_map(text, text[])")
            admin.execute("DROP FUNCTION IF EXISTS alice.ask_pinned(text), alice.ask_unpinned(text)")


SMUGGLED = [
    ("SELECT 1 AS a) AS s; ALTER ROLE mallory CREATEDB; SELECT * FROM (SELECT 1 AS a", psycopg.errors.SyntaxError,
     r'syntax error at or near "\)"'),
    ("SELECT 1 AS a; ALTER ROLE mallory CREATEDB", psycopg.errors.FdwInvalidAttributeValue,
     r'option "source" must be one SELECT statement, got 2 statements'),
    ("ALTER ROLE mallory CREATEDB", psycopg.errors.FdwInvalidAttributeValue, r'option "source" must be a SELECT statement'),
    ("WITH d AS (DELETE FROM reviews RETURNING id) SELECT id AS a FROM d", psycopg.errors.FdwInvalidAttributeValue,
     r'option "source" must only read: WITH "d" modifies data'),
    ("SELECT 1 AS a INTO mallory.copy", psycopg.errors.FdwInvalidAttributeValue, r'option "source" must not be SELECT INTO'),
    # a data-modifying statement at any depth (PostgreSQL itself refuses these only when the SELECT runs)
    ("WITH a AS (WITH d AS (DELETE FROM reviews RETURNING id) SELECT id FROM d) SELECT id AS a FROM a",
     psycopg.errors.FdwInvalidAttributeValue, r'option "source" must only read: WITH "d" modifies data'),
    ("SELECT 1 AS a UNION ALL (WITH u AS (UPDATE reviews SET stars = 0 RETURNING id) SELECT id FROM u)",
     psycopg.errors.FdwInvalidAttributeValue, r'option "source" must only read: WITH "u" modifies data'),
    ("SELECT a FROM (WITH i AS (INSERT INTO reviews VALUES (99) RETURNING id) SELECT id AS a FROM i) s",
     psycopg.errors.FdwInvalidAttributeValue, r'option "source" must only read: WITH "i" modifies data'),
    ("SELECT (WITH d AS (DELETE FROM reviews RETURNING id) SELECT count(*) FROM d) AS a",
     psycopg.errors.FdwInvalidAttributeValue, r'option "source" must only read: WITH "d" modifies data'),
    ("SELECT 1 AS a WHERE EXISTS (WITH d AS (DELETE FROM reviews RETURNING id) SELECT 1 FROM d)",
     psycopg.errors.FdwInvalidAttributeValue, r'option "source" must only read: WITH "d" modifies data'),
    # row locks write to the rows they lock
    ("SELECT id AS a FROM reviews FOR UPDATE", psycopg.errors.FdwInvalidAttributeValue,
     r'option "source" must only read: FOR UPDATE/SHARE locks the rows it reads'),
    ("SELECT a FROM (SELECT id AS a FROM reviews FOR SHARE) s", psycopg.errors.FdwInvalidAttributeValue,
     r'option "source" must only read: FOR UPDATE/SHARE locks the rows it reads'),
]


@pytest.mark.parametrize("source,error,message", SMUGGLED, ids=[
    "close-paren", "two", "not-select", "with-delete", "into", "nested-with", "union", "from-subquery",
    "scalar-subquery", "exists", "for-update", "nested-for-share"])
def test_a_foreign_table_source_is_one_select_checked_at_create_and_alter(cluster, fdw, source, error, message):
    with connect(cluster) as admin:
        admin.execute("CREATE SCHEMA IF NOT EXISTS mallory AUTHORIZATION mallory")
        admin.execute("GRANT USAGE ON FOREIGN SERVER relserve TO mallory")
    try:
        with connect(cluster, "mallory") as db:
            quoted = source.replace("'", "''")
            with pytest.raises(error, match=message):
                db.execute(f"CREATE FOREIGN TABLE mallory.t (a int, answer text) SERVER relserve "
                           f"OPTIONS (source '{quoted}', template '{{a}}', kind 'map')")
            db.execute("CREATE FOREIGN TABLE mallory.ok (a int, answer text) SERVER relserve "
                       "OPTIONS (source 'SELECT 1 AS a', template '{a}', kind 'map')")
            with pytest.raises(error, match=message):
                db.execute(f"ALTER FOREIGN TABLE mallory.ok OPTIONS (SET source '{quoted}')")
            db.execute("DROP FOREIGN TABLE mallory.ok")
    finally:
        with connect(cluster) as admin:
            admin.execute("REVOKE USAGE ON FOREIGN SERVER relserve FROM mallory")
        with connect(cluster) as admin:
            assert admin.execute("SELECT rolcreatedb FROM pg_roles WHERE rolname = 'mallory'").fetchone() == (False,)


READ_ONLY = [
    "WITH r AS (SELECT id, review FROM reviews) SELECT id AS a FROM r UNION SELECT 0",
    "WITH RECURSIVE t(a) AS (SELECT 1 UNION ALL SELECT a + 1 FROM t WHERE a < 3) SELECT a FROM t",
    "SELECT a FROM (SELECT id AS a, row_number() OVER (ORDER BY id) FROM reviews) s WHERE a IN (SELECT id FROM reviews)",
    "SELECT x AS a FROM (VALUES (1), (2)) v(x) CROSS JOIN LATERAL generate_series(1, x) g",
    "SELECT id AS a FROM reviews TABLESAMPLE SYSTEM (100) WHERE review ~ 'x' OR CASE WHEN id > 1 THEN true END",
    "SELECT (SELECT max(id) FROM reviews) AS a, ARRAY[1, 2] AS b, '{\"k\": 1}'::jsonb -> 'k' AS c",
    "SELECT stars AS a FROM reviews GROUP BY GROUPING SETS ((stars), ()) HAVING count(*) > 0",
    "SELECT a FROM xmltable('/r' PASSING '<r>1</r>' COLUMNS a int PATH '.')",
]


def test_a_source_that_only_reads_is_accepted_whatever_its_shape(cluster, fdw):
    with connect(cluster) as admin:
        for source in READ_ONLY:
            quoted = source.replace("'", "''")
            admin.execute(f"CREATE FOREIGN TABLE read_only (a int, answer text) SERVER relserve "
                          f"OPTIONS (source '{quoted}', template '{{a}}', kind 'map')")
            admin.execute("DROP FOREIGN TABLE read_only")


def test_plain_explain_of_anothers_foreign_table_runs_nothing_and_sends_nothing(cluster, server, fdw):
    with connect(cluster) as admin:
        admin.execute("CREATE SCHEMA IF NOT EXISTS mallory AUTHORIZATION mallory")
        admin.execute("GRANT USAGE ON FOREIGN SERVER relserve TO mallory")
    try:
        with connect(cluster, "mallory") as db:
            # run with the rights of whoever reads the table: it would create a table owned by them
            db.execute("CREATE OR REPLACE FUNCTION mallory.f() RETURNS int LANGUAGE plpgsql AS "
                       "$$ BEGIN CREATE TABLE public.mallory_was_here (x int); RETURN 1; END $$")
            db.execute("CREATE FOREIGN TABLE mallory.trap (a int, answer text) SERVER relserve "
                       "OPTIONS (source 'SELECT mallory.f() AS a', template 'Say {a}', kind 'map')")
        before = set(jobs(server))
        with connect(cluster) as admin:  # the superuser looks at the plan, as a DBA does
            plan = "\n".join(r for (r,) in admin.execute("EXPLAIN SELECT * FROM mallory.trap"))
            verbose = "\n".join(r for (r,) in admin.execute("EXPLAIN (VERBOSE) SELECT * FROM mallory.trap"))
            assert admin.execute("SELECT to_regclass('public.mallory_was_here')").fetchone() == (None,)
        assert "Source Query: SELECT * FROM (SELECT mallory.f() AS a) AS s" in plan
        assert "Window Rows: 2000" in verbose
        assert set(jobs(server)) == before  # nothing sent to the server
    finally:
        with connect(cluster) as admin:
            admin.execute("DROP SCHEMA mallory CASCADE")
            admin.execute("REVOKE USAGE ON FOREIGN SERVER relserve FROM mallory")


def test_rollback_to_a_savepoint_after_a_fetch_keeps_the_transaction(cluster, fdw):
    with connect(cluster) as admin:
        admin.execute("CREATE TABLE IF NOT EXISTS kept (x int)")
        admin.execute("TRUNCATE kept")
    with psycopg.connect(cluster.conninfo()) as db:  # one transaction
        db.execute("INSERT INTO kept VALUES (1)")
        db.execute("DECLARE c CURSOR FOR SELECT * FROM review_tone")
        db.execute("SAVEPOINT s")
        assert len(db.execute("FETCH 1 FROM c").fetchall()) == 1  # the scan's source cursor opens inside s
        db.execute("ROLLBACK TO s")
        db.commit()  # closes c: the scan ends although its cursor went with the savepoint
    with connect(cluster) as admin:
        assert admin.execute("SELECT count(*) FROM kept").fetchone() == (1,)
