"""A call's budget before it starts (relserve/budget.py): its estimate checked against
its own budget, and the ``Allowance`` its relQueries spend from while they run (under the
statement's or tenant's, ``parent``): its rows, and every other relQuery it sends (first passes,
answer-field and prior probes), each reserved before it runs."""

from __future__ import annotations

from collections.abc import Sequence

from relserve.budget import Allowance, Budget, BudgetExceeded, refusal
from relserve.errors import ConfigError
from relserve.estimate.estimate import CallEstimate, estimate_call
from relserve.functions import LLMCall


def checked(budget: Budget, what: str, estimate: CallEstimate) -> None:
    """BudgetExceeded when ``budget`` refuses work of ``estimate`` (``on_budget`` 'refuse')."""
    if budget.on_budget != "refuse":
        return
    seconds = estimate.now_s if estimate.now_s is not None else estimate.idle_s
    why = refusal(budget, what, estimate.most_tokens, seconds, exact=estimate.exact)
    if why is not None:
        raise BudgetExceeded(why)


def call_allowance(call: LLMCall, prompts: Sequence[str], engine, model_id: str, prefix: str = "",
                   parent: Allowance | None = None, *, values: Sequence[tuple] | None = None, namespace: str | None = None,
                   tenant: str = "", budget: Budget | None = None) -> Allowance | None:
    """The allowance ``call``'s relQueries of ``prompts`` spend from (None: no budget at all).
    ``budget``: the call's (default: its options'). Raises BudgetExceeded for a call its budget
    refuses before it starts."""
    budget = budget or Budget.of(call.options)
    if not budget.limited and parent is None:
        return None
    try:
        estimate = estimate_call(call, prompts, engine=engine, model_id=model_id, values=values, namespace=namespace,
                                 tenant=tenant, prefix=prefix)
    except ConfigError as e:
        if budget.limited:
            raise ConfigError(f"{call.function.name}: its budget cannot be checked before it runs: {e}") from None
        # only a statement's budget above it: held all the same, the label probes left uncounted
        return Allowance(name="call", parent=parent)
    checked(budget, call.function.name, estimate)
    return allowance_for(budget, parent)


def allowance_for(budget: Budget, parent: Allowance | None, name: str = "call") -> Allowance:
    """The allowance of a call under ``budget`` and ``parent`` (one of its own even with no limit:
    it counts what the call spends)."""
    return Allowance(budget.max_tokens_total, budget.max_seconds, name=name, parent=parent)
