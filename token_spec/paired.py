"""A speed-up's paired bootstrap interval: how far a measured ratio can be trusted.

A bench measures a method and its reference (vanilla) on the same units: one prompt in
one repeat, both run back to back in a shuffled order. Unit i gives the method
``(t_i, s_i)`` tokens and seconds and the reference ``(T_i, S_i)``. Over a set of units I
the speed-up is a ratio of rates:

    R(I) = (Σ_I t_i / Σ_I s_i) / (Σ_I T_i / Σ_I S_i)

The interval resamples the units with replacement, keeping each unit's two runs
together (a slow moment of the machine, or a long prompt, moves both), ``resamples``
times, and takes the central ``level`` share of the R values (percentile bootstrap).
Deterministic: a fixed seed, so a results file renders to the same text every time.

Pure: numpy only. ``reference_interval`` is the slow loop kept for the tests.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

__all__ = ["speedup_interval", "reference_interval"]

Unit = tuple[float, float]  # (tokens, seconds)


def _paired(method: Sequence[Unit], reference: Sequence[Unit]) -> np.ndarray | None:
    """[n, 4]: t, s, T, S per unit (pairs by position, to the shorter list); None when
    fewer than two units, or a side has no time or no tokens in some unit."""
    n = min(len(method), len(reference))
    if n < 2:
        return None
    a = np.array([(*method[i], *reference[i]) for i in range(n)], dtype=np.float64)  # [n, 4]
    if not np.all(np.isfinite(a)) or np.any(a[:, [1, 3]] <= 0) or np.any(a[:, [0, 2]] < 0):
        return None
    return a


def speedup_interval(method: Sequence[Unit], reference: Sequence[Unit], *, level: float = 0.95,
                     resamples: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """The ``level`` percentile-bootstrap interval (lo, hi) of R over paired units
    (``method[i]`` with ``reference[i]``), or None where there is nothing to resample."""
    if not 0.0 < level < 1.0 or resamples < 1:
        raise ValueError(f"need 0 < level < 1 and resamples >= 1, got {level}, {resamples}")
    a = _paired(method, reference)
    if a is None:
        return None
    n = a.shape[0]
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))  # [B, n]
    sums = a[idx].sum(axis=1)                                             # [B, 4]
    with np.errstate(divide="ignore", invalid="ignore"):
        r = (sums[:, 0] / sums[:, 1]) / (sums[:, 2] / sums[:, 3])         # [B]
    r = r[np.isfinite(r)]
    if r.size == 0:
        return None
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(r, [tail, 1.0 - tail])
    return float(lo), float(hi)


def reference_interval(method: Sequence[Unit], reference: Sequence[Unit], *, level: float = 0.95,
                       resamples: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """The same interval by plain loops (its own random stream: equal only in
    distribution, and exactly where every resample gives the same R)."""
    a = _paired(method, reference)
    if a is None:
        return None
    rows = a.tolist()
    rng = random.Random(seed)
    values = []
    for _ in range(resamples):
        t = s = big_t = big_s = 0.0
        for _ in rows:
            ti, si, tr, sr = rows[rng.randrange(len(rows))]
            t, s, big_t, big_s = t + ti, s + si, big_t + tr, big_s + sr
        if big_t > 0:
            values.append((t / s) / (big_t / big_s))
    if not values:
        return None
    tail = (1.0 - level) / 2.0
    return float(np.quantile(values, tail)), float(np.quantile(values, 1.0 - tail))
