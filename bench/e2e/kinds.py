"""Each statement kind's mean latency per contender and load, beside relserve's (issue 65's
target: no kind more than 5% slower than offline batching at load 0.5)."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class KindLatency:
    load: str
    statement: str
    #: contender -> mean latency (s) of its statements of this kind that did not fail
    means: dict[str, float]

    def vs_relserve(self, contender: str) -> float | None:
        """The contender's mean over relserve's (above 1: relserve is faster)."""
        ours, theirs = self.means.get("relserve"), self.means.get(contender)
        return theirs / ours if ours and theirs is not None else None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def kind_latencies(runs: dict[str, dict[str, dict]]) -> list[KindLatency]:
    """runs: contender -> load -> a pass (its ``records``)."""
    by: dict[tuple[str, str], dict[str, list[float]]] = {}
    for contender, by_load in runs.items():
        for load, r in by_load.items():
            for rec in r["records"]:
                if rec.get("error") is None:
                    by.setdefault((load, rec["name"]), {}).setdefault(contender, []).append(rec["end"] - rec["arrival"])
    return [KindLatency(load, name, {c: statistics.fmean(v) for c, v in lat.items()})
            for (load, name), lat in sorted(by.items(), key=lambda kv: (float(kv[0][0]), kv[0][1]))]


def markdown(rows: list[dict[str, Any]], contenders: list[str]) -> list[str]:
    """The report's section (rows as ``KindLatency.as_dict``)."""
    others = [c for c in contenders if c != "relserve"]
    if not rows or not others:
        return []
    out = ["Mean latency (s) per statement kind, and each contender's over relserve's (above 1: relserve is faster):", "",
           "| load | statement | relserve | " + " | ".join(others) + " |", "|---|---|---|" + "---|" * len(others)]
    for d in rows:
        k = KindLatency(**d)
        ours = k.means.get("relserve")
        cells = []
        for c in others:
            theirs, ratio = k.means.get(c), k.vs_relserve(c)
            cells.append("" if theirs is None else f"{theirs:.2f}" + ("" if ratio is None else f" ({ratio:.2f}x)"))
        out.append(f"| {k.load} | {k.statement} | {'' if ours is None else f'{ours:.2f}'} | " + " | ".join(cells) + " |")
    return out + [""]
