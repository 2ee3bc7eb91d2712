"""A Python client for a relserve server (httpx), used by the Postgres functions and by anyone
who wants relQueries without an engine in their own process.

>>> from relserve.client import Client
>>> with Client("http://127.0.0.1:8000", api_key="...") as c:
...     c.map("Is this review positive? {review}", [{"review": "Great!"}], function="filter")
[True]

``run``/``map`` stream the rows back and wait for all of them; leaving early (an exception, a
``break`` out of ``stream``) closes the connection, which cancels the relQuery on the server.
Server errors raise ``ServerError`` carrying the HTTP status and the server's message.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from relserve.call_fields import CALL_FIELD_NAMES, CallFields
from relserve.errors import ConfigError, RelServeError
from relserve.job_stats import JobStats
from relserve.replies import (
    CellAnswer,
    Health,
    JobDescription,
    JobList,
    PromptTokenCounts,
    RelQueryPlan,
    StreamStart,
    UndescribedJob,
)
from relserve.results import RowResult, RowsView, in_input_order

DEFAULT_URL = "http://127.0.0.1:8000"


class ServerError(RelServeError):
    """The server refused a request or could not be reached (``status`` 0)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{message} (HTTP {status})" if status else message)
        self.status = status
        self.message = message


@dataclass
class RemoteResult(RowsView):
    id: str
    status: str
    #: every row, in input order
    rows: list[RowResult]
    #: the job's figures (``JobStats``; ``stats["rows"]`` reads them as a mapping too)
    stats: JobStats = field(default_factory=JobStats)
    error: str | None = None


