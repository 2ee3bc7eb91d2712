"""Label log-probabilities of a closed question over rows: one relQuery, read as scores.

``llm_filter``/``llm_classify`` return the picked label; ranking needs how sure the model is. The
executor's rows keep the engine's ``label_logprobs`` (label scoring, relserve.engine.label_scoring),
so this runs the call the usual way (planner, one relQuery, the shared executor) and hands back
the scores. The result cache stores texts, not scores, so scoring calls skip it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from relserve.budget import Allowance
from relserve.functions import LLMCall
from relserve.label_names import SCORING_METHODS
from relserve.labels.keys import namespace_of
from relserve.labels.memory import process_memory
from relserve.planner.engine_ref import EngineRef
from relserve.planner.executor import CallExecutor
from relserve.planner.plan import plan_call
from relserve.planner.planned_rows import PlannedRows
from relserve.results import RelQueryStats


@dataclass
class Scores:
    """Per input row: each label's log-probability (None when the row failed) and the error."""

    logprobs: list[dict[str, float] | None]
    errors: list[str | None]
    #: prompts the engine ran, and the relQuery's statistics (None when nothing ran)
    ran: int
    stats: RelQueryStats | None


def label_scores(call: LLMCall, columns: Sequence[Sequence[object]], ref: EngineRef, *, progress: bool = False,
                 budget: Allowance | None = None) -> Scores:
    """Run ``call`` (filter/classify with a scoring method) over the rows; return label scores.
    ``budget``: what the rows spend from (an operator's, relserve/operators/spending.py)."""
    assert call.label_method in SCORING_METHODS, call.label_method
    plan = plan_call(call, columns, model_id=ref.model_id, cache=None, optimize=True, namespace=namespace_of(ref.peek()),
                     memory=process_memory())
    rows = PlannedRows.of(plan, None)
    logprobs: list[dict[str, float] | None] = [None] * plan.rows
    errors: list[str | None] = [None] * plan.rows
    for r in rows.ready:  # rows that cannot run (a NULL value)
        errors[r.index] = r.error
    stats = None
    if rows.prompts:
        executor = CallExecutor(rows, model_id=plan.model_id, prefix=plan.shared_prefix(),
                                error_prefix=f"{call.function.name}: ", budget=budget)
        for r in executor.run(ref.get(), progress=progress):
            if r.error is None and r.label_logprobs is not None:
                logprobs[r.index] = dict(r.label_logprobs)
            else:
                errors[r.index] = r.error or f"{call.function.name}: no label scores"
        stats = executor.stats
    return Scores(logprobs, errors, len(rows.prompts), stats)
