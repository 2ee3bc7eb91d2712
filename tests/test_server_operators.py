"""/v1/operators/reduce and /v1/operators/topk (issue 26) on a real server on loopback: answers,
NULLs and empty groups, bad arguments (422/400 naming the problem), a tenant over its limits
(413/429), a wrong key (401). The stand-in engine answers instantly ("echo: <prompt>"); the
operators' own logic is tested on the real engine in test_operators_engine.py."""

from __future__ import annotations

import httpx
import pytest
from server_fixtures import FakeEngine, running_server
from waits import Worker

ALICE, BOB = "alice-secret-key", "bobby-secret-key"
TENANTS = {
    "tenants": {
        "alice": {"key": ALICE},
        # a small tenant: few values per request, few tokens in flight
        "bob": {"key": BOB, "max_rows_per_request": 5, "max_tokens_in_flight": 400},
    },
}
TEMPLATE = "Summarize these notes:\n{note}"


class Engine(FakeEngine):
    """The stand-in engine, plus the prefix warm-up the shared executor asks for (a no-op here)."""

    max_model_len = 2048

    def warm_prefix(self, text: str = "", system: str | None = None) -> None:
        pass


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))
    engine = Engine()
    with running_server(engine, tenants=TENANTS, cache=False) as srv:
        srv.engine = engine
        yield srv