class RelQueryStream:
    """Rows of a relQuery as they finish. ``close()`` (or leaving a ``with`` block) before the
    end drops the connection, and the server cancels the relQuery."""

    def __init__(self, cm, response: httpx.Response) -> None:
        self._cm = cm
        self._lines = response.iter_lines()
        #: the first event: the job's id, its rows (or cells), those cached, those the engine runs
        self.header = StreamStart.model_validate(self._next_event())
        self.id: str = self.header.id
        self.total: int = self.header.total
        #: the job's description once its last row has come (the ``done`` event)
        self.done: JobDescription | None = None

    def _next_event(self) -> dict[str, Any]:
        for line in self._lines:
            if line.strip():
                return json.loads(line)
        raise ServerError(0, "the server closed the stream before its end")

    def __iter__(self) -> Iterator[RowResult]:
        try:
            while self.done is None:
                event = self._next_event()
                kind = event.pop("event", None)
                if kind == "done":
                    self.done = JobDescription.model_validate(event)
                elif kind == "row":
                    yield RowResult.from_dict(event)
                elif kind == "cell":
                    yield CellAnswer.model_validate(event)  # type: ignore[misc]
        except httpx.HTTPError as e:
            raise ServerError(0, f"the stream from the relserve server broke: {e}") from None
        finally:
            if self.done is not None:
                self.close()

    def close(self) -> None:
        if self._cm is not None:
            cm, self._cm = self._cm, None
            cm.__exit__(None, None, None)

    def __enter__(self) -> RelQueryStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Client:
    """A connection pool to one server. Thread-safe (httpx.Client is)."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        timeout: float = 600.0,
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = (url or os.environ.get("RELSERVE_URL") or DEFAULT_URL).rstrip("/")
        key = api_key if api_key is not None else os.environ.get("RELSERVE_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=10.0),
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ plumbing

    def _request(self, method: str, path: str, json_body: object = None, **kw: object) -> Any:
        if json_body is not None:
            kw["content"] = _dumps(json_body)
            kw["headers"] = {"Content-Type": "application/json"}
        try:
            r = self._http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise ServerError(0, f"cannot reach the relserve server at {self.url}: {e}") from None
        _raise_for(r)
        return r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text

    def _stream(self, path: str, body: dict[str, object]) -> RelQueryStream:
        headers = {"Accept": "application/x-ndjson", "Content-Type": "application/json"}
        cm = self._http.stream("POST", path, content=_dumps(body), headers=headers)
        try:
            response = cm.__enter__()
        except httpx.HTTPError as e:
            raise ServerError(0, f"cannot reach the relserve server at {self.url}: {e}") from None
        if response.status_code >= 400:
            try:
                response.read()
                _raise_for(response)
            finally:
                cm.__exit__(None, None, None)
        try:
            return RelQueryStream(cm, response)
        except BaseException:
            cm.__exit__(None, None, None)
            raise

    # ------------------------------------------------------------------ relQueries

    def submit(self, template: str | None = None, rows: Sequence[Mapping[str, object]] | None = None,
               call: CallFields | None = None, **options: object) -> str:
        """Start a relQuery and return its id at once (see ``run`` for the options)."""
        return self._request("POST", "/v1/relqueries", _body(template, rows, call, options))["id"]

    def plan(self, template: str | None = None, rows: Sequence[Mapping[str, object]] | None = None,
             call: CallFields | None = None, **options: object) -> RelQueryPlan:
        """What the relQuery would send to the engine, without running it: ``rows``, ``engine_rows``
        (distinct prompts), ``cached_rows`` (answered from the result cache), ``failed_rows``, the
        server's ``estimate`` and, for a call with the ``cascade`` option, its ``cascade``."""
        return RelQueryPlan.model_validate(self._request("POST", "/v1/relqueries/plan", _body(template, rows, call, options)))

    def count_tokens(self, template: str | None = None, rows: Sequence[Mapping[str, object]] | None = None,
                     call: CallFields | None = None, **options: object) -> PromptTokenCounts:
        """Each row's prompt tokens as the server's engine would see them, without running:
        ``prompt_tokens`` (None for a row that cannot run) and ``errors`` (why), in row order."""
        got = self._request("POST", "/v1/relqueries/tokens", _body(template, rows, call, options))
        return PromptTokenCounts.model_validate(got)

    def stream(self, template: str | None = None, rows: Sequence[Mapping[str, object]] | None = None,
               call: CallFields | None = None, **options: object) -> RelQueryStream:
        """Submit and iterate the rows as they finish (each carries its input ``index``)."""
        return self._stream("/v1/relqueries", {**_body(template, rows, call, options), "stream": "ndjson"})

    def run(self, template: str | None = None, rows: Sequence[Mapping[str, object]] | None = None,
            call: CallFields | None = None, **options: object) -> RemoteResult:
        """Submit, wait for every row, return them in input order.

        ``rows``: a list of mappings whose keys include the template's placeholders; or
        ``prompts=[...]`` instead of template and rows. Options: ``function`` (map, filter,
        classify, extract), ``labels``, ``json_schema``, ``max_tokens``, ``temperature``,
        ``top_p``, ``seed``, ``system``, ``method``, ``prompt_shape``, ``answer_field``, ``reorder_fields``,
        ``examples``, ``on_error`` ("null"/"raise"), ``cache``, ``priority`` (lower runs
        sooner), ``deadline_s``; or ``call=CallFields(...)`` (``relserve.call_fields``), which
        the keyword options override.
        """
        with self.stream(template, rows, call, **options) as s:
            ordered = in_input_order(s, s.total)
        if s.done is None:  # (the stream raises first: kept as a result of unknown status, as before)
            return RemoteResult(s.id, "unknown", ordered)
        return RemoteResult(s.id, s.done.status, ordered, s.done.stats, s.done.error)

    def map(self, template: str | None = None, rows: Sequence[Mapping[str, object]] | None = None,
            call: CallFields | None = None, **options: object) -> list[Any]:
        """The value of every row, in input order (None where a row failed)."""
        return self.run(template, rows, call, **options).values

    def status(self, relquery_id: str) -> JobDescription:
        """The relQuery's status, progress and figures so far."""
        return JobDescription.model_validate(self._request("GET", f"/v1/relqueries/{relquery_id}"))

    def result(self, relquery_id: str, wait: bool = True, timeout: float = 600.0) -> RemoteResult:
        d = self._request("GET", f"/v1/relqueries/{relquery_id}/result", params={"wait": wait, "timeout": timeout})
        rows = [RowResult.from_dict(r) if r is not None else RowResult(i) for i, r in enumerate(d["rows"])]
        job = JobDescription.model_validate(d)  # the job's description, beside its rows
        return RemoteResult(job.id, job.status, rows, job.stats, job.error)

    def cancel(self, relquery_id: str, timeout: float | None = None) -> JobDescription:
        """Cancel and wait for the relQuery to end; its description afterwards. ``timeout`` bounds
        this request alone (the Postgres functions cancel on the way out of an interrupted statement
        and must not hang)."""
        kw = {} if timeout is None else {"timeout": httpx.Timeout(timeout, connect=min(timeout, 10.0))}
        return JobDescription.model_validate(self._request("DELETE", f"/v1/relqueries/{relquery_id}", **kw))

    def list(self) -> list[JobDescription | UndescribedJob]:
        """The caller's relQueries (running, and finished in the last minutes); one the server could
        not describe is an ``UndescribedJob``."""
        return JobList.model_validate(self._request("GET", "/v1/relqueries")).relqueries

    # ------------------------------------------------------------------ spreadsheet cells

    def cells(self, cells: Sequence[Mapping[str, object]], **options: object) -> dict[str, CellAnswer]:
        """Evaluate cells ({"id", "template", "args"}) as one batch; answers by cell id."""
        d = self._request("POST", "/v1/cells", {**_call_json(None, options), "cells": list(cells), "stream": False})
        return {c.id: c for c in map(CellAnswer.model_validate, d["cells"])}

    def stream_cells(self, cells: Sequence[Mapping[str, object]], **options: object) -> RelQueryStream:
        """Cells as they finish: ``CellAnswer``s (id, value, text, error, cached)."""
        return self._stream("/v1/cells", {**_call_json(None, options), "cells": list(cells), "stream": True})

    # ------------------------------------------------------------------ single calls and operations

    def complete(self, prompt: str | list[str], **options: object) -> dict[str, Any]:
        """OpenAI-style /v1/completions."""
        return self._request("POST", "/v1/completions", {"prompt": prompt, **options})

    def chat(self, messages: list[dict[str, Any]], **options: object) -> dict[str, Any]:
        """OpenAI-style /v1/chat/completions."""
        return self._request("POST", "/v1/chat/completions", {"messages": messages, **options})

    def health(self) -> Health:
        """``/health`` of a server that answers (a 503, stopping or engine dead, raises ``ServerError``)."""
        return Health.model_validate(self._request("GET", "/health"))

    def metrics(self) -> str:
        return self._request("GET", "/metrics")

    def label_plans(self, template: str | None = None) -> list[dict[str, Any]]:
        """The label plans the server keeps for this key's tenant (``/v1/label-plans``): each
        call's function, template, labels, whether pinned, and how its rows are decided."""
        return self._request("GET", "/v1/label-plans", params={"template": template} if template else None)

    def forget_label_plans(self, template: str | None = None, *, pinned: bool = False) -> int:
        """Forget the tenant's label plans (of one template, or all; ``pinned``: pinned ones too):
        the next statement of each call makes a new one. Returns how many were forgotten."""
        if template is not None and not template.strip():
            # an empty template would read as "every plan"
            raise ConfigError("template must be a call's template, or None for every plan, got an empty string")
        params: dict[str, object] = {"pinned": pinned} | ({"template": template} if template else {})
        return int(self._request("DELETE", "/v1/label-plans", params=params)["changed"])

    def pin_label_plans(self, template: str, *, unpin: bool = False) -> int:
        """Pin (or unpin) the tenant's label plans of ``template``: a pinned plan is never
        replaced by ``label_plan := 'refresh'`` nor forgotten. Returns how many changed."""
        return int(self._request("PATCH", "/v1/label-plans", params={"template": template, "pinned": not unpin})["changed"])


