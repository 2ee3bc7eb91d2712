"""/v1/operators: ``llm_reduce`` and ``llm_topk`` over HTTP, one request per operator call.

The server runs the operator (``relserve.operators``) on its engine: every level of a reduction
is one relQuery for all the request's groups, a top-k's two rounds one relQuery each. The answer
comes back in the response. While it runs, the request's size counts against the tenant as a
relQuery's does (``ServerState.reserve``: 413 for a request over a per-request limit, 429 while
the tenant's rows or tokens in flight would pass its limits), and the tenant's result cache view
applies. Its rows spend from the tenant's day (``max_tokens_per_day``) and from the request's own
budget (``max_tokens_total``, ``max_seconds``, ``on_budget``), held over all its relQueries
(relserve/operators/spending.py). A client that disconnects cancels the reduction before its
next level.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from relserve.backend.protocol import Backend
from relserve.budget import Allowance
from relserve.errors import ConfigError
from relserve.operators.reduce import reduce_call, run_reduce
from relserve.operators.topk import run_topk, topk_call
from relserve.server.budget import Cost, check_template, rows_size
from relserve.server.schemas_operators import ReduceRequest, TopKRequest
from relserve.server.state import ServerState, current_tenant, get_state
from relserve.server.tenants import Tenant

router = APIRouter(prefix="/v1/operators", tags=["operators"])

_DISCONNECT_POLL_S = 0.25


def _reduce_cost(body: ReduceRequest, tenant: Tenant, state: ServerState) -> Cost:
    """The first level's size: every value once, plus the template once per group (later levels
    fold the answers of this one, so they are smaller). Checked before anything runs."""
    state.check_size(body.size, tenant, "values")
    parsed = check_template(body.template, body.system, tenant)
    chars = sum(len(v) if isinstance(v, str) else len(str(v)) for g in body.groups if g for v in g if v is not None)
    groups = sum(1 for g in body.groups if g)
    chars += groups * (sum(map(len, parsed.literals)) + len(body.system or ""))
    return Cost.of(groups, chars, body.max_tokens or 64)


def _topk_cost(body: TopKRequest, tenant: Tenant, state: ServerState) -> Cost:
    """Round 1's prompts (one per value) plus round 2's (pool x (pool - 1) comparisons of two values)."""
    state.check_size(len(body.values), tenant, "values")
    parsed = check_template(body.template, body.system, tenant)
    rows = [{n: v for n in parsed.fields} for v in body.values]
    first = rows_size(parsed, None, rows, 2)
    pool = min(len(body.values), body.pool or 2 * body.k)
    longest = max((len(v) if isinstance(v, str) else len(str(v)) for v in body.values if v is not None), default=0)
    return first + Cost.of(pool * (pool - 1), pool * (pool - 1) * (2 * longest + 64), 2)


async def _run(request: Request, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run ``fn`` in a worker thread; a client that disconnects sets its ``cancel`` event."""
    cancel = threading.Event()
    task = asyncio.ensure_future(run_in_threadpool(fn, *args, cancel=cancel, **kwargs))
    while not task.done():
        await asyncio.wait({task}, timeout=_DISCONNECT_POLL_S)
        if not task.done() and await request.is_disconnected():
            cancel.set()
    return task.result()


async def _run_for_tenant(
    request: Request, state: ServerState, tenant: Tenant, cost: Cost, on_budget: str | None, fn: Any, *args: Any,
    **kwargs: Any,
) -> Any:
    """``fn`` as the tenant's work: ``cost`` reserved against its limits while it runs, its prompts
    in the tenant's prefix-cache namespace and with its share, and every row spending from the
    tenant's day (``max_tokens_per_day``), as every other request's do: refused (429) when the
    request's size does not fit what is left and it refuses (``on_budget``)."""
    reservation = state.reserve(cost, tenant)
    try:
        day = state.day_budgets.check(tenant, cost.tokens, on_budget or "refuse")
        return await _run(request, fn, *args, engine=state.engine_for(tenant), budget=day, budget_name="request", **kwargs)
    finally:
        state.jobs.release(reservation)


@router.post("/reduce", summary="llm_reduce: one answer per group (a tree when a group does not fit a prompt)")
async def reduce(
    body: ReduceRequest, request: Request, tenant: Tenant = Depends(current_tenant), state: ServerState = Depends(get_state)
):
    if body.keys is not None and len(body.keys) != len(body.groups):
        raise ConfigError(f"llm_reduce: keys has {len(body.keys)} entries but there are {len(body.groups)} groups")
    rc = reduce_call(body.template, context_tokens=body.context_tokens, json_schema=body.json_schema,
                     temperature=body.temperature, **{k: v for k, v in body.options().items() if v is not None})
    cache = state.cache_for(tenant)
    cost = await run_in_threadpool(_reduce_cost, body, tenant, state)
    out = await _run_for_tenant(request, state, tenant, cost, body.on_budget, run_reduce, rc, body.groups, keys=body.keys,
                                cache=cache if cache is not None else False)
    return {
        "values": out.values,
        "errors": out.errors,
        "keys": body.keys,
        "relqueries": out.relqueries,
        "levels": [vars(lv) for lv in out.levels],
    }


def _topk(tc: Any, values: list, *, engine: Backend, cancel: threading.Event, budget: Allowance | None,
          budget_name: str) -> Any:
    # two rounds, each one relQuery: nothing to stop between them worth the check
    return run_topk(tc, values, engine=engine, budget=budget, budget_name=budget_name)


@router.post("/topk", summary="llm_topk: the k values that best answer a yes/no question, best first")
async def topk(
    body: TopKRequest, request: Request, tenant: Tenant = Depends(current_tenant), state: ServerState = Depends(get_state)
):
    tc = topk_call(body.template, body.k, pool=body.pool, **{k: v for k, v in body.options().items() if v is not None})
    cost = await run_in_threadpool(_topk_cost, body, tenant, state)
    out = await _run_for_tenant(request, state, tenant, cost, body.on_budget, _topk, tc, body.values)
    return {
        "values": out.values,
        "indices": out.indices,
        "scores": out.scores,
        "errors": out.errors,
        "rounds": [vars(r) for r in out.rounds],
    }
