"""EAGLE-3-style draft head for SmolLM2-135M-Instruct (Li et al. 2025, "EAGLE-3: Scaling up
Inference Acceleration of Large Language Models via Training-Time Test", arXiv 2503.01840).

Mechanism:

* **Features, fused.** The target's hidden states after a low, a middle and a high decoder
  layer (outputs of layers 1, 14 and 27 of 30: EAGLE-3's ``hidden_states[2]``,
  ``[L // 2]`` and ``[-3]``) at position t are concatenated and projected to the model
  width: g_t = fc([h_low, h_mid, h_high]). The target computes them anyway; a
  ``token_spec.fast_forward.FeatureTap`` copies them out of every target pass (reading
  only: the target's logits are bitwise unchanged).
* **One decoder layer.** Its input at position t is [norm(embed(x_{t+1})), norm(g_t)]
  (the embedding of the token that follows, through the target's own embedding): the
  attention's q/k/v read the concatenation (2 x width), the residual stream starts from
  g_t, then an MLP; a final norm and the target's tied LM head, restricted to a reduced
  draft vocabulary (the 8192 ids of the distilled draft model's subset), give logits for
  x_{t+2}. Ids outside the subset get probability 0 and full-width rows are returned, so
  ids map back exactly and the target still verifies every proposal. No feature
  regression: the only loss is on the next-token distribution.
* **Drafting.** Step 1 reads the real feature of the last verified position; step j > 1
  reads the layer's own output hidden state of step j - 1 in place of a target feature,
  with the embedding of the token drafted at step j - 1. The layer keeps a KV cache over
  the verified positions (rolled back to them every round) plus the round's own steps.
* **Training-time test.** Training (``scripts/build_eagle3.py``) unrolls ``steps`` draft
  steps over whole windows in parallel: step j's query at position t attends to the real
  keys at positions <= t - j + 1 and to its own chain's keys of steps 2..j (a diagonal
  per step), exactly the cache it would have at inference, and its input hidden state is
  the head's own output from step j - 1 (``unroll``). The loss is the forward KL to the
  target's next-token distribution (its top-k) at every step.

Exactness does not depend on the head: ``Eagle3Drafter`` is an ordinary drafter (greedy:
argmax; sampling: it returns the warped q rows it sampled from), verified by
``token_spec.sampler.verify``. Weights: ``token_spec/data/eagle3-smollm2.safetensors``
(fp16, the head's own parameters + the vocabulary ids); the embedding / LM head are the
target's, attached at load time.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .drafters import Draft, draw
from .sampling import SamplingParams

__all__ = ["Eagle3Head", "Eagle3Drafter", "install_tap", "attention_dims", "load_eagle3", "default_eagle3_path",
           "TAP_LAYERS", "Eagle3WeightsMissing",
           "REBUILD_COMMAND"]

DATA_DIR = Path(__file__).resolve().parent / "data"
TAP_LAYERS = (1, 14, 27)
REBUILD_COMMAND = "python scripts/build_eagle3.py"


class Eagle3WeightsMissing(FileNotFoundError):
    """The EAGLE-3 head's weights file is not there (rebuild it with scripts/build_eagle3.py)."""


def default_eagle3_path() -> Path:
    return DATA_DIR / "eagle3-smollm2.safetensors"


def _rope(x: torch.Tensor, pos: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """HF Llama's rotate-half RoPE; x [..., T, hd], pos [T]."""
    ang = pos.float()[:, None] * inv_freq[None]  # [T, hd/2]
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


def attention_dims(module: nn.Module, config) -> tuple[int, int]:
    """Set a draft head's ``hidden``, ``n_heads``, ``n_kv``, ``head_dim``, ``eps`` and RoPE
    ``inv_freq`` buffer from the target's config; returns (hidden, intermediate size)."""
    h = int(config.hidden_size)
    module.hidden = h
    module.n_heads = int(config.num_attention_heads)
    module.n_kv = int(config.num_key_value_heads)
    module.head_dim = int(getattr(config, "head_dim", None) or h // module.n_heads)
    module.eps = float(config.rms_norm_eps)
    rope = getattr(config, "rope_parameters", None) or {}
    theta = float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0)))
    hd = module.head_dim
    module.register_buffer("inv_freq", 1.0 / (theta ** (torch.arange(0, hd, 2).float() / hd)), persistent=False)
    return h, int(config.intermediate_size)


