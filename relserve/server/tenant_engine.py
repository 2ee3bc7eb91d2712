"""A backend as one tenant's work should reach it: in the tenant's prefix-cache namespace
(``cache_salt``) and with its share, for every path that runs a tenant's prompts (relQuery jobs,
spreadsheet cells, the semantic operators)."""

from __future__ import annotations

from typing import Any

from relserve.backend.protocol import Backend
from relserve.engine.handle import RelQueryHandle
from relserve.policy.types import Tenancy
from relserve.relquery import RelQuery


def engine_for_tenant(engine: Backend, tenancy: Tenancy | None) -> Backend | TenantEngine:
    """``engine`` as the executor should see it: submitting (and warming prefixes) in the
    tenant's prefix-cache namespace and with its share, when the engine supports tenancy."""
    if tenancy is None or not getattr(engine, "supports_tenancy", False):
        return engine
    return TenantEngine(engine, tenancy)


class TenantEngine:
    """Forwards everything to the engine, adding the tenancy to ``submit`` and ``warm_prefix``."""

    def __init__(self, engine: Backend, tenancy: Tenancy) -> None:
        self._engine = engine
        self._tenancy = tenancy

    @property
    def prefix_cache_namespace(self) -> str | None:
        """Whose cached state this tenant may reuse (its label plans and their worked examples, relserve/labels/memory.py)."""
        return self._tenancy.cache_salt

    def submit(self, rq: RelQuery) -> RelQueryHandle:
        return self._engine.submit(rq, tenancy=self._tenancy)

    def warm_prefix(self, text: str = "", system: str | None = None) -> int:
        return self._engine.warm_prefix(text, system, tenancy=self._tenancy)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)
