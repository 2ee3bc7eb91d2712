"""The key of a call: what makes relQueries one call to the scheduler (template, output settings).

relQueries of one call answer at alike lengths; the scheduler learns those lengths per key
(``PolicySettings.output_history``). The planner keys a relQuery by its ``LLMCall``; a relQuery
built by hand, by its template and output settings.
"""

from __future__ import annotations

import hashlib
import json


def call_key_of(*parts: object) -> str:
    """A short, stable key of ``parts`` (JSON-able values; anything else by its ``str``)."""
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def template_call_key(template: str, max_tokens: int, choices: object = None, json_schema: object = None,
                      system: str | None = None) -> str:
    """The key of a relQuery built by hand from ``template`` and its output settings (the
    simulator keys a trace's relQueries the same way)."""
    return call_key_of(template, max_tokens, choices, json_schema, system)
