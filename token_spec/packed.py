"""Many sequences in one pass of the lean forward: the server's continuous batching.

``PackedLM(fast)`` wraps a ``FastLlama`` (bf16, Q4_1 with the Q8_0 head, or fp32; the
C++ layer loop where it builds; keys cached transposed) behind three calls:
``new_kv()`` (a ``FastSession`` per sequence), ``forward(segments)`` and the model's
sizes. Each ``Segment`` brings one sequence's new tokens: a prompt to prefill, or a
pending token plus its draft.

How a pass stays exact (the serving contract: a request's greedy output is the same
alone, batched, and at any draft length):

* **Decode segments are packed.** Their rows share one run of the four GEMMs per
  layer (and the LM head), padded to the forward's row-invariant width
  (``FastLlama.gemm_width``) and never wider than ``PAD_WIDTH`` (16) rows, the widths
  whose rows the forward probes bit-identical; more rows than that go in further
  passes. Each segment then writes its own KV cache and attends alone: in the compiled
  loop (``token_spec.native_layers``) each query row attends over its own sequence's
  visible keys by a kernel that computes every row alone; in the Python loop with its
  queries padded to the width a one-sequence pass of that segment would use and its
  own mask and key length (``FastLlama.forward``'s rules), so its attention runs at
  exactly the shapes of its solo pass. RMSNorm, RoPE (a table row per position),
  SiLU and residual adds are row-wise. So every row is bit for bit the row the
  one-sequence forward gives (``tests/token_spec/test_serve_batched.py``).
* **Prompts are prefilled one per pass**, by the sequence's own ``FastSession.prefill``:
  the same call whether the request runs alone or not (packing a long prompt with other
  rows would run its GEMMs at heights the forward never probes).

``exact=False`` forwards (the negative control) run the packed rows unpadded and their
attention at each segment's own width, so rows change with the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .fast_forward import FastLlama, FastSession, attend

__all__ = ["PackedLM", "Segment"]

_NO_ROWS = torch.empty(0)  # a segment whose queries need no padding rows


@dataclass
class Segment:
    """New tokens of one sequence for one pass.

    ``prefill=True``: the tokens are a prompt written at positions 0.. of an empty cache
    (no logits). Otherwise decode rows (pending token + draft) appended at
    ``kv.length``; the pass returns one logits row per token.
    """

    kv: FastSession
    ids: list[int]
    prefill: bool = False


class PackedLM:
    """Packed multi-sequence passes over a ``FastLlama`` (see the module docstring)."""

    def __init__(self, fast: FastLlama) -> None:
        self.fast = fast
        self.dtype = fast.dtype
        self.vocab_size = fast.vocab_size
        self.max_positions = fast.max_positions
        self.max_rows = fast.pad_width  # rows of one packed pass

    @property
    def native(self) -> bool:
        return self.fast._run_layers_packed is not None

    def new_kv(self) -> FastSession:
        return self.fast.session()

    def forward(self, segments: list[Segment]) -> list[torch.Tensor | None]:
        """Run every segment; return, per segment, fp32 logits ``[n, V]`` for a decode
        segment and ``None`` for a prefill segment."""
        out: list[torch.Tensor | None] = [None] * len(segments)
        decode: list[int] = []
        for i, seg in enumerate(segments):
            if not seg.ids:
                raise ValueError("a segment needs at least one token")
            if int(min(seg.ids)) < 0 or int(max(seg.ids)) >= self.vocab_size:
                raise ValueError(f"token id out of range [0, {self.vocab_size})")
            end = seg.kv.length + len(seg.ids)
            if end > self.max_positions:
                raise ValueError(f"sequence would reach {end} positions; the model supports {self.max_positions}")
            if seg.prefill:
                if seg.kv.length != 0:
                    raise ValueError("a prefill segment needs an empty cache")
                seg.kv.prefill(seg.ids)
            else:
                if len(seg.ids) > self.max_rows:
                    raise ValueError(f"a decode segment has at most {self.max_rows} tokens, got {len(seg.ids)}")
                decode.append(i)
        batch: list[int] = []
        rows = 0
        for i in decode + [-1]:  # -1 flushes the last pass
            n = len(segments[i].ids) if i >= 0 else self.max_rows + 1
            if batch and rows + n > self.max_rows:
                with torch.inference_mode():
                    for j, logits in zip(batch, self._pass([segments[j] for j in batch])):
                        out[j] = logits
                batch, rows = [], 0
            if i >= 0:
                batch.append(i)
                rows += n
        return out

    def _pass(self, segs: list[Segment]) -> list[torch.Tensor]:
        """One packed pass over decode segments of at most ``max_rows`` rows in all."""
        lm = self.fast
        ns = [len(s.ids) for s in segs]
        starts = [s.kv.length for s in segs]
        total = sum(ns)
        gwidth = lm.gemm_width()
        gw = max(total, gwidth)  # the GEMM rows of the pass
        native = lm._run_layers_packed is not None
        offs, aws, kends, masks, qpads = [], [], [], [], []
        hd, nkv, g, heads = lm.head_dim, lm.n_kv, lm.group, lm.n_heads
        off = 0
        for seg, n, start in zip(segs, ns, starts):
            seg.kv._reserve(start + n)
            offs.append(off)
            off += n
        lm._rope_upto(max(starts) + lm.pad_width + lm.pad_width)
        ids = [t for s in segs for t in s.ids] + [0] * (gw - total)
        positions = torch.tensor([p for s, n in zip(starts, ns) for p in range(s, s + n)] + [0] * (gw - total))
        x = F.embedding(torch.tensor(ids, dtype=torch.long), lm.embed)  # [gw, H]
        if native:  # the compiled loop: each row attends over its visible keys alone (no mask, no padding)
            x = lm._run_layers_packed(x, lm.layers, [s.kv.k for s in segs], [s.kv.v for s in segs],
                                      lm._cos[positions], lm._sin_signed[positions], offs, ns, starts, heads, nkv, hd,
                                      lm.eps, lm.scale)
        else:
            padded = lm.attention_padded()
            for seg, n, start in zip(segs, ns, starts):
                # the query rows and key length of this segment's own one-sequence pass
                seg_gw = max(n, gwidth)
                aw = max(seg_gw, lm.pad_width) if padded else seg_gw
                kend = min(seg.kv.capacity, -(-(start + aw) // lm.key_block) * lm.key_block)
                pos = torch.arange(start, start + aw)
                mask = torch.zeros(aw, kend, dtype=lm.dtype)
                mask.masked_fill_(torch.arange(kend)[None, :] > pos[:, None], float("-inf"))
                masks.append(mask.repeat(g, 1)[None])  # [1, g*aw, kend]
                qpads.append(torch.zeros(heads, aw - n, hd, dtype=lm.dtype) if aw > n else _NO_ROWS)
                aws.append(aw)
                kends.append(kend)
            cos_b, sin_b = lm._cos[positions][:, None, :], lm._sin_signed[positions][:, None, :]
            x = self._layers(x, segs, cos_b, sin_b, masks, qpads, offs, ns, starts, aws, kends, gw)
        for seg, n in zip(segs, ns):
            seg.kv.length += n
        logits = lm._head(lm._rms(x, lm.norm))  # [gw, V]: the head runs on every row of the pass
        if lm.head_ids is not None:
            full = logits.new_full((gw, lm.vocab_size), float("-inf"), dtype=torch.float32)
            full[:, lm.head_ids] = logits.float()
            logits = full
        logits = logits.float()
        return [logits[o : o + n] for o, n in zip(offs, ns)]

    def _layers(self, x, segs, cos_b, sin_b, masks, qpads, offs, ns, starts, aws, kends, gw) -> torch.Tensor:
        """The packed pass's layer loop in ATen ops (where the compiled loop did not build)."""
        lm = self.fast
        hd, nkv, g, heads = lm.head_dim, lm.n_kv, lm.group, lm.n_heads
        q_dim = heads * hd
        qk_dim = q_dim + nkv * hd
        half = hd // 2
        for li, (w_in, w_qkv, w_o, w_post, w_gu, w_down) in enumerate(lm.layers):
            h = lm._rms(x, w_in)
            qkv = w_qkv(h)
            qk = qkv[:, :qk_dim].view(gw, heads + nkv, hd)
            qk = qk * cos_b + qk.roll(half, dims=-1) * sin_b
            q = qk[:, :heads].transpose(0, 1)  # [heads, gw, hd]
            k = qk[:, heads:].transpose(0, 1)  # [kv, gw, hd]
            v = qkv[:, qk_dim:].view(gw, nkv, hd).transpose(0, 1)
            att = torch.zeros(gw, q_dim, dtype=x.dtype)
            for seg, mask, qpad, off, n, start, aw, kend in zip(segs, masks, qpads, offs, ns, starts, aws, kends):
                kc, vc = seg.kv.k[li], seg.kv.v[li]
                kc[:, :, start : start + n] = k[:, off : off + n].transpose(1, 2)
                vc[:, start : start + n] = v[:, off : off + n]
                qs = q[:, off : off + n]
                if aw > n:
                    qs = torch.cat([qs, qpad], dim=1)  # [heads, aw, hd]
                if lm.attention == "sdpa":
                    keys = kc[:, :, :kend].transpose(1, 2)
                    allowed = mask[0, :aw] == 0  # [aw, kend]
                    a = F.scaled_dot_product_attention(qs[None], keys[None], vc[None, :, :kend], attn_mask=allowed,
                                                       enable_gqa=True)[0]  # [heads, aw, hd]
                    att[off : off + n] = a[:, :n].transpose(0, 1).reshape(n, q_dim)
                else:
                    a = attend(qs.reshape(nkv, g * aw, hd), kc[:, :, :kend], vc[:, :kend], mask, lm.scale)
                    att[off : off + n] = a.view(heads, aw, hd)[:, :n].transpose(0, 1).reshape(n, q_dim)
            x = x + w_o(att)
            h = lm._rms(x, w_post)
            gu = w_gu(h)
            inter = gu.shape[-1] // 2
            x = x + w_down(F.silu(gu[:, :inter]) * gu[:, inter:])
        return x

