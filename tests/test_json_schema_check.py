"""A caller's JSON schema cannot stall the process that checks values against it (found by an
audit, 7 Dec). A schema comes from whoever calls ``llm_extract``: a server tenant, a PostgreSQL
role, a spreadsheet cell. Its ``pattern`` was matched with Python's ``re``, which holds the
interpreter lock: a pattern with nested repetition checked against a few-shot example's answer
("aaaa...a!") took exponential time in ``make_call`` and froze the server for every tenant. A
schema nested too deeply, or a ``$ref`` to itself, raised RecursionError: a 500."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest
from server_fixtures import FakeEngine, running_server

from relserve.errors import ConfigError, RowError
from relserve.functions import make_call, validate_schema

#: a pattern the ``regex`` module also backtracks on; ``re`` takes about 2^n steps for n characters
SLOW = "^(a|a)+$"
SLOW_ANSWER = json.dumps("a" * 40 + "!")


def test_a_pattern_with_nested_repetition_is_refused_within_its_time_limit_not_matched_for_ever():
    # in a process of its own: on a stalling check the test fails by its timeout, not by hanging
    code = (
        "from relserve.functions import make_call\n"
        f"try:\n    make_call('llm_extract', '{{x}}', json_schema={{'type': 'string', 'pattern': {SLOW!r}}}, "
        f"examples=[{{'x': 'a', 'answer': {SLOW_ANSWER!r}}}])\n"
        "except Exception as e:\n    print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == (
        "ConfigError llm_extract: example 0: llm_extract answer cannot be checked against the schema: its pattern "
        f"'{SLOW}' took more than 0.05 s to match a value of 41 characters; write it without nested "
        "repetition such as (a+)+"), out.stderr[-2000:]


def test_patterns_still_decide_what_fits():
    call = make_call("llm_extract", "{x}", json_schema={
        "type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
        "patternProperties": {"^x_": {"type": "integer"}}, "additionalProperties": False})
    assert call.convert('{"code": "ABC", "x_1": 2}') == '{"code": "ABC", "x_1": 2}'
    with pytest.raises(RowError, match=r"does not match the schema: 'abcd' does not match '\^\[A-Z\]\{3\}\$'"):
        call.convert('{"code": "abcd"}')
    with pytest.raises(RowError, match=r"does not match the schema: 'y' does not match any of the regexes: '\^x_'"):
        call.convert('{"code": "ABC", "y": 2}')
    with pytest.raises(RowError, match=r"does not match the schema: 'two' is not of type 'integer'"):
        call.convert('{"x_2": "two"}')
    # the audit's pattern: the regex module does not backtrack on it, so the answer is simply wrong
    nested = make_call("llm_extract", "{x}", json_schema={"type": "string", "pattern": "^(a+)+$"})
    with pytest.raises(RowError, match="does not match"):
        nested.convert(json.dumps("a" * 40 + "!"))
    # a model's answer that would stall the check is that row's error
    slow = make_call("llm_extract", "{x}", json_schema={"type": "string", "pattern": SLOW})
    with pytest.raises(RowError, match=r"^llm_extract answer cannot be checked against the schema: its pattern"):
        slow.convert(SLOW_ANSWER)


def nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"not": schema}
    return schema


@pytest.mark.parametrize(("schema", "examples", "message"), [
    (nested(300), None, "llm_extract: the JSON schema cannot be used: it is nested too deeply to check"),
    ({"$ref": "#"}, [{"x": "a", "answer": '"a"'}],
     "llm_extract: example 0: llm_extract answer cannot be checked against the schema: it refers to itself without end"),
    ({"type": "object", "patternProperties": {"^a": {}}, "unevaluatedProperties": False}, None,
     "llm_extract: the JSON schema cannot be used: it has unevaluatedProperties beside patternProperties"),
])
def test_a_schema_that_cannot_be_checked_is_the_callers_error_naming_why(schema, examples, message):
    with pytest.raises(ConfigError) as e:
        make_call("llm_extract", "{x}", json_schema=schema, **({"examples": examples} if examples else {}))
    assert str(e.value).startswith(message), str(e.value)
    if examples is None:
        with pytest.raises(ConfigError, match="the JSON schema cannot be used"):
            validate_schema(schema)


def test_a_tenant_with_a_slow_pattern_gets_a_400_and_the_server_keeps_answering(tmp_path, monkeypatch):
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))
    body = {"template": "{x}", "rows": [{"x": 1}], "function": "extract",
            "json_schema": {"type": "string", "pattern": SLOW}, "examples": [{"x": "a", "answer": SLOW_ANSWER}]}
    with running_server(FakeEngine(), tenants={"tenants": {"t": {"key": "key-of-t"}}}, cache=False) as srv:
        r = httpx.post(srv.url + "/v1/relqueries", json=body, headers={"Authorization": "Bearer key-of-t"}, timeout=60)
        assert r.status_code == 400, r.text
        assert "took more than 0.05 s to match a value of 41 characters" in r.text
        deep = {**body, "json_schema": nested(300), "examples": None}
        r = httpx.post(srv.url + "/v1/relqueries", json=deep, headers={"Authorization": "Bearer key-of-t"}, timeout=60)
        assert r.status_code == 400 and "nested too deeply" in r.text, r.text
        assert httpx.get(srv.url + "/health", timeout=10).status_code == 200
