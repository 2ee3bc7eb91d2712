"""Four scheduler rules in the simulator, on and off (the first two: issue 28 items 1 and 2).

* ``decode_subset``: running relQueries ranked behind sit out decode steps when their requests
  cost the ones ahead more than the fixed step cost they pay again (policy/aba.py decode_hold);
* ``learn_output``: a relQuery's answer length estimated from its finished rows instead of
  ``max_tokens`` (policy/relqueries.py);
* ``output_history``: from the longest answers of the same call's (template's) last finished
  relQueries instead (policy/relqueries.py);
* ``count_admitted_decode`` (on in every row but the one that turns it off): a relQuery whose
  requests all run ranks by the decode they still need instead of 0 (policy/dpu.py).

Traces: bench_policies.sh's benchmark trace (20 relQueries of 1-20 rows, seed 5) at x1 and x1.5
of 0.25 relQ/s, and 150 relQueries of 1-100 rows at 0.1 relQ/s (seed 7); under a GPU preset the
arrivals run 20x as fast. Each trace is replayed under relserve with each rule off/on, and under
sp, with the CPU step model of this machine (preset smollm2-135m-cpu) and a GPU preset. Answers
are shorter than max_tokens, as real ones are: per query type a seeded draw (filter/rating 1-2
tokens of 5, classification 1-3 of 10, summary 15-50 of 50, open 30-100 of 100). Prints mean and
p95 latency, each against relserve with both rules off.

    .venv/bin/python bench/bench_policy_estimates.py          # about 1 min
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from relserve.policy import PRESETS, PolicySettings, make_policy
from relserve.sim import simulate
from relserve.sim.run import default_limits
from relserve.workloads import generate_trace
from relserve.workloads.traces import scale_arrivals

OUT = Path(__file__).resolve().parent / "out"

#: (low, high) answer tokens by max_tokens of the standard query types (workloads/queries.py)
ANSWERS = {5: (1, 2), 10: (1, 3), 50: (15, 50), 100: (30, 100)}

VARIANTS = {
    "relserve (both off)": ("relserve", {"decode_subset": False, "learn_output": False}),
    "+ decode_subset": ("relserve", {"decode_subset": True, "learn_output": False}),
    "+ learn_output": ("relserve", {"decode_subset": False, "learn_output": True}),
    "+ both": ("relserve", {"decode_subset": True, "learn_output": True}),
    "+ output_history": ("relserve", {"decode_subset": False, "learn_output": False, "output_history": True}),
    "default, paper ranking": ("relserve", {"count_admitted_decode": False}),
    "default": ("relserve", {}),
    "default + output_history": ("relserve", {"output_history": True}),
    "sp": ("sp", {}),
}


def answer_lengths(seed: int):
    def length(q, i: int) -> int:
        lo, hi = ANSWERS.get(q.max_tokens, (q.max_tokens, q.max_tokens))
        return random.Random(f"{seed}/{q.id}/{i}").randint(lo, hi)

    return length


def traces() -> dict[str, list]:
    bench = generate_trace(["rotten_tomatoes", "amazon_reviews", "beer_ratings"], 20, 0.25, rows=(1, 20), seed=5)
    big = generate_trace(["rotten_tomatoes", "amazon_reviews", "beer_ratings"], 150, 0.1, rows=(1, 100), seed=7)
    return {
        "benchmark x1": bench,
        "benchmark x1.5": scale_arrivals(bench, 1.5),
        "150 relQ 1-100 rows": big,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default="smollm2-135m-cpu,opt-13b-a100")
    args = ap.parse_args()
    limits = default_limits(max_num_batched_tokens=1024)
    lengths = answer_lengths(0)
    report: list[dict] = []
    print(f"{'preset':18} {'trace':22} {'variant':22} {'mean s':>8} {'p95 s':>8} {'mean/off':>9} {'p95/off':>8}")
    for preset in args.presets.split(","):
        cost = PRESETS[preset]
        for tname, trace in traces().items():
            if preset != "smollm2-135m-cpu":
                # a GPU is ~20-50x faster: the same trace at a rate that loads it alike
                trace = scale_arrivals(trace, 20.0)
            base = None
            for vname, (policy, settings) in VARIANTS.items():
                pol = make_policy(policy, cost, PolicySettings(**settings))
                s = simulate(trace, pol, cost, limits, output_lengths=lengths, isolated=False).summary
                base = base or s
                row = {"preset": preset, "trace": tname, "variant": vname, "mean_s": s.mean_latency, "p95_s": s.p95_latency,
                       "mean_ratio": s.mean_latency / base.mean_latency, "p95_ratio": s.p95_latency / base.p95_latency}
                report.append(row)
                print(f"{preset:18} {tname:22} {vname:22} {s.mean_latency:8.2f} {s.p95_latency:8.2f} "
                      f"{row['mean_ratio']:9.3f} {row['p95_ratio']:8.3f}", flush=True)
    cases = admitted_case(limits)
    OUT.mkdir(exist_ok=True)
    (OUT / "policy_estimates.json").write_text(json.dumps({"traces": report, "admitted_case": cases}, indent=2))


def admitted_case(limits) -> list[dict]:
    """The case ``count_admitted_decode`` is for, with this machine's step model: a 100-row
    relQuery decoding 64-token answers (every row admitted at once), and a 4-row relQuery with
    one-token answers arriving 1, 3 or 10 s later; its latency under each ranking."""
    from relserve.workloads import TraceQuery

    def rq(rel_id: str, arrival: float, n: int, max_tokens: int) -> TraceQuery:
        rows = [{"x": " ".join(f"{rel_id}{k}w{i}" for i in range(10))} for k in range(n)]
        return TraceQuery(id=rel_id, arrival_s=arrival, template="{x}", max_tokens=max_tokens, rows=rows)

    cost = PRESETS["smollm2-135m-cpu"]
    out = []
    print("\n4-row relQuery arriving beside a 100-row one decoding 64 tokens (smollm2-135m-cpu): its latency, s")
    for at in (1.0, 3.0, 10.0):
        trace = [rq("big", 0.0, 100, 64), rq("small", at, 4, 1)]
        row = {"arrival_s": at}
        for name, settings in (("paper ranking", {"count_admitted_decode": False}), ("default", {})):
            res = simulate(trace, make_policy("relserve", cost, PolicySettings(**settings)), cost, limits, isolated=False)
            t = {x.id: x for x in res.relqueries}
            row[name] = t["small"].finish - t["small"].arrival
            row[name + " (100-row)"] = t["big"].finish
        out.append(row)
        print(f"  arriving at {at:4.1f} s: paper ranking {row['paper ranking']:6.2f}, default {row['default']:6.2f} "
              f"(the 100-row one ends at {row['paper ranking (100-row)']:.2f} / {row['default (100-row)']:.2f} s)")
    return out


if __name__ == "__main__":
    main()
