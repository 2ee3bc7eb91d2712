"""Regenerate ``adaptive.json``: the label plan the adaptive method (docs/quality.md, "How a label
is decided") makes on two multi-row relQueries and the answers it gives, computed here with
transformers on the saved weights from the documented definition - not with relserve's code - so
that the real engine and relserve's implementation are checked against something outside them
(tests/test_golden.py).

The definition, step by step, as computed below:

1. layouts: the question ("<long values as Name: value lines>\n<question>\nAnswer:", labels
   yes/no) and the row alone ("<every value as a Name: value line>\n<Field>:" for Field in
   Sentiment, Topic, Category, Answer, labels: the question's concept and its contrast); for
   these two templates the model proposes no concept beside the lexicon's (the test checks the
   layouts tried);
2. a row's label scores: each label's spellings (as written, capitalised) read up to the token
   where they part from every other label's (here the first), log-sum-exp over spellings,
   log-softmax over the two labels; its margin: first label minus second;
3. the first pass: a spread sample of at most 24 rows (row i * n // 24), in two stages: every
   layout on 8 of them (sample position j * m // 8 of the m sampled), then the two layouts of the
   largest information there (the earlier on a tie, rounded to 1e-9) on the rest of the sample.
   A layout's information is the mutual information between rows and answers over the rows it
   was scored on (entropy of the mean probability of the first label minus the mean entropy, the
   probabilities the logistic of the margins); of the two finalists the larger wins, the earlier
   layout on a tie;
4. examples: the sampled row with the largest margin in the chosen layout, then the one with the
   smallest, each "<row>\n<Field>: <word>\n\n", in front of every row;
5. the plan's sample: a spread sample of at most 64 rows (every row here), scored behind the
   examples, and the content-free rows (every value "N/A", "", "[MASK]") behind the examples;
6. the boundary, in this order:
   - every sampled margin at least 2 nats on one side of 0: the model's own answer, a boundary of
     0 ("all alike"), unless the chosen layout's first-pass margins (without examples) were not
     every one 2 nats on one side: then this rule is skipped;
   - the widest gap between sorted margins at least 2 nats and at least 4 times the two sides'
     pooled spread: the middle of the gap ("two crowds");
   - from 16 margins, a two-component normal mixture with a spread each (floor: 5% of the
     column's; each at most twice the other's, clipped after every step), fitted by EM from
     starts at the 0.5/0.7/0.85/0.95 quantiles and at the widest gap, the best likelihood kept:
     when the AUC it implies is at least 0.9, it explains the margins at least 0.1 nats per row
     better than one normal, and the smaller crowd holds at least 3 rows and 2%, the margin
     between the two crowds' means where the posterior of the upper crowd crosses one half
     ("two crowds");
   - otherwise the mean margin of the content-free rows ("calibrated");
7. every row: the first label exactly when its margin (behind the examples) is above the boundary.

    .venv/bin/python tests/golden/make_adaptive_golden.py           # write adaptive.json
    .venv/bin/python tests/golden/make_adaptive_golden.py --check   # recompute and compare
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from make_golden import load, weights_sha256  # noqa: E402

FIELDS = ("Sentiment", "Topic", "Category", "Answer")
SAMPLE = 24
PLAN_SAMPLE = 64
FIRST_STAGE = 8
FINALISTS = 2
#: tests/test_golden.py compares relserve's information with these to 5e-3 (float32 on both
#: sides, other kernels): a case whose chosen layout leads the other finalist by less than this
#: cannot tell a right choice from a wrong one (issue 66: the products case led by 0.0005)
INFORMATION_TOLERANCE = 5e-3
CONTENT_FREE = ("N/A", "", "[MASK]")
MIN_SEPARATION, MIN_GAIN, SPREAD_FLOOR, SPREAD_RATIO = 0.9, 0.1, 0.05, 2.0

#: product names written for this file (not from any dataset): 4 of 40 for cars
PRODUCTS = [
    "Heavy-duty stapler with 1000 staples", "Car windshield sun shade, foldable", "Watercolor paint set, 24 colors",
    "Ballpoint pens, blue ink, pack of 12", "Digital bathroom scale", "Acrylic yarn for knitting, 6 skeins",
    "Spiral notebook, college ruled", "Tire pressure gauge for cars and trucks", "Vitamin D3 softgels, 120 count",
    "Desk organizer with drawers", "Scrapbooking sticker pack", "First aid kit, 100 pieces", "Printer paper, 500 sheets",
    "Embroidery hoop set", "Electric toothbrush heads, 4 pack", "Sticky notes, neon colors", "Glue gun with glue sticks",
    "Car phone mount for the dashboard", "Hand sanitizer gel, 8 oz", "File folders, letter size, 50 pack",
    "Canvas panels for painting, 10 pack", "Reading glasses, 3 pairs", "Desk lamp with USB charging port",
    "Cross stitch kit for beginners", "Compression socks for men and women", "Whiteboard markers, assorted colors",
    "Polymer clay starter kit", "Thermometer for adults and kids", "Wiper blades, 22 inch, pair", "Paper clips, jumbo",
    "Sewing machine needles", "Pill organizer, weekly", "Label maker with tape", "Crochet hook set",
    "Heating pad for back pain", "Mechanical pencils, 0.7 mm", "Bead kit for bracelets", "Blood pressure monitor",
    "Stamp pad, black ink", "Calligraphy pen set",
]
AUTOMOTIVE = {1, 7, 17, 28}

CASES = [
    # (name, template, placeholder order, rows as value tuples, truth, labels of the layouts)
    ("demo", "Is this customer happy with their {product}? Review: {review}"),
    ("products", "Is this product an automotive product? Product: {name}"),
]


def demo_rows():
    with open(HERE.parent.parent / "datasets" / "demo_reviews.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return [(r["product"], r["review"]) for r in rows], [r["happy"] == "yes" for r in rows]


def layouts(case: str) -> list[tuple[bool, str, tuple[str, str]]]:
    concept = ("happy", "unhappy") if case == "demo" else ("automotive", "other")
    return [(True, "Answer", ("yes", "no"))] + [(False, f, concept) for f in FIELDS]


def text(case: str, question: bool, values: tuple) -> str:
    """The row's text in a layout, written out for these two templates (step 1)."""
    if case == "demo":
        product, review = values
        if question:  # the review is long and moves in front with its field name; the product stays
            return f"Review: {review}\nIs this customer happy with their {product}?"
        return f"Product: {product}\nReview: {review}"
    (name,) = values
    if question:  # a name shorter than 30 characters stays where the template puts it
        return (f"Product: {name}\nIs this product an automotive product?" if len(name) >= 30
                else f"Is this product an automotive product? Product: {name}")
    return f"Product: {name}"