class Eagle3Head(nn.Module):
    """The head's own parameters; ``embed`` (the target's token embedding [V, H], frozen,
    not owned) and ``vocab_ids`` (the reduced output vocabulary) are attached."""

    def __init__(self, config, embed: torch.Tensor, vocab_ids: torch.Tensor, tap_layers=TAP_LAYERS):
        super().__init__()
        self.tap_layers = tuple(int(li) for li in tap_layers)
        n_features = len(self.tap_layers)
        h, inter = attention_dims(self, config)
        self.fc = nn.Linear(n_features * h, h, bias=False)
        self.embed_norm = nn.Parameter(torch.ones(h))
        self.feature_norm = nn.Parameter(torch.ones(h))
        self.qkv = nn.Linear(2 * h, (self.n_heads + 2 * self.n_kv) * self.head_dim, bias=False)
        self.o = nn.Linear(self.n_heads * self.head_dim, h, bias=False)
        self.post_norm = nn.Parameter(torch.ones(h))
        self.gate_up = nn.Linear(h, 2 * inter, bias=False)
        self.down = nn.Linear(inter, h, bias=False)
        self.norm = nn.Parameter(torch.ones(h))
        self.vocab_size = int(embed.shape[0])
        ids = torch.as_tensor(vocab_ids).reshape(-1).long()
        self.register_buffer("vocab_ids", ids.to(torch.int32), persistent=True)
        self.embed = embed  # not a parameter or buffer: the target's, shared
        self.register_buffer("head_rows", embed.detach()[ids].float().clone(), persistent=False)

    # -- pieces -------------------------------------------------------------------------
    def _rms(self, x, w):
        return F.rms_norm(x, (self.hidden,), w, self.eps)

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """[..., 3H] target features -> g [..., H]."""
        return self.fc(features)

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.embed).float()

    def _qkv(self, emb, h, pos):
        """q [B, heads, T, hd], k/v [B, kv, T, hd] for inputs emb, h [B, T, H] at positions pos [T]."""
        b, t, _ = h.shape
        x = torch.cat([self._rms(emb, self.embed_norm), self._rms(h, self.feature_norm)], -1)
        qkv = self.qkv(x)
        nq, nk, hd = self.n_heads * self.head_dim, self.n_kv * self.head_dim, self.head_dim
        q = qkv[..., :nq].view(b, t, self.n_heads, hd).transpose(1, 2)
        k = qkv[..., nq : nq + nk].view(b, t, self.n_kv, hd).transpose(1, 2)
        v = qkv[..., nq + nk :].view(b, t, self.n_kv, hd).transpose(1, 2)
        return _rope(q, pos, self.inv_freq), _rope(k, pos, self.inv_freq), v

    def _finish(self, h, att):
        """Residual from the input hidden h, then the MLP. att [B, T, heads*hd]."""
        x = h + self.o(att)
        gu = self.gate_up(self._rms(x, self.post_norm))
        inter = gu.shape[-1] // 2
        return x + self.down(F.silu(gu[..., :inter]) * gu[..., inter:])

    def sub_logits(self, out: torch.Tensor) -> torch.Tensor:
        """Logits over the reduced vocabulary [..., len(vocab_ids)]."""
        return F.linear(self._rms(out, self.norm), self.head_rows)

    def full_logits(self, out: torch.Tensor) -> torch.Tensor:
        sub = self.sub_logits(out).float()
        full = sub.new_full((*sub.shape[:-1], self.vocab_size), float("-inf"))
        full[..., self.vocab_ids.long()] = sub
        return full

    def _group(self, t):  # [B, kv, T, hd] -> [B, heads, T, hd]
        return t.repeat_interleave(self.n_heads // self.n_kv, dim=1)

    # -- training: the unrolled draft over whole windows ----------------------------------
    def unroll(self, features: torch.Tensor, next_ids: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """Training-time test. features [B, T, 3H] (the target's at positions 0..T-1),
        next_ids [B, T] (the token after each position). Returns per step j = 1..steps the
        head's outputs [B, T, H]; step j's row t is the chain rooted at position t - j + 1
        (rows t < j - 1 have no root and are garbage), which predicts the token after
        next_ids[:, t]."""
        b, t, _ = features.shape
        pos = torch.arange(t)
        emb = self.embed_tokens(next_ids)
        h = self.fuse(features)
        scale = 1.0 / math.sqrt(self.head_dim)
        outs: list[torch.Tensor] = []
        keys: list[tuple[torch.Tensor, torch.Tensor]] = []  # per step: k, v [B, heads, T, hd]
        for j in range(1, steps + 1):
            if j > 1:  # the previous step's own output, one position back (its chain's parent)
                h = torch.cat([torch.zeros_like(outs[-1][:, :1]), outs[-1][:, :-1]], 1)
            q, k, v = self._qkv(emb, h, pos)
            k, v = self._group(k), self._group(v)
            keys.append((k, v))
            k1, v1 = keys[0]
            s_real = (q @ k1.transpose(-1, -2)) * scale  # [B, heads, T, T]
            allowed = pos[None, :] <= (pos[:, None] - (j - 1))
            s_real = s_real.masked_fill(~allowed, float("-inf"))
            diag_s, diag_v = [], []
            for i in range(2, j + 1):  # the chain's own step-i key sits j - i positions back
                ki, vi = keys[i - 1]
                shift = j - i
                ks = torch.cat([ki.new_zeros(ki[:, :, :shift].shape), ki[:, :, : t - shift]], 2) if shift else ki
                vs = torch.cat([vi.new_zeros(vi[:, :, :shift].shape), vi[:, :, : t - shift]], 2) if shift else vi
                diag_s.append((q * ks).sum(-1, keepdim=True) * scale)  # [B, heads, T, 1]
                diag_v.append(vs)
            scores = torch.cat([s_real] + diag_s, -1)
            # rows with no real key at all (t < j - 1) would be all -inf: give them a 0 row
            scores = torch.where(torch.isinf(scores).all(-1, keepdim=True), torch.zeros_like(scores), scores)
            probs = torch.softmax(scores.float(), -1).to(q.dtype)
            att = probs[..., :t] @ v1
            for i, vs in enumerate(diag_v):
                att = att + probs[..., t + i : t + i + 1] * vs
            att = att.transpose(1, 2).reshape(b, t, -1)
            outs.append(self._finish(h, att))
        return outs

    # -- inference: one sequence with a KV cache ----------------------------------------
    def step(self, cache: dict, emb: torch.Tensor, h: torch.Tensor, start: int) -> torch.Tensor:
        """Rows emb, h [T, H] at positions start..start+T-1 (causal among themselves, after
        the cache's first ``start`` positions). Returns the outputs [T, H]; the cache keeps
        k/v [kv, cap, hd] and is valid up to start + T."""
        t = h.shape[0]
        pos = torch.arange(start, start + t)
        q, k, v = self._qkv(emb[None], h[None], pos)
        q, k, v = q[0], k[0], v[0]
        need = start + t
        if cache.get("k") is None or cache["k"].shape[1] < need:
            cap = max(need, 2 * (cache["k"].shape[1] if cache.get("k") is not None else 256))
            nk = k.new_zeros(self.n_kv, cap, self.head_dim)
            nv = v.new_zeros(self.n_kv, cap, self.head_dim)
            if cache.get("k") is not None:
                old = cache["k"].shape[1]
                nk[:, :old], nv[:, :old] = cache["k"], cache["v"]
            cache["k"], cache["v"] = nk, nv
        cache["k"][:, start:need], cache["v"][:, start:need] = k, v
        keys, vals = self._group(cache["k"][None, :, :need])[0], self._group(cache["v"][None, :, :need])[0]
        scores = (q @ keys.transpose(-1, -2)) / math.sqrt(self.head_dim)  # [heads, T, need]
        kpos = torch.arange(need)
        scores = scores.masked_fill(kpos[None, None, :] > pos[None, :, None], float("-inf"))
        att = (torch.softmax(scores.float(), -1).to(q.dtype) @ vals).transpose(0, 1).reshape(t, -1)
        return self._finish(h[None], att[None])[0]


def _read(path: Path):
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    return tensors, {k: (json.loads(v) if v[:1] in "[{0123456789" else v) for k, v in meta.items()}


def save_eagle3(head: Eagle3Head, path: str | os.PathLike, metadata: dict | None = None) -> Path:
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: (v if k == "vocab_ids" else v.detach().to(torch.float16)).contiguous()
               for k, v in head.state_dict().items()}
    meta = {"format": "pt", "tap_layers": json.dumps(list(TAP_LAYERS))}
    for key, value in (metadata or {}).items():
        meta[key] = value if isinstance(value, str) else json.dumps(value)
    save_file(tensors, str(path), metadata=meta)
    return path


def load_eagle3(target, path: str | os.PathLike | None = None) -> Eagle3Head:
    """The shipped head with ``target``'s embedding (fp32 copy) attached; eval mode, fp32."""
    weights = Path(path) if path is not None else default_eagle3_path()
    if not weights.is_file():
        raise Eagle3WeightsMissing(f"EAGLE-3 head weights not found at {weights}; rebuild them with: {REBUILD_COMMAND}")
    tensors, meta = _read(weights)
    hf = target.model if hasattr(target, "model") else target
    embed = hf.get_input_embeddings().weight.detach().float()
    head = Eagle3Head(hf.config, embed, tensors["vocab_ids"])
    head.load_state_dict({k: v.float() if k != "vocab_ids" else v for k, v in tensors.items()}, strict=True)
    head.metadata = meta
    return head.eval().requires_grad_(False)


def install_tap(target, layers, who: str):
    """The ``FeatureTap`` on ``target``'s fast forward reading ``layers`` (installed there if
    it reads other layers or none); ``who`` names the drafter in the error without one."""
    from .fast_forward import FeatureTap

    fast = getattr(target, "fast", None)
    if fast is None:
        raise ValueError(f"{who} reads the target's hidden features from the fast forward: "
                         "load the target with load_target() (fast=True)")
    if fast.tap is None or fast.tap.layers != tuple(layers):
        fast.tap = FeatureTap(layers)
    return fast.tap


class Eagle3Drafter:
    """The EAGLE-3 head as a ``Drafter`` (and a step drafter for ``token_spec.dspark``).

    ``target``: a ``token_spec.target.Target`` on the fast forward; the drafter installs a
    ``FeatureTap`` on it (``target.fast.tap``), which every target pass fills. Each round:
    the head's cache is rolled back to the verified positions it still shares with the
    context, the newly verified positions are fed in one pass (real features, the next
    verified token), and then the head drafts step by step from its own hidden states."""

    def __init__(self, target, head: Eagle3Head, *, name: str = "eagle3") -> None:
        self.tap = install_tap(target, head.tap_layers, "Eagle3Drafter")
        self.target = target
        self.head = head
        self.name = name
        self.vocab_size = head.vocab_size
        self._cache: dict = {}
        self._ctx: list[int] = []  # the tokens behind the cache's real positions (+1: the next token)
        self._real = 0  # cache positions 0.._real-1 hold verified (real-feature) rows
        self._last: torch.Tensor | None = None  # the head's output at the newest position
        self._pos = 0  # that position

    def __deepcopy__(self, memo) -> Eagle3Drafter:
        """A fresh drafter on the same target and head (both shared: the tap is the target's)."""
        return Eagle3Drafter(self.target, self.head, name=self.name)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._cache, self._ctx, self._real, self._last = {}, [], 0, None

    def end(self, output_ids: Sequence[int]) -> None:
        self.begin(())

    @torch.inference_mode()
    def first_logits(self, context: Sequence[int]) -> torch.Tensor:
        ctx = [int(t) for t in context]
        n = len(ctx)
        if n < 2:  # no verified feature yet: a flat row (the schedule / caller drafts nothing)
            self._last = None
            return torch.zeros(self.vocab_size)
        # real row t reads the feature of position t and the token ctx[t + 1]: valid while
        # ctx[0..t+1] is unchanged
        common = 0
        limit = min(len(self._ctx), n)
        while common < limit and self._ctx[common] == ctx[common]:
            common += 1
        keep = min(self._real, max(common - 1, 0), n - 2)
        feats = self.tap.features(n - 1)[keep : n - 1]  # positions keep..n-2
        head = self.head
        out = head.step(self._cache, head.embed_tokens(torch.tensor(ctx[keep + 1 : n])), head.fuse(feats), keep)
        self._real, self._ctx = n - 1, ctx
        self._last, self._pos = out[-1], n - 2
        return head.full_logits(self._last)

    @torch.inference_mode()
    def next_logits(self, token: int) -> torch.Tensor:
        head = self.head
        self._pos += 1
        out = head.step(self._cache, head.embed_tokens(torch.tensor([int(token)])), self._last[None], self._pos)
        self._last = out[-1]
        return head.full_logits(self._last)

    def propose(self, context: Sequence[int], k: int, params: SamplingParams,
                generator: torch.Generator | None) -> Draft:
        if k <= 0 or len(context) < 2:
            return Draft(tokens=torch.empty(0, dtype=torch.long))
        logits = self.first_logits(context)
        tokens, rows = [], []
        for i in range(k):
            tok, q = draw(logits, params, generator)
            if q is not None:
                rows.append(q)
            tokens.append(tok)
            if i < k - 1:
                logits = self.next_logits(tok)
        return Draft(tokens=torch.tensor(tokens, dtype=torch.long), probs=torch.stack(rows) if rows else None)
