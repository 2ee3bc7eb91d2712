"""The adaptive label method (issues 43, 62; ``method := 'adaptive'``, the default of a filter and
a 2-label classify): the request's layout and the decision boundary chosen once per call from a
sample of its rows, without labels, and kept as the call's label plan (relserve/labels/plan.py).

The plan's first pass, over a spread sample of the first relQuery's rows (in the caller's order):

1. **Layouts.** The candidates of relserve/labels/layouts.py (the question answered yes/no, and
   the row alone after a field, answered with the question's concept or its contrast) are scored
   in two stages: every layout on ``FIRST_STAGE_ROWS`` of the sample, the ``FINALISTS`` most
   informative on the rest.
2. **Choice.** The layout whose answers vary most with the rows wins: the mutual information
   between rows and answers over the sample (Sorensen et al., ACL 2022), among the layouts whose
   ranking of the rows does not run against the other candidates' (``Orientation``: a layout can
   be as informative ranking the rows backwards).
3. **Boundary.** The chosen layout's sampled margins, and its margins on content-free rows, give
   the boundary (relserve/labels/decide.py): between two crowds where the model separates the
   rows, else the model's own score calibrated against content-free input.

Every row is then decided alone against the plan, as it finishes. A relQuery that makes a plan
from all of its rows (at most ``SAMPLE_ROWS``) is answered by the first pass itself.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from relserve.functions import LLMCall
from relserve.labels.batch import sample_indices
from relserve.labels.concept import (
    PROPOSAL_FIELD,
    Concept,
    concept_column,
    concept_of,
    proposal_prompt,
    proposal_words,
    proposed_concept,
)
from relserve.labels.decide import SURE, read_boundary
from relserve.labels.information import categorical_information, mutual_information
from relserve.labels.interface import LabelContext, LabelRequest, LabelRun
from relserve.labels.layouts import QUESTION_FIELD, Layout, LayoutRenderer, column_labels, layouts_for
from relserve.labels.plan import LabelPlan, LayoutTrial, Orientation, PlanRule
from relserve.labels.prior import CONTENT_FREE
from relserve.results import RowResult
from relserve.template import format_value

#: rows the layouts are tried on at most (a spread sample of the relQuery's)
SAMPLE_ROWS = 24
#: rows the boundary is read from at most (a spread sample, scored as the rows are: in the
#: chosen layout behind the worked examples; their scores are those rows' answers)
PLAN_ROWS = 64
#: a longer row is not made an example (it would crowd the context of every row)
MAX_EXAMPLE_CHARS = 1000
#: the first stage scores every layout on this many of the sample (spread over it), the second
#: the ``FINALISTS`` most informative on the rest (the first pass sits on the statement's critical
#: path: every layout on every sampled row would double it)
FIRST_STAGE_ROWS = 8
FINALISTS = 2
#: rel_id prefix of a first pass's relQueries
FIRST_PASS_PREFIX = "adaptive-"


def first_pass_size(call: LLMCall, rows: int) -> int:
    """At most how many scoring requests a plan's first pass over ``rows`` rows sends before the
    rows (the boundary's sample is rows of the relQuery, scored once)."""
    proposal = call.function.kind == "filter" and proposal_prompt(call.template) is not None
    # the layouts of a concept the model proposes (or of a question about a row's own value) are
    # known only once it runs: counted as if there were some
    layouts = len(layouts_for(call, proposed=_ANY_CONCEPT if proposal else None))
    sampled = min(rows, SAMPLE_ROWS)
    first = min(sampled, FIRST_STAGE_ROWS)
    return int(proposal) + first * layouts + (sampled - first) * min(layouts, FINALISTS) + len(CONTENT_FREE)


#: stands for whatever concept the model may propose (its words are no lexicon concept's)
_ANY_CONCEPT = Concept("", "")


@dataclass(frozen=True)
class AdaptiveReport:
    """What the adaptive method did for one relQuery (EXPLAIN ANALYZE, the warning)."""

    plan: LabelPlan
    #: the relQuery made the plan (False: the call's kept plan)
    first_pass: bool
    #: the call's own answers, first and second (a filter's "yes" and "no")
    own: tuple[str, str] = ("yes", "no")
    #: this relQuery's rows
    rows: int = 0
    #: the answers this relQuery's rows got so far (first label, second)
    answered: list[int] = field(default_factory=lambda: [0, 0])

    @property
    def guessing(self) -> bool:
        """Whether the answers are close to guesses: the model does not separate the rows."""
        return not self.plan.separates

    def warning(self, function: str, template: str) -> str | None:
        plan = self.plan
        layout = plan.layout.name if plan.layout is not None else "the question"
        trial = next((t for t in plan.trials if t.layout == plan.layout), None)
        info = f", information {trial.information:.3f} nats" if trial is not None else ""
        backwards = plan.orientation.disagrees if plan.orientation is not None else None
        if plan.rule is PlanRule.ALL_ALIKE:
            # said by the statement that made the plan, when its own rows are all alike too
            if not self.first_pass or self.rows < 16 or min(self.answered) > 0:
                return None
            answer = self.own[0] if plan.share >= 0.5 else self.own[1]
            return (f"{function}({template!r}): the model answered {answer!r} for every one of the {plan.sample} "
                    f"rows it sampled for this call, sure of each (layout {layout!r}{info}). If some rows should get "
                    "another answer, check a sample by hand, rank by llm_score(...) and choose your own cut, name what "
                    "the question asks about more plainly, or use a larger model.")
        said = []
        if self.guessing:
            how = plan.calibration.value if plan.calibration is not None else "content-free rows"
            said.append(f"the model's scores do not split these rows into two groups, so relserve cannot tell how many "
                        f"rows are {self.own[0]!r}: each row was answered by the model's own score against its score on "
                        f"{how} (layout {layout!r}{info}; {plan.share:.0%} of the {plan.sample} sampled rows "
                        f"{self.own[0]!r}), not by a share picked in advance; the answers near that boundary are close "
                        "to guesses")
        if backwards is not None:
            said.append(f"the answers may be backwards: {backwards}")
        if not said:
            return None
        return (f"{function}({template!r}): " + "; ".join(said) + ". Check a sample of the answers by hand, rank by "
                "llm_score(...) and choose your own cut, name what the question asks about more plainly (\"Is this "
                "review about sports?\"), or use a larger model.")


@dataclass(frozen=True)
class _CallerRows:
    """A relQuery's rows in the caller's order (the first pass samples that order), and each
    prompt's place in it."""

    values: list[tuple]
    order: list[int]

    @classmethod
    def of(cls, values: Sequence[tuple], first_rows: Sequence[int] | None) -> _CallerRows:
        firsts = first_rows if first_rows is not None else range(len(values))
        return cls(list(values), sorted(range(len(values)), key=lambda p: firsts[p]))


def first_pass_stages(sample: Sequence[int]) -> tuple[list[int], list[int]]:
    """The first pass's sampled rows split into its two stages: ``FIRST_STAGE_ROWS`` spread over
    the sample (every layout), and the rest (the finalists)."""
    first = [sample[k] for k in sample_indices(len(sample), FIRST_STAGE_ROWS)]
    chosen = set(first)
    return first, [i for i in sample if i not in chosen]


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """The rank correlation of two layouts' margins over the same rows (None: fewer than 3)."""
    pairs = [(x, y) for x, y in zip(a, b) if math.isfinite(x) and math.isfinite(y)]
    if len(pairs) < 3:
        return None

    def ranks(v: Sequence[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        out = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    rx, ry = ranks([p[0] for p in pairs]), ranks([p[1] for p in pairs])
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((x - mx) * (y - my) for x, y in zip(rx, ry))
    sxx, syy = sum((x - mx) ** 2 for x in rx), sum((y - my) ** 2 for y in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None


class AdaptiveRun(LabelRun):
    """One relQuery of a 2-label call under the adaptive method."""

    holds = False

    def __init__(self, ctx: LabelContext) -> None:
        if len(ctx.values) != len(ctx.prompts):
            raise ValueError("the adaptive method lays rows out from their values: every prompt needs its row's values")
        self.ctx = ctx
        self.call = ctx.call
        self.values = list(ctx.values)
        self.rel_id = ctx.rel_id or uuid.uuid4().hex[:8]
        #: the call's engine settings (system message, call key, ...), without its labels
        self.engine_options = {k: v for k, v in ctx.engine_options.items() if k != "choices"}
        self.render = LayoutRenderer(ctx.call)
        self._report: AdaptiveReport | None = None
        #: the boundary's sample as the first pass scored it (index: the whole relQuery's)
        self._plan_rows: dict[int, RowResult] = {}
        #: per layout, the rows the first pass scored in it (their index: the whole relQuery's)
        self._scored: dict[Layout, dict[int, RowResult]] = {}

    @cached_property
    def whole(self) -> _CallerRows:
        """The rows the first pass samples: the whole relQuery's when this one is a part of it (a
        cascade's), else this relQuery's."""
        scope = self.ctx.scope
        if scope is not None:
            return _CallerRows.of(scope.values, scope.first_rows)
        return _CallerRows.of(self.values, self.ctx.first_rows)

    @property
    def report(self) -> AdaptiveReport | None:
        return self._report

    # -- before the relQuery runs ------------------------------------------------------------

    def request(self) -> LabelRequest:
        plan, self.plan_kept = self.ctx.given_plan()
        made = plan is None
        if made:
            mine = self.make_plan()
            plan, self.plan_kept = self.ctx.offer_plan(mine, len(self.whole.values))
            # (another process's plan kept first: the sample was not scored as its rows are)
            made = plan.decides_as(mine)
            self._made_labels = mine.layout.labels
        self.plan = plan.with_labels(self._column_labels(plan)) if plan.layout.column is not None else plan
        own = tuple(self.call.choices or ())
        self._report = AdaptiveReport(self.plan, made, (own[0], own[1]), len(self.values))
        layout = self.plan.layout
        prompts = [self.plan.examples + t for t in self.render.many(layout, self.values)]
        return LabelRequest(prompts, self.scoring_options(), scored=self._scored_already(made))

    def _column_labels(self, plan: LabelPlan) -> tuple[str, ...]:
        labels = column_labels(self.call, self.values)
        return labels if labels is not None else plan.layout.labels

    def _scored_already(self, made: bool) -> dict[int, RowResult]:
        """The rows of this relQuery the plan's sample scored as the relQuery scores them (the
        plan made here, no cascade around it, the layout with these labels): their scores are
        the rows'. The first stages' rows, scored in other layouts or without the examples, are
        not."""
        rows, self._plan_rows, self._scored = self._plan_rows, {}, {}
        if not made or self.ctx.scope is not None or self.plan.layout.labels != self._made_labels:
            return {}
        return {i: replace(r, index=i) for i, r in rows.items()}

    def scoring_options(self) -> dict[str, object]:
        """The ``RelQuery`` settings that score the plan's layout's words."""
        layout = self.plan.layout
        return {"choices": list(layout.labels), "score_labels": True, "prompt_shape": "completion",
                "answer_field": layout.answer_field}

    def _own(self, values: tuple) -> str | None:
        """A row's own value of the plan's layout's column (None for the other layouts)."""
        layout = self.plan.layout
        if layout is None or layout.column is None:
            return None
        v = values[self.call.template.columns.index(layout.column)]
        return format_value(v).strip() if v is not None else None

    # -- the plan -----------------------------------------------------------------------------

    def make_plan(self) -> LabelPlan:
        """Score a spread sample in the candidate layouts, choose one, read its boundary."""
        whole = self.whole
        layouts = layouts_for(self.call, whole.values, self._proposed_concept())
        sample = [whole.order[k] for k in sample_indices(len(whole.values), SAMPLE_ROWS)]
        first, second = first_pass_stages(sample)
        margins_of = self._score_layouts(layouts, first, "")
        informative = [self._information(layout, ms) for layout, ms in zip(layouts, margins_of)]
        # the earlier layout (the question first) wins a tie, at either stage
        ranked = sorted(range(len(layouts)), key=lambda k: (-round(informative[k], 9), k))
        finalists = sorted(ranked[:FINALISTS]) if second else ranked[:FINALISTS]
        for k, ms in zip(finalists, self._score_layouts([layouts[k] for k in finalists], second, "b")):
            margins_of[k] = {**margins_of[k], **ms}
            informative[k] = self._information(layouts[k], margins_of[k])
        agreement = self._agreement(layouts, margins_of, first)
        best = self._choose(finalists, informative, agreement)
        layout = layouts[best]
        trials = tuple(LayoutTrial(lay, info, len(ms), agreement[k])
                       for k, (lay, info, ms) in enumerate(zip(layouts, informative, margins_of)))
        orientation = Orientation(agreement[best], self._question_on_extremes(layouts, margins_of, best, first))
        examples = self._examples(layout, margins_of[best])
        # the boundary's sample, scored as every row is (behind the examples), beside the
        # content-free rows behind the same examples
        plan_sample = [whole.order[k] for k in sample_indices(len(whole.values), PLAN_ROWS)]
        probes = self._submit_probes(layout, examples)
        self._plan_rows = self._score_rows(layout, examples, plan_sample)
        probe = LabelPlan("adaptive", PlanRule.CALIBRATED, ("yes", "no"), layout=layout)
        sampled = [probe.margin(r.label_logprobs, self._own_of(layout, whole.values[i]))
                   for i, r in self._plan_rows.items()]
        # sureness the examples alone gave (every row pulled to the label shown last) is read like
        # any other margins: only the model's sureness of the rows without them is taken at its word
        boundary = read_boundary(sampled, self._probe_margins(probes, layout),
                                 sureness_is_the_rows=not examples or sure_of_one_answer(margins_of[best].values()))
        if layout.column is not None and boundary.rule is not PlanRule.TWO_CROWDS:
            # a row's own value among the join's: the model's own answer (the value it scores
            # highest) is each left row's one partner, nothing assumed about how many match
            boundary = replace(boundary, value=0.0, calibration=None, rule=PlanRule.CALIBRATED)
        own = tuple(self.call.choices or ())
        plan = LabelPlan(
            method="adaptive", rule=boundary.rule, labels=(own[0], own[1]), layout=layout, examples=examples,
            boundary=boundary.value, spread=boundary.spread, mixture=boundary.mixture,
            calibration=boundary.calibration, share=boundary.share, sample=boundary.rows, trials=trials,
            orientation=orientation,
        )
        if layout.column is not None and self._plan_rows:
            # (a row's own value: its share is of the sampled pairs whose value the model put first)
            firsts = [plan.decide(r.label_logprobs, self._own_of(layout, whole.values[i]))[0] == own[0]
                      for i, r in self._plan_rows.items()]
            plan = replace(plan, share=sum(firsts) / len(firsts))
        return plan

    def _examples(self, layout: Layout, margins: Mapping[int, float]) -> str:
        """The sampled row furthest towards each label, as "<row>\n<field>: <word>" blocks (none
        under a layout of a row's own value)."""
        values = self.whole.values
        fit = {i: m for i, m in margins.items() if len(self.render(layout, values[i])) <= MAX_EXAMPLE_CHARS}
        if len(fit) < 2 or layout.column is not None:
            return ""
        position = {p: k for k, p in enumerate(self.whole.order)}
        top = max(fit, key=lambda i: (fit[i], -position[i]))
        bottom = min(fit, key=lambda i: (fit[i], position[i]))
        return "".join(f"{self.render(layout, values[i])}\n{layout.answer_field} {word}\n\n"
                       for i, word in ((top, layout.labels[0]), (bottom, layout.labels[1])))

    def _score_rows(self, layout: Layout, examples: str, rows: Sequence[int]) -> dict[int, RowResult]:
        """The whole relQuery's ``rows`` scored as the relQuery scores them (index: the whole's)."""
        values = self.whole.values
        rq = self._relquery([examples + self.render(layout, values[i]) for i in rows], layout,
                            f"{FIRST_PASS_PREFIX}{self.rel_id}-plan")
        return {rows[r.index]: r for r in self.ctx.engine.submit(rq).result().rows
                if r.error is None and r.label_logprobs is not None}

    def _proposed_concept(self) -> Concept | None:
        """What the model reads a "yes" to the filter's question as, when it adds a concept to the
        lexicon's (one short scoring request; relserve/labels/concept.py)."""
        template = self.call.template
        prompt = proposal_prompt(template)
        if self.call.function.kind != "filter" or prompt is None or concept_column(template) is not None:
            return None
        from relserve.relquery import RelQuery

        words = proposal_words(template)
        rq = RelQuery.from_prompts([prompt], **{**self.engine_options, "choices": words, "score_labels": True,
                                                "prompt_shape": "completion", "answer_field": PROPOSAL_FIELD},
                                   rel_id=f"{FIRST_PASS_PREFIX}{self.rel_id}-concept")
        rows = [r for r in self.ctx.engine.submit(rq).result().rows if r.error is None and r.label_logprobs]
        return proposed_concept(dict(rows[0].label_logprobs), concept_of(template)) if rows else None

    def _choose(self, finalists: Sequence[int], informative: Sequence[float], agreement: Sequence[float | None]) -> int:
        """The most informative finalist whose ranking does not run against the other layouts'
        (all of them do: the most informative)."""
        keep = [k for k in finalists if agreement[k] is None or agreement[k] >= 0] or list(finalists)
        return max(keep, key=lambda k: (round(informative[k], 9), -k))

    def _agreement(self, layouts: Sequence[Layout], margins_of: Sequence[Mapping[int, float]],
                   rows: Sequence[int]) -> list[float | None]:
        """Each layout's mean rank agreement with the other row-alone layouts over the first
        stage's rows, which every layout scored (None: none to compare with). The question layout
        is left out of the others: a small model's yes/no often ranks rows at random."""
        out: list[float | None] = []
        for k, layout in enumerate(layouts):
            others = [j for j, other in enumerate(layouts) if j != k and not other.question and other.column is None]
            if layout.column is not None:
                out.append(None)
                continue
            rhos = [spearman([margins_of[k].get(i, math.nan) for i in rows], [margins_of[j].get(i, math.nan) for i in rows])
                    for j in others]
            rhos = [r for r in rhos if r is not None]
            out.append(sum(rhos) / len(rhos) if rhos else None)
        return out

    def _question_on_extremes(self, layouts: Sequence[Layout], margins_of: Sequence[Mapping[int, float]], best: int,
                              rows: Sequence[int]) -> float | None:
        """The question's yes/no margin on the chosen layout's top quarter of the first stage's
        rows minus on its bottom quarter (None: the question is the chosen layout, or no rows)."""
        q = next((k for k, layout in enumerate(layouts) if layout.question), None)
        if q is None or q == best:
            return None
        chosen = [(margins_of[best][i], i) for i in rows if i in margins_of[best] and i in margins_of[q]]
        if len(chosen) < 4:
            return None
        chosen.sort()
        quarter = max(1, len(chosen) // 4)
        low = [margins_of[q][i] for _, i in chosen[:quarter]]
        high = [margins_of[q][i] for _, i in chosen[-quarter:]]
        return sum(high) / len(high) - sum(low) / len(low)

    def _information(self, layout: Layout, margins: Mapping[int, float]) -> float:
        """How much the layout's answers tell the sampled rows apart. A layout of a row's own
        value answers which of the column's values a row is: its information is over that
        answer, once per distinct row text, not over each pair's own value against the rest
        (high whenever the model is sure of some value, right or wrong)."""
        if layout.column is None:
            return mutual_information(list(margins.values()))
        by_text: dict[str, Mapping[str, float]] = {}
        for i, row in self._scored.get(layout, {}).items():
            if i in margins:
                by_text.setdefault(self.render(layout, self.whole.values[i]), row.label_logprobs)
        return categorical_information(list(by_text.values()))

    def _relquery(self, texts: Sequence[str], layout: Layout, rel_id: str):
        from relserve.relquery import RelQuery

        return RelQuery.from_prompts(list(texts), **{**self.engine_options, "choices": list(layout.labels),
                                                     "score_labels": True, "prompt_shape": "completion",
                                                     "answer_field": layout.answer_field}, rel_id=rel_id)

    def _score_layouts(self, layouts: Sequence[Layout], rows: Sequence[int], stage: str) -> list[dict[int, float]]:
        """Each layout's margin of each of the whole relQuery's ``rows`` (one relQuery per layout,
        submitted together: they share each row's text, which the prefix cache holds)."""
        if not rows:
            return [{} for _ in layouts]
        values = self.whole.values
        handles = [self.ctx.engine.submit(self._relquery([self.render(layout, values[i]) for i in rows], layout,
                                                         f"{FIRST_PASS_PREFIX}{self.rel_id}-{k}{stage}"))
                   for k, layout in enumerate(layouts)]
        out = []
        for layout, handle in zip(layouts, handles):
            scored = {rows[r.index]: r for r in handle.result().rows if r.error is None and r.label_logprobs is not None}
            self._scored.setdefault(layout, {}).update(scored)
            probe = LabelPlan("adaptive", PlanRule.CALIBRATED, ("yes", "no"), layout=layout)
            ms = {i: probe.margin(r.label_logprobs, self._own_of(layout, values[i])) for i, r in scored.items()}
            out.append({i: m for i, m in ms.items() if math.isfinite(m)})
        return out

    def _own_of(self, layout: Layout, values: tuple) -> str | None:
        if layout.column is None:
            return None
        v = values[self.call.template.columns.index(layout.column)]
        return format_value(v).strip() if v is not None else None

    def _submit_probes(self, layout: Layout, examples: str):
        """The content-free rows of the layout (every placeholder "N/A", "", "[MASK]") behind the
        examples, submitted to run beside the boundary's sample (None under a layout of a row's
        own value: there is no such row)."""
        if layout.column is not None:
            return None
        n = len(self.call.template.columns)
        texts = [examples + self.render(layout, (value,) * n) for value in CONTENT_FREE]
        return self.ctx.engine.submit(self._relquery(texts, layout, f"{FIRST_PASS_PREFIX}{self.rel_id}-cf"))

    def _probe_margins(self, handle, layout: Layout) -> list[float]:
        if handle is None:
            return []
        probe = LabelPlan("adaptive", PlanRule.CALIBRATED, ("yes", "no"), layout=layout)
        rows = handle.result().rows
        return [probe.margin(r.label_logprobs) for r in rows if r.error is None and r.label_logprobs is not None]

    # -- each row as it finishes ------------------------------------------------------------------

    def decide(self, rows: Sequence[RowResult]) -> list[RowResult]:
        """Every scored row with its label (the call's own: "yes"/"no" for a filter) and its
        confidence (the probability of the label given), from its scores and the plan alone."""
        own = tuple(self.call.choices or ())
        out = []
        for r in rows:
            label, confidence = self.plan.decide(r.label_logprobs, self._own(self.values[r.index]))
            first = label == own[0]
            if self._report is not None:
                self._report.answered[0 if first else 1] += 1
            out.append(replace(r, text=own[0] if first else own[1], confidence=confidence))
        return out


def describe_work(call: LLMCall, rows: int, plan: LabelPlan | None) -> str:
    return "the request's layout and a boundary on each row's margin, chosen once per call without labels (the plan)"


def describe_first_pass(call: LLMCall) -> str:
    names = "; ".join(layout.name for layout in layouts_for(call))
    return (f"this relQuery's first pass scores a spread sample of up to {SAMPLE_ROWS} rows in the layouts {names}, "
            "keeps the most informative one and reads its boundary")


def sure_of_one_answer(margins: Sequence[float]) -> bool:
    """Whether every margin is at least ``SURE`` of one and the same answer."""
    xs = [m for m in margins if math.isfinite(m)]
    return bool(xs) and (min(xs) >= SURE or max(xs) <= -SURE)


__all__ = ["AdaptiveReport", "AdaptiveRun", "FIRST_PASS_PREFIX", "QUESTION_FIELD", "SAMPLE_ROWS", "first_pass_size",
           "first_pass_stages"]
