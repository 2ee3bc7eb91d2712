"""The model cascade on every surface, with a rule engine and embedder (tests/cascade_doubles.py):
the server's jobs (rows marked, stats, its default, cancel, per-row errors, /plan), DuckDB's
option, session default and EXPLAIN / EXPLAIN ANALYZE, polars' details and EXPLAIN ANALYZE.
The real engine and embedding model are in test_cascade_engine.py."""

from __future__ import annotations

import duckdb
import httpx
import polars as pl
import pytest
from cascade_doubles import LABEL_MACHINERY, RuleEmbedder, RuleEngine, own_text, reviews
from server_fixtures import running_server

import relserve.duckdb
import relserve.polars
from relserve import paths
from relserve.cascade import embedding, policy
from relserve.planner.cache import ResultCache
from relserve.planner.cascade_runner import PROXY

# the policy's sizes at about a seventh (as test_cascade_engine.py sets them; the logic is the
# same, relserve/cascade/policy.py only sizes it): over MIN_ROWS, 100 training + 150 audit rows,
# 200 rest rows
MIN_ROWS, TRAIN, AUDIT = 400, 100, 150
SAMPLE = TRAIN + AUDIT
N = 450
TEMPLATE = "Is it worth it? Review: {review}"


@pytest.fixture(autouse=True)
def small_cascades(monkeypatch):
    monkeypatch.setattr(policy, "MIN_ROWS", MIN_ROWS)
    for name, value in (("MIN_TRAIN", TRAIN), ("MAX_TRAIN", TRAIN), ("MIN_AUDIT", AUDIT), ("MAX_AUDIT", AUDIT)):
        monkeypatch.setattr(policy, name, value)


@pytest.fixture(autouse=True)
def rule_embedder(tmp_path, monkeypatch):
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))
    e = RuleEmbedder()
    previous = embedding.use_embedder(e)
    yield e
    embedding.use_embedder(previous)


def body(**more):
    return {"template": TEMPLATE, "rows": [{"review": r} for r in reviews(N)], "function": "filter", **more}


def run(srv, payload, timeout=120):
    r = httpx.post(srv.url + "/v1/relqueries", json=payload, timeout=timeout)
    assert r.status_code == 201, r.text
    job = r.json()["id"]
    return httpx.get(srv.url + f"/v1/relqueries/{job}/result", params={"timeout": timeout}, timeout=timeout).json()


# -- the server ---------------------------------------------------------------------------------


def test_server_job_marks_proxy_rows_and_reports_the_cascade(tmp_path):
    eng = RuleEngine()
    with running_server(eng, cache=ResultCache(tmp_path / "c.sqlite")) as srv:
        plan = httpx.post(srv.url + "/v1/relqueries/plan", json=body(cascade=0.95), timeout=60).json()
        out = run(srv, body(cascade=0.95))
        again = httpx.post(srv.url + "/v1/relqueries/plan", json=body(cascade=0.95), timeout=60).json()
    assert out["status"] == "finished"
    rows = out["rows"]
    assert [r["value"] for r in rows] == [i % 3 == 0 for i in range(N)]
    proxy = [r for r in rows if r["answered_by"] == PROXY]
    assert len(proxy) == N - SAMPLE and all(0.5 <= r["confidence"] <= 1 for r in proxy)
    assert all(r["answered_by"] is None and 0.5 <= r["confidence"] <= 1 for r in rows if r["answered_by"] != PROXY)
    c = out["stats"]["cascade"]
    assert (c["train"], c["audit"], c["proxy_rows"], c["llm_rows"], c["remainder_rows"]) == (TRAIN, AUDIT, N - SAMPLE, SAMPLE, 0)
    assert c["agreement"] == 1.0 and c["agreement_low"] < 1.0 and c["threshold"] is not None
    # the LLM got the sample and audit as one relQuery, under the job's id, and nothing else
    assert [len(p) for p in eng.submitted] == [SAMPLE] and eng.rel_ids == [out["id"]]
    assert plan["cascade"]["applies"] and plan["cascade"]["target"] == 0.95
    # every answer, the proxy's too, is in the result cache under the cascade's key: nothing to run
    assert again["engine_rows"] == 0 and again["cached_rows"] == N and not again["cascade"]["applies"]


