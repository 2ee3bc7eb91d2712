"""/v1/label-plans: the label plans of a tenant's ``llm_filter`` / ``llm_classify`` calls
(relserve/labels/plan.py), kept in the server's home per tenant namespace: listed, forgotten,
pinned, as the ``relserve plans`` command does for a process's own. A tenant reaches only its
own namespace's plans (they hold worked examples: rows of its tables). A call refreshes its own
plan with ``label_plan: "refresh"``."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel

from relserve.labels.memory import StoredPlan
from relserve.server.state import ServerState, current_tenant, get_state
from relserve.server.tenants import Tenant

router = APIRouter(prefix="/v1/label-plans", tags=["label plans"])


class LabelPlanInfo(BaseModel):
    """One kept plan, as a listing shows it."""

    function: str
    template: str
    labels: list[str]
    model: str
    pinned: bool
    created: float
    #: the plan's id: a digest of everything that decides a row, which the result cache keys the
    #: call's answers by (a refresh that decides rows otherwise gives a new one)
    id: str
    #: how its rows are decided, in words (EXPLAIN's line)
    plan: str
    #: the plan itself (relserve/labels/plan.py, as JSON)
    detail: dict


class Changed(BaseModel):
    changed: int


def _info(s: StoredPlan) -> LabelPlanInfo:
    import json

    return LabelPlanInfo(function=s.key.function, template=s.key.template, labels=list(s.key.labels),
                         model=s.key.model_id, pinned=s.pinned, created=s.created, id=s.plan.id,
                         plan=s.plan.describe(),
                         detail=json.loads(s.plan.to_json()))


def _mine(state: ServerState, tenant: Tenant, template: str | None) -> list[StoredPlan]:
    memory = state.label_memory(tenant)
    if memory is None:
        return []
    return [s for s in memory.plans(state.namespace(tenant)) if template is None or s.key.template == template]


@router.get("", summary="The tenant's kept label plans", response_model=list[LabelPlanInfo])
def list_plans(template: str | None = Query(None, description="only the plans of calls with this template"),
               tenant: Tenant = Depends(current_tenant), state: ServerState = Depends(get_state)):
    return [_info(s) for s in _mine(state, tenant, template)]


@router.delete("", summary="Forget the tenant's label plans", response_model=Changed)
def forget(template: str | None = Query(None, description="only the plans of calls with this template"),
           pinned: bool = Query(False, description="forget pinned plans too"),
           tenant: Tenant = Depends(current_tenant), state: ServerState = Depends(get_state)):
    memory = state.label_memory(tenant)
    return Changed(changed=sum(memory.forget(s.key, pinned=pinned) for s in _mine(state, tenant, template)))


@router.patch("", summary="Pin or unpin the tenant's label plans of a template", response_model=Changed)
def pin(template: str = Query(..., description="the template of the calls whose plans to pin or unpin"),
        pinned: bool = Query(..., description="true: pin them (never refreshed nor forgotten); false: unpin"),
        tenant: Tenant = Depends(current_tenant), state: ServerState = Depends(get_state)):
    memory = state.label_memory(tenant)
    found = _mine(state, tenant, template)
    for s in found:
        memory.pin(s.key, pinned)
    return Changed(changed=len(found))
