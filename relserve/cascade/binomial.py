"""Exact binomial tails and Clopper-Pearson bounds in numpy (no scipy in relserve's stack).

A proportion estimated from ``k`` hits in ``n`` draws: the Clopper-Pearson bounds are the
success probabilities at which seeing ``k`` or fewer (upper) / ``k`` or more (lower) hits has
probability ``alpha``. The binomial tail is monotone in ``p``, so each bound is found by
bisection on the exact tail, summed in log space (no overflow for tables of millions of rows).
"""

from __future__ import annotations

import math

import numpy as np

#: bisection steps: the interval [0, 1] halved this often is far below a float's resolution
_STEPS = 80


def cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    if k < 0:
        return 0.0
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    i = np.arange(k + 1, dtype=np.float64)
    # log C(n, i) + i log p + (n - i) log(1 - p), from lgamma
    lg = np.vectorize(math.lgamma)
    log_terms = lg(n + 1.0) - lg(i + 1.0) - lg(n - i + 1.0) + i * math.log(p) + (n - i) * math.log1p(-p)
    top = float(log_terms.max())
    return min(1.0, math.exp(top) * float(np.exp(log_terms - top).sum()))


def upper_bound(k: int, n: int, alpha: float) -> float:
    """The one-sided Clopper-Pearson upper bound: the largest p with P(X <= k) >= alpha."""
    _check(k, n, alpha)
    if k >= n:
        return 1.0
    lo, hi = k / n, 1.0
    for _ in range(_STEPS):
        mid = (lo + hi) / 2
        if cdf(k, n, mid) > alpha:
            lo = mid
        else:
            hi = mid
    return hi


def lower_bound(k: int, n: int, alpha: float) -> float:
    """The one-sided Clopper-Pearson lower bound: the smallest p with P(X >= k) >= alpha."""
    _check(k, n, alpha)
    if k <= 0:
        return 0.0
    lo, hi = 0.0, k / n
    for _ in range(_STEPS):
        mid = (lo + hi) / 2
        if 1.0 - cdf(k - 1, n, mid) < alpha:
            lo = mid
        else:
            hi = mid
    return lo


def interval(k: int, n: int, alpha: float) -> tuple[float, float]:
    """The two-sided Clopper-Pearson interval at level 1 - alpha (alpha / 2 in each tail)."""
    return lower_bound(k, n, alpha / 2), upper_bound(k, n, alpha / 2)


def _check(k: int, n: int, alpha: float) -> None:
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
