"""Joint test: whole sequences from multi-round speculative decoding follow the target.

A toy target and a toy draft (inhomogeneous order-1 Markov chains over 3 tokens,
token_spec.toy) have exact sequence probabilities. Full speculative generation of
LENGTH tokens, with several rounds per sequence, is G-tested against the exact
target law of the whole sequence (81 cells). A wrong bonus row, a wrong pending
token or a wrong KV rollback changes the joint law (the toy target conditions on
both the previous token and its position), and fails this test.
"""

from __future__ import annotations

import pytest
from markov_harness import LENGTH, PROMPT, draft_model, generate, joint_log10_p, target_model
from stats_helpers import PASS_LOG10, fmt

from token_spec.gamma import AdaptiveGamma, FixedGamma
from token_spec.sampling import SamplingParams
from token_spec.toy import MarkovDrafter

N = 2500

CONFIGS = [
    pytest.param(False, lambda: AdaptiveGamma(initial=1, min_gamma=1, max_gamma=3), SamplingParams(), id="sampled-adaptive-T1"),
    pytest.param(False, lambda: FixedGamma(2), SamplingParams(temperature=1.3, top_p=0.85), id="sampled-fixed2-topp"),
    pytest.param(True, lambda: FixedGamma(3), SamplingParams(temperature=0.8, top_k=2), id="argmax-fixed3-topk2"),
]


@pytest.mark.slow
@pytest.mark.parametrize("deterministic, policy, params", CONFIGS)
def test_joint_law_of_whole_sequence(deterministic, policy, params):
    target = target_model()
    drafter = MarkovDrafter(draft_model(), deterministic=deterministic)
    samples = generate(target, drafter, params, policy(), N, seed=7)
    assert all(len(s) == LENGTH for s in samples)
    log10_p = joint_log10_p(target, samples, params)
    assert log10_p > PASS_LOG10, f"joint law {fmt(log10_p)}"


def test_exact_law_is_a_distribution():
    target = target_model()
    for params in (SamplingParams(), SamplingParams(temperature=0.8, top_k=2)):
        law = target.sequence_probs(PROMPT, LENGTH, params)
        assert len(law) == 3**LENGTH and abs(sum(law.values()) - 1) < 1e-9
        assert sum(v > 0 for v in law.values()) >= 16
