"""Experiment (issue 43): the second probe's shapes scored with transformers instead of the engine
(same weights, float32; labels read as the engine's "split" norm reads one-token-apart labels:
each spelling's first token, spellings log-sum-exp'd, log-softmax over the labels). Writes the
same JSON as label_shapes_probe2.py.

    python bench/experiments/label_shapes_offline.py --tasks am_health_10 --out bench/out/offline_am_health_10.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ANTONYMS = {"positive": "negative", "negative": "positive", "satisfied": "dissatisfied", "happy": "unhappy",
            "unhappy": "happy"}
SAMPLE = 32
FIELDS = ("Sentiment", "Topic", "Category", "Answer")


class Scorer:
    def __init__(self, threads: int) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from relserve.model import resolve_model

        torch.set_num_threads(threads)
        path = resolve_model(None).path
        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()

    def first_ids(self, label: str) -> list[int]:
        forms = [label, label[:1].upper() + label[1:]]
        return list(dict.fromkeys(self.tok.encode(" " + f)[0] for f in forms))

    def score(self, prompts: list[str], field: str, labels: list[str], batch: int = 8):
        ids = [self.first_ids(lab) for lab in labels]
        texts = [p + "\n" + field for p in prompts]
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        res: dict[int, list] = {}
        with torch.no_grad():
            for k in range(0, len(order), batch):
                idx = order[k:k + batch]
                enc = [self.tok.encode(texts[i])[-1800:] for i in idx]
                n = max(len(e) for e in enc)
                x = torch.full((len(enc), n), self.tok.pad_token_id or 0)
                att = torch.zeros((len(enc), n), dtype=torch.long)
                for j, e in enumerate(enc):
                    x[j, : len(e)] = torch.tensor(e)
                    att[j, : len(e)] = 1
                logits = self.model(input_ids=x, attention_mask=att).logits
                for j, e in enumerate(enc):
                    lp = torch.log_softmax(logits[j, len(e) - 1], -1).numpy()
                    raw = [float(np.logaddexp.reduce(lp[f])) for f in ids]
                    total = float(np.logaddexp.reduce(raw))
                    res[idx[j]] = [{lab: r - total for lab, r in zip(labels, raw)}, total]
        return [res[i] for i in range(len(prompts))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--tasks", default="")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    from prevalence_tasks import balanced_filter_tasks, prevalence_tasks

    from relserve.functions import make_call
    from relserve.prompt_rendering import Renderer

    tasks = prevalence_tasks(args.rows) + balanced_filter_tasks(args.rows)
    if args.tasks:
        tasks = [t for t in tasks if t.name in args.tasks.split(",")]
    sc = Scorer(args.threads)

    def examples(prompts, field, labels):
        n = len(prompts)
        idx = [i * n // SAMPLE for i in range(SAMPLE)] if n > SAMPLE else list(range(n))
        got = sc.score([prompts[i] for i in idx], field, labels)
        m = np.array([g[0][labels[0]] - g[0][labels[1]] for g in got])
        m = m - m.mean()
        top, bottom = idx[int(np.argmax(m))], idx[int(np.argmin(m))]
        return "".join(f"{prompts[i]}\n{field} {lab}\n\n" for i, lab in ((top, labels[0]), (bottom, labels[1])))

    out = {}
    for task in tasks:
        call = make_call("llm_filter", task.template, prompt_shape="completion")
        render = Renderer(call)
        parts = [render.shaped.parts(v) for v in task.values]
        render.shaped.move_chars = 0
        heads = [render.shaped.parts(v)[0].rstrip("\n") for v in task.values]
        yn = [h + q for h, q in parts]
        cf_vals = [("N/A",) * len(task.values[0]), ("",) * len(task.values[0])]
        cf_heads = [render.shaped.parts(v)[0].rstrip("\n") for v in cf_vals]
        shapes = {"yn_completion": (yn, "Answer:", ["yes", "no"])}
        other = ANTONYMS.get(task.concept, "other")
        for f in FIELDS:
            shapes[f"pair_{f}"] = (heads, f"{f}:", [task.concept, other])
        res = {"truth": task.truth, "group": task.group, "concept": task.concept, "contrast": other, "shapes": {},
               "content_free": {}}
        for name, (prompts, field, labels) in shapes.items():
            t0 = time.time()
            res["shapes"][name] = sc.score(prompts, field, labels)
            cf = cf_heads if name.startswith("pair") else [render.shaped(v) for v in cf_vals]
            res["content_free"][name] = sc.score(cf, field, labels)
            ex = examples(prompts, field, labels)
            res["shapes"][name + "+ex"] = sc.score([ex + p for p in prompts], field, labels)
            res["content_free"][name + "+ex"] = sc.score([ex + p for p in cf], field, labels)
            print(f"{task.name} {name}: {time.time() - t0:.1f}s", flush=True)
        out[task.name] = res
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