def margins(tok, model, texts: list[str], field: str, labels: tuple[str, str]) -> list[float]:
    import torch

    firsts = []
    for lab in labels:
        forms = [lab] + ([lab[:1].upper() + lab[1:]] if lab[:1].upper() != lab[:1] else [])
        firsts.append([tok(" " + f, add_special_tokens=False)["input_ids"][0] for f in forms])
    # the labels part at their first token (step 2): no spelling of one starts like the other's
    assert not set(firsts[0]) & set(firsts[1])
    out = []
    with torch.no_grad():
        for t in texts:
            ids = tok(t + "\n" + field + ":", add_special_tokens=False)["input_ids"]
            lp = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].double(), -1)
            raw = [float(torch.logsumexp(lp[f], 0)) for f in firsts]
            out.append(raw[0] - raw[1])
    return out


def information(ms: list[float]) -> float:
    p = 1 / (1 + np.exp(-np.clip(np.asarray(ms), -50, 50)))

    def h(q):
        q = np.clip(q, 1e-300, 1)
        return -(q * np.log(q) + (1 - q) * np.log(np.clip(1 - q, 1e-300, 1)))

    return max(0.0, float(h(p.mean()) - h(p).mean()))


def mixture(xs: np.ndarray):
    """Step 5's mixture: (weight of the upper crowd, implied AUC, gain, posterior per value)."""
    n, mean, sd = len(xs), xs.mean(), xs.std()
    floor = SPREAD_FLOOR * sd
    one = float(np.mean(-0.5 * np.log(2 * np.pi * sd**2) - (xs - mean) ** 2 / (2 * sd**2)))
    ordered = np.sort(xs)
    gap = int(np.argmax(np.diff(ordered))) + 1
    cuts = [ordered[min(n - 1, int(q * n))] for q in (0.5, 0.7, 0.85, 0.95)] + [ordered[gap]]

    def log_normal(x, m, s):
        return -0.5 * np.log(2 * np.pi * s * s) - (x - m) ** 2 / (2 * s * s)

    best = None
    for cut in cuts:
        r = (xs >= cut).astype(float)
        if r.all() or not r.any():
            continue
        ll_old = -np.inf
        for _ in range(300):
            w = min(max(r.mean(), 1 / n), 1 - 1 / n)
            m1 = (r * xs).sum() / max(r.sum(), 1e-12)
            m0 = ((1 - r) * xs).sum() / max((1 - r).sum(), 1e-12)
            s1 = max(math.sqrt((r * (xs - m1) ** 2).sum() / max(r.sum(), 1e-12)), floor)
            s0 = max(math.sqrt(((1 - r) * (xs - m0) ** 2).sum() / max((1 - r).sum(), 1e-12)), floor)
            s1, s0 = min(s1, SPREAD_RATIO * s0), min(s0, SPREAD_RATIO * s1)
            a = math.log(w) + log_normal(xs, m1, s1)
            b = math.log1p(-w) + log_normal(xs, m0, s0)
            top = np.maximum(a, b)
            ll = float((top + np.log(np.exp(a - top) + np.exp(b - top))).sum())
            r = np.exp(a - top) / (np.exp(a - top) + np.exp(b - top))
            if ll - ll_old < 1e-10 * n:
                break
            ll_old = ll
        if m1 < m0:
            w, m0, m1, s0, s1 = 1 - w, m1, m0, s1, s0
        if best is None or ll / n > best[0] + 1e-12:
            best = (ll / n, w, m0, s0, m1, s1)
    ll, w, m0, s0, m1, s1 = best
    auc = 0.5 * (1 + math.erf((m1 - m0) / math.sqrt(2 * (s0 * s0 + s1 * s1))))

    def posterior(x: float) -> float:  # (between the means, where the boundary is sought)
        a = math.log(w) + log_normal(x, m1, s1)
        b = math.log1p(-w) + log_normal(x, m0, s0)
        return 1 / (1 + math.exp(b - a))

    return w, auc, ll - one, m0, m1, posterior