def _call_json(call: CallFields | None, options: dict[str, object]) -> dict[str, object]:
    """The call's fields (``CallFields``, the keyword options over ``call``) and any other option
    as given: ``prompts``, and a misspelt name, which the server then names in its 422."""
    given = {k: v for k, v in options.items() if v is not None}
    known = {k: given.pop(k) for k in list(given) if k in CALL_FIELD_NAMES}
    fields = replace(call, **known) if call is not None else CallFields(**known)
    return {**fields.to_json(), **given}


def _body(template: str | None, rows: Sequence[Mapping[str, object]] | None, call: CallFields | None,
          options: dict[str, object]) -> dict[str, object]:
    body = _call_json(call, options)
    if template is not None:
        body["template"] = template
    if rows is not None:
        body["rows"] = [dict(r) for r in rows]
    return body


def _dumps(body: object) -> bytes:
    # database values (Decimal, date, UUID) are sent as their text
    return json.dumps(body, ensure_ascii=False, default=str).encode()


def _raise_for(r: httpx.Response) -> None:
    if r.status_code < 400:
        return
    try:
        message = r.json()["error"]["message"]
    except Exception:
        message = r.text[:500] or r.reason_phrase
    raise ServerError(r.status_code, message)


__all__ = ["CallFields", "Client", "RelQueryStream", "RemoteResult", "ServerError"]
