"""verify(): contract, edge cases, clear errors, seeded determinism, equality with the
slow reference loop. Distributional checks live in test_goodness_of_fit.py."""

from __future__ import annotations

import math

import pytest
import torch

from token_spec.reference import verify_reference
from token_spec.relaxed import RelaxedVerifier, verify_relaxed
from token_spec.sampler import ROW_SUM_ATOL, verify, verify_batch

V = 6


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rows(n: int, vocab: int = V, *, seed: int, sparsity: float = 0.0) -> torch.Tensor:
    """n random probability rows; with sparsity, some entries are exactly 0."""
    g = gen(seed)
    logits = torch.randn((n, vocab), generator=g) * 2
    if sparsity:
        mask = torch.rand((n, vocab), generator=g) < sparsity
        mask[:, 0] = False  # keep every row non-empty
        logits = logits.masked_fill(mask, -math.inf)
    return torch.softmax(logits, -1)


def case(k: int, seed: int, *, sparsity: float = 0.0, deterministic: bool = False):
    p = rows(k + 1, seed=seed, sparsity=sparsity)
    q = rows(k, seed=seed + 1000, sparsity=sparsity)
    if k:
        d = torch.multinomial(q, 1, generator=gen(seed + 2000)).squeeze(-1)
    else:
        d = torch.empty(0, dtype=torch.long)
    return p, d, (None if deterministic else q)


# ---------------------------------------------------------------- contract and edge cases


@pytest.mark.parametrize("k", [0, 1, 3, 7])
@pytest.mark.parametrize("deterministic", [False, True])
def test_output_is_accepted_prefix_plus_one(k, deterministic):
    for seed in range(40):
        p, d, q = case(k, seed, deterministic=deterministic)
        out = verify(p, d, q, generator=gen(seed))
        assert out.dtype == torch.long and out.dim() == 1
        assert 1 <= out.numel() <= k + 1
        n = out.numel() - 1
        assert torch.equal(out[:n], d[:n])
        assert 0 <= int(out[-1]) < V


def test_k_zero_samples_row_zero():
    p = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    assert verify(p, torch.empty(0, dtype=torch.long)).tolist() == [2]
    p = torch.tensor([[0.5, 0.0, 0.5, 0.0]])
    draws = {int(verify(p, torch.empty(0, dtype=torch.long), generator=gen(s))[0]) for s in range(50)}
    assert draws == {0, 2}


def test_all_accepted_gives_bonus_from_last_row():
    # p == q == one-hot at the draft tokens: always accepted; the bonus row is one-hot at 3.
    p = torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 0, 1.0]])
    d = torch.tensor([0, 1])
    assert verify(p, d, p[:2].clone()).tolist() == [0, 1, 3]
    assert verify(p, d).tolist() == [0, 1, 3]


def test_reject_when_q_is_zero_even_if_p_is_large():
    # The drafter claims q(2) = 0 yet proposes 2: never accepted, however likely under p.
    p = torch.tensor([[0.0, 0.0, 1.0], [1 / 3, 1 / 3, 1 / 3]])
    q = torch.tensor([[0.5, 0.5, 0.0]])
    for seed in range(30):
        out = verify(p, torch.tensor([2]), q, generator=gen(seed))
        assert out.numel() == 1  # rejected at position 0
        assert out.tolist() == [2]  # residual max(0, p - q) is one-hot at 2


def test_p_zero_is_never_accepted_and_residual_excludes_draft():
    p = torch.tensor([[0.0, 0.6, 0.4], [1.0, 0.0, 0.0]])
    for q in (torch.tensor([[1.0, 0.0, 0.0]]), None):
        for seed in range(30):
            out = verify(p, torch.tensor([0]), q, generator=gen(seed))
            assert out.numel() == 1 and int(out[0]) in (1, 2)


def test_deterministic_draft_rejected_token_is_removed_from_residual():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    outs = [verify(p, torch.tensor([0]), generator=gen(s)).tolist() for s in range(200)]
    assert all(o in ([0, 2], [1]) for o in outs)  # accept -> bonus 2; reject -> residual is one-hot at 1
    assert {tuple(o) for o in outs} == {(0, 2), (1,)}


def test_greedy_rows_accept_iff_draft_is_argmax():
    p = torch.eye(4)[[2, 1, 3, 0]]  # one-hot rows: greedy target
    assert verify(p, torch.tensor([2, 1, 3])).tolist() == [2, 1, 3, 0]
    assert verify(p, torch.tensor([2, 0, 3])).tolist() == [2, 1]
    assert verify(p, torch.tensor([1, 1, 3])).tolist() == [2]


