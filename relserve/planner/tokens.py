"""Token ids of prompts as the engine will see them, for hit-rate prediction and cost estimates.

The engine's own ``prompt_token_ids`` (chat template applied) is exact. EXPLAIN should not have to
start an engine (~25 s), so without one the model's tokenizer is loaded on its own, and when even
that is not possible a rough word-piece count stands in (EXPLAIN says which was used).
"""

from __future__ import annotations

import re
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

TokenizeFn = Callable[[str], list[int]]


@dataclass(frozen=True)
class TokenSource:
    tokenize: TokenizeFn
    #: "engine", "tokenizer <name>" or "approximate"
    kind: str

    def many(self, prompts: Sequence[str]) -> list[list[int]]:
        return [self.tokenize(p) for p in prompts]


_PIECE = re.compile(r"\w{1,6}|[^\w\s]|\s+")


def approximate_tokens(text: str) -> list[int]:
    """Word pieces of up to six characters, punctuation and whitespace runs: close enough to a
    BPE count for English text, and equal texts give equal ids so prefixes still match."""
    return [zlib.crc32(m.group().encode()) for m in _PIECE.finditer(text)]


_hf_lock = threading.Lock()
_hf_sources: dict[str, TokenSource | None] = {}


def token_source(engine: Any = None, model: str | None = None) -> TokenSource:
    """The best available way to get the engine's token ids for a user prompt."""
    if engine is not None and hasattr(engine, "prompt_token_ids"):
        return TokenSource(engine.prompt_token_ids, "engine")
    hf = _hf_source(model)
    if hf is not None:
        return hf
    return TokenSource(approximate_tokens, "approximate")


def _hf_source(model: str | None) -> TokenSource | None:
    key = model or ""
    with _hf_lock:
        if key in _hf_sources:
            return _hf_sources[key]
        source = None
        try:
            from relserve.model import resolve_model  # the engine's model resolution, if present

            spec = resolve_model(model, prepare=False)
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(spec.path)

            def tokenize(text: str, _tok=tok) -> list[int]:
                if getattr(_tok, "chat_template", None):
                    ids = _tok.apply_chat_template(
                        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
                    )
                    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # BatchEncoding
                        ids = ids["input_ids"]
                    return list(ids)
                return list(_tok(text)["input_ids"])

            source = TokenSource(tokenize, f"tokenizer {spec.model_id}")
        except Exception:
            source = None
        _hf_sources[key] = source
        return source
