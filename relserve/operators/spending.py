"""What an operator may spend (issue 63): its call's budget (``max_tokens_total``, ``max_seconds``,
``on_budget``: relserve/budget.py) held over every relQuery it sends, under a budget above it (a
server tenant's day, a DuckDB statement's).

An operator runs several relQueries (a reduction's levels, a top-k's two rounds), so the budget
is the operator's, not each relQuery's: before the first one starts its whole work is estimated
from token counts (later levels at their most, so an upper bound) and checked against the
budget (``refuse``: refused with both figures, nothing runs); while they run, every row of every
relQuery spends from one ``Allowance``, which the engine consults before it starts a row
(``partial``: the rows that fit are answered, the others fail with 'budget exceeded').
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from relserve.backend.protocol import Backend
from relserve.budget import Allowance, Budget, BudgetExceeded, refusal
from relserve.functions import LLMCall
from relserve.planner.cost import cost_model_of, engine_limits, estimate_seconds


@dataclass(frozen=True)
class OperatorWork:
    """An operator's work as its budget is checked: every relQuery's prompts added up."""

    prompts: int = 0
    prompt_tokens: int = 0
    #: the most answer tokens each prompt may take
    answer_tokens: int = 0
    seconds: float = 0.0

    @property
    def most_tokens(self) -> int:
        return self.prompt_tokens + self.prompts * self.answer_tokens

    def __add__(self, other: OperatorWork) -> OperatorWork:
        return OperatorWork(self.prompts + other.prompts, self.prompt_tokens + other.prompt_tokens,
                            max(self.answer_tokens, other.answer_tokens), self.seconds + other.seconds)


def relquery_work(engine: Backend | None, model_id: str | None, prompts: int, prompt_tokens: int,
                  answer_tokens: int) -> OperatorWork:
    """One relQuery of ``prompts`` prompts: its tokens and its seconds alone on the engine (the
    cost model EXPLAIN uses for the operators)."""
    cost = cost_model_of(engine, model_id)
    seqs, step = engine_limits(engine)
    seconds = estimate_seconds(cost, prompts, prompt_tokens, answer_tokens, max_seqs=seqs, token_budget=step)
    return OperatorWork(prompts, prompt_tokens, answer_tokens, seconds)


def operator_allowance(budget: Budget, who: str, work: OperatorWork | None, parent: Allowance | None,
                       name: str = "call") -> Allowance | None:
    """The allowance every relQuery of the operator spends from (``parent`` alone when its own
    budget sets no limit). Raises BudgetExceeded when the budget refuses ``work`` before it starts."""
    if not budget.limited:
        return parent
    if budget.on_budget == "refuse" and work is not None:
        why = refusal(budget, who, work.most_tokens, work.seconds, exact=False)
        if why is not None:
            raise BudgetExceeded(why)
    return Allowance(budget.max_tokens_total, budget.max_seconds, name=name, parent=parent)


def without_budget(call: LLMCall) -> LLMCall:
    """``call`` as each of the operator's relQueries runs it: the operator holds the budget over
    all of them, so no relQuery checks it again as if it were alone."""
    options = replace(call.options, max_tokens_total=None, max_seconds=None, on_budget="refuse")
    return replace(call, options=options)
