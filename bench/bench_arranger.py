"""The arranger's ablation and the GPU presets, in the simulator, side by side in one run.

1. This machine (the stored calibration, else the defaults): on the benchmark trace
   (bench_policies.sh's) and on the long trace (long prompts and answers), relserve with each
   arranger variant (the paper's, filled prefill, mixed steps, both, the Eq. 16 gain) beside the
   baselines, at the benchmark's loads: mean latency, rows/s and steps.
2. The ``opt-13b-a100`` and ``llama2-70b-4xa100`` presets on a paper-like trace (100 relQueries of
   1-100 rows, the five query types): the arranger tuned for each preset by
   ``relserve.sim.tune`` (as `relserve calibrate` does on a machine), then relserve against the
   baselines over the paper's range of loads.

3. With ``--engine LOAD``: the same variants on the real engine, on the benchmark trace at that
   load (one engine, the policy's settings switched between replays): mean latency, rows/s and
   steps measured, beside the simulator's figures for the same runs.

    .venv/bin/python bench/bench_arranger.py            # about 5 minutes
    .venv/bin/python bench/bench_arranger.py --engine 1.5 --skip-sim   # about 10 minutes
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from relserve.calibration import load_policy_settings, machine_cost_model
from relserve.engine.settings import EngineSettings
from relserve.model import resolve_model
from relserve.policy import PRESETS, PolicySettings
from relserve.sim import default_limits, simulate, template_renderer
from relserve.sim.run import as_prepared
from relserve.sim.tune import tune_arranger, tuning_markdown
from relserve.workloads import generate_long_trace, generate_trace, read_trace
from relserve.workloads.traces import scale_arrivals

OUT = Path(__file__).parent / "out"
BASELINES = ("fcfs", "sp", "sarathi", "vllm")
VARIANTS = {
    "paper": {},
    "fill": {"fill_prefill": True},
    "mixed": {"mixed_steps": True},
    "fill+mixed": {"fill_prefill": True, "mixed_steps": True},
    "fill+mixed/256": {"fill_prefill": True, "mixed_steps": True, "mixed_chunk_tokens": 256},
    "gain 4": {"transitional_gain": 4.0},
    "mixed, backlog 1": {"mixed_steps": True, "backlog_weight": 1.0},
    "fill+mixed, backlog 1": {"fill_prefill": True, "mixed_steps": True, "backlog_weight": 1.0},
    "mixed, backlog 2": {"mixed_steps": True, "backlog_weight": 2.0},
    "mixed, gain 4": {"mixed_steps": True, "transitional_gain": 4.0},
}
#: the variants replayed on the real engine (``--engine``)
ENGINE_VARIANTS = ("paper", "mixed", "mixed, backlog 1", "fill+mixed, backlog 1", "mixed, backlog 2", "mixed, gain 4")


def _tokenizer():
    from transformers import AutoTokenizer

    from relserve.engine.chat_template import ChatPrompter

    tok = AutoTokenizer.from_pretrained(resolve_model().path)
    return (lambda text: tok(text, add_special_tokens=False)["input_ids"]), template_renderer(wrap=ChatPrompter(tok).text)


def _row(res, n_rows: int) -> dict:
    span = max(t.finish for t in res.relqueries) - min(t.arrival for t in res.relqueries)
    return {"mean": res.summary.mean_latency, "rows_per_s": n_rows / span, "steps": sum(res.summary.steps.values())}


def compare(trace, loads, cost, limits, base: PolicySettings, tokenize, render, variants=VARIANTS) -> dict:
    n_rows = sum(len(q.rows) for q in trace)
    out: dict[str, dict[str, dict]] = {}
    for load in loads:
        prepared = as_prepared(scale_arrivals(trace, load), limits, tokenize=tokenize, render=render)
        row: dict[str, dict] = {}
        for b in BASELINES:
            row[b] = _row(simulate(prepared, b, cost, limits, settings=base, isolated=False), n_rows)
        for name, knobs in variants.items():
            row[f"relserve {name}"] = _row(simulate(prepared, "relserve", cost, limits, settings=base.model_copy(update=knobs), isolated=False), n_rows)
        out[f"{load:g}"] = row
    return out


def table(title: str, result: dict) -> str:
    names = list(next(iter(result.values())))
    lines = [f"### {title}", "", "| load | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for load, row in result.items():
        best_base = min(row[b]["mean"] for b in BASELINES)
        cells = [f"{row[n]['mean']:.2f} s / {row[n]['rows_per_s']:.1f} r/s / {row[n]['steps']}" for n in names]
        lines.append(f"| x{load} (best baseline {best_base:.2f} s) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loads", default="1,1.5,2", help="load factors of the machine's traces")
    ap.add_argument("--preset-rates", default="0.5,0.75,1.0", help="relQueries/s of the paper-like trace (the paper's range)")
    ap.add_argument("--engine", type=float, default=None, help="also replay the variants on the real engine at this load")
    ap.add_argument("--skip-sim", action="store_true", help="only the real-engine replays")
    ap.add_argument("--engine-trace", default="trace.jsonl", help="trace in bench/out/ for --engine")
    ap.add_argument("--variants", default=";".join(ENGINE_VARIANTS), help="variants for --engine, by name, separated by ;")
    args = ap.parse_args()
    if args.skip_sim:
        if args.engine is None:
            ap.error("--skip-sim needs --engine LOAD")
        on_engine(args.engine, args.engine_trace, args.variants.split(";"))
        return
    OUT.mkdir(exist_ok=True)
    tokenize, render = _tokenizer()
    spec = resolve_model()
    dtype = EngineSettings().resolved_dtype
    cost = machine_cost_model(spec.model_id, dtype)
    tuned = load_policy_settings(spec.model_id, dtype) or PolicySettings()
    base = PolicySettings()  # the variants below set the arranger knobs themselves
    limits = default_limits(kv_capacity_tokens=46_592, max_num_seqs=256, max_num_batched_tokens=1024, block_size=32)
    loads = [float(x) for x in args.loads.split(",")]
    report: dict = {"cost_model": cost.model_dump(), "tuned": tuned.model_dump()}
    md = [f"Cost model: {cost.source}; arranger stored for this machine: "
          f"fill {tuned.fill_prefill}, mixed {tuned.mixed_steps} ({tuned.mixed_chunk_tokens}), gain {tuned.transitional_gain:g}", ""]

    bench_trace_path = OUT / "trace.jsonl"
    std = read_trace(bench_trace_path) if bench_trace_path.exists() else generate_trace(
        ["rotten_tomatoes", "amazon_reviews", "beer_ratings"], 40, 0.25, rows=(1, 40), seed=5
    )
    long_path = OUT / "trace_long.jsonl"
    long = read_trace(long_path) if long_path.exists() else generate_long_trace(
        ["rotten_tomatoes", "amazon_reviews", "beer_reviews", "movies_small"], 30, 0.12, rows=(1, 30), seed=11
    )
    for name, trace in (("benchmark trace", std), ("long trace", long)):
        res = compare(trace, loads, cost, limits, base, tokenize, render)
        report[name] = res
        md += [table(f"This machine, {name} (mean latency / rows per s / steps)", res), ""]
        print(md[-2], flush=True)

    paper_like = generate_trace(["rotten_tomatoes", "amazon_reviews", "beer_reviews"], 100, 1.0, rows=(1, 100), seed=3)
    rates = [float(x) for x in args.preset_rates.split(",")]
    gpu_limits = default_limits()
    for preset in ("opt-13b-a100", "llama2-70b-4xa100"):
        pc = PRESETS[preset]
        tuning = tune_arranger(pc, gpu_limits, tokenize=tokenize, render=render, loads=(4.0, 6.0))
        chosen = PolicySettings().model_copy(update=tuning.chosen)
        res = compare(paper_like, rates, pc, gpu_limits, PolicySettings(), tokenize, render,
                      variants={"paper": {}, "tuned": tuning.chosen})
        report[preset] = {"tuning": tuning.as_dict(), "runs": res}
        md += [f"### {preset}: arranger tuning (tuning trace, loads x4 and x6)", "", tuning_markdown(tuning), ""]
        md += [table(f"{preset}, paper-like trace at {', '.join(map(str, rates))} relQ/s (load = rate)", res), ""]
        worst = min(min(row[b]["mean"] for b in ("sp", "fcfs")) / row["relserve tuned"]["mean"] for row in res.values())
        top = res[f"{rates[-1]:g}"]
        md.append(f"relserve (tuned: {chosen.fill_prefill=}, {chosen.mixed_steps=}, {chosen.transitional_gain=}) "
                  f"against the better of sp and fcfs, worst load: {worst:.2f}x; against sp at {rates[-1]:g} relQ/s: "
                  f"{top['sp']['mean'] / top['relserve tuned']['mean']:.2f}x")
        md.append("")
        print("\n".join(md[-8:]), flush=True)
    (OUT / "arranger.json").write_text(json.dumps(report, indent=1))
    (OUT / "arranger.md").write_text("\n".join(md))
    print(f"wrote {OUT / 'arranger.md'}")
    if args.engine is not None:
        on_engine(args.engine, args.engine_trace, args.variants.split(";"))


def on_engine(load: float, trace_file: str = "trace.jsonl", names=ENGINE_VARIANTS) -> None:
    """The arranger variants replayed on the real engine (one trace, one load)."""
    from relserve.benchmark.replay import replay
    from relserve.benchmark.run import _sim_inputs
    from relserve.engine import Engine

    trace = scale_arrivals(read_trace(OUT / trace_file), load)
    n_rows = sum(len(q.rows) for q in trace)
    engine = Engine(policy="relserve", max_num_batched_tokens=1024, max_num_seqs=256, kv_cache_gb=2.0)
    lines = [f"### Real engine, {trace_file} at x{load:g}", "",
             "| variant | mean (s) | rows/s | steps | simulated mean (s) | simulated rows/s |", "|---|---|---|---|---|---|"]
    out = {}
    try:
        inputs = _sim_inputs(engine)
        render = template_renderer(wrap=inputs["render_wrap"])
        for name in names:
            knobs = VARIANTS[name]
            settings = engine.policy_settings.model_copy(update={
                "fill_prefill": False, "mixed_steps": False, "mixed_chunk_tokens": None,
                "transitional_gain": 1.0, "backlog_weight": 0.0, **knobs})
            engine.set_policy("relserve", settings)
            engine.reset_prefix_cache()
            run = replay(engine, trace)
            lat = [r.latency_s for r in run.records]
            lengths = {r.id: r.output_lengths for r in run.records}
            sim = simulate(trace, "relserve", engine.cost_model, inputs["limits"], settings=settings,
                           tokenize=inputs["tokenize"], render=render, output_lengths=lengths, isolated=False)
            srow = _row(sim, n_rows)
            out[name] = {"mean": sum(lat) / len(lat), "rows_per_s": n_rows / run.span_s, "steps": run.steps,
                         "sim_mean": srow["mean"], "sim_rows_per_s": srow["rows_per_s"]}
            o = out[name]
            lines.append(f"| {name} | {o['mean']:.2f} | {o['rows_per_s']:.2f} | {o['steps']} | {o['sim_mean']:.2f} | {o['sim_rows_per_s']:.2f} |")
            print(lines[-1], flush=True)
    finally:
        engine.close()
    stem = f"arranger_engine_{Path(trace_file).stem}_x{load:g}"
    (OUT / f"{stem}.json").write_text(json.dumps(out, indent=1))
    (OUT / f"{stem}.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
