"""Where a 2-label call's boundary lies, read once from a sample of its rows' margins, without
labels and without assuming a share of either label (issues 43, 62).

A row's margin is its first label's score minus its second's (a filter: "yes" over "no", or the
question's concept over its contrast), scored as every row is: in the plan's layout, behind its
worked examples. The sample's margins are read in this order:

1. **all alike**: every margin sure of one answer (``SURE`` nats), and that sureness is the
   rows' (not only the worked examples'): the model's own answer decides each row;
2. **two crowds**: a wide gap between the sorted margins (``FEW_GAP_NATS``, and
   ``FEW_GAP_SPREADS`` times the crowds' own spread): the boundary is the middle of the gap; or,
   from ``MIXTURE_MARGINS`` margins, a two-crowd mixture (relserve/labels/mixture.py) whose crowds stand
   ``MIN_SEPARATION`` apart and explain the margins ``MIN_GAIN`` nats per row better than one
   crowd: the boundary is where a row's posterior crosses one half;
3. **calibrated**: otherwise the margins are one lump, from which no share of "yes" can be read
   (a mixture fitted to such lumps reads almost any share), so each
   row is decided by the model's own score against the score it gives content-free rows ("N/A",
   "", "[MASK]" in the same layout behind the same examples: contextual calibration, Zhao et al.,
   "Calibrate Before Use", 2021): "yes" exactly where a row leans further to the first label than
   a row with no content does. Nothing is assumed about how many rows match; the surfaces warn
   that the answers near the boundary are close to guesses.

The boundary is a number in the margin's units; a row's answer is ``margin > boundary``.
docs/quality.md#the-default-adaptive-a-filter-and-a-classify-of-two-labels gives the measurements behind the rules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from relserve.labels.mixture import Mixture, fit_mixture
from relserve.labels.plan import Calibration, PlanRule

#: a wide gap: at least ``FEW_GAP_NATS`` of log-odds and ``FEW_GAP_SPREADS`` times the crowds'
#: own spread (one in twenty sets of 4-15 normal margins passes the second alone; a model that
#: separates the rows passes both: log-odds +4..+8 against -4..-8)
FEW_GAP_NATS = 2.0
#: a mixture needs this many margins (below, it fits noise as two tight crowds half the time),
#: crowds this far apart (the area under the ROC curve they would give) that explain the margins this much better
#: than one crowd (nats per margin), the smaller at least ``MIN_CROWD`` of them and
#: ``MIN_CROWD_ROWS`` (else a few outliers); stricter than the two-crowd reading of a whole
#: relQuery before plans (0.85, 0.05), since a plan reads 64 margins, not every row
MIXTURE_MARGINS = 16
MIN_SEPARATION = 0.9
MIN_GAIN = 0.1
MIN_CROWD = 0.02
MIN_CROWD_ROWS = 3
FEW_GAP_SPREADS = 4.0
#: every margin at least this sure of one label (log-odds): the model answers every row alike
SURE = 2.0


@dataclass(frozen=True)
class Boundary:
    """How a sample's margins decide the rows."""

    rule: PlanRule
    #: a row is the first label exactly when its margin is above this
    value: float
    #: the logistic scale of a row's confidence around the boundary (no mixture)
    spread: float
    mixture: Mixture | None
    calibration: Calibration | None
    #: the share of the sample's margins above the boundary
    share: float
    #: the area under the ROC curve two crowds across the gap would give (one half: one crowd)
    separation: float
    #: margins it was read from
    rows: int


def read_boundary(margins: Sequence[float], content_free: Sequence[float] = (), *,
                  sureness_is_the_rows: bool = True) -> Boundary:
    """The boundary of a sample's ``margins`` (``content_free``: the chosen layout's margins on
    content-free rows; ``sureness_is_the_rows`` False: margins sure of one answer because of the
    worked examples are read like any others)."""
    xs = [m for m in margins if math.isfinite(m)]
    spread = _spread(xs)
    if xs and sureness_is_the_rows and (min(xs) >= SURE or max(xs) <= -SURE):
        return Boundary(PlanRule.ALL_ALIKE, 0.0, 1.0, None, Calibration.OWN_ANSWER, _share(xs, 0.0), 0.5, len(xs))
    if len(xs) >= 2 and max(xs) - min(xs) > 1e-9:
        gap = _across_the_widest_gap(xs)
        if gap is not None:
            value = _gap_middle(xs)
            return Boundary(PlanRule.TWO_CROWDS, value, spread, gap, None, _share(xs, value), gap.separation, len(xs))
        if len(xs) >= MIXTURE_MARGINS:
            mix = fit_mixture(xs)
            smaller = min(mix.weight, 1 - mix.weight) * len(xs)
            if (mix.separation >= MIN_SEPARATION and mix.gain >= MIN_GAIN
                    and smaller >= max(MIN_CROWD_ROWS, MIN_CROWD * len(xs))):
                value = _half_point(mix)
                return Boundary(PlanRule.TWO_CROWDS, value, spread, mix, None, _share(xs, value), mix.separation,
                                len(xs))
    free = [m for m in content_free if math.isfinite(m)]
    if free:
        value = sum(free) / len(free)
        return Boundary(PlanRule.CALIBRATED, value, spread, None, Calibration.CONTENT_FREE, _share(xs, value), 0.5,
                        len(xs))
    return Boundary(PlanRule.CALIBRATED, 0.0, spread, None, Calibration.OWN_ANSWER, _share(xs, 0.0), 0.5, len(xs))


def _share(xs: Sequence[float], value: float) -> float:
    return sum(x > value for x in xs) / len(xs) if xs else 0.0


def _spread(xs: Sequence[float]) -> float:
    """A confidence scale: a quarter of the margins' range (1 nat when they have none)."""
    return (max(xs) - min(xs)) / 4 if len(xs) >= 2 and max(xs) > min(xs) else 1.0


def _gap_middle(xs: Sequence[float]) -> float:
    ordered = sorted(xs)
    i = max(range(1, len(ordered)), key=lambda k: ordered[k] - ordered[k - 1])
    return (ordered[i] + ordered[i - 1]) / 2


def _half_point(mixture: Mixture) -> float:
    """Where the mixture's posterior crosses one half between the crowds' means (bisection: it
    rises with the margin there)."""
    lo, hi = mixture.low_mean, mixture.high_mean
    if mixture.posterior(lo) > 0.5 or mixture.posterior(hi) <= 0.5:
        return (lo + hi) / 2
    for _ in range(100):
        mid = (lo + hi) / 2
        if mixture.posterior(mid) > 0.5:
            hi = mid
        else:
            lo = mid
    return hi


def _across_the_widest_gap(xs: Sequence[float]) -> Mixture | None:
    """Two crowds split at the widest gap of the margins, if it is wide (``FEW_GAP_NATS``, ``FEW_GAP_SPREADS``)."""
    ordered = sorted(xs)
    n = len(ordered)
    i = max(range(1, n), key=lambda k: ordered[k] - ordered[k - 1])
    gap = ordered[i] - ordered[i - 1]
    low, high = ordered[:i], ordered[i:]
    m0, m1 = sum(low) / len(low), sum(high) / len(high)
    spread = math.sqrt((sum((x - m0) ** 2 for x in low) + sum((x - m1) ** 2 for x in high)) / max(n - 2, 1))
    if gap < FEW_GAP_NATS or gap < FEW_GAP_SPREADS * spread:
        return None
    sd = max(spread, gap / (2 * FEW_GAP_SPREADS))
    return Mixture(len(high) / n, m0, sd, m1, sd, 0.0, 0.0)
