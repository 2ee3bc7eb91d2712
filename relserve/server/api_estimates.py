"""/v1/relqueries/tokens: each row's prompt tokens as this server's engine sees them, before
anything runs (``llm_count_tokens`` of DuckDB connections to the server and of PostgreSQL)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from relserve.binding import Binding
from relserve.estimate.prompt_tokens import count_row_tokens, prompt_tokenizer
from relserve.replies import PromptTokenCounts
from relserve.server.api_relqueries import request_cost
from relserve.server.schemas import RelQueryRequest
from relserve.server.state import ServerState, current_tenant, get_state
from relserve.server.tenants import Tenant

router = APIRouter(prefix="/v1/relqueries", tags=["relqueries"])


def _count(body: RelQueryRequest, state: ServerState) -> PromptTokenCounts:
    if body.prompts is not None:
        call = body.call("{prompt}")
        values = [(p,) for p in body.prompts]
    else:
        call = body.call(body.template or "")
        values = Binding(call.template).tuples(body.rows or [])
    counts = count_row_tokens(call, values, prompt_tokenizer(state.engine, None))
    return PromptTokenCounts(
        prompt_tokens=[n if isinstance(n, int) else None for n in counts],
        errors=[None if isinstance(n, int) else n for n in counts],
        model=state.engine.model_id,
    )


@router.post("/tokens", summary="Each row's prompt tokens as the engine would see them, without running")
async def count_tokens(body: RelQueryRequest, tenant: Tenant = Depends(current_tenant), state: ServerState = Depends(get_state)):
    # rendering every row is work: it counts against the tenant's limits while it runs
    reservation = state.reserve(await run_in_threadpool(request_cost, body, tenant, state), tenant)
    try:
        return (await run_in_threadpool(_count, body, state)).model_dump()
    finally:
        state.jobs.release(reservation)
