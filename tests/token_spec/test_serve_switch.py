"""DraftSwitch: per batch width, drafting only where it has measured the higher token rate."""

from __future__ import annotations

import pytest

from token_spec.serve.switch import DraftSwitch


def _measured(switch: DraftSwitch, width: int, on_rate: float, off_rate: float) -> None:
    switch.record(width, True, int(on_rate), 1.0)
    switch.record(width, False, int(off_rate), 1.0)


def test_it_measures_drafting_first_then_not_drafting():
    s = DraftSwitch()
    assert s.choose(1) is True
    s.record(1, True, 10, 1.0)
    assert s.choose(1) is False
    s.record(1, False, 20, 1.0)


def test_the_faster_arm_wins_and_the_slower_is_still_tried_every_nth_step():
    s = DraftSwitch(explore_every=4)
    _measured(s, 2, on_rate=10, off_rate=20)
    picks = [s.choose(2) for _ in range(16)]
    assert picks.count(True) == 4  # every 4th step explores drafting
    assert all(p is (i % 4 == 3) for i, p in enumerate(picks))


def test_drafting_wins_where_it_measured_faster():
    s = DraftSwitch(explore_every=4)
    _measured(s, 1, on_rate=30, off_rate=20)
    assert [s.choose(1) for _ in range(8)].count(False) == 2


def test_widths_are_measured_apart():
    s = DraftSwitch()
    _measured(s, 1, on_rate=30, off_rate=20)
    _measured(s, 8, on_rate=10, off_rate=20)
    assert s.choose(1) is True and s.choose(8) is False


def test_the_running_rate_follows_a_change():
    s = DraftSwitch(alpha=0.5)
    _measured(s, 1, on_rate=30, off_rate=20)
    for _ in range(6):  # drafting got slower (e.g. the machine got busy)
        s.record(1, True, 10, 1.0)
    assert s.rates[(1, True)] < 20 and s.choose(1) is False


def test_a_step_without_time_is_not_recorded():
    s = DraftSwitch()
    s.record(1, True, 5, 0.0)
    assert s.rates == {}


@pytest.mark.parametrize("kwargs", [{"explore_every": 1}, {"explore_every": True}, {"alpha": 0.0}, {"alpha": 1.5}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        DraftSwitch(**kwargs)
