"""The latency columns every per-policy summary has, declared once: the real-engine replay's
(relserve/benchmark/summary.py) and the simulator's (relserve/sim/metrics.py). Each summary
computes them its own way (the simulator with numpy, to keep its figures to the last bit)."""

from __future__ import annotations

from pydantic import BaseModel


class LatencyFigures(BaseModel):
    """A policy's relQuery latencies (seconds) and their three phases (paper Eq. 2)."""

    mean_latency: float
    p50_latency: float
    p95_latency: float
    max_latency: float
    #: arrival to the start of the first prefill step
    mean_waiting: float
    #: the first prefill step's start to the last one's end
    mean_core: float
    #: the last prefill step's end to the last answer
    mean_tail: float
