"""The kernels of the exact forward (``token_spec.fast_forward``) and the probes that
measure, once per thread count, from how many rows each of them is row-invariant.

* ``Dense``: a GEMM ``y = x @ W.T`` (in bf16 the compiled ``bf16_mm`` where it builds,
  else BLAS; in fp32 oneDNN's inner product or BLAS), and ``row_invariant_width``: the
  fewest rows from which a GEMM gives every row bit for bit as a ``PAD_WIDTH``-row call
  does.
* ``attend``: the masked attention of one pass, and ``attention_row_invariant``: whether
  its batched matmuls give the same rows at every query width.
* ``supports_bf16`` / ``default_dtype``: the compute dtype the CPU runs natively.

A BLAS picks its kernel (and so its reduction order) by the shape of the call and the
threads, never by the values, so a probe over enough pseudo-random values settles the
question for this process.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

__all__ = ["PAD_WIDTH", "KEY_BLOCK", "supports_bf16", "default_dtype", "onednn_linear_available", "Dense", "attend",
           "attention_row_invariant", "row_invariant_width", "native_bf16_mm", "pack_bf16"]

PAD_WIDTH = 16  # widest exact pass; padded attention runs at this many query rows
KEY_BLOCK = 64  # key length of a pass is rounded up to a multiple of this (masked tail)


def supports_bf16() -> bool:
    """True where the CPU has native bf16 dot products (AVX512-BF16 or AMX-BF16).

    Read from /proc/cpuinfo's flags (Linux); elsewhere False (fp32 is the safe default)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        return False
    return False


def default_dtype() -> torch.dtype:
    """bf16 where the CPU supports it natively, else fp32."""
    return torch.bfloat16 if supports_bf16() else torch.float32


@functools.lru_cache(maxsize=1)
def onednn_linear_available() -> bool:
    """True where PyTorch has oneDNN's CPU inner product (``torch.ops.mkldnn._linear_pointwise``)."""
    try:
        if not torch.backends.mkldnn.is_available():
            return False
        x = torch.ones(2, 4)
        torch.ops.mkldnn._linear_pointwise(x, torch.ones(3, 4), None, "none", [], "")
        return True
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def native_bf16_mm():
    """The compiled bf16 GEMM (``token_spec.native_layers``' ``bf16_mm``: bf16 dot
    products over weights laid out in the order it reads them, row-invariant by
    construction) where it built (AVX512-BF16) and ``TOKEN_SPEC_BF16_KERNEL`` is not
    "blas"; else None."""
    from .native_layers import compiled_gemm

    return compiled_gemm("bf16_mm", "TOKEN_SPEC_BF16_KERNEL", "blas", "the bf16 GEMM")


