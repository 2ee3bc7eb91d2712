"""The answer field a label is scored after, chosen by the model (issue 22; ``answer_field := 'auto'``).

A small model says a label far more readily after a field that names what the labels are about
than after "Answer:" ("positive"/"negative" after "Sentiment:";
docs/notebook/quality-passes.md#eleventh-pass-2026-11-25-1505-1625-utc-the-answer-field-named-by-the-model). A user who knows the name can give it (``answer_field := 'Sentiment'``). Otherwise
relserve asks the model: the call's prompt with every placeholder "N/A" (no row's content),
ended by each name of ``CANDIDATES`` in turn, and takes the name after which the labels get the
most probability (``RowResult.label_mass``). The names are generic ones of what a label can be
about, fixed before any was measured; "Answer" is one of them and wins ties.

It costs one short scoring request per candidate, once per model and template in a prefix-cache
namespace: the choice is kept in the label memory beside the call's label plan
(relserve/labels/memory.py). No row's content enters the probes; the choice is kept per namespace
(a server tenant) all the same, so that whether a template was run before tells a tenant nothing
of another's work.
"""

from __future__ import annotations

import json
import math
import uuid
from dataclasses import replace

from relserve.backend.protocol import Backend
from relserve.budget import Allowance
from relserve.functions import LLMCall
from relserve.label_names import LabelMethodName
from relserve.labels.keys import namespace_of, template_key
from relserve.labels.memory import LabelMemory
from relserve.labels.plan import PlanKey
from relserve.prompt_rendering import Renderer
from relserve.prompt_shapes import AUTO_ANSWER_FIELD, answer_field_text

#: the names tried, in order (the first of equal ones wins); generic names of what a label can
#: be about, fixed before any was measured (bench/layouts.py tries the same ones offline)
CANDIDATES: tuple[str, ...] = (
    "Answer", "Sentiment", "Topic", "Category", "Type", "Label", "Rating", "Verdict", "Opinion", "Tone",
    "Genre", "Class", "Emotion", "Mood", "Quality", "Subject", "Kind", "Result", "Status", "Decision",
)
#: the content-free value every placeholder gets in the probes
CONTENT_FREE = "N/A"
#: rel_id prefix of the probes (they are not a user's rows)
FIELD_PROBE_PREFIX = "answer-field-"



def field_key(call: LLMCall, namespace: str | None, model_id: str) -> PlanKey:
    """Whose answer field: the call's template and settings in ``namespace``."""
    return PlanKey(namespace, model_id, json.dumps(["answer field", *template_key(call, model_id)], default=str))


def picks_field(call: LLMCall) -> bool:
    """Whether ``call``'s answer field is relserve's to choose (``answer_field := 'auto'``)."""
    return call.options.answer_field == AUTO_ANSWER_FIELD


def with_field(call: LLMCall, name: str | None) -> LLMCall:
    """``call`` with its answer field set to ``name``."""
    return replace(call, options=replace(call.options, answer_field=name))


def known_field(call: LLMCall, model_id: str, namespace: str | None = None,
                memory: LabelMemory | None = None) -> str | None:
    """The name chosen for ``call`` earlier in this process, in ``namespace`` (None: not yet, or
    not relserve's)."""
    if not picks_field(call):
        return None
    return memory.field(field_key(call, namespace, model_id)) if memory is not None else None


def as_known(call: LLMCall, model_id: str, namespace: str | None = None, memory: LabelMemory | None = None) -> LLMCall:
    """``call`` with the name chosen for it in ``namespace``, once known (its label plan is kept
    under that name); else as it is."""
    name = known_field(call, model_id, namespace, memory)
    return with_field(call, name) if name else call


def probe_prompt(call: LLMCall) -> str:
    """The call's prompt with every placeholder ``CONTENT_FREE``, laid out as its rows are."""
    return Renderer(call)((CONTENT_FREE,) * len(call.template.columns))


def choose(masses: dict[str, float]) -> str:
    """The candidate with the largest label mass; the earlier of equal ones (rounded, so float
    noise does not decide)."""
    return max(masses, key=lambda name: (round(masses[name], 9), -CANDIDATES.index(name)))


def field_for(call: LLMCall, engine: Backend, model_id: str, memory: LabelMemory | None = None,
              budget: Allowance | None = None) -> str:
    """The answer field's name for ``call`` (``picks_field``): kept in ``memory`` for
    ``engine``'s namespace, or chosen now by one probe per candidate on ``engine``, all submitted
    at once, spending from the call's ``budget`` as its rows do (a probe it refuses leaves its
    name out, and a choice made so is not kept)."""
    from relserve.relquery import RelQuery

    key = field_key(call, namespace_of(engine), model_id)
    got = memory.field(key) if memory is not None else None
    if got is not None:
        return got
    prompt = probe_prompt(call)
    rel_id = FIELD_PROBE_PREFIX + uuid.uuid4().hex[:8]
    handles = {
        name: engine.submit(RelQuery.from_prompts(
            [prompt], choices=list(call.choices or ()), score_labels=True, prompt_shape=call.prompt_shape,
            answer_field=answer_field_text(name), system=call.options.system, on_error="raise",
            rel_id=f"{rel_id}-{k}", budget=budget))
        for k, name in enumerate(CANDIDATES)
    }
    masses = {}
    failed = False
    for name, handle in handles.items():
        try:
            row = handle.result().rows[0]
        except Exception:  # a probe that fails leaves its name out; the rows still run
            row = None
        ok = row is not None and row.error is None
        failed = failed or not ok
        # an engine that reports no mass (a double) leaves every name tied: "Answer"
        masses[name] = row.label_mass if ok and row.label_mass is not None else -math.inf
    name = choose(masses)
    if not failed and memory is not None:  # a choice made with names missing is not kept
        name = memory.keep_field(key, name)
    return name


def resolved(call: LLMCall, engine: Backend, model_id: str, memory: LabelMemory | None = None,
             budget: Allowance | None = None) -> LLMCall:
    """``call`` with ``answer_field := 'auto'`` replaced by the name chosen for it (its probes
    spending from ``budget``); other calls as they are."""
    if not picks_field(call) or call.label_method in (None, LabelMethodName.GENERATE):
        return call
    return with_field(call, field_for(call, engine, model_id, memory, budget))
