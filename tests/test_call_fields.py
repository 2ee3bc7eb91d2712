"""One encoder for a call sent over HTTP (relserve.call_fields.CallFields): the names the server
parses, a call that comes out of the server's parsing as the call that went in, the Python
client's keyword options through it, and the rows put back in input order. Fast, no engine."""

from __future__ import annotations

import json
from dataclasses import replace

import httpx
import pytest

from relserve.call_fields import CALL_FIELD_NAMES, CallFields
from relserve.client import Client
from relserve.functions import make_call
from relserve.results import RowResult, in_input_order
from relserve.server.schemas import RelQueryRequest

#: what a relQuery body carries besides the call
_NOT_THE_CALL = {"template", "rows", "prompts", "stream"}


def test_the_encoder_sends_exactly_the_names_the_server_parses():
    assert set(CALL_FIELD_NAMES) == set(RelQueryRequest.model_fields) - _NOT_THE_CALL


CALLS = [
    make_call("llm_map", "Say {x}", max_tokens=5, temperature=0.7, top_p=0.9, seed=3, system="Be brief."),
    make_call("llm_filter", "Is {x} good?", method="score", prompt_shape="completion",
              examples=[{"x": "cake", "answer": True}, {"x": float("nan"), "answer": False}]),
    make_call("llm_classify", "Tone of {x} in {y}", labels=["warm", "cold"], reorder_fields=True),
    make_call("llm_extract", "Facts of {x}", json_schema={"type": "object", "properties": {"n": {"type": "integer"}}}),
]


@pytest.mark.parametrize("call", CALLS, ids=lambda c: c.function.name)
def test_a_call_comes_out_of_the_servers_parsing_as_it_went_in(call):
    body = CallFields.of_call(call, cache=False).to_json()
    # through JSON text, as on the wire
    parsed = RelQueryRequest.model_validate_json(json.dumps({**body, "template": call.template.source, "rows": []}))
    assert parsed.cache is False
    got = parsed.call(call.template.source)
    if any(v != v for ex in call.options.examples or () for _, v in ex):
        # NaN in an example travels as its text, as a local run renders it
        assert dict(got.options.examples[1])["x"] == "nan"
        assert got.examples_prefix == call.examples_prefix
    else:
        # the function's default max_tokens travels resolved: the same number, given explicitly
        assert got.max_tokens == call.max_tokens
        assert replace(got, options=replace(got.options, max_tokens=call.options.max_tokens)) == call


def test_defaults_are_not_sent_and_on_error_is_the_callers():
    fields = CallFields.of_call(make_call("llm_map", "Say {x}"), on_error="null")
    assert fields.to_json() == {"function": "map", "max_tokens": 64, "temperature": 0.0, "top_p": 1.0, "on_error": "null"}


def test_the_client_sends_its_keyword_options_through_the_encoder_and_passes_unknown_names_on():
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"id": "rq1"})

    with Client("http://relserve.test", transport=httpx.MockTransport(handler)) as c:
        base = CallFields(function="filter", max_tokens=2, cache=False)
        c.submit("Is {x} good?", [{"x": "cake"}], base, max_tokens=3, system=None, max_token=9)
    # the keyword wins over the call's field, None is not sent, a misspelt name reaches the
    # server (which refuses it, naming it) instead of vanishing
    assert seen == [{"function": "filter", "max_tokens": 3, "cache": False, "max_token": 9,
                     "template": "Is {x} good?", "rows": [{"x": "cake"}]}]


def test_rows_come_back_in_input_order_and_a_missing_one_says_so():
    rows = in_input_order([RowResult(2, text="c"), RowResult(0, text="a")], 3)
    assert [(r.index, r.text, r.error) for r in rows] == [(0, "a", None), (1, None, "no answer"), (2, "c", None)]
