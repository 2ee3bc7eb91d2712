"""What this machine's CPU computes natively, read once: the defaults that depend on it (the
engine's dtype, the sentence encoder's precision) ask here."""

from __future__ import annotations

import functools
from pathlib import Path


@functools.cache
def cpu_has_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (Linux: its flags name avx512_bf16 or amx_bf16).
    Elsewhere bfloat16 is emulated, and slower than float32."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def default_dtype() -> str:
    """The engine's dtype for ``dtype="auto"``: bfloat16 where the CPU computes it natively (faster,
    docs/benchmarks.md#the-engine-at-the-machines-limit), float32 elsewhere."""
    return "bfloat16" if cpu_has_bf16() else "float32"
