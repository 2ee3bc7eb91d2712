"""A tenant with a valid key, trying to hurt the others or learn their prompts, against a real
server on loopback (issue 23). The size limits are checked with the instant stand-in engine
(what matters is that nothing is rendered or run); the prefix cache, the priority classes and the
fairness between tenants with the real engine."""

from __future__ import annotations

import threading
import time

import httpx
import psutil
import pytest
from server_fixtures import FakeEngine, running_server
from waits import BoundedClient, Worker, wait_until

from relserve.server import hash_key

ALICE, BOB, MALLORY, OPS = "alice-secret-key", "bobby-secret-key", "mallory-secret-key", "ops-metrics-key1"
TENANTS = {
    "limits": {"max_tokens_in_flight": 200_000},
    "metrics_key_sha256": [hash_key(OPS)],
    "tenants": {
        "alice": {"key": ALICE, "min_priority": -5},
        "bob": {"key": BOB},
        "mallory": {"key": MALLORY, "max_tokens_in_flight": 50_000},
    },
}


def _post(srv, path, body, key=MALLORY, timeout=120):
    return httpx.post(srv.url + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=timeout)


def _error(r: httpx.Response) -> str:
    return r.json()["error"]["message"]


@pytest.fixture
def fake():
    return FakeEngine()


@pytest.fixture
def server(fake):
    with running_server(fake, tenants=TENANTS, cache=False) as srv:
        yield srv


# ---------------------------------------------------------------- 1. work bounded before it is done


def _rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def test_a_template_with_thousands_of_placeholders_is_refused_before_rendering(server, fake):
    # issue 23's example: "{a}" * 20000 with a large value renders about 100 GB if nothing stops it
    body = {"template": "{a}" * 20_000, "rows": [{"a": "x" * 100_000}]}
    before = _rss_mb()
    r = _post(server, "/v1/relqueries", body)
    assert r.status_code == 413, r.text
    assert _error(r) == "template too large: 60000 characters (template plus system message); the limit max_template_chars is 32768"
    # within the template size, the number of placeholders is bounded too
    body = {"template": "{a}" * 2_000, "rows": [{"a": "x" * 100_000}]}
    for path in ("/v1/relqueries", "/v1/relqueries/plan"):
        r = _post(server, path, body)
        assert r.status_code == 413, r.text
        assert _error(r) == "template has 2000 placeholders; the limit max_placeholders is 64"
    assert fake.submitted == []
    assert _rss_mb() - before < 200  # nothing near the rendered size was built


def test_rendered_size_is_computed_from_lengths_and_refused_with_the_figure(server, fake):
    # 60 placeholders x a 1 MB value x 2 rows: a 2.5 MB body that would render to 120 MB
    body = {"template": "{a}," * 60, "rows": [{"a": "y" * 1_000_000}] * 2}
    r = _post(server, "/v1/relqueries", body)
    assert r.status_code == 413, r.text
    msg = _error(r)
    assert msg.startswith("request too large: its prompts would render to 120001200 characters (2 rows); the limit max_rendered_chars is 33554432")
    r = _post(server, "/v1/relqueries/plan", body)
    assert r.status_code == 413 and "max_rendered_chars" in _error(r)
    assert fake.submitted == []


def test_few_shot_examples_and_labels_count_in_every_rows_size(server, fake):
    # one example with a 600 KB value under 60 placeholders: 36 MB of text before every row
    body = {"template": "{x};" * 60, "rows": [{"x": "r"}], "examples": [{"x": "e" * 600_000, "answer": "a"}]}
    r = _post(server, "/v1/relqueries", body)
    assert r.status_code == 413 and "max_rendered_chars" in _error(r), r.text
    # classify's answer line lists the labels in every prompt
    labels = [f"label number {i} " + "l" * 420 for i in range(1000)]
    rows = [{"x": i} for i in range(100)]
    r = _post(server, "/v1/relqueries", {"template": "{x}", "rows": rows, "function": "classify", "labels": labels})
    assert r.status_code == 413 and "would render to 43892090 characters (100 rows)" in _error(r), r.text
    assert fake.submitted == []


