"""litellm adapters against a local OpenAI-compatible server started by the test.

The server (``openai_stub.OpenAIStub``) listens on 127.0.0.1 on a free port, serves a
bounded number of requests and is shut down when each test ends; the model strings
are ``openai/<name>`` with ``api_base`` pointing at it and a dummy key, so nothing
reaches the network. litellm's HTTP clients are asyncio-only: these tests run on
asyncio alone.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from openai_stub import OpenAIStub  # noqa: E402  (tests/agents is on sys.path)

from spectool_agents import FunctionAgent, LiteLLMModel, LiteLLMSubModel, ReplAgent  # noqa: E402
from spectool_agents.models import aclose_litellm  # noqa: E402

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch):
    """Fail any attempt to resolve or connect to a host other than 127.0.0.1."""
    real_getaddrinfo, real_connect = socket.getaddrinfo, socket.socket.connect
    refused: list[object] = []

    def getaddrinfo(host, *args, **kwargs):
        if host not in ("127.0.0.1", "localhost", b"127.0.0.1"):
            refused.append(host)
            raise OSError(f"test blocked name resolution of {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    def connect(self, address):
        if isinstance(address, tuple) and address[0] != "127.0.0.1":
            refused.append(address)
            raise OSError(f"test blocked a connection to {address!r}")
        return real_connect(self, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    yield
    assert refused == [], f"something tried to reach the network: {refused}"


async def close_litellm() -> None:
    """Close litellm's clients and background tasks; none may outlive the test."""
    await aclose_litellm()
    left = [t for t in asyncio.all_tasks() if not t.done() and "/litellm/" in
            getattr(getattr(t.get_coro(), "cr_code", None), "co_filename", "")]
    assert left == []


def key(stub: OpenAIStub) -> dict:
    return {"api_base": stub.api_base, "api_key": "sk-dummy-local"}


def root_reply(body: dict) -> str:
    """A root model that needs two turns: look, then answer with a sub-call."""
    users = [m for m in body["messages"] if m["role"] == "user"]
    if len(users) == 1:
        return "Let me check.\n```repl\nn = len(context)\nprint(n)\n```"
    return "```repl\nFINAL(llm_query('size ' + str(n)))\n```"


def sub_reply(body: dict) -> str:
    prompt = body["messages"][-1]["content"]
    return f"the {prompt} is fine"


def reply(body: dict) -> str | dict:
    return root_reply(body) if body["model"] == "root-model" else sub_reply(body)


async def test_streaming_deltas_arrive_in_pieces():
    text = "Streaming through litellm, chunk by chunk."
    with OpenAIStub(lambda body: text, max_requests=2, chunk_size=5) as stub:
        model = LiteLLMModel("openai/root-model", **key(stub))
        deltas = [d async for d in model.stream([{"role": "user", "content": "hi"}])]
        sub = LiteLLMSubModel("openai/sub-model", **key(stub))
        answer = await sub.complete("ping")
        await close_litellm()
    assert "".join(deltas) == text and len(deltas) >= len(text) // 5
    assert answer == text
    assert [r["messages"][-1]["content"] for r in stub.requests] == ["hi", "ping"]
    assert stub.requests[0]["stream"] is True


@pytest.mark.parametrize("mode", ["baseline", "spec"])
async def test_repl_agent_run_completes_through_litellm(mode):
    with OpenAIStub(reply, max_requests=6) as stub:
        root = LiteLLMModel("openai/root-model", temperature=0, **key(stub))
        sub = LiteLLMSubModel("openai/sub-model", **key(stub))
        result = await ReplAgent(root, sub, mode=mode).run("x" * 1234, "How long is it?")
        await close_litellm()
    assert result.finished_by == "FINAL"
    assert result.answer == "the size 1234 is fine"
    assert result.turns[0].stdout == "1234\n"
    models = [r["model"] for r in stub.requests]
    assert models == ["root-model", "root-model", "sub-model"]
    # the second root request carried the first turn's output
    assert stub.requests[1]["messages"][-1]["content"] == "REPL output:\n1234\n"
    assert re.search(r"`context` \(1234 characters\)", stub.requests[0]["messages"][0]["content"])


async def test_function_calls_stream_through_litellm():
    calls = {"tool_calls": [{"name": "lookup", "arguments": '{"key": "a \\" } b"}'}]}
    import spectool

    @spectool.tool(speculate="pure")
    async def lookup(key: str) -> str:
        return key[::-1]

    with OpenAIStub(lambda body: calls, max_requests=1, chunk_size=3) as stub:
        model = LiteLLMModel("openai/tool-model", **key(stub))
        agent = FunctionAgent([lookup], model=model, mode="spec")
        message = await agent.run_message(model.stream_deltas([{"role": "user", "content": "?"}]))
        await close_litellm()
    (call,) = message.calls
    assert (call.name, call.arguments(), call.value) == ("lookup", {"key": 'a " } b'}, 'b } " a')
    assert message.stats.hits == 1


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_under_trio_the_adapter_says_asyncio_only():
    # raises before any request: port 9 (discard) is never contacted
    model = LiteLLMModel("openai/x", api_base="http://127.0.0.1:9/v1", api_key="sk-dummy")
    with pytest.raises(RuntimeError, match="asyncio only"):
        async for _ in model.stream([{"role": "user", "content": "hi"}]):
            pass
    with pytest.raises(RuntimeError, match="asyncio only"):
        await LiteLLMSubModel("openai/x", api_base="http://127.0.0.1:9/v1").complete("hi")
