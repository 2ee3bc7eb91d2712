"""The light classifier a cascade trains on the LLM's own answers: logistic regression in numpy.

Two labels: one L2-regularised logistic regression, fitted by Newton's method (the loss is
strictly convex with the penalty, so it converges in a handful of steps to the one optimum).
Three labels or more: one such regression per label against the others, their probabilities
normalised to sum to one (one-vs-rest: each Newton system stays (d+1) x (d+1) however many
labels there are). Features are standardised with the training rows' mean and spread; the
penalty is chosen by k-fold cross-validation on the training rows (log-loss), so the audit rows
stay untouched for the threshold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: penalties tried by cross-validation (on standardised features, summed log-loss)
PENALTIES = (1.0, 10.0, 100.0, 1000.0)
FOLDS = 4
_NEWTON_STEPS = 50


def _fit_binary(x: np.ndarray, y: np.ndarray, penalty: float) -> np.ndarray:
    """Weights (last: the intercept, not penalised) minimising log-loss + penalty/2 |w|^2."""
    n, d = x.shape
    xb = np.hstack([x, np.ones((n, 1), dtype=x.dtype)])
    ridge = np.full(d + 1, penalty)
    ridge[-1] = 1e-6  # the intercept: barely held, so a one-sided sample still gets a finite one
    w = np.zeros(d + 1)
    for _ in range(_NEWTON_STEPS):
        p = _sigmoid(xb @ w)
        grad = xb.T @ (p - y) + ridge * w
        hess = (xb * (p * (1.0 - p))[:, None]).T @ xb
        hess[np.diag_indices_from(hess)] += ridge
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-7:
            break
    return w


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # no overflow for large |z|


@dataclass(frozen=True)
class LogisticProxy:
    """A fitted proxy: ``probabilities(x)`` gives one row per input, one column per label."""

    labels: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    #: one weight vector per column of ``probabilities`` (two labels: one, for the second label)
    weights: tuple[np.ndarray, ...]
    penalty: float

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        z = (np.asarray(x, dtype=np.float64) - self.mean) / self.scale
        zb = np.hstack([z, np.ones((len(z), 1))])
        if len(self.labels) == 2:
            p = _sigmoid(zb @ self.weights[0])
            return np.column_stack([1.0 - p, p])
        scores = np.column_stack([_sigmoid(zb @ w) for w in self.weights])
        return scores / np.clip(scores.sum(axis=1, keepdims=True), 1e-12, None)

    def predict(self, x: np.ndarray) -> tuple[list[str], np.ndarray]:
        """Each row's label and its probability (the proxy's confidence)."""
        p = self.probabilities(x)
        best = p.argmax(axis=1)
        return [self.labels[i] for i in best], p[np.arange(len(p)), best]


def fit(x: np.ndarray, answers: Sequence[str], labels: Sequence[str], *, seed: int = 0,
        penalty: float | None = None) -> LogisticProxy:
    """Train on features ``x`` (one row per answered row) and the LLM's ``answers`` (each one of
    ``labels``). A label the sample never answered gets probability ~0. ``penalty``: the one to
    use (None: chosen by cross-validation)."""
    labels = tuple(labels)
    if len(labels) < 2:
        raise ValueError("a proxy needs at least two labels")
    index = {label: i for i, label in enumerate(labels)}
    unknown = sorted({a for a in answers if a not in index})
    if unknown:
        raise ValueError(f"answers {unknown} are not among the labels {list(labels)}")
    x = np.asarray(x, dtype=np.float64)
    if len(x) != len(answers) or len(x) == 0:
        raise ValueError(f"need one feature row per answer, got {len(x)} rows and {len(answers)} answers")
    y = np.array([index[a] for a in answers])
    mean = x.mean(axis=0)
    scale = x.std(axis=0) + 1e-6
    z = (x - mean) / scale
    targets = [(y == 1).astype(np.float64)] if len(labels) == 2 else [(y == k).astype(np.float64) for k in range(len(labels))]
    if penalty is None:
        penalty = _choose_penalty(z, y, targets, len(labels), seed)
    weights = tuple(_fit_binary(z, t, penalty) for t in targets)
    return LogisticProxy(labels, mean, scale, weights, penalty)


def _choose_penalty(z: np.ndarray, y: np.ndarray, targets: list[np.ndarray], k: int, seed: int) -> float:
    """The penalty with the lowest cross-validated log-loss (the middle one with too few rows)."""
    n = len(z)
    if n < 2 * FOLDS:
        return PENALTIES[len(PENALTIES) // 2]
    folds = np.random.default_rng(seed).permutation(n) % FOLDS
    best, best_loss = PENALTIES[0], np.inf
    for penalty in PENALTIES:
        loss = 0.0
        for f in range(FOLDS):
            train, test = folds != f, folds == f
            zb = np.hstack([z[test], np.ones((int(test.sum()), 1))])
            cols = [_sigmoid(zb @ _fit_binary(z[train], t[train], penalty)) for t in targets]
            if k == 2:
                p = np.column_stack([1.0 - cols[0], cols[0]])
            else:
                p = np.column_stack(cols)
                p = p / np.clip(p.sum(axis=1, keepdims=True), 1e-12, None)
            loss -= float(np.log(np.clip(p[np.arange(len(p)), y[test]], 1e-12, None)).sum())
        if loss < best_loss:
            best, best_loss = penalty, loss
    return best
