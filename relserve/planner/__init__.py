"""The planner shared by every surface: one LLM call over a table becomes one relQuery.

``run_call(call, columns)`` deduplicates identical prompts, answers what it can from the persistent
result cache, orders the rest for prefix sharing (GGR), pins the shared prefix, runs one relQuery,
and returns every row's value in input order. ``run_call(..., explain_only=True)`` returns the
EXPLAIN instead of running. The run itself is the ``CallExecutor``'s, which the server's jobs
drive too, over ``PlannedRows`` (a plan's cache hits, failed rows and prompts left to run).
"""

from relserve.planner.cache import ResultCache, clear_result_cache, shared_cache
from relserve.planner.engine_ref import EngineRef
from relserve.planner.executor import CallExecutor
from relserve.planner.explain import Explain, explain_plan
from relserve.planner.ggr import GGR, Ordering, ggr, sort_rows
from relserve.planner.hit_rate import HitStats, PrefixCacheModel, predict_hits
from relserve.planner.plan import CallPlan, plan_call
from relserve.planner.plan_and_run import CallOutcome, cached_values, run_call
from relserve.planner.planned_rows import PlannedRows
from relserve.planner.tokens import TokenSource, token_source

__all__ = [
    "GGR",
    "CallExecutor",
    "CallOutcome",
    "CallPlan",
    "EngineRef",
    "Explain",
    "HitStats",
    "Ordering",
    "PlannedRows",
    "PrefixCacheModel",
    "ResultCache",
    "TokenSource",
    "cached_values",
    "clear_result_cache",
    "explain_plan",
    "ggr",
    "plan_call",
    "predict_hits",
    "run_call",
    "shared_cache",
    "sort_rows",
    "token_source",
]
