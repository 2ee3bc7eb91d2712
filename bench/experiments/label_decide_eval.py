"""Experiment (issue 43): relserve's own reading (relserve/labels/decide.py) with each
fallback share for one crowd, on dumped scores; the layout chosen as the adaptive method does.

    python bench/experiments/label_decide_eval.py bench/out/shapes_probe2_*.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from label_decisions_offline import auc, f1  # noqa: E402

from relserve.labels import decide  # noqa: E402
from relserve.labels.adaptive import mutual_information  # noqa: E402

SAMPLE = 24
SHARES = (0.5, 0.3, 0.2, 0.15, 0.11)


def main(paths):
    data = {}
    for p in paths:
        data.update(json.load(open(p)))
    for task, res in data.items():
        t = np.asarray(res["truth"], bool)
        n = len(t)
        sample = list(range(n)) if n <= SAMPLE else [i * n // SAMPLE for i in range(SAMPLE)]
        base = [k for k in res["shapes"] if "+ex" not in k]

        def margins(key, idx=None, res=res):
            rows = res["shapes"][key]
            a, b = list(rows[0][0])
            return np.array([rows[i][0][a] - rows[i][0][b] for i in (idx if idx is not None else range(len(rows)))])

        info = {k: mutual_information(list(margins(k, sample))) for k in base}
        chosen = max(base, key=lambda k: (round(info[k], 9), -base.index(k)))
        key = chosen + "+ex" if n > SAMPLE and chosen + "+ex" in res["shapes"] else chosen
        m = margins(key)
        best = max(auc(margins(k), t) for k in res["shapes"])
        cells = []
        for share in SHARES:
            decide.WEAK_SHARE = share
            reading, mix = decide.read(list(m))
            p = np.array(decide.posteriors(list(m), reading, mix, list(m)))
            k = p > 0.5
            q = f"{k.sum() / t.sum():.2f}x/{f1(k, t):.2f}" if t.mean() < 0.4 else f"acc {(k == t).mean():.2f}"
            cells.append(f"{share}: {q}")
        print(f"{task:17} {res['group']:6} {t.mean():.2f} {key:18} AUC {auc(m, t):.2f} (best {best:.2f}) "
              f"{reading.rule:10} prior {reading.prior:.2f} sep {reading.separation:.2f} | " + " | ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1:])
