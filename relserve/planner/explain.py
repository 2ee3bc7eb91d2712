"""EXPLAIN for one LLM call: what the plan does and what it is expected to save.

Compares the call as it would run unplanned (every row, rendered as written, in input order)
with the plan (distinct prompts not in the result cache, in planned order, static prefix pinned):
predicted prefix-cache hit rate, prompt tokens, and the run time the cost model expects.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from relserve.backend.protocol import Backend
from relserve.cascade.policy import plan as cascade_plan
from relserve.cascade.report import CascadeReport
from relserve.estimate.estimate import CallEstimate, estimate_call
from relserve.labels.answer_fields import known_field, picks_field
from relserve.labels.keys import namespace_of
from relserve.labels.methods import describe_plan, describe_work
from relserve.planner.cost import cost_model_of, engine_limits, estimate_seconds, expected_output_tokens
from relserve.planner.hit_rate import predict_hits
from relserve.planner.plan import CallPlan
from relserve.planner.tokens import TokenSource
from relserve.prompt_shapes import AUTO_ANSWER_FIELD, answer_field_text

DEFAULT_BLOCK_SIZE = 32  # the engine's default (vLLM's CPU attention needs a multiple of 32)


@dataclass(frozen=True)
class Explain:
    function: str
    template: str
    model_id: str
    rows: int
    #: rows that cannot run (NULL placeholder value): NULL + error
    error_rows: int
    distinct_prompts: int
    cache_hits: int
    to_run: int
    #: "off", "rows" or "rows+fields"
    reorder: str
    planner_s: float
    #: predicted prefix-cache hit rate of the engine, unplanned vs planned
    hit_rate_original: float
    hit_rate_planned: float
    prompt_tokens_original: int
    prompt_tokens_planned: int
    #: estimated engine time, unplanned vs planned (cost model)
    estimate_original_s: float
    estimate_planned_s: float
    pinned_prefix_tokens: int
    block_size: int
    cache_capacity_blocks: int | None
    token_source: str
    cost_model: str
    sample_prompt: str | None
    explain_s: float
    #: how llm_filter / llm_classify choose the label (None for map and extract)
    label_method: str | None = None
    #: the method asked for when it differs from the one that runs (batch below its minimum rows)
    label_method_asked: str | None = None
    #: what the method does for this relQuery, in its own words (relserve/labels/methods.py)
    label_work: str | None = None
    #: the call's label plan: the kept one, or what this relQuery's first pass will choose from
    label_plan: str | None = None
    #: how the scoring request is laid out (relserve/prompt_shapes.py); None when decoding
    prompt_shape: str | None = None
    #: relserve chose the shape for this relQuery (a 2-label classify behind bootstrapped examples)
    shape_chosen: bool = False
    #: the text the label is scored after ("Answer:"); None under "chat" and when decoding
    answer_field: str | None = None
    #: relserve chose the answer field for this call (relserve/labels/answer_fields.py)
    field_chosen: bool = False
    #: few-shot examples, and their tokens (all in the prefix every prompt shares)
    examples: int = 0
    examples_tokens: int = 0
    #: the model cascade (``cascade`` option): "off", whether it will apply and with what sample
    cascade: str = "off"
    #: the adaptive method's layouts: the one an earlier relQuery of the call chose (with its
    #: mutual information over the first pass's sample), else every candidate
    #: (relserve/labels/layouts.py)
    layout: str | None = None
    layout_information: float | None = None
    layout_candidates: tuple[str, ...] = ()
    #: issue 47: the engine's prompt tokens, the most answer tokens and the seconds alone and
    #: behind the engine's queue now (relserve/estimate/); None when it could not be made
    estimate: CallEstimate | None = None

    #: the label method lays the request out itself (a layout in its plan)
    label_plan_has_layout: bool = False

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["estimate"] = self.estimate.to_dict() if self.estimate is not None else None
        return d

    @property
    def speedup(self) -> float | None:
        return self.estimate_original_s / self.estimate_planned_s if self.estimate_planned_s > 0 else None

    def __str__(self) -> str:
        cap = "unbounded" if self.cache_capacity_blocks is None else f"{self.cache_capacity_blocks} blocks"
        speed = f" ({self.speedup:.1f}x)" if self.speedup else ""
        lines = [
            f"{self.function}({self.template!r})  model={self.model_id}",
            f"  rows                  {self.rows:>10,}",
            f"  rows with errors      {self.error_rows:>10,}   (NULL placeholder value: NULL result)",
            f"  distinct prompts      {self.distinct_prompts:>10,}",
            f"  result-cache hits     {self.cache_hits:>10,}",
            f"  prompts to run        {self.to_run:>10,}   order: {self.reorder}",
            f"  prefix hit rate       {self.hit_rate_original:>9.1%} -> {self.hit_rate_planned:.1%}"
            f"   (predicted, original -> planned; block {self.block_size}, cache {cap}, tokens: {self.token_source})",
            f"  prompt tokens         {self.prompt_tokens_original:>10,} -> {self.prompt_tokens_planned:,}",
            f"  pinned prefix         {self.pinned_prefix_tokens:>10,} tokens",
            f"  plan against none     {self.estimate_original_s:>9.1f}s -> {self.estimate_planned_s:.1f}s{speed}"
            f"   (prefill and decode waves alone, unplanned -> planned; cost model: {self.cost_model})",
            f"  planner time          {self.planner_s * 1000:>9.1f} ms",
        ]
        if self.label_method is not None:
            how = self.label_work or ""
            if self.label_method_asked:
                how += f"; asked for {self.label_method_asked}"
            lines.append(f"  label method          {self.label_method:>10}   ({how})")
            if self.label_plan is not None:
                lines.append(f"  label plan            {self.label_plan}")
            if self.prompt_shape is not None and not self.label_plan_has_layout:
                why = "; chosen for a 2-label classify behind bootstrapped examples" if self.shape_chosen else ""
                lines.append(f"  prompt shape          {self.prompt_shape:>10}   (how the scoring request is laid out{why})")
            if self.answer_field is not None and not self.label_plan_has_layout:
                if not self.field_chosen:
                    why = ""
                elif self.answer_field == AUTO_ANSWER_FIELD:
                    why = "; chosen when it runs: the name after which the model likes the labels best"
                else:
                    why = "; the name after which the model likes the labels best"
                lines.append(f"  answer field          {self.answer_field:>10}   (the label is scored after it{why})")
        if self.examples:
            lines.append(
                f"  few-shot examples     {self.examples:>10,}   ({self.examples_tokens:,} tokens, in the prefix every prompt shares)"
            )
        if self.cascade != "off":
            lines.append(f"  cascade               {self.cascade}")
        if self.estimate is not None:
            lines.extend(self.estimate.lines())
        if self.sample_prompt is not None:
            sample = self.sample_prompt if len(self.sample_prompt) <= 300 else self.sample_prompt[:297] + "..."
            lines.append("  first prompt to run   " + sample.replace("\n", "\\n"))
        return "\n".join(lines)


@dataclass(frozen=True)
class Analyzed:
    """EXPLAIN ANALYZE of one call: what ran, once it has (the plan's EXPLAIN says what would)."""

    function: str
    template: str
    rows: int
    #: rows the LLM answered (prompts sent to the engine; a cascade's proxy rows are not)
    llm_rows: int
    seconds: float
    #: what the model cascade did (None: it did not run)
    cascade: CascadeReport | None = None
    #: the cascade option as planned: "off", or why it did not apply, or its sample
    cascade_plan: str = "off"
    #: what the label method found (the adaptive method: layout, estimated prior; None: nothing)
    labels: str | None = None
    #: why the relQuery stopped before its last row (a LIMIT that had its rows; None: it did not)
    stopped: str | None = None
    #: why the labels are close to guesses (None: they are not)
    warning: str | None = None

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["cascade"] = self.cascade.as_dict() if self.cascade is not None else None
        return d

    def __str__(self) -> str:
        lines = [
            f"{self.function}({self.template!r})",
            f"  rows                  {self.rows:>10,}",
            f"  rows the LLM answered {self.llm_rows:>10,}",
            f"  time                  {self.seconds:>9.1f}s",
        ]
        if self.stopped is not None:
            lines.append(f"  {self.stopped}")
        if self.labels is not None:
            lines.append(f"  labels                {self.labels}")
        if self.warning is not None:
            lines.append(f"  warning               {self.warning}")
        if self.cascade is not None:
            lines.append(str(self.cascade))
        elif self.cascade_plan != "off":
            lines.append(f"  cascade               {self.cascade_plan}")
        return "\n".join(lines)


def explain_plan(
    plan: CallPlan,
    tokens: TokenSource,
    *,
    engine: Backend | None = None,
    block_size: int | None = None,
    capacity_blocks: int | None = None,
) -> Explain:
    t0 = time.perf_counter()
    block = block_size or getattr(engine, "block_size", None) or DEFAULT_BLOCK_SIZE
    if capacity_blocks is None:
        capacity_blocks = kv_capacity_blocks(engine)
    cost = cost_model_of(engine, plan.model_id)
    seqs, budget = engine_limits(engine)
    call = plan.call
    namespace = namespace_of(engine)
    labels = plan.labels
    out_tokens = expected_output_tokens(call.max_tokens, call.choices is not None)

    baseline_texts = plan.baseline_prompts()
    run_texts = plan.run_prompts
    # each distinct text is tokenized once: without field reordering both lists hold the same texts
    distinct = list(dict.fromkeys(baseline_texts + run_texts))
    ids = dict(zip(distinct, tokens.many(distinct)))
    baseline = [ids[t] for t in baseline_texts]
    original = predict_hits(baseline, block, capacity_blocks)

    run = [ids[t] for t in run_texts]
    prefix = plan.shared_prefix()
    pinned = pinned_prefix_tokens(tokens, prefix, block) if len(run) > 1 else []
    planned = predict_hits(run, block, capacity_blocks, warm=[pinned] if pinned else [])
    est_original = estimate_seconds(cost, original.prompts, original.uncached_tokens, out_tokens, max_seqs=seqs, token_budget=budget)
    est_planned = estimate_seconds(
        cost, planned.prompts, planned.uncached_tokens + len(pinned), out_tokens, max_seqs=seqs, token_budget=budget
    )
    return Explain(
        function=call.function.name,
        template=call.template.source,
        model_id=plan.model_id,
        rows=plan.rows,
        error_rows=len(plan.row_errors),
        distinct_prompts=plan.distinct_prompts,
        cache_hits=plan.cache_hits,
        to_run=len(plan.run_order),
        reorder=plan.reorder,
        planner_s=plan.planner_s,
        hit_rate_original=original.rate,
        hit_rate_planned=planned.rate,
        prompt_tokens_original=original.prompt_tokens,
        prompt_tokens_planned=planned.prompt_tokens,
        estimate_original_s=est_original,
        estimate_planned_s=est_planned,
        pinned_prefix_tokens=len(pinned),
        block_size=block,
        cache_capacity_blocks=capacity_blocks,
        token_source=tokens.kind,
        cost_model=getattr(cost, "source", "default"),
        sample_prompt=plan.run_prompts[0] if plan.run_order else None,
        explain_s=time.perf_counter() - t0,
        label_method=labels.method.value if labels.method is not None else None,
        label_method_asked=labels.asked.value if labels.asked is not None else None,
        label_work=describe_work(labels, call, len(plan.run_order)),
        label_plan=describe_plan(labels, call),
        label_plan_has_layout=labels.lays_out,
        prompt_shape=call.prompt_shape if labels.scoring else None,
        shape_chosen=plan.shape_chosen,
        answer_field=_answer_field(call, plan.model_id, namespace, labels),
        field_chosen=picks_field(call),
        examples=len(call.options.examples or ()),
        examples_tokens=len(tokens.many([call.examples_prefix])[0]) if call.options.examples else 0,
        cascade=cascade_plan(call, len(plan.run_order)).describe(),
        estimate=explain_estimate(plan, engine, namespace),
    )


def explain_estimate(plan: CallPlan, engine: Backend | None, namespace: str | None) -> CallEstimate | None:
    """Issue 47: the call's estimate as ``run_rows`` would run it (the executor warms the shared
    prefix of two prompts or more). None when no tokenizer can be had (the model not prepared)."""
    from relserve.errors import ConfigError
    from relserve.planner.planned_rows import PlannedRows

    rows = PlannedRows.of(plan)  # the prompts to run with their rows' values, in planned order
    try:
        return estimate_call(plan.call, rows.prompts, engine=engine, model_id=plan.model_id, namespace=namespace,
                             values=rows.values, prefix=plan.shared_prefix() if len(rows.prompts) > 1 else "",
                             labels=plan.labels)
    except ConfigError:
        return None


def pinned_prefix_tokens(tokens: TokenSource, prefix: str, block_size: int) -> list[int]:
    """Token ids of the shared prefix worth pinning: whole blocks only, as the cache keeps them.

    The chat template wraps the prompt, so the prefix's ids are taken from the start of a real
    prompt's ids rather than from tokenizing the prefix alone (whose last token may differ).
    """
    if not prefix:
        return []
    ids = tokens.tokenize(prefix)
    # drop the tail the chat template appends after the user text, and the last (unstable) token
    keep = ((max(0, _user_text_token_count(tokens, ids, prefix) - 1)) // block_size) * block_size
    return ids[:keep]


def _user_text_token_count(tokens: TokenSource, ids: list[int], prefix: str) -> int:
    # tokens of (chat template head + prefix): ids minus the template's tail, measured on an empty prompt
    empty = tokens.tokenize("")
    head = 0
    while head < len(empty) and head < len(ids) and empty[head] == ids[head]:
        head += 1
    tail = len(empty) - head
    return len(ids) - tail


def kv_capacity_blocks(engine: Backend | None) -> int | None:
    """How many KV blocks the engine's prefix cache holds, if the engine says."""
    if engine is None:
        return None
    tokens = getattr(engine, "kv_capacity_tokens", None)
    block = getattr(engine, "block_size", None)
    if isinstance(tokens, int) and tokens > 0 and block:
        return tokens // block
    value = getattr(engine, "num_kv_blocks", None)
    return value if isinstance(value, int) and value > 0 else None


def _answer_field(call, model_id: str, namespace: str | None, labels) -> str | None:
    """The answer field EXPLAIN shows: None when there is none (decoding, the chat shape); the
    name chosen for an ``auto`` call in ``namespace`` once known, else "auto"."""
    if not labels.scoring or call.prompt_shape == "chat":
        return None
    if picks_field(call):
        name = known_field(call, model_id, namespace, labels.memory)
        return answer_field_text(name) if name else AUTO_ANSWER_FIELD
    return call.answer_field


def describe_labels(report) -> str | None:
    """One line of EXPLAIN ANALYZE for what the label method found (None: nothing)."""
    from relserve.labels.adaptive import AdaptiveReport
    from relserve.labels.guesses import AnswerSpread

    if isinstance(report, AnswerSpread):
        return describe_spread(report)
    if not isinstance(report, AdaptiveReport):
        return None
    how = (f"made by this relQuery's first pass over {report.plan.sample} rows" if report.first_pass
           else "the call's kept plan")
    return f"plan ({how}): {report.plan.describe()}"


def describe_spread(spread) -> str | None:
    """EXPLAIN ANALYZE's line for a method that decides each row from its own scores: how much
    the answers depend on the rows, and the label most of them got."""
    top = spread.most_common
    if top is None:
        return None
    label, share = top
    guesses = " (close to guesses)" if spread.guessing else ""
    return (f"method {spread.method!r}: mutual information between rows and answers {spread.information:.3f} nats"
            f"{guesses} over {spread.rows} rows; most common answer {label!r} ({share:.0%})")