def boundary(ms: list[float], free: list[float], alike: bool = True) -> tuple[str, float]:
    """Step 6: (rule, boundary); ``alike`` False: the first rule is skipped."""
    xs = np.asarray(ms)
    n = len(xs)
    if alike and (xs.min() >= 2.0 or xs.max() <= -2.0):
        return "all alike", 0.0
    ordered = np.sort(xs)
    i = int(np.argmax(np.diff(ordered))) + 1
    gap = ordered[i] - ordered[i - 1]
    low, high = ordered[:i], ordered[i:]
    spread = math.sqrt((((low - low.mean()) ** 2).sum() + ((high - high.mean()) ** 2).sum()) / max(n - 2, 1))
    if gap >= 2.0 and gap >= 4.0 * spread:
        return "two crowds", float((ordered[i] + ordered[i - 1]) / 2)
    if n >= 16:
        w, auc, gain, m0, m1, posterior = mixture(xs)
        if auc >= MIN_SEPARATION and gain >= MIN_GAIN and min(w, 1 - w) * n >= max(3, 0.02 * n):
            lo, hi = m0, m1  # where the posterior crosses one half between the means
            for _ in range(100):
                mid = (lo + hi) / 2
                lo, hi = (lo, mid) if posterior(mid) > 0.5 else (mid, hi)
            return "two crowds", float(hi)
    return "calibrated", float(np.mean(free))


