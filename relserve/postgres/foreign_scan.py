"""What the C foreign data wrapper (udfs/relserve/relserve.c) calls, through fmgr and never by a
role (EXECUTE is revoked from PUBLIC): each window of a scan's source rows is one relQuery.

The C side reads the source query itself, with the caller's rights, keeps each row's values, and
sends the window's rows here as ``row_to_json`` text. ``scan_poll`` then hands back what arrived as
a flat text array of 4-field events, which C reads without a JSON parser:

    accepted, <relquery id>, <rows>, NULL
    row,      <index in the window>, <answer as text or NULL>, <error or NULL>
    stat,     <name>, <value>, NULL          (once the relQuery is over, one per figure)
    done,     NULL, NULL, NULL
    error,    <SQLSTATE>, <message>, <hint or NULL>   (the C side raises it)
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace

from relserve.client import Client
from relserve.postgres import backend
from relserve.postgres.answers import Accepted, Answer, AnswerStream, Broken, Finished
from relserve.postgres.calls import bind, notice_cascade
from relserve.postgres.errors import DATA_EXCEPTION, QUERY_CANCELED, PgError, raise_as_sql, server_error
from relserve.postgres.settings import CallRequest, call_request

#: the figures of a finished relQuery that EXPLAIN ANALYZE shows (summed over the windows)
STAT_NAMES = ("rows", "engine_rows", "cached_rows", "latency_s", "waiting_s", "core_s", "tail_s",
              "prompt_tokens", "cached_tokens", "estimated_s", "estimated_prompt_tokens")
#: a scan nobody polls for this long was ended by an error the Python code never saw
ABANDON_AFTER_S = 3.0


class Scan:
    """One window's relQuery, as the C side polls it."""

    def __init__(self, name: str, request: CallRequest, stream: AnswerStream, rows: int) -> None:
        self.name, self.request, self.stream, self.rows = name, request, stream, rows
        self.end = time.monotonic() + request.timeout_s


_scans: dict[str, Scan] = {}


def _start(name: str, request: CallRequest, client: Client, template: str, rows: list) -> str:
    """Send ``rows`` as one relQuery and register its stream for polling; the scan's handle."""
    # the server estimates each window when it starts: EXPLAIN ANALYZE shows it beside what it
    # took (not an isolated call's: its estimate would count rows the reader may not see)
    call = request.call if request.call.isolated else replace(request.call, estimate=True)
    stream = AnswerStream(client, template, rows, call, abandon_after_s=ABANDON_AFTER_S)
    return register(Scan(name, request, stream, len(rows)))


def register(scan: Scan) -> str:
    """Register a window's answer stream for ``scan_poll``; its handle (``scan_close`` ends it)."""
    handle = uuid.uuid4().hex
    _scans[handle] = scan
    return handle


def scan_open(plpy: object, url: str, api_key: str | None, kind: str, template: str, spec: str | None,
              options: str | None, rows: str) -> str:
    """Send one window of source rows (a JSON array of objects) as a relQuery; its handle."""
    name = f"relserve_fdw ({kind})"
    try:
        given = json.loads(options) if options else {}
        if kind == "classify":  # the table option is one comma-separated string
            spec = [label.strip() for label in (spec or "").split(",")]
        request = call_request(name, backend.settings(plpy), kind, spec, given)
        window = json.loads(rows)
        client = backend.client(plpy, request.timeout_s, url=url, api_key=api_key or "")
        for old in [h for h, s in _scans.items() if s.stream.stopped]:  # ended by an error nobody polled after
            del _scans[old]
        return _start(name, request, client, template, window)
    except PgError as e:
        raise_as_sql(plpy, e)


