"""The contenders, one module each; ``phase(name)`` gives the function that runs one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from e2e.contenders.context import PhaseContext


def phase(name: str) -> Callable[[PhaseContext], dict[str, Any]]:
    """The function that runs phase ``name`` (imported only when asked: each phase runs alone in
    its own process and needs only its own engine)."""
    if name == "vllm-serve":
        from e2e.contenders.vllm_serve import run
    elif name == "vllm-offline":
        from e2e.contenders.vllm_offline import run
    elif name == "relserve":
        from e2e.contenders.relserve_server import run
    else:
        raise ValueError(f"unknown phase {name!r}")
    return run
