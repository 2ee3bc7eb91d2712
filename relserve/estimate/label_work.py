"""What the label path sends to the engine for one relQuery of a filter or classify: the one place
the estimates read the label package (relserve/labels/). When the label path changes
shape, this module follows it; nothing else in relserve/estimate/ knows how labels are chosen.

Today (relserve/planner/executor.py and the label methods of relserve/labels/), in order:

1. ``answer_field := 'auto'`` not chosen yet in the namespace: one one-row probe relQuery per
   candidate name, all at once, waited for (answer_fields.field_for);
2. a first pass, waited for, unless an earlier relQuery of the call chose already:
   ``adaptive`` scores a spread sample of the rows in every candidate layout (one relQuery per
   layout), ``bootstrap`` a spread sample of the prompts; the rows are then laid out as chosen,
   behind the worked examples chosen (which rows, and for ``adaptive`` which layout, only the
   first pass tells: counted as one example per label of the sample's median length, in the
   first layout);
3. ``prior`` whose prior is not known yet: three content-free probes beside the rows;
4. the rows, each scored by one one-token request per label-trie node its norm reads
   (engine/label_scoring.asks), all on the row's prompt.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import relserve.labels.adaptive as adaptive
import relserve.labels.bootstrap as bootstrap
from relserve.estimate.prompt_tokens import Layout, layout_of
from relserve.functions import SCORING_METHODS, LLMCall
from relserve.labels.answer_fields import CANDIDATES, known_field, picks_field, probe_prompt, with_field
from relserve.labels.layouts import LayoutRenderer, layouts_for
from relserve.labels.methods import method_and_pool, method_of
from relserve.labels.prior import content_free_prompts, known_prior
from relserve.prompt_shapes import answer_field_text, label_space

#: vLLM's cap on log-probabilities per request (engine.engine._MAX_LOGPROBS)
MAX_LOGPROBS = 20


@dataclass(frozen=True)
class Scored:
    """One scoring relQuery: its prompts as the label path writes them, laid out how, scored on
    which words."""

    kind: str
    texts: list[str]
    layout: Layout
    labels: tuple[str, ...]


@dataclass
class LabelPlan:
    """How the label path will run a relQuery of a filter or classify."""

    #: the label method the relQuery runs (labels/methods.method_ran); None: not a label call
    method: str | None
    #: the call as it is scored (its answer field chosen earlier in the namespace named)
    call: LLMCall
    #: relQueries waited for before the rows, stage by stage (field probes, a first pass)
    before: list[list[Scored]] = field(default_factory=list)
    #: relQueries that run beside the rows (the prior's probes)
    beside: list[Scored] = field(default_factory=list)
    #: the rows' own scoring relQuery (None: the rows are decoded)
    rows: Scored | None = None
    #: why the token count is an estimate (empty: the engine's exactly)
    inexact: list[str] = field(default_factory=list)

    @property
    def scoring(self) -> bool:
        return self.method in SCORING_METHODS


def label_plan(call: LLMCall, prompts: Sequence[str], values: Sequence[tuple] | None, engine, model_id: str,
               namespace: str | None) -> LabelPlan:
    """How ``call``'s relQuery of ``prompts`` (its distinct prompts to run, in order; ``values``:
    each one's placeholder values) will run on ``engine`` (None: an engine not started yet, with
    no memory of earlier relQueries)."""
    if call.choices is None:
        return LabelPlan(None, call)
    n = len(prompts)
    chosen = known_field(call, model_id, namespace)
    keyed = with_field(call, chosen) if chosen else call
    method = method_of(keyed, n) if engine is None else method_and_pool(keyed, engine, model_id, n)[0]
    plan = LabelPlan(method, keyed)
    if method not in SCORING_METHODS:
        return plan
    layout = layout_of(keyed, method)
    if picks_field(keyed):  # answer_fields.resolved: named by probes before anything else
        # one probe per candidate name, then the rows after the name chosen ("Answer:" stands in)
        plan.before.append([Scored("answer-field probes", [probe_prompt(keyed)],
                                   Layout(layout.shape, layout.system, answer_field_text(name)), tuple(keyed.choices))
                            for name in CANDIDATES])
        plan.inexact.append("the answer field is chosen when the call first runs ('Answer:' counted)")
    if method == "adaptive":
        _adaptive(plan, prompts, values, engine, model_id, layout.system)
    elif method == "bootstrap":
        _bootstrap(plan, prompts, engine, model_id, layout)
    else:
        plan.rows = Scored("rows", list(prompts), layout, tuple(keyed.choices))
        if method == "prior" and known_prior(keyed, model_id) is None:
            plan.beside.append(Scored("prior probes", content_free_prompts(keyed), layout, tuple(keyed.choices)))
    return plan


def _adaptive(plan: LabelPlan, prompts: Sequence[str], values: Sequence[tuple] | None, engine, model_id: str,
              system: str | None) -> None:
    call = plan.call
    if values is None or len(values) != len(prompts):  # (the planner always has them)
        values = [(p,) for p in prompts]
        plan.inexact.append("the rows' values were not given: their prompts stand in")
    render = LayoutRenderer(call)

    def shaped(layout) -> Layout:
        return Layout("completion", system, layout.answer_field)

    choice = adaptive.remembered(call, engine, model_id) if engine is not None else None
    if choice is not None:
        texts = [choice.examples + t for t in render.many(choice.layout, values)]
        plan.rows = Scored("rows", texts, shaped(choice.layout), choice.layout.labels)
        return
    layouts = layouts_for(call)
    sample = adaptive.sample_indices(len(values), adaptive.SAMPLE_ROWS)
    # its two stages (adaptive.first_pass): every layout on a few sampled rows, then the finalists
    # (estimated: the first ones) on the rest of the sample
    first_stage, second_stage = adaptive.first_pass_stages(sample)
    for rows, stage in ((first_stage, layouts), (second_stage, layouts[: adaptive.FINALISTS])):
        if rows:
            plan.before.append([Scored("first pass", [render(layout, values[i]) for i in rows], shaped(layout),
                                       layout.labels) for layout in stage])
    # which layout wins and which rows become examples only the first pass tells
    first = layouts[0]
    if len(values) <= adaptive.SAMPLE_ROWS:
        # its own sample: the first pass's scores answer every row (AdaptiveRun.request)
        plan.rows = Scored("rows", [], shaped(first), first.labels)
    else:
        typical = _median([render(first, values[i]) for i in sample])
        examples = "".join(f"{typical}\n{first.answer_field} {word}\n\n" for word in first.labels)
        plan.rows = Scored("rows", [examples + t for t in render.many(first, values)], shaped(first), first.labels)
    plan.inexact.append(f"the layout and examples a first pass over {len(sample)} rows in {len(layouts)} layouts "
                        "chooses are estimated (the first layout, two examples of the sampled rows' median length)")


def _bootstrap(plan: LabelPlan, prompts: Sequence[str], engine, model_id: str, layout: Layout) -> None:
    call = plan.call
    labels = tuple(call.choices or ())
    if not call.options.examples and engine is not None:
        known = bootstrap.remembered_examples(call, engine, model_id)
    else:
        known = "" if call.options.examples else None
    if known is not None:
        plan.rows = Scored("rows", [known + p for p in prompts], layout, labels)
        return
    n = len(prompts)
    sample = bootstrap.sample_indices(n, bootstrap.sample_rows(call.function.kind, n))
    plan.before.append([Scored("first pass", [prompts[i] for i in sample], layout, labels)])
    typical = _median([prompts[i] for i in sample])
    picked = [(0, labels[k % len(labels)]) for k in range(len(labels) * bootstrap.PER_LABEL)]
    examples = bootstrap.examples_text([typical], picked, layout.answer_field)
    rows = list(prompts)
    if call.function.kind in bootstrap.ANSWERS_FROM_EXAMPLES:  # a classify's example rows are not scored again
        answered = set(sample[: min(len(picked), max(n - 1, 0))])
        rows = [p for i, p in enumerate(rows) if i not in answered]
    plan.rows = Scored("rows", [examples + p for p in rows], layout, labels)
    plan.inexact.append(f"the examples a first pass over {len(sample)} rows chooses are estimated "
                        "(one per label, of the sampled rows' median length)")


def _median(texts: Sequence[str]) -> str:
    return sorted(texts, key=len)[len(texts) // 2] if texts else ""


def scoring_asks(labels: Sequence[str], shape: str, tokenizer, engine=None) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The one-token requests that score one row on ``labels`` in ``shape`` (label_scoring.asks
    over the trie of the labels, as the engine builds it)."""
    from relserve.engine.label_scoring import LabelTrie, asks

    space = label_space(shape)
    if engine is not None and hasattr(engine, "label_trie"):
        trie = engine.label_trie(tuple(labels), space)
    else:
        from relserve.engine.engine import FREE_FORMS_ONLY

        def encode(text: str) -> list[int]:
            return tokenizer(space + text, add_special_tokens=False)["input_ids"]

        trie = LabelTrie.build(tuple(labels), encode, tokenizer.eos_token_id, free_forms_only=FREE_FORMS_ONLY and space == " ")
    return asks(trie, MAX_LOGPROBS)


def typical_answer_tokens(call: LLMCall, tokenizer) -> float:
    """A constrained decode's answer length before any is measured: a label's tokens, and the end
    token after it (the grammar allows nothing else), averaged over the labels."""
    labels = list(call.choices or ())
    if not labels:
        return float(call.max_tokens)
    lengths = [len(tokenizer(label, add_special_tokens=False)["input_ids"]) + 1 for label in labels]
    return min(float(call.max_tokens), statistics.fmean(lengths))


__all__ = ["LabelPlan", "Scored", "label_plan", "scoring_asks", "typical_answer_tokens"]
