"""The soak report's drift figures (bench/soak/drift.py), on latencies made up here: the p99
ratio, the ratio chance gives with no drift, and the tail test that tells drift from chance."""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from soak.drift import Drift, binomial_tail, windows  # noqa: E402


def test_binomial_tail_is_exact():
    assert binomial_tail(3, 0, 0.05) == 1.0
    assert math.isclose(binomial_tail(3, 3, 0.05), 0.05**3)
    assert math.isclose(binomial_tail(2, 1, 0.5), 0.75)


def test_windows_are_minutes_10_to_20_and_the_last_ten_of_an_hour():
    rows = [("cells", 599.0, 1.0), ("cells", 600.0, 2.0), ("cells", 1199.9, 3.0), ("cells", 1200.0, 4.0),
            ("cells", 2999.0, 5.0), ("cells", 3000.0, 6.0), ("chat", 3599.0, 7.0), ("chat", 3600.0, 8.0)]
    cells, chat = windows(rows, 3600.0)
    assert (cells.kind, cells.baseline, cells.last) == ("cells", (2.0, 3.0), (6.0,))
    assert (chat.kind, chat.baseline, chat.last) == ("chat", (), (7.0,))
    assert chat.ratio is None and chat.p_value is None


def test_the_same_latencies_in_both_windows_do_not_drift_though_their_p99_ratio_passes_1_2():
    rng = random.Random(3)
    # a heavy tail: most requests quick, a few behind a long step; 60 requests a window
    draw = [rng.lognormvariate(-0.5, 0.8) for _ in range(120)]
    d = Drift("cells", tuple(draw[:60]), tuple(draw[60:]))
    assert not d.drifted(8)
    # chance alone moves p99 by more than the 1.2x at this size
    assert d.chance_ratio() > 1.2
    assert d.chance_ratio() == d.chance_ratio()  # seeded: a report reads the same twice


def moved_tail(slow: int) -> Drift:
    """60 requests a window; in the last one ``slow`` of them twice the baseline's 57th."""
    rng = random.Random(4)
    base = tuple(rng.lognormvariate(-0.5, 0.8) for _ in range(60))
    cut = sorted(base)[56]  # above the baseline's p95
    last = tuple([rng.lognormvariate(-0.5, 0.8) for _ in range(60 - slow)] + [cut * 2] * slow)
    return Drift("cells", base, last)


def test_a_tail_that_moved_is_drift():
    d = moved_tail(10)
    # the 10 put there and one of the others above the baseline's p95
    assert d.slower == 11 and math.isclose(d.p_value, binomial_tail(60, 11, 0.05))
    assert d.p_value < 0.01 / 8
    assert d.drifted(8)


def test_the_drift_threshold_is_shared_by_the_kinds_compared():
    # p just under 0.01: drift when one kind is compared, not when eight are (0.01 / 8 each)
    d = moved_tail(7)
    assert 0.01 / 8 < d.p_value < 0.01
    assert d.drifted(1) and not d.drifted(8)
