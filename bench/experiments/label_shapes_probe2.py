"""Experiment (issue 43), second probe: concept against its antonym, and shapes behind examples
the model labelled itself, on the natural-prevalence and the balanced filters.

    python bench/experiments/label_shapes_probe2.py --out bench/out/shapes_probe2.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ANTONYMS = {"positive": "negative", "negative": "positive", "satisfied": "dissatisfied", "happy": "unhappy",
            "unhappy": "happy"}
SAMPLE = 32


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/out/shapes_probe2.json")
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--tasks", default="")
    args = ap.parse_args()

    import numpy as np
    from prevalence_tasks import balanced_filter_tasks, prevalence_tasks

    from relserve import Engine
    from relserve.functions import make_call
    from relserve.prompt_rendering import Renderer
    from relserve.relquery import RelQuery

    tasks = prevalence_tasks(args.rows) + balanced_filter_tasks(args.rows)
    if args.tasks:
        tasks = [t for t in tasks if t.name in args.tasks.split(",")]
    engine = Engine()

    def score(prompts, field, labels):
        rq = RelQuery.from_prompts(prompts, choices=labels, score_labels=True, prompt_shape="completion",
                                   answer_field=field, on_error="null")
        rows = sorted(engine.submit(rq).result().rows, key=lambda r: r.index)
        return [[r.label_logprobs, r.label_mass] for r in rows]

    def examples(prompts, field, labels):
        """Per label, the sampled row surest of it after mean subtraction, as worked examples."""
        n = len(prompts)
        idx = [i * n // SAMPLE for i in range(SAMPLE)] if n > SAMPLE else list(range(n))
        got = score([prompts[i] for i in idx], field, labels)
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
        for f in ("Sentiment", "Topic", "Category", "Answer"):
            shapes[f"pair_{f}"] = (heads, f"{f}:", [task.concept, other])
        res = {"truth": task.truth, "group": task.group, "concept": task.concept, "contrast": other, "shapes": {},
               "content_free": {}}
        for name, (prompts, field, labels) in list(shapes.items()):
            t0 = time.time()
            res["shapes"][name] = score(prompts, field, labels)
            cf = cf_heads if name.startswith("pair") else [render.shaped(v) for v in cf_vals]
            res["content_free"][name] = score(cf, field, labels)
            ex = examples(prompts, field, labels)
            res["shapes"][name + "+ex"] = score([ex + p for p in prompts], field, labels)
            print(f"{task.name} {name}: {time.time() - t0:.1f}s", flush=True)
        out[task.name] = res
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out))
    engine.close()


if __name__ == "__main__":
    main()
