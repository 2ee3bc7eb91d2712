"""The engine's default dtype (issue 65): bfloat16 where the CPU computes it natively, float32
elsewhere; the demo's question over its table keeps every answer under the default engine
(the rest of the suite pins float32: tests/conftest.py)."""

from __future__ import annotations

import pytest

from relserve.cpu_features import cpu_has_bf16
from relserve.engine.settings import EngineSettings


def test_auto_is_bfloat16_exactly_where_the_cpu_has_it(monkeypatch):
    monkeypatch.delenv("RELSERVE_DTYPE", raising=False)
    assert EngineSettings().dtype == "auto"
    assert EngineSettings().resolved_dtype == ("bfloat16" if cpu_has_bf16() else "float32")
    assert EngineSettings(dtype="float32").resolved_dtype == "float32"
    monkeypatch.setenv("RELSERVE_DTYPE", "float32")
    assert EngineSettings().resolved_dtype == "float32"


def test_each_dtype_keeps_its_own_calibration(tmp_path, monkeypatch):
    from relserve import calibration, paths
    from relserve.policy import CostModel

    monkeypatch.setattr(paths, "calibrations_dir", lambda: tmp_path)
    monkeypatch.setenv("RELSERVE_DTYPE", "bfloat16")
    calibration.save_cost_model("m", CostModel(beta_p=0.01), {})
    monkeypatch.setenv("RELSERVE_DTYPE", "float32")
    assert calibration.load_cost_model("m") is None  # a bfloat16 fit does not price float32 steps
    # a float32 calibration stored before dtypes had files of their own is still read
    legacy = calibration.calibration_path("m", "bfloat16").name.replace("__bfloat16", "")
    (tmp_path / legacy).write_text((tmp_path / calibration.calibration_path("m", "bfloat16").name).read_text())
    assert calibration.load_cost_model("m").beta_p == 0.01
    monkeypatch.setenv("RELSERVE_DTYPE", "bfloat16")
    assert calibration.calibration_path("m").name.endswith("__bfloat16.json")


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
