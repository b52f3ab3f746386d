"""The compiled nibble GEMM (``native_layers``' ``q4_mm``) and its packing (``pack_nibbles``).

Pinned here:

* it computes ``x @ W.T`` for ``W = scale * code + zero`` per 32-input group: on unit
  vectors it returns each weight rounded once to bf16, bit for bit, and on random rows
  it agrees with the fp32 product within bf16 rounding; negative control: codes packed
  with their nibbles swapped are caught by the same comparison;
* every row is computed alone: a call over 2..16 rows gives bit for bit the rows of
  one-row calls, at 1 and 2 threads (the forward's row-invariance probe finds width 1);
  negative control: a GEMM that switches to the dense kernel above 4 rows is caught;
* ``Q4Linear`` picks it where it is built and ``TOKEN_SPEC_Q4_KERNEL`` allows, and each
  bad input gets one clear error.
"""

from __future__ import annotations

import pytest
import torch

from token_spec.exact_kernels import PAD_WIDTH, row_invariant_width
from token_spec.q4_weights import GROUP, Q4Linear, pack_nibbles


def _weights(n: int, k: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (n, k), generator=gen)
    scale = (torch.rand(n, k // GROUP, generator=gen) * 0.01).half().float()
    zero = (-torch.rand(n, k // GROUP, generator=gen) * 0.08).half().float()
    return codes, scale, zero


def _dense(codes, scale, zero) -> torch.Tensor:
    n, k = codes.shape
    return (codes.float().view(n, -1, GROUP) * scale[..., None] + zero[..., None]).view(n, k)


@pytest.mark.parametrize("shape", [(64, 32), (192, 576), (960, 576), (576, 1536)])
def test_unit_vectors_return_each_weight_rounded_once_to_bf16(q4_mm, shape):
    codes, scale, zero = _weights(*shape)
    packed, sz = pack_nibbles(codes, scale, zero)
    eye = torch.eye(shape[1], dtype=torch.bfloat16)
    got = q4_mm(eye, packed, sz, shape[0]).t()  # [n, k]
    assert torch.equal(got, _dense(codes, scale, zero).to(torch.bfloat16))


def test_rows_agree_with_the_fp32_product(q4_mm):
    codes, scale, zero = _weights(960, 576, seed=1)
    packed, sz = pack_nibbles(codes, scale, zero)
    x = torch.randn(12, 576, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    want = x.float() @ _dense(codes, scale, zero).t()
    got = q4_mm(x, packed, sz, 960).float()
    # one bf16 rounding of each output (2^-8 relative) plus fp32 sums
    assert bool(((got - want).abs() <= want.abs() * 2.0**-8 + 1e-4).all())


def test_swapped_nibbles_are_caught(q4_mm):
    codes, scale, zero = _weights(192, 64, seed=3)
    packed, sz = pack_nibbles(codes, scale, zero)
    swapped = (packed >> 4) | ((packed & 15) << 4)
    eye = torch.eye(64, dtype=torch.bfloat16)
    want = _dense(codes, scale, zero).to(torch.bfloat16)
    assert torch.equal(q4_mm(eye, packed, sz, 192).t(), want)
    assert not torch.equal(q4_mm(eye, swapped.to(torch.uint8), sz, 192).t(), want)


def test_every_row_is_the_row_computed_alone(q4_mm, threads):
    codes, scale, zero = _weights(960, 576, seed=4)
    packed, sz = pack_nibbles(codes, scale, zero)
    x = torch.randn(3 * PAD_WIDTH, 576, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    alone = torch.cat([q4_mm(x[i : i + 1], packed, sz, 960) for i in range(x.shape[0])])
    for width in range(2, PAD_WIDTH + 1):
        for start in range(0, x.shape[0] - width + 1, width):
            assert torch.equal(q4_mm(x[start : start + width], packed, sz, 960), alone[start : start + width]), width


class _DenseAbove4:
    """The tempting hybrid: the nibble GEMM up to 4 rows, the dense bf16 GEMM above."""

    def __init__(self, linear: Q4Linear, weight: torch.Tensor) -> None:
        self.linear, self.weight, self.in_features = linear, weight, linear.in_features

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) if x.shape[0] <= 4 else torch.nn.functional.linear(x, self.weight)


def test_the_probe_finds_it_row_invariant_and_catches_a_kernel_switch(q4_mm):
    codes, scale, zero = _weights(576, 576, seed=6)
    linear = Q4Linear(codes, scale, zero, kernel="native")
    assert linear.kernel == "native"
    assert row_invariant_width(linear, PAD_WIDTH) == 1
    hybrid = _DenseAbove4(linear, _dense(codes, scale, zero).to(torch.bfloat16))
    assert row_invariant_width(hybrid, PAD_WIDTH) == 5


def test_q4linear_follows_the_environment(q4_mm, monkeypatch):
    codes, scale, zero = _weights(64, 64, seed=7)
    assert Q4Linear(codes, scale, zero).kernel == "native"
    monkeypatch.setenv("TOKEN_SPEC_Q4_KERNEL", "aten")
    assert Q4Linear(codes, scale, zero).kernel == "aten"
    monkeypatch.setenv("TOKEN_SPEC_Q4_KERNEL", "fastest")
    with pytest.raises(ValueError, match="TOKEN_SPEC_Q4_KERNEL must be auto, aten or native, got 'fastest'"):
        Q4Linear(codes, scale, zero)


def test_it_is_closer_to_the_gguf_weights_than_torchs_kernel(q4_mm):
    """torch's kernel rounds the block constants (d, m + 8 d) to bf16; the nibble GEMM
    keeps them in fp16, as the GGUF stores them."""
    codes, scale, zero = _weights(192, 576, seed=8)
    x = torch.randn(8, 576, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    want = x.float() @ _dense(codes, scale, zero).t()
    err = {k: (Q4Linear(codes, scale, zero, kernel=k)(x).float() - want).abs() for k in ("native", "aten")}
    assert float(err["native"].mean()) < float(err["aten"].mean())
    assert float(err["aten"].max()) <= 2.0**-4 * float(want.abs().max())  # both compute the same weights


def test_bad_inputs_get_one_clear_error(q4_mm):
    codes, scale, zero = _weights(64, 64)
    with pytest.raises(ValueError, match=r"out % 64 == 0 and in % 32 == 0, got \[32, 64\]"):
        pack_nibbles(codes[:32], scale[:32], zero[:32])
    with pytest.raises(ValueError, match=r"codes must lie in \[0, 15\]"):
        pack_nibbles(codes + 1, scale, zero)
    with pytest.raises(ValueError, match="scale and zero must be"):
        pack_nibbles(codes, scale[:, :1], zero)
    with pytest.raises(ValueError, match="not exactly representable in fp16"):
        pack_nibbles(codes, scale + 1e-9, zero)
    with pytest.raises(ValueError, match="kernel must be"):
        Q4Linear(codes, scale, zero, kernel="fast")
    with pytest.raises(ValueError, match="out_features % 64 == 0, got 32"):
        Q4Linear(codes[:32], scale[:32], zero[:32], kernel="native")
    assert Q4Linear(codes[:32], scale[:32], zero[:32]).kernel == "aten"  # auto falls back
    packed, sz = pack_nibbles(codes, scale, zero)
    with pytest.raises(RuntimeError, match="packed weights do not match"):
        q4_mm(torch.zeros(2, 96, dtype=torch.bfloat16), packed, sz, 64)
    with pytest.raises(RuntimeError, match="x must be bf16"):
        q4_mm(torch.zeros(2, 64), packed, sz, 64)
    assert q4_mm(torch.zeros(0, 64, dtype=torch.bfloat16), packed, sz, 64).shape == (0, 64)
