"""Where do two fresh homes' answers to the same filter part? The plan's worked examples, measured.

bench/bench_plan_stability.py's setup (issue 62): two tables that share 80 rows, T1 mostly "no"
(10% of its other rows "yes"), T2 mostly "yes" (80%); T1 makes the call's label plan in one
home, T2 in another. Run on one engine in up to four variants (``--variants``): the adaptive plan
as built (``built``: the sampled row furthest towards each label in front of every row), the same
plan with no worked examples (``none``: the layout and the content-free boundary only), and with
two examples the model writes itself, greedily, with transformers, instead of the table's rows
(``written``: asked for the layout's field and label word; ``written-q``: asked for the question
and its answer, the same text whatever layout a home chose). Prints, per question and variant, how many shared rows the
homes answer differently, each home's rows kept against its true rows, and F1 against the data's
labels (rotten_tomatoes' fresh/rotten, beer_reviews' style).

    .venv/bin/python bench/experiments/plan_stability_examples.py                  # float32, about 3 minutes
    .venv/bin/python bench/experiments/plan_stability_examples.py --variants built,written,written-q
    .venv/bin/python bench/experiments/plan_stability_examples.py --dtype bfloat16

float32 by default: bfloat16 moves a few near-boundary rows with the batch
(bf16_batch_invariance.py), which would blur what the examples alone do. Written up in the
notebook (quality-passes.md, "Fresh homes and the worked examples" and "Examples the model writes
itself").
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


@contextmanager
def model_written_examples(*, by_question: bool = False, checked: bool = False):
    """The adaptive plan behind two rows the model writes for the layout's labels (one per label),
    not rows of the table: the same in every home for one question, layout and model. A template
    of more than one placeholder keeps the table's rows."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from relserve.labels import adaptive
    from relserve.model import resolve_model

    path = resolve_model(None).path
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    written: dict[tuple, str] = {}

    def write(call, layout, word: str) -> str:
        asked = call.template.source.split("{")[0].strip()
        column = call.template.fields[0]
        key = (asked, call.choices[layout.labels.index(word)]) if by_question else (asked, layout.field, word, layout.question)
        if key not in written:
            if by_question:
                # the call's own label: a filter's yes/no, a classify's words
                answer = call.choices[layout.labels.index(word)]
                ask = f'"{asked}" Write an example {column} where the answer is {answer}.'
            elif layout.question:
                ask = f'Write a short {column} for which the answer to "{asked}" is {word}.'
            else:
                ask = f"Write a short {column} whose {layout.field.lower()} is {word}."
            ids = tok.apply_chat_template([{"role": "user", "content": ask}], add_generation_prompt=True,
                                          return_tensors="pt", return_dict=True)["input_ids"]
            out = model.generate(ids, max_new_tokens=48, do_sample=False, repetition_penalty=1.2)
            written[key] = tok.decode(out[0][ids.shape[1]:], skip_special_tokens=True).strip()
            print(f"    written for {layout.name}, {word}: {written[key]!r}", flush=True)
        return written[key]

    def examples(self, layout, margins):
        if layout.column is not None or len(self.call.template.columns) != 1:
            return before(self, layout, margins)
        texts = [write(self.call, layout, w) for w in layout.labels[:2]]
        if checked:
            # the model must recognise its own examples: each scored alone in the chosen layout,
            # beyond half of the sampled rows in its own direction (three quarters rejected both
            # questions' examples here, 7 Dec), else the table's rows
            rendered = [self.render(layout, (t,)) for t in texts]
            handle = self.ctx.engine.submit(self._relquery(rendered, layout, f"{self.rel_id}-written"))
            yes_m, no_m = self._probe_margins(handle, layout)  # scored as the content-free rows are
            ms = list(margins.values())
            above = sum(m < yes_m for m in ms) / len(ms)
            below = sum(m > no_m for m in ms) / len(ms)
            ok = above >= 0.5 and below >= 0.5
            print(f"    written 'yes' above {above:.0%} of {len(ms)} sampled rows, 'no' below {below:.0%}: "
                  f"{'kept' if ok else 'the table rows instead'}", flush=True)
            if not ok:
                return before(self, layout, margins)
        return "".join(f"{self.render(layout, (t,))}\n{layout.answer_field} {w}\n\n"
                       for t, w in zip(texts, layout.labels[:2]))

    before = adaptive.AdaptiveRun._examples
    adaptive.AdaptiveRun._examples = examples
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
    ap.add_argument("--variants", default="built,none", help="comma-separated: built, none, written, written-q")
    args = ap.parse_args()
    from relserve import Engine

    with Engine(max_num_seqs=64, kv_cache_gb=2.0, dtype=args.dtype) as engine:
        print(f"engine: {engine.settings.model} in {engine.settings.resolved_dtype}", flush=True)
        for q in QUESTIONS:
            pos, neg = labelled(q)
            rows = (*split(pos, neg), set(pos))
            variants = args.variants.split(",")
            if "built" in variants:
                print(f"{q.name}, as built: {measure(engine, q, *rows)}", flush=True)
            if "none" in variants:
                with no_worked_examples():
                    print(f"{q.name}, no worked examples: {measure(engine, q, *rows)}", flush=True)
            if "written" in variants:
                with model_written_examples():
                    print(f"{q.name}, model-written examples: {measure(engine, q, *rows)}", flush=True)
            if "checked" in variants:
                with model_written_examples(by_question=True, checked=True):
                    print(f"{q.name}, model-written examples if the model recognises them: {measure(engine, q, *rows)}",
                          flush=True)
            if "written-q" in variants:
                with model_written_examples(by_question=True):
                    print(f"{q.name}, model-written examples by the question: {measure(engine, q, *rows)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
