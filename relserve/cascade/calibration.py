"""The proxy's probability of "yes" made calibrated: Platt scaling fitted on out-of-fold
predictions of the training rows.

A filter's recall audit (relserve/cascade/audit.py) sizes its census and its draws from the sum
of the proxy's probabilities: how many "yes" rows it expects above and below a cut. A logistic
regression read on the rows it was fitted on is overconfident (a rare class's few rows sit far
on their side), which would make the census too small and the audit fail. So each training row
is scored by a proxy fitted without its fold, and a one-feature logistic regression (a slope and
an intercept on the logit: Platt 1999) maps those scores onto the LLM's answers. The map is
monotone, so the rows' order, and with it every zone the audit may choose, is unchanged; only the
sizes the audit plans from move. No guarantee rests on it (the bounds read the LLM's answers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from relserve.cascade import proxy

#: folds of the out-of-fold predictions
FOLDS = 4
#: a light ridge on the slope and intercept (a training sample with no "yes" row still fits)
_RIDGE = 1e-2
_EPS = 1e-6


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, _EPS, 1.0 - _EPS)
    return np.log(p) - np.log1p(-p)


@dataclass(frozen=True)
class Platt:
    """p -> sigmoid(slope * logit(p) + intercept)."""

    slope: float = 1.0
    intercept: float = 0.0

    def __call__(self, p: np.ndarray) -> np.ndarray:
        z = self.slope * _logit(np.asarray(p, dtype=np.float64)) + self.intercept
        return 0.5 * (1.0 + np.tanh(0.5 * z))


def fit_platt(scores: np.ndarray, positive: np.ndarray) -> Platt:
    """The Platt map of ``scores`` (probabilities) onto the 0/1 outcomes ``positive``: Newton's
    method on the (ridged, so strictly convex) log-loss, each step halved until the loss falls."""
    z = _logit(np.asarray(scores, dtype=np.float64))
    y = np.asarray(positive, dtype=np.float64)
    xb = np.column_stack([z, np.ones_like(z)])
    identity = np.array([1.0, 0.0])

    def loss(w: np.ndarray) -> float:
        t = xb @ w  # log(1 + e^t) - y t, written to stay finite for large |t|
        return float((np.logaddexp(0.0, t) - y * t).sum() + 0.5 * _RIDGE * ((w - identity) ** 2).sum())

    w = identity.copy()
    current = loss(w)
    for _ in range(100):
        p = 0.5 * (1.0 + np.tanh(0.5 * (xb @ w)))
        grad = xb.T @ (p - y) + _RIDGE * (w - identity)  # held towards the identity
        hess = (xb * (p * (1.0 - p))[:, None]).T @ xb + _RIDGE * np.eye(2)
        step = np.linalg.solve(hess, grad)
        size = 1.0
        while size > 1e-6 and loss(w - size * step) > current:
            size /= 2
        w = w - size * step
        previous, current = current, loss(w)
        if previous - current < 1e-10 * max(1.0, abs(current)):
            break
    return Platt(float(w[0]), float(w[1]))


def out_of_fold(x: np.ndarray, answers: Sequence[str], labels: Sequence[str], positive: str, *,
                penalty: float, seed: int = 0) -> np.ndarray:
    """Each training row's probability of ``positive`` from a proxy fitted on the other folds
    (with ``penalty``, the one cross-validation chose for the proxy itself)."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    folds = np.random.default_rng(seed).permutation(n) % FOLDS
    out = np.zeros(n)
    column = list(labels).index(positive)
    for f in range(FOLDS):
        test = folds == f
        train = ~test
        if not test.any():
            continue
        model = proxy.fit(x[train], [a for a, t in zip(answers, train) if t], labels, seed=seed, penalty=penalty)
        out[test] = model.probabilities(x[test])[:, column]
    return out


def calibrate(x: np.ndarray, answers: Sequence[str], labels: Sequence[str], positive: str, *, penalty: float,
              seed: int = 0) -> Platt:
    """The Platt map for a proxy fitted on ``x`` and ``answers`` with ``penalty``; the identity
    when too few rows to hold folds out."""
    if len(answers) < 2 * FOLDS:
        return Platt()
    oof = out_of_fold(x, answers, labels, positive, penalty=penalty, seed=seed)
    return fit_platt(oof, np.array([a == positive for a in answers]))
