"""A call's rows after planning, as an executor takes them: the answers known before the engine
runs (result-cache hits, rows that cannot run) and the distinct prompts left for ONE relQuery,
each with the rows that get its answer.

One request may gather several plans (spreadsheet cells with different templates): ``add`` maps
each plan's rows onto the request's rows, and ``by_call`` parts them again by call, as each call
runs its own relQuery and label path (a row's answer depends on its own call's plan only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from relserve.functions import LLMCall
from relserve.labels.interface import LabelScope
from relserve.labels.resolution import LabelResolution
from relserve.planner.cache import CacheView, ResultCache
from relserve.planner.plan import CallPlan, shared_prefix_of
from relserve.results import RowResult


@dataclass(frozen=True)
class CallPart:
    """The prompts ``start:end`` of a ``PlannedRows``, planned with one call."""

    #: the planned call (the prompt shape its rows were rendered in)
    call: LLMCall
    start: int
    end: int
    #: the label method and plan the planner resolved for this call's prompts
    labels: LabelResolution | None
    #: the warning kept with this call's answers that came from the result cache
    cached_warning: str | None


@dataclass
class PlannedRows:
    #: the call whose answers these are (its settings run the relQuery)
    call: LLMCall
    #: rows (or cells, or prompts) in the request
    total: int
    #: the result cache the answers were looked up in, and new answers go to (None: neither)
    cache: ResultCache | CacheView | None = None
    #: answers known without the engine, by request row
    ready: list[RowResult] = field(default_factory=list)
    #: distinct prompts for the engine, in planned order
    prompts: list[str] = field(default_factory=list)
    #: per engine prompt, the request rows that get its answer
    targets: list[list[int]] = field(default_factory=list)
    #: per engine prompt, its row's placeholder values (aligned with the call's template columns):
    #: a label method lays a row out in layouts of its own (relserve/labels/layouts.py)
    values: list[tuple] = field(default_factory=list)
    #: the whole relQuery these prompts are a part of, when its rows run as several relQueries (a
    #: cascade's sample and rest): its label method chooses and reads once for all of them
    label_scope: LabelScope | None = None
    #: the warning kept with the answers that came from the result cache (None: they had none)
    cached_warning: str | None = None
    #: the label method and plan the planner resolved for these prompts (the first plan's)
    labels: LabelResolution | None = None
    #: the prompts of each plan ``add`` took, in order (several: cells of several templates)
    parts: list[CallPart] = field(default_factory=list)

    @classmethod
    def of(cls, plan: CallPlan, cache: ResultCache | CacheView | None = None) -> PlannedRows:
        """One plan whose rows are the request's rows."""
        rows = cls(plan.call, plan.rows, cache)
        rows.add(plan, range(plan.rows))
        return rows

    @property
    def cached_rows(self) -> int:
        return sum(r.cached for r in self.ready)

    def fail(self, row: int, message: str) -> None:
        self.ready.append(RowResult(row, error=message))

    def add(self, plan: CallPlan, out_rows: Sequence[int], names: Sequence[str] | None = None) -> None:
        """``plan``'s rows; ``out_rows[i]`` is its row i's index in the request, and ``names[i]``
        what an error of that row calls it ("cell B3"; None: nothing)."""
        for i, message in plan.row_errors.items():
            self.fail(out_rows[i], f"{names[i]}: {message}" if names is not None else message)
        self.cached_warning = self.cached_warning or plan.cached_warning
        self.labels = self.labels or plan.labels
        rows_of: dict[int, list[int]] = {}
        values_of: dict[int, tuple] = {}
        for i, p in enumerate(plan.row_to_prompt):
            if p >= 0:
                rows_of.setdefault(p, []).append(out_rows[i])
                values_of.setdefault(p, plan.distinct.values[plan.distinct.row_to_distinct[i]])
        for p, text in plan.cached.items():
            value, error = plan.call.answer(text)
            for row in rows_of[p]:
                self.ready.append(RowResult(row, text=text, error=error, value=value, cached=True))
        start = len(self.prompts)
        for p in plan.run_order:
            self.prompts.append(plan.prompts[p])
            self.targets.append(rows_of[p])
            self.values.append(values_of[p])
        self.parts.append(CallPart(plan.call, start, len(self.prompts), plan.labels, plan.cached_warning))

    def by_call(self) -> list[PlannedRows]:
        """The prompts left to run, one ``PlannedRows`` per call with labels they were planned with
        (each runs as its own relQuery, with its own label plan and first pass, as if it were
        alone; its targets are still the request's rows), and the prompts of every call without
        labels together, first (they are decided by no plan, and a sheet's columns of different
        maps are one batch for the engine, as before); ``[self]`` when no part needs its own
        relQuery. The answers known before the engine runs stay here."""
        free = [p for p in self.parts if p.call.choices is None]
        labelled = [p for p in self.parts if p.call.choices is not None]
        if len(labelled) + (1 if free else 0) <= 1:
            return [self]
        groups = ([free] if free else []) + [[p] for p in labelled]
        out = []
        for group in groups:
            first = group[0]
            spans = [range(p.start, p.end) for p in group]
            out.append(PlannedRows(first.call, self.total, self.cache, [],
                                   [self.prompts[i] for r in spans for i in r], [self.targets[i] for r in spans for i in r],
                                   [self.values[i] for r in spans for i in r], cached_warning=first.cached_warning,
                                   labels=first.labels))
        return out

    def shared_prefix(self) -> str:
        """Text every prompt left to run starts with (``shared_prefix_of``)."""
        return shared_prefix_of(self.prompts)

    def spread(self) -> None:
        """Put the prompts in an order spread over the planned one (a fixed stride near n/1.618,
        coprime with n): the planned order groups rows that share a prefix, and so often rows
        with the same answer, which a statement that stops at its first passing rows (``LIMIT``)
        would otherwise meet last. Deterministic; the label plan's sample does not move (it is
        drawn in the caller's row order). Each call's prompts stay its own (``by_call``)."""
        spans = [(p.start, p.end) for p in self.parts] or [(0, len(self.prompts))]
        order = [start + k for start, end in spans for k in _spread_order(end - start)]
        self.prompts = [self.prompts[i] for i in order]
        self.targets = [self.targets[i] for i in order]
        self.values = [self.values[i] for i in order]


def _spread_order(n: int) -> list[int]:
    """0..n-1 in a fixed stride near n/1.618, coprime with n (``PlannedRows.spread``)."""
    if n < 3:
        return list(range(n))
    step = max(1, round(n / 1.618))
    while math.gcd(step, n) != 1:
        step += 1
    return [(k * step) % n for k in range(n)]
