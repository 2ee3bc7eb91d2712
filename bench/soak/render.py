"""A run's report as text (printed and saved as Markdown), as JSON, and as a plot of the sampled
figures over the run with the faults marked."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from soak.drift import table as drift_table
from soak.ledger import Request
from soak.report import SoakReport


def _f(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def text(r: SoakReport) -> str:
    loads = sorted(x.load_1min for x in r.samples)
    busy = (f"; load average (1 min) over the run: median {loads[len(loads) // 2]:.1f}, max {loads[-1]:.1f}"
            if loads else "")
    lines = [f"# Soak: {r.minutes:g} minutes, seed {r.seed}", "", f"    {r.command}", "", f"Machine: {r.machine}{busy}", ""]
    lines += ["## Targets", ""] + [f"- [{'x' if ok else ' '}] {name}" for name, ok in r.targets.items()] + [""]
    lines += ["## Rows", "", "| kind | requests | rows | answered | errored | lost | duplicated | faulted on purpose | errors by cause |",
              "|---|---|---|---|---|---|---|---|---|"]
    for k in r.kinds:
        causes = ", ".join(f"{c} {n}" for c, n in sorted(k.causes.items(), key=lambda x: -x[1]))
        faulted = ", ".join(f"{f} {n}" for f, n in k.faulted.items())
        lines.append(f"| {k.kind} | {k.requests} | {k.rows} | {k.answered} | {k.errored} | {k.lost} | {k.duplicated} | {faulted} | {causes} |")
    lines.append("")
    if r.unexplained:
        lines += ["Errors that name no cause (or harness checks that failed):", ""] + [f"- {u}" for u in r.unexplained[:20]] + [""]
    if r.hung:
        lines += ["Requests that never ended:", ""] + [f"- {h}" for h in r.hung[:20]] + [""]
    lines += [f"Start on a corrupt cache file: {r.start_with_corrupt_cache}", ""]
    lines += ["## Faults", "", "| at (min) | fault | machine load | recovery (s) | cache replay | fds before/after "
              "| threads before/after | detail |", "|---|---|---|---|---|---|---|---|"]
    for f in r.faults:
        replay = f"{f.replay_from_cache}/{f.replay_rows} from the cache" if f.replay_rows else "-"
        if f.replay_problems:
            replay += f" ({len(f.replay_problems)} problem(s): {f.replay_problems[0]})"
        lines.append(f"| {f.at_s / 60:.1f} | {f.kind} | {_f(f.load_1min)} | {_f(f.recovery_s)} | {replay} | {_f(f.fds_before, 0)}/{_f(f.fds_after, 0)} "
                     f"| {_f(f.threads_before, 0)}/{_f(f.threads_after, 0)} | {f.detail} |")
    lines.append("")
    lines += ["Cache file after each exit (a copy, before the restart opened it):", ""]
    for c in r.cache_files:
        lines.append(f"- after {c.after}: {'clean' if c.clean else 'NOT clean'}, integrity {c.integrity or '-'}, "
                     f"{c.entries} entries, {c.half_written} half-written{'; ' + '; '.join(c.problems) if c.problems else ''}")
    lines += ["", "## Slopes per hour (server processes past their first 10 minutes)", "",
              "| figure | per hour | first | last | samples |", "|---|---|---|---|---|"]
    for s in r.slopes:
        lines.append(f"| {s.name} | {_f(s.per_hour, 2)} {s.unit}/h | {_f(s.first, 2)} | {_f(s.last, 2)} | {s.samples} |")
    lines += ["", "## p99 latency: baseline window (minutes 10-20 of an hour) against the last 10 minutes", "",
              "The ratio chance gives: two windows of the same sizes drawn from both windows' latencies "
              "pooled (no drift) differ by this much one time in ten. Drifted: more of the last window's "
              "requests past the baseline's p95 than chance gives (binomial, p < 0.01 over the kinds).", "",
              *drift_table(r.latency)]
    return "\n".join(lines) + "\n"


def save_json(r: SoakReport, path: Path) -> None:
    d = asdict(r)
    d["lost"], d["duplicated"] = r.lost, r.duplicated
    d["latency"] = [{"kind": w.kind, "baseline_n": len(w.baseline), "baseline_p99_s": w.baseline_p99, "last_n": len(w.last),
                     "last_p99_s": w.last_p99, "ratio": w.ratio, "chance_ratio": w.chance_ratio(), "slower": w.slower,
                     "p_value": w.p_value, "drifted": w.drifted(len(r.latency))} for w in r.latency]
    path.write_text(json.dumps(d, indent=1, default=str))


def save_requests(requests: list[Request], started: float, path: Path) -> None:
    """Every request, one JSON line each, with each row's outcomes (for looking into a finding)."""
    with open(path, "w") as f:
        for r in requests:
            f.write(json.dumps({
                "serial": r.serial, "kind": r.kind, "tenant": r.tenant, "rows": r.rows, "fault": r.fault, "job_id": r.job_id,
                "started_s": round(r.started - started, 2),
                "ended_s": None if r.ended is None else round(r.ended - started, 2),
                "outcomes": [[("answered" if o.answered else "error", o.detail[:200]) for o in got] for got in r.outcomes],
            }) + "\n")


def plot(r: SoakReport, path: Path) -> bool:
    """The sampled figures over the run; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    s = r.samples
    t = [x.t / 60 for x in s]
    fig, axes = plt.subplots(3, 2, figsize=(12, 10), sharex=True)
    panels = [
        (axes[0][0], "RSS (MB)", {"server": [x.server_rss_mb for x in s], "engine": [x.engine_rss_mb for x in s]}),
        (axes[0][1], "server open files / threads", {"fds": [x.server_fds for x in s], "threads": [x.server_threads for x in s]}),
        (axes[1][0], "result cache on disk (MB)", {"cache": [x.cache_mb for x in s]}),
        (axes[1][1], "in flight", {
            "rows": [sum(x.rows_in_flight.values()) if x.rows_in_flight else None for x in s],
            "relQueries": [sum(x.relqueries_in_flight.values()) if x.relqueries_in_flight else None for x in s],
        }),
    ]
    kinds = sorted({k for x in s for k in x.latency})
    panels.append((axes[2][0], "p50 latency, last minute (s)", {k: [x.latency.get(k, (0, None, None))[1] for x in s] for k in kinds}))
    panels.append((axes[2][1], "p99 latency, last minute (s)", {k: [x.latency.get(k, (0, None, None))[2] for x in s] for k in kinds}))
    for ax, title, series in panels:
        for name, ys in series.items():
            ax.plot(t, [float("nan") if y is None else y for y in ys], label=name, linewidth=1)
        for f in r.faults:
            if f.kind != "pg_terminate":
                ax.axvline(f.at_s / 60, color="red" if "kill" in f.kind else "orange", alpha=0.4, linewidth=0.8)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    for ax in axes[2]:
        ax.set_xlabel("minutes (red: kills, orange: full disk)")
    fig.suptitle(f"relserve soak, {r.minutes:g} min, seed {r.seed}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True
