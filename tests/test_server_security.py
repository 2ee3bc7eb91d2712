"""What one tenant can learn or break of another's, and what the server gives away, with the
instant stand-in engine (the real model's part is in test_server.py and test_faults.py)."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from server_fixtures import FakeEngine, running_server
from waits import BoundedClient

from relserve.client import ServerError
from relserve.errors import ConfigError
from relserve.labels.memory import forget_all
from relserve.planner.cache import ResultCache
from relserve.server import hash_key

ALICE, BOB, CAROL, DAVE = "alice-secret-key", "bobby-secret-key", "carol-secret-key", "dave-secret-key1"
TENANTS = {
    "tenants": {
        "alice": {"key_sha256": hash_key(ALICE)},
        "bob": {"key": BOB},
        "carol": {"key": CAROL, "cache_group": "finance"},
        "dave": {"key": DAVE, "cache_group": "finance"},
    },
}
ROWS = [{"x": f"secret plan {i}"} for i in range(30)]


@pytest.fixture
def server(tmp_path):
    cache = ResultCache(tmp_path / "results.sqlite")
    with running_server(FakeEngine(), tenants=TENANTS, cache=cache) as srv:
        yield srv


def _cached_rows(srv, key: str, **body) -> int:
    c = BoundedClient(srv.url, api_key=key)
    return c.result(c.submit("Summarize {x}", ROWS, **body)).stats["cached_rows"]


def test_tenants_do_not_see_each_others_cached_answers(server):
    assert _cached_rows(server, ALICE) == 0
    assert _cached_rows(server, ALICE) == 30  # her own repeat is answered from the cache
    assert _cached_rows(server, BOB) == 0  # the same prompts from bob run again


def test_a_cache_group_shares_its_answers(server):
    assert _cached_rows(server, CAROL) == 0
    assert _cached_rows(server, DAVE) == 30
    assert _cached_rows(server, ALICE) == 0


def test_the_system_message_is_part_of_the_cache_key(server):
    assert _cached_rows(server, ALICE, system="Answer in French.") == 0
    assert _cached_rows(server, ALICE, system="Answer in French.") == 30
    assert _cached_rows(server, ALICE, system="Answer in German.") == 0
    assert _cached_rows(server, ALICE) == 0


def test_api_keys_in_query_strings_stay_out_of_the_access_log():
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Keep()
    access = logging.getLogger("uvicorn.access")
    from relserve.server import ServerThread, create_app

    app = create_app(FakeEngine(), tenants=TENANTS, cache=False)
    srv = ServerThread(app, log_level="info")
    access.addHandler(handler)
    try:
        with srv:
            # the name as sent, and percent-encoded, which the server reads as `key` too (an audit, 7 Dec)
            for query in (f"key={ALICE}&x=1", f"%6Bey={ALICE}&x=1", f"x=1&%6B%65%79={ALICE}"):
                r = httpx.get(f"{srv.url}/addin/functions.js?{query}")
                assert r.status_code == 200 and ALICE in r.text, query  # the file carries it, for Office
    finally:
        access.removeHandler(handler)
    lines = [m for m in seen if "/addin/functions.js" in m]
    assert len(lines) == 3 and not [line for line in lines if ALICE in line], lines
    assert ["key=***&x=1" in lines[0], "%6Bey=***&x=1" in lines[1], "x=1&%6B%65%79=***" in lines[2]] == [True] * 3


def test_the_addin_manifest_ignores_the_host_header(server):
    r = httpx.get(f"{server.url}/addin/manifest.xml", headers={"Host": "evil.example:443"})
    assert r.status_code == 200
    assert "evil.example" not in r.text and f"{server.url}/addin/functions.html" in r.text


def test_streaming_submit_is_201_with_the_relquerys_location(server):
    body = {"template": "Say {x}", "rows": [{"x": "a"}], "stream": "ndjson"}
    r = httpx.post(server.url + "/v1/relqueries", json=body, headers={"Authorization": f"Bearer {ALICE}"})
    first = json.loads(r.text.splitlines()[0])
    assert r.status_code == 201 and r.headers["location"] == f"/v1/relqueries/{first['id']}"


def test_listing_survives_a_stored_job_with_a_non_finite_number(server):
    c = BoundedClient(server.url, api_key=ALICE)
    job_id = c.submit("Say {x}", [{"x": "a"}])
    state = server.server.config.app.state.relserve
    state.jobs.get(job_id, "alice").deadline_s = float("inf")  # as a job stored before validation held
    r = httpx.get(server.url + "/v1/relqueries", headers={"Authorization": f"Bearer {ALICE}"})
    assert r.status_code == 200
    (job,) = r.json()["relqueries"]
    assert (job["id"], job["deadline_s"]) == (job_id, None)


def test_a_stopping_server_refuses_new_work_with_503(server):
    state = server.server.config.app.state.relserve
    state.begin_shutdown()
    r = httpx.post(server.url + "/v1/relqueries", json={"template": "Say {x}", "rows": [{"x": "a"}]},
                   headers={"Authorization": f"Bearer {ALICE}"})
    assert r.status_code == 503 and r.headers["retry-after"] == "5"
    assert r.json()["error"]["message"] == "the server is stopping; retry on another server or after it restarts"
    r = httpx.get(server.url + "/health")
    assert (r.status_code, r.json()["status"]) == (503, "stopping")


class TenantAwareFakeEngine(FakeEngine):
    """The instant engine with tenancy: each submit is in the tenant's prefix-cache namespace."""

    supports_tenancy = True

    def submit(self, rq, tenancy=None):
        return super().submit(rq)

    def warm_prefix(self, text: str = "", system: str | None = None, tenancy=None) -> int:
        return 0


