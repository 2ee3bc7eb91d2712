"""Exact hypergeometric tails and the one-sided upper bound on a population's marked rows.

A simple random sample (without replacement) of ``draws`` rows of a ``population`` holding
``marked`` marked rows contains X marked rows, X ~ Hypergeometric(population, marked, draws).
Seeing ``k`` of them, the upper bound at level ``alpha`` is the largest ``marked`` for which
seeing ``k`` or fewer still has probability above ``alpha``: the true count exceeds it with
probability at most ``alpha`` (the bound is exact, not an approximation, and tighter than the
binomial's once the sample is a noticeable share of the population). Log-factorials come from
one cumulative sum, so a bound over a million rows costs a few vector sums.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


@lru_cache(maxsize=8)
def _log_factorials(n: int) -> np.ndarray:
    """log(i!) for i = 0..n (one table per population: a relQuery's tests share it)."""
    out = np.zeros(n + 1)
    if n:
        out[1:] = np.cumsum(np.log(np.arange(1, n + 1, dtype=np.float64)))
    out.setflags(write=False)
    return out


def _log_choose(lf: np.ndarray, n, k):
    return lf[n] - lf[k] - lf[n - k]


def cdf(k: int, population: int, marked: int, draws: int, *, lf: np.ndarray | None = None) -> float:
    """P(X <= k) for X ~ Hypergeometric(population, marked, draws)."""
    _check(population, marked, draws)
    low, high = max(0, draws - (population - marked)), min(draws, marked)
    if k < low:
        return 0.0
    if k >= high:
        return 1.0
    lf = _log_factorials(population) if lf is None else lf
    i = np.arange(low, k + 1)
    terms = _log_choose(lf, marked, i) + _log_choose(lf, population - marked, draws - i) - _log_choose(lf, population, draws)
    top = float(terms.max())
    return min(1.0, float(np.exp(top) * np.exp(terms - top).sum()))


def upper_bound(k: int, population: int, draws: int, alpha: float) -> int:
    """The largest number of marked rows in the population consistent with seeing ``k`` in the
    sample at level ``alpha``: the largest ``marked`` with P(X <= k) > alpha."""
    if not 0 <= k <= draws <= population:
        raise ValueError(f"need 0 <= k <= draws <= population, got k={k}, draws={draws}, population={population}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    lf = _log_factorials(population)
    lo, hi = k, population - (draws - k)  # P(X <= k) is 1 at marked = k, and falls as marked grows
    if cdf(k, population, hi, draws, lf=lf) > alpha:
        return hi
    while hi - lo > 1:  # invariant: cdf(lo) > alpha >= cdf(hi)
        mid = (lo + hi) // 2
        if cdf(k, population, mid, draws, lf=lf) > alpha:
            lo = mid
        else:
            hi = mid
    return lo


def _check(population: int, marked: int, draws: int) -> None:
    if not (0 <= marked <= population and 0 <= draws <= population):
        raise ValueError(f"need 0 <= marked, draws <= population, got {marked}, {draws}, {population}")
