"""Budgets on /v1/operators/reduce and /v1/operators/topk (issue 63, item 2), as a tenant on a
real server on loopback: the tenant's day (``max_tokens_per_day``) holds the operators as every
other request (it skipped them: they reserved only their size in flight), and a request's own
budget holds over all of an operator's relQueries.

The stand-in engine spends from each relQuery's budget what its rows take (a row's prompt words
and two answer tokens, as ``FakeEngine`` reports them), as the real engine does before it starts
a row; test_budgets_engine.py has the real engine's gate."""

from __future__ import annotations

import httpx
import pytest
from server_fixtures import FakeEngine, running_server

from relserve.errors import RowError

KEY = "day-tenant-key"
DAY = 1000
TEMPLATE = "Summarize these notes:\n{note}"
REDUCE = {"template": TEMPLATE, "groups": [["the first note", "another note"], ["a third note"]], "max_tokens": 8}
TOPK = {"template": "Is {v} about tea?", "values": ["green tea", "coffee", "black tea", "water"], "k": 1}


class SpendingEngine(FakeEngine):
    """The stand-in engine, spending each row's tokens from its relQuery's budget: a row that does
    not fit fails with the budget's own error, as on the real engine."""

    spent = 0

    def submit(self, rq):
        budget = rq.budget
        if budget is not None:
            prompts = []
            for p in rq.render():
                tokens = len(str(p).split()) + 2
                if isinstance(p, RowError) or budget.reserve(tokens):
                    if not isinstance(p, RowError):
                        budget.settle(tokens, tokens)
                        self.spent += tokens
                    prompts.append(p)
                else:  # the row does not fit: it fails with the budget's own error, the others run
                    prompts.append(RowError(budget.tokens_message(tokens)))
            rq.render = lambda: prompts
        return super().submit(rq)


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))
    engine = SpendingEngine()
    tenants = {"tenants": {"t": {"key": KEY, "max_tokens_per_day": DAY}}}
    with running_server(engine, tenants=tenants, cache=False) as srv:
        srv.engine = engine
        yield srv


def post(srv, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{srv.url}{path}", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)


def error(r: httpx.Response) -> str:
    return r.json()["error"]["message"]


@pytest.mark.parametrize("path,body", [("/v1/operators/reduce", REDUCE), ("/v1/operators/topk", TOPK)])
def test_a_tenants_day_holds_the_operators(server, path, body):
    big = {**body, "template": body["template"] + " " + "word " * 2000}
    r = post(server, path, big)
    assert r.status_code == 429, r.text
    assert error(r).startswith("tenant 't': refused before starting: this request may spend ")
    assert f"and {DAY:,} of the tenant's max_tokens_per_day {DAY:,} are left today (UTC)" in error(r)
    assert int(r.headers["Retry-After"]) > 0 and server.engine.submitted == []
    # a request that fits runs, its rows spending from the day: what it spent is gone from the day
    r = post(server, path, body)
    assert r.status_code == 200, r.text
    assert server.engine.spent > 0 and all(
        rq.budget.chain[-1].tokens_limit == "max_tokens_per_day" for rq in server.engine.submitted)
    r = post(server, path, big)
    assert r.status_code == 429, r.text
    assert f"and {DAY - server.engine.spent:,} of the tenant's max_tokens_per_day {DAY:,} are left" in error(r)


def test_an_operators_own_budget_holds_over_all_its_relqueries(server):
    r = post(server, "/v1/operators/reduce", {**REDUCE, "max_tokens_total": 10})
    assert r.status_code == 422, r.text
    assert error(r).startswith("llm_reduce: refused before starting: it may spend about ")
    assert "the budget is max_tokens_total 10" in error(r) and server.engine.submitted == []
    r = post(server, "/v1/operators/topk", {**TOPK, "max_tokens_total": 10})
    assert (r.status_code, error(r).split(":")[0]) == (422, "llm_topk")
    # partial: the rows that fit are answered, the others fail with the request's budget named
    r = post(server, "/v1/operators/topk", {**TOPK, "max_tokens_total": 16, "on_budget": "partial"})
    assert r.status_code == 200, r.text
    failed = [e for e in r.json()["errors"] if e is not None]
    assert failed and all("budget exceeded: the request's max_tokens_total 16 is reached" in e for e in failed)
    assert len(failed) < len(TOPK["values"])