def test_server_default_applies_and_a_call_turns_it_off(tmp_path):
    eng = RuleEngine()
    with running_server(eng, cascade=0.9, cache=False) as srv:
        on = run(srv, body())
        off = run(srv, body(cascade=0))
        small = httpx.post(srv.url + "/v1/relqueries/plan", json={**body(), "rows": [{"review": "good"}] * 3}, timeout=60).json()
        bad = httpx.post(srv.url + "/v1/relqueries", json=body(cascade=0.3), timeout=60)
    assert on["stats"]["cascade"]["target"] == 0.9 and on["stats"]["cascade"]["proxy_rows"] == N - SAMPLE
    assert "cascade" not in off["stats"] and all(r["answered_by"] is None for r in off["rows"])
    assert [len(p) for p in eng.submitted] == [SAMPLE, N]
    assert not small["cascade"]["applies"] and "where a proxy pays" in small["cascade"]["plan"]
    assert bad.status_code == 400 and "cascade must be an agreement target" in bad.text


def test_server_falls_back_to_the_llm_for_every_row_when_the_proxy_is_poor(tmp_path):
    embedding.use_embedder(RuleEmbedder(informative=False))
    eng = RuleEngine()
    with running_server(eng, cache=False) as srv:
        out = run(srv, body(cascade=0.95))
    c = out["stats"]["cascade"]
    assert c["threshold"] is None and c["proxy_rows"] == 0 and "no threshold" in c["fallback"]
    assert [len(p) for p in eng.submitted] == [SAMPLE, N - SAMPLE] and eng.rel_ids[1] == out["id"] + "-rest"
    assert [r["value"] for r in out["rows"]] == [i % 3 == 0 for i in range(N)]


def test_server_cancel_during_the_remainder_keeps_the_answered_rows(tmp_path):
    embedding.use_embedder(RuleEmbedder(informative=False))  # every rest row goes to the LLM
    # the remainder's relQuery answers 50 rows, then holds the rest until the cancel (a label
    # method that calibrates over the relQuery holds them until its last row, so the job's
    # progress does not show them yet)
    eng = RuleEngine(hold=lambda rel_id: 50 if rel_id.endswith("-rest") else None)
    with running_server(eng, cache=False) as srv:
        r = httpx.post(srv.url + "/v1/relqueries", json=body(cascade=0.95), timeout=60)
        job = r.json()["id"]
        eng.wait_holding()
        assert eng.answered[job + "-rest"] == 50
        httpx.delete(srv.url + f"/v1/relqueries/{job}", timeout=60)
        out = httpx.get(srv.url + f"/v1/relqueries/{job}/result", timeout=60).json()
    assert out["status"] == "cancelled" and eng.cancelled == [job + "-rest"]
    rows = out["rows"]
    answered = [r for r in rows if r["error"] is None]
    cancelled = [r for r in rows if r["error"] == "cancelled by the client"]
    # the sample's training and audit rows, and the 50 the remainder answered before the cancel
    assert (len(answered), len(cancelled)) == (SAMPLE + 50, N - SAMPLE - 50)
    assert all(r["value"] == (r["index"] % 3 == 0) for r in answered)


def test_server_cancel_during_the_sample_runs_no_proxy(tmp_path):
    eng = RuleEngine(hold=lambda rel_id: 0)  # the sample's relQuery answers nothing until the cancel
    with running_server(eng, cache=False) as srv:
        job = httpx.post(srv.url + "/v1/relqueries", json=body(cascade=0.95), timeout=60).json()["id"]
        eng.wait_holding()
        httpx.delete(srv.url + f"/v1/relqueries/{job}", timeout=60)
        out = httpx.get(srv.url + f"/v1/relqueries/{job}/result", timeout=60).json()
    assert out["status"] == "cancelled" and len(eng.submitted) == 1
    assert out["stats"]["cascade"]["proxy_rows"] == 0
    assert all(r["answered_by"] is None for r in out["rows"])


