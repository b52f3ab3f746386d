"""warp() and SamplingParams: the one definition of the target distribution p."""

from __future__ import annotations

import math

import pytest
import torch

from token_spec.sampling import SamplingParams, sample, warp


def test_defaults_are_plain_sampling():
    params = SamplingParams()
    assert (params.temperature, params.top_k, params.top_p, params.stop, params.seed) == (1.0, 0, 1.0, (), None)
    assert not params.greedy
    assert SamplingParams(temperature=0).greedy


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": math.nan}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_k": -1}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stop": [""]}, "stop"),
        ({"stop": [1, 2]}, "stop"),
        ({"seed": 1.5}, "seed"),
    ],
)
def test_params_validation_names_the_field(kwargs, word):
    with pytest.raises(ValueError, match=word):
        SamplingParams(**kwargs)


def test_stop_string_is_wrapped_and_params_are_frozen():
    params = SamplingParams(stop="\n\n", seed=3)
    assert params.stop == ("\n\n",)
    with pytest.raises(AttributeError):
        params.temperature = 2.0  # type: ignore[misc]
    gen_a, gen_b = params.make_generator(), params.make_generator()
    assert torch.equal(torch.rand(4, generator=gen_a), torch.rand(4, generator=gen_b))
    assert SamplingParams().make_generator() is None


def test_warp_plain_is_softmax():
    logits = torch.tensor([[1.0, 2.0, 3.0, -1.0], [0.0, 0.0, 0.0, 0.0]])
    probs = warp(logits)
    assert torch.allclose(probs, torch.softmax(logits, dim=-1), atol=1e-6)
    assert torch.allclose(probs.sum(-1), torch.ones(2), atol=1e-6)


def test_warp_temperature_sharpens_and_flattens():
    logits = torch.tensor([1.0, 2.0, 4.0])
    cold, hot = warp(logits, temperature=0.5), warp(logits, temperature=2.0)
    assert torch.allclose(cold, torch.softmax(logits / 0.5, -1), atol=1e-6)
    assert cold[2] > torch.softmax(logits, -1)[2] > hot[2]


def test_temperature_zero_is_one_hot_argmax_first_of_ties():
    logits = torch.tensor([[0.5, 3.0, 3.0, 1.0], [9.0, -1.0, 2.0, 0.0]])
    probs = warp(logits, temperature=0.0, top_k=3, top_p=0.5)
    assert torch.equal(probs, torch.tensor([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]))


def test_top_k_keeps_k_largest_renormalised():
    logits = torch.tensor([0.0, 3.0, 1.0, 2.0, -5.0])
    probs = warp(logits, top_k=2)
    expected = torch.zeros(5)
    expected[[1, 3]] = torch.softmax(torch.tensor([3.0, 2.0]), -1)
    assert torch.allclose(probs, expected, atol=1e-6)
    assert torch.equal(warp(logits, top_k=10), warp(logits))  # k >= V is no filter


def test_top_p_keeps_smallest_prefix_reaching_p():
    probs_in = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs_in.log()
    # 0.5 < 0.7 so the second token is needed; 0.5 + 0.3 >= 0.7 so the third is not.
    out = warp(logits, top_p=0.7)
    assert torch.allclose(out, torch.tensor([0.625, 0.375, 0.0, 0.0]), atol=1e-6)
    # Exactly reaching p stops there.
    assert torch.allclose(warp(logits, top_p=0.8), torch.tensor([0.625, 0.375, 0.0, 0.0]), atol=1e-6)
    # Tiny p keeps only the most likely token.
    assert torch.equal(warp(logits, top_p=1e-6), torch.tensor([1.0, 0.0, 0.0, 0.0]))


def test_top_k_then_top_p_order():
    logits = torch.tensor([0.4, 0.3, 0.2, 0.1]).log()
    # top-k=3 renormalises to (4/9, 3/9, 2/9); top-p 0.7 then keeps 4/9 + 3/9 >= 0.7.
    out = warp(logits, top_k=3, top_p=0.7)
    assert torch.allclose(out, torch.tensor([4 / 7, 3 / 7, 0.0, 0.0]), atol=1e-6)


def test_warp_handles_minus_inf_and_low_precision():
    logits = torch.tensor([-math.inf, 0.0, 1.0], dtype=torch.bfloat16)
    probs = warp(logits)
    assert probs.dtype == torch.float32
    assert probs[0] == 0 and abs(float(probs.sum()) - 1) < 1e-6


@pytest.mark.parametrize(
    "logits, word",
    [
        (torch.tensor([0.0, math.nan]), "NaN"),
        (torch.tensor([0.0, math.inf]), r"\+inf"),
        (torch.tensor([-math.inf, -math.inf]), "entirely -inf"),
        (torch.zeros(0), "non-empty"),
        (torch.tensor([1, 2]), "floating"),
    ],
)
def test_warp_rejects_bad_logits(logits, word):
    with pytest.raises(ValueError, match=word):
        warp(logits)


def test_warp_rejects_bad_params():
    with pytest.raises(ValueError, match="top_p"):
        warp(torch.zeros(3), top_p=0.0)


def test_sample_is_seeded_and_respects_zeros():
    probs = torch.tensor([[0.0, 0.25, 0.75, 0.0]]).expand(4000, -1)
    a = sample(probs, torch.Generator().manual_seed(7))
    b = sample(probs, torch.Generator().manual_seed(7))
    assert a.shape == (4000,) and torch.equal(a, b)
    assert set(a.tolist()) == {1, 2}
    assert 0.70 < float((a == 2).double().mean()) < 0.80