def scan_poll(plpy: object, handle: str, wait_s: float) -> list[str | None]:
    """What arrived for the window within ``wait_s`` seconds, as flat 4-field events."""
    scan = _scans.get(handle)
    if scan is None:
        return ["error", "XX000", f"relserve_fdw: no open scan {handle}", None]
    out: list[str | None] = []
    for event in scan.stream.poll(wait_s):
        if isinstance(event, Accepted):
            out += ["accepted", event.relquery_id, str(event.total), None]
        elif isinstance(event, Answer):
            r = event.row
            if r.error is not None and scan.request.on_error == "raise":
                return out + ["error", DATA_EXCEPTION, f"{scan.name}: row {r.index + 1}: {r.error}", None]
            out += ["row", str(r.index), as_text(r.value), r.error]
        elif isinstance(event, Broken):
            if scan.request.on_server_error == "null" and not any(e == "row" for e in out[::4]):
                plpy.warning(f"{scan.name}: relserve server error, NULL returned for every row: {event.message}")
                for i in range(scan.rows):
                    out += ["row", str(i), None, event.message]
                return out + ["done", None, None, None]
            e = server_error(scan.name, event.status, event.message)
            return out + ["error", e.sqlstate, e.message, e.hint]
        elif isinstance(event, Finished):
            notice_cascade(plpy, scan.name, event.stats)
            for stat in STAT_NAMES:
                value = event.stats.get(stat)
                if value is not None:
                    out += ["stat", stat, str(value), None]
            return out + ["done", None, None, None]
    if time.monotonic() > scan.end:
        problem = scan.stream.cancel()
        if problem:
            plpy.warning(problem)
        return out + ["error", QUERY_CANCELED, f"{scan.name}: no answer from the relserve server within "
                      f"relserve.timeout = {scan.request.timeout_s:g} s; its relQuery was cancelled", None]
    return out


def scan_close(plpy: object, handle: str) -> str:
    """The scan is over (or not wanted any more: LIMIT, an error): cancel what still runs."""
    scan = _scans.pop(handle, None)
    if scan is None or scan.stream.ended:
        return ""
    problem = scan.stream.cancel()
    if problem:
        plpy.warning(problem)
    return problem or ""


def isolated(request: CallRequest) -> CallRequest:
    """A security qual's call (issue 63): out of the tenant's caches, and failing closed and
    silently whatever the reader's settings. Its rows are ones the reader may not see, so a row
    it cannot answer (an error, a budget spent) is NULL, and the qual hides it, with no error,
    no refusal before it starts and no estimate: each would name a hidden row's tokens or text.
    (The C side gives no NOTICE for such a row either.)"""
    call = replace(request.call, isolated=True, on_budget="partial", estimate=None)
    return replace(request, call=call, on_error="null")


def as_text(value: object) -> str | None:
    # the C side reads the answer with the column type's input function
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return None if value is None else str(value)


def batch_open(plpy: object, kind: str, template: str, spec: str | None, form: str, rows: str) -> str:
    """A window of a query's scalar ``llm_<kind>`` calls (batch_calls.c) as ONE relQuery: each row
    is the call's value argument (the VARIADIC values as an array, or the jsonb object), bound to
    the template as the scalar function binds it (a call that cannot bind fails the statement, as
    one call does; a NULL value fails its row on the server); the server and key are the
    functions' own (the superuser's configuration)."""
    name = f"llm_{kind}"
    # "args" or "fields"; "... isolated" for a security qual's call (a policy's, a security_barrier
    # view's: batch_plan.c), over rows the reader may not see, sent out of the reader's caches
    form, _, mode = form.partition(" ")
    try:
        labels_or_schema = json.loads(spec) if spec else None
        request = call_request(name, backend.settings(plpy), kind, labels_or_schema)
        if mode == "isolated":
            request = isolated(request)
        window = json.loads(rows)
        bound = [bind(name, template, value, None) if form == "args" else
                 bind(name, template, None, None if value is None else json.dumps(value)) for value in window]
        client = backend.client(plpy, request.timeout_s)
        return _start(name, request, client, template, bound)
    except PgError as e:
        raise_as_sql(plpy, e)