def test_a_tenants_history_decides_the_layout_of_its_own_small_classify_only(tmp_path):
    """A 2-label llm_classify is laid out question first behind bootstrapped examples; a small
    relQuery gets that layout only where an earlier one of the same tenant chose the examples.
    Another tenant's small relQuery of the same template is laid out as a first one is, so the
    layout tells bob nothing of alice's work."""

    forget_all()
    engine = TenantAwareFakeEngine()
    rows = [{"r": f"a review long enough to move out of the question, number {i}"} for i in range(20)]
    body = dict(function="classify", labels=["positive", "negative"], method="bootstrap", cache=False)
    template = "Is this review positive or negative? Review: {r}"
    with running_server(engine, tenants=TENANTS, cache=False) as srv:
        alice, bob = BoundedClient(srv.url, api_key=ALICE), BoundedClient(srv.url, api_key=BOB)
        alice.result(alice.submit(template, rows, **body))
        alice.result(alice.submit(template, rows[:6], **body))
        bob.result(bob.submit(template, rows[:6], **body))
    runs = [rq for rq in engine.submitted if not rq.rel_id.startswith(("bootstrap-", "prior-", "answer-field-", "adaptive-"))]
    own_text = [[p.rsplit("\n\n", 1)[-1] for p in rq.render()] for rq in runs]
    # alice's first: its 20 rows but the 10 its plan's sample scored behind the examples
    assert [len(p) for p in own_text] == [10, 6, 6]
    assert all(p.startswith("Question: ") for p in own_text[0] + own_text[1])
    assert all(p.startswith("Review: ") for p in own_text[2])


def test_a_tenant_lists_pins_and_forgets_only_its_own_label_plans(label_memory):
    """A tenant's label plans hold worked examples, rows of its tables: the /v1/label-plans
    endpoints reach the caller's namespace only."""
    from label_doubles import strong_engine

    class TenantAwareStrong(type(strong_engine(lambda t: True))):
        supports_tenancy = True

        def submit(self, rq, tenancy=None):
            return super().submit(rq)

    engine = TenantAwareStrong(strong_engine(lambda text: "sports" in text).margin)
    rows = [{"a": f"sports story {i}" if i % 4 == 0 else f"other story {i}"} for i in range(40)]
    template = "Is this news article about athletics? Article: {a}"
    with running_server(engine, tenants=TENANTS, cache=False) as srv:
        alice, bob = BoundedClient(srv.url, api_key=ALICE), BoundedClient(srv.url, api_key=BOB)
        alice.result(alice.submit(template, rows, function="filter"))
        listed = alice.label_plans()
        assert [(p["function"], p["template"], p["pinned"]) for p in listed] == [("llm_filter", template, False)]
        assert listed[0]["plan"].startswith("method adaptive, layout ")
        assert bob.label_plans() == []
        assert bob.forget_label_plans(pinned=True) == 0 and bob.pin_label_plans(template) == 0
        assert alice.pin_label_plans(template) == 1 and alice.label_plans()[0]["pinned"]
        # a pinned plan is not refreshed: the call is refused naming the pin
        with pytest.raises(ServerError, match="is pinned"):
            alice.run(template, rows, function="filter", label_plan="refresh")
        # an empty template is refused, not read as "every plan"
        with pytest.raises(ConfigError, match="empty string"):
            alice.forget_label_plans("", pinned=True)
        assert alice.forget_label_plans() == 0 and alice.forget_label_plans(pinned=True) == 1
        assert alice.label_plans() == []
