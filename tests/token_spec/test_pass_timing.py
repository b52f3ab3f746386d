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


class _FakeDrafter:
    """A drafter whose propose of k tokens takes cost(k) fake seconds, plus ``catch_up``
    on the first call after begin (its cache catching up the context)."""

    def __init__(self, clock: _Clock, cost, catch_up: float = 0.0) -> None:
        self.clock, self.cost, self.catch_up = clock, cost, catch_up
        self.calls: list[tuple[str, int]] = []
        self._fresh = False

    def begin(self, prompt_ids) -> None:
        self.calls.append(("begin", len(prompt_ids)))
        self._fresh = True

    def propose(self, context, k, params, generator):
        self.calls.append(("propose", len(context)))
        self.clock.now += self.cost(k) + (self.catch_up if self._fresh else 0.0)
        self._fresh = False

    def end(self, output_ids) -> None:
        self.calls.append(("end", 0))


def test_propose_cost_is_one_caught_up_propose_over_one_target_step(clock):
    from token_spec.gamma import measure_propose_cost

    target = _FakeLM(clock, lambda w: 0.020)
    head = _FakeDrafter(clock, lambda k: 0.005 * k, catch_up=1.0)  # a costly first call, not timed
    assert measure_propose_cost(head, target, k=1, repeats=3, context=8) == pytest.approx(0.25)
    assert head.calls[0] == ("begin", 8) and head.calls[-1] == ("end", 0)
    assert head.calls[1:-1] == [("propose", 8)] * 4  # the priming call, then one per repeat
    assert target.sessions[0].length == 7  # every timed target step rolled back
    block = _FakeDrafter(clock, lambda k: 0.010)  # one pass drafts the whole block
    assert measure_propose_cost(block, target, k=8, repeats=3, context=8) == pytest.approx(0.5)


def test_negative_control_timing_the_first_call_would_charge_the_catch_up(clock):
    from token_spec.gamma import draft_over_target

    target = _FakeLM(clock, lambda w: 0.020)
    head = _FakeDrafter(clock, lambda k: 0.005, catch_up=1.0)
    # without the priming propose, the best of one repeat is the catch-up call itself
    ratio = draft_over_target(head.begin, lambda: head.propose([0] * 8, 1, None, None), lambda: head.end([]),
                              target, repeats=1, context=8)
    assert ratio == pytest.approx((1.0 + 0.005) / 0.020)
