"""How many leading tokens of each prompt vLLM's prefix cache holds now (the estimates replay a
call's prompts with those blocks cached: relserve/estimate/prefix_cache.py).

Runs in the engine-core process (the scheduler plug-in's control channel), so the prompts are
hashed by the engine core's own block hasher (its hash function, its ``NONE_HASH`` seed and
block size) and looked up in its KV cache manager exactly as a new request's are: the answer is
what vLLM would find cached if the prompt arrived now (whole blocks, at most all tokens but the
last). The lookup changes nothing: no block is touched and no statistic recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import BaseModel


class CachedPrefixAsk(BaseModel):
    """The prompts (token ids) to look up, in the prefix-cache namespace of ``salt``."""

    prompts: list[list[int]]
    salt: str | None = None


class CachedPrefixReply(BaseModel):
    #: per prompt, the leading tokens the prefix cache holds (0: none, or no prefix caching)
    tokens: list[int]


def holds_whole_prompt(cached_tokens: int, prompt_tokens: int, block_size: int) -> bool:
    """Whether ``cached_tokens`` (this module's answer for a prompt) is every block of the prompt a
    lookup can find: its whole blocks short of its last token, which is always computed anew. A
    prefix warm-up of such a prompt would compute nothing but that token, at an engine step's cost."""
    return prompt_tokens >= block_size and cached_tokens >= (prompt_tokens - 1) // block_size * block_size


def cached_prefix_tokens(kv_cache_manager: object, block_hasher: Callable | None, ask: CachedPrefixAsk) -> CachedPrefixReply:
    """``ask``'s prompts looked up in ``kv_cache_manager`` (vLLM's ``KVCacheManager``), hashed
    by ``block_hasher`` (the engine core's ``request_block_hasher``; None: prefix caching off)."""
    if block_hasher is None or not getattr(kv_cache_manager, "enable_caching", False):
        return CachedPrefixReply(tokens=[0] * len(ask.prompts))
    return CachedPrefixReply(tokens=[_hit(kv_cache_manager, block_hasher, ids, ask.salt, i) for i, ids in enumerate(ask.prompts)])


def _hit(kv_cache_manager, block_hasher: Callable, ids: Sequence[int], salt: str | None, index: int) -> int:
    from vllm import SamplingParams
    from vllm.v1.request import Request

    if len(ids) < 2:
        return 0
    # a request as the engine core would build it (its hashes come from the engine's own hasher),
    # never added to the scheduler: get_computed_blocks only looks it up
    request = Request(f"relserve-prefix-lookup-{index}", list(ids), SamplingParams(max_tokens=1), None,
                      cache_salt=salt, block_hasher=block_hasher)
    return int(kv_cache_manager.get_computed_blocks(request)[1])
