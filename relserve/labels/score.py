"""``method := 'score'``: every label of a row scored, the best one the answer (no correction).

The engine picks each row's label itself (relserve/engine/label_scoring.py), so a row is decided
as it finishes. A strong model needs nothing more; a small one prefers some labels whatever the
row says, which the other methods correct.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from relserve.labels.guesses import AnswerSpread
from relserve.labels.interface import LabelContext, LabelRequest, LabelRun, probabilities
from relserve.results import RowResult


class ScoreRun(LabelRun):
    holds = False

    def __init__(self, ctx: LabelContext) -> None:
        from relserve.labels.prior import label_options

        self.ctx = ctx
        self.options = label_options(ctx.call, ctx.model_id, "score")
        self.spread = AnswerSpread("score")

    def request(self) -> LabelRequest:
        return LabelRequest(list(self.ctx.prompts), self.options)

    def decide(self, rows: Sequence[RowResult]) -> list[RowResult]:
        for r in rows:
            self.spread.add(r.label_logprobs, r.text)
        return [replace(r, confidence=probabilities(r.label_logprobs).get(r.text)) for r in rows]

    @property
    def report(self) -> AnswerSpread:
        return self.spread


def describe_work(call, rows: int, plan) -> str:
    return "label log-probabilities, the best one the answer"