def test_accepts_any_integer_dtype_and_float64():
    p, d, q = case(3, 5)
    for seed in range(20):
        a = verify(p, d, q, generator=gen(seed))
        assert torch.equal(a, verify(p, d.to(torch.int32), q, generator=gen(seed)))
        # float64 rows draw float64 coins (a different stream), so only the contract is checked
        b = verify(p.double(), d.to(torch.int16), q.double(), generator=gen(seed))
        assert b.dtype == torch.long and torch.equal(b[:-1], d[: b.numel() - 1])


# ---------------------------------------------------------------- errors


def _err(match, target_probs, draft_tokens, draft_probs=None):
    with pytest.raises(ValueError, match=match):
        verify(target_probs, draft_tokens, draft_probs)


def test_error_shape_mismatch_rows():
    p, d, q = case(3, 0)
    _err("k\\+1 = 4 rows, got 3", p[:3], d, q)
    _err("k\\+1 = 3 rows", p, d[:2], q[:2])


def test_error_draft_probs_rows():
    p, d, q = case(3, 0)
    _err("shape mismatch: draft_probs", p, d, q[:2])


def test_error_dimensions():
    p, d, q = case(2, 0)
    _err("target_probs must have 2 dimensions", p[0], d, q)
    _err("draft_tokens must have 1 dimension", p, d[None], q)
    _err("draft_probs must have 2 dimensions", p, d, q[None])
    _err("integer tensor", p, d.float(), q)


def test_error_empty_vocab():
    _err("empty vocabulary", torch.zeros((1, 0)), torch.empty(0, dtype=torch.long))


def test_error_nan_and_negative():
    p, d, q = case(2, 0)
    bad = p.clone()
    bad[1, 2] = math.nan
    _err("target_probs contains NaN", bad, d, q)
    bad = q.clone()
    bad[0, 0] = -0.1
    bad[0, 1] += 0.1
    _err("draft_probs contains negative", p, d, bad)


def test_error_rows_not_summing_to_one():
    p, d, q = case(2, 0)
    _err("target_probs rows must sum to 1", p * 0.9, d, q)
    _err("draft_probs rows must sum to 1", p, d, q + 0.01)
    _err("target_probs rows must sum to 1", torch.randn(3, V).exp(), d, q)  # unnormalised weights
    inf = p.clone()
    inf[0, 0] = math.inf
    _err("target_probs rows must sum to 1", inf, d, q)
    # within tolerance is fine
    ok = p.clone()
    ok[0, 0] += ROW_SUM_ATOL / 2
    verify(ok, d, q)


def test_error_draft_token_out_of_range():
    p, d, q = case(2, 0)
    _err("draft token 6 is out of range for a vocabulary of size 6", p, torch.tensor([0, 6]), q)
    _err("draft token -1 is out of range", p, torch.tensor([-1, 0]), None)


def test_error_draft_of_a_different_vocabulary():
    p, d, q = case(2, 0)
    _err("draft vocabulary size 7 differs from the target's 6", p, d, rows(2, 7, seed=1))


def test_error_not_tensors():
    with pytest.raises(ValueError, match="target_probs must be a torch.Tensor"):
        verify([[1.0]], torch.empty(0, dtype=torch.long))  # type: ignore[arg-type]


# ---------------------------------------------------------------- determinism and reference


@pytest.mark.parametrize("deterministic", [False, True])
def test_seeded_generator_is_bit_identical(deterministic):
    for seed in range(30):
        p, d, q = case(4, seed, deterministic=deterministic)
        a = verify(p, d, q, generator=gen(seed))
        b = verify(p, d, q, generator=gen(seed))
        assert torch.equal(a, b)
    # and the seed matters: across seeds the outputs are not all the same
    p, d, q = case(4, 1, deterministic=deterministic)
    assert len({tuple(verify(p, d, q, generator=gen(s)).tolist()) for s in range(60)}) > 1


@pytest.mark.parametrize("k", [0, 1, 2, 5])
@pytest.mark.parametrize("sparsity", [0.0, 0.5])
@pytest.mark.parametrize("deterministic", [False, True])
def test_equal_to_reference_loop(k, sparsity, deterministic):
    lengths = set()
    for seed in range(30):
        p, d, q = case(k, seed, sparsity=sparsity, deterministic=deterministic)
        fast = verify(p, d, q, generator=gen(seed))
        slow = verify_reference(p, d, q, generator=gen(seed))
        assert torch.equal(fast, slow), (seed, fast, slow)
        lengths.add(fast.numel())
    if k:
        assert len(lengths) > 1  # the cases exercise both rejections and full acceptance


def test_batch_of_one_consumes_randomness_like_verify():
    for seed in range(20):
        p, d, q = case(3, seed)
        tokens, n = verify_batch(p[None], d[None], q[None], generator=gen(seed))
        assert torch.equal(tokens[0, : int(n[0])], verify(p, d, q, generator=gen(seed)))
        assert (tokens[0, int(n[0]) :] == -1).all()


