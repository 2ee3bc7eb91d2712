"""The one interface of the label methods of ``llm_filter`` / ``llm_classify`` (issues 43, 62).

A label method takes one relQuery of a closed question from its prompts to each row's label, in
three steps the executor (relserve/planner/executor.py) drives the same way for every method:

1. ``request``: what the engine gets - the prompts (perhaps rewritten: worked examples in front,
   another layout) and the scoring settings. A relQuery whose call has no label plan yet makes
   one here (a first pass over a sample of its rows, or content-free probes) and offers it to
   the label memory (relserve/labels/plan.py, memory.py).
2. the engine scores every label of every row (relserve/engine/label_scoring.py);
3. ``decide``: each scored row with its label (and its confidence), from the row's own scores and
   the plan alone, as the row finishes.

The methods (relserve/labels/methods.py names them and builds them): ``score`` (the
best-scored label), ``prior`` (divided by the content-free prior), ``batch`` (minus each label's
mean over the rows), ``bootstrap`` (worked examples the model labels itself, then batch means),
``adaptive`` (the layout chosen per call, rows decided by two crowds of margins). ``generate``
decodes instead of scoring and needs none of this.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from relserve.backend.protocol import Backend
from relserve.engine.handle import RelQueryHandle
from relserve.functions import LLMCall
from relserve.labels.plan import LabelPlan
from relserve.labels.resolution import LabelResolution
from relserve.results import RowResult


@dataclass
class LabelScope:
    """The whole relQuery when its rows run as several relQueries (a cascade: a random sample,
    then the rows its proxy is unsure of). A plan the first part makes is made from the whole's
    rows, as one relQuery of all of them would make it; every part is decided with it."""

    #: per prompt of the whole relQuery, its row's placeholder values, in planned order
    values: Sequence[tuple]
    #: per prompt, the first of the caller's rows that has it (as ``LabelContext.first_rows``)
    first_rows: Sequence[int] | None = None
    #: the whole relQuery's prompts, in planned order (bootstrap's first pass samples them, as
    #: the relQuery of all the rows would; None: not known, each part samples its own)
    prompts: Sequence[str] | None = None
    #: the plan the first part was decided with, for the later parts (None until then)
    plan: LabelPlan | None = None
    plan_kept: bool = False


@dataclass(frozen=True)
class LabelContext:
    """One relQuery of a closed question, as a label method gets it."""

    #: the call as the engine scores it (an ``answer_field := 'auto'`` already named)
    call: LLMCall
    engine: Backend
    model_id: str
    #: the distinct prompts to run, in planned order, as the planner rendered them
    prompts: Sequence[str]
    #: per prompt, its row's placeholder values (empty when the caller has none)
    values: Sequence[tuple]
    rel_id: str | None
    #: the call's own ``RelQuery`` settings (system message, call key, ...)
    engine_options: Mapping[str, Any]
    #: per prompt, the first of the caller's rows that has it (None: the planned order is theirs):
    #: a sample spread over the table as the caller wrote it does not move when the planner
    #: reorders rows to share prefixes
    first_rows: Sequence[int] | None = None
    #: the whole relQuery this one is a part of (None: it is the whole)
    scope: LabelScope | None = None
    #: the method, plan key and kept plan the planner resolved for this relQuery
    #: (relserve/labels/methods.resolve; None: a method run without a memory, the plan made here)
    resolution: LabelResolution | None = None

    def given_plan(self) -> tuple[LabelPlan | None, bool]:
        """The plan this relQuery's rows are decided with when it needs not make one (an earlier
        part of its scope's, or the call's kept one), and whether it is kept."""
        if self.scope is not None and self.scope.plan is not None:
            return self.scope.plan, self.scope.plan_kept
        if self.resolution is not None and self.resolution.plan is not None:
            return self.resolution.plan, True
        return None, False

    def offer_plan(self, plan: LabelPlan, rows: int) -> tuple[LabelPlan, bool]:
        """Offer a plan made from ``rows`` rows to the call's memory (relserve/labels/methods.py,
        ``LabelResolution.keep``) and to the later parts of the scope; the plan the rows are
        decided with, and whether it is kept."""
        out = self.resolution.keep(plan, rows=rows) if self.resolution is not None else (plan, False)
        if self.scope is not None:
            self.scope.plan, self.scope.plan_kept = out
        return out


@dataclass(frozen=True)
class LabelRequest:
    """What the engine gets for a relQuery of a closed question."""

    #: the prompts the engine scores (the relQuery's own, or a subset: see ``engine_index``)
    prompts: list[str]
    #: the ``RelQuery`` settings of the scoring (choices, score_labels, prompt_shape, ...)
    options: Mapping[str, Any]
    #: prompt index -> label: rows answered without the engine
    answered: Mapping[int, str] = field(default_factory=dict)
    #: the engine's row index -> the relQuery's prompt index (None: the same)
    engine_index: list[int] | None = None
    #: prompt index -> the row as the engine scored it already, in these prompts and settings
    #: (a first pass that scored every row of its relQuery): when every prompt has one, the
    #: engine gets nothing and these are decided as its rows would have been
    scored: Mapping[int, RowResult] = field(default_factory=dict)


class LabelReport(Protocol):
    """What a method learned about a relQuery (EXPLAIN ANALYZE), and whether its answers are guesses."""

    def warning(self, function: str, template: str) -> str | None:
        """Why the answers are close to guesses, naming what to check (None: they are not)."""


class LabelRun(ABC):
    """One relQuery's labels under one method, from its request to each row's decision."""

    #: every method decides each row alone, from its scores and the call's plan: ``decide`` gets
    #: each row as it finishes
    holds: bool = False
    #: the plan the rows are decided with (None until ``request``, and for ``score``)
    plan: LabelPlan | None = None
    #: whether that plan is the call's kept one (False: made for this relQuery alone)
    plan_kept: bool = False

    @abstractmethod
    def request(self) -> LabelRequest:
        """What the engine gets.

        Returns:
            the prompts, the scoring settings and the rows answered without the engine. May
            block: a first pass over a sample runs here.
        """

    def submitted(self, handle: RelQueryHandle) -> None:  # noqa: B027 (a hook most methods need not use)
        """Called once the relQuery is submitted, with its handle (the content-free prior's
        probes run beside the rows and are read here). If it raises, the executor cancels the
        relQuery."""

    @abstractmethod
    def decide(self, rows: Sequence[RowResult]) -> list[RowResult]:
        """Each scored row with its label.

        Args:
            rows: rows the engine scored (``label_logprobs`` set, no error), in any order.
        Returns:
            the same rows, in the same order, each with ``text`` the call's label (a filter's
            "yes"/"no") and, where the method knows it, ``confidence``.
        """

    @property
    def report(self) -> LabelReport | None:
        """What the method learned about this relQuery, for EXPLAIN ANALYZE (None: nothing)."""
        return None

    def warning(self, function: str, template: str) -> str | None:
        """Why this relQuery's answers are close to guesses, naming what to check (None: they
        are not, or the method cannot tell): its report's word on it."""
        report = self.report
        return report.warning(function, template) if report is not None else None


def probabilities(scores: Mapping[str, float]) -> dict[str, float]:
    """Label scores (log-probabilities, corrected or not) as probabilities over the labels."""
    import math

    top = max(scores.values())
    exp = {label: math.exp(v - top) for label, v in scores.items()}
    total = sum(exp.values())
    return {label: v / total for label, v in exp.items()}
