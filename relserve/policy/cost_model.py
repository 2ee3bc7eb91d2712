"""Step-time predictors (paper Eq. 9, with the context terms a step really pays) and their fit.

The paper predicts a prefill step from its uncached tokens and a decode step from its request
count. That holds while prompts and answers stay short; with 200-token prompts and 80-token
answers the attention over each request's context dominates, so two context terms are added:

    L_prefill(p) = alpha_p * utok(p) + gamma_p * attn(p) + beta_p
    L_decode(d)  = alpha_d * req(d)  + gamma_d * ctx(d)  + beta_d

``attn(p)`` counts the (new token, earlier token) pairs a prefill computes: a request that
computes ``u`` tokens after ``c`` cached ones attends ``u * (c + (u + 1) / 2)`` pairs.
``ctx(d)`` is the total context length the decode batch attends to. A mixed step (stock vLLM,
Sarathi, or RelServe's decode-plus-chunk) pays both sets of terms and one fixed cost ``beta_m``.
``gamma_p = gamma_d = 0`` gives back the paper's two lines. ``relquery``-level sums (a whole
decode to completion) have closed forms here, so the policy never loops over decode steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field


def prefill_pairs(uncached: float, cached: float = 0.0) -> float:
    """Attention pairs of computing ``uncached`` prompt tokens after ``cached`` ones."""
    return uncached * (cached + (uncached + 1) / 2)


class CostModel(BaseModel):
    """Step-time coefficients, in seconds. Defaults: the paper's two lines as `relserve
    calibrate` fitted them for SmolLM2-135M (float32, eager, model threads on both cores) on the
    2-core AMD EPYC machines this project runs on; the context terms default to 0 (the paper's
    form). ``PRESETS["smollm2-135m-cpu"]`` is that whole fit, context terms included."""

    alpha_p: float = Field(default=2.05e-3, ge=0, description="seconds per uncached prefill token")
    beta_p: float = Field(default=0.0718, ge=0, description="fixed seconds per prefill step")
    alpha_d: float = Field(default=2.87e-3, ge=0, description="seconds per request in a decode step")
    beta_d: float = Field(default=0.0718, ge=0, description="fixed seconds per decode step")
    gamma_p: float = Field(default=0.0, ge=0, description="seconds per attention pair of a prefill")
    gamma_d: float = Field(default=0.0, ge=0, description="seconds per context token a decode step attends to")
    #: mixed steps (None: not calibrated; the two lines are added up, with the larger fixed cost)
    alpha_mp: float | None = Field(default=None, ge=0, description="seconds per prefill token in a mixed step")
    alpha_md: float | None = Field(default=None, ge=0, description="seconds per decode request in a mixed step")
    beta_m: float | None = Field(default=None, ge=0, description="fixed seconds per mixed step")
    #: where the figures come from ("default", "calibrated <date> on <machine>", a preset name)
    source: str = "default"

    def prefill(self, uncached_tokens: float, pairs: float = 0.0) -> float:
        return self.alpha_p * uncached_tokens + self.gamma_p * pairs + self.beta_p

    def decode(self, num_requests: float, context: float = 0.0) -> float:
        return self.alpha_d * num_requests + self.gamma_d * context + self.beta_d

    def mixed(self, uncached_tokens: float, num_decode: float, pairs: float = 0.0, context: float = 0.0) -> float:
        """A step that both prefills and decodes (chunked prefill, or decode plus a chunk)."""
        if uncached_tokens <= 0:
            return self.decode(num_decode, context)
        if num_decode <= 0:
            return self.prefill(uncached_tokens, pairs)
        a_p = self.alpha_p if self.alpha_mp is None else self.alpha_mp
        a_d = self.alpha_d if self.alpha_md is None else self.alpha_md
        beta = max(self.beta_p, self.beta_d) if self.beta_m is None else self.beta_m
        return a_p * uncached_tokens + a_d * num_decode + self.gamma_p * pairs + self.gamma_d * context + beta

    def decode_run(self, num_requests: float, context: float, steps: float) -> float:
        """``steps`` decode steps of a batch that starts with ``context`` tokens and grows by one
        token per request each step (a batch decoding to completion), in closed form."""
        if steps <= 0 or num_requests <= 0:
            return 0.0
        per_step = self.alpha_d * num_requests + self.gamma_d * context + self.beta_d
        return steps * per_step + self.gamma_d * num_requests * steps * (steps - 1) / 2

    @property
    def step_overhead(self) -> float:
        """The fixed cost every step pays, whatever it holds (the smaller fixed cost)."""
        return min(self.beta_p, self.beta_d)

#: Cost models of larger setups, for the simulator (figures derived from the RelServe paper's
#: Fig. 7 scale for OPT-13B on one A100, and a 70B model on 4 A100s; rough, for what-if studies).
PRESETS: dict[str, CostModel] = {
    # fitted by `relserve calibrate` (docs/benchmarks.md#scheduler): one fixed cost for
    # every step; no decode-context term on this machine
    "smollm2-135m-cpu": CostModel(gamma_p=1.69e-6, beta_m=0.0718, source="preset smollm2-135m-cpu (AMD EPYC, 2 cores)"),
    # the same model in bfloat16 (the default dtype where the CPU computes it), from `relserve
    # calibrate` on an AMD EPYC with avx512_bf16 and 2 cores: float32's preset overstates a
    # bfloat16 engine's steps several times (docs/notebook/benchmark-passes.md, "Estimates in a
    # new user's home")
    "smollm2-135m-cpu-bf16": CostModel(
        alpha_p=5.96e-4, beta_p=0.0253, alpha_d=8.22e-4, beta_d=0.0253, gamma_p=4.63e-7, gamma_d=6.35e-7,
        alpha_mp=5.96e-4, alpha_md=8.22e-4, beta_m=0.0253, source="preset smollm2-135m-cpu-bf16 (AMD EPYC, 2 cores)",
    ),
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
