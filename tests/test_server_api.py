"""The HTTP server's contract, with an instant stand-in engine: auth and tenants, limits, bad
input, job bookkeeping, metrics, the cells endpoint's cache, the add-in files. What the real
model answers is tested in test_server.py."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from server_fixtures import FakeEngine, running_server
from waits import BoundedClient, StillWaiting, lines_within, returns_within, wait_until

from relserve.client import ServerError
from relserve.errors import ConfigError
from relserve.planner.cache import ResultCache
from relserve.server import Tenants, hash_key

ALICE, BOB = "alice-secret-key", "bobby-secret-key"
TENANTS = {
    "limits": {"max_rows_in_flight": 50, "max_rows_per_request": 40, "max_body_bytes": 4096},
    "tenants": {
        "alice": {"key_sha256": hash_key(ALICE), "admin": True, "min_priority": -10},  # may read /metrics, jump ahead
        "bob": {"key": BOB, "max_rows_in_flight": 5},
    },
}


@pytest.fixture(scope="module")
def fake():
    return FakeEngine()


@pytest.fixture(scope="module")
def server(fake, tmp_path_factory):
    cache = ResultCache(tmp_path_factory.mktemp("cache") / "results.sqlite")
    with running_server(fake, tenants=TENANTS, cache=cache) as srv:
        yield srv


def _post(srv, path, body=None, key=ALICE, **kw):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(srv.url + path, json=body, headers=headers, timeout=30, **kw)


def _error(r: httpx.Response) -> str:
    return r.json()["error"]["message"]


# ---------------------------------------------------------------- tenants config


def test_tenants_file_toml_and_json_give_the_same_tenants(tmp_path):
    toml = tmp_path / "t.toml"
    toml.write_text(
        '[limits]\nmax_rows_in_flight = 7\n[tenants.a]\nkey = "a-long-key"\n[tenants.b]\n'
        f'key_sha256 = "{hash_key("b-long-key")}"\nmax_rows_per_request = 3\n'
    )
    js = tmp_path / "t.json"
    js.write_text(json.dumps({"limits": {"max_rows_in_flight": 7}, "tenants": {"a": {"key": "a-long-key"}, "b": {"key_sha256": hash_key("b-long-key"), "max_rows_per_request": 3}}}))
    for path in (toml, js):
        t = Tenants.from_file(path)
        assert not t.open and t.names == ["a", "b"]
        a, b = t.authenticate("Bearer a-long-key"), t.authenticate("Bearer b-long-key")
        assert (a.name, a.limits.max_rows_in_flight, a.limits.max_rows_per_request) == ("a", 7, 10_000)
        assert (b.name, b.limits.max_rows_in_flight, b.limits.max_rows_per_request) == ("b", 7, 3)


def test_bad_tenants_files_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match=r"tenants.a: Value error, give exactly one of key or key_sha256"):
        Tenants.from_dict({"tenants": {"a": {}}})
    with pytest.raises(ConfigError, match=r"limits.max_rows_in_flgiht: Extra inputs are not permitted"):
        Tenants.from_dict({"limits": {"max_rows_in_flgiht": 3}})
    with pytest.raises(ConfigError, match=r"tenants 'a' and 'b' have the same key"):
        Tenants.from_dict({"tenants": {"a": {"key": "same-key-1"}, "b": {"key": "same-key-1"}}})
    bad = tmp_path / "bad.toml"
    bad.write_text("[tenants.a\n")
    with pytest.raises(ConfigError, match=r"is not valid TOML"):
        Tenants.from_file(bad)


def test_open_mode_needs_no_key(fake):
    with running_server(fake, cache=False) as srv:
        c = BoundedClient(srv.url)
        assert c.health().auth == "open"
        assert c.map("Say {x}", [{"x": "hi"}]) == ["echo: Say hi"]
        assert c.list()[0].id


# ---------------------------------------------------------------- auth and isolation


def test_missing_or_unknown_key_is_401(server):
    r = _post(server, "/v1/relqueries", {"template": "Say {x}", "rows": [{"x": 1}]}, key=None)
    assert r.status_code == 401 and _error(r) == "missing API key: send the header 'Authorization: Bearer <key>'"
    assert r.headers["www-authenticate"] == "Bearer"
    r = _post(server, "/v1/relqueries", {"template": "Say {x}", "rows": [{"x": 1}]}, key="not-a-tenant-key")
    assert r.status_code == 401 and _error(r) == "unknown API key"


def test_another_tenants_relquery_is_404_and_cannot_be_cancelled(server):
    alice, bob = BoundedClient(server.url, api_key=ALICE), BoundedClient(server.url, api_key=BOB)
    rid = alice.submit("Say {x}", [{"x": i} for i in range(3)])
    for call in (lambda: bob.status(rid), lambda: bob.cancel(rid), lambda: bob.result(rid)):
        with pytest.raises(ServerError) as e:
            call()
        assert e.value.status == 404 and e.value.message == f"no relQuery with id {rid!r}"
    assert rid not in {j.id for j in bob.list()}
    assert alice.result(rid).texts == ["echo: Say 0", "echo: Say 1", "echo: Say 2"]
    with pytest.raises(ServerError) as e:
        alice.status("0123456789abcdef")
    assert e.value.status == 404


# ---------------------------------------------------------------- bad input


def test_malformed_json_body_is_400(server):
    r = httpx.post(server.url + "/v1/relqueries", content=b'{"template": "x {a}", rows: [}',
                   headers={"Authorization": f"Bearer {ALICE}", "Content-Type": "application/json"})
    assert r.status_code == 400
    assert _error(r).startswith("request body is not valid JSON: Expecting property name enclosed in double quotes")


def test_invalid_bodies_are_422_naming_the_field(server):
    cases = {
        "invalid request: rowz: Extra inputs are not permitted": {"template": "x {a}", "rows": [], "rowz": []},
        "invalid request: give template and rows (a list of objects), or prompts (a list of strings)": {"template": "x {a}"},
        "invalid request: rows.1: Input should be a valid dictionary": {"template": "x {a}", "rows": [{"a": 1}, 5]},
        "invalid request: max_tokens: Input should be greater than or equal to 1": {"template": "x {a}", "rows": [], "max_tokens": 0},
        "invalid request: function: Input should be 'map', 'filter', 'classify', 'extract' or 'score'": {"template": "x {a}", "rows": [], "function": "sum"},
    }
    for message, body in cases.items():
        r = _post(server, "/v1/relqueries", body)
        assert (r.status_code, _error(r)) == (422, message)
    r = httpx.post(server.url + "/v1/relqueries", headers={"Authorization": f"Bearer {ALICE}"})
    assert r.status_code == 422 and "the request body is missing" in _error(r)


def test_template_naming_a_missing_column_is_400(server):
    r = _post(server, "/v1/relqueries", {"template": "Is {review} good?", "rows": [{"text": "ok"}]})
    assert r.status_code == 400
    assert _error(r) == "template names unknown column(s) 'review'; available columns: 'text'"
    r = _post(server, "/v1/relqueries", {"template": "Is {review} good?", "rows": [{"review": "a"}, {"text": "b"}]})
    assert (r.status_code, _error(r)) == (400, "row 1 has no column(s) 'review' named in the template")
    r = _post(server, "/v1/relqueries", {"template": "Is it good?", "rows": [{"review": "a"}]})
    assert r.status_code == 400 and "has no {column} placeholder" in _error(r)
    r = _post(server, "/v1/relqueries", {"template": "{x}", "rows": [{"x": "a"}], "function": "classify"})
    assert r.status_code == 400 and "llm_classify needs labels" in _error(r)


def _rejected(srv, status: int) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for f in text_string_to_metric_families(httpx.get(srv.url + "/metrics", headers={"Authorization": f"Bearer {ALICE}"}).text):
        for sample in f.samples:
            if sample.name == "relserve_requests_rejected_total" and sample.labels["status"] == str(status):
                return sample.value
    return 0.0


def test_oversized_requests_are_413(server):
    rejected_before = _rejected(server, 413)
    big = {"template": "Say {x}", "rows": [{"x": "y" * 100} for _ in range(39)]}  # > 4096 bytes
    r = _post(server, "/v1/relqueries", big)
    assert r.status_code == 413
    assert _error(r).startswith("request body too large: ") and _error(r).endswith("the limit is 4096 bytes; send fewer rows per request")

    def chunked():  # no Content-Length: the limit is enforced on the bytes received
        yield json.dumps(big).encode()

    r = httpx.post(server.url + "/v1/relqueries", content=chunked(),
                   headers={"Authorization": f"Bearer {ALICE}", "Content-Type": "application/json"})
    assert r.status_code == 413 and "the limit is 4096 bytes" in _error(r)
    r = _post(server, "/v1/relqueries", {"template": "{x}", "rows": [{"x": i} for i in range(41)]})
    assert (r.status_code, _error(r)) == (413, "too many rows in one request: 41, the limit is 40; split the request")
    r = _post(server, "/v1/cells", {"cells": [{"id": f"A{i}", "template": "{x}", "args": [i]} for i in range(41)]})
    assert (r.status_code, _error(r)) == (413, "too many cells in one request: 41, the limit is 40; split the request")
    assert _rejected(server, 413) == rejected_before + 4


def test_rows_in_flight_limit_is_429_per_tenant(tmp_path):
    gated = FakeEngine(gated=True)  # no row is answered until the test opens the gate
    with running_server(gated, tenants=TENANTS, cache=False) as srv:
        try:
            bob, alice = BoundedClient(srv.url, api_key=BOB), BoundedClient(srv.url, api_key=ALICE)
            first = bob.submit("Say {x}", [{"x": i} for i in range(4)])
            with pytest.raises(ServerError) as e:
                bob.submit("Say {x}", [{"x": i} for i in range(2)])
            assert e.value.status == 429
            assert e.value.message.startswith("tenant 'bob' would have 6 rows in flight (4 running + 2 new); the limit is 5")
            assert alice.submit("Say {x}", [{"x": i} for i in range(2)])  # another tenant is not held back
        finally:
            gated.open()
        assert bob.result(first).status == "finished"
        assert bob.submit("Say {x}", [{"x": i} for i in range(2)])  # room again


def test_a_client_call_that_hangs_fails_naming_its_relquery():
    """The tests' BoundedClient: a run or result the engine never answers fails within its limit
    naming the relQuery, not as pytest's anonymous timeout."""
    gated = FakeEngine(gated=True)  # nothing is answered until the gate opens
    with running_server(gated, cache=False) as srv, BoundedClient(srv.url, limit=1.0) as c:
        try:
            with pytest.raises(StillWaiting, match=r"for the server's answer to the relQuery 'Say \{x\}' over 2 rows \(Client.run\)"):
                c.run("Say {x}", [{"x": 0}, {"x": 1}])
            rid = c.submit("Say {x}", [{"x": 2}])
            with pytest.raises(StillWaiting, match=f"for relQuery {rid} to finish \\(Client.result\\)"):
                c.result(rid)
        finally:
            gated.open()
        assert c.result(rid).texts == ["echo: Say 2"]  # the same call returns once the engine answers


