"""What every contender's phase is given: where to write, where the data is, the work per load."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from e2e.workload import Scheduled, Statement

Log = Callable[[str], None]


@dataclass(frozen=True)
class PhaseContext:
    #: the run's folder: phase files (<phase>.json) and server logs
    workdir: Path
    datasets: Path
    #: the workload's SQL folder (sql/bench_e2e, sql/bench_e2e_other or sql/bench_e2e_third)
    sql_dir: Path
    contenders: tuple[str, ...]
    #: the converted model folder every contender loads
    model_path: str
    #: each load's statements, lowest load first
    work_by_load: dict[float, list[Scheduled]]
    log: Log
    #: the workload's statements (one file each)
    statements: tuple[Statement, ...] = ()
    #: the label plans' state at the start of each load: "warm" or "cold" (``--plans``)
    plans: str = "warm"
