"""The compiled bf16 GEMM (``native_layers``' ``bf16_mm``), its packing (``pack_bf16``)
and the ``Dense`` kernel that runs it.

Pinned here:

* it computes ``x @ W.T``: on unit vectors it returns each weight bit for bit, and on
  random rows it agrees with the fp32 product within bf16 rounding; negative control: a
  weight packed with two tiles swapped is caught by the same comparison;
* every row is computed alone: a call over 2..16 rows gives bit for bit the rows of
  one-row calls, at 1 and 2 threads (the forward's row-invariance probe finds width 1);
  negative control: a GEMM that switches to BLAS above 4 rows is caught;
* ``Dense`` picks it in bf16 where it is built, the shape fits and
  ``TOKEN_SPEC_BF16_KERNEL`` allows, for calls of up to ``PAD_WIDTH`` rows (BLAS above:
  a prefill), and each bad input gets one clear error.
"""

from __future__ import annotations

import pytest
import torch

from token_spec.exact_kernels import PAD_WIDTH, Dense, pack_bf16, row_invariant_width


def _weight(n: int, k: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, k, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


@pytest.mark.parametrize("shape", [(64, 32), (192, 576), (960, 576), (576, 1536)])
def test_unit_vectors_return_each_weight_bit_for_bit(bf16_mm, shape):
    w = _weight(*shape)
    eye = torch.eye(shape[1], dtype=torch.bfloat16)
    assert torch.equal(bf16_mm(eye, pack_bf16(w), shape[0]).t(), w)


def test_rows_agree_with_the_fp32_product(bf16_mm):
    w = _weight(960, 576, seed=1)
    x = torch.randn(12, 576, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    want = x.float() @ w.float().t()
    got = bf16_mm(x, pack_bf16(w), 960).float()
    # one bf16 rounding of each output (2^-8 relative) plus fp32 sums of exact products
    assert bool(((got - want).abs() <= want.abs() * 2.0**-8 + 1e-3).all())


def test_a_weight_packed_with_two_tiles_swapped_is_caught(bf16_mm):
    w = _weight(64, 64, seed=3)
    packed = pack_bf16(w)
    swapped = pack_bf16(torch.cat([w[16:32], w[:16], w[32:]]))  # tiles 0 and 1 exchanged
    eye = torch.eye(64, dtype=torch.bfloat16)
    assert torch.equal(bf16_mm(eye, packed, 64).t(), w)
    assert not torch.equal(bf16_mm(eye, swapped, 64).t(), w)


def test_every_row_is_the_row_computed_alone(bf16_mm, threads):
    w = pack_bf16(_weight(960, 576, seed=4))
    x = torch.randn(3 * PAD_WIDTH, 576, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    alone = torch.cat([bf16_mm(x[i : i + 1], w, 960) for i in range(x.shape[0])])
    for width in range(2, PAD_WIDTH + 1):
        for start in range(0, x.shape[0] - width + 1, width):
            assert torch.equal(bf16_mm(x[start : start + width], w, 960), alone[start : start + width]), width


class _BlasAbove4:
    """The tempting hybrid: the compiled GEMM up to 4 rows, BLAS above."""

    def __init__(self, dense: Dense) -> None:
        self.dense, self.in_features = dense, dense.in_features

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense(x) if x.shape[0] <= 4 else torch.nn.functional.linear(x, self.dense.weight)


def test_the_probe_finds_it_row_invariant_and_catches_a_kernel_switch(bf16_mm):
    dense = Dense(_weight(576, 576, seed=6), torch.bfloat16)
    assert dense.kernel == "native" and dense.native[0] == "bf16_mm"
    assert row_invariant_width(dense, PAD_WIDTH) == 1
    assert row_invariant_width(_BlasAbove4(dense), PAD_WIDTH) == 5


def test_dense_runs_it_up_to_pad_width_rows_and_blas_above(bf16_mm):
    w = _weight(192, 576, seed=9)
    dense = Dense(w, torch.bfloat16)
    x = torch.randn(PAD_WIDTH + 1, 576, generator=torch.Generator().manual_seed(10)).to(torch.bfloat16)
    assert torch.equal(dense(x[:PAD_WIDTH]), bf16_mm(x[:PAD_WIDTH], dense.packed, 192))
    assert torch.equal(dense(x), torch.nn.functional.linear(x, w))  # a prefill's width
    # the two kernels differ (sums in other orders): the comparison above tells them apart
    assert not torch.equal(bf16_mm(x, dense.packed, 192), torch.nn.functional.linear(x, w))


def test_dense_keeps_the_leading_dims_and_follows_the_environment(bf16_mm, monkeypatch):
    w = _weight(128, 64, seed=7)
    x = torch.randn(2, 3, 64, generator=torch.Generator().manual_seed(8)).to(torch.bfloat16)
    dense = Dense(w, torch.bfloat16)
    assert dense.kernel == "native"
    assert torch.equal(dense(x), bf16_mm(x.reshape(6, 64), dense.packed, 128).view(2, 3, 128))
    assert Dense(w, torch.float32).kernel in ("onednn", "blas")  # fp32 never runs it
    assert Dense(w[:32], torch.bfloat16).kernel == "blas"        # nor a shape it does not fit
    monkeypatch.setenv("TOKEN_SPEC_BF16_KERNEL", "blas")
    assert Dense(w, torch.bfloat16).kernel == "blas"
    monkeypatch.setenv("TOKEN_SPEC_BF16_KERNEL", "fastest")
    with pytest.raises(ValueError, match="TOKEN_SPEC_BF16_KERNEL must be auto, blas or native, got 'fastest'"):
        Dense(w, torch.bfloat16)


def test_bad_inputs_get_one_clear_error(bf16_mm):
    w = _weight(64, 64)
    with pytest.raises(ValueError, match=r"out % 64 == 0 and in % 32 == 0, got \[32, 64\]"):
        pack_bf16(w[:32])
    with pytest.raises(ValueError, match="kernel must be"):
        Dense(w, torch.bfloat16, kernel="fast")
    with pytest.raises(ValueError, match=r"needs a bf16 weight with out_features % 64 == 0"):
        Dense(w[:32], torch.bfloat16, kernel="native")
    with pytest.raises(ValueError, match="needs a bf16 weight"):
        Dense(w, torch.float32, kernel="native")
    packed = pack_bf16(w)
    with pytest.raises(RuntimeError, match="bf16_mm: packed weights do not match x's K"):
        bf16_mm(torch.ones(1, 32, dtype=torch.bfloat16), packed, 64)
    with pytest.raises(RuntimeError, match="bf16_mm: x must be bf16"):
        bf16_mm(torch.ones(1, 64), packed, 64)