def pack_bf16(weight: torch.Tensor) -> torch.Tensor:
    """A bf16 weight [N, K] (N % 64 == 0, K % 32 == 0) in ``bf16_mm``'s layout: blocks of 64
    outputs by 32 inputs; in a block, input pairs in quads, then tiles of 16 outputs, then
    the pair, then the 16 lanes' pairs (see the kernel's comment), flat."""
    if weight.dim() != 2 or weight.shape[0] % 64 or weight.shape[1] % 32:
        raise ValueError(f"pack_bf16 needs a weight [out, in] with out % 64 == 0 and in % 32 == 0, "
                         f"got {list(weight.shape)}")
    n, k = weight.shape
    w = weight.detach().to(torch.bfloat16)
    # [block b, tile j, lane, group g, quad tq, pair c, p] -> [b, g, tq, j, c, lane, p]
    return w.reshape(n // 64, 4, 16, k // 32, 4, 4, 2).permute(0, 3, 4, 1, 5, 2, 6).contiguous().view(-1)


class Dense:
    """``y = x @ W.T`` with a dense weight in the compute dtype.

    kernel: "blas" (``F.linear``), "onednn" (oneDNN's inner product), "native" (the
    compiled ``bf16_mm``, bf16 only), or "auto" = in bf16 the compiled GEMM where it builds
    and the shape fits (out % 64 == 0, in % 32 == 0; ``TOKEN_SPEC_BF16_KERNEL=blas`` keeps
    BLAS), else BLAS; in fp32 oneDNN where available, else BLAS. Why: in fp32 MKL's GEMM
    takes its 1-row (GEMV) and small-M paths below 4 rows, so the exact path pads every
    short pass to 4 rows; oneDNN's fp32 inner product is measured row-invariant from 2 rows
    here (and costs less at 2 rows than MKL at 4), which cuts an fp32 step from ~59 to ~41
    ms at 1 thread. In bf16 BLAS is row-invariant from 2 rows but reads a one-row GEMV's
    weights at about a third of the streaming bandwidth; the compiled GEMM is
    row-invariant from 1 row and reads them sequentially. It runs calls of up to
    ``PAD_WIDTH`` rows (every step and verify pass, whose rows the exactness contract
    covers); a wider call (a prompt's prefill, computed the same way with or without
    speculation) runs BLAS, whose blocking over many rows is faster there (a 300-token
    prefill: 462 ms on BLAS, 703 ms on the compiled GEMM, 1 thread)."""

    def __init__(self, weight: torch.Tensor, dtype: torch.dtype, kernel: str = "auto") -> None:
        if kernel not in ("auto", "blas", "onednn", "native"):
            raise ValueError(f"kernel must be 'auto', 'blas', 'onednn' or 'native', got {kernel!r}")
        self.weight = weight.detach().to(dtype).contiguous()
        self.out_features, self.in_features = int(self.weight.shape[0]), int(self.weight.shape[1])
        fits = self.out_features % 64 == 0 and self.in_features % 32 == 0
        self._mm = None
        if kernel == "native":
            if dtype != torch.bfloat16 or not fits:
                raise ValueError("the compiled bf16 GEMM needs a bf16 weight with out_features % 64 == 0 and "
                                 f"in_features % 32 == 0, got {dtype} {list(self.weight.shape)}")
            self._mm = native_bf16_mm()
            if self._mm is None:
                raise RuntimeError("kernel='native', but the compiled bf16 GEMM is not available here")
        elif kernel == "auto" and dtype == torch.bfloat16 and fits:
            self._mm = native_bf16_mm()
        if self._mm is not None:
            kernel = "native"
            self.packed = pack_bf16(self.weight)
        elif kernel == "auto":
            kernel = "onednn" if dtype == torch.float32 and onednn_linear_available() else "blas"
        self.kernel = kernel
        # the compiled GEMM is called from the C++ layer loop directly; the others are called
        # back: at::linear issued from C++ was measured not to give F.linear's bf16 rows bit
        # for bit (tests/token_spec/test_native_layers.py)
        self.native = ("bf16_mm", self.packed, self.out_features, PAD_WIDTH) if self._mm is not None else None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self._mm is not None:
            flat = x.reshape(-1, self.in_features)
            if flat.shape[0] <= PAD_WIDTH:
                return self._mm(flat, self.packed, self.out_features).view(*x.shape[:-1], self.out_features)
        if self.kernel == "onednn":
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, None, "none", [], "")
        return F.linear(x, self.weight)


