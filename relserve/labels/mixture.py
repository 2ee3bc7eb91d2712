"""Two crowds of label margins (``Mixture``): two normal crowds and the share in the upper one, as
a plan reads them from a sample's margins (relserve/labels/decide.py: across a wide gap, or a
mixture fitted by EM, ``fit_mixture``), and each row's confidence: the posterior of belonging to
the upper crowd.

Each crowd has its own spread, with a floor (a share of the column's: a crowd of two equal
outliers cannot win by collapsing) and a ceiling (twice the other's: a loose crowd cannot take in
the long tail of a skewed one). Several starts (quantiles and the widest gap), the best
likelihood kept.

The posterior is read with the margin held between the two crowds' means, so it rises with the
margin and a row is "yes" exactly above one boundary; past either mean it goes on rising as a
logistic would, so ``ORDER BY llm_score(...)`` ranks the rows there too instead of tying them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: quantiles at which the upper crowd is seeded (rare "yes" to common "yes")
SEEDS = (0.5, 0.7, 0.85, 0.95)
#: a crowd's standard deviation is at least this share of the column's
MIN_SPREAD = 0.05
#: and at most this many times the other crowd's (see above)
MAX_SPREAD_RATIO = 2.0
#: EM steps at most (it settles in far fewer on these columns)
MAX_ITER = 300


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
        the mean, many rows would share one score)."""
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


def fit_mixture(xs: Sequence[float]) -> Mixture:
    """The two-crowd mixture of ``xs`` with the best likelihood over the starts (at least two
    values, not all equal)."""
    n = len(xs)
    if n < 2:
        raise ValueError("a mixture needs at least two values")
    mean = sum(xs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / n)
    if sd == 0:
        raise ValueError("all values are equal")
    floor = MIN_SPREAD * sd
    one = sum(_log_normal(x, mean, sd) for x in xs) / n
    ordered = sorted(xs)
    gap = max(range(1, n), key=lambda i: ordered[i] - ordered[i - 1])
    cuts = [ordered[min(n - 1, int(q * n))] for q in SEEDS] + [ordered[gap]]
    best: Mixture | None = None
    for cut in cuts:
        r = [1.0 if x >= cut else 0.0 for x in xs]
        if all(r) or not any(r):
            continue
        fit = _em(xs, r, floor, one)
        if best is None or fit.loglik > best.loglik + 1e-12:
            best = fit
    if best is None:  # every seed put every value on one side: two values only
        best = _em(xs, [1.0 if x > mean else 0.0 for x in xs], floor, one)
    return best


def _em(xs: Sequence[float], r: list[float], floor: float, one: float) -> Mixture:
    n = len(xs)
    ll_old = -math.inf
    for _ in range(MAX_ITER):
        w = min(max(sum(r) / n, 1 / n), 1 - 1 / n)
        s1 = max(sum(r), 1e-12)
        s0 = max(n - sum(r), 1e-12)
        m1 = sum(ri * x for ri, x in zip(r, xs)) / s1
        m0 = sum((1 - ri) * x for ri, x in zip(r, xs)) / s0
        sd1 = max(math.sqrt(sum(ri * (x - m1) ** 2 for ri, x in zip(r, xs)) / s1), floor)
        sd0 = max(math.sqrt(sum((1 - ri) * (x - m0) ** 2 for ri, x in zip(r, xs)) / s0), floor)
        sd1, sd0 = min(sd1, MAX_SPREAD_RATIO * sd0), min(sd0, MAX_SPREAD_RATIO * sd1)
        ll = 0.0
        for i, x in enumerate(xs):
            a = math.log(w) + _log_normal(x, m1, sd1)
            b = math.log1p(-w) + _log_normal(x, m0, sd0)
            m = max(a, b)
            ll += m + math.log(math.exp(a - m) + math.exp(b - m))
            r[i] = math.exp(a - m) / (math.exp(a - m) + math.exp(b - m))
        if ll - ll_old < 1e-10 * n:
            break
        ll_old = ll
    if m1 < m0:  # the upper crowd is the one with the larger mean
        w, m0, m1, sd0, sd1 = 1 - w, m1, m0, sd1, sd0
    return Mixture(w, m0, sd0, m1, sd1, ll / n, one)
