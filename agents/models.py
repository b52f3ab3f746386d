"""Model adapters: everything an agent talks to.

Two small protocols and their implementations:

* a *root model* streams the text of one assistant message:
  ``def stream(messages: list[dict]) -> AsyncIterator[str]`` (text deltas);
* a *sub-model* answers one prompt: ``async def complete(prompt: str) -> str``.

Implementations: ``LiteLLMModel`` (any litellm provider, or an OpenAI-compatible
server such as vLLM with speculative decoding: ``model="openai/<name>",
api_base=...``), ``TokenSpecModel`` (the in-process ``token_spec`` decoder, so
speculative decoding feeds the shadow interpreter), ``ScriptedModel`` and
``FunctionSubModel`` (deterministic, for tests and examples).

litellm is imported lazily, after its offline cost map is switched on, so importing
this module never reaches the network. litellm is asyncio-only (its HTTP clients
are); the scripted and token_spec adapters run under asyncio and trio.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from spectool.stream.adapters import Delta, normalize

__all__ = [
    "Model",
    "SubModel",
    "LiteLLMModel",
    "LiteLLMSubModel",
    "TokenSpecModel",
    "ScriptedModel",
    "FunctionSubModel",
    "import_litellm",
    "aclose_litellm",
]


@runtime_checkable
class Model(Protocol):
    """A root model: streams the text deltas of one assistant message."""

    def stream(self, messages: list[dict]) -> AsyncIterator[str]: ...


@runtime_checkable
class SubModel(Protocol):
    """A sub-model: answers one prompt with one string."""

    async def complete(self, prompt: str) -> str: ...


def import_litellm():
    """Import litellm with its bundled (offline) model cost map."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm  # noqa: PLC0415 - deliberately lazy: slow import, network guard above

    return litellm


async def aclose_litellm(timeout: float = 5.0) -> None:
    """Under asyncio: let litellm's fire-and-forget tasks finish, then close its clients.

    litellm spawns background tasks after each call (success/logging hooks and a
    long-lived logging queue worker) and caches HTTP clients; call this before the
    event loop ends so none of them outlives its scope. Only public API and plain
    asyncio are used (no litellm internals), so any litellm version works: the hook
    tasks get ``timeout`` seconds to finish, whatever litellm task is still running
    then (the queue worker waits forever by design) is cancelled and awaited, and
    ``litellm.close_litellm_async_clients()`` closes the cached clients.
    """
    import asyncio  # noqa: PLC0415 - litellm is asyncio-only

    litellm = import_litellm()
    folder = os.path.dirname(litellm.__file__) + os.sep

    def litellm_tasks() -> list[asyncio.Task]:
        current = asyncio.current_task()
        return [t for t in asyncio.all_tasks() if t is not current and not t.done()
                and getattr(getattr(t.get_coro(), "cr_code", None), "co_filename",
                            "").startswith(folder)]

    def is_worker(task: asyncio.Task) -> bool:  # waits on its queue forever
        return getattr(task.get_coro(), "__qualname__", "").endswith("_worker_loop")

    if hooks := [t for t in litellm_tasks() if not is_worker(t)]:
        await asyncio.wait(hooks, timeout=timeout)
    for _ in range(3):  # a cancelled worker may flush once more; bounded
        left = litellm_tasks()
        if not left:
            break
        for task in left:
            task.cancel()
        await asyncio.wait(left, timeout=timeout)
    await litellm.close_litellm_async_clients()


def _require_asyncio() -> None:
    import asyncio  # noqa: PLC0415

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError("litellm's HTTP clients run on asyncio only (not trio); "
                           "run this model under asyncio") from None


def _field(obj: Any, name: str) -> Any:
    """Read ``name`` from a litellm object or a plain dict."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _delta_dict(delta: Delta) -> dict:
    """One normalised delta as an OpenAI-shaped dict (``content``, ``tool_calls``)."""
    out: dict = {}
    if delta.text:
        out["content"] = delta.text
    if delta.tool_calls:
        out["tool_calls"] = [
            {"index": call.index or 0, "id": call.id,
             "function": {"name": call.name, "arguments": call.arguments}}
            for call in delta.tool_calls]
    return out


class LiteLLMModel:
    """Root model (and sub-model) through ``litellm.acompletion(..., stream=True)``.

    ``kwargs`` go to every request (``api_base``, ``api_key``, ``temperature``,
    ``max_tokens``, ...). Runs under asyncio. litellm is imported here (slow, once)
    rather than inside the event loop on the first request.
    """

    def __init__(self, model: str, **kwargs: Any) -> None:
        self.model = model
        self.kwargs = kwargs
        self._litellm = import_litellm()

    async def _chunks(self, messages: list[dict], **extra: Any) -> AsyncIterator[Any]:
        _require_asyncio()
        response = await self._litellm.acompletion(
            model=self.model, messages=messages, stream=True, **{**self.kwargs, **extra}
        )
        try:
            async for chunk in response:
                yield chunk
        finally:
            closer = getattr(response, "aclose", None)
            if closer is not None:
                await closer()

    async def stream(self, messages: list[dict]) -> AsyncIterator[str]:
        """Text deltas of one assistant message."""
        async for chunk in self._chunks(messages):
            delta = normalize(chunk)        # a chunk of a violated shape raises, naming it
            if delta is not None and delta.text:
                yield delta.text

    async def stream_deltas(
        self, messages: list[dict], tools: Sequence[dict] | None = None
    ) -> AsyncIterator[dict]:
        """OpenAI-shaped deltas (``content`` and ``tool_calls``), for function calling."""
        extra = {"tools": list(tools)} if tools else {}
        async for chunk in self._chunks(messages, **extra):
            delta = normalize(chunk)
            if delta is not None:
                yield _delta_dict(delta)

    async def complete(self, prompt: str) -> str:
        """One prompt, one answer (streamed and joined, so it works on any server)."""
        parts = [text async for text in self.stream([{"role": "user", "content": prompt}])]
        return "".join(parts)


class LiteLLMSubModel:
    """Sub-model through ``litellm.acompletion`` without streaming."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        self.model = model
        self.kwargs = kwargs
        self._litellm = import_litellm()

    async def complete(self, prompt: str) -> str:
        _require_asyncio()
        response = await self._litellm.acompletion(
            model=self.model, messages=[{"role": "user", "content": prompt}], **self.kwargs
        )
        message = _field(_field(response, "choices")[0], "message")
        return _field(message, "content") or ""