def test_a_huge_template_is_refused(server):
    r = _post(server, "/v1/relqueries", {"template": "{x} " + "z" * 40_000, "rows": [{"x": 1}]})
    assert r.status_code == 413 and "max_template_chars is 32768" in _error(r)
    # the system message counts with the template
    r = _post(server, "/v1/relqueries", {"template": "{x}", "rows": [{"x": 1}], "system": "s" * 40_000})
    assert r.status_code == 413 and "max_template_chars" in _error(r)
    r = _post(server, "/v1/cells", {"cells": [{"id": "A1", "template": "{x}" * 100, "args": [1]}]})
    assert r.status_code == 413 and "max_placeholders" in _error(r)


def test_tokens_count_prompt_and_answer_not_only_rows(server, fake):
    # 100 short rows, well within the row limits, but x 32768 answer tokens each
    rows = [{"x": i} for i in range(100)]
    r = _post(server, "/v1/relqueries", {"template": "Say {x}", "rows": rows, "max_tokens": 32768})
    assert r.status_code == 413, r.text
    assert "max_tokens_in_flight is 50000" in _error(r) and "100 rows" in _error(r)
    # the OpenAI-compatible endpoint is bounded the same way
    r = _post(server, "/v1/completions", {"prompt": ["hi"] * 10, "max_tokens": 32768})
    assert r.status_code == 413 and "max_tokens_in_flight" in _error(r)
    assert fake.submitted == []


def test_tokens_in_flight_per_tenant_is_429_naming_the_limit_and_other_tenants_still_run():
    gated = FakeEngine(gated=True)  # no row is answered: the first relQuery runs while the second arrives
    with running_server(gated, tenants=TENANTS, cache=False) as srv:
        rows = [{"x": f"row {i}"} for i in range(4)]
        # 4 rows x 10000 answer tokens + prompts: about 40,200 of mallory's 50,000
        first = _post(srv, "/v1/relqueries", {"template": "Say {x}", "rows": rows, "max_tokens": 10_000})
        assert first.status_code == 201
        second = _post(srv, "/v1/relqueries", {"template": "Say {x}", "rows": rows[:2], "max_tokens": 10_000})
        assert second.status_code == 429, second.text
        msg = _error(second)
        assert msg.startswith("tenant 'mallory' would have ") and "tokens in flight" in msg
        assert "the limit is 50000 (max_tokens_in_flight" in msg
        assert second.headers["Retry-After"] == "1"
        # planning is counted as running: a tenant at its limit cannot make the server render either
        plan = _post(srv, "/v1/relqueries/plan", {"template": "Say {x}", "rows": rows[:2], "max_tokens": 10_000})
        assert plan.status_code == 429 and "max_tokens_in_flight" in _error(plan)
        # another tenant is not affected
        ok = _post(srv, "/v1/relqueries", {"template": "Say {x}", "rows": rows, "max_tokens": 10_000}, key=BOB)
        assert ok.status_code == 201
        gated.open()


def test_planning_holds_the_tenants_budget_while_it_renders(server, fake, monkeypatch):
    """A plan in progress counts against the tenant: a second request made while the first is
    still being planned is refused, before it renders anything."""
    import relserve.server.api_relqueries as api

    started, release = threading.Event(), threading.Event()
    released: list[bool] = []  # whether the held plan was let go by the test, not by its own limit
    real = api.plan_relquery

    def slow_plan(*a, **kw):
        started.set()
        released.append(release.wait(120))
        return real(*a, **kw)

    monkeypatch.setattr(api, "plan_relquery", slow_plan)
    body = {"template": "Say {x}", "rows": [{"x": i} for i in range(4)], "max_tokens": 10_000}
    out: dict = {}
    t = Worker(lambda: out.setdefault("r", _post(server, "/v1/relqueries/plan", body)), what="the first plan's answer")
    t.start()
    assert started.wait(30), "the first plan did not start within 30 s"
    try:
        r = _post(server, "/v1/relqueries", body)
        assert r.status_code == 429 and "max_tokens_in_flight" in _error(r)
    finally:
        release.set()
        t.finish(60)
    assert released == [True], "the held plan ran out its 120 s before the test released it"
    assert out["r"].status_code == 200
    # once the plan is done its budget is free again
    monkeypatch.setattr(api, "plan_relquery", real)
    assert _post(server, "/v1/relqueries/plan", body).status_code == 200


