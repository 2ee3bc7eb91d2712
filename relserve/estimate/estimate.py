"""A call's estimate before it runs: the engine's prompt tokens, the most answer tokens, and its
seconds alone on an idle engine and behind what the engine holds now (issue 47). Both replays
start with the prompt blocks the engine's prefix cache holds now (relserve/estimate/prefix_cache.py).

    est = estimate_call(call, prompts, engine=engine, model_id=engine.model_id)
    est.prompt_tokens, est.idle_s, est.now_s

Every surface's EXPLAIN shows it per call site (relserve/planner/explain.py); statements add
their sites up (``estimate_chains``); budgets check a call against it before it starts
(relserve/budget.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from relserve import answer_lengths
from relserve.estimate.call_work import PREFIX, CallWork, call_work
from relserve.estimate.prefix_cache import PrefixLookup, cached_prompts, prefix_lookup
from relserve.estimate.prompt_tokens import PromptTokenizer, prompt_tokenizer
from relserve.estimate.snapshot import Background, QueuedRelQuery, background_of
from relserve.estimate.timing import Chain, Machine, SimulationError, machine_of, replay
from relserve.functions import LLMCall
from relserve.labels.resolution import LabelResolution
from relserve.relquery import encodable


@dataclass(frozen=True)
class CallEstimate:
    """What a call will cost (see the module docstring)."""

    #: the engine's prompt tokens of every relQuery the call sends (after deduplication and the
    #: result cache; probes and a first pass included)
    prompt_tokens: int
    #: of those, the ones the prefix cache will not hold (predicted by the replay alone)
    computed_prompt_tokens: int
    #: the most answer tokens the engine can count (max_tokens per request)
    most_answer_tokens: int
    #: the answer tokens expected (the call's learned answer lengths, else the most)
    expected_answer_tokens: int
    engine_rows: int
    relqueries: int
    #: seconds alone on an idle engine (None: the replay could not run the work)
    idle_s: float | None
    #: seconds behind the work the engine holds now (None: no engine to ask, or it cannot tell)
    now_s: float | None
    #: of the prompt tokens, those the engine's prefix cache holds now (from earlier work)
    engine_cached_tokens: int = 0
    #: the engine's work the "now" figure waits behind
    queued_relqueries: int = 0
    queued_requests: int = 0
    #: the prompt tokens are the engine's count exactly; else why not
    exact: bool = True
    inexact: tuple[str, ...] = ()
    #: answer lengths learned from the call's earlier relQueries (False: max_tokens assumed)
    lengths_learned: bool = False
    #: the rows' labels are scored, not decoded
    scored: bool = False
    cost_model: str = ""
    policy: str = ""
    #: why there are no seconds, when there are none
    problem: str | None = None
    #: each stage of the call (probes, first pass, rows): its relQueries' kinds and idle end
    stages: tuple[tuple[str, float], ...] = field(default=())
    #: the relQueries themselves, for a statement's replay of all its sites (not serialised)
    work: CallWork | None = field(default=None, repr=False, compare=False)

    @property
    def most_tokens(self) -> int:
        """Prompt tokens plus the most answer tokens: what a token budget is checked against."""
        return self.prompt_tokens + self.most_answer_tokens

    def to_dict(self) -> dict[str, object]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "work"}
        d["inexact"] = list(self.inexact)
        d["stages"] = [list(s) for s in self.stages]
        d["most_tokens"] = self.most_tokens
        return d

    def lines(self) -> list[str]:
        """EXPLAIN's lines for the estimate."""
        count = "the engine's count" if self.exact else "estimated: " + "; ".join(self.inexact)
        learned = ("labels scored: one answer token per request" if self.scored else
                   "answer lengths learned from its earlier rows" if self.lengths_learned else "answers of max_tokens assumed")
        held = (f" and the {self.engine_cached_tokens:,} the engine's prefix cache holds now" if self.engine_cached_tokens
                else "")
        out = [
            f"  engine prompt tokens  {self.prompt_tokens:>10,}   ({count}; {self.computed_prompt_tokens:,} computed after "
            f"prefix sharing{held}; {self.engine_rows:,} rows in {self.relqueries} relQuer{'y' if self.relqueries == 1 else 'ies'})",
            f"  most answer tokens    {self.most_answer_tokens:>10,}   (about {self.expected_answer_tokens:,} expected; "
            f"prompt + answer at most: {self.most_tokens:,})",
        ]
        if self.idle_s is None:
            out.append(f"  estimated seconds     {'?':>10}   ({self.problem})")
            return out
        now = "no engine running: nothing to wait behind" if self.now_s is None else (
            f"now {self.now_s:.2f}s behind {self.queued_relqueries} relQuer{'y' if self.queued_relqueries == 1 else 'ies'} "
            f"({self.queued_requests:,} requests) the engine holds")
        out.append(f"  estimated seconds     {self.idle_s:>9.2f}s   (alone on an idle engine; {now}; "
                   f"policy {self.policy}, cost model: {self.cost_model}; {learned})")
        return out


def estimate_of(data: dict[str, Any] | None) -> CallEstimate | None:
    """A ``CallEstimate`` from its JSON (``to_dict``: a server's answer), without its work."""
    if not data:
        return None
    names = {f.name for f in fields(CallEstimate)} - {"work"}
    d = {k: v for k, v in data.items() if k in names}
    d["inexact"] = tuple(d.get("inexact", ()))
    d["stages"] = tuple(tuple(s) for s in d.get("stages", ()))
    return CallEstimate(**d)


