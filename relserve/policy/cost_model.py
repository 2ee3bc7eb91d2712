"""Linear step-time predictors (paper Eq. 9) and their least-squares fit.

    L_prefill(p) = alpha_p * utok(p) + beta_p      (uncached prompt tokens of the batch)
    L_decode(d)  = alpha_d * req(d)  + beta_d      (requests in the decode batch)

vLLM v1 also runs mixed steps (stock vLLM, Sarathi): prefill tokens and decode requests in one
forward pass. The paper has no predictor for them; ``mixed`` is a plane fitted the same way,
L_mixed = alpha_mp * utok + alpha_md * req + beta_m, else the sum of the two lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field


class CostModel(BaseModel):
    """Step-time coefficients, in seconds. Defaults: `relserve calibrate` for SmolLM2-135M
    (float32, eager, model threads on both cores) on the 2-core Xeon these machines have
    (R^2 0.991 prefill, 0.997 decode; decode requests holding ~160-token contexts)."""

    alpha_p: float = Field(default=8.55e-4, ge=0, description="seconds per uncached prefill token")
    beta_p: float = Field(default=0.018, ge=0, description="fixed seconds per prefill step")
    alpha_d: float = Field(default=1.68e-3, ge=0, description="seconds per request in a decode step")
    beta_d: float = Field(default=0.0475, ge=0, description="fixed seconds per decode step")
    #: mixed steps (None: not calibrated; the two lines are added up instead)
    alpha_mp: float | None = Field(default=None, ge=0, description="seconds per prefill token in a mixed step")
    alpha_md: float | None = Field(default=None, ge=0, description="seconds per decode request in a mixed step")
    beta_m: float | None = Field(default=None, ge=0, description="fixed seconds per mixed step")
    #: where the figures come from ("default", "calibrated <date> on <machine>", a preset name)
    source: str = "default"

    def prefill(self, uncached_tokens: float) -> float:
        return self.alpha_p * uncached_tokens + self.beta_p

    def decode(self, num_requests: float) -> float:
        return self.alpha_d * num_requests + self.beta_d

    def mixed(self, uncached_tokens: float, num_decode: float) -> float:
        """A step that both prefills and decodes (chunked prefill)."""
        if uncached_tokens <= 0:
            return self.decode(num_decode)
        if num_decode <= 0:
            return self.prefill(uncached_tokens)
        if self.alpha_mp is not None and self.alpha_md is not None and self.beta_m is not None:
            return self.alpha_mp * uncached_tokens + self.alpha_md * num_decode + self.beta_m
        return self.alpha_p * uncached_tokens + self.alpha_d * num_decode + max(self.beta_p, self.beta_d)


#: Cost models of larger setups, for the simulator (figures derived from the RelServe paper's
#: Fig. 7 scale for OPT-13B on one A100, and a 70B model on 4 A100s; rough, for what-if studies).
PRESETS: dict[str, CostModel] = {
    "smollm2-135m-cpu": CostModel(),
    "opt-13b-a100": CostModel(alpha_p=1.1e-4, beta_p=0.012, alpha_d=1.6e-4, beta_d=0.022, source="preset opt-13b-a100"),
    "llama2-70b-4xa100": CostModel(alpha_p=2.6e-4, beta_p=0.030, alpha_d=3.0e-4, beta_d=0.045, source="preset llama2-70b-4xa100"),
}


@dataclass(frozen=True)
class LinearFit:
    slope: float
    intercept: float
    r_squared: float
    n: int
    #: points left out as outliers (see ``fit_line_robust``)
    dropped: int = 0


def fit_line_robust(xs: Sequence[float], ys: Sequence[float], k: float = 3.5, rounds: int = 3) -> LinearFit:
    """Least squares, refitted without points whose residual exceeds k robust sigmas (MAD).

    A shared 2-core machine now and then stalls one step for seconds; one such point would tilt
    the whole line. Up to ``rounds`` refits, until no point is left out.
    """
    keep = list(range(len(xs)))
    fit = fit_line(xs, ys)
    for _ in range(rounds):
        res = {i: ys[i] - (fit.slope * xs[i] + fit.intercept) for i in keep}
        ordered = sorted(res.values())
        med = ordered[len(ordered) // 2]
        mad = sorted(abs(r - med) for r in ordered)[len(ordered) // 2]
        if mad == 0:
            break
        kept = [i for i in keep if abs(res[i] - med) <= k * 1.4826 * mad]
        if len(kept) == len(keep) or len(kept) < 2:
            break
        keep = kept
        fit = fit_line([xs[i] for i in keep], [ys[i] for i in keep])
    return LinearFit(fit.slope, fit.intercept, fit.r_squared, fit.n, len(xs) - len(keep))


@dataclass(frozen=True)
class PlaneFit:
    a: float
    b: float
    c: float
    r_squared: float
    n: int


def fit_plane(us: Sequence[float], vs: Sequence[float], ys: Sequence[float]) -> PlaneFit:
    """Ordinary least squares y = a * u + b * v + c (normal equations, 3 x 3)."""
    n = len(ys)
    if n < 3 or len(us) != n or len(vs) != n:
        raise ValueError(f"need at least three (u, v, y) points, got {n}")
    mu, mv, my = sum(us) / n, sum(vs) / n, sum(ys) / n
    suu = sum((u - mu) ** 2 for u in us)
    svv = sum((v - mv) ** 2 for v in vs)
    suv = sum((u - mu) * (v - mv) for u, v in zip(us, vs))
    suy = sum((u - mu) * (y - my) for u, y in zip(us, ys))
    svy = sum((v - mv) * (y - my) for v, y in zip(vs, ys))
    det = suu * svv - suv * suv
    if det == 0:
        raise ValueError("the points do not span a plane (u and v vary together)")
    a = (suy * svv - svy * suv) / det
    b = (svy * suu - suy * suv) / det
    c = my - a * mu - b * mv
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (a * u + b * v + c)) ** 2 for u, v, y in zip(us, vs, ys))
    return PlaneFit(a, b, c, 1 - ss_res / ss_tot if ss_tot else 1.0, n)


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> LinearFit:
    """Ordinary least squares y = slope * x + intercept, with R^2."""
    n = len(xs)
    if n != len(ys) or n < 2:
        raise ValueError(f"need at least two (x, y) points of equal count, got {len(xs)} and {len(ys)}")
    mx = sum(xs) / n
    my = sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("all x values are equal; cannot fit a slope")
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (slope * x + intercept)) ** 2 for x, y in zip(xs, ys))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return LinearFit(slope, intercept, r2, n)
