"""Experiment (issue 43): the adaptive pipeline's candidate decision rules side by side on dumped
scores (label_shapes_probe2.py / label_shapes_offline.py output): the layout chosen on a spread
sample without examples by mutual information, then every row behind that layout's examples
decided by each rule.

    python bench/experiments/label_rules_compare.py bench/out/shapes_probe2_*.json
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from label_decisions_offline import auc, f1, gmm2, mi  # noqa: E402

from relserve.labels.mixture import fit_mixture  # noqa: E402

SAMPLE = 24


def sig(x):
    return 1 / (1 + np.exp(-x))


def crossing(w, m0, s0, m1, s1):
    grid = np.linspace(m0, m1, 4001)
    d = (np.log(w) - np.log(s1) - (grid - m1) ** 2 / (2 * s1 * s1)) - (np.log(1 - w) - np.log(s0) - (grid - m0) ** 2 / (2 * s0 * s0))
    idx = np.where(np.diff(np.sign(d)))[0]
    return grid[idx[0]] if len(idx) else (m0 + m1) / 2


def rules(m: np.ndarray) -> dict[str, np.ndarray]:
    n = len(m)
    out = {"raw": m > 0, "mean": m > m.mean()}
    eq = fit_mixture(list(m))
    small = min(eq.weight, 1 - eq.weight) * n
    ok_eq = eq.separation >= 0.85 and eq.gain >= 0.05 and small >= max(3, 0.02 * n)
    out["eq|median"] = np.array([eq.posterior(x) > .5 for x in m]) if ok_eq else m > np.median(m)
    out["eq|raw"] = np.array([eq.posterior(x) > .5 for x in m]) if ok_eq else m > 0
    w, m0, s0, m1, s1, _ = gmm2(m)
    sep = 0.5 * (1 + math.erf((m1 - m0) / math.sqrt(2 * (s0 * s0 + s1 * s1))))
    ll1 = eq.loglik_one
    # gain of the unequal fit
    l1 = np.log(w) - 0.5 * np.log(2 * np.pi * s1 * s1) - (m - m1) ** 2 / (2 * s1 * s1)
    l0 = np.log(1 - w) - 0.5 * np.log(2 * np.pi * s0 * s0) - (m - m0) ** 2 / (2 * s0 * s0)
    gain = float(np.mean(np.logaddexp(l0, l1))) - ll1
    small_u = min(w, 1 - w) * n
    ok_u = sep >= 0.85 and gain >= 0.05 and small_u >= max(3, 0.02 * n)
    thr = crossing(w, m0, s0, m1, s1)
    out["uneq|raw"] = (m > thr) if ok_u else m > 0
    out["uneq|mean"] = (m > thr) if ok_u else m > m.mean()
    out["uneq_always"] = m > thr
    top20 = m > np.quantile(m, 0.8)
    out["eq|top20"] = np.array([eq.posterior(x) > .5 for x in m]) if ok_eq else top20
    out["uneq|top20"] = (m > thr) if ok_u else top20
    out["read"] = np.array([ok_eq, ok_u])
    return out


def main(paths):
    data = {}
    for p in paths:
        data.update(json.load(open(p)))
    names = None
    for task, res in data.items():
        t = np.asarray(res["truth"], bool)
        n = len(t)
        sample = list(range(n)) if n <= SAMPLE else [i * n // SAMPLE for i in range(SAMPLE)]
        base = [k for k in res["shapes"] if "+ex" not in k]
        smi = {}
        for k in base:
            rows = res["shapes"][k]
            a, b = list(rows[0][0])
            m = np.array([rows[i][0][a] - rows[i][0][b] for i in sample])
            smi[k] = mi(sig(m))
        chosen = max(base, key=lambda k: (round(smi[k], 9), -base.index(k)))
        key = chosen + "+ex" if n > SAMPLE and chosen + "+ex" in res["shapes"] else chosen
        rows = res["shapes"][key]
        a, b = list(rows[0][0])
        m = np.array([r[0][a] - r[0][b] for r in rows])
        rs = rules(m)
        names = list(rs)
        best_auc = max(auc(np.array([r[0][list(r[0])[0]] - r[0][list(r[0])[1]] for r in res["shapes"][k]]), t) for k in res["shapes"])
        cells = []
        for name in names:
            k = rs[name]
            if name == "read":
                cells.append(f"eq {'2' if k[0] else '1'} uneq {'2' if k[1] else '1'}")
                continue
            if t.mean() < 0.4:
                cells.append(f"{k.sum() / t.sum():.2f}x/{f1(k, t):.2f}")
            else:
                cells.append(f"acc {(k == t).mean():.2f}")
        print(f"{task:17} {res['group']:6} {t.mean():.2f} {key:18} AUC {auc(m, t):.2f} (best {best_auc:.2f}) | " + " | ".join(f"{nm} {c}" for nm, c in zip(names, cells)))


if __name__ == "__main__":
    main(sys.argv[1:])
