"""What the label path sends to the engine for one relQuery of a filter or classify: the one place
the estimates read the label package (relserve/labels/). When the label path changes
shape, this module follows it; nothing else in relserve/estimate/ knows how labels are chosen.

The relQuery's ``LabelResolution`` (relserve/labels/methods.py: the method it runs and the call's
kept label plan) says what runs, in order:

1. ``answer_field := 'auto'`` not chosen yet in the namespace: one one-row probe relQuery per
   candidate name, all at once, waited for (answer_fields.field_for);
2. no plan kept: the plan's first pass, waited for: ``adaptive`` scores a spread sample of the
   rows in every candidate layout, then the finalists on the rest, with their content-free
   probes; ``bootstrap`` a spread sample, then the sample behind the examples it chose; ``batch``
   a spread sample; ``prior`` three content-free probes. Which layout and examples win only the
   first pass tells (counted: the first layout, two examples of the sampled rows' median length);
3. the rows, laid out as the plan says, each scored by one one-token request per label-trie node
   its norm reads (engine/label_scoring.asks), all on the row's prompt.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from relserve.estimate.prompt_tokens import Layout, layout_of
from relserve.functions import LLMCall
from relserve.label_names import LabelMethodName
from relserve.labels import adaptive, batch, bootstrap
from relserve.labels.answer_fields import CANDIDATES, known_field, picks_field, probe_prompt, with_field
from relserve.labels.concept import PROPOSAL_FIELD, proposal_prompt, proposal_words
from relserve.labels.layouts import LayoutRenderer, layouts_for
from relserve.labels.memory import process_memory
from relserve.labels.prior import CONTENT_FREE, content_free_prompts
from relserve.labels.resolution import LabelResolution, resolve
from relserve.prompt_shapes import answer_field_text, label_space


@dataclass(frozen=True)
class Scored:
    """One scoring relQuery: its prompts as the label path writes them, laid out how, scored on
    which words."""

    kind: str
    texts: list[str]
    layout: Layout
    labels: tuple[str, ...]


@dataclass
class LabelWork:
    """How the label path will run a relQuery of a filter or classify."""

    #: what the planner resolved (None when the call has no labels)
    labels: LabelResolution
    #: the call as it is scored (its answer field chosen earlier in the namespace named)
    call: LLMCall
    #: relQueries waited for before the rows, stage by stage (field probes, a first pass)
    before: list[list[Scored]] = field(default_factory=list)
    #: the rows' own scoring relQuery (None: the rows are decoded)
    rows: Scored | None = None
    #: why the token count is an estimate (empty: the engine's exactly)
    inexact: list[str] = field(default_factory=list)

    @property
    def method(self) -> str | None:
        return self.labels.method.value if self.labels.method is not None else None

    @property
    def scoring(self) -> bool:
        return self.labels.scoring


def label_work(call: LLMCall, prompts: Sequence[str], values: Sequence[tuple] | None, engine, model_id: str,
               namespace: str | None, labels: LabelResolution | None = None) -> LabelWork:
    """How ``call``'s relQuery of ``prompts`` (its distinct prompts to run, in order; ``values``:
    each one's placeholder values) will run (``labels``: what the planner resolved; None: resolved
    here against the process's label memory)."""
    memory = labels.memory if labels is not None and labels.memory is not None else process_memory()
    chosen = known_field(call, model_id, namespace, memory)
    keyed = with_field(call, chosen) if chosen else call
    if labels is None:
        labels = resolve(call, len(prompts), memory=memory, namespace=namespace, model_id=model_id)
    work = LabelWork(labels, keyed)
    if not labels.scoring:
        return work
    layout = layout_of(keyed, work.method)
    if picks_field(keyed):  # answer_fields.resolved: named by probes before anything else
        # one probe per candidate name, then the rows after the name chosen ("Answer:" stands in)
        work.before.append([Scored("answer-field probes", [probe_prompt(keyed)],
                                   Layout(layout.shape, layout.system, answer_field_text(name)), tuple(keyed.choices))
                            for name in CANDIDATES])
        work.inexact.append("the answer field is chosen when the call first runs ('Answer:' counted)")
    method = labels.method
    if method is LabelMethodName.ADAPTIVE:
        _adaptive(work, prompts, values, layout.system)
    elif method is LabelMethodName.BOOTSTRAP:
        _bootstrap(work, prompts, layout)
    else:
        work.rows = Scored("rows", list(prompts), layout, tuple(keyed.choices))
        if labels.makes_plan and method is LabelMethodName.BATCH:
            sample = batch.sample_indices(len(prompts), batch.SAMPLE_ROWS)
            work.before.append([Scored("plan's sample", [prompts[i] for i in sample], layout, tuple(keyed.choices))])
        elif labels.makes_plan and method is LabelMethodName.PRIOR:
            work.before.append([Scored("prior probes", content_free_prompts(keyed), layout, tuple(keyed.choices))])
    return work


