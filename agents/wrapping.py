"""Put the runtime under an existing agent loop.

An existing loop already has two things: a token stream (the text deltas of each
model message) and a tool table (name -> function). ``runtime_for`` turns the table
into ``spectool`` tools (naming the ones that may start early) and builds a
``spectool.Runtime``; ``tee`` passes a stream through while keeping its text for the
loop's history. For JSON function calling, ``FunctionAgent.run_message`` takes the
OpenAI-style delta stream instead. Everything is anyio: the same code runs under
asyncio and trio. ``README_SECTION`` is the text for the project README; its code
blocks are executed by ``tests/agents/test_wrapping.py``.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterable, AsyncIterator, Callable, Collection, Mapping
from typing import Any

import spectool
from spectool.tools import Tool

__all__ = ["tools_from_table", "runtime_for", "tee", "README_SECTION"]


def tools_from_table(
    table: Mapping[str, Callable[..., Any]],
    *,
    pure: Collection[str] = (),
    idempotent: Mapping[str, Callable[..., Any]] | Collection[str] = (),
    deterministic: Collection[str] = (),
) -> list[Tool]:
    """Wrap a name -> function table as tools; unnamed ones are never speculated.

    ``pure`` tools may start as soon as their arguments are known; ``idempotent``
    maps each name to its ``on_unclaimed(key, args, kwargs)`` compensation hook (the
    function must accept ``idempotency_key``); ``deterministic`` lets identical calls
    share one result.
    """
    unknown = (set(pure) | set(idempotent) | set(deterministic)) - set(table)
    if unknown:
        raise KeyError(f"not in the tool table: {sorted(unknown)}")
    if set(pure) & set(idempotent):
        raise ValueError(f"both pure and idempotent: {sorted(set(pure) & set(idempotent))}")
    tools = []
    for name, fn in table.items():
        speculate = "pure" if name in pure else "idempotent" if name in idempotent else "never"
        fn = fn.fn if isinstance(fn, Tool) else fn
        hooks = {}
        if speculate == "idempotent":
            hooks["on_unclaimed"] = idempotent.get(name) if isinstance(idempotent, Mapping) \
                else None   # a bare name: the Tool names the missing hook
        tools.append(spectool.tool(fn, speculate=speculate, name=name,
                                   deterministic=name in deterministic, **hooks))
    return tools


def runtime_for(
    table: Mapping[str, Callable[..., Any]],
    *,
    pure: Collection[str] = (),
    idempotent: Mapping[str, Callable[..., Any]] | Collection[str] = (),
    deterministic: Collection[str] = (),
    mode: str = "spec",
    **runtime_kwargs: Any,
) -> Any:
    """A ``spectool.Runtime`` over a tool table (one per conversation: state persists)."""
    tools = tools_from_table(table, pure=pure, idempotent=idempotent,
                             deterministic=deterministic)
    return spectool.Runtime(tools=tools, mode=mode, **runtime_kwargs)


async def tee(stream: AsyncIterable[str | bytes], sink: list[str]) -> AsyncIterator[str | bytes]:
    """Yield the deltas of ``stream`` unchanged, appending their text to ``sink``."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    try:
        async for delta in stream:
            sink.append(decoder.decode(delta) if isinstance(delta, bytes) else delta)
            yield delta
        tail = decoder.decode(b"", final=True)
        if tail:
            sink.append(tail)
    finally:
        closer = getattr(stream, "aclose", None)
        if closer is not None:
            await closer()


README_SECTION = '''\
## Put the runtime under your own agent loop

Your loop already has a tool table (`my_tools`: name -> function) and, per model
message, a stream of text deltas. Build one runtime per conversation and hand it
each message's stream; cells in the message run in a persistent namespace, and
calls to the tools you name `pure` start while the message is still streaming:

```python
from spectool_agents import runtime_for, tee

runtime = runtime_for(my_tools, pure={"search"}, mode="spec")  # "baseline" to compare

async def on_model_message(stream):                # call it from your loop
    text = []                                      # the message, for your history
    result = await runtime.run(tee(stream, text))  # runs its repl / python cells
    return "".join(text), result.stdout, result.error
```

For JSON function calling, feed the OpenAI-style delta stream to a `FunctionAgent`;
each pure tool starts as soon as its arguments' JSON closes:

```python
from spectool_agents import FunctionAgent, tools_from_table

agent = FunctionAgent(tools_from_table(my_tools, pure={"search"}))

async def on_model_deltas(deltas):                 # {"tool_calls": [...]} deltas
    message = await agent.run_message(deltas)
    return message.assistant_message(), message.tool_messages()
```

Both run under asyncio (`asyncio.run`) and trio (`trio.run`) alike: the runtime is
written against anyio.
'''