def post(srv, path: str, body: dict, key: str = ALICE) -> httpx.Response:
    return httpx.post(f"{srv.url}/v1/operators/{path}", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def test_reduce_answers_every_group_in_one_relquery(server):
    r = post(server, "reduce", {"template": TEMPLATE, "groups": [["a", None, "b"], [], [None], ["c"]],
                                "keys": ["x", "y", "z", "w"], "max_tokens": 8})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["values"][0] == "echo: Summarize these notes:\n- a\n- b" and out["values"][3].endswith("- c")
    assert out["values"][1] is None and out["values"][2] is None  # empty / only NULLs: NULL, as SQL
    assert out["errors"] == [None] * 4 and out["relqueries"] == 1 and out["keys"] == ["x", "y", "z", "w"]
    assert len(server.engine.submitted) == 1 and len(server.engine.submitted[0]) == 2


def test_reduce_per_group_errors(server):
    # (the tree's levels need answers shorter than max_tokens, which the echoing stand-in does
    # not give: test_operators_engine.py runs them on the real engine)
    # values that fit one prompt each with either token count (the real tokenizer, or the
    # approximation used when no model is installed) but not all together
    big = [" ".join(f"w{i}_{j}" for j in range(20)) for i in range(10)]
    r = post(server, "reduce", {"template": TEMPLATE, "groups": [big, ["small"], ["x " * 3000]],
                                "max_tokens": 8, "context_tokens": 200})
    out = r.json()
    assert r.status_code == 200 and out["levels"][0]["prompts"] >= 3, out  # the big group in several chunks
    assert out["values"][1] == "echo: Summarize these notes:\n- small" and out["errors"][1] is None
    assert out["values"][2] is None and "does not fit in a prompt" in out["errors"][2]
    r = post(server, "reduce", {"template": TEMPLATE, "groups": [["x " * 3000]], "on_error": "raise"})
    assert r.status_code == 400 and "does not fit in a prompt" in r.text


def test_topk_two_rounds(server):
    r = post(server, "topk", {"template": "Is this about batteries? {v}", "values": ["a", "b", None, "c"], "k": 2})
    assert r.status_code == 200, r.text
    out = r.json()
    assert len(out["values"]) == 2 and [x["name"] for x in out["rounds"]] == ["score", "compare"]
    assert out["scores"][2] is None and out["errors"][2] is None


@pytest.mark.parametrize("path,body,status,needle", [
    ("reduce", {"template": "no placeholder", "groups": [["a"]]}, 400, "exactly one placeholder"),
    ("reduce", {"template": "{a} and {b}", "groups": [["a"]]}, 400, "exactly one placeholder"),
    ("reduce", {"template": TEMPLATE, "groups": "abc"}, 422, "groups"),
    ("reduce", {"template": TEMPLATE, "groups": [["a"]], "keys": [1, 2]}, 400, "keys has 2 entries"),
    ("reduce", {"template": TEMPLATE, "groups": [["a"]], "max_tokens": 1900}, 400, "room for two partial answers"),
    ("reduce", {"template": TEMPLATE, "groups": [["a"]], "json_schema": {"type": "nonsense"}}, 400, "schema"),
    ("reduce", {"template": TEMPLATE, "groups": [["a"]], "model": "other"}, 422, "model"),
    ("reduce", {"template": TEMPLATE, "groups": [[{"nested": 1}]]}, 422, "groups"),
    ("topk", {"template": "Good? {v}", "values": ["a"], "k": 0}, 422, "k"),
    ("topk", {"template": "Good? {v}", "values": ["a"], "k": 3, "pool": 2}, 400, "pool must be"),
    ("topk", {"template": "Good?", "values": ["a"], "k": 1}, 400, "exactly one placeholder"),
])
def test_bad_arguments_name_the_problem(server, path, body, status, needle):
    r = post(server, path, body)
    assert r.status_code == status, r.text
    assert needle in r.text
    assert server.engine.submitted == []


def test_tenant_limits_apply(server):
    r = post(server, "reduce", {"template": TEMPLATE, "groups": [["a"]]}, key="wrong-key-123")
    assert r.status_code == 401
    # bob may send 5 values per request
    r = post(server, "reduce", {"template": TEMPLATE, "groups": [["a", "b", "c"], ["d", "e", "f"]]}, key=BOB)
    assert r.status_code == 413 and "too many values" in r.text
    r = post(server, "topk", {"template": "Good? {v}", "values": list("abcdef"), "k": 1}, key=BOB)
    assert r.status_code == 413 and "too many values" in r.text
    # ... and 400 tokens in flight: one long group is over it on its own
    r = post(server, "reduce", {"template": TEMPLATE, "groups": [["word " * 300]]}, key=BOB)
    assert r.status_code == 413 and "max_tokens_in_flight" in r.text
    assert server.engine.submitted == []


def test_a_tenant_over_its_tokens_in_flight_waits_429(tmp_path, monkeypatch):
    # while one of bob's reductions runs, a second that would pass his tokens in flight is refused
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))
    engine = Engine(gated=True)  # the first reduction's row waits until the gate opens
    with running_server(engine, tenants=TENANTS, cache=False) as srv:
        body = {"template": TEMPLATE, "groups": [["word " * 150]], "max_tokens": 8}
        first: list = []
        t = Worker(lambda: first.append(post(srv, "reduce", body, key=BOB)), what="bob's first reduction to answer once the gate opened")
        t.start()
        try:
            engine.wait_submitted(1)
            second = post(srv, "reduce", body, key=BOB)
        finally:
            engine.open()
            t.finish(60)
        assert second.status_code == 429, second.text
        assert first[0].status_code == 200 and first[0].json()["values"][0].startswith("echo: ")
        # alice's limits are her own
        assert post(srv, "reduce", {"template": TEMPLATE, "groups": [["a"]]}).status_code == 200


class TenancyEngine(Engine):
    """The stand-in engine, recording the tenancy every submit and warm-up arrives with."""

    supports_tenancy = True

    def __init__(self) -> None:
        super().__init__()
        self.tenancies: list = []

    def submit(self, rq, tenancy=None):
        self.tenancies.append(tenancy)
        return super().submit(rq)

    def warm_prefix(self, text: str = "", system: str | None = None, tenancy=None) -> int:
        self.tenancies.append(tenancy)
        return 0


@pytest.mark.parametrize("path,body", [
    ("reduce", {"template": TEMPLATE, "groups": [["a", "b"]], "max_tokens": 8}),
    ("topk", {"template": "Is this about batteries? {v}", "values": ["a", "b", "c"], "k": 1}),
])
def test_operators_run_in_the_tenants_prefix_cache_namespace(tmp_path, monkeypatch, path, body):
    # otherwise another tenant could read from cached_tokens or timing which prompts are cached
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))
    engine = TenancyEngine()
    with running_server(engine, tenants=TENANTS, cache=False) as srv:
        assert post(srv, path, body, key=BOB).status_code == 200
    assert engine.tenancies and {t.tenant for t in engine.tenancies} == {"bob"}
    assert {t.cache_salt for t in engine.tenancies} == {"tenant:bob"}
