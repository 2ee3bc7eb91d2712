"""Experiment (issue 43): decision rules and label-free shape criteria on dumped label scores
(bench/experiments/label_shapes_probe.py), offline.

    python bench/experiments/label_decisions_offline.py bench/out/shapes_probe.json
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np


def auc(scores, truth) -> float:
    s = np.asarray(scores, float)
    t = np.asarray(truth, bool)
    pos, neg = s[t], s[~t]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    # Mann-Whitney with ties
    order = np.argsort(np.concatenate([pos, neg]), kind="mergesort")
    allv = np.concatenate([pos, neg])[order]
    ranks = np.empty(len(allv))
    i = 0
    while i < len(allv):
        j = i
        while j + 1 < len(allv) and allv[j + 1] == allv[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2 + 1
        i = j + 1
    r = np.empty(len(allv))
    r[order] = ranks
    return float((r[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def gmm2(x, iters: int = 200, floor: float = 1e-3):
    """Two-component 1-D Gaussian mixture by EM, several starts; (weight of the upper
    component, mu0, s0, mu1, s1, posterior of the upper component per point)."""
    x = np.asarray(x, float)
    n = len(x)
    best = None
    spread = max(x.std(), 1e-6)
    fl = (floor * spread) ** 2 + 1e-12
    for q in (0.5, 0.7, 0.8, 0.9, 0.95):
        cut = np.quantile(x, q)
        up = x >= cut
        if up.all() or (~up).all():
            continue
        w = up.mean()
        m0, m1 = x[~up].mean(), x[up].mean()
        v0, v1 = max(x[~up].var(), fl), max(x[up].var(), fl)
        ll_old = -np.inf
        for _ in range(iters):
            l0 = np.log(1 - w) - 0.5 * np.log(2 * np.pi * v0) - (x - m0) ** 2 / (2 * v0)
            l1 = np.log(w) - 0.5 * np.log(2 * np.pi * v1) - (x - m1) ** 2 / (2 * v1)
            m = np.maximum(l0, l1)
            ll = (m + np.log(np.exp(l0 - m) + np.exp(l1 - m))).sum()
            r = np.exp(l1 - m) / (np.exp(l0 - m) + np.exp(l1 - m))
            w = min(max(r.mean(), 1 / n), 1 - 1 / n)
            m0 = ((1 - r) * x).sum() / (1 - r).sum()
            m1 = (r * x).sum() / r.sum()
            v0 = max(((1 - r) * (x - m0) ** 2).sum() / (1 - r).sum(), fl)
            v1 = max((r * (x - m1) ** 2).sum() / r.sum(), fl)
            if ll - ll_old < 1e-9:
                break
            ll_old = ll
        if m1 < m0:
            m0, m1, v0, v1, w, r = m1, m0, v1, v0, 1 - w, 1 - r
        if best is None or ll > best[0]:
            best = (ll, w, m0, math.sqrt(v0), m1, math.sqrt(v1), r)
    return best[1:]


def sep_auc(m0, s0, m1, s1) -> float:
    return 0.5 * (1 + math.erf((m1 - m0) / math.sqrt(2 * (s0 * s0 + s1 * s1))))


def em_prior(p, pi_t: float = 0.5, iters: int = 200):
    """Saerens et al. 2002: the prior of class 1 given posteriors ``p`` made under prior pi_t."""
    p = np.clip(np.asarray(p, float), 1e-9, 1 - 1e-9)
    pi = pi_t
    for _ in range(iters):
        a = pi / pi_t * p
        b = (1 - pi) / (1 - pi_t) * (1 - p)
        post = a / (a + b)
        new = post.mean()
        if abs(new - pi) < 1e-9:
            break
        pi = new
    return pi, post


def f1(kept, truth):
    kept = np.asarray(kept, bool)
    t = np.asarray(truth, bool)
    tp = (kept & t).sum()
    if tp == 0:
        return 0.0
    p, r = tp / kept.sum(), tp / t.sum()
    return 2 * p * r / (p + r)


def mi(p):
    p = np.clip(np.asarray(p, float), 1e-9, 1 - 1e-9)

    def h(q):
        return -(q * np.log(q) + (1 - q) * np.log(1 - q))

    return float(h(p.mean()) - h(p).mean())


def main(path: str) -> None:
    data = json.load(open(path))
    for task, res in data.items():
        truth = np.asarray(res["truth"], bool)
        print(f"\n== {task} ({res['group']}) prevalence {truth.mean():.3f}, concept {res['concept']!r}")
        print(f"{'shape':22} {'AUC':>5} {'sepAUC':>6} {'MI':>6} {'gmm_pi':>6} | {'mean: kept F1':>13} | {'gmm: kept F1':>12} | {'em: kept F1':>12} | raw kept")
        for name, rows in res["shapes"].items():
            ok = [i for i, r in enumerate(rows) if r[0] is not None]
            lp = [rows[i][0] for i in ok]
            tr = truth[ok]
            labels = list(lp[0])
            a, b = labels[0], labels[1]
            margin = np.array([d[a] - d[b] for d in lp])
            if name.startswith("concept"):
                score = np.array([d[a] + rows[i][1] for d, i in zip(lp, ok)])
            else:
                score = margin
            w, m0, s0, m1, s1, post = gmm2(score)
            # mean subtraction (batch calibration) on the 2-label margin
            mean_kept = margin - margin.mean() > 0
            # EM prior on batch-calibrated probabilities
            pcal = 1 / (1 + np.exp(-(margin - margin.mean())))
            pi, post_em = em_prior(pcal)
            em_kept = post_em > 0.5
            gmm_kept = post > 0.5
            raw_kept = margin > 0
            n_true = tr.sum()
            print(f"{name:22} {auc(score, tr):5.2f}/{auc(margin, tr):4.2f} {sep_auc(m0, s0, m1, s1):6.2f} {mi(1 / (1 + np.exp(-margin))):6.3f} {w:6.2f} | "
                  f"{mean_kept.sum() / n_true:5.2f}x {f1(mean_kept, tr):5.2f} | {gmm_kept.sum() / n_true:5.2f}x {f1(gmm_kept, tr):4.2f} | "
                  f"{em_kept.sum() / n_true:5.2f}x {f1(em_kept, tr):4.2f} | {raw_kept.sum() / n_true:5.2f}x")


if __name__ == "__main__":
    main(sys.argv[1])
