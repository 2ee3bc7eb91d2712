"""Simulator speed and the starvation-threshold sweep (paper Fig. 12), on real tables.

1. Replays a trace of about 100,000 requests (2,000 relQueries of 1-100 rows over beer_reviews)
   under every policy with the calibrated cost model and prints the wall time of each replay.
2. Sweeps relserve's starvation threshold on the benchmark trace (bench/out/trace.jsonl, written
   by bench/bench_policies.sh, or a fresh one) and prints mean against max latency and the pick.

    .venv/bin/python bench/bench_sim.py [--requests-trace-rate 1.0]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from relserve.workloads.traces import scale_arrivals
from relserve.calibration import load_cost_model
from relserve.model import resolve_model
from relserve.policy import POLICY_NAMES, PRESETS, CostModel
from relserve.sim import default_limits, simulate, sweep_markdown, sweep_starvation
from relserve.sim.run import as_prepared
from relserve.workloads import generate_trace, read_trace

OUT = Path(__file__).parent / "out"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=1.0, help="arrival rate of the 100k-request trace (relQueries/s)")
    ap.add_argument("--preset", default="opt-13b-a100", help="cost model of the 100k replay (a GPU preset keeps the load realistic)")
    ap.add_argument("--sweep-load", type=float, default=1.25, help="load factor of the sweep on the benchmark trace")
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    report: dict = {}

    t0 = time.perf_counter()
    big = generate_trace("beer_reviews", 2000, args.rate, rows=(1, 100), seed=0)
    prepared = as_prepared(big, default_limits())
    n = sum(len(q.rows) for q in big)
    print(f"trace: {len(big)} relQueries, {n} requests, prepared in {time.perf_counter() - t0:.1f} s")
    cost = PRESETS[args.preset]
    report["speed"] = {}
    for policy in POLICY_NAMES:
        t = time.perf_counter()
        res = simulate(prepared, policy, cost, isolated=False)
        wall = time.perf_counter() - t
        report["speed"][policy] = {"requests": n, "wall_s": wall, "requests_per_s": n / wall, "mean_latency": res.summary.mean_latency}
        print(f"{policy:12s} {wall:6.2f} s wall ({n / wall:8.0f} requests/s)  simulated mean latency {res.summary.mean_latency:7.2f} s")

    trace_path = OUT / "trace.jsonl"
    trace = read_trace(trace_path) if trace_path.exists() else generate_trace(
        ["rotten_tomatoes", "amazon_reviews", "beer_ratings"], 40, 0.25, rows=(1, 40), seed=5
    )
    spec = resolve_model()
    from transformers import AutoTokenizer

    from relserve.engine.prompts import ChatPrompter
    from relserve.sim import template_renderer

    tok = AutoTokenizer.from_pretrained(spec.path)
    sweep = sweep_starvation(
        scale_arrivals(trace, args.sweep_load),
        [1, 2, 3, 5, 8, 13, None],
        load_cost_model(spec.model_id) or PRESETS["smollm2-135m-cpu"],
        default_limits(kv_capacity_tokens=46_592, max_num_batched_tokens=1024),
        tokenize=lambda text: tok(text, add_special_tokens=False)["input_ids"],
        render=template_renderer(wrap=ChatPrompter(tok).text),
    )
    print(sweep_markdown(sweep))
    report["sweep"] = sweep.model_dump(mode="json")
    (OUT / "sim.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
