"""The fast path is batch-invariant: a k+1-token pass gives one-token logits bit for bit.

Greedy speculative decoding emits vanilla greedy's tokens only if the verify pass
(pending + k drafts, one forward) scores every position exactly as a vanilla step
(one token, one forward) does. At bf16 the CPU's kernels round differently by batch
shape, so this is a property of the kernels, tested here bitwise:

* every width 1..16, at several KV lengths (including passes that straddle a key
  block boundary of the attention), after rollbacks over stale cache entries;
* a negative control: the same forward without padding (``exact=False``) differs,
  so the test can see the violation it guards against;
* the engine never asks for a pass wider than the exact range.
"""

from __future__ import annotations

import pytest
import torch

from token_spec.fast_forward import KEY_BLOCK, PAD_WIDTH, FastLlama, default_dtype, supports_bf16

pytestmark = pytest.mark.model

PROMPT = "```repl\nchunks = context.split('\\n\\n')\nanswers = []\nfor chunk in chunks:\n"


def _continuation(n: int, seed: int = 0) -> list[int]:
    """Pseudo-random token ids: no greedy path, so every row's logits are a fresh case."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(100, 40000, (n,), generator=gen).tolist()


def _one_token_rows(session, tokens: list[int]) -> torch.Tensor:
    """Vanilla decoding's logits: one one-token pass per position."""
    return torch.cat([session.extend(torch.tensor([t])) for t in tokens])


def _mismatches(lm: FastLlama, prompt: list[int], tokens: list[int], offsets, widths) -> list[tuple[int, int]]:
    """(offset, width) pairs whose pass rows differ from the one-token rows at any bit."""
    s = lm.session()
    s.prefill(prompt)
    base = s.length
    ref = _one_token_rows(s, tokens)  # [len(tokens), V]
    bad = []
    for off in offsets:
        for w in widths:
            # Roll back over whatever earlier passes left in the cache (stale drafts),
            # then re-enter the accepted prefix as vanilla would have built it.
            s.truncate(min(s.length, base + off))
            while s.length < base + off:  # accepted tokens re-enter the cache one at a time
                s.extend(torch.tensor([tokens[s.length - base]]))
            rows = s.extend(torch.tensor(tokens[off : off + w]))
            if not torch.equal(rows, ref[off : off + w]):
                bad.append((off, w))
    return bad


@pytest.fixture(scope="module")
def prompt_ids(fast_target):
    ids = fast_target.encode(PROMPT)
    assert len(ids) < KEY_BLOCK  # so the offsets below straddle the first key block boundary
    return ids


def test_default_target_is_the_exact_fast_path(fast_target):
    assert fast_target.fast is not None
    assert fast_target.dtype == default_dtype()
    assert fast_target.dtype == (torch.bfloat16 if supports_bf16() else torch.float32)
    assert fast_target.exact and fast_target.max_verify_tokens == PAD_WIDTH


def test_hf_forward_does_not_claim_exactness(target):
    assert target.fast is None and not target.exact and target.max_verify_tokens is None


def test_every_width_gives_the_one_token_logits_bitwise(fast_target, prompt_ids):
    tokens = _continuation(KEY_BLOCK + 2 * PAD_WIDTH)
    # KV lengths: right after the prompt, a few in, and passes crossing position KEY_BLOCK.
    offsets = (0, 5, KEY_BLOCK - len(prompt_ids) - 8, KEY_BLOCK - len(prompt_ids) + 3)
    bad = _mismatches(fast_target.fast, prompt_ids, tokens, offsets, range(1, PAD_WIDTH + 1))
    assert not bad, f"(offset, width) passes that differ from one-token logits: {bad}"


def test_rollback_then_reextend_is_bitwise_vanilla(fast_target, prompt_ids):
    tokens = _continuation(12, seed=1)
    s = fast_target.start(prompt_ids)
    ref = _one_token_rows(s, tokens)
    s.truncate(len(prompt_ids))
    s.extend(torch.tensor(tokens[:3] + _continuation(9, seed=2)))  # accept 3 drafts, reject 9
    s.truncate(len(prompt_ids) + 3)
    assert torch.equal(s.extend(torch.tensor(tokens[3:10])), ref[3:10])