# ---------------------------------------------------------------- 3. priority classes


def test_a_tenant_cannot_jump_ahead_unless_the_tenants_file_allows_it(server, fake):
    r = _post(server, "/v1/relqueries", {"template": "Say {x}", "rows": [{"x": 1}], "priority": -1000})
    assert r.status_code == 403
    assert _error(r).startswith("priority -1000 is not allowed for tenant 'mallory': the allowed range is 0 to 1000")
    for path, body in (
        ("/v1/cells", {"cells": [{"id": "A1", "template": "{x}", "args": [1]}], "priority": -1}),
        ("/v1/completions", {"prompt": "hi", "priority": -1}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "priority": -1}),
    ):
        r = _post(server, path, body)
        assert r.status_code == 403 and "allowed range is 0 to 1000" in _error(r), (path, r.text)
    # alice's entry allows down to -5, not below
    r = _post(server, "/v1/relqueries", {"template": "Say {x}", "rows": [{"x": 1}], "priority": -5}, key=ALICE)
    assert r.status_code == 201
    r = _post(server, "/v1/relqueries", {"template": "Say {x}", "rows": [{"x": 1}], "priority": -6}, key=ALICE)
    assert r.status_code == 403 and "allowed range is -5 to 1000" in _error(r)
    assert [rq.priority for rq in fake.submitted] == [-5]


# ---------------------------------------------------------------- 4. what the server gives away


def test_metrics_need_a_metrics_key(server):
    r = httpx.get(server.url + "/metrics")
    assert r.status_code == 401 and "/metrics needs a metrics key" in _error(r)
    r = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {MALLORY}"})
    assert r.status_code == 401
    r = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {OPS}"})
    assert r.status_code == 200 and "relserve_requests_rejected" in r.text
    assert r.headers["cache-control"] == "no-store"


def test_metrics_scrapes_do_not_each_call_the_engine():
    calls = []

    class Plugin(FakeEngine):
        uses_plugin = True

        def scheduler_stats(self):
            calls.append(time.monotonic())
            return {"steps": len(calls), "policy": "relserve"}

    with running_server(Plugin(), tenants=TENANTS, cache=False) as srv:
        srv.server.config.app.state.relserve.metrics.scheduler_refresh_s = 3600.0
        with httpx.Client(headers={"Authorization": f"Bearer {OPS}"}) as c:
            for _ in range(20):
                r = c.get(srv.url + "/metrics")
                assert r.status_code == 200 and "relserve_scheduler_steps_total 1.0" in r.text
    assert len(calls) == 1  # one engine call for 20 scrapes within the refresh period


def test_addin_files_carrying_a_key_are_not_stored_by_caches_nor_sent_as_a_referer(server):
    for name in ("functions.js", "manifest.xml", "functions.html", "functions.json"):
        r = httpx.get(f"{server.url}/addin/{name}?key={ALICE}")
        assert r.status_code == 200 and r.headers["cache-control"] == "no-store", name
        # functions.html?key=... loads Microsoft's script: its address must not go there (an audit, 7 Dec)
        assert r.headers["referrer-policy"] == "no-referrer", name
    page = httpx.get(f"{server.url}/addin/functions.html?key={ALICE}").text
    assert page.index('<meta name="referrer" content="no-referrer">') < page.index("appsforoffice.microsoft.com")


def test_the_result_cache_file_is_private(tmp_path):
    import os
    import stat

    from relserve.planner.cache import ResultCache

    old = os.umask(0o022)
    try:
        cache = ResultCache(tmp_path / "c" / "results.sqlite")
        cache.put_many("m", {}, [("p", "a")])
    finally:
        os.umask(old)
    for f in (tmp_path / "c").iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    assert stat.S_IMODE((tmp_path / "c").stat().st_mode) == 0o700


