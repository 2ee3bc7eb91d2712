"""From a request to a ``Batch``: the answers known before the engine runs (result-cache hits,
rows that cannot run) and the distinct prompts left for ONE engine relQuery.

The planner does the work (``plan_call``: deduplication, result-cache lookup, prefix-sharing
order), so a prompt sent here gets the same text, cache key and answer as the same call made
from DuckDB or polars.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from relserve.errors import RowError, TemplateError
from relserve.functions import LLMCall, make_call
from relserve.planner.cache import CacheView, ResultCache
from relserve.planner.plan import plan_call
from relserve.server.schemas import CallFields, Cell, CellsRequest, RelQueryRequest
from relserve.template import Template


@dataclass(slots=True)
class RowOut:
    """One row's answer as the server reports it."""

    index: int
    #: the answer in the function's type (filter: boolean); None when the row failed
    value: Any = None
    #: the model's text
    text: str | None = None
    error: str | None = None
    #: answered from the result cache (the engine did not run it)
    cached: bool = False
    prompt_tokens: int = 0
    output_tokens: int = 0
    #: prompt tokens served from the engine's prefix cache
    cached_tokens: int = 0
    finish_reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Batch:
    call: LLMCall
    #: rows (or cells, or prompts) in the request
    total: int
    #: answers known without the engine
    ready: list[RowOut]
    #: distinct prompts for the engine, in planned order
    prompts: list[str]
    #: per engine prompt, the request rows that get its answer
    targets: list[list[int]]
    #: settings to store new answers under in the result cache; None: do not store
    cache_settings: dict[str, Any] | None = None
    system: str | None = None
    #: the result cache (as the tenant sees it) the answers were looked up in and go to
    cache: ResultCache | CacheView | None = None

    @property
    def cached_rows(self) -> int:
        return sum(r.cached for r in self.ready)


def make_request_call(req: CallFields, template: str | Template) -> LLMCall:
    """Validate the call's form (function, labels, schema, max_tokens): ConfigError/TemplateError name the problem."""
    return make_call(
        f"llm_{req.function}",
        template,
        labels=req.labels,
        json_schema=req.json_schema,
        max_tokens=req.max_tokens,
        temperature=req.temperature,
    )


@dataclass
class _Builder:
    total: int
    model_id: str
    #: the result cache to read (None: no lookups)
    cache: ResultCache | CacheView | None
    system: str | None = None
    ready: list[RowOut] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    targets: list[list[int]] = field(default_factory=list)
    call: LLMCall | None = None

    def fail(self, row: int, message: str) -> None:
        self.ready.append(RowOut(row, error=message))

    def add(self, call: LLMCall, columns: Sequence[Sequence[object]], out_rows: Sequence[int]) -> None:
        """Plan ``call`` over rows given as columns; ``out_rows[i]`` is row i's index in the request."""
        self.call = self.call or call
        plan = plan_call(call, columns, model_id=self.model_id, cache=self.cache, optimize=True)
        for i, message in plan.row_errors.items():
            self.fail(out_rows[i], message)
        rows_of: dict[int, list[int]] = {}
        for i, p in enumerate(plan.row_to_prompt):
            if p >= 0:
                rows_of.setdefault(p, []).append(out_rows[i])
        for p, text in plan.cached.items():
            try:
                value, error = call.convert(text), None
            except RowError as e:
                value, error = None, str(e)
            for row in rows_of[p]:
                self.ready.append(RowOut(row, value=value, text=text, error=error, cached=True))
        for p in plan.run_order:
            self.prompts.append(plan.prompts[p])
            self.targets.append(rows_of[p])

    def build(self, call: LLMCall) -> Batch:
        call = self.call or call
        store = call.sampling_settings() if self.cache is not None else None
        return Batch(call, self.total, self.ready, self.prompts, self.targets, store, self.system, self.cache)


Cache = ResultCache | CacheView


def _cache_for(call: LLMCall, cache: Cache | None, system: str | None, wanted: bool = True) -> Cache | None:
    # Sampled answers must not be replayed; a system message changes the answer, so it is
    # part of the key.
    if not wanted or cache is None or not call.deterministic:
        return None
    return cache.scoped(system=system)


def plan_relquery(req: RelQueryRequest, model_id: str, cache: Cache | None) -> Batch:
    """``template`` + ``rows`` (placeholders name columns), or already-rendered ``prompts``."""
    if req.prompts is not None:
        call = make_request_call(req, "{prompt}")
        b = _Builder(len(req.prompts), model_id, _cache_for(call, cache, req.system, req.cache), req.system)
        b.add(call, [req.prompts], range(len(req.prompts)))
        return b.build(call)
    call = make_request_call(req, req.template or "")
    rows = req.rows or []
    names = call.template.columns
    if rows:
        call.template.check_columns(rows[0].keys())
        for i, row in enumerate(rows):
            missing = [c for c in names if c not in row]
            if missing:
                raise TemplateError(f"row {i} has no column(s) {', '.join(map(repr, missing))} named in the template")
    b = _Builder(len(rows), model_id, _cache_for(call, cache, req.system, req.cache), req.system)
    if rows:
        b.add(call, [[row[c] for row in rows] for c in names], range(len(rows)))
    return b.build(call)


def plan_prompts(req: CallFields, prompts: list[str], model_id: str, cache: Cache | None) -> Batch:
    """Plain prompts (OpenAI-compatible endpoints)."""
    call = make_request_call(req, "{prompt}")
    b = _Builder(len(prompts), model_id, _cache_for(call, cache, req.system), req.system)
    b.add(call, [prompts], range(len(prompts)))
    return b.build(call)


def plan_cells(req: CellsRequest, model_id: str, cache: Cache | None) -> Batch:
    """Cells may carry different templates; all of them go into one relQuery.

    A cell whose formula is wrong (bad template, wrong number of values) gets its own error,
    as a spreadsheet shows ``#VALUE!`` in one cell and computes the others.
    """
    base = make_request_call(req, "{value}")  # the batch's function, labels, schema: 400 if bad
    b = _Builder(len(req.cells), model_id, _cache_for(base, cache, req.system), req.system)
    groups: dict[str, tuple[LLMCall, list[int], list[tuple]]] = {}
    for i, cell in enumerate(req.cells):
        try:
            if cell.template not in groups:
                groups[cell.template] = (make_request_call(req, cell.template), [], [])
            call, rows, values = groups[cell.template]
            values.append(_cell_values(cell, call.template))
            rows.append(i)
        except (TemplateError, RowError) as e:
            b.fail(i, f"cell {cell.id}: {e}")
    for call, rows, values in groups.values():
        if rows:
            b.add(call, [list(col) for col in zip(*values)], rows)
    return b.build(base)


def _cell_values(cell: Cell, template: Template) -> tuple:
    names = template.columns
    if cell.values is not None:
        if cell.args:
            raise TemplateError("give args or values, not both")
        missing = [n for n in names if n not in cell.values]
        if missing:
            template.check_columns(cell.values.keys())
        return tuple(cell.values[n] for n in names)
    if len(cell.args) != len(names):
        shown = ", ".join("{" + n + "}" for n in names)
        raise TemplateError(
            f"the template has {len(names)} placeholder(s) ({shown}) but {len(cell.args)} value(s) were given; "
            "values fill the placeholders in order of first appearance"
        )
    return tuple(cell.args)
