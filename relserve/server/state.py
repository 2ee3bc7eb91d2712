"""What the routes share: the engine, the tenants, the jobs, the metrics and the result cache."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TypeVar

from fastapi import Header, Request

from relserve.backend.protocol import Backend
from relserve.functions import FUNCTIONS, takes_option
from relserve.labels.keys import namespace_of
from relserve.labels.memory import LabelMemory, process_memory
from relserve.planner.cache import CacheView, ResultCache
from relserve.policy.types import Tenancy
from relserve.server.budget import Cost, DayBudgets, check_request
from relserve.server.errors import ApiError
from relserve.server.jobs import Job, JobRegistry, Reservation
from relserve.server.metrics import ServerMetrics
from relserve.server.schemas import CallBody
from relserve.server.tenant_engine import TenantEngine, engine_for_tenant
from relserve.server.tenants import Tenant, Tenants

B = TypeVar("B", bound=CallBody)

#: the error of rows cut short because the server stops
STOPPING = "cancelled: the server is stopping"


@dataclass
class ServerState:
    engine: Backend
    tenants: Tenants
    jobs: JobRegistry
    metrics: ServerMetrics
    #: the result cache for repeated greedy prompts (None: off)
    cache: ResultCache | None
    #: the address clients use to reach the server (for the add-in manifest); None: from the request
    public_url: str | None = None
    #: each tenant's engine tokens today, against its max_tokens_per_day (issue 47)
    day_budgets: DayBudgets = field(default_factory=DayBudgets)
    _tasks: set[asyncio.Task] = field(default_factory=set)
    #: set once the server is stopping: new work is refused, running work is cancelled
    stopping: bool = False
    loop: asyncio.AbstractEventLoop | None = None
    #: the ``cascade`` of a call that names none (``relserve serve --cascade``; None: off)
    cascade: float | None = None

    def with_defaults(self, body: B) -> B:
        """``body`` with the server's defaults for the options it leaves unset (a copy), each
        only where the body's function reads it (a map's call refuses a cascade it is given)."""
        if body.cascade is None and self.cascade is not None and takes_option(FUNCTIONS[f"llm_{body.function}"], "cascade"):
            return body.model_copy(update={"cascade": self.cascade})
        return body

    def cache_for(self, tenant: Tenant) -> ResultCache | CacheView | None:
        """The result cache as ``tenant`` may see it: its own answers, or its cache group's; none
        for a request sent isolated."""
        if self.cache is None or tenant.isolated:
            return None
        return self.cache.scoped(scope=tenant.cache_scope)

    def tenancy(self, tenant: Tenant) -> Tenancy | None:
        """How the engine sees the tenant's work: its prefix-cache namespace and its share.
        None in open mode (one tenant: the engine runs as it does for a library user), unless
        the request is isolated."""
        if tenant.open_mode and not tenant.isolated:
            return None
        return Tenancy(tenant.name, tenant.prefix_cache_salt, tenant.limits.weight, tenant.limits.max_running_shared)

    def engine_for(self, tenant: Tenant) -> Backend | TenantEngine:
        """The engine as ``tenant``'s work reaches it (server/tenant_engine.py)."""
        return engine_for_tenant(self.engine, self.tenancy(tenant))

    def label_memory(self, tenant: Tenant) -> LabelMemory | None:
        """The label memory ``tenant``'s calls keep their plans in (relserve/labels/memory.py: the
        server's home, a plan per tenant namespace); none for a request sent isolated, whose plan
        holds rows the reader may not see and is used once."""
        return None if tenant.isolated else process_memory()

    def namespace(self, tenant: Tenant) -> str | None:
        """``tenant``'s prefix-cache namespace, whose per-template memory the planner may read."""
        return namespace_of(self.engine_for(tenant))

    def check_priority(self, priority: int, tenant: Tenant) -> None:
        """403 if ``priority`` is outside the classes the tenant may use."""
        low, high = tenant.priority_range
        if not low <= priority <= high:
            raise ApiError(
                403,
                f"priority {priority} is not allowed for tenant {tenant.name!r}: the allowed range is {low} to {high} "
                "(lower runs sooner; the tenants file sets min_priority and max_priority)",
            )

    def reserve(self, cost: Cost, tenant: Tenant) -> Reservation:
        """Check a request's size against the tenant's limits and count it as in flight while it
        is planned (413 for a request that could never fit, 429 for one that must wait)."""
        self._refuse_if_stopping()
        check_request(cost, tenant)
        return self.jobs.reserve(tenant.name, cost, tenant.limits)

    def _refuse_if_stopping(self) -> None:
        if self.stopping:
            raise ApiError(503, "the server is stopping; retry on another server or after it restarts", {"Retry-After": "5"})

    def launch(self, job: Job, tenant: Tenant, reservation: Reservation | None = None) -> Job:
        """Admit ``job`` within its tenant's limits and start it on the event loop; the planning
        reservation is replaced by the job's own figures in the same step."""
        self.jobs.release(reservation)
        self._refuse_if_stopping()
        self.jobs.admit(job, tenant.limits)
        task = asyncio.get_running_loop().create_task(job.run(self.engine, self.metrics.job_finished))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    def job_of(self, job_id: str, tenant: Tenant) -> Job:
        job = self.jobs.get(job_id, tenant.name)
        if job is None:
            raise ApiError(404, f"no relQuery with id {job_id!r}")
        return job

    def check_size(self, n: int, tenant: Tenant, what: str = "rows") -> None:
        limit = tenant.limits.max_rows_per_request
        if n > limit:
            raise ApiError(413, f"too many {what} in one request: {n}, the limit is {limit}; split the request")

    def begin_shutdown(self, reason: str | None = None) -> None:
        """Stop taking work and cancel what runs, so that streams end with a final event
        saying why (``reason``, default ``STOPPING``) instead of being cut, within the server's
        grace period. Thread-safe."""
        def stop() -> None:
            self.stopping = True
            self.jobs.cancel_all(reason or STOPPING)

        if self.loop is None or self.loop.is_closed():
            stop()
        else:
            self.loop.call_soon_threadsafe(stop)

    async def shutdown(self) -> None:
        self.stopping = True
        self.jobs.cancel_all(STOPPING)
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=30)


def get_state(request: Request) -> ServerState:
    return request.app.state.relserve


def current_tenant(request: Request, authorization: str | None = Header(None)) -> Tenant:
    """The caller's tenant from ``Authorization: Bearer <key>`` (401 if missing or unknown)."""
    return get_state(request).tenants.authenticate(authorization)