def test_serve_refuses_an_open_server_on_a_non_loopback_address():
    from typer.testing import CliRunner

    from relserve.cli import app
    from relserve.cli.serve import is_loopback

    r = CliRunner().invoke(app, ["serve", "--host", "0.0.0.0"])
    assert r.exit_code != 0 and "--insecure-open" in r.output
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5") and not is_loopback("example.org")


# ---------------------------------------------------------------- the real engine


REAL_TENANTS = {
    "tenants": {
        "alice": {"key": ALICE},
        "bob": {"key": BOB},
        "carol": {"key": "carol-secret-key", "cache_group": "finance"},
        "dave": {"key": "dave-secret-key1", "cache_group": "finance"},
    },
}


@pytest.fixture(scope="module")
def real(engine):
    with running_server(engine, tenants=REAL_TENANTS, cache=False) as srv:
        yield srv


def _cached_tokens(srv, key: str, prompt: str) -> int:
    with BoundedClient(srv.url, api_key=key) as c:
        res = c.run(prompts=[prompt], max_tokens=2, cache=False)
    row = res.rows[0]
    assert row.error is None, row.error
    return row.cached_tokens


def _secret_prompt() -> str:
    # long enough for several KV blocks; unique, so no earlier test cached it
    import uuid

    words = " ".join(f"clause {i} of the confidential merger plan" for i in range(40))
    return f"{uuid.uuid4().hex} Summarize: {words}"


@pytest.mark.engine
def test_another_tenant_cannot_see_a_prompt_in_the_prefix_cache(engine, real):
    prompt = _secret_prompt()
    assert _cached_tokens(real, ALICE, prompt) == 0
    mine = _cached_tokens(real, ALICE, prompt)
    assert mine >= engine.block_size  # alice's repeat hits her own blocks
    assert _cached_tokens(real, BOB, prompt) == 0  # bob's guess of it tells him nothing
    assert _cached_tokens(real, BOB, prompt) > 0  # (his own repeat hits his own blocks)
    assert _cached_tokens(real, ALICE, prompt) == mine  # and alice's hits are still hers


@pytest.mark.engine
def test_a_cache_group_shares_its_prefix_cache_and_isolation_costs_nothing_within_a_tenant(engine, real):
    prompt = _secret_prompt()
    assert _cached_tokens(real, "carol-secret-key", prompt) == 0
    shared = _cached_tokens(real, "dave-secret-key1", prompt)
    assert shared >= engine.block_size
    assert _cached_tokens(real, ALICE, prompt) == 0
    # without tenants (no salt) a repeat hits exactly as many tokens as a tenant's own repeat
    other = _secret_prompt()
    with running_server(engine, cache=False) as open_srv:
        assert _cached_tokens(open_srv, None, other) == 0
        unsalted = _cached_tokens(open_srv, None, other)
    assert _cached_tokens(real, ALICE, other) == 0  # the open server's blocks are not alice's
    assert _cached_tokens(real, ALICE, other) == unsalted == shared


@pytest.mark.engine
def test_one_tenants_flood_of_small_relqueries_does_not_starve_anothers_relquery(engine):
    """RelServe ranks short relQueries first, so a flood of 1-row relQueries from one tenant would
    run entirely before another tenant's 12-row relQuery; the tenant share ranks the tenant with
    less work in the engine first, so the 12 rows run while most of the flood still waits."""
    with running_server(engine, tenants=REAL_TENANTS, cache=False) as srv:
        flood, victim = BoundedClient(srv.url, api_key=ALICE), BoundedClient(srv.url, api_key=BOB)
        ids = [flood.submit(prompts=[f"Count to ten, attempt {i}."], max_tokens=24, cache=False) for i in range(120)]
        rid = victim.submit(prompts=[f"Name a colour, take {i}." for i in range(12)], max_tokens=24, cache=False)
        # the server's own jobs: when each finished, whatever the test's polling costs
        jobs = {j.id: j for j in srv.server.config.app.state.relserve.jobs.all()}
        res = victim.result(rid)
        assert res.status == "finished" and all(r.error is None for r in res.rows)
        for i in ids:
            flood.result(i)
    done = jobs[rid].finished_at
    unfinished = sum(jobs[i].finished_at > done for i in ids)
    assert unfinished >= 60, f"only {unfinished} of the flood's 120 relQueries were left when the other tenant's finished"


