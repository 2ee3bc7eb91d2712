"""DuckDB sessions whose LLM calls run on a ``relserve serve`` server instead of an engine in this
process.

    con = relserve.duckdb.connect(server="http://127.0.0.1:8000", api_key="...")
    con.sql("SELECT id, llm_map('Summarize: {review}', review) FROM reviews")   # planned, as locally

The statement is planned here exactly as on a local connection (``relserve.duckdb.sql``: one
relQuery per call site over the site's distinct argument tuples); each relQuery goes to the server
as ``template`` + ``rows`` through ``relserve.client.Client`` (``POST /v1/relqueries``, rows
streamed back). The server renders, deduplicates, orders and caches the prompts with the same
planner, and chooses filter/classify labels the same way (calibrated label scoring), so an answer
is the one a local connection would get. The result cache is the server's (``cache=False`` turns
it off for this connection's calls); the engine, its scheduler and its prefix cache are the
server's, shared with its other clients.

The whole call specification travels field by field (``system``, ``method``, ``prompt_shape``,
``reorder_fields``, ``examples``); ``model`` must name the model the server serves.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from relserve.errors import ConfigError, RowError
from relserve.functions import LLMCall
from relserve.planner.execute import CallOutcome
from relserve.progress import progress_bar
from relserve.duckdb_ext.session import Session


@dataclass
class RemoteCall:
    """What one call sent to the server cost (``RemoteSession.calls``; the benchmark reads it)."""

    function: str
    rows: int
    #: rows the server sent to its engine (distinct prompts not in its result cache)
    engine_rows: int
    #: rows answered from the server's result cache
    cached_rows: int
    prompt_tokens: int
    #: prompt tokens the engine's prefix cache served
    cached_tokens: int
    output_tokens: int
    seconds: float
    relquery_id: str


@dataclass(frozen=True)
class RemoteExplain:
    """EXPLAIN of a call on a server connection: what the server would send to its engine."""

    function: str
    template: str
    server: str
    rows: int
    engine_rows: int
    cached_rows: int
    failed_rows: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __str__(self) -> str:
        return (
            f"{self.function} on the server {self.server}: {self.rows} row(s), {self.engine_rows} distinct "
            f"prompt(s) to run, {self.cached_rows} from the server's result cache, {self.failed_rows} that cannot run"
        )


@dataclass
class RemoteSession(Session):
    """A ``Session`` whose calls run on a relserve server (see the module docstring)."""

    client: Any = None
    #: use the server's result cache for this connection's calls
    server_cache: bool = True
    calls: list[RemoteCall] = field(default_factory=list)
    _model_id: str | None = None

    # ------------------------------------------------------------------ Session interface

    def run(self, call: LLMCall, values: list[tuple], *, explain_only: bool = False) -> CallOutcome:
        self._check(call)
        if not values:
            return CallOutcome([], [], None)  # type: ignore[arg-type]
        body = self._body(call, values)
        if explain_only:
            got = self.client.plan(**body)
            ex = RemoteExplain(call.function.name, call.template.source, self.client.url, got["rows"],
                               got["engine_rows"], got["cached_rows"], got["failed_rows"])
            return CallOutcome([None] * len(values), [None] * len(values), None, explain=ex)  # type: ignore[arg-type]
        t0 = time.perf_counter()
        got: dict[int, Any] = {}
        with self.client.stream(**body) as stream, progress_bar(len(values), call.function.name, show=self.progress) as bar:
            for row in stream:
                got[row.index] = row
                bar.update(1)
            done = stream.done or {}
            rid = stream.id
            engine_rows = stream.header.get("engine_rows", 0)
            cached_rows = stream.header.get("cached_rows", 0)
        rows = [got.get(i) for i in range(len(values))]
        out = [r.value if r is not None and r.error is None else None for r in rows]
        errors = [("no answer" if r is None else r.error) for r in rows]
        stats = done.get("stats", {})
        record = RemoteCall(
            call.function.name, len(values), engine_rows, cached_rows,
            sum(r.prompt_tokens or 0 for r in rows if r is not None),
            sum(r.cached_tokens or 0 for r in rows if r is not None),
            sum(r.output_tokens or 0 for r in rows if r is not None),
            time.perf_counter() - t0, rid,
        )
        with self.lock:
            self.calls.append(record)
        if call.options.on_error == "raise":
            for i, err in enumerate(errors):
                if err is not None:
                    raise RowError(f"row {i}: {err}")
        return CallOutcome(out, errors, None, engine_stats=stats, ran=engine_rows)  # type: ignore[arg-type]

    def cached(self, call: LLMCall, values: list[tuple]) -> dict[int, tuple[Any, str | None]]:
        # the result cache is the server's: rows it knows come back at once from the relQuery
        return {}

    # ------------------------------------------------------------------ helpers

    @property
    def model_id(self) -> str:
        if self._model_id is None:
            self._model_id = self.client.health()["model"]
        return self._model_id

    def _check(self, call: LLMCall) -> None:
        o = call.options
        where = f"{call.function.name} on a connection to the server {self.client.url}"
        if o.model is not None:
            from relserve.planner.engine_ref import _model_id_of

            wanted = _model_id_of(o.model) or o.model
            if wanted != self.model_id:
                raise ConfigError(f"{where}: model {o.model!r} was asked for, but the server serves {self.model_id!r}")

    def _body(self, call: LLMCall, values: list[tuple]) -> dict[str, Any]:
        names = call.template.columns
        body: dict[str, Any] = {
            "template": call.template.source,
            "rows": [{n: _jsonable(v) for n, v in zip(names, vals)} for vals in values],
            "function": call.function.kind,
            "max_tokens": call.max_tokens,
            "temperature": call.options.temperature,
            "on_error": "null",
            "cache": self.server_cache,
        }
        # the rest of the call specification, field by field (the server's CallFields)
        o = call.options
        for name in ("system", "method", "prompt_shape", "reorder_fields", "examples"):
            value = getattr(o, name, None)
            if value:
                # examples are kept frozen as tuples of (column, value) pairs
                body[name] = _jsonable([dict(ex) for ex in value] if name == "examples" else value)
        if call.function.kind == "classify":
            body["labels"] = list(call.labels or ())
        if call.function.kind == "extract":
            body["json_schema"] = call.json_schema
        return body


def _jsonable(value: Any) -> Any:
    """A value the server renders as a local connection would: JSON has no NaN or Infinity, so
    those travel as the text Python renders them with."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def remote_session(
    defaults: Any,
    server: str,
    *,
    api_key: str | None = None,
    cache: Any = None,
    optimize: bool = True,
    progress: bool = True,
    timeout: float = 3600.0,
) -> RemoteSession:
    """The session ``install(con, server=...)`` attaches: ``cache`` None/True uses the server's
    result cache, False turns it off for this connection."""
    from relserve.client import Client

    if cache is not None and not isinstance(cache, bool):
        raise ConfigError(
            "cache: on a connection to a server the result cache is the server's; give cache=True or cache=False"
        )
    if not isinstance(server, str) or not server.startswith(("http://", "https://")):
        raise ConfigError(f"server must be the server's address, e.g. 'http://127.0.0.1:8000', got {server!r}")
    client = Client(server, api_key=api_key, timeout=timeout)
    return RemoteSession(defaults, None, None, optimize, progress, client=client, server_cache=cache is not False)


__all__ = ["RemoteCall", "RemoteExplain", "RemoteSession", "remote_session"]
