"""Weight-only int8 GEMMs for the draft model: half the bytes of bf16 per draft step.

A draft forward on CPU is bound by the bytes it reads (its weights are evicted from
the cache by every target pass between two draft steps), so the draft's decoder
weights and its output head are stored as symmetric per-output-channel int8:

    W[o, :] ~= s[o] * q[o, :],   s[o] = max_i |W[o, i]| / 127,   q = round(W / s) in [-127, 127]

run by ``torch.ops.aten._weight_int8pack_mm`` (bf16 activations, bf16 scales).

Only the draft uses this: a draft's numerics never reach the output (the target
verifies every proposal), so quantising it changes how many drafts are accepted,
never what is emitted. Measured on the bench's code and agent prompts: the 2-layer
draft's greedy agreement with the target stays at 0.30 (bf16: 0.30; a 4-bit
quantisation dropped it to 0.18), and a draft step in between target passes drops
from about 2.5 ms to 2.0 ms at 1 thread.
"""

from __future__ import annotations

import torch

__all__ = ["Int8Linear", "int8_layers"]


class Int8Linear:
    """``y = x @ W.T`` with W stored as int8 codes and one bf16 scale per output row.

    x bf16 [M, in] -> bf16 [M, out]."""

    def __init__(self, weight: torch.Tensor) -> None:
        if weight.dim() != 2:
            raise ValueError(f"Int8Linear needs a 2-D weight [out, in], got shape {tuple(weight.shape)}")
        w = weight.detach().float()
        scale = (w.abs().amax(dim=1) / 127.0).clamp_min(torch.finfo(torch.float32).tiny)  # [out]
        self.codes = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8).contiguous()  # [out, in]
        self.scales = scale.to(torch.bfloat16).contiguous()  # [out]
        self.out_features, self.in_features = (int(d) for d in w.shape)
        self.native = ("int8", self.codes, self.scales)  # the op __call__ runs, for the C++ layer loop

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(x, self.codes, self.scales)

    def dequantized(self) -> torch.Tensor:
        """The weight this GEMM computes with, as fp32 [out, in] (for tests)."""
        return self.codes.float() * self.scales.float()[:, None]


def int8_layers(hf_model: torch.nn.Module) -> list[tuple[Int8Linear, ...]]:
    """Per decoder layer: (qkv, o, gate_up, down) as ``Int8Linear`` (q, k, v and gate, up fused),
    the layout ``FastLlama(linears=...)`` expects."""
    layers = []
    for layer in hf_model.model.layers:
        a, mlp = layer.self_attn, layer.mlp
        layers.append((
            Int8Linear(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])),
            Int8Linear(a.o_proj.weight),
            Int8Linear(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])),
            Int8Linear(mlp.down_proj.weight),
        ))
    return layers
