"""The PostgreSQL side: a throwaway PostgreSQL 15 cluster with the relserve extension pointed at
the soak's server (the test suite's cluster helpers, from tests/), the table the sessions fill,
and a foreign table over it."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import psycopg

from soak.config import STEADY_KEY

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

FOREIGN_TEMPLATE = "Is this review positive or negative? {review}"


@dataclass
class Postgres:
    cluster: object
    conninfo: str

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.conninfo, autocommit=True)

    def stop(self) -> None:
        self.cluster.stop()


def start_postgres(server_url: str) -> Postgres:
    """A cluster whose role ``postgres`` calls the server as the steady tenant."""
    from test_postgres import DB, PgCluster, install_extension, missing_requirements

    problem = missing_requirements()
    if problem is not None:
        raise RuntimeError(problem)
    pg = PgCluster().start()
    try:
        with psycopg.connect(pg.conninfo(), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {DB}")
        with psycopg.connect(pg.conninfo(DB), autocommit=True) as db:
            install_extension(db, server_url)
            db.execute("UPDATE relserve.api_keys SET api_key = %s WHERE role = 'postgres'", [STEADY_KEY])
            db.execute("CREATE TABLE soak_rows (id bigint, batch bigint, review text)")
            db.execute("CREATE INDEX ON soak_rows (batch)")
            db.execute(f"CREATE SERVER soak_relserve FOREIGN DATA WRAPPER relserve_fdw OPTIONS (url '{server_url}')")
            db.execute(f"CREATE USER MAPPING FOR postgres SERVER soak_relserve OPTIONS (api_key '{STEADY_KEY}')")
            db.execute(
                "CREATE FOREIGN TABLE soak_tone (id bigint, batch bigint, review text, tone text) SERVER soak_relserve "
                f"OPTIONS (source 'SELECT id, batch, review FROM soak_rows', template '{FOREIGN_TEMPLATE}', "
                "kind 'classify', labels 'positive,negative')"
            )
        return Postgres(pg, pg.conninfo(DB))
    except BaseException:
        pg.stop()
        raise
