"""The adaptive label method (issue 43; ``method := 'adaptive'``, the default of a filter and a
2-label classify): the request's layout chosen per call on a first pass, without labels, and
rows decided without assuming balanced labels.

1. **First pass.** A spread sample of the relQuery's rows is scored in the candidate layouts
   (relserve/labels/layouts.py: the question with "yes"/"no", and the row alone after a
   field with the question's concept against its contrast), in two stages: every layout on a
   third of the sample, the two most informative on the rest.
2. **Choice.** The layout whose answers vary most with the rows wins: the mutual information
   between rows and answers over the sample (Sorensen et al., "An Information-theoretic Approach
   to Prompt Engineering Without Ground Truth Labels", ACL 2022): high when each row gets a
   confident answer and the answers differ between rows, low when every row gets the same
   answer or none is sure. No label is used.
3. **Examples.** Of the sampled rows, the one the chosen layout puts furthest towards each label
   becomes a worked example in front of every row (as ``bootstrap`` does; it makes the two crowds
   of margins stand further apart: on rotten_tomatoes at 15% positive the mixture's gain rose
   from 0.03 to 0.12 nats per row behind them).
4. **Every row** is scored behind the examples in the chosen layout: one relQuery. A relQuery of
   at most ``SAMPLE_ROWS`` rows is its own sample, shown no examples: the first pass scored every
   row in the chosen layout already, and those scores are its answers (no second relQuery).
5. **Decision** (relserve/labels/decide.py): the margins, pooled with the call's earlier
   ones, read as two crowds; the upper crowd's share is the estimated prior, each row's posterior
   its confidence.

The choice (layout and examples) is remembered per call and prefix-cache namespace, like
bootstrap's examples: a later relQuery of the same call runs no first pass.
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from relserve.backend.protocol import Backend
from relserve.functions import LLMCall
from relserve.labels.bootstrap import sample_indices
from relserve.labels.decide import FEW_ROWS, SURE, WEAK_SHARE, Reading, posteriors, read
from relserve.labels.information import categorical_information, mutual_information
from relserve.labels.interface import LabelContext, LabelRequest, LabelRun
from relserve.labels.keys import call_key
from relserve.labels.layouts import QUESTION_FIELD, Layout, LayoutRenderer, column_labels, layouts_for
from relserve.labels.mixture import Mixture
from relserve.results import RowResult
from relserve.template import format_value

#: rows the first pass scores at most (a spread sample of the relQuery's)
SAMPLE_ROWS = 24
#: the first pass's first stage scores every layout on this many of the sample (spread over it),
#: its second the ``FINALISTS`` most informative on the rest: 72 requests instead of 120 for five
#: layouts (the first pass sits on the statement's critical path; docs/quality.md)
FIRST_STAGE_ROWS = 8
FINALISTS = 2
#: rel_id prefix of a first pass's relQueries
FIRST_PASS_PREFIX = "adaptive-"
#: a longer row is not made an example (it would crowd the context of every row)
MAX_EXAMPLE_CHARS = 1000
#: calls whose choice and margins are remembered (the oldest are forgotten past this)
MAX_REMEMBERED = 256
#: margins of a call's earlier relQueries kept for the reading (the most recent)
POOL_SIZE = 1024


@dataclass(frozen=True)
class LayoutTrial:
    """How one layout did on the first pass."""

    layout: Layout
    #: mutual information between the sampled rows and the layout's answers (nats)
    information: float
    #: sampled rows it was measured on (a layout out at the first stage: that stage's rows)
    rows: int = 0


@dataclass(frozen=True)
class Choice:
    """A call's layout and examples, chosen by its first relQuery."""

    layout: Layout
    #: every candidate's trial, the chosen one among them
    trials: tuple[LayoutTrial, ...]
    #: the worked examples every row is shown ("" for none)
    examples: str
    #: rows the first pass scored
    sampled: int
    #: whether the sampled rows, scored in the chosen layout without examples, were every one
    #: sure of one answer (see ``sureness_is_the_rows``)
    sure_without_examples: bool = False

    @property
    def information(self) -> float:
        return next(t.information for t in self.trials if t.layout == self.layout)

    @property
    def sureness_is_the_rows(self) -> bool:
        """Whether margins every one sure of one answer can be taken at the model's word: the
        rows were shown no examples, or the model was sure of the sampled rows without them.
        Two examples (the row leaning most to each label, the second label's shown last) can pull
        every row to the label shown last: a stout filter's sampled margins of 0.0..+1.6 went to
        -6.6..-2.9 behind them."""
        return not self.examples or self.sure_without_examples


