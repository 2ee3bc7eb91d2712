"""What a label call's first pass costs, side by side: the adaptive method (a spread sample in
every candidate layout) against bootstrap (a spread sample in one layout), on the real engine.

The first pass sits on the critical path of a template's first statement (the rows wait for it),
so issue 43 asks that the adaptive one be no slower than bootstrap's. Per trial, each method
runs the task's own template from scratch (what the label methods remember forgotten, the prefix
cache emptied) over the same rows, in alternating order; printed:
each method's first-pass seconds (the label method's ``request``, which runs it), the whole
statement's seconds and rows/s, and the ratios.

    .venv/bin/python bench/bench_label_first_pass.py --rows 200,20 --trials 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="200,20", help="relQuery sizes")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--task", default="rt_positive_15", help="a task of bench/prevalence_tasks.py (its rows and question)")
    args = ap.parse_args()

    from prevalence_tasks import prevalence_tasks

    from relserve import Engine
    from relserve.functions import make_call
    from relserve.labels import interface
    from relserve.labels.memory import forget_all
    from relserve.planner.plan_and_run import run_call

    task = next(t for t in prevalence_tasks(max(int(r) for r in args.rows.split(","))) if t.name == args.task)
    timings: list[float] = []
    original = {}

    def timed(cls):
        def request(self):
            t0 = time.perf_counter()
            try:
                return original[cls](self)
            finally:
                timings.append(time.perf_counter() - t0)
        return request

    from relserve.labels.adaptive import AdaptiveRun
    from relserve.labels.bootstrap import BootstrapRun

    for cls in (AdaptiveRun, BootstrapRun):
        original[cls] = cls.request
        cls.request = timed(cls)
    assert interface  # the classes above implement its LabelRun
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    with Engine() as engine:
        # one throw-away statement: the engine's first scoring requests pay vLLM's warm-up
        run_call(make_call("llm_filter", "Warm up? {r}", method="score"), [["a", "b"]], engine=engine, cache=False, progress=False)
        for n in [int(r) for r in args.rows.split(",")]:
            columns = [list(col) for col in zip(*task.values[:n])]
            for trial in range(args.trials):
                order = ("adaptive", "bootstrap") if trial % 2 == 0 else ("bootstrap", "adaptive")
                for method in order:
                    # the task's own template (its concept word picks the layouts), from scratch:
                    # nothing remembered, nothing in the prefix cache
                    forget_all()
                    engine.reset_prefix_cache()
                    timings.clear()
                    t0 = time.perf_counter()
                    out = run_call(make_call("llm_filter", task.template, method=method), columns, engine=engine,
                                   cache=False, progress=False)
                    total = time.perf_counter() - t0
                    first = sum(timings)
                    results.setdefault((method, n), []).append((first, total))
                    s = out.engine_stats
                    print(f"rows {n:4d} trial {trial} {method:9s} first pass {first:6.2f}s  statement {total:6.2f}s "
                          f"({n / total:5.1f} rows/s); the rows' relQuery: {s.num_rows} rows, prompt tokens "
                          f"{s.prompt_tokens:,} ({s.cached_tokens:,} from the prefix cache), {s.output_tokens:,} out, "
                          f"core {s.core_s:.2f} s, latency {s.latency_s:.2f} s", flush=True)
    print("\n| rows | method | first pass (s, median) | statement (s, median) | rows/s |")
    print("|---|---|---|---|---|")
    for n in [int(r) for r in args.rows.split(",")]:
        med = {}
        for method in ("bootstrap", "adaptive"):
            firsts = [f for f, _ in results[(method, n)]]
            totals = [t for _, t in results[(method, n)]]
            med[method] = (statistics.median(firsts), statistics.median(totals))
            print(f"| {n} | {method} | {med[method][0]:.2f} | {med[method][1]:.2f} | {n / med[method][1]:.1f} |")
        print(f"| {n} | adaptive / bootstrap | {med['adaptive'][0] / med['bootstrap'][0]:.2f}x | "
              f"{med['adaptive'][1] / med['bootstrap'][1]:.2f}x | {med['bootstrap'][1] / med['adaptive'][1]:.2f}x |")


if __name__ == "__main__":
    main()
