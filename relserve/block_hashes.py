"""Chained hashes of a prompt's full KV blocks, as vLLM's automatic prefix caching keys them.

Shared by the real dispatcher (``cluster/``), which places rows where their prefix is cached, and
the simulator (``sim/``), which models the cache: both must agree on what "the same prefix" is.
"""

from __future__ import annotations

from collections.abc import Sequence

BlockHash = int


def block_hashes(tokens: Sequence[int], block_size: int) -> tuple[BlockHash, ...]:
    """Chained hashes of the full blocks of ``tokens``."""
    out: list[BlockHash] = []
    parent: BlockHash = 0
    for start in range(0, len(tokens) - block_size + 1, block_size):
        # tuple-of-int hashing is not salted per process, so runs repeat exactly
        parent = hash((parent, tuple(tokens[start : start + block_size])))
        out.append(parent)
    return tuple(out)