@dataclass(frozen=True)
class AdaptiveReport:
    """What the adaptive method did for one relQuery (EXPLAIN ANALYZE, the warning)."""

    choice: Choice
    reading: Reading
    #: the relQuery ran a first pass (False: the call's earlier choice was reused)
    first_pass: bool
    #: the answer the upper crowd stands for ("yes", or the first word of the layout)
    first: str = "yes"
    #: the call's own answers, first and second (a filter's "yes" and "no")
    own: tuple[str, str] = ("yes", "no")
    #: this relQuery's own rows (the reading may pool the call's earlier ones)
    rows: int = 0

    @property
    def guessing(self) -> bool:
        """Whether the answers are close to guesses: the model does not separate the rows."""
        return not self.reading.separates

    @property
    def all_alike(self) -> bool:
        """Whether every row got one answer, read from enough rows to say so once: a relQuery of
        ``FEW_ROWS`` rows, or the one whose rows first brought the call's reading to that many (so a
        call run row by row says it once, not on every row)."""
        reading = self.reading
        return (reading.rule == "all alike" and reading.rows >= FEW_ROWS
                and (self.rows >= FEW_ROWS or reading.rows - self.rows < FEW_ROWS))

    def warning(self, function: str, template: str) -> str | None:
        if self.all_alike:
            return self._all_alike_warning(function, template)
        if not self.guessing:
            return None
        first = self.first
        if self.reading.rule == "few rows":
            how = (f"with {self.reading.rows} rows and no earlier ones of this call, relserve cannot tell how many "
                   f"rows are {first!r}, and took the model's own answer for each")
        else:
            how = (f"the model's scores do not split these rows into two groups, so relserve cannot tell how many rows "
                   f"are {first!r}: it answered {first!r} for the {self.reading.prior:.1%} it scored highest")
        return (f"{function}({template!r}): {how} (layout {self.choice.layout.name!r}, information "
                f"{self.choice.information:.3f} nats); the answers near that boundary are close to guesses. Check a "
                "sample of the answers by hand, rank by llm_score(...) and choose your own cut, name what the question "
                "asks about more plainly (\"Is this review about sports?\"), or use a larger model.")

    def _all_alike_warning(self, function: str, template: str) -> str:
        # A strong model may rightly answer every row alike, but a small one does it for rows it
        # cannot tell apart (100 beer reviews, 7 of them stouts: "no" for all, none kept): the
        # answers stand as the model gave them, and the user is told that they are all one.
        answer = self.own[0] if self.reading.prior >= 0.5 else self.own[1]
        return (f"{function}({template!r}): the model answered {answer!r} for every one of the {self.reading.rows} "
                f"rows it scored for this call, sure of each (layout {self.choice.layout.name!r}, information "
                f"{self.choice.information:.3f} nats). If some rows should get another answer, check a sample by hand, "
                "rank by llm_score(...) and choose your own cut, name what the question asks about more plainly, or "
                "use a larger model.")


@dataclass(frozen=True)
class _CallerRows:
    """A relQuery's rows in the caller's order (the first pass samples that order), and each
    prompt's place in it (ties between examples go to the earlier row)."""

    values: list[tuple]
    order: list[int]
    position: dict[int, int]

    @classmethod
    def of(cls, values: Sequence[tuple], first_rows: Sequence[int] | None) -> _CallerRows:
        firsts = first_rows if first_rows is not None else range(len(values))
        order = sorted(range(len(values)), key=lambda p: firsts[p])
        return cls(list(values), order, {p: k for k, p in enumerate(order)})


@dataclass(frozen=True)
class _SharedReading:
    """The reading of a cascade's first part, for its later parts (``LabelScope.reading``)."""

    pool_key: tuple
    reading: Reading
    mixture: Mixture | None
    #: the margins the reading was made from (a weak reading's boundary is their quantile)
    reference: tuple[float, ...]


@dataclass
class _Pool:
    margins: list[float] = field(default_factory=list)

    def add(self, margins: Sequence[float]) -> None:
        self.margins.extend(m for m in margins if math.isfinite(m))
        del self.margins[:-POOL_SIZE]


_choices: dict[tuple, Choice] = {}
_pools: dict[tuple, _Pool] = {}
_lock = threading.Lock()


def remembered(call: LLMCall, engine: Backend | None, model_id: str) -> Choice | None:
    with _lock:
        return _choices.get(call_key(call, engine, model_id))


