"""``method := 'batch'``: every row scored, then each label's score corrected by its mean over
the rows (batch calibration, relserve/planner/labels/means.py), pooled with the call's earlier
relQueries (relserve/planner/labels/pools.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from relserve.planner.labels.interface import LabelContext, LabelRequest, LabelRun, probabilities
from relserve.planner.labels.means import calibrated, pick_calibrated
from relserve.planner.labels.pools import means_key, pooled_means
from relserve.planner.labels.prior import label_options
from relserve.results import RowResult


@dataclass(frozen=True)
class _SharedMeans:
    """The label means a cascade's first part was decided with, for its later parts
    (``LabelScope.reading``)."""

    means_key: tuple
    means: Mapping[str, float]


class BatchRun(LabelRun):
    """``method := 'batch'``: every row scored, then each label's score corrected by its mean
    over this relQuery's rows and the call's earlier ones (relserve/planner/labels/pools.py).
    ``examples``: the worked examples in front of every prompt (bootstrap's), whose means pool apart."""

    holds = True

    def __init__(self, ctx: LabelContext, examples: str = "") -> None:
        self.ctx = ctx
        self.examples = examples
        self.means_key = means_key(ctx.call, ctx.engine, ctx.model_id, examples)
        self.options = label_options(ctx.call, ctx.model_id, "batch")

    def request(self) -> LabelRequest:
        return LabelRequest([self.examples + p for p in self.ctx.prompts], self.options)

    def decide(self, rows: Sequence[RowResult]) -> list[RowResult]:
        scope = self.ctx.scope
        shared = scope.reading if scope is not None else None
        if isinstance(shared, _SharedMeans) and shared.means_key == self.means_key:
            # a later part of a cascade (the rows its proxy was unsure of): no sample of the
            # call's rows, so its scores would move the means; decided with the first part's
            means = shared.means
        else:
            means = pooled_means(self.means_key, [r.label_logprobs for r in rows])
            if scope is not None:
                scope.reading = _SharedMeans(self.means_key, means)
        out = []
        for r in rows:
            label = pick_calibrated(r.label_logprobs, means)
            out.append(replace(r, text=label, confidence=probabilities(calibrated(r.label_logprobs, means))[label]))
        return out
