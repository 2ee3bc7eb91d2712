"""Which values of a group go into which prompt: greedy packing under a token budget.

Pure functions over token counts (no engine, no model), shared by the run and by EXPLAIN so
both cut a group at the same places. Values keep their order: a chunk is a run of consecutive
values, so a reduction reads the group as written (the order of GROUP BY's list, or the
group's rows in polars).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: how the values of one prompt are folded into its placeholder: one item per line
ITEM_PREFIX = "- "
SEPARATOR = "\n"


def fold(values: Sequence[str]) -> str:
    """The text that replaces the template's placeholder for these values."""
    return SEPARATOR.join(ITEM_PREFIX + v for v in values)


#: tokens an item costs beyond its own text (prefix and separator; counted generously)
ITEM_OVERHEAD = 3


class TooLong(Exception):
    """A single value does not fit in a prompt on its own."""

    def __init__(self, position: int, tokens: int, budget: int) -> None:
        super().__init__(f"value {position} has {tokens} tokens; a prompt has room for {budget}")
        self.position, self.tokens, self.budget = position, tokens, budget


@dataclass(frozen=True)
class Chunk:
    """Values [start, stop) of a group's current items, and their estimated tokens."""

    start: int
    stop: int
    tokens: int


def pack(tokens: Sequence[int], budget: int) -> list[Chunk]:
    """Consecutive runs of items whose tokens (plus item overhead) fit in ``budget`` each.

    Raises ``TooLong`` for an item that does not fit alone. An empty group packs to no chunk.
    """
    chunks: list[Chunk] = []
    start, used = 0, 0
    for i, t in enumerate(tokens):
        cost = t + ITEM_OVERHEAD
        if cost > budget:
            raise TooLong(i, t, budget)
        if used + cost > budget and i > start:
            chunks.append(Chunk(start, i, used))
            start, used = i, 0
        used += cost
    if len(tokens) > start:
        chunks.append(Chunk(start, len(tokens), used))
    return chunks


@dataclass(frozen=True)
class LevelEstimate:
    """One level of a tree reduction as EXPLAIN predicts it."""

    level: int
    #: prompts of this level (all groups together: ONE relQuery)
    prompts: int
    #: groups whose final answer this level gives
    groups_finishing: int
    #: folded value tokens of all prompts (the template and chat wrapper come on top)
    value_tokens: int


def estimate_levels(groups: Sequence[Sequence[int]], budget: int, answer_tokens: int) -> list[LevelEstimate]:
    """Levels of the tree for every group at once, each partial answer assumed ``answer_tokens``
    long (the most it can be, so levels and tokens are upper bounds after level 0).

    Groups with a value too long for a prompt, and empty groups, take no part.
    """
    items: list[list[int]] = [list(g) for g in groups]
    out: list[LevelEstimate] = []
    level = 0
    while any(items):
        prompts = finishing = tokens = 0
        nxt: list[list[int]] = []
        for g in items:
            if not g:
                nxt.append([])
                continue
            chunks = pack(g, budget)
            prompts += len(chunks)
            tokens += sum(c.tokens for c in chunks)
            if len(chunks) == 1:
                finishing += 1
                nxt.append([])
            else:
                nxt.append([answer_tokens] * len(chunks))
        out.append(LevelEstimate(level, prompts, finishing, tokens))
        items = nxt
        level += 1
    return out
