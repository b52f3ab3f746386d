"""Rejection sampler for speculative decoding (Leviathan et al. 2023; Chen et al. 2023).

Terms (as in vLLM's rejection sampler):

* **draft tokens** d_0..d_{k-1}: proposed by a drafter, each d_i drawn from q_i
  (or chosen deterministically: n-gram lookup, argmax heads -> q_i is one-hot at d_i).
* **accepted tokens**: the longest prefix d_0..d_{n-1} that survives verification.
  Position i accepts d_i with probability min(1, p_i(d_i) / q_i(d_i)); a token the
  drafter gave probability 0 (q_i(d_i) = 0) is always rejected.
* **recovered token**: at the first rejected position n < k, one token drawn from the
  residual p'_n(x) = max(0, p_n(x) - q_n(x)) / sum_y max(0, p_n(y) - q_n(y)).
* **bonus token**: when all k drafts are accepted, one extra token drawn from the
  target's row k (the row after the last draft), for free.

Every call emits the accepted prefix plus exactly one recovered-or-bonus token:
1..k+1 tokens. For any q, each emitted token follows the target row p given the
tokens before it, i.e. the output is distributed exactly as if sampled from p.

Randomness: one call draws `torch.rand(k)` (the acceptance coins) and then one
categorical draw (`token_spec.sampling.sample`) for the final token, in that order,
from `generator`. Equal seeds therefore give bit-identical results.

Pure module: imports only torch and the standard library.
"""

from __future__ import annotations

import torch

from .sampling import sample

__all__ = ["verify", "verify_batch", "validate_inputs", "ROW_SUM_ATOL"]

# Rows of target_probs / draft_probs must sum to 1 within this absolute tolerance.
# float32 softmax over a 50k vocabulary sums to 1 within ~1e-5; 1e-3 leaves margin
# while still catching logits, unnormalised weights and masked-but-not-renormalised rows.
ROW_SUM_ATOL = 1e-3


def _check_prob_rows(name: str, probs: torch.Tensor) -> None:
    if not probs.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {probs.dtype}")
    if probs.numel() == 0:
        return
    # Two reductions, one host sync: min entry (NaN propagates) and the worst row sum.
    lowest = probs.amin().double()  # []
    worst = (probs.sum(dim=-1, dtype=torch.float64) - 1.0).abs().amax()  # []
    lowest_v, worst_v = torch.stack([lowest, worst]).tolist()
    if lowest_v != lowest_v or worst_v != worst_v:  # NaN
        raise ValueError(f"{name} contains NaN")
    if lowest_v < 0:
        raise ValueError(f"{name} contains negative probabilities")
    if not worst_v <= ROW_SUM_ATOL:  # also catches +inf rows
        raise ValueError(
            f"{name} rows must sum to 1 (within {ROW_SUM_ATOL}); worst row is off by {worst_v:.3g}"
        )


