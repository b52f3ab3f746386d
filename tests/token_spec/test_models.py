"""KV sessions over the real target: exact rollback and the extend() contract."""

from __future__ import annotations

import pytest
import torch

from token_spec.models import CausalLM, HFCausalLM, LMSession

pytestmark = pytest.mark.model

PROMPT = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407]
CONT = [1330, 28, 3511, 2, 198, 1, 4093, 198, 19556, 11]
WRONG = [44, 55, 66, 77, 88]


def test_target_is_a_causal_lm(target):
    assert isinstance(target, CausalLM)
    session = target.start(PROMPT)
    assert isinstance(session, LMSession)
    assert session.length == len(PROMPT)


def test_rollback_then_reextend_is_bitwise_equal_to_a_fresh_session(target):
    fresh = target.start(PROMPT)
    expected = fresh.extend(torch.tensor(CONT))  # [len(CONT), V]

    s = target.start(PROMPT)
    s.extend(torch.tensor(WRONG))  # a rejected draft
    assert s.length == len(PROMPT) + len(WRONG)
    s.truncate(len(PROMPT))
    assert s.length == len(PROMPT)
    got = s.extend(torch.tensor(CONT))
    assert torch.equal(got, expected)


def test_partial_rollback_keeps_the_accepted_prefix(target):
    # Verify [t, d1..d4], accept 2 -> keep t, d1, d2 and continue from there.
    fresh = target.start(PROMPT)
    fresh.extend(torch.tensor(CONT[:3]))
    expected = fresh.extend(torch.tensor(CONT[3:6]))

    s = target.start(PROMPT)
    s.extend(torch.tensor(CONT[:3] + WRONG[:2]))
    before = [(layer.keys.clone(), layer.values.clone()) for layer in s._cache.layers]
    keep = len(PROMPT) + 3
    s.truncate(keep)
    # Rollback is exact: every layer keeps exactly the first `keep` positions, bit for bit.
    for (k, v), layer in zip(before, s._cache.layers, strict=True):
        assert torch.equal(layer.keys, k[..., :keep, :]) and torch.equal(layer.values, v[..., :keep, :])
    got = s.extend(torch.tensor(CONT[3:6]))
    # The kept K/V of CONT[:3] were computed in a 5-wide forward, the fresh ones in a
    # 3-wide one: CPU kernels may round differently by shape, so equality is up to float
    # rounding here (the bitwise case, same shapes, is the test above).
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert torch.equal(got.argmax(-1), expected.argmax(-1))


def test_session_logits_match_a_full_forward_without_cache(target):
    s = target.start(PROMPT[:-1])
    rows = s.extend(torch.tensor(PROMPT[-1:] + CONT))  # row i predicts after (PROMPT + CONT)[len(PROMPT)-1+i]
    full = target.logits(PROMPT + CONT)[len(PROMPT) - 1 :]
    assert rows.shape == full.shape == (len(CONT) + 1, target.vocab_size)
    torch.testing.assert_close(rows, full, rtol=1e-4, atol=1e-4)
    assert torch.equal(rows.argmax(-1), full.argmax(-1))


def test_one_token_steps_match_one_wide_step(target):
    wide = target.start(PROMPT).extend(torch.tensor(CONT[:5]))
    s = target.start(PROMPT)
    narrow = torch.cat([s.extend(torch.tensor([t])) for t in CONT[:5]])
    torch.testing.assert_close(narrow, wide, rtol=1e-4, atol=1e-4)


def test_bad_arguments_raise(target):
    s = target.start(PROMPT)
    with pytest.raises(ValueError, match="truncate"):
        s.truncate(len(PROMPT) + 1)
    with pytest.raises(ValueError, match="truncate"):
        s.truncate(-1)
    with pytest.raises(ValueError, match="at least one"):
        s.extend(torch.tensor([], dtype=torch.long))
    with pytest.raises(ValueError, match="out of range"):
        s.extend(torch.tensor([target.vocab_size]))


def test_empty_prompt_session_starts_empty(target):
    s = target.start([])
    assert s.length == 0
    rows = s.extend(torch.tensor(PROMPT[:3]))
    assert rows.shape == (3, target.vocab_size)
    s.truncate(0)
    assert s.length == 0


def test_hf_wrapper_puts_model_in_eval_mode(target):
    target.model.train()
    lm = HFCausalLM(target.model)
    assert not target.model.training
    assert lm.vocab_size == target.vocab_size
