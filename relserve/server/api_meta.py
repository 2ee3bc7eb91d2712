"""/health and /metrics (no key needed: load balancers and Prometheus call them)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from relserve.server.metrics import CONTENT_TYPE
from relserve.server.state import ServerState, get_state

router = APIRouter(tags=["operations"])


@router.get("/health", summary="Liveness and what the server serves")
async def health(state: ServerState = Depends(get_state)):
    engine = state.engine
    # 503 when this server can no longer answer, so a load balancer or supervisor acts on it
    dead = getattr(engine, "dead_reason", None)
    problem = ("stopping", "the server is stopping") if state.stopping else (("engine-dead", dead) if dead else None)
    if problem is not None:
        return JSONResponse({"status": problem[0], "error": problem[1], "model": engine.model_id}, status_code=503)
    return {
        "status": "ok",
        "model": engine.model_id,
        "policy": engine.policy,
        "auth": "open" if state.tenants.open else "api-key",
        "result_cache": state.cache is not None,
        "relqueries_in_flight": len(state.jobs.running()),
        "rows_in_flight": state.jobs.rows_in_flight(),
    }


@router.get("/metrics", summary="Prometheus metrics")
async def metrics(state: ServerState = Depends(get_state)):
    await run_in_threadpool(state.metrics.read_scheduler)  # an RPC to the engine core
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)
