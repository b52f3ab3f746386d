"""The round loop (token_spec.rounds): greedy identity, γ = 0 identity, budgets, EOS,
exact KV bookkeeping, policy feedback, drafter lifecycle, errors."""

from __future__ import annotations

import pytest
import torch

from token_spec.gamma import AdaptiveGamma, FixedGamma
from token_spec.relaxed import RelaxedVerifier
from token_spec.rounds import speculative_ids, vanilla_ids
from token_spec.sampling import SamplingParams
from token_spec.toy import MarkovDrafter, ToyDraft, random_markov

VOCAB = 8
PROMPT = [1, 4, 2]


def gen(seed):
    return torch.Generator().manual_seed(seed)


def models(seed=0):
    target = random_markov(VOCAB, period=3, seed=seed, scale=2.0, name="t")
    draft = random_markov(VOCAB, period=3, seed=seed + 1, scale=2.0, name="d")
    # make the draft agree with the target often, so that long acceptances happen
    draft.logits = 0.5 * draft.logits + target.logits
    return target, draft


def spec(target, drafter, params, policy, seed=0, **kw):
    return [t for r in speculative_ids(target, drafter, PROMPT, params, policy=policy, generator=gen(seed), **kw) for t in r]


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize(
    "policy",
    [lambda: FixedGamma(1), lambda: FixedGamma(4), lambda: AdaptiveGamma(initial=2)],
    ids=["fixed1", "fixed4", "adaptive"],
)
def test_greedy_speculative_equals_vanilla_greedy(deterministic, policy):
    params = SamplingParams(temperature=0, max_tokens=40)
    for seed in range(5):
        target, draft = models(seed)
        expected = list(vanilla_ids(target, PROMPT, params, generator=None))
        got = spec(target, MarkovDrafter(draft, deterministic=deterministic), params, policy(), seed=seed)
        assert got == expected


def test_gamma_zero_matches_vanilla_bit_for_bit():
    target, draft = models(3)
    params = SamplingParams(temperature=1.1, top_k=5, max_tokens=25)
    for seed in range(5):
        expected = list(vanilla_ids(target, PROMPT, params, generator=gen(seed)))
        assert spec(target, MarkovDrafter(draft), params, FixedGamma(0), seed=seed) == expected


def test_seeded_generation_is_reproducible():
    target, draft = models(4)
    params = SamplingParams(max_tokens=30)
    runs = [spec(target, MarkovDrafter(draft), params, AdaptiveGamma(), seed=11) for _ in range(2)]
    assert runs[0] == runs[1]
    assert runs[0] != spec(target, MarkovDrafter(draft), params, AdaptiveGamma(), seed=12)


class SpySession:
    def __init__(self, inner, log):
        self.inner, self.log = inner, log

    @property
    def length(self):
        return self.inner.length

    def extend(self, ids):
        self.log.append(("extend", self.inner.length, ids.tolist()))
        return self.inner.extend(ids)

    def truncate(self, length):
        self.log.append(("truncate", length))
        self.inner.truncate(length)


class SpyTarget:
    def __init__(self, inner):
        self.inner, self.vocab_size, self.log, self.sessions = inner, inner.vocab_size, [], []

    def start(self, prompt_ids):
        self.log.append(("start", list(prompt_ids)))
        session = SpySession(self.inner.start(prompt_ids), self.log)
        self.sessions.append(session)
        return session


class SpyDrafter(MarkovDrafter):
    def __init__(self, model, **kw):
        super().__init__(model, **kw)
        self.calls = []

    def begin(self, prompt_ids):
        self.calls.append(("begin", list(prompt_ids)))

    def propose(self, context, k, params, generator):
        self.calls.append(("propose", list(context), k))
        return super().propose(context, k, params, generator)

    def end(self, output_ids):
        self.calls.append(("end", list(output_ids)))


class SpyPolicy(FixedGamma):
    def __init__(self, k):
        super().__init__(k)
        self.updates = []

    def update(self, proposed, accepted):
        super().update(proposed, accepted)
        self.updates.append((proposed, accepted))


