"""The install steps of docs/server-postgres-spreadsheet.md ("Install on an existing PostgreSQL"),
followed as a DBA would on a fresh PostgreSQL 15 cluster: the page's own shell commands and SQL,
with its example values replaced by this machine's (the environment's Python, the server's
address), for the editable install this checkout's environment has and for a non-editable one.
A step the page gets wrong fails here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest
from server_fixtures import running_server
from test_postgres import KEY, REPO, ROLE_KEYS, PgCluster, missing_requirements

from relserve.client import Client

pytestmark = [pytest.mark.postgres, pytest.mark.engine]

DOC = REPO / "docs" / "server-postgres-spreadsheet.md"
# the page's example values, replaced by this machine's
DOC_PYTHON = "/srv/relserve/.venv/bin/python"
DOC_PYTHON_PATH = "/srv/relserve/.venv/lib/python3.11/site-packages"
DOC_URL = "http://127.0.0.1:8000"
QUERY = "SELECT id, llm_map('Is {r} good? Answer yes or no.', review) FROM reviews ORDER BY id"


def install_section() -> str:
    text = DOC.read_text()
    start = text.index("### Install on an existing PostgreSQL")
    return text[start:text.index("\n### ", start + 1)]


def code_block(section: str, lang: str, containing: str) -> str:
    """The one fenced block of ``lang`` in the section that contains ``containing``, dedented."""
    blocks = [b for b in re.findall(rf"^( *)```{lang}\n(.*?)^\1```", section, re.S | re.M) if containing in b[1]]
    assert len(blocks) == 1, f"the install section has {len(blocks)} {lang} blocks with {containing!r}"
    indent, body = blocks[0]
    return "".join(line[len(indent):] for line in body.splitlines(keepends=True))


def shell_here(script: str) -> str:
    """A documented shell script as this machine runs it: the commands a DBA runs with sudo run as
    root here (or as this user, who owns the test cluster, when not root)."""
    as_postgres = "runuser -u postgres -- " if os.geteuid() == 0 else ""
    return script.replace("sudo -u postgres ", as_postgres).replace("sudo ", "")


def run_shell(script: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", shell_here(script)], capture_output=True, text=True,
                          env={**_dba_environment(), **(env or {})}, cwd=cwd or tempfile.gettempdir())


def _dba_environment() -> dict[str, str]:
    """The DBA's environment: the test run's own relserve home is not theirs (conftest._own_home;
    only the run's user may enter it, and the postgres user runs some of the commands)."""
    return {k: v for k, v in os.environ.items() if k != "RELSERVE_HOME"}


def python_path_of(check_script: str, python: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Step 3 as documented, with ``python`` for the documented environment's: the check runs, and the
    script prints the python_path it computed."""
    assert DOC_PYTHON in check_script
    return run_shell(check_script.replace(DOC_PYTHON, python) + '\nprintf "%s" "$PYTHON_PATH"\n', env)


def connect(pg: PgCluster, db: str, role: str = "postgres") -> psycopg.Connection:
    return psycopg.connect(pg.conninfo(db).replace("user=postgres", f"user={role}"), autocommit=True)


def loaded_from(pg: PgCluster, db: str) -> str:
    """Where a new session's backend imports relserve from (a superuser's look inside it)."""
    with connect(pg, db) as admin:
        notices: list[str] = []
        admin.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        admin.execute("SELECT relserve._load()")
        admin.execute("DO $$ plpy.notice(GD['relserve'].__file__) $$ LANGUAGE plpython3u")
    return notices[-1]


@pytest.fixture(scope="module")
def server(engine):
    tenants = {"pg": {"key": KEY}, **{role: {"key": key} for role, key in ROLE_KEYS.items()}}
    with running_server(engine, tenants={"tenants": tenants}, cache=False) as srv:
        yield srv


def test_a_dba_follows_the_install_steps_on_a_fresh_cluster(server):
    problem = missing_requirements()
    assert problem is None, problem
    section = install_section()
    check = code_block(section, "bash", "relserve.postgres.python_path")
    setup_sql = code_block(section, "sql", "CREATE EXTENSION relserve")
    assert DOC_PYTHON_PATH in setup_sql and DOC_URL in setup_sql
    # the doc's keys are the server's tenants
    assert all(f"'{role}', '{key}'" in setup_sql for role, key in ROLE_KEYS.items())

    # step 3: the documented command prints python_path, and the check as postgres imports the package
    editable = python_path_of(check, sys.executable)
    assert editable.returncode == 0, editable.stderr
    site_packages = editable.stdout
    assert site_packages.endswith("site-packages") and ":" not in site_packages, site_packages  # editable: site-packages alone

    # step 4: the extension's files into PostgreSQL's folders, with the documented commands
    for command in ("make -C udfs/relserve", "sudo make -C udfs/relserve install"):
        assert f"`{command}`" in section
        built = run_shell(command, cwd=REPO)
        assert built.returncode == 0, built.stdout + built.stderr

    pg = PgCluster().start()
    try:
        with connect(pg, "postgres") as admin:
            admin.execute("CREATE DATABASE mydb")
            admin.execute("CREATE DATABASE nopreload")
        with connect(pg, "mydb") as db:
            db.execute("CREATE ROLE alice LOGIN")
            db.execute("CREATE ROLE bob LOGIN")
            db.execute("CREATE TABLE reviews (id int, review text)")
            db.execute("INSERT INTO reviews VALUES (1, 'A fine chair.'), (2, 'It broke at once.'), (3, 'Comfortable.')")
            db.execute("GRANT SELECT ON reviews TO alice")
            # step 6: the page's SQL, as written, with this machine's values
            db.execute(setup_sql.replace(DOC_PYTHON_PATH, site_packages).replace(DOC_URL, server.url))

        # a new session's first statement is batched (session_preload_libraries), with alice's key
        with Client(server.url, api_key=ROLE_KEYS["alice"]) as c:
            before = {j.id for j in c.list()}
        with connect(pg, "mydb", "alice") as db:
            plan = "\n".join(r for (r,) in db.execute(f"EXPLAIN {QUERY}"))
            rows = db.execute(QUERY).fetchall()
        assert "Custom Scan (relserve batch)" in plan, plan
        assert [i for i, _ in rows] == [1, 2, 3] and all(isinstance(a, str) and a for _, a in rows), rows
        with Client(server.url, api_key=ROLE_KEYS["alice"]) as c:
            assert [j.progress.total for j in c.list() if j.id not in before] == [3]
        assert loaded_from(pg, "mydb").startswith(str(REPO / "relserve")), "the editable install's checkout runs"

        # without the setting, a session's first statement is planned before the library is loaded
        with connect(pg, "nopreload") as db:
            db.execute("CREATE EXTENSION relserve CASCADE")
            db.execute("CREATE TABLE reviews (id int, review text)")
        with connect(pg, "nopreload") as db:
            assert "relserve batch" not in "\n".join(r for (r,) in db.execute(f"EXPLAIN {QUERY}"))
            db.execute("SELECT relserve.library_version()")  # what a session's first llm_* call does
            assert "relserve batch" in "\n".join(r for (r,) in db.execute(f"EXPLAIN {QUERY}"))

        # a non-editable install in a folder of its own (pip install --target), the folder readable by postgres
        source, target = pg.root / "src", pg.root / "relserve-pg"
        shutil.copytree(REPO / "relserve", source / "relserve", ignore=shutil.ignore_patterns("__pycache__"))
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(REPO / name, source / name)
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                              "--target", str(target), str(source)], capture_output=True, text=True)
        assert pip.returncode == 0, pip.stderr
        assert "`PYTHONPATH=/opt/relserve-pg`" in section
        own = python_path_of(check, sys.executable, env={"PYTHONPATH": str(target)})
        assert own.returncode == 0, own.stderr
        assert own.stdout == f"{target}:{site_packages}", own.stdout  # its folder first, the dependencies after
        with connect(pg, "mydb") as admin:
            admin.execute("UPDATE relserve.config SET value = %s WHERE name = 'python_path'", [own.stdout])
        with connect(pg, "mydb", "alice") as db:
            assert db.execute(QUERY).fetchall() == rows
        assert loaded_from(pg, "mydb").startswith(str(target / "relserve")), "the non-editable install runs"

        # a folder the postgres OS user cannot read: relserve is not imported from it, and the first
        # call fails naming it. The same install as above, copied into a folder that is readable
        # first (the control: postgres imports relserve from it), then locked: root's with mode
        # 0700 when the tests run as root (the cluster runs as postgres), mode 0 otherwise (the
        # cluster runs as this user, whom mode 0 locks out too)
        locked = Path(tempfile.mkdtemp(prefix="relserve-locked-"))
        shutil.copytree(target, locked, dirs_exist_ok=True)
        check_import = ("sudo -u postgres /usr/bin/python3 -c \"import site, sys; [site.addsitedir(p) for p in "
                        "sys.argv[1].split(':')]; import relserve.postgres; print(relserve.postgres.__file__)\" "
                        f"'{locked}:{site_packages}'")
        try:
            locked.chmod(0o755)
            readable = run_shell(check_import)
            assert readable.returncode == 0 and readable.stdout.startswith(str(locked / "relserve")), readable
            locked.chmod(0o700 if os.geteuid() == 0 else 0)
            hidden = run_shell(check_import)
            # (the site-packages after it still holds the editable install: its checkout's relserve is found instead)
            assert hidden.returncode == 0 and not hidden.stdout.startswith(str(locked)), hidden
            with connect(pg, "mydb") as admin:
                admin.execute("UPDATE relserve.config SET value = %s WHERE name = 'python_path'", [f"{locked}:{site_packages}"])
            with connect(pg, "mydb", "alice") as db:
                with pytest.raises(psycopg.errors.SystemError,
                                   match=rf"^relserve: the python_path folder {locked} cannot be read by the database server's OS user"):
                    db.execute(QUERY)
        finally:
            locked.chmod(0o700)
            shutil.rmtree(locked, ignore_errors=True)
    finally:
        pg.stop()
