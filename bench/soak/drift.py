"""Whether latency drifted between the baseline window and the last one, told apart from chance.

The issue's figure, p99 at the end against p99 in minutes 10-20, is read from a few dozen
requests of a kind per window: its p99 is then one or two of the slowest requests, and two
windows of the same latencies differ by more than 1.2x by chance alone. So beside that ratio a
run reports, per client kind:

- the ratio chance alone gives: the 90th percentile of the p99 ratio between two windows of the
  same sizes drawn (with replacement) from the two windows' latencies pooled, that is with no
  drift at all (a bootstrap; seeded, so a report reads the same twice);
- a drift test on the tail: how many of the last window's requests were slower than the
  baseline's p95, and how likely that many or more are if the tail did not move (binomial, 5%).

    .venv/bin/python bench/soak/drift.py bench/out/soak_60min/requests.jsonl --minutes 60

reads a finished run's request log and prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from relserve.percentile import percentile

#: draws of the bootstrap
DRAWS = 2000
#: the tail the drift test watches: requests slower than the baseline's p95
TAIL = 0.95
#: a kind drifted when its tail count is this unlikely without drift (before the correction for
#: the number of kinds)
DRIFT_P = 0.01


@dataclass(frozen=True)
class Drift:
    kind: str
    baseline: tuple[float, ...]
    last: tuple[float, ...]

    @property
    def baseline_p99(self) -> float | None:
        return percentile(self.baseline, 0.99, empty=None)

    @property
    def last_p99(self) -> float | None:
        return percentile(self.last, 0.99, empty=None)

    @property
    def ratio(self) -> float | None:
        """The issue's figure: p99 of the last window over p99 of the baseline."""
        if not self.baseline_p99 or self.last_p99 is None:
            return None
        return self.last_p99 / self.baseline_p99

    def chance_ratio(self, seed: int = 68) -> float | None:
        """The p99 ratio that two windows of these sizes exceed one time in ten with no drift."""
        if len(self.baseline) < 2 or len(self.last) < 2:
            return None
        pooled = [*self.baseline, *self.last]
        rng = random.Random(seed)
        ratios = sorted(
            percentile(rng.choices(pooled, k=len(self.last)), 0.99) / percentile(rng.choices(pooled, k=len(self.baseline)), 0.99)
            for _ in range(DRAWS))
        return ratios[int(0.9 * DRAWS)]

    @property
    def slower(self) -> int:
        """Requests of the last window slower than the baseline's p95."""
        cut = percentile(self.baseline, TAIL)
        return sum(x > cut for x in self.last)

    @property
    def p_value(self) -> float | None:
        """How likely ``slower`` or more of the last window's requests are past the baseline's
        p95 if the tail did not move."""
        if not self.baseline or not self.last:
            return None
        return binomial_tail(len(self.last), self.slower, 1 - TAIL)

    def drifted(self, kinds: int) -> bool:
        p = self.p_value
        return p is not None and p < DRIFT_P / max(kinds, 1)


def binomial_tail(n: int, k: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return min(1.0, sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1)))


def windows(latencies: list[tuple[str, float, float]], seconds: float) -> list[Drift]:
    """Per kind, the latencies of requests that ended in minutes 10-20 of an hour (a sixth to a
    third of any run) and in the last sixth. ``latencies``: (kind, ended, latency) with ``ended``
    in seconds from the run's start, of fully answered requests no client faulted."""
    base: dict[str, list[float]] = {}
    last: dict[str, list[float]] = {}
    for kind, ended, latency in latencies:
        if seconds / 6 <= ended < seconds / 3:
            base.setdefault(kind, []).append(latency)
        elif seconds * 5 / 6 <= ended < seconds:
            last.setdefault(kind, []).append(latency)
    return [Drift(k, tuple(base.get(k, ())), tuple(last.get(k, ()))) for k in sorted(set(base) | set(last))]


def table(drifts: list[Drift]) -> list[str]:
    """The report's lines (Markdown)."""
    lines = ["| kind | baseline requests | baseline p99 (s) | last requests | last p99 (s) | ratio "
             f"| ratio chance gives (90th pct) | last slower than baseline p{TAIL * 100:.0f} | p (no drift) | drifted |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for d in drifts:
        lines.append(f"| {d.kind} | {len(d.baseline)} | {_f(d.baseline_p99)} | {len(d.last)} | {_f(d.last_p99)} "
                     f"| {_f(d.ratio)} | {_f(d.chance_ratio())} | {d.slower} of {len(d.last)} | {_f(d.p_value, 3)} "
                     f"| {'yes' if d.drifted(len(drifts)) else 'no'} |")
    return lines


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def from_log(path: Path, seconds: float) -> list[Drift]:
    """A finished run's ``requests.jsonl`` (times in seconds from the run's start)."""
    rows = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        answered = all(len(o) == 1 and o[0][0] == "answered" for o in r["outcomes"])
        if r["ended_s"] is not None and r["fault"] is None and answered:
            rows.append((r["kind"], r["ended_s"], r["ended_s"] - r["started_s"]))
    return windows(rows, seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("requests", type=Path, help="a run's requests.jsonl")
    ap.add_argument("--minutes", type=float, required=True, help="the run's length")
    args = ap.parse_args()
    print("\n".join(table(from_log(args.requests, args.minutes * 60))))


if __name__ == "__main__":
    main()
