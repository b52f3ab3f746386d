"""The target's own 4-bit weights: GGUF Q4_1 blocks run by torch's int4 CPU GEMM.

SmolLM2's GGUF stores every decoder weight as Q4_1: blocks of 32 inputs, each
``w = d * q + m`` with a 4-bit code ``q`` and fp16 ``d`` (scale) and ``m`` (minimum).
The fp32 weights the rest of the project uses are exactly these values dequantised
(checked here row by row). Reading 4-bit codes instead of bf16 values moves a quarter
of the bytes per decode step, and on CPU a decode step is bound by weight bytes.

``torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, 32, sz)`` computes
``x @ W.T`` with ``W = (q - 8) * scale + zero`` per group of 32 inputs, scales and
zeros in bf16. With ``scale = d`` and ``zero = m + 8 d`` that is ``d * q + m``; the
only change is the rounding of ``d`` and ``m + 8 d`` to bf16 (fp16 has 3 more
mantissa bits), so this is the GGUF model with bf16 block constants. Activations are
bf16.

The LM head (the tied token embedding, 49152 x 576) is Q8_0 in the GGUF: blocks of 32
inputs, ``w = d * q`` with an int8 code ``q`` and an fp16 scale ``d``. ``Q8Head`` runs it
on the same int4 kernel at about half the bytes of a bf16 GEMM: each code splits as
``q = 16 * hi + lo`` with ``lo = q & 15`` in [0, 15] and ``hi = q >> 4`` in [-8, 7], so
``w = (16 d) * hi + d * lo``. Both halves go into ONE int4 GEMM over doubled inputs:
codes ``[hi + 8 | lo]`` (576 + 576 inputs, 36 groups) with (scale, zero) = (16 d, 0) on
the hi groups and (d, 8 d) on the lo groups, applied to ``[x | x]``. The kernel adds the
two halves' products in its fp32 accumulator, so a logit is the fp32 dot product of x
with ``bf16(d) * q`` rounded once to bf16 (16 d and 8 d are exact multiples of the bf16
``d``, and ``bf16(d) * q`` is exact in fp32). The embedding lookup stays bf16.

Two kernels run these codes. Where the compiled extension builds with AVX512-BF16
(``native_q4_mm``), the nibble GEMM of ``token_spec.native_layers`` does: it takes the
GGUF's fp16 ``d`` and ``m`` as they are (``W = d * q + m`` per group, with bf16 dot
products of the codes, exact in bf16, and the activations), unpacks each block of
weights once for all the rows of a call, and computes each row alone, so it is
row-invariant by construction and a pass over 8 rows costs about 2.6 one-row passes
where torch's int4 kernel, which unpacks per row, costs about 3.3 (``python -m
token_spec.step_profile --ab --ab-of q4-kernel``, 512 cached tokens). Elsewhere, or with
``TOKEN_SPEC_Q4_KERNEL=aten``, torch's int4 kernel runs as described above. The two
compute the same weights up to that bf16 rounding of the block constants, so their
logits differ slightly; within one process every pass runs the same kernel.

llama.cpp's converter permutes the rows of the q and k projections (its RoPE pairs
adjacent dimensions, Hugging Face's pairs halves); the permutation is recovered by
matching each dequantised row with the Hugging Face weight, and must be exact.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from gguf import GGUFReader

__all__ = ["Q4Linear", "Q8Head", "native_q4_mm", "pack_nibbles", "read_q4_1", "read_q8_0", "split_int8",
           "load_q4_layers", "load_q8_head", "GROUP"]

GROUP = 32  # Q4_1 block size (inputs per scale/min pair)
_BLOCK_BYTES = 20  # fp16 d, fp16 m, 16 bytes of nibbles
_Q8_BLOCK_BYTES = 34  # Q8_0: fp16 d, 32 int8 codes


def native_q4_mm():
    """The compiled nibble GEMM (``token_spec.native_layers``' ``q4_mm``: bf16 dot
    products, row-invariant by construction, its cost flat in the rows up to the dot
    products themselves) where it built (AVX512-BF16) and ``TOKEN_SPEC_Q4_KERNEL`` is not
    "aten"; else None (torch's int4 kernel runs)."""
    from .native_layers import compiled_gemm

    return compiled_gemm("q4_mm", "TOKEN_SPEC_Q4_KERNEL", "aten", "the nibble GEMM")


def _exact_f16(t: torch.Tensor, what: str) -> torch.Tensor:
    half = t.to(torch.float16)
    if not torch.equal(half.float(), t.float()):
        raise ValueError(f"{what} is not exactly representable in fp16")
    return half


def pack_nibbles(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``W[n, k] = scale[n, g] * codes[n, k] + zero[n, g]`` (g = k // 32, codes in 0..15,
    scale and zero exact in fp16) -> (codes uint8, sz fp16) in ``q4_mm``'s layout: outputs
    in blocks of 64, inputs in groups of 32; per (block, group) 1024 bytes of nibbles
    (4 tiles x 8 chunks x 32 bytes; chunk q's byte 2 * lane + p holds inputs 4q + p (low
    nibble) and 4q + 2 + p (high) of output 16 * tile + lane), then the block's 64 scales
    and 64 zeros."""
    n, k = codes.shape
    if n % 64 or k % GROUP:
        raise ValueError(f"the nibble GEMM needs out % 64 == 0 and in % 32 == 0, got [{n}, {k}]")
    if int(codes.min()) < 0 or int(codes.max()) > 15:
        raise ValueError("codes must lie in [0, 15]")
    g = k // GROUP
    if tuple(scale.shape) != (n, g) or tuple(zero.shape) != (n, g):
        raise ValueError(f"scale and zero must be [{n}, {g}], got {tuple(scale.shape)} and {tuple(zero.shape)}")
    # [block, tile, lane, group, chunk, half, p]: input 32 * group + 4 * chunk + 2 * half + p
    c = codes.to(torch.uint8).view(n // 64, 4, 16, g, 8, 2, 2).permute(0, 3, 1, 4, 5, 2, 6)
    c = c.reshape(n // 64, g, 4, 8, 2, 32)
    packed = (c[..., 0, :] | (c[..., 1, :] << 4)).contiguous().view(-1)
    sz = torch.stack([_exact_f16(scale, "a block scale"), _exact_f16(zero, "a block zero")])  # [2, n, g]
    sz = sz.view(2, n // 64, 64, g).permute(1, 3, 0, 2).contiguous().view(-1)
    return packed, sz


class Q4Linear:
    """``y = x @ W.T`` for a Q4_1 weight ``W`` [out, in]; x bf16 [M, in] -> bf16 [M, out].

    kernel: "native" runs the compiled nibble GEMM (``native_q4_mm``) on the GGUF's exact
    fp16 ``d`` and ``m``; "aten" torch's int4 kernel (d and m + 8 d rounded to bf16);
    "auto" the nibble GEMM where it is built, else torch's."""

    def __init__(self, codes: torch.Tensor, d: torch.Tensor, m: torch.Tensor, *, kernel: str = "auto") -> None:
        out_f, in_f = codes.shape
        if in_f % GROUP:
            raise ValueError(f"in_features {in_f} is not a multiple of {GROUP}")
        self.in_features, self.out_features = int(in_f), int(out_f)
        self._mm = _pick(kernel, out_f)
        if self._mm is not None:
            self.packed, self.sz = pack_nibbles(codes, d, m)
            self.native = ("q4_mm", self.packed, self.sz, self.out_features)  # for the C++ layer loop
            return
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32).contiguous(), 1)
        # [in/32, out, 2]: (scale, zero) with W = (q - 8) * scale + zero = d q + m
        self.sz = torch.stack([d.t(), (m + 8 * d).t()], dim=-1).to(torch.bfloat16).contiguous()
        self.native = ("q4", self.packed, self.sz)  # the op __call__ runs, for the C++ layer loop

    @property
    def kernel(self) -> str:
        """Which kernel runs: "native" (the nibble GEMM) or "aten"."""
        return "aten" if self._mm is None else "native"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self._mm is not None:
            return self._mm(x, self.packed, self.sz, self.out_features)
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, GROUP, self.sz)

    def dequantized(self) -> torch.Tensor:
        """The weight this GEMM computes with, as fp32 [out, in] (for tests)."""
        eye = torch.eye(self.in_features, dtype=torch.bfloat16)
        return self(eye).float().t().contiguous()


