"""One engine vs two replicas on Ray, on this machine, side by side in one run.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_cluster.py [--relqueries 8] [--rate 0.5]

The same trace (beer-review relQueries, Poisson arrivals) runs on:
* 1 replica with both cores (a Cluster of one: the same path as two, so only the split differs);
* 2 replicas with one core each, relQuery-aware dispatcher;
* 2 replicas with one core each, round-robin.
Same hardware in every setup: the question is whether two half-machines beat one whole one.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from relserve.relquery import RelQuery
from relserve.workloads import generate_trace

OPTIONS = dict(policy="relserve", max_num_seqs=32, max_num_batched_tokens=1024, kv_cache_gb=0.25)


def run_trace(cluster, trace) -> dict:
    cluster.warm_prefix("")
    latencies: list[float] = []
    rows = errors = 0
    lock = threading.Lock()
    t0 = time.monotonic()

    def one(q) -> None:
        nonlocal rows, errors
        time.sleep(max(q.arrival_s - (time.monotonic() - t0), 0))
        start = time.monotonic()
        res = cluster.run(RelQuery(q.template, q.rows, max_tokens=q.max_tokens))
        with lock:
            latencies.append(time.monotonic() - start)
            rows += len(res.rows)
            errors += res.stats.num_errors

    threads = [threading.Thread(target=one, args=(q,)) for q in trace]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    span = time.monotonic() - t0
    return {"mean": statistics.mean(latencies), "max": max(latencies), "span": span, "rows": rows, "errors": errors}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--relqueries", type=int, default=8)
    ap.add_argument("--rate", type=float, default=0.5, help="relQueries per second")
    ap.add_argument("--rows", type=int, default=24, help="most rows per relQuery")
    ap.add_argument("--seed", type=int, default=2)
    args = ap.parse_args()
    from relserve.cluster.cluster import Cluster

    trace = generate_trace("beer_reviews", args.relqueries, args.rate, rows=(4, args.rows), seed=args.seed)
    setups = [("1 replica x 2 cores", 1, "relquery"), ("2 replicas x 1 core", 2, "relquery"), ("2 replicas x 1 core", 2, "round-robin")]
    out = []
    for label, n, disp in setups:
        t = time.monotonic()
        with Cluster(n, dispatcher=disp, **OPTIONS) as cluster:
            started = time.monotonic() - t
            r = run_trace(cluster, trace)
        out.append((label, disp, started, r))
        print(f"done: {label} {disp}: {r}", flush=True)
    base = out[0][3]
    print(f"\n{args.relqueries} relQueries, {base['rows']} rows, Poisson {args.rate}/s, seed {args.seed}\n")
    print("| setup | dispatcher | start s | mean latency s | max latency s | makespan s | rows/s | vs 1 replica (rows/s) | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, disp, started, r in out:
        rate = r["rows"] / r["span"]
        print(f"| {label} | {disp} | {started:.0f} | {r['mean']:.2f} | {r['max']:.2f} | {r['span']:.2f} | {rate:.2f} | "
              f"{rate / (base['rows'] / base['span']):.2f}x | {r['errors']} |")


if __name__ == "__main__":
    main()
