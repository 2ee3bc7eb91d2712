"""PostgreSQL sessions: each statement's rows are written to ``soak_rows`` under a batch number,
then answered by one of the extension's three ways: batched scalar calls, an ``llm_map_query``
call, or the foreign table ``soak_tone``. Some statements run under a statement timeout too
short for them; the fault injector terminates the backends of others (``pg_terminate_backend``).
"""

from __future__ import annotations

import itertools
import threading

import psycopg

from soak.clients.base import ClientContext, ClientLoop, describe
from soak.config import STEADY
from soak.ledger import Request
from soak.postgres import Postgres

# (BATCH is the statement's batch number)
SCALAR = "SELECT id, llm_map('Name the mood of this review in one word: {r}', review) FROM soak_rows WHERE batch = BATCH"
QUERY = ("SELECT (input->>'id')::bigint, answer, error FROM llm_map_query('Who would enjoy this film? {review}', "
         "'SELECT id, review FROM soak_rows WHERE batch = BATCH', '{\"max_tokens\": 6}')")
FOREIGN = "SELECT id, tone FROM soak_tone WHERE batch = BATCH"
TIMEOUT_SHARE = 0.1
_batches = itertools.count(1)


class PostgresSession(ClientLoop):
    kind = "postgres"

    def __init__(self, ctx: ClientContext, number: int, pg: Postgres) -> None:
        super().__init__(ctx, number)
        self.pg = pg
        self.db: psycopg.Connection | None = None
        #: the backend serving this session, and whether a statement runs (for the terminator)
        self.backend_pid: int | None = None
        self.busy = threading.Event()
        self.notices: list[str] = []

    def _connect(self) -> psycopg.Connection:
        if self.db is None or self.db.closed or self.db.broken:
            self.db = self.pg.connect()
            self.db.add_notice_handler(lambda d: self.notices.append(d.message_primary or ""))
            self.db.execute("SET relserve.max_tokens = 6")
            self.backend_pid = self.db.execute("SELECT pg_backend_pid()").fetchone()[0]
        return self.db

    def teardown(self) -> None:
        if self.db is not None:
            self.db.close()

    def once(self) -> bool:
        reviews = self.ctx.texts.draw(self.rng, self.rng.randint(3, 8))
        way = self.rng.choice(("scalar", "query", "foreign"))
        timeout_ms = self.rng.randint(200, 1500) if self.rng.random() < TIMEOUT_SHARE else None
        req = self.open(STEADY, len(reviews), "statement_timeout" if timeout_ms else None)
        req.kind = f"postgres_{way}"
        try:
            db = self._connect()
            batch = next(_batches)
            with db.cursor() as cur:
                cur.executemany("INSERT INTO soak_rows VALUES (%s, %s, %s)", [(i, batch, r) for i, r in enumerate(reviews)])
            self.notices.clear()
            sql = {"scalar": SCALAR, "query": QUERY, "foreign": FOREIGN}[way].replace("BATCH", str(batch))
            if timeout_ms:
                db.execute(f"SET statement_timeout = {timeout_ms}")
            self.busy.set()
            try:
                got = db.execute(sql).fetchall()
            finally:
                self.busy.clear()
                if timeout_ms and not db.broken:
                    db.execute("SET statement_timeout = 0")
            self._record(req, got, way)
            return True
        except psycopg.Error as e:
            req.fail_rest(describe(e))
            # the statement failed, the session goes on (on a new connection if its backend is gone)
            return self.db is not None and not self.db.broken
        finally:
            req.end()

    def _record(self, req: Request, got: list[tuple], way: str) -> None:
        why_null = "; ".join(self.notices) or "harness: NULL without a notice"
        for row in got:
            i, answer = row[0], row[1]
            error = row[2] if way == "query" else None
            if answer is not None:
                req.answered(i, str(answer))
            else:
                req.errored(i, error or why_null)
