"""``method := 'batch'``: every row scored, then each label's score corrected by its mean over
the rows (batch calibration, relserve/labels/means.py), pooled with the call's earlier
relQueries (relserve/labels/pools.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from relserve.labels.guesses import AnswerSpread
from relserve.labels.interface import LabelContext, LabelRequest, LabelRun, probabilities
from relserve.labels.means import calibrated, no_correction, pick_calibrated, separates_by_itself
from relserve.labels.pools import means_key, pooled_means, pooled_rows
from relserve.labels.prior import label_options
from relserve.results import RowResult


@dataclass(frozen=True)
class _SharedMeans:
    """The label means a cascade's first part was decided with, for its later parts
    (``LabelScope.reading``)."""

    means_key: tuple
    means: Mapping[str, float]


class BatchRun(LabelRun):
    """``method := 'batch'``: every row scored, then each label's score corrected by its mean
    over this relQuery's rows and the call's earlier ones (relserve/labels/pools.py).
    ``examples``: the worked examples in front of every prompt (bootstrap's), whose means pool apart;
    ``method``: the name the relQuery ran under (``bootstrap`` decides its rows here)."""

    holds = True

    def __init__(self, ctx: LabelContext, examples: str = "", method: str = "batch") -> None:
        self.ctx = ctx
        self.spread = AnswerSpread(method)
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
            # the first part's rows are behind those means: a remainder of few rows is no guess
            self.spread.earlier = pooled_rows(self.means_key)
        else:
            self.spread.earlier = pooled_rows(self.means_key)
            scores = [r.label_logprobs for r in rows]
            means = pooled_means(self.means_key, scores)
            if separates_by_itself(scores):
                # the model tells these rows apart by itself: a mean would only move its answers
                means = no_correction(scores)
            if scope is not None:
                scope.reading = _SharedMeans(self.means_key, means)
        out = []
        for r in rows:
            label = pick_calibrated(r.label_logprobs, means)
            corrected = calibrated(r.label_logprobs, means)
            self.spread.add(corrected, label)
            out.append(replace(r, text=label, confidence=probabilities(corrected)[label]))
        return out

    @property
    def report(self) -> AnswerSpread:
        return self.spread
