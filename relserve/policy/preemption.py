"""Which running request vLLM preempts: the order the plug-in gives ``running``.

vLLM (FCFS mode) preempts ``running[-1]`` when a running request needs a KV block and none is
free, and serves ``running`` front to back. Keeping ``running`` in the policy's order (best-ranked
relQuery first) makes both follow the policy: the top relQuery decodes first, the relQuery ranked
last loses its blocks first. Within a relQuery the last admitted request stays last, as in vLLM.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from relserve.policy.relqueries import tenant_shares
from relserve.policy.types import Req

H = TypeVar("H")


def preemption_order(handles: Sequence[H], reqs: Sequence[Req], priorities: Mapping[str, float]) -> list[H]:
    """``handles`` (one per ``reqs``, same order) sorted best-ranked first, victims last.

    The rank is the user's priority class, then the tenant's share of the running work (a tenant
    holding more of it per unit of weight loses blocks first), then the policy's priority of the
    relQuery (lower runs sooner), then the relQuery's arrival; relQueries without a priority rank
    after those with one. The sort is stable, so admission order decides within a relQuery.
    """
    inf = float("inf")
    # one tenant (the common case): every share is 0, no per-tenant loads to count
    shares = tenant_shares(reqs) if len({r.tenant for r in reqs}) > 1 else {}

    def key(i: int) -> tuple[int, float, float, float]:
        r = reqs[i]
        return (r.priority, shares.get(r.tenant, 0.0), priorities.get(r.rel_id, inf), r.arrival)

    return [handles[i] for i in sorted(range(len(reqs)), key=key)]
