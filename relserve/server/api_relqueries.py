"""/v1/relqueries: submit a relQuery, stream its rows, read its progress, cancel it."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from relserve.cascade.policy import plan as cascade_plan
from relserve.functions import SchedulingHints
from relserve.planner.planned_rows import PlannedRows
from relserve.replies import CascadeOutlook, JobDescription, JobList, RelQueryPlan, StreamStart, UndescribedJob
from relserve.server.batches import plan_relquery
from relserve.server.budget import Cost, call_max_tokens, check_template, prompts_cost, rows_cost
from relserve.server.estimates import job_allowance, plan_estimate
from relserve.server.jobs import Job, engine_costs, json_safe
from relserve.server.schemas import RelQueryRequest
from relserve.server.state import ServerState, current_tenant, get_state
from relserve.server.streaming import NDJSON, SSE, job_stream
from relserve.server.tenants import Tenant
from relserve.server.waiting import wait_or_cancel

router = APIRouter(prefix="/v1/relqueries", tags=["relqueries"])

StreamFormat = Literal["ndjson", "sse"]


def _wanted_format(request: Request, asked: str | None) -> str | None:
    if asked:
        return asked
    accept = request.headers.get("accept", "")
    if SSE in accept:
        return "sse"
    if NDJSON in accept:
        return "ndjson"
    return None


def _row(r) -> dict:
    return r.as_dict()


def _done(job: Job) -> dict:
    return job.describe()


async def start_job(
    state: ServerState, tenant: Tenant, cost: Cost, plan: Callable[..., PlannedRows], kind: str,
    hints: SchedulingHints, estimate: bool = False,
) -> tuple[Job, PlannedRows]:
    """Every request that runs rows (relQuery, cells, OpenAI calls): ``plan(model_id, cache,
    namespace, memory)`` off the event loop while ``cost`` is reserved for the tenant (planning renders
    every row, so it counts as work in flight), then its job launched in the reservation's place."""
    reservation = state.reserve(cost, tenant)
    try:
        batch = await run_in_threadpool(plan, state.engine.model_id, state.cache_for(tenant), namespace=state.namespace(tenant),
                                        memory=state.label_memory(tenant))
        # issue 47: the request's budget and its tenant's day, checked against its estimate
        budget, est = (await run_in_threadpool(job_allowance, state, tenant, batch, estimate)) if batch.prompts else (None, None)
        # (a label call's requests are counted on the engine's label trie, which may take a while to build)
        costs = await run_in_threadpool(engine_costs, batch, state.engine)
        job = Job(batch, tenant.name, kind, hints, state.tenancy(tenant), budget=budget, estimate=est, costs=costs)
        state.launch(job, tenant, reservation)
        return job, batch
    finally:
        state.jobs.release(reservation)


def request_cost(body: RelQueryRequest, tenant: Tenant, state: ServerState) -> Cost:
    """The request's size from lengths, before anything is rendered (413 over a size limit,
    403 for a priority the tenant may not use)."""
    state.check_size(body.size, tenant)
    state.check_priority(body.priority, tenant)
    if body.prompts is not None:
        check_template("{prompt}", body.system, tenant)
        call = body.call("{prompt}")
        return prompts_cost(body.prompts, call, call_max_tokens(call), state.engine)
    parsed = check_template(body.template or "", body.system, tenant)
    call = body.call(body.template or "")
    return rows_cost(parsed, call, body.rows or [], call_max_tokens(call), state.engine)


@router.post("", status_code=201, summary="Submit a relQuery (optionally streaming its rows back)")
async def submit(
    body: RelQueryRequest,
    request: Request,
    stream: StreamFormat | None = Query(None, description="stream rows back in this response (or use the body's `stream`)"),
    tenant: Tenant = Depends(current_tenant),
    state: ServerState = Depends(get_state),
):
    body = state.with_defaults(body)
    tenant = tenant.isolated_view() if body.isolated else tenant
    # sizes are summed off the event loop (linear in the body); the booking is on it
    cost = await run_in_threadpool(request_cost, body, tenant, state)
    job, batch = await start_job(state, tenant, cost, partial(plan_relquery, body), "relquery", body.hints(), body.estimate)
    fmt = _wanted_format(request, body.stream or stream)
    location = {"Location": f"/v1/relqueries/{job.id}"}
    if fmt is None:
        return JSONResponse(job.describe(), status_code=201, headers=location)
    header = StreamStart(id=job.id, rows=job.total, cached_rows=batch.cached_rows, engine_rows=job.engine_total)
    return job_stream(job, fmt, header=header, row=_row, done=_done, cancel_on_disconnect=True, status_code=201, headers=location)


