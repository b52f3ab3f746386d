"""DFlash-style block drafter and its DFlash 2-style parallel selector, for SmolLM2-135M.

Follows DFlash (Chen et al. 2026, "DFlash: Block Diffusion for Flash Speculative
Decoding", arXiv 2602.06036) and DFlash 2 (Inco 2026, "DFlash 2: Keep Drafting Parallel"),
as the source article describes them.

Mechanism (``DFlashHead``):

* **One pass per block.** A round's block is ``gamma`` slots at positions n-1 .. n-2+gamma
  (n = verified tokens): slot 0 holds the embedding of the last verified token x_{n-1}
  (through the target's own embedding), slots 1.. a learned MASK vector. One forward pass
  through ``layers`` decoder layers fills every slot at once; slot j's output, through a
  final norm and the target's tied LM head restricted to the 8192-id draft vocabulary
  (the distilled draft's subset, as the EAGLE-3 head), gives logits for x_{n+j}. Drafting
  gamma tokens therefore costs one pass whose width grows, not gamma passes: the cost
  stays nearly flat in gamma. Measured (``.venv/bin/python scripts/drafter_cost.py
  --rounds 30 --out docs/results/drafter_cost.json``, 1 thread, bf16 target, 2-core
  machine at load average ~2.5-3; median ms per round for gamma = 1, 2, 4, 8, 12, 16):
  EAGLE-3 head 5.9, 9.7, 17.2, 35.5, 55.6, 74.7 (about 4.6 ms a token); this drafter
  7.0, 11.2, 10.4, 12.9, 14.3, 15.6.
* **Context injected into every layer.** The target's hidden states after layers 1, 14
  and 27 at every verified position t (read by the same ``FeatureTap`` the EAGLE-3 head
  uses) are fused to g_t = norm(fc([h_low, h_mid, h_high])). Each draft layer turns g_t
  into its own keys and values (the layer's k/v projections, RoPE at t) and puts them in
  that layer's cache; the block's queries attend to all of them plus the block's own keys.
  So every draft layer sees the whole verified context, not a feature fed only at the
  bottom. The cache grows by the newly verified positions each round and is rolled back
  with the context, so a round costs one small pass over the new positions + the block.
* **Causal inside the block.** The paper's block attention is bidirectional; here slot j
  sees slots <= j. Later slots hold only MASK, so little is lost, and the drafts are
  prefix-consistent: drafting 4 tokens gives the first 4 of an 8-token draft, so one set
  of weights serves every gamma <= ``block``.

DFlash 2 additions (``variant == "dflash2"``, ``DFlashHead.convs``):

* **Two-tap convolutions** around each attention and MLP sublayer (on its normed input
  and on its output, before the residual add): u_j <- u_j + w (.) u_{j-1}, a per-channel
  weight w, zero-initialised (the layer starts as the DFlash one), slot 0's predecessor 0
  (slot 0 is the last verified token itself; its context comes through attention).
* **Parallel path selector** (``PathSelector``): the top-``k`` candidates of every slot;
  the path c_0..c_{gamma-1} maximising sum_j [ l_j(c_j) + s(c_{j-1}, c_j) ] with
  c_{-1} = x_{n-1} (Viterbi over a k x k lattice), where l_j is the drafter's own logit and
  the compatibility term is a learned low-rank bilinear form on the target's (frozen)
  token embeddings: s(a, b) = (A e_a) . (B e_b), A and B 576 -> 64. It is a bigram-ish
  term: no context gate (the paper gates it by the context; here the block drafter's
  logits carry the context). Greedy decoding drafts the best path (deterministic, so
  verification is exact whatever the path). Sampling draws slot by slot from the warped
  row whose top-k entries are shifted by s(c_{j-1}, .) and returns those q rows (an
  autoregressive draft, verified by min(1, p/q) with the residual: exact as well).

Training: ``scripts/build_dflash.py``, on the target's own greedy outputs and stdlib code
(the EAGLE-3 head's corpus): many blocks per window in one pass, each block's slots seeing
the context keys before its anchor, forward KL to the target's top-k at every slot.

Exactness never depends on the head: ``DFlashDrafter`` is an ordinary drafter (greedy:
deterministic tokens, ``probs=None``; sampling: the warped q rows it drew from), verified
by ``token_spec.sampler.verify``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .drafters import Draft, draw
from .eagle3 import TAP_LAYERS, _read, _rope, attention_dims, install_tap
from .sampling import SamplingParams

__all__ = ["DFlashHead", "DFlashDrafter", "PathSelector", "load_dflash", "save_dflash", "default_dflash_path",
           "DFlashWeightsMissing", "REBUILD_COMMAND", "VARIANTS"]

DATA_DIR = Path(__file__).resolve().parent / "data"
REBUILD_COMMAND = "python scripts/build_dflash.py"
VARIANTS = ("dflash", "dflash2")


class DFlashWeightsMissing(FileNotFoundError):
    """The block drafter's weights file is not there (rebuild it with scripts/build_dflash.py)."""


