"""Per-policy figures of one replay (the columns of the benchmark table)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from relserve.benchmark.replay import ReplayResult
from relserve.latency_figures import LatencyFigures
from relserve.percentile import percentile


class RunSummary(LatencyFigures):
    policy: str
    load: float
    #: relQueries per second the trace offered at this load
    rate: float
    relqueries: int
    rows: int
    errors: int
    #: latency over isolated execution time, averaged (1.0 is the physical floor)
    mean_slowdown: float | None
    throughput_rows_per_s: float
    throughput_relqueries_per_s: float
    prefix_hit_rate: float
    span_s: float
    policy_seconds: float | None
    #: the policy's decision time as a share of end-to-end time (paper Table 6)
    overhead_share: float | None
    steps: int | None


def summarize(policy: str, load: float, rate: float, run: ReplayResult, isolated: Mapping[str, float] | None) -> RunSummary:
    recs = run.records
    lat = [r.latency_s for r in recs]
    slow = None
    if isolated:
        ratios = [r.latency_s / isolated[r.id] for r in recs if isolated.get(r.id)]
        slow = statistics.fmean(ratios) if ratios else None
    prompt = sum(r.prompt_tokens for r in recs)
    span = run.span_s or 1e-9
    return RunSummary(
        policy=policy,
        load=load,
        rate=rate,
        relqueries=len(recs),
        rows=sum(r.rows for r in recs),
        errors=sum(r.errors for r in recs),
        mean_latency=statistics.fmean(lat) if lat else 0.0,
        p50_latency=percentile(lat, 0.5, empty=0.0),
        p95_latency=percentile(lat, 0.95, empty=0.0),
        max_latency=max(lat, default=0.0),
        mean_waiting=statistics.fmean(r.waiting_s for r in recs) if recs else 0.0,
        mean_core=statistics.fmean(r.core_s for r in recs) if recs else 0.0,
        mean_tail=statistics.fmean(r.tail_s for r in recs) if recs else 0.0,
        mean_slowdown=slow,
        throughput_rows_per_s=sum(r.rows for r in recs) / span,
        throughput_relqueries_per_s=len(recs) / span,
        prefix_hit_rate=sum(r.cached_tokens for r in recs) / prompt if prompt else 0.0,
        span_s=run.span_s,
        policy_seconds=run.policy_seconds,
        overhead_share=run.policy_seconds / span if run.policy_seconds is not None else None,
        steps=run.steps,
    )