def test_a_bootstrap_first_pass_counts_against_the_tenants_rows_in_flight(tmp_path):
    """A filter or classify of 16+ rows runs as ``bootstrap``: the engine scores up to 32 of its
    rows once more before them. Those requests count against the tenant's limits like its rows:
    bob (5 rows in flight) can no longer sneak 32 extra engine requests past the limit."""
    from relserve.functions import make_call
    from relserve.server.budget import first_pass_rows, prompts_cost

    boot_filter = make_call("llm_filter", "Is {x} ok?", method="bootstrap")
    assert first_pass_rows(boot_filter, 100) == 32
    assert first_pass_rows(boot_filter, 20) == 20
    assert first_pass_rows(make_call("llm_classify", "Is {x} ok?", labels=["a", "b"], method="bootstrap"), 100) == 16
    assert first_pass_rows(boot_filter, 15) == 3  # runs as prior: its three content-free probes
    # adaptive: the model's concept (one request), a spread sample of 24 rows, 8 of them in each
    # layout (the question, four row-alone ones when the question names a concept, and two on the
    # concept the model may propose beside it), the other 16 in the two best, and the three
    # content-free rows (the plan's sample of rows is their answers)
    assert first_pass_rows(make_call("llm_filter", "Is this review about sports? {x}", method="adaptive"), 100) == \
        1 + 8 * 7 + 16 * 2 + 3
    assert first_pass_rows(make_call("llm_filter", "Is this review about sports? {x}", method="adaptive"), 10) == \
        1 + 8 * 7 + 2 * 2 + 3
    # a question the lexicon cannot read: four row-alone layouts on the concept the model may propose
    assert first_pass_rows(make_call("llm_filter", "Keep {x}?", method="adaptive"), 100) == 1 + 8 * 5 + 16 * 2 + 3
    assert first_pass_rows(make_call("llm_filter", "Is {x} ok?", method="score"), 100) == 0
    assert first_pass_rows(make_call("llm_classify", "{x}", labels=["a", "b"], examples=[{"x": "1", "answer": "a"}]), 100) == 0
    assert first_pass_rows(make_call("llm_map", "Say {x}"), 100) == 0
    cost = prompts_cost(["p" * 30] * 100, make_call("llm_filter", "{x}", method="score"), 1, None)
    boot = prompts_cost(["p" * 30] * 100, make_call("llm_filter", "{x}", method="bootstrap"), 1, None)
    # the first pass sends 32 of the prompts again: rows and tokens, no new text to render
    assert (boot.rows, boot.chars, boot.tokens, boot.first_pass) == (132, cost.chars, cost.tokens + -(-cost.tokens * 32 // 100), 32)
    assert boot.describe_rows() == "100 rows, and 32 first-pass scoring requests"

    tenants = {"tenants": {"carol": {"key": "carol-secret-key", "max_rows_in_flight": 40}}}
    with running_server(FakeEngine(), tenants=tenants, cache=False) as srv:
        body = {"function": "filter", "template": "Is {x} ok?", "rows": [{"x": i} for i in range(21)], "method": "bootstrap"}
        r = _post(srv, "/v1/relqueries", body, key="carol-secret-key")
        assert r.status_code == 429
        assert _error(r).startswith("tenant 'carol' would have 42 rows in flight (0 running + 42 new); the limit is 40")
        # the default (adaptive) asks the model for the question's concept, scores 8 of the 21
        # rows in seven layouts first (the question, four on "ok" against "other", two on a concept
        # the model may propose), the other 13 in two, and three content-free rows: 21 + 1 + 56 + 26 + 3
        r = _post(srv, "/v1/relqueries", {**body, "method": None}, key="carol-secret-key")
        assert r.status_code == 429
        assert _error(r).startswith("tenant 'carol' would have 107 rows in flight (0 running + 107 new)")
        carol = BoundedClient(srv.url, api_key="carol-secret-key")
        # each accepted job is waited for, so the next one starts with nothing in flight
        for accepted in ({**body, "method": "score"}, {**body, "rows": body["rows"][:20]}):
            r = _post(srv, "/v1/relqueries", accepted, key="carol-secret-key")
            assert r.status_code == 201
            assert carol.result(r.json()["id"]).status == "finished"


def test_openai_bodies_that_cannot_be_served_are_refused(server):
    r = _post(server, "/v1/completions", {"prompt": "hi", "n": 2})
    assert r.status_code == 422 and "n > 1 is not supported" in _error(r)
    r = _post(server, "/v1/completions", {"prompt": "hi", "stop": ["\n"]})
    assert r.status_code == 422 and "stop sequences are not supported" in _error(r)
    r = _post(server, "/v1/completions", {"prompt": "hi", "model": "gpt-4"})
    assert (r.status_code, _error(r)) == (404, "model 'gpt-4' is not served here; this server serves 'fake-model'")
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    r = _post(server, "/v1/chat/completions", {"messages": msgs})
    assert r.status_code == 422 and "only single-turn chats are supported" in _error(r)


def test_unknown_route_and_method(server):
    r = httpx.get(server.url + "/v2/nothing")
    assert (r.status_code, _error(r)) == (404, "no such endpoint: GET /v2/nothing")
    r = httpx.put(server.url + "/health")
    assert r.status_code == 405 and _error(r) == "method PUT is not allowed on /health"


# ---------------------------------------------------------------- results, streaming, cells


def test_priority_and_deadline_reach_the_engine(server, fake):
    c = BoundedClient(server.url, api_key=ALICE)
    t0 = time.monotonic()
    # an hour: met however slowly a loaded machine answers one row (pytest's own limit is shorter)
    rid = c.submit("Hint {x}", [{"x": 1}], priority=-2, deadline_s=3600, cache=False)
    st = c.result(rid)
    rq, reached = fake.submitted[-1], fake.submitted_at[-1]
    assert rq.rel_id == rid and rq.priority == -2
    # what is left of it when the engine gets the relQuery: at least 3600 s less the time since
    # the request was sent (the server received it after t0), at most 3600 s
    assert 3600.0 - (reached - t0) <= rq.deadline_s <= 3600.0
    assert st.status == "finished" and c.status(rid).stats.deadline_met is True


def test_every_row_gets_one_answer_in_input_order_with_duplicates_run_once(server, fake):
    c = BoundedClient(server.url, api_key=ALICE)
    before = len(fake.submitted)
    rows = [{"x": "a"}, {"x": "b"}, {"x": "a"}, {"x": None}, {"x": "c"}]
    res = c.run("Say {x}", rows, cache=False)
    assert res.status == "finished"
    assert res.texts == ["echo: Say a", "echo: Say b", "echo: Say a", None, "echo: Say c"]
    assert res.errors[3] == "llm_map: placeholder {x} is NULL in this row"
    assert len(fake.submitted) == before + 1  # one relQuery ...
    assert sorted(fake.submitted[-1].prompts) == ["Say a", "Say b", "Say c"]  # ... of the distinct prompts
    assert res.stats["rows"] == 5 and res.stats["engine_rows"] == 3 and res.stats["errors"] == 1


def test_filter_values_are_booleans_and_sse_stream_has_every_row(server):
    with httpx.stream("POST", server.url + "/v1/relqueries", headers={"Authorization": f"Bearer {ALICE}"},
                      json={"template": "Is {x} good?", "rows": [{"x": 1}, {"x": 2}], "function": "filter", "stream": "sse"}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        text = returns_within(lambda: r.read().decode(), 60, "the SSE stream of 2 filter rows to end")
    events = [block for block in text.split("\n\n") if block.strip()]
    names = [b.split("\n")[0] for b in events]
    assert names == ["event: accepted", "event: row", "event: row", "event: done"]
    rows = [json.loads(b.split("\n")[1][len("data: "):]) for b in events[1:3]]
    assert sorted((r["index"], r["value"], r["text"]) for r in rows) == [(0, True, "yes"), (1, True, "yes")]
    done = json.loads(events[3].split("\n")[1][len("data: "):])
    assert done["status"] == "finished" and done["progress"] == {"done": 2, "total": 2}


def test_on_error_raise_fails_the_relquery_at_the_first_bad_row(server):
    c = BoundedClient(server.url, api_key=ALICE)
    res = c.run("Say {x}", [{"x": "a"}, {"x": None}, {"x": "b"}], on_error="raise", cache=False)
    assert res.status == "failed"
    assert res.error == "row 1: llm_map: placeholder {x} is NULL in this row"
    assert all(e is not None for e in res.errors[1:])  # nothing ran after the failure
    assert res.rows[0].error is not None  # the engine was never asked


def test_map_cells_of_several_templates_are_one_relquery_and_repeats_come_from_the_cache(server, fake):
    c = BoundedClient(server.url, api_key=ALICE)
    cells = [
        {"id": "B2", "template": "Rate {A} now", "args": ["cell one"]},
        {"id": "B3", "template": "Rate {A} now", "args": ["cell two"]},
        {"id": "B4", "template": "Rate {A} now", "args": ["cell one"]},
        {"id": "C2", "template": "Compare {A} and {B} now", "args": ["cell one", 3]},
        {"id": "C3", "template": "Compare {A} and {B} now", "args": ["cell one"]},
        {"id": "C4", "template": "Name {x} now", "values": {"x": "by name"}},
    ]
    before = len(fake.submitted)
    first = c.cells(cells)
    # one relQuery: maps are decided by no label plan, so a sheet's columns batch together
    assert [sorted(rq.prompts) for rq in fake.submitted[before:]] == [
        ["Compare cell one and 3 now", "Name by name now", "Rate cell one now", "Rate cell two now"]]
    assert first["B2"].value == first["B4"].value == "echo: Rate cell one now"
    assert first["C2"].value == "echo: Compare cell one and 3 now"
    assert first["C3"].error == ("cell C3: the template has 2 placeholder(s) ({A}, {B}) but 1 value(s) were given; "
                                    "values fill the placeholders in order of first appearance")
    assert first["C4"].value == "echo: Name by name now"
    assert not any(cell.cached for cell in first.values())
    again = c.cells(cells)
    assert len(fake.submitted) == before + 1  # nothing new ran
    assert {k: v.cached for k, v in again.items()} == {"B2": True, "B3": True, "B4": True, "C2": True, "C3": False, "C4": True}
    assert {k: v.value for k, v in again.items()} == {k: v.value for k, v in first.items()}


def test_cells_stream_sends_cached_cells_before_the_engine_answers(tmp_path):
    gated = FakeEngine(gated=True)
    with running_server(gated, cache=ResultCache(tmp_path / "results.sqlite")) as srv:
        c = BoundedClient(srv.url)
        gated.release(1)
        c.cells([{"id": "A1", "template": "Stream {v} please", "args": ["known"]}])
        with c.stream_cells([{"id": "A1", "template": "Stream {v} please", "args": ["new one"]},
                             {"id": "A2", "template": "Stream {v} please", "args": ["known"]}]) as s:
            assert (s.header.cells, s.header.cached, s.header.engine_rows) == (2, 1, 1)
            cells = iter(s)
            # the engine has answered nothing of this batch yet: the cached cell comes first
            first = next(cells)
            gated.release(1)
            order = [(cell.id, cell.cached, cell.value) for cell in (first, *cells)]
    assert order == [("A2", True, "echo: Stream known please"), ("A1", False, "echo: Stream new one please")]


def test_cancel_aborts_unfinished_rows_and_keeps_finished_ones():
    gated = FakeEngine(gated=True)
    with running_server(gated, cache=False) as srv:
        c = BoundedClient(srv.url)
        rid = c.submit("Say {x}", [{"x": i} for i in range(20)])
        gated.release(2)  # two rows answered, the other 18 wait for a permit that never comes
        wait_until(lambda: c.status(rid).progress.done == 2, "the two released rows answered")
        st = c.cancel(rid)
        assert st.status == "cancelled" and st.error == "cancelled by the client"
        res = c.result(rid)
        answered = [r for r in res.rows if r.error is None]
        assert len(answered) == 2
        assert all(r.text == f"echo: Say {r.index}" for r in answered)
        assert {r.error for r in res.rows if r.error is not None} == {"cancelled by the client"}
        assert gated.cancelled == [rid]


def test_dropping_the_stream_cancels_the_relquery():
    gated = FakeEngine(gated=True)
    with running_server(gated, cache=False) as srv:
        c = BoundedClient(srv.url)
        s = c.stream("Say {x}", [{"x": i} for i in range(30)])
        gated.release(1)
        first = next(iter(s))
        assert first.text == f"echo: Say {first.index}"
        s.close()  # the client goes away mid-stream, 29 rows unanswered
        gated.wait_cancelled(1)
        assert gated.cancelled == [s.id]
        # the job ends after the engine's cancel, on the server's own loop: a look in between
        # still finds it running (seen when another worker kept the cores busy)
        st = wait_until(lambda: (now := c.status(s.id)).status != "running" and now, "the job to end after the cancel")
        assert st.status == "cancelled" and st.error == "cancelled: the client disconnected"


# ---------------------------------------------------------------- operations


def test_metrics_are_prometheus_text_with_the_expected_series(server):
    c = BoundedClient(server.url, api_key=ALICE)
    c.run("Metric {x}", [{"x": i} for i in range(3)], cache=False)
    text = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {ALICE}"}).text
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("relserve_relqueries", "relserve_rows", "relserve_relquery_latency_seconds", "relserve_tokens",
                 "relserve_relqueries_in_flight", "relserve_rows_in_flight", "relserve_prefix_cache_hit_ratio",
                 "relserve_relquery_phase_seconds"):
        assert name in families, name
    finished = {tuple(sorted(s.labels.items())): s.value for s in families["relserve_relqueries"].samples if s.name.endswith("_total")}
    assert finished[(("kind", "relquery"), ("status", "finished"), ("tenant", "alice"))] >= 1
    in_flight = {s.labels["tenant"]: s.value for s in families["relserve_relqueries_in_flight"].samples}
    assert set(in_flight) == {"alice", "bob"}


def _compact(reply: dict[str, object]) -> bytes:
    # how the server renders a JSON reply (Starlette's JSONResponse)
    return json.dumps(reply, ensure_ascii=False, separators=(",", ":")).encode()


def test_health_and_plan_replies_are_exactly_this_json():
    # what load balancers, the PostgreSQL EXPLAIN and DuckDB's server mode read: keys, order, values
    with running_server(FakeEngine(), cache=None) as srv:
        r = httpx.get(srv.url + "/health")
        assert r.status_code == 200
        assert r.content == (b'{"status":"ok","model":"fake-model","policy":"fake","auth":"open","result_cache":false,'
                             b'"relqueries_in_flight":0,"rows_in_flight":0}')
        rows = [{"x": "p1"}, {"x": "p2"}, {"x": "p1"}, {"x": None}]
        r = httpx.post(srv.url + "/v1/relqueries/plan", json={"template": "Plan {x}", "rows": rows}, timeout=30)
        estimate = r.json()["estimate"]
        assert estimate["engine_rows"] == 2 and estimate["prompt_tokens"] > 0
        assert r.content == _compact({"rows": 4, "engine_rows": 2, "cached_rows": 0, "failed_rows": 1, "estimate": estimate})
        body = {"function": "filter", "template": "Good? {x}", "rows": rows, "cascade": 0.95}
        r = httpx.post(srv.url + "/v1/relqueries/plan", json=body, timeout=30)
        got = r.json()
        assert "where a proxy pays" in got["cascade"]["plan"]
        assert r.content == _compact({"rows": 4, "engine_rows": 2, "cached_rows": 0, "failed_rows": 1, "estimate": got["estimate"],
                                      "cascade": {"target": 0.95, "recall": None, "precision": None, "applies": False,
                                                  "plan": got["cascade"]["plan"]}})
        srv.server.config.app.state.relserve.begin_shutdown()
        r = httpx.get(srv.url + "/health")
        assert r.status_code == 503
        assert r.content == b'{"status":"stopping","error":"the server is stopping","model":"fake-model"}'


def test_job_token_and_stream_start_replies_are_exactly_this_json():
    # what the client, the PostgreSQL functions and DuckDB's server mode read (relserve/replies.py):
    # a job's status, the list, a cancel's reply, the token counts, a stream's first event, a cell
    with running_server(FakeEngine(), cache=None) as srv:
        rows = [{"x": "p1"}, {"x": None}]
        r = httpx.post(srv.url + "/v1/relqueries/tokens", json={"template": "Say {x}", "rows": rows}, timeout=30)
        n = r.json()["prompt_tokens"][0]
        assert n > 0
        assert r.content == _compact({"prompt_tokens": [n, None], "errors": [None, "llm_map: placeholder {x} is NULL in this row"],
                                      "model": "fake-model"})
        rid = httpx.post(srv.url + "/v1/relqueries", json={"template": "Say {x}", "rows": rows}, timeout=30).json()["id"]
        BoundedClient(srv.url).result(rid, timeout=30)
        r = httpx.get(srv.url + f"/v1/relqueries/{rid}", timeout=30)
        got = r.json()
        s = got["stats"]
        described = {"id": rid, "kind": "relquery", "status": "finished", "error": None, "created": got["created"],
                     "progress": {"done": 2, "total": 2}, "priority": 0, "deadline_s": None,
                     "stats": {"rows": 2, "errors": 1, "cached_rows": 0, "engine_rows": 1, "latency_s": s["latency_s"],
                               "waiting_s": s["waiting_s"], "core_s": s["core_s"], "tail_s": s["tail_s"],
                               "engine_latency_s": s["engine_latency_s"], "prompt_tokens": 2, "output_tokens": 2,
                               "cached_tokens": 0, "prefix_hit_rate": 0.0, "policy": "fake"}}
        assert r.content == _compact(described)
        assert httpx.get(srv.url + "/v1/relqueries", timeout=30).content == _compact({"relqueries": [described]})
        assert httpx.delete(srv.url + f"/v1/relqueries/{rid}", timeout=30).content == _compact(described)
        assert BoundedClient(srv.url).status(rid).to_json() == described
        body = {"template": "Say {x}", "rows": rows[:1], "stream": "ndjson"}
        with httpx.stream("POST", srv.url + "/v1/relqueries", json=body, timeout=30) as s:
            (first,) = lines_within(s.iter_lines(), 30, "the relQuery stream's accepted event", count=1)
        sid = json.loads(first)["id"]
        assert first == json.dumps({"event": "accepted", "id": sid, "rows": 1, "cached_rows": 0, "engine_rows": 1})
        with httpx.stream("GET", srv.url + f"/v1/relqueries/{sid}/stream", timeout=30) as s:
            assert lines_within(s.iter_lines(), 30, "the re-attached stream's accepted event", count=1)[0] == json.dumps({"event": "accepted", "id": sid, "rows": 1, "engine_rows": 1})
        cells = {"cells": [{"id": "A1", "template": "Say {x}", "args": ["p1"]}], "stream": True}
        with httpx.stream("POST", srv.url + "/v1/cells", json=cells, timeout=30) as s:
            first, cell = lines_within(s.iter_lines(), 30, "the cell stream to end")[:2]
        assert first == json.dumps({"event": "batch", "id": json.loads(first)["id"], "cells": 1, "cached": 0, "engine_rows": 1})
        assert cell == json.dumps({"event": "cell", "id": "A1", "value": "echo: Say p1", "text": "echo: Say p1", "error": None,
                                   "cached": False})


def test_health_and_addin_files(server):
    h = httpx.get(server.url + "/health").json()
    assert h["status"] == "ok" and h["model"] == "fake-model" and h["auth"] == "api-key"
    manifest = httpx.get(server.url + "/addin/manifest.xml").text
    assert "https://localhost:8443" not in manifest and f"{server.url}/addin/functions.js\"" in manifest
    import xml.etree.ElementTree as ET

    root = ET.fromstring(manifest.encode())
    ns = {"o": "http://schemas.microsoft.com/office/appforoffice/1.1", "bt": "http://schemas.microsoft.com/office/officeappbasictypes/1.0"}
    urls = {u.get("id"): u.get("DefaultValue") for u in root.iter(f"{{{ns['bt']}}}Url")}
    assert urls == {
        "Functions.Script.Url": f"{server.url}/addin/functions.js",
        "Functions.Metadata.Url": f"{server.url}/addin/functions.json",
        "Functions.Page.Url": f"{server.url}/addin/functions.html",
    }
    keyed = httpx.get(server.url + f"/addin/manifest.xml?key={ALICE}").text
    assert f"{server.url}/addin/functions.js?key={ALICE}\"" in keyed
    js = httpx.get(server.url + f"/addin/functions.js?key={ALICE}").text
    assert f'var RELSERVE_URL = "{server.url}";' in js and f'var RELSERVE_API_KEY = "{ALICE}";' in js
    assert httpx.get(server.url + "/addin/manifest.xml?key=wrong-key-here").status_code == 401
    meta = httpx.get(server.url + "/addin/functions.json").json()
    assert [f["id"] for f in meta["functions"]] == ["LLM"]
    assert httpx.get(server.url + "/addin/icon-32.png").content[:8] == b"\x89PNG\r\n\x1a\n"
    assert httpx.get(server.url + "/addin/../app.py").status_code == 404
    page = httpx.get(server.url + "/sheet")
    assert page.status_code == 200 and '<script src="/static/sheet.js"></script>' in page.text


def test_a_waiting_client_that_goes_away_cancels_its_cells():
    gated = FakeEngine(gated=True)  # never opened: the batch cannot finish before the client leaves
    with running_server(gated, cache=False) as srv:
        body = json.dumps({"cells": [{"id": f"B{i}", "template": "Slow {A}", "args": [i]} for i in range(10)],
                           "stream": False}).encode()
        head = (f"POST /v1/cells HTTP/1.1\r\nHost: {srv.host}:{srv.port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        # a plain socket, so the client goes away once the batch waits in the engine (an event),
        # not after a read timeout that a slow machine could reach before the batch was sent
        with socket.create_connection((srv.host, srv.port), timeout=60) as conn:
            conn.sendall(head + body)
            gated.wait_submitted(1)
        gated.wait_cancelled(1)
        assert len(gated.cancelled) == 1
        (job,) = BoundedClient(srv.url).list()
        assert job.kind == "cells" and job.status == "cancelled" and job.error == "cancelled: the client disconnected"


def test_serve_command_checks_the_tenants_file_before_starting_the_engine(tmp_path):
    from typer.testing import CliRunner

    from relserve.cli import app

    runner = CliRunner()
    r = runner.invoke(app, ["serve", "--hash-key", "sheets-secret-key"])
    assert r.exit_code == 0 and r.output.strip() == hash_key("sheets-secret-key")
    bad = tmp_path / "tenants.toml"
    bad.write_text('[tenants.a]\nkey = "short"\n')
    r = runner.invoke(app, ["serve", "--tenants", str(bad)])
    assert r.exit_code == 2
    import re

    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", r.output).split())  # rich draws a box around the error
    assert "tenants config: tenants.a.key: String should have at least 8 characters" in text


def test_plan_counts_rows_distinct_prompts_and_cached_answers_without_running(server, fake):
    rows = [{"x": "p1"}, {"x": "p2"}, {"x": "p1"}, {"x": None}]
    with BoundedClient(server.url, api_key=ALICE) as c:
        submitted = len(fake.submitted)
        got = c.plan("Plan {x}", rows).to_json()
        assert got | {"estimate": None} == {"rows": 4, "engine_rows": 2, "cached_rows": 0, "failed_rows": 1, "estimate": None}
        # issue 47: the engine's prompt tokens of the two prompts, and the seconds (relserve/estimate/)
        assert got["estimate"]["engine_rows"] == 2 and got["estimate"]["prompt_tokens"] > 0
        assert got["estimate"]["idle_s"] > 0
        assert len(fake.submitted) == submitted  # nothing ran
        c.run("Plan {x}", rows[:1])  # p1 is in the result cache now
        got = c.plan("Plan {x}", rows).to_json()
        assert got | {"estimate": None} == {"rows": 4, "engine_rows": 1, "cached_rows": 2, "failed_rows": 1, "estimate": None}
        assert got["estimate"]["engine_rows"] == 1
        with pytest.raises(ServerError, match=r"template names unknown column"):
            c.plan("Plan {y}", rows)


def test_a_label_call_with_nothing_for_the_engine_costs_nothing():
    # every row NULL (or cached): no prompt for the engine, so no first pass is counted either
    # (it divided by the rows: a 500 from every llm_classify_query whose rows were all cached)
    from relserve.functions import make_call
    from relserve.server.budget import Cost, with_first_pass

    call = make_call("llm_classify", "Which kind? {x}", labels=["a", "b"])
    assert with_first_pass(Cost.of(0, 0, 5), call) == Cost.of(0, 0, 5)
