"""The engine's default dtype (issue 65): bfloat16 where the CPU computes it natively, float32
elsewhere; the demo's question over its table keeps every answer under the default engine
(the rest of the suite pins float32: tests/conftest.py)."""

from __future__ import annotations

import pytest

from relserve.cpu_features import cpu_has_bf16, describe_cpu
from relserve.engine.settings import EngineSettings


def test_auto_is_bfloat16_exactly_where_the_cpu_has_it(monkeypatch):
    monkeypatch.delenv("RELSERVE_DTYPE", raising=False)
    assert EngineSettings().dtype == "auto"
    assert EngineSettings().resolved_dtype == ("bfloat16" if cpu_has_bf16() else "float32")
    assert EngineSettings(dtype="float32").resolved_dtype == "float32"
    monkeypatch.setenv("RELSERVE_DTYPE", "float32")
    assert EngineSettings().resolved_dtype == "float32"


def test_a_report_names_the_cpu_and_its_bfloat16_units():
    xeon = ("processor\t: 0\nmodel name\t: Intel Xeon Processor\nflags\t\t: fpu avx512_bf16 amx_bf16 amx_tile\n"
            "processor\t: 1\nmodel name\t: Intel Xeon Processor\nflags\t\t: fpu avx512_bf16 amx_bf16 amx_tile\n")
    assert describe_cpu(xeon) == "Intel Xeon Processor (avx512_bf16, amx_bf16)"
    # a flag that merely contains the name is not the unit
    assert describe_cpu("model name : Old CPU\nflags : fpu avx512_bf16x\n") == "Old CPU (no bfloat16 units)"
    assert describe_cpu("") == "unknown CPU (no bfloat16 units)"


def test_each_dtype_keeps_its_own_calibration(tmp_path, monkeypatch):
    from relserve import calibration, paths
    from relserve.policy import CostModel

    monkeypatch.setattr(paths, "calibrations_dir", lambda: tmp_path)
    calibration.save_cost_model("m", "bfloat16", CostModel(beta_p=0.01), {})
    assert calibration.load_cost_model("m", "float32") is None  # a bfloat16 fit does not price float32 steps
    assert calibration.load_cost_model("m", "bfloat16").beta_p == 0.01
    # a float32 calibration stored before dtypes had files of their own is still read
    legacy = calibration.calibration_path("m", "bfloat16").name.replace("__bfloat16", "")
    (tmp_path / legacy).write_text((tmp_path / calibration.calibration_path("m", "bfloat16").name).read_text())
    assert calibration.load_cost_model("m", "float32").beta_p == 0.01
    assert calibration.calibration_path("m", "bfloat16").name.endswith("__bfloat16.json")


def test_an_engine_prices_its_steps_with_its_own_dtypes_calibration(tmp_path, monkeypatch):
    """The engine, EXPLAIN's estimate without an engine and `relserve calibrate` all name the dtype
    they run in: a float32 engine is not priced by a bfloat16 calibration or the reverse."""
    from relserve import calibration, paths
    from relserve.planner.cost import cost_model_of
    from relserve.policy import CostModel

    monkeypatch.setattr(paths, "calibrations_dir", lambda: tmp_path)
    calibration.save_cost_model("m", "bfloat16", CostModel(beta_p=0.01, source="bf16 fit"), {})
    calibration.save_cost_model("m", "float32", CostModel(beta_p=0.02, source="f32 fit"), {})
    monkeypatch.setenv("RELSERVE_DTYPE", "bfloat16")
    assert cost_model_of(None, "m").source == "bf16 fit"
    monkeypatch.setenv("RELSERVE_DTYPE", "float32")
    assert cost_model_of(None, "m").source == "f32 fit"


@pytest.mark.engine
def test_the_demo_keeps_every_answer_under_the_default_engine(monkeypatch):
    from relserve import Engine
    from relserve.cli.demo import QUESTION, load_demo_table
    from relserve.functions import make_call
    from relserve.planner.plan_and_run import run_call

    monkeypatch.delenv("RELSERVE_DTYPE", raising=False)
    rows = load_demo_table()
    call = make_call("llm_filter", QUESTION)
    with Engine(max_num_seqs=16, kv_cache_gb=1.0) as engine:
        assert engine.settings.resolved_dtype == ("bfloat16" if cpu_has_bf16() else "float32")
        out = run_call(call, [[r[c] for r in rows] for c in call.template.columns], engine=engine, cache=False,
                       progress=False)
    assert out.values == [r["happy"] == "yes" for r in rows]
