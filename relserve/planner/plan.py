"""Plan one LLM call over a table: which prompts run, in which order, and which are already known.

Steps, each cheap next to one LLM request:
1. collapse rows with equal placeholder values, and rows that render to the same prompt;
2. set aside rows that cannot run (a NULL value): they get NULL and an error, the rest go on;
3. with ``reorder_fields``, let GGR choose the row order and each row's field order, and render
   rows as instruction + ``{"field": value}`` JSON; otherwise keep the template's text;
4. look the prompts up in the result cache (greedy calls only);
5. order the prompts left to run so that shared prefixes sit side by side.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from relserve.errors import ConfigError, RowError
from relserve.functions import LLMCall
from relserve.labels.bootstrap import shaped_for
from relserve.labels.memory import LabelMemory
from relserve.labels.resolution import LabelResolution, resolve
from relserve.planner.cache import ResultCache
from relserve.planner.ggr import ggr, sort_rows
from relserve.prompt_rendering import (
    DistinctRows,
    Renderer,
    distinct_rows,
    field_lengths,
    null_error,
    render,
    render_with_fields,
)
from relserve.template import format_value


def shared_prefix_of(prompts: Sequence[str]) -> str:
    """Text every one of ``prompts`` starts with ("" for fewer than two): what an executor warms in
    the engine's prefix cache before the rows."""
    if len(prompts) < 2:
        return ""
    return os.path.commonprefix([min(prompts), max(prompts)])


@dataclass
class CallPlan:
    call: LLMCall
    model_id: str
    #: number of input rows
    rows: int
    #: per input row, the index of its prompt in ``prompts``, or -1 when the row cannot run
    row_to_prompt: list[int]
    #: input row -> why it cannot run
    row_errors: dict[int, str]
    #: distinct prompts, as the engine will get them
    prompts: list[str]
    #: prompt index -> answer text from the result cache
    cached: dict[int, str]
    #: prompt indices to send to the engine, in planned order
    run_order: list[int]
    #: "off" (original order), "rows", or "rows+fields"
    reorder: str
    planner_s: float
    distinct: DistinctRows = field(repr=False)
    #: the prompt shape was relserve's choice for this relQuery (relserve/labels/bootstrap.shaped_for),
    #: not the user's nor the default
    shape_chosen: bool = False
    #: the warning stored with cached answers that were close to guesses (cache.repeated_warning)
    cached_warning: str | None = None
    #: the label method and plan of a closed question, resolved once (relserve/labels/methods.py)
    labels: LabelResolution = field(default_factory=lambda: LabelResolution(None))

    @property
    def distinct_prompts(self) -> int:
        return len(self.prompts)

    @property
    def cache_hits(self) -> int:
        """Distinct prompts answered from the result cache."""
        return len(self.cached)

    @property
    def run_prompts(self) -> list[str]:
        return [self.prompts[i] for i in self.run_order]

    def shared_prefix(self) -> str:
        """Text every prompt to run starts with (the template's static part, at least)."""
        return shared_prefix_of(self.run_prompts)

    def baseline_prompts(self) -> list[str]:
        """What would run without planning: every row, rendered as written, in input order."""
        out = []
        for d in self.distinct.row_to_distinct:
            try:
                out.append(render(self.call, self.distinct.values[d]))
            except RowError:
                continue
        return out


def rows_of(call: LLMCall, columns: Sequence[Sequence[object]]) -> list[tuple]:
    """Value columns aligned with ``call.template.columns`` (a columnar surface's form) as the
    row tuples the planner works on."""
    if len(columns) != len(call.template.columns):
        raise ValueError(f"expected {len(call.template.columns)} value columns, got {len(columns)}")
    fn, names = call.function.name, call.template.columns
    for name, column in zip(names, columns):
        if isinstance(column, (str, bytes)):  # zip would make a row of each character
            raise ConfigError(f"{fn}: the values of {{{name}}} must be a list of values, one per row, got the "
                              f"string {column[:40]!r}; a single row is [{column[:40]!r}]")
    sizes = [len(column) for column in columns]
    if len(set(sizes)) > 1:  # zip would drop the longer columns' last rows
        raise ConfigError(f"{fn}: the value columns must have one value per row each, got "
                          + ", ".join(f"{n:,} for {{{name}}}" for name, n in zip(names, sizes)))
    return list(zip(*columns))


