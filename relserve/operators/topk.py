"""``llm_topk``: the k values that best fit a yes/no question, in two rounds of one relQuery each.

Round 1 scores every distinct value once: the template is asked as ``llm_filter`` with label
scoring, and a value's score is log p(yes) - log p(no) (n prompts). Round 2 is a round-robin
among the ``pool`` best-scored values (default 2k): every ordered pair (a, b) asks "which of the
two fits better, the first or the second?", and asking both orders cancels the model's bias for
a position. A value's wins over the pool rank it; ties go to the round-1 score. That is
n + pool*(pool-1) prompts instead of the n*(n-1) of comparing all pairs.

Why an aggregate returning a list (``llm_topk(template, value, k)``, like DuckDB's
``max(x, n)`` / ``arg_max(x, y, n)``) rather than ``ORDER BY llm_score(...) LIMIT k``: a
per-row score cannot compare rows with each other, and DuckDB does not tell a scalar function
the LIMIT, so every row would be scored and no tournament could run. The aggregate sees the
whole group and k, works per GROUP BY group, and ``unnest`` turns it back into rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from relserve.backend.protocol import Backend
from relserve.budget import Allowance, Budget
from relserve.errors import ConfigError, RowError
from relserve.functions import LLM_CLASSIFY, LLM_FILTER, LLMCall, make_call
from relserve.operators.budget import TokenCounter, placeholders
from relserve.operators.scoring import Scores, label_scores
from relserve.operators.spending import OperatorWork, operator_allowance, relquery_work
from relserve.operators.values import Value
from relserve.planner.engine_ref import EngineRef
from relserve.template import format_value

WHO = "llm_topk"
#: the comparison asked in round 2; the first value's text opens the prompt, so every pair with
#: the same first value shares that prefix (the planner orders them side by side)
COMPARE_TEMPLATE = "First:\n{first}\n\nSecond:\n{second}\n\nWhich of the two fits better?"
COMPARE_LABELS = ("first", "second")


@dataclass(frozen=True)
class TopKCall:
    score: LLMCall
    compare: LLMCall
    k: int
    #: candidates of round 2 (None: 2k)
    pool: int | None = None

    def pool_size(self, candidates: int) -> int:
        return min(candidates, self.pool if self.pool is not None else 2 * self.k)


def topk_call(template: str, k: int, *, pool: int | None = None, **options: Any) -> TopKCall:
    """Check a top-k before anything runs: one placeholder (the value), a yes/no question."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ConfigError(f"{WHO}: k must be a positive integer, got {k!r}")
    if pool is not None and (not isinstance(pool, int) or isinstance(pool, bool) or pool < k):
        raise ConfigError(f"{WHO}: pool must be an integer >= k ({k}), got {pool!r}")
    for bad in ("reorder_fields", "examples", "temperature", "method"):
        if options.get(bad) not in (None, False, 0, 0.0):
            raise ConfigError(f"{WHO} takes no {bad}: it ranks by label scores (greedy, method 'score')")
    options = {k_: v for k_, v in options.items() if k_ not in ("reorder_fields", "examples", "temperature", "method")}
    placeholders(template, WHO, 1, "Is this review about battery life? {review}")
    score = make_call(LLM_FILTER, template, method="score", **options)
    compare = make_call(LLM_CLASSIFY, COMPARE_TEMPLATE, labels=list(COMPARE_LABELS), method="score",
                        **{k_: v for k_, v in options.items() if k_ != "max_tokens"})
    return TopKCall(score, compare, k, pool)


@dataclass
class Round:
    """One round: its prompts (one relQuery) and what the engine reported."""

    name: str
    prompts: int
    ran: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0


@dataclass
class TopKOutcome:
    #: positions (in the input) of the top values, best first, and the values themselves
    indices: list[int]
    values: list[Value]
    #: per input position: round-1 score (log p(yes) - log p(no)), None for NULL or failed rows
    scores: list[float | None]
    errors: list[str | None]
    rounds: list[Round] = field(default_factory=list)

    @property
    def comparisons(self) -> int:
        return sum(r.prompts for r in self.rounds if r.name == "compare")


def _record(name: str, prompts: int, result: Scores) -> Round:
    r = Round(name, prompts, ran=result.ran)
    if result.stats is not None:
        r.prompt_tokens, r.output_tokens = result.stats.prompt_tokens, result.stats.output_tokens
        r.latency_s = getattr(result.stats, "latency_s", 0.0)
    return r


