"""The model's prior over a call's labels, for contextual calibration (Zhao et al., "Calibrate
Before Use", ICML 2021).

A small model prefers some labels whatever the row says ("no" for every review, "spam" for every
SMS). The prior is measured by scoring the labels on content-free rows: the call's own prompt
with every placeholder replaced by "N/A", by "" and by "[MASK]". Dividing each row's label
probabilities by the average of those (the paper's diagonal correction with no bias) leaves what
the row itself contributes. It is measured once per model and call (template, labels, examples)
and kept as the call's label plan (relserve/labels/plan.py): three short scoring requests.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from relserve.backend.protocol import Backend
from relserve.budget import BUDGET_EXCEEDED, Allowance, BudgetExceeded
from relserve.engine.handle import RelQueryHandle
from relserve.errors import RowError
from relserve.functions import LLMCall
from relserve.label_names import SCORING_METHODS
from relserve.labels.guesses import FEW_ROWS, AnswerSpread
from relserve.labels.interface import LabelContext, LabelRequest, LabelRun
from relserve.labels.plan import LabelPlan, PlanRule
from relserve.labels.resolution import MIN_PLAN_ROWS
from relserve.prompt_rendering import Renderer
from relserve.results import RowResult

#: rel_id prefix of the probe relQueries (they are not a user's rows)
PROBE_PREFIX = "prior-"
#: the paper's content-free inputs
CONTENT_FREE = ("N/A", "", "[MASK]")

def content_free_prompts(call: LLMCall) -> list[str]:
    """The call's prompt with every placeholder set to each content-free value."""
    render = Renderer(call)
    if render.shaped is not None:
        # under the shaped layouts a row's long values stand apart from the question; a probe's "N/A" would
        # stay inside the question, a layout no row has. Laid out like the rows, the prior fits
        # them better (docs/quality.md: tiny relQueries)
        render.shaped.move_chars = 0
    n = len(call.template.columns)
    return [render((value,) * n) for value in CONTENT_FREE]


def label_options(call: LLMCall, model_id: str, method: str | None) -> dict[str, Any]:
    """The ``RelQuery`` options that make the engine score ``call``'s labels as ``method`` lays
    them out (every method picks each row's label itself, from the scores and the call's plan)."""
    if method not in SCORING_METHODS:
        return {}
    return {"score_labels": True, "prompt_shape": call.prompt_shape, "answer_field": call.answer_field}


def submit_probes(call: LLMCall, engine: Backend, budget: Allowance | None = None) -> RelQueryHandle:
    """Send the content-free probes of ``call`` as their own small relQuery, spending from the
    call's ``budget`` as its rows do; ``prior_from`` reads the result."""
    from relserve.relquery import RelQuery

    rq = RelQuery.from_prompts(
        content_free_prompts(call), choices=list(call.choices or ()), score_labels=True,
        prompt_shape=call.prompt_shape, answer_field=call.answer_field, on_error="raise", rel_id=PROBE_PREFIX + uuid.uuid4().hex[:8],
        system=call.options.system, budget=budget,
    )
    return engine.submit(rq)


def prior_from(call: LLMCall, probes: RelQueryHandle) -> dict[str, float]:
    """The prior from the probes' scores (waits for them): each label's average probability over
    the probes, normalised to sum to 1."""
    rows = probes.result().rows
    labels = list(call.choices or ())
    mean = {label: sum(math.exp(r.label_logprobs[label]) for r in rows) / len(rows) for label in labels}
    total = sum(mean.values())
    return {label: p / total for label, p in mean.items()}


def prior_plan(call: LLMCall, prior: dict[str, float]) -> LabelPlan:
    """A plan that divides each label's probability by the prior (subtracts its log)."""
    return LabelPlan("prior", PlanRule.CONTENT_FREE, tuple(call.choices or ()),
                     offsets=tuple((k, math.log(max(v, 1e-12))) for k, v in prior.items()), sample=len(CONTENT_FREE))


class PriorRun(LabelRun):
    """``method := 'prior'`` (named ``calibrate`` before): each row's label probabilities divided
    by the call's content-free prior, kept as its plan: the call's first relQuery measures it
    (three short probes before its rows)."""

    def __init__(self, ctx: LabelContext) -> None:
        self.ctx = ctx
        self.options = label_options(ctx.call, ctx.model_id, "prior")
        self.spread = AnswerSpread("prior")

    def request(self) -> LabelRequest:
        self.plan, self.plan_kept = self.ctx.given_plan()
        if self.plan is not None:
            # a kept plan: the call ran before, and its first statement was the one told whether
            # its answers were guesses of few rows (a call run a row at a time is told once)
            self.spread.earlier = FEW_ROWS
        else:
            probes = submit_probes(self.ctx.call, self.ctx.engine, self.ctx.engine_options.get("budget"))
            try:
                prior = prior_from(self.ctx.call, probes)
            except RowError as e:
                if BUDGET_EXCEEDED not in str(e):
                    raise
                # no plan can be made, so no row can be decided: the statement is refused
                raise BudgetExceeded(f"{self.ctx.call.function.name}: the content-free probes that calibrate its "
                                     f"labels do not fit its budget ({e})") from None
            made = prior_plan(self.ctx.call, prior)
            # (probes hold no row: a plan from them is kept whatever the relQuery's size)
            self.plan, self.plan_kept = self.ctx.offer_plan(made, MIN_PLAN_ROWS)
        return LabelRequest(list(self.ctx.prompts), self.options)

    def decide(self, rows: Sequence[RowResult]) -> list[RowResult]:
        offsets = dict(self.plan.offsets)
        out = []
        for r in rows:
            label, confidence = self.plan.decide(r.label_logprobs)
            self.spread.add({k: v - offsets.get(k, 0.0) for k, v in r.label_logprobs.items()}, label)
            out.append(replace(r, text=label, confidence=confidence))
        return out

    @property
    def report(self) -> AnswerSpread:
        return self.spread


def describe_work(call, rows: int, plan) -> str:
    return "label log-probabilities divided by the model's answer on content-free rows (the plan)"


def describe_first_pass(call) -> str:
    return f"{len(CONTENT_FREE)} content-free probes before the rows measure the prior"
