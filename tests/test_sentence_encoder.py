"""The shipped sentence encoder (join blocking, cascade features): bfloat16 where the CPU has it
gives the float32 vectors to within cosine 0.9999, and a precision that does not exist is named."""

from __future__ import annotations

import numpy as np
import pytest

from relserve.cpu_features import cpu_has_bf16
from relserve.sentence_encoder import encode

TEXTS = [
    "A wonderful film, moving and funny.",
    "A great movie that made me laugh and cry.",
    "Fill in line 12 of the tax form before April.",
    "The stout pours black with a thick tan head and tastes of roasted coffee. " * 12,
]


def test_bfloat16_vectors_match_float32_and_keep_the_meaning():
    full = encode(TEXTS, precision="float32")
    half = encode(TEXTS, precision="bfloat16")
    assert full.dtype == half.dtype == np.float32
    assert np.allclose(np.linalg.norm(half, axis=1), 1.0, atol=1e-5)
    assert np.sum(full * half, axis=1).min() > 0.9999
    # the two film reviews are nearer each other than the tax form, in both precisions
    for v in (full, half):
        assert v[0] @ v[1] > v[0] @ v[2] + 0.3


def test_auto_is_bfloat16_exactly_where_the_cpu_has_it():
    expected = encode(TEXTS, precision="bfloat16" if cpu_has_bf16() else "float32")
    assert np.array_equal(encode(TEXTS), expected)


def test_a_precision_that_does_not_exist_is_named():
    with pytest.raises(ValueError, match="precision must be 'auto', 'float32' or 'bfloat16', not 'fp8'"):
        encode(TEXTS, precision="fp8")
