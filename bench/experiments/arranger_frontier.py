"""Can an arranger setting give relserve both targets of issue 65 at 3x load: a mean 1.3x lower than
every baseline and 0.97x the best baseline's rows/s? Simulated, with this machine's calibration.

Replays the calibration's tuning trace (``relserve.sim.tune.tuning_trace``: the trace the stored
arranger setting was chosen on) at 0.7x, 1.2x and 1.8x of the machine's capacity, and a held-out
trace (``--trace``, for example the policy benchmark's, made with ``relserve bench trace --out F
--table rotten_tomatoes,beer_ratings --n 24 --rate 0.2 --rows 1,40 --seed 77``) at its loads 1 and
3, under the baselines and under relserve with the stored setting and each variant below. Prints,
per run, the mean latency against the best baseline's and rows/s against the best baseline's.

Variants: larger backlog weights (count a fixed step cost saved for more of the relQueries
expected to arrive), a prefill filled past the head relQuery, no decode holds, and mixed steps with
a chunk of 128-512 prompt tokens (Sarathi-like) instead of the whole token budget.

    .venv/bin/python bench/experiments/arranger_frontier.py --trace FILE   # about 2 minutes
"""

from __future__ import annotations

import argparse

from relserve.calibration import load_policy_settings, machine_cost_model
from relserve.engine.settings import EngineSettings
from relserve.policy import Limits, PolicySettings
from relserve.sim.run import as_prepared, simulate
from relserve.sim.tune import saturating_loads, tuning_trace
from relserve.workloads import read_trace, scale_arrivals

VARIANTS: dict[str, dict] = {
    "backlog 2": {"backlog_weight": 2.0},
    "backlog 4": {"backlog_weight": 4.0},
    "filled prefill": {"fill_prefill": True},
    "no decode holds": {"decode_subset": False},
    "chunk 512": {"mixed_chunk_tokens": 512},
    "chunk 256": {"mixed_chunk_tokens": 256},
    "chunk 128": {"mixed_chunk_tokens": 128},
}
BASELINES = ("vllm", "sarathi", "fcfs", "sp")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", help="a held-out trace (JSON Lines), replayed at --loads")
    ap.add_argument("--loads", default="1,3")
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from relserve.engine.chat_template import ChatPrompter
    from relserve.model import resolve_model
    from relserve.sim.prepared_trace import template_renderer

    spec = resolve_model(None)
    tok = AutoTokenizer.from_pretrained(spec.path)
    render = template_renderer(wrap=ChatPrompter(tok).text)

    def tokenize(text: str) -> list[int]:
        return tok(text, add_special_tokens=False)["input_ids"]

    s = EngineSettings()
    dtype = s.resolved_dtype
    cost = machine_cost_model(spec.model_id, dtype)
    base = load_policy_settings(spec.model_id, dtype) or PolicySettings()
    kv = 93_184  # the benchmark engine's KV cache (2.0 GB in bfloat16)
    limits = Limits(s.max_num_batched_tokens, s.max_num_seqs, kv, kv, s.block_size)
    print(f"cost model ({dtype}): {cost.source}; stored arranger: mixed_steps={base.mixed_steps}, "
          f"backlog_weight={base.backlog_weight}, fill_prefill={base.fill_prefill}")
    traces = {"tuning trace": (tuning_trace(), None)}
    if args.trace:
        traces["held-out trace"] = (read_trace(args.trace), [float(x) for x in args.loads.split(",")])
    for name, (trace, loads) in traces.items():
        if loads is None:
            loads = list(saturating_loads(trace, cost, limits, tokenize=tokenize, render=render, shares=(0.7, 1.2, 1.8)))
        rows = sum(len(q.rows) for q in trace)
        for load in loads:
            prepared = as_prepared(scale_arrivals(trace, load), limits, tokenize=tokenize, render=render)
            got: dict[str, tuple[float, float, int]] = {}
            for label, policy, settings in ([(b, b, base) for b in BASELINES] + [("relserve (stored)", "relserve", base)]
                                            + [(v, "relserve", base.model_copy(update=u)) for v, u in VARIANTS.items()]):
                r = simulate(prepared, policy, cost, limits, settings=settings, isolated=False)
                span = max(t.finish for t in r.relqueries) - min(t.arrival for t in r.relqueries)
                got[label] = (r.summary.mean_latency, rows / span, sum(r.summary.steps.values()))
            best_mean = min(got[b][0] for b in BASELINES)
            best_rate = max(got[b][1] for b in BASELINES)
            print(f"\n{name} at load {load:g}: best baseline mean {best_mean:.2f} s, rows/s {best_rate:.2f}")
            for label, (mean, rate, steps) in got.items():
                both = " <- both targets" if best_mean / mean >= 1.3 and rate / best_rate >= 0.97 else ""
                print(f"  {label:18s} mean {mean:7.2f} s ({best_mean / mean:4.2f}x lower)  rows/s "
                      f"{rate / best_rate:5.3f} of the best  {steps:5d} steps{both}")


if __name__ == "__main__":
    main()
