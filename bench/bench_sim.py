"""Simulator speed, the starvation-threshold sweep (paper Fig. 12), and the distance from the limit.

1. Replays a trace of about 100,000 requests (2,000 relQueries of 1-100 rows over beer_reviews)
   under every policy with a step-cost preset (``--preset``, default ``opt-13b-a100``: a GPU
   preset keeps the load realistic) and prints the wall time of each replay.
2. Sweeps relserve's starvation threshold on the benchmark trace (bench/out/trace.jsonl, written
   by bench/bench_policies.sh, or a fresh one) and prints mean against max latency and the pick,
   with each threshold's ratio to the trace's lower bound and clairvoyant schedule.
3. Distance from the clairvoyant bound: every policy on the policy traces (this machine's step
   model: the benchmark and long traces; the GPU presets: the paper-like trace at the paper's
   rates, relserve also with the arranger tuned for the preset), each mean over the provable
   lower bound and over the clairvoyant schedule (``relserve.sim.clairvoyant``); answers of
   ``max_tokens`` tokens (as the other simulator benchmarks) and, with ``--short-answers``, also
   of a seeded length uniform in 1..max_tokens that only the clairvoyant schedule knows.
   Markdown in bench/out/limit.md. Only with ``--limit`` or ``--only limit`` (with
   ``--short-answers``: about 15 minutes, docs/benchmarks.md).

    .venv/bin/python bench/bench_sim.py [--rate 1.0]                # parts 1 and 2, about 70 s
    .venv/bin/python bench/bench_sim.py --only limit --short-answers  # part 3
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Sequence
from pathlib import Path

from relserve.calibration import machine_cost_model
from relserve.engine.settings import EngineSettings
from relserve.model import resolve_model
from relserve.policy import POLICY_NAMES, PRESETS, CostModel, Limits, PolicySettings
from relserve.sim import default_limits, simulate, sweep_markdown, sweep_starvation
from relserve.sim.clairvoyant import Limit, lower_bound, the_limit
from relserve.sim.prepared_trace import OutputLengths, Renderer, Tokenizer
from relserve.sim.run import as_prepared
from relserve.workloads import TraceQuery, generate_long_trace, generate_trace, read_trace
from relserve.workloads.traces import scale_arrivals

OUT = Path(__file__).parent / "out"
#: this machine's simulated engine (bench_policies.sh's and bench_arranger's)
CPU_LIMITS = dict(kv_capacity_tokens=46_592, max_num_seqs=256, max_num_batched_tokens=1024, block_size=32)


def _tokenizer() -> tuple[Tokenizer, Renderer]:
    from transformers import AutoTokenizer

    from relserve.engine.chat_template import ChatPrompter
    from relserve.sim import template_renderer

    tok = AutoTokenizer.from_pretrained(resolve_model().path)
    return (lambda text: tok(text, add_special_tokens=False)["input_ids"]), template_renderer(wrap=ChatPrompter(tok).text)


def short_answers(trace: Sequence[TraceQuery], seed: int = 0) -> OutputLengths:
    """A seeded answer length per row, uniform in 1..max_tokens."""
    rng = random.Random(seed)
    return {q.id: [rng.randint(1, q.max_tokens) for _ in q.rows] for q in trace}


def limit_rows(
    trace: Sequence[TraceQuery],
    loads: Sequence[float],
    cost: CostModel,
    limits: Limits,
    tokenize: Tokenizer,
    render: Renderer,
    *,
    extra: dict[str, PolicySettings] | None = None,
    answers: OutputLengths | None = None,
) -> list[tuple[float, Limit, dict[str, float]]]:
    """Per load: the limit and every policy's mean latency (``extra``: relserve with other settings)."""
    out = []
    for load in loads:
        prepared = as_prepared(scale_arrivals(trace, load), limits, tokenize=tokenize, render=render, output_lengths=answers)
        limit = the_limit(prepared, cost, limits)
        means = {p: simulate(prepared, p, cost, limits, isolated=False).summary.mean_latency for p in POLICY_NAMES}
        for name, settings in (extra or {}).items():
            means[name] = simulate(prepared, "relserve", cost, limits, settings=settings, isolated=False).summary.mean_latency
        out.append((load, limit, means))
        print(f"  x{load:g}: bound {limit.bound.mean:.2f} s, clairvoyant {limit.clairvoyant.mean:.2f} s, "
              + ", ".join(f"{k} {v:.2f}" for k, v in means.items()), flush=True)
    return out


