"""One filter relQuery run as a cascade for recall / precision targets (``cascade_recall``,
``cascade_precision``: relserve/cascade/targets.py), in the steps its drivers run
(``cascade_drive.run_cascade``, the server's jobs), each LLM step a relQuery of the executor:

1. ``sample()``: the training rows, a uniform random sample of the prompts, for the LLM;
2. ``learn()``: embed every row, train the proxy on the training answers, score the rest rows
   (its probability of "yes", Platt-calibrated: relserve/cascade/calibration.py) and plan the
   audit from those scores (relserve/cascade/audit.py);
3. ``audit()``: the audit's rows for the LLM: the census and the strata's drawn rows;
4. ``choose()``: the proxy's "no" and "yes" zones from the audit's answers (relserve/cascade/zones.py);
5. ``proxy_answers()``: the zones' rows the audit did not draw; ``remainder()``: every other rest
   row, for the LLM.

The agreement cascade (cascade_runner.Cascade) has the same steps, with no audit of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from relserve.cascade import audit, calibration, embedding, proxy, zones
from relserve.cascade.policy import CascadePlan
from relserve.cascade.report import CascadeReport, TargetFigures
from relserve.cascade.targets import Targets
from relserve.planner.cascade_runner import (
    PROXY,
    label_of,
    label_scope,
    prompt_of,
    release_prefetch,
    split,
    start_prefetch,
    stop_prefetch,
    subset,
)
from relserve.planner.planned_rows import PlannedRows
from relserve.results import RowResult

#: the filter's labels as the proxy learns them
YES, NO = "yes", "no"


@dataclass
class TargetCascade:
    """The recall / precision cascade of one filter ``PlannedRows`` (its prompts left to run)."""

    rows: PlannedRows
    plan: CascadePlan
    #: the random split's and the audit's seed (the call's ``seed``)
    seed: int = 0
    embedder: embedding.Embedder = field(default_factory=embedding.default_embedder)

    def __post_init__(self) -> None:
        targets = self.plan.targets
        if targets is None:
            raise ValueError("a targets cascade needs a recall or precision target")
        self.targets: Targets = targets
        self.labels: tuple[str, ...] = tuple(self.rows.call.choices or (YES, NO))
        self.parts = split(len(self.rows.prompts), self.plan.train, 0, self.seed)
        self._prompt_of = prompt_of(self.rows)
        #: prompt index -> the LLM's label, for the training and audit rows it answered
        self.answers: dict[int, str] = {}
        #: after ``learn``: the proxy's calibrated probability of "yes" per rest row (parts.rest order)
        self.scores = np.zeros(0)
        self.design: audit.AuditDesign | None = None
        self.choice: zones.ZoneChoice | None = None
        self._no = np.zeros(0, dtype=np.int64)
        self._yes = np.zeros(0, dtype=np.int64)
        self.label_scope = label_scope(self.rows)
        t = self.targets
        self.report = CascadeReport(0.0, len(self.rows.prompts), len(self.parts.train), 0,
                                    confidence=1.0 - t.failure, embedder=self.embedder.name, seed=self.seed,
                                    targets=TargetFigures(t.recall, t.precision, t.failure))

    # ------------------------------------------------------------------ 1. the training rows

    def start_prefetch(self) -> None:
        """Embed the rows on a background thread while the training rows run (relserve/cascade/prefetch.py)."""
        texts = embedding.row_texts(self.rows.prompts)
        self.embedder = start_prefetch(self.embedder, [texts[p] for p in self.parts.train + self.parts.rest])

    def stop_prefetch(self) -> None:
        stop_prefetch(self)

    def sample(self) -> PlannedRows:
        return subset(self.rows, self.parts.train, self.label_scope)

    def record(self, row: RowResult) -> None:
        """One answered row of the training sample or the audit."""
        if row.error is not None or row.value is None:
            return
        label = label_of(self.rows.call, self.labels, row.value)
        if label is not None:
            self.answers[self._prompt_of[row.index]] = label

    # ------------------------------------------------------------------ 2. the proxy and the audit's plan

    def learn(self, stop: Callable[[], bool] | None = None) -> audit.AuditDesign | None:
        """Train, score and plan the audit; None when stopped or when no proxy can be trained."""
        rep = self.report
        train = [p for p in self.parts.train if p in self.answers]
        rep.train_answered = len(train)
        rest = self.parts.rest
        if len(train) < 2 or not rest:
            rep.fallback = "too few training rows answered to train a proxy"
            stop_prefetch(self)  # no proxy will read the rows' vectors
            return self._settle()
        texts = embedding.row_texts(self.rows.prompts)
        t0 = time.perf_counter()
        parts = [x for _, x in embedding.chunks(self.embedder, [texts[p] for p in train], stop=stop)]
        if sum(len(x) for x in parts) < len(train):
            return None  # stopped
        features = np.concatenate(parts)
        rep.embed_s += time.perf_counter() - t0
        t1 = time.perf_counter()
        answers = [self.answers[p] for p in train]
        model = proxy.fit(features, answers, self.labels, seed=self.seed)
        rep.penalty = model.penalty
        platt = calibration.calibrate(features, answers, self.labels, YES, penalty=model.penalty, seed=self.seed)
        yes = self.labels.index(YES)
        learn_s = time.perf_counter() - t1
        t2 = time.perf_counter()
        self.scores = np.zeros(len(rest))
        done = 0
        for start, x in embedding.chunks(self.embedder, [texts[p] for p in rest], stop=stop):
            p = platt(model.probabilities(x)[:, yes])
            self.scores[start : start + len(p)] = p
            done += len(p)
        if done < len(rest):
            return None  # stopped
        rep.embed_s += time.perf_counter() - t2
        release_prefetch(self)
        t3 = time.perf_counter()
        positives = sum(a == YES for a in answers)
        self.design = audit.design(self.scores, self.targets, train_positives=positives, train_rows=len(train),
                                   rng=np.random.default_rng([self.seed, 1]), max_draws=self.plan.audit)
        rep.learn_s = learn_s + time.perf_counter() - t3
        d, figures = self.design, rep.targets
        figures.census = len(d.census)
        figures.low_rows, figures.low_drawn = (d.low.size, d.low.draws) if d.low is not None else (0, 0)
        figures.high_rows, figures.high_drawn = (d.high.size, d.high.draws) if d.high is not None else (0, 0)
        figures.expected_kept, figures.expected_missed = d.expected_kept, d.expected_missed
        rep.audit = len(d.audited())
        return self._settle()

    # ------------------------------------------------------------------ 3. the audit, 4. the zones

    def audit(self) -> PlannedRows | None:
        """The audit's rows for the LLM (None: no audit, every rest row goes to the LLM)."""
        if self.design is None:
            return None
        return subset(self.rows, [self.parts.rest[i] for i in self.design.audited()], self.label_scope)

    def choose(self) -> zones.ZoneChoice | None:
        """The zones from the audit's answers (after ``audit()``'s relQuery ran and was recorded)."""
        if self.design is None:
            return None
        t0 = time.perf_counter()
        rest = self.parts.rest
        got = np.full(len(rest), zones.UNKNOWN, dtype=np.int8)
        for i in self.design.audited():
            label = self.answers.get(rest[i])
            if label is not None:
                got[i] = zones.YES if label == YES else zones.NO
        positives = sum(self.answers.get(p) == YES for p in self.parts.train)
        self.choice = c = zones.choose(self.design, self.scores, got, train_positives=positives, targets=self.targets)
        self._no, self._yes = zones.proxy_rows(self.design, c)
        f = self.report.targets
        f.known_positives = c.known_positives
        f.no_rows, f.no_threshold, f.misses_bound, f.recall_low, f.recall_reason = (
            len(self._no), c.no_threshold, c.misses_bound, c.recall_low, c.recall_reason)
        f.yes_rows, f.yes_threshold, f.false_bound, f.precision_low, f.precision_reason = (
            len(self._yes), c.yes_threshold, c.false_bound, c.precision_low, c.precision_reason)
        if not len(self._no) and not len(self._yes):
            self.report.fallback = "; ".join(r for r in (c.recall_reason, c.precision_reason) if r) or "no zone"
        self.report.learn_s += time.perf_counter() - t0
        self._settle()
        return c

    def _settle(self) -> audit.AuditDesign | None:
        rep = self.report
        rep.proxy_rows = len(self._no) + len(self._yes)
        rep.remainder_rows = len(self.parts.rest) - rep.audit - rep.proxy_rows
        return self.design

    # ------------------------------------------------------------------ 5. the answers

    def _proxy(self) -> list[tuple[int, str]]:
        """(rest position, label) of the rows the proxy answers."""
        return [(int(i), NO) for i in self._no] + [(int(i), YES) for i in self._yes]

    def proxy_answers(self) -> list[RowResult]:
        call = self.rows.call
        out = []
        for i, text in self._proxy():
            p = self.parts.rest[i]
            value, error = call.answer(text)
            sure = float(self.scores[i]) if text == YES else 1.0 - float(self.scores[i])
            for row in self.rows.targets[p]:
                out.append(RowResult(row, text=text, value=value, error=error, answered_by=PROXY, confidence=sure))
        return out

    def proxy_cache_entries(self) -> list[tuple[str, str]]:
        return [(self.rows.prompts[self.parts.rest[i]], text) for i, text in self._proxy()]

    def remainder(self) -> PlannedRows:
        """The rest rows neither audited nor answered by the proxy, for the LLM."""
        done = set(self._no.tolist()) | set(self._yes.tolist())
        if self.design is not None:
            done |= set(self.design.audited().tolist())
        return subset(self.rows, [p for i, p in enumerate(self.parts.rest) if i not in done], self.label_scope)
