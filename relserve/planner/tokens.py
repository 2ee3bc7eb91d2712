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

from relserve.backend.protocol import Backend

TokenizeFn = Callable[[str], list[int]]


@dataclass(frozen=True)
class TokenSource:
    tokenize: TokenizeFn
    #: "engine", "tokenizer <name>" or "approximate"
    kind: str
    #: tokenizes a list at once (much faster for thousands of prompts), if available
    batch: Callable[[list[str]], list[list[int]]] | None = None

    def many(self, prompts: Sequence[str]) -> list[list[int]]:
        if self.batch is not None and prompts:
            return [list(ids) for ids in self.batch(list(prompts))]
        return [self.tokenize(p) for p in prompts]


_PIECE = re.compile(r"\w{1,6}|[^\w\s]|\s+")


def approximate_tokens(text: str) -> list[int]:
    """Word pieces of up to six characters, punctuation and whitespace runs: close enough to a
    BPE count for English text, and equal texts give equal ids so prefixes still match."""
    return [zlib.crc32(m.group().encode()) for m in _PIECE.finditer(text)]


_hf_lock = threading.Lock()
_hf_sources: dict[str, TokenSource | None] = {}


def token_source(engine: Backend | None = None, model: str | None = None) -> TokenSource:
    """The best available way to get the engine's token ids for a user prompt."""
    if engine is not None and hasattr(engine, "prompt_token_ids"):
        return TokenSource(engine.prompt_token_ids, "engine", _engine_batch(engine))
    hf = _hf_source(model)
    if hf is not None:
        return hf
    return TokenSource(approximate_tokens, "approximate")


def _engine_batch(engine: Backend) -> Callable[[list[str]], list[list[int]]] | None:
    batch = getattr(engine, "prompt_token_ids_many", None)
    if callable(batch):
        return batch
    tokenizer = getattr(engine, "tokenizer", None)
    if tokenizer is None:
        return None
    try:  # the engine's own chat-template renderer, applied to a whole list at once
        from relserve.engine.chat_template import ChatPrompter

        return ChatPrompter(tokenizer).token_ids
    except Exception:
        return None


def _hf_source(model: str | None) -> TokenSource | None:
    key = model or ""
    with _hf_lock:
        if key in _hf_sources:
            return _hf_sources[key]
        source = None
        try:
            from transformers import AutoTokenizer

            from relserve.engine.chat_template import ChatPrompter
            from relserve.model import resolve_model

            spec = resolve_model(model, prepare=False)
            prompter = ChatPrompter(AutoTokenizer.from_pretrained(spec.path))
            source = TokenSource(lambda text: prompter.token_ids([text])[0], f"tokenizer {spec.model_id}", prompter.token_ids)
        except Exception:
            source = None
        _hf_sources[key] = source
        return source
