"""What the scheduler plug-in measures about its busy steps, for EXPLAIN's estimates
(relserve/estimate/timing.py): the host's time around each model run (``StepGap``) and how long
the model runs take against the policy's cost model (``StepScale``). Plain Python: no vLLM here.
"""

from __future__ import annotations


class StepGap:
    """The host's seconds of a busy step besides its model run, a running mean of the recent steps
    (a step followed by a pause of 0.2 s or more ran into idleness: not counted)."""

    def __init__(self, weight: float = 0.02) -> None:
        self.weight = weight
        self.seconds: float | None = None

    def add(self, gap: float) -> None:
        if 0.0 <= gap < 0.2:
            self.seconds = gap if self.seconds is None else self.seconds + self.weight * (gap - self.seconds)


class StepScale:
    """How long the recent busy steps' model runs took over what the cost model predicts for them:
    measured seconds over predicted seconds, each a running sum in which a step's weight decays by
    ``weight`` per later step (time-weighted: a 30 ms decode step's jitter does not outvote a
    600 ms prefill). A step is counted at most ``clip`` times above or below its prediction (a
    stall of a shared machine is not what steps cost). None until ``min_steps`` steps ran."""

    def __init__(self, weight: float = 0.02, clip: float = 4.0, min_steps: int = 16) -> None:
        self.weight, self.clip, self.min_steps = weight, clip, min_steps
        self.measured = 0.0
        self.predicted = 0.0
        self.steps = 0

    def add(self, measured: float, predicted: float) -> None:
        if not (predicted > 0 and measured > 0):
            return
        keep = 1.0 - self.weight
        self.measured = keep * self.measured + min(max(measured, predicted / self.clip), predicted * self.clip)
        self.predicted = keep * self.predicted + predicted
        self.steps += 1

    @property
    def ratio(self) -> float | None:
        return self.measured / self.predicted if self.steps >= self.min_steps else None
