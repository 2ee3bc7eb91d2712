"""Checking values against a caller's JSON schema without letting the schema stall the process.

A schema is input from whoever calls ``llm_extract`` (a server tenant, a PostgreSQL role, a
spreadsheet cell). Two of its parts can make a check run away, and a check runs inside the server
process, where Python's regular expressions hold the interpreter lock and stop every tenant:

* a regular expression with nested repetition (``"pattern": "^(a+)+$"``) takes exponential time on
  a value that almost matches (``"aaaa...a!"``): 27 characters took 10 s. The schema's
  expressions (``pattern``, ``patternProperties`` and the ``additionalProperties`` they decide)
  are matched here with the ``regex`` module under a time limit instead of ``re``;
* a schema nested deeper than Python's recursion allows, or a ``$ref`` that refers to itself
  without end, raises RecursionError; it is reported as the schema's problem.

``unevaluatedProperties`` beside ``patternProperties`` would match the expressions outside these
keywords, so that pair is refused when the schema is checked.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import regex
from jsonschema import validators
from jsonschema.exceptions import ValidationError

#: the most one match of a schema's expression may take
PATTERN_SECONDS = 0.05


class SchemaTooCostly(Exception):
    """A schema whose check would run away (a slow expression, endless nesting)."""


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``, within ``PATTERN_SECONDS``."""
    try:
        return regex.search(pattern, text, timeout=PATTERN_SECONDS) is not None
    except TimeoutError:
        raise SchemaTooCostly(f"its pattern {pattern!r} took more than {PATTERN_SECONDS:g} s to match a value of "
                              f"{len(text):,} characters; write it without nested repetition such as (a+)+") from None
    except regex.error as e:
        raise SchemaTooCostly(f"its pattern {pattern!r} is not a regular expression this check reads: {e}") from None


def _pattern(validator, pattern: str, instance: Any, schema: Mapping) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, patterns: Mapping, instance: Any, schema: Mapping) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for name, value in instance.items():
            if search(pattern, name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _additional_properties(validator, allowed: Any, instance: Any, schema: Mapping) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = sorted((name for name in instance
                     if name not in named and not any(search(p, name) for p in patterns)), key=str)
    if validator.is_type(allowed, "object"):
        for name in extras:
            yield from validator.descend(instance[name], allowed, path=name)
    elif not allowed and extras:
        listed = ", ".join(repr(name) for name in extras)
        if patterns:
            yield ValidationError(f"{listed} {'does' if len(extras) == 1 else 'do'} not match any of the regexes: "
                                  f"{', '.join(repr(p) for p in sorted(patterns))}")
        else:
            yield ValidationError(f"Additional properties are not allowed ({listed} "
                                  f"{'was' if len(extras) == 1 else 'were'} unexpected)")


_BOUNDED = {"pattern": _pattern, "patternProperties": _pattern_properties, "additionalProperties": _additional_properties}


def check_schema(schema: Mapping) -> None:
    """SchemaTooCostly or jsonschema.SchemaError for a schema that cannot be used (see the module)."""
    try:
        validators.validator_for(schema).check_schema(schema)
        if _uses_both(schema):
            raise SchemaTooCostly("it has unevaluatedProperties beside patternProperties, whose expressions that "
                                  "keyword would match without a time limit; use additionalProperties")
    except RecursionError:
        raise SchemaTooCostly("it is nested too deeply to check") from None


def _uses_both(node: Any) -> bool:
    if isinstance(node, Mapping):
        if "unevaluatedProperties" in node and "patternProperties" in node:
            return True
        return any(_uses_both(v) for v in node.values())
    if isinstance(node, list):
        return any(_uses_both(v) for v in node)
    return False


class BoundedValidator:
    """A checked schema's validator whose expressions run under ``PATTERN_SECONDS``."""

    def __init__(self, schema: Mapping) -> None:
        base = validators.validator_for(schema)
        self._validator = validators.extend(base, _BOUNDED)(schema)

    def best_error(self, value: Any) -> str | None:
        """Why ``value`` does not fit (None: it fits); SchemaTooCostly when the check would run
        away."""
        from jsonschema.exceptions import best_match

        try:
            error = best_match(self._validator.iter_errors(value))
        except RecursionError:
            raise SchemaTooCostly("it refers to itself without end ($ref) or is nested too deeply to check") from None
        return None if error is None else error.message
