"""Shared test configuration.

Nothing in the test run may reach the network: the model hub and litellm's remote
cost map are switched off before any test module imports transformers or litellm.

A run started as a background job of a non-interactive shell (``pytest &``) inherits
SIGINT ignored, and so would every command line a test starts: the Ctrl-C tests could
not interrupt them. SIGINT gets Python's own handler back here; a handler (unlike an
ignore) is reset to the default in a child at exec, so the children can be interrupted.
"""

import os
import signal

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

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


# Code whose frames must not still be running in another thread once a test is over.
_PROJECT_CODE = tuple(os.sep + part + os.sep for part in ("spectool", "token_spec", "agents",
                                                          "spectool_bench")) + ("<cell>",)
_STRAY_GRACE_SECONDS = 5.0


def _stray_threads() -> dict[str, str]:
    import sys
    import threading
    import traceback

    names = {t.ident: t.name for t in threading.enumerate()}
    me = threading.get_ident()
    stray = {}
    for ident, frame in sys._current_frames().items():
        if ident == me:
            continue
        stack = traceback.extract_stack(frame)
        if any(any(part in f.filename for part in _PROJECT_CODE) for f in stack):
            stray[names.get(ident, str(ident))] = "".join(traceback.format_list(stack[-8:]))
    return stray


@pytest.fixture(autouse=True)
def no_thread_outlives_its_test():
    """A worker thread still running project code after its test (a shadow step, a
    cell, a decoder step) can block the interpreter's exit forever: fail the test that
    left it, with its stack, instead of hanging the run."""
    yield
    import time

    deadline = time.monotonic() + _STRAY_GRACE_SECONDS
    stray = _stray_threads()
    while stray and time.monotonic() < deadline:
        time.sleep(0.01)
        stray = _stray_threads()
    if stray:
        pytest.fail("threads still running project code after the test:\n"
                    + "\n".join(f"--- {name}\n{stack}" for name, stack in stray.items()),
                    pytrace=False)
