"""Fitting the step-time model to measured steps, and saying how well it holds.

One linear model covers every kind of step (prefill, decode, mixed):

    t = b0 + bP * [prefills] + bD * [decodes]
        + alpha_p * utok + gamma_p * pairs + alpha_d * reqs + gamma_d * ctx

fitted by non-negative least squares (a negative cost would be a fitting artefact), so the
fixed cost of a prefill step is ``b0 + bP``, of a decode step ``b0 + bD`` and of a mixed step
``b0 + bP + bD``. The report gives each term's coefficient, its share of the predicted time,
how much R^2 drops without it, and the error on probes held out of the fit: the figures that
tell whether the model will hold on work it was not fitted on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from relserve.policy.cost_model import CostModel

#: the model's terms, in column order
TERMS: tuple[str, ...] = ("b0", "bP", "bD", "alpha_p", "gamma_p", "alpha_d", "gamma_d")


@dataclass(frozen=True, slots=True)
class StepSample:
    """One measured step: what it computed and how long it took."""

    #: uncached prompt tokens computed (prefill and chunks)
    utok: float
    #: attention pairs of those tokens (see ``cost_model.prefill_pairs``)
    pairs: float
    #: requests decoded
    reqs: float
    #: context tokens the decoded requests attend to
    ctx: float
    seconds: float
    #: which probe the step belongs to (held-out splits go by probe, not by step)
    probe: int = 0

    def row(self) -> list[float]:
        return [1.0, float(self.utok > 0), float(self.reqs > 0), self.utok, self.pairs, self.reqs, self.ctx]


def nnls(a: np.ndarray, b: np.ndarray, max_iter: int = 200) -> np.ndarray:
    """Non-negative least squares (Lawson and Hanson's active-set method)."""
    m, n = a.shape
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    w = a.T @ (b - a @ x)
    tol = 1e-12 * max(1.0, float(np.abs(w).max(initial=0.0)))
    for _ in range(max_iter):
        if passive.all() or (w[~passive] <= tol).all():
            break
        j = int(np.argmax(np.where(passive, -np.inf, w)))
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > 1e-15
            x[~passive] = 0.0
        w = a.T @ (b - a @ x)
    return x


def _r2(y: np.ndarray, pred: np.ndarray) -> float:
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return 1.0 - float(((y - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else 1.0


@dataclass
class TermReport:
    name: str
    coef: float
    #: mean share of the predicted step time this term accounts for, over the fitted steps
    share: float
    #: R^2 of the fit without this term, less the full fit's R^2 (how much the term explains)
    r2_drop: float


@dataclass
class StepFit:
    coef: dict[str, float]
    r2: float
    #: R^2 per step kind ("prefill", "decode", "mixed") over the fitted steps
    r2_by_kind: dict[str, float]
    terms: list[TermReport]
    n_fit: int
    n_held_out: int
    #: median |predicted - measured| / measured over held-out steps
    held_out_step_error: float | None
    #: per held-out probe, (predicted - measured) / measured of its total step time
    held_out_probe_errors: list[float] = field(default_factory=list)
    #: steps left out as outliers (a stalled step on a shared machine)
    dropped: int = 0

    @property
    def held_out_probe_error(self) -> float | None:
        """Mean absolute relative error of held-out probes' total time."""
        errs = self.held_out_probe_errors
        return sum(abs(e) for e in errs) / len(errs) if errs else None

    def predict(self, s: StepSample) -> float:
        return float(np.dot(s.row(), [self.coef[t] for t in TERMS]))

    def cost_model(self, source: str) -> CostModel:
        c = self.coef
        return CostModel(
            alpha_p=c["alpha_p"],
            gamma_p=c["gamma_p"],
            beta_p=c["b0"] + c["bP"],
            alpha_d=c["alpha_d"],
            gamma_d=c["gamma_d"],
            beta_d=c["b0"] + c["bD"],
            alpha_mp=c["alpha_p"],
            alpha_md=c["alpha_d"],
            beta_m=c["b0"] + c["bP"] + c["bD"],
            source=source,
        )


def _kind(s: StepSample) -> str:
    if s.utok > 0 and s.reqs > 0:
        return "mixed"
    return "prefill" if s.utok > 0 else "decode"


def _solve(samples: Sequence[StepSample], drop: tuple[str, ...] = ()) -> np.ndarray:
    a = np.array([s.row() for s in samples], dtype=float)
    y = np.array([s.seconds for s in samples], dtype=float)
    keep = [i for i, t in enumerate(TERMS) if t not in drop]
    # Scale columns so that pair counts (~1e5) and indicators (1) weigh alike in the solver.
    scale = np.maximum(np.abs(a[:, keep]).max(axis=0), 1e-12)
    x = nnls(a[:, keep] / scale, y) / scale
    full = np.zeros(len(TERMS))
    full[keep] = x
    return full


def _trim(samples: list[StepSample], k: float = 4.0) -> list[StepSample]:
    """Drop steps whose relative residual is far outside the rest (robust sigma, MAD)."""
    x = _solve(samples)
    rel = np.array([(np.dot(s.row(), x) - s.seconds) / max(s.seconds, 1e-6) for s in samples])
    med = float(np.median(rel))
    mad = float(np.median(np.abs(rel - med))) * 1.4826
    if mad == 0:
        return samples
    return [s for s, r in zip(samples, rel) if abs(r - med) <= k * mad]


def fit_steps(samples: Sequence[StepSample], held_out: Sequence[StepSample] = ()) -> StepFit:
    """Fit the step model to ``samples``; report its error on ``held_out`` (other probes)."""
    if len(samples) < len(TERMS):
        raise ValueError(f"need at least {len(TERMS)} measured steps to fit the step model, got {len(samples)}")
    kept = _trim(list(samples))
    x = _solve(kept)
    y = np.array([s.seconds for s in kept])
    a = np.array([s.row() for s in kept])
    pred = a @ x
    r2 = _r2(y, pred)
    by_kind: dict[str, float] = {}
    for kind in ("prefill", "decode", "mixed"):
        idx = [i for i, s in enumerate(kept) if _kind(s) == kind]
        if len(idx) >= 3:
            by_kind[kind] = _r2(y[idx], pred[idx])
    terms = []
    for i, name in enumerate(TERMS):
        share = float(np.mean(a[:, i] * x[i] / np.maximum(pred, 1e-9)))
        without = _solve(kept, drop=(name,))
        terms.append(TermReport(name, float(x[i]), share, r2 - _r2(y, a @ without)))
    coef = {t: float(v) for t, v in zip(TERMS, x)}
    fit = StepFit(coef, r2, by_kind, terms, len(kept), len(held_out), None, dropped=len(samples) - len(kept))
    if held_out:
        errs = [abs(fit.predict(s) - s.seconds) / max(s.seconds, 1e-6) for s in held_out]
        fit.held_out_step_error = float(np.median(errs))
        probes: dict[int, list[StepSample]] = {}
        for s in held_out:
            probes.setdefault(s.probe, []).append(s)
        for steps in probes.values():
            measured = sum(s.seconds for s in steps)
            fit.held_out_probe_errors.append((sum(fit.predict(s) for s in steps) - measured) / measured)
    return fit


def split_by_probe(samples: Sequence[StepSample], every: int = 4) -> tuple[list[StepSample], list[StepSample]]:
    """Every ``every``-th probe is held out of the fit; the rest is fitted."""
    fit = [s for s in samples if s.probe % every != every - 1]
    held = [s for s in samples if s.probe % every == every - 1]
    return fit, held
