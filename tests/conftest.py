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
