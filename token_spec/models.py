"""Causal language models as seen by the decoding engine, with exact KV rollback.

The engine needs three operations from a model, and nothing else:

* ``start(prompt_ids)``   prefill: run the prompt through the model, keep its KV cache;
* ``extend(ids)``         append ``n`` tokens, return logits ``[n, V]`` where row ``i``
                          is the model's next-token logits after ``ids[i]``;
* ``truncate(length)``    forget every cached position ``>= length``.

Exactness of the rollback: a decoder-only transformer's key/value at position ``j``
depends only on tokens ``0..j`` (causal masking), so deleting positions ``>= L`` from
every layer's K/V tensors leaves exactly the cache a fresh forward over the first
``L`` tokens would have built (up to the floating point order of the kernels, which
``tests/token_spec/test_models.py`` pins down). Re-extending from there therefore
reproduces the logits of a fresh forward.

``HFCausalLM`` implements the protocol for any Hugging Face causal LM with
``transformers.DynamicCache`` and its ``crop`` (in transformers 5.x ``crop(-n)``
removes the last ``n`` positions of every layer).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import torch

__all__ = ["CausalLM", "LMSession", "HFCausalLM", "HFSession", "as_id_tensor"]


@runtime_checkable
class LMSession(Protocol):
    """One sequence's KV cache. ``length`` = number of tokens in the cache."""

    length: int

    def extend(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [n] (long) -> logits [n, V]; the cache grows by n."""
        ...

    def truncate(self, length: int) -> None:
        """Exact rollback: keep the first ``length`` cached tokens (0 <= length <= self.length)."""
        ...


@runtime_checkable
class CausalLM(Protocol):
    """Anything that can start a KV session over a prompt."""

    vocab_size: int

    def start(self, prompt_ids: Sequence[int]) -> LMSession:
        """Prefill ``prompt_ids`` (may be empty) and return the session."""
        ...


def as_id_tensor(ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """Token ids (list, tuple or tensor) -> a 1-D long tensor on the CPU."""
    if isinstance(ids, torch.Tensor):
        t = ids.reshape(-1)
        return t if t.dtype == torch.long else t.long()
    return torch.tensor(list(ids), dtype=torch.long)


class HFSession:
    """KV session over a Hugging Face causal LM (``transformers.DynamicCache``)."""

    def __init__(self, lm: HFCausalLM) -> None:
        from transformers import DynamicCache

        self._lm = lm
        self._cache = DynamicCache(config=lm.model.config)
        self.length = 0

    def _forward(self, ids: torch.Tensor, logits_to_keep: int) -> torch.Tensor:
        n = int(ids.numel())
        # Positions are explicit so the session never depends on how the model infers them.
        positions = torch.arange(self.length, self.length + n, dtype=torch.long).unsqueeze(0)
        with torch.inference_mode():
            out = self._lm.model(
                input_ids=ids.reshape(1, n),
                position_ids=positions,
                past_key_values=self._cache,
                use_cache=True,
                logits_to_keep=logits_to_keep,
            )
        self.length += n
        return out.logits[0]  # [logits_to_keep or n, V]

    def prefill(self, ids: torch.Tensor) -> None:
        """Like ``extend`` but computes only the last row of logits (the LM head is ~20% of a step)."""
        if ids.numel():
            self._forward(ids, logits_to_keep=1)

    def extend(self, ids: torch.Tensor | Sequence[int]) -> torch.Tensor:
        ids = as_id_tensor(ids)
        n = int(ids.numel())
        if n == 0:
            raise ValueError("extend() needs at least one token id")
        if int(ids.min()) < 0 or int(ids.max()) >= self._lm.vocab_size:
            raise ValueError(f"token id out of range [0, {self._lm.vocab_size}) in extend()")
        return self._forward(ids, logits_to_keep=0)[-n:]

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"truncate({length}) outside [0, {self.length}]")
        drop = self.length - length
        if drop:
            self._cache.crop(-drop)
            self.length = length
        if self._cache.get_seq_length() != self.length:  # pragma: no cover - guards a transformers API change
            raise RuntimeError(
                f"KV cache holds {self._cache.get_seq_length()} tokens after truncate, expected {self.length}"
            )


class HFCausalLM:
    """``CausalLM`` over a Hugging Face ``*ForCausalLM`` model (put in eval mode here).

    ``vocab_size`` is the width of the logits rows (``config.vocab_size``).
    """

    def __init__(self, model: torch.nn.Module) -> None:
        model.eval()
        self.model = model
        self.vocab_size = int(model.config.vocab_size)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def start(self, prompt_ids: Sequence[int] | torch.Tensor) -> HFSession:
        session = HFSession(self)
        session.prefill(as_id_tensor(prompt_ids))
        return session

    def logits(self, ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """Fresh full forward without a cache: logits [n, V] (reference for tests)."""
        ids = as_id_tensor(ids)
        with torch.inference_mode():
            return self.model(input_ids=ids.reshape(1, -1), use_cache=False).logits[0]
