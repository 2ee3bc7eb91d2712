"""Budgets a user sets (issue 47): the engine tokens a call or statement may spend (prompt tokens
plus answer tokens, as the engine counts them) and the seconds it may take, per call
(``llm_options(max_tokens_total := ..., max_seconds := ..., on_budget := ...)``), per DuckDB
statement, per PostgreSQL session or role, and per server tenant and day (tokens).

Before a call starts its estimate is checked against its budget. With ``on_budget := 'refuse'``
(the default) a call whose most tokens (its prompt tokens plus ``max_tokens`` per request: the
most it can spend) or estimated seconds exceed the budget is refused with both figures in the
message, and nothing runs. With ``'partial'`` it runs until the budget is reached: the rows
answered keep their answers, the others are NULL with the error 'budget exceeded ...' (never a
silent truncation).

While it runs the budget is held by an ``Allowance``, which the engine consults before it starts
each row (relserve/engine/engine.py): a row starts only when its most tokens fit what is left
(and what is left of every budget above it: the statement's, the tenant's day), and gives back
what it did not use when it finishes. So a budgeted call never spends more than its budget; past
its seconds its unfinished rows are cancelled, which frees the engine at once, as a cancel does.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from relserve import validation as check
from relserve.errors import RelServeError

#: the start of every row error a budget gives
BUDGET_EXCEEDED = "budget exceeded"


class BudgetExceeded(RelServeError):
    """A call or statement refused before starting: its estimate exceeds its budget."""


@dataclass(frozen=True)
class Budget:
    """What a user allows a call or a statement (None: no limit on that figure)."""

    max_tokens_total: int | None = None
    max_seconds: float | None = None
    on_budget: str = "refuse"

    def __post_init__(self) -> None:
        check.max_tokens_total(self.max_tokens_total)
        object.__setattr__(self, "max_seconds", check.max_seconds(self.max_seconds))
        check.on_budget(self.on_budget)

    @classmethod
    def of(cls, options) -> Budget:
        """The budget of a call's options (``CallOptions``)."""
        return cls(options.max_tokens_total, options.max_seconds, options.on_budget)

    @property
    def limited(self) -> bool:
        return self.max_tokens_total is not None or self.max_seconds is not None

    def describe(self) -> str:
        parts = []
        if self.max_tokens_total is not None:
            parts.append(f"max_tokens_total {self.max_tokens_total:,}")
        if self.max_seconds is not None:
            parts.append(f"max_seconds {self.max_seconds:g}")
        return ", ".join(parts) or "no budget"


def refusal(budget: Budget, what: str, most_tokens: int, seconds: float | None, *, exact: bool = True) -> str | None:
    """Why ``what`` is refused before starting (its estimate over ``budget``), or None."""
    over = []
    if budget.max_tokens_total is not None and most_tokens > budget.max_tokens_total:
        about = "" if exact else "about "
        over.append(f"it may spend {about}{most_tokens:,} engine tokens (prompt tokens plus max_tokens per request) "
                    f"and the budget is max_tokens_total {budget.max_tokens_total:,}")
    if budget.max_seconds is not None and seconds is not None and seconds > budget.max_seconds:
        over.append(f"it is estimated at {seconds:.2f} s and the budget is max_seconds {budget.max_seconds:g}")
    if not over:
        return None
    return (f"{what}: refused before starting: {'; '.join(over)}. Raise the budget, run fewer rows, or set "
            "on_budget := 'partial' to answer the rows the budget allows (the others NULL with 'budget exceeded')")


_lock = threading.Lock()


