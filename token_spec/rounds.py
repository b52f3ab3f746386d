"""The speculative decoding round loop, pure and synchronous, and its vanilla twin.

One round (the pending token t is the last emitted token, not yet in the target's
KV cache):

    k      = policy.gamma()                        # decided before drafting
    draft  = drafter.propose(context, k, ...)      # d_1..d_k' (k' <= k), q rows or None
    logits = session.extend([t, d_1..d_k'])        # [k'+1, V]; row i predicts after ids[i]
    p      = warp(logits, params)                  # same warp as the vanilla path
    out    = verifier(p, d, q)                     # accepted prefix + recovered/bonus token
    session.truncate(len_before + 1 + accepted)    # exact rollback: drop rejected drafts
    pending = out[-1]                              # enters the cache next round

The async engine (`token_spec.engine`) drives these generators; they hold no I/O.
Stopping: the caller passes `eos_id` / `max_new_tokens`; a round's tokens are cut at
EOS (EOS included) and at the token budget, so the target distribution of the
emitted sequence is unchanged (cuts depend only on already emitted tokens).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from .gamma import GammaPolicy
from .sampler import verify
from .sampling import SamplingParams, sample, warp

__all__ = ["speculative_ids", "vanilla_ids", "Verifier"]

# verifier(target_probs [k+1, V], draft_tokens [k], draft_probs [k, V] | None, *, generator) -> LongTensor [1..k+1]
Verifier = Callable[..., torch.Tensor]


def _prepare(prompt_ids: Sequence[int], params: SamplingParams, max_new_tokens: int | None) -> tuple[list[int], int]:
    prompt = [int(t) for t in prompt_ids]
    if not prompt:
        raise ValueError("prompt_ids must hold at least one token (the first pending token)")
    if not isinstance(params, SamplingParams):
        raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
    budget = params.max_tokens if max_new_tokens is None else max_new_tokens
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {budget!r}")
    return prompt, budget


def _warp(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    return warp(logits, params.temperature, params.top_k, params.top_p)


def speculative_ids(
    target: Any,
    drafter: Any,
    prompt_ids: Sequence[int],
    params: SamplingParams,
    *,
    policy: GammaPolicy,
    generator: torch.Generator | None,
    verifier: Verifier = verify,
    eos_id: int | None = None,
    max_new_tokens: int | None = None,
) -> Iterator[list[int]]:
    """Yield the tokens emitted by each speculative round (1..γ+1 ids per round).

    target: a CausalLM (`start(prompt_ids) -> LMSession`); drafter: a Drafter;
    policy: a GammaPolicy; verifier: `token_spec.sampler.verify` unless a caller
    deliberately swaps it (negative-control tests; the lossy relaxed mode).
    max_new_tokens defaults to params.max_tokens.
    """
    prompt, budget = _prepare(prompt_ids, params, max_new_tokens)
    # A batch-invariant target covers passes of at most max_verify_tokens tokens
    # (pending + drafts); drafting more would leave the exact path. The cap is a
    # constant, so the policy stays non-anticipating.
    widest = getattr(target, "max_verify_tokens", None)
    max_k = budget if widest is None else max(0, int(widest) - 1)
    output: list[int] = []
    drafter.begin(prompt)
    try:
        if budget == 0:
            return
        session = target.start(prompt[:-1])
        pending = prompt[-1]
        while True:
            remaining = budget - len(output)
            # Drafting past the budget is wasted work; the cap depends only on counts.
            k = max(0, min(int(policy.gamma()), remaining - 1, max_k))
            if k > 0:
                draft = drafter.propose(prompt + output, k, params, generator)
                draft_tokens = draft.tokens.to(torch.long).reshape(-1)  # [k']
                draft_probs = draft.probs  # [k', V] or None
                if draft_tokens.numel() > k:
                    raise ValueError(f"drafter {getattr(drafter, 'name', drafter)!r} proposed "
                                     f"{draft_tokens.numel()} tokens, more than the k={k} asked for")
            else:
                draft_tokens, draft_probs = torch.empty(0, dtype=torch.long), None
            proposed = int(draft_tokens.numel())

            length_before = session.length
            ids = torch.cat([torch.tensor([pending], dtype=torch.long), draft_tokens])  # [k'+1]
            logits = session.extend(ids)  # [k'+1, V]
            target_probs = _warp(logits, params)  # [k'+1, V]
            emitted = verifier(target_probs, draft_tokens, draft_probs, generator=generator)  # [n+1]
            accepted = int(emitted.numel()) - 1
            policy.update(proposed, accepted)
            # Keep pending + accepted drafts in the cache; the last emitted token is the
            # next pending one (its logits come with the next round's extend).
            session.truncate(length_before + 1 + accepted)
            pending = int(emitted[-1])

            tokens = [int(t) for t in emitted][:remaining]
            if eos_id is not None and eos_id in tokens:
                tokens = tokens[: tokens.index(eos_id) + 1]
            output.extend(tokens)
            yield tokens
            if len(output) >= budget or (eos_id is not None and tokens[-1] == eos_id):
                return
    finally:
        drafter.end(output)


def vanilla_ids(
    target: Any,
    prompt_ids: Sequence[int],
    params: SamplingParams,
    *,
    generator: torch.Generator | None,
    eos_id: int | None = None,
    max_new_tokens: int | None = None,
) -> Iterator[int]:
    """Plain autoregressive sampling from warp(target logits): one id per step.

    Uses the same warp and the same categorical draw as the speculative path, so
    with equal seeds it matches `speculative_ids` run with γ = 0 token for token.
    """
    prompt, budget = _prepare(prompt_ids, params, max_new_tokens)
    if budget == 0:
        return
    session = target.start(prompt[:-1])
    pending = prompt[-1]
    for _ in range(budget):
        logits = session.extend(torch.tensor([pending], dtype=torch.long))  # [1, V]
        probs = _warp(logits, params)  # [1, V]
        pending = int(sample(probs[0], generator))
        yield pending
        if pending == eos_id:
            return