def validate_inputs(
    target_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    *,
    batched: bool = False,
) -> None:
    """Raise ValueError naming the problem if the inputs break the verify contract.

    Unbatched: target_probs [k+1, V], draft_tokens [k], draft_probs [k, V] or None.
    Batched:   a leading batch dimension B on each.
    """
    lead = 1 if batched else 0
    if not isinstance(target_probs, torch.Tensor):
        raise ValueError("target_probs must be a torch.Tensor")
    if not isinstance(draft_tokens, torch.Tensor):
        raise ValueError("draft_tokens must be a torch.Tensor")
    if target_probs.dim() != 2 + lead:
        raise ValueError(f"target_probs must have {2 + lead} dimensions, got shape {tuple(target_probs.shape)}")
    if draft_tokens.dim() != 1 + lead:
        raise ValueError(f"draft_tokens must have {1 + lead} dimension(s), got shape {tuple(draft_tokens.shape)}")
    if draft_tokens.dtype.is_floating_point or draft_tokens.dtype.is_complex or draft_tokens.dtype == torch.bool:
        raise ValueError(f"draft_tokens must be an integer tensor, got dtype {draft_tokens.dtype}")
    vocab = target_probs.shape[-1]
    if vocab == 0:
        raise ValueError("empty vocabulary: target_probs has V = 0")
    k = draft_tokens.shape[-1]
    if target_probs.shape[-2] != k + 1:
        raise ValueError(
            f"shape mismatch: {k} draft token(s) need target_probs with k+1 = {k + 1} rows, "
            f"got {target_probs.shape[-2]}"
        )
    if batched and target_probs.shape[0] != draft_tokens.shape[0]:
        raise ValueError(
            f"shape mismatch: batch size of target_probs ({target_probs.shape[0]}) "
            f"!= batch size of draft_tokens ({draft_tokens.shape[0]})"
        )
    _check_prob_rows("target_probs", target_probs)
    if k:
        lo, hi = torch.aminmax(draft_tokens)
        lo_v, hi_v = int(lo), int(hi)
        if lo_v < 0 or hi_v >= vocab:
            bad = lo_v if lo_v < 0 else hi_v
            raise ValueError(f"draft token {bad} is out of range for a vocabulary of size {vocab}")
    if draft_probs is None:
        return
    if not isinstance(draft_probs, torch.Tensor):
        raise ValueError("draft_probs must be a torch.Tensor or None")
    if draft_probs.dim() != 2 + lead:
        raise ValueError(f"draft_probs must have {2 + lead} dimensions, got shape {tuple(draft_probs.shape)}")
    if draft_probs.shape[-1] != vocab:
        raise ValueError(
            f"draft vocabulary size {draft_probs.shape[-1]} differs from the target's {vocab}: "
            "the drafter must share the target's tokenizer"
        )
    if draft_probs.shape[:-1] != draft_tokens.shape:
        raise ValueError(
            f"shape mismatch: draft_probs has shape {tuple(draft_probs.shape)}, expected "
            f"{tuple(draft_tokens.shape) + (vocab,)} (one row per draft token)"
        )
    _check_prob_rows("draft_probs", draft_probs)


