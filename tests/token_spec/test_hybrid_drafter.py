"""HybridDrafter: the lookup where it matches, the model elsewhere, and still lossless."""

from __future__ import annotations

import pytest
import torch
from markov_harness import LENGTH, PROMPT, draft_model, generate, joint_log10_p, target_model
from stats_helpers import PASS_LOG10, fmt

from token_spec.drafters import HybridDrafter, ModelDrafter, NgramDrafter
from token_spec.gamma import FixedGamma
from token_spec.sampling import SamplingParams
from token_spec.toy import MarkovDrafter, random_markov

GREEDY = SamplingParams(temperature=0)


class _Recording:
    """A drafter that proposes fixed tokens and records the k it was asked for."""

    def __init__(self, tokens: list[int], name: str = "rec") -> None:
        self.tokens, self.name, self.asked = tokens, name, []
        self.begun = self.ended = 0

    def begin(self, prompt_ids) -> None:
        self.begun += 1

    def propose(self, context, k, params, generator):
        from token_spec.drafters import Draft

        self.asked.append(k)
        return Draft(tokens=torch.tensor(self.tokens[:k], dtype=torch.long))

    def end(self, output_ids) -> None:
        self.ended += 1


def test_lookup_match_wins_and_the_model_is_not_asked():
    model = _Recording([9, 9, 9])
    d = HybridDrafter(NgramDrafter(), model)
    ctx = [1, 2, 3, 4, 1, 2]  # "1 2" occurred before, followed by 3 4
    assert d.propose(ctx, 2, GREEDY, None).tokens.tolist() == [3, 4]
    assert model.asked == [] and d.rounds == {"lookup": 1, "model": 0}


def test_without_a_lookup_match_the_model_drafts_at_most_model_tokens():
    model = _Recording([7, 8, 9, 6, 5])
    d = HybridDrafter(NgramDrafter(), model, model_tokens=3)
    assert d.propose([1, 2, 3], 8, GREEDY, None).tokens.tolist() == [7, 8, 9]
    assert d.propose([1, 2, 3, 4], 2, GREEDY, None).tokens.tolist() == [7, 8]  # k below the cap
    assert model.asked == [3, 2] and d.rounds == {"lookup": 0, "model": 2}
    assert d.propose([1, 2, 3], 0, GREEDY, None).tokens.numel() == 0  # k = 0: nobody drafts
    assert model.asked == [3, 2]


def test_begin_and_end_reach_both_drafters_and_the_name_names_both():
    lookup, model = _Recording([]), _Recording([1])
    d = HybridDrafter(lookup, model)
    d.begin([1, 2])
    d.end([3])
    assert (lookup.begun, lookup.ended, model.begun, model.ended) == (1, 1, 1, 1)
    assert d.name == "rec+rec"


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "3"])
def test_bad_model_tokens_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="model_tokens"):
        HybridDrafter(NgramDrafter(), _Recording([1]), model_tokens=bad)


def test_drafters_with_different_vocabularies_are_refused():
    a, b = random_markov(vocab=5, period=2, seed=1), random_markov(vocab=6, period=2, seed=1)
    with pytest.raises(ValueError, match="vocabulary"):
        HybridDrafter(ModelDrafter(a), ModelDrafter(b))


def test_greedy_hybrid_emits_the_targets_greedy_tokens():
    from token_spec.rounds import speculative_ids, vanilla_ids

    target = random_markov(vocab=7, period=3, seed=4, scale=3.0)
    draft = random_markov(vocab=7, period=3, seed=5, scale=3.0)
    prompt = [0, 1, 2, 0, 1]
    ref = list(vanilla_ids(target, prompt, GREEDY, generator=None, max_new_tokens=40))
    hybrid = HybridDrafter(NgramDrafter(n_min=1), ModelDrafter(draft), model_tokens=3)
    got = [t for r in speculative_ids(target, hybrid, prompt, GREEDY, policy=FixedGamma(4), generator=None,
                                      max_new_tokens=40) for t in r]
    assert got == ref
    assert hybrid.rounds["lookup"] > 0 and hybrid.rounds["model"] > 0  # both kinds of round happened


JOINT_PARAMS = SamplingParams(temperature=1.1, top_p=0.9)


def _joint_law_log10_p(cls) -> tuple[float, HybridDrafter]:
    """2500 whole sequences from a ``cls`` hybrid (3 tokens: a 2-gram lookup matches in some
    rounds, the sampled Markov draft drafts the rest), G-tested against the target's law."""
    target = target_model()
    hybrid = cls(NgramDrafter(), MarkovDrafter(draft_model()), model_tokens=2)
    samples = generate(target, hybrid, JOINT_PARAMS, FixedGamma(2), 2500, seed=11)
    assert all(len(s) == LENGTH for s in samples) and len(PROMPT) > 0
    return joint_log10_p(target, samples, JOINT_PARAMS), hybrid


@pytest.mark.slow
def test_hybrid_joint_law_of_whole_sequences_is_the_targets():
    log10_p, hybrid = _joint_law_log10_p(HybridDrafter)
    assert hybrid.rounds["lookup"] > 0 and hybrid.rounds["model"] > 0
    assert log10_p > PASS_LOG10, f"joint law {fmt(log10_p)}"


class _MislabelsQRows(HybridDrafter):
    """Broken on purpose: hands the verifier the model's q rows shifted by one token id
    (a q that is not what the drafts were sampled from)."""

    def propose(self, context, k, params, generator):
        draft = super().propose(context, k, params, generator)
        if draft.probs is not None:
            draft.probs = torch.roll(draft.probs, shifts=1, dims=-1)
        return draft


@pytest.mark.slow
def test_negative_control_the_joint_test_catches_a_hybrid_with_wrong_q_rows():
    log10_p, broken = _joint_law_log10_p(_MislabelsQRows)
    assert broken.rounds["model"] > 0
    assert log10_p < PASS_LOG10, f"a biased hybrid passed: {fmt(log10_p)}"


class _GatedHybrid(HybridDrafter):
    """The hybrid with its model behind a DraftGate tuned to shut and reopen often (costly
    drafts, frequent probes), so gated-off and drafted rounds both occur."""

    def __init__(self, lookup, model, **kwargs) -> None:
        from token_spec.drafters import GatedDrafter
        from token_spec.gamma import DraftGate

        gate = DraftGate(costs=(1.0, 1.3, 1.6), draft_cost=0.3, max_tokens=2, probe_every=2, max_probe_every=4)
        super().__init__(lookup, GatedDrafter(model, gate), **kwargs)


@pytest.mark.slow
def test_gated_hybrid_joint_law_of_whole_sequences_is_the_targets():
    # the gate decides from earlier rounds only, so the mix stays lossless under sampling
    log10_p, hybrid = _joint_law_log10_p(_GatedHybrid)
    assert hybrid.model.rounds["drafted"] > 0 and hybrid.model.rounds["skipped"] > 0
    assert log10_p > PASS_LOG10, f"joint law {fmt(log10_p)}"