@dataclass
class EngineView:
    """The engine an estimate is made for and what it holds now (taken once per statement)."""

    machine: Machine
    background: Background | None
    queued: int = 0
    taken_at: float = 0.0
    #: how to ask the engine what its prefix cache holds of a call's prompts (None: it cannot tell)
    prefix_lookup: PrefixLookup | None = None
    #: the prefix-cache namespace the call's prompts run in (a server tenant's ``cache_salt``;
    #: None: the shared one): its prompts find only the blocks of that namespace in the replay
    salt: str | None = None


def engine_view(engine, model_id: str) -> EngineView:
    """``engine``'s machine and its queue now (None: an engine not started: nothing queued)."""
    queued_fn = getattr(engine, "queued", None) if engine is not None else None
    salt = getattr(engine, "prefix_cache_namespace", None) if engine is not None else None
    if queued_fn is None:
        return EngineView(machine_of(engine, model_id), None, prefix_lookup=prefix_lookup(engine), salt=salt)
    now = time.monotonic()
    queued: list[QueuedRelQuery] = queued_fn()
    machine = machine_of(engine, model_id)  # after the queue: with the gap between steps it measured

    def lengths(q: QueuedRelQuery, n: int) -> list[int] | None:
        return answer_lengths.spread(q.tenant, model_id, q.call_key, n)

    return EngineView(machine, background_of(queued, now, machine.limits.block_size, lengths), len(queued), now,
                      prefix_lookup(engine), salt)


def work_of(call: LLMCall, prompts: Sequence[str], *, engine, model_id: str, values: Sequence[tuple] | None = None,
            namespace: str | None = None, tenant: str = "", prefix: str = "",
            tokens: PromptTokenizer | None = None, labels: LabelResolution | None = None) -> CallWork:
    """The relQueries ``call`` sends for ``prompts`` (relserve/estimate/call_work.py; ``labels``:
    the label method and plan the planner resolved, when it did)."""
    tokens = tokens or prompt_tokenizer(engine, call.options.model)
    block = getattr(engine, "block_size", None) or 32
    return call_work(call, prompts, tokens, values=values, engine=engine, model_id=model_id, namespace=namespace,
                     tenant=tenant, prefix=prefix, block_size=block, labels=labels)


def estimate_call(call: LLMCall, prompts: Sequence[str], *, engine, model_id: str, values: Sequence[tuple] | None = None,
                  namespace: str | None = None, tenant: str = "", prefix: str = "", view: EngineView | None = None,
                  tokens: PromptTokenizer | None = None, labels: LabelResolution | None = None) -> CallEstimate:
    """The estimate of ``call`` over ``prompts`` (its distinct prompts to run, in planned order;
    ``values``: each one's placeholder values, which a label method may lay out anew)."""
    # a prompt that is not valid text fails at the engine's door (RelQuery.render): it costs nothing
    keep = [i for i, p in enumerate(prompts) if isinstance(encodable(p), str)]
    runnable = [prompts[i] for i in keep]
    rows = [values[i] for i in keep] if values is not None and len(values) == len(prompts) else None
    work = work_of(call, runnable, engine=engine, model_id=model_id, values=rows, namespace=namespace, tenant=tenant,
                   prefix=prefix, tokens=tokens, labels=labels)
    return estimate_work(work, engine=engine, model_id=model_id, view=view)


def estimate_work(work: CallWork, *, engine, model_id: str, view: EngineView | None = None) -> CallEstimate:
    view = view or engine_view(engine, model_id)
    m = view.machine
    base = dict(
        prompt_tokens=work.prompt_tokens, most_answer_tokens=work.most_answer_tokens,
        expected_answer_tokens=work.expected_answer_tokens, engine_rows=work.engine_rows,
        relqueries=sum(1 for w in work.relqueries if w.counted), exact=work.exact, inexact=tuple(work.inexact),
        lengths_learned=work.lengths_learned, cost_model=m.cost_source, policy=m.policy, work=work,
        scored=work.scoring,
    )
    held = cached_prompts(view.prefix_lookup, work.relqueries, m.limits.block_size, view.salt)
    base["engine_cached_tokens"] = held.tokens
    # a prefix warm-up the engine holds already is skipped (Engine.warm_prefix)
    kept = [stage for stage in work.stages
            if not all(w.kind == PREFIX and all(tuple(ids) in held.whole for ids in w.prompt_ids) for w in stage)]
    if not kept:  # nothing to run (every row cached), or only a warm-up the engine holds
        return CallEstimate(computed_prompt_tokens=0, idle_s=0.0, now_s=None if view.background is None else 0.0, **base)
    chain = Chain("call", kept)
    try:
        alone = replay([chain], m, cached=held.blocks, salt=view.salt)
        now = replay([chain], m, view.background, held.blocks, view.salt) if view.background is not None else None
    except SimulationError as e:
        return CallEstimate(computed_prompt_tokens=work.prompt_tokens, idle_s=None, now_s=None, problem=str(e), **base)
    stages = tuple((", ".join(w.kind for w in stage), end) for stage, end in zip(kept, alone.chains["call"].stage_ends))
    return CallEstimate(
        computed_prompt_tokens=alone.prefill_tokens - alone.cached_tokens,
        idle_s=alone.chains["call"].seconds,
        now_s=now.chains["call"].seconds if now is not None else None,
        queued_relqueries=view.queued,
        queued_requests=view.background.requests if view.background is not None else 0,
        stages=stages,
        **base,
    )
