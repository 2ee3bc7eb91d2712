"""A request's estimate on the server (issue 47): its engine tokens and seconds, alone and behind
every tenant's work the engine holds now, in the tenant's namespace (its remembered examples,
answer fields and answer lengths)."""

from __future__ import annotations

from relserve.budget import Allowance, Budget
from relserve.errors import ConfigError
from relserve.estimate.budgeted import allowance_for, checked
from relserve.estimate.call_work import CallWork
from relserve.estimate.estimate import CallEstimate, estimate_call, estimate_work
from relserve.planner.planned_rows import PlannedRows
from relserve.server.state import ServerState
from relserve.server.tenants import Tenant


def tenant_key(state: ServerState, tenant: Tenant) -> str:
    """Whose learned answer lengths the tenant's estimates read (the engine keeps them by tenant)."""
    tenancy = state.tenancy(tenant)
    return tenancy.tenant if tenancy is not None else ""


def batch_estimate(state: ServerState, tenant: Tenant, batch: PlannedRows) -> CallEstimate:
    """The estimate of a planned request (blocks: call it off the event loop): each call's part,
    one after the other, as its job runs them (``PlannedRows.by_call``)."""
    engine = state.engine_for(tenant)
    estimates = [estimate_call(part.call, part.prompts, engine=engine, model_id=state.engine.model_id, values=part.values,
                               namespace=state.namespace(tenant), tenant=tenant_key(state, tenant),
                               prefix=part.shared_prefix())
                 for part in batch.by_call()]
    if len(estimates) == 1:
        return estimates[0]
    works = [e.work for e in estimates if e.work is not None]
    first = works[0]
    work = CallWork(first.call, first.method, any(w.scoring for w in works), [s for w in works for s in w.stages],
                    all(w.exact for w in works), [why for w in works for why in w.inexact],
                    all(w.lengths_learned for w in works))
    return estimate_work(work, engine=engine, model_id=state.engine.model_id)


def plan_estimate(state: ServerState, tenant: Tenant, batch: PlannedRows) -> dict[str, object] | None:
    """``/plan``'s estimate as JSON; None when it cannot be made (no tokenizer for the model:
    the plan itself is still answered)."""
    try:
        return batch_estimate(state, tenant, batch).to_dict()
    except ConfigError:
        return None


def job_allowance(state: ServerState, tenant: Tenant, batch: PlannedRows,
                  wanted: bool = False) -> tuple[Allowance | None, CallEstimate | None]:
    """What a job may spend: its request's budget (``max_tokens_total``, ``max_seconds``) under
    what is left of its tenant's day (``max_tokens_per_day``), None when neither is set; and its
    estimate, when made (a budget needs it; ``wanted``: the request asked for it). Raises
    BudgetExceeded (422) or DailyBudgetExceeded (429) for a request refused before it starts."""
    budget = Budget.of(batch.call.options)
    day = state.day_budgets.allowance(tenant)
    if not budget.limited and day is None:
        return None, batch_estimate(state, tenant, batch) if wanted else None
    estimate = batch_estimate(state, tenant, batch)
    checked(budget, batch.call.function.name, estimate)
    day = state.day_budgets.check(tenant, estimate.most_tokens, budget.on_budget)
    return allowance_for(budget, day, name="request"), estimate