def plan_call(
    call: LLMCall,
    columns: Sequence[Sequence[object]],
    *,
    model_id: str,
    cache: ResultCache | None = None,
    optimize: bool = True,
    namespace: str | None = None,
    memory: LabelMemory | None = None,
) -> CallPlan:
    """Plan ``call`` over rows given as columns aligned with ``call.template.columns``."""
    return plan_rows(call, rows_of(call, columns), model_id=model_id, cache=cache, optimize=optimize,
                     namespace=namespace, memory=memory)


def plan_rows(
    call: LLMCall,
    rows: Sequence[tuple],
    *,
    model_id: str,
    cache: ResultCache | None = None,
    optimize: bool = True,
    namespace: str | None = None,
    memory: LabelMemory | None = None,
) -> CallPlan:
    """Plan ``call`` over row tuples aligned with ``call.template.columns`` (DuckDB's chunks and
    spreadsheet cells arrive as rows: they go straight in). ``namespace``: the prefix-cache
    namespace the rows will run in (a server tenant's; None: the process's own); ``memory``: the
    label memory whose plans decide a closed question's rows (relserve/labels/memory.py; None: no
    plan is kept). The plan's ``call`` carries the prompt shape chosen and the id of the label
    plan kept for it."""
    t0 = time.perf_counter()
    n = len(rows)
    distinct = distinct_rows(rows)
    # which distinct value tuples can run at all
    bad: dict[int, str] = {}
    for d, values in enumerate(distinct.values):
        err = null_error(call, values)
        if err is not None:
            bad[d] = err
    good = [d for d in range(len(distinct.values)) if d not in bad]
    asked = call
    call = shaped_for(call, len(good), model_id, namespace, memory)
    labels = resolve(call, len(good), memory=memory, namespace=namespace, model_id=model_id)
    if labels.key is not None:
        call = replace(call, plan_id=labels.plan_id)

    fields_reordered = call.options.reorder_fields and optimize and len(good) > 1
    if fields_reordered:
        table = [distinct.values[d] for d in good]
        # GGR groups equal values as they appear in the prompt
        cols = [[format_value(t[c]) for t in table] for c in range(len(call.template.columns))]
        ordering = ggr(cols, field_lengths(call, table))
        ggr_rendered = [(good[r], render_with_fields(call, table[r], f)) for r, f in zip(ordering.rows, ordering.fields)]
        rendered = dict(ggr_rendered)
    else:
        fast = Renderer(call)
        rendered = {d: fast(distinct.values[d]) for d in good}

    prompt_index: dict[str, int] = {}
    distinct_to_prompt: dict[int, int] = {}
    for d in good:
        if d in rendered:
            distinct_to_prompt[d] = prompt_index.setdefault(rendered[d], len(prompt_index))
    prompts = list(prompt_index)

    row_to_prompt = [distinct_to_prompt.get(d, -1) for d in distinct.row_to_distinct]
    row_errors = {i: bad[d] for i, d in enumerate(distinct.row_to_distinct) if d in bad}

    cached: dict[int, str] = {}
    if cache is not None and call.deterministic and prompts:
        cached = cache.get_many(model_id, call.sampling_settings(), prompts)
    cached_warning = None
    if cached:
        # answers a label method warned about say so again when they come from the cache
        cached_warning = cache.cached_warning(model_id, call.sampling_settings(), [prompts[p] for p in cached])

    if fields_reordered:
        seen: set[int] = set()
        run_order = []
        for d, _ in ggr_rendered:
            p = distinct_to_prompt[d]
            if p not in cached and p not in seen:
                seen.add(p)
                run_order.append(p)
        reorder = "rows+fields"
    else:
        misses = [p for p in range(len(prompts)) if p not in cached]
        if optimize:
            order = sort_rows([prompts[p] for p in misses])
            run_order = [misses[i] for i in order]
            reorder = "rows"
        else:
            run_order = misses
            reorder = "off"

    return CallPlan(
        call=call,
        model_id=model_id,
        rows=n,
        row_to_prompt=row_to_prompt,
        row_errors=row_errors,
        prompts=prompts,
        cached=cached,
        run_order=run_order,
        reorder=reorder,
        planner_s=time.perf_counter() - t0,
        distinct=distinct,
        shape_chosen=call.options is not asked.options,
        cached_warning=cached_warning,
        labels=labels,
    )