def attend(qg: torch.Tensor, keys_t: torch.Tensor, vals: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """Masked attention of one pass, per kv head: qg [kv, R, hd] (the g query heads of a
    kv head stacked), keys_t [kv, hd, T] (the keys transposed, as the cache stores them),
    vals [kv, T, hd], mask [1 or kv, R, T] additive (0 / -inf) -> [kv, R, hd] in the
    compute dtype.

    scores = mask + (q k^T) * scale (a power of two here: exact), softmax in fp32 over the
    T keys (masked keys: exp = exactly 0), then probs @ vals. Keys are cached transposed
    so q k^T reads a strided slice of the cache (no per-layer copy of the keys)."""
    scores = torch.baddbmm(mask, qg, keys_t, alpha=scale)  # [kv, R, T]
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(qg.dtype)
    return torch.bmm(probs, vals)


def attention_row_invariant(dtype: torch.dtype, n_kv: int, group: int, head_dim: int, scale: float,
                            max_width: int = PAD_WIDTH, key_block: int = KEY_BLOCK, attend_fn=None,
                            min_width: int = 1) -> bool:
    """True iff ``attend`` over R = group * w query rows gives, for every w in
    min_width..max_width, bit for bit the rows it gives at w = max_width, at several key
    lengths (pseudo-random q, k, v; causal-style masks with a masked tail). ``min_width``:
    the fewest query rows a pass ever has (the GEMM padding width), so narrower calls
    never occur and need not agree.

    Like ``row_invariant_width`` for the GEMMs: the kernel a BLAS runs for a batched
    matmul depends on the shape and the threads, never on the values, so a probe over
    enough values settles it for this process (e.g. oneDNN's AMX kernels start at some
    row count on CPUs that have AMX). ``attend_fn`` replaces ``attend`` (tests)."""
    fn = attend if attend_fn is None else attend_fn
    gen = torch.Generator().manual_seed(4321)
    with torch.inference_mode():
        for t in (key_block, 4 * key_block, 16 * key_block):
            q = torch.randn(n_kv, group, max_width, head_dim, generator=gen).to(dtype)
            # keys transposed, as a slice of a wider buffer, as the cache holds them
            k = torch.randn(n_kv, head_dim, t + key_block, generator=gen).to(dtype)[:, :, :t]
            v = torch.randn(n_kv, t, head_dim, generator=gen).to(dtype)
            # row r (position t - max_width - 3 + r) sees keys up to its position; the tail is masked
            pos = torch.arange(t - max_width - 3, t - 3)
            base = torch.zeros(max_width, t, dtype=dtype)
            base.masked_fill_(torch.arange(t)[None, :] > pos[:, None], float("-inf"))

            def run(w: int) -> torch.Tensor:
                mask = base[:w].repeat(group, 1)[None]  # [1, g*w, t]
                out = fn(q[:, :, :w].reshape(n_kv, group * w, head_dim), k, v, mask, scale)
                return out.view(n_kv, group, w, head_dim)

            ref = run(max_width)
            for w in range(min_width, max_width):
                if not torch.equal(run(w), ref[:, :, :w]):
                    return False
    return True


def row_invariant_width(gemm, max_width: int = PAD_WIDTH, rows: int = 64) -> int:
    """Smallest P such that ``gemm`` (x [M, in] -> [M, out]; ``.in_features``) over M rows
    gives bit-for-bit the rows a call over ``max_width`` rows gives, for every M in
    P..max_width (max_width if none smaller).

    The kernel (and so the reduction order) depends on the call's shape and the
    threads, not on the values; but a bf16 GEMM rounds its fp32 sums to bf16, which
    hides most order differences in any one row. So the probe compares ``rows``
    pseudo-random rows (64: a kernel change shows in at least one of them with
    overwhelming probability; measured: one row shows it about a quarter of the time).
    """
    gen = torch.Generator().manual_seed(1234)
    dtype = gemm.weight.dtype if hasattr(gemm, "weight") else torch.bfloat16
    x = torch.randn(rows, gemm.in_features, generator=gen).to(dtype)
    with torch.inference_mode():
        ref = torch.cat([gemm(x[i : i + max_width]) for i in range(0, rows, max_width)])
        width = max_width
        for m in range(max_width - 1, 0, -1):
            got = torch.cat([gemm(x[i : i + m]) for i in range(0, rows - m + 1, m)])
            if not torch.equal(got, ref[: got.shape[0]]):
                break
            width = m
    return width
