"""Benchmark output: JSON, a Markdown table, and the paper's Fig. 9-11 as PNG plots."""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import combinations
from pathlib import Path

from relserve.benchmark.run import BenchmarkReport
from relserve.engine.step_record import StepRecord


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def ratios(report: BenchmarkReport) -> list[dict]:
    """relserve's mean latency against each other policy, per load (higher is better)."""
    by = {(s.load, s.policy): s for s in report.summaries}
    out = []
    for load in sorted({s.load for s in report.summaries}):
        mine = by.get((load, "relserve"))
        if mine is None:
            continue
        for (ld, pol), s in sorted(by.items()):
            if ld == load and pol != "relserve" and mine.mean_latency > 0:
                out.append({"load": load, "versus": pol, "speedup": s.mean_latency / mine.mean_latency})
    return out


#: prompt tokens from which a step counts as a large prefill (a quarter of the default budget and up)
LARGE_PREFILL_TOKENS = 256


def step_shape(step: StepRecord) -> str:
    """A logged step's shape: decode, prefill or mixed, "large" from ``LARGE_PREFILL_TOKENS``."""
    tokens, decodes = step.prefill_tokens, step.decode_reqs
    kind = "mixed" if tokens and decodes else "prefill" if tokens else "decode"
    return kind if not tokens or tokens < LARGE_PREFILL_TOKENS else f"large {kind}"


def step_model_check(report: BenchmarkReport) -> list[dict]:
    """The cost model against the steps each plug-in run really took, per step shape: the measured
    and predicted seconds, their ratio, the steps and their mean prefill tokens and decodes. This
    tells a wrong step price apart from a simulator that schedules differently from the engine."""
    from relserve.policy import CostModel

    if report.cost_model is None:
        return []
    cost = CostModel(**report.cost_model)
    out = []
    for name, run in report.runs.items():
        by_shape: dict[str, list[StepRecord]] = defaultdict(list)
        for step in map(StepRecord.from_dict, run.get("step_log") or []):
            if step.duration is not None:
                by_shape[step_shape(step)].append(step)
        for shape, steps in sorted(by_shape.items()):
            measured = sum(x.duration or 0.0 for x in steps)
            predicted = sum(cost.mixed(x.prefill_tokens, x.decode_reqs, x.prefill_pairs, x.decode_context) for x in steps)
            out.append({"run": name, "shape": shape, "steps": len(steps), "measured_s": measured,
                        "predicted_s": predicted, "ratio": predicted / measured if measured else None,
                        "prefill_tokens": sum(x.prefill_tokens for x in steps) / len(steps),
                        "decodes": sum(x.decode_reqs for x in steps) / len(steps)})
    return out


