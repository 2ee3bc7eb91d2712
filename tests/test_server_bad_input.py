"""Bad input against every endpoint of the HTTP API, as a matrix: each case is sent to each
endpoint that takes it, and must get its exact status and an error message naming the problem,
never a 500. The endpoint list is read from the app, so a new endpoint fails here until it has
a valid example body below (and so inherits every case)."""

from __future__ import annotations

import json

import httpx
import pytest
from server_fixtures import FakeEngine, running_server

from relserve.server import create_app, hash_key

KEY, OTHER = "matrix-secret-key", "other-secret-key"
TENANTS = {
    "limits": {"max_body_bytes": 4096, "max_rows_per_request": 20},
    "tenants": {"a": {"key_sha256": hash_key(KEY)}, "b": {"key": OTHER}},
}

#: a valid body for every POST endpoint, with the name of one numeric sampling field in it
VALID = {
    "/v1/relqueries": ({"template": "Say {x}", "rows": [{"x": "a"}, {"x": "b"}]}, "temperature"),
    "/v1/relqueries/plan": ({"template": "Say {x}", "rows": [{"x": "a"}, {"x": "b"}]}, "temperature"),
    "/v1/relqueries/tokens": ({"template": "Say {x}", "rows": [{"x": "a"}, {"x": "b"}]}, "temperature"),
    "/v1/cells": ({"cells": [{"id": "A1", "template": "Say {x}", "args": ["a"]}], "stream": False}, "temperature"),
    "/v1/completions": ({"prompt": ["Say a", "Say b"]}, "temperature"),
    "/v1/chat/completions": ({"messages": [{"role": "user", "content": "Say a"}]}, "temperature"),
    "/v1/operators/reduce": ({"template": "Sum up: {v}", "groups": [["a", "b"], ["c"]]}, "temperature"),
    "/v1/operators/topk": ({"template": "Is {v} good?", "values": ["a", "b", "c"], "k": 1}, "max_tokens"),
}

#: the row data of each endpoint's example, where a per-row value can be put
ROW_VALUE = {
    "/v1/relqueries": lambda b, v: b["rows"][1].update(x=v),
    "/v1/relqueries/plan": lambda b, v: b["rows"][1].update(x=v),
    "/v1/relqueries/tokens": lambda b, v: b["rows"][1].update(x=v),
    "/v1/cells": lambda b, v: b["cells"][0].update(args=[v]),
    "/v1/completions": lambda b, v: b["prompt"].__setitem__(1, v),
    "/v1/chat/completions": lambda b, v: b["messages"][0].update(content=v),
    "/v1/operators/reduce": lambda b, v: b["groups"][0].__setitem__(1, v),
    "/v1/operators/topk": lambda b, v: b["values"].__setitem__(1, v),
}


@pytest.fixture(scope="module")
def server():
    with running_server(FakeEngine(), tenants=TENANTS, cache=False) as srv:
        yield srv


def _send(srv, path: str, content: bytes | None, key: str | None = KEY) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.post(srv.url + path, content=content, headers=headers, timeout=30)


def _raw(body) -> bytes:
    # json.dumps writes NaN/Infinity and lone surrogates as Python's parser reads them
    return json.dumps(body, allow_nan=True).encode()


def _message(r: httpx.Response) -> str:
    body = r.json()
    assert set(body["error"]) == {"message", "type", "code"} and body["error"]["code"] == r.status_code
    return body["error"]["message"]


def test_every_post_endpoint_has_an_example_body():
    app = create_app(FakeEngine(), cache=False)
    posts = {r.path for r in app.routes if "POST" in getattr(r, "methods", ())}
    assert posts == set(VALID), "give each POST endpoint a valid body in VALID (and ROW_VALUE)"
    assert set(ROW_VALUE) == set(VALID)


