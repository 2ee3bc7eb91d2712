"""The label mass after each answer-field name, per template (issue 22, twelfth pass).

``answer_field := 'auto'`` takes the name after which the model gives the labels the most
probability on the content-free probe (relserve/labels/answer_fields.py). This prints, per
template, that mass after ``Answer`` and after the best names, so the gap can be set beside what
the chosen name did to accuracy (docs/notebook/quality-passes.md, "Twelfth pass"). It runs the probes relserve
runs, on the embedded default engine, and writes every mass to bench/out/answer_field_masses.json.

    python bench/experiments/answer_field_masses.py
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from relserve.backend.registry import default_engine
from relserve.functions import CallOptions, make_call
from relserve.labels.answer_fields import CANDIDATES, probe_prompt
from relserve.prompt_shapes import answer_field_text
from relserve.relquery import RelQuery

OUT = Path(__file__).resolve().parents[1] / "out" / "answer_field_masses.json"  # bench/out/

#: the 2-label templates whose accuracy with the chosen name was measured (tuning, check, and the
#: user scripts of stops 38-39, held out)
TEMPLATES = {
    "rt_classify (tuning)": ("Is this movie review fresh (positive) or rotten (negative)? Review: {review}", ("fresh", "rotten")),
    "rt_sentiment (tuning)": ("Is this movie review positive or negative? Review: {review}", ("positive", "negative")),
    "am_sentiment (check)": ("Is this product review positive or negative? Title: {title}. Review: {text}", ("positive", "negative")),
    "titles happy/unhappy (held out)": ("Does this review title sound happy or unhappy? Title: {title}", ("happy", "unhappy")),
    "recommend/avoid (held out)": ("Would this reviewer recommend the product or tell others to avoid it? Review: {text}",
                                   ("recommend", "avoid")),
    "critic good/bad (held out)": ("Does the critic think the movie is good or bad? Review: {review}", ("good", "bad")),
    "car/office, DuckDB (held out)": ("Which is this product for, a car or an office? Product: {name}", ("car", "office")),
}


def masses(engine, template: str, labels: tuple[str, ...]) -> dict[str, float]:
    """The label mass after every candidate name, the probe laid out as the default lays out a
    2-label classify (question first, behind bootstrapped examples)."""
    call = make_call("llm_classify", template, labels=list(labels),
                     options=CallOptions(method="bootstrap", prompt_shape="question_first", answer_field="auto"))
    prompt = probe_prompt(call)
    out = {}
    for name in CANDIDATES:
        query = RelQuery.from_prompts([prompt], choices=list(call.choices), score_labels=True, prompt_shape=call.prompt_shape,
                                      answer_field=answer_field_text(name), on_error="raise",
                                      rel_id=f"field-masses-{uuid.uuid4().hex[:8]}")
        out[name] = engine.submit(query).result().rows[0].label_mass
    return out


def main() -> None:
    engine = default_engine()
    found = {}
    print("| template | mass after Answer | chosen (mass) | gap |\n|---|---|---|---|")
    for name, (template, labels) in TEMPLATES.items():
        m = masses(engine, template, labels)
        best = max(m, key=lambda k: (round(m[k], 9), -CANDIDATES.index(k)))
        found[name] = m
        print(f"| {name} | {m['Answer']:.2f} | {best} ({m[best]:.2f}) | {m[best] - m['Answer']:.2f} |", flush=True)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
