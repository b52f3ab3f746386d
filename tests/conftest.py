"""Shared test configuration.

Nothing in the test run may reach the network: the model hub and litellm's remote
cost map are switched off before any test module imports transformers or litellm.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest  # noqa: E402


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    """Core async code runs on both backends (anyio's pytest plugin)."""
    return request.param


def _vllm_gpu_available() -> bool:
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    """`vllm` tests need vLLM and a CUDA GPU; elsewhere they are reported as skipped."""
    vllm_items = [item for item in items if "vllm" in item.keywords]
    if vllm_items and not _vllm_gpu_available():
        skip = pytest.mark.skip(reason="needs vLLM and a CUDA GPU (pip install '.[vllm]')")
        for item in vllm_items:
            item.add_marker(skip)