def _adaptive(work: LabelWork, prompts: Sequence[str], values: Sequence[tuple] | None, system: str | None) -> None:
    call = work.call
    if values is None or len(values) != len(prompts):  # (the planner always has them)
        values = [(p,) for p in prompts]
        work.inexact.append("the rows' values were not given: their prompts stand in")
    render = LayoutRenderer(call)

    def shaped(layout) -> Layout:
        return Layout("completion", system, layout.answer_field)

    plan = work.labels.plan
    if plan is not None and plan.layout is not None:
        texts = [plan.examples + t for t in render.many(plan.layout, values)]
        work.rows = Scored("rows", texts, shaped(plan.layout), plan.layout.labels)
        return
    layouts = layouts_for(call)
    sample = adaptive.sample_indices(len(values), adaptive.SAMPLE_ROWS)
    # its two stages (adaptive.make_plan): every layout on a few sampled rows, then the finalists
    # (estimated: the first ones) on the rest of the sample, beside their content-free probes
    first_stage, second_stage = adaptive.first_pass_stages(sample)
    finalists = layouts[: adaptive.FINALISTS]
    n = len(call.template.columns)
    proposal = proposal_prompt(call.template)
    if call.function.kind == "filter" and proposal is not None:
        # the model asked what a yes means (its concept, beside the lexicon's)
        work.before.append([Scored("concept proposal", [proposal], Layout("completion", system, f"{PROPOSAL_FIELD}:"),
                                   tuple(proposal_words(call.template)))])
    work.before.append([Scored("first pass", [render(layout, values[i]) for i in first_stage], shaped(layout),
                               layout.labels) for layout in layouts])
    work.before.append([Scored("first pass", [render(layout, values[i]) for i in second_stage], shaped(layout),
                               layout.labels) for layout in finalists]
                       + [Scored("content-free probes", [render(layout, (v,) * n) for v in CONTENT_FREE],
                                 shaped(layout), layout.labels) for layout in finalists])
    first = layouts[0]
    if len(values) <= adaptive.SAMPLE_ROWS:
        # its own sample: the first pass's scores answer every row (AdaptiveRun.request)
        work.rows = Scored("rows", [], shaped(first), first.labels)
    else:
        work.rows = Scored("rows", render.many(first, values), shaped(first), first.labels)
    work.inexact.append(f"the layout a first pass over {len(sample)} rows in {len(layouts)} layouts chooses is "
                        "estimated (the first layout)")


def _bootstrap(work: LabelWork, prompts: Sequence[str], layout: Layout) -> None:
    call = work.call
    labels = tuple(call.choices or ())
    plan = work.labels.plan
    if plan is not None:
        work.rows = Scored("rows", [plan.examples + p for p in prompts], layout, labels)
        return
    n = len(prompts)
    sample = batch.sample_indices(n, bootstrap.sample_rows(call.function.kind, n))
    typical = _median([prompts[i] for i in sample])
    picked = [(0, labels[k % len(labels)]) for k in range(len(labels) * bootstrap.PER_LABEL)]
    examples = bootstrap.examples_text([typical], picked, layout.answer_field)
    work.before.append([Scored("first pass", [prompts[i] for i in sample], layout, labels)])
    work.before.append([Scored("plan's sample behind the examples", [examples + prompts[i] for i in sample], layout,
                               labels)])
    # the sample's rows, scored behind the examples as every row is, are answered by that pass
    # (BootstrapRun.request): the rows' relQuery sends the others
    sampled = set(sample)
    work.rows = Scored("rows", [examples + p for i, p in enumerate(prompts) if i not in sampled], layout, labels)
    work.inexact.append(f"the examples a first pass over {len(sample)} rows chooses are estimated "
                        "(one per label, of the sampled rows' median length)")


def _median(texts: Sequence[str]) -> str:
    return sorted(texts, key=len)[len(texts) // 2] if texts else ""


def scoring_asks(labels: Sequence[str], shape: str, tokenizer, engine=None) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The one-token requests that score one row on ``labels`` in ``shape`` (label_scoring.asks
    over the trie of the labels, as the engine builds it)."""
    from relserve.engine.label_rows import LabelTries
    from relserve.engine.label_scoring import MAX_LOGPROBS, asks

    space = label_space(shape)
    if engine is not None and hasattr(engine, "label_trie"):
        trie = engine.label_trie(tuple(labels), space)
    else:
        trie = LabelTries(tokenizer).get(tuple(labels), space)
    return asks(trie, MAX_LOGPROBS)


def scoring_requests(call: LLMCall, rows: int, tokenizer, engine=None, values: Sequence[tuple] | None = None) -> int:
    """At most how many one-token requests score one prompt of ``call``'s relQuery of ``rows``
    prompts, its first pass's prompts included (``scoring_asks`` of every label set the label path
    may score on: the call's labels in its layout, and an adaptive call's candidate layouts and
    concept proposal; ``values``: the rows' values, whose column labels a layout may score on);
    1 when the prompts are decoded. A layout on the words the model proposes for a filter's
    concept (known only once it runs: two short labels) is not counted."""
    labels = resolve(call, rows, memory=None, namespace=None, model_id="")
    if not labels.scoring or labels.method is None:
        return 1
    sets = {(tuple(call.choices or ()), layout_of(call, labels.method.value).shape)}
    if labels.lays_out:  # scored in the completion layout, after their own answer fields
        sets |= {(layout.labels, "completion") for layout in layouts_for(call, values)}
        if call.function.kind == "filter" and proposal_prompt(call.template) is not None:
            sets.add((tuple(proposal_words(call.template)), "completion"))
    return max(len(scoring_asks(s, shape, tokenizer, engine)) for s, shape in sets if s)


def typical_answer_tokens(call: LLMCall, tokenizer) -> float:
    """A constrained decode's answer length before any is measured: a label's tokens, and the end
    token after it (the grammar allows nothing else), averaged over the labels."""
    labels = list(call.choices or ())
    if not labels:
        return float(call.max_tokens)
    lengths = [len(tokenizer(label, add_special_tokens=False)["input_ids"]) + 1 for label in labels]
    return min(float(call.max_tokens), statistics.fmean(lengths))


__all__ = ["LabelWork", "Scored", "label_work", "scoring_asks", "scoring_requests", "typical_answer_tokens"]
