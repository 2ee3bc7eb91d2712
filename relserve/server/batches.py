"""From a request to ``PlannedRows``: the answers known before the engine runs (result-cache hits,
rows that cannot run) and the distinct prompts left for ONE engine relQuery per call (spreadsheet
cells of several templates: one per template, ``PlannedRows.by_call``).

The planner does the work (``plan_rows``: deduplication, result-cache lookup, prefix-sharing
order), so a prompt sent here gets the same text, cache key and answer as the same call made
from DuckDB or polars.
"""

from __future__ import annotations

from collections.abc import Sequence

from relserve.binding import Binding
from relserve.errors import RowError, TemplateError
from relserve.functions import LLMCall
from relserve.labels.memory import LabelMemory
from relserve.planner.cache import CacheView, ResultCache
from relserve.planner.plan import plan_rows
from relserve.planner.planned_rows import PlannedRows
from relserve.server.schemas import CallBody, CellsRequest, RelQueryRequest

Cache = ResultCache | CacheView


class _Builder:
    """Plans each part of a request and gathers them into one ``PlannedRows``."""

    def __init__(self, call: LLMCall, total: int, model_id: str, cache: Cache | None, wanted: bool = True,
                 namespace: str | None = None, memory: LabelMemory | None = None) -> None:
        # sampled answers must not be replayed; the system message is in the call's cache key
        self.cache = cache if wanted and call.deterministic else None
        self.model_id = model_id
        #: the tenant's prefix-cache namespace (plan_rows: its memory may decide the prompt shape)
        self.namespace = namespace
        #: the tenant's label memory (None: a request sent isolated keeps no plan)
        self.memory = memory
        self.batch = PlannedRows(call, total, self.cache)
        self._added = False

    def add(self, call: LLMCall, rows: Sequence[tuple], out_rows: Sequence[int], names: Sequence[str] | None = None) -> None:
        """Plan ``call`` over row tuples; ``out_rows[i]`` is row i's index in the request, ``names[i]``
        what its errors call it (``PlannedRows.add``)."""
        plan = plan_rows(call, rows, model_id=self.model_id, cache=self.cache, optimize=True, namespace=self.namespace,
                         memory=self.memory)
        if not self._added:  # the request's settings (every part shares them) are read from the first
            # the planned call: the prompt shape its rows were rendered in
            self.batch.call, self._added = plan.call, True
        self.batch.add(plan, out_rows, names)


def plan_relquery(req: RelQueryRequest, model_id: str, cache: Cache | None, namespace: str | None = None,
                  memory: LabelMemory | None = None) -> PlannedRows:
    """``template`` + ``rows`` (placeholders name columns), or already-rendered ``prompts``
    (``memory``: the tenant's label memory; None keeps no plan)."""
    if req.prompts is not None:
        return plan_prompts(req, req.prompts, model_id, cache, wanted=req.cache, namespace=namespace, memory=memory)
    call = req.call(req.template or "")
    rows = req.rows or []
    values = Binding(call.template).tuples(rows)
    b = _Builder(call, len(rows), model_id, cache, req.cache, namespace, memory)
    if rows:
        b.add(call, values, range(len(rows)))
    return b.batch


def plan_prompts(req: CallBody, prompts: Sequence[str | None], model_id: str, cache: Cache | None, wanted: bool = True,
                 namespace: str | None = None, memory: LabelMemory | None = None) -> PlannedRows:
    """Plain prompts (``prompts`` of a relQuery, the OpenAI-compatible endpoints)."""
    call = req.call("{prompt}")
    b = _Builder(call, len(prompts), model_id, cache, wanted, namespace, memory)
    b.add(call, [(p,) for p in prompts], range(len(prompts)))
    return b.batch


def plan_cells(req: CellsRequest, model_id: str, cache: Cache | None, namespace: str | None = None,
               memory: LabelMemory | None = None) -> PlannedRows:
    """Cells may carry different templates: each template's cells are planned as their own call,
    and run as their own relQuery with their own label plan (``PlannedRows.by_call``), so a
    cell's answer does not depend on the other templates' cells in its recalculation.

    A cell whose formula is wrong (bad template, wrong number of values) gets its own error,
    as a spreadsheet shows ``#VALUE!`` in one cell and computes the others.
    """
    base = req.call("{value}")  # the batch's function, labels, schema: 400 if bad
    b = _Builder(base, len(req.cells), model_id, cache, namespace=namespace, memory=memory)
    groups: dict[str, tuple[LLMCall, list[int], list[tuple]]] = {}
    for i, cell in enumerate(req.cells):
        try:
            if cell.template not in groups:
                groups[cell.template] = (req.call(cell.template), [], [])
            call, rows, values = groups[cell.template]
            values.append(Binding(call.template).row(args=cell.args, values=cell.values))
            rows.append(i)
        except (TemplateError, RowError) as e:
            b.batch.fail(i, f"cell {cell.id}: {e}")
    for call, rows, values in groups.values():
        if rows:
            # a cell that cannot run (a NULL value) names itself, as one whose formula is wrong does
            b.add(call, values, rows, [f"cell {req.cells[i].id}" for i in rows])
    return b.batch
