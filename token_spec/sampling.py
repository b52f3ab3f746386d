"""Sampling parameters and the one warping function shared by every decoding path.

"Lossless" is always relative to a target distribution p. The vanilla path and the
speculative path must therefore turn logits into p in exactly the same way, and the
drafter must warp its own logits the same way into q. `warp` is that one function.

Order of operations (the same as Hugging Face's logits processors):
temperature -> top-k -> top-p. Temperature 0 means greedy: the result is the one-hot
row of the argmax (the first index among ties), and top-k / top-p are irrelevant
because the argmax survives both filters.

Pure module: imports only torch and the standard library.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

__all__ = ["SamplingParams", "warp", "sample"]

# Probabilities are computed in at least float32, whatever the logits' dtype (bf16
# logits would otherwise make rows sum to 1 only within ~1e-2).
MIN_PROB_DTYPE = torch.float32


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples. Validated on construction (ValueError on bad input).

    temperature: >= 0; 0 = greedy.
    top_k:       >= 0; 0 = no top-k filter.
    top_p:       in (0, 1]; 1 = no nucleus filter.
    max_tokens:  >= 1, the most new tokens one request may emit.
    stop:        stop strings (a single string is accepted and wrapped).
    seed:        None, or an int used to seed the request's torch.Generator.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    max_tokens: int = 256
    stop: tuple[str, ...] = field(default_factory=tuple)
    seed: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)):
            raise ValueError(f"temperature must be a number, got {self.temperature!r}")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be finite and >= 0, got {self.temperature!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an int >= 0 (0 = off), got {self.top_k!r}")
        if isinstance(self.top_p, bool) or not isinstance(self.top_p, (int, float)):
            raise ValueError(f"top_p must be a number, got {self.top_p!r}")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        stop = self.stop
        if isinstance(stop, str):
            stop = (stop,)
        if not isinstance(stop, Sequence) or not all(isinstance(s, str) for s in stop):
            raise ValueError(f"stop must be a string or a sequence of strings, got {self.stop!r}")
        if any(s == "" for s in stop):
            raise ValueError("stop strings must be non-empty")
        object.__setattr__(self, "stop", tuple(stop))
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"seed must be None or an int, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def make_generator(self, device: str | torch.device = "cpu") -> torch.Generator | None:
        """A torch.Generator seeded with `seed`, or None when no seed was given."""
        if self.seed is None:
            return None
        gen = torch.Generator(device=device)
        gen.manual_seed(self.seed)
        return gen


def warp(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> torch.Tensor:
    """Logits [..., V] -> probabilities [..., V] (float32 or wider), rows summing to 1.

    temperature 0 -> one-hot argmax rows. -inf logits are allowed (probability 0);
    NaN or +inf logits, or a row with no finite logit, raise ValueError.
    """
    # Validation goes through SamplingParams so the rules live in one place.
    SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise ValueError("logits must be a floating-point torch.Tensor")
    if logits.dim() == 0 or logits.shape[-1] == 0:
        raise ValueError(f"logits must have a non-empty last (vocabulary) dimension, got shape {tuple(logits.shape)}")
    dtype = torch.promote_types(logits.dtype, MIN_PROB_DTYPE)
    x = logits.to(dtype)  # [..., V]
    vocab = x.shape[-1]

    # One reduction validates every row: the row max is NaN if the row holds a NaN,
    # +inf if it holds +inf, and -inf if every logit is -inf.
    row_max = x.amax(dim=-1, keepdim=True)  # [..., 1]
    if not bool(torch.isfinite(row_max).all()):
        if torch.isnan(x).any():
            raise ValueError("logits contain NaN")
        if (x == math.inf).any():
            raise ValueError("logits contain +inf")
        raise ValueError("a row of logits is entirely -inf (no token has positive probability)")

    if temperature == 0:
        # Greedy: one-hot at argmax (torch.argmax returns the first maximal index).
        best = x.argmax(dim=-1, keepdim=True)  # [..., 1]
        return torch.zeros_like(x).scatter_(-1, best, 1.0)

    x = (x - row_max) / temperature  # shift first: exp() below cannot overflow

    if 0 < top_k < vocab:
        # Keep logits >= the k-th largest (ties at the boundary are all kept).
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]  # [..., 1]
        x = x.masked_fill(x < kth, -math.inf)

    # softmax(x) = exp(x - max x) / sum exp(x - max x); x is already shifted so its row
    # max is 0 (top-k keeps the max); -inf logits give exactly 0. Written out with
    # elementwise ops: on small rows torch.softmax dispatches to a thread pool whose
    # start-up dominates (and explodes on a loaded machine).
    shifted = x.exp()  # [..., V]
    probs = shifted / shifted.sum(dim=-1, keepdim=True)  # [..., V]

    if top_p < 1.0:
        # Nucleus: keep the smallest set of most likely tokens whose mass reaches top_p.
        # A token is dropped iff the mass strictly before it (in descending order)
        # already reaches top_p; the most likely token is therefore always kept.
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)  # [..., V] each
        mass_before = torch.cumsum(sorted_p, dim=-1) - sorted_p  # [..., V]
        drop_sorted = mass_before >= top_p  # [..., V]
        drop = torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)

    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row of probs [..., V] (non-negative weights with positive
    mass; they need not be normalised). Returns a long tensor of shape [...].

    This is the single categorical draw used by the vanilla path, by the recovered /
    bonus token of `verify`, and by drafters, so that equal seeds consume the
    generator in the same way everywhere: exactly one float64 uniform per row.

    Inverse CDF: with c = cumsum(w) and u ~ U[0, c_V), return the first index i with
    c_i > u; P(i) = (c_i - c_{i-1}) / c_V = w_i / sum(w). A zero-weight token has
    c_i = c_{i-1} and can never be the first to exceed u. (torch.multinomial does the
    same job but costs several times more per call on small rows.)
    """
    cdf = probs.to(torch.float64).cumsum(dim=-1)  # [..., V], non-decreasing
    total = cdf[..., -1:]  # [..., 1]
    u = torch.rand(total.shape, generator=generator, dtype=torch.float64, device=probs.device) * total  # [..., 1]
    # u < total must hold even after rounding, so the draw never runs past the last
    # token of positive weight (whose cdf equals total).
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, u, right=True).squeeze(-1)  # [...]
