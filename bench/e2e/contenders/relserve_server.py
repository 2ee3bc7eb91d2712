"""Contenders 3-4: relserve through its public surfaces only. ``relserve serve`` (scheduler
``relserve``) in a process of its own; each session is ``relserve.duckdb.connect(server=URL,
api_key=KEY, cache=...)`` and runs its statements with the connection's planned ``sql``; the
warm-up goes through ``relserve.client.Client``.

3. ``relserve``: result cache off;
4. ``relserve-cache``: a new server with the result cache on, the highest load's statements twice
   (the first pass fills the cache and is reported too).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from e2e.contenders.context import PhaseContext
from e2e.limits import ENGINE
from e2e.passes import measured_pass
from e2e.processes import free_port, stop, wait_http
from e2e.prometheus import prom_tokens
from e2e.sessions import StatementAnswer
from e2e.workload import Scheduled, tables_sql


@contextlib.contextmanager
def relserve_server(ctx: PhaseContext, tenants: Path, name: str) -> Iterator[tuple[str, float]]:
    """A ``relserve serve`` of its own (a fresh engine: an empty prefix cache), warmed up; yields
    its URL and how long it took to answer."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    relserve_bin = str(Path(sys.executable).parent / "relserve")
    cmd = [relserve_bin, "serve", "--port", str(port), "--tenants", str(tenants), "--policy", "relserve", "--log-level", "warning"]
    ctx.log(f"relserve: starting relserve serve (port {port}) for {name}")
    t_start = time.perf_counter()
    with open(ctx.workdir / f"relserve_serve_{name}.log", "w") as out:
        # the dtype named, not left to the server's own "auto": the one every contender runs
        proc = subprocess.Popen(cmd, env=dict(os.environ, RELSERVE_DTYPE=ENGINE.dtype), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_http(url + "/health", proc)
        yield url, time.perf_counter() - t_start
    finally:
        stop(proc)


def run(ctx: PhaseContext) -> dict[str, Any]:
    import relserve.duckdb
    from relserve.client import Client

    # the per-call cost a server connection records (rows sent, from the result cache, to the
    # engine): the one internal read here, for the report's row counts
    from relserve.duckdb_ext.connections import session_of

    key = "bench-e2e-" + os.urandom(8).hex()
    # a tenant of its own: a result-cache scope no earlier run has filled
    tenants = ctx.workdir / "tenants.toml"
    tenants.write_text(f'[tenants.bench-{int(time.time())}]\nkey = "{key}"\nadmin = true\n')  # admin: reads /metrics

    def run_pass(url: str, work: list[Scheduled], cache: bool) -> dict[str, Any]:
        def connect(s: int) -> relserve.duckdb.Connection:
            con = relserve.duckdb.connect(config={"threads": 1}, server=url, api_key=key, cache=cache, progress=False)
            con.execute(tables_sql(ctx.datasets, ctx.sql_dir))
            return con

        served: dict[str, tuple[int, int]] = {}
        #: each statement's trace (relserve/duckdb_ext/trace.py): where its time went
        traces: dict[str, dict[str, Any]] = {}

        def execute(con: relserve.duckdb.Connection, w: Scheduled) -> StatementAnswer:
            session = session_of(con.con)
            n = len(session.calls)
            session.last_run = None
            rel = con.sql(w.sql)
            rows = rel.fetchall() if rel is not None else []
            calls = session.calls[n:]
            served[w.key] = (sum(c.cached_rows for c in calls), sum(c.engine_rows for c in calls))
            if session.last_run is not None:
                traces[w.key] = session.last_run.trace.to_dict()
            return list(rel.columns) if rel is not None else [], rows, sum(c.rows for c in calls)

        tokens = prom_tokens(url, "relserve_tokens_total:prompt", "relserve_tokens_total:prefix_cached", key)
        out = measured_pass(work, connect, execute, tokens)
        out["result_cache_rows"] = sum(c for c, _ in served.values())
        out["engine_rows"] = sum(e for _, e in served.values())
        out["traces"] = traces
        return out

    def warm_up(url: str) -> None:
        with Client(url, api_key=key) as c:  # as for the other contenders
            c.run(prompts=["Say hi."], max_tokens=2, cache=False)

    result: dict[str, Any] = {"loads": {}, "cache_loads": {}, "dtype": ENGINE.dtype}
    with relserve_server(ctx, tenants, "cache-off") as (url, started):
        warm_up(url)
        result["engine_start_s"] = started
        for load, work in ctx.work_by_load.items():
            result["loads"][str(load)] = run_pass(url, work, cache=False)
            ctx.log(f"relserve: load {load} (cache off) done in {result['loads'][str(load)]['wall_s']:.0f} s")
    if "relserve-cache" in ctx.contenders:
        # a new server, so that the first pass starts from an empty prefix cache as the cache-off
        # pass of the same rows did, not from the KV blocks that pass left behind
        top = max(ctx.work_by_load)
        with relserve_server(ctx, tenants, "cache-on") as (url, _):
            warm_up(url)
            first = run_pass(url, ctx.work_by_load[top], cache=True)
            ctx.log(f"relserve: load {top} cache on, 1st pass done in {first['wall_s']:.0f} s")
            second = run_pass(url, ctx.work_by_load[top], cache=True)
            ctx.log(f"relserve: load {top} cache on, 2nd pass done in {second['wall_s']:.0f} s")
        result["cache_loads"] = {"first": first, "second": second, "load": top}
    return result
