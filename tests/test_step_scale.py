"""EXPLAIN's estimates take their step times from the cost model scaled by what the engine's own
steps measured (relserve/engine/step_measures.py, relserve/estimate/timing.py), and a home
without a calibration prices each dtype by its own preset (relserve/calibration.py)."""

from __future__ import annotations

import pytest

from relserve.engine.step_measures import StepScale
from relserve.estimate.timing import machine_of, with_host_gap, with_measured_scale
from relserve.policy import PRESETS, CostModel, PolicySettings

COST = CostModel(alpha_p=1e-3, beta_p=0.02, alpha_d=2e-3, beta_d=0.03, gamma_p=1e-6, gamma_d=2e-6,
                 alpha_mp=1e-3, alpha_md=2e-3, beta_m=0.04, source="preset test")


def ewma_ratio(steps: list[tuple[float, float]], weight: float = 0.02, clip: float = 4.0) -> float:
    """The scale written out: time-weighted, each step's weight decaying by ``weight`` per step."""
    n = len(steps)
    num = sum((1 - weight) ** (n - 1 - i) * min(max(m, p / clip), p * clip) for i, (m, p) in enumerate(steps))
    den = sum((1 - weight) ** (n - 1 - i) * p for i, (m, p) in enumerate(steps))
    return num / den


def test_the_scale_is_measured_over_predicted_time_once_enough_steps_ran():
    scale = StepScale()
    for _ in range(15):
        scale.add(0.2, 0.1)
    assert scale.ratio is None  # 15 steps: too few to say
    scale.add(0.2, 0.1)
    assert scale.ratio == pytest.approx(2.0)
    # steps that computed nothing (no prediction) or took no time are not counted
    scale.add(0.5, 0.0)
    scale.add(0.0, 0.1)
    assert scale.steps == 16 and scale.ratio == pytest.approx(2.0)


def test_long_steps_weigh_more_than_short_ones_and_a_stall_counts_as_four_times_its_step():
    steps = [(0.6, 0.6)] * 10 + [(0.09, 0.03)] * 10 + [(30.0, 0.3)]
    scale = StepScale()
    for m, p in steps:
        scale.add(m, p)
    assert scale.ratio == pytest.approx(ewma_ratio(steps))
    # the 30 s stall counted as 1.2 s; the short steps' 3x moved the ratio much less than 3x
    assert scale.ratio == pytest.approx(ewma_ratio(steps[:-1] + [(1.2, 0.3)]))
    # without the stall: ten 1x steps and ten 3x ones of a seventh the time
    before = StepScale()
    for m, p in steps[:-1]:
        before.add(m, p)
    assert before.ratio == pytest.approx(1.1153305687892123)


def test_the_scale_follows_the_machine_when_its_steps_speed_up():
    scale = StepScale()
    steps = [(0.3, 0.1)] * 50 + [(0.1, 0.1)] * 200
    for m, p in steps:
        scale.add(m, p)
    assert scale.ratio == pytest.approx(ewma_ratio(steps))
    assert scale.ratio < 1.05  # 200 steps later the old speed weighs 0.98^200 = 1.8%


def test_a_measured_scale_multiplies_every_term_and_says_so():
    scaled = with_measured_scale(COST, 2.5)
    for term in ("alpha_p", "beta_p", "alpha_d", "beta_d", "gamma_p", "gamma_d", "alpha_mp", "alpha_md", "beta_m"):
        assert getattr(scaled, term) == pytest.approx(2.5 * getattr(COST, term))
    assert scaled.source == "preset test, times 2.50 as this engine's steps measured"
    assert with_measured_scale(CostModel(beta_m=None), 2.0).beta_m is None
    # nothing measured, nonsense, or within 5% of the model: the model as it is
    for scale in (None, 0.0, -1.0, float("nan"), 1.04, 0.96):
        assert with_measured_scale(COST, scale) is COST


class _Engine:
    """What ``machine_of`` reads from a running engine."""

    policy = "relserve"
    settings = None
    policy_settings = PolicySettings()
    cost_model = COST
    kv_capacity_tokens = 65_536
    block_size = 16

    def __init__(self, scale, gap):
        from relserve.engine.settings import EngineSettings

        self.settings = EngineSettings()
        self.step_scale, self.step_gap_s = scale, gap


