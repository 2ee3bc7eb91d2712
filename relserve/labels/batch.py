"""``method := 'batch'``: each label's score corrected by its mean over a sample of the call's rows
(batch calibration, relserve/labels/means.py), the means kept in the call's label plan.

The call's first relQuery scores a spread sample of its prompts (``SAMPLE_ROWS``), reads each
label's mean over them (none where the model separates the rows by itself) and keeps them as the
plan; every row of every relQuery is then decided alone by its scores minus those means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from relserve.labels.guesses import AnswerSpread
from relserve.labels.interface import LabelContext, LabelRequest, LabelRun
from relserve.labels.means import label_means, no_correction, separates_by_itself
from relserve.labels.plan import LabelPlan, PlanRule
from relserve.labels.prior import label_options
from relserve.results import RowResult

#: prompts a plan's sample scores at most (a spread sample of the first relQuery's)
SAMPLE_ROWS = 32
#: rel_id prefix of a plan's sample
SAMPLE_PREFIX = "batch-"


def sample_indices(n: int, size: int) -> list[int]:
    """``size`` prompt indices spread evenly over ``n`` prompts (all of them when fewer)."""
    if n <= size:
        return list(range(n))
    return [i * n // size for i in range(size)]


def means_plan(method: str, labels: Sequence[str], scores: Sequence[Mapping[str, float]], examples: str = "") -> LabelPlan:
    """A plan that subtracts each label's mean over ``scores`` (none when the model separates
    these rows by itself)."""
    means = no_correction(scores) if separates_by_itself(scores) else label_means(scores)
    return LabelPlan(method, PlanRule.LABEL_MEANS, tuple(labels), examples=examples,
                     offsets=tuple(means.items()), sample=len(scores))


def score_sample(ctx: LabelContext, prompts: Sequence[str], options: Mapping[str, object], size: int,
                 rel_id: str) -> dict[int, RowResult]:
    """A spread sample of at most ``size`` of ``prompts`` scored on ``ctx.engine`` (prompt index ->
    its scored row; failed rows left out)."""
    from relserve.relquery import RelQuery

    sample = sample_indices(len(prompts), size)
    rq = RelQuery.from_prompts([prompts[i] for i in sample], **{**ctx.engine_options, **options}, rel_id=rel_id)
    rows = ctx.engine.submit(rq).result().rows
    return {sample[r.index]: replace(r, index=sample[r.index]) for r in rows
            if r.error is None and r.label_logprobs is not None}


class BatchRun(LabelRun):
    """``method := 'batch'``: each row's scores minus the plan's label means."""

    def __init__(self, ctx: LabelContext, method: str = "batch") -> None:
        self.ctx = ctx
        self.method = method
        self.spread = AnswerSpread(method)
        self.options = label_options(ctx.call, ctx.model_id, "batch")

    def request(self) -> LabelRequest:
        ctx = self.ctx
        prompts = list(ctx.prompts)
        self.plan, self.plan_kept = ctx.given_plan()
        scored: dict[int, RowResult] = {}
        made = self.plan is None
        if made:
            whole = list(ctx.scope.prompts) if ctx.scope is not None and ctx.scope.prompts else prompts
            got = score_sample(ctx, whole, self.options, SAMPLE_ROWS, SAMPLE_PREFIX + (ctx.rel_id or "x"))
            plan = means_plan(self.method, tuple(ctx.call.choices or ()), [r.label_logprobs for r in got.values()])
            self.plan, self.plan_kept = ctx.offer_plan(plan, len(whole))
            if whole is prompts and self.plan.decides_as(plan):
                scored = got  # the sample's rows were scored as every row is: those are their answers
        # the rows behind a kept plan's reading tell the guess check this relQuery is not all
        self.spread.earlier = 0 if made else self.plan.sample
        return LabelRequest(prompts, self.options, scored=scored)

    def decide(self, rows: Sequence[RowResult]) -> list[RowResult]:
        out = []
        offsets = dict(self.plan.offsets)
        for r in rows:
            label, confidence = self.plan.decide(r.label_logprobs)
            self.spread.add({k: v - offsets.get(k, 0.0) for k, v in r.label_logprobs.items()}, label)
            out.append(replace(r, text=label, confidence=confidence))
        return out

    @property
    def report(self) -> AnswerSpread:
        return self.spread


def describe_work(call, rows: int, plan) -> str:
    return "label scores minus their means over a sample of the call's rows (the plan)"


def describe_first_pass(call) -> str:
    return f"a spread sample of up to {SAMPLE_ROWS} of this relQuery's rows is scored first for the label means"
