"""Chained hashes of a prompt's full KV blocks, as vLLM's automatic prefix caching keys them.

Shared by the real dispatcher (``cluster/``), which places rows where their prefix is cached, and
the simulator (``sim/``), which models the cache: both must agree on what "the same prefix" is.

A prompt sent with a prefix-cache salt (a server tenant's namespace: vLLM's ``cache_salt``)
hashes its first block with the salt, so its blocks are found only by prompts with the same salt
(and so is every later block, chained to the first); the estimates' replay of the engine's queue
hashes each request with its own tenant's salt for that reason (issue 63).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

BlockHash = int


def salt_seed(salt: str | None) -> BlockHash:
    """The parent hash of a salted prompt's first block (0: no salt). A stable digest, not
    Python's ``hash`` of a string, which differs from process to process."""
    if not salt:
        return 0
    return int.from_bytes(hashlib.blake2b(salt.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big") | 1


def block_hashes(tokens: Sequence[int], block_size: int, salt: str | None = None) -> tuple[BlockHash, ...]:
    """Chained hashes of the full blocks of ``tokens`` (in the namespace of ``salt``)."""
    out: list[BlockHash] = []
    parent: BlockHash = salt_seed(salt)
    for start in range(0, len(tokens) - block_size + 1, block_size):
        # tuple-of-int hashing is not salted per process, so runs repeat exactly
        parent = hash((parent, tuple(tokens[start : start + block_size])))
        out.append(parent)
    return tuple(out)
