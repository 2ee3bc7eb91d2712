"""Where relserve's statements spent their time (issue 65), from each statement's trace
(relserve/duckdb_ext/trace.py) as the relserve phase kept it: a mean per statement kind, so a
regression in what relserve adds around the engine shows in the report."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class OverheadRow:
    """Means over the statements of one kind, in seconds (``passes``: DuckDB passes per statement)."""

    name: str
    statements: int
    latency_s: float
    #: arrival to the statement's start (its session busy with an earlier one)
    before_start_s: float
    total_s: float
    parse_s: float
    passes: float
    passes_s: float
    waves_s: float
    other_s: float
    #: summed over the statement's relQueries
    server_s: float
    round_trip_s: float
    first_pass_s: float
    engine_s: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def overhead_rows(records: list[dict[str, Any]], traces: dict[str, dict[str, Any]]) -> list[OverheadRow]:
    """One row per statement kind that has traces (records: a pass's; traces by record key)."""
    by_name: dict[str, list[tuple[dict, dict]]] = {}
    for rec in records:
        trace = traces.get(rec["key"])
        if trace is not None and rec.get("error") is None:
            by_name.setdefault(rec["name"], []).append((rec, trace))
    rows = []
    for name, pairs in sorted(by_name.items()):
        def mean(f, pairs=pairs) -> float:
            return statistics.fmean(f(r, t) for r, t in pairs)

        rows.append(OverheadRow(
            name, len(pairs), mean(lambda r, t: r["end"] - r["arrival"]), mean(lambda r, t: r["start"] - r["arrival"]),
            mean(lambda r, t: t["total_s"]), mean(lambda r, t: t["parse_s"]), mean(lambda r, t: len(t["passes"])),
            mean(lambda r, t: t["passes_s"]), mean(lambda r, t: t["stages_s"]), mean(lambda r, t: t["other_s"]),
            mean(lambda r, t: sum(c["server_s"] or 0.0 for c in t["calls"])), mean(lambda r, t: t["round_trip_s"]),
            mean(lambda r, t: t["first_pass_s"]), mean(lambda r, t: t["engine_s"]),
        ))
    return rows


def markdown(rows_by_load: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The report's section: one table per load (rows as ``OverheadRow.as_dict``)."""
    if not any(rows_by_load.values()):
        return []
    out = ["Where relserve's statements spent their time (each statement's trace; mean per statement, ms; "
           "server, round trip, first pass and engine summed over its relQueries):", ""]
    for load, rows in rows_by_load.items():
        out += [f"Load {load}:", "",
                "| statement | n | latency | before start | run | parse | DuckDB passes (n) | waves of relQueries | other "
                "| server | round trips | label first pass | engine |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            ms = {k: f"{v * 1000:.0f}" for k, v in r.items() if k.endswith("_s")}
            out.append(f"| {r['name']} | {r['statements']} | {ms['latency_s']} | {ms['before_start_s']} | {ms['total_s']} "
                       f"| {ms['parse_s']} | {ms['passes_s']} ({r['passes']:.1f}) | {ms['waves_s']} | {ms['other_s']} "
                       f"| {ms['server_s']} | {ms['round_trip_s']} | {ms['first_pass_s']} | {ms['engine_s']} |")
        out.append("")
    return out
