"""What the Python code asks of the backend it runs in, through ``plpy`` (passed in): settings,
the superuser's configuration, the caller's key, interrupt checks. Every statement here is fully
schema-qualified: the ``*_query`` functions run under the caller's search_path (their query is the
caller's), and a caller's schema must not swap in its own function or operator."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from relserve.client import Client
from relserve.postgres.budgets import ceilings_of
from relserve.postgres.definer import (
    CONTEXT_COLUMNS,
    DEFAULTS_SQL,
    as_the_definer_chose,
    chosen_by_others,
    definer_defaults,
)
from relserve.postgres.settings import (
    REFUSED_SETTINGS,
    SETTING_NAMES,
    Settings,
    key_for,
    refused,
    server_url,
    settings_from_row,
)

_plans: dict[str, Any] = {}
_clients: dict[tuple[str, str, float], Client] = {}


def _plan(plpy: object, name: str, sql: str, types: list[str] | None = None) -> Any:
    if name not in _plans:
        _plans[name] = plpy.prepare(sql, types or [])
    return _plans[name]


def settings(plpy: object) -> Settings:
    """The call's ``relserve.*`` settings and the role's ceilings; inside a ``SECURITY DEFINER``
    function, only the values the definer chose (relserve/postgres/definer.py)."""
    names = SETTING_NAMES + tuple(REFUSED_SETTINGS)
    columns = [f"pg_catalog.current_setting('relserve.{n}', true) AS {n}" for n in names]
    row = dict(plpy.execute(_plan(plpy, "settings", "SELECT " + ", ".join((*columns, *CONTEXT_COLUMNS))))[0])
    refused(row)
    ignored = chosen_by_others(row, SETTING_NAMES)
    if ignored:
        defaults = definer_defaults(plpy.execute(_plan(plpy, "definer_defaults", DEFAULTS_SQL)))
        row = as_the_definer_chose(row, ignored, defaults)
    limits = plpy.execute(_plan(plpy, "budget_limits", "SELECT own, max_tokens_total, max_seconds FROM relserve.my_budget_limit"))
    return replace(settings_from_row(row), ceilings=ceilings_of([dict(r) for r in limits]))


def config(plpy: object) -> dict[str, str]:
    rows = plpy.execute(_plan(plpy, "config", "SELECT name, value FROM relserve.config"))
    return {r["name"]: r["value"] for r in rows}


def client(plpy: object, timeout_s: float, url: str | None = None, api_key: str | None = None) -> Client:
    """A connection pool per session, server and key. Without ``url``: the superuser's server
    and the caller's key stored for it (the foreign data wrapper passes both from the catalog)."""
    if url is None:
        url = server_url(config(plpy))
        keys = plpy.execute(_plan(plpy, "key", "SELECT api_key, url FROM relserve.my_api_key"))
        api_key = key_for([dict(r) for r in keys], url)
    key = (url, api_key or "", timeout_s + 30.0)  # the socket's own timeout is a backstop behind ours
    if key not in _clients:
        _clients[key] = Client(url, api_key=api_key or "", timeout=key[2])
    return _clients[key]


def check_for_interrupts(plpy: object) -> None:
    """A pending cancel or statement timeout raises here (as plpy.SPIError)."""
    plpy.execute(_plan(plpy, "interrupts", "SELECT pg_catalog.pg_sleep(0)"))
