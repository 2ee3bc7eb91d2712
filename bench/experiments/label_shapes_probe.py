"""Experiment (issue 43): per-row label scores of natural-prevalence filters under candidate
request shapes, dumped to JSON for offline study of decision rules and label-free shape choice.

    python bench/experiments/label_shapes_probe.py --out bench/out/shapes_probe.json
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

FIELDS = ("Topic", "Category", "Sentiment", "Type", "Answer")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/out/shapes_probe.json")
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--tasks", default="")
    args = ap.parse_args()

    from prevalence_tasks import prevalence_tasks

    from relserve import Engine
    from relserve.functions import make_call
    from relserve.prompt_rendering import Renderer
    from relserve.relquery import RelQuery

    tasks = prevalence_tasks(args.rows)
    if args.tasks:
        tasks = [t for t in tasks if t.name in args.tasks.split(",")]
    engine = Engine()
    out = {}
    for task in tasks:
        call = make_call("llm_filter", task.template, prompt_shape="completion")
        render = Renderer(call)
        parts = [render.shaped.parts(v) for v in task.values]
        render.shaped.move_chars = 0  # every value out of the question: the row alone
        heads = [render.shaped.parts(v)[0].rstrip("\n") for v in task.values]
        shapes: dict[str, tuple[list[str], str, list[str]]] = {
            "yn_completion": ([h + q for h, q in parts], "Answer:", ["yes", "no"]),
            "yn_question_first": ([f"Question: {q}\n{h.rstrip(chr(10))}" for h, q in parts], "Answer:", ["yes", "no"]),
        }
        for f in FIELDS:
            shapes[f"concept_{f}"] = (heads, f"{f}:", [task.concept, "other"])
        res = {"truth": task.truth, "group": task.group, "concept": task.concept, "shapes": {}}
        for name, (prompts, field, labels) in shapes.items():
            t0 = time.time()
            rq = RelQuery.from_prompts(prompts, choices=labels, score_labels=True, prompt_shape="completion",
                                       answer_field=field, on_error="null")
            rows = engine.submit(rq).result().rows
            rows = sorted(rows, key=lambda r: r.index)
            res["shapes"][name] = [[r.label_logprobs, r.label_mass] for r in rows]
            print(f"{task.name} {name}: {len(rows)} rows in {time.time() - t0:.1f}s", flush=True)
        out[task.name] = res
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out))
    engine.close()


if __name__ == "__main__":
    main()
