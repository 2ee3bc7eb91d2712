"""Budgets on the real engine (issue 47): a call or statement refused before it starts, with its
estimate and its budget in the message, and nothing sent; a partial run that answers the rows
its budget allows, the others NULL with 'budget exceeded', never spending more than the budget;
seconds that run out cancel the rest and free the engine at once; a server tenant's day."""

from __future__ import annotations

import json
import threading
from typing import Any

import duckdb
import httpx
import pytest
from server_fixtures import running_server
from waits import BoundedClient, result_within, wait_until

import relserve.duckdb
from relserve.budget import BudgetExceeded
from relserve.client import ServerError

pytestmark = [pytest.mark.engine, pytest.mark.usefixtures("engine_home")]

STORY = "Write a long story about the number {n}."


class Spending:
    """The real engine, adding up what every relQuery it runs spends (prompt and answer tokens,
    as the engine counts them)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.handles: list[Any] = []
        self._lock = threading.Lock()

    def submit(self, rq: Any, *args: Any, **kwargs: Any) -> Any:
        handle = self._engine.submit(rq, *args, **kwargs)
        with self._lock:
            self.handles.append(handle)
        return handle

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def spent(self) -> int:
        # every relQuery has ended by now (the statement that sent it returned): the limit guards a hang
        return sum(r.prompt_tokens + r.output_tokens for h in self.handles
                   for r in result_within(h, 120, f"relQuery {h.rel_id} to end after its statement did").rows)


def numbers(con: duckdb.DuckDBPyConnection, n: int) -> None:
    con.execute(f"CREATE OR REPLACE TABLE nums AS SELECT g AS n FROM range(1, {n + 1}) t(g)")


def test_a_call_over_its_token_budget_is_refused_before_anything_runs(engine):
    spending = Spending(engine)
    con = duckdb.connect()
    relserve.duckdb.install(con, engine=spending, cache=False, progress=False)
    numbers(con, 20)
    sql = f"SELECT n, llm_map('{STORY}', n, llm_options(max_tokens := 32, max_tokens_total := 500)) FROM nums"
    with pytest.raises(duckdb.Error, match=r"refused before starting: it may spend [\d,]+ engine tokens .* max_tokens_total 500"):
        con.sql(sql).fetchall()
    with pytest.raises(BudgetExceeded, match=r"llm_map: refused before starting: it may spend [\d,]+ engine tokens"):
        relserve.duckdb.sql(con, sql)
    assert spending.handles == []  # nothing reached the engine


@pytest.mark.parametrize("kind", ["map", "filter"])
def test_a_partial_run_answers_the_rows_the_budget_allows_and_never_spends_more(engine, kind):
    spending = Spending(engine)
    con = relserve.duckdb.connect(engine=spending, cache=False, progress=False)
    numbers(con, 40)
    budget = 1500
    call = (f"llm_map('{STORY}', n, llm_options(max_tokens := 24, max_tokens_total := {budget}, on_budget := 'partial'))"
            if kind == "map" else
            f"llm_filter('Is {{n}} an even number?', n, llm_options(max_tokens_total := {budget}, on_budget := 'partial'))")
    rows = con.sql(f"SELECT n, {call} AS a FROM nums ORDER BY n").fetchall()
    answered = [a for _, a in rows if a is not None]
    errors = [e for *_, e in con.errors().fetchall()]
    assert answered and errors, (len(answered), len(errors))
    assert len(answered) + len(errors) == 40
    assert all(e.startswith(f"llm_{kind}: budget exceeded: the call's max_tokens_total 1,500 is reached") for e in errors), errors[:3]
    assert spending.spent() <= budget  # the engine's own count, first pass included


def test_seconds_that_run_out_cancel_the_rest_and_free_the_engine(engine):
    spending = Spending(engine)
    con = relserve.duckdb.connect(engine=spending, cache=False, progress=False)
    # 2,000 stories of 64 tokens through 16 slots: at least 125 waves of 64 decode steps, 8,000
    # steps that no engine takes in the budget's 3 s, so the seconds run out whatever the machine
    numbers(con, 2000)
    rows = con.sql(f"SELECT n, llm_map('{STORY}', n, llm_options(max_tokens := 64, max_seconds := 3, on_budget := 'partial')) "
                   "FROM nums").fetchall()
    # the rest was cancelled by the engine when the seconds ran out, not left to run: every row of
    # the relQuery it did not answer ended with the budget's reason, and the engine has nothing of
    # it left (the limits guard a hang)
    seconds_out = "budget exceeded: the call's max_seconds 3 was reached before this row was answered"
    results = [result_within(h, 120, f"relQuery {h.rel_id} to end after its statement did") for h in spending.handles]
    assert len(results) == 1 and len(results[0].rows) == 2000
    cut = [r for r in results[0].rows if r.error is not None]
    assert cut and all(r.error == seconds_out for r in cut)
    assert engine.wait_idle(120), "the engine still busy 120 s after the call ran out of seconds"
    errors = [e for *_, e in con.errors().fetchall()]
    assert sum(a is None for _, a in rows) == len(errors) > 0
    assert all(e == "llm_map: budget exceeded: the call's max_seconds 3 was reached before this row was answered" for e in errors)


def test_a_statement_budget_is_checked_before_it_starts_and_held_across_its_sites(engine):
    spending = Spending(engine)
    con = relserve.duckdb.connect(engine=spending, cache=False, progress=False)
    numbers(con, 30)
    sql = (f"SELECT n, llm_map('{STORY}', n, llm_options(max_tokens := 16)) FROM nums "
           "WHERE llm_filter('Is {n} an even number?', n)")
    with pytest.raises(BudgetExceeded, match=r"^statement: refused before starting: it may spend about [\d,]+ engine tokens .* max_tokens_total 800"):
        con.sql(sql, max_tokens_total=800)
    assert spending.handles == []
    # the filter's first pass and rows take about 700 tokens, the map's about 56 a row: it runs short
    out = con.sql(sql, max_tokens_total=1000, on_budget="partial").fetchall()
    assert spending.spent() <= 1000
    failed = con.errors().fetchall()
    assert failed and all("budget exceeded: the statement's max_tokens_total 1,000 is reached" in e for *_, e in failed)
    cut = {f: {int(json.loads(args)["n"]) for fn, _, args, _ in failed if fn == f} for f in ("llm_filter", "llm_map")}
    # the rows are those the filter keeps without a budget, less those whose filter the budget cut
    # (NULL is not true); the map answered some of them and left the others NULL, one error each
    kept = con.sql("SELECT n FROM nums WHERE llm_filter('Is {n} an even number?', n) ORDER BY n").fetchall()
    assert sorted(n for n, _ in out) == [n for (n,) in kept if n not in cut["llm_filter"]]
    assert {n for n, a in out if a is None} == cut["llm_map"]
    assert len(failed) == len(cut["llm_filter"]) + len(cut["llm_map"])


TENANTS = {"tenants": {"small": {"key": "small-tenant-key", "max_tokens_per_day": 3000},
                       "free": {"key": "free-tenant-key"}}}


def test_a_server_tenants_day_and_a_requests_own_budget(engine):
    rows = [{"n": i} for i in range(40)]
    with running_server(engine, tenants=TENANTS, cache=False) as srv:
        with BoundedClient(srv.url, api_key="free-tenant-key") as free:
            with pytest.raises(ServerError, match=r"refused before starting: it may spend [\d,]+ engine tokens .* max_tokens_total 300") as e:
                free.run(STORY, rows, max_tokens=24, max_tokens_total=300)
            assert e.value.status == 422
        with BoundedClient(srv.url, api_key="small-tenant-key") as small:
            with pytest.raises(ServerError, match=r"tenant 'small': refused before starting: this request may spend [\d,]+ engine tokens .* "
                                                  r"3,000 of the tenant's max_tokens_per_day 3,000 are left today") as e:
                small.run(STORY, rows, max_tokens=48)
            assert e.value.status == 429
            r = httpx.post(f"{srv.url}/v1/relqueries", json={"template": STORY, "rows": rows, "max_tokens": 48},
                           headers={"Authorization": "Bearer small-tenant-key"}, timeout=60)
            assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0
            got = small.run(STORY, rows, max_tokens=48, on_budget="partial")
            answered = [r for r in got.rows if r.error is None]
            cut = [r for r in got.rows if r.error is not None]
            assert answered and cut
            assert all(r.error.startswith("budget exceeded: the tenant small's max_tokens_per_day 3,000 is reached") for r in cut)
            spent = got.stats["budget_tokens_spent"]
            assert spent == sum(r.prompt_tokens + r.output_tokens for r in answered) <= 3000
            # the day is spent: even a one-row request that would fit a fresh day is refused now
            with pytest.raises(ServerError, match=r"are left today"):
                small.run(STORY, rows[:1], max_tokens=48)


def test_the_estimate_now_waits_behind_what_the_engine_holds(engine, with_policy):
    from relserve.estimate.estimate import estimate_call
    from relserve.functions import make_call
    from relserve.relquery import RelQuery

    call = make_call("llm_map", "Summarize in three words: {x}", max_tokens=8)
    prompts = ["Summarize in three words: a quiet evening", "Summarize in three words: a loud party"]
    assert engine.wait_idle(120), "the engine busy with an earlier test's work"
    idle = estimate_call(call, prompts, engine=engine, model_id=engine.model_id)
    assert idle.queued_relqueries == 0 and idle.now_s == pytest.approx(idle.idle_s)
    with with_policy("fcfs"):  # first come, first served: a new call waits for what came before it
        mark = engine.scheduler_stats()["last_step"]
        big = engine.submit(RelQuery(STORY, [{"n": i} for i in range(120)], max_tokens=48, ignore_eos=True))
        try:
            wait_until(lambda: any(s.prefilled.get(big.rel_id) or s.decoded.get(big.rel_id) for s in engine.scheduler_steps(mark)),
                       "the engine to run a step of the 120-row relQuery", timeout=120)
            busy = estimate_call(call, prompts, engine=engine, model_id=engine.model_id)
        finally:
            big.cancel()
    assert busy.queued_relqueries == 1 and 0 < busy.queued_requests <= 120
    assert busy.now_s > 3 * busy.idle_s  # behind 120 rows of 48 answer tokens
    assert "behind 1 relQuery" in "\n".join(busy.lines())
