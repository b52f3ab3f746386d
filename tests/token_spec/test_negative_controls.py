"""Negative controls: the losslessness checks must FAIL for samplers that are not lossless.

Each control runs the same statistic as test_goodness_of_fit.py / test_markov_joint.py
on a deliberately broken variant and asserts the p-value is tiny (< FAIL_P). A
matching sanity run of the same harness with the correct ingredient must pass
(> PASS_P), so a failure is due to the broken part, not to the harness.

Broken variants live here, never in the package:
* residuals: the target row p instead of max(0, p - q); max(0, p - q) without
  renormalisation (fed to an inverse-CDF draw that assumes a normalised row);
  the flipped max(0, q - p);
* the bonus token drawn from the last draft row instead of row k;
* a target session whose rollback keeps the rejected drafts in its cache;
* an anticipating γ policy that looks at each drafted token before deciding whether
  to verify it;
* the relaxed (lossy) SGLang threshold mode.

The p-values are printed (run with -s to see them).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from markov_harness import draft_model, generate, joint_log10_p, target_model
from stats_helpers import FAIL_LOG10, PASS_LOG10, fmt, g_test_log10, token_counts

from token_spec.gamma import FixedGamma
from token_spec.relaxed import RelaxedVerifier, verify_relaxed
from token_spec.sampler import verify
from token_spec.sampling import SamplingParams, sample
from token_spec.toy import MarkovDrafter, ToyDraft

N_TOKENS = 100_000  # single-round checks (first emitted token)
N_SEQUENCES = 700  # joint checks (whole sequences); the biases below are large
V = 6

Residual = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------ residual variants


def correct_residual(p, q):
    r = (p - q).clamp(min=0)
    return r / r.sum(-1, keepdim=True)


def target_instead_of_residual(p, q):
    return p


def unnormalised_residual(p, q):
    return (p - q).clamp(min=0)


def flipped_residual(p, q):
    r = (q - p).clamp(min=0)
    return r / r.sum(-1, keepdim=True)


def inverse_cdf_draw(weights, generator):
    """A hand-written categorical draw that assumes each row sums to 1: u ~ U[0,1)
    is located in the cumulative sum; mass missing from the row lands on the last token."""
    u = torch.rand(weights.shape[:-1] + (1,), generator=generator, dtype=weights.dtype)
    return torch.searchsorted(weights.cumsum(-1), u, right=True).clamp(max=weights.shape[-1] - 1).squeeze(-1)


def rejection_sampler(residual: Residual, draw=sample, *, bonus_off_by_one: bool = False):
    """A batched rejection sampler with a pluggable residual (correct otherwise)."""

    def run(p, d, q, generator):  # p [B, k+1, V], d [B, k], q [B, k, V] or None
        batch, rows, vocab = p.shape
        k = rows - 1
        if q is None:
            q = torch.nn.functional.one_hot(d, vocab).to(p.dtype)
        b = torch.arange(batch)
        p_d = p[:, :k].gather(-1, d[..., None])[..., 0]
        q_d = q.gather(-1, d[..., None])[..., 0]
        coins = torch.rand((batch, k), generator=generator, dtype=p.dtype)
        accepted = (q_d > 0) & (coins * q_d < p_d)
        n = accepted.long().cumprod(-1).sum(-1)
        final_p = p[b, n - 1] if bonus_off_by_one and k else p[b, n]
        final_p = torch.where((n < k)[:, None], p[b, n], final_p)  # only the bonus row is off
        final_q = q[b, n.clamp(max=max(k - 1, 0))] if k else torch.zeros_like(final_p)
        weights = torch.where((n < k)[:, None], residual(final_p, final_q), final_p)
        last = draw(weights, generator)
        tokens = torch.full((batch, k + 1), -1, dtype=torch.long)
        tokens[:, :k] = torch.where(torch.arange(k)[None] < n[:, None], d, -1)
        tokens[b, n] = last
        return tokens, n + 1

    return run


def as_verifier(batched):
    """Wrap a batched sampler into verify's single-draft signature (for the round loop)."""

    def verifier(target_probs, draft_tokens, draft_probs=None, *, generator=None):
        tokens, n = batched(target_probs[None], draft_tokens[None].long(),
                            None if draft_probs is None else draft_probs[None], generator)
        return tokens[0, : int(n[0])]

    return verifier


def first_token_log10_p(batched, seed=5) -> float:
    """The goodness-of-fit test of the first emitted token (random p, q; k = 3)."""
    k = 3
    p = torch.softmax(torch.randn((k + 1, V), generator=gen(70)) * 1.5, -1)
    q = torch.softmax(torch.randn((k, V), generator=gen(71)) * 1.5, -1)
    g = gen(seed)
    drafts = torch.multinomial(q, N_TOKENS, replacement=True, generator=g).T
    tokens, _ = batched(p.expand(N_TOKENS, -1, -1), drafts, q.expand(N_TOKENS, -1, -1), g)
    return g_test_log10(token_counts(tokens[:, 0], V), p[0].double().numpy())


# ------------------------------------------------------------------ broken residuals


def test_sanity_correct_residual_passes():
    assert first_token_log10_p(rejection_sampler(correct_residual)) > PASS_LOG10
    assert first_token_log10_p(rejection_sampler(correct_residual, inverse_cdf_draw)) > PASS_LOG10


@pytest.mark.parametrize(
    "residual, draw",
    [
        pytest.param(target_instead_of_residual, sample, id="p-instead-of-residual"),
        pytest.param(unnormalised_residual, inverse_cdf_draw, id="no-renormalisation"),
        pytest.param(flipped_residual, sample, id="flipped-residual"),
    ],
)
def test_broken_residual_fails_goodness_of_fit(residual, draw):
    log10_p = first_token_log10_p(rejection_sampler(residual, draw))
    print(f"\nbroken residual {residual.__name__}: first-token G-test {fmt(log10_p)}")
    assert log10_p < FAIL_LOG10


