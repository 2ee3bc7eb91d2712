"""The run's options, as the command line gives them (``bench/bench_e2e.py --help``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CONTENDERS = ("vllm-serve", "vllm-offline", "relserve", "relserve-cache")


@dataclass(frozen=True)
class RunOptions:
    quick: bool
    sessions: int
    #: statements per second over all sessions at load 1.0
    rate: float
    #: seconds of arrivals per load
    window: float
    #: fractions of ``rate``, as given ("0.5,1.0")
    loads_arg: str
    seed: int
    contenders: tuple[str, ...]
    datasets: Path
    workload: str
    out: Path
    #: write the report again from the phase files of a finished run in this folder
    report: Path | None
    #: every statement alone, back to back (``--alone``)
    alone: bool = False
    #: every contender's dtype ("auto": relserve's default for this CPU; ``--dtype``)
    dtype: str = "auto"
    #: relserve's label plans at the start of each load: "warm" (made before the measured passes,
    #: on rows no measured statement reads) or "cold" (a tenant per load: none yet); ``--plans``
    plans: str = "warm"

    @property
    def loads(self) -> list[float]:
        return sorted(float(x) for x in self.loads_arg.split(","))

    @property
    def stem(self) -> str:
        """Output file names: e2e, e2e_other, e2e_quick, ..."""
        return "e2e" + ("" if self.workload == "main" else f"_{self.workload}") + ("_quick" if self.quick else "") + (
            "_alone" if self.alone else "")
