"""The engine limits every contender runs with: relserve's defaults (relserve/engine/settings.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


def resolved_dtype() -> str:
    """The dtype of this run, for every contender: ``RELSERVE_DTYPE`` (``--dtype`` sets it, and the
    phases and ``relserve serve`` inherit it) resolved as relserve's engine resolves it ("auto":
    bfloat16 where the CPU computes it natively, else float32). Read when asked, not at import, so
    ``--dtype`` holds in the process that parsed it too."""
    from relserve.engine.settings import EngineSettings

    return EngineSettings().resolved_dtype


@dataclass(frozen=True)
class EngineLimits:
    max_model_len: int = 2048
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 1024
    block_size: int = 32
    kv_cache_gb: float = 2.0

    @property
    def dtype(self) -> str:
        return resolved_dtype()

    @property
    def kv_cache_bytes(self) -> int:
        return int(self.kv_cache_gb * (1 << 30))

    def as_dict(self) -> dict[str, int | float | str]:
        return asdict(self) | {"dtype": self.dtype}


ENGINE = EngineLimits()
