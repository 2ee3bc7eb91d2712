"""What this machine's CPU computes natively, read once: the defaults that depend on it (the
engine's dtype, the sentence encoder's precision) ask here."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

#: the flags of a CPU that computes bfloat16 natively
BF16_UNITS = ("avx512_bf16", "amx_bf16")


@dataclass(frozen=True)
class CpuInfo:
    """What /proc/cpuinfo says of the first processor."""

    #: its "model name" (None: the file has none)
    name: str | None
    #: which of ``BF16_UNITS`` its flags name
    bf16_units: tuple[str, ...]

    @classmethod
    def parse(cls, cpuinfo: str) -> CpuInfo:
        lines = cpuinfo.splitlines()
        name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)
        flags = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
        return cls(name, tuple(f for f in BF16_UNITS if f in flags))


@functools.cache
def this_cpu() -> CpuInfo:
    """This machine's CPU, read once (Linux; elsewhere nothing is known)."""
    try:
        return CpuInfo.parse(Path("/proc/cpuinfo").read_text())
    except OSError:
        return CpuInfo(None, ())


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (Linux: its flags name avx512_bf16 or amx_bf16).
    Elsewhere bfloat16 is emulated, and slower than float32."""
    return bool(this_cpu().bf16_units)


def cpu_model() -> str:
    """This CPU as a benchmark's report names it (``describe_cpu``): figures from two machines
    are not one comparison."""
    return describe(this_cpu())


def describe_cpu(cpuinfo: str) -> str:
    r"""A CPU's model name and the bfloat16 units it has, from /proc/cpuinfo's text.

    >>> describe_cpu("model name\t: AMD EPYC\nflags\t\t: fpu avx512f avx512_bf16\n")
    'AMD EPYC (avx512_bf16)'
    >>> describe_cpu("flags\t\t: fpu sse2\n")
    'unknown CPU (no bfloat16 units)'
    """
    return describe(CpuInfo.parse(cpuinfo))


def describe(cpu: CpuInfo) -> str:
    return f"{cpu.name or 'unknown CPU'} ({', '.join(cpu.bf16_units) or 'no bfloat16 units'})"


def default_dtype() -> str:
    """The engine's dtype for ``dtype="auto"``: bfloat16 where the CPU computes it natively (faster,
    docs/benchmarks.md#the-engine-at-the-machines-limit), float32 elsewhere."""
    return "bfloat16" if cpu_has_bf16() else "float32"
