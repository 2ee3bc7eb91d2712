"""Contenders 3-4: relserve through its public surfaces only. ``relserve serve`` (scheduler
``relserve``) in a process of its own; each session is ``relserve.duckdb.connect(server=URL,
api_key=KEY, cache=...)`` and runs its statements with the connection's planned ``sql``; the
warm-up goes through ``relserve.client.Client``.

3. ``relserve``: result cache off;
4. ``relserve-cache``: a new server with the result cache on, the highest load's statements twice
   (the first pass fills the cache and is reported too).

Every load starts with its calls' label plans in the same state (``--plans``), so that the order
in which the loads run does not decide which of them pays the plans' first passes:

- ``warm`` (the default): before the measured passes each statement with a label call (a filter
  in WHERE, a classify) runs once over 64 rows no measured statement reads, as a user's earlier
  statement of the same call would have; a label plan is made once per call and kept
  (relserve/labels/resolution.py), so no measured statement makes one;
- ``cold``: each load runs as a tenant of its own, whose plans start empty (plans are kept per
  tenant): each call's first statements at every load make its plan.
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
from e2e.workload import Scheduled, plan_statements, table_rows, tables_sql


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

    # tenants of their own: a result-cache scope and label plans no earlier run has made; under
    # --plans cold one per load (a tenant's plans are its own), else one for the whole run
    names = [str(load) for load in ctx.work_by_load] if ctx.plans == "cold" else ["run"]
    keys = {name: "bench-e2e-" + os.urandom(8).hex() for name in names}
    stamp = int(time.time())
    tenants = ctx.workdir / "tenants.toml"
    tenants.write_text("".join(f'[tenants.bench-{stamp}-{i}]\nkey = "{keys[n]}"\nadmin = true\n'  # admin: reads /metrics
                               for i, n in enumerate(names)))

    def key_of(load: float) -> str:
        return keys.get(str(load), keys[names[0]])

    def session(url: str, key: str, cache: bool) -> relserve.duckdb.Connection:
        """A connection as a user's session makes it: the workload's tables, the server's tenant."""
        con = relserve.duckdb.connect(config={"threads": 1}, server=url, api_key=key, cache=cache, progress=False)
        con.execute(tables_sql(ctx.datasets, ctx.sql_dir))
        return con

    def run_pass(url: str, work: list[Scheduled], cache: bool, key: str) -> dict[str, Any]:
        def connect(s: int) -> relserve.duckdb.Connection:
            return session(url, key, cache)

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
        with Client(url, api_key=keys[names[0]]) as c:  # as for the other contenders
            c.run(prompts=["Say hi."], max_tokens=2, cache=False)

    def make_plans(url: str) -> dict[str, Any]:
        """--plans warm: each statement once, on rows no measured statement reads (not measured)."""
        t0 = time.perf_counter()
        work = plan_statements(ctx.statements, ctx.work_by_load, table_rows(ctx.sql_dir))
        con = session(url, keys[names[0]], cache=False)
        for w in work:
            rel = con.sql(w.sql)
            if rel is not None:
                rel.fetchall()
        took = time.perf_counter() - t0
        ctx.log(f"relserve: label plans made by {len(work)} statements of {work[0].item.rows} rows in {took:.0f} s (not measured)")
        return {"statements": len(work), "rows": sum(w.item.rows for w in work), "seconds": took}

    result: dict[str, Any] = {"loads": {}, "cache_loads": {}, "dtype": ENGINE.dtype, "plans": ctx.plans}
    with relserve_server(ctx, tenants, "cache-off") as (url, started):
        warm_up(url)
        result["engine_start_s"] = started
        if ctx.plans == "warm":
            result["plans_made"] = make_plans(url)
        for load, work in ctx.work_by_load.items():
            result["loads"][str(load)] = run_pass(url, work, cache=False, key=key_of(load))
            ctx.log(f"relserve: load {load} (cache off) done in {result['loads'][str(load)]['wall_s']:.0f} s")
    if "relserve-cache" in ctx.contenders:
        # a new server, so that the first pass starts from an empty prefix cache as the cache-off
        # pass of the same rows did, not from the KV blocks that pass left behind
        top = max(ctx.work_by_load)
        with relserve_server(ctx, tenants, "cache-on") as (url, _):
            warm_up(url)
            first = run_pass(url, ctx.work_by_load[top], cache=True, key=key_of(top))
            ctx.log(f"relserve: load {top} cache on, 1st pass done in {first['wall_s']:.0f} s")
            second = run_pass(url, ctx.work_by_load[top], cache=True, key=key_of(top))
            ctx.log(f"relserve: load {top} cache on, 2nd pass done in {second['wall_s']:.0f} s")
        result["cache_loads"] = {"first": first, "second": second, "load": top}
    return result
