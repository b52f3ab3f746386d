"""Draft-length policies: behaviour, bounds, and the non-anticipating interface."""

from __future__ import annotations

import inspect

import pytest

from token_spec.gamma import AdaptiveGamma, FixedGamma, GammaPolicy


def test_fixed_gamma():
    policy = FixedGamma(5)
    assert isinstance(policy, GammaPolicy)
    for proposed, accepted in [(5, 0), (5, 5), (3, 1)]:
        policy.update(proposed, accepted)
        assert policy.gamma() == 5
    assert FixedGamma(0).gamma() == 0


@pytest.mark.parametrize("k", [-1, 1.5, True])
def test_fixed_gamma_validation(k):
    with pytest.raises(ValueError, match="gamma"):
        FixedGamma(k)


def test_adaptive_gamma_follows_hf_rule_within_bounds():
    policy = AdaptiveGamma(initial=4, min_gamma=2, max_gamma=9)
    assert isinstance(policy, GammaPolicy)
    trace = []
    for accepted_all in [True, True, True, False, False, False, False, False, True]:
        k = policy.gamma()
        policy.update(k, k if accepted_all else k - 1)
        trace.append(policy.gamma())
    assert trace == [6, 8, 9, 8, 7, 6, 5, 4, 6]
    for _ in range(10):
        policy.update(policy.gamma(), 0)
    assert policy.gamma() == 2
    policy.reset()
    assert policy.gamma() == 4


def test_adaptive_gamma_ignores_empty_rounds():
    policy = AdaptiveGamma(initial=3)
    policy.update(0, 0)  # drafter had nothing: no evidence either way
    assert policy.gamma() == 3


@pytest.mark.parametrize("kwargs", [{"initial": 0, "min_gamma": 1}, {"initial": 20}, {"increase": -1}])
def test_adaptive_gamma_validation(kwargs):
    with pytest.raises(ValueError):
        AdaptiveGamma(**kwargs)


@pytest.mark.parametrize("policy", [FixedGamma(2), AdaptiveGamma()])
def test_update_rejects_impossible_counts(policy):
    with pytest.raises(ValueError, match="accepted"):
        policy.update(2, 3)
    with pytest.raises(ValueError, match="accepted"):
        policy.update(2, -1)


@pytest.mark.parametrize("cls", [FixedGamma, AdaptiveGamma])
def test_gamma_cannot_see_the_draft(cls):
    # Non-anticipating by construction: the decision takes no input at all; what the
    # policy knows arrives through update() after a round is verified.
    assert list(inspect.signature(cls().gamma).parameters) == []
    assert list(inspect.signature(cls().update).parameters) == ["proposed", "accepted"]


# ---------------------------------------------------------------- CostAwareGamma


def test_cost_aware_gamma_drafts_longer_where_verification_is_cheap():
    from token_spec.gamma import CostAwareGamma

    flat = CostAwareGamma(costs=tuple(1.0 + 0.01 * k for k in range(16)))
    steep = CostAwareGamma(costs=tuple(1.0 + 0.5 * k for k in range(16)))
    for policy in (flat, steep):
        assert isinstance(policy, GammaPolicy)
        for _ in range(10):
            policy.update(4, 4)  # every draft accepted: alpha estimate goes up
    assert flat.gamma() > steep.gamma() >= 1
    assert flat.gamma() == 15  # nearly free verification + high acceptance: the widest exact pass


def test_cost_aware_gamma_shrinks_after_rejections_and_ignores_empty_rounds():
    from token_spec.gamma import CostAwareGamma

    policy = CostAwareGamma(costs=tuple(1.0 + 0.1 * k for k in range(16)))
    for _ in range(10):
        policy.update(4, 4)
    high = policy.gamma()
    before = policy.alpha
    policy.update(0, 0)  # no draft: no evidence
    assert policy.alpha == before
    for _ in range(10):
        policy.update(4, 0)
    assert policy.gamma() < high and policy.gamma() >= policy.min_gamma


def test_cost_aware_gamma_is_decided_from_the_past_only():
    from token_spec.gamma import CostAwareGamma

    # same interface as every policy: gamma() takes no argument about the coming draft
    assert list(inspect.signature(CostAwareGamma.gamma).parameters) == ["self"]
    a, b = CostAwareGamma(), CostAwareGamma()
    for p, acc in [(4, 2), (3, 3), (5, 0)]:
        a.update(p, acc)
        b.update(p, acc)
    assert a.gamma() == b.gamma()  # a function of the history alone


@pytest.mark.parametrize("kwargs", [dict(costs=()), dict(costs=(1.0, -1.0)), dict(min_gamma=5, max_gamma=2),
                                    dict(decay=0.0)])
def test_cost_aware_gamma_validation(kwargs):
    from token_spec.gamma import CostAwareGamma

    with pytest.raises(ValueError):
        CostAwareGamma(**kwargs)
