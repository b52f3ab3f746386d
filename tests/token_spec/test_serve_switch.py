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


def test_the_faster_arm_wins_and_the_slower_is_tried_ever_more_rarely():
    s = DraftSwitch(explore_every=4, max_explore_every=8)
    _measured(s, 2, on_rate=10, off_rate=20)
    picks = [s.choose(2) for _ in range(32)]
    # explorations after 4 steps, then 4 (the first verdict), then 8 (same arm behind again: doubled), capped at 8
    assert [i for i, p in enumerate(picks) if p] == [3, 7, 15, 23, 31]


def test_the_wait_starts_again_when_the_arms_swap():
    s = DraftSwitch(explore_every=2, max_explore_every=16)
    _measured(s, 1, on_rate=10, off_rate=20)
    for _ in range(12):
        s.choose(1)
    assert s.wait[1] > 2
    _measured(s, 1, on_rate=1000, off_rate=0)  # drafting got much faster
    while s.choose(1):  # until the next exploration of the losing arm (now "off")
        pass
    assert s.wait[1] == 2


def test_drafting_wins_where_it_measured_faster():
    s = DraftSwitch(explore_every=4)
    _measured(s, 1, on_rate=30, off_rate=20)
    assert [s.choose(1) for _ in range(8)].count(False) == 2


def test_an_unrecorded_step_takes_the_arm_ahead_without_exploring():
    s = DraftSwitch(explore_every=2)
    assert s.prefers(2) is True  # nothing measured: drafting, as choose starts
    _measured(s, 2, on_rate=10, off_rate=20)
    before = (dict(s.since), dict(s.wait))
    assert [s.prefers(2) for _ in range(10)] == [False] * 10  # never the exploration choose makes
    assert (dict(s.since), dict(s.wait)) == before
    assert True in [s.choose(2) for _ in range(3)]  # control: choose explores
    assert s.prefers(4) is False  # an unmeasured width: what the nearest narrower one prefers
    _measured(s, 2, on_rate=1000, off_rate=0)
    assert s.prefers(2) is True


def test_widths_are_measured_apart():
    s = DraftSwitch()
    _measured(s, 1, on_rate=30, off_rate=20)
    _measured(s, 8, on_rate=10, off_rate=20)
    assert s.choose(1) is True and s.choose(8) is False


def test_a_new_width_starts_with_what_the_nearest_narrower_one_prefers():
    s = DraftSwitch()
    _measured(s, 2, on_rate=10, off_rate=20)
    _measured(s, 5, on_rate=30, off_rate=20)
    assert s.choose(4) is False  # width 2 preferred not drafting
    assert s.choose(7) is True  # width 5 preferred drafting
    assert s.choose(1) is True  # nothing narrower measured: drafting first


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


@pytest.mark.parametrize("kwargs", [{"explore_every": 1}, {"explore_every": True}, {"alpha": 0.0}, {"alpha": 1.5},
                                    {"explore_every": 16, "max_explore_every": 8}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        DraftSwitch(**kwargs)