def run_topk(tc: TopKCall, values: Sequence[Value], *, engine: Backend | None = None, progress: bool = False,
             budget: Allowance | None = None, budget_name: str = "call") -> TopKOutcome:
    """The ``k`` best values. The call's budget (``max_tokens_total``, ``max_seconds``,
    ``on_budget``) holds over both rounds (relserve/operators/spending.py), under ``budget`` (a
    tenant's day) when given; BudgetExceeded when it refuses the top-k before it starts."""
    ref = engine if isinstance(engine, EngineRef) else EngineRef(engine, tc.score.options.model)
    n = len(values)
    texts = [None if v is None else (v if isinstance(v, str) else format_value(v)) for v in values]
    scores: list[float | None] = [None] * n
    errors: list[str | None] = [None] * n
    out = TopKOutcome([], [], scores, errors)
    # round 1: every distinct value once (the planner sends equal prompts once; NULLs skipped,
    # as aggregates skip them, so they get no error either)
    present = [i for i in range(n) if texts[i] is not None]
    if not present:
        return out
    own = Budget.of(tc.score.options)
    work = _work(tc, [texts[i] for i in present], ref) if own.limited else None
    allowance = operator_allowance(own, WHO, work, budget, budget_name)
    s = label_scores(tc.score, [[texts[i] for i in present]], ref, progress=progress, budget=allowance)
    out.rounds.append(_record("score", len(present), s))
    for j, i in enumerate(present):
        lp = s.logprobs[j]
        if lp is None:
            errors[i] = s.errors[j]
        else:
            scores[i] = lp["yes"] - lp["no"]
    if tc.score.options.on_error == "raise" and any(errors):
        i = next(i for i in range(n) if errors[i])
        raise RowError(f"{WHO}: row {i}: {errors[i]}")
    # equal values are one candidate: the first row holding it stands for all
    first_of: dict[str, int] = {}
    for i in present:
        if scores[i] is not None:
            first_of.setdefault(texts[i], i)
    candidates = sorted(first_of.values(), key=lambda i: (-scores[i], i))
    pool = candidates[: tc.pool_size(len(candidates))]
    wins = {i: 0 for i in pool}
    if len(pool) > tc.k:
        # round 2: every ordered pair among the pool
        pairs = [(a, b) for a in pool for b in pool if a != b]
        c = label_scores(tc.compare, [[texts[a] for a, _ in pairs], [texts[b] for _, b in pairs]], ref, progress=progress,
                         budget=allowance)
        out.rounds.append(_record("compare", len(pairs), c))
        margin: dict[tuple[int, int], float] = {}
        for (a, b), lp in zip(pairs, c.logprobs):
            if lp is not None:
                margin[(a, b)] = lp["first"] - lp["second"]
        for x, a in enumerate(pool):
            for b in pool[x + 1 :]:
                # a beats b: "first" when a is first, "second" when a is second (both orders
                # count, so a model that always says "first" gives no one a win)
                m = margin.get((a, b), 0.0) - margin.get((b, a), 0.0)
                if m > 0:
                    wins[a] += 1
                elif m < 0:
                    wins[b] += 1
    ranked = sorted(pool, key=lambda i: (-wins[i], -scores[i], i))[: tc.k]
    out.indices = ranked
    out.values = [values[i] for i in ranked]
    return out


def _work(tc: TopKCall, texts: Sequence[str], ref: EngineRef) -> OperatorWork:
    """Both rounds at their most: every distinct value scored once, then every ordered pair of
    the pool compared, each pair as long as the two longest values; one answer token each."""
    counter = TokenCounter.of(ref.peek(), tc.score.options.model)
    distinct = list(dict.fromkeys(texts))
    sizes = counter.count(distinct)
    score_overhead = counter.prompt(tc.score.template.render({tc.score.template.columns[0]: ""}))
    running = ref.peek()
    work = relquery_work(running, ref.model_id, len(distinct), sum(sizes) + len(distinct) * score_overhead, 1)
    pool = tc.pool_size(len(distinct))
    if pool > tc.k:
        pairs = pool * (pool - 1)
        longest = sum(sorted(sizes, reverse=True)[:2])
        compare_overhead = counter.prompt(COMPARE_TEMPLATE.format(first="", second=""))
        work += relquery_work(running, ref.model_id, pairs, pairs * (longest + compare_overhead), 1)
    return work


def explain_topk(tc: TopKCall, values: Sequence[Value]) -> dict[str, Any]:
    """Rounds and prompts a top-k would run (no engine, no tokens)."""
    distinct = len({v if isinstance(v, str) else format_value(v) for v in values if v is not None})
    pool = tc.pool_size(distinct)
    compare = pool * (pool - 1) if pool > tc.k else 0
    return {
        "rows": len(values),
        "null_rows": sum(1 for v in values if v is None),
        "distinct_values": distinct,
        "k": tc.k,
        "pool": pool,
        "rounds": [{"name": "score", "prompts": distinct}] + ([{"name": "compare", "prompts": compare}] if compare else []),
        "prompts": distinct + compare,
        "all_pairs_prompts": distinct * (distinct - 1),
    }
