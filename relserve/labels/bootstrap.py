"""Bootstrapped examples for ``llm_filter`` / ``llm_classify`` (issue 22; ``method := 'bootstrap'``).

A small model answers a closed question much better with a few worked examples in front of the
row (docs/quality.md); a user seldom writes them. A relQuery has rows to take them from, and the
model can label them itself:

The call's label plan (relserve/labels/plan.py) is made by its first relQuery:

1. a first pass scores a spread sample of the relQuery's prompts (``sample_rows``: half of a
   small classify's) and picks their labels by batch calibration (relserve/labels/means.py);
2. per label, the ``PER_LABEL`` sampled rows the model is surest of (largest calibrated margin
   over the next label) become examples: their prompt, then ``Answer: <label>``;
3. the same sample is scored behind those examples, and each label's mean there is the plan's
   correction.

Every row of every relQuery of the call is then scored behind the examples (one shared prefix,
so the prefix cache prefills it once) and decided alone: its scores minus the plan's means.

A wrong example label costs less than it seems: what a small model takes from examples is mostly
the rows' look, the label words and the answer format (Min et al., "Rethinking the Role of
Demonstrations", EMNLP 2022); the margin choice keeps the labels mostly right anyway. The same
idea picks few-shot examples from a program's own confident outputs in DSPy
(``BootstrapFewShot``).

Below ``MIN_BATCH_ROWS`` prompts a call with no plan runs as ``prior`` (as ``batch`` does; with
three labels or more as ``batch`` from 8 prompts, too few to choose examples from); with the
user's own ``examples`` it runs as ``batch`` (given examples beat guessed ones); see
relserve/labels/resolution.method_ran. The plan holds rows of the relQuery that made it, so it is
kept per prefix-cache namespace: one tenant of the server (or one ``cache_group``), or the
library user's own home.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace

from relserve.label_names import LabelMethodName
from relserve.labels.batch import BatchRun
from relserve.labels.interface import LabelContext, LabelRequest, LabelRun
from relserve.labels.means import (
    MIN_BATCH_ROWS,
    calibrated,
    label_means,
    no_correction,
    pick_calibrated,
    separates_by_itself,
)
from relserve.prompt_shapes import ANSWER_FIELD, AUTO_ANSWER_FIELD
from relserve.results import RowResult

#: prompts scored by the first pass (a spread sample of the relQuery's prompts), per function
#: kind: a filter's 32, a classify's 16 (the notebook, docs/notebook/quality-passes.md, has the
#: measurements that chose them)
SAMPLE_ROWS: dict[str, int] = {"classify": 16, "filter": 32}
#: the share of a relQuery's prompts its first pass scores at most, per function kind (half a
#: small classify's: it scored most of its rows twice)
SAMPLE_SHARE: dict[str, float] = {"classify": 0.5, "filter": 1.0}
#: the fewest prompts a first pass scores, whatever the share (the examples are chosen among
#: them: one per label, each the row leaning furthest to it)
MIN_SAMPLE = 8
#: examples per label (one against two was measured: docs/notebook/quality-passes.md)
PER_LABEL = 1
#: rel_id prefix of a first pass (its rows are a sample of the relQuery's)
FIRST_PASS_PREFIX = "bootstrap-"
#: a longer prompt is not used as an example (it would crowd the context of every row)
MAX_EXAMPLE_CHARS = 1000
#: the prompt shape of a 2-label ``llm_classify`` whose labels are picked behind bootstrapped
#: examples, when the user sets none (filters and 3+ labels lost with it: the notebook)
EXAMPLES_SHAPE = "question_first"


def sample_rows(kind: str, rows: int | None = None) -> int:
    """How many prompts the first pass of an ``llm_<kind>`` call scores at most; of a relQuery
    of ``rows`` prompts, when given (``SAMPLE_SHARE`` of them, at least ``MIN_SAMPLE``)."""
    size = SAMPLE_ROWS.get(kind, max(SAMPLE_ROWS.values()))
    if rows is None:
        return size
    return min(rows, size, max(MIN_SAMPLE, math.ceil(SAMPLE_SHARE.get(kind, 1.0) * rows)))


def choose(
    scores: Sequence[tuple[int, Mapping[str, float]]],
    prompts: Sequence[str],
    *,
    per_label: int = PER_LABEL,
    max_chars: int = MAX_EXAMPLE_CHARS,
) -> list[tuple[int, str]]:
    """The examples: per label, the scored rows whose batch-calibrated pick (the model's own, when
    it separates the rows by itself) is that label, surest
    first (the margin of the label over the next best, both calibrated), ``per_label`` of them;
    interleaved by rank (first of every label, then second of every label ...) so no label
    stands last by construction more often than the others.

    ``scores``: (prompt index, the row's label scores) for the rows the first pass scored.
    """
    if not scores:
        return []
    sampled = [s for _, s in scores]
    # a model that tells the sampled rows apart by itself is read as it answers (means.py)
    means = no_correction(sampled) if separates_by_itself(sampled) else label_means(sampled)
    labels = list(means)
    ranked: dict[str, list[tuple[float, int]]] = {label: [] for label in labels}
    for index, s in scores:
        if len(prompts[index]) > max_chars:
            continue
        cal = calibrated(s, means)
        best = pick_calibrated(s, means)
        runner_up = max((cal[label] for label in labels if label != best), default=0.0)
        ranked[best].append((cal[best] - runner_up, index))
    for label in labels:
        ranked[label].sort(key=lambda m: (-m[0], m[1]))
    out = []
    for rank in range(per_label):
        for label in labels:
            if rank < len(ranked[label]):
                out.append((ranked[label][rank][1], label))
    return out


def examples_text(prompts: Sequence[str], picked: Sequence[tuple[int, str]], answer_field: str = ANSWER_FIELD) -> str:
    """The examples as the text every prompt starts with: each example's prompt, its answer,
    a blank line."""
    # the answer field the engine puts after every shaped prompt, with the label after a space
    return "".join(f"{prompts[i]}\n{answer_field} {label}\n\n" for i, label in picked)


def first_pass(ctx, prompts: Sequence[str], options: Mapping[str, object], size: int) -> str:
    """Score a spread sample of at most ``size`` of ``prompts`` and choose the examples to put in
    front of every prompt (``""``: none, every sampled row failed)."""
    from relserve.labels.batch import score_sample

    got = score_sample(ctx, prompts, options, size, FIRST_PASS_PREFIX + (ctx.rel_id or uuid.uuid4().hex[:8]))
    picked = choose([(i, r.label_logprobs) for i, r in sorted(got.items())], prompts)
    return examples_text(prompts, picked, str(options.get("answer_field", ANSWER_FIELD)))


def follows_method(call) -> bool:
    """Whether relserve picks ``call``'s prompt shape per relQuery (``shaped_for``): a 2-label
    ``llm_classify`` under ``bootstrap``, with neither a shape nor examples of the user's."""
    o = call.options
    return (call.function.kind == "classify" and len(call.choices or ()) == 2
            and call.label_method == LabelMethodName.BOOTSTRAP and o.prompt_shape is None and not o.examples)


def in_examples_shape(call):
    """``call`` laid out ``EXAMPLES_SHAPE``, after the answer field the model is likeliest to say
    its labels after (relserve/labels/answer_fields.py) unless the user named one."""
    field = call.options.answer_field or AUTO_ANSWER_FIELD
    return replace(call, options=replace(call.options, prompt_shape=EXAMPLES_SHAPE, answer_field=field))


def shaped_for(call, prompts: int, model_id: str, namespace: str | None = None, memory=None):
    """``call`` as a relQuery of ``prompts`` distinct prompts runs it: laid out ``EXAMPLES_SHAPE``
    when its labels will be picked behind bootstrapped examples (``follows_method``, and 16
    prompts or more, or a plan kept for that layout in ``namespace``), else unchanged: below 16
    prompts the content-free prior decides, and under ``question_first`` it gives nearly every
    row one label (docs/notebook/quality-passes.md#fourth-pass-2026-11-24-1730-1850-utc-the-question-first-as-a-field).

    The planner calls it before rendering, so the result cache, deduplication and EXPLAIN see
    the layout that runs."""
    if not follows_method(call):
        return call
    shaped = in_examples_shape(call)
    if prompts >= MIN_BATCH_ROWS or memory is None:
        return shaped if prompts >= MIN_BATCH_ROWS else call
    from relserve.labels.resolution import plan_key

    # (a plan is kept under the call as planned: its answer field "auto", not the name chosen)
    return shaped if memory.plan(plan_key(shaped, namespace, model_id)) is not None else call


class BootstrapRun(LabelRun):
    """``method := 'bootstrap'``: worked examples the model labelled itself in front of every row,
    then each label's score minus its mean over the sample behind them. The call's first relQuery
    makes the plan: a first pass over a spread sample chooses the examples, the same sample scored
    behind them gives the means."""

    def __init__(self, ctx: LabelContext) -> None:
        from relserve.labels.prior import label_options

        self.ctx = ctx
        self.options = label_options(ctx.call, ctx.model_id, "bootstrap")
        self._batch = BatchRun(ctx, method="bootstrap")

    def request(self) -> LabelRequest:
        from relserve.labels.batch import means_plan, score_sample

        ctx = self.ctx
        prompts = list(ctx.prompts)
        plan, self.plan_kept = ctx.given_plan()
        scored: dict[int, RowResult] = {}
        if plan is None:
            # a part of a larger relQuery (a cascade's sample) takes its examples from the whole,
            # as the relQuery of all the rows would
            whole = list(ctx.scope.prompts) if ctx.scope is not None and ctx.scope.prompts else prompts
            options = {**ctx.engine_options, **self.options}
            size = sample_rows(ctx.call.function.kind, len(whole))
            examples = first_pass(ctx, whole, options, size)
            behind = [examples + p for p in whole]
            got = score_sample(ctx, behind, self.options, size, FIRST_PASS_PREFIX + "b-" + (ctx.rel_id or "x"))
            made = means_plan("bootstrap", tuple(ctx.call.choices or ()), [r.label_logprobs for r in got.values()],
                              examples)
            plan, self.plan_kept = ctx.offer_plan(made, len(whole))
            if whole is prompts and plan.decides_as(made):
                scored = got  # the sample's rows, scored behind the examples as every row is: their answers
        self.plan = self._batch.plan = plan
        self._batch.spread.earlier = 0 if scored else plan.sample
        return LabelRequest([plan.examples + p for p in prompts], self.options, scored=scored)

    def decide(self, rows: Sequence[RowResult]) -> list[RowResult]:
        return self._batch.decide(rows)

    @property
    def report(self):
        return self._batch.report


def describe_work(call, rows: int, plan) -> str:
    return (f"{PER_LABEL} worked example{'s' if PER_LABEL > 1 else ''} per label the model labelled itself in front of "
            "every row, then label scores minus their means behind them (the plan)")


def describe_first_pass(call) -> str:
    size = sample_rows(call.function.kind)
    return (f"a first pass over a spread sample of up to {size} rows chooses the worked examples, and the same sample "
            "behind them gives the label means")
