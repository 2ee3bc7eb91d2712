"""Where do two fresh homes' answers to the same filter part? The plan's worked examples, measured.

bench/bench_plan_stability.py's setup (issue 62): two tables that share 80 rows, T1 mostly "no"
(10% of its other rows "yes"), T2 mostly "yes" (80%); T1 makes the call's label plan in one
home, T2 in another. Run twice on one engine: the adaptive plan as built (the sampled row furthest
towards each label in front of every row), and the same plan with no worked examples (the layout
and the content-free boundary only). Prints, per question and variant, how many shared rows the
homes answer differently, each home's rows kept against its true rows, and F1 against the data's
labels (rotten_tomatoes' fresh/rotten, beer_reviews' style).

    .venv/bin/python bench/experiments/plan_stability_examples.py                  # float32, about 3 minutes
    .venv/bin/python bench/experiments/plan_stability_examples.py --dtype bfloat16

float32 by default: bfloat16 moves a few near-boundary rows with the batch
(bf16_batch_invariance.py), which would blur what the examples alone do. Written up in the
notebook (quality-passes.md, "Fresh homes and the worked examples").
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_plan_stability import QUESTIONS, answers, labelled, split  # noqa: E402
from bench_quality import filter_metrics  # noqa: E402


@contextmanager
def no_worked_examples():
    """The adaptive plan with nothing in front of each row (its examples' one source, patched)."""
    from relserve.labels import adaptive

    before = adaptive.AdaptiveRun._examples
    adaptive.AdaptiveRun._examples = lambda self, layout, margins: ""
    try:
        yield
    finally:
        adaptive.AdaptiveRun._examples = before


def kept_and_f1(got: dict[str, bool], yes: set[str]) -> str:
    m = filter_metrics([("yes" if a else "no", "yes" if r in yes else "no") for r, a in got.items()])
    return f"keeps {m['kept']} (true {m['true']}, F1 {m['f1']:.2f})"


def measure(engine, question, t1: list[str], t2: list[str], shared: list[str], yes: set[str]) -> str:
    from relserve.labels.memory import LabelMemory, use_memory

    use_memory(LabelMemory())
    a1 = answers(engine, question, t1)
    use_memory(LabelMemory())
    b2 = answers(engine, question, t2)
    use_memory(None)
    differ = sum(a1[r] != b2[r] for r in shared)
    return (f"fresh homes differ on {differ} of {len(shared)} shared rows ({differ / len(shared):.1%}); "
            f"T1 {kept_and_f1(a1, yes)}, T2 {kept_and_f1(b2, yes)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()
    from relserve import Engine

    with Engine(max_num_seqs=64, kv_cache_gb=2.0, dtype=args.dtype) as engine:
        print(f"engine: {engine.settings.model} in {engine.settings.resolved_dtype}", flush=True)
        for q in QUESTIONS:
            pos, neg = labelled(q)
            rows = (*split(pos, neg), set(pos))
            print(f"{q.name}, as built: {measure(engine, q, *rows)}", flush=True)
            with no_worked_examples():
                print(f"{q.name}, no worked examples: {measure(engine, q, *rows)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
