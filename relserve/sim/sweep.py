"""Tuning RelServe's starvation threshold by simulation (the trade-off of the paper's Fig. 12).

A lower threshold bounds the worst relQuery latency at some cost in mean latency. The rule used
to pick one: among thresholds whose mean latency is within ``tolerance`` (default 0.05) of the best
mean seen, take the one with the smallest maximum latency; ties go to the smaller mean, then to
the larger threshold (``None``, starvation prevention off, counts as the largest).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel

from relserve.errors import ConfigError
from relserve.policy import CostModel, Limits, PolicySettings, make_policy
from relserve.sim.clairvoyant import Limit, the_limit
from relserve.sim.prepared_trace import OutputLengths, Renderer, Tokenizer
from relserve.sim.run import DEFAULT_LIMITS, TraceInput, as_prepared, simulate

DEFAULT_THRESHOLDS: tuple[float | None, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, None)

RULE = (
    "smallest max latency among thresholds whose mean latency is within {tol:.0%} of the best mean; "
    "ties: smaller mean, then larger threshold"
)


class SweepPoint(BaseModel):
    #: seconds of waiting per request of the relQuery before it is boosted; None = off
    threshold: float | None
    mean_latency: float
    p95_latency: float
    max_latency: float
    #: relQuery-steps in which starvation prevention boosted a relQuery
    starved_boosts: int


class StarvationSweep(BaseModel):
    policy: str
    tolerance: float
    rule: str
    points: list[SweepPoint]
    chosen: SweepPoint
    #: the trace's lower bound and clairvoyant schedule (``sweep_starvation(limit=True)``)
    limit: Limit | None = None


def choose_threshold(points: Sequence[SweepPoint], tolerance: float = 0.05) -> SweepPoint:
    if not points:
        raise ConfigError("no sweep points to choose from")
    best_mean = min(p.mean_latency for p in points)
    eligible = [p for p in points if p.mean_latency <= best_mean * (1 + tolerance)]
    size = lambda p: math.inf if p.threshold is None else p.threshold  # noqa: E731
    return min(eligible, key=lambda p: (p.max_latency, p.mean_latency, -size(p)))


def sweep_starvation(
    trace: TraceInput,
    thresholds: Sequence[float | None] = DEFAULT_THRESHOLDS,
    cost: CostModel | None = None,
    limits: Limits | None = None,
    *,
    policy: str = "relserve",
    settings: PolicySettings | None = None,
    tolerance: float = 0.05,
    tokenize: Tokenizer | None = None,
    render: Renderer | None = None,
    output_lengths: OutputLengths | None = None,
    limit: bool = False,
) -> StarvationSweep:
    """Simulate ``policy`` once per starvation threshold and pick one by the module's rule;
    ``limit``: also compute the trace's lower bound and clairvoyant schedule to compare with."""
    if not thresholds:
        raise ConfigError("give at least one starvation threshold")
    cost = cost or CostModel()
    limits = limits or DEFAULT_LIMITS
    prepared = as_prepared(trace, limits, tokenize=tokenize, render=render, output_lengths=output_lengths)
    base = settings or PolicySettings()
    points = []
    for th in thresholds:
        pol = make_policy(policy, cost, base.model_copy(update={"starvation_threshold": th}))
        res = simulate(prepared, pol, cost, limits, isolated=False)
        dpu = getattr(pol, "dpu", None)
        points.append(
            SweepPoint(
                threshold=th,
                mean_latency=res.summary.mean_latency,
                p95_latency=res.summary.p95_latency,
                max_latency=res.summary.max_latency,
                starved_boosts=dpu.num_starved if dpu is not None else 0,
            )
        )
    return StarvationSweep(
        policy=policy,
        tolerance=tolerance,
        rule=RULE.format(tol=tolerance),
        points=points,
        chosen=choose_threshold(points, tolerance),
        limit=the_limit(prepared, cost, limits) if limit else None,
    )
