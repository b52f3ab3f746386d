"""measure_pass_costs / measure_step_ratio: what they compute from pass times, on a fake
model whose passes advance a fake clock by a set cost (no timing of real work)."""

from __future__ import annotations

import time

import pytest

from token_spec.gamma import measure_pass_costs, measure_step_ratio


class _Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


class _FakeLM:
    """A CausalLM whose pass over w tokens takes cost(w) fake seconds."""

    def __init__(self, clock: _Clock, cost) -> None:
        self.clock, self.cost, self.sessions = clock, cost, []

    def start(self, prompt_ids):
        lm = self

        class Session:
            length = len(prompt_ids)

            def extend(self, ids):
                lm.clock.now += lm.cost(len(ids))
                self.length += len(ids)

            def truncate(self, length):
                self.length = length

        session = Session()
        self.sessions.append(session)
        return session


@pytest.fixture
def clock(monkeypatch):
    c = _Clock()
    monkeypatch.setattr(time, "perf_counter", c)
    return c


def test_step_ratio_is_the_drafts_step_time_over_the_targets(clock):
    draft, target = _FakeLM(clock, lambda w: 0.002), _FakeLM(clock, lambda w: 0.025)
    assert measure_step_ratio(draft, target, repeats=3, context=8) == pytest.approx(0.08)
    assert [s.length for s in draft.sessions + target.sessions] == [8, 8]  # every pass rolled back


def test_pass_costs_are_relative_to_one_token(clock):
    lm = _FakeLM(clock, lambda w: 1.0 + 0.1 * (w - 1))
    assert measure_pass_costs(lm, max_width=4, repeats=2, context=8) == pytest.approx((1.0, 1.1, 1.2, 1.3))
    assert lm.sessions[0].length == 8  # every pass rolled back


def test_a_narrower_pass_never_costs_more_than_a_wider_one(clock):
    # width 3 measured cheaper than widths 1 and 2: their slower times were noise, so
    # they take the wider pass's time (a suffix minimum), and costs stay non-decreasing
    lm = _FakeLM(clock, lambda w: {3: 0.5}.get(w, 1.0 + 0.1 * (w - 1)))
    assert measure_pass_costs(lm, max_width=4, repeats=2, context=8) == pytest.approx((1.0, 1.0, 1.0, 2.6))
