"""OpenAI Agents SDK: streamed tool calls started while their arguments stream.

The SDK's ``Runner.run_streamed`` talks to a local OpenAI-compatible stub on
127.0.0.1 (``OpenAIChatCompletionsModel``). After streaming the first call's
arguments the stub waits (up to 3 s) for the ``search`` tool to have started: it can
only start that early if ``SpeculativeTools.watch`` launched it mid-stream. The
negative control (no pure tools) shows the wait timing out.
"""

from __future__ import annotations

import importlib
import json
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _import_sdk():
    """The SDK's ``agents``, not this checkout's ``agents/`` folder on sys.path."""
    saved = sys.path[:]
    # the checkout's folders (the repo root holds agents/, tests/ holds agents/ too)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT
                   and not Path(p or ".").resolve().is_relative_to(ROOT / "tests")]
    try:
        for name in [m for m in sys.modules if m == "agents" or m.startswith("agents.")]:
            module = sys.modules[name]
            where = str(getattr(module, "__file__", None) or list(getattr(module, "__path__", [])))
            if str(ROOT) in where and ".venv" not in where:
                del sys.modules[name]
        return importlib.import_module("agents")
    except ImportError:
        return None
    finally:
        sys.path[:] = saved


sdk = _import_sdk()
if sdk is None or not hasattr(sdk, "Runner"):
    pytest.skip("openai-agents is not installed", allow_module_level=True)

from openai import AsyncOpenAI  # noqa: E402
from openai_stub import OpenAIStub  # noqa: E402

from spectool_agents.integrations.openai_agents import SpeculativeTools  # noqa: E402

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"   # the SDK and the OpenAI client run on asyncio


def reply(body: dict):
    if any(m["role"] == "tool" for m in body["messages"]):
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        return "found: " + " | ".join(results)
    return {"tool_calls": [{"name": "search", "arguments": json.dumps({"q": "alpha"})},
                           {"name": "search", "arguments": json.dumps({"q": "beta"})}]}


async def run(pure: set[str]):
    started = threading.Event()
    waited: list[bool] = []
    calls: list[str] = []

    async def search(q: str) -> str:
        """Search the web."""
        calls.append(q)
        started.set()
        return f"hits for {q}"

    def after_call(index: int) -> None:       # in the stub's thread
        if index == 0:
            waited.append(started.wait(timeout=3))

    sdk.set_tracing_disabled(True)
    tools = SpeculativeTools([search], pure=pure)
    with OpenAIStub(reply, after_call=after_call) as stub:
        client = AsyncOpenAI(base_url=stub.api_base, api_key="sk-dummy-local")
        model = sdk.OpenAIChatCompletionsModel(model="stub", openai_client=client)
        agent = sdk.Agent(name="searcher", instructions="Use search.", tools=tools.function_tools,
                          model=model)
        try:
            async with tools.session():
                result = sdk.Runner.run_streamed(agent, "find alpha and beta")
                kinds = [type(e).__name__ async for e in tools.watch(result.stream_events())]
        finally:
            await client.close()
    return result.final_output, waited, calls, tools.stats, kinds


async def test_pure_tool_starts_while_its_arguments_stream():
    output, waited, calls, stats, kinds = await run({"search"})
    assert output == "found: hits for alpha | hits for beta"
    assert waited == [True]                       # started before the stream went on
    assert sorted(calls) == ["alpha", "beta"]     # each once: the SDK's calls claimed them
    assert stats.hits == 2
    assert "RawResponsesStreamEvent" in kinds     # events passed through unchanged


async def test_negative_control_without_speculation_the_tool_waits_for_the_stream():
    output, waited, calls, stats, _ = await run(set())
    assert output == "found: hits for alpha | hits for beta"
    assert waited == [False] and stats.hits == 0