def _plain_prompt(messages: Sequence[Mapping[str, Any]]) -> str:
    lines = [f"{m['role']}: {m.get('content') or ''}" for m in messages]
    return "\n".join(lines) + "\nassistant: "


class TokenSpecModel:
    """Root model on the in-process ``token_spec`` decoder (the two tiers together).

    ``decoder`` is a ``token_spec.SpeculativeDecoder`` (anything with
    ``async stream(prompt, params)`` yielding verified text); ``params`` its
    ``SamplingParams``. ``format_prompt(messages) -> str`` turns the chat into the
    decoder's prompt; by default the target tokenizer's chat template when the
    decoder exposes one, else a plain ``role: content`` transcript.
    ``assistant_prefix`` prefills the start of the assistant message (e.g.
    ``"```repl\\n"`` to steer a small model into a cell); it is streamed as the
    message's first delta.
    """

    def __init__(
        self,
        decoder: Any,
        params: Any = None,
        *,
        format_prompt: Callable[[list[dict]], str] | None = None,
        assistant_prefix: str = "",
    ) -> None:
        self.decoder = decoder
        self.params = params
        self.format_prompt = format_prompt or self._default_format
        self.assistant_prefix = assistant_prefix

    def _tokenizer(self) -> Any:
        for owner in (self.decoder, getattr(self.decoder, "target", None)):
            tokenizer = getattr(owner, "tokenizer", None)
            if tokenizer is not None:
                return tokenizer
        return None

    def _default_format(self, messages: list[dict]) -> str:
        tokenizer = self._tokenizer()
        if tokenizer is not None and getattr(tokenizer, "chat_template", None):
            return tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
        return _plain_prompt(messages)

    async def stream(self, messages: list[dict]) -> AsyncIterator[str]:
        prompt = self.format_prompt(messages) + self.assistant_prefix
        source = (
            self.decoder.stream(prompt)
            if self.params is None
            else self.decoder.stream(prompt, self.params)
        )
        if self.assistant_prefix:  # prefilled: the prefix is part of the message
            yield self.assistant_prefix
        try:
            async for text in source:
                if text:
                    yield text
        finally:
            closer = getattr(source, "aclose", None)
            if closer is not None:
                await closer()

    async def complete(self, prompt: str) -> str:
        parts = [t async for t in self.stream([{"role": "user", "content": prompt}])]
        return "".join(parts)


def _chunks_of(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class ScriptedModel:
    """A root model that replays scripted messages, one per ``stream`` call.

    Each script entry is a string (streamed in ``chunk_size``-character deltas) or a
    list of deltas (streamed as given), or a list of OpenAI-shaped delta dicts for
    ``stream_deltas``. ``messages`` records what each call was sent. When the script
    runs out, ``stream`` repeats the last entry (a model that never finishes is how
    the max-turns tests are written). ``before_delta`` is an optional async hook
    ``(call_index, delta_index, delta)`` awaited before each delta is yielded; tests
    use it to wait for an event and so prove an ordering without sleeping.
    """

    def __init__(
        self,
        script: Iterable[str | Sequence[str] | Sequence[dict]],
        *,
        chunk_size: int = 7,
        before_delta: Callable[[int, int, Any], Awaitable[None]] | None = None,
    ) -> None:
        self.script = list(script)
        if not self.script:
            raise ValueError("ScriptedModel needs at least one scripted message")
        self.chunk_size = chunk_size
        self.before_delta = before_delta
        self.messages: list[list[dict]] = []

    def _next(self, messages: list[dict]) -> tuple[int, list]:
        index = len(self.messages)
        self.messages.append([dict(m) for m in messages])
        entry = self.script[min(index, len(self.script) - 1)]
        deltas = _chunks_of(entry, self.chunk_size) if isinstance(entry, str) else list(entry)
        return index, deltas

    async def _replay(self, messages: list[dict]) -> AsyncIterator[Any]:
        call, deltas = self._next(messages)
        for i, delta in enumerate(deltas):
            if self.before_delta is not None:
                await self.before_delta(call, i, delta)
            yield delta

    async def stream(self, messages: list[dict]) -> AsyncIterator[str]:
        async for delta in self._replay(messages):
            yield delta

    async def stream_deltas(
        self, messages: list[dict], tools: Sequence[dict] | None = None
    ) -> AsyncIterator[dict]:
        async for delta in self._replay(messages):
            yield delta  # any shape spectool.stream.adapters accepts (str, dicts, chunks)


class FunctionSubModel:
    """A sub-model from a plain function ``prompt -> str`` (sync or async)."""

    def __init__(self, fn: Callable[[str], str | Awaitable[str]]) -> None:
        self.fn = fn
        self.prompts: list[str] = []

    async def complete(self, prompt: str) -> str:
        self.prompts.append(prompt)
        out = self.fn(prompt)
        if isinstance(out, Awaitable):
            out = await out
        return str(out)
