"""A KV block pool with automatic prefix caching, modelled on vLLM v1's.

* A prompt is split into full blocks of ``block_size`` tokens; a block's hash chains its parent's
  hash with the block's token ids, so equal hashes mean equal prefixes.
* A lookup returns the longest run of cached blocks from the start of the prompt, capped so at
  least one token is recomputed (vLLM needs the last token's logits): at most
  ``(num_tokens - 1) // block_size`` blocks.
* Blocks are *free* (no content), *referenced* (held by one or more requests) or *evictable*
  (cached content no request holds). New blocks come from the free ones first, then by evicting
  the least recently released cached block.

Blocks of a request that hold no full prompt block (the partial last block, generated tokens)
are anonymous: counted, never cached.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from relserve.block_hashes import BlockHash


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"need at least one block of at least one token, got {num_blocks} x {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.num_free = num_blocks  # blocks holding nothing
        #: cached block hash -> number of requests holding it
        self.refs: dict[BlockHash, int] = {}
        #: cached blocks nobody holds, least recently released first
        self.evictable: OrderedDict[BlockHash, None] = OrderedDict()
        self.evictions = 0

    # -- queries ----------------------------------------------------------------------------------

    @property
    def available(self) -> int:
        """Blocks that can be handed out now (free plus evictable)."""
        return self.num_free + len(self.evictable)

    def hit_blocks(self, hashes: Sequence[BlockHash], num_tokens: int) -> int:
        """Leading blocks of ``hashes`` that are cached, capped at ``(num_tokens - 1) // block_size``."""
        cap = min(len(hashes), (num_tokens - 1) // self.block_size)
        refs = self.refs
        n = 0
        while n < cap and hashes[n] in refs:
            n += 1
        return n

    def evictable_among(self, hashes: Sequence[BlockHash]) -> int:
        return sum(1 for h in hashes if h in self.evictable)

    # -- changes ----------------------------------------------------------------------------------

    def take(self, n: int) -> bool:
        """Hand out ``n`` anonymous blocks (free first, then evicting LRU); False if not enough."""
        if n > self.available:
            return False
        from_free = min(n, self.num_free)
        self.num_free -= from_free
        for _ in range(n - from_free):
            h, _ = self.evictable.popitem(last=False)
            del self.refs[h]
            self.evictions += 1
        return True

    def give_back(self, n: int) -> None:
        """Return ``n`` anonymous blocks."""
        self.num_free += n

    def acquire(self, h: BlockHash) -> None:
        """Hold a cached block (a hit): it stops being evictable."""
        count = self.refs[h]
        if count == 0:
            del self.evictable[h]
        self.refs[h] = count + 1

    def publish(self, h: BlockHash) -> bool:
        """Turn one anonymous block the caller holds into the cached block ``h``.

        If ``h`` is already cached (another request computed the same prefix meanwhile), the
        caller holds that one instead and its anonymous block is returned. Returns True either
        way: the caller now holds ``h``.
        """
        if h in self.refs:
            self.acquire(h)
            self.num_free += 1
        else:
            self.refs[h] = 1
        return True

    def release(self, hashes: Sequence[BlockHash], anonymous: int) -> None:
        """A request lets go of its blocks. Later blocks are released first, so a prompt's tail is
        evicted before its head (the head is what other requests share)."""
        refs = self.refs
        for h in reversed(hashes):
            count = refs[h] - 1
            refs[h] = count
            if count == 0:
                self.evictable[h] = None
        self.num_free += anonymous