def _cases():
    """(case name, build(path) -> (content, key), expected status, expected message part)."""
    def body(path):
        return json.loads(json.dumps(VALID[path][0]))

    def field(path, value):
        b = body(path)
        b[VALID[path][1]] = value
        return b

    def row(path, value):
        b = body(path)
        ROW_VALUE[path](b, value)
        return b

    def oversized(path):
        b = body(path)
        ROW_VALUE[path](b, "y" * 5000)
        return b

    yield "valid", lambda p: (_raw(body(p)), KEY), 200, None
    yield "no key", lambda p: (_raw(body(p)), None), 401, "missing API key"
    yield "unknown key", lambda p: (_raw(body(p)), "not-a-key-at-all"), 401, "unknown API key"
    yield "not JSON", lambda p: (b'{"x": [}', KEY), 400, "request body is not valid JSON"
    yield "no body", lambda p: (None, KEY), 422, "the request body is missing"
    yield "a JSON array", lambda p: (b"[1, 2]", KEY), 422, "invalid request"
    yield "Infinity", lambda p: (_raw(field(p, float("inf"))), KEY), 422, "NaN and Infinity are not JSON numbers"
    yield "NaN", lambda p: (_raw(field(p, float("nan"))), KEY), 422, "NaN and Infinity are not JSON numbers"
    yield "Infinity in row data", lambda p: (_raw(row(p, float("inf"))), KEY), 422, "NaN and Infinity are not JSON numbers"
    yield "wrong type", lambda p: (_raw(field(p, "hot")), KEY), 422, lambda p: {
        "temperature": "temperature: Input should be a valid number",
        "max_tokens": "max_tokens: Input should be a valid integer",
    }[VALID[p][1]]
    yield "too large", lambda p: (_raw(oversized(p)), KEY), 413, "request body too large"


CASES = list(_cases())


@pytest.mark.parametrize("path", sorted(VALID))
@pytest.mark.parametrize("name,build,status,message", CASES, ids=[c[0] for c in CASES])
def test_bad_input_matrix(server, path, name, build, status, message):
    content, key = build(path)
    r = _send(server, path, content, key)
    expected = 201 if (status == 200 and path == "/v1/relqueries") else status
    assert r.status_code == expected, r.text
    if message is not None:
        assert (message(path) if callable(message) else message) in _message(r)


@pytest.mark.parametrize("path", sorted(VALID))
def test_a_row_that_is_not_valid_unicode_fails_alone(server, path):
    b = json.loads(json.dumps(VALID[path][0]))
    if path == "/v1/relqueries":
        b["rows"].insert(0, {"x": "fine"})
    ROW_VALUE[path](b, "bad \ud800 text")
    r = _send(server, path, _raw(b))
    # accepted where each row has its own error; OpenAI's endpoints refuse the request
    assert r.status_code == {"/v1/relqueries": 201, "/v1/relqueries/plan": 200, "/v1/relqueries/tokens": 200, "/v1/cells": 200,
                             "/v1/operators/reduce": 200, "/v1/operators/topk": 200}.get(path, 400), r.text
    if path == "/v1/relqueries":
        rq = httpx.get(f"{server.url}/v1/relqueries/{r.json()['id']}/result", headers={"Authorization": f"Bearer {KEY}"}).json()
        errors = [row["error"] for row in rq["rows"]]
        assert errors[0] is None and errors[2] is None
        assert errors[1].startswith("the prompt is not valid Unicode text: surrogates not allowed '\\ud800' at character")
    elif path == "/v1/relqueries/plan":
        # it fails when its prompt is encoded, so the estimate leaves it out
        assert r.json() | {"estimate": None} == {"rows": 2, "engine_rows": 2, "cached_rows": 0, "failed_rows": 0, "estimate": None}
        assert r.json()["estimate"]["engine_rows"] == 1
    elif path == "/v1/relqueries/tokens":  # the row that cannot be encoded is not counted, and says why
        counted = r.json()
        assert counted["prompt_tokens"][0] > 0 and counted["prompt_tokens"][1] is None
        assert counted["errors"][1].startswith("the prompt is not valid Unicode text")
    elif path == "/v1/cells":
        (cell,) = r.json()["cells"]
        assert cell["error"].startswith("the prompt is not valid Unicode text")
    elif path == "/v1/operators/reduce":  # the group with the bad value fails, the other is answered
        (bad, good) = r.json()["errors"], r.json()["values"]
        assert bad[0] == "llm_reduce: value 1 is not valid Unicode text (surrogates not allowed at character 4)", bad
        assert (bad[1], good[1]) == (None, "echo: Sum up: - c")
    elif path == "/v1/operators/topk":  # the bad value fails alone and is not ranked
        assert r.json()["errors"][0] is None and r.json()["errors"][2] is None
        assert r.json()["errors"][1].startswith("llm_filter: the prompt is not valid Unicode text")
        assert "bad \ud800 text" not in r.json()["values"]
    else:  # OpenAI's shape has no per-prompt error: the request fails naming the prompt
        index = 1 if path == "/v1/completions" else 0
        assert (r.status_code, _message(r)) == (
            400, f"prompt {index}: the prompt is not valid Unicode text: surrogates not allowed '\\ud800' at character 4")


