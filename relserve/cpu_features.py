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


@functools.cache
def cpu_model() -> str:
    """This CPU as a benchmark's report names it (``describe_cpu`` of /proc/cpuinfo): figures from
    two machines are not one comparison."""
    try:
        return describe_cpu(Path("/proc/cpuinfo").read_text())
    except OSError:
        return "unknown CPU"


def describe_cpu(cpuinfo: str) -> str:
    r"""A CPU's model name and the bfloat16 units it has, from /proc/cpuinfo's text.

    >>> describe_cpu("model name\t: AMD EPYC\nflags\t\t: fpu avx512f avx512_bf16\n")
    'AMD EPYC (avx512_bf16)'
    >>> describe_cpu("flags\t\t: fpu sse2\n")
    'unknown CPU (no bfloat16 units)'
    """
    lines = cpuinfo.splitlines()
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    flags = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
    units = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    return f"{names[0] if names else 'unknown CPU'} ({', '.join(units) or 'no bfloat16 units'})"


def default_dtype() -> str:
    """The engine's dtype for ``dtype="auto"``: bfloat16 where the CPU computes it natively (faster,
    docs/benchmarks.md#the-engine-at-the-machines-limit), float32 elsewhere."""
    return "bfloat16" if cpu_has_bf16() else "float32"