# ---------------------------------------------------------------- the policy's tenant share (plain Python)


def _reqs(rel_id: str, n: int, tenant: str, arrival: float, weight: float = 1.0):
    from relserve.policy import Req

    return [Req(f"{rel_id}-{i}", rel_id, arrival, n, 40, 16, tenant=tenant, weight=weight) for i in range(n)]


def _first_admitted(policy_name: str, waiting) -> str:
    from relserve.policy import Limits, StepView, make_policy

    limits = Limits(max_num_batched_tokens=64, max_num_seqs=256, kv_capacity_tokens=100_000, kv_free_tokens=100_000)
    plan = make_policy(policy_name).schedule(StepView(1.0, list(waiting), [], limits))
    return plan.admit[0].rel_id


@pytest.mark.parametrize("policy_name", ["relserve", "sp"])
def test_the_tenant_with_less_work_in_the_engine_goes_first(policy_name):
    # mallory's 50 one-row relQueries arrived first and are each shorter than bob's 8-row one:
    # ranked by remaining time alone they would all run before it
    flood = [r for k in range(50) for r in _reqs(f"m{k}", 1, "mallory", arrival=0.0)]
    bob = _reqs("bob", 8, "bob", arrival=0.5)
    assert _first_admitted(policy_name, flood + bob) == "bob"
    # a single tenant ranks as before (no share): the shortest relQuery first
    alone = [r for k in range(50) for r in _reqs(f"m{k}", 1, "bob", arrival=0.0)] + _reqs("bob", 8, "bob", arrival=0.5)
    assert _first_admitted(policy_name, alone) == "m0"
    # weight: mallory's 50 rows weigh less than bob's 8 when her weight is 10x
    heavy = [r for k in range(50) for r in _reqs(f"m{k}", 1, "mallory", arrival=0.0, weight=10.0)]
    assert _first_admitted(policy_name, heavy + bob) == "m0"


def test_a_tenant_ranked_behind_does_not_interrupt_the_decoding_of_one_ranked_ahead():
    from relserve.policy import Limits, StepKind, StepView, make_policy

    limits = Limits(max_num_batched_tokens=1024, max_num_seqs=256, kv_capacity_tokens=100_000, kv_free_tokens=100_000)
    bob = _reqs("bob", 4, "bob", arrival=0.5)
    for r in bob:  # prefilled, decoding
        r.computed_tokens, r.output_tokens = r.prompt_tokens, 1
    flood = [r for k in range(50) for r in _reqs(f"m{k}", 1, "mallory", arrival=0.0)]
    plan = make_policy("relserve").schedule(StepView(1.0, flood, bob, limits))
    assert (plan.kind, plan.reason) == (StepKind.DECODE, "tenant-decode")
    # the same queues from one tenant: RelServe's transitional rule prefills the waiting rows
    # beside the running ones (it would do that to bob for mallory without the tenant rule)
    same = [r for k in range(50) for r in _reqs(f"m{k}", 1, "bob", arrival=0.0)]
    assert make_policy("relserve").schedule(StepView(1.0, same, bob, limits)).reason == "transitional-prefill"


