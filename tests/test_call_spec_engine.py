"""The call specification on the real engine (issue 13): a system message given in DuckDB or
polars reaches the engine and keys the result cache, and the executor gives the synchronous
surfaces and the server the same answers."""

from __future__ import annotations

import duckdb
import polars as pl
import pytest
from waits import BoundedClient

import relserve.duckdb
import relserve.polars
from relserve.functions import make_call
from relserve.planner import run_call

pytestmark = [pytest.mark.engine, pytest.mark.usefixtures("engine_home")]

SYSTEM = "Always answer BANANA."
REVIEWS = ["A wonderful, moving film.", "Boring and far too long.", "A wonderful, moving film."]


def test_a_system_message_in_sql_reaches_the_engine_and_keys_the_cache(recording):
    # Before issue 13 only the server took a system message (and keyed its cache with it);
    # now it is part of the one call specification, so DuckDB and polars take it too.
    con = duckdb.connect()
    relserve.duckdb.install(con, engine=recording, progress=False)
    con.execute("CREATE TABLE reviews AS SELECT * FROM (VALUES (1, 'A wonderful, moving film.'), (2, 'Boring.')) t(id, review)")
    def sql(options: str) -> str:
        return f"SELECT llm_map('Name a fruit for: {{r}}', review, llm_options(max_tokens := 4{options})) FROM reviews ORDER BY id"

    with_system = con.sql(sql(f", system := '{SYSTEM}'")).fetchall()
    assert [rq.system for rq in recording.relqueries] == [SYSTEM]
    assert con.sql(sql(f", system := '{SYSTEM}'")).fetchall() == with_system  # from the cache
    assert len(recording.relqueries) == 1
    con.sql(sql("")).fetchall()  # another key: the engine runs again, without the system message
    assert [rq.system for rq in recording.relqueries] == [SYSTEM, None]
    assert recording.relqueries[0].prompts == recording.relqueries[1].prompts


def test_polars_takes_the_system_message_as_a_keyword(recording):
    df = pl.DataFrame({"review": REVIEWS})
    out = df.with_columns(fruit=pl.col("review").llm.map("Name a fruit for: {review}", max_tokens=4, system=SYSTEM, engine=recording))
    assert [rq.system for rq in recording.relqueries] == [SYSTEM]
    assert len(recording.submitted[0]) == 2  # duplicates fanned out by the executor
    assert out["fruit"].to_list() == [recording.answers[f"Name a fruit for: {r}"] for r in REVIEWS]


def test_the_executor_gives_the_server_and_sql_the_same_rows(engine, recording):
    from relserve.server import ServerThread, create_app

    call = make_call("llm_filter", "Is this review positive? {review}", system="Be fair.")
    sync = run_call(call, [REVIEWS], engine=recording, progress=False)
    # the server without a result cache: its rows come from the engine, not from the sync run's answers
    with ServerThread(create_app(engine, cache=False)) as server, BoundedClient(server.url) as client:
        remote = client.run("Is this review positive? {review}", [{"review": r} for r in REVIEWS], function="filter", system="Be fair.")
    assert remote.values == sync.values
    assert remote.errors == sync.errors == [None, None, None]
    assert [r.index for r in remote.rows] == [0, 1, 2]
    assert [r.cached for r in remote.rows] == [False, False, False]
    assert remote.stats["engine_rows"] == 2  # the duplicate row got its twin's answer
