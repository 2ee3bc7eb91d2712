"""``create_app``: the FastAPI application around one engine."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from relserve import validation as check
from relserve.backend.protocol import Backend
from relserve.planner.cache import ResultCache, shared_cache
from relserve.server import (
    api_cells,
    api_estimates,
    api_label_plans,
    api_meta,
    api_openai,
    api_operators,
    api_relqueries,
    log_redaction,
    pages,
)
from relserve.server.body_limit import BodyLimitMiddleware
from relserve.server.errors import install_error_handlers
from relserve.server.jobs import JobRegistry
from relserve.server.metrics import ServerMetrics
from relserve.server.state import ServerState
from relserve.server.tenants import Tenants


def create_app(
    engine: Backend,
    *,
    tenants: Tenants | dict | str | Path | None = None,
    cache: ResultCache | bool | None = True,
    public_url: str | None = None,
    cors_origins: list[str] | tuple[str, ...] = (),
    keep_finished_s: float = 600.0,
    cascade: float | None = None,
    allowed_hosts: Sequence[str] | None = None,
) -> FastAPI:
    """A server for ``engine`` (an ``Engine``; it is not closed when the app stops).

    ``tenants``: a ``Tenants``, a dict, or the path of a TOML/JSON file; None runs open
    single-tenant mode. ``cache``: True for the planner's persistent result cache, a
    ``ResultCache`` for another one, False/None for none. ``public_url``: the address clients
    use (written into the Office add-in manifest); by default the request's own. ``cascade``:
    the agreement target of a filter or classify call that names none (None: off; relserve/cascade/).
    ``allowed_hosts``: the names a request's ``Host`` may carry (None: any; ``relserve serve`` gives
    an open server on loopback only loopback names, ``open_host_names``).
    """
    log_redaction.install()
    tenant_cfg = Tenants.coerce(tenants)
    jobs = JobRegistry(keep_finished_s=keep_finished_s)
    metrics = ServerMetrics(jobs, lambda: tenant_cfg.names, engine)
    store = shared_cache() if cache is True else (cache if isinstance(cache, ResultCache) else None)
    state = ServerState(engine, tenant_cfg, jobs, metrics, store, public_url.rstrip("/") if public_url else None,
                        cascade=check.cascade(cascade))

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        state.loop = asyncio.get_running_loop()
        yield
        await state.shutdown()

    app = FastAPI(
        title="relserve",
        version="0.1.0",
        summary="LLM calls over table rows (relQueries) served by one shared engine",
        lifespan=lifespan,
    )
    app.state.relserve = state
    def rejected(status: int) -> None:
        metrics.rejected.labels(str(status)).inc()

    install_error_handlers(app, on_reject=rejected)

    def body_limit(authorization: str | None) -> int:
        tenant = tenant_cfg.lookup(authorization)
        return (tenant.limits if tenant else tenant_cfg.default_limits).max_body_bytes

    app.add_middleware(BodyLimitMiddleware, limit_for=body_limit, on_reject=rejected)
    if allowed_hosts is not None:
        from starlette.middleware.trustedhost import TrustedHostMiddleware

        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))
    if cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["*"], allow_headers=["*"]
        )
    for module in (api_relqueries, api_estimates, api_cells, api_openai, api_meta, pages, api_operators, api_label_plans):
        app.include_router(module.router)
    return app


def open_host_names(public_url: str | None = None) -> list[str]:
    """The ``Host`` names an open server on loopback answers: loopback ones, and ``public_url``'s.
    Without a key a server's only guard is that no other machine reaches it; a web page the user
    opens could still re-point a name of its own at 127.0.0.1 (DNS rebinding) and submit work,
    list jobs and read answers, with a ``Host`` of that name."""
    from urllib.parse import urlsplit

    names = ["localhost", "127.0.0.1", "::1"]
    public = urlsplit(public_url).hostname if public_url else None
    return names + ([public] if public and public not in names else [])
