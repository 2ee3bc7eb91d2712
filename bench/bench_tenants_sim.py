"""bench_tenants.py's two tenants in the simulator, with this machine's step model.

On the shared 2-core machines the real-engine run (bench/bench_tenants.py) is dominated by other
jobs' load (a 1-row relQuery alone took 14-50 s there); the simulator replays the same shape with
the calibrated step model (preset smollm2-135m-cpu) and no noise, so the variants compare exactly:

* the flood tenant: ``--flood-rows`` rows in 3 relQueries at t=0 (prompts of 45 tokens sharing a
  13-token prefix, 8-token answers);
* the small tenant: a 1-row relQuery (8-token answer) every ``--every`` seconds while the flood
  runs, and the same relQueries again on an empty engine ("alone").

Prints the small tenant's p95 and median latency alone and under the flood, and the flood's time,
for each variant (tenant cap on or off, decode_subset on or off, lower max_num_seqs). The cap's
default: tenant_step_slowdown 2 (26 decoding rows, 37 prefill tokens a step beyond the first row
with this step model), tenant_linger_s 3.

    .venv/bin/python bench/bench_tenants_sim.py            # about 30 s (docs/benchmarks.md)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path

from relserve.policy import PRESETS, PolicySettings, make_policy
from relserve.sim import EngineSim, prepare_trace
from relserve.sim.run import default_limits
from relserve.workloads import TraceQuery

OUT = Path(__file__).resolve().parent / "out"


class TenantSim(EngineSim):
    """The simulated engine with each relQuery's tenant on its requests (the trace has none)."""

    def __init__(self, *args, tenants: dict[str, str], caps: dict[str, int | None], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.tenants, self.caps = tenants, caps

    def _arrive(self, q) -> None:
        super()._arrive(q)
        for req in self.waiting[-q.size:]:
            req.tenant = self.tenants[q.id]
            req.max_running_shared = self.caps.get(req.tenant)


def _p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(0.95 * len(xs)) - 1))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flood-rows", type=int, default=3000)
    ap.add_argument("--small", type=int, default=300, help="small relQueries (300 x 2 s outlasts the flood)")
    ap.add_argument("--every", type=float, default=2.0, help="seconds between the small tenant's relQueries")
    args = ap.parse_args()
    cost = PRESETS["smollm2-135m-cpu"]
    base = default_limits(max_num_batched_tokens=1024, max_num_seqs=256)
    prefix = " ".join(f"sys{i}" for i in range(13))
    per = args.flood_rows // 3
    flood = [
        TraceQuery(id=f"flood{k}", arrival_s=0.0, template="{x}", max_tokens=8,
                   rows=[{"x": prefix + " " + " ".join(f"f{k}r{i}w{j}" for j in range(32))} for i in range(per)])
        for k in range(3)
    ]
    small = [
        TraceQuery(id=f"small{i}", arrival_s=1.0 + i * args.every, template="{x}", max_tokens=8,
                   rows=[{"x": prefix + " " + " ".join(f"s{i}w{j}" for j in range(32))}])
        for i in range(args.small)
    ]
    tenants = {q.id: "flood" for q in flood} | {q.id: "small" for q in small}
    variants = {
        "before: no cap, no decode_subset": ({"tenant_step_slowdown": None, "decode_subset": False}, {}, 256),
        "decode_subset only": ({"tenant_step_slowdown": None}, {}, 256),
        "cap default, no decode_subset": ({"decode_subset": False}, {}, 256),
        "cap default + decode_subset (the default)": ({}, {}, 256),
        "cap default, linger 1 s": ({"tenant_linger_s": 1.0}, {}, 256),
        "cap default, linger 0": ({"tenant_linger_s": 0.0}, {}, 256),
        "cap: slowdown 1.5 (13 rows, 2-row prefill)": ({"tenant_step_slowdown": 1.5}, {}, 256),
        "cap: max_running_shared 4": ({}, {"flood": 4, "small": 4}, 256),
        "max_num_seqs 32, no cap, no subset": ({"tenant_step_slowdown": None, "decode_subset": False}, {}, 32),
        "max_num_seqs 16, no cap, no subset": ({"tenant_step_slowdown": None, "decode_subset": False}, {}, 16),
    }
    report = []
    print(f"{'variant':46} {'alone p95':>9} {'flood p95':>9} {'ratio':>6} {'median ratio':>12} {'flood s':>8}")
    for name, (settings, caps, seqs) in variants.items():
        limits = dataclasses.replace(base, max_num_seqs=seqs)

        def run(queries, limits=limits, settings=settings, caps=caps):
            prepared = prepare_trace(queries, block_size=limits.block_size)
            pol = make_policy("relserve", cost, PolicySettings(**settings))
            sim = TenantSim(pol, cost, limits, prepared.relqueries, tenants=tenants, caps=caps)
            sim.run()
            return {log.id: log.finish - log.arrival for log in sim.logs}

        alone = run(small)
        both = run(flood + small)
        done = [both[q.id] for q in small if q.arrival_s < max(both[f.id] for f in flood)]
        a = [alone[q.id] for q in small]
        row = {
            "variant": name, "alone_p95_s": _p95(a), "flood_p95_s": _p95(done), "p95_ratio": _p95(done) / _p95(a),
            "median_ratio": statistics.median(done) / statistics.median(a), "flood_s": max(both[f.id] for f in flood),
            "small_during_flood": len(done),
        }
        report.append(row)
        print(f"{name:46} {row['alone_p95_s']:9.2f} {row['flood_p95_s']:9.2f} {row['p95_ratio']:6.2f} "
              f"{row['median_ratio']:12.2f} {row['flood_s']:8.1f}", flush=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "tenants_sim.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
