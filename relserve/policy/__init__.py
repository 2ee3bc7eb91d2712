"""relQuery scheduling policies in plain Python (no vLLM import).

The vLLM scheduler plug-in (``relserve.engine.scheduler``) and the simulator (``relserve.sim``)
both drive these classes, so what is measured on the engine is what is simulated.
"""

from __future__ import annotations

from relserve.errors import ConfigError
from relserve.policy.cost_model import PRESETS, CostModel, fit_line
from relserve.policy.policies import (
    FCFSPolicy,
    Policy,
    PolicyName,
    RelServeDecodeFirst,
    RelServePolicy,
    RelServePrefillFirst,
    SarathiPolicy,
    StaticPriorityPolicy,
    StockVLLMPolicy,
)
from relserve.policy.settings import PolicySettings
from relserve.policy.types import Limits, Req, StepKind, StepPlan, StepView

#: the policy class behind each name
POLICIES: dict[PolicyName, type[Policy]] = {
    cls.name: cls
    for cls in (
        StockVLLMPolicy,
        FCFSPolicy,
        SarathiPolicy,
        StaticPriorityPolicy,
        RelServePolicy,
        RelServePrefillFirst,
        RelServeDecodeFirst,
    )
}
assert set(POLICIES) == set(PolicyName), "every policy name needs its class"
POLICY_NAMES: tuple[str, ...] = tuple(n.value for n in PolicyName)


def policy_class(name: str) -> type[Policy]:
    """The class of the policy called ``name``; a clear error for an unknown name."""
    try:
        return POLICIES[PolicyName(name)]
    except ValueError:
        raise ConfigError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}") from None


def make_policy(name: str, cost: CostModel | None = None, settings: PolicySettings | None = None) -> Policy:
    """The one factory of scheduling policies (as vLLM's ``create_request_queue``)."""
    return policy_class(name)(cost, settings)


__all__ = [
    "POLICIES",
    "POLICY_NAMES",
    "PRESETS",
    "CostModel",
    "Limits",
    "Policy",
    "PolicyName",
    "PolicySettings",
    "Req",
    "StepKind",
    "StepPlan",
    "StepView",
    "fit_line",
    "make_policy",
    "policy_class",
]