def test_round_bookkeeping_is_exact():
    inner, draft = models(5)
    target, drafter, policy = SpyTarget(inner), SpyDrafter(draft), SpyPolicy(3)
    params = SamplingParams(max_tokens=23)
    rounds = list(speculative_ids(target, drafter, PROMPT, params, policy=policy, generator=gen(0)))
    output = [t for r in rounds for t in r]
    assert len(output) == 23  # max_tokens honoured exactly
    assert target.log[0] == ("start", PROMPT[:-1])
    session = target.sessions[0]
    # the cache holds the prompt and every emitted token but the last (the pending one)
    assert session.inner.tokens == PROMPT + output[:-1]
    # per round: extend([pending] + draft), truncate(before + 1 + accepted)
    extends = [e for e in target.log if e[0] == "extend"]
    truncates = [e for e in target.log if e[0] == "truncate"]
    assert len(extends) == len(truncates) == len(rounds) == len(policy.updates)
    emitted_before = 0
    history = list(PROMPT)
    for (_, before, ids), (_, after), tokens, (proposed, accepted) in zip(extends, truncates, rounds, policy.updates):
        assert before == len(PROMPT) - 1 + emitted_before
        assert ids[0] == history[-1] and len(ids) == proposed + 1
        assert after == before + 1 + accepted
        assert tokens[:accepted] == ids[1 : 1 + accepted]
        assert len(tokens) <= accepted + 1
        emitted_before += len(tokens)
        history += tokens
    # drafting is capped by the remaining budget, and sees all verified ids
    proposes = [c for c in drafter.calls if c[0] == "propose"]
    assert all(k <= 3 for _, _, k in proposes)
    assert proposes[0][1] == PROMPT
    assert drafter.calls[0] == ("begin", PROMPT) and drafter.calls[-1] == ("end", output)
    assert any(accepted == proposed == 3 for proposed, accepted in policy.updates)  # bonus rounds happen
    assert any(accepted < proposed for proposed, accepted in policy.updates)  # and rejections


def test_budget_caps_the_draft_length():
    _, draft = models(6)
    target = SpyTarget(models(6)[0])
    drafter = SpyDrafter(draft)
    out = spec(target, drafter, SamplingParams(max_tokens=3), FixedGamma(8))
    assert len(out) == 3
    assert all(k <= 2 for c in drafter.calls if c[0] == "propose" for k in [c[2]])


def test_max_new_tokens_overrides_params():
    target, draft = models(7)
    assert len(spec(target, MarkovDrafter(draft), SamplingParams(max_tokens=50), FixedGamma(4), max_new_tokens=7)) == 7
    assert spec(target, MarkovDrafter(draft), SamplingParams(), FixedGamma(4), max_new_tokens=0) == []


@pytest.mark.parametrize("deterministic", [False, True])
def test_stops_at_eos_inclusive(deterministic):
    target, draft = models(8)
    params = SamplingParams(max_tokens=200)
    hits = 0
    for seed in range(10):
        out = spec(target, MarkovDrafter(draft, deterministic=deterministic), params, FixedGamma(4), seed=seed, eos_id=0)
        van = list(vanilla_ids(target, PROMPT, params, generator=gen(seed), eos_id=0))
        for seq in (out, van):
            assert 0 not in seq[:-1]
            if len(seq) < 200:
                assert seq[-1] == 0
        hits += out[-1] == 0
    assert hits >= 5


def test_drafter_end_is_called_when_the_consumer_stops_early():
    target, draft = models(9)
    drafter = SpyDrafter(draft)
    it = speculative_ids(target, drafter, PROMPT, SamplingParams(max_tokens=50), policy=FixedGamma(2), generator=gen(0))
    first = next(it)
    it.close()
    assert drafter.calls[-1] == ("end", first)


def test_short_and_empty_drafts_are_fine():
    class Shy(MarkovDrafter):
        def propose(self, context, k, params, generator):
            draft = super().propose(context, k, params, generator)
            keep = len(context) % 3  # 0, 1 or 2 tokens, decided before drafting
            return ToyDraft(draft.tokens[:keep], draft.probs[:keep])

    target, draft = models(10)
    params = SamplingParams(temperature=0, max_tokens=30)
    expected = list(vanilla_ids(target, PROMPT, params, generator=None))
    assert spec(target, Shy(draft), params, FixedGamma(4)) == expected


def test_relaxed_verifier_plugs_in():
    target, draft = models(11)
    out = spec(target, MarkovDrafter(draft), SamplingParams(max_tokens=20), FixedGamma(3),
               verifier=RelaxedVerifier(0.6, 0.6))
    assert len(out) == 20


def test_errors():
    target, draft = models(12)
    with pytest.raises(ValueError, match="prompt_ids"):
        list(speculative_ids(target, MarkovDrafter(draft), [], SamplingParams(), policy=FixedGamma(2), generator=None))
    with pytest.raises(ValueError, match="SamplingParams"):
        list(vanilla_ids(target, PROMPT, {"temperature": 1.0}, generator=None))  # type: ignore[arg-type]

    class Greedy(MarkovDrafter):
        def propose(self, context, k, params, generator):
            return super().propose(context, k + 1, params, generator)

    with pytest.raises(ValueError, match="more than the k=2"):
        spec(target, Greedy(draft), SamplingParams(max_tokens=10), FixedGamma(2))

    other = random_markov(VOCAB + 1, seed=1)
    with pytest.raises(ValueError, match="draft vocabulary size 9 differs from the target's 8"):
        spec(target, MarkovDrafter(other), SamplingParams(max_tokens=10), FixedGamma(2))
