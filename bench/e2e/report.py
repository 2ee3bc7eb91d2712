"""The report: contenders side by side at the highest load, answers compared with relserve's,
latency against load as Markdown, JSON and a plot."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

from e2e.kinds import kind_latencies
from e2e.kinds import markdown as kinds_markdown
from e2e.limits import ENGINE
from e2e.options import RunOptions
from e2e.overhead import markdown as overhead_markdown
from e2e.overhead import overhead_rows
from e2e.stats import throughput
from e2e.workload import Scheduled, Statement
from relserve.cpu_features import cpu_model

LABELS = {
    "vllm-serve": "vLLM serve, per-row client",
    "vllm-offline": "vLLM offline, batch per statement",
    "relserve": "relserve (cache off)",
    "relserve-cache-1st": "relserve, cache on, 1st pass",
    "relserve-cache": "relserve, cache on, 2nd pass",
}


def compare_answers(statements: list[Statement], reference: dict[str, dict], other: dict[str, dict]) -> dict:
    """Row by row, by id: generated columns (greedy llm_map / llm_extract) identical or not;
    label columns and rows kept by llm_filter as agreement."""
    meta = {s.name: s for s in statements}
    gen_same = gen_diff = label_same = label_diff = rows_both = rows_one = 0
    examples = []
    for key, ref in reference.items():
        got = other.get(key)
        if got is None or not ref["columns"] or not got["columns"]:
            continue
        name = ref.get("name")
        st = meta.get(name) if name else None
        if st is None:
            continue
        ri, gi = ref["columns"].index("id"), got["columns"].index("id")
        a = {row[ri]: dict(zip(ref["columns"], row)) for row in ref["rows"]}
        b = {row[gi]: dict(zip(got["columns"], row)) for row in got["rows"]}
        rows_both += len(a.keys() & b.keys())
        rows_one += len(a.keys() ^ b.keys())
        for i in a.keys() & b.keys():
            for col in st.generated:
                if a[i].get(col) == b[i].get(col):
                    gen_same += 1
                else:
                    gen_diff += 1
                    if len(examples) < 5:
                        examples.append({"statement": key, "id": i, "column": col, "reference": a[i].get(col), "other": b[i].get(col)})
            for col in st.labels:
                if a[i].get(col) == b[i].get(col):
                    label_same += 1
                else:
                    label_diff += 1
    return {"generated_identical": gen_same, "generated_different": gen_diff, "label_same": label_same,
            "label_different": label_diff, "rows_in_both": rows_both, "rows_in_one_only": rows_one,
            "different_examples": examples}


def summarize(args: RunOptions, statements: list[Statement], work_by_load: dict[float, list[Scheduled]], results: dict, total_s: float) -> dict:
    loads = sorted(work_by_load)
    top = str(max(loads))
    names = {s.name: s for s in statements}
    # the statement's name travels with its answers, for the comparison
    for res in results.values():
        for bucket in [*res.get("loads", {}).values(), *[v for k, v in res.get("cache_loads", {}).items() if k != "load"]]:
            for rec in bucket["records"]:
                if rec["key"] in bucket["answers"]:
                    bucket["answers"][rec["key"]]["name"] = rec["name"]
            bucket.update(throughput(bucket["records"]))
    runs: dict[str, dict[str, dict]] = {}
    for phase, res in results.items():
        key = phase
        runs[key] = res["loads"]
        if phase == "relserve" and res.get("cache_loads"):
            runs["relserve-cache-1st"] = {top: res["cache_loads"]["first"]}
            runs["relserve-cache"] = {top: res["cache_loads"]["second"]}
        if phase == "relserve" and "relserve" not in args.contenders:
            del runs["relserve"]
    ref = runs.get("relserve", {}).get(top)
    table = []
    for name, by_load in runs.items():
        r = by_load.get(top)
        if r is None:
            continue
        row = {k: v for k, v in r.items() if k not in ("records", "answers", "traces")}
        row["contender"] = name
        if ref is not None:
            row["mean_vs_relserve"] = r["mean_latency_s"] / ref["mean_latency_s"]
            row["p95_vs_relserve"] = r["p95_latency_s"] / ref["p95_latency_s"]
            row["rows_per_s_vs_relserve"] = r["rows_per_s"] / ref["rows_per_s"] if ref["rows_per_s"] else float("nan")
            if name != "relserve":
                row["answers_vs_relserve"] = compare_answers(statements, ref["answers"], r["answers"])
        table.append(row)
    curve = {
        name: [{"load": float(ld), "statements_per_s": args.rate * float(ld), "mean_latency_s": r["mean_latency_s"],
                "p95_latency_s": r["p95_latency_s"], "rows_per_s": r["rows_per_s"], "statements": r["statements"]}
               for ld, r in sorted(by_load.items(), key=lambda kv: float(kv[0]))]
        for name, by_load in runs.items()
    }
    return {
        "command": " ".join(sys.argv),
        "quick": args.quick,
        "machine": {"cpus": len(os.sched_getaffinity(0)), "cpu": cpu_model(),
                    "note": "see docs/benchmarks.md for how quiet it was"},
        "workload": {"name": args.workload, "sessions": args.sessions, "rate_at_load_1": args.rate, "window_s": args.window, "loads": loads,
                     "seed": args.seed, "statements": sorted(names), "alone": args.alone,
                     "per_load": {str(ld): {"statements": len(w), "rows": sum(x.item.rows for x in w)} for ld, w in work_by_load.items()}},
        "engine": ENGINE.as_dict(),
        # each phase's own dtype, as it ran (a phase file from before this was recorded: None)
        "dtypes": {p: r.get("dtype") for p, r in results.items()},
        "engine_start_s": {p: r.get("engine_start_s") for p, r in results.items()},
        # relserve's label plans when each load started (a phase file from before: None)
        "plans": results.get("relserve", {}).get("plans"),
        "plans_made": results.get("relserve", {}).get("plans_made"),
        "phase_s": {p: r.get("phase_s") for p, r in results.items()},
        "total_s": total_s,
        "headline_load": float(top),
        "table": table,
        "curve": curve,
        "statements_detail": {name: {ld: r["records"] for ld, r in by_load.items()} for name, by_load in runs.items()},
        "kinds": [k.as_dict() for k in kind_latencies(runs)],
        # relserve's statements' traces, a mean per kind and load (a phase file from before: none)
        "overhead": {ld: [row.as_dict() for row in overhead_rows(r["records"], r.get("traces", {}))]
                     for ld, r in sorted(runs.get("relserve", {}).items())},
    }


def fmt_number(x: Any, fmt: str = ".2f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def dtypes_line(report: dict) -> str:
    """One dtype for every contender, or each phase's when they differ (a comparison of dtypes,
    not of schedulers: said so)."""
    ran = {p: d for p, d in report.get("dtypes", {}).items() if d is not None}
    if not ran:
        return f"{report['engine'].get('dtype', 'unrecorded')} (the phases did not record theirs)"
    if len(set(ran.values())) == 1:
        return f"{next(iter(ran.values()))}, every contender"
    return "NOT THE SAME for every contender: " + ", ".join(f"{p} {d}" for p, d in ran.items())


def plans_line(report: dict) -> str:
    """relserve's label plans when each load started (``--plans``)."""
    plans, made = report.get("plans"), report.get("plans_made")
    if plans == "warm" and made:
        return (f"relserve's label plans: warm. Before the measured passes, {made['statements']} statements "
                f"({made['rows']} rows that no measured statement reads) made each call's plan in "
                f"{fmt_number(made['seconds'], '.0f')} s, not measured.")
    if plans == "cold":
        return "relserve's label plans: cold. Each load ran as a tenant of its own, so each call's first statements made its plan."
    return "relserve's label plans: not recorded (the loads ran in one tenant: the first load made them)."


