"""Statistics shared by the losslessness tests and their negative controls.

All tests draw from seeded generators, so a p-value is a fixed number for a given
platform: a test either always passes or always fails. The thresholds still matter:
`PASS_P` is what a correct sampler must clear, `FAIL_P` is how decisively a broken
one must be rejected (the negative controls assert p < FAIL_P, far below PASS_P).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import torch
from scipy.stats import chi2

# A correct sampler's p-value must exceed this (strict, so tests are not flaky).
PASS_P = 1e-4
# A broken sampler's p-value must fall below this.
FAIL_P = 1e-8
PASS_LOG10 = math.log10(PASS_P)
FAIL_LOG10 = math.log10(FAIL_P)
# G-test cells with a smaller expected count are pooled into one bin.
MIN_EXPECTED = 5.0


def g_statistic(counts: Sequence[float] | np.ndarray, probs: Sequence[float] | np.ndarray) -> tuple[float, int]:
    """G = 2 sum O ln(O / E) and its degrees of freedom, after pooling small cells.

    * An observation in a cell of probability 0 is impossible under the null:
      G = +inf.
    * Cells with expected count < MIN_EXPECTED are pooled (chi-square approximation).
    * Degrees of freedom = number of bins - 1.
    """
    obs = np.asarray(counts, dtype=np.float64)
    p = np.asarray(probs, dtype=np.float64)
    if obs.shape != p.shape:
        raise ValueError(f"counts {obs.shape} and probs {p.shape} differ in shape")
    if abs(p.sum() - 1.0) > 1e-6:
        raise ValueError(f"probs sum to {p.sum()}, not 1")
    total = obs.sum()
    if total <= 0:
        raise ValueError("no observations")
    if obs[p <= 0].sum() > 0:
        return math.inf, 1
    expected = total * p
    big = expected >= MIN_EXPECTED
    obs_bins = list(obs[big])
    exp_bins = list(expected[big])
    small_exp = expected[(~big) & (p > 0)].sum()
    if small_exp > 0:
        small_obs = obs[(~big) & (p > 0)].sum()
        if small_exp >= MIN_EXPECTED or not exp_bins:
            obs_bins.append(small_obs)
            exp_bins.append(small_exp)
        else:  # still too small: merge into the smallest big bin
            j = int(np.argmin(exp_bins))
            obs_bins[j] += small_obs
            exp_bins[j] += small_exp
    if len(obs_bins) < 2:
        return 0.0, 0  # a single bin: nothing can deviate
    o = np.asarray(obs_bins)
    e = np.asarray(exp_bins)
    nz = o > 0
    return 2.0 * float(np.sum(o[nz] * np.log(o[nz] / e[nz]))), len(o) - 1


def g_test_log10(counts, probs) -> float:
    """log10 of the G-test p-value (accurate far below float underflow; -inf if impossible)."""
    stat, df = g_statistic(counts, probs)
    if df == 0:
        return 0.0
    if math.isinf(stat):
        return -math.inf
    log_p = float(chi2.logsf(stat, df))
    if log_p == -math.inf:
        # scipy underflows for huge G; use the leading term of the upper incomplete
        # gamma function, sf = Gamma(a, z) / Gamma(a) ~ z^(a-1) e^(-z) / Gamma(a),
        # with a = df / 2, z = G / 2 (accurate to a few percent in log here).
        a, z = df / 2.0, stat / 2.0
        log_p = (a - 1.0) * math.log(z) - z - math.lgamma(a)
    return log_p / math.log(10)


def g_test(counts, probs) -> float:
    """G-test (log-likelihood ratio) p-value of observed `counts` against `probs`."""
    return 10.0 ** g_test_log10(counts, probs)


def token_counts(tokens: torch.Tensor | Iterable[int], vocab: int) -> np.ndarray:
    """Histogram of token ids over range(vocab)."""
    t = torch.as_tensor(list(tokens) if not isinstance(tokens, torch.Tensor) else tokens, dtype=torch.long)
    return torch.bincount(t.flatten(), minlength=vocab).numpy().astype(np.float64)


def sequence_counts(samples: Iterable[Sequence[int]], exact: Mapping[tuple[int, ...], float]) -> tuple[np.ndarray, np.ndarray] | None:
    """(counts, probs) of sampled whole sequences over the cells of `exact`;
    None if a sample is not a cell at all (wrong length / out of vocabulary)."""
    index = {seq: i for i, seq in enumerate(exact)}
    counts = np.zeros(len(index))
    for seq in samples:
        key = tuple(seq)
        if key not in index:
            return None
        counts[index[key]] += 1
    return counts, np.fromiter(exact.values(), dtype=np.float64)


def sequence_g_test_log10(samples: Iterable[Sequence[int]], exact: Mapping[tuple[int, ...], float]) -> float:
    """log10 p of the G-test of sampled whole sequences against their exact probabilities."""
    table = sequence_counts(samples, exact)
    return -math.inf if table is None else g_test_log10(*table)


def position_g_tests(tokens: torch.Tensor, num_emitted: torch.Tensor, rows: torch.Tensor, min_samples: int = 2000) -> list[tuple[int, int, float]]:
    """Per-position checks for a batch of single-round verifications.

    tokens [B, k+1] (padded -1), num_emitted [B], rows [k+1, V] the target rows.
    Given that position j was emitted, its token must follow rows[j]. Returns
    (position, samples, log10 p) for every position with >= min_samples samples.
    """
    out = []
    vocab = rows.shape[1]
    for j in range(rows.shape[0]):
        mask = num_emitted > j
        n = int(mask.sum())
        if n < min_samples:
            continue
        out.append((j, n, g_test_log10(token_counts(tokens[mask, j], vocab), rows[j].double().numpy())))
    return out


def fmt(log10_p: float) -> str:
    """For messages: a p-value given by its log10."""
    return "p = 0 (impossible outcome)" if log10_p == -math.inf else f"p = 10^{log10_p:.1f}"
