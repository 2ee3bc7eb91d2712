"""The step-time model with context terms: its formulas, its fit and where it is used.

Cost model of the hand-worked cases: L_prefill = 0.001 utok + 1e-4 pairs + 0.01,
L_decode = 0.002 req + 0.001 ctx + 0.02.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from relserve.policy import CostModel, Limits, PolicySettings, make_policy
from relserve.policy.cost_model import prefill_pairs
from relserve.policy.decompose import batch_decompose
from relserve.policy.step_fit import TERMS, StepSample, fit_steps, nnls, split_by_probe
from relserve.sim import simulate
from relserve.workloads import TraceQuery

CTX = CostModel(alpha_p=0.001, beta_p=0.01, alpha_d=0.002, beta_d=0.02, gamma_p=1e-4, gamma_d=0.001)
EXACT = dict(rel=1e-12, abs=1e-12)


def test_prefill_pairs_count_new_tokens_against_their_context():
    # 3 new tokens after 2 cached: they attend to 3, 4 and 5 tokens
    assert prefill_pairs(3, 2) == 3 + 4 + 5
    assert prefill_pairs(10) == 55


def test_context_terms_add_to_the_paper_lines():
    assert CTX.prefill(100, 5050) == pytest.approx(0.1 + 0.505 + 0.01, **EXACT)
    assert CTX.decode(4, 400) == pytest.approx(0.008 + 0.4 + 0.02, **EXACT)
    # without a fitted plane a mixed step pays both sets of terms and the larger fixed cost
    assert CTX.mixed(100, 4, 5050, 400) == pytest.approx(0.1 + 0.008 + 0.505 + 0.4 + 0.02, **EXACT)
    # a batch of 2 decoding 3 steps from 200 context tokens: contexts 200, 202, 204
    assert CTX.decode_run(2, 200, 3) == pytest.approx(sum(CTX.decode(2, c) for c in (200, 202, 204)), **EXACT)
    assert CTX.decode_run(2, 200, 0) == 0.0


def test_decomposition_charges_prompt_context():
    # two 100-token prompts, 60 tokens of each cached: each computes 40 tokens after 60
    dec = batch_decompose([40, 40], 3, cap=10_000, max_num_seqs=8, max_num_batched_tokens=1000, prompts=[100, 100])
    assert dec.prefill_batches == [80]
    assert dec.prefill_pairs == [2 * prefill_pairs(40, 60)]
    assert dec.decode_batches == [2, 2, 2]
    assert dec.duration(CTX) == pytest.approx(CTX.prefill(80, 2 * prefill_pairs(40, 60)) + CTX.decode_run(2, 200, 3), **EXACT)


def test_nnls_recovers_coefficients_and_clamps_negative_ones():
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 10, size=(40, 3))
    assert nnls(a, a @ np.array([1.0, 2.0, 0.5])) == pytest.approx([1.0, 2.0, 0.5], rel=1e-9)
    x = nnls(a, a @ np.array([1.0, -2.0, 0.5]))
    assert x[1] == 0.0 and (x >= 0).all()


def _synthetic(cost: CostModel, n_probes: int, noise: float, seed: int = 1) -> list[StepSample]:
    rng = random.Random(seed)
    out = []
    for probe in range(n_probes):
        for _ in range(12):
            kind = probe % 3
            u = rng.randint(32, 1024) if kind != 1 else 0
            cached = rng.randint(0, 600)
            pairs = prefill_pairs(u, cached) if u else 0.0
            reqs = rng.randint(1, 128) if kind != 0 else 0
            ctx = reqs * rng.randint(40, 900) if reqs else 0
            t = cost.mixed(u, reqs, pairs, ctx)
            out.append(StepSample(u, pairs, reqs, ctx, t * (1 + rng.gauss(0, noise)), probe))
    return out


def test_fit_recovers_a_known_model_and_reports_held_out_error():
    truth = CostModel(alpha_p=8e-4, gamma_p=1e-7, beta_p=0.03, alpha_d=1.5e-3, gamma_d=4e-6, beta_d=0.04, beta_m=0.05)
    fitted, held = split_by_probe(_synthetic(truth, 24, 0.02), every=4)
    fit = fit_steps(fitted, held)
    c = fit.coef
    assert c["alpha_p"] == pytest.approx(8e-4, rel=0.1)
    assert c["alpha_d"] == pytest.approx(1.5e-3, rel=0.15)
    assert c["gamma_d"] == pytest.approx(4e-6, rel=0.1)
    assert c["gamma_p"] == pytest.approx(1e-7, rel=0.25)
    assert fit.r2 > 0.99 and set(fit.r2_by_kind) == {"prefill", "decode", "mixed"}
    assert fit.n_held_out == len(held) and len(fit.held_out_probe_errors) == 6
    assert fit.held_out_step_error < 0.05 and fit.held_out_probe_error < 0.03
    # dropping the decode-context term costs R^2: the term explains something
    by_name = {t.name: t for t in fit.terms}
    assert [t.name for t in fit.terms] == list(TERMS)
    assert by_name["gamma_d"].r2_drop > 0.01
    cm = fit.cost_model("test")
    assert cm.beta_p == pytest.approx(c["b0"] + c["bP"]) and cm.beta_m == pytest.approx(c["b0"] + c["bP"] + c["bD"])


def test_a_model_without_context_terms_misses_long_contexts():
    """What the issue measured: a fit on short contexts, used on long ones, is far off; the
    context terms hold."""
    truth = CostModel(alpha_p=8e-4, gamma_p=2e-8, beta_p=0.03, alpha_d=1.5e-3, gamma_d=4e-6, beta_d=0.04)
    long_decode = [StepSample(0, 0.0, 64, 64 * 900, truth.decode(64, 64 * 900), 0)]
    fit = fit_steps(_synthetic(truth, 24, 0.0))
    assert fit.predict(long_decode[0]) == pytest.approx(long_decode[0].seconds, rel=0.01)
    paper_lines = CostModel(alpha_p=truth.alpha_p, beta_p=truth.beta_p, alpha_d=truth.alpha_d, beta_d=truth.beta_d)
    assert paper_lines.decode(64) < 0.5 * long_decode[0].seconds


def test_fit_needs_enough_steps():
    with pytest.raises(ValueError, match="at least 7 measured steps"):
        fit_steps([StepSample(10, 55, 0, 0, 0.1)])


def test_simulator_charges_the_context_each_step_attends_to():
    # one 10-word prompt, 3 output tokens, FCFS: prefill u=10 (55 pairs), decodes at context 11, 12
    trace = [TraceQuery(id="A", arrival_s=0.0, template="{x}", max_tokens=3, rows=[{"x": " ".join(f"w{i}" for i in range(10))}])]
    lim = Limits(max_num_batched_tokens=100, max_num_seqs=4, kv_capacity_tokens=256, kv_free_tokens=256, block_size=4)
    res = simulate(trace, make_policy("fcfs", CTX, PolicySettings()), CTX, lim, isolated=False)
    expected = CTX.prefill(10, 55) + CTX.decode(1, 11) + CTX.decode(1, 12)
    assert res.relqueries[0].finish == pytest.approx(expected, **EXACT)