def default_dflash_path(variant: str = "dflash") -> Path:
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    return DATA_DIR / f"{variant}-smollm2.safetensors"


class _Layer(nn.Module):
    """A Llama decoder layer whose attention also reads context keys/values; optional
    two-tap convolutions (``convs``) around its sublayers."""

    def __init__(self, h: int, n_heads: int, n_kv: int, head_dim: int, inter: int, convs: bool) -> None:
        super().__init__()
        self.in_norm = nn.Parameter(torch.ones(h))
        self.q = nn.Linear(h, n_heads * head_dim, bias=False)
        self.kv = nn.Linear(h, 2 * n_kv * head_dim, bias=False)
        self.o = nn.Linear(n_heads * head_dim, h, bias=False)
        self.post_norm = nn.Parameter(torch.ones(h))
        self.gate_up = nn.Linear(h, 2 * inter, bias=False)
        self.down = nn.Linear(inter, h, bias=False)
        # taps: attention input / output, MLP input / output
        self.taps = nn.Parameter(torch.zeros(4, h)) if convs else None


class DFlashHead(nn.Module):
    """The block drafter's own parameters; ``embed`` (the target's embedding, frozen, not
    owned) and ``vocab_ids`` (the reduced output vocabulary) are attached."""

    def __init__(self, config, embed: torch.Tensor, vocab_ids: torch.Tensor, *, layers: int = 2,
                 block: int = 8, convs: bool = False, tap_layers=TAP_LAYERS) -> None:
        super().__init__()
        self.tap_layers = tuple(int(li) for li in tap_layers)
        self.config = config
        h, inter = attention_dims(self, config)
        self.block = int(block)
        self.convs = bool(convs)
        self.fc = nn.Linear(len(self.tap_layers) * h, h, bias=False)
        self.ctx_norm = nn.Parameter(torch.ones(h))
        self.mask = nn.Parameter(torch.zeros(h))
        self.layers = nn.ModuleList(_Layer(h, self.n_heads, self.n_kv, self.head_dim, inter, convs)
                                    for _ in range(int(layers)))
        self.norm = nn.Parameter(torch.ones(h))
        self.vocab_size = int(embed.shape[0])
        ids = torch.as_tensor(vocab_ids).reshape(-1).long()
        self.register_buffer("vocab_ids", ids.to(torch.int32), persistent=True)
        self.embed = embed  # the target's, shared
        self.register_buffer("head_rows", embed.detach()[ids].float().clone(), persistent=False)

    # -- pieces -------------------------------------------------------------------------
    def _rms(self, x, w):
        return F.rms_norm(x, (self.hidden,), w, self.eps)

    def context(self, features: torch.Tensor) -> torch.Tensor:
        """[..., 3H] target features -> g [..., H], the rows every layer turns into keys."""
        return self._rms(self.fc(features), self.ctx_norm)

    def context_kv(self, layer: _Layer, g: torch.Tensor, pos: torch.Tensor):
        """k, v [B, kv, T, hd] of context rows g [B, T, H] at positions pos [T]."""
        b, t, _ = g.shape
        kv = layer.kv(g).view(b, t, 2, self.n_kv, self.head_dim)
        k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)
        return _rope(k, pos, self.inv_freq), v

    def block_input(self, last_ids: torch.Tensor, slots: int) -> torch.Tensor:
        """[B] last verified tokens -> the block's input rows [B, slots, H]."""
        first = F.embedding(last_ids, self.embed).float()[:, None]
        rest = self.mask.expand(first.shape[0], slots - 1, -1).to(first.dtype)
        return torch.cat([first, rest], 1)

    @staticmethod
    def _prev(u: torch.Tensor, groups: int) -> torch.Tensor:
        """Each slot's predecessor within its block (0 for a block's first slot); u [B, groups*S, H]."""
        b, n, h = u.shape
        u = u.view(b, groups, n // groups, h)
        return torch.cat([torch.zeros_like(u[:, :, :1]), u[:, :, :-1]], 2).view(b, n, h)

    def _tap(self, layer: _Layer, i: int, u: torch.Tensor, groups: int) -> torch.Tensor:
        return u if layer.taps is None else u + layer.taps[i] * self._prev(u, groups)

    def blocks(self, x: torch.Tensor, pos: torch.Tensor, ctx: list[tuple[torch.Tensor, torch.Tensor]],
               mask: torch.Tensor, groups: int = 1) -> torch.Tensor:
        """The layer stack over block rows x [B, N, H] (``groups`` blocks of N / groups
        slots, positions pos [N]); ctx[l] = layer l's context (k, v) [B, kv, T, hd]; mask
        [N, T + N] bool (True = may attend) over [context keys, block keys]. -> [B, N, H]."""
        b, n, _ = x.shape
        rep = self.n_heads // self.n_kv
        for layer, (ck, cv) in zip(self.layers, ctx, strict=True):
            u = self._tap(layer, 0, self._rms(x, layer.in_norm), groups)
            q = _rope(layer.q(u).view(b, n, self.n_heads, self.head_dim).transpose(1, 2), pos, self.inv_freq)
            kv = layer.kv(u).view(b, n, 2, self.n_kv, self.head_dim)
            k = _rope(kv[:, :, 0].transpose(1, 2), pos, self.inv_freq)
            v = kv[:, :, 1].transpose(1, 2)
            keys = torch.cat([ck.to(k.dtype), k], 2).repeat_interleave(rep, 1)
            vals = torch.cat([cv.to(v.dtype), v], 2).repeat_interleave(rep, 1)
            att = F.scaled_dot_product_attention(q, keys, vals, attn_mask=mask)
            att = self._tap(layer, 1, layer.o(att.transpose(1, 2).reshape(b, n, -1)), groups)
            x = x + att
            u = self._tap(layer, 2, self._rms(x, layer.post_norm), groups)
            gu = layer.gate_up(u)
            inter = gu.shape[-1] // 2
            x = x + self._tap(layer, 3, layer.down(F.silu(gu[..., :inter]) * gu[..., inter:]), groups)
        return x

    def sub_logits(self, out: torch.Tensor) -> torch.Tensor:
        """Logits over the reduced vocabulary [..., len(vocab_ids)]."""
        return F.linear(self._rms(out, self.norm), self.head_rows.to(out.dtype))

    def to_full(self, sub: torch.Tensor) -> torch.Tensor:
        """[..., S] subset logits -> [..., V] with -inf outside the subset."""
        full = sub.new_full((*sub.shape[:-1], self.vocab_size), float("-inf"))
        full[..., self.vocab_ids.long()] = sub
        return full

    # -- training: many blocks per window in one pass ------------------------------------
    def train_forward(self, features: torch.Tensor, ids: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
        """features [B, T, 3H] at positions 0..T-1, ids [B, T]; anchors [G] (1 <= a, a +
        block <= T - 1): block i's slot 0 holds ids[a_i] at position a_i and sees the
        context keys at positions < a_i; slot j predicts ids[a_i + j + 1]. Returns the
        outputs [B, G, block, H]."""
        b, t, _ = features.shape
        s, gn = self.block, anchors.numel()
        g = self.context(features)
        tpos = torch.arange(t)
        ctx = [self.context_kv(layer, g, tpos) for layer in self.layers]
        x = torch.cat([self.block_input(ids[:, a], s) for a in anchors.tolist()], 1)  # [B, G*S, H]
        offs = torch.arange(s)
        pos = (anchors[:, None] + offs[None]).reshape(-1)
        ctx_ok = tpos[None, :] < anchors.repeat_interleave(s)[:, None]  # [G*S, T]
        grp = torch.arange(gn).repeat_interleave(s)
        slot = offs.repeat(gn)
        blk_ok = (grp[:, None] == grp[None, :]) & (slot[None, :] <= slot[:, None])
        out = self.blocks(x, pos, ctx, torch.cat([ctx_ok, blk_ok], 1), groups=gn)
        return out.view(b, gn, s, -1)

    # -- inference -----------------------------------------------------------------------
    def draft_rows(self, cache: dict, last_id: int, n: int, slots: int) -> torch.Tensor:
        """Subset logits [slots, S] for x_n .. x_{n+slots-1}, the cache holding the context
        keys of positions 0..n-2 (``extend_context``)."""
        ctx = [(k[None, :, : n - 1], v[None, :, : n - 1]) for k, v in zip(cache["k"], cache["v"], strict=True)]
        x = self.block_input(torch.tensor([int(last_id)]), slots)
        pos = torch.arange(n - 1, n - 1 + slots)
        causal = torch.ones(slots, slots, dtype=torch.bool).tril()
        mask = torch.cat([torch.ones(slots, n - 1, dtype=torch.bool), causal], 1)
        return self.sub_logits(self.blocks(x, pos, ctx, mask)[0])

    def extend_context(self, cache: dict, features: torch.Tensor, start: int) -> None:
        """Write the context keys / values of positions start..start+T-1 (features [T, 3H])
        into every layer's cache (``cache["k"][l]`` [kv, capacity, hd])."""
        t = features.shape[0]
        need = start + t
        if "k" not in cache or cache["k"][0].shape[1] < need:
            cap = max(need, 2 * (cache["k"][0].shape[1] if "k" in cache else 256))
            old_k, old_v = cache.get("k"), cache.get("v")
            cache["k"] = [torch.zeros(self.n_kv, cap, self.head_dim) for _ in self.layers]
            cache["v"] = [torch.zeros(self.n_kv, cap, self.head_dim) for _ in self.layers]
            if old_k is not None:
                for li in range(len(self.layers)):
                    w = old_k[li].shape[1]
                    cache["k"][li][:, :w], cache["v"][li][:, :w] = old_k[li], old_v[li]
        if t == 0:
            return
        g = self.context(features)[None]
        pos = torch.arange(start, need)
        for li, layer in enumerate(self.layers):
            k, v = self.context_kv(layer, g, pos)
            cache["k"][li][:, start:need], cache["v"][li][:, start:need] = k[0], v[0]


class PathSelector(nn.Module):
    """DFlash 2-style parallel selection over the block's top-k candidates.

    s(a, b) = (A e_a) . (B e_b) with e the target's frozen embeddings, A, B: H -> ``rank``.
    ``best_path`` walks the Viterbi path of sum_j [logit_j(c_j) + s(c_{j-1}, c_j)] from the
    last verified token; ``compat`` gives the term for one previous token and candidates.
    """

    def __init__(self, embed: torch.Tensor, rank: int = 64, k: int = 4) -> None:
        super().__init__()
        h = int(embed.shape[1])
        self.k = int(k)
        self.prev = nn.Linear(h, rank, bias=False)
        self.cand = nn.Linear(h, rank, bias=False)
        nn.init.zeros_(self.prev.weight)  # starts as plain top-1 selection
        nn.init.normal_(self.cand.weight, std=h ** -0.5)
        self.embed = embed

    def _e(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.embed).float()

    def compat(self, prev_ids: torch.Tensor, cand_ids: torch.Tensor) -> torch.Tensor:
        """prev_ids [...] and cand_ids [..., C] -> s [..., C]."""
        a = self.prev(self._e(prev_ids))  # [..., r]
        c = self.cand(self._e(cand_ids))  # [..., C, r]
        return (c @ a[..., None])[..., 0]

    def pair_scores(self, prev_ids: torch.Tensor, cand_ids: torch.Tensor) -> torch.Tensor:
        """Every pair: prev_ids [P], cand_ids [C] -> [P, C]."""
        return self.prev(self._e(prev_ids)) @ self.cand(self._e(cand_ids)).T

    def best_path(self, logits: torch.Tensor, last_id: int) -> list[int]:
        """logits [S, V] (the block's full rows) -> the best path's tokens [S]."""
        top = logits.topk(min(self.k, logits.shape[-1]), -1)
        vals, ids = top.values.float(), top.indices  # [S, k]
        score = vals[0] + self.compat(torch.tensor(int(last_id)), ids[0])
        back = []
        for j in range(1, ids.shape[0]):
            total = score[:, None] + self.pair_scores(ids[j - 1], ids[j]) + vals[j][None]  # [k_prev, k]
            score, arg = total.max(0)
            back.append(arg)
        best = int(score.argmax())
        path = [best]
        for arg in reversed(back):
            best = int(arg[best])
            path.append(best)
        path.reverse()
        return [int(ids[j, c]) for j, c in enumerate(path)]


def save_dflash(head: DFlashHead, path: str | os.PathLike, selector: PathSelector | None = None,
                metadata: dict | None = None) -> Path:
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: (v if k == "vocab_ids" else v.detach().to(torch.float16)).contiguous()
               for k, v in head.state_dict().items()}
    if selector is not None:
        tensors.update({f"selector.{k}": v.detach().to(torch.float16).contiguous()
                        for k, v in selector.state_dict().items()})
    meta = {"format": "pt", "tap_layers": json.dumps(list(head.tap_layers)), "layers": str(len(head.layers)),
            "block": str(head.block), "convs": json.dumps(head.convs),
            "selector_k": str(selector.k if selector is not None else 0)}
    for key, value in (metadata or {}).items():
        meta[key] = value if isinstance(value, str) else json.dumps(value)
    save_file(tensors, str(path), metadata=meta)
    return path


def load_dflash(target, variant: str = "dflash", path: str | os.PathLike | None = None):
    """(head, selector or None) with ``target``'s embedding (fp32 copy) attached; eval, fp32."""
    weights = Path(path) if path is not None else default_dflash_path(variant)
    if not weights.is_file():
        raise DFlashWeightsMissing(f"block drafter weights not found at {weights}; rebuild them with: "
                                   f"{REBUILD_COMMAND}")
    tensors, meta = _read(weights)
    hf = target.model if hasattr(target, "model") else target
    embed = hf.get_input_embeddings().weight.detach().float()
    head = DFlashHead(hf.config, embed, tensors["vocab_ids"], layers=int(meta["layers"]), block=int(meta["block"]),
                      convs=str(meta["convs"]).lower() == "true", tap_layers=meta["tap_layers"])
    own = {k: (v if k == "vocab_ids" else v.float()) for k, v in tensors.items() if not k.startswith("selector.")}
    head.load_state_dict(own, strict=True)
    head.metadata = meta
    selector = None
    if int(meta.get("selector_k", 0)):
        rank = tensors["selector.prev.weight"].shape[0]
        selector = PathSelector(embed, rank=rank, k=int(meta["selector_k"]))
        selector.load_state_dict({k[len("selector."):]: v.float() for k, v in tensors.items()
                                  if k.startswith("selector.")}, strict=True)
        selector.eval().requires_grad_(False)
    return head.eval().requires_grad_(False), selector


class DFlashDrafter:
    """The block drafter as a ``Drafter``: one head pass per round drafts the whole block.

    ``target``: a ``token_spec.target.Target`` on the fast forward; the drafter installs a
    ``FeatureTap`` on it. Each round the head's context cache keeps the positions whose
    tokens (and so features) are unchanged, adds the newly verified positions' keys in one
    small pass, then drafts ``min(k, block)`` tokens in one pass. With a ``selector``
    (DFlash 2), greedy drafts are its best path and sampled drafts follow its shifted rows.
    """

    def __init__(self, target, head: DFlashHead, selector: PathSelector | None = None, *,
                 name: str = "dflash") -> None:
        self.tap = install_tap(target, head.tap_layers, "DFlashDrafter")
        self.target, self.head, self.selector = target, head, selector
        self.name = name
        self.vocab_size = head.vocab_size
        self._cache: dict = {}
        self._ctx: list[int] = []
        self._real = 0  # context keys of positions 0.._real-1 are in the cache

    def __deepcopy__(self, memo) -> DFlashDrafter:
        return DFlashDrafter(self.target, self.head, self.selector, name=self.name)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._cache, self._ctx, self._real = {}, [], 0

    def end(self, output_ids: Sequence[int]) -> None:
        self.begin(())

    @torch.inference_mode()
    def block_logits(self, context: Sequence[int], slots: int) -> torch.Tensor:
        """Full-width logits [slots, V] for the ``slots`` tokens after ``context``."""
        ctx = [int(t) for t in context]
        n = len(ctx)
        common, limit = 0, min(len(self._ctx), n)
        while common < limit and self._ctx[common] == ctx[common]:
            common += 1
        keep = min(self._real, common, n - 1)  # a position's feature depends on its token and those before
        self.head.extend_context(self._cache, self.tap.features(n - 1)[keep:], keep)
        self._real, self._ctx = n - 1, ctx
        return self.head.to_full(self.head.draft_rows(self._cache, ctx[-1], n, slots).float())

    def propose(self, context: Sequence[int], k: int, params: SamplingParams,
                generator: torch.Generator | None) -> Draft:
        k = min(k, self.head.block)
        if k <= 0 or len(context) < 2:
            return Draft(tokens=torch.empty(0, dtype=torch.long))
        rows = self.block_logits(context, k)
        sel = self.selector
        if sel is not None and params.temperature == 0:
            with torch.inference_mode():
                return Draft(tokens=torch.tensor(sel.best_path(rows, int(context[-1])), dtype=torch.long))
        tokens, qs = [], []
        prev = int(context[-1])
        for j in range(k):
            row = rows[j]
            if sel is not None:  # shift the row's top-k by the compatibility with the drawn predecessor
                with torch.inference_mode():
                    cand = row.topk(sel.k).indices
                    row = row.clone()
                    row[cand] += sel.compat(torch.tensor(prev), cand)
            tok, q = draw(row, params, generator)
            if q is not None:
                qs.append(q)
            tokens.append(tok)
            prev = tok
        return Draft(tokens=torch.tensor(tokens, dtype=torch.long), probs=torch.stack(qs) if qs else None)

