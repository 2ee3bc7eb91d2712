"""Experiment (issue 62): every row scored behind the adaptive method's worked examples (the
sampled row leaning furthest to each label, from a spread sample of 32 rows), in each task's two
most informative layouts, added to a label_plan_probe.py dump under "examples".

    python bench/experiments/label_plan_probe_ex.py --dump bench/out/plan_probe_bf16.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SAMPLE = 32


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--rows", type=int, default=200)
    args = ap.parse_args()
    import numpy as np
    from label_plan_offline import margins_of, spread
    from prevalence_tasks import balanced_filter_tasks, prevalence_tasks

    from relserve import Engine
    from relserve.functions import make_call
    from relserve.labels.information import mutual_information
    from relserve.labels.layouts import Layout, LayoutRenderer
    from relserve.relquery import RelQuery

    dump = json.loads(Path(args.dump).read_text())
    tasks = {t.name: t for t in prevalence_tasks(args.rows) + balanced_filter_tasks(args.rows)}
    engine = Engine()
    for name, res in dump.items():
        task = tasks[name]
        call = make_call("llm_filter", task.template)
        render = LayoutRenderer(call)
        n = len(task.values)
        idx = spread(n, SAMPLE)
        infos = {k: mutual_information(list(margins_of(L)[0][idx])) for k, L in res["layouts"].items()}
        for lname in sorted(infos, key=lambda k: -infos[k])[:2]:
            lay = res["layouts"][lname]
            if "examples" in lay:
                continue
            m = margins_of(lay)[0]
            question = lname.startswith("question")
            field = lname.split(", ", 1)[1].split(":")[0]
            layout = Layout(question, field, tuple(lay["labels"]))
            fit = [i for i in idx if np.isfinite(m[i]) and len(render(layout, task.values[i])) <= 1000]
            top = max(fit, key=lambda i: m[i])
            bottom = min(fit, key=lambda i: m[i])
            ex = "".join(f"{render(layout, task.values[i])}\n{layout.answer_field} {w}\n\n"
                         for i, w in ((top, layout.labels[0]), (bottom, layout.labels[1])))
            texts = [ex + t for t in render.many(layout, task.values)]
            cf = [ex + render(layout, (v,) * len(task.values[0])) for v in ("N/A", "", "[MASK]")]
            out = []
            for prompts in (texts, cf):
                rq = RelQuery.from_prompts(prompts, choices=list(layout.labels), score_labels=True,
                                           prompt_shape="completion", answer_field=layout.answer_field, on_error="null")
                out.append([r.label_logprobs for r in sorted(engine.submit(rq).result().rows, key=lambda r: r.index)])
            lay["examples"] = {"rows": out[0], "content_free": out[1], "top": top, "bottom": bottom}
        Path(args.dump).write_text(json.dumps(dump))
        print(name, flush=True)
    engine.close()


if __name__ == "__main__":
    main()
