"""DuckDB sessions on the server (``relserve.duckdb.connect(server=...)``): each statement plans
its call site locally and sends it as one relQuery; a failed row is NULL and listed by
``errors()``, a statement the server could not run raises."""

from __future__ import annotations

import json

import relserve.duckdb
from soak.clients.base import ClientContext, ClientLoop, describe
from soak.config import STEADY, STEADY_KEY

STATEMENTS = (
    "SELECT id, llm_map('Name the film''s genre in one word: {review}', review, llm_options(max_tokens := 6)) FROM batch",
    "SELECT id, llm_filter('Does this review praise the acting? {review}', review) FROM batch",
)


class DuckDBSession(ClientLoop):
    kind = "duckdb"

    def __init__(self, ctx: ClientContext, number: int) -> None:
        super().__init__(ctx, number)
        self.con = relserve.duckdb.connect(server=ctx.url, api_key=STEADY_KEY, progress=False)

    def teardown(self) -> None:
        self.con.close()

    def once(self) -> bool:
        reviews = self.ctx.texts.draw(self.rng, self.rng.randint(3, 8))
        self.con.execute("CREATE OR REPLACE TABLE batch (id INTEGER, review VARCHAR)")
        self.con.executemany("INSERT INTO batch VALUES (?, ?)", list(enumerate(reviews)))
        by_review = {r: i for i, r in enumerate(reviews)}
        req = self.open(STEADY, len(reviews))
        try:
            got = self.con.sql(self.rng.choice(STATEMENTS)).fetchall()
            failed = {}
            for _function, _template, arguments, error in self.con.errors().fetchall():
                failed[by_review[json.loads(arguments)["review"]]] = error
            for i, value in got:
                if value is not None:
                    req.answered(i, str(value))
                else:
                    req.errored(i, failed.get(i, "harness: NULL without an error in errors()"))
            return True
        except Exception as e:  # the statement failed as a whole: every row says why
            req.fail_rest(describe(e))
            return False
        finally:
            req.end()
