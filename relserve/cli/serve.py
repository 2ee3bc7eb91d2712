"""``relserve serve``: the HTTP server (FastAPI on uvicorn) around one embedded engine."""

from __future__ import annotations

from pathlib import Path

import typer

from relserve.cli import app


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable only from this machine (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0 for every interface)."),
    port: int = typer.Option(8000, help="Port to listen on."),
    tenants: Path | None = typer.Option(
        None, help="Tenants file (TOML or JSON) with API keys and limits; without it the server is open (single tenant)."
    ),
    model: str = typer.Option("smollm2", help="Model name or local folder."),
    policy: str = typer.Option("relserve", help="Scheduling policy (relserve, fcfs, sp, sarathi, vllm, ...)."),
    replicas: int = typer.Option(
        1, min=1, envvar="RELSERVE_REPLICAS", help="Engine replicas on Ray (more than 1 needs `pip install ray`)."
    ),
    ray_address: str | None = typer.Option(
        None, envvar="RELSERVE_RAY_ADDRESS", help="An existing Ray cluster for the replicas (default: a local Ray)."
    ),
    dispatcher: str = typer.Option("relquery", help="How replicas get relQueries: relquery, least-loaded, power-of-two, round-robin."),
    cache: bool = typer.Option(True, help="Answer repeated greedy prompts from the persistent result cache."),
    public_url: str | None = typer.Option(None, help="Address clients use (written into the Office add-in manifest)."),
    ssl_keyfile: Path | None = typer.Option(None, help="TLS key (Office add-ins need https)."),
    ssl_certfile: Path | None = typer.Option(None, help="TLS certificate."),
    cors_origin: list[str] = typer.Option([], help="Allow browser calls from this origin (repeatable)."),
    log_level: str = typer.Option("info", help="uvicorn log level."),
    cascade: float | None = typer.Option(
        None, help="Agreement target of a model cascade for llm_filter / llm_classify calls that name none "
        "(e.g. 0.95: a proxy answers the rows it is sure of; a call's own cascade, 0 for off, overrides it)."
    ),
    hash_key: str | None = typer.Option(None, help="Print the key_sha256 for this API key (for the tenants file) and exit."),
    insecure_open: bool = typer.Option(
        False, help="Serve without --tenants on a non-loopback address (anyone who reaches it reads every job)."
    ),
) -> None:
    """Serve relQueries over HTTP: /v1/relqueries, /v1/cells, OpenAI-compatible /v1/completions, /metrics, /sheet."""
    from relserve.server.tenants import hash_key as _hash

    if hash_key is not None:
        typer.echo(_hash(hash_key))
        return

    import uvicorn

    from relserve import Engine
    from relserve.errors import ConfigError
    from relserve.server import Tenants, create_app
    from relserve.server.app import open_host_names
    from relserve.server.runner import Server

    try:
        tenant_cfg = Tenants.coerce(tenants)
    except ConfigError as e:
        raise typer.BadParameter(str(e), param_hint="--tenants") from None
    if tenant_cfg.open and not is_loopback(host) and not insecure_open:
        raise typer.BadParameter(
            f"{host} is not a loopback address and there is no --tenants file: every client that reaches it "
            "could submit work and list and read every job. Give --tenants (API keys), listen on 127.0.0.1, "
            "or pass --insecure-open if that is really what you want.",
            param_hint="--host",
        )
    if replicas > 1:
        from relserve.cluster.cluster import Cluster

        typer.echo(f"starting {replicas} engine replicas on Ray ({model}, policy {policy}, dispatcher {dispatcher})...")
        if not tenant_cfg.open:
            typer.echo(
                "note: engine replicas on Ray take no per-tenant prefix-cache salt yet; tenants share the "
                "replicas' prefix caches (cached_tokens can tell one tenant's prompts to another)", err=True
            )
        try:
            engine = Cluster(replicas, model=model, policy=policy, address=ray_address, dispatcher=dispatcher)
        except ConfigError as e:
            raise typer.BadParameter(str(e), param_hint="--replicas") from None
    else:
        typer.echo(f"starting the engine ({model}, policy {policy}; about 25 s)...")
        engine = Engine(model=model, policy=policy)
    server = None
    try:
        # an open server on loopback answers loopback names only (DNS rebinding); one opened
        # on purpose (--insecure-open) answers any, as it must for its remote clients
        hosts = open_host_names(public_url) if tenant_cfg.open and is_loopback(host) else None
        web = create_app(engine, tenants=tenant_cfg, cache=cache, public_url=public_url, cors_origins=cors_origin,
                         cascade=cascade, allowed_hosts=hosts)
        scheme = "https" if ssl_certfile else "http"
        mode = "open (no API key needed)" if tenant_cfg.open else f"{len(tenant_cfg.names)} tenant(s)"
        typer.echo(f"relserve on {scheme}://{host}:{port}  [{mode}]  spreadsheet: {scheme}://{host}:{port}/sheet")
        config = uvicorn.Config(
            web,
            host=host,
            port=port,
            log_level=log_level,
            ssl_keyfile=str(ssl_keyfile) if ssl_keyfile else None,
            ssl_certfile=str(ssl_certfile) if ssl_certfile else None,
            timeout_graceful_shutdown=10,
        )
        server = Server(config, stop_when_dead=engine)
        server.run()
    finally:
        engine.close()
    if server is not None and server.engine_died:
        # a failure exit, so that a supervisor (systemd's Restart=on-failure) starts it again
        typer.echo(f"relserve serve stopped: {server.engine_died}", err=True)
        raise typer.Exit(code=1)
