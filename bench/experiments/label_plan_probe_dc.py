"""Experiment (issue 62): domain-context probes (Fei et al. 2023, "Mitigating Label Biases for
In-context Learning"): pseudo-rows of random words drawn from a spread sample of a task's rows,
scored in every candidate layout, added to a label_plan_probe.py dump under "domain".

    python bench/experiments/label_plan_probe_dc.py --dump bench/out/plan_probe_bf16.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

K = 16
SAMPLE = 32


def pseudo_rows(values: list[tuple], k: int, seed: int = 0) -> list[tuple]:
    rng = random.Random(seed)
    n = len(values)
    idx = [i * n // SAMPLE for i in range(SAMPLE)] if n > SAMPLE else list(range(n))
    cols = list(zip(*[values[i] for i in idx]))
    out = []
    for _ in range(k):
        row = []
        for col in cols:
            texts = [str(v) for v in col if v is not None]
            words = [w for t in texts for w in t.split()]
            length = sorted(len(t.split()) for t in texts)[len(texts) // 2] if texts else 0
            row.append(" ".join(rng.choice(words) for _ in range(length)) if words else "")
        out.append(tuple(row))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--rows", type=int, default=200)
    args = ap.parse_args()
    from prevalence_tasks import balanced_filter_tasks, prevalence_tasks

    from relserve import Engine
    from relserve.functions import make_call
    from relserve.labels.layouts import Layout, LayoutRenderer
    from relserve.relquery import RelQuery

    dump = json.loads(Path(args.dump).read_text())
    tasks = {t.name: t for t in prevalence_tasks(args.rows) + balanced_filter_tasks(args.rows)}
    engine = Engine()
    for name, res in dump.items():
        task = tasks[name]
        call = make_call("llm_filter", task.template)
        render = LayoutRenderer(call)
        pseudo = pseudo_rows(task.values, K)
        for lname, lay in res["layouts"].items():
            if "domain" in lay:
                continue
            question = lname.startswith("question")
            field = lname.split(", ", 1)[1].split(":")[0]
            layout = Layout(question, field, tuple(lay["labels"]))
            rq = RelQuery.from_prompts(render.many(layout, pseudo), choices=list(layout.labels), score_labels=True,
                                       prompt_shape="completion", answer_field=layout.answer_field, on_error="null")
            lay["domain"] = [r.label_logprobs for r in sorted(engine.submit(rq).result().rows, key=lambda r: r.index)]
        Path(args.dump).write_text(json.dumps(dump))
        print(name, flush=True)
    engine.close()


if __name__ == "__main__":
    main()