def pooled_margins(call: LLMCall, engine: Backend | None, model_id: str) -> int:
    """How many margins of earlier relQueries of ``call`` a relQuery would be read with (0 when
    no earlier relQuery chose a layout)."""
    key = call_key(call, engine, model_id)
    with _lock:
        choice = _choices.get(key)
        if choice is None:
            return 0
        layout = choice.layout
        pool = _pools.get((key, layout.question, layout.field, layout.column or layout.labels, choice.examples))
        return len(pool.margins) if pool is not None else 0


def forget() -> None:
    """Forget every remembered choice and margin (tests, the benchmark between configurations)."""
    with _lock:
        _choices.clear()
        _pools.clear()


def first_pass_stages(sample: Sequence[int]) -> tuple[list[int], list[int]]:
    """The first pass's sampled rows split into its two stages: ``FIRST_STAGE_ROWS`` spread over
    the sample (every layout), and the rest (the finalists)."""
    first = [sample[k] for k in sample_indices(len(sample), FIRST_STAGE_ROWS)]
    chosen = set(first)
    return first, [i for i in sample if i not in chosen]


def margin(row: RowResult, layout: Layout, own: str | None = None) -> float:
    """The row's first-label score minus its second's; under a layout of a row's own value
    (``Layout.column``), the log-odds of ``own``, that value, among every value scored."""
    lp = row.label_logprobs or {}
    if layout.column is not None:
        if own not in lp:
            return math.nan
        return lp[own] - math.log(max(-math.expm1(lp[own]), 1e-12))
    a, b = layout.labels
    return lp[a] - lp[b] if a in lp and b in lp else math.nan


