"""A call's label plan: how every row of an ``llm_filter`` / ``llm_classify`` call gets its label,
chosen once and kept like optimizer statistics (issue 62).

A plan is made from a sample of the first rows a call sees (its label method's first pass) and
holds everything a row's answer depends on besides the row's own scores: the request's layout,
the worked examples in front of every row, and the decision in score units (a boundary on a
2-label margin, or a correction per label). Each row is then decided alone, ``decide``: the
same row gets the same answer whichever rows share its table, whatever ran before, and in
whichever process, as long as the plan is the same. Plans are kept per model and prefix-cache
namespace (a server tenant) in relserve's home (relserve/labels/memory.py); EXPLAIN shows them.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum

from relserve.labels.layouts import Layout
from relserve.labels.mixture import Mixture


class PlanRule(StrEnum):
    """How a plan decides a row from its scores."""

    #: two crowds of margins stood apart in the sample: the boundary between them
    TWO_CROWDS = "two crowds"
    #: every sampled margin was sure of one answer: the model's own answer for each row
    ALL_ALIKE = "all alike"
    #: one crowd: no share of "yes" can be read from the margins, so each row is decided by the
    #: model's own scores calibrated without labels (``Calibration``), nothing assumed
    CALIBRATED = "calibrated"
    #: three labels or more: each label's score minus its mean over the sample (batch
    #: calibration; bootstrap behind its worked examples)
    LABEL_MEANS = "label means"
    #: each label's probability divided by the model's answer on content-free rows
    CONTENT_FREE = "content-free prior"
    #: the best-scored label, uncorrected
    SCORES = "scores"


class Calibration(StrEnum):
    """What a calibrated (one-crowd) boundary was read from."""

    #: the chosen layout's margin on content-free rows (Zhao et al. 2021)
    CONTENT_FREE = "content-free rows"
    #: the model's own answer in the chosen layout (a margin of 0)
    OWN_ANSWER = "the model's own answer"


@dataclass(frozen=True)
class LayoutTrial:
    """How one candidate layout did on the first pass."""

    layout: Layout
    #: mutual information between the sampled rows and the layout's answers (nats)
    information: float
    #: sampled rows it was measured on
    rows: int = 0
    #: mean rank agreement (Spearman) of its margins with the other candidates' over the sample
    agreement: float | None = None


@dataclass(frozen=True)
class Orientation:
    """Whether the chosen layout ranks the rows the way the question asks, read without labels."""

    #: the chosen layout's mean rank agreement with the other candidate layouts (-1..1)
    with_layouts: float | None
    #: the question's own yes/no margin on the chosen layout's top sampled rows minus on its
    #: bottom ones (> 0: the question agrees that the top rows are the "yes" ones)
    question_on_extremes: float | None

    @property
    def disagrees(self) -> str | None:
        """What disagrees with the chosen layout's ranking, in words (None: nothing does).

        The other layouts' ranking decides: the question's own yes/no ranks rows too poorly on a
        small model to warn alone (it leaned the other way on correctly ranked layouts, the demo's
        among them: docs/quality.md#when-the-answers-are-guesses-and-the-warning), so it is only
        named beside a disagreement of the layouts."""
        if self.with_layouts is None or self.with_layouts >= 0:
            return None
        said = [f"the other layouts rank the rows the other way (agreement {self.with_layouts:+.2f})"]
        if self.question_on_extremes is not None and self.question_on_extremes < -QUESTION_DISAGREES:
            said.append("the question itself answers 'yes' less often for the rows this layout ranks highest")
        return "; ".join(said)


#: the question's yes/no margin must lean this far (nats) the other way on the extremes before
#: it is said to disagree (its margins are noisy: a small model's yes/no ranks rows poorly)
QUESTION_DISAGREES = 0.25


@dataclass(frozen=True)
class LabelPlan:
    """How every row of a call gets its label (see the module's docstring)."""

    #: the label method that made the plan (relserve/labels/methods.LabelMethodName)
    method: str
    rule: PlanRule
    #: the call's labels (a filter's "yes", "no")
    labels: tuple[str, ...]
    #: the request's layout (the adaptive method); None: the call's own prompt shape
    layout: Layout | None = None
    #: worked examples in front of every row ("" for none)
    examples: str = ""
    #: 2 labels: a row is the first label when its margin is above this (score units, nats)
    boundary: float = 0.0
    #: 2 labels: how far from the boundary a margin must be to be a confident answer (the
    #: logistic's scale for the confidence); two crowds read the mixture instead
    spread: float = 1.0
    mixture: Mixture | None = None
    calibration: Calibration | None = None
    #: 3 labels or more: what is subtracted from each label's score before the best is picked
    offsets: tuple[tuple[str, float], ...] = ()
    #: the share of the sampled rows given the first label (a filter's kept share: the
    #: selectivity estimate of the planner)
    share: float = 0.5
    #: rows the plan was read from
    sample: int = 0
    #: every candidate layout's first-pass trial (the adaptive method)
    trials: tuple[LayoutTrial, ...] = ()
    orientation: Orientation | None = None
    #: why the answers are close to guesses, in words (None: they are not)
    caveat: str | None = None
    #: made from a statement of fewer rows than a plan needs (``resolution.MIN_PLAN_ROWS``): the
    #: call's small statements use it, and its first statement of enough rows replaces it
    provisional: bool = False

    # -- one row's answer ---------------------------------------------------------------------

    def margin(self, scores: Mapping[str, float], own: str | None = None) -> float:
        """A 2-label row's margin: its first label's score minus its second's; under a layout of a
        row's own value (``Layout.column``), the log-odds of ``own``, that value, among every
        value scored."""
        layout = self.layout
        if layout is not None and layout.column is not None:
            if own not in scores:
                return math.nan
            return scores[own] - math.log(max(-math.expm1(scores[own]), 1e-12))
        a, b = layout.labels if layout is not None else self.labels[:2]
        return scores[a] - scores[b] if a in scores and b in scores else math.nan

    def decide(self, scores: Mapping[str, float], own: str | None = None) -> tuple[str, float]:
        """One row's label and its confidence (the probability of that label), from its scores
        alone (``own``: its value under a layout of a row's own value)."""
        if len(self.labels) == 2 and self.rule not in (PlanRule.LABEL_MEANS, PlanRule.CONTENT_FREE, PlanRule.SCORES):
            layout = self.layout
            if layout is not None and layout.column is not None and self.rule is PlanRule.CALIBRATED:
                # which of the join's values the row is: its own value when the model scores it
                # highest (each left row's one partner; nothing assumed about how many match)
                if own not in scores:
                    return self.labels[1], 0.5
                p = probabilities(scores)[own]
                top = max(scores, key=lambda v: (scores[v], v == own))
                return (self.labels[0], max(p, 0.5)) if top == own else (self.labels[1], 1 - p)
            p = self.probability(self.margin(scores, own))
            return (self.labels[0], p) if p > 0.5 else (self.labels[1], 1 - p)
        offsets = dict(self.offsets)
        corrected = {label: scores[label] - offsets.get(label, 0.0) for label in scores}
        order = list(scores)
        best = max(order, key=lambda label: (round(corrected[label], 9), scores[label], -order.index(label)))
        top = max(corrected.values())
        total = sum(math.exp(v - top) for v in corrected.values())
        return best, math.exp(corrected[best] - top) / total

    def probability(self, margin: float) -> float:
        """The probability of the first label for a 2-label margin: above one half exactly when
        the margin is above the boundary."""
        if not math.isfinite(margin):
            return 0.5
        if self.mixture is not None:
            p = self.mixture.posterior(margin)
            # the mixture's own half point is the boundary up to its numerics: hold it to the
            # stored boundary so that the answer is exactly ``margin > boundary``
            if (p > 0.5) != (margin > self.boundary):
                return math.nextafter(0.5, 1.0) if margin > self.boundary else 0.5
            return p
        z = max(min((margin - self.boundary) / (self.spread or 1.0), 50.0), -50.0)
        p = 1 / (1 + math.exp(-z))
        if margin > self.boundary and p <= 0.5:
            return math.nextafter(0.5, 1.0)
        return p if margin > self.boundary else min(p, 0.5)

    # -- what it is -----------------------------------------------------------------------------

    @property
    def id(self) -> str:
        """A short digest of everything that decides a row (what the result cache keys answers
        by: a new plan's answers are not an old plan's)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    def decides_as(self, other: LabelPlan) -> bool:
        """Whether ``other`` is this plan, a provisional mark aside (the plan a relQuery made,
        kept as provisional, still decides its rows as made)."""
        return replace(self, provisional=False) == replace(other, provisional=False)

    @property
    def separates(self) -> bool:
        """Whether the model's scores split the sampled rows (two crowds, or all alike)."""
        return self.rule in (PlanRule.TWO_CROWDS, PlanRule.ALL_ALIKE)

    def describe(self) -> str:
        """One line for EXPLAIN: the layout, the rule and the boundary."""
        parts = [f"method {self.method}"]
        if self.layout is not None:
            parts.append(f"layout {self.layout.name!r}")
        if self.examples:
            parts.append(f"{self.examples.count(chr(10) + chr(10))} worked examples")
        if len(self.labels) == 2 and self.rule in (PlanRule.TWO_CROWDS, PlanRule.CALIBRATED, PlanRule.ALL_ALIKE):
            how = self.rule.value
            if self.calibration is not None:
                how += f" against {self.calibration.value}"
            parts.append(f"{self.labels[0]!r} above a margin of {self.boundary:+.3f} ({how})")
            parts.append(f"{self.share:.1%} of the {self.sample} sampled rows {self.labels[0]!r}")
        else:
            parts.append(f"{self.rule.value} over {self.sample} sampled rows")
        if self.provisional:
            parts.append("provisional (made from a statement of too few rows: the call's first statement of "
                         "enough rows replaces it)")
        return ", ".join(parts)

    def to_json(self) -> str:
        d = _plain(asdict(self))
        if not self.provisional:
            del d["provisional"]  # (so a plan kept before the field existed keeps its id)
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> LabelPlan:
        d = json.loads(text)
        layout = _layout(d.get("layout"))
        return cls(
            method=d["method"], rule=PlanRule(d["rule"]), labels=tuple(d["labels"]), layout=layout,
            examples=d.get("examples", ""), boundary=float(d.get("boundary", 0.0)), spread=float(d.get("spread", 1.0)),
            mixture=Mixture(**d["mixture"]) if d.get("mixture") else None,
            calibration=Calibration(d["calibration"]) if d.get("calibration") else None,
            offsets=tuple((str(k), float(v)) for k, v in d.get("offsets", ())),
            share=float(d.get("share", 0.5)), sample=int(d.get("sample", 0)),
            trials=tuple(LayoutTrial(_layout(t["layout"]), float(t["information"]), int(t.get("rows", 0)),
                                     t.get("agreement")) for t in d.get("trials", ())),
            orientation=Orientation(**d["orientation"]) if d.get("orientation") else None,
            caveat=d.get("caveat"), provisional=bool(d.get("provisional", False)),
        )

    def with_labels(self, labels: Sequence[str]) -> LabelPlan:
        """The plan with a layout of a row's own value scored on another relQuery's values."""
        if self.layout is None or self.layout.column is None:
            return self
        return replace(self, layout=replace(self.layout, labels=tuple(labels)))


def probabilities(scores: Mapping[str, float]) -> dict[str, float]:
    """Label scores (log-probabilities) as probabilities over the labels."""
    top = max(scores.values())
    exp = {label: math.exp(v - top) for label, v in scores.items()}
    total = sum(exp.values())
    return {label: v / total for label, v in exp.items()}


def _layout(d: Mapping[str, object] | None) -> Layout | None:
    if not d:
        return None
    return Layout(bool(d["question"]), str(d["field"]), tuple(d["labels"]), d.get("column"))


def _plain(v: object) -> object:
    """``asdict`` output as JSON: tuples as lists, floats kept exactly (repr round-trips)."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


@dataclass(frozen=True)
class PlanKey:
    """Whose plan: a call's template and settings, under one model, in one prefix-cache namespace
    (a server tenant; None: the process's own)."""

    namespace: str | None
    model_id: str
    #: the call's per-template identity (relserve/labels/keys.template_key) and the method it
    #: asks for, as canonical JSON
    call: str
    #: how a listing names it: the function and its template
    function: str = ""
    template: str = ""
    labels: tuple[str, ...] = field(default=())

    @property
    def digest(self) -> str:
        return hashlib.sha256(f"{self.model_id}\0{self.call}".encode()).hexdigest()[:32]
