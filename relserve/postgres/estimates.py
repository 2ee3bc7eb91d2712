"""Knowing before running, from PostgreSQL (issue 47): ``llm_count_tokens`` (a row's prompt tokens
as the server's engine sees them), ``llm_count_tokens_query`` (every row of a query, one request)
and ``llm_estimate_query`` (what one relQuery over a query's rows would cost: the engine's prompt
tokens, the most answer tokens, the seconds alone and behind the server's work now, the budget
that would hold it). The server counts with its own tokenizer; nothing runs on the engine.

A call's function, labels or schema are options here (``{"function": "filter"}``; llm_map's
prompt when none), the rest are the call options of every function, settings included.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from relserve.postgres import backend
from relserve.postgres.arguments import function_option, options_object, required
from relserve.postgres.calls import bind
from relserve.postgres.errors import PgError, raise_as_sql, server_error
from relserve.postgres.settings import CallRequest, call_request
from relserve.postgres.source import read_rows

if TYPE_CHECKING:
    from relserve.client import Client

T = TypeVar("T")

#: options that say which function's prompt is counted, not how the call runs
_FUNCTION_OPTIONS = ("function", "labels", "json_schema")


def _request(plpy: object, name: str, options: object) -> CallRequest:
    given = options_object(name, options, '{"function": "filter"}')
    function = function_option(name, given.pop("function", None))
    spec = given.pop("labels", None) if function == "classify" else given.pop("json_schema", None)
    for key in _FUNCTION_OPTIONS:
        given.pop(key, None)
    needs = {"classify": "labels", "extract": "json_schema"}.get(function)
    if needs is not None and spec is None:
        raise PgError(f"{name}: option function {function!r} needs the option {needs}")
    return call_request(name, backend.settings(plpy), function, spec, given)


def _ask(plpy: object, name: str, request: CallRequest, ask: Callable[[Client], T]) -> T:
    """The server's ``count_tokens`` or ``plan`` of some rows (nothing runs on its engine); its
    refusal as ``name``'s error."""
    from relserve.client import ServerError

    client = backend.client(plpy, request.timeout_s)
    try:
        return ask(client)
    except ServerError as e:
        raise server_error(name, e.status, e.message) from None


def count_tokens(plpy: object, template: str, vals: object = None, fields: object = None, options: object = None) -> int | None:
    """One row's prompt tokens (NULL, with a notice, for a row that cannot run)."""
    name = "llm_count_tokens"
    try:
        required(name, template=template)
        request = _request(plpy, name, options)
        row = bind(name, template, vals, fields)
        got = _ask(plpy, name, request, lambda c: c.count_tokens(template, [row], request.call))
        if got.prompt_tokens[0] is None:
            plpy.notice(f"{name}: NULL for this row: {got.errors[0]}")
        return got.prompt_tokens[0]
    except PgError as e:
        raise_as_sql(plpy, e)


def count_tokens_query(plpy: object, template: str, query: str, options: object) -> list[dict]:
    """Every row of ``query``: (ord, prompt_tokens, error, input), one request."""
    name = "llm_count_tokens_query"
    try:
        required(name, template=template, query=query)
        request = _request(plpy, name, options)
        rows, inputs = read_rows(plpy, name, query)
        if not rows:
            return []
        got = _ask(plpy, name, request, lambda c: c.count_tokens(template, rows, request.call))
        return [{"ord": i + 1, "prompt_tokens": n, "error": err, "input": t}
                for i, (n, err, t) in enumerate(zip(got.prompt_tokens, got.errors, inputs))]
    except PgError as e:
        raise_as_sql(plpy, e)


def estimate_query(plpy: object, template: str, query: str, options: object) -> str:
    """The estimate of ONE relQuery over ``query``'s rows (the server's ``/v1/relqueries/plan``),
    with the budget the call would run under (settings, options and the role's ceiling), as jsonb."""
    name = "llm_estimate_query"
    try:
        required(name, template=template, query=query)
        request = _request(plpy, name, options)
        rows, _ = read_rows(plpy, name, query)
        if not rows:
            return json.dumps({"rows": 0, "estimate": None})
        plan = _ask(plpy, name, request, lambda c: c.plan(template, rows, request.call))
        budget = {k: request.options.get(k) for k in ("max_tokens_total", "max_seconds", "on_budget")}
        return json.dumps({**plan.to_json(), "budget": budget})
    except PgError as e:
        raise_as_sql(plpy, e)
