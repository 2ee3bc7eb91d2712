"""How relQueries of fewer than 16 rows fare per prompt shape (issue 22, fourth pass).

Below 16 prompts a filter / classify runs as ``calibrate``: each row's label scores are divided by
the content-free prior, so a row's pick does not depend on the other rows of its relQuery and
scoring every row of a task alone gives the accuracy of any small relQuery over it. Scores with
transformers (bench/quality_offline.py), prompts and probes rendered by relserve itself.

    .venv/bin/python bench/experiments/quality_tiny.py --shapes completion,question_first
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/
import bench_quality  # noqa: E402
from quality_offline import load_model, score_rows  # noqa: E402

from relserve.functions import make_call  # noqa: E402
from relserve.labels.prior import content_free_prompts  # noqa: E402
from relserve.prompt_rendering import Renderer  # noqa: E402
from relserve.prompt_shapes import ANSWER_FIELD  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="completion,question_first")
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--group", default="tuning")
    args = ap.parse_args()
    torch.set_num_threads(2)
    tok, model = load_model()
    tasks = [t for t in bench_quality.tasks(args.rows) if t["group"] == args.group]
    for shape in args.shapes.split(","):
        accs = []
        for task in tasks:
            labels = ["yes", "no"] if task["fn"] == "llm_filter" else task["labels"]
            call = make_call(task["fn"], task["template"], labels=task["labels"] if task["fn"] == "llm_classify" else None,
                             prompt_shape=shape, method="calibrate")
            render = Renderer(call)
            rows = task["table"].to_dicts()
            prompts = [render(tuple(r[c] for c in call.template.columns)) + "\n" + ANSWER_FIELD for r in rows]
            probes = [p + "\n" + ANSWER_FIELD for p in content_free_prompts(call)]
            forms = [[" " + label, " " + label[:1].upper() + label[1:]] for label in labels]
            scores, probe_scores = score_rows(tok, model, prompts, forms), score_rows(tok, model, probes, forms)
            prior = [sum(math.exp(x[j]) for x in probe_scores) for j in range(len(labels))]
            prior = [p / sum(prior) for p in prior]
            # a filter's truth is a label of the task's table: its first label is "yes"
            truth = [(0 if r["truth"] == task["labels"][0] else 1) if task["fn"] == "llm_filter" else labels.index(r["truth"])
                     for r in rows]
            picks = [max(range(len(labels)), key=lambda j: x[j] - math.log(prior[j])) for x in scores]
            acc = sum(a == t for a, t in zip(picks, truth)) / len(truth)
            top = max(picks.count(j) for j in range(len(labels))) / len(picks)
            accs.append(acc)
            print(f"{shape:15} {task['name']:13} calibrate {acc:.0%} top share {top:.0%}", flush=True)
        print(f"{shape:15} mean {sum(accs) / len(accs):.1%}", flush=True)


if __name__ == "__main__":
    main()
