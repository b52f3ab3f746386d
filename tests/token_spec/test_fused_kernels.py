"""The fused row kernels of the compiled layer loop (token_spec.native_layers), one by one.

Each kernel computes every row alone, so (a) a row computed alone is bitwise the same
row inside a call of 2..16 rows, at other offsets, and (for attention) with other cache
capacities and other values past the row's position; a kernel variant whose reduction
order depends on the number of rows is caught by the same comparison (the negative
control). (b) Each kernel agrees with the ATen ops it replaces within a small tolerance
(its reductions run in another order), and RoPE and the residual add, where the kernels
keep ATen's roundings, agree bitwise.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from token_spec.fast_forward import attend

HEADS, NKV, HD, H, INTER = 9, 3, 64, 576, 1536
QKV = (HEADS + 2 * NKV) * HD
EPS, SCALE = 1e-5, 0.125
DTYPES = [torch.bfloat16, torch.float32]


@pytest.fixture(scope="module")
def m(native_module):
    """The compiled kernels (conftest's ``native_module``), by the short name every
    kernel call below uses."""
    return native_module


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _rows_invariant(fn, x: torch.Tensor) -> bool:
    """fn maps rows [w, ...] to rows [w, ...]; True iff every row of every call over
    2..16 consecutive rows (at every offset that fits) is bitwise that row computed alone."""
    alone = [fn(x[i : i + 1]) for i in range(x.shape[0])]
    for w in range(2, x.shape[0] + 1):
        for lo in range(0, x.shape[0] - w + 1, 3):
            out = fn(x[lo : lo + w])
            if not all(torch.equal(out[i : i + 1], alone[lo + i]) for i in range(w)):
                return False
    return True


def _rms_row_count_dependent(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    # negative control: the sum of squares taken in chunks whose size depends on the row count
    chunk = 2 ** (x.shape[0] % 5)
    ss = x.float().pow(2).view(x.shape[0], -1, chunk).sum(-1).sum(-1, keepdim=True)
    return (x.float() * torch.rsqrt(ss / x.shape[1] + eps) * w).to(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_rows_are_bitwise_the_rows_computed_alone(m, dtype):
    x = torch.randn(16, H, generator=_gen(1)).to(dtype)
    w = torch.rand(H, generator=_gen(2)) + 0.5
    assert _rows_invariant(lambda r: m.rms_norm(r.contiguous(), w, EPS), x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_rms_norm_rows_are_bitwise_the_rows_computed_alone(m, dtype):
    x = torch.randn(16, H, generator=_gen(3)).to(dtype)
    y = torch.randn(16, H, generator=_gen(4)).to(dtype)
    w = torch.rand(H, generator=_gen(5)) + 0.5
    both = torch.cat([x, y], dim=1)

    def fn(rows):
        xs, ys = rows[:, :H].clone(), rows[:, H:].contiguous()
        h = m.add_rms_norm_(xs, ys, w, EPS)
        return torch.cat([xs, h], dim=1)

    assert _rows_invariant(fn, both)


def test_the_row_invariance_check_catches_a_row_count_dependent_reduction():
    x = torch.randn(16, H, generator=_gen(6))
    w = torch.rand(H, generator=_gen(7)) + 0.5
    assert not _rows_invariant(lambda r: _rms_row_count_dependent(r, w, EPS), x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_mul_rows_are_bitwise_the_rows_computed_alone(m, dtype):
    gu = (3 * torch.randn(16, 2 * INTER, generator=_gen(8))).to(dtype)
    assert _rows_invariant(lambda r: m.silu_mul(r.contiguous()), gu)


def _cache(dtype, cap: int, seed: int, nkv: int = NKV, hd: int = HD):
    g = _gen(seed)
    return (torch.randn(nkv, hd, cap, generator=g).to(dtype), torch.randn(nkv, cap, hd, generator=g).to(dtype))


def _attention(m, qkv, kc, vc, lo: int, n: int, pos0: int, shape=(HEADS, NKV, HD)) -> torch.Tensor:
    """Rows lo..lo+n of qkv attending at positions pos0.. (their keys already cached)."""
    heads, nkv, hd = shape
    att = torch.zeros(qkv.shape[0], heads * hd, dtype=qkv.dtype)
    m.attention_(qkv, kc, vc, att, lo, n, pos0, heads, nkv, hd, SCALE)
    return att[lo : lo + n]


# SmolLM2's shape (a compiled one) and a tiny model's (the run-time sizes' kernel)
@pytest.mark.parametrize("shape", [(HEADS, NKV, HD), (4, 2, 8)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("start", [0, 5, 130, 700])
def test_attention_rows_are_bitwise_the_rows_computed_alone_at_any_cache_size(m, dtype, start, shape):
    heads, nkv, hd = shape
    qkv = torch.randn(16, (heads + 2 * nkv) * hd, generator=_gen(9)).to(dtype)
    kc, vc = _cache(dtype, 1024, 10, nkv, hd)
    alone = [_attention(m, qkv, kc, vc, i, 1, start + i, shape) for i in range(16)]
    # another capacity, other values past every row's position: the rows do not change
    kc2, vc2 = _cache(dtype, 2048, 11, nkv, hd)
    kc2[:, :, : start + 16], vc2[:, : start + 16] = kc[:, :, : start + 16], vc[:, : start + 16]
    for w in range(2, 17):
        for lo in range(0, 16 - w + 1, 3):
            for k, v in ((kc, vc), (kc2, vc2)):
                out = _attention(m, qkv, k, v, lo, w, start + lo, shape)
                assert all(torch.equal(out[i], alone[lo + i][0]) for i in range(w)), (w, lo)


def _attention_row_count_dependent(qkv, kc, vc, lo, n, pos0):
    # negative control: the softmax's sum of exps taken in chunks whose size depends on n
    q = qkv[lo : lo + n, : HEADS * HD].float().view(n, NKV, HEADS // NKV, HD)
    kend = pos0 + n
    s = torch.einsum("nkgd,kdt->nkgt", q, kc[:, :, :kend].float()) * SCALE
    s = s.masked_fill(torch.arange(kend) > (pos0 + torch.arange(n))[:, None, None, None], float("-inf"))
    e = torch.exp(s - s.amax(-1, keepdim=True))
    pad = -kend % 8
    chunks = F.pad(e, (0, pad)).view(*e.shape[:-1], -1, 2 ** (n % 4))
    denom = chunks.sum(-1).sum(-1, keepdim=True)
    return (torch.einsum("nkgt,ktd->nkgd", e, vc[:, :kend].float()) / denom).reshape(n, HEADS * HD)


def test_the_attention_check_catches_a_row_count_dependent_softmax():
    qkv = torch.randn(16, QKV, generator=_gen(12))
    kc, vc = _cache(torch.float32, 1024, 13)
    start = 300
    alone = [_attention_row_count_dependent(qkv, kc, vc, i, 1, start + i) for i in range(16)]
    caught = False
    for w in range(2, 17):
        out = _attention_row_count_dependent(qkv, kc, vc, 0, w, start)
        caught |= not all(torch.equal(out[i], alone[i][0]) for i in range(w))
    assert caught


def _aten_rope(qkv, cos, sin):
    n = qkv.shape[0]
    qk = qkv[:, : (HEADS + NKV) * HD].view(n, HEADS + NKV, HD)
    return qk * cos[:, None] + qk.roll(HD // 2, dims=-1) * sin[:, None]


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_and_cache_writes_are_atens_bitwise_and_row_by_row(m, dtype):
    n, start = 5, 37
    qkv = torch.randn(n, QKV, generator=_gen(14)).to(dtype)
    ang = torch.rand(n, HD, generator=_gen(15)) * 6
    cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)
    kc, vc = torch.zeros(NKV, HD, 128, dtype=dtype), torch.zeros(NKV, 128, HD, dtype=dtype)
    want = _aten_rope(qkv, cos, sin)
    got = qkv.clone()
    m.rope_cache_(got, cos, sin, kc, vc, 0, n, start, HEADS, NKV, HD)
    assert torch.equal(got[:, : HEADS * HD].view(n, HEADS, HD), want[:, :HEADS])
    assert torch.equal(kc[:, :, start : start + n], want[:, HEADS:].permute(1, 2, 0))
    assert torch.equal(vc[:, start : start + n], qkv[:, (HEADS + NKV) * HD :].view(n, NKV, HD).transpose(0, 1))
    # one row at a time: the same bits
    one = qkv.clone()
    kc1, vc1 = torch.zeros_like(kc), torch.zeros_like(vc)
    for i in range(n):
        m.rope_cache_(one, cos, sin, kc1, vc1, i, 1, start + i, HEADS, NKV, HD)
    assert torch.equal(one, got) and torch.equal(kc1, kc) and torch.equal(vc1, vc)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_residual_add_is_atens_bitwise(m, dtype):
    x = torch.randn(4, H, generator=_gen(16)).to(dtype)
    y = torch.randn(4, H, generator=_gen(17)).to(dtype)
    got = x.clone()
    assert m.add_rms_norm_(got, y, None, EPS) is None
    assert torch.equal(got, x + y)


# against the same arithmetic in fp32 on the same inputs: fp32 kernels within a few ulps,
# bf16 kernels within about one bf16 rounding of the result (ATen's bf16 attention rounds
# its scores and probabilities to bf16 as well, so it strays further)
TOL = {torch.float32: dict(rtol=2e-5, atol=2e-6), torch.bfloat16: dict(rtol=8e-3, atol=4e-3)}


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_and_silu_mul_are_close_to_atens(m, dtype):
    x = torch.randn(8, H, generator=_gen(18)).to(dtype)
    w = torch.rand(H, generator=_gen(19)) + 0.5
    torch.testing.assert_close(m.rms_norm(x, w, EPS).float(), F.rms_norm(x.float(), (H,), w, EPS), **TOL[dtype])
    gu = (4 * torch.randn(8, 2 * INTER, generator=_gen(20))).to(dtype)
    want = F.silu(gu[:, :INTER].float()) * gu[:, INTER:].float()
    torch.testing.assert_close(m.silu_mul(gu).float(), want, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("start", [0, 200, 900])
def test_attention_is_close_to_the_aten_attention(m, dtype, start):
    n, g = 6, HEADS // NKV
    qkv = torch.randn(n, QKV, generator=_gen(21)).to(dtype)
    kc, vc = _cache(dtype, 1024, 22)
    got = _attention(m, qkv, kc, vc, 0, n, start)
    kend = -(-(start + n) // 64) * 64
    pos = torch.arange(start, start + n)
    mask = torch.zeros(n, kend).masked_fill_(torch.arange(kend)[None] > pos[:, None], float("-inf"))
    q = qkv[:, : HEADS * HD].float().view(n, HEADS, HD).transpose(0, 1).reshape(NKV, g * n, HD)
    want = attend(q, kc[:, :, :kend].float(), vc[:, :kend].float(), mask.repeat(g, 1)[None], SCALE)
    want = want.view(HEADS, n, HD).transpose(0, 1).reshape(n, HEADS * HD)
    torch.testing.assert_close(got.float(), want, **TOL[dtype])
