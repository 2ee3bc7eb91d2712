"""``TokenCounts``: the engine tokens a row, a relQuery or a benchmark record counts.

Every stats class that reports a relQuery's tokens embeds this one type (``RelQueryStats``,
the benchmark's ``RelQueryRecord``), so the three counts mean the same everywhere and are summed
the same way. Its fields are keyword-only, so a class that inherits it keeps its own positional
fields first (``RelQueryStats(rel_id, num_rows)``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


class CountsTokens(Protocol):
    """Anything with the three counts (a ``RowResult`` declares them itself, positionally)."""

    prompt_tokens: int
    output_tokens: int
    cached_tokens: int


@dataclass(slots=True, kw_only=True)
class TokenCounts:
    #: prompt tokens, chat template included
    prompt_tokens: int = 0
    #: tokens generated
    output_tokens: int = 0
    #: prompt tokens served from the engine's prefix cache
    cached_tokens: int = 0

    @property
    def prefix_hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @classmethod
    def total(cls, items: Iterable[CountsTokens]) -> TokenCounts:
        """The counts of ``items`` (rows, relQueries) added up."""
        out = cls()
        for item in items:
            out.prompt_tokens += item.prompt_tokens
            out.output_tokens += item.output_tokens
            out.cached_tokens += item.cached_tokens
        return out