def sent_rows(prompts: list[str]) -> list[int]:
    """The row numbers of the prompts the engine got (each row's own text is ' item <n> is ...')."""
    return [int(own_text(p).split()[1]) for p in prompts]


def test_server_per_row_errors_and_raise(tmp_path):
    eng = RuleEngine()
    with running_server(eng, cache=False) as srv:
        clean = run(srv, body(cascade=0.95))
        sample = sent_rows(eng.submitted[0])
        bad = min(sample)  # a row the LLM answers (the same sample every time: the call's seed)
        far = next(r["index"] for r in clean["rows"] if r["answered_by"] == PROXY)  # never reaches the engine
        eng.fails = lambda text: text.startswith((f" item {bad} ", f" item {far} "))
        out = run(srv, body(cascade=0.95))
        raised = run(srv, body(cascade=0.95, on_error="raise"))
    assert [sent_rows(p) for p in eng.submitted] == [sample] * 3
    assert out["status"] == "finished"
    rows = out["rows"]
    assert rows[bad]["value"] is None and rows[bad]["error"] == "engine: row too long for the model"
    assert rows[far]["answered_by"] == PROXY and rows[far]["error"] is None and rows[far]["value"] == (far % 3 == 0)
    assert [r["index"] for r in rows if r["error"] is not None] == [bad]
    assert raised["status"] == "failed" and f"row {bad}" in raised["error"] and "row too long" in raised["error"]


#: the prepared model of the home the run started with (read before a test moves RELSERVE_HOME):
#: a budget's estimate counts the rows' tokens with its tokenizer
PREPARED_MODELS = paths.models_dir()


class SpendingRuleEngine(RuleEngine):
    """The rule engine, spending each row's tokens (its prompt's words and one answer token) from
    its relQuery's budget as the real engine does before it starts a row, and keeping the names
    of the budgets each relQuery of rows spent from."""

    def __init__(self) -> None:
        super().__init__()
        self.spent = 0
        self.budgets: list[list[str]] = []

    def submit(self, rq):
        if not str(rq.rel_id).startswith(LABEL_MACHINERY):
            self.budgets.append([a.name for a in rq.budget.chain] if rq.budget is not None else [])
        if rq.budget is not None:
            for p in rq.render():
                tokens = len(str(p).split()) + 1
                assert rq.budget.reserve(tokens), "a row over the day: the test sets the day large enough"
                rq.budget.settle(tokens, tokens)
                self.spent += tokens
        return super().submit(rq)


def test_server_every_relquery_of_a_cascade_spends_from_the_tenants_day(tmp_path, monkeypatch):
    # a tenant with a daily limit: the cascade's sample and remainder relQueries both spend from
    # the day (they ran with no budget, so a cascade request was never counted against it)
    home = tmp_path / "tenant-home"
    home.mkdir()
    (home / "models").symlink_to(PREPARED_MODELS)
    monkeypatch.setenv("RELSERVE_HOME", str(home))
    embedding.use_embedder(RuleEmbedder(informative=False))  # no threshold: the rest go to the LLM too
    eng = SpendingRuleEngine()
    key = "day-tenant-key"
    headers = {"Authorization": f"Bearer {key}"}
    tenants = {"tenants": {"t": {"key": key, "max_tokens_per_day": 10**7}}}
    with running_server(eng, tenants=tenants, cache=False) as srv:
        r = httpx.post(srv.url + "/v1/relqueries", json=body(cascade=0.95, max_tokens_total=10**6), headers=headers,
                       timeout=60)
        assert r.status_code == 201, r.text
        out = httpx.get(srv.url + f"/v1/relqueries/{r.json()['id']}/result", params={"timeout": 120}, headers=headers,
                        timeout=120).json()
    assert out["status"] == "finished" and [len(p) for p in eng.submitted] == [SAMPLE, N - SAMPLE]
    # each relQuery spent from the request's own budget, under the tenant's day
    assert eng.budgets == [["request", "tenant t"]] * 2
    assert out["stats"]["budget_tokens_spent"] == eng.spent > 0


