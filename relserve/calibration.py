"""Stored cost-model calibrations, one per model, machine and dtype (a bfloat16 step costs about
two thirds of a float32 one here, so one calibration cannot serve both).

``machine_cost_model(model_id, dtype)`` is the one answer to "what does a step cost here": the
model `relserve calibrate` stored for this model, machine and dtype, else the preset of the default
model on these CPUs. Engines, the simulator's command line, EXPLAIN's estimates and the benchmarks
use it. The caller names the dtype (its engine's ``settings.resolved_dtype``): this module sits
below the engine and reads no engine settings itself.
"""

from __future__ import annotations

import json
import os
import platform
import re

from relserve import paths
from relserve.cpu_features import this_cpu
from relserve.policy import PRESETS, CostModel, PolicySettings

#: the step-cost model without a calibration (the default model on this project's CPUs), by the
#: engine's dtype; any other dtype takes float32's
DEFAULT_PRESETS: dict[str, str] = {"float32": "smollm2-135m-cpu", "bfloat16": "smollm2-135m-cpu-bf16"}


def default_preset(dtype: str) -> CostModel:
    """The preset an engine in ``dtype`` uses where `relserve calibrate` stored nothing."""
    return PRESETS[DEFAULT_PRESETS.get(dtype, DEFAULT_PRESETS["float32"])]


def machine_key() -> str:
    """CPU model and core count: the same kind of machine shares a calibration."""
    cpu = this_cpu().name or platform.processor() or ""
    try:
        import torch

        if torch.cuda.is_available():
            cpu = torch.cuda.get_device_name(0) + f"x{torch.cuda.device_count()}"
    except Exception:
        pass
    return f"{cpu or platform.machine()}-{os.cpu_count()}cores"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:120]


def _stored_path(model_id: str, dtype: str):
    return paths.calibrations_dir() / f"{_slug(model_id)}__{_slug(machine_key())}__{dtype}.json"


def calibration_path(model_id: str, dtype: str):
    """Where the calibration of ``model_id`` on this machine in ``dtype`` is kept. A float32
    calibration stored before dtypes had files of their own (no dtype in its name) is read where
    no newer one exists."""
    path = _stored_path(model_id, dtype)
    if dtype == "float32" and not path.exists():
        legacy = paths.calibrations_dir() / f"{_slug(model_id)}__{_slug(machine_key())}.json"
        if legacy.exists():
            return legacy
    return path


def load_cost_model(model_id: str, dtype: str) -> CostModel | None:
    path = calibration_path(model_id, dtype)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return CostModel(**data["cost_model"])


def machine_cost_model(model_id: str, dtype: str) -> CostModel:
    """The step-cost model engines of ``model_id`` in ``dtype`` use on this machine: the stored
    calibration (``relserve calibrate``), else the preset for ``dtype``. Its ``source`` says which."""
    return load_cost_model(model_id, dtype) or default_preset(dtype)


def load_policy_settings(model_id: str, dtype: str, base: PolicySettings | None = None) -> PolicySettings | None:
    """``base`` (default PolicySettings()) with the arranger settings that `relserve calibrate`
    chose for this model, machine and dtype, or None when it stored none."""
    path = calibration_path(model_id, dtype)
    if not path.exists():
        return None
    arranger = json.loads(path.read_text()).get("arranger")
    if not arranger:
        return None
    return (base or PolicySettings()).model_copy(update=arranger)


def save_cost_model(model_id: str, dtype: str, cost: CostModel, details: dict, arranger: dict | None = None) -> str:
    """Store a calibration (and the arranger settings tuned for it) for this model, machine and
    dtype (the calibrated engine's)."""
    path = _stored_path(model_id, dtype)
    data = {"model": model_id, "machine": machine_key(), "dtype": dtype, "cost_model": cost.model_dump(), "arranger": arranger, **details}
    path.write_text(json.dumps(data, indent=2))
    return str(path)