def _pick(kernel: str, out_features: int):
    """The nibble GEMM for ``kernel`` ("auto", "native", "aten"), or None for torch's."""
    if kernel not in ("auto", "native", "aten"):
        raise ValueError(f"kernel must be 'auto', 'native' or 'aten', got {kernel!r}")
    if kernel == "aten":
        return None
    mm = native_q4_mm()
    if kernel == "native" and mm is None:
        raise RuntimeError("the nibble GEMM is not built here (needs AVX512-BF16 and the native extension)")
    if out_features % 64:  # its layout has blocks of 64 outputs
        if kernel == "native":
            raise ValueError(f"the nibble GEMM needs out_features % 64 == 0, got {out_features}")
        return None
    return mm


class Q8Head:
    """``logits = x @ W.T`` for a Q8_0 weight ``W = d * q`` [V, H] (blocks of 32 inputs) on
    a 4-bit GEMM: x bf16 [M, H] -> bf16 [M, V].

    ``hi`` [V, H] in [-8, 7] and ``lo`` in [0, 15] are the two 4-bit halves of the int8
    codes (``split_int8``), ``d`` [V, H/32] the fp32 block scales. One GEMM over
    ``[x | x]`` with codes ``[hi + 8 | lo]``. On the nibble GEMM (``kernel`` as
    ``Q4Linear``'s) each group computes ``scale * code + zero``: (16 d, -128 d) on the hi
    groups gives ``16 d hi``, (d, 0) on the lo groups ``d lo``, with the GGUF's fp16 d
    exactly. On torch's int4 kernel, ``(code - 8) * scale + zero``: (16 d, 0) and (d, 8 d),
    with d rounded to bf16 (exactly: 16 d and 8 d are power-of-two multiples of it).
    """

    def __init__(self, hi: torch.Tensor, lo: torch.Tensor, d: torch.Tensor, *, kernel: str = "auto") -> None:
        if hi.shape != lo.shape or hi.dim() != 2:
            raise ValueError(f"hi and lo must be [V, H] of one shape, got {tuple(hi.shape)} and {tuple(lo.shape)}")
        out_f, in_f = hi.shape
        if in_f % GROUP or tuple(d.shape) != (out_f, in_f // GROUP):
            raise ValueError(f"d must be [{out_f}, {in_f}/{GROUP}] for a [{out_f}, {in_f}] weight, got {tuple(d.shape)}")
        if int(hi.min()) < -8 or int(hi.max()) > 7 or int(lo.min()) < 0 or int(lo.max()) > 15:
            raise ValueError("hi must lie in [-8, 7] and lo in [0, 15] (see split_int8)")
        self.in_features, self.out_features = int(in_f), int(out_f)
        codes = torch.cat([hi + 8, lo], dim=1).to(torch.int32).contiguous()  # [V, 2H]
        self._mm = _pick(kernel, out_f)
        d = d.float()
        if self._mm is not None:
            scale = torch.cat([16 * d, d], dim=1)  # [V, 2H/32]
            zero = torch.cat([-128 * d, torch.zeros_like(d)], dim=1)
            self.packed, self.sz = pack_nibbles(codes, scale, zero)
            return
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
        d = d.t()  # [H/32, V]
        hi_sz = torch.stack([16 * d, torch.zeros_like(d)], dim=-1)  # (code - 8) * 16d = 16 d hi
        lo_sz = torch.stack([d, 8 * d], dim=-1)  # (code - 8) * d + 8 d = d lo
        self.sz = torch.cat([hi_sz, lo_sz]).to(torch.bfloat16).contiguous()  # [2H/32, V, 2]

    @property
    def kernel(self) -> str:
        """Which kernel runs: "native" (the nibble GEMM) or "aten"."""
        return "aten" if self._mm is None else "native"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        xx = torch.cat([x, x], dim=-1)
        if self._mm is not None:
            return self._mm(xx, self.packed, self.sz, self.out_features)
        return torch.ops.aten._weight_int4pack_mm_for_cpu(xx, self.packed, GROUP, self.sz)

    def dequantized(self, columns=None) -> torch.Tensor:
        """The weight this GEMM computes with, exactly, as fp32 [V, len(columns)] (all H
        columns when None): on torch's kernel its fp32 variant (same codes, the bf16
        scales as fp32) on unit vectors, slow (about 0.1 s per column); on the nibble GEMM
        the fp16 d times the codes, which its fp32 sums compute exactly. For tests."""
        cols = torch.arange(self.in_features) if columns is None else torch.as_tensor(columns).long()
        if self._mm is not None:
            return self._exact_weight()[:, cols]
        eye = torch.zeros(len(cols), self.in_features)
        eye[torch.arange(len(cols)), cols] = 1.0
        x = torch.cat([eye, eye], dim=-1)
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, GROUP, self.sz.float()).t().contiguous()

    def _exact_weight(self) -> torch.Tensor:
        """``scale * code + zero`` summed over the two halves, from the packed form (fp32 [V, H])."""
        v, k2 = self.out_features, 2 * self.in_features
        g = k2 // GROUP
        c = self.packed.view(v // 64, g, 4, 8, 32)
        lo, hi = (c & 15), (c >> 4)
        both = torch.stack([lo, hi], dim=4).view(v // 64, g, 4, 8, 2, 16, 2)  # [b, g, tile, q, half, lane, p]
        codes = both.permute(0, 2, 5, 1, 3, 4, 6).reshape(v, k2).float()
        sz = self.sz.view(v // 64, g, 2, 64).permute(2, 0, 3, 1).reshape(2, v, g).float()
        w = codes.view(v, g, GROUP) * sz[0][..., None] + sz[1][..., None]
        return (w[:, : g // 2] + w[:, g // 2 :]).reshape(v, self.in_features)


def _blocks(tensor, type_name: str, block_bytes: int) -> np.ndarray:
    """A gguf ``ReaderTensor`` of ``type_name`` -> its raw bytes as [rows, blocks, block_bytes]."""
    if tensor.tensor_type.name != type_name:
        raise ValueError(f"{tensor.name} is {tensor.tensor_type.name}, not {type_name}")
    data = np.asarray(tensor.data)
    rows, nb = data.shape[0], data.shape[1] // block_bytes
    return data.reshape(rows, nb, block_bytes)


def _f16(blocks: np.ndarray, offset: int) -> torch.Tensor:
    """The fp16 field at byte ``offset`` of every block, as fp32 [rows, blocks]."""
    rows, nb = blocks.shape[:2]
    return torch.from_numpy(blocks[..., offset : offset + 2].copy().view(np.float16).reshape(rows, nb)
                            .astype(np.float32))


def split_int8(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 codes -> (hi, lo) with q = 16 * hi + lo, lo = q mod 16 in [0, 15] and
    hi = floor(q / 16) in [-8, 7] (two's complement: q & 15 and the arithmetic q >> 4)."""
    q = q.to(torch.int32)
    return q >> 4, q & 15


def read_q8_0(tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A gguf ``ReaderTensor`` of type Q8_0 -> (codes [out, in] int32 in [-128, 127], d [out, in/32] fp32)."""
    blocks = _blocks(tensor, "Q8_0", _Q8_BLOCK_BYTES)
    rows, nb = blocks.shape[:2]
    d = _f16(blocks, 0)
    q = torch.from_numpy(blocks[..., 2:].copy().view(np.int8)).reshape(rows, nb * GROUP).to(torch.int32)
    return q, d


def read_q4_1(tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A gguf ``ReaderTensor`` of type Q4_1 -> (codes [out, in] int32, d [out, in/32], m)."""
    blocks = _blocks(tensor, "Q4_1", _BLOCK_BYTES)
    rows, nb = blocks.shape[:2]
    d, m = _f16(blocks, 0), _f16(blocks, 2)
    qs = torch.from_numpy(blocks[..., 4:].copy()).to(torch.int32)  # low nibbles: inputs 0..15, high: 16..31
    codes = torch.cat([qs & 0xF, qs >> 4], dim=-1).reshape(rows, nb * GROUP)
    return codes, d, m


def _dequant(codes: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    rows = codes.shape[0]
    return (codes.float().view(rows, -1, GROUP) * d[..., None] + m[..., None]).reshape(codes.shape)


def _match_rows(codes, d, m, weight: torch.Tensor, name: str):
    """Reorder the GGUF rows to the Hugging Face weight's rows; every row must match exactly."""
    deq = _dequant(codes, d, m)
    w = weight.detach().float()
    if torch.equal(deq, w):
        return codes, d, m
    perm = torch.cdist(w, deq).argmin(1)  # HF row i = GGUF row perm[i]
    if not torch.equal(deq[perm], w):
        raise ValueError(f"GGUF tensor {name} does not dequantise to the loaded weights")
    return codes[perm], d[perm], m[perm]


def _gguf_tensors(gguf: str | Path | GGUFReader) -> dict:
    """name -> ReaderTensor of a GGUF path, or of an open ``gguf.GGUFReader`` (opening one
    parses every tensor header: about 2 s here, so callers may share one)."""
    from gguf import GGUFReader

    reader = gguf if isinstance(gguf, GGUFReader) else GGUFReader(str(gguf))
    return {t.name: t for t in reader.tensors}


def load_q4_layers(gguf_path: str | Path | GGUFReader, hf_model: torch.nn.Module, *,
                   kernel: str = "auto") -> list[tuple[Q4Linear, ...]]:
    """Per decoder layer: (qkv, o, gate_up, down) as ``Q4Linear`` (q, k, v and gate, up fused).
    ``gguf_path``: the GGUF's path or an open ``gguf.GGUFReader``."""
    tensors = _gguf_tensors(gguf_path)
    layers = []
    for i, layer in enumerate(hf_model.model.layers):
        a, mlp = layer.self_attn, layer.mlp

        def get(gname, weight):
            t = tensors.get(f"blk.{i}.{gname}.weight")
            if t is None:
                raise ValueError(f"GGUF has no tensor blk.{i}.{gname}.weight")
            return _match_rows(*read_q4_1(t), weight, t.name)

        def fused(*parts):
            return Q4Linear(*(torch.cat([p[j] for p in parts]) for j in range(3)), kernel=kernel)

        q, k, v = get("attn_q", a.q_proj.weight), get("attn_k", a.k_proj.weight), get("attn_v", a.v_proj.weight)
        gate, up = get("ffn_gate", mlp.gate_proj.weight), get("ffn_up", mlp.up_proj.weight)
        layers.append((fused(q, k, v), Q4Linear(*get("attn_output", a.o_proj.weight), kernel=kernel), fused(gate, up),
                       Q4Linear(*get("ffn_down", mlp.down_proj.weight), kernel=kernel)))
    return layers


def load_q8_head(gguf_path: str | Path | GGUFReader, hf_model: torch.nn.Module, *, kernel: str = "auto") -> Q8Head:
    """The LM head as a ``Q8Head`` over the GGUF's Q8_0 ``token_embd.weight``
    (``gguf_path``: the GGUF's path or an open ``gguf.GGUFReader``).

    The model's head must be its tied token embedding, and that embedding (fp32, before
    any cast) must be the GGUF's blocks dequantised (``d * q``) exactly; else ValueError."""
    emb = hf_model.get_input_embeddings().weight
    if hf_model.get_output_embeddings().weight.data_ptr() != emb.data_ptr():
        raise ValueError("the Q8_0 head needs the LM head tied to the token embedding")
    t = _gguf_tensors(gguf_path).get("token_embd.weight")
    if t is None:
        raise ValueError("GGUF has no tensor token_embd.weight")
    q, d = read_q8_0(t)
    deq = (q.float().view(q.shape[0], -1, GROUP) * d[..., None]).reshape(q.shape)
    if deq.shape != emb.shape or not torch.equal(deq, emb.detach().float()):
        raise ValueError("GGUF tensor token_embd.weight does not dequantise to the loaded embedding")
    return Q8Head(*split_int8(q), d, kernel=kernel)
