"""Benchmarks on the real engine: trace replay, per-policy summaries, reports and plots."""

from relserve.benchmark.replay import RelQueryRecord, ReplayResult, replay
from relserve.benchmark.run import BenchmarkConfig, BenchmarkReport, measure_isolated, run_benchmark, trace_rate
from relserve.benchmark.summary import RunSummary, summarize
from relserve.workloads.traces import scale_arrivals

__all__ = [
    "BenchmarkConfig",
    "BenchmarkReport",
    "RelQueryRecord",
    "ReplayResult",
    "RunSummary",
    "measure_isolated",
    "replay",
    "run_benchmark",
    "scale_arrivals",
    "summarize",
    "trace_rate",
]
