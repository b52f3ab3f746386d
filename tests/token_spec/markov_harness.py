"""Shared set-up for the Markov joint test and its negative controls.

Full multi-round speculative generation (token_spec.rounds.speculative_ids) over toy
Markov models whose exact sequence probabilities are known; the emitted sequence of
LENGTH tokens is G-tested against the exact target law.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from stats_helpers import sequence_g_test_log10

from token_spec.gamma import GammaPolicy
from token_spec.rounds import speculative_ids
from token_spec.sampler import verify
from token_spec.sampling import SamplingParams
from token_spec.toy import MarkovLM, random_markov

VOCAB = 3
LENGTH = 4  # 3^4 = 81 possible sequences
PROMPT = [2, 0, 1]


def target_model() -> MarkovLM:
    return random_markov(VOCAB, period=2, seed=101, scale=1.0, name="toy-target")


def draft_model() -> MarkovLM:
    return random_markov(VOCAB, period=2, seed=202, scale=1.5, name="toy-draft")


def generate(target, drafter, params: SamplingParams, policy: GammaPolicy, n: int, seed: int,
             verifier: Callable = verify) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        rounds = speculative_ids(target, drafter, PROMPT, params, policy=policy, generator=gen,
                                 verifier=verifier, max_new_tokens=LENGTH)
        out.append([t for r in rounds for t in r])
    return out


def joint_log10_p(target: MarkovLM, samples: list[list[int]], params: SamplingParams) -> float:
    """log10 p-value of the G-test of whole sampled sequences against the exact law."""
    return sequence_g_test_log10(samples, target.sequence_probs(PROMPT, LENGTH, params))