@router.post("/plan", summary="What a relQuery would send to the engine, without running it")
async def plan(body: RelQueryRequest, tenant: Tenant = Depends(current_tenant), state: ServerState = Depends(get_state)):
    # EXPLAIN of the PostgreSQL foreign tables: rows, distinct prompts and cached answers, no engine.
    # Planning renders every row: it counts against the tenant's limits while it runs, as a job does
    body = state.with_defaults(body)
    tenant = tenant.isolated_view() if body.isolated else tenant
    # sizes are summed off the event loop (linear in the body); the booking is on it
    reservation = state.reserve(await run_in_threadpool(request_cost, body, tenant, state), tenant)
    try:
        batch = await run_in_threadpool(plan_relquery, body, state.engine.model_id, state.cache_for(tenant),
                                        state.namespace(tenant), state.label_memory(tenant))
        # issue 47: the engine's tokens and the seconds alone and behind the server's work now
        estimate = await run_in_threadpool(plan_estimate, state, tenant, batch)
    finally:
        state.jobs.release(reservation)
    cascade = cascade_plan(batch.call, len(batch.prompts))
    # whether a model cascade will answer some rows instead of the LLM (relserve/cascade/)
    outlook = (CascadeOutlook(target=cascade.target, recall=cascade.recall, precision=cascade.precision,
                              applies=cascade.applies, plan=cascade.describe())
               if cascade.on else None)
    return RelQueryPlan(
        rows=batch.total,
        engine_rows=len(batch.prompts),
        cached_rows=batch.cached_rows,
        failed_rows=sum(r.error is not None for r in batch.ready),
        estimate=estimate,
        cascade=outlook,
    ).to_json()


@router.get("", summary="The caller's relQueries (running, and finished in the last minutes)")
async def list_relqueries(tenant: Tenant = Depends(current_tenant), state: ServerState = Depends(get_state)):
    return json_safe(JobList(relqueries=[_listed(j) for j in state.jobs.list(tenant.name)]).to_json())


def _listed(job: Job) -> JobDescription | UndescribedJob:
    # one job that cannot be described must not hide the tenant's others
    try:
        return job.description()
    except Exception as e:
        return UndescribedJob(id=job.id, kind=job.kind, status=job.status, error=f"cannot describe this relQuery: {e}")


@router.get("/{job_id}", summary="Status and progress of a relQuery")
async def status(job_id: str, tenant: Tenant = Depends(current_tenant), state: ServerState = Depends(get_state)):
    return state.job_of(job_id, tenant).describe()


@router.get("/{job_id}/result", summary="Every row of a relQuery, in input order")
async def result(
    job_id: str,
    request: Request,
    wait: bool = Query(True, description="wait for the relQuery to finish"),
    timeout: float = Query(600.0, gt=0, allow_inf_nan=False, description="seconds to wait at most"),
    tenant: Tenant = Depends(current_tenant),
    state: ServerState = Depends(get_state),
):
    job = state.job_of(job_id, tenant)
    if wait:
        await wait_or_cancel(job, request, timeout, cancel=False)
    out = job.describe()
    out["rows"] = [r.as_dict() if r is not None else None for r in job.rows]
    return out


@router.get("/{job_id}/stream", summary="Stream a relQuery's rows as they finish (those already finished first)")
async def watch(
    job_id: str,
    request: Request,
    format: StreamFormat = Query("ndjson"),
    start: int = Query(0, ge=0, alias="from", description="skip this many already-streamed rows"),
    cancel_on_disconnect: bool = Query(False, description="cancel the relQuery if this stream is dropped"),
    tenant: Tenant = Depends(current_tenant),
    state: ServerState = Depends(get_state),
):
    job = state.job_of(job_id, tenant)
    header = StreamStart(id=job.id, rows=job.total, engine_rows=job.engine_total)
    return job_stream(job, format, header=header, row=_row, done=_done, start=start, cancel_on_disconnect=cancel_on_disconnect)


@router.delete("/{job_id}", summary="Cancel a relQuery: its unfinished rows are aborted")
async def cancel(job_id: str, request: Request, tenant: Tenant = Depends(current_tenant), state: ServerState = Depends(get_state)):
    job = state.job_of(job_id, tenant)
    job.cancel("cancelled by the client")
    await wait_or_cancel(job, request, timeout=30.0, cancel=False)
    return job.describe()
