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
    s = DraftSwitch(explore_every=4, max_explore_every=8, explore_cost=1.0)
    _measured(s, 2, on_rate=10, off_rate=20)
    picks = [s.choose(2) for _ in range(32)]
    # explorations after 4 steps, then 4 (the first verdict), then 8 (same arm behind again: doubled), capped at 8
    assert [i for i, p in enumerate(picks) if p] == [3, 7, 15, 23, 31]


def test_the_wait_starts_again_when_the_arms_swap():
    s = DraftSwitch(explore_every=2, max_explore_every=16, explore_cost=1.0)
    _measured(s, 1, on_rate=10, off_rate=20)
    for _ in range(12):
        s.choose(1)
    assert s.wait[1] > 2
    _measured(s, 1, on_rate=60, off_rate=20)  # drafting got faster
    while s.choose(1):  # until the next exploration of the losing arm (now "off")
        pass
    assert s.wait[1] == 2


def test_drafting_wins_where_it_measured_faster():
    s = DraftSwitch(explore_every=4, explore_cost=1.0)
    _measured(s, 1, on_rate=30, off_rate=20)
    assert [s.choose(1) for _ in range(8)].count(False) == 2


def test_an_unrecorded_step_takes_the_arm_ahead_without_exploring():
    s = DraftSwitch(explore_every=2, explore_cost=1.0)
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
                                    {"explore_every": 16, "max_explore_every": 8},
                                    {"margin": -0.1}, {"margin": 1.0},
                                    {"explore_cost": 0.0}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        DraftSwitch(**kwargs)


def test_a_rate_is_tokens_over_seconds_of_the_steps_not_a_mean_of_step_rates():
    """One quick full-acceptance drafting step and one slow missed one: the mean of the two
    step rates (84 tok/s) would put drafting ahead of not drafting (80 tok/s); what the
    steps delivered together (24 tokens in 1.1 s) does not."""
    on_steps, off_steps = [(16, 0.1), (8, 1.0)], [(8, 0.1), (8, 0.1)]
    mean_of_rates = sum(t / s for t, s in on_steps) / len(on_steps)
    assert mean_of_rates > 80  # control: the data separates the two estimators
    s = DraftSwitch(alpha=0.5)
    for (t_on, s_on), (t_off, s_off) in zip(on_steps, off_steps):
        s.record(3, True, t_on, s_on)
        s.record(3, False, t_off, s_off)
    assert s.rates[(3, True)] < 40 < s.rates[(3, False)]
    assert s.prefers(3) is False


@pytest.mark.parametrize("on_rate, ahead", [(100.5, False), (100.0, False), (110.0, True)],
                         ids=["within the margin", "a tie", "control: clearly faster"])
def test_a_tie_or_a_gain_within_the_margin_goes_to_not_drafting(on_rate, ahead):
    s = DraftSwitch(margin=0.01)
    s.record(2, True, on_rate, 1.0)
    s.record(2, False, 100.0, 1.0)
    assert s.prefers(2) is ahead
    assert s.prefers(3) is ahead  # a wider width not measured yet starts from it too


@pytest.mark.parametrize("explore_cost, first_exploration", [(0.01, 129), (1.0, 8)],
                         ids=["priced", "control: a free exploration budget"])
def test_an_arm_far_behind_is_explored_only_as_often_as_its_price_allows(explore_cost, first_exploration):
    """Drafting measured at 43.7 tok/s against 100 without (a draft model catching up its
    cache): a drafting step then costs 1.29 plain steps more per token, so with a 1 %
    budget the switch waits ceil(1.288 / 0.01) = 129 steps before trying it again."""
    s = DraftSwitch(explore_every=8, explore_cost=explore_cost)
    s.record(2, True, 43.7, 1.0)
    s.record(2, False, 100.0, 1.0)
    picks = [s.choose(2) for _ in range(200)]
    assert picks.index(True) + 1 == first_exploration