def markdown(report: BenchmarkReport) -> str:
    lines = [
        f"Trace: {len({r for r in report.isolated}) or '?'} relQueries at {report.trace_rate:.3f} relQueries/s (load x1). "
        f"Wall time of the whole benchmark: {report.wall_s / 60:.1f} min. "
        f"Every policy's engine in {report.dtype or 'an unrecorded dtype'}.",
        "",
        "| load (relQ/s) | policy | mean (s) | P50 | P95 | max | waiting | core | tail | slowdown | rows/s | steps | prefix hit | overhead | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in sorted(report.summaries, key=lambda s: (s.load, s.mean_latency)):
        lines.append(
            f"| {s.rate:.3f} | {s.policy} | {_f(s.mean_latency)} | {_f(s.p50_latency)} | {_f(s.p95_latency)} | {_f(s.max_latency)} "
            f"| {_f(s.mean_waiting)} | {_f(s.mean_core)} | {_f(s.mean_tail)} | {_f(s.mean_slowdown)} "
            f"| {_f(s.throughput_rows_per_s)} | {'-' if s.steps is None else s.steps} | {s.prefix_hit_rate:.1%} "
            f"| {'-' if s.overhead_share is None else f'{s.overhead_share:.3%}'} | {s.errors} |"
        )
    r = ratios(report)
    if r:
        lines += ["", "relserve's mean latency, times lower than:", ""]
        lines += [f"- load {x['load']:g}: {x['versus']} {x['speedup']:.2f}x" for x in r]
    if report.simulated:
        lines += [
            "",
            "Simulator against the real engine (same trace, calibrated cost model, measured output lengths):",
            "",
            "| load | policy | measured mean (s) | simulated mean (s) | error | clairvoyant mean (s) | measured / clairvoyant |",
            "|---|---|---|---|---|---|---|",
        ]
        for x in report.simulated:
            err = x["relative_error"]
            lines.append(
                f"| {x['load']:g} | {x['policy']} | {_f(x['measured_mean_latency'])} | {_f(x['simulated_mean_latency'])} "
                f"| {'-' if err is None else f'{err:+.0%}'} | {_f(x.get('clairvoyant_mean_latency'))} "
                f"| {_f(x.get('measured_over_clairvoyant'))} |"
            )
        lines += ["", "Policy order, simulated against measured (pairs of policies ordered the same way):", ""]
        for load, agr in rank_agreement(report).items():
            swapped = ", ".join(f"{a}/{b} (measured {gap:.0%} apart)" for a, b, gap in agr["swapped"])
            lines.append(f"- load {load}: {agr['agree']}/{agr['pairs']}" + (f"; swapped: {swapped}" if swapped else ""))
    check = step_model_check(report)
    if check:
        lines += [
            "",
            "The cost model against the steps each run took (predicted / measured busy seconds per step shape):",
            "",
            "| run | shape | steps | measured (s) | predicted (s) | predicted / measured | prefill tokens | decodes |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for x in check:
            lines.append(f"| {x['run']} | {x['shape']} | {x['steps']} | {x['measured_s']:.1f} | {x['predicted_s']:.1f} "
                         f"| {_f(x['ratio'])} | {x['prefill_tokens']:.0f} | {x['decodes']:.1f} |")
    return "\n".join(lines) + "\n"


def rank_agreement(report: BenchmarkReport) -> dict[str, dict]:
    """Per load: how many pairs of policies the simulator orders as the engine did, and which not.

    A swapped pair carries its measured gap (relative to the faster one), so that a swap of two
    policies a few percent apart reads differently from a real disagreement.
    """
    by_load: dict[float, dict[str, tuple[float, float]]] = defaultdict(dict)
    for x in report.simulated:
        if x["simulated_mean_latency"] is not None:
            by_load[x["load"]][x["policy"]] = (x["measured_mean_latency"], x["simulated_mean_latency"])
    out = {}
    for load, xs in sorted(by_load.items()):
        pairs = list(combinations(sorted(xs), 2))
        swapped = []
        for a, b in pairs:
            (ma, sa), (mb, sb) = xs[a], xs[b]
            if (ma - mb) * (sa - sb) < 0:
                swapped.append((a, b, abs(ma - mb) / min(ma, mb)))
        out[f"{load:g}"] = {"pairs": len(pairs), "agree": len(pairs) - len(swapped), "swapped": swapped}
    return out


def write(report: BenchmarkReport, json_path: str | Path | None, md_path: str | Path | None, plots_dir: str | Path | None) -> list[Path]:
    written = []
    if json_path:
        p = Path(json_path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(report.as_dict(), indent=1))
        written.append(p)
    if md_path:
        p = Path(md_path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(markdown(report))
        written.append(p)
    if plots_dir:
        written += plot(report, Path(plots_dir))
    return written


def plot(report: BenchmarkReport, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    files = []
    by_policy = defaultdict(list)
    for s in report.summaries:
        by_policy[s.policy].append(s)

    # Fig. 9: mean latency against load, one line per policy
    fig, ax = plt.subplots(figsize=(6, 4))
    for pol, xs in sorted(by_policy.items()):
        xs.sort(key=lambda s: s.rate)
        ax.plot([s.rate for s in xs], [s.mean_latency for s in xs], marker="o", label=pol)
    ax.set_xlabel("load (relQueries/s)")
    ax.set_ylabel("mean relQuery latency (s)")
    ax.set_title("Latency against load (cf. paper Fig. 9)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    files.append(_save(fig, out / "fig9_latency_vs_load.png"))

    # Fig. 10: prefill/decode arrangement ablation, normalised to relserve
    abl = [p for p in ("relserve", "relserve-pp", "relserve-dp") if p in by_policy]
    if len(abl) > 1 and "relserve" in by_policy:
        base = {s.load: s.mean_latency for s in by_policy["relserve"]}
        fig, ax = plt.subplots(figsize=(6, 4))
        loads = sorted(base)
        width = 0.8 / len(abl)
        for k, pol in enumerate(abl):
            vals = {s.load: s.mean_latency / base[s.load] for s in by_policy[pol] if base.get(s.load)}
            ax.bar([i + k * width for i in range(len(loads))], [vals.get(load, 0) for load in loads], width, label=pol)
        ax.set_xticks([i + width * (len(abl) - 1) / 2 for i in range(len(loads))])
        ax.set_xticklabels([f"{report.trace_rate * load:.2f}" for load in loads])
        ax.set_xlabel("load (relQueries/s)")
        ax.set_ylabel("mean latency / relserve's")
        ax.set_title("Prefill/decode arrangement (cf. paper Fig. 10)")
        ax.legend(fontsize=8)
        files.append(_save(fig, out / "fig10_arrangement_ablation.png"))

    # Fig. 11: latency breakdown at the highest load
    top = max((s.load for s in report.summaries), default=None)
    if top is not None:
        xs = sorted((s for s in report.summaries if s.load == top), key=lambda s: s.mean_latency)
        fig, ax = plt.subplots(figsize=(6, 4))
        names = [s.policy for s in xs]
        w = [s.mean_waiting for s in xs]
        c = [s.mean_core for s in xs]
        t = [s.mean_tail for s in xs]
        ax.bar(names, w, label="waiting")
        ax.bar(names, c, bottom=w, label="core running")
        ax.bar(names, t, bottom=[a + b for a, b in zip(w, c)], label="tail running")
        ax.set_ylabel("mean time (s)")
        ax.set_title(f"Latency breakdown at {report.trace_rate * top:.2f} relQueries/s (cf. Fig. 11)")
        ax.tick_params(axis="x", rotation=30)
        ax.legend(fontsize=8)
        files.append(_save(fig, out / "fig11_latency_breakdown.png"))
    return files


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
