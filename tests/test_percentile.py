"""The one percentile (relserve/percentile.py) against numpy's default, which the simulator used."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from relserve.percentile import percentile


def test_matches_numpy_to_the_last_bit():
    rng = random.Random(7)
    for _ in range(2000):
        xs = [rng.uniform(0, 100) * rng.choice([1e-3, 1, 1e3]) for _ in range(rng.randint(1, 40))]
        for q in (0, 5, 25, 50, 90, 95, 99, 100):
            assert percentile(xs, q / 100) == float(np.percentile(np.array(xs), q))


def test_interpolates_between_ranks():
    assert percentile([5, 1, 4, 2, 3], 0.5) == 3
    assert percentile([1.0, 2.0], 0.95) == pytest.approx(1.95)
    assert percentile([10.0], 0.95) == 10.0


def test_empty_gives_what_the_caller_asks():
    assert math.isnan(percentile([], 0.95))
    assert percentile([], 0.95, empty=0.0) == 0.0


def test_a_fraction_is_asked_not_a_percent():
    with pytest.raises(ValueError, match="q must be in"):
        percentile([1.0, 2.0], 95)
