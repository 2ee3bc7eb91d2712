"""/health (no key needed: load balancers call it) and /metrics (with tenants: a metrics key or
an admin tenant's key, since it names every tenant and its activity)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Header
from fastapi.responses import JSONResponse, Response

from relserve.replies import Health, HealthProblem
from relserve.server.metrics import CONTENT_TYPE
from relserve.server.state import ServerState, get_state
from relserve.server.tenants import AuthError

router = APIRouter(tags=["operations"])


@router.get("/health", summary="Liveness and what the server serves")
async def health(state: ServerState = Depends(get_state)):
    engine = state.engine
    # 503 when this server can no longer answer, so a load balancer or supervisor acts on it
    dead = getattr(engine, "dead_reason", None)
    if state.stopping:
        problem = HealthProblem(status="stopping", error="the server is stopping", model=engine.model_id)
    elif dead:
        problem = HealthProblem(status="engine-dead", error=dead, model=engine.model_id)
    else:
        problem = None
    if problem is not None:
        return JSONResponse(problem.model_dump(), status_code=503)
    return Health(
        model=engine.model_id,
        policy=engine.policy,
        auth="open" if state.tenants.open else "api-key",
        result_cache=state.cache is not None,
        relqueries_in_flight=len(state.jobs.running()),
        rows_in_flight=state.jobs.rows_in_flight(),
    ).model_dump()


@router.get("/metrics", summary="Prometheus metrics (with tenants: a metrics key or an admin tenant's key)")
async def metrics(state: ServerState = Depends(get_state), authorization: str | None = Header(None)):
    if not state.tenants.open and not state.tenants.may_read_metrics(authorization):
        raise AuthError(
            "/metrics needs a metrics key (metrics_key_sha256 in the tenants file) or the key of a tenant "
            "with admin = true: 'Authorization: Bearer <key>'"
        )
    await state.metrics.refresh_scheduler()  # at most one engine RPC per half second, off the loop
    return Response(state.metrics.render(), media_type=CONTENT_TYPE, headers={"Cache-Control": "no-store"})
