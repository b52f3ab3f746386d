"""A lean, batch-invariant decode/verify forward for Llama-architecture models (SmolLM2).

Job: run ``n`` new tokens (1 for a vanilla step, ``k+1`` for a verify pass, hundreds for
a prefill) through the model with a static KV cache, so that **row i of any pass is
bit-for-bit the logits a one-token pass at the same position produces**. That is what
makes greedy speculative decoding emit exactly vanilla greedy's tokens at the fast
precision (bf16), by construction rather than by luck.

How the invariance is kept (each point is tested bitwise in
``tests/token_spec/test_batch_invariance.py``):

* GEMMs: a BLAS picks its kernel (and so its reduction order) by the shape of the
  call, so row i of ``x @ W.T`` can change with the number of rows. Every pass of
  ``n <= PAD_WIDTH`` rows is padded with dummy rows to a width from which on the
  kernels are row-invariant: measured once per thread count by ``row_invariant_width``
  (on this project's AMD EPYC with AVX512-BF16: bf16 needs 2 rows, because only the
  1536-wide down projection takes another kernel for a single row; fp32 GEMMs run
  through oneDNN, which needs 2 rows, where MKL's GEMM needs 4: it takes GEMV / small-M
  paths below that, see ``Dense``), or always ``PAD_WIDTH`` with
  ``pad_mode="full"``. Dummy rows' results are dropped.
* Attention (the Python loop; the compiled loop's attention kernel computes each query
  row alone over its visible keys, see ``token_spec.native_layers``): where the CPU's
  batched matmuls are not row-invariant (probed once per
  thread count by ``attention_row_invariant``; on this project's AMD EPYC they are, at
  1 and 2 threads), the queries of a short pass are padded to ``PAD_WIDTH`` rows, so
  every pass runs its attention matmuls at one shape. Each query row's softmax and value sum
  run over the cached keys of the pass, with the row's future positions masked to
  ``-inf`` (exp = exactly 0). The
  key length of the pass is rounded up to a multiple of ``KEY_BLOCK``, with masked
  keys past the end, so passes that contain the same position mostly see the same
  key length; a different length only appends exact zeros to the reductions.
* RMSNorm, RoPE, SiLU, residual adds are row-wise elementwise ops or reductions over
  the hidden size of one row: independent of the other rows.
* Rollback is a length change only: cached K/V at positions ``< length`` are never
  rewritten by a later pass (a pass writes at positions ``>= its start``), so after
  ``truncate(L)`` the cache holds exactly what a fresh session over the first ``L``
  tokens holds.

The model's weights are re-laid once: fused QKV (``[q; k; v]`` rows) and fused
gate/up projections, contiguous, in the compute dtype; the LM head shares the
embedding (tied, as in SmolLM2). The reference HF module is not used at run time.

The kernels and their row-invariance probes are ``token_spec.exact_kernels``; a
sequence's KV cache and the feature tap are ``token_spec.fast_session``. Every name of
``__all__`` is importable from here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .exact_kernels import (KEY_BLOCK, PAD_WIDTH, Dense, attend, attention_row_invariant, default_dtype,
                            row_invariant_width, supports_bf16)
from .fast_session import CACHE_STEP, FastSession, FeatureTap

__all__ = ["FastLlama", "FastSession", "FeatureTap", "ModelShape", "Dense", "PAD_WIDTH", "KEY_BLOCK", "supports_bf16", "default_dtype",
           "row_invariant_width", "attention_row_invariant", "attend"]


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a Llama-architecture model, read from its HF config (the one place
    that reads them): hidden size, query and key/value heads, head dim (and the group of
    query heads per key/value head), RMSNorm epsilon, vocabulary, layers, positions, and
    the RoPE base (default RoPE only)."""

    hidden: int
    n_heads: int
    n_kv: int
    head_dim: int
    eps: float
    vocab_size: int
    n_layers: int
    max_positions: int
    rope_theta: float

    @property
    def group(self) -> int:
        return self.n_heads // self.n_kv

    @classmethod
    def from_config(cls, cfg) -> ModelShape:
        hidden, heads = int(cfg.hidden_size), int(cfg.num_attention_heads)
        rope = getattr(cfg, "rope_parameters", None) or {}
        if rope.get("rope_type", "default") not in ("default", None):
            raise ValueError(f"FastLlama supports default RoPE only, got {rope.get('rope_type')!r}")
        return cls(hidden=hidden, n_heads=heads, n_kv=int(cfg.num_key_value_heads),
                   head_dim=int(getattr(cfg, "head_dim", None) or hidden // heads), eps=float(cfg.rms_norm_eps),
                   vocab_size=int(cfg.vocab_size), n_layers=int(cfg.num_hidden_layers),
                   max_positions=int(getattr(cfg, "max_position_embeddings", 8192)),
                   rope_theta=float(rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))))


