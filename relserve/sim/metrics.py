"""Per-relQuery timings (paper Eq. 2) and the per-policy summary of a simulation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import BaseModel

from relserve.latency_figures import LatencyFigures
from relserve.percentile import percentile
from relserve.sim.engine import EngineStats, RelQueryLog


class RelQueryTiming(BaseModel):
    id: str
    size: int
    arrival: float
    first_prefill_start: float
    last_prefill_end: float
    finish: float
    #: Eq. 2: start of the first prefill step - arrival
    waiting: float
    #: Eq. 2: end of the last prefill step - start of the first
    core: float
    #: Eq. 2: finish - end of the last prefill step
    tail: float
    latency: float
    #: latency of the relQuery alone on an empty engine (None if not computed)
    isolated: float | None = None
    slowdown: float | None = None


class PolicySummary(LatencyFigures):
    policy: str
    relqueries: int
    requests: int
    mean_slowdown: float | None
    #: finished work over the span from the first arrival to the last finish
    throughput_requests_per_s: float
    throughput_relqueries_per_s: float
    prefix_hit_rate: float
    prefill_tokens: int
    cached_tokens: int
    output_tokens: int
    steps: dict[str, int]
    preemptions: int
    kv_blocked_prefills: int
    evictions: int
    #: simulated clock at the end (the trace starts at t=0) and the time spent in steps
    simulated_seconds: float
    busy_seconds: float
    #: the policy's own decision time (wall clock, DPU + ABA) and its share of simulated time
    policy_overhead_seconds: float
    policy_overhead_share: float
    #: how long the simulation took to run (wall clock)
    wall_seconds: float


class SimResult(BaseModel):
    summary: PolicySummary
    settings: dict
    cost: dict
    limits: dict
    relqueries: list[RelQueryTiming]


def relquery_timings(logs: Sequence[RelQueryLog], isolated: Mapping[str, float] | None) -> list[RelQueryTiming]:
    out = []
    for log in logs:
        if log.finish is None or log.first_prefill_start is None or log.last_prefill_end is None:
            raise ValueError(f"relQuery {log.id!r} did not finish in the simulation")
        latency = log.finish - log.arrival
        iso = isolated.get(log.id) if isolated else None
        out.append(
            RelQueryTiming(
                id=log.id,
                size=log.size,
                arrival=log.arrival,
                first_prefill_start=log.first_prefill_start,
                last_prefill_end=log.last_prefill_end,
                finish=log.finish,
                waiting=log.first_prefill_start - log.arrival,
                core=log.last_prefill_end - log.first_prefill_start,
                tail=log.finish - log.last_prefill_end,
                latency=latency,
                isolated=iso,
                slowdown=latency / iso if iso else None,
            )
        )
    return out


def summarize(
    policy: str,
    timings: Sequence[RelQueryTiming],
    stats: EngineStats,
    *,
    overhead_seconds: float,
    wall_seconds: float,
) -> PolicySummary:
    n = len(timings)
    lat = np.array([t.latency for t in timings]) if n else np.zeros(1)
    requests = sum(t.size for t in timings)
    span = (max(t.finish for t in timings) - min(t.arrival for t in timings)) if n else 0.0
    slowdowns = [t.slowdown for t in timings if t.slowdown is not None]
    mean = lambda xs: float(np.mean(xs)) if len(xs) else 0.0  # noqa: E731
    return PolicySummary(
        policy=policy,
        relqueries=n,
        requests=requests,
        mean_latency=float(lat.mean()),
        p50_latency=percentile(lat, 0.5, empty=0.0),
        p95_latency=percentile(lat, 0.95, empty=0.0),
        max_latency=float(lat.max()),
        mean_waiting=mean([t.waiting for t in timings]),
        mean_core=mean([t.core for t in timings]),
        mean_tail=mean([t.tail for t in timings]),
        mean_slowdown=mean(slowdowns) if slowdowns and len(slowdowns) == n else None,
        throughput_requests_per_s=requests / span if span > 0 else 0.0,
        throughput_relqueries_per_s=n / span if span > 0 else 0.0,
        prefix_hit_rate=stats.cached_tokens / stats.prefill_tokens if stats.prefill_tokens else 0.0,
        prefill_tokens=stats.prefill_tokens,
        cached_tokens=stats.cached_tokens,
        output_tokens=stats.output_tokens,
        steps=dict(stats.steps),
        preemptions=stats.preemptions,
        kv_blocked_prefills=stats.kv_blocked_prefills,
        evictions=stats.evictions,
        simulated_seconds=stats.end_time,
        busy_seconds=stats.busy_seconds,
        policy_overhead_seconds=overhead_seconds,
        policy_overhead_share=overhead_seconds / stats.end_time if stats.end_time > 0 else 0.0,
        wall_seconds=wall_seconds,
    )
