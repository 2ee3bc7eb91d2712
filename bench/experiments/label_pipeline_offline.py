"""Experiment (issue 43): the whole adaptive pipeline offline on dumped scores: choose a shape on a
spread sample by a label-free criterion, then decide every row with a mixture, and compare
with the truth. Reads the JSON of label_shapes_probe*.py / label_shapes_offline.py.

    python bench/experiments/label_pipeline_offline.py bench/out/shapes_probe2_b.json ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from label_decisions_offline import auc, f1, mi  # noqa: E402

from relserve.labels.mixture import fit_mixture  # noqa: E402

SAMPLE = 32


def sig(x):
    return 1 / (1 + np.exp(-x))


def margins(rows):
    ok = [i for i, r in enumerate(rows) if r[0] is not None]
    a, b = list(rows[ok[0]][0])
    return ok, np.array([rows[i][0][a] - rows[i][0][b] for i in ok])


def main(paths: list[str], only: str = "") -> None:
    data = {}
    for p in paths:
        data.update(json.load(open(p)))
    for task, res in data.items():
        truth = np.asarray(res["truth"], bool)
        n = len(truth)
        sample = [i * n // SAMPLE for i in range(SAMPLE)] if n > SAMPLE else list(range(n))
        print(f"\n== {task} ({res['group']}) prevalence {truth.mean():.3f} n={n}")
        print(f"{'shape':20} {'AUC':>5} {'sMI':>6} {'MI':>6} | {'w':>5} {'sep':>5} {'gain':>6} kept  F1/acc")
        for name, rows in res["shapes"].items():
            if only and only not in name:
                continue
            ok, m = margins(rows)
            tr = truth[ok]
            smi = mi(sig(m[[ok.index(i) for i in sample if i in ok]]))
            mix = fit_mixture(list(m))
            kept = np.array([mix.posterior(x) > 0.5 for x in m])
            q = f1(kept, tr) if tr.mean() < 0.4 else (kept == tr).mean()
            print(f"{name:20} {auc(m, tr):5.2f} {smi:6.3f} {mi(sig(m)):6.3f} | {mix.weight:5.2f} {mix.separation:5.2f} "
                  f"{mix.gain:6.3f} {kept.sum() / max(tr.sum(), 1):4.2f}x {q:4.2f}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--only=")]
    only = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--only=")), "")
    main(args, only)
