"""Put the runtime under an existing agent loop.

An existing loop already has two things: a token stream (the text deltas of each
model message) and a tool table (name -> function). ``runtime_for`` turns the table
into ``spectool`` tools (naming the ones that may start early) and builds a
``spectool.Runtime``; ``tee`` passes a stream through while keeping its text for the
loop's history. For JSON function calling, ``FunctionAgent.run_message`` takes the
OpenAI-style delta stream instead. Everything is anyio: the same code runs under
asyncio and trio. The "Put the runtime under your own agent loop" examples of
docs/agents.md use these; ``tests/agents/test_wrapping.py`` runs their loop functions
under both.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Collection, Iterable, Mapping
from typing import Any

import spectool
from spectool.stream.adapters import text_deltas
from spectool.tools import Tool

__all__ = ["tools_from_table", "runtime_for", "tee"]


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


async def tee(stream: AsyncIterable[Any] | Iterable[Any], sink: list[str]) -> AsyncIterator[str]:
    """Yield the text deltas of ``stream``, appending each to ``sink``.

    ``stream`` may yield any shape ``spectool.stream.adapters`` accepts (str, bytes
    decoded as UTF-8, OpenAI / litellm / Anthropic / LangChain chunks); what comes out is its
    message text as ``str`` deltas, which is also what lands in ``sink``.
    """
    texts = text_deltas(stream)
    try:
        async for text in texts:
            sink.append(text)
            yield text
    finally:
        await texts.aclose()
