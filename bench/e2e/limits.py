"""The engine limits every contender runs with: relserve's defaults (relserve/engine/settings.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class EngineLimits:
    max_model_len: int = 2048
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 1024
    block_size: int = 32
    kv_cache_gb: float = 2.0
    dtype: str = "float32"

    @property
    def kv_cache_bytes(self) -> int:
        return int(self.kv_cache_gb * (1 << 30))

    def as_dict(self) -> dict[str, int | float | str]:
        return asdict(self)


ENGINE = EngineLimits()