def markdown(report: dict) -> str:
    w = report["workload"]
    lines = [
        f"# relserve end to end: workload {w.get('name', 'main')} ({'quick' if report['quick'] else 'full'} run)",
        "",
        f"{w['sessions']} sessions, Poisson arrivals, {w['rate_at_load_1']} statements/s at load 1.0, "
        f"{w['window_s']:.0f} s of arrivals per load, loads {', '.join(map(str, w['loads']))}; "
        f"statements: {', '.join(w['statements'])}. Total {fmt_number(report['total_s'] / 60, '.1f')} min. "
        f"Dtype: {dtypes_line(report)}. CPU: {report['machine'].get('cpu', 'not recorded')}, "
        f"{report['machine']['cpus']} cores.",
        "",
        *(["**Alone** (`--alone`): the same statements one after another in arrival order, each timed from its own "
           "start; no queue, so each mean is the floor of that contender's mean at any load.", ""] if w.get("alone") else []),
        f"At load {report['headline_load']} ({w['per_load'][str(report['headline_load'])]['statements']} statements, "
        f"{w['per_load'][str(report['headline_load'])]['rows']} table rows):",
        "",
        "| contender | statements (failed) | mean latency s | p95 latency s | table rows/s | rows the LLM functions ran on | prompt tokens computed | cached | mean / relserve | p95 / relserve | generated rows identical / different | classify labels same / different | rows llm_filter kept on one side only |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["table"]:
        cmp = row.get("answers_vs_relserve")
        ident = f"{cmp['generated_identical']} / {cmp['generated_different']}" if cmp else "(reference)"
        labels = f"{cmp['label_same']} / {cmp['label_different']} | {cmp['rows_in_one_only']}" if cmp else " |"
        lines.append(
            f"| {LABELS.get(row['contender'], row['contender'])} | {row['statements']} ({row['failed_statements']}) | "
            f"{fmt_number(row['mean_latency_s'])} | {fmt_number(row['p95_latency_s'])} | {fmt_number(row['rows_per_s'], '.2f')} | {row['llm_rows']} | "
            f"{row['prompt_tokens_computed']:,} | {row['prompt_tokens_cached']:,} | {fmt_number(row.get('mean_vs_relserve'))}x | "
            f"{fmt_number(row.get('p95_vs_relserve'))}x | {ident} | {labels} |"
        )
    ratios = {row["contender"]: row.get("mean_vs_relserve") for row in report["table"]}
    lines.append("")
    for name, target in (("vllm-serve", 5.0), ("vllm-offline", 2.0)):
        got = ratios.get(name)
        if got is not None and not math.isnan(got):
            verdict = "met" if got >= target else f"missed by {target / got:.2f}x"
            lines.append(f"Target: relserve's mean latency {target:.0f}x lower than {LABELS[name]}: {got:.2f}x, {verdict}.")
    lines += ["", "Mean statement latency (s) by load:", "", "| contender | " + " | ".join(f"load {ld}" for ld in w["loads"]) + " |",
              "|---|" + "---|" * len(w["loads"])]
    for name, pts in report["curve"].items():
        by = {p["load"]: p for p in pts}
        lines.append(f"| {LABELS.get(name, name)} | " + " | ".join(fmt_number(by[ld]["mean_latency_s"]) if ld in by else "" for ld in w["loads"]) + " |")
    lines += ["", "Engine start (s): " + ", ".join(f"{k} {fmt_number(v, '.0f')}" for k, v in report["engine_start_s"].items()), ""]
    lines += [plans_line(report), ""]
    lines += kinds_markdown(report.get("kinds", []), list(report["curve"]))
    lines += overhead_markdown(report.get("overhead", {}))
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, pts in report["curve"].items():
        xs = [p["statements_per_s"] for p in pts]
        if len(pts) == 1:
            ax.plot(xs, [p["mean_latency_s"] for p in pts], "*", markersize=11, label=LABELS.get(name, name) + " (mean)")
            continue
        line, = ax.plot(xs, [p["mean_latency_s"] for p in pts], "o-", label=LABELS.get(name, name) + " (mean)")
        ax.plot(xs, [p["p95_latency_s"] for p in pts], "--", color=line.get_color(), alpha=0.6)
    ax.set_xlabel("offered load (statements/s over all sessions)")
    ax.set_ylabel("statement latency, s (dashed: p95)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("relserve vs vLLM, end to end" + (" (quick run)" if report["quick"] else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
