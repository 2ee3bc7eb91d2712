"""What a call is allowed to use: the ``relserve.*`` settings a role may SET, the options of one
call (the same names as DuckDB's ``llm_options``), and what only a superuser decides (the server
address and each role's key, in tables only superusers write).

One vocabulary for the three forms: ``SET relserve.max_tokens = 8`` for a session, ``'{"max_tokens":
8}'`` for one ``*_query`` call, ``OPTIONS (max_tokens '8')`` for a foreign table. The C part of the
extension defines every name in ``SETTING_NAMES`` as a setting and reserves the ``relserve.``
prefix, so a misspelt ``SET relserve.max_token`` is an error naming the prefix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from relserve.call_fields import CallFields
from relserve.client import DEFAULT_URL
from relserve.errors import ConfigError
from relserve.functions import (
    FUNCTIONS,
    OPTION_NAMES,
    check_given_options,
    takes_option,
    validate_labels,
    validate_schema,
)
from relserve.postgres.budgets import within_ceilings
from relserve.postgres.errors import INSUFFICIENT_PRIVILEGE, INVALID_AUTHORIZATION, PgError
from relserve.postgres.setting_values import typed

#: options of a call that the server takes besides the call specification
SERVER_OPTIONS = ("cache", "priority", "deadline_s")
#: every option one call may carry as a setting (``model`` is the server's: a server serves one)
CALL_OPTIONS: tuple[str, ...] = tuple(n for n in OPTION_NAMES if n != "model") + SERVER_OPTIONS
#: what only the database side reads: how long a statement waits, what a server error does, and
#: whether scalar calls over a query's rows are batched (batch_calls.c), how many rows at a time,
#: and whether the batch node runs a WHERE's llm quals cheapest first (batch_plan.c)
BACKEND_OPTIONS = ("timeout", "on_server_error", "batch_calls", "batch_window", "order_quals")
#: options of one call only, never a session's: ``label_plan`` says what one call does with its
#: label plan (a session-wide "refresh" would make a new plan on every statement); a cascade's
#: recall / precision targets are a filter's, and a session's calls are not all filters
CALL_ONLY = ("label_plan", "cascade_recall", "cascade_precision", "cascade_failure")
#: a session setting per call option but the ``CALL_ONLY`` ones
SETTING_NAMES: tuple[str, ...] = BACKEND_OPTIONS + tuple(n for n in CALL_OPTIONS if n not in CALL_ONLY)
#: what one call's options (a ``*_query`` call's jsonb, a foreign table's options) may name: every
#: setting and the ``CALL_ONLY`` ones, ``label_plan`` included (``'{"label_plan": "refresh"}'``
#: refreshes that call's plan, as DuckDB's ``label_plan := 'refresh'``). A foreign table's OPTIONS
#: take the settings only (udfs/relserve/fdw_options.c checks them against ``rs_setting_names``):
#: a table's options hold for every scan of it, so ``label_plan 'refresh'`` there would make a new
#: plan on every statement, as a session-wide one would; a table's plans are pinned or refreshed
#: with ``relserve.pin_label_plans(template)`` or one ``*_query`` call instead
PER_CALL_NAMES: tuple[str, ...] = SETTING_NAMES + CALL_ONLY

#: names that were settings once and are a superuser's decision now: why, and where they went
REFUSED_SETTINGS: dict[str, str] = {
    "url": "relserve.url is not a setting: any role could point the database at an address of its choosing "
    "(and send another role's key there). A superuser sets it in relserve.config: "
    "INSERT INTO relserve.config VALUES ('url', 'http://127.0.0.1:8000')",
    "python_path": "relserve.python_path is not a setting: any role could point it at a folder whose .pth "
    "files then run as the postgres OS user. A superuser sets it in relserve.config.",
    "api_key": "relserve.api_key is not a setting: every role can read settings (SHOW, current_setting, "
    "pg_db_role_setting). A superuser stores each role's key in relserve.api_keys.",
}

DEFAULT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Settings:
    """The session's ``relserve.*`` settings, typed; unset ones are absent."""

    values: Mapping[str, object] = field(default_factory=dict)
    #: the budget a superuser set for the role (``relserve.budget_limits``): no call of the role
    #: may ask for more, whatever its settings or options say (relserve/postgres/budgets.py)
    ceilings: Mapping[str, object] = field(default_factory=dict)

    @property
    def timeout_s(self) -> float:
        timeout = self.values.get("timeout", DEFAULT_TIMEOUT_S)
        if not 0 < timeout < float("inf"):
            raise PgError(f"relserve.timeout must be a positive number of seconds, got {timeout!r}")
        return timeout

    @property
    def on_error(self) -> str:
        return self.values.get("on_error", "null")

    @property
    def on_server_error(self) -> str:
        return self.values.get("on_server_error", "raise")

    def call_options(self) -> dict[str, object]:
        return {k: v for k, v in self.values.items() if k in CALL_OPTIONS}


