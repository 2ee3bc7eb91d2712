"""The real engine against answers computed outside relserve (tests/golden/, made by
tests/golden/make_golden.py with transformers on the same saved weights).

Every other real-engine test takes its expectation from the engine itself, so a broken chat
template, prompt encoding, sampling path or label scorer would pass them all; these would not.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from waits import result_within, run_within

from relserve import RelQuery
from relserve.labels.memory import forget_all
from relserve.model import resolve_model

pytestmark = pytest.mark.engine

GOLDEN = Path(__file__).resolve().parent / "golden"
GREEDY = json.loads((GOLDEN / "greedy.json").read_text())
LABELS = json.loads((GOLDEN / "labels.json").read_text())


@pytest.fixture(scope="module")
def same_weights(engine):
    """The pinned answers hold for the weights they were made on: name a mismatch plainly."""
    import hashlib

    folder = Path(resolve_model(prepare=False).path)
    h = hashlib.sha256()
    with open(folder / "model.safetensors", "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    assert h.hexdigest() == GREEDY["weights_sha256"] == LABELS["weights_sha256"], (
        f"the model at {folder} is not the one tests/golden was made on; "
        "if the model changed on purpose, run tests/golden/make_golden.py"
    )


def _ids(case) -> str:
    return case["prompt"][:40]


@pytest.mark.usefixtures("same_weights")
def test_the_chat_template_gives_the_reference_prompt_tokens(engine):
    for case in GREEDY["cases"]:
        assert engine.prompt_token_ids(case["prompt"], case["system"]) == case["prompt_token_ids"], case["prompt"]


@pytest.mark.usefixtures("same_weights")
def test_greedy_answers_are_the_reference_tokens(engine):
    tok = engine.tokenizer
    handles = [
        engine.submit(RelQuery.from_prompts([c["prompt"]], max_tokens=c["max_tokens"], system=c["system"]))
        for c in GREEDY["cases"]
    ]
    for case, h in zip(GREEDY["cases"], handles):
        [row] = result_within(h, 120, f"the greedy answer to {_ids(case)!r}").rows
        assert row.error is None, row.error
        ids = case["answer_token_ids"]
        # the engine reports text and counts; the reference is token ids: compare both ways
        assert row.text == tok.decode(ids, skip_special_tokens=True) == case["answer_text"], case["prompt"]
        assert row.output_tokens == len(ids), case["prompt"]
        assert row.prompt_tokens == len(case["prompt_token_ids"]), case["prompt"]
        assert row.finish_reason == ("stop" if ids[-1] == tok.eos_token_id else "length"), case["prompt"]


def _split_reference(case) -> dict[str, float]:
    """The pinned per-token log-probabilities (transformers) read the way the "split" norm reads
    a label: each spelling up to the token where it parts from every other label's spellings,
    summed there; spellings of one label added, then normalised over the labels."""
    forms = {lab: [f for f in case["form_token_ids"] if f.lower() == lab.lower()] for lab in case["labels"]}
    raw = {}
    for lab, fs in forms.items():
        others = {tuple(case["form_token_ids"][o][:k]) for other, ofs in forms.items() if other != lab for o in ofs
                  for k in range(1, len(case["form_token_ids"][o]) + 1)}
        per_form = []
        for f in fs:
            ids = case["form_token_ids"][f]
            depth = next((k for k in range(1, len(ids) + 1) if tuple(ids[:k]) not in others), len(ids))
            per_form.append(sum(case["form_token_logprobs"][f][:depth]))
        raw[lab] = math.log(sum(math.exp(x) for x in per_form))
    total = math.log(sum(math.exp(x) for x in raw.values()))
    return {lab: r - total for lab, r in raw.items()}


@pytest.mark.usefixtures("same_weights")
@pytest.mark.parametrize("norm", ["split", "mean"])
@pytest.mark.parametrize("case", LABELS["cases"], ids=_ids)
def test_label_logprobs_match_transformers(engine, case, norm, monkeypatch):
    # "split" (the default) from the pinned token log-probabilities; "mean" as pinned
    from relserve.engine import label_scoring

    monkeypatch.setattr(label_scoring, "LABEL_NORM", norm)
    rq = RelQuery.from_prompts([case["prompt"]], choices=case["labels"], score_labels=True,
                               prompt_shape=case["prompt_shape"], max_tokens=8)
    [row] = result_within(engine.submit(rq), 120, "the scored labels of the case").rows
    assert row.error is None, row.error
    expected = _split_reference(case) if norm == "split" else case["label_logprobs"]
    assert list(row.label_logprobs) == case["labels"]
    for label in case["labels"]:
        # float32 on both sides, different kernels: agreement to ~1e-3 (a wrong token, template or
        # sum would be off by far more)
        assert row.label_logprobs[label] == pytest.approx(expected[label], rel=1e-3, abs=1e-3), label
    best = max(expected, key=expected.get)
    assert row.text == best


ADAPTIVE = json.loads((GOLDEN / "adaptive.json").read_text()) if (GOLDEN / "adaptive.json").exists() else {"cases": []}


@pytest.mark.usefixtures("same_weights")
@pytest.mark.parametrize("case", ADAPTIVE["cases"], ids=lambda c: c["case"])
def test_the_adaptive_method_answers_as_its_definition_computed_outside_relserve(engine, case):
    """tests/golden/make_adaptive_golden.py computes, with transformers and its own code, the
    layouts' information on the first pass, the layout chosen, the examples, every row's margin,
    the reading and each answer; the real engine under relserve's adaptive method must agree."""
    from engine_doubles import RecordingEngine

    from relserve.functions import make_call
    from relserve.labels import adaptive
    from relserve.labels.layouts import LayoutRenderer, layouts_for
    from relserve.planner.plan_and_run import run_call

    forget_all()
    call = make_call("llm_filter", ADAPTIVE["templates"][case["case"]])
    rec = RecordingEngine(engine)
    out = run_call(call, [list(col) for col in zip(*case["rows"])], engine=rec, cache=False, progress=False)
    report = out.labels
    layouts = layouts_for(call)
    assert [(t.layout.question, t.layout.field) for t in report.choice.trials] == \
        [(t["question"], t["field"]) for t in case["trials"]]
    informations = [(t.information, ref["information"]) for t, ref in zip(report.choice.trials, case["trials"])]
    assert [g for g, _ in informations] == pytest.approx([r for _, r in informations], abs=5e-3), informations
    assert report.choice.layout == layouts[case["chosen"]]
    assert report.choice.examples == case["examples"]
    # every row's margin in the chosen layout, read back from the engine: a relQuery of at most
    # SAMPLE_ROWS rows is its own sample, answered by its first pass's scores (nothing after it)
    layout = report.choice.layout
    if len(case["rows"]) <= adaptive.SAMPLE_ROWS:
        assert rec.relqueries == []
        prompts = LayoutRenderer(call).many(layout, [tuple(r) for r in case["rows"]])
    else:
        (main,) = rec.relqueries
        prompts = main.prompts
    rows = run_within(engine, RelQuery.from_prompts(prompts, choices=list(layout.labels), score_labels=True,
                                                    prompt_shape="completion", answer_field=layout.answer_field)).rows
    a, b = layout.labels
    margins = [r.label_logprobs[a] - r.label_logprobs[b] for r in rows]
    # the planner orders the relQuery's rows to share prefixes: the same margins, in its order (the
    # answers below hold each row to its own)
    assert sorted(margins) == pytest.approx(sorted(case["margins"]), abs=2e-2)
    assert report.reading.rule == case["rule"]
    assert out.values == case["answers"]


@pytest.mark.usefixtures("same_weights")
def test_the_adaptive_answers_are_right_well_above_chance():
    """Floors with a stated margin over chance, from the pinned reference (its own figures print
    when it is made): guessing each of the demo's 24 balanced rows gets 17 or more right with
    probability 3.2%; keeping a random eighth (5) of the 40 products keeps 2 or more of the 4 car
    products with probability 7%, and a random fifth (8) with 17%."""
    demo, products = ADAPTIVE["cases"]
    assert sum(a == t for a, t in zip(demo["answers"], demo["truth"])) >= 17
    kept = [t for a, t in zip(products["answers"], products["truth"]) if a]
    assert sum(kept) >= 2 and len(kept) <= 12