def test_text_outside_the_rows_must_be_valid_unicode(server):
    r = _send(server, "/v1/relqueries", _raw({"template": "Say {x} \ud800", "rows": [{"x": "a"}]}))
    assert r.status_code == 422
    assert _message(r) == "invalid request: template: not valid Unicode text (surrogates not allowed at character 8)"
    r = _send(server, "/v1/relqueries", _raw({"template": "Say {x}", "rows": [{"x": "a"}], "system": "\udfff"}))
    assert (r.status_code, _message(r)) == (422, "invalid request: system: not valid Unicode text (surrogates not allowed at character 0)")


def _routes():
    app = create_app(FakeEngine(), cache=False)
    for r in app.routes:
        for method in sorted(getattr(r, "methods", ()) or ()):
            if method != "HEAD":
                yield method, r.path


API_ROUTES = sorted((m, p) for m, p in _routes() if p.startswith("/v1/"))


@pytest.mark.parametrize("method,path", API_ROUTES, ids=[f"{m} {p}" for m, p in API_ROUTES])
def test_every_api_route_needs_a_key(server, method, path):
    r = httpx.request(method, server.url + path.replace("{job_id}", "0123456789abcdef"), timeout=30)
    assert (r.status_code, _message(r)) == (401, "missing API key: send the header 'Authorization: Bearer <key>'")


JOB_ROUTES = [(m, p) for m, p in API_ROUTES if "{job_id}" in p]


@pytest.mark.parametrize("method,path", JOB_ROUTES, ids=[f"{m} {p}" for m, p in JOB_ROUTES])
def test_another_tenants_relquery_is_404_on_every_route(server, method, path):
    r = _send(server, "/v1/relqueries", _raw(VALID["/v1/relqueries"][0]), key=OTHER)
    theirs = r.json()["id"]
    r = httpx.request(method, server.url + path.replace("{job_id}", theirs), headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert (r.status_code, _message(r)) == (404, f"no relQuery with id {theirs!r}")


@pytest.mark.parametrize("path", ["/v1/relqueries", "/v1/relqueries/plan"])
def test_a_tenants_prompt_shape_is_checked_by_name(server, path):
    # a tenant picks the scoring layout per call: an unknown one is refused naming every known one
    body = {"function": "llm_filter", "template": "Is {x} good?", "rows": [{"x": "a"}, {"x": "b"}]}
    r = _send(server, path, _raw({**body, "prompt_shape": "json"}))
    assert r.status_code == 400
    assert _message(r) == "prompt_shape must be one of chat, chat_answer, completion, question_first, got 'json'"
    ok = _send(server, path, _raw({**body, "prompt_shape": "question_first"}))
    assert ok.status_code == (201 if path == "/v1/relqueries" else 200), ok.text
