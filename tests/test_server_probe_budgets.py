"""A tenant's label probes spend from its budget (found by an audit, 7 Dec): the answer-field
probes (``answer_field := 'auto'``: one full prompt per candidate name) and the prior method's
content-free probes ran with no budget, and were charged once up front whatever they cost, so a
tenant whose day was spent, or a request with ``max_tokens_total`` and ``on_budget: partial``,
got engine work run without limit, request after request. Nor does a budgeted job warm its rows'
prefix: those tokens are in no row's reservation. The stand-in engine spends each prompt from
its relQuery's budget as the real engine does, and refuses a prompt that does not fit."""

from __future__ import annotations

import httpx
import pytest
from server_fixtures import FakeEngine, running_server

from relserve import paths
from relserve.errors import RowError

KEY = "key-of-t"
DAY = 500
#: a long template: each probe of it costs about 3,000 tokens
PAD = "Context: " + "lorem ipsum " * 1500


class SpendingEngine(FakeEngine):
    """Spends each prompt's tokens (its words, plus two) from its relQuery's budget, refusing one
    that does not fit; records every relQuery's (rel_id, whether it had a budget) and warm-up."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, bool]] = []
        self.warmed: list[str] = []

    def warm_prefix(self, text: str = "", system: str | None = None) -> int:
        self.warmed.append(text)
        return len(text.split())

    def submit(self, rq, tenancy=None):
        self.log.append((rq.rel_id, rq.budget is not None))
        if rq.budget is not None:
            out = []
            for p in rq.render():
                tokens = len(str(p).split()) + 2
                if isinstance(p, RowError) or rq.budget.reserve(tokens):
                    if not isinstance(p, RowError):
                        rq.budget.settle(tokens, tokens)
                    out.append(p)
                else:
                    out.append(RowError(rq.budget.tokens_message(tokens)))
            rq.render = lambda: out
        return super().submit(rq)


@pytest.fixture
def home(tmp_path, monkeypatch):
    # the budget's estimate counts tokens with the model's tokenizer: the prepared model, linked
    models = paths.models_dir()
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "models").symlink_to(models)
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))


def post(srv, body: dict) -> dict:
    r = httpx.post(srv.url + "/v1/relqueries", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert r.status_code == 201, r.text
    return httpx.get(srv.url + f"/v1/relqueries/{r.json()['id']}/result", params={"timeout": 60},
                     headers={"Authorization": f"Bearer {KEY}"}, timeout=60).json()


def spent_day(srv) -> tuple:
    state = srv.server.config.app.state.relserve
    tenant = next(iter(state.tenants.by_hash.values()))
    return state, tenant


def test_answer_field_probes_spend_from_a_spent_day_and_are_refused(home):
    engine = SpendingEngine()
    with running_server(engine, tenants={"tenants": {"t": {"key": KEY, "max_tokens_per_day": DAY}}}, cache=False) as srv:
        state, tenant = spent_day(srv)
        state.day_budgets.allowance(tenant).charge(DAY)
        outs = [post(srv, {"function": "filter", "template": PAD + f" ({i}) Is this about tea? {{x}}",
                           "rows": [{"x": "green tea"}], "method": "score", "answer_field": "auto",
                           "on_budget": "partial", "isolated": True}) for i in range(3)]
        left = state.day_budgets.allowance(tenant).left()
    # every relQuery the requests sent (20 probes each, then the row) spent from the day
    assert len(engine.log) == 3 * 21 and all(budgeted for _, budgeted in engine.log)
    assert [o["status"] for o in outs] == ["finished"] * 3
    assert all(o["rows"][0]["error"].startswith("budget exceeded: the tenant t's max_tokens_per_day 500 is reached")
               for o in outs)
    assert left == 0  # nothing ran past the day


def test_prior_probes_that_do_not_fit_refuse_the_request_by_name(home):
    engine = SpendingEngine()
    with running_server(engine, tenants={"tenants": {"t": {"key": KEY, "max_tokens_per_day": DAY}}}, cache=False) as srv:
        state, tenant = spent_day(srv)
        state.day_budgets.allowance(tenant).charge(DAY)
        out = post(srv, {"function": "filter", "template": PAD + " Is this about tea? {x}", "rows": [{"x": "green tea"}],
                         "method": "prior", "label_plan": "refresh", "on_budget": "partial"})
        left = state.day_budgets.allowance(tenant).left()
    assert len(engine.log) == 1 and engine.log[0][0].startswith("prior-") and engine.log[0][1]
    assert out["status"] == "failed"
    assert "llm_filter: the content-free probes that calibrate its labels do not fit its budget" in out["error"]
    assert left == 0


def test_a_requests_max_tokens_total_holds_its_probes_and_its_rows(home):
    engine = SpendingEngine()
    with running_server(engine, tenants={"tenants": {"t": {"key": KEY}}}, cache=False) as srv:
        out = post(srv, {"function": "filter", "template": PAD + " Is this about tea? {x}", "rows": [{"x": "green tea"}],
                         "method": "score", "answer_field": "auto", "max_tokens_total": 10, "on_budget": "partial"})
    assert len(engine.log) == 21 and all(budgeted for _, budgeted in engine.log)
    assert out["status"] == "finished" and out["rows"][0]["error"].startswith("budget exceeded: the request's max_tokens_total 10")
    assert out["stats"]["budget_tokens_spent"] == 0


def test_a_budgeted_job_warms_no_prefix_and_an_unbudgeted_one_does(home):
    engine = SpendingEngine()
    shared = "lorem ipsum " * 200
    rows = [{"x": shared + "a"}, {"x": shared + "b"}]
    tenants = {"tenants": {"t": {"key": KEY, "max_tokens_per_day": DAY}, "u": {"key": "key-of-u"}}}
    with running_server(engine, tenants=tenants, cache=False) as srv:
        state, tenant = spent_day(srv)
        state.day_budgets.allowance(tenant).charge(DAY)
        refused = post(srv, {"template": "Summarize: {x}", "rows": rows, "on_budget": "partial"})
        assert engine.warmed == []
        r = httpx.post(srv.url + "/v1/relqueries", json={"template": "Summarize: {x}", "rows": rows},
                       headers={"Authorization": "Bearer key-of-u"}, timeout=60)
        assert r.status_code == 201, r.text
        httpx.get(srv.url + f"/v1/relqueries/{r.json()['id']}/result", params={"timeout": 60},
                  headers={"Authorization": "Bearer key-of-u"}, timeout=60)
    assert [row["error"][:15] for row in refused["rows"]] == ["budget exceeded"] * 2
    assert engine.warmed == ["Summarize: " + shared]
