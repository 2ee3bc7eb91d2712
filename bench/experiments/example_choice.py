"""How much the choice of bootstrapped examples moves a 2-label classify's accuracy, on the real
engine (issue 22, eleventh pass).

For each task: the planner's prompts in run order, the first pass over relserve's spread sample
(and over the same sample shifted by 1..K-1 prompts: other samples a table could give), each
example rule applied to those scores, and every row scored behind the examples and batch-
calibrated, as relserve's default does for a 2-label classify (question first, after the chosen
answer field). Prints accuracy per rule and sample, and their mean.

    python bench/experiments/example_choice.py --tasks rt_classify,rt_sentiment --samples 3 --rules surest,two,short
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/
import bench_quality  # noqa: E402

#: rule -> (examples per label, longest prompt an example may be, which of a label's rows by
#: margin: 0 the surest, 1 the next, 0.5 the median)
RULES = {
    "surest": (1, 1000, 0),   # relserve's default (label_bootstrap.PER_LABEL, MAX_EXAMPLE_CHARS)
    "two": (2, 1000, 0),
    "short": (1, 400, 0),
    "short2": (2, 400, 0),
    "second": (1, 1000, 1),
    "median": (1, 1000, 0.5),
}


def _ranked_pick(choose, scores, prompts, per_label, max_chars, rank):
    """``choose`` (relserve's, surest first) with every rank, then per label the row at ``rank``
    (an index, or a fraction of the label's rows)."""
    everyone = choose(scores, prompts, per_label=len(scores), max_chars=max_chars)
    out = []
    for label in dict.fromkeys(lab for _, lab in everyone):
        mine = [i for i, lab in everyone if lab == label]
        k = int(rank * len(mine)) if isinstance(rank, float) else min(rank, len(mine) - 1)
        out += [(i, label) for i in mine[k:k + per_label]]
    return out


def main() -> None:
    from relserve import Engine
    from relserve.functions import make_call
    from relserve.labels.answer_fields import field_for, with_field
    from relserve.labels.bootstrap import choose, examples_text, sample_indices, sample_rows
    from relserve.labels.means import batch_picks
    from relserve.planner.plan import plan_call
    from relserve.relquery import RelQuery

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--tasks", default="rt_classify,rt_sentiment")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--rules", default="surest,two,short")
    args = ap.parse_args()
    eng = Engine()
    tasks = {t["name"]: t for t in bench_quality.tasks(args.rows)}
    for name in args.tasks.split(","):
        task = tasks[name]
        rows = task["table"].to_dicts()
        call = make_call("llm_classify", task["template"], labels=task["labels"])
        plan = plan_call(call, [[r[c] for r in rows] for c in task["columns"]], model_id=eng.model_id)
        call = with_field(plan.call, field_for(plan.call, eng, eng.model_id))
        prompts = [plan.prompts[p] for p in plan.run_order]
        truth_of = {}
        for i, p in enumerate(plan.row_to_prompt):
            truth_of[plan.prompts[p]] = rows[i]["truth"]
        opts = dict(choices=list(call.choices), score_labels=True, prompt_shape=call.prompt_shape,
                    answer_field=call.answer_field)
        acc: dict[str, list[float]] = {r: [] for r in args.rules.split(",")}
        for shift in range(args.samples):
            sample = [min(i + shift, len(prompts) - 1) for i in sample_indices(len(prompts), sample_rows("classify"))]
            first = eng.run(RelQuery.from_prompts([prompts[i] for i in sample], **opts)).rows
            scores = [(sample[r.index], r.label_logprobs) for r in first]
            for rule in acc:
                per_label, max_chars, rank = RULES[rule]
                picked = (choose(scores, prompts, per_label=per_label, max_chars=max_chars) if rank == 0
                          else _ranked_pick(choose, scores, prompts, per_label, max_chars, rank))
                ex = examples_text(prompts, picked, call.answer_field)
                res = eng.run(RelQuery.from_prompts([ex + p for p in prompts], **opts)).rows
                picks = batch_picks([r.label_logprobs for r in sorted(res, key=lambda r: r.index)])
                a = sum(pk == truth_of[p] for pk, p in zip(picks, prompts)) / len(prompts)
                acc[rule].append(a)
                print(f"{task['group']:6} {name:14} {call.answer_field:12} sample+{shift} {rule:7} {a:.1%}", flush=True)
        for rule, xs in acc.items():
            print(f"== {name} {rule}: mean {statistics.mean(xs):.1%} over {len(xs)} samples, "
                  f"min {min(xs):.1%} max {max(xs):.1%}", flush=True)


if __name__ == "__main__":
    main()
