"""The run: each contender's phase in a process of its own (one engine at a time on the machine),
its results in ``<workdir>/<phase>.json``, then the report from those files."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from e2e.contenders.context import Log
from e2e.options import RunOptions
from e2e.report import fmt_number, markdown, plot, summarize
from e2e.workload import Scheduled, Statement

#: phases in the order they run; "relserve" also serves the relserve-cache contender
PHASES = ("vllm-serve", "vllm-offline", "relserve")


def phases_to_run(contenders: tuple[str, ...]) -> list[str]:
    return [p for p in PHASES if p in contenders or (p == "relserve" and "relserve-cache" in contenders)]


def phase_command(entry: Path, opts: RunOptions, phase: str, workdir: Path) -> list[str]:
    """The command line that runs one phase: the entry point again, with ``--phase``."""
    return [sys.executable, str(entry), "--phase", phase, "--workdir", str(workdir), "--sessions", str(opts.sessions),
            "--rate", str(opts.rate), "--window", str(opts.window), "--loads", opts.loads_arg, "--seed", str(opts.seed),
            "--datasets", str(opts.datasets), "--workload", opts.workload, "--contenders", ",".join(opts.contenders),
            "--dtype", opts.dtype, "--plans", opts.plans] + (
        ["--quick"] if opts.quick else []) + (["--alone"] if opts.alone else [])


def run_all(entry: Path, opts: RunOptions, statements: list[Statement], work_by_load: dict[float, list[Scheduled]], log: Log) -> None:
    opts.out.mkdir(parents=True, exist_ok=True)
    workdir = opts.report or Path(tempfile.mkdtemp(prefix="bench_e2e_"))
    t_all = time.perf_counter()
    results: dict[str, Any] = {}
    for phase in phases_to_run(opts.contenders):
        path = workdir / f"{phase}.json"
        if opts.report:  # the report again from a finished run's phase files, nothing run
            if path.exists():
                results[phase] = json.loads(path.read_text())
            continue
        t0 = time.perf_counter()
        rc = subprocess.call(phase_command(entry, opts, phase, workdir))
        if rc != 0 or not path.exists():
            log(f"{phase} failed (exit {rc}); see {workdir}")
            continue
        results[phase] = json.loads(path.read_text())
        results[phase]["phase_s"] = time.perf_counter() - t0
    total_s = float("nan") if opts.report else time.perf_counter() - t_all
    report = summarize(opts, statements, work_by_load, results, total_s)
    # answers are kept out of the summary JSON except for the comparison counts
    (opts.out / f"{opts.stem}.json").write_text(json.dumps(report, indent=1, default=str))
    (opts.out / f"{opts.stem}.md").write_text(markdown(report))
    plot(report, opts.out / f"{opts.stem}_latency_vs_load.png")
    print(markdown(report))
    log(f"total {fmt_number(total_s / 60, '.1f')} min; wrote {opts.out / opts.stem}.json, .md and _latency_vs_load.png; raw runs in {workdir}")
