"""Where relserve keeps its files: the converted model, calibrations, the result cache.

Everything lives under one cache directory, ``$RELSERVE_HOME`` if set, else the user's cache
directory (``~/.cache/relserve`` on Linux).
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def home() -> Path:
    env = os.environ.get("RELSERVE_HOME")
    path = Path(env).expanduser() if env else Path(platformdirs.user_cache_dir("relserve"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def models_dir() -> Path:
    return _sub("models")


def calibrations_dir() -> Path:
    return _sub("calibrations")


def result_cache_path() -> Path:
    return home() / "results.sqlite"


def _sub(name: str) -> Path:
    path = home() / name
    path.mkdir(parents=True, exist_ok=True)
    return path