def test_unpadded_forward_is_caught_differing(fast_target, prompt_ids):
    """Negative control: the same forward at each pass's own width, on BLAS's GEMMs, is not
    batch-invariant on this CPU, and the bitwise comparison above sees it. (In bf16 the
    compiled GEMM the forward runs by default is row-invariant from one row, so it needs
    no padding at all: the control takes the kernel that does.)"""
    unpadded = FastLlama(fast_target.model, fast_target.dtype, exact=False, dense_kernel="blas")
    assert unpadded.gemm_width() == 1
    tokens = _continuation(KEY_BLOCK + 2 * PAD_WIDTH)
    bad = _mismatches(unpadded, prompt_ids, tokens, (0, 5), range(1, PAD_WIDTH + 1))
    assert bad, "the unpadded forward matched bit for bit: the invariance test would not catch a violation"


def test_full_padding_is_batch_invariant_too(fast_target, prompt_ids):
    full = FastLlama(fast_target.model, fast_target.dtype, pad_mode="full")
    assert full.gemm_width() == PAD_WIDTH
    bad = _mismatches(full, prompt_ids, _continuation(24, seed=3), (0, 3), (1, 2, 7, 16))
    assert not bad


def test_padded_attention_is_batch_invariant_too(fast_target, prompt_ids):
    padded = FastLlama(fast_target.model, fast_target.dtype, pad_attention=True)
    assert padded.attention_padded()
    bad = _mismatches(padded, prompt_ids, _continuation(24, seed=6), (0, 3), (1, 2, 7, 16))
    assert not bad


def _width_dependent_attend(qg, keys, vals, mask, scale):
    """A kernel whose reduction order changes with the row count (as a BLAS may): narrow
    calls sum the scores in fp32 before rounding, wide calls round first."""
    if qg.shape[1] < 8:
        qg = qg.float()
        keys, vals, mask = keys.float(), vals.float(), mask.float()
    scores = torch.baddbmm(mask, qg, keys, alpha=scale)  # keys transposed: [kv, hd, T]
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(qg.dtype)
    return torch.bmm(probs, vals).to(keys.dtype if qg.shape[1] >= 8 else torch.bfloat16)


def test_attention_probe_ignores_widths_below_the_fewest_rows_a_pass_has():
    from token_spec.fast_forward import attend, attention_row_invariant

    def odd_at_one_row(qg, keys, vals, mask, scale):  # a kernel whose 1-row path differs
        out = attend(qg, keys, vals, mask, scale)
        return out + 1 if qg.shape[1] == 3 else out  # 3 = group * 1 row

    args = (torch.bfloat16, 3, 3, 64, 0.125)
    assert attention_row_invariant(*args, attend_fn=odd_at_one_row) is False  # a 1-row pass would differ
    assert attention_row_invariant(*args, attend_fn=odd_at_one_row, min_width=2) is True


def test_attention_probe_catches_a_width_dependent_kernel_and_passes_a_row_wise_one():
    from token_spec.fast_forward import attend, attention_row_invariant

    args = (torch.bfloat16, 3, 3, 64, 0.125)
    assert attention_row_invariant(*args, attend_fn=_width_dependent_attend) is False  # negative control

    def row_by_row(qg, keys, vals, mask, scale):  # one row per call: invariant by construction
        return torch.cat([attend(qg[:, i : i + 1], keys, vals, mask[:, i : i + 1], scale)
                          for i in range(qg.shape[1])], dim=1)

    assert attention_row_invariant(*args, attend_fn=row_by_row) is True


def test_the_forward_pads_attention_exactly_when_the_probe_says_so(fast_target, prompt_ids, monkeypatch):
    import token_spec.fast_forward as ff

    calls = []

    def probe(*a, **k):
        calls.append(a)
        return False  # as on a CPU whose batched matmuls change kernel by row count

    monkeypatch.setattr(ff, "attention_row_invariant", probe)
    lm = FastLlama(fast_target.model, fast_target.dtype)
    assert lm.attention_padded() and lm.attention_padded() and len(calls) == 1  # probed once per thread count
    assert not _mismatches(lm, prompt_ids, _continuation(20, seed=7), (1,), (1, 5, 16))
    assert not FastLlama(fast_target.model, fast_target.dtype, exact=False).attention_padded()
    with pytest.raises(ValueError, match="pad_attention"):
        FastLlama(fast_target.model, fast_target.dtype, pad_attention="always")


def test_two_threads_are_batch_invariant(fast_target, prompt_ids):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        bad = _mismatches(fast_target.fast, prompt_ids, _continuation(24, seed=4), (2,), range(1, PAD_WIDTH + 1))
    finally:
        torch.set_num_threads(before)
    assert not bad