class AdaptiveRun(LabelRun):
    """One relQuery of a 2-label call under the adaptive method."""

    #: rows are decided once every row is scored
    holds = True

    def __init__(self, ctx: LabelContext) -> None:
        if len(ctx.values) != len(ctx.prompts):
            raise ValueError("the adaptive method lays rows out from their values: every prompt needs its row's values")
        self.call = ctx.call
        self.engine = ctx.engine
        self.model_id = ctx.model_id
        self.values = list(ctx.values)
        self.rel_id = ctx.rel_id or uuid.uuid4().hex[:8]
        #: the call's engine settings (system message, call key, ...), without its labels
        self.engine_options = {k: v for k, v in ctx.engine_options.items() if k != "choices"}
        self.render = LayoutRenderer(ctx.call)
        #: the whole relQuery this one is a part of (a cascade's), or None
        self.scope = ctx.scope
        self._first_rows = ctx.first_rows
        self.key = call_key(ctx.call, ctx.engine, ctx.model_id)
        self.choice: Choice | None = None
        #: the layout this relQuery runs: the choice's, with this relQuery's values as the labels
        #: of a layout of a row's own value
        self.layout: Layout | None = None
        self._report: AdaptiveReport | None = None
        self._first_pass = False
        #: per layout, the whole relQuery's rows the first pass scored in it (their index: the
        #: prompt's), kept until ``request`` has read them
        self._first_pass_rows: dict[Layout, dict[int, RowResult]] = {}

    @cached_property
    def whole(self) -> _CallerRows:
        """The rows the first pass samples: the whole relQuery's (only a relQuery that runs the
        first pass orders them)."""
        if self.scope is not None:
            return _CallerRows.of(self.scope.values, self.scope.first_rows)
        return _CallerRows.of(self.values, self._first_rows)

    @property
    def report(self) -> AdaptiveReport | None:
        return self._report

    # -- before the relQuery runs ------------------------------------------------------------

    def request(self) -> LabelRequest:
        prompts = self.prompts()
        return LabelRequest(prompts, self.scoring_options(), scored=self._scored_already())

    def _scored_already(self) -> dict[int, RowResult]:
        """Every row's score from the first pass, when it scored each one as the relQuery would:
        a relQuery that is its own sample (no cascade around it), shown no examples, each row
        scored in the chosen layout with its labels. Empty otherwise (one row missing is enough:
        the engine then scores them all, as one relQuery)."""
        rows, self._first_pass_rows = self._first_pass_rows.get(self.choice.layout, {}), {}
        if (not self._first_pass or self.scope is not None or self.choice.examples
                or self.layout != self.choice.layout or len(rows) != len(self.values)):
            return {}
        return {i: replace(r, index=i) for i, r in rows.items()}

    def prompts(self) -> list[str]:
        """The engine's prompts for every row (runs the first pass if the call has no choice yet).

        A relQuery of at most ``SAMPLE_ROWS`` rows with no earlier choice is its own sample: its
        first pass scores each row in the chosen layout among others, with no examples in front,
        and those scores answer it (``request``); its choice is not kept, so the call's first
        larger relQuery chooses with examples."""
        with _lock:
            self.choice = _choices.get(self.key)
        if self.choice is None:
            small = len(self.whole.values) <= SAMPLE_ROWS
            self.choice = self.first_pass(examples=not small)
            self._first_pass = True
            if self.choice.examples:  # none (a small relQuery, or every sampled row failed): not kept
                with _lock:
                    if len(_choices) >= MAX_REMEMBERED:
                        _choices.pop(next(iter(_choices)))
                    _choices[self.key] = self.choice
        self.layout = self._this_relquerys(self.choice.layout)
        examples = self.choice.examples if self.layout == self.choice.layout else ""
        return [examples + t for t in self.render.many(self.layout, self.values)]

    def _this_relquerys(self, layout: Layout) -> Layout:
        """``layout`` with this relQuery's values as its labels when they are a row's own
        values; the question when this relQuery's values cannot be labels."""
        if layout.column is None:
            return layout
        labels = column_labels(self.call, self.values)
        if labels is None:
            return Layout(True, QUESTION_FIELD, tuple(self.call.choices or ()))
        return replace(layout, labels=labels)

    def _own(self, layout: Layout, values: tuple) -> str | None:
        """A row's own value of a layout's column (None for the other layouts)."""
        if layout.column is None:
            return None
        v = values[self.call.template.columns.index(layout.column)]
        return format_value(v).strip() if v is not None else None

    def scoring_options(self) -> dict[str, object]:
        """The ``RelQuery`` settings that score the chosen layout's words."""
        return {"choices": list(self.layout.labels), "score_labels": True, "prompt_shape": "completion",
                "answer_field": self.layout.answer_field}

    def first_pass(self, examples: bool = True) -> Choice:
        """Score a spread sample in the layouts, choose the most informative, take its examples
        (``examples`` False: none). In two stages: every layout on ``FIRST_STAGE_ROWS`` of the
        sample, then the ``FINALISTS`` most informative on the rest of it."""
        whole = self.whole
        layouts = layouts_for(self.call, whole.values)
        sample = [whole.order[k] for k in sample_indices(len(whole.values), SAMPLE_ROWS)]
        first, second = first_pass_stages(sample)
        margins_of = self._score_layouts(layouts, first, "")
        informative = [self._information(layout, ms) for layout, ms in zip(layouts, margins_of)]
        # the earlier layout (the question first) wins a tie, at either stage
        ranked = sorted(range(len(layouts)), key=lambda k: (-round(informative[k], 9), k))
        finalists = sorted(ranked[:FINALISTS]) if second else []
        for k, ms in zip(finalists, self._score_layouts([layouts[k] for k in finalists], second, "b")):
            margins_of[k] = {**margins_of[k], **ms}
            informative[k] = self._information(layouts[k], margins_of[k])
        trials = [LayoutTrial(layout, info, len(ms)) for layout, info, ms in zip(layouts, informative, margins_of)]
        best = max(finalists or range(len(layouts)), key=lambda k: (round(informative[k], 9), -k))
        layout = layouts[best]
        shown = self._examples(layout, margins_of[best]) if examples else ""
        sampled = list(margins_of[best].values())
        return Choice(layout, tuple(trials), shown, len(sample),
                      bool(sampled) and (min(sampled) >= SURE or max(sampled) <= -SURE))

    def _information(self, layout: Layout, margins: Mapping[int, float]) -> float:
        """How much the layout's answers tell the sampled rows apart. A layout of a row's own
        value answers which of the column's values a row is: its information is over that
        answer, once per distinct row text (the pairs of a join's left row are one text), not
        over each pair's own value against the rest, which is high whenever the model is sure
        of some value, right or wrong (a join of 40 products with 4 departments: "Sentiment:"
        0.26 nats against "Category:" 0.30 that way, 0.26 against 0.61 over the answer; F1 0.44
        against 0.61)."""
        if layout.column is None:
            return mutual_information(list(margins.values()))
        by_text: dict[str, Mapping[str, float]] = {}
        for i, row in self._first_pass_rows.get(layout, {}).items():
            if i in margins:
                by_text.setdefault(self.render(layout, self.whole.values[i]), row.label_logprobs)
        return categorical_information(list(by_text.values()))

    def _score_layouts(self, layouts: Sequence[Layout], rows: Sequence[int], stage: str) -> list[dict[int, float]]:
        """Each layout's margin of each of the whole relQuery's ``rows`` (one relQuery per layout,
        submitted together: they share each row's text, which the prefix cache holds)."""
        from relserve.relquery import RelQuery

        if not rows:
            return [{} for _ in layouts]
        values = self.whole.values
        handles = []
        for k, layout in enumerate(layouts):
            texts = [self.render(layout, values[i]) for i in rows]
            rq = RelQuery.from_prompts(texts, **{**self.engine_options, "choices": list(layout.labels),
                                                 "score_labels": True, "prompt_shape": "completion",
                                                 "answer_field": layout.answer_field},
                                       rel_id=f"{FIRST_PASS_PREFIX}{self.rel_id}-{k}{stage}")
            handles.append(self.engine.submit(rq))
        out = []
        for layout, handle in zip(layouts, handles):
            scored = {rows[r.index]: r for r in handle.result().rows if r.error is None and r.label_logprobs is not None}
            self._first_pass_rows.setdefault(layout, {}).update(scored)
            ms = {i: margin(r, layout, self._own(layout, values[i])) for i, r in scored.items()}
            out.append({i: m for i, m in ms.items() if math.isfinite(m)})
        return out

    def _examples(self, layout: Layout, margins: Mapping[int, float]) -> str:
        """The sampled row furthest towards each label, as "<row>\\n<field>: <word>" blocks."""
        values, position = self.whole.values, self.whole.position
        fit = {i: m for i, m in margins.items() if len(self.render(layout, values[i])) <= MAX_EXAMPLE_CHARS}
        if len(fit) < 2 or layout.column is not None:  # (a row's own value as its label: no examples)
            return ""
        top = max(fit, key=lambda i: (fit[i], -position[i]))
        bottom = min(fit, key=lambda i: (fit[i], position[i]))
        return "".join(f"{self.render(layout, values[i])}\n{layout.answer_field} {word}\n\n"
                       for i, word in ((top, layout.labels[0]), (bottom, layout.labels[1])))

    # -- once every row is scored ------------------------------------------------------------

    def decide(self, rows: Sequence[RowResult]) -> list[RowResult]:
        """Every scored row with its label (the call's own: "yes"/"no" for a filter) and its
        confidence (the probability of the label given)."""
        layout = self.layout
        own = tuple(self.call.choices or ())
        ms = [margin(r, layout, self._own(layout, self.values[r.index])) for r in rows]
        # margins read together must come from the same layout behind the same examples (a
        # layout of a row's own value: whatever values are its labels)
        pool_key = (self.key, layout.question, layout.field, layout.column or layout.labels, self.choice.examples)
        shared = self.scope.reading if self.scope is not None else None
        if isinstance(shared, _SharedReading) and shared.pool_key == pool_key:
            # a later part of a cascade: decided as its first part was; its margins are not a
            # sample of the call's rows, so they are not pooled either
            reading = shared.reading
            ps = posteriors(ms, reading, shared.mixture, shared.reference)
        else:
            reading, ps = self._read_with_pool(pool_key, ms)
        self._report = AdaptiveReport(self.choice, reading, self._first_pass,
                                      own[0] if layout.column is not None else layout.labels[0],
                                      (own[0], own[1]), len(rows))
        out = []
        for r, p in zip(rows, ps):
            first = p > 0.5
            out.append(replace(r, text=own[0] if first else own[1], confidence=p if first else 1 - p))
        return out

    def _one_crowd_share(self) -> float:
        """The share of rows answered with the first label where the margins form one crowd:
        ``WEAK_SHARE``, or under a layout of a row's own value (a join's "which of these k
        values is it?") one in k, each row's one answer among its k pairs."""
        labels = self.layout.labels
        return 1 / len(labels) if self.layout.column is not None and len(labels) >= 2 else WEAK_SHARE

    def _read_with_pool(self, pool_key: tuple, ms: list[float]) -> tuple[Reading, list[float]]:
        """Read this relQuery's margins pooled with the call's earlier ones (and keep them for
        the later ones, and for a cascade's later parts); each row's posterior."""
        with _lock:
            pool = _pools.pop(pool_key, None) or _Pool()
            earlier = list(pool.margins)
        # sureness the examples alone gave is read as a ranking, like any other margins
        reading, mixture = read(earlier + ms, all_alike=self.choice.sureness_is_the_rows,
                                one_crowd_share=self._one_crowd_share())
        ps = posteriors(ms, reading, mixture, earlier + ms)
        if self.scope is not None:
            self.scope.reading = _SharedReading(pool_key, reading, mixture, tuple(earlier + ms))
        pool.add(ms)
        with _lock:
            _pools[pool_key] = pool
            if len(_pools) > MAX_REMEMBERED:
                _pools.pop(next(iter(_pools)))
        return reading, ps
