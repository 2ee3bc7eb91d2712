"""One relQuery run as a cascade, independent of how its relQueries are driven.

The surfaces drive it in the same four steps (``cascade_drive.run_cascade`` synchronously, the server's
jobs on their event loop), each step's relQuery run by the ``CallExecutor`` as any call's is:

1. ``sample()``: the training and audit rows, a random split of the prompts, for the LLM;
   ``record`` keeps each answer as it arrives (those rows' answers are final: the LLM's);
2. ``learn()``: embed the answered rows, train the proxy on the training rows' answers, score
   the audit and the rest, choose the confidence threshold (relserve/cascade/threshold.py);
3. ``proxy_answers()``: the rest rows at or above the threshold, answered by the proxy (marked
   ``answered_by='proxy'``, with its confidence);
4. ``remainder()``: every other rest row, for the LLM as one relQuery (all of them when the proxy
   cannot reach the target).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from relserve.cascade import embedding, prefetch, proxy, threshold
from relserve.cascade.policy import CascadePlan
from relserve.cascade.report import CascadeReport
from relserve.labels.interface import LabelScope
from relserve.planner.planned_rows import PlannedRows
from relserve.results import RowResult

#: the answer of a row the proxy gave, as ``RowResult.answered_by`` says it
PROXY = "proxy"


@dataclass
class Split:
    """Prompt indices: training, audit, and the rest (a random partition)."""

    train: list[int]
    audit: list[int]
    rest: list[int]


def split(n: int, train: int, audit: int, seed: int) -> Split:
    """A random partition; the audit stays in random order (threshold.py cuts it in halves)."""
    order = np.random.default_rng(seed).permutation(n).tolist()
    return Split(sorted(order[:train]), order[train : train + audit], sorted(order[train + audit :]))


def subset(rows: PlannedRows, prompts: list[int], scope: LabelScope | None = None) -> PlannedRows:
    """The same call over some of ``rows``' prompts (nothing ready: those rows were settled),
    its labels chosen and read for ``scope``."""
    return PlannedRows(rows.call, rows.total, rows.cache, [], [rows.prompts[p] for p in prompts],
                       [rows.targets[p] for p in prompts], [rows.values[p] for p in prompts] if rows.values else [],
                       scope, labels=rows.labels)


def prompt_of(rows: PlannedRows) -> dict[int, int]:
    """Request row -> its prompt index (each request row has one prompt)."""
    return {row: p for p, targets in enumerate(rows.targets) for row in targets}


def label_scope(rows: PlannedRows) -> LabelScope | None:
    """The whole relQuery a cascade's LLM relQueries are parts of: a label plan the sample makes
    is made from the whole table's rows, as the LLM-only run makes it, and decides the later
    parts too (the rows the proxy is unsure of are no sample of the table)."""
    return LabelScope(rows.values, [min(t) for t in rows.targets], rows.prompts) if rows.values else None


def label_of(call, labels: tuple[str, ...], value) -> str | None:
    """An answered row's value as the proxy's label (a filter's True: "yes"); None if it is none."""
    if call.function.kind == "filter":
        return "yes" if value else "no"
    return value if value in labels else None


def start_prefetch(embedder: embedding.Embedder, texts: list[str]) -> embedding.Embedder:
    """``embedder``, embedding ``texts`` ahead on a background thread (a cascade's rows while
    the engine answers its sample)."""
    return prefetch.Prefetched(embedder, texts).start()


def stop_prefetch(cascade) -> None:
    """Stop a cascade's background embedding (a cancelled or failed call)."""
    if isinstance(cascade.embedder, prefetch.Prefetched):
        cascade.embedder.stop()


def release_prefetch(cascade) -> None:
    """After ``learn`` read them: note the background embedding's seconds and drop its vectors."""
    if isinstance(cascade.embedder, prefetch.Prefetched):
        cascade.report.prefetch_s = cascade.embedder.seconds
        cascade.embedder = cascade.embedder.inner


@dataclass
class Cascade:
    """The cascade of one ``PlannedRows`` (its prompts left to run)."""

    rows: PlannedRows
    plan: CascadePlan
    #: the random split's seed (the call's ``seed``: which rows the LLM answers first)
    seed: int = 0
    embedder: embedding.Embedder = field(default_factory=embedding.default_embedder)

    def __post_init__(self) -> None:
        call = self.rows.call
        self.labels: tuple[str, ...] = tuple(call.choices or ())
        self.parts = split(len(self.rows.prompts), self.plan.train, self.plan.audit, self.seed)
        self._prompt_of = prompt_of(self.rows)
        #: prompt index -> the LLM's label, for the sample's rows that it answered
        self.answers: dict[int, str] = {}
        #: after ``learn``: the rest rows' proxy labels and confidences (aligned with parts.rest)
        self._rest_labels: list[str] = []
        self._rest_confidence = np.zeros(0)
        self.choice: threshold.ThresholdChoice | None = None
        #: the LLM's relQueries (the sample, the remainder) are parts of one
        self.label_scope = label_scope(self.rows)
        self.report = CascadeReport(self.plan.target or 0.0, len(self.rows.prompts), len(self.parts.train),
                                    len(self.parts.audit), confidence=self.plan.confidence,
                                    embedder=self.embedder.name, seed=self.seed)

    # ------------------------------------------------------------------ 1. the sample

    def start_prefetch(self) -> None:
        """Embed the rows on a background thread while the sample runs (relserve/cascade/prefetch.py)."""
        texts = embedding.row_texts(self.rows.prompts)
        order = self.parts.train + self.parts.audit + self.parts.rest
        self.embedder = start_prefetch(self.embedder, [texts[p] for p in order])

    def stop_prefetch(self) -> None:
        stop_prefetch(self)

    def sample(self) -> PlannedRows:
        """The training and audit rows, for the LLM first."""
        return subset(self.rows, sorted(self.parts.train + self.parts.audit), self.label_scope)

    def record(self, row: RowResult) -> None:
        """One of the sample's answered rows (as the executor fans them out)."""
        if row.error is not None or row.value is None:
            return
        label = label_of(self.rows.call, self.labels, row.value)
        if label is not None:
            self.answers[self._prompt_of[row.index]] = label

    # ------------------------------------------------------------------ 2. the proxy and its threshold

    def learn(self, stop: Callable[[], bool] | None = None) -> threshold.ThresholdChoice | None:
        """Train the proxy and choose its threshold; None when ``stop`` said to stop first."""
        rep = self.report
        train = [p for p in self.parts.train if p in self.answers]
        audit = [p for p in self.parts.audit if p in self.answers]
        rep.train_answered, rep.audit_answered = len(train), len(audit)
        rest = self.parts.rest
        texts = embedding.row_texts(self.rows.prompts)
        self._rest_labels, self._rest_confidence = ["" for _ in rest], np.zeros(len(rest))
        if len(train) < 2 or not audit or not rest:
            self.choice = None
            rep.fallback = "too few sample rows answered to train and check a proxy"
            # no proxy will read the rows' vectors: embedding the rest would be work for nothing
            # (a refused sample, a spent budget: request after request)
            stop_prefetch(self)
            return self._settle(None)
        t0 = time.perf_counter()
        known = train + audit
        parts = [x for _, x in embedding.chunks(self.embedder, [texts[p] for p in known], stop=stop)]
        if sum(len(x) for x in parts) < len(known):
            return None  # stopped
        features = np.concatenate(parts)
        rep.embed_s += time.perf_counter() - t0
        t1 = time.perf_counter()
        model = proxy.fit(features[: len(train)], [self.answers[p] for p in train], self.labels, seed=self.seed)
        rep.penalty = model.penalty
        audit_labels, audit_confidence = model.predict(features[len(train) :])
        agrees = np.array([got == self.answers[p] for got, p in zip(audit_labels, audit)])
        learn_s = time.perf_counter() - t1
        # the rest, a chunk at a time: only each row's label and confidence are kept
        t2 = time.perf_counter()
        done = 0
        for start, x in embedding.chunks(self.embedder, [texts[p] for p in rest], stop=stop):
            labels, confidence = model.predict(x)
            self._rest_labels[start : start + len(labels)] = labels
            self._rest_confidence[start : start + len(labels)] = confidence
            done += len(labels)
        if done < len(rest):
            return None  # stopped
        rep.embed_s += time.perf_counter() - t2
        t3 = time.perf_counter()
        release_prefetch(self)
        choice = threshold.choose(audit_confidence, agrees, self._rest_confidence, rows=len(self.rows.prompts),
                                  target=self.plan.target, delta=self.plan.failure)
        rep.learn_s = learn_s + time.perf_counter() - t3
        if not choice.applies:
            rep.fallback = (f"no threshold keeps the agreement's {self.plan.confidence:.0%} bound at {self.plan.target:g} "
                            f"(the proxy agreed with the LLM on {int(agrees.sum()):,} of {len(audit):,} audit rows)")
        return self._settle(choice)

    def audit(self) -> PlannedRows | None:
        """No second sample: the agreement's audit ran with the training rows."""
        return None

    def choose(self) -> None:
        """Nothing left to choose: ``learn`` chose the threshold on the audit it had."""

    def _settle(self, choice: threshold.ThresholdChoice | None) -> threshold.ThresholdChoice | None:
        self.choice = choice
        rep = self.report
        if choice is not None and choice.applies:
            rep.threshold, rep.coverage = choice.threshold, choice.coverage
            rep.chose_rows, rep.estimate_rows = choice.chose.rows, choice.estimated.rows
            rep.audit_covered, rep.audit_wrong = choice.estimated.answered, choice.estimated.wrong
            rep.agreement, rep.agreement_low, rep.agreement_high = choice.agreement, choice.agreement_low, choice.agreement_high
        rep.proxy_rows = len(self._proxy_positions())
        rep.remainder_rows = len(self.parts.rest) - rep.proxy_rows
        return choice

    def _proxy_positions(self) -> list[int]:
        """Positions in ``parts.rest`` the proxy answers."""
        if self.choice is None or not self.choice.applies:
            return []
        return [i for i, c in enumerate(self._rest_confidence) if c >= self.choice.threshold]

    # ------------------------------------------------------------------ 3. and 4. the answers

    def proxy_answers(self) -> list[RowResult]:
        """The rows the proxy answers, fanned out to their request rows."""
        call = self.rows.call
        out = []
        for i in self._proxy_positions():
            p = self.parts.rest[i]
            text = self._rest_labels[i]
            value, error = call.answer(text)
            for row in self.rows.targets[p]:
                out.append(RowResult(row, text=text, value=value, error=error, answered_by=PROXY,
                                     confidence=float(self._rest_confidence[i])))
        return out

    def proxy_cache_entries(self) -> list[tuple[str, str]]:
        """(prompt, answer) of the proxy's rows, for the result cache (keyed on the cascade target)."""
        return [(self.rows.prompts[self.parts.rest[i]], self._rest_labels[i]) for i in self._proxy_positions()]

    def remainder(self) -> PlannedRows:
        """The rest rows the proxy does not answer, for the LLM."""
        answered = set(self._proxy_positions())
        return subset(self.rows, [p for i, p in enumerate(self.parts.rest) if i not in answered], self.label_scope)
