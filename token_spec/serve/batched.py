"""A batched forward over a Llama-architecture HF model: many sequences, one pass.

Continuous batching needs one forward pass that serves every active sequence: each
sequence brings a *segment* of new tokens (a prompt to prefill, or a pending token plus
its draft), the segments are packed into one ``[T, d]`` matrix for every linear layer,
and attention runs per sequence against that sequence's own KV cache (``SeqKV``).
Sequences join and leave between passes; their caches are independent.

Exactness (the serving contract: a request's greedy output does not depend on what
else is in the batch, nor on how many draft tokens the scheduler gave it):

* Linear layers work row by row, so a row's result depends on the other rows only
  through the kernel chosen for the matrix height ``T``. Measured on this project's
  CPUs (1 intra-op thread): the fp32 GEMM uses different kernels for heights 1, 2-3 and
  4+, and tail rows of heights that are not a multiple of 4 differ; a bf16 pass of one
  row differs from a pass of two or more. So the packed matrix is padded to a multiple
  of ``FP32_ROW_MULTIPLE`` (4) rows in fp32 and ``BF16_ROW_MULTIPLE`` (2) in bf16, heights
  whose rows measured invariant.
  ``tests/token_spec/test_serve_batched.py`` checks the whole pass bitwise.
* ``attention="exact"``: every decode row attends in its own call, query ``[1 row]``
  against keys ``0..p`` (its position ``p``), the same shapes a one-token vanilla step
  would use at ``p``; a row's result therefore does not depend on the segment's width.
  A prompt is prefilled in one causal call over the whole prompt (the same call
  whether the request runs alone or not; chunked prefill would break this).
* ``attention="sdpa"``: each segment's rows attend together through
  ``scaled_dot_product_attention`` with an offset causal mask (what servers usually
  do: fewer calls, but the numerics depend on the segment's width). Kept as the
  negative control of the exactness test and for the audit's "sdpa" comparison.

KV caches are fp32, whatever the weights' dtype, in growable buffers
(``[layers, kv_heads, capacity, head_dim]``). Rollback is exact: ``truncate(n)``
only moves the length, the next write overwrites the stale positions.

The class reads the weights of any ``LlamaForCausalLM``-shaped HF model
(``model.model.layers[i].self_attn.{q,k,v,o}_proj``, ``mlp.{gate,up,down}_proj``,
RMSNorms, rotary embedding, tied or untied ``lm_head``). A faster engine can replace
it behind the same three calls: ``new_kv()``, ``forward(segments)``, ``vocab_size``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["BatchedLM", "SeqKV", "Segment", "FP32_ROW_MULTIPLE", "BF16_ROW_MULTIPLE", "bf16_supported", "ATTENTION_MODES"]

FP32_ROW_MULTIPLE = 4
BF16_ROW_MULTIPLE = 2
ATTENTION_MODES = ("exact", "sdpa")
_CAPACITY_STEP = 256  # KV buffers grow in whole steps of this many positions


def bf16_supported() -> bool:
    """True where the CPU has native bf16 matmuls (AVX512-BF16 or AMX)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:  # pragma: no cover - non-Linux
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


class SeqKV:
    """One sequence's KV cache: fp32 buffers ``[layers, kv_heads, capacity, head_dim]``."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int) -> None:
        self.shape = (layers, kv_heads, 0, head_dim)
        self.k = torch.empty(self.shape)
        self.v = torch.empty(self.shape)
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.k.shape[2]

    def reserve(self, length: int) -> None:
        """Make room for ``length`` positions (capacity grows in whole steps)."""
        if length <= self.capacity:
            return
        cap = _CAPACITY_STEP * math.ceil(length / _CAPACITY_STEP)
        layers, heads, _, dim = self.shape
        k = torch.empty((layers, heads, cap, dim))
        v = torch.empty((layers, heads, cap, dim))
        k[:, :, : self.length] = self.k[:, :, : self.length]
        v[:, :, : self.length] = self.v[:, :, : self.length]
        self.k, self.v = k, v

    def truncate(self, length: int) -> None:
        """Exact rollback: positions >= length are forgotten (overwritten by the next write)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"truncate({length}) outside [0, {self.length}]")
        self.length = length

    def free(self) -> None:
        """Release the buffers at once (the request is over or was cancelled)."""
        self.k = self.v = torch.empty(self.shape)
        self.length = 0

    @property
    def nbytes(self) -> int:
        return self.k.numel() * 4 + self.v.numel() * 4


@dataclass
class Segment:
    """New tokens of one sequence for one pass.

    ``prefill=True``: the tokens are a prompt written at positions 0.. of an empty cache
    (no logits). Otherwise they are decode rows (pending token + draft) appended at
    ``kv.length``; the pass returns one logits row per token.
    """

    kv: SeqKV
    ids: list[int]
    prefill: bool = False


