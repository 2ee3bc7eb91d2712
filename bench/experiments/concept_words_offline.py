"""Experiment (issue 43): "ask for the word". After "<row>\n<Field>:", read the model's next-token
distribution; the words it names most for a sample of rows are the concept's competitors; a row is
"yes" when the concept's first token beats every competitor (the model's own answer, no prior to
estimate). Transformers, float32, offline.

    python bench/experiments/concept_words_offline.py --tasks am_health_10,rt_horror --fields Topic,Category
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from label_decisions_offline import auc, f1  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default="")
    ap.add_argument("--fields", default="Topic,Category,Sentiment,Type,Answer")
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--sample", type=int, default=32)
    ap.add_argument("--top", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)

    from prevalence_tasks import balanced_filter_tasks, prevalence_tasks
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from relserve.functions import make_call
    from relserve.model import resolve_model
    from relserve.prompt_rendering import Renderer

    path = resolve_model(None).path
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    tasks = prevalence_tasks(args.rows) + balanced_filter_tasks(args.rows)
    if args.tasks:
        tasks = [t for t in tasks if t.name in args.tasks.split(",")]

    for task in tasks:
        render = Renderer(make_call("llm_filter", task.template, prompt_shape="completion"))
        render.shaped.move_chars = 0
        heads = [render.shaped.parts(v)[0].rstrip("\n")[:1500] for v in task.values]
        truth = np.array(task.truth)
        cid = tok.encode(" " + task.concept)[0]
        print(f"\n== {task.name} ({task.group}) prev {truth.mean():.2f} concept {task.concept!r} -> {tok.decode([cid])!r}")
        for field in args.fields.split(","):
            lps = []
            with torch.no_grad():
                for h in heads:
                    ids = tok(h + f"\n{field}:", return_tensors="pt").input_ids
                    lps.append(torch.log_softmax(model(ids).logits[0, -1], -1).numpy())
            lps = np.stack(lps)
            n = len(heads)
            sample = [i * n // args.sample for i in range(args.sample)]
            counts: dict[int, float] = {}
            for i in sample:
                for t in np.argsort(-lps[i])[: args.top]:
                    counts[int(t)] = counts.get(int(t), 0) + 1
            rivals = [t for t in sorted(counts, key=lambda t: -counts[t]) if t != cid][:20]
            rival = np.logaddexp.reduce(lps[:, rivals], axis=1)
            best_rival = lps[:, rivals].max(axis=1)
            score = lps[:, cid] - rival
            kept = lps[:, cid] > best_rival
            raw = lps[:, cid]
            print(f"  {field:10} AUC raw {auc(raw, truth):.2f} vs-rivals {auc(score, truth):.2f} | argmax kept "
                  f"{kept.sum() / max(truth.sum(), 1):.2f}x F1 {f1(kept, truth):.2f} acc {(kept == truth).mean():.2f} | "
                  f"rivals {[tok.decode([t]) for t in rivals[:8]]}")


if __name__ == "__main__":
    main()