# -- DuckDB -------------------------------------------------------------------------------------


@pytest.fixture
def con():
    c = duckdb.connect()
    c.execute("CREATE TABLE reviews AS SELECT unnest($1) AS review", [reviews(N)])
    return c


def test_duckdb_option_explain_and_explain_analyze(con):
    eng = RuleEngine()
    relserve.duckdb.install(con, engine=eng)
    q = f"SELECT llm_filter('{TEMPLATE}', review, llm_options(cascade := 0.95)) AS ok FROM reviews"
    planned = str(relserve.duckdb.explain(con, q))
    assert f"cascade               target 0.95: the LLM answers {TRAIN} training + {AUDIT} audit rows first" in planned
    assert eng.submitted == []
    ran = relserve.duckdb.explain(con, q, analyze=True)
    text = str(ran)
    assert "proxy rows" in text and f"{N - SAMPLE:,}" in text and "estimated agreement" in text and "threshold" in text
    got = ran.sites[0].analyzed[0]
    assert got.cascade.proxy_rows == N - SAMPLE and got.llm_rows == SAMPLE and got.rows == N
    assert [len(p) for p in eng.submitted] == [SAMPLE]


def test_duckdb_session_default_and_off_per_call(con):
    eng = RuleEngine()
    relserve.duckdb.install(con, engine=eng, cascade=0.9)
    rows = relserve.duckdb.sql(con, f"SELECT llm_filter('{TEMPLATE}', review) FROM reviews").fetchall()
    assert [r[0] for r in rows] == [i % 3 == 0 for i in range(N)] and [len(p) for p in eng.submitted] == [SAMPLE]
    off = relserve.duckdb.explain(con, f"SELECT llm_filter('{TEMPLATE} ', review, llm_options(cascade := 0)) FROM reviews",
                                  analyze=True)
    # (the label plan's sample of 64 rows, scored as the rows are, answered them: the rest ran after)
    assert off.sites[0].analyzed[0].cascade is None and [len(p) for p in eng.submitted] == [SAMPLE, N - 64]


# -- polars -------------------------------------------------------------------------------------


def test_polars_details_mark_proxy_rows_and_explain_analyze():
    eng = RuleEngine()
    lf = pl.LazyFrame({"review": reviews(N)}).with_columns(
        ok=pl.col("review").llm.filter(TEMPLATE, cascade=0.95, engine=eng))
    found = relserve.polars.explain(lf, analyze=True)
    assert len(found) == 1 and found[0].cascade.proxy_rows == N - SAMPLE and "estimated agreement" in str(found[0])
    d = relserve.polars.details()
    last = d.filter(pl.col("call") == d["call"].max())
    assert last.height == N
    assert last.filter(pl.col("answered_by") == PROXY).height == N - SAMPLE
    assert last.filter(pl.col("answered_by") == "llm").height == SAMPLE
    assert last.filter(pl.col("answered_by") == PROXY)["confidence"].min() >= 0.5
    assert (found[0].cascade.train, found[0].cascade.audit, found[0].cascade.llm_rows) == (TRAIN, AUDIT, SAMPLE)


def test_duckdb_decimal_literals_are_numbers_in_llm_options(con):
    # `0.95` is a DECIMAL in SQL: every numeric option takes it (top_p and temperature did not)
    eng = RuleEngine()
    relserve.duckdb.install(con, engine=eng)
    got = con.sql(f"SELECT llm_filter('{TEMPLATE}', 'a good one', llm_options(top_p := 0.5, cascade := 0.95))").fetchall()
    assert got == [(True,)]
