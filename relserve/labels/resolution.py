"""How one relQuery of a closed question gets its labels, resolved once (issue 62): the label
method it runs, the key of the call's label plan and the plan kept for it
(relserve/labels/plan.py, memory.py). The planner resolves it (``resolve``) and the executor,
EXPLAIN, the estimates and a server tenant's limits read it; nothing outside relserve/labels/
compares method names.

Which method runs: ``adaptive`` is for two labels, and with three or more (or the user's own
examples) runs as ``bootstrap``; ``batch`` and ``bootstrap`` need at least ``min_batch_rows``
rows for label means of their own and below that run as ``prior`` unless the call has a plan
already; ``bootstrap`` with the user's own examples runs as ``batch`` (given examples beat
guessed ones); a call with a kept plan runs the plan's method.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from relserve.label_names import LabelMethodName, PlanAction
from relserve.labels.keys import template_key
from relserve.labels.memory import LabelMemory, PlanPinned, StoredPlan
from relserve.labels.plan import LabelPlan, PlanKey

#: the methods whose label means need a number of rows of their own
MEANS_METHODS = (LabelMethodName.BATCH, LabelMethodName.BOOTSTRAP)


@dataclass(frozen=True)
class LabelResolution:
    """How one relQuery of a closed question gets its labels, resolved once (``resolve``)."""

    #: the method the relQuery runs (None: the call has no labels; ``generate``: it decodes)
    method: LabelMethodName | None
    #: the method the call asks for, when the relQuery runs another one
    asked: LabelMethodName | None = None
    #: whose plan (None: a method without a plan, or no labels)
    key: PlanKey | None = None
    #: the plan kept for the call (None: this relQuery makes one, or the method has none)
    stored: StoredPlan | None = None
    action: PlanAction = PlanAction.AUTO
    memory: LabelMemory | None = None

    @property
    def scoring(self) -> bool:
        """Whether the engine scores the labels (every method but ``generate``)."""
        return self.method is not None and self.method is not LabelMethodName.GENERATE

    @property
    def plan(self) -> LabelPlan | None:
        """The kept plan this relQuery uses as it is (None: it makes one first)."""
        if self.stored is None or self.action is PlanAction.REFRESH:
            return None
        return self.stored.plan

    @property
    def plan_id(self) -> str | None:
        """The id of the plan the rows are decided with when it is known before they run (the
        result cache keys answers by it)."""
        plan = self.plan
        return plan.id if plan is not None else ("refresh" if self.action is PlanAction.REFRESH else None)

    @property
    def makes_plan(self) -> bool:
        """Whether the relQuery makes a plan before its rows (a first pass, or probes)."""
        return self.key is not None and self.plan is None

    def keep(self, plan: LabelPlan, *, rows: int) -> tuple[LabelPlan, bool]:
        """Offer a plan this relQuery made from ``rows`` rows to the memory; returns the plan the
        rows are decided with (another process's, should it have kept one first) and whether it
        is kept. A plan made from fewer than ``MIN_PLAN_ROWS`` rows is kept as provisional: a
        handful of rows is no sample, so the call's first relQuery of enough rows replaces it
        (``resolve``), but the small ones before it answer their rows by one plan, not each by its
        own."""
        if self.memory is None or self.key is None:
            return plan, False
        if rows < MIN_PLAN_ROWS:
            plan = replace(plan, provisional=True)
        stored = self.memory.keep(self.key, plan, replace=self.action is PlanAction.REFRESH,
                                  pin=self.action is PlanAction.PIN)
        if self.action is PlanAction.UNPIN and stored.pinned:
            stored = self.memory.pin(self.key, False) or stored
        return stored.plan, True

    def apply_action(self) -> None:
        """Pin or unpin the kept plan a running relQuery uses as it is (EXPLAIN resolves without
        running, and changes nothing)."""
        if self.memory is None or self.key is None or self.stored is None:
            return
        if self.action is PlanAction.PIN and not self.stored.pinned:
            self.memory.pin(self.key, True)
        elif self.action is PlanAction.UNPIN and self.stored.pinned:
            self.memory.pin(self.key, False)

    @property
    def lays_out(self) -> bool:
        """Whether the method lays the scoring request out itself (the adaptive method's layouts),
        not in the call's prompt shape."""
        return self.method is LabelMethodName.ADAPTIVE



#: a plan made from fewer rows than this is provisional: the call's relQueries of fewer rows use
#: it, and its first relQuery of this many rows or more makes the plan that replaces it
MIN_PLAN_ROWS = 16


def asked(call) -> LabelMethodName | None:
    """The method ``call`` asks for as its relQueries read it: ``adaptive`` is for two labels, so a
    call of three or more, or with the user's own examples, asks for ``bootstrap``."""
    method = call.label_method
    if method is None:
        return None
    name = LabelMethodName(method)
    if name is LabelMethodName.ADAPTIVE and (len(call.choices or ()) != 2 or call.options.examples):
        return LabelMethodName.BOOTSTRAP
    return name


def method_ran(method: str | None, rows: int, examples: bool = False, labels: int = 2) -> LabelMethodName | None:
    """The label method a relQuery of ``rows`` prompts over ``labels`` labels runs when the call
    has no plan yet: ``batch`` and ``bootstrap`` fall back to ``prior`` below
    ``min_batch_rows(labels)``; between the two thresholds (three labels or more) ``bootstrap``
    runs as ``batch``; ``bootstrap`` with the user's own ``examples`` runs as ``batch``."""
    from relserve.labels.means import MIN_BATCH_ROWS, min_batch_rows

    if method is None:
        return None
    name = LabelMethodName(method)
    if name is LabelMethodName.ADAPTIVE:
        if labels != 2 or examples:
            name = LabelMethodName.BOOTSTRAP
        else:
            return name
    if name in MEANS_METHODS and rows < MIN_BATCH_ROWS:
        return LabelMethodName.BATCH if rows >= min_batch_rows(labels) else LabelMethodName.PRIOR
    if name is LabelMethodName.BOOTSTRAP and examples:
        return LabelMethodName.BATCH
    return name


def plan_key(call, namespace: str | None, model_id: str) -> PlanKey:
    """The key of ``call``'s label plan in ``namespace`` under ``model_id``."""
    method = asked(call)
    ident = json.dumps([list(_plain(template_key(call, model_id))), method.value if method else None], default=str)
    return PlanKey(namespace, model_id, ident, call.function.name, call.template.source, tuple(call.choices or ()))


def _plain(key: Sequence[object]) -> list[object]:
    return [list(v) if isinstance(v, tuple) else v for v in key]


def resolve(call, rows: int, *, memory: LabelMemory | None, namespace: str | None, model_id: str) -> LabelResolution:
    """How a relQuery of ``rows`` distinct prompts of ``call`` gets its labels (see the module)."""
    want = asked(call)
    if want is None:
        return LabelResolution(None)
    if want is LabelMethodName.GENERATE:
        return LabelResolution(want)
    action = PlanAction(call.options.label_plan)
    key = plan_key(call, namespace, model_id)
    stored = memory.plan(key) if memory is not None else None
    if (stored is not None and stored.plan.provisional and not stored.pinned and rows >= MIN_PLAN_ROWS
            and action is PlanAction.AUTO):
        action = PlanAction.REFRESH  # the first relQuery of enough rows replaces a provisional plan
    if want is LabelMethodName.SCORE:
        return LabelResolution(want)
    if stored is not None and action is not PlanAction.REFRESH:
        ran = LabelMethodName(stored.plan.method)
    else:
        if stored is not None and stored.pinned:
            raise PlanPinned(f"the label plan of {call.function.name}({call.template.source!r}) is pinned: unpin it "
                             "(the call's label_plan option 'unpin', relserve.pin_label_plans(template, unpin => "
                             "true) in PostgreSQL, or `relserve plans pin --unpin`) before refreshing it")
        ran = method_ran(call.label_method, rows, bool(call.options.examples), len(call.choices or ()))
    return LabelResolution(ran, want if ran is not want else None, key, stored, action, memory)
