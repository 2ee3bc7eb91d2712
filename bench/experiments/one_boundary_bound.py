"""Experiment (issue 62): can any one boundary on a filter's scores keep 0.5-2x the true rows at
every prevalence from 5% to 90%?

A boundary that is a function of the question alone (the plan's calibrated rule: the row's own
score against content-free rows) keeps, at prevalence ``p``, ``TPR * p + FPR * (1 - p)`` of the
rows, whichever table it meets. This reads, for each (TPR, FPR) a boundary can reach, whether
``kept / true`` stays within [0.5, 2] at every ``p`` in the band: on the equal-variance binormal
model for a given AUC, and on the per-row scores a bench_quality run saved (its
``scores``: per row the first label's score minus the second's, and the truth).

    .venv/bin/python bench/experiments/one_boundary_bound.py                       # the binormal model
    .venv/bin/python bench/experiments/one_boundary_bound.py bench/out/quality.json  # and a run's scores

The band's ends decide it: at 5% a boundary may let through at most about 1/19 of the "no" rows
(2x), at 90% it must keep about half of the "yes" rows (0.5x).
"""

from __future__ import annotations

import json
import math
import sys
from statistics import NormalDist

LOW, HIGH = 0.05, 0.90
PREVALENCES = [LOW + (HIGH - LOW) * k / 34 for k in range(35)]


def within(tpr: float, fpr: float, low: float = LOW, high: float = HIGH) -> bool:
    """Whether a boundary with these rates keeps 0.5-2x the true rows at every prevalence of the band."""
    ps = [p for p in PREVALENCES if low - 1e-9 <= p <= high + 1e-9]
    return all(0.5 <= (tpr * p + fpr * (1 - p)) / p <= 2.0 for p in ps)


def binormal_points(auc: float, steps: int = 4000) -> list[tuple[float, float]]:
    """(TPR, FPR) along the equal-variance binormal ROC curve of ``auc``."""
    n = NormalDist()
    d = math.sqrt(2) * n.inv_cdf(auc)
    out = []
    for i in range(steps + 1):
        t = -4 + 10 * i / steps
        out.append((1 - n.cdf(t - d), 1 - n.cdf(t)))
    return out


def score_points(margins: list[float], truth: list[bool]) -> list[tuple[float, float]]:
    """(TPR, FPR) of every boundary between the measured margins."""
    pos = sorted((m for m, t in zip(margins, truth) if t), reverse=True)
    neg = sorted((m for m, t in zip(margins, truth) if not t), reverse=True)
    if not pos or not neg:
        return []
    cuts = sorted(set(margins), reverse=True)
    return [(sum(m >= c for m in pos) / len(pos), sum(m >= c for m in neg) / len(neg)) for c in cuts]


def auc_of(margins: list[float], truth: list[bool]) -> float:
    pos = [m for m, t in zip(margins, truth) if t]
    neg = [m for m, t in zip(margins, truth) if not t]
    wins = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def reachable(points: list[tuple[float, float]], low: float = LOW, high: float = HIGH) -> str:
    ok = [(tpr, fpr) for tpr, fpr in points if within(tpr, fpr, low, high)]
    if not ok:
        return "no boundary"
    fprs = [f for _, f in ok]
    return f"boundaries with FPR {min(fprs):.3f}-{max(fprs):.3f}"


def main() -> None:
    print("equal-variance binormal scores: is there one boundary within 0.5-2x at every prevalence?")
    print("| AUC | 5-90% | 15-90% |")
    print("|---|---|---|")
    for a in (0.70, 0.75, 0.80, 0.84, 0.85, 0.88, 0.90, 0.95):
        pts = binormal_points(a)
        print(f"| {a:.2f} | {reachable(pts)} | {reachable(pts, 0.15)} |")
    for path in sys.argv[1:]:
        results = json.loads(open(path).read())
        results = results["results"] if isinstance(results, dict) else results
        print(f"\n{path}: the measured scores of each 2-label task")
        print("| task | config | AUC | 5-90% | 15-90% |")
        print("|---|---|---|---|---|")
        for r in results:
            rows = [(s, t) for s, t in r.get("scores") or [] if s and len(s) == 2]
            if len(rows) < 20:
                continue
            first = next(iter(rows[0][0]))
            margins = [s[first] - [v for k, v in s.items() if k != first][0] for s, _ in rows]
            truth = [str(t) == str(first) or t is True for _, t in rows]
            if not any(truth) or all(truth):
                continue
            pts = score_points(margins, truth)
            print(f"| {r.get('task')} | {r.get('config')} | {auc_of(margins, truth):.2f} | {reachable(pts)} | "
                  f"{reachable(pts, 0.15)} |")


if __name__ == "__main__":
    main()
