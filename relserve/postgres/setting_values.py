"""One value of the PostgreSQL vocabulary (a ``relserve.*`` setting, an option of a ``*_query``
call's jsonb, a foreign table's option) as its type, checked by relserve's own rule for it.

Settings arrive as text (``SET relserve.top_p = 5``), options as JSON values (``'{"top_p": 5}'``).
Both are typed here and then checked with the rule every surface uses (``relserve.validation``,
``CallOptions``), so a bad value fails naming the setting or option before any request is sent,
instead of coming back as the server's HTTP 422 with the server's field name.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from relserve import validation as check
from relserve.errors import ConfigError
from relserve.postgres.errors import PgError
from relserve.validation import ON_ERROR_VALUES

_INT = ("max_tokens", "seed", "priority", "batch_window", "max_tokens_total")
_FLOAT = ("temperature", "top_p", "deadline_s", "timeout", "max_seconds", "cascade", *check.CASCADE_SHARES)
_BOOL = ("reorder_fields", "cache", "batch_calls", "order_quals")
_JSON = ("examples",)
_TEXT = ("system", "method", "prompt_shape", "answer_field", "on_budget", "label_plan")
_ON_ERROR = ("on_error", "on_server_error")
_TRUE = ("on", "true", "yes", "1", "t", "y")
_FALSE = ("off", "false", "no", "0", "f", "n")

#: the rows a batch node's window may hold (udfs/relserve/batch_scan.c checks the same bounds)
BATCH_WINDOW_MAX = 10000

#: values an option took before it shared relserve's vocabulary
RENAMED = {
    ("on_error", "fail"): "'fail' is now 'raise' (a failed row fails the statement)",
}


def _call_option(name: str) -> Callable[[object], object]:
    """The rule ``CallOptions`` holds for ``name`` (its ConfigError starts with the name)."""
    def rule(value: object) -> object:
        from relserve.functions import CallOptions

        CallOptions(**{name: value})
        return value
    return rule


def _positive_seconds(name: str) -> Callable[[object], object]:
    def rule(value: object) -> object:
        if not check.finite_number(value) or value <= 0:
            raise ConfigError(f"{name} must be a positive, finite number of seconds, got {value!r}")
        return value
    return rule


def _priority(value: object) -> object:
    check.priority(value)
    if not -check.PRIORITY_LIMIT <= value <= check.PRIORITY_LIMIT:
        raise ConfigError(f"priority must be an integer from {-check.PRIORITY_LIMIT} to {check.PRIORITY_LIMIT} "
                          f"(lower runs sooner), got {value!r}")
    return value


def _batch_window(value: object) -> object:
    if not 1 <= value <= BATCH_WINDOW_MAX:
        raise ConfigError(f"batch_window must be a whole number of rows from 1 to {BATCH_WINDOW_MAX}, got {value!r}")
    return value


def _cascade(value: object) -> object:
    check.cascade(value)
    return float(value)  # 0 stays 0 (off, over the server's default), not None (unset)


#: relserve's rule for each name, applied to the typed value
RULES: dict[str, Callable[[object], object]] = {
    "max_tokens": check.max_tokens,
    "temperature": check.temperature,
    "top_p": check.top_p,
    "seed": check.seed,
    "system": _call_option("system"),
    "method": _call_option("method"),
    "prompt_shape": _call_option("prompt_shape"),
    "answer_field": _call_option("answer_field"),
    "examples": _call_option("examples"),
    "label_plan": _call_option("label_plan"),
    "cascade": _cascade,
    **{name: (lambda value, name=name: check.cascade_share(name, value)) for name in check.CASCADE_SHARES},
    "max_tokens_total": check.max_tokens_total,
    "max_seconds": check.max_seconds,
    "on_budget": check.on_budget,
    "priority": _priority,
    "deadline_s": check.deadline_s,
    "timeout": _positive_seconds("timeout"),
    "batch_window": _batch_window,
}


def typed(name: str, value: object, where: str) -> object:
    """``value`` (text from a setting or a table option, or JSON) as the option's type, checked
    by relserve's rule for it; a PgError naming ``where`` and the expected form otherwise."""
    if value is None:
        return None
    try:
        converted = _converted(name, value)
    except (TypeError, ValueError, OverflowError, json.JSONDecodeError):
        raise PgError(f"{where} must be {_expected(name)}, got {_shown(value)}", hint=RENAMED.get((name, str(value)))) from None
    rule = RULES.get(name)
    if rule is None:
        return converted
    try:
        checked = rule(converted)
    except ConfigError as e:  # relserve's own message, which starts with the option's name (or says which part)
        text = str(e)
        raise PgError(where + text.removeprefix(name) if text.startswith(name) else f"{where}: {text}") from None
    return converted if name != "cascade" else checked


def _converted(name: str, value: object) -> object:
    if name in _INT:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        if isinstance(value, str):
            return int(value.strip())
        return int(value)
    if name in _FLOAT:
        if isinstance(value, bool):
            raise ValueError
        if name == "cascade" and isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                return value  # the cascade's rule refuses it with its own message
        number = float(value)  # OverflowError for an integer beyond a float (jsonb keeps 1e400 as digits)
        if not math.isfinite(number):
            raise ValueError
        return number
    if name in _BOOL:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower() if isinstance(value, str) else None
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ValueError
    if name in _JSON:
        return json.loads(value) if isinstance(value, str) else value
    if name in _ON_ERROR:
        text = value.strip().lower() if isinstance(value, str) else None
        if text not in ON_ERROR_VALUES:
            raise ValueError
        return text
    if name in _TEXT:
        if not isinstance(value, str):
            raise TypeError
        return value
    return value


def _shown(value: object) -> str:
    """The value as the message quotes it, cut short (a 1 MB value is not repeated whole)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _expected(name: str) -> str:
    if name in _INT:
        return "a whole number"
    if name == "timeout":
        return "a positive number of seconds"
    if name in _FLOAT:
        return "a finite number"
    if name in _BOOL:
        return "a boolean (on or off)"
    if name in _JSON:
        return "JSON"
    if name in _TEXT:
        return "text"
    return " or ".join(repr(v) for v in ON_ERROR_VALUES)
