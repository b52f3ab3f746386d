"""What the exact forward's passes write per position of one sequence: its KV cache
(``FastSession``: ``extend`` / ``truncate``, rollback by a length change) and, where a
drafter reads the target's hidden states, the tap of chosen layers (``FeatureTap``).

Both are written by ``token_spec.fast_forward.FastLlama.forward`` and keep, after a
rollback and re-extension, exactly what the tokens now in the sequence produced.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["CACHE_STEP", "FastSession", "FeatureTap"]

CACHE_STEP = 1024  # the KV cache grows in steps of this many positions


class FeatureTap:
    """Hidden states of chosen decoder layers (``layers``, 0-based, ascending: the output of
    each), per absolute position, as the target's passes compute them (``FastLlama.tap``).

    ``record`` is called by every forward with the pass's rows; ``features(n)`` returns the
    rows of positions 0..n-1 ``[n, len(layers) * H]`` (fp32) of the session that ran last.
    A later pass overwrites the positions it covers, so after a rollback and re-extension
    the rows are those of the tokens now in the cache. Reading is all a tap does: the
    forward's results are bitwise the same with and without it."""

    def __init__(self, layers) -> None:
        layers = tuple(sorted({int(li) for li in layers}))
        if not layers or layers[0] < 0:
            raise ValueError(f"tap layers must be non-negative layer indices, got {layers!r}")
        self.layers = layers
        self._buf: torch.Tensor | None = None
        self._session = None
        self.valid = 0  # rows 0..valid-1 were written for the current session

    def record(self, session, start: int, rows: list) -> None:
        if len(rows) != len(self.layers):
            raise RuntimeError(f"tap expected {len(self.layers)} layers' rows, got {len(rows)}")
        if session is not self._session:
            self._session, self.valid = session, 0
        n = int(rows[0].shape[0])
        width = sum(int(r.shape[1]) for r in rows)
        end = start + n
        if self._buf is None or self._buf.shape[0] < end or self._buf.shape[1] != width:
            cap = max(end, 2 * (self._buf.shape[0] if self._buf is not None else 512))
            buf = torch.zeros(cap, width, dtype=torch.float32)
            if self._buf is not None and self._buf.shape[1] == width:
                buf[: self._buf.shape[0]] = self._buf
            self._buf = buf
        col = 0
        for r in rows:
            self._buf[start:end, col : col + r.shape[1]] = r
            col += r.shape[1]
        # rows past `end` written by earlier passes belong to rolled-back tokens
        self.valid = end if start <= self.valid else self.valid

    def features(self, n: int) -> torch.Tensor:
        if n > self.valid:
            raise ValueError(f"the tap holds {self.valid} positions of the current session, asked for {n}")
        return self._buf[:n]


class FastSession:
    """One sequence's static KV cache for ``FastLlama``: ``extend`` / ``truncate``.

    K/V live in preallocated per-layer tensors, keys transposed ``[kv heads, head_dim,
    capacity]`` (attention reads ``k^T`` as a slice) and values ``[kv heads, capacity,
    head_dim]``, that grow by ``CACHE_STEP`` positions when needed; ``truncate`` only moves
    ``length``.
    """

    def __init__(self, lm) -> None:  # lm: the FastLlama whose passes fill this cache
        self._lm = lm
        self.length = 0
        self.capacity = 0
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []

    def _reserve(self, n: int) -> None:
        lm = self._lm
        if n > lm.max_positions:
            raise ValueError(f"sequence of {n} tokens exceeds the model's {lm.max_positions} positions")
        need = n + lm.pad_width + lm.key_block
        if need <= self.capacity:
            return
        cap = max(need, self.capacity + CACHE_STEP)
        cap = -(-cap // CACHE_STEP) * CACHE_STEP
        new_k = [torch.zeros((lm.n_kv, lm.head_dim, cap), dtype=lm.dtype) for _ in range(lm.n_layers)]
        new_v = [torch.zeros((lm.n_kv, cap, lm.head_dim), dtype=lm.dtype) for _ in range(lm.n_layers)]
        if self.capacity:
            for i in range(lm.n_layers):
                new_k[i][:, :, : self.capacity] = self.k[i]
                new_v[i][:, : self.capacity] = self.v[i]
        self.k, self.v, self.capacity = new_k, new_v, cap

    def extend(self, ids: torch.Tensor | Sequence[int]) -> torch.Tensor:
        """ids [n] -> logits [n, V] (fp32); row i predicts the token after ids[i]."""
        ids = _ids(ids, self._lm.vocab_size)
        with torch.inference_mode():
            return self._lm.forward(self, ids)

    def extend_last(self, ids: torch.Tensor | Sequence[int]) -> torch.Tensor:
        """Like ``extend``, returning only the last row's logits [V] (the head runs on the
        last row only where the pass is not padded)."""
        ids = _ids(ids, self._lm.vocab_size)
        with torch.inference_mode():
            return self._lm.forward(self, ids, logits_rows=1)[0]

    def prefill(self, ids: torch.Tensor | Sequence[int]) -> None:
        """Like ``extend`` without returning logits (only the last row is computed)."""
        ids = _ids(ids, self._lm.vocab_size, allow_empty=True)
        if ids.numel():
            with torch.inference_mode():
                self._lm.forward(self, ids, logits_rows=1)

    def truncate(self, length: int) -> None:
        """Exact rollback: keep the first ``length`` cached positions."""
        if not 0 <= length <= self.length:
            raise ValueError(f"truncate({length}) outside [0, {self.length}]")
        self.length = length

    def free(self) -> None:
        """Release the cache's memory at once (length 0; it grows again if used)."""
        self.k, self.v, self.capacity, self.length = [], [], 0, 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached keys and values."""
        return sum(t.numel() * t.element_size() for t in (*self.k, *self.v))


def _ids(ids: torch.Tensor | Sequence[int], vocab: int, *, allow_empty: bool = False) -> torch.Tensor:
    if isinstance(ids, torch.Tensor):
        t = ids.reshape(-1).long()
    else:
        t = torch.tensor(list(ids), dtype=torch.long)
    if t.numel() == 0:
        if allow_empty:
            return t
        raise ValueError("extend() needs at least one token id")
    if int(t.min()) < 0 or int(t.max()) >= vocab:
        raise ValueError(f"token id out of range [0, {vocab}) in extend()")
    return t
