"""Two crowds of label margins (``Mixture``): two normal crowds and the share in the upper one,
as a plan reads them across a wide gap between a sample's margins (relserve/labels/decide.py),
and each row's confidence: the posterior of belonging to the upper crowd.

The posterior is read with the margin held between the two crowds' means, so it rises with the
margin and a row is "yes" exactly above one boundary; past either mean it goes on rising as a
logistic would, so ``ORDER BY llm_score(...)`` ranks the rows there too instead of tying them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: a crowd's spread is never read as narrower than this share of the crowds' distance
MIN_SPREAD = 0.05


@dataclass(frozen=True)
class Mixture:
    """Two normal crowds: ``low`` and ``high`` (mean, sd), ``weight`` the share in ``high``."""

    weight: float
    low_mean: float
    low_sd: float
    high_mean: float
    high_sd: float
    #: mean log-likelihood per point, and the same for one normal over the column (for the gain)
    loglik: float
    loglik_one: float

    def posterior(self, x: float) -> float:
        """The probability that ``x`` belongs to the upper crowd. Between the crowds' means it is
        the mixture's own; past a mean (where unequal spreads would turn it back) it goes on
        rising with ``x`` as two crowds of one spread would, but never across one half. So it
        never falls as ``x`` rises, every row keeps the answer it had with ``x`` held at the mean,
        and rows past a mean are not tied: ``ORDER BY llm_score(...)`` can rank them (held at
        the mean, 39% of 120 reviews had one score)."""
        held = min(max(x, self.low_mean), self.high_mean)
        p = self._between(held)
        if x == held:
            return p
        # the log-odds slope of two normal crowds with the pooled spread (linear discriminant)
        var = (self.weight * self.high_sd**2 + (1 - self.weight) * self.low_sd**2) or 1.0
        moved = abs(x - held) * max(self.high_mean - self.low_mean, MIN_SPREAD) / var
        toward = 1.0 if x > held else 0.0
        if (p > 0.5) == (toward > 0.5) and p != 0.5:  # away from one half: the logistic goes on
            if p in (0.0, 1.0):
                return p  # already as far as a float goes
            z = math.log(p / (1 - p)) + (moved if toward else -moved)
            return 1 / (1 + math.exp(-z)) if z >= 0 else math.exp(z) / (1 + math.exp(z))
        # toward one half (a crowd of few rows whose mean the other side outweighs): approach it
        q = p + (0.5 - p) * -math.expm1(-moved)
        return min(q, math.nextafter(0.5, 0.0)) if p <= 0.5 else max(q, math.nextafter(0.5, 1.0))

    def _between(self, x: float) -> float:
        a = math.log(self.weight) + _log_normal(x, self.high_mean, self.high_sd)
        b = math.log1p(-self.weight) + _log_normal(x, self.low_mean, self.low_sd)
        m = max(a, b)
        return math.exp(a - m) / (math.exp(a - m) + math.exp(b - m))

    @property
    def separation(self) -> float:
        """The area under the ROC curve the two crowds would give if they were the two labels:
        P(a draw of the upper crowd > a draw of the lower), 0.5 for one crowd."""
        d = (self.high_mean - self.low_mean) / math.sqrt(self.low_sd**2 + self.high_sd**2)
        return 0.5 * (1 + math.erf(d / math.sqrt(2)))

    @property
    def gain(self) -> float:
        """How much better two crowds explain the column than one (nats per point)."""
        return self.loglik - self.loglik_one


def _log_normal(x: float, mean: float, sd: float) -> float:
    return -0.5 * math.log(2 * math.pi * sd * sd) - (x - mean) ** 2 / (2 * sd * sd)