def test_the_replay_takes_the_measured_scale_and_the_policy_keeps_its_own_model():
    machine = machine_of(_Engine(2.0, 0.005), "m")
    # the replay's steps: the model times 2, then the host's 5 ms a step (a preset: fitted on model runs)
    assert machine.cost.alpha_p == pytest.approx(2e-3) and machine.cost.gamma_d == pytest.approx(4e-6)
    assert machine.cost.beta_p == pytest.approx(0.045) and machine.cost.beta_m == pytest.approx(0.085)
    assert machine.cost == with_host_gap(with_measured_scale(COST, 2.0), 0.005)
    # the replayed policy decides with the cost model the engine's policy has
    assert machine.policy_cost is COST
    assert machine_of(_Engine(None, None), "m").cost is COST


def test_a_home_without_a_calibration_prices_each_dtype_by_its_own_preset(tmp_path, monkeypatch):
    from relserve import calibration, paths

    monkeypatch.setattr(paths, "calibrations_dir", lambda: tmp_path)
    bf16 = calibration.machine_cost_model("m", "bfloat16")
    f32 = calibration.machine_cost_model("m", "float32")
    assert bf16 is PRESETS["smollm2-135m-cpu-bf16"] and f32 is PRESETS["smollm2-135m-cpu"]
    assert bf16.source.startswith("preset smollm2-135m-cpu-bf16") and f32.source.startswith("preset smollm2-135m-cpu (")
    # bfloat16 steps cost about a third of float32's on these CPUs
    assert bf16.prefill(500) < 0.45 * f32.prefill(500) and bf16.decode(20) < 0.45 * f32.decode(20)
    # another dtype takes float32's; a stored calibration wins over either
    assert calibration.machine_cost_model("m", "float16") is f32
    calibration.save_cost_model("m", "bfloat16", CostModel(beta_p=0.01, source="bf16 fit"), {})
    assert calibration.machine_cost_model("m", "bfloat16").source == "bf16 fit"


@pytest.mark.engine
def test_estimates_on_a_running_engine_scale_its_cost_model_by_the_steps_it_measured(engine, with_policy):
    """The engine's policy given a cost model three times too fast: the plug-in measures its steps
    against it, the engine reads that once idle, and EXPLAIN's replay takes the model times it."""
    import uuid

    from relserve.estimate.estimate import estimate_call
    from relserve.functions import make_call
    from relserve.prompt_rendering import render
    from relserve.relquery import RelQuery

    terms = ("alpha_p", "beta_p", "alpha_d", "beta_d", "gamma_p", "gamma_d", "alpha_mp", "alpha_md", "beta_m")
    fast = engine.cost_model.model_copy(update={t: getattr(engine.cost_model, t) / 3 for t in terms
                                                if getattr(engine.cost_model, t) is not None})
    with with_policy("relserve", cost_model=fast):
        assert engine.step_scale is None  # a new policy: nothing measured against its model yet
        since = engine.scheduler_stats().last_step
        nonce = uuid.uuid4().hex[:8]
        rq = RelQuery.from_prompts([f"Count slowly from {i} to {i + 40} ({nonce}):" for i in range(24)], max_tokens=24)
        engine.submit(rq).result()
        assert engine.wait_idle(60)
        engine.queued()
        log = [s for s in engine.scheduler_stats(steps=True).step_log if s.seq > since and s.works]
        steps = [(s.duration, fast.mixed(s.prefill_tokens, s.decode_reqs, s.prefill_pairs, s.decode_context))
                 for s in log]
        assert len(steps) >= 16, f"the relQuery ran {len(steps)} steps; the scale needs 16"
        assert engine.step_scale == pytest.approx(ewma_ratio(steps), rel=1e-9)
        assert engine.step_scale > 1.5  # a model three times too fast is seen as such
        machine = machine_of(engine, engine.model_id)
        assert machine.cost.alpha_p == pytest.approx(fast.alpha_p * engine.step_scale)
        assert machine.policy_cost == fast
        call = make_call("llm_map", "Say hello to {x}", max_tokens=4)
        prompts = [render(call, (f"friend {i}",)) for i in range(8)]
        est = estimate_call(call, prompts, engine=engine, model_id=engine.model_id)
        assert "as this engine's steps measured" in est.cost_model
    # back under the session's own model: measured afresh
    assert engine.step_scale is None


