"""A slow, obviously-correct rejection sampler, kept to check `sampler.verify`.

It follows the textbook algorithm position by position in plain Python. It draws
random numbers exactly as `verify` documents (all k acceptance coins first with one
`torch.rand(k)`, then one categorical draw for the final token), so with equal seeds
the two must return identical tokens. No input validation: call it with valid inputs.
"""

from __future__ import annotations

import torch

from .sampling import sample

__all__ = ["verify_reference"]


def verify_reference(
    target_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None = None,
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    k = len(draft_tokens)
    vocab = target_probs.shape[1]
    coins = torch.rand((k,), generator=generator, dtype=target_probs.dtype)
    emitted: list[int] = []
    for i in range(k):
        token = int(draft_tokens[i])
        p_row = target_probs[i]
        if draft_probs is None:
            q_row = torch.zeros(vocab, dtype=target_probs.dtype)
            q_row[token] = 1.0
        else:
            q_row = draft_probs[i].to(target_probs.dtype)
        p_x = p_row[token]
        q_x = q_row[token]
        # accept with probability min(1, p(x)/q(x)); never when q(x) = 0
        if q_x > 0 and coins[i] * q_x < p_x:
            emitted.append(token)
            continue
        # first rejection: recovered token from max(0, p - q), renormalised
        residual = [max(0.0, float(p_row[v]) - float(q_row[v])) for v in range(vocab)]
        total = sum(residual)
        if total > 0:
            weights = torch.tensor([r / total for r in residual], dtype=target_probs.dtype)
        else:
            weights = p_row
        emitted.append(int(sample(weights, generator)))
        return torch.tensor(emitted, dtype=torch.long)
    # every draft accepted: bonus token from row k
    emitted.append(int(sample(target_probs[k], generator)))
    return torch.tensor(emitted, dtype=torch.long)
