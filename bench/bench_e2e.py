"""The headline benchmark: relserve against what users run today, end to end, in one run.

Sessions (DuckDB connections, one thread each) run real SQL statements with LLM calls
(``sql/bench_e2e/*.sql``: llm_filter, llm_classify, llm_map, llm_extract over 1-300 rows of the
tables in ../shared/datasets) at seeded Poisson arrivals. Every contender gets the same statements
at the same arrival times, on the same model folder, one after another on this machine:

1. ``vllm-serve``: vLLM's own OpenAI server (``vllm serve``, prefix caching on), called once per row
   in table order from DuckDB UDFs, one row at a time per session, as pgai-style database
   functions and most DuckDB LLM extensions do;
2. ``vllm-offline``: vLLM's ``LLM.generate``, each call site's rows of a statement as one batch in
   table order (as LOTUS-style dataframe libraries do), statements one after another (FIFO);
3. ``relserve``: the same statements through ``relserve.duckdb.sql`` on connections made with
   ``relserve.duckdb.connect(server=URL, api_key=...)`` against one ``relserve serve`` (scheduler
   ``relserve``), result cache off;
4. ``relserve-cache``: the same server with its result cache on, over a second pass of the
   workload at the highest load (the first pass, which fills the cache, is reported too).

relserve keeps one label plan per filter or classify call, made by the call's first statement
of enough rows. Every load starts with the plans in the same state (``--plans``): ``warm``, the
default, makes them before the measured passes by running each statement with a label call once
over 64 rows no measured statement reads (a user's earlier statement of the call); ``cold`` runs each load as a
tenant of its own, so each call's first statements at every load make its plan.

A session runs its statements in order, each once it has arrived and the previous one has ended
(a connection runs one statement at a time); latency = end - arrival. The loads (``--loads``,
fractions of ``--rate`` statements/s) share the statement mix and arrival pattern, with rows drawn
afresh per load (so the engine's prefix cache does not carry answers from one load to the next).

Prompts are the same token ids everywhere (relserve's own rendering and chat template; the UDFs of
contenders 1-2 decode their arguments with relserve's argument parser), decoding is greedy, and
structured output (choice / JSON schema) is the same for 1-2 as relserve's engine uses. relserve's
llm_filter / llm_classify choose labels by calibrated scoring (its default, which is what a
server connection runs), contenders 1-2 by constrained decoding: so the identity check compares
the generated columns (llm_map, llm_extract) row by row, and reports label agreement apart.

    .venv/bin/python bench/bench_e2e.py --quick     # about 10 minutes: small sizes, short window
    .venv/bin/python bench/bench_e2e.py             # the full run (41 min on 2 quiet AMD EPYC cores)
    .venv/bin/python bench/bench_e2e.py --plans cold   # every load's first statements make the plans

    .venv/bin/python bench/bench_e2e.py --workload other   # the second workload: other tables,
                                                          # templates and prompt/answer lengths
    .venv/bin/python bench/bench_e2e.py --workload third   # the third: rows neither reads, other
                                                          # columns and templates, tuned on nothing

The code is in bench/e2e/, one job per module (workload, sessions, contenders, processes,
Prometheus, report, runner); this file is the command line.

Results: bench/out/e2e.json, bench/out/e2e.md, bench/out/e2e_latency_vs_load.png
(--quick writes e2e_quick.*, --workload other e2e_other.*, --workload third e2e_third.*;
--workload third --quick e2e_third_quick.*).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

# the modules live in bench/e2e/; this file is run as a script (and loaded by path in tests)
sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e.contenders import phase as phase_runner  # noqa: E402
from e2e.contenders.context import PhaseContext  # noqa: E402
from e2e.options import CONTENDERS, RunOptions  # noqa: E402
from e2e.report import compare_answers  # noqa: E402
from e2e.runner import run_all  # noqa: E402
from e2e.sessions import FifoLock, new_duckdb  # noqa: E402
from e2e.stats import throughput  # noqa: E402
from e2e.workload import (  # noqa: E402
    DATASETS,
    QUICK_SIZES,
    SIZES,
    TABLE_ROWS,
    WORKLOADS,
    Statement,
    at_load,
    build_workload,
    load_statements,
    one_at_a_time,
    table_rows,
)

from relserve.percentile import percentile as _pct  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"

__all__ = ["DATASETS", "TABLE_ROWS", "WORKLOADS", "FifoLock", "Statement", "_pct", "at_load", "build_workload",
           "compare_answers", "load_statements", "new_duckdb", "table_rows", "throughput"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small run (about 10 minutes): short window, small statements")
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--rate", type=float, default=None, help="statements per second over all sessions at load 1.0")
    ap.add_argument("--window", type=float, default=None, help="seconds of arrivals per load")
    ap.add_argument("--loads", default=None, help="comma-separated fractions of --rate (the last, highest, is the headline)")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--datasets", type=Path, default=DATASETS)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="main",
                    help="main: the headline's statements (sql/bench_e2e); other: other tables, templates and lengths (sql/bench_e2e_other); "
                         "third: rows neither reads, other columns and templates, used to tune nothing (sql/bench_e2e_third)")
    ap.add_argument("--alone", action="store_true",
                    help="every statement alone, one after another (no queue): the least mean latency each contender's "
                         "work allows, the floor under its figures at any load")
    ap.add_argument("--dtype", default="auto",
                    help="every contender's dtype (auto: relserve's default, bfloat16 where the CPU computes it natively, "
                         "else float32; or float32, bfloat16)")
    ap.add_argument("--plans", choices=("warm", "cold"), default="warm",
                    help="relserve's label plans when each load starts: warm (default; each statement with a "
                         "label call ran once before, on rows no measured statement reads, as a user's earlier statement of the call) "
                         "or cold (a tenant per load: each call's first statements make its plan)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--report", type=Path, metavar="DIR",
                    help="write the report again from the phase files a run left in DIR (give the run's other options too)")
    ap.add_argument("--phase", help=argparse.SUPPRESS)  # internal: run one contender in this process
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def options(args: argparse.Namespace) -> RunOptions:
    if args.quick:
        rate, window, loads = args.rate or 0.3, args.window or 30.0, args.loads or "0.5,1.0"
    else:
        # sized for the 2-core AMD EPYC machines (~3 rows/s for relserve): at load 1.0 about
        # 3 rows/s are offered, 27 statements over all 8 sessions
        rate, window, loads = args.rate or 0.1, args.window or 240.0, args.loads or "0.5,1.0"
    return RunOptions(quick=args.quick, sessions=args.sessions, rate=rate, window=window, loads_arg=loads, seed=args.seed,
                      contenders=tuple(c.strip() for c in args.contenders.split(",") if c.strip()), datasets=args.datasets,
                      workload=args.workload, out=args.out, report=args.report, alone=args.alone, dtype=args.dtype,
                      plans=args.plans)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def main() -> None:
    args = parse_args()
    opts = options(args)
    if opts.dtype != "auto":  # read by every contender (e2e/limits.py), in this process and the phases'
        os.environ["RELSERVE_DTYPE"] = opts.dtype
    sql_dir = WORKLOADS[opts.workload]
    statements = load_statements(sql_dir)
    items = build_workload(statements, sessions=opts.sessions, rate=opts.rate, horizon=opts.window * max(opts.loads),
                           seed=opts.seed, sizes=QUICK_SIZES if opts.quick else SIZES)
    work_by_load = {load: at_load(items, statements, load, opts.window, opts.seed, table_rows(sql_dir)) for load in opts.loads}
    if opts.alone:
        work_by_load = {load: one_at_a_time(work) for load, work in work_by_load.items()}

    if args.phase:
        from relserve.model import resolve_model

        ctx = PhaseContext(workdir=Path(args.workdir), datasets=opts.datasets, sql_dir=sql_dir, contenders=opts.contenders,
                           model_path=str(resolve_model("smollm2").path), work_by_load=work_by_load, log=log,
                           statements=tuple(statements), plans=opts.plans)
        result = phase_runner(args.phase)(ctx)
        Path(args.workdir, f"{args.phase}.json").write_text(json.dumps(result, default=str))
        return

    from e2e.limits import ENGINE

    log(f"every contender in {ENGINE.dtype}; {len(items)} statements in the stream; per load: "
        + ", ".join(f"{ld}: {len(w)} statements, {sum(x.item.rows for x in w)} rows" for ld, w in work_by_load.items()))
    run_all(Path(__file__).resolve(), opts, statements, work_by_load, log)


if __name__ == "__main__":
    main()