def test_relserve_sim_prices_steps_and_arranges_batches_as_an_engine_here_would(tmp_path, monkeypatch):
    """`relserve sim` without a preset: the calibration stored for the dtype (its step model and
    its arranger settings), else that dtype's preset; before 7 Dec it failed on a missing dtype."""
    import json

    from typer.testing import CliRunner

    from relserve import calibration, paths
    from relserve.cli import app
    from relserve.workloads import generate_trace, write_trace

    monkeypatch.setattr(paths, "calibrations_dir", lambda: tmp_path)
    trace = write_trace(generate_trace("rotten_tomatoes", 4, 0.5, rows=(1, 4), seed=3), tmp_path / "trace.jsonl")
    runner = CliRunner(env={"COLUMNS": "400"})

    def sim(*options: str) -> dict:
        out = tmp_path / "sim.json"
        result = runner.invoke(app, ["sim", "--trace", str(trace), "--policies", "relserve,fcfs", "--no-limit",
                                     "--json", str(out), *options])
        assert result.exit_code == 0, result.output
        return json.loads(out.read_text())["meta"]

    meta = sim("--dtype", "bfloat16")
    assert meta["dtype"] == "bfloat16" and meta["policy_settings"] is None
    assert meta["cost_model"]["source"].startswith("preset smollm2-135m-cpu-bf16")
    assert sim("--dtype", "float32")["cost_model"]["source"].startswith("preset smollm2-135m-cpu (")
    model_id = "SmolLM2-135M-Instruct"
    calibration.save_cost_model(model_id, "bfloat16", CostModel(beta_p=0.01, source="bf16 fit"), {},
                                arranger={"mixed_steps": True, "backlog_weight": 1.0})
    meta = sim("--dtype", "bfloat16")
    assert meta["cost_model"]["source"] == "bf16 fit"
    assert meta["policy_settings"]["mixed_steps"] is True and meta["policy_settings"]["backlog_weight"] == 1.0
    assert sim("--preset", "opt-13b-a100")["cost_model"]["source"] == "preset opt-13b-a100"


def test_relserve_model_info_names_the_preset_in_use_without_a_calibration(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from relserve import calibration, paths
    from relserve.cli import app

    monkeypatch.setattr(paths, "calibrations_dir", lambda: tmp_path)
    runner = CliRunner(env={"COLUMNS": "400", "RELSERVE_DTYPE": "bfloat16"})
    out = runner.invoke(app, ["model", "info"])
    assert out.exit_code == 0, out.output
    assert "calibration: (none; the preset smollm2-135m-cpu-bf16 (AMD EPYC, 2 cores) in use) (bfloat16)" in out.output
    calibration.save_cost_model("SmolLM2-135M-Instruct", "bfloat16", CostModel(source="bf16 fit"), {})
    out = runner.invoke(app, ["model", "info"])
    assert f"calibration: {calibration.calibration_path('SmolLM2-135M-Instruct', 'bfloat16')} (bfloat16)" in out.output


def test_a_prompt_is_held_whole_when_every_block_short_of_its_last_token_is_cached():
    from relserve.engine.prefix_lookup import holds_whole_prompt

    # 70 tokens in blocks of 32: the lookup can find at most 64 (the 70th token is always computed)
    assert holds_whole_prompt(64, 70, 32) and not holds_whole_prompt(32, 70, 32)
    # 64 tokens: the second block holds the last token, so the first block is all a lookup finds
    assert holds_whole_prompt(32, 64, 32) and not holds_whole_prompt(0, 64, 32)
    assert not holds_whole_prompt(0, 20, 32)  # shorter than a block: never warmed, never held


@pytest.mark.engine
def test_a_prefix_already_cached_is_not_warmed_again_in_its_namespace(engine):
    """A call's shared prefix is warmed before its rows only when the engine does not hold it
    (a repeated statement skips the extra step), and only in the caller's prefix-cache namespace."""
    import uuid

    from relserve.estimate.estimate import estimate_call
    from relserve.functions import make_call
    from relserve.policy.types import Tenancy
    from relserve.prompt_rendering import render

    head = f"Read this note {uuid.uuid4().hex} carefully and say in one plain word what it is about. Note: "
    first = engine.warm_prefix(head)
    assert first >= engine.block_size
    assert engine.warm_prefix(head) == 0  # held: nothing to compute
    # another tenant's namespace holds none of it: warmed there, once
    other = Tenancy(tenant="b", cache_salt="salt-b")
    assert engine.warm_prefix(head, tenancy=other) == first and engine.warm_prefix(head, tenancy=other) == 0
    # EXPLAIN's replay of a call with that prefix has no warm-up stage now; with a new prefix it has
    call = make_call("llm_map", head + "{x}", max_tokens=4)
    prompts = [render(call, (f"note {i}",)) for i in range(4)]
    held = estimate_call(call, prompts, engine=engine, model_id=engine.model_id, prefix=head)
    assert [kind for kind, _ in held.stages] == ["rows"]
    fresh = head.replace("Read", "Skim")
    call = make_call("llm_map", fresh + "{x}", max_tokens=4)
    prompts = [render(call, (f"note {i}",)) for i in range(4)]
    est = estimate_call(call, prompts, engine=engine, model_id=engine.model_id, prefix=fresh)
    assert [kind for kind, _ in est.stages] == ["prefix warm-up", "rows"]
