"""Predict the engine's prefix-cache hits for prompts sent in a given order.

Counted the way vLLM's automatic prefix caching counts them: a prompt's tokens are cut into
blocks of ``block_size``; a block is identified by its tokens and everything before it (a chained
hash), only full blocks are cached, a prompt hits the longest run of leading blocks already in the
cache, at least one token is always recomputed, and the least recently used blocks go first when
the cache is full (``capacity_blocks``; None means unbounded).

Prompts are replayed one after another; the engine runs many at once, so this slightly
overstates hits between neighbours that are prefilled in the same step.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class HitStats:
    prompts: int
    prompt_tokens: int
    hit_tokens: int

    @property
    def rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def uncached_tokens(self) -> int:
        return self.prompt_tokens - self.hit_tokens


class PrefixCacheModel:
    """An LRU cache of token blocks keyed by chained block hashes."""

    def __init__(self, block_size: int, capacity_blocks: int | None = None) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.block_size = block_size
        self.capacity = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def admit(self, tokens: Sequence[int]) -> int:
        """Run one prompt: returns its cached tokens, then caches its full blocks."""
        bs = self.block_size
        full = len(tokens) // bs
        hashes = []
        parent = 0
        for b in range(full):
            parent = hash((parent, tuple(tokens[b * bs : (b + 1) * bs])))
            hashes.append(parent)
        hit = 0
        for h in hashes:
            if h not in self._blocks:
                break
            hit += 1
        # the engine recomputes at least the last prompt token, so a fully cached prompt
        # gives up its last block
        hit = min(hit, (len(tokens) - 1) // bs) if tokens else 0
        for h in hashes:
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        if self.capacity is not None:
            while len(self._blocks) > self.capacity:
                self._blocks.popitem(last=False)
        return hit * bs


def predict_hits(
    token_lists: Iterable[Sequence[int]],
    block_size: int,
    capacity_blocks: int | None = None,
    *,
    warm: Iterable[Sequence[int]] = (),
) -> HitStats:
    """Replay prompts in order; ``warm`` prompts are prefilled first and not counted."""
    model = PrefixCacheModel(block_size, capacity_blocks)
    for tokens in warm:
        model.admit(tokens)
    prompts = prompt_tokens = hit_tokens = 0
    for tokens in token_lists:
        prompts += 1
        prompt_tokens += len(tokens)
        hit_tokens += model.admit(tokens)
    return HitStats(prompts, prompt_tokens, hit_tokens)