def _dense_linears(layer: torch.nn.Module, dtype: torch.dtype, kernel: str = "auto") -> tuple:
    """A decoder layer's (qkv, o, gate_up, down) dense GEMMs in ``dtype`` (q, k, v and
    gate, up fused), on ``Dense``'s ``kernel``."""
    a, mlp = layer.self_attn, layer.mlp
    weights = (torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]), a.o_proj.weight,
               torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]), mlp.down_proj.weight)
    return tuple(Dense(w, dtype, kernel) for w in weights)


class FastLlama:
    """The decode/verify forward of a ``LlamaForCausalLM`` (tied embeddings), re-laid.

    ``FastLlama(hf_model, dtype)``; ``session()`` opens a KV cache; ``forward(session,
    ids, logits_rows)`` runs ids through it.

    exact: pad short passes so that every width 1..PAD_WIDTH gives bit-identical rows
    (see ``gemm_width``); ``exact=False`` runs every pass at its own width (faster, not
    batch-invariant; the negative control of the invariance test).
    pad_mode: "probe" (pad to the smallest width the CPU's GEMM kernels are measured
    row-invariant from) or "full" (always PAD_WIDTH rows).
    pad_attention: "probe" (pad the attention's query rows to PAD_WIDTH only where the
    CPU's attention matmuls are measured not row-invariant, see ``attention_padded``),
    True (always pad) or False (never).
    linears: per layer (qkv, o, gate_up, down) callables replacing the dense GEMMs (e.g.
    Q4_1 or int8 weights); head: a callable replacing the dense LM head GEMM.
    wide_dense: passes wider than PAD_WIDTH (a draft's catch-up over a prompt) run dense
    GEMMs in ``dtype`` instead of ``linears`` / ``head``: the int8 draft's GEMMs cost twice
    the dense ones over hundreds of rows. Only with exact=False (the rows of a wide pass
    then differ from a narrow pass's in the last bits).
    dense_kernel: ``Dense``'s kernel for the dense GEMMs and LM head ("auto": in bf16 the
    compiled ``bf16_mm`` where it builds, else BLAS; "blas", "onednn", "native").
    native: run the layer loop in C++ (``token_spec.native_layers``: fused row kernels
    between the GEMMs, each row computed alone, so row-invariant by construction; its
    attention reads each row's visible keys only, no mask or query padding). Its logits
    differ from the Python loop's ATen ops within a small tolerance, not bitwise; each
    loop is exact on its own. "auto" (the default) = where the extension builds, else the
    Python loop; True = required; False = the Python loop. ``self.native`` says which
    runs (eager attention only).
    """

    def __init__(self, hf_model: torch.nn.Module, dtype: torch.dtype = torch.bfloat16, *,
                 exact: bool = True, pad_mode: str = "probe", pad_attention: bool | str = "probe",
                 attention: str = "eager", key_block: int = KEY_BLOCK, linears: list | None = None,
                 head=None, native: bool | str = "auto", wide_dense: bool = False,
                 dense_kernel: str = "auto") -> None:
        cfg = hf_model.config
        custom_head = head
        if getattr(cfg, "model_type", "llama") != "llama":
            raise ValueError(f"FastLlama runs Llama-architecture models, got model_type={cfg.model_type!r}")
        if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
            raise ValueError("FastLlama supports Llama without attention/MLP biases (as SmolLM2)")
        if dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"dtype must be torch.bfloat16 or torch.float32, got {dtype}")
        self.dtype = dtype
        self.source = hf_model  # the module the weights were laid out from (twins, tests)
        if pad_mode not in ("probe", "full"):
            raise ValueError(f"pad_mode must be 'probe' or 'full', got {pad_mode!r}")
        if attention not in ("eager", "sdpa"):
            raise ValueError(f"attention must be 'eager' or 'sdpa', got {attention!r}")
        self.attention = attention
        self.exact = bool(exact)
        self.pad_mode = pad_mode
        self.pad_width = PAD_WIDTH
        if pad_attention not in (True, False, "probe"):
            raise ValueError(f"pad_attention must be True, False or 'probe', got {pad_attention!r}")
        self.pad_attention = pad_attention
        self._attention_probed: dict[int, bool] = {}
        self.key_block = max(1, int(key_block))
        shape = self.shape = ModelShape.from_config(cfg)
        self.hidden, self.n_heads, self.n_kv = shape.hidden, shape.n_heads, shape.n_kv
        self.head_dim, self.group, self.eps = shape.head_dim, shape.group, shape.eps
        if (linears is not None or custom_head is not None) and dtype != torch.bfloat16:
            raise ValueError("custom (e.g. Q4_1, int8) linears run with bf16 activations: pass dtype=torch.bfloat16")
        self.weights = "float" if linears is None else "custom"
        self._probed: dict[int, int] = {}
        self.vocab_size, self.n_layers, self.max_positions = shape.vocab_size, shape.n_layers, shape.max_positions
        theta = shape.rope_theta

        m = hf_model.model
        with torch.no_grad():
            self.embed = m.embed_tokens.weight.detach().to(dtype).contiguous()  # [V, H]
            head = hf_model.get_output_embeddings()
            # A draft's SubsetHead (token_spec.draft_model) scores only `vocab_ids`; every
            # other token gets -inf. Otherwise the head is the (tied) embedding.
            self.head_ids = getattr(head, "vocab_ids", None)
            if self.head_ids is not None:
                self.head_ids = self.head_ids.long()
                self.lm_head = head.weight.detach()[self.head_ids].to(dtype).contiguous()
            elif head.weight.data_ptr() == m.embed_tokens.weight.data_ptr():
                self.lm_head = self.embed
            else:
                self.lm_head = head.weight.detach().to(dtype).contiguous()
            self.layers = []
            for i, layer in enumerate(m.layers):
                # custom linears: e.g. Q4_1 GEMMs (token_spec.q4_weights)
                qkv, o, gu, down = linears[i] if linears is not None else _dense_linears(layer, dtype, dense_kernel)
                self.layers.append((
                    layer.input_layernorm.weight.detach().float().contiguous(), qkv, o,
                    layer.post_attention_layernorm.weight.detach().float().contiguous(), gu, down,
                ))
            self.norm = m.norm.weight.detach().float().contiguous()  # norms scale in fp32
            self._head = Dense(self.lm_head, dtype, dense_kernel) if custom_head is None else custom_head
            self._wide = None  # (layers, head) of the passes wider than PAD_WIDTH, where they differ
            if wide_dense and (linears is not None or custom_head is not None):
                if exact:
                    raise ValueError("wide_dense changes a wide pass's GEMMs: it needs exact=False")
                wide = []
                for (ln_in, _, _, ln_post, _, _), layer in zip(self.layers, m.layers):
                    qkv, o, gu, down = _dense_linears(layer, dtype, dense_kernel)
                    wide.append((ln_in, qkv, o, ln_post, gu, down))
                self._wide = (wide, Dense(self.lm_head, dtype, dense_kernel))
        # RoPE tables as HF Llama builds them: angles in fp32, cos/sin cast to the dtype.
        inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim))
        self._inv_freq = inv_freq
        self._cos = self._sin_signed = torch.empty(0, self.head_dim)
        self._rope_upto(CACHE_STEP)
        self.scale = 1.0 / math.sqrt(self.head_dim)
        if native not in (True, False, "auto"):
            raise ValueError(f"native must be True, False or 'auto', got {native!r}")
        self.tap = None  # a FeatureTap: hidden states of chosen layers, per position (EAGLE-3 heads read them)
        self._run_layers = None  # the compiled loop (a builtin function: copy/deepcopy keep it as is)
        self._run_layers_packed = None  # its packed multi-sequence twin (token_spec.packed)
        if native and attention == "eager":
            from . import native_layers

            module = native_layers.load()
            self._run_layers = None if module is None else module.run_layers
            self._run_layers_packed = None if module is None else module.run_layers_packed
            if module is None and native is True:
                raise RuntimeError(f"the native layer loop did not build: {native_layers.build_error()}")
        elif native is True:
            raise ValueError("the native layer loop runs eager attention only (attention='eager')")

    @property
    def native(self) -> bool:
        """True when the decoder layers run in the compiled loop (``token_spec.native_layers``)."""
        return self._run_layers is not None

    # -- tables -------------------------------------------------------------------------
    def _rope_upto(self, n: int) -> None:
        if self._cos.shape[0] >= n:
            return
        n = max(n, 2 * self._cos.shape[0])
        freqs = torch.outer(torch.arange(n, dtype=torch.float32), self._inv_freq)
        emb = torch.cat([freqs, freqs], dim=-1)  # [n, hd]
        sin = emb.sin().to(self.dtype)
        self._cos = emb.cos().to(self.dtype)
        # rotate_half(t) * sin = [-t2, t1] * sin = roll(t, half) * [-sin1, sin2]: negating
        # the first half of sin instead of t2 is the same product bit for bit (a sign flip)
        half = self.head_dim // 2
        self._sin_signed = torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)

    # -- padding plan -------------------------------------------------------------------
    def gemm_width(self) -> int:
        """Rows every short pass runs its GEMMs at (1 = no padding).

        exact=False: 1. pad_mode="full": PAD_WIDTH (one GEMM shape for every pass, the
        kernel-independent choice). pad_mode="probe": the smallest P such that, for each
        of this model's weight matrices, a GEMM over M rows gives bit-for-bit the first
        M rows of a GEMM over PAD_WIDTH rows for every M in P..PAD_WIDTH (measured once
        per thread count; the kernel a BLAS picks depends on the shape and the threads,
        never on the values)."""
        if not self.exact:
            return 1
        if self.pad_mode == "full":
            return self.pad_width
        threads = torch.get_num_threads()
        width = self._probed.get(threads)
        if width is None:
            width = max(row_invariant_width(f, self.pad_width, rows=32 if f is self._head else 64)
                        for f in self._gemm_weights())
            self._probed[threads] = width
        return width

    def attention_padded(self) -> bool:
        """Whether a short pass pads its attention's query rows to PAD_WIDTH.

        exact=False: never. pad_attention True / False: as told. "probe": pad unless
        ``attention_row_invariant`` measures the eager attention matmuls row-invariant
        at this thread count from ``gemm_width()`` rows on, the fewest rows any exact pass
        has (once per count; sdpa is always padded: its kernels are not row-invariant in
        bf16, measured). Unpadded, a one-token step computes ``gemm_width()`` query rows
        per head instead of 16 (fp32 here: the batched matmuls differ at 1 row only, so
        the 2-row GEMM padding is enough)."""
        if not self.exact:
            return False
        if self.pad_attention != "probe":
            return bool(self.pad_attention)
        if self.attention == "sdpa":
            return True
        threads = torch.get_num_threads()
        invariant = self._attention_probed.get(threads)
        if invariant is None:
            invariant = attention_row_invariant(self.dtype, self.n_kv, self.group, self.head_dim, self.scale,
                                                self.pad_width, self.key_block, min_width=self.gemm_width())
            self._attention_probed[threads] = invariant
        return not invariant

    def _gemm_weights(self) -> list:
        first = self.layers[0]
        return [first[1], first[2], first[4], first[5], self._head]

    # -- sessions -----------------------------------------------------------------------
    def session(self) -> FastSession:
        """An empty KV cache (length 0)."""
        return FastSession(self)

    def start(self, prompt_ids: Sequence[int] | torch.Tensor) -> FastSession:
        """``CausalLM.start``: prefill ``prompt_ids`` (may be empty) into a new session."""
        session = FastSession(self)
        session.prefill(prompt_ids)
        return session

    # -- the forward --------------------------------------------------------------------
    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        # y = w * x / sqrt(mean(x^2) + eps), the mean over one row's hidden size, in fp32
        return F.rms_norm(x.float(), (self.hidden,), w, self.eps).to(self.dtype)

    def forward(self, cache: FastSession, ids: torch.Tensor, logits_rows: int | None = None) -> torch.Tensor:
        """ids [n] at positions cache.length.. -> logits [rows, V] in fp32 (the last
        ``logits_rows`` rows; all n when None). The cache grows by n."""
        n = int(ids.numel())
        start = cache.length
        end = start + n
        cache._reserve(end)
        self._rope_upto(end + self.pad_width)
        pad = self.pad_width
        # gemm rows (gw) and attention query rows (aw) of a short pass (n <= PAD_WIDTH)
        gw = max(n, self.gemm_width()) if n <= pad else n
        rows = ids
        if gw > n:  # pad with token 0; padded rows sit at positions end..start+gw-1
            rows = torch.cat([ids, ids.new_zeros(gw - n)])
        cos, sin = self._cos[start : start + gw], self._sin_signed[start : start + gw]  # [gw, hd] views
        hd, nkv, g = self.head_dim, self.n_kv, self.group
        q_dim, kv_dim = self.n_heads * hd, nkv * hd
        x = F.embedding(rows, self.embed)  # [gw, H]
        layers, head = self._wide if (self._wide is not None and n > pad) else (self.layers, self._head)
        tap = self.tap
        taps = tap.layers if tap is not None else ()
        tapped: list[torch.Tensor] = []
        if self._run_layers is not None:
            # the compiled loop: its attention reads each row's visible keys only (no mask,
            # no query padding); padded rows run the GEMMs and norms only
            lo = 0
            for hi in [li + 1 for li in taps] + [self.n_layers]:  # one call per segment, ending after a tapped layer
                if hi > lo:
                    x = self._run_layers(x, layers[lo:hi], cache.k[lo:hi], cache.v[lo:hi], cos, sin, start, n,
                                         self.n_heads, nkv, hd, self.eps, self.scale)
                lo = hi
                if len(tapped) < len(taps):
                    tapped.append(x)
            return self._finish(cache, x, n, gw, end, start, logits_rows, tapped, head)
        aw = max(gw, pad) if (n <= pad and self.attention_padded()) else gw
        pos = torch.arange(start, start + aw)
        # Keys visible to this pass: positions < kend, rounded up to KEY_BLOCK; row r sees
        # keys <= start + r (causal), everything else masked to -inf.
        kend = min(cache.capacity, -(-(start + aw) // self.key_block) * self.key_block)
        key_pos = torch.arange(kend)
        # additive mask in the compute dtype (0 and -inf are exact in bf16), per kv group
        mask = torch.zeros(aw, kend, dtype=self.dtype)
        mask.masked_fill_(key_pos[None, :] > pos[:, None], float("-inf"))
        mask = mask.repeat(g, 1)[None]  # [1, g*aw, kend]: the g query heads of a kv head, stacked
        qpad = torch.zeros(self.n_heads, aw - gw, hd, dtype=self.dtype) if aw > gw else None

        if self.attention == "sdpa":
            # bool mask, True = attend; [aw, kend] broadcast over heads
            allowed = key_pos[None, :] <= pos[:, None]
        cos_b, sin_b = cos[:, None, :], sin[:, None, :]  # broadcast over heads
        qk_dim = q_dim + kv_dim
        half = hd // 2
        for li, (w_in, w_qkv, w_o, w_post, w_gu, w_down) in enumerate(layers):
            h = self._rms(x, w_in)
            qkv = w_qkv(h)  # [gw, q+2kv]
            # RoPE on q and k heads at once (HF's rotate_half convention): t*cos + [-t2, t1]*sin,
            # computed as t*cos + roll(t, half) * [-sin1, sin2] (the same products, fewer ops)
            qk = qkv[:, :qk_dim].view(gw, self.n_heads + nkv, hd)
            qk = qk * cos_b + qk.roll(half, dims=-1) * sin_b
            q = qk[:, : self.n_heads].transpose(0, 1)  # [heads, gw, hd]
            k = qk[:, self.n_heads :].transpose(0, 1)  # [kv, gw, hd]
            v = qkv[:, qk_dim:].view(gw, nkv, hd).transpose(0, 1)
            if qpad is not None:
                q = torch.cat([q, qpad], dim=1)  # [heads, aw, hd]
            kc, vc = cache.k[li], cache.v[li]  # keys [kv, hd, cap], values [kv, cap, hd]
            # Padded rows are written too (positions >= end): they are beyond the
            # session's length, so they are masked for every real row and overwritten
            # before they are ever read as real keys.
            kc[:, :, start : start + gw] = k.transpose(1, 2)  # keys cached transposed: [kv, hd, cap]
            vc[:, start : start + gw] = v
            keys_t, vals = kc[:, :, :kend], vc[:, :kend]  # [kv, hd, T], [kv, T, hd]
            if self.attention == "sdpa":
                keys = keys_t.transpose(1, 2)  # [kv, T, hd]
                att = F.scaled_dot_product_attention(q[None], keys[None], vals[None], attn_mask=allowed,
                                                     enable_gqa=True)[0]  # [heads, aw, hd]
                att = att[:, :gw].transpose(0, 1).reshape(gw, q_dim)
            else:
                qg = q.reshape(nkv, g * aw, hd)  # heads of one kv group stacked: [kv, g*aw, hd]
                att = attend(qg, keys_t, vals, mask, self.scale)  # [kv, g*aw, hd]
                att = att.view(self.n_heads, aw, hd)[:, :gw].transpose(0, 1).reshape(gw, q_dim)
            x = x + w_o(att)
            h = self._rms(x, w_post)
            gu = w_gu(h)  # [gw, 2I]
            inter = gu.shape[-1] // 2
            x = x + w_down(F.silu(gu[:, :inter]) * gu[:, inter:])
            if li in taps:
                tapped.append(x)
        return self._finish(cache, x, n, gw, end, start, logits_rows, tapped, head)

    def _finish(self, cache: FastSession, x: torch.Tensor, n: int, gw: int, end: int, start: int,
                logits_rows: int | None, tapped: list, head) -> torch.Tensor:
        """The pass's end: taps record, the cache grows to ``end``, the LM head runs."""
        tap = self.tap
        if tap is not None:
            tap.record(cache, start, [t[:n] for t in tapped])
        cache.length = end
        keep = n if logits_rows is None else max(1, min(int(logits_rows), n))
        if gw == n:  # unpadded (e.g. a prefill): the head runs on the kept rows only
            logits = head(self._rms(x[n - keep : n], self.norm))
        else:  # padded: the head (a GEMM) runs on all gw rows, so row i never depends on `keep`
            logits = head(self._rms(x, self.norm))[n - keep : n]
        if self.head_ids is not None:  # subset head: full-width rows, -inf outside the subset
            full = logits.new_full((keep, self.vocab_size), float("-inf"), dtype=torch.float32)
            full[:, self.head_ids] = logits.float()
            return full
        return logits.float()
