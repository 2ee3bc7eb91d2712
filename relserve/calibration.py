"""Stored cost-model calibrations, one per model and machine."""

from __future__ import annotations

import json
import os
import platform
import re

from relserve import paths
from relserve.policy import CostModel


def machine_key() -> str:
    """CPU model and core count: the same kind of machine shares a calibration."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import torch

        if torch.cuda.is_available():
            cpu = torch.cuda.get_device_name(0) + f"x{torch.cuda.device_count()}"
    except Exception:
        pass
    return f"{cpu or platform.machine()}-{os.cpu_count()}cores"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:120]


def calibration_path(model_id: str):
    return paths.calibrations_dir() / f"{_slug(model_id)}__{_slug(machine_key())}.json"


def load_cost_model(model_id: str) -> CostModel | None:
    path = calibration_path(model_id)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return CostModel(**data["cost_model"])


def save_cost_model(model_id: str, cost: CostModel, details: dict) -> str:
    path = calibration_path(model_id)
    path.write_text(json.dumps({"model": model_id, "machine": machine_key(), "cost_model": cost.model_dump(), **details}, indent=2))
    return str(path)
