"""The benchmark report: ratios, the simulator's policy order, and a saved run rendered again."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from relserve.benchmark import BenchmarkConfig, BenchmarkReport, RunSummary
from relserve.benchmark.report import markdown, rank_agreement, ratios
from relserve.cli import app


def _summary(policy: str, mean: float) -> RunSummary:
    return RunSummary(
        policy=policy, load=2.0, rate=0.5, relqueries=3, rows=10, errors=0,
        mean_latency=mean, p50_latency=mean, p95_latency=mean, max_latency=mean,
        mean_waiting=0.0, mean_core=mean, mean_tail=0.0, mean_slowdown=1.0,
        throughput_rows_per_s=1.0, throughput_relqueries_per_s=0.1, prefix_hit_rate=0.5,
        span_s=10.0, policy_seconds=0.01, overhead_share=0.001, steps=100,
    )


def _report() -> BenchmarkReport:
    measured = {"relserve": 4.0, "fcfs": 8.0, "sp": 8.4, "vllm": 5.0}
    simulated = {"relserve": 4.2, "fcfs": 8.8, "sp": 8.6, "vllm": 3.9}
    return BenchmarkReport(
        config=BenchmarkConfig(policies=list(measured), loads=[2.0]),
        trace_rate=0.25,
        summaries=[_summary(p, m) for p, m in measured.items()],
        simulated=[
            {"policy": p, "load": 2.0, "measured_mean_latency": measured[p],
             "simulated_mean_latency": simulated[p], "relative_error": simulated[p] / measured[p] - 1,
             "clairvoyant_mean_latency": 3.2, "measured_over_clairvoyant": measured[p] / 3.2}
            for p in measured
        ],
    )


def test_ratios_are_other_mean_over_relserve_mean():
    assert {r["versus"]: r["speedup"] for r in ratios(_report())} == {"fcfs": 2.0, "sp": 2.1, "vllm": 1.25}


def test_rank_agreement_counts_swapped_pairs_with_their_measured_gap():
    agr = rank_agreement(_report())["2"]
    # 6 pairs; the simulator swaps fcfs/sp (measured 5% apart) and relserve/vllm (25% apart).
    assert agr["pairs"] == 6 and agr["agree"] == 4
    assert [(a, b, round(g, 3)) for a, b, g in agr["swapped"]] == [("fcfs", "sp", 0.05), ("relserve", "vllm", 0.25)]


def test_saved_report_renders_the_same(tmp_path):
    report = _report()
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(report.as_dict()))
    out = tmp_path / "run.md"
    result = CliRunner().invoke(app, ["bench", "report", str(saved), "--markdown", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text == markdown(report)  # the saved run renders as the run in memory did
    # and what it says, written out: rows sorted by mean latency, the ratios, the simulator's errors
    assert [line.split(" | ")[1] for line in text.splitlines() if line.startswith("| 0.500 |")] == ["relserve", "vllm", "fcfs", "sp"]
    for line in ("- load 2: fcfs 2.00x", "- load 2: sp 2.10x", "- load 2: vllm 1.25x",
                 "| 2 | fcfs | 8.00 | 8.80 | +10% | 3.20 | 2.50 |", "| 2 | vllm | 5.00 | 3.90 | -22% | 3.20 | 1.56 |",
                 "- load 2: 4/6; swapped: fcfs/sp (measured 5% apart), relserve/vllm (measured 25% apart)"):
        assert line in text.splitlines(), line


def test_report_of_a_file_that_is_not_a_run_names_it(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    result = CliRunner(env={"COLUMNS": "400"}).invoke(app, ["bench", "report", str(bad)])
    assert result.exit_code == 2
    assert "x.json: not a benchmark result" in result.output