# ------------------------------------------------------------------ joint (Markov) controls


def joint(verifier=verify, *, peek: float | None = None, target=None, seed=9) -> float:
    """log10 p of the joint Markov test (sampled drafter, γ = 3, T = 1)."""
    target = target or target_model()
    drafter = MarkovDrafter(draft_model())
    policy = FixedGamma(3)
    if peek is not None:
        policy = PeekingGamma(3, peek)
        drafter = PeekingDrafter(drafter, policy)
    params = SamplingParams()
    samples = generate(target, drafter, params, policy, N_SEQUENCES, seed, verifier)
    return joint_log10_p(target_model(), samples, params)


@pytest.mark.slow
def test_sanity_joint_harness_passes_with_correct_parts():
    assert joint(as_verifier(rejection_sampler(correct_residual))) > PASS_LOG10


@pytest.mark.slow
def test_broken_residual_fails_joint_test():
    log10_p = joint(as_verifier(rejection_sampler(target_instead_of_residual)))
    print(f"\nbroken residual (p instead of max(0, p-q)): joint G-test {fmt(log10_p)}")
    assert log10_p < FAIL_LOG10


@pytest.mark.slow
def test_bonus_from_wrong_row_fails_joint_test():
    log10_p = joint(as_verifier(rejection_sampler(correct_residual, bonus_off_by_one=True)))
    print(f"\nbonus token from row k-1: joint G-test {fmt(log10_p)}")
    assert log10_p < FAIL_LOG10


class NoRollbackSession:
    """A broken KV cache: truncate() keeps the rejected draft tokens."""

    def __init__(self, inner):
        self.inner = inner

    @property
    def length(self):
        return self.inner.length

    def extend(self, ids):
        return self.inner.extend(ids)

    def truncate(self, length):
        pass


class NoRollbackLM:
    def __init__(self, inner):
        self.inner, self.vocab_size = inner, inner.vocab_size

    def start(self, prompt_ids):
        return NoRollbackSession(self.inner.start(prompt_ids))


@pytest.mark.slow
def test_missing_kv_rollback_fails_joint_test():
    log10_p = joint(target=NoRollbackLM(target_model()))
    print(f"\nno KV rollback after rejection: joint G-test {fmt(log10_p)}")
    assert log10_p < FAIL_LOG10


class PeekingGamma:
    """ANTICIPATING (broken) γ policy: drafts γ tokens, then looks at each drafted token
    and verifies it only if the drafter was confident in it (q(x) >= threshold);
    the draft is cut before the first unconfident token. Whether position i is
    verified thus depends on x_i itself."""

    def __init__(self, k: int, threshold: float):
        self.k, self.threshold = k, threshold

    def gamma(self) -> int:
        return self.k

    def update(self, proposed: int, accepted: int) -> None:
        pass

    def verify_count(self, draft: ToyDraft) -> int:
        q_of_token = draft.probs.gather(-1, draft.tokens[:, None])[:, 0]
        unsure = (q_of_token < self.threshold).nonzero()
        return int(unsure[0]) if len(unsure) else len(draft.tokens)


class PeekingDrafter:
    """Lets the anticipating policy cut each draft after seeing it."""

    def __init__(self, inner: MarkovDrafter, policy: PeekingGamma):
        self.inner, self.policy, self.name = inner, policy, "peeking"

    def begin(self, prompt_ids):
        self.inner.begin(prompt_ids)

    def end(self, output_ids):
        self.inner.end(output_ids)

    def propose(self, context, k, params, generator):
        draft = self.inner.propose(context, k, params, generator)
        keep = self.policy.verify_count(draft)
        return ToyDraft(tokens=draft.tokens[:keep], probs=draft.probs[:keep])


@pytest.mark.slow
def test_anticipating_gamma_policy_fails_joint_test():
    log10_p = joint(peek=0.5)
    print(f"\nanticipating gamma policy: joint G-test {fmt(log10_p)}")
    assert log10_p < FAIL_LOG10


# ------------------------------------------------------------------ relaxed thresholds


@pytest.mark.slow
def test_relaxed_thresholds_fail_joint_test():
    log10_p = joint(RelaxedVerifier(threshold_single=0.5, threshold_acc=0.5))
    print(f"\nrelaxed thresholds (0.5, 0.5): joint G-test {fmt(log10_p)}")
    assert log10_p < FAIL_LOG10


@pytest.mark.slow
def test_relaxed_with_strict_thresholds_passes_joint_test():
    assert joint(RelaxedVerifier(1.0, 1.0)) > PASS_LOG10


def test_relaxed_thresholds_fail_goodness_of_fit():
    draws = 1500
    k = 2
    p = torch.softmax(torch.randn((k + 1, V), generator=gen(80)) * 1.5, -1)
    q = torch.softmax(torch.randn((k, V), generator=gen(81)) * 1.5, -1)
    g = gen(82)
    first = []
    for _ in range(draws):
        d = torch.multinomial(q, 1, generator=g).squeeze(-1)
        result = verify_relaxed(p, d, q, threshold_single=0.3, threshold_acc=0.4, generator=g)
        assert result.lossless is False
        first.append(int(result.tokens[0]))
    log10_p = g_test_log10(token_counts(first, V), p[0].double().numpy())
    print(f"\nrelaxed thresholds (0.3, 0.4): first-token G-test {fmt(log10_p)}")
    assert log10_p < FAIL_LOG10
