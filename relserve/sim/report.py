"""Writing simulation results as JSON and as Markdown tables."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from relserve.sim.clairvoyant import Limit
from relserve.sim.metrics import SimResult
from relserve.sim.sweep import StarvationSweep


def results_to_dict(results: Mapping[str, SimResult], *, per_relquery: bool = True) -> dict[str, object]:
    out = {}
    for name, res in results.items():
        d = res.model_dump(mode="json")
        if not per_relquery:
            d.pop("relqueries")
        out[name] = d
    return out


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def limit_markdown(limit: Limit) -> str:
    """The two references under a table: what the ratio columns divide by."""
    b = limit.bound
    text = (
        f"Lower bound {b.mean:.3f} s (provable: each relQuery alone {b.isolated_mean:.3f} s, one-machine SRPT "
        f"{b.srpt_mean:.3f} s, the two combined {b.combined_mean:.3f} s)"
    )
    if limit.clairvoyant is not None:
        c = limit.clairvoyant
        text += f"; clairvoyant schedule {c.mean:.3f} s ({c.arrangement}; true answer lengths, shortest remaining work first)"
    return text + ". Ratios: policy mean over each.\n"


def markdown_table(results: Mapping[str, SimResult], limit: Limit | None = None) -> str:
    """One row per policy: latency figures (s), Eq. 2 breakdown, throughput, cache, steps, overhead;
    with ``limit``, each policy's mean over the lower bound's and over the clairvoyant schedule's."""
    head = (
        "| policy | mean (s) | P50 | P95 | max | waiting | core | tail | slowdown | req/s | relQ/s "
        "| prefix hits | steps P/D/M | preempt | policy overhead |"
    )
    cols = 15
    if limit is not None:
        head += " x bound | x clairvoyant |"
        cols += 2
    sep = "|" + "---|" * cols
    rows = [head, sep]
    for name, res in results.items():
        s = res.summary
        st = s.steps
        rows.append(
            f"| {name} | {_fmt(s.mean_latency)} | {_fmt(s.p50_latency)} | {_fmt(s.p95_latency)} | {_fmt(s.max_latency)} "
            f"| {_fmt(s.mean_waiting)} | {_fmt(s.mean_core)} | {_fmt(s.mean_tail)} | {_fmt(s.mean_slowdown)} "
            f"| {_fmt(s.throughput_requests_per_s)} | {_fmt(s.throughput_relqueries_per_s, 3)} | {s.prefix_hit_rate:.1%} "
            f"| {st.get('prefill', 0)}/{st.get('decode', 0)}/{st.get('mixed', 0)} | {s.preemptions} "
            f"| {s.policy_overhead_share:.2%} |"
        )
        if limit is not None:
            vs_bound, vs_cv = limit.ratios(s.mean_latency)
            rows[-1] += f" {_ratio(vs_bound)} | {_ratio(vs_cv)} |"
    text = "\n".join(rows) + "\n"
    if limit is not None:
        text += "\n" + limit_markdown(limit)
    return text


def sweep_markdown(sweep: StarvationSweep) -> str:
    limit = sweep.limit
    rows = ["| threshold (s/request) | mean (s) | P95 | max | boosts |", "|---|---|---|---|---|"]
    if limit is not None:
        rows = [rows[0] + " x bound | x clairvoyant |", rows[1] + "---|---|"]
    for p in sweep.points:
        mark = " **chosen**" if p == sweep.chosen else ""
        th = "off" if p.threshold is None else f"{p.threshold:g}"
        rows.append(f"| {th}{mark} | {_fmt(p.mean_latency)} | {_fmt(p.p95_latency)} | {_fmt(p.max_latency)} | {p.starved_boosts} |")
        if limit is not None:
            vs_bound, vs_cv = limit.ratios(p.mean_latency)
            rows[-1] += f" {_ratio(vs_bound)} | {_ratio(vs_cv)} |"
    text = "\n".join(rows) + f"\n\nRule: {sweep.rule}.\n"
    if limit is not None:
        text += limit_markdown(limit)
    return text


def write_results(
    results: Mapping[str, SimResult],
    json_path: str | os.PathLike[str],
    markdown_path: str | os.PathLike[str] | None = None,
    *,
    sweep: StarvationSweep | None = None,
    meta: Mapping[str, object] | None = None,
    limit: Limit | None = None,
) -> None:
    """JSON with everything (per-relQuery timings included), and optionally the Markdown tables."""
    doc: dict[str, object] = {"meta": dict(meta or {}), "policies": results_to_dict(results)}
    if limit is not None:
        doc["limit"] = limit.model_dump(mode="json")
    if sweep is not None:
        doc["starvation_sweep"] = sweep.model_dump(mode="json")
    path = Path(json_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))
    if markdown_path is not None:
        text = markdown_table(results, limit)
        if sweep is not None:
            text += "\n" + sweep_markdown(sweep)
        md = Path(markdown_path)
        md.parent.mkdir(parents=True, exist_ok=True)
        md.write_text(text)
