"""Fixtures for the token tier: the real SmolLM2 target is loaded once per session.

The first load dequantises the GGUF (tens of seconds) and writes the safetensors
cache; later sessions read the cache in about a second.
"""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def target():
    """SmolLM2-135M-Instruct (fp32). Skips with the install command if the wheel is absent."""
    from token_spec.target import TargetUnavailable, load_target

    # One intra-op thread: the test machine's cores are shared, and oversubscribed
    # OpenMP threads make every forward several times slower.
    torch.set_num_threads(1)
    try:
        return load_target()
    except TargetUnavailable as exc:  # pragma: no cover - depends on the environment
        pytest.skip(str(exc))
