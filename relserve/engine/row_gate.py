"""The engine's side of a budget (issue 47): the rows of a budgeted relQuery start in row order,
each only once its most tokens fit what every budget over it has left, and give back what they
did not use when they end (relserve/budget.py, ``Allowance``).

One ``RowGate`` per relQuery; every gate of an engine waits on one ``asyncio.Condition`` (made
on the engine's loop), since a row that ends under one relQuery may let a row of another start
(a tenant's day is shared by all its relQueries). Plain asyncio: no vLLM in here.
"""

from __future__ import annotations

import asyncio


class RowGate:
    def __init__(self, allowance: object, changed: asyncio.Condition) -> None:
        self.allowance = allowance
        self.changed = changed
        #: the position of the row whose turn it is to take its tokens
        self.turn = 0

    async def enter(self, pos: int, need: int) -> bool:
        """Wait for row ``pos``'s turn and for ``need`` tokens. True: they are held for it;
        False: they can never fit (nothing held that could come back), and the row must not run."""
        async with self.changed:
            while True:
                if self.turn == pos:
                    if self.allowance.reserve(need):
                        granted = True
                        break
                    if self.allowance.hopeless(need):
                        granted = False
                        break
                await self.changed.wait()
            self.turn += 1
            self.changed.notify_all()
        return granted

    def skip(self, pos: int) -> None:
        """Row ``pos`` was cancelled before its turn: the rows after it need not wait for it."""
        self.turn = max(self.turn, pos + 1)

    async def leave(self, need: int, prompt_tokens: int | None, answer_tokens: int) -> None:
        """A row that held ``need`` ended having used its prompt and answer tokens (``prompt_tokens``
        None: unknown, the whole of ``need`` counts); rows waiting may start."""
        if prompt_tokens is None:
            self.allowance.settle(need, need)
        else:
            self.allowance.settle(need, prompt_tokens + answer_tokens, prompt_tokens)
        async with self.changed:
            self.changed.notify_all()
