"""`relserve calibrate` on the real engine: the step log carries what the step model needs, and a
small probe grid fits and reports it."""

from __future__ import annotations

import pytest
from waits import run_within

from relserve import RelQuery
from relserve.engine.calibrate import ProbeGrid, calibrate

pytestmark = pytest.mark.engine


def test_step_log_counts_the_context_each_step_attends_to(engine):
    engine.reset_prefix_cache()
    engine.scheduler_stats(clear=True)
    res = run_within(engine, RelQuery("Count from one to ten: {x}", [{"x": "go"}, {"x": "now"}], max_tokens=4, ignore_eos=True))
    prompts = [r.prompt_tokens for r in res.rows]
    steps = engine.scheduler_stats(steps=True, clear=True)["step_log"]
    prefill = [s for s in steps if s["prefill_tokens"]]
    decode = [s for s in steps if s["decode_reqs"] and not s["prefill_tokens"]]
    # the prefill steps computed every prompt token the prefix cache did not hold, and each
    # token attends to at least itself
    assert sum(s["prefill_tokens"] for s in prefill) == sum(prompts) - res.stats.cached_tokens
    assert all(s["prefill_pairs"] >= s["prefill_tokens"] * (s["prefill_tokens"] / s["prefill_reqs"] + 1) / 2 for s in prefill)
    # three decode steps of both requests; their context grows by one token per request and step
    assert [s["decode_reqs"] for s in decode] == [2, 2, 2]
    assert [s["decode_context"] for s in decode] == [sum(prompts) + 2 * k for k in (1, 2, 3)]


def test_a_small_grid_fits_the_step_model_and_holds_out_probes(engine):
    grid = ProbeGrid(
        prefill_lengths=(48,),
        prefill_fractions=(0.5,),
        cached_fractions=(0.0, 0.75),
        decode_sizes=(1, 8),
        decode_contexts=(64,),
        decode_steps=4,
        mixed_sizes=(4,),
        mixed_contexts=(64,),
        mixed_fill=(1.0,),
        held_out_every=2,
    )
    before = engine.policy
    cal = calibrate(engine, grid)
    assert engine.policy == before
    assert [p["kind"] for p in cal.probes] == ["prefill", "prefill", "decode", "decode", "mixed"]
    assert [p["held_out"] for p in cal.probes] == [False, True, False, True, False]
    assert [p["shape"] for p in cal.probes] == ["prefill cold", "prefill cached", "decode", "decode", "mixed full budget"]
    # the held-out probes' error is reported for each shape they cover
    assert {e.shape for e in cal.by_shape} == {"prefill cached", "decode"}
    assert all(e.probes == 1 and e.steps >= 1 for e in cal.by_shape)
    # a fitted step's time is its period: at least its model run less the policy's decision
    by_probe = {}
    for s in cal.steps:
        if s["prefill_tokens"] or s["decode_reqs"]:
            by_probe.setdefault(s["probe"], []).append(s)
    for smp in cal.samples:
        assert smp.seconds > 0
    assert sum(len(v) for v in by_probe.values()) == len(cal.samples) + len(cal.held_out)
    assert all(sm.seconds >= st["duration"] - st["policy_s"] - 1e-9
               for sm, st in zip(cal.samples, (s for p in sorted(by_probe) if p % 2 == 0 for s in by_probe[p])))
    assert {s.probe for s in cal.held_out} == {1, 3} and {s.probe for s in cal.samples} == {0, 2, 4}
    assert any(s.ctx > 0 for s in cal.samples) and any(s.pairs > 0 for s in cal.samples)
    fit = cal.fit
    assert fit.n_held_out == len(cal.held_out) and len(fit.held_out_probe_errors) == 2
    cost = cal.cost_model
    assert cost.source.startswith("calibrated on") and cost.beta_m == pytest.approx(fit.coef["b0"] + fit.coef["bP"] + fit.coef["bD"])
