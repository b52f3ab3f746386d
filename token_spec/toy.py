"""Toy Markov language models with exact sequence probabilities (for tests).

`MarkovLM` is a `CausalLM`: the next token depends on the previous token and on its
position modulo `period` (an inhomogeneous order-1 Markov chain). The position
dependence is deliberate: a session whose length drifts from the true number of
tokens (a wrong KV rollback) conditions on the wrong transition table, so the joint
distribution test catches rollback bugs as well as bonus-token bugs.

`MarkovDrafter` is a `Drafter` proposing from another MarkovLM, either by sampling
(returns its warped q rows) or deterministically by argmax (returns probs=None).

Pure module: torch and the standard library.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .sampling import SamplingParams, sample, warp

__all__ = ["MarkovLM", "MarkovSession", "MarkovDrafter", "ToyDraft", "random_markov"]


@dataclass
class ToyDraft:
    """Same fields as `token_spec.drafters.Draft` (the round loop reads only these)."""

    tokens: torch.Tensor  # [k'] long
    probs: torch.Tensor | None  # [k', V] warped q rows, or None = deterministic draft


class MarkovLM:
    """logits[pos % period, prev, next]: an order-1 chain whose table cycles with position."""

    def __init__(self, logits: torch.Tensor, name: str = "markov"):
        if logits.dim() != 3 or logits.shape[1] != logits.shape[2] or logits.shape[2] == 0:
            raise ValueError(f"logits must have shape [period, V, V], got {tuple(logits.shape)}")
        self.logits = logits.to(torch.float32)  # [P, V, V]
        self.period = logits.shape[0]
        self.vocab_size = logits.shape[2]
        self.name = name

    def start(self, prompt_ids: Sequence[int]) -> MarkovSession:
        session = MarkovSession(self)
        if len(prompt_ids):
            session.extend(torch.tensor(list(prompt_ids), dtype=torch.long))
        return session

    def next_logits(self, prev: int, position: int) -> torch.Tensor:
        """Logits [V] for the token after `prev`, which sits at index `position`."""
        return self.logits[position % self.period, prev]

    def sequence_probs(self, prompt_ids: Sequence[int], length: int, params: SamplingParams) -> dict[tuple[int, ...], float]:
        """Exact probability of every continuation of `length` tokens under warp(params)."""
        start = len(prompt_ids) - 1  # index of the last prompt token
        rows = []  # each [V, V]: rows[i][prev, next], renormalised in float64
        for i in range(length):
            row = warp(self.logits[(start + i) % self.period], params.temperature, params.top_k, params.top_p).double()
            rows.append(row / row.sum(dim=-1, keepdim=True))
        out: dict[tuple[int, ...], float] = {}
        for seq in itertools.product(range(self.vocab_size), repeat=length):
            prob, prev = 1.0, int(prompt_ids[-1])
            for i, tok in enumerate(seq):
                prob *= float(rows[i][prev, tok])
                prev = tok
            out[seq] = prob
        return out


class MarkovSession:
    """An LMSession: keeps the token history; `length` is its KV-cache length."""

    def __init__(self, model: MarkovLM):
        self.model = model
        self.tokens: list[int] = []

    @property
    def length(self) -> int:
        return len(self.tokens)

    def extend(self, ids: torch.Tensor) -> torch.Tensor:
        ids = ids.to(torch.long).reshape(-1)  # [n]
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.model.vocab_size):
            raise ValueError("token id out of range for the toy vocabulary")
        positions = torch.arange(self.length, self.length + ids.numel()) % self.model.period  # [n]
        self.tokens.extend(int(t) for t in ids)
        return self.model.logits[positions, ids]  # [n, V]: row i predicts the token after ids[i]

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a session of length {self.length} to {length}")
        del self.tokens[length:]


class MarkovDrafter:
    """Drafts from a MarkovLM: sampled (with q rows) or argmax (deterministic)."""

    def __init__(self, model: MarkovLM, *, deterministic: bool = False, name: str | None = None):
        self.model = model
        self.deterministic = deterministic
        self.name = name or ("markov-argmax" if deterministic else "markov-sample")
        self._cache_key: tuple[float, int, float] | None = None
        self._cache: tuple[torch.Tensor, list, list] = (torch.empty(0), [], [])

    def _warped(self, params: SamplingParams) -> tuple[torch.Tensor, list, list]:
        """warp() of the whole table, as a tensor and as Python floats, and its row
        CDFs; cached per (temperature, top_k, top_p)."""
        key = (params.temperature, params.top_k, params.top_p)
        if self._cache_key != key:
            table = warp(self.model.logits, *key)  # [P, V, V]
            self._cache = (table, table.tolist(), table.double().cumsum(dim=-1).tolist())
            self._cache_key = key
        return self._cache

    def begin(self, prompt_ids: Sequence[int]) -> None:
        pass

    def end(self, output_ids: Sequence[int]) -> None:
        pass

    def propose(self, context: Sequence[int], k: int, params: SamplingParams, generator: torch.Generator | None) -> ToyDraft:
        prev, position = int(context[-1]), len(context) - 1
        table, plain, cdfs = self._warped(params)
        period = self.model.period
        # Sampled drafts: one uniform per token, located in the row's CDF (inverse CDF,
        # in plain Python: the toy drafter must be cheap for the statistical tests).
        coins = [] if self.deterministic else torch.rand(k, generator=generator, dtype=torch.float64).tolist()
        tokens: list[int] = []
        rows: list[tuple[int, int]] = []  # (position % period, prev) of each q row
        for i in range(k):
            row = (position % period, prev)
            q = plain[row[0]][row[1]]  # [V] floats
            if self.deterministic:
                tok = q.index(max(q))  # argmax, first of ties
            else:
                cdf = cdfs[row[0]][row[1]]
                tok = min(bisect.bisect_right(cdf, coins[i] * cdf[-1]), len(cdf) - 1)
                while q[tok] == 0:  # rounding guard: never a zero-probability token
                    tok -= 1
            tokens.append(tok)
            rows.append(row)
            prev, position = tok, position + 1
        if self.deterministic or not rows:
            probs = None
        else:
            idx = torch.tensor(rows)  # [k, 2]
            probs = table[idx[:, 0], idx[:, 1]]  # [k, V]
        return ToyDraft(tokens=torch.tensor(tokens, dtype=torch.long), probs=probs)


def random_markov(vocab: int, period: int = 2, *, seed: int, scale: float = 1.0, name: str = "markov") -> MarkovLM:
    """A MarkovLM with N(0, scale^2) logits from a fixed seed."""
    gen = torch.Generator().manual_seed(seed)
    return MarkovLM(torch.randn((period, vocab, vocab), generator=gen) * scale, name=name)
