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
bf16. The token embedding / LM head is Q8_0 in the GGUF and stays a bf16 GEMM.

llama.cpp's converter permutes the rows of the q and k projections (its RoPE pairs
adjacent dimensions, Hugging Face's pairs halves); the permutation is recovered by
matching each dequantised row with the Hugging Face weight, and must be exact.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

__all__ = ["Q4Linear", "read_q4_1", "load_q4_layers", "GROUP"]

GROUP = 32  # Q4_1 block size (inputs per scale/min pair)
_BLOCK_BYTES = 20  # fp16 d, fp16 m, 16 bytes of nibbles


class Q4Linear:
    """``y = x @ W.T`` for a Q4_1 weight ``W`` [out, in]; x bf16 [M, in] -> bf16 [M, out]."""

    def __init__(self, codes: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> None:
        out_f, in_f = codes.shape
        if in_f % GROUP:
            raise ValueError(f"in_features {in_f} is not a multiple of {GROUP}")
        self.in_features, self.out_features = int(in_f), int(out_f)
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32).contiguous(), 1)
        # [in/32, out, 2]: (scale, zero) with W = (q - 8) * scale + zero = d q + m
        self.sz = torch.stack([d.t(), (m + 8 * d).t()], dim=-1).to(torch.bfloat16).contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, GROUP, self.sz)

    def dequantized(self) -> torch.Tensor:
        """The weight this GEMM computes with, as fp32 [out, in] (for tests)."""
        eye = torch.eye(self.in_features, dtype=torch.bfloat16)
        return self(eye).float().t().contiguous()


def read_q4_1(tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A gguf ``ReaderTensor`` of type Q4_1 -> (codes [out, in] int32, d [out, in/32], m)."""
    if tensor.tensor_type.name != "Q4_1":
        raise ValueError(f"{tensor.name} is {tensor.tensor_type.name}, not Q4_1")
    data = np.asarray(tensor.data)
    rows, nb = data.shape[0], data.shape[1] // _BLOCK_BYTES
    blocks = data.reshape(rows, nb, _BLOCK_BYTES)
    d = torch.from_numpy(blocks[..., 0:2].copy().view(np.float16).reshape(rows, nb).astype(np.float32))
    m = torch.from_numpy(blocks[..., 2:4].copy().view(np.float16).reshape(rows, nb).astype(np.float32))
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


def load_q4_layers(gguf_path: str | Path, hf_model: torch.nn.Module) -> list[tuple[Q4Linear, ...]]:
    """Per decoder layer: (qkv, o, gate_up, down) as ``Q4Linear`` (q, k, v and gate, up fused)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf_path))
    tensors = {t.name: t for t in reader.tensors}
    layers = []
    for i, layer in enumerate(hf_model.model.layers):
        a, mlp = layer.self_attn, layer.mlp

        def get(gname, weight):
            t = tensors.get(f"blk.{i}.{gname}.weight")
            if t is None:
                raise ValueError(f"GGUF has no tensor blk.{i}.{gname}.weight")
            return _match_rows(*read_q4_1(t), weight, t.name)

        def fused(*parts):
            return Q4Linear(*(torch.cat([p[j] for p in parts]) for j in range(3)))

        q, k, v = get("attn_q", a.q_proj.weight), get("attn_k", a.k_proj.weight), get("attn_v", a.v_proj.weight)
        gate, up = get("ffn_gate", mlp.gate_proj.weight), get("ffn_up", mlp.up_proj.weight)
        layers.append((fused(q, k, v), Q4Linear(*get("attn_output", a.o_proj.weight)), fused(gate, up),
                       Q4Linear(*get("ffn_down", mlp.down_proj.weight))))
    return layers
