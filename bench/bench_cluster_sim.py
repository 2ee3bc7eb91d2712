"""Simulated engine replicas behind the dispatchers: scaling and dispatcher latency, side by side.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_cluster_sim.py [--quick]

Three workloads, arrivals scaled with the replica count N (rate_1 * N, relQueries_1 * N):
* paper-like: the RelServe paper's beer-review relQueries (1-100 rows, Poisson arrivals);
* shared templates: the same, each session's template behind one of four long instructions
  (~300 tokens of static prefix shared across sessions);
* many sessions: 3 sessions per replica, each relQuery behind its session's own 1200-token
  instruction, 1-40 rows, and a KV cache of 16k tokens per replica, so no replica can cache
  every session's prefix: where prefix affinity pays.
Latency: at a moderate load (--rate relQueries/s per replica). Scaling efficiency: at saturation
(--saturation relQueries/s per replica, far above what one serves), throughput per replica at N /
throughput of one replica. Every replica runs the same in-engine policy (relserve), default cost model.
"x bound": the mean latency over the provable lower bound for N replicas (``relserve.sim.clairvoyant``:
per-row chains and SRPT on one machine N times as fast, whatever the dispatcher).
"""

from __future__ import annotations

import argparse
import dataclasses
import random

from relserve.cluster.dispatch import DISPATCHER_NAMES
from relserve.policy import CostModel
from relserve.sim.clairvoyant import lower_bound
from relserve.sim.cluster import simulate_cluster
from relserve.sim.prepared_trace import prepare_trace, template_renderer
from relserve.sim.run import DEFAULT_LIMITS
from relserve.workloads import generate_trace

INSTRUCTIONS = [
    " ".join(random.Random(k).choice(["review", "rate", "the", "text", "answer", "briefly", "product", "user", "tone", "score"])
             for _ in range(300))
    for k in range(4)
]


def shared_template_renderer():
    plain = template_renderer()

    def render(query, row):
        # a session's instruction depends on its template, so sessions with one template share it
        return INSTRUCTIONS[sum(map(ord, query.template)) % len(INSTRUCTIONS)] + "\n" + plain(query, row)

    return render


WORDS = ["review", "rate", "the", "text", "answer", "briefly", "product", "user", "tone", "score", "a", "b", "c", "d"]
#: many sessions: a KV cache that holds only part of the sessions' prefixes
SMALL_KV = dataclasses.replace(DEFAULT_LIMITS, kv_capacity_tokens=16_384, kv_free_tokens=16_384)


def many_sessions_renderer(trace, sessions: int):
    instructions = [" ".join(random.Random(1000 + k).choice(WORDS) for _ in range(1200)) for k in range(sessions)]
    session = {q.id: random.Random(q.id).randrange(sessions) for q in trace}
    plain = template_renderer()
    return lambda q, row: instructions[session[q.id]] + "\n" + plain(q, row)


def workload(name: str, n: int, per_replica: int, rate: float, seed: int):
    if name == "many-sessions":
        trace = generate_trace("beer_reviews", per_replica * n, rate * n, rows=(1, 40), seed=seed)
        return prepare_trace(trace, block_size=DEFAULT_LIMITS.block_size, render=many_sessions_renderer(trace, 3 * n))
    trace = generate_trace("beer_reviews", per_replica * n, rate * n, seed=seed)
    render = shared_template_renderer() if name == "shared-templates" else None
    return prepare_trace(trace, block_size=DEFAULT_LIMITS.block_size, render=render)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="8 and 16 replicas only, fewer relQueries")
    ap.add_argument("--rate", type=float, default=0.12, help="relQueries per second per replica")
    ap.add_argument("--per-replica", type=int, default=40, help="relQueries per replica")
    ap.add_argument("--saturation", type=float, default=1.0, help="relQueries per second per replica for scaling")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workloads", default="paper-like,shared-templates,many-sessions")
    args = ap.parse_args()
    sizes = (8, 16) if args.quick else (8, 16, 32, 64)
    per = 20 if args.quick else args.per_replica
    print(f"rate {args.rate}/s and {per} relQueries per replica; mean latency in s (p95), throughput per replica in rows/s\n")
    for name in args.workloads.split(","):
        lim = SMALL_KV if name == "many-sessions" else DEFAULT_LIMITS
        base = simulate_cluster(workload(name, 1, per, args.rate, args.seed), 1, "relquery", limits=lim)
        sat1 = simulate_cluster(workload(name, 1, per, args.saturation, args.seed), 1, "relquery", limits=lim)
        one = lower_bound(workload(name, 1, per, args.rate, args.seed), CostModel(), lim).mean
        print(f"## {name}: one replica: mean latency {base.mean_latency_s:.2f} s ({base.mean_latency_s / one:.2f}x the bound); "
              f"saturated {sat1.throughput:.2f} rows/s\n")
        print("| N | dispatcher | mean latency s | p95 s | vs relquery | x bound | prefix hit | split | rows/replica min-max | scaling eff. (saturated) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for n in sizes:
            trace = workload(name, n, per, args.rate, args.seed)
            sat = workload(name, n, per, args.saturation, args.seed)
            bound = lower_bound(trace, CostModel(), lim, replicas=n).mean
            results = {d: simulate_cluster(trace, n, d, limits=lim) for d in DISPATCHER_NAMES}
            ref = results["relquery"].mean_latency_s
            for d, r in results.items():
                eff = simulate_cluster(sat, n, d, limits=lim).throughput_per_replica / sat1.throughput
                print(
                    f"| {n} | {d} | {r.mean_latency_s:.2f} | {r.p95_latency_s:.2f} | {r.mean_latency_s / ref:.2f}x | "
                    f"{r.mean_latency_s / bound:.2f}x | {r.prefix_hit_rate:.3f} | {r.num_split} | {r.load_min}-{r.load_max} | {eff:.3f} |"
                )
        print()


if __name__ == "__main__":
    main()