def test_batch_rows_match_reference_semantics():
    # Mixed batch: row b only depends on its own inputs (checked on forced outcomes).
    p = torch.stack([torch.eye(3)[[0, 1, 2]], torch.eye(3)[[1, 1, 2]]])  # [2, 3, 3]
    d = torch.tensor([[0, 1], [0, 1]])
    tokens, n = verify_batch(p, d, generator=gen(0))
    assert tokens.tolist() == [[0, 1, 2], [1, -1, -1]] and n.tolist() == [3, 1]


def test_batch_validation_names_batch_mismatch():
    p, d, q = case(2, 0)
    with pytest.raises(ValueError, match="batch size"):
        verify_batch(p[None].expand(2, -1, -1), d[None], q[None].expand(2, -1, -1))


# ---------------------------------------------------------------- relaxed mode (lossy, opt-in)


@pytest.mark.parametrize("deterministic", [False, True])
def test_relaxed_with_thresholds_one_reproduces_strict(deterministic):
    for seed in range(30):
        p, d, q = case(4, seed, sparsity=0.3, deterministic=deterministic)
        strict = verify(p, d, q, generator=gen(seed))
        result = verify_relaxed(p, d, q, generator=gen(seed))
        assert result.lossless is False
        assert torch.equal(result.tokens, strict)
        assert torch.equal(RelaxedVerifier(1.0, 1.0)(p, d, q, generator=gen(seed)), strict)


def test_relaxed_single_threshold_accepts_confident_target_outright():
    # p(d) = 0.6 for every draft; strict acceptance of a one-hot draft is a 0.6 coin.
    p = torch.tensor([[0.6, 0.4], [0.4, 0.6], [0.5, 0.5]])
    d = torch.tensor([0, 1])
    for seed in range(20):
        out = verify_relaxed(p, d, threshold_single=0.55, generator=gen(seed))
        assert out.tokens[:2].tolist() == [0, 1] and out.lossless is False
    strict_lengths = {verify(p, d, generator=gen(s)).numel() for s in range(40)}
    assert strict_lengths != {3}


def test_relaxed_acc_threshold_raises_acceptance():
    p = torch.tensor([[0.3, 0.7], [0.5, 0.5]])
    d = torch.tensor([0])
    strict = sum(verify(p, d, generator=gen(s)).numel() == 2 for s in range(800))
    relaxed = sum(verify_relaxed(p, d, threshold_acc=0.5, generator=gen(s)).tokens.numel() == 2 for s in range(800))
    # strict accepts with probability 0.3 (240 +- 13), relaxed with min(1, 0.3 / 0.5) = 0.6 (480 +- 14)
    assert 180 < strict < 300 and 410 < relaxed < 550


@pytest.mark.parametrize("kw", [{"threshold_single": 0.0}, {"threshold_acc": 1.5}, {"threshold_acc": True}])
def test_relaxed_threshold_validation(kw):
    p, d, q = case(1, 0)
    with pytest.raises(ValueError, match="threshold"):
        verify_relaxed(p, d, q, **kw)
    with pytest.raises(ValueError, match="threshold"):
        RelaxedVerifier(**kw)


def test_relaxed_validates_like_verify():
    p, d, q = case(2, 0)
    with pytest.raises(ValueError, match="draft vocabulary size"):
        verify_relaxed(p, d, rows(2, 7, seed=1))
    assert RelaxedVerifier.lossless is False


def _no_draft_rows(seed: int, vocab: int = 50) -> torch.Tensor:
    g = torch.Generator().manual_seed(10_000 + seed)
    return torch.softmax(torch.randn(1, vocab, generator=g) * 2, dim=-1)  # [1, V]


def test_a_round_without_drafts_draws_as_the_batched_algorithm_does():
    """verify's k = 0 shortcut returns the token _decide would, consuming the generator alike
    (the next draw after it agrees too)."""
    empty = torch.empty(0, dtype=torch.long)
    for seed in range(200):
        p = _no_draft_rows(seed)
        g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        fast = verify(p, empty, generator=g1)
        tokens, n = verify_batch(p.unsqueeze(0), empty.unsqueeze(0), generator=g2)
        assert fast.tolist() == tokens[0, :1].tolist() and int(n[0]) == 1
        assert torch.rand(1, generator=g1).item() == torch.rand(1, generator=g2).item()


def test_negative_control_another_categorical_draw_is_caught():
    empty = torch.empty(0, dtype=torch.long)
    differ = 0
    for seed in range(200):
        p = _no_draft_rows(seed)
        g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        other = torch.multinomial(p[0], 1, generator=g1)  # a correct draw from p, but not verify's
        tokens, _ = verify_batch(p.unsqueeze(0), empty.unsqueeze(0), generator=g2)
        differ += other.tolist() != tokens[0, :1].tolist()
    assert differ > 0
