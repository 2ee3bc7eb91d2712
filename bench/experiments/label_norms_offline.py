"""How a multi-token label is read, compared offline on the same rows (issue 22, twelfth pass).

The default layout of a classify with 3 labels or more (bootstrapped examples, completion shape;
bench/layouts.py's ``self1_s32``) is scored once with transformers, keeping every token's
log-probability of every spelling of every label; then each way of reading a label is computed
from those same numbers and batch-calibrated:

* ``first``: the first token only (what relserve's ``split`` norm reads when the labels start with
  different tokens, as on both 4-label tasks);
* ``mean``: the mean over the label's tokens (``RELSERVE_LABEL_NORM=mean``);
* ``sum``: their sum (the whole label's probability);
* ``first/len``: the first token over the label's length (``mean`` as if every later token were
  certain: does ``mean`` gain by what the later tokens say, or by scaling a long label down?).

    python bench/experiments/label_norms_offline.py --rows 200 --tasks beer_family,am_department
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/
import bench_quality  # noqa: E402
import layouts  # noqa: E402
from quality_offline import load_model, score_rows  # noqa: E402

READS = {
    "first": lambda terms: terms[0],
    "mean": lambda terms: sum(terms) / len(terms),
    "sum": sum,
    "first/len": lambda terms: terms[0] / len(terms),
}


def token_terms(tok, model, prompts: list[str], forms: list[list[str]], prefix: str) -> list[list[list[list[float]]]]:
    """Per prompt, per label, per spelling: the log-probability of each of its tokens."""
    form_ids = [[tok.encode(f) for f in label_forms] for label_forms in forms]
    shared = None
    if prefix:  # the examples run once, as the engine's prefix cache does
        with torch.no_grad():
            shared = model(input_ids=torch.tensor([tok.encode(prefix)]), use_cache=True).past_key_values
    out = []
    for prompt in prompts:
        ids = torch.tensor([tok.encode(prompt[len(prefix):])])
        with torch.no_grad():
            res = model(input_ids=ids, past_key_values=copy.deepcopy(shared), use_cache=True)
        first = torch.log_softmax(res.logits[0, -1].float(), -1)
        row = []
        for label_forms in form_ids:
            spellings = []
            for f in label_forms:
                terms = [first[f[0]].item()]
                if len(f) > 1:
                    with torch.no_grad():
                        more = model(input_ids=torch.tensor([f[:-1]]), past_key_values=copy.deepcopy(res.past_key_values),
                                     use_cache=True)
                    lp = torch.log_softmax(more.logits[0].float(), -1)
                    terms += [lp[k, f[k + 1]].item() for k in range(len(f) - 1)]
                spellings.append(terms)
            row.append(spellings)
        out.append(row)
    return out


def batch_accuracy(terms: list, truth: list[int], read) -> tuple[float, float]:
    """(accuracy, share of the most frequent answer) with each label read by ``read``, its
    spellings' scores log-sum-exped, log-softmaxed over the labels, minus each label's mean."""
    def lse(v: list[float]) -> float:
        m = max(v)
        return m + math.log(sum(math.exp(x - m) for x in v))

    scores = []
    for row in terms:
        raw = [lse([read(t) for t in spellings]) for spellings in row]
        total = lse(raw)
        scores.append([x - total for x in raw])
    n = len(scores[0])
    means = [sum(s[j] for s in scores) / len(scores) for j in range(n)]
    picks = [max(range(n), key=lambda j: s[j] - means[j]) for s in scores]
    return sum(p == t for p, t in zip(picks, truth)) / len(truth), max(picks.count(j) for j in range(n)) / len(picks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--tasks", default="beer_family,am_department")
    args = ap.parse_args()
    torch.set_num_threads(2)
    tok, model = load_model()
    print("| task (group) | " + " | ".join(READS) + " |\n|---|" + "---|" * len(READS))
    for task in bench_quality.tasks(args.rows):
        if task["name"] not in args.tasks.split(","):
            continue
        labels, rows = task["labels"], task["table"].to_dicts()
        prompts, forms = layouts.TWO_PASS["self1_s32"](task, rows, labels,
                                                     lambda p, f, raw=False: score_rows(tok, model, p, f, normalize=not raw))
        common = os.path.commonprefix(prompts)
        prefix = common.rpartition("\n\n")[0] + "\n\n" if "\n\n" in common else ""
        terms = token_terms(tok, model, prompts, forms, prefix)
        truth = [labels.index(r["truth"]) for r in rows]
        cells = [batch_accuracy(terms, truth, read) for read in READS.values()]
        print(f"| {task['name']} ({task['group']}) | " + " | ".join(f"{a:.1%} (top {t:.0%})" for a, t in cells) + " |", flush=True)


if __name__ == "__main__":
    main()
