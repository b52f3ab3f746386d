"""The Q4_1 target's LM head runs the GGUF's own Q8_0 blocks, exactly, and row-invariantly.

``token_spec.q4_weights.Q8Head`` splits each int8 code as q = 16 hi + lo and runs both
4-bit halves in one int4 GEMM. Pinned here:

* the split reconstructs every int8 code and stays in the 4-bit ranges;
* the weight the GEMM computes with is the GGUF's ``d * q``, bit for bit: with the fp16
  ``d`` itself on the compiled nibble GEMM, with ``d`` rounded to bf16 on torch's int4
  kernel (read back through the kernel's fp32 variant on unit vectors); the bf16 head
  on unit vectors returns that weight rounded once to bf16, for every entry; both
  kernels are checked, the nibble GEMM where it is built;
* the Hugging Face fp32 embedding is the Q8_0 blocks dequantised, so the nibble GEMM's
  head is exactly it and torch's differs from it only by the bf16 rounding of the block
  scales;
* the head is row-invariant from the forward's probed width, and is part of the probe;
* negative controls: a wrong split (halves swapped), a block scale off by one bf16 step,
  a mismatched embedding, and a head that switches kernels by row count are all caught.
"""

from __future__ import annotations

import pytest
import torch

from token_spec.fast_forward import PAD_WIDTH, row_invariant_width
from token_spec.q4_weights import GROUP, Q8Head, load_q8_head, native_q4_mm, read_q8_0, split_int8

pytestmark = pytest.mark.model


@pytest.fixture(params=["aten", "native"])
def kernel(request):
    """Each 4-bit kernel the head can run on (the nibble GEMM where it is built)."""
    if request.param == "native" and native_q4_mm() is None:
        pytest.skip("the nibble GEMM is not built on this CPU (needs AVX512-BF16)")
    return request.param

# One unit vector per position inside a 32-input block, spread over the 18 blocks.
_COLUMNS = [((5 * j) % 18) * GROUP + j for j in range(GROUP)]


@pytest.fixture(scope="module")
def gguf():
    from token_spec.target import find_gguf

    return find_gguf()


@pytest.fixture(scope="module")
def q8_blocks(gguf):
    """(codes [V, H] int32, d [V, H/32] fp32) of the GGUF's token_embd.weight."""
    from gguf import GGUFReader

    tensor = next(t for t in GGUFReader(str(gguf)).tensors if t.name == "token_embd.weight")
    return read_q8_0(tensor)


