"""What a role without superuser rights can do with the plpython3u functions (issue 9, items 1-3),
on the real PostgreSQL 15 cluster and server of test_postgres.py: it cannot make them load code
from a folder of its choosing, cannot read another role's key, and a cancel or a statement
timeout ends the statement within seconds and cancels its relQuery on the server."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest
from test_postgres import KEY, ROLE_KEYS, cluster, connect, server  # noqa: F401 (fixtures)
from waits import Worker, wait_until

from relserve.client import Client
from relserve.replies import JobDescription

pytestmark = [pytest.mark.postgres, pytest.mark.engine]

ONE_ROW = "SELECT llm_map('Is {r} good?', review) FROM reviews WHERE id = 1"
# a statement that cannot finish while the test holds the engine (``engine.paused``): its rows
# start only once the hold ends, after the statement was ended. (The template starts with its
# placeholder: no shared prefix to warm, which would wait for the held engine before submitting.)
LONG = (
    "SELECT count(*) FROM llm_map_query('{n}: write a long story about this number.', "
    "'SELECT g AS n FROM generate_series(1, 300) g', '{\"max_tokens\": 64, \"cache\": false}')"
)


def jobs(server, key: str) -> dict[str, JobDescription]:
    with Client(server.url, api_key=key) as c:
        return {j.id: j for j in c.list()}


# ---------------------------------------------------------------- 1. no code from a role's own folder


def _evil_folder(cluster, name: str) -> tuple[Path, Path]:
    """A folder whose .pth file, if site.addsitedir ever reads it, writes a marker as the backend's OS user."""
    folder = cluster.root / name
    folder.mkdir()
    marker = cluster.root / f"{name}.marker"
    (folder / "evil.pth").write_text(f"import os; open({str(marker)!r}, 'w').write(str(os.getuid()))\n")
    os.chmod(folder, 0o755)
    return folder, marker


def test_a_role_cannot_point_python_path_at_its_own_code(cluster):
    folder, marker = _evil_folder(cluster, "evil-set")
    with connect(cluster, "mallory") as db:
        # refused where it is set, saying where it went (the library is loaded at connection start)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=r"^relserve.python_path is not a setting") as e:
            db.execute(f"SET relserve.python_path = '{folder}'")
        assert "relserve.config" in (e.value.diag.message_hint or "")
        # nor can it make the setting its own default
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.execute(f"ALTER ROLE mallory SET relserve.python_path = '{folder}'")
        # the call loads the superuser's path (and reaches the server, where mallory has no key)
        with pytest.raises(psycopg.errors.InvalidAuthorizationSpecification, match=r"\(HTTP 401\)"):
            db.execute(ONE_ROW)
    assert not marker.exists()


def test_only_a_superuser_writes_the_configured_path(cluster):
    folder, marker = _evil_folder(cluster, "evil-table")
    with connect(cluster, "mallory") as db:
        for sql in (
            f"INSERT INTO relserve.config VALUES ('python_path', '{folder}') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
            f"UPDATE relserve.config SET value = '{folder}'",
            "DELETE FROM relserve.config",
            "CREATE FUNCTION relserve._load2() RETURNS int LANGUAGE sql AS 'SELECT 1'",
            "CREATE TABLE relserve.config2 (x int)",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                db.execute(sql)
        # the configured path still loads the client: the call reaches the server (mallory has no key)
        with pytest.raises(psycopg.errors.InvalidAuthorizationSpecification, match=r"\(HTTP 401\)"):
            db.execute(ONE_ROW)
        assert db.execute("SELECT value FROM relserve.config WHERE name = 'python_path'").fetchone()[0].startswith("/")
    assert not marker.exists()


# ---------------------------------------------------------------- 2. keys: each role reads only its own


def test_a_role_cannot_read_another_roles_key(cluster):
    with connect(cluster) as admin:
        admin.execute("CREATE SCHEMA IF NOT EXISTS bob AUTHORIZATION bob")
    with connect(cluster, "bob") as db:
        notices: list[str] = []
        db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.execute("SELECT * FROM relserve.api_keys")
        assert db.execute("SELECT api_key FROM relserve.my_api_key").fetchall() == [("bob-tenant-key",)]
        # the name is defined only to refuse it: it never holds a key
        assert db.execute("SELECT pg_catalog.current_setting('relserve.api_key', true)").fetchone() == ("",)
        assert db.execute("SHOW relserve.api_key").fetchone() == ("",)
        settings = db.execute("SELECT coalesce(string_agg(array_to_string(setconfig, ','), ';'), '') FROM pg_db_role_setting").fetchone()[0]
        assert "tenant-key" not in settings and KEY not in settings
        # a leaky function of bob's in WHERE must not run on rows the view filters out (security_barrier)
        db.execute(
            "CREATE FUNCTION bob.leak(k text) RETURNS boolean LANGUAGE plpgsql COST 0.0000001 AS "
            "$$ BEGIN RAISE NOTICE 'leak %', k; RETURN true; END $$"
        )
        assert db.execute("SELECT api_key FROM relserve.my_api_key WHERE bob.leak(api_key)").fetchall() == [("bob-tenant-key",)]
        assert notices == ["leak bob-tenant-key"]
        # nor can bob pass off alice's name: SET ROLE needs membership
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.execute("SET ROLE alice")


def test_a_key_set_as_a_setting_is_refused_with_where_keys_go(cluster):
    with connect(cluster, "bob") as db:
        db.execute("SELECT relserve.library_version()")  # the extension's library is loaded
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=r"relserve.api_key is not a setting") as e:
            db.execute("SET relserve.api_key = 'bob-tenant-key'")
        assert "relserve.api_keys" in (e.value.diag.message_hint or "")


