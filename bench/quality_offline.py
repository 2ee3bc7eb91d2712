"""Offline label scoring with transformers, for trying scoring layouts fast (issue 22).

Scores the rows of bench/bench_quality.py's tasks the way the engine does (prompt tokens, then
each surface form's tokens; mean token log-probability per form, log-sum-exp over a label's forms,
log-softmax over labels), with SmolLM2 in float32 on the CPU, for several *layouts* (how the
scoring request is written around the row). Prints raw and batch-calibrated accuracy per task,
tuning and check groups apart. The real-engine figures come from bench/bench_quality.py; this
script only narrows the search before a layout is built into relserve.

    python bench/quality_offline.py --rows 100 --layouts current,question_first
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_quality  # noqa: E402


def load_model():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from relserve.model import resolve_model

    path = resolve_model(None).path
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    model.eval()
    return tok, model


def score_rows(tok, model, prompts: list[str], forms: list[list[str]], prefix: str = "",
               normalize: bool = True) -> list[list[float]]:
    """Per prompt, per label, the label's log-softmaxed score (see the module docstring); with
    ``normalize=False`` its raw log-probability, which says how likely the model is to say it.

    The prompt runs once; a form of one token is read from its last position, a longer form
    continues from a copy of the prompt's KV cache (as the engine's prefix cache does)."""
    import copy

    form_ids = [[tok.encode(f) for f in label_forms] for label_forms in forms]
    shared = None
    if prefix:
        # the prompts' common prefix (examples) runs once, as the engine's prefix cache does
        with torch.no_grad():
            shared = model(input_ids=torch.tensor([tok.encode(prefix)]), use_cache=True).past_key_values
    out = []
    for prompt in prompts:
        assert prompt.startswith(prefix)
        p_ids = torch.tensor([tok.encode(prompt[len(prefix):])])
        with torch.no_grad():
            res = model(input_ids=p_ids, past_key_values=copy.deepcopy(shared), use_cache=True) if shared is not None \
                else model(input_ids=p_ids, use_cache=True)
        first = torch.log_softmax(res.logits[0, -1].float(), -1)
        raw = []
        for label_forms in form_ids:
            vals = []
            for f in label_forms:
                terms = [first[f[0]].item()]
                if len(f) > 1:
                    cache = copy.deepcopy(res.past_key_values)
                    with torch.no_grad():
                        more = model(input_ids=torch.tensor([f[:-1]]), past_key_values=cache, use_cache=True)
                    lp = torch.log_softmax(more.logits[0].float(), -1)
                    terms += [lp[k, f[k + 1]].item() for k in range(len(f) - 1)]
                vals.append(sum(terms) / len(terms))
            m = max(vals)
            raw.append(m + math.log(sum(math.exp(v - m) for v in vals)))
        m = max(raw)
        total = m + math.log(sum(math.exp(v - m) for v in raw)) if normalize else 0.0
        out.append([r - total for r in raw])
    return out


def evaluate(scores: list[list[float]], truth: list[int], n_labels: int) -> dict:
    means = [sum(s[j] for s in scores) / len(scores) for j in range(n_labels)]
    raw = [max(range(n_labels), key=lambda j: s[j]) for s in scores]
    cal = [max(range(n_labels), key=lambda j: s[j] - means[j]) for s in scores]
    res = dict(raw=sum(a == t for a, t in zip(raw, truth)) / len(truth),
               batch=sum(a == t for a, t in zip(cal, truth)) / len(truth),
               top=max(cal.count(j) for j in range(n_labels)) / len(truth))
    if n_labels == 2:
        res["auc"] = bench_quality.auc([s[0] - s[1] for s in scores], [t == 0 for t in truth])
    return res


def main() -> None:
    import layouts as L  # bench/layouts.py: the layouts tried

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--layouts", default="current")
    ap.add_argument("--tasks", default="")
    args = ap.parse_args()
    torch.set_num_threads(2)
    tok, model = load_model()
    tasks = bench_quality.tasks(args.rows)
    if args.tasks:
        tasks = [t for t in tasks if t["name"] in args.tasks.split(",")]
    for layout in args.layouts.split(","):
        t0 = time.monotonic()
        print(f"== {layout}")
        for task in tasks:
            labels = ["yes", "no"] if task["fn"] == "llm_filter" else task["labels"]
            rows = task["table"].to_dicts()
            if layout in L.TWO_PASS:
                prompts, forms = L.TWO_PASS[layout](task, rows, labels,
                                                    lambda p, f, raw=False: score_rows(tok, model, p, f, normalize=not raw))
            else:
                prompts, forms = L.LAYOUTS[layout](task, rows, labels)
            # a filter's truth is a label of the task's table: its first label is "yes"
            if task["fn"] == "llm_filter":
                yes_label = task["labels"][0]
                truth = [0 if (r["truth"] == yes_label or r["truth"] is True or r["truth"] == "yes") else 1 for r in rows]
            else:
                truth = [labels.index(r["truth"]) for r in rows]
            s = score_rows(tok, model, prompts, forms, prefix=os.path.commonprefix(prompts).rpartition("\n\n")[0] + "\n\n" if "\n\n" in os.path.commonprefix(prompts) else "")
            e = evaluate(s, truth, len(labels))
            auc = f" auc {e['auc']:.2f}" if "auc" in e else ""
            print(f"  {task['group']:6} {task['name']:14} raw {e['raw']:.0%} batch {e['batch']:.0%} top {e['top']:.0%}{auc}", flush=True)
        print(f"  ({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