def run_case(tok, model, case: str, rows: list[tuple], truth: list[bool]) -> dict:
    n = len(rows)
    sample = list(range(n)) if n <= SAMPLE else [i * n // SAMPLE for i in range(SAMPLE)]
    m = len(sample)
    first = list(range(m)) if m <= FIRST_STAGE else [j * m // FIRST_STAGE for j in range(FIRST_STAGE)]
    trials = []
    for question, field, labels in layouts(case):
        ms = margins(tok, model, [text(case, question, rows[i]) for i in sample], field, labels)
        trials.append({"question": question, "field": field, "labels": list(labels), "sample_margins": ms,
                       "information": information([ms[j] for j in first])})
    finalists = sorted(range(len(trials)), key=lambda k: (-round(trials[k]["information"], 9), k))[:FINALISTS]
    if m > len(first):
        for k in finalists:
            trials[k]["information"] = information(trials[k]["sample_margins"])
    else:
        finalists = list(range(len(trials)))
    # (a layout out at the first stage keeps its 8 rows' margins only)
    for k, t in enumerate(trials):
        if k not in finalists:
            t["sample_margins"] = [t["sample_margins"][j] for j in first]
    best = max(finalists, key=lambda k: (round(trials[k]["information"], 9), -k))
    chosen = trials[best]
    fit = {i: m for i, m in zip(sample, chosen["sample_margins"]) if len(text(case, chosen["question"], rows[i])) <= 1000}
    top = max(fit, key=lambda i: (fit[i], -i))
    bottom = min(fit, key=lambda i: (fit[i], i))
    examples = "".join(f"{text(case, chosen['question'], rows[i])}\n{chosen['field']}: {word}\n\n"
                       for i, word in ((top, chosen["labels"][0]), (bottom, chosen["labels"][1])))
    ms = margins(tok, model, [examples + text(case, chosen["question"], v) for v in rows], chosen["field"],
                 tuple(chosen["labels"]))
    plan_sample = list(range(n)) if n <= PLAN_SAMPLE else [i * n // PLAN_SAMPLE for i in range(PLAN_SAMPLE)]
    width = len(rows[0])
    free = margins(tok, model, [examples + text(case, chosen["question"], (v,) * width) for v in CONTENT_FREE],
                   chosen["field"], tuple(chosen["labels"]))
    sampled = chosen["sample_margins"]
    rule, value = boundary([ms[i] for i in plan_sample], free,
                           alike=min(sampled) >= 2.0 or max(sampled) <= -2.0)
    return {"case": case, "rows": [list(v) for v in rows], "truth": truth, "sample": sample, "trials": trials,
            "chosen": best, "examples": examples, "margins": ms, "content_free": free, "rule": rule,
            "boundary": value, "answers": [bool(m > value) for m in ms]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="recompute and compare with adaptive.json; write nothing")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    from relserve.model import resolve_model

    folder = Path(resolve_model().path)
    tok, model = load(folder)
    demo, demo_truth = demo_rows()
    doc = {"model": folder.name, "weights_sha256": weights_sha256(folder), "transformers": transformers.__version__,
           "made_by": "tests/golden/make_adaptive_golden.py", "templates": dict(CASES),
           "cases": [run_case(tok, model, "demo", demo, demo_truth),
                     run_case(tok, model, "products", [(p,) for p in PRODUCTS],
                              [i in AUTOMOTIVE for i in range(len(PRODUCTS))])]}
    for c in doc["cases"]:
        right = sum(a == t for a, t in zip(c["answers"], c["truth"]))
        print(f"{c['case']}: layout {c['chosen']} ({c['trials'][c['chosen']]['field']}), {c['rule']}, boundary "
              f"{c['boundary']:+.3f}, {right} of {len(c['truth'])} right, {sum(c['answers'])} kept")
    # the near-tie guard: the chosen layout must lead every other finalist by more than the
    # test's tolerance, else the engine may choose the other one within the test's own tolerance
    ties = [c["case"] for c in doc["cases"] if near_tie(c)]
    for name in ties:
        print(f"{name}: near-tie, the chosen layout leads another finalist by less than {INFORMATION_TOLERANCE}: "
              "pick other rows or another template", file=sys.stderr)
    path = HERE / "adaptive.json"
    if args.check:
        pinned = json.loads(path.read_text())
        same = all(a["answers"] == b["answers"] and a["chosen"] == b["chosen"] and a["examples"] == b["examples"]
                   for a, b in zip(doc["cases"], pinned["cases"]))
        print("same" if same else "differs")
        return 0 if same else 1
    if ties:
        return 1  # nothing written: a pinned case must be able to tell
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


def near_tie(case: dict) -> bool:
    """Whether another layout scored on the whole sample (a finalist) is within the test's
    tolerance of the chosen one's information."""
    chosen = case["trials"][case["chosen"]]
    finalists = [t for k, t in enumerate(case["trials"]) if k != case["chosen"]
                 and len(t["sample_margins"]) == len(chosen["sample_margins"])]
    return any(chosen["information"] - t["information"] < INFORMATION_TOLERANCE for t in finalists)


if __name__ == "__main__":
    sys.exit(main())
