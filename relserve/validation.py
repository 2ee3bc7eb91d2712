"""The checks of a call's settings, written once.

``CallOptions`` (every surface's call), ``SchedulingHints``, ``RelQuery`` (the engine's unit) and
the server's request bodies (whose pydantic bounds are these constants) all check a setting
here, so a value accepted by one is accepted by all and refused with the same message.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import TypeGuard

from relserve.errors import ConfigError


class OnError(StrEnum):
    """What a failed row (a NULL value, a prompt too long, an answer that does not parse) does.

    The one vocabulary of every surface: DuckDB, polars, the engine, the server and PostgreSQL.
    """

    #: the row gets NULL (text None) and its error; the other rows keep their answers
    NULL = "null"
    #: the call fails with an error that names the first failed row
    RAISE = "raise"


ON_ERROR_VALUES: tuple[str, ...] = tuple(m.value for m in OnError)

#: bounds of the sampling settings (the server's request schema uses them too)
MAX_TOKENS_LIMIT = 32768
TEMPERATURE_LIMIT = 10.0
PRIORITY_LIMIT = 1000
#: the most labels a closed question takes (issue 63): scoring a row reads every label (an engine
#: request per node of the labels' token trie: 10,000 numbered labels are about 11,000 requests a
#: row), and a decoded answer lists them all in its prompt
MAX_LABELS = 1000
#: the agreement targets a model cascade may be asked for (relserve/cascade/)
CASCADE_MIN, CASCADE_MAX = 0.5, 0.999


def unicode_problem(text: str) -> str | None:
    """Why ``text`` cannot be encoded (a lone surrogate, which JSON can carry), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"not valid Unicode text ({e.reason} at character {e.start})"
    return None


def finite_number(x: object) -> TypeGuard[int | float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def max_tokens(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS_LIMIT:
        raise ConfigError(f"max_tokens must be a positive integer, got {value!r}; the largest allowed is {MAX_TOKENS_LIMIT}")
    return value


def temperature(value: object) -> float:
    if not finite_number(value) or not 0 <= value <= TEMPERATURE_LIMIT:
        raise ConfigError(f"temperature must be a number >= 0, got {value!r}; the largest allowed is {TEMPERATURE_LIMIT:g}")
    return float(value)


def top_p(value: object) -> float:
    if not finite_number(value) or not 0 < value <= 1:
        raise ConfigError(f"top_p must be a number in (0, 1], got {value!r}")
    return float(value)


#: the seeds the engine's sampler takes (a larger one failed its row with no message)
SEEDS = (-(2**63), 2**64 - 1)


def seed(value: object) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"seed must be an integer, got {value!r}")
    if value is not None and not SEEDS[0] <= value <= SEEDS[1]:
        raise ConfigError(f"seed must be an integer from {SEEDS[0]} to {SEEDS[1]}, got {value}")
    return value


def on_error(value: object) -> OnError:
    try:
        return OnError(value)
    except ValueError:
        raise ConfigError(f"on_error must be 'null' or 'raise', got {value!r}") from None


def text_or_none(name: str, value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{name} must be text, got {type(value).__name__}")
    return value


def priority(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"priority must be an integer, got {value!r}")
    return value


def deadline_s(value: object) -> float | None:
    if value is not None and (not finite_number(value) or value <= 0):
        raise ConfigError(f"deadline_s must be a positive, finite number of seconds, got {value!r}")
    return value


def cascade(value: object) -> float | None:
    """The ``cascade`` option: the agreement with the LLM's answers to keep, or None for off;
    0 is off too (it overrides a session's or a server's default, which None leaves in place)."""
    if value is None or (finite_number(value) and value == 0):
        return None
    if not finite_number(value) or not CASCADE_MIN <= value <= CASCADE_MAX:
        raise ConfigError(f"cascade must be an agreement target between {CASCADE_MIN} and {CASCADE_MAX} "
                          f"(0.95: 95% of the rows answered as the LLM would), or 0 for off; got {value!r}")
    return float(value)


#: the filter options of a cascade's recall and precision targets, and its failure probability
#: (relserve/cascade/targets.py): each a share strictly between 0 and 1
CASCADE_SHARES: dict[str, str] = {
    "cascade_recall": "a recall target: the share of the rows the LLM would keep that the cascade keeps (0.9)",
    "cascade_precision": "a precision target: the share of the rows the cascade keeps that the LLM would keep (0.9)",
    "cascade_failure": "the probability that the cascade misses its target (0.05)",
}


def cascade_share(name: str, value: object) -> float | None:
    """One of ``CASCADE_SHARES``: None (unset), or a number strictly between 0 and 1."""
    if value is None:
        return None
    if not finite_number(value) or not 0.0 < value < 1.0:
        raise ConfigError(f"{name} must be a number strictly between 0 and 1 ({CASCADE_SHARES[name]}), got {value!r}")
    return float(value)


#: what a call does when its budget (``max_tokens_total``, ``max_seconds``) would be exceeded
ON_BUDGET_VALUES = ("refuse", "partial")


def max_tokens_total(value: object) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(f"max_tokens_total must be a positive whole number of tokens, got {value!r}")
    return value


def max_seconds(value: object) -> float | None:
    if value is not None and (not finite_number(value) or value <= 0):
        raise ConfigError(f"max_seconds must be a positive, finite number of seconds, got {value!r}")
    return float(value) if value is not None else None


def on_budget(value: object) -> str:
    if value not in ON_BUDGET_VALUES:
        raise ConfigError(
            f"on_budget must be 'refuse' (refuse before starting when the estimate exceeds the budget) or 'partial' "
            f"(run until the budget is reached; the rows not answered get NULL and the error 'budget exceeded'), got {value!r}"
        )
    return value
