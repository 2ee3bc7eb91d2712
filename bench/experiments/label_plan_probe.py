"""Experiment (issue 62): every row of the prevalence tasks scored in every candidate layout, with
no worked examples, plus each layout's content-free probes, dumped for the offline study of the
label plan (bench/experiments/label_plan_offline.py).

    python bench/experiments/label_plan_probe.py --out bench/out/plan_probe.json [--tasks a,b] [--dtype bfloat16]
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

CONTENT_FREE = ("N/A", "", "[MASK]")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/out/plan_probe.json")
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--tasks", default="")
    ap.add_argument("--extra", default="", help="task=word/contrast;... extra concept layouts")
    args = ap.parse_args()

    from prevalence_tasks import balanced_filter_tasks, prevalence_tasks

    from relserve import Engine
    from relserve.functions import make_call
    from relserve.labels.layouts import FIELDS, Layout, LayoutRenderer, layouts_for
    from relserve.relquery import RelQuery

    tasks = prevalence_tasks(args.rows) + balanced_filter_tasks(args.rows)
    if args.tasks:
        tasks = [t for t in tasks if t.name in args.tasks.split(",")]
    out = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
    engine = Engine()

    def submit(texts, layout):
        rq = RelQuery.from_prompts(texts, choices=list(layout.labels), score_labels=True, prompt_shape="completion",
                                   answer_field=layout.answer_field, on_error="null")
        return engine.submit(rq)

    def rows_of(handle):
        return [r.label_logprobs for r in sorted(handle.result().rows, key=lambda r: r.index)]

    for task in tasks:
        if task.name in out:
            continue
        t0 = time.time()
        call = make_call("llm_filter", task.template)
        render = LayoutRenderer(call)
        layouts = layouts_for(call, task.values)
        for extra in filter(None, args.extra.split(";")):
            name, words = extra.split("=")
            if name == task.name:
                a, b = words.split("/")
                layouts += [Layout(False, f, (a, b)) for f in FIELDS]
        n_cols = len(task.values[0])
        handles = [(layout, submit(render.many(layout, task.values), layout),
                    submit([render(layout, (v,) * n_cols) for v in CONTENT_FREE], layout)) for layout in layouts]
        res = {"truth": task.truth, "group": task.group, "template": task.template, "layouts": {}}
        for layout, rows, cf in handles:
            res["layouts"][layout.name] = {"labels": list(layout.labels), "rows": rows_of(rows), "content_free": rows_of(cf)}
        out[task.name] = res
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out))
        print(f"{task.name}: {len(task.values)} rows x {len(layouts)} layouts in {time.time() - t0:.1f}s", flush=True)
    engine.close()


if __name__ == "__main__":
    main()