def _blockwise(q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """w = d * q per 32-input block, in fp32 (exact: |q| < 2^8, d has at most 11 bits)."""
    return (q.float().view(q.shape[0], -1, GROUP) * d[..., None]).reshape(q.shape)


@pytest.fixture(scope="module")
def head_columns(q4_target):
    """The q4 target head's exact weight on ``_COLUMNS`` (a few seconds: computed once)."""
    return q4_target.fast._head.dequantized(_COLUMNS)


def _weight_mismatches(head: Q8Head, q: torch.Tensor, d: torch.Tensor, exact: torch.Tensor | None = None) -> int:
    """Entries where ``head``'s weight differs from ``d * q`` (``bf16(d) * q`` on torch's
    kernel): exactly on the
    ``_COLUMNS`` (fp32 read-back), and on every entry through the bf16 head on unit
    vectors, whose output is the exact weight rounded once to bf16. ``exact``: the
    head's ``dequantized(_COLUMNS)`` if already computed."""
    scale = d if head.kernel == "native" else d.to(torch.bfloat16).float()  # the scale each kernel runs with
    want = _blockwise(q, scale)
    exact = head.dequantized(_COLUMNS) if exact is None else exact
    bad = int((exact != want[:, _COLUMNS]).sum())
    eye = torch.eye(head.in_features, dtype=torch.bfloat16)
    rounded = head(eye).t()  # [V, H]: row k of the output is the weight's column k
    return bad + int((rounded != want.to(torch.bfloat16)).sum())


def test_split_int8_reconstructs_every_code():
    q = torch.arange(-128, 128, dtype=torch.int32)
    hi, lo = split_int8(q)
    assert torch.equal(16 * hi + lo, q)
    assert int(hi.min()) == -8 and int(hi.max()) == 7
    assert int(lo.min()) == 0 and int(lo.max()) == 15


def test_q4_target_runs_the_q8_head_inside_the_probe(q4_target):
    head = q4_target.fast._head
    assert isinstance(head, Q8Head)
    assert any(g is head for g in q4_target.fast._gemm_weights())
    assert (head.out_features, head.in_features) == (q4_target.vocab_size, q4_target.fast.hidden)


def test_head_computes_with_the_ggufs_q8_0_weights_exactly(q4_target, q8_blocks, head_columns):
    q, d = q8_blocks
    assert _weight_mismatches(q4_target.fast._head, q, d, head_columns) == 0


def test_hf_embedding_is_the_q8_0_blocks_and_the_head_differs_only_by_bf16_scales(q8_blocks, target, q4_target,
                                                                                  head_columns):
    q, d = q8_blocks
    emb = target.model.get_input_embeddings().weight.detach().float()
    assert torch.equal(emb, _blockwise(q, d))  # the fp32 weights everyone else uses
    got = head_columns
    ref = emb[:, _COLUMNS]
    if q4_target.fast._head.kernel == "native":  # the GGUF's fp16 scales, exactly
        assert torch.equal(got, ref)
        return
    # bf16 keeps 8 significant bits: |d - bf16(d)| <= 2^-8 |d|, so |w - w_hf| <= 2^-8 |d q|
    bound = _blockwise(q.abs(), d.abs() * 2.0**-8)[:, _COLUMNS]
    assert bool(((got - ref).abs() <= bound).all())
    assert not torch.equal(got, ref)  # the bf16 rounding of the scales is real, not hidden


def test_a_swapped_split_is_caught(q8_blocks, kernel):
    q, d = (t[:2048] for t in q8_blocks)
    hi, lo = split_int8(q)
    assert _weight_mismatches(Q8Head(hi, lo, d, kernel=kernel), q, d) == 0
    # halves swapped: still in range for the constructor, but 16 (lo - 8) + (hi + 8) != q
    assert _weight_mismatches(Q8Head(lo - 8, hi + 8, d, kernel=kernel), q, d) > 0


def test_one_block_scale_off_by_one_step_is_caught(q8_blocks, kernel):
    q, d = (t[:2048].clone() for t in q8_blocks)
    hi, lo = split_int8(q)
    wrong = d.clone()
    # the next value in the precision the kernel keeps: fp16 (the GGUF's own) or bf16
    precision = torch.float16 if kernel == "native" else torch.bfloat16
    step = torch.tensor(float("inf"), dtype=precision)
    wrong[7, 3] = float(torch.nextafter(d[7, 3].to(precision), step))
    assert int((q[7, 3 * GROUP : 4 * GROUP] != 0).sum()) > 0
    assert _weight_mismatches(Q8Head(hi, lo, wrong, kernel=kernel), q, d) > 0


def test_head_rejects_bad_inputs():
    hi = torch.zeros(4, 64, dtype=torch.int32)
    d = torch.ones(4, 2)
    with pytest.raises(ValueError, match=r"hi must lie in \[-8, 7\]"):
        Q8Head(hi + 8, hi, d)
    with pytest.raises(ValueError, match="lo in"):
        Q8Head(hi, hi - 1, d)
    with pytest.raises(ValueError, match="d must be"):
        Q8Head(hi, hi, torch.ones(4, 3))
    with pytest.raises(ValueError, match="one shape"):
        Q8Head(hi, hi[:, :32], d)


class _Model:
    """Just enough of a Hugging Face model for ``load_q8_head``: tied embeddings."""

    def __init__(self, weight: torch.Tensor, tied: bool = True) -> None:
        self.emb = torch.nn.Embedding.from_pretrained(weight)
        self.out = self.emb if tied else torch.nn.Embedding.from_pretrained(weight.clone())

    def get_input_embeddings(self):
        return self.emb

    def get_output_embeddings(self):
        return self.out


def test_loader_checks_the_embedding_against_the_gguf(gguf, q8_blocks):
    emb = _blockwise(*q8_blocks)
    off = emb.clone()
    off[123, 45] += 2.0**-10  # one entry that is not the GGUF's block value
    with pytest.raises(ValueError, match="does not dequantise"):
        load_q8_head(gguf, _Model(off))
    with pytest.raises(ValueError, match="tied"):
        load_q8_head(gguf, _Model(emb, tied=False))


def test_head_is_row_invariant_from_the_probed_width(q4_target, threads):
    head = q4_target.fast._head
    width = q4_target.fast.gemm_width()
    assert row_invariant_width(head, PAD_WIDTH, rows=32) <= width
    x = torch.randn(3 * PAD_WIDTH, head.in_features, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    for chunk in x.split(PAD_WIDTH):
        ref = head(chunk)
        for m in range(width, PAD_WIDTH):
            assert torch.equal(head(chunk[:m]), ref[:m]), m


class _DispatchByRows:
    """The tempting hybrid: the Q8_0 head for up to 4 rows (where the int4 kernel is
    faster), the bf16 GEMM above. Its rows depend on the call's width."""

    def __init__(self, head: Q8Head, weight: torch.Tensor) -> None:
        self.head, self.weight, self.in_features = head, weight, head.in_features

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x) if x.shape[0] <= 4 else torch.nn.functional.linear(x, self.weight)


def test_a_head_that_switches_kernels_by_row_count_is_caught_by_the_probe(q8_blocks):
    q, d = (t[:4096] for t in q8_blocks)
    head = Q8Head(*split_int8(q), d)
    assert row_invariant_width(head, PAD_WIDTH, rows=32) == 1
    hybrid = _DispatchByRows(head, _blockwise(q, d).to(torch.bfloat16))
    assert row_invariant_width(hybrid, PAD_WIDTH, rows=32) == 5


@pytest.mark.slow  # 2 threads on a shared 2-core machine: tens of seconds
def test_q4_forward_with_the_q8_head_is_batch_invariant_at_two_threads(q4_target):
    """Every width 1..16 gives the one-token logits bit for bit at 2 threads (the
    1-thread case is ``test_batch_invariance.test_q4_path_is_batch_invariant``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        tokens = torch.randint(100, 40000, (PAD_WIDTH,), generator=torch.Generator().manual_seed(3)).tolist()
        s = q4_target.fast.session()
        s.prefill(q4_target.encode("def add(a, b):\n    return"))
        base = s.length
        ref = torch.cat([s.extend(torch.tensor([t])) for t in tokens])
        bad = []
        for w in range(1, PAD_WIDTH + 1):
            s.truncate(base)
            if not torch.equal(s.extend(torch.tensor(tokens[:w])), ref[:w]):
                bad.append(w)
        assert not bad
    finally:
        torch.set_num_threads(before)