def test_engine_never_verifies_wider_than_the_exact_range(fast_target):
    from token_spec.drafters import Draft
    from token_spec.engine import SpeculativeDecoder
    from token_spec.gamma import FixedGamma
    from token_spec.sampling import SamplingParams

    class Greedy20:
        """Always proposes 20 tokens (more than the exact range allows)."""

        name = "twenty"

        def begin(self, prompt_ids):
            pass

        def propose(self, context, k, params, generator):
            return Draft(tokens=torch.full((k,), 11, dtype=torch.long))

        def end(self, output_ids):
            pass

    dec = SpeculativeDecoder(fast_target, Greedy20(), gamma_policy=FixedGamma(20))
    g = dec.generate("def f(x):\n", SamplingParams(temperature=0, max_tokens=40))
    m = g.metrics
    assert m.num_drafts > 0 and m.num_draft_tokens <= m.num_drafts * (PAD_WIDTH - 1)
    assert m.num_draft_tokens >= PAD_WIDTH - 1  # the first round asked for 20 and was cut to 15


def test_bad_arguments_raise_clear_errors(fast_target):
    s = fast_target.start([1, 2, 3])
    with pytest.raises(ValueError, match="at least one"):
        s.extend(torch.tensor([], dtype=torch.long))
    with pytest.raises(ValueError, match="out of range"):
        s.extend(torch.tensor([fast_target.vocab_size]))
    with pytest.raises(ValueError, match="truncate"):
        s.truncate(4)
    with pytest.raises(ValueError, match="dtype"):
        FastLlama(fast_target.model, torch.float16)


# ------------------------------------------------------------------ Q4_1 weights (int4 GEMM)


def test_q4_weights_are_the_ggufs_blocks(q4_target, target):
    """The int4 GEMM computes with d*q + m per 32-input block (d, m rounded to bf16)."""
    qkv = q4_target.fast.layers[3][1]
    ref = torch.cat([target.model.model.layers[3].self_attn.q_proj.weight,
                     target.model.model.layers[3].self_attn.k_proj.weight,
                     target.model.model.layers[3].self_attn.v_proj.weight]).detach().float()
    got = qkv.dequantized()
    assert got.shape == ref.shape
    # bf16 block constants: relative error of a few 2^-8 of the block's scale, never a wrong row
    assert float((got - ref).abs().max()) < 0.02 * float(ref.abs().max())
    assert float((got - ref).abs().mean()) < 1e-3


def test_q4_path_is_batch_invariant(q4_target, prompt_ids):
    assert q4_target.exact
    tokens = _continuation(KEY_BLOCK, seed=5)
    offsets = (0, KEY_BLOCK - len(prompt_ids) - 5)
    bad = _mismatches(q4_target.fast, prompt_ids, tokens, offsets, range(1, PAD_WIDTH + 1))
    assert not bad


# ------------------------------------------------------------------ fp32


@pytest.mark.parametrize("kernel", ["auto", "blas"])
def test_fp32_fast_path_is_batch_invariant_with_either_gemm_kernel(target, prompt_ids, kernel):
    from token_spec.fast_forward import Dense

    lm = FastLlama(target.model, torch.float32)  # the HF fixture's fp32 weights
    if kernel == "blas":  # MKL's GEMM instead of oneDNN's inner product: probed to its own width
        lm.layers = [(a, Dense(b.weight, torch.float32, "blas"), Dense(c.weight, torch.float32, "blas"), d,
                      Dense(e.weight, torch.float32, "blas"), Dense(f.weight, torch.float32, "blas"))
                     for (a, b, c, d, e, f) in lm.layers]
        lm._head = Dense(lm.lm_head, torch.float32, "blas")
    assert lm.gemm_width() <= PAD_WIDTH
    bad = _mismatches(lm, prompt_ids, _continuation(24, seed=8), (0, 4), range(1, PAD_WIDTH + 1))
    assert not bad


def test_a_bad_gemm_kernel_name_is_refused():
    from token_spec.fast_forward import Dense

    with pytest.raises(ValueError, match="kernel"):
        Dense(torch.zeros(2, 2), torch.float32, "cublas")


def test_fp32_unpadded_forward_is_caught_differing(target, prompt_ids):
    """Negative control for the fp32 test above: without padding, fp32 passes differ by width."""
    unpadded = FastLlama(target.model, torch.float32, exact=False)
    bad = _mismatches(unpadded, prompt_ids, _continuation(24, seed=8), (0, 4), range(1, PAD_WIDTH + 1))
    assert bad, "the unpadded fp32 forward matched bit for bit: the fp32 test would not catch a violation"
