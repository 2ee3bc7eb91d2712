"""What of a call's prompts the engine's prefix cache holds now, from earlier work that has
finished (a statement run just before with the same prompts, say): the replay starts with those
blocks cached, as the engine would find them (issue 47).

The engine answers, in one RPC, how many leading tokens of each prompt its cache holds, hashed
and looked up by vLLM itself (``Engine.cached_prefix_tokens``, relserve/engine/prefix_lookup.py);
here those prefixes become the simulator's own block hashes of the same prompts
(relserve/block_hashes.py), which the replay puts in its cache before it starts
(relserve/estimate/timing.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from relserve.block_hashes import BlockHash, block_hashes
from relserve.engine.prefix_lookup import holds_whole_prompt
from relserve.estimate.call_work import RelQueryWork

#: per prompt (token ids), the leading tokens the engine's prefix cache holds now
PrefixLookup = Callable[[list[list[int]]], list[int]]


@dataclass(frozen=True)
class CachedPrompts:
    """The prefix cache a replay starts from."""

    #: per prompt with cached blocks, the simulator's hashes of those blocks
    blocks: list[tuple[BlockHash, ...]] = field(default_factory=list)
    #: of the work's engine prompt tokens (each row's prompt once), those the cache holds
    tokens: int = 0
    #: the prompts (ids) whose every block a lookup can find is cached (``holds_whole_prompt``)
    whole: frozenset[tuple[int, ...]] = frozenset()


def prefix_lookup(engine) -> PrefixLookup | None:
    """How to ask ``engine`` what its prefix cache holds, in the namespace its prompts run in
    (a tenant's salt); None for an engine that cannot tell (not started, a cluster, a server)."""
    ask = getattr(engine, "cached_prefix_tokens", None) if engine is not None else None
    if ask is None:
        return None
    salt = getattr(engine, "prefix_cache_namespace", None)
    return lambda prompts: ask(prompts, salt)


def cached_prompts(lookup: PrefixLookup | None, relqueries: Iterable[RelQueryWork], block_size: int,
                   salt: str | None = None) -> CachedPrompts:
    """The blocks of ``relqueries``' requests (each row's prompt with each of its suffixes) that
    the engine's prefix cache holds now, found by ``lookup`` (one call for all of them), hashed
    in the namespace of ``salt`` as the replay hashes the call's prompts."""
    if lookup is None:
        return CachedPrompts()
    works = list(relqueries)
    distinct: dict[tuple[int, ...], int] = {}
    for w in works:
        for ids in w.prompt_ids:
            for suffix in w.suffixes:
                distinct.setdefault(tuple(ids) + tuple(suffix), len(distinct))
    if not distinct:
        return CachedPrompts()
    prompts = list(distinct)
    held = lookup([list(p) for p in prompts])
    if len(held) != len(prompts):
        raise ValueError(f"the engine answered {len(held)} cached prefixes for {len(prompts)} prompts")
    blocks = [block_hashes(p, block_size, salt)[: n // block_size] for p, n in zip(prompts, held) if n >= block_size]
    whole = frozenset(p for p, n in zip(prompts, held) if holds_whole_prompt(n, len(p), block_size))
    tokens = 0
    for w in works:
        if not w.counted:
            continue
        for ids in w.prompt_ids:
            most = max((held[distinct[tuple(ids) + tuple(suffix)]] for suffix in w.suffixes), default=0)
            tokens += min(most, len(ids))
    return CachedPrompts(blocks, tokens, whole)