@pytest.mark.engine
def test_a_flooding_tenant_decodes_at_most_its_cap_beside_another_tenants_row(engine):
    """Ranking the small tenant's row first is not enough on a CPU, where each decode step costs
    in proportion to its batch: while the small tenant has work, the flooding tenant (its
    ``max_running_shared`` 4) keeps at most 4 rows decoding, the rest held with their KV blocks;
    alone it decodes all of them (work-conserving)."""
    tenants = {"tenants": {"flood": {"key": "flood-secret-key", "max_running_shared": 4}, "small": {"key": BOB}}}
    with running_server(engine, tenants=tenants, cache=False) as srv:
        flood, small = BoundedClient(srv.url, api_key="flood-secret-key"), BoundedClient(srv.url, api_key=BOB)
        mark = engine.scheduler_stats()["last_step"]
        prompts = [f"Write the numbers from {i} to {i + 200}, separated by commas." for i in range(24)]
        fid = flood.submit(prompts=prompts, max_tokens=64, cache=False)
        # the flood decodes as many rows as the engine takes (the test engine's max_num_seqs is
        # 16; uncapped: it is alone) before the small row comes
        wait_until(lambda: any(s.decoded.get(fid, 0) >= 12 for s in engine.scheduler_steps(mark)),
                   "the flood decoding 12 rows or more in one step")
        res = small.run(prompts=["Name a colour."], max_tokens=8, cache=False)
        assert res.status == "finished" and res.rows[0].error is None
        fres = flood.result(fid)
        assert fres.status == "finished" and len(fres.rows) == 24 and all(r.error is None for r in fres.rows)
        steps = [s for s in engine.scheduler_steps(mark) if s.ran(fid) or s.ran(res.id)]
    # the small row finished first: the flood ran on after its last step
    small_steps = [s for s in steps if s.ran(res.id)]
    assert small_steps and steps[-1].ran(fid) and not steps[-1].ran(res.id)
    # while the small row ran, the flood decoded at most its 4 rows a step, the rest held
    during = [s for s in small_steps if s.kind == "decode"]
    assert during, "the small row never decoded"
    assert all(s.decoded.get(fid, 0) <= 4 and s.decoded.get(res.id) == 1 for s in during), during
    assert max(s.held.get(fid, 0) for s in during) >= 8, "the flood's rows beyond its cap were never held"
    # before the small row came the flood decoded 12 or more rows a step (no cap alone)
    assert max(s.decoded.get(fid, 0) for s in steps) >= 12


def test_an_open_server_on_loopback_answers_loopback_host_names_only():
    """DNS rebinding (an audit, 7 Dec): a web page the user opens re-points a name of its own at
    127.0.0.1, and its requests reach an open server with a ``Host`` of that name. ``relserve serve``
    gives such a server loopback names (and the ``--public-url``'s) only."""
    from relserve.server.app import open_host_names

    hosts = open_host_names("https://sheets.example.org:8443/")
    assert hosts == ["localhost", "127.0.0.1", "::1", "sheets.example.org"]
    assert open_host_names(None) == ["localhost", "127.0.0.1", "::1"]
    with running_server(FakeEngine(), allowed_hosts=hosts, cache=False) as srv:
        port = srv.url.rsplit(":", 1)[1]
        body = {"template": "hi {x}", "rows": [{"x": 1}]}
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example"):
            assert httpx.post(srv.url + "/v1/relqueries", json=body, headers={"Host": host}, timeout=30).status_code == 400
            assert httpx.get(srv.url + "/v1/relqueries", headers={"Host": host}, timeout=30).status_code == 400
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "sheets.example.org"):
            assert httpx.post(srv.url + "/v1/relqueries", json=body, headers={"Host": host}, timeout=30).status_code == 201


@pytest.mark.parametrize(("options", "hosts"), [
    ([], ["localhost", "127.0.0.1", "::1"]),
    (["--public-url", "https://sheets.example.org"], ["localhost", "127.0.0.1", "::1", "sheets.example.org"]),
    (["--host", "0.0.0.0", "--insecure-open"], None),  # opened on purpose: its clients are elsewhere
    (["--tenants", "TENANTS"], None),  # keys guard it
])
def test_serve_gives_create_app_the_host_names_its_mode_allows(monkeypatch, tmp_path, options, hosts):
    from typer.testing import CliRunner

    import relserve
    import relserve.server
    from relserve.cli import app

    class Built(Exception):
        pass

    seen: dict = {}

    def create_app(engine, **kwargs):
        seen.update(kwargs)
        raise Built

    class ClosableEngine(FakeEngine):
        def close(self) -> None:
            pass

    monkeypatch.setattr(relserve, "Engine", lambda **kwargs: ClosableEngine())
    monkeypatch.setattr(relserve.server, "create_app", create_app)
    tenants = tmp_path / "tenants.toml"
    tenants.write_text('[tenants.a]\nkey = "key-of-a"\n')
    r = CliRunner().invoke(app, ["serve", *[str(tenants) if o == "TENANTS" else o for o in options]])
    assert isinstance(r.exception, Built), r.output
    assert seen["allowed_hosts"] == hosts