def settings_from_row(row: Mapping[str, object]) -> Settings:
    """The settings from one row of ``current_setting(...)`` values (text, '' or None when unset)."""
    values = {}
    for name in SETTING_NAMES:
        text = row.get(name)
        if isinstance(text, str) and text.strip():
            values[name] = typed(name, text.strip(), f"relserve.{name}")
    return Settings(values)


@dataclass(frozen=True)
class CallRequest:
    """What one call sends (its fields, encoded as every client encodes them), and what the
    backend does with errors."""

    call: CallFields
    on_error: str
    on_server_error: str
    timeout_s: float

    @property
    def options(self) -> dict[str, object]:
        """The call's fields as the request body carries them."""
        return self.call.to_json()


def call_request(name: str, settings: Settings, function: str, spec: object = None,
                 given: Mapping[str, object] | None = None) -> CallRequest:
    """Options of one call: the session's settings, overridden by the call's own (``given``:
    a ``*_query`` call's jsonb or a foreign table's options). Unknown names are an error listing
    the known ones."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(PER_CALL_NAMES))
    if unknown:
        raise PgError(f"{name}: unknown option(s) {', '.join(unknown)}; known options: {', '.join(PER_CALL_NAMES)}")
    chosen = {**settings.values, **{k: typed(k, v, f"{name}: option {k}") for k, v in given.items() if v is not None}}
    merged = Settings(within_ceilings(chosen, settings.ceilings))
    for option in ("cascade_recall", "cascade_precision"):
        if function != "filter" and merged.values.get(option) is not None:
            raise PgError(f"{name}: option {option} applies to llm_filter only (the recall or precision of the rows "
                          f"it keeps)")
    fn = FUNCTIONS[f"llm_{function}"]
    try:
        check_given_options(fn, given)  # the call's own; a session's setting applies where it can
    except ConfigError as e:
        raise PgError(f"{name}: option {e}") from None
    options: dict[str, object] = {"function": function}
    # the labels and the schema are checked here, by relserve's rules, so that a bad one names
    # itself before anything is sent
    try:
        if function == "classify" and spec is not None:
            if not isinstance(spec, (list, tuple)):
                raise PgError(f"{name}: the labels must be an array of text, e.g. ARRAY['positive', 'negative'], "
                              f"got {type(spec).__name__}")
            options["labels"] = list(validate_labels(spec, name))
        elif function == "extract" and spec is not None:
            options["json_schema"] = validate_schema(spec, name)
    except ConfigError as e:
        raise PgError(str(e)) from None
    options.update({k: v for k, v in merged.call_options().items() if takes_option(fn, k)})
    if options.get("label_plan") == "auto":  # the default: not sent, as DuckDB's calls leave it out
        del options["label_plan"]
    # row errors come back per row; what a failed row does is applied here
    options["on_error"] = "null"
    return CallRequest(CallFields(**options), merged.on_error, merged.on_server_error, merged.timeout_s)


# ---------------------------------------------------------------- what only a superuser decides


def server_url(config: Mapping[str, str]) -> str:
    """The server address from ``relserve.config`` (only superusers write it)."""
    return (config.get("url") or DEFAULT_URL).rstrip("/")


def key_for(role_keys: Sequence[Mapping[str, Any]], url: str) -> str:
    """The caller's key stored for ``url`` ('' when the role has none). A key stored for another
    address is never sent here: the superuser stored it for that server."""
    for row in role_keys:
        if (row.get("url") or "").rstrip("/") == url:
            return row["api_key"]
    if role_keys:
        stored = ", ".join(sorted({str(r.get("url")) for r in role_keys}))
        raise PgError(
            f"relserve: this role's key is stored for {stored}, not for the configured server {url}; it is not sent there",
            INVALID_AUTHORIZATION,
            hint="A superuser stores a key for this server: INSERT INTO relserve.api_keys (role, api_key, url) VALUES (...)",
        )
    return ""


def refused(row: Mapping[str, object]) -> None:
    """A refused setting that is set anyway (only possible before the extension's library
    loaded in this session): say where it went instead of ignoring it."""
    for name, why in REFUSED_SETTINGS.items():
        if isinstance(row.get(name), str) and row[name].strip():
            raise PgError(why, INSUFFICIENT_PRIVILEGE, hint=f"RESET relserve.{name}")
