"""Features for the proxy: the rows' text embedded by a small sentence encoder, a chunk at a time.

The encoder is the one relserve already ships for join blocking (relserve/sentence_encoder.py:
all-MiniLM-L6-v2, 22 M parameters, 384 dimensions). Measured against the served model's own
hidden states, its proxy agreed with the LLM about as well, at many times the rows/s: the hidden
states cost about one LLM row each, so the cascade uses the encoder (the measurement:
docs/notebook/benchmark-passes.md).

Memory stays bounded whatever the table's size: texts are embedded in chunks of ``CHUNK`` rows
(each chunk sorted by length, so a batch pads to its own longest text, not the table's), and a
caller that only needs each chunk's proxy scores drops the chunk's embeddings before the next.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import numpy as np

#: rows embedded per chunk (the peak memory of embedding is one chunk's activations)
CHUNK = 1024
#: texts per forward pass of the encoder
BATCH = 64
#: the encoder's input is cut here (all-MiniLM-L6-v2 was trained on 256-token inputs)
MAX_TOKENS = 256


class Embedder(Protocol):
    """Turns texts into fixed-size feature rows."""

    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One float32 row per text."""
        ...


class SentenceEmbedder:
    """all-MiniLM-L6-v2 (mean pooling, unit length), the model of ``relserve[blocking]``."""

    name = "all-MiniLM-L6-v2"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        from relserve.sentence_encoder import encode

        return encode(texts, batch=BATCH, max_tokens=MAX_TOKENS)


def chunks(embedder: Embedder, texts: Sequence[str], *, size: int = CHUNK,
           stop: Callable[[], bool] | None = None) -> Iterator[tuple[int, np.ndarray]]:
    """(start, embeddings of ``texts[start:start + size]``) for each chunk in order; ``stop``
    is asked before each chunk (a cancelled call stops embedding there)."""
    for start in range(0, len(texts), size):
        if stop is not None and stop():
            return
        yield start, embedder.embed(texts[start : start + size])


def row_texts(prompts: Sequence[str]) -> list[str]:
    """What of each prompt to embed: the prompt without the words every prompt shares at its
    start and end (the template's static parts carry nothing that tells rows apart, and would
    take the encoder's few hundred tokens from the row's own text). Cut at whitespace only: two
    rows ending "good value" and "bad value" share the characters "d value", not the word."""
    if len(prompts) < 2:
        return list(prompts)
    prefix = os.path.commonprefix([min(prompts), max(prompts)])
    reversed_ = [p[::-1] for p in prompts]
    suffix = os.path.commonprefix([min(reversed_), max(reversed_)])[::-1]
    head = max(prefix.rfind(" "), prefix.rfind("\n")) + 1
    cut = [i for i in (suffix.find(" "), suffix.find("\n")) if i >= 0]
    tail = len(suffix) - min(cut) if cut else 0
    out = []
    for p in prompts:
        own = p[head : len(p) - tail] if head + tail < len(p) else p
        out.append(own if own.strip() else p)
    return out


_default: Embedder | None = None


def default_embedder() -> Embedder:
    """The embedder cascades use (one per process: the encoder is loaded once)."""
    global _default
    if _default is None:
        _default = SentenceEmbedder()
    return _default


def use_embedder(embedder: Embedder | None) -> Embedder | None:
    """Make ``embedder`` the one cascades use (None: the default again); returns the previous.
    For tests, whose scripted engines answer rows by rules an embedding model knows nothing of."""
    global _default
    previous, _default = _default, embedder
    return previous
