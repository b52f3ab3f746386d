"""Goodness of fit: tokens emitted by the rejection sampler follow the target p.

Each case runs 10^5 independent verifications of one (p, q) setting through
`verify_batch` (the vectorised core that `verify` calls with a batch of one; their
equality is pinned in test_verify.py) and G-tests

* the first emitted token against p_0 (always emitted),
* the token at position j, given that position j was emitted, against p_j
  (the rows here do not depend on earlier tokens, so this is exact),
* the number of accepted drafts against its exact law, with per-position
  acceptance probability alpha_i = sum_x min(p_i(x), q_i(x)) — this keeps a sampler
  that "always rejects and samples p" from passing.

Seeds are fixed: each p-value is a fixed number, compared with the strict PASS_P.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from stats_helpers import PASS_LOG10, fmt, g_test_log10, position_g_tests, token_counts

from token_spec.sampler import verify, verify_batch
from token_spec.sampling import warp

N = 100_000
V = 6


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def softmax_rows(n: int, *, seed: int, scale: float = 1.5, zero: list[int] | None = None) -> torch.Tensor:
    logits = torch.randn((n, V), generator=gen(seed)) * scale
    if zero:
        logits[:, zero] = -math.inf
    return torch.softmax(logits, -1)


def run_batch(p: torch.Tensor, q: torch.Tensor | None, fixed_draft: torch.Tensor | None, seed: int):
    """N verifications; drafts sampled from q (or the fixed deterministic draft)."""
    k = p.shape[0] - 1
    g = gen(seed)
    if q is not None:
        drafts = torch.multinomial(q, N, replacement=True, generator=g).T if k else torch.empty((N, 0), dtype=torch.long)
        probs = q.expand(N, -1, -1)
    else:
        drafts, probs = fixed_draft.expand(N, -1), None
    return verify_batch(p.expand(N, -1, -1), drafts, probs, generator=g)


def acceptance_law(p: torch.Tensor, q: torch.Tensor | None, fixed_draft: torch.Tensor | None) -> np.ndarray:
    """Exact P(number accepted = j), j = 0..k."""
    k = p.shape[0] - 1
    if q is not None:
        alpha = torch.minimum(p[:k].double(), q.double()).sum(-1).tolist()  # alpha_i = sum min(p, q)
    else:
        alpha = [float(p[i, fixed_draft[i]]) for i in range(k)]  # one-hot q: accept w.p. p(d)
    law, survive = [], 1.0
    for a in alpha:
        law.append(survive * (1 - a))
        survive *= a
    law.append(survive)
    return np.asarray(law)


def assert_lossless(name, p, q=None, fixed_draft=None, seed=0):
    tokens, emitted = run_batch(p, q, fixed_draft, seed)
    checks = position_g_tests(tokens, emitted, p)
    assert checks and checks[0][:2] == (0, N)
    for pos, count, log10_p in checks:
        assert log10_p > PASS_LOG10, f"{name}: position {pos} ({count} samples) {fmt(log10_p)}"
    law = acceptance_law(p, q, fixed_draft)
    counts = np.bincount((emitted - 1).numpy(), minlength=len(law)).astype(float)
    log10_p = g_test_log10(counts, law / law.sum())
    assert log10_p > PASS_LOG10, f"{name}: acceptance lengths {fmt(log10_p)}"
    return checks


# ------------------------------------------------------------------ stochastic drafts


@pytest.mark.parametrize("k", [1, 3, 5])
def test_random_p_q(k):
    checks = assert_lossless(f"random k={k}", softmax_rows(k + 1, seed=10 + k), softmax_rows(k, seed=20 + k), seed=k)
    assert len(checks) >= 2  # later positions are tested too, not only the first token


def test_q_zero_where_p_positive():
    # the draft never proposes tokens 0 and 1, which the target likes
    p = softmax_rows(4, seed=1)
    p[:, :2] += 0.3
    p = p / p.sum(-1, keepdim=True)
    assert_lossless("q=0 where p>0", p, softmax_rows(3, seed=2, zero=[0, 1]), seed=11)


def test_p_zero_where_q_positive():
    # the target forbids tokens the draft likes (e.g. top-k on the target only)
    q = softmax_rows(3, seed=4)
    q[:, 4:] += 0.4
    q = q / q.sum(-1, keepdim=True)
    assert_lossless("p=0 where q>0", softmax_rows(4, seed=3, zero=[4, 5]), q, seed=12)


def test_disjoint_supports_always_reject():
    p = softmax_rows(3, seed=5, zero=[3, 4, 5])
    q = softmax_rows(2, seed=6, zero=[0, 1, 2])
    tokens, emitted = run_batch(p, q, None, seed=13)
    assert (emitted == 1).all()  # alpha = 0: every first draft rejected
    assert g_test_log10(token_counts(tokens[:, 0], V), p[0].double().numpy()) > PASS_LOG10


def test_p_equals_q_always_accepts():
    p = softmax_rows(4, seed=7)
    tokens, emitted = run_batch(p, p[:3].clone(), None, seed=14)
    assert (emitted == 4).all()
    assert_lossless("p == q", p, p[:3].clone(), seed=14)


def test_nearly_equal_p_q():
    # residual mass ~1e-4: renormalisation of a tiny residual must still be right
    q = softmax_rows(2, seed=8)
    p = q + 1e-4 * softmax_rows(2, seed=9)
    p = torch.cat([p / p.sum(-1, keepdim=True), softmax_rows(1, seed=10)])
    assert_lossless("p ~= q", p, q, seed=15)


def test_one_hot_target_with_stochastic_draft():
    p = torch.eye(V)[[2, 5, 0, 1]]  # greedy target rows
    assert_lossless("greedy target", p, softmax_rows(3, seed=11), seed=16)


def test_k_zero_is_plain_sampling():
    assert_lossless("k=0", softmax_rows(1, seed=12), softmax_rows(0, seed=13), seed=17)


# ------------------------------------------------------------------ deterministic drafts


@pytest.mark.parametrize(
    "draft_kind",
    ["argmax", "p_zero", "arbitrary"],
)
def test_deterministic_drafts(draft_kind):
    p = softmax_rows(4, seed=30, zero=[5])
    if draft_kind == "argmax":
        d = p[:3].argmax(-1)
    elif draft_kind == "p_zero":
        d = torch.tensor([5, 5, 5])  # impossible under p: always rejected, residual = p
    else:
        d = torch.tensor([3, 0, 2])
    assert_lossless(f"deterministic {draft_kind}", p, None, d, seed=18)


# ------------------------------------------------------------------ with warping (top-k / top-p)

WARPS = [
    pytest.param(0.7, 3, 1.0, id="T0.7-topk3"),
    pytest.param(1.0, 0, 0.8, id="T1-topp0.8"),
    pytest.param(1.3, 4, 0.9, id="T1.3-topk4-topp0.9"),
    pytest.param(0.0, 0, 1.0, id="greedy"),
]


@pytest.mark.parametrize("temperature, top_k, top_p", WARPS)
@pytest.mark.parametrize("k", [2, 4])
def test_warped_target_and_draft(temperature, top_k, top_p, k):
    target_logits = torch.randn((k + 1, V), generator=gen(40 + k)) * 2
    draft_logits = target_logits[:k] + torch.randn((k, V), generator=gen(50 + k)) * 1.5
    p = warp(target_logits, temperature, top_k, top_p)
    q = warp(draft_logits, temperature, top_k, top_p)
    assert_lossless(f"warped T={temperature} k={top_k} p={top_p}", p, q, seed=19 + k)


# ------------------------------------------------------------------ the public per-call function


def test_public_verify_first_token_per_call():
    """The unbatched entry point, called once per draw (fewer draws: it is slower)."""
    draws = 2500
    p, q = softmax_rows(3, seed=60), softmax_rows(2, seed=61, zero=[2])
    g = gen(62)
    first = []
    for _ in range(draws):
        d = torch.multinomial(q, 1, generator=g).squeeze(-1)
        first.append(int(verify(p, d, q, generator=g)[0]))
    log10_p = g_test_log10(token_counts(first, V), p[0].double().numpy())
    assert log10_p > PASS_LOG10, fmt(log10_p)
