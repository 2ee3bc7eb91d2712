"""Soak: one ``relserve serve`` under a steady mixed load and injected faults for as long as you
ask (issue 68). Every row of every client must be answered or errored exactly once, naming its
cause; memory, open files, threads, the result cache, the queues and latency are sampled every
10 s and their slopes per hour reported with a plot.

    .venv/bin/python bench/bench_soak.py --minutes 60        # the measured run (docs/benchmarks.md)
    .venv/bin/python bench/bench_soak.py --minutes 5 --light # what tests/test_soak.py runs

Clients (closed loops, seeded): DuckDB sessions through ``relserve.duckdb.connect(server=...)``;
PostgreSQL sessions (a throwaway cluster with the extension) running batched scalar calls,
``llm_map_query`` and a foreign table; OpenAI-style chat requests from several threads;
spreadsheet cells as the sheet page sends them; the Python client's relQueries; all of these as
the tenant ``steady``, and a second tenant, ``greedy``, sent past its limits (413, 429).

Faults: the clients disconnect mid-stream, cancel and run statements past a statement timeout;
PostgreSQL backends are terminated; in the middle of the run the engine core is killed, the
server is killed -9 (a supervisor restarts it whenever it exits, as systemd would), and the
result cache's disk (a small tmpfs, in a mount namespace of the harness's own; needs root) is
filled for a while. The server first starts on a result cache file whose header is torn.

Writes ``bench/out/soak_<minutes>min.{json,md,png}`` (``--out``) and the server's log; exits 1
when a target is missed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from soak.config import Load, SoakConfig  # noqa: E402
from soak.disk import enter_private_mount_namespace  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0, help="how long the clients run (default 60)")
    ap.add_argument("--seed", type=int, default=68, help="the seed of the clients' choices and the fault schedule")
    ap.add_argument("--light", action="store_true", help="fewer client threads (the smoke test's load)")
    ap.add_argument("--no-faults", action="store_true", help="the load alone, no scheduled fault (to size the load)")
    ap.add_argument("--out", type=Path, default=None, help="folder for the report (default bench/out/soak_<minutes>min)")
    args = ap.parse_args()
    # first, before any thread: the cache's tmpfs is mounted where only this run sees it
    namespace_problem = enter_private_mount_namespace()

    from soak.render import plot, save_json, text
    from soak.run import run

    out = args.out or OUT / f"soak_{args.minutes:g}min"
    config = SoakConfig(args.minutes, args.seed, out, Load.light() if args.light else Load(), faults=not args.no_faults)
    report = run(config, namespace_problem)
    summary = text(report)
    (out / "soak.md").write_text(summary)
    save_json(report, out / "soak.json")
    plotted = plot(report, out / "soak.png")
    print(summary)
    print(f"report: {out / 'soak.md'}, {out / 'soak.json'}" + (f", {out / 'soak.png'}" if plotted else " (no matplotlib: no plot)"))
    return 0 if all(report.targets.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
