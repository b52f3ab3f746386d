"""Relaxed (LOSSY) acceptance, SGLang's `--speculative-accept-threshold-single/acc`.

Explicit opt-in only. Nothing else in the package uses it, and every result it
produces says `lossless=False`: the emitted tokens are NOT distributed as the target.

Semantics (SGLang's target-only verify kernel, chain case): at draft position i with
target probability p = p_i(x_i), draw a coin u ~ U[0, 1) and accept x_i when

    p >= threshold_single            (a confident target accepts outright), or
    u <  p / (threshold_acc * q)     (acceptance probability inflated by 1/threshold_acc)

where q = q_i(x_i) (SGLang's kernel treats the draft as one-hot, q = 1; for a
stochastic draft we divide by q so that the strict rule is recovered). Both thresholds
default to 1.0, and with both at 1.0 this is exactly `token_spec.sampler.verify`:
the first rule then fires only when p = 1 (which strict acceptance also accepts) and
the second is the strict rule. A token the drafter gave q = 0 is never accepted.

On a rejection the recovered token comes from the same residual as the strict sampler,
max(0, p - q) renormalised (SGLang samples relu(target - draft) the same way); the
random numbers are drawn in the same order as `verify`, so thresholds 1.0 reproduce
strict results bit for bit under equal seeds.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .sampler import validate_inputs
from .sampling import sample

__all__ = ["RelaxedResult", "RelaxedVerifier", "verify_relaxed"]

STRICT_THRESHOLD = 1.0


def _check_threshold(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0.0 < value <= 1.0):
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")
    return float(value)


@dataclass(frozen=True)
class RelaxedResult:
    """Tokens emitted by one relaxed verification. Always labelled lossy."""

    tokens: torch.Tensor  # [n+1] long: accepted prefix + recovered/bonus token
    threshold_single: float
    threshold_acc: float
    lossless: bool = False


def verify_relaxed(
    target_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None = None,
    *,
    threshold_single: float = STRICT_THRESHOLD,
    threshold_acc: float = STRICT_THRESHOLD,
    generator: torch.Generator | None = None,
) -> RelaxedResult:
    """Like `verify` (same shapes, same validation), with SGLang's relaxed thresholds."""
    threshold_single = _check_threshold("threshold_single", threshold_single)
    threshold_acc = _check_threshold("threshold_acc", threshold_acc)
    validate_inputs(target_probs, draft_tokens, draft_probs)
    k = draft_tokens.shape[0]
    p = target_probs  # [k+1, V]
    draft = draft_tokens.to(device=p.device, dtype=torch.long)  # [k]
    positions = torch.arange(k, device=p.device)  # [k]
    p_draft = p[positions, draft]  # [k]
    if draft_probs is None:
        q = torch.zeros((k, p.shape[1]), dtype=p.dtype, device=p.device).scatter_(
            -1, draft.unsqueeze(-1), 1.0
        )  # [k, V] one-hot
    else:
        q = draft_probs.to(device=p.device, dtype=p.dtype)  # [k, V]
    q_draft = q[positions, draft]  # [k]

    coins = torch.rand((k,), generator=generator, device=p.device, dtype=p.dtype)  # [k], same draw as verify
    by_single = p_draft >= threshold_single  # [k]
    by_acc = coins * q_draft * threshold_acc < p_draft  # [k]  u < p / (threshold_acc * q)
    accepted = (q_draft > 0) & (by_single | by_acc)  # [k]
    n = int(accepted.to(torch.long).cumprod(dim=0).sum())

    if n == k:
        weights = p[k]  # [V] bonus row
    else:
        weights = (p[n] - q[n]).clamp(min=0.0)  # [V] residual max(0, p - q)
        mass = weights.sum()
        weights = weights / mass if mass > 0 else p[n]
    final = sample(weights, generator)  # [] long
    tokens = torch.cat([draft[:n], final.reshape(1)])  # [n+1]
    return RelaxedResult(tokens=tokens, threshold_single=threshold_single, threshold_acc=threshold_acc)


class RelaxedVerifier:
    """A drop-in `verifier=` for `token_spec.rounds.speculative_ids` (returns tokens),
    carrying `lossless = False` so an engine can label everything it produces."""

    lossless = False

    def __init__(self, threshold_single: float = STRICT_THRESHOLD, threshold_acc: float = STRICT_THRESHOLD):
        self.threshold_single = _check_threshold("threshold_single", threshold_single)
        self.threshold_acc = _check_threshold("threshold_acc", threshold_acc)

    def __call__(
        self,
        target_probs: torch.Tensor,
        draft_tokens: torch.Tensor,
        draft_probs: torch.Tensor | None = None,
        *,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        return verify_relaxed(
            target_probs,
            draft_tokens,
            draft_probs,
            threshold_single=self.threshold_single,
            threshold_acc=self.threshold_acc,
            generator=generator,
        ).tokens

    def __repr__(self) -> str:
        return f"RelaxedVerifier(threshold_single={self.threshold_single}, threshold_acc={self.threshold_acc})"
