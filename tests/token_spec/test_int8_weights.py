"""Int8 draft weights: the GEMM computes with the stated dequantised weight, and the
int8 draft stays a good draft (its numerics never reach the output)."""

from __future__ import annotations

import pytest
import torch

from token_spec.int8_weights import Int8Linear


def test_codes_and_scales_reconstruct_each_row_within_half_a_step():
    w = torch.randn(64, 96, generator=torch.Generator().manual_seed(0)) * torch.linspace(0.01, 3, 64)[:, None]
    lin = Int8Linear(w)
    assert lin.codes.dtype == torch.int8 and lin.codes.abs().max() <= 127
    deq = lin.dequantized()
    step = lin.scales.float()[:, None]
    # |w - s q| <= s/2 for the exact scale; s is rounded to bf16 (relative 2^-8), which can
    # move a code of magnitude <= 127 by up to 127 * 2^-8 steps more
    assert ((w - deq).abs() <= step * (0.5 + 127 * 2**-8)).all()


def test_the_gemm_is_x_times_the_dequantised_weight():
    gen = torch.Generator().manual_seed(1)
    lin = Int8Linear(torch.randn(48, 64, generator=gen))
    x = torch.randn(5, 64, generator=gen).to(torch.bfloat16)
    expected = x.float() @ lin.dequantized().t()
    torch.testing.assert_close(lin(x).float(), expected, rtol=2e-2, atol=2e-2)


def test_a_zero_row_stays_zero_and_bad_shapes_are_refused():
    w = torch.zeros(4, 32)
    w[1] = 1.0
    lin = Int8Linear(w)
    assert torch.equal(lin.dequantized()[0], torch.zeros(32))  # no division by a zero scale
    assert torch.equal(lin.codes[1], torch.full((32,), 127, dtype=torch.int8))
    torch.testing.assert_close(lin.dequantized()[1], torch.ones(32), rtol=2**-8, atol=0)  # bf16 scale
    with pytest.raises(ValueError, match="2-D"):
        Int8Linear(torch.zeros(3))


@pytest.mark.model
def test_int8_draft_agrees_with_the_bf16_draft_and_refuses_fp32(fast_target):
    from token_spec.draft_model import DraftWeightsMissing, fast_draft, load_draft

    if fast_target.dtype != torch.bfloat16:
        pytest.skip("int8 draft weights run with bf16 activations; this CPU has no native bf16")
    try:
        draft = load_draft(fast_target.model)
    except DraftWeightsMissing as exc:
        pytest.skip(f"distilled draft weights not built yet: {exc}")
    q8, bf = fast_draft(draft, torch.bfloat16), fast_draft(draft, torch.bfloat16, weights="float")
    ids = fast_target.encode("def mean(values):\n    total = 0\n    for v in values:\n        total += v\n"
                             "    return total / len(values)\n\n\ndef variance(values):\n")
    a, b = q8.start(ids[:1]).extend(ids[1:]), bf.start(ids[:1]).extend(ids[1:])  # [n, V] each
    agree = (a.argmax(-1) == b.argmax(-1)).float().mean().item()
    assert agree >= 0.8, f"int8 draft's argmax agrees with the bf16 draft on only {agree:.0%} of positions"
    with pytest.raises(ValueError, match="bf16"):
        fast_draft(draft, torch.float32, weights="int8")
    with pytest.raises(ValueError, match="weights must be"):
        fast_draft(draft, torch.bfloat16, weights="int4")
