"""Experiment (issue 43): decision rules and shape criteria on the second probe's scores
(bench/experiments/label_shapes_probe2.py), offline, with the content-free probes.

    python bench/experiments/label_rules_offline.py bench/out/shapes_probe2.json [--synthetic]
"""

from __future__ import annotations

import json
import sys

import numpy as np
from label_decisions_offline import auc, em_prior, f1, gmm2, mi


def sig(x):
    return 1 / (1 + np.exp(-x))


def rules(margin: np.ndarray, cf: float) -> dict[str, np.ndarray]:
    """Each rule's kept rows from a filter's margins (label 0 minus label 1) and the content-free
    margin."""
    out = {}
    out["mean"] = margin - margin.mean() > 0
    out["cf"] = margin - cf > 0
    _, post = em_prior(sig(margin - cf))
    out["em_cf"] = post > 0.5
    _, post = em_prior(sig(margin - margin.mean()))
    out["em_mean"] = post > 0.5
    w, m0, s0, m1, s1, post = gmm2(margin)
    out["gmm"] = post > 0.5
    # EM prior from cf-calibrated posteriors, then keep the top pi*N by margin
    pi, _ = em_prior(sig(margin - cf))
    k = int(round(pi * len(margin)))
    thr = np.sort(margin)[::-1][k - 1] if k > 0 else np.inf
    out["top_em_cf"] = margin >= thr
    return out


def main(paths: list[str]) -> None:
    data = {}
    for path in paths:
        data.update(json.load(open(path)))
    names = ["mean", "cf", "em_cf", "em_mean", "gmm", "top_em_cf"]
    for task, res in data.items():
        truth = np.asarray(res["truth"], bool)
        print(f"\n== {task} ({res['group']}) prevalence {truth.mean():.3f}, {res['concept']!r} vs {res['contrast']!r}")
        print(f"{'shape':22} {'AUC':>5} {'MI':>6} {'cfm':>6} | " + " | ".join(f"{n:>12}" for n in names))
        for name, rows in res["shapes"].items():
            ok = [i for i, r in enumerate(rows) if r[0] is not None]
            lp = [rows[i][0] for i in ok]
            tr = truth[ok]
            a, b = list(lp[0])
            margin = np.array([d[a] - d[b] for d in lp])
            base = name.removesuffix("+ex")
            cfr = res["content_free"][base]
            cf = float(np.mean([r[0][a] - r[0][b] for r in cfr])) if "+ex" not in name else float("nan")
            if "+ex" in name:
                cf = float(np.median(margin))  # no content-free probe behind the examples: stand-in
            kept = rules(margin, cf)
            n_true = max(tr.sum(), 1)
            cells = [f"{kept[n].sum() / n_true:5.2f}x {f1(kept[n], tr):4.2f}" if tr.mean() < 0.4 else
                     f"{kept[n].sum() / n_true:5.2f}x {(kept[n] == tr).mean():4.2f}" for n in names]
            print(f"{name:22} {auc(margin, tr):5.2f} {mi(sig(margin)):6.3f} {cf:6.2f} | " + " | ".join(cells))


def synthetic() -> None:
    """A strong model: margins that separate cleanly, with noise, at several prevalences."""
    rng = np.random.default_rng(0)
    names = ["mean", "cf", "em_cf", "em_mean", "gmm", "top_em_cf"]
    for prev in (0.02, 0.10, 0.25, 0.5):
        for shift in (0.0, 3.0, -3.0):
            n = 200
            t = np.zeros(n, bool)
            t[: max(1, round(prev * n))] = True
            margin = np.where(t, rng.normal(6, 1.5, n), rng.normal(-6, 1.5, n)) + shift
            kept = rules(margin, 0.0)
            print(f"prev {prev:4.2f} shift {shift:+.0f}: " + " ".join(f"{k}={int((kept[k] != t).sum())}" for k in names))


if __name__ == "__main__":
    if "--synthetic" in sys.argv:
        synthetic()
    else:
        main(sys.argv[1:])
