"""``llm_reduce`` and ``llm_topk`` in PostgreSQL: aggregates, and ``llm_reduce_query`` for all
groups of a query at once. Each call is one request to the server's /v1/operators endpoints,
which run the operator there (every level of a reduction one relQuery for the request's groups).

An aggregate's final function sees one group, so ``SELECT g, llm_reduce(...) ... GROUP BY g``
sends one request per group: PostgreSQL gives a final function no way to see the statement's
other groups. ``llm_reduce_query(template, query)`` reads the whole query and sends every group
in one request (one relQuery per level for all of them): the form for many groups.

The aggregates' state is a text[]: the template (and for top-k, k) first, then the group's
non-NULL values. Options come from the session's ``relserve.*`` settings, or the jsonb of
``llm_reduce_query``, with the same names and checks as for ``llm_map``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

import httpx

from relserve.postgres import backend
from relserve.postgres.arguments import options_object, required
from relserve.postgres.budgets import within_ceilings
from relserve.postgres.errors import DATA_EXCEPTION, QUERY_CANCELED, PgError, raise_as_sql, server_error
from relserve.postgres.settings import CALL_OPTIONS, SETTING_NAMES, Settings, typed
from relserve.postgres.source import read_rows

WAIT_SLICE_S = 0.1
#: a call's budget (issue 63): every operator takes it, and the role's ceilings bound it
BUDGET_OPTIONS = ("max_tokens_total", "max_seconds", "on_budget")
#: the settings an operator takes (the rest of llm_map's vocabulary does not apply to it)
REDUCE_OPTIONS = ("max_tokens", "system", "temperature", "on_error", *BUDGET_OPTIONS)
TOPK_OPTIONS = ("max_tokens", "system", "on_error", *BUDGET_OPTIONS)
#: options only ``llm_reduce_query``'s jsonb carries
QUERY_OPTIONS = ("context_tokens", "json_schema")


def _options(name: str, settings: Settings, allowed: tuple[str, ...], given: Mapping[str, object] | None = None) -> dict[str, object]:
    """The session's settings overridden by the call's own, each budget within the role's
    ceiling (``relserve.budget_limits``, as for every other call); an unknown name or one the
    operator does not take is an error naming the ones it does."""
    given = dict(given or {})
    extra = QUERY_OPTIONS if given else ()
    unknown = sorted(set(given) - set(SETTING_NAMES) - set(extra))
    if unknown:
        raise PgError(f"{name}: unknown option(s) {', '.join(unknown)}; known options: {', '.join(allowed)}, "
                      f"context_tokens, json_schema, timeout, on_server_error")
    values = dict(settings.values)
    for k, v in given.items():
        if k in SETTING_NAMES and v is not None:
            values[k] = typed(k, v, f"{name}: option {k}")
    not_taken = sorted(k for k in given if k in CALL_OPTIONS and k not in allowed)
    if not_taken:
        raise PgError(f"{name} takes no option(s) {', '.join(not_taken)}; it takes {', '.join(allowed)}")
    values = within_ceilings(values, settings.ceilings)
    return {k: values[k] for k in allowed if values.get(k) is not None}


def _query_options(name: str, given: Mapping[str, object]) -> dict[str, object]:
    """``llm_reduce_query``'s own options, checked here so that a bad one names itself."""
    out: dict[str, object] = {}
    tokens = given.get("context_tokens")
    if tokens is not None:
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise PgError(f"{name}: option context_tokens must be a positive whole number of tokens, got {tokens!r}")
        out["context_tokens"] = tokens
    schema = given.get("json_schema")
    if schema is not None:
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as e:
                raise PgError(f"{name}: option json_schema is not valid JSON: {e}") from None
        if not isinstance(schema, dict):
            raise PgError(f"{name}: option json_schema must be a JSON object (a JSON schema), got {type(schema).__name__}")
        out["json_schema"] = schema
    return out


def _post(plpy: object, name: str, path: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """POST ``body`` and wait for the answer in slices that let PostgreSQL interrupt the call;
    interrupted (or past relserve.timeout), the connection is closed, which cancels the
    reduction on the server before its next level, and the interrupt is raised again."""
    pooled = backend.client(plpy, timeout_s)
    http = httpx.Client(base_url=pooled.url, headers=dict(pooled._http.headers), timeout=timeout_s + 30.0)
    done = threading.Event()
    box: dict[str, Any] = {}

    def send() -> None:
        try:
            box["response"] = http.post(path, content=json.dumps(body, ensure_ascii=False),
                                        headers={"Content-Type": "application/json"})
        except Exception as e:  # noqa: BLE001 (reported below with its message)
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=send, daemon=True).start()
    waited = 0.0
    try:
        while not done.wait(WAIT_SLICE_S):
            backend.check_for_interrupts(plpy)
            waited += WAIT_SLICE_S
            if waited > timeout_s:
                raise PgError(f"{name}: no answer from the relserve server within relserve.timeout = {timeout_s:g} s; "
                              "the call was cancelled", QUERY_CANCELED,
                              hint="SET relserve.timeout = <seconds> for longer calls")
    except BaseException:
        http.close()  # the server sees the client go and stops before the next level
        raise
    http.close()
    if "error" in box:
        raise server_error(name, 0, f"cannot reach the relserve server at {pooled.url}: {box['error']}")
    r = box["response"]
    if r.status_code >= 400:
        try:
            message = r.json()["error"]["message"]
        except Exception:  # noqa: BLE001
            message = r.text[:500]
        for prefix in ("llm_reduce: ", "llm_topk: "):  # the server names the operator; so does ``name``
            message = message.removeprefix(prefix)
        raise server_error(name, r.status_code, f"{message} (HTTP {r.status_code})")
    return r.json()