def test_each_roles_calls_reach_the_server_with_its_own_key(server, cluster):
    before = {role: jobs(server, key) for role, key in ROLE_KEYS.items()}
    for role in ROLE_KEYS:
        with connect(cluster, role) as db:
            rows = db.execute(
                "SELECT answer, error FROM llm_map_query('Is {review} good?', "
                "'SELECT review FROM reviews WHERE id <= 2 ORDER BY id', '{\"max_tokens\": 2}')"
            ).fetchall()
            assert len(rows) == 2 and all(a is not None and e is None for a, e in rows)
    for role, key in ROLE_KEYS.items():
        new = [j for k, j in jobs(server, key).items() if k not in before[role]]
        assert len(new) == 1 and new[0].progress.total == 2, (role, new)  # its own call only


# ---------------------------------------------------------------- 3. cancel and timeouts reach the relQuery


def _alices_new_job(server, before: set[str]) -> JobDescription | None:
    new = [j for k, j in jobs(server, ROLE_KEYS["alice"]).items() if k not in before]
    assert len(new) <= 1, new
    return new[0] if new else None


def _assert_cancelled_on_the_server(server, engine, before: set[str]) -> None:
    # the cancel reaches the engine a moment after the statement ends
    job = wait_until(lambda: (j := _alices_new_job(server, before)) and j.status != "running" and j,
                     "alice's relQuery to end on the server")
    assert job.status == "cancelled", job
    answered = job.stats.rows - job.stats.errors
    # the cancel was queued on the held engine behind the relQuery's start: no row started
    assert answered == 0, job
    # nothing runs on: once the engine has nothing left to run, the count of answered rows is the same
    assert engine.wait_idle(120), "the engine still busy 120 s after the cancel"
    again = jobs(server, ROLE_KEYS["alice"])[job.id]
    assert again.stats.rows - again.stats.errors == answered


def test_statement_timeout_ends_the_statement_and_cancels_the_relquery(engine, server, cluster):
    before = set(jobs(server, ROLE_KEYS["alice"]))
    with connect(cluster, "alice") as db:
        db.execute("SET statement_timeout = '3s'")
        with engine.paused(120), pytest.raises(psycopg.errors.QueryCanceled, match=r"canceling statement due to statement timeout"):
            db.execute(LONG)
    _assert_cancelled_on_the_server(server, engine, before)


def test_pg_cancel_backend_ends_the_statement_and_cancels_the_relquery(engine, server, cluster):
    before = set(jobs(server, ROLE_KEYS["alice"]))
    with connect(cluster, "alice") as db:
        pid = db.execute("SELECT pg_backend_pid()").fetchone()[0]

        def cancel_once_it_runs() -> None:  # the relQuery is on the server: now cancel the statement
            wait_until(lambda: _alices_new_job(server, before), "alice's relQuery on the server", timeout=120)
            with connect(cluster, "alice") as other:  # a role may cancel its own backends
                assert other.execute("SELECT pg_cancel_backend(%s)", [pid]).fetchone() == (True,)

        canceller = Worker(cancel_once_it_runs, what="the cancel of alice's statement")
        canceller.start()
        try:
            with engine.paused(120), pytest.raises(psycopg.errors.QueryCanceled, match=r"canceling statement due to user request"):
                db.execute(LONG)
        finally:  # the canceller's own failure (its relQuery never seen, the cancel refused) is the cause of any above
            canceller.finish(120)
        _assert_cancelled_on_the_server(server, engine, before)
        # the session is usable afterwards, and a short call still works
        assert db.execute("SELECT count(*) FROM llm_map_query('Is {review} good?', "
                          "'SELECT review FROM reviews WHERE id = 1', '{\"max_tokens\": 2}')").fetchone() == (1,)


def test_relserve_timeout_cancels_the_relquery_with_a_clear_error(engine, server, cluster):
    before = set(jobs(server, ROLE_KEYS["alice"]))
    with connect(cluster, "alice") as db:
        db.execute("SET relserve.timeout = 2")
        with engine.paused(120), pytest.raises(
                psycopg.errors.QueryCanceled,
                match=r"^llm_map_query: no answer from the relserve server within relserve.timeout = 2 s; its relQuery was cancelled"):
            db.execute(LONG)
        db.execute("SET relserve.timeout = 'soon'")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"relserve.timeout must be a positive number of seconds, got 'soon'"):
            db.execute(ONE_ROW)
    _assert_cancelled_on_the_server(server, engine, before)



def test_client_cancel_can_bound_its_own_wait():
    """The functions cancel on the way out of an interrupted statement with a short bound of their own."""
    import httpx

    seen: list[dict] = []
    cancelled = {"id": "x", "kind": "relquery", "status": "cancelled", "error": "cancelled by the client", "created": 0.0,
                 "progress": {"done": 0, "total": 1}, "priority": 0, "deadline_s": None, "stats": {"rows": 1}}

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"])
        return httpx.Response(200, json=cancelled)

    with Client("http://relserve.test", api_key="k", timeout=600, transport=httpx.MockTransport(handler)) as c:
        assert c.cancel("x", timeout=5.0).to_json() == cancelled
        c.cancel("x")
    assert seen == [
        {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0},
        {"connect": 10.0, "read": 600, "write": 600, "pool": 600},
    ]
