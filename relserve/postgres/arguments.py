"""The SQL functions' own arguments, checked before anything is sent. The functions are not
STRICT (a NULL value among a row's values fails that row alone, with its error), so a NULL
template, query or label list is an error naming the argument instead of a silent NULL."""

from __future__ import annotations

import json

from relserve.postgres.errors import PgError

#: the functions ``options`` may name for llm_count_tokens and llm_estimate_query
FUNCTIONS = ("map", "filter", "classify", "extract", "score")


def required(name: str, **arguments: object) -> None:
    """A PgError naming the first of ``arguments`` that is NULL."""
    for what, value in arguments.items():
        if value is None:
            what = what.replace("_", " ")
            raise PgError(f"{name}: the {what} {'are' if what.endswith('s') else 'is'} NULL")


def options_object(name: str, options: object, example: str = '{"max_tokens": 8}') -> dict[str, object]:
    """A call's ``options`` jsonb as a dict (a SQL NULL is no options); anything but a JSON
    object is an error naming it."""
    if options is None:
        return {}
    given = json.loads(options) if isinstance(options, str) else options
    if not isinstance(given, dict):
        shown = json.dumps(given)[:40] if not isinstance(given, str) else repr(given)[:40]
        raise PgError(f"{name}: options must be a jsonb object, e.g. '{example}', got {shown}")
    return dict(given)


def function_option(name: str, value: object) -> str:
    """The ``function`` option of llm_count_tokens and llm_estimate_query (``map`` when absent)."""
    if value is None:
        return "map"
    text = value.lower().removeprefix("llm_") if isinstance(value, str) else None
    if text not in FUNCTIONS:
        raise PgError(f"{name}: option function must be one of {', '.join(FUNCTIONS)}, got {value!r}")
    return text
