"""The soak's fault schedule (bench/soak/faults.py): the hour's heavy faults in minutes 20-35, the
suite's four-minute smoke's packed from its 30th second, each kind once, the same for one seed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from soak.faults import HEAVY, PG_TERMINATE, schedule  # noqa: E402


@pytest.mark.parametrize("seed", range(12))
def test_the_smoke_packs_one_of_each_heavy_fault_after_30_s(seed):
    seconds = 4 * 60.0
    faults = schedule(seconds, seed)
    heavy = [f for f in faults if f.kind != PG_TERMINATE]
    assert sorted(f.kind for f in heavy) == sorted(HEAVY)
    # the window is 30 s to 65% of the run (156 s), one slot of 42 s each
    slot = (156.0 - 30.0) / 3
    for k, f in enumerate(heavy):
        assert 30.0 + k * slot <= f.at_s <= 30.0 + k * slot + 0.3 * slot
        assert f.latest_s == 156.0 + slot
    assert faults == sorted(faults, key=lambda f: f.at_s) == schedule(seconds, seed)
    light = [f.at_s for f in faults if f.kind == PG_TERMINATE]
    assert 30.0 <= light[0] <= 90.0 and light[-1] < seconds - 30.0
    assert all(60.0 <= b - a <= 120.0 for a, b in zip(light, light[1:]))


def test_the_hours_heavy_faults_stay_in_minutes_20_to_35():
    faults = schedule(3600.0, 3)
    heavy = [f for f in faults if f.kind != PG_TERMINATE]
    assert sorted(f.kind for f in heavy) == sorted(HEAVY * 2)
    assert all(1200.0 <= f.at_s <= 2100.0 for f in heavy)
    assert {f.hold_s for f in heavy if f.kind == "disk_full"} == {60.0}
