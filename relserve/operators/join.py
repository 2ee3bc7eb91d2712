"""Semantic join: ``llm_filter`` over candidate (left, right) pairs as ONE relQuery.

DuckDB evaluates ``JOIN ... ON llm_filter(...)`` one 2,048-row chunk of the cross product at a
time; here every candidate pair is one row of a single relQuery. The template's first
placeholder takes the left value and the second the right one, so with the left value first in
the template every pair of one left row shares that row's text as a prefix, and the planner's
sorted order keeps those pairs side by side for the prefix cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from relserve.backend.protocol import Backend
from relserve.errors import RowError
from relserve.functions import LLM_FILTER, LLMCall, make_call
from relserve.operators.budget import placeholders
from relserve.operators.values import Value
from relserve.planner.cache import ResultCache
from relserve.planner.plan_and_run import run_call

WHO = "llm_join"


def join_call(template: str, **options: Any) -> LLMCall:
    placeholders(template, WHO, 2, "Does {review} talk about {topic}?")
    return make_call(LLM_FILTER, template, **options)


@dataclass
class JoinOutcome:
    #: (left position, right position) of every pair the model accepted
    pairs: list[tuple[int, int]]
    #: pairs asked, pairs whose answer failed (NULL), and the error per failed pair
    asked: int = 0
    errors: dict[tuple[int, int], str] = field(default_factory=dict)
    ran: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    latency_s: float = 0.0


def run_join(
    call: LLMCall,
    left: Sequence[Value],
    right: Sequence[Value],
    *,
    candidates: Sequence[tuple[int, int]] | None = None,
    engine: Backend | None = None,
    cache: ResultCache | bool | None = True,
    progress: bool = False,
) -> JoinOutcome:
    """Ask ``call`` of every candidate pair (default: the whole cross product) in one relQuery."""
    pairs = list(candidates) if candidates is not None else [(i, j) for i in range(len(left)) for j in range(len(right))]
    out = JoinOutcome([], asked=len(pairs))
    if not pairs:
        return out
    outcome = run_call(
        call, [[left[i] for i, _ in pairs], [right[j] for _, j in pairs]], engine=engine, cache=cache, progress=progress
    )
    for p, value, err in zip(pairs, outcome.values, outcome.errors):
        if err is not None:
            out.errors[p] = err
        elif value:
            out.pairs.append(p)
    if call.options.on_error == "raise" and out.errors:
        p = min(out.errors)
        raise RowError(f"{WHO}: pair {p}: {out.errors[p]}")
    out.ran = outcome.ran
    if outcome.engine_stats is not None:
        s = outcome.engine_stats
        out.prompt_tokens, out.cached_tokens = s.prompt_tokens, s.cached_tokens
        out.latency_s = getattr(s, "latency_s", 0.0)
    return out
