"""Everything one call will send to the engine, before it runs: its relQueries in the order they
start (the label path's probes and first pass, then the rows), each row's prompt token ids as
the engine computes them, its requests and the answer tokens expected of each.

From this the token counts are sums (exact, but for the examples a first pass has still to
choose), and the simulator replays the relQueries for the seconds (relserve/estimate/timing.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from relserve import answer_lengths
from relserve.estimate.label_work import Scored, label_work, scoring_asks, typical_answer_tokens
from relserve.estimate.prompt_tokens import PromptTokenizer, layout_of
from relserve.functions import LLMCall
from relserve.labels.resolution import LabelResolution
from relserve.prompt_shapes import CHAT_SHAPES

#: what each kind of relQuery is, as EXPLAIN names it
ROWS, PREFIX = "rows", "prefix warm-up"


@dataclass(frozen=True)
class RelQueryWork:
    """One relQuery a call sends to the engine."""

    kind: str
    #: per row, the token ids the engine computes
    prompt_ids: list[list[int]]
    #: the tokens each of a row's requests appends to its prompt: one empty tuple when the row is
    #: decoded, one label-trie node per request when it is scored
    suffixes: list[tuple[int, ...]]
    #: per row, the answer tokens expected of each of its requests
    answer_tokens: list[int]
    #: the engine's max_tokens of each request
    max_tokens: int
    #: counted in the engine's prompt tokens (a prefix warm-up is not a relQuery: it is not)
    counted: bool = True
    #: the call the relQuery runs (the scheduler learns its answer lengths under this key)
    call_key: str = ""

    @property
    def rows(self) -> int:
        return len(self.prompt_ids)

    @property
    def requests(self) -> int:
        return self.rows * len(self.suffixes)

    @property
    def prompt_tokens(self) -> int:
        """The engine's count: each row's prompt once (a scored row's requests share it)."""
        return sum(map(len, self.prompt_ids)) if self.counted else 0

    @property
    def most_answer_tokens(self) -> int:
        """The most answer tokens the engine can count for it (a scored row: one per request)."""
        return self.rows * len(self.suffixes) * self.max_tokens if self.counted else 0

    @property
    def expected_answer_tokens(self) -> int:
        """The answer tokens expected of it (the call's learned lengths, else the most)."""
        return sum(self.answer_tokens) * len(self.suffixes) if self.counted else 0


@dataclass
class CallWork:
    """A call's relQueries in stages: a stage starts when the one before it has finished."""

    call: LLMCall
    #: the label method the relQuery runs (None: map and extract)
    method: str | None
    #: whether its rows' labels are scored (every label method but generate)
    scoring: bool = False
    stages: list[list[RelQueryWork]] = field(default_factory=list)
    #: the prompt tokens are the engine's exactly (False: see ``inexact``)
    exact: bool = True
    #: why a count is estimated, for EXPLAIN
    inexact: list[str] = field(default_factory=list)
    #: the answer lengths are learned from earlier relQueries of the call (False: max_tokens)
    lengths_learned: bool = False

    @property
    def relqueries(self) -> list[RelQueryWork]:
        return [w for stage in self.stages for w in stage]

    @property
    def prompt_tokens(self) -> int:
        return sum(w.prompt_tokens for w in self.relqueries)

    @property
    def most_answer_tokens(self) -> int:
        return sum(w.most_answer_tokens for w in self.relqueries)

    @property
    def expected_answer_tokens(self) -> int:
        return sum(w.expected_answer_tokens for w in self.relqueries)

    @property
    def most_tokens(self) -> int:
        """Prompt tokens plus the most answer tokens: what a token budget is checked against."""
        return self.prompt_tokens + self.most_answer_tokens

    @property
    def engine_rows(self) -> int:
        return sum(w.rows for w in self.relqueries if w.counted)


def call_work(
    call: LLMCall,
    prompts: Sequence[str],
    tokens: PromptTokenizer,
    *,
    values: Sequence[tuple] | None = None,
    engine=None,
    model_id: str,
    namespace: str | None = None,
    tenant: str = "",
    prefix: str = "",
    block_size: int = 32,
    labels: LabelResolution | None = None,
) -> CallWork:
    """The relQueries ``call`` sends for ``prompts`` (its distinct prompts to run, in planned
    order; ``values``: each one's placeholder values) on ``engine`` (None: one not started yet).
    ``prefix``: the shared prefix the executor warms before the rows ("" : none); ``labels``: the
    label method and plan the planner resolved, when it did)."""
    plan = label_work(call, prompts, values, engine, model_id, namespace, labels)
    if not prompts:  # nothing runs (every row cached, or none can run): no first pass nor probe either
        return CallWork(plan.call, plan.method, plan.scoring)
    work = CallWork(plan.call, plan.method, plan.scoring, exact=not plan.inexact, inexact=list(plan.inexact))
    key = plan.call.call_key()
    asks: dict[tuple, list[tuple[int, ...]]] = {}

    def scored(q: Scored) -> RelQueryWork:
        nodes = asks.get((q.labels, q.layout.shape))
        if nodes is None:
            found = scoring_asks(q.labels, q.layout.shape, tokens.tokenizer, engine) if q.labels else [((), ())]
            nodes = asks[(q.labels, q.layout.shape)] = [node for node, _ in found]
        ids = tokens.ids(q.texts, q.layout)
        return RelQueryWork(q.kind, ids, nodes, [1] * len(ids), 1, call_key=key)

    for stage in plan.before:
        work.stages.append([scored(q) for q in stage])
    # the executor warms the prefix right before the rows, only behind the chat template, and not
    # under a token budget (CallExecutor._warm: the warm-up's tokens are in no row's reservation)
    rows_layout = plan.rows.layout if plan.rows is not None else layout_of(plan.call, plan.method)
    budgeted = plan.call.options.max_tokens_total is not None
    if prefix and not budgeted and rows_layout.shape in CHAT_SHAPES and (plan.rows is None or plan.rows.texts):
        warm = _prefix_ids(tokens, prefix, rows_layout.system, block_size)
        if warm:
            work.stages.append([RelQueryWork(PREFIX, [warm], [()], [1], 1, counted=False)])
    if plan.rows is not None:
        # (no texts: the first pass answered every row)
        rows_stage = [scored(plan.rows)] if plan.rows.texts else []
    else:
        ids = tokens.ids(list(prompts), layout_of(plan.call, plan.method))
        lengths = answer_lengths.spread(tenant, model_id, key, len(ids))
        work.lengths_learned = lengths is not None
        if lengths is None:
            typical = typical_answer_tokens(plan.call, tokens.tokenizer) if plan.call.choices else plan.call.max_tokens
            lengths = [max(1, round(typical))] * len(ids)
        rows_stage = [RelQueryWork(ROWS, ids, [()], lengths, plan.call.max_tokens, call_key=key)]
    if rows_stage:
        work.stages.append(rows_stage)
    return work


def _prefix_ids(tokens: PromptTokenizer, prefix: str, system: str | None, block_size: int) -> list[int]:
    """What ``Engine.warm_prefix(prefix, system)`` prefills: the chat template's head and the
    prefix, nothing when shorter than a KV block."""
    ids = tokens.tokenizer(tokens.prompter(system).prefix_text(system) + prefix, add_special_tokens=False)["input_ids"]
    return ids if len(ids) >= block_size else []