class BatchedLM:
    """Packed multi-sequence forward over a Llama-style HF model (weights copied once)."""

    def __init__(self, model: torch.nn.Module, *, dtype: torch.dtype | str = "auto", attention: str = "exact",
                 max_positions: int | None = None) -> None:
        if attention not in ATTENTION_MODES:
            raise ValueError(f"attention must be one of {ATTENTION_MODES}, got {attention!r}")
        if dtype == "auto":
            dtype = torch.bfloat16 if bf16_supported() else torch.float32
        elif isinstance(dtype, str):
            names = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp32": torch.float32, "float32": torch.float32}
            if dtype not in names:
                raise ValueError(f"dtype must be 'auto', 'bf16' or 'fp32', got {dtype!r}")
            dtype = names[dtype]
        if dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"dtype must be bfloat16 or float32, got {dtype}")
        cfg = model.config
        self.dtype = dtype
        self.attention = attention
        self.row_multiple = BF16_ROW_MULTIPLE if dtype == torch.bfloat16 else FP32_ROW_MULTIPLE
        self.layers_n = int(cfg.num_hidden_layers)
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(cfg.num_key_value_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads)
        self.group = self.heads // self.kv_heads
        self.eps = float(cfg.rms_norm_eps)
        self.vocab_size = int(cfg.vocab_size)
        self.max_positions = int(max_positions or cfg.max_position_embeddings)
        self.scale = 1.0 / math.sqrt(self.head_dim)

        def w(t: torch.Tensor) -> torch.Tensor:
            return t.detach().to(dtype).contiguous()

        inner = model.model
        self.embed = inner.embed_tokens.weight.detach().float()  # [V, d] (rows read, never multiplied)
        self.layers = []
        for layer in inner.layers:
            att, mlp = layer.self_attn, layer.mlp
            for lin in (att.q_proj, att.k_proj, att.v_proj, att.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj):
                if getattr(lin, "bias", None) is not None:
                    raise ValueError("BatchedLM supports bias-free Llama layers only")
            self.layers.append({
                "ln1": layer.input_layernorm.weight.detach().float(),
                "ln2": layer.post_attention_layernorm.weight.detach().float(),
                # q, k, v fused into one GEMM; gate and up into another.
                "qkv": w(torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight])),
                "o": w(att.o_proj.weight),
                "gate_up": w(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])),
                "down": w(mlp.down_proj.weight),
            })
        self.norm = inner.norm.weight.detach().float()
        self.lm_head = w(model.lm_head.weight)
        self.inter = int(cfg.intermediate_size)
        # cos/sin table for every position, computed once by the model's own rotary module,
        # so a position's rotation is a table row (identical in every pass).
        with torch.inference_mode():
            pos = torch.arange(self.max_positions).unsqueeze(0)
            cos, sin = inner.rotary_emb(torch.zeros(1, dtype=torch.float32), pos)
        self.cos = cos[0].float().contiguous()  # [P, head_dim]
        self.sin = sin[0].float().contiguous()

    # -- pieces --------------------------------------------------------------------
    def new_kv(self) -> SeqKV:
        return SeqKV(self.layers_n, self.kv_heads, self.head_dim)

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        # x * rsqrt(mean(x^2) + eps) * weight, row by row, in fp32.
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    def _linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        # fp32 in, fp32 out; the GEMM runs in the weights' dtype.
        return F.linear(x.to(self.dtype), weight).float()

    @staticmethod
    def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        # x [T, heads, dh]; rotate_half convention of HF Llama: x*cos + rotate_half(x)*sin.
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)

    def _attend_exact_row(self, q: torch.Tensor, kv: SeqKV, layer: int, pos: int) -> torch.Tensor:
        # q [heads, dh] at position pos; keys/values 0..pos of this sequence.
        qg = q.view(self.kv_heads, self.group, self.head_dim)  # [KVH, G, dh]
        k = kv.k[layer, :, : pos + 1]  # [KVH, pos+1, dh]
        v = kv.v[layer, :, : pos + 1]
        scores = torch.matmul(qg, k.transpose(1, 2)) * self.scale  # [KVH, G, pos+1]
        return torch.matmul(torch.softmax(scores, dim=-1), v).reshape(self.heads * self.head_dim)  # [H*dh]

    def _attend_block(self, q: torch.Tensor, kv: SeqKV, layer: int, start: int) -> torch.Tensor:
        # q [n, heads, dh] at positions start..start+n-1, each row sees keys 0..its position.
        n = q.shape[0]
        end = start + n
        k = kv.k[layer, :, :end].unsqueeze(0)  # [1, KVH, end, dh]
        v = kv.v[layer, :, :end].unsqueeze(0)
        qh = q.permute(1, 0, 2).unsqueeze(0)  # [1, H, n, dh]
        if start == 0:
            out = F.scaled_dot_product_attention(qh, k, v, is_causal=True, enable_gqa=True)
        else:
            # row i (position start+i) may see keys j <= start+i
            mask = torch.arange(end).unsqueeze(0) <= (start + torch.arange(n)).unsqueeze(1)  # [n, end]
            out = F.scaled_dot_product_attention(qh, k, v, attn_mask=mask, enable_gqa=True)
        return out[0].permute(1, 0, 2).reshape(n, self.heads * self.head_dim)  # [n, H*dh]

    # -- the pass ------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, segments: list[Segment]) -> list[torch.Tensor | None]:
        """Run every segment in one packed pass; return, per segment, fp32 logits
        ``[n, V]`` for a decode segment and ``None`` for a prefill segment."""
        if not segments:
            return []
        starts, spans, ids = [], [], []
        for seg in segments:
            n = len(seg.ids)
            if n == 0:
                raise ValueError("a segment needs at least one token")
            if seg.prefill and seg.kv.length != 0:
                raise ValueError("a prefill segment needs an empty cache")
            start = seg.kv.length
            if start + n > self.max_positions:
                raise ValueError(f"sequence would reach {start + n} positions; the model supports {self.max_positions}")
            seg.kv.reserve(start + n)
            starts.append(start)
            spans.append((len(ids), len(ids) + n))
            ids.extend(seg.ids)
        total = len(ids)
        rows = self.row_multiple * math.ceil(total / self.row_multiple)  # padded height
        tok = torch.tensor(ids + [0] * (rows - total), dtype=torch.long)
        if int(tok.min()) < 0 or int(tok.max()) >= self.vocab_size:
            raise ValueError(f"token id out of range [0, {self.vocab_size})")
        positions = torch.cat([torch.arange(s, s + len(seg.ids)) for s, seg in zip(starts, segments)]
                              + [torch.zeros(rows - total, dtype=torch.long)])
        cos, sin = self.cos[positions], self.sin[positions]  # [rows, dh]
        h = self.embed[tok]  # [rows, d] fp32 residual stream
        qd, kd = self.heads * self.head_dim, self.kv_heads * self.head_dim
        for li, L in enumerate(self.layers):
            x = self._rms(h, L["ln1"])
            qkv = self._linear(x, L["qkv"])  # [rows, qd + 2 kd]
            q = self._rope(qkv[:, :qd].reshape(rows, self.heads, self.head_dim), cos, sin)
            k = self._rope(qkv[:, qd : qd + kd].reshape(rows, self.kv_heads, self.head_dim), cos, sin)
            v = qkv[:, qd + kd :].reshape(rows, self.kv_heads, self.head_dim)
            att = torch.empty(rows, qd)
            for seg, start, (a, b) in zip(segments, starts, spans):
                seg.kv.k[li, :, start : start + b - a] = k[a:b].transpose(0, 1)
                seg.kv.v[li, :, start : start + b - a] = v[a:b].transpose(0, 1)
                if seg.prefill or self.attention == "sdpa":
                    att[a:b] = self._attend_block(q[a:b], seg.kv, li, start)
                else:
                    for r in range(a, b):
                        att[r] = self._attend_exact_row(q[r], seg.kv, li, start + r - a)
            if rows > total:
                att[total:] = 0.0
            h = h + self._linear(att, L["o"])
            x = self._rms(h, L["ln2"])
            gu = self._linear(x, L["gate_up"])  # [rows, 2 * inter]
            h = h + self._linear(F.silu(gu[:, : self.inter]) * gu[:, self.inter :], L["down"])
        for seg, (a, b) in zip(segments, spans):
            seg.kv.length += b - a
        # LM head only over decode rows (padded again to the row multiple).
        want = [r for seg, (a, b) in zip(segments, spans) if not seg.prefill for r in range(a, b)]
        if not want:
            return [None] * len(segments)
        head_rows = self.row_multiple * math.ceil(len(want) / self.row_multiple)
        sel = torch.tensor(want + [want[0]] * (head_rows - len(want)), dtype=torch.long)
        logits = self._linear(self._rms(h[sel], self.norm), self.lm_head)  # [head_rows, V]
        out: list[torch.Tensor | None] = []
        i = 0
        for seg, (a, b) in zip(segments, spans):
            if seg.prefill:
                out.append(None)
            else:
                out.append(logits[i : i + b - a])
                i += b - a
        return out
