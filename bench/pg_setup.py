"""What the PostgreSQL benchmarks share: a throwaway PostgreSQL 15 cluster with the extension
installed, talking to an in-process relserve server on the default engine (the test suite's
cluster and server helpers, from tests/)."""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


@contextlib.contextmanager
def cluster_and_server(engine=None) -> Iterator[tuple[str, str]]:
    """(conninfo of a database with the extension installed, the server's url); the server runs
    on ``engine`` (None: a default engine of its own, closed afterwards)."""
    import psycopg
    from server_fixtures import running_server
    from test_postgres import DB, PgCluster, install_extension

    from relserve import Engine
    from relserve.planner.cache import ResultCache

    own = engine is None
    engine = Engine() if own else engine
    cache = ResultCache(Path(tempfile.mkdtemp()) / "results.sqlite")
    try:
        with running_server(engine, cache=cache) as srv:
            pg = PgCluster().start()
            try:
                with psycopg.connect(pg.conninfo(), autocommit=True) as admin:
                    admin.execute(f"CREATE DATABASE {DB}")
                with psycopg.connect(pg.conninfo(DB), autocommit=True) as db:
                    install_extension(db, srv.url)
                yield pg.conninfo(DB), srv.url
            finally:
                pg.stop()
    finally:
        if own:
            engine.close()