def _state(name: str, state: object, head: int) -> tuple[list[str], list[str]] | None:
    """(head fields, values) of an aggregate's state; None for a group with no rows."""
    if state is None:
        return None
    state = list(state)
    return state[:head], [v for v in state[head:] if v is not None]


def reduce_group(plpy: object, state: object) -> str | None:
    """The final function of ``llm_reduce(template, value)``: one request for this group."""
    name = "llm_reduce"
    try:
        parts = _state(name, state, 1)
        if parts is None:
            return None
        (template,), values = parts
        required(name, template=template)
        if not values:
            return None  # only NULLs: NULL, as SQL aggregates give
        settings = backend.settings(plpy)
        body = {"template": template, "groups": [values], **_options(name, settings, REDUCE_OPTIONS)}
        on_error = body.get("on_error", "null")
        body["on_error"] = "null"
        try:
            out = _post(plpy, name, "/v1/operators/reduce", body, settings.timeout_s)
        except PgError as e:
            if settings.on_server_error == "null" and e.sqlstate != QUERY_CANCELED:
                plpy.warning(f"{name}: relserve server error, NULL returned: {e.message}")
                return None
            raise
        if out["errors"][0] is not None:
            if on_error == "raise":
                raise PgError(f"{name}: {out['errors'][0].removeprefix('llm_reduce: ')}", DATA_EXCEPTION)
            plpy.notice(f"{name}: NULL for this group: {out['errors'][0]}")
        return out["values"][0]
    except PgError as e:
        raise_as_sql(plpy, e)


def topk_group(plpy: object, state: object) -> list[str] | None:
    """The final function of ``llm_topk(template, value, k)``: the k best values, best first."""
    name = "llm_topk"
    try:
        parts = _state(name, state, 2)
        if parts is None:
            return None
        (template, k), values = parts
        required(name, template=template)
        if k is None or not k.lstrip("-").isdigit() or int(k) < 1:
            raise PgError(f"{name}: k must be a positive integer, got {k if k is not None else 'NULL'}")
        if not values:
            return []
        settings = backend.settings(plpy)
        body = {"template": template, "values": values, "k": int(k), **_options(name, settings, TOPK_OPTIONS)}
        out = _post(plpy, name, "/v1/operators/topk", body, settings.timeout_s)
        failed = [e for e in out["errors"] if e is not None]
        if failed:
            plpy.notice(f"{name}: {len(failed)} value(s) could not be scored and were left out: {failed[0]}")
        return out["values"]
    except PgError as e:
        raise_as_sql(plpy, e)


def reduce_query(plpy: object, template: str, query: str, options: object) -> list[dict[str, object]]:
    """``llm_reduce_query``: the query's rows grouped by every column but the placeholder's, all
    groups in ONE request (one relQuery per level). (grp, answer, error) rows, groups in the
    order they first appear."""
    name = "llm_reduce_query"
    try:
        required(name, template=template, query=query)
        given = options_object(name, options, '{"max_tokens": 32}')
        settings = backend.settings(plpy)
        chosen = _options(name, settings, REDUCE_OPTIONS, given)
        extra = _query_options(name, given)
        from relserve.template import Template

        try:
            columns = Template.parse(template).columns
        except Exception as e:  # noqa: BLE001 (the template's own message)
            raise PgError(f"{name}: {e}") from None
        if len(columns) != 1:
            raise PgError(f"{name}: the template must have exactly one placeholder (the query's column of values), "
                          f"it has {len(columns)}")
        column = columns[0]
        rows, _ = read_rows(plpy, name, query)
        if rows and column not in rows[0]:
            raise PgError(f"{name}: the query has no column {column!r} for the placeholder; its columns: "
                          f"{', '.join(rows[0])}")
        groups: dict[str, list[object]] = {}
        for row in rows:
            key = json.dumps({k: v for k, v in row.items() if k != column}, ensure_ascii=False, sort_keys=True)
            value = row[column]
            groups.setdefault(key, []).append(value if value is None or isinstance(value, str) else json.dumps(value))
        if not groups:
            return []
        on_error = chosen.get("on_error", "null")
        body = {"template": template, "groups": list(groups.values()), **chosen, "on_error": "null", **extra}
        out = _post(plpy, name, "/v1/operators/reduce", body, settings.timeout_s)
        if on_error == "raise":
            bad = next((i for i, e in enumerate(out["errors"]) if e is not None), None)
            if bad is not None:
                raise PgError(f"{name}: group {list(groups)[bad]}: {out['errors'][bad]}", DATA_EXCEPTION)
        return [{"grp": key, "answer": value, "error": err}
                for key, value, err in zip(groups, out["values"], out["errors"])]
    except PgError as e:
        raise_as_sql(plpy, e)