def _decide(
    target_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The algorithm, on validated batched inputs.

    target_probs [B, k+1, V], draft_tokens [B, k], draft_probs [B, k, V] or None.
    Returns (num_accepted [B] long in 0..k, final_token [B] long): the accepted
    prefix is draft_tokens[b, :num_accepted[b]], followed by final_token[b].
    """
    batch, rows, _ = target_probs.shape
    k = rows - 1
    device = target_probs.device
    draft_tokens = draft_tokens.to(device=device, dtype=torch.long)  # [B, k]
    p = target_probs  # [B, k+1, V]
    b_idx = torch.arange(batch, device=device)  # [B]

    # Probability of each draft token under p and under q.
    p_draft = p[:, :k, :].gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)  # [B, k]
    if draft_probs is None:
        q_draft = torch.ones_like(p_draft)  # [B, k]  deterministic draft: q_i = one-hot(d_i)
    else:
        q = draft_probs.to(device=device, dtype=p.dtype)  # [B, k, V]
        q_draft = q.gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)  # [B, k]

    # Acceptance coins u_i ~ U[0, 1). Accept d_i iff u_i < p_i(d_i) / q_i(d_i), which has
    # probability min(1, p/q). Written as u*q < p to avoid dividing; q = 0 is rejected
    # explicitly (the drafter could not have produced that token).
    coins = torch.rand((batch, k), generator=generator, device=device, dtype=p.dtype)  # [B, k]
    accepted = (q_draft > 0) & (coins * q_draft < p_draft)  # [B, k] bool

    # n = length of the accepted prefix = number of leading Trues.
    num_accepted = accepted.to(torch.long).cumprod(dim=-1).sum(dim=-1)  # [B] in 0..k

    # The final token comes from row n of p: the bonus row when n == k, otherwise
    # the residual at the first rejected position n.
    final_p = p[b_idx, num_accepted]  # [B, V]
    rejected = num_accepted < k  # [B] bool
    if k > 0:
        pos = num_accepted.clamp(max=k - 1)  # [B]  (any valid row where n == k; masked below)
        if draft_probs is None:
            # q_n = one-hot(d_n): max(0, p - q) is p with d_n's mass removed.
            final_q = torch.zeros_like(final_p).scatter_(
                -1, draft_tokens[b_idx, pos].unsqueeze(-1), 1.0
            )  # [B, V]
        else:
            final_q = q[b_idx, pos]  # [B, V]
        # residual(x) = max(0, p_n(x) - q_n(x)), renormalised: residual / sum(residual).
        # In exact arithmetic a rejection implies p_n(d_n) < q_n(d_n), hence
        # sum(residual) = TV(p_n, q_n) > 0; if float rounding leaves no mass (p_n ~= q_n),
        # fall back to p_n, which is then the right row.
        residual = (final_p - final_q).clamp(min=0.0)  # [B, V]
        mass = residual.sum(dim=-1, keepdim=True)  # [B, 1]
        residual = torch.where(mass > 0, residual / mass.clamp(min=torch.finfo(mass.dtype).tiny), final_p)
        # Rejected rows sample the residual; fully accepted rows sample the bonus row p_k.
        weights = torch.where(rejected.unsqueeze(-1), residual, final_p)  # [B, V]
    else:
        weights = final_p  # [B, V]  k = 0: one token straight from row 0
    final_token = sample(weights, generator)  # [B]
    return num_accepted, final_token


def verify_batch(
    target_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None = None,
    *,
    generator: torch.Generator | None = None,
    validate: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify B independent drafts at once (same algorithm and random draws as `verify`).

    target_probs [B, k+1, V], draft_tokens [B, k], draft_probs [B, k, V] or None.
    Returns (tokens [B, k+1] long, padded with -1 after the last emitted token,
             num_emitted [B] long, each in 1..k+1).
    With B = 1 it consumes the generator exactly as `verify` does.
    """
    if validate:
        validate_inputs(target_probs, draft_tokens, draft_probs, batched=True)
    batch, rows, _ = target_probs.shape
    k = rows - 1
    device = target_probs.device
    draft_tokens = draft_tokens.to(device=device, dtype=torch.long)  # [B, k]
    num_accepted, final_token = _decide(target_probs, draft_tokens, draft_probs, generator)  # [B], [B]
    # Assemble [accepted prefix, final token, -1 padding].
    cols = torch.arange(k + 1, device=device).unsqueeze(0)  # [1, k+1]
    tokens = torch.full((batch, k + 1), -1, dtype=torch.long, device=device)  # [B, k+1]
    if k > 0:
        tokens[:, :k] = torch.where(cols[:, :k] < num_accepted.unsqueeze(-1), draft_tokens, -1)
    tokens[torch.arange(batch, device=device), num_accepted] = final_token
    return tokens, num_accepted + 1


def verify(
    target_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None = None,
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Verify k draft tokens against the target; return the 1..k+1 emitted tokens.

    target_probs: float [k+1, V], rows already warped (temperature/top-k/top-p), sum 1.
    draft_tokens: integer [k] (k may be 0).
    draft_probs:  float [k, V] (warped q rows, same vocabulary) or None = deterministic
                  draft (one-hot q at each draft token).
    Returns a long tensor [n+1]: the n accepted draft tokens and one recovered or
    bonus token. Raises ValueError on inputs that break this contract.
    """
    validate_inputs(target_probs, draft_tokens, draft_probs)
    if draft_tokens.numel() == 0:  # k = 0: one token straight from row 0, as _decide draws it
        return sample(target_probs[0], generator).reshape(1)  # [1]
    draft_tokens = draft_tokens.to(device=target_probs.device, dtype=torch.long)  # [k]
    num_accepted, final_token = _decide(
        target_probs.unsqueeze(0),
        draft_tokens.unsqueeze(0),
        None if draft_probs is None else draft_probs.unsqueeze(0),
        generator,
    )  # [1], [1]
    return torch.cat([draft_tokens[: int(num_accepted[0])], final_token])  # [n+1]
