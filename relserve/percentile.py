"""One percentile for every report (the end-to-end benchmark, the real-engine summaries, the simulator)."""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], q: float, *, empty: float = math.nan) -> float:
    """The ``q``-quantile (``q`` in [0, 1]) of ``values`` by linear interpolation between the two
    nearest ranks, as ``numpy.percentile``'s default ("linear"); ``empty`` when there are none.

    The interpolation is written as numpy writes it (from the upper neighbour when the weight is
    at least 0.5), so the simulator's figures, which used numpy, stay the same to the last bit."""
    xs = sorted(values)
    if not xs:
        return empty
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    k = (len(xs) - 1) * q
    lo = math.floor(k)
    hi = min(lo + 1, len(xs) - 1)
    a, b, t = float(xs[lo]), float(xs[hi]), k - lo
    d = b - a
    return b - d * (1 - t) if t >= 0.5 else a + d * t
