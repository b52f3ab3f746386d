"""The paired bootstrap interval of a speed-up (``token_spec.paired``), on synthetic units
whose true ratio is known, and the bench's use of it (``token_spec.bench.decode_intervals``)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from token_spec.bench import decode_intervals, format_table
from token_spec.paired import reference_interval, speedup_interval


def _units(n: int, seed: int, *, speedup: float = 1.0, noise: float = 0.0, spread: float = 10.0):
    """n paired units: the reference's seconds vary ``spread``-fold from unit to unit (long
    and short prompts), the method runs ``speedup`` times faster, each run off by up to
    ``noise`` (relative)."""
    rng = random.Random(seed)
    method, reference = [], []
    for _ in range(n):
        base = rng.uniform(1.0, spread)
        reference.append((64, base * (1 + rng.uniform(-noise, noise))))
        method.append((64, base / speedup * (1 + rng.uniform(-noise, noise))))
    return method, reference


def _unpaired_interval(method, reference, resamples: int = 2000, seed: int = 0):
    """A broken interval: resamples the method's and the reference's units apart."""
    rng = np.random.default_rng(seed)
    m, r = np.array(method, float), np.array(reference, float)
    i = rng.integers(0, len(m), size=(resamples, len(m)))
    j = rng.integers(0, len(r), size=(resamples, len(r)))
    sm, sr = m[i].sum(1), r[j].sum(1)
    ratios = (sm[:, 0] / sm[:, 1]) / (sr[:, 0] / sr[:, 1])
    return tuple(np.quantile(ratios, [0.025, 0.975]))


def test_identical_runs_give_exactly_one():
    method, _ = _units(8, seed=1, noise=0.05)
    assert speedup_interval(method, method) == (1.0, 1.0)


def test_a_constant_speedup_is_exact_however_much_the_units_differ():
    method, reference = _units(8, seed=2, speedup=1.5, spread=10.0)
    lo, hi = speedup_interval(method, reference)
    assert lo == pytest.approx(1.5) and hi == pytest.approx(1.5)


def test_negative_control_resampling_the_two_sides_apart_is_caught():
    method, reference = _units(8, seed=2, speedup=1.5, spread=10.0)
    lo, hi = _unpaired_interval(method, reference)
    assert not (lo == pytest.approx(1.5) and hi == pytest.approx(1.5))   # the assertion above fails here
    assert hi - lo > 0.5                                                  # the prompts' spread, not noise


def test_a_real_speedup_excludes_one_and_an_a_a_run_includes_it():
    faster = speedup_interval(*_units(24, seed=3, speedup=1.2, noise=0.03))
    same = speedup_interval(*_units(24, seed=4, speedup=1.0, noise=0.03))
    assert 1.0 < faster[0] <= 1.2 <= faster[1]
    assert same[0] <= 1.0 <= same[1]


def test_the_fast_interval_matches_the_reference_loop():
    method, reference = _units(12, seed=5, speedup=1.1, noise=0.08, spread=3.0)
    fast = speedup_interval(method, reference, resamples=4000)
    slow = reference_interval(method, reference, resamples=4000)
    assert fast == pytest.approx(slow, abs=0.01)
    assert fast[1] - fast[0] > 0.03   # a real width, so the agreement means something


def test_the_interval_is_the_same_every_time():
    method, reference = _units(6, seed=6, noise=0.1)
    assert speedup_interval(method, reference) == speedup_interval(method, reference)


@pytest.mark.parametrize("method, reference", [
    ([(64, 1.0)], [(64, 1.0)]),                       # one unit: nothing to resample
    ([], []),
    ([(64, 1.0), (64, 0.0)], [(64, 1.0), (64, 1.0)]),  # a run with no time
    ([(64, 1.0), (64, float("nan"))], [(64, 1.0), (64, 1.0)]),
])
def test_units_that_cannot_be_resampled_give_no_interval(method, reference):
    assert speedup_interval(method, reference) is None


@pytest.mark.parametrize("kw", [{"level": 1.0}, {"level": 0.0}, {"resamples": 0}])
def test_a_bad_level_or_resample_count_is_refused(kw):
    with pytest.raises(ValueError, match="level"):
        speedup_interval([(1, 1.0)] * 2, [(1, 1.0)] * 2, **kw)


def _run(method: str, prompt: int, seconds: list[float], *, decode_tokens=None) -> dict:
    run = {"domain": "code", "threads": 1, "method": method, "prompt": prompt,
           "tokens": [8] * len(seconds), "seconds": seconds, "prefill_s": [0.0] * len(seconds)}
    if decode_tokens is not None:
        run["decode_tokens"] = decode_tokens
    return run


def test_the_bench_pairs_each_method_with_its_own_vanilla_per_prompt_and_repeat():
    runs = [_run("bf16:vanilla", 0, [1.0, 2.0]), _run("bf16:vanilla", 1, [4.0, 8.0]),
            _run("bf16:spec:ngram", 0, [0.5, 1.0]), _run("bf16:spec:ngram", 1, [2.0, 4.0])]
    intervals = decode_intervals(runs)
    assert ("code", 1, "bf16:vanilla") not in intervals       # a vanilla is not measured against itself
    assert intervals[("code", 1, "bf16:spec:ngram")] == pytest.approx((2.0, 2.0))


def test_older_files_count_every_token_for_ours_and_all_but_the_first_for_other_engines():
    runs = [_run("bf16:vanilla", 0, [1.0, 1.0]), _run("llamacpp:vanilla", 0, [1.0, 1.0])]
    assert decode_intervals(runs)[("code", 1, "llamacpp:vanilla")] == pytest.approx((7 / 8, 7 / 8))
    runs[1]["decode_tokens"] = [8, 8]                         # a newer file says what was decoded
    assert decode_intervals(runs)[("code", 1, "llamacpp:vanilla")] == pytest.approx((1.0, 1.0))


def test_the_table_shows_a_rows_interval_or_computes_it_from_the_runs():
    runs = [_run("bf16:vanilla", p, [1.0, 1.1]) for p in range(2)] + [
        _run("bf16:spec:ngram", p, [0.5, 0.55]) for p in range(2)]
    row = {"domain": "code", "threads": 1, "tokens_per_s": 1.0, "decode_tokens_per_s": 1.0, "prefill_ms": 1.0,
           "decode_speedup": 2.0, "tau": 2.0, "identical_prompts": "4/4"}
    rows = [{**row, "method": "bf16:vanilla", "decode_speedup": 1.0}, {**row, "method": "bf16:spec:ngram"}]
    assert "2.00..2.00" in format_table({"rows": rows, "runs": runs})
    stored = [dict(r, decode_speedup_interval=None) for r in rows]
    stored[1]["decode_speedup_interval"] = [1.5, 2.5]
    assert "1.50..2.50" in format_table({"rows": stored, "runs": runs})
