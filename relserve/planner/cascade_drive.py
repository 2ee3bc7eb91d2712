"""The synchronous driver of a cascade (DuckDB, polars: ``plan_and_run.run_rows``): its
relQueries run by ``CallExecutor`` one after the other, the proxy in between: the sample, the
audit of a recall / precision cascade (an agreement cascade audits within its sample), the rest.

The server's jobs drive the same steps on their event loop (relserve/server/jobs.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from relserve.backend.protocol import Backend
from relserve.cascade import prefetch
from relserve.cascade.policy import CascadePlan
from relserve.cascade.report import CascadeReport
from relserve.planner.cascade_runner import Cascade
from relserve.planner.cascade_targets import TargetCascade
from relserve.planner.executor import CallExecutor
from relserve.planner.planned_rows import PlannedRows
from relserve.results import RelQueryStats, RowResult

ExecutorFor = Callable[[PlannedRows], CallExecutor]
AnyCascade = Cascade | TargetCascade


def make_cascade(rows: PlannedRows, plan: CascadePlan, seed: int = 0) -> AnyCascade:
    """The cascade ``plan`` asks for: recall / precision targets, else the agreement."""
    return TargetCascade(rows, plan, seed=seed) if plan.targets is not None else Cascade(rows, plan, seed=seed)


@dataclass
class CascadeOutcome:
    rows: list[RowResult]
    #: the LLM relQueries' statistics, summed (None when none ran)
    stats: RelQueryStats | None
    report: CascadeReport
    #: the executor of the last relQuery: what its label method found (EXPLAIN ANALYZE)
    last: CallExecutor | None = None


def run_cascade(cascade: AnyCascade, engine: Backend, executor_for: ExecutorFor, *, progress: bool = False,
                fail_fast: bool = False) -> CascadeOutcome:
    """Every row of ``cascade.rows``: the sample's from the LLM, the proxy's, the remainder's
    from the LLM. With ``fail_fast`` the first failed row stops the call (the rows not answered
    then are left out, as a fail-fast executor leaves them). The rows are embedded while the
    sample runs (``prefetch.OVERLAP``)."""
    if prefetch.OVERLAP:
        cascade.start_prefetch()
    try:
        return _run(cascade, engine, executor_for, progress=progress, fail_fast=fail_fast)
    finally:
        cascade.stop_prefetch()


def _run(cascade: AnyCascade, engine: Backend, executor_for: ExecutorFor, *, progress: bool,
         fail_fast: bool) -> CascadeOutcome:
    rep = cascade.report
    t0 = time.perf_counter()
    first = executor_for(cascade.sample())
    out = first.run(engine, progress=progress, fail_fast=fail_fast)
    rep.sample_s = time.perf_counter() - t0
    for row in out:
        cascade.record(row)
    stats = [first.stats]
    if fail_fast and any(r.error is not None for r in out):
        return CascadeOutcome(out, merged_stats(stats), rep, first)
    cascade.learn()
    audit = cascade.audit()
    if audit is not None and audit.prompts:
        t1 = time.perf_counter()
        checking = executor_for(audit)
        got = checking.run(engine, progress=progress, fail_fast=fail_fast)
        rep.audit_s = time.perf_counter() - t1
        for row in got:
            cascade.record(row)
        out += got
        stats.append(checking.stats)
        if fail_fast and any(r.error is not None for r in got):
            return CascadeOutcome(out, merged_stats(stats), rep, checking)
    cascade.choose()
    answered = cascade.proxy_answers()
    out += answered
    write_proxy_answers(cascade, first)
    rest = cascade.remainder()
    last = first
    if rest.prompts:
        t2 = time.perf_counter()
        last = executor_for(rest)
        out += last.run(engine, progress=progress, fail_fast=fail_fast)
        rep.remainder_s = time.perf_counter() - t2
        stats.append(last.stats)
    return CascadeOutcome(out, merged_stats(stats), rep, last)


def write_proxy_answers(cascade: AnyCascade, executor: CallExecutor) -> int:
    """Store the proxy's answers in the result cache, under the call's key (which holds the
    cascade's target and seed: a call without the option never reads them)."""
    rows = cascade.rows
    entries = cascade.proxy_cache_entries()
    if rows.cache is None or not rows.call.deterministic or not entries:
        return 0
    return rows.cache.put_many(executor.model_id, executor.cache_settings(), entries)


def merged_stats(parts: list[RelQueryStats | None]) -> RelQueryStats | None:
    """The statistics of a cascade's relQueries as one: rows, errors and tokens summed; the
    latency phases of the relQueries one after the other, summed too."""
    got = [s for s in parts if s is not None]
    if not got:
        return None
    if len(got) == 1:
        return got[0]
    first = got[0]

    def total(name: str) -> float:
        return sum(getattr(s, name, 0) or 0 for s in got)

    return RelQueryStats(
        rel_id=first.rel_id,
        num_rows=int(total("num_rows")),
        num_errors=int(total("num_errors")),
        waiting_s=total("waiting_s"),
        core_s=total("core_s"),
        tail_s=total("tail_s"),
        latency_s=total("latency_s"),
        prompt_tokens=int(total("prompt_tokens")),
        output_tokens=int(total("output_tokens")),
        cached_tokens=int(total("cached_tokens")),
        policy=getattr(first, "policy", ""),
        replicas=max(getattr(s, "replicas", 1) for s in got),
        redispatched_rows=int(total("redispatched_rows")),
    )