class Allowance:
    """What a running call (and every budget above it: ``parent``) may still spend. Thread-safe;
    the engine reserves a row's most tokens before starting it and settles what it used."""

    def __init__(self, max_tokens: int | None = None, max_seconds: float | None = None, *, name: str = "call",
                 parent: Allowance | None = None, started: float | None = None,
                 tokens_limit: str = "max_tokens_total") -> None:
        self.max_tokens = max_tokens
        self.name = name
        #: the setting its tokens come from, for the messages
        self.tokens_limit = tokens_limit
        self.parent = parent
        start = time.monotonic() if started is None else started
        self.deadline = start + max_seconds if max_seconds is not None else None
        self.max_seconds = max_seconds
        #: tokens spent by finished rows (and charged probes), and reserved by running ones
        self.spent = 0
        self.reserved = 0
        #: of ``spent``, the prompt tokens (EXPLAIN ANALYZE shows them beside the estimate)
        self.spent_prompt = 0

    @classmethod
    def for_budget(cls, budget: Budget, name: str, parent: Allowance | None = None) -> Allowance | None:
        """An allowance holding ``budget`` (the parent's alone when it sets no limit)."""
        if not budget.limited:
            return parent
        return cls(budget.max_tokens_total, budget.max_seconds, name=name, parent=parent)

    @property
    def chain(self) -> list[Allowance]:
        out, a = [], self
        while a is not None:
            out.append(a)
            a = a.parent
        return out

    @property
    def earliest_deadline(self) -> float | None:
        deadlines = [a.deadline for a in self.chain if a.deadline is not None]
        return min(deadlines) if deadlines else None

    def left(self) -> int | None:
        """Tokens the tightest budget of the chain still allows (None: no token budget)."""
        with _lock:
            lefts = [a.max_tokens - a.spent - a.reserved for a in self.chain if a.max_tokens is not None]
        return min(lefts) if lefts else None

    def reserve(self, tokens: int) -> bool:
        """Hold ``tokens`` in every budget of the chain, if all of them have room."""
        with _lock:
            if any(a.max_tokens is not None and a.spent + a.reserved + tokens > a.max_tokens for a in self.chain):
                return False
            for a in self.chain:
                a.reserved += tokens
            return True

    def settle(self, reserved: int, used: int, prompt: int = 0) -> None:
        """A row that held ``reserved`` finished having used ``used`` tokens, ``prompt`` of
        them its prompt's."""
        with _lock:
            for a in self.chain:
                a.reserved -= reserved
                a.spent += used
                a.spent_prompt += prompt

    def charge(self, tokens: int, prompt: int = 0) -> None:
        """Tokens spent outside the rows' reservations (a call's label probes, a server's call)."""
        with _lock:
            for a in self.chain:
                a.spent += tokens
                a.spent_prompt += prompt

    def hopeless(self, tokens: int) -> bool:
        """Whether ``tokens`` can never fit: a budget it does not fit has nothing reserved that
        could come back."""
        with _lock:
            return any(a.max_tokens is not None and a.spent + a.reserved + tokens > a.max_tokens and a.reserved == 0
                       for a in self.chain)

    def tokens_message(self, tokens: int) -> str:
        """The row error of a row whose ``tokens`` do not fit."""
        with _lock:
            tight = next((a for a in self.chain if a.max_tokens is not None and a.spent + a.reserved + tokens > a.max_tokens),
                         self)
            spent = tight.spent
        limit = f"{tight.max_tokens:,}" if tight.max_tokens is not None else "?"
        return (f"{BUDGET_EXCEEDED}: the {tight.name}'s {tight.tokens_limit} {limit} is reached ({spent:,} tokens spent; "
                f"this row may need {tokens:,})")

    def seconds_message(self) -> str:
        tight = min((a for a in self.chain if a.deadline is not None), key=lambda a: a.deadline or 0.0, default=self)
        return f"{BUDGET_EXCEEDED}: the {tight.name}'s max_seconds {tight.max_seconds:g} was reached before this row was answered"

    def expired(self) -> bool:
        deadline = self.earliest_deadline
        return deadline is not None and time.monotonic() >= deadline

    @property
    def spent_tokens(self) -> int:
        with _lock:
            return self.spent
