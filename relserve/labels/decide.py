"""Deciding a 2-label call's rows from their margins, without assuming the labels come about
equally often (issue 43).

A row's margin is its first label's score minus its second's (a filter: "yes" over "no", or the
concept over its contrast). The margins of a relQuery - pooled with its call's earlier ones - are
read as two crowds (relserve/labels/mixture.py); where the crowds stand clearly apart the
upper crowd's share is the estimated prior of the first label and each row's posterior of
belonging to it is its confidence: a row is "yes" when that posterior is above one half. This
gives exactly the true set when the model separates the rows, at 2% as at 50%.

Where the margins do not form two crowds, no share can be read from them (on these columns the
model's margins are one skewed lump, whether 10% or 50% of the rows are "yes"): the rows the
model scores highest are answered with the first label, ``WEAK_SHARE`` of them - an eighth, as
the filters users write mostly keep 5-25% of the rows: an eighth keeps between half and twice
the true rows of every filter from 6.25% to 25% (no one share covers 5% to 25%: twice 5% is below
half of 25%). On the tuning tasks (three samples each) an eighth gave the best mean F1 of the
shares tried (0.10-0.20); docs/quality.md. A balanced filter read as one crowd keeps far fewer
rows than are true (an eighth against a half): the case users meet least. (A join's layout of a
row's own value keeps one pair in k instead: ``AdaptiveRun._one_crowd_share``.) The surfaces then warn
that the answers near the boundary are uncertain and how many rows were kept by that
assumption.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from relserve.labels.mixture import Mixture, fit_mixture

#: the two crowds are read as the labels only when they stand this far apart (the AUC they would
#: give), explain the margins this much better than one crowd (nats per row), and the smaller
#: holds at least ``MIN_CROWD`` of the rows and ``MIN_CROWD_ROWS`` rows (else it is a few outliers)
MIN_SEPARATION = 0.85
MIN_GAIN = 0.05
MIN_CROWD = 0.02
MIN_CROWD_ROWS = 3
#: Two crowds are read across a wide gap first:
#: the widest gap between sorted margins at least ``FEW_GAP_NATS`` of log-odds and
#: ``FEW_GAP_SPREADS`` times the crowds' own spread (one in twenty sets of 4-15 normal margins
#: passes the second alone; a model that separates the rows passes both: log-odds +4..+8 against
#: -4..-8 gave at least 4.2). Otherwise a mixture, from ``FEW_ROWS`` margins: below that it fits
#: noise as two tight crowds half the time, and the rows get the model's own answers
FEW_ROWS = 16
FEW_GAP_NATS = 2.0
FEW_GAP_SPREADS = 4.0
#: where the margins form one crowd: the share of rows answered with the first label (the top
#: scored), chosen on the tuning tasks (see above)
WEAK_SHARE = 0.125
#: one crowd every margin of which is this sure of one label (log-odds): the model answers every
#: row alike, and is taken at its word (a filter that keeps every row, or none, of a strong model)
SURE = 2.0


@dataclass(frozen=True)
class Reading:
    """How a relQuery's rows were decided, for EXPLAIN ANALYZE and the warning."""

    #: "two crowds" (the mixture decided), "all alike" (every row sure of one label: the model's
    #: own answers), "few rows" (under ``FEW_ROWS`` margins and no wide gap: the model's own
    #: answers, no share can be read), "one crowd" (the model does not separate the rows)
    rule: str
    #: the estimated share of rows with the first label (the prior the rows were decided with)
    prior: float
    #: the AUC the two crowds would give (0.5: one crowd)
    separation: float
    #: margins the reading was made from (this relQuery's and its call's earlier ones)
    rows: int

    @property
    def separates(self) -> bool:
        """Whether the model's margins separate the rows (two crowds, or all alike)."""
        return self.rule in ("two crowds", "all alike")


def read(margins: Sequence[float], *, all_alike: bool = True,
         one_crowd_share: float = WEAK_SHARE) -> tuple[Reading, Mixture | None]:
    """How to decide rows of these margins (``margins``: this relQuery's and pooled ones;
    ``all_alike`` False: margins sure of one answer are not taken at their word, but read as the
    others are; ``one_crowd_share``: the share answered with the first label where the margins
    form one crowd)."""
    xs = [m for m in margins if math.isfinite(m)]
    if not xs:
        return Reading("one crowd", one_crowd_share, 0.5, 0), None
    if all_alike and (min(xs) >= SURE or max(xs) <= -SURE):
        return Reading("all alike", 1.0 if min(xs) >= SURE else 0.0, 0.5, len(xs)), None
    if max(xs) - min(xs) <= 1e-9:
        return Reading("one crowd", one_crowd_share, 0.5, len(xs)), None
    # a model that separates the rows leaves a wide gap between its two crowds: read across it
    # (a mixture fitted to crowds that are not normal can prefer a tight lump and a loose rest)
    gap = _across_the_widest_gap(xs)
    if gap is not None:
        return Reading("two crowds", gap.weight, gap.separation, len(xs)), gap
    if len(xs) < FEW_ROWS:
        # too few margins to read a share from: the model's own answers (the sign of each margin)
        return Reading("few rows", sum(x > 0 for x in xs) / len(xs), 0.5, len(xs)), None
    mix = fit_mixture(xs)
    smaller = min(mix.weight, 1 - mix.weight) * len(xs)
    if (mix.separation >= MIN_SEPARATION and mix.gain >= MIN_GAIN
            and smaller >= max(MIN_CROWD_ROWS, MIN_CROWD * len(xs))):
        return Reading("two crowds", mix.weight, mix.separation, len(xs)), mix
    return Reading("one crowd", one_crowd_share, mix.separation, len(xs)), None


def _across_the_widest_gap(xs: Sequence[float]) -> Mixture | None:
    """Two crowds split at the widest gap of a few margins, if it is wide (see ``FEW_ROWS``)."""
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


def posteriors(margins: Sequence[float], reading: Reading, mixture: Mixture | None,
               reference: Sequence[float]) -> list[float]:
    """Each row's probability of the first label: the mixture's posterior where two crowds were
    read; otherwise a logistic of the margin around the ``reference`` margins' quantile that
    leaves ``WEAK_SHARE`` of them above."""
    if mixture is not None:
        return [mixture.posterior(m) if math.isfinite(m) else 0.5 for m in margins]
    if reading.rule in ("all alike", "few rows"):
        return [1 / (1 + math.exp(-max(min(m, 50.0), -50.0))) if math.isfinite(m) else 0.5 for m in margins]
    ref = sorted(m for m in reference if math.isfinite(m))
    if not ref:
        return [0.5 for _ in margins]
    # the boundary: halfway between the margins on either side of the top WEAK_SHARE of them
    k = min(len(ref) - 1, max(1, round((1 - reading.prior) * len(ref))))
    centre = (ref[k - 1] + ref[k]) / 2
    spread = (ref[-1] - ref[0]) / 8 or 1.0
    return [1 / (1 + math.exp(-(m - centre) / spread)) if math.isfinite(m) else 0.5 for m in margins]