def limit_table(title: str, rows: list[tuple[float, Limit, dict[str, float]]], load_label: str = "load x") -> str:
    """One row per load: the two references, then each policy's mean (s) and its ratios to them."""
    names = list(rows[0][2])
    lines = [
        f"#### {title}", "",
        "| load | bound (s) | clairvoyant (s) | " + " | ".join(names) + " |",
        "|---|---|---|" + "---|" * len(names),
    ]
    for load, limit, means in rows:
        cells = []
        for n in names:
            b, c = limit.ratios(means[n])
            cells.append(f"{means[n]:.2f} ({b:.2f}x / {c:.2f}x)")
        assert limit.clairvoyant is not None
        lines.append(f"| {load_label}{load:g} | {limit.bound.mean:.2f} | {limit.clairvoyant.mean:.2f} ({limit.clairvoyant.arrangement}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def limit_section(loads: Sequence[float], rates: Sequence[float], short: bool) -> str:
    from relserve.sim.tune import tune_arranger

    tokenize, render = _tokenizer()
    md = ["Cells: mean relQuery latency in s (its ratio to the lower bound / to the clairvoyant schedule).", ""]
    cpu = machine_cost_model(resolve_model().model_id, EngineSettings().resolved_dtype)
    limits = default_limits(**CPU_LIMITS)
    std_path = OUT / "trace.jsonl"
    std = read_trace(std_path) if std_path.exists() else generate_trace(
        ["rotten_tomatoes", "amazon_reviews", "beer_ratings"], 40, 0.25, rows=(1, 40), seed=5
    )
    long_path = OUT / "trace_long.jsonl"
    long = read_trace(long_path) if long_path.exists() else generate_long_trace(
        ["rotten_tomatoes", "amazon_reviews", "beer_reviews", "movies_small"], 30, 0.12, rows=(1, 30), seed=11
    )
    answer_kinds = [("answers of max_tokens", False)] + ([("answers uniform in 1..max_tokens", True)] if short else [])
    for kind, shorten in answer_kinds:
        for name, trace in (("benchmark trace", std), ("long trace", long)):
            print(f"{cpu.source}, {name}, {kind}", flush=True)
            rows = limit_rows(trace, loads, cpu, limits, tokenize, render, answers=short_answers(trace) if shorten else None)
            md += [limit_table(f"This machine's step model ({cpu.source}), {name}, {kind}", rows), ""]
    paper_like = generate_trace(["rotten_tomatoes", "amazon_reviews", "beer_reviews"], 100, 1.0, rows=(1, 100), seed=3)
    gpu_limits = default_limits()
    for preset in ("opt-13b-a100", "llama2-70b-4xa100"):
        pc = PRESETS[preset]
        tuned = PolicySettings().model_copy(update=tune_arranger(pc, gpu_limits, tokenize=tokenize, render=render, loads=(4.0, 6.0)).chosen)
        for kind, shorten in answer_kinds:
            print(f"{preset}, paper-like trace, {kind}", flush=True)
            rows = limit_rows(paper_like, rates, pc, gpu_limits, tokenize, render, extra={"relserve tuned": tuned},
                              answers=short_answers(paper_like) if shorten else None)
            md += [limit_table(f"{preset}, paper-like trace (100 relQueries, 1-100 rows), {kind}", rows, load_label=""), ""]
    md.append("Load: arrivals this many times as fast as the trace's; for the presets, relQueries per second.")
    return "\n".join(md) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=1.0, help="arrival rate of the 100k-request trace (relQueries/s)")
    ap.add_argument("--preset", default="opt-13b-a100", help="cost model of the 100k replay (a GPU preset keeps the load realistic)")
    ap.add_argument("--sweep-load", type=float, default=1.25, help="load factor of the sweep on the benchmark trace")
    ap.add_argument("--only", choices=("speed", "sweep", "limit"), default=None, help="run one part only")
    ap.add_argument("--limit", action="store_true", help="also part 3 (with --short-answers about 15 minutes, docs/benchmarks.md)")
    ap.add_argument("--limit-loads", default="1,1.5", help="load factors of this machine's traces for the limit")
    ap.add_argument("--limit-rates", default="0.5,0.75,1.0", help="relQueries/s of the paper-like trace for the presets")
    ap.add_argument("--short-answers", action="store_true", help="also answers shorter than max_tokens (seeded)")
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    report: dict = {}
    if args.only == "limit" or (args.only is None and args.limit):
        text = limit_section([float(x) for x in args.limit_loads.split(",")], [float(x) for x in args.limit_rates.split(",")], args.short_answers)
        (OUT / "limit.md").write_text(text)
        print(text)
        if args.only == "limit":
            return

    if args.only == "sweep":
        return sweep_part(args, report)
    t0 = time.perf_counter()
    big = generate_trace("beer_reviews", 2000, args.rate, rows=(1, 100), seed=0)
    prepared = as_prepared(big, default_limits())
    n = sum(len(q.rows) for q in big)
    print(f"trace: {len(big)} relQueries, {n} requests, prepared in {time.perf_counter() - t0:.1f} s")
    cost = PRESETS[args.preset]
    # the provable bound only: the clairvoyant schedule would cost five more replays
    bound = lower_bound(prepared, cost, default_limits()).mean
    print(f"lower bound on the mean latency: {bound:.2f} s")
    report["speed"] = {"lower_bound": bound}
    for policy in POLICY_NAMES:
        t = time.perf_counter()
        res = simulate(prepared, policy, cost, isolated=False)
        wall = time.perf_counter() - t
        mean = res.summary.mean_latency
        report["speed"][policy] = {"requests": n, "wall_s": wall, "requests_per_s": n / wall, "mean_latency": mean, "x_bound": mean / bound}
        print(f"{policy:12s} {wall:6.2f} s wall ({n / wall:8.0f} requests/s)  simulated mean latency {mean:7.2f} s ({mean / bound:.2f}x the bound)")
    if args.only == "speed":
        (OUT / "sim.json").write_text(json.dumps(report, indent=1))
        return
    sweep_part(args, report)


def sweep_part(args: argparse.Namespace, report: dict) -> None:
    trace_path = OUT / "trace.jsonl"
    trace = read_trace(trace_path) if trace_path.exists() else generate_trace(
        ["rotten_tomatoes", "amazon_reviews", "beer_ratings"], 40, 0.25, rows=(1, 40), seed=5
    )
    spec = resolve_model()
    tokenize, render = _tokenizer()
    sweep = sweep_starvation(
        scale_arrivals(trace, args.sweep_load),
        [1, 2, 3, 5, 8, 13, None],
        machine_cost_model(spec.model_id, EngineSettings().resolved_dtype),
        default_limits(kv_capacity_tokens=46_592, max_num_batched_tokens=1024),
        tokenize=tokenize,
        render=render,
        limit=True,
    )
    print(sweep_markdown(sweep))
    report["sweep"] = sweep.model_dump(mode="json")
    (OUT / "sim.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
