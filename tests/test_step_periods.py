"""What `relserve calibrate` fits: a step's period (its scheduling call to the next step's while
the engine has work, less the policy's own decision), and the held-out error per shape of step.
Pure logic over hand-made step logs; the real engine's logs are checked in test_calibrate_engine.py."""

from __future__ import annotations

import pytest

from relserve.engine.calibrate import (
    IDLE_GAP_S,
    ProbeGrid,
    _probes,
    period_of,
    shape_errors,
    shape_of,
    steps_as_samples,
)
from relserve.engine.step_record import StepRecord
from relserve.policy.step_fit import StepSample, fit_steps


def _step(entered: float, duration: float, schedule_s: float = 0.002, policy_s: float = 0.001, **work) -> StepRecord:
    return StepRecord(entered=entered, start=entered + schedule_s, schedule_s=schedule_s, policy_s=policy_s,
                      duration=duration, prefill_tokens=work.get("utok", 0), decode_reqs=work.get("reqs", 0),
                      prefill_pairs=0.0, decode_context=0)


def test_a_busy_step_costs_until_the_next_one_starts_less_the_policy():
    a = _step(10.0, 0.030, utok=100)
    b = _step(10.040, 0.020, reqs=4)  # 8 ms after a's model run ended: output handling
    assert period_of(a, b) == pytest.approx(0.040 - 0.001)


def test_a_step_before_an_idle_pause_costs_its_call_and_its_run():
    a = _step(10.0, 0.030, utok=100)
    later = _step(10.0 + 0.032 + IDLE_GAP_S + 0.2, 0.020, reqs=4)
    assert period_of(a, later) == pytest.approx(0.002 + 0.030 - 0.001)
    assert period_of(a, None) == pytest.approx(0.031)


def test_the_step_log_becomes_samples_of_working_steps_only():
    log = [_step(1.0, 0.03, utok=64), StepRecord(prefill_tokens=0, decode_reqs=0, duration=0.001, entered=1.035),
           _step(1.04, 0.02, reqs=2), _step(5.0, 0.02, reqs=2)]
    samples = steps_as_samples(log, probe=7)
    assert [(s.utok, s.reqs, s.probe) for s in samples] == [(64, 0, 7), (0, 2, 7), (0, 2, 7)]
    # the idle step between them is not a working step: the first step runs to the next working one
    assert [round(s.seconds, 6) for s in samples] == [0.039, 0.021, 0.021]


def test_shapes_name_what_each_probe_measures():
    assert shape_of("prefill", {"cached": 0.0}) == "prefill cold"
    assert shape_of("prefill", {"cached": 0.75}) == "prefill cached"
    assert shape_of("decode", {"batch": 8}) == "decode" and shape_of("decode", {"batch": 256}) == "decode large"
    assert shape_of("mixed", {"fill": 1.0}) == "mixed full budget" and shape_of("mixed", {"fill": 0.25}) == "mixed"


def test_held_out_error_is_reported_per_shape():
    # a model exact on prefills, 10% low on every decode step
    fitted = [StepSample(u, 0.0, 0, 0, 0.02 + 1e-3 * u, p) for p, u in enumerate((64, 128, 256, 512, 700, 900, 1000))]
    fitted += [StepSample(0, 0.0, r, 0, 0.02 + 2e-3 * r, 10 + r) for r in (1, 8, 32, 64)]
    fit = fit_steps(fitted)
    held = [StepSample(300, 0.0, 0, 0, fit.predict(StepSample(300, 0.0, 0, 0, 0.0)), 100),
            StepSample(0, 0.0, 16, 0, fit.predict(StepSample(0, 0.0, 16, 0, 0.0)) / 0.9, 101)]
    probes = [{"probe": 100, "shape": "prefill cold"}, {"probe": 101, "shape": "decode"}]
    errs = {e.shape: e for e in shape_errors(fit, held, probes)}
    assert errs["prefill cold"].total_error == pytest.approx(0.0, abs=1e-9)
    assert errs["decode"].total_error == pytest.approx(-0.1) and errs["decode"].median_step_error == pytest.approx(0.1)
    assert errs["decode"].probes == errs["decode"].steps == 1


class _FakeEngine:
    """What ``_probes`` reads of an engine: its limits (no probe is run here)."""

    class settings:  # noqa: N801
        max_num_batched_tokens = 1024
        max_num_seqs = 64

    kv_capacity_tokens = 200_000


def test_the_grid_reaches_the_running_limit_and_the_whole_token_budget():
    probes = _probes(_FakeEngine(), ProbeGrid(), __import__("random").Random(0))
    decode_batches = sorted({p["batch"] for k, p, _ in probes if k == "decode"})
    assert decode_batches == [1, 8, 32, 64]  # 96 and 192 exceed the limit of 64; the limit itself is probed
    mixed = [(p["batch"], p["fill"]) for k, p, _ in probes if k == "mixed"]
    assert (32, 1.0) in mixed and (4, 0.25) in mixed and all(b <= 64 for b, _ in mixed)
