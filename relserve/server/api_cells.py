"""/v1/cells: the formula cells of one spreadsheet recalculation, answered per cell.

The cells of a request become ONE relQuery per template (each with its own label plan, as if its
cells were recalculated alone; the templates' relQueries run one after the other); a prompt
repeated in the batch runs once, and a prompt answered before comes from the result cache (the
planner's persistent ``ResultCache``, shared with DuckDB and polars calls). Cache hits are sent
first, then the other cells as their rows finish.
"""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from relserve.backend.protocol import Backend
from relserve.errors import RowError, TemplateError
from relserve.functions import LLMCall
from relserve.replies import CellAnswer, StreamStart
from relserve.results import RowResult
from relserve.server.api_relqueries import start_job
from relserve.server.batches import plan_cells
from relserve.server.budget import ZERO, Cost, call_max_tokens, check_template, label_cost, values_cost
from relserve.server.schemas import CellsRequest
from relserve.server.state import ServerState, current_tenant, get_state
from relserve.server.streaming import job_stream
from relserve.server.tenants import Tenant
from relserve.server.waiting import wait_or_cancel
from relserve.template import Template

router = APIRouter(prefix="/v1", tags=["spreadsheet"])


def _cost(body: CellsRequest, tenant: Tenant, engine: Backend) -> Cost:
    """The cells' size from lengths (a cell whose formula is wrong costs nothing: it fails alone),
    and what each template's label path sends on ``engine``."""
    max_tokens = call_max_tokens(body.call("{value}"))
    parsed: dict[str, tuple[Template, LLMCall] | None] = {}
    sizes: dict[str, tuple[LLMCall, Cost]] = {}
    for cell in body.cells:
        if cell.template not in parsed:
            try:
                # (a template over the tenant's size limits is the request's 413, not the cell's)
                t = check_template(cell.template, body.system, tenant, f"cell {cell.id}: template")
                parsed[cell.template] = (t, body.call(cell.template))
            except (TemplateError, RowError):
                parsed[cell.template] = None
        entry = parsed[cell.template]
        if entry is not None:
            t, call = entry
            size = values_cost(t, call, cell.values if cell.values is not None else cell.args, max_tokens)
            sizes[cell.template] = (call, sizes.get(cell.template, (call, ZERO))[1] + size)
    # each template's cells are one relQuery, which runs one label path (batches.plan_cells), not
    # one first pass per cell
    return sum((label_cost(size, call, max_tokens, engine) for call, size in sizes.values()), ZERO)


@router.post("/cells", summary="Evaluate the LLM cells of one recalculation (one relQuery per template)")
async def cells(
    body: CellsRequest,
    request: Request,
    tenant: Tenant = Depends(current_tenant),
    state: ServerState = Depends(get_state),
):
    body = state.with_defaults(body)
    state.check_size(len(body.cells), tenant, "cells")
    state.check_priority(body.priority, tenant)
    cost = await run_in_threadpool(_cost, body, tenant, state.engine)
    job, batch = await start_job(state, tenant, cost, partial(plan_cells, body), "cells", body.hints())
    ids = [c.id for c in body.cells]

    def cell(r: RowResult) -> dict[str, object]:
        return CellAnswer(id=ids[r.index], value=r.value, text=r.text, error=r.error, cached=r.cached).model_dump()

    if body.stream:
        header = StreamStart(event="batch", id=job.id, cells=job.total, cached=batch.cached_rows, engine_rows=job.engine_total)
        return job_stream(job, "ndjson", header=header, row=cell, done=lambda j: j.describe(), row_event="cell")
    await wait_or_cancel(job, request)
    out = job.describe()
    out["cells"] = [cell(r) for r in job.rows if r is not None]
    return out
