"""Stream adapters: every delta shape an agent stack produces, as one normal form.

``normalize(chunk)`` maps one streamed item to a :class:`Delta` (message text plus
tool-call fragments), or ``None`` for items that carry nothing (``None``, ``""``,
role-only deltas, keep-alives, start/stop events). ``deltas(stream)`` and
``text_deltas(stream)`` apply it to a whole stream, sync or async; bytes are
decoded incrementally as UTF-8 (a character split across chunks is kept whole).
Accepted shapes:

* ``str``; ``bytes`` / ``bytearray``;
* OpenAI chat completions: SDK ``ChatCompletionChunk`` objects, litellm
  ``ModelResponseStream`` chunks, raw ``chat.completion.chunk`` dicts (first
  choice), bare choice deltas (``{"content": ..., "tool_calls": [...]}``) and the
  flat ``{"index", "name", "arguments"}`` tool-call form;
* OpenAI Responses API events (``response.output_text.delta``,
  ``response.output_item.added`` for a ``function_call``,
  ``response.function_call_arguments.delta``) and the OpenAI Agents SDK's
  ``raw_response_event`` wrapper around them (its other events carry nothing new);
* Anthropic Messages stream events: ``content_block_start`` (a ``tool_use``
  block's id and name), ``content_block_delta`` with ``text_delta`` or
  ``input_json_delta``; SDK objects or dicts. The SDK helper's derived events
  (``text``, ``input_json``, ...) repeat a raw event and are skipped;
* LangChain ``AIMessageChunk`` (``content`` as a string or content blocks,
  ``tool_call_chunks`` with ``name`` / ``args`` / ``id`` / ``index``).

Anything else raises :class:`~spectool.errors.StreamShapeError`, naming the type; so
does an item of a known shape whose field holds the wrong type (``{"choices":
"garbage"}``), naming the field. An exception raised while an item is read otherwise
(an adapter's bug, an SDK object whose attribute raises) becomes
:class:`~spectool.errors.StreamAdapterError`: it is not the model stream's.
Pure: no I/O, no third-party imports (objects are read by attribute).
"""

from __future__ import annotations

import codecs
import json
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio.lowlevel

from ..errors import StreamAdapterError, StreamShapeError

__all__ = ["Delta", "ToolCallDelta", "StreamNormalizer", "normalize", "deltas", "text_deltas"]


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of one tool call. ``index`` orders calls in the message (``None``:
    the flat form, where a name starts a new call and a nameless fragment continues
    the last one); ``name`` and ``arguments`` are text fragments to append."""

    index: int | None = None
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class Delta:
    """One normalised stream item: message text and tool-call fragments."""

    text: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()


_EXPECTED = ("str, bytes, an OpenAI / litellm chat-completion chunk or delta, an OpenAI "
             "Responses / Agents SDK stream event, an Anthropic Messages stream event or a "
             "LangChain AIMessageChunk")

# Anthropic events that carry no new text or tool-call data for us (the SDK helper's
# derived events repeat a raw content_block_delta).
_ANTHROPIC_SKIP = frozenset({
    "message_start", "message_delta", "message_stop", "content_block_stop", "ping", "error",
    "text", "input_json", "citation", "thinking", "signature",
})
# OpenAI Agents SDK events other than raw_response_event (run items repeat raw events)
_AGENTS_SKIP = frozenset({"run_item_stream_event", "agent_updated_stream_event"})


def _get(obj: Any, name: str) -> Any:
    """Read ``name`` from a mapping or an object (SDK models, litellm objects)."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _type_name(obj: Any) -> str:
    cls = type(obj)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _refuse(chunk: Any, why: str = "") -> StreamShapeError:
    detail = f" ({why})" if why else ""
    return StreamShapeError(
        f"unsupported model stream item of type {_type_name(chunk)}{detail}; expected {_EXPECTED}")


# -- fields of a known shape, checked as they are read --------------------------------
# A field of a known shape holding the wrong type (``{"choices": "garbage"}``) is an
# error naming the field, never a silently dropped delta. None stands for "absent".
_NOT_RECORDS = (str, bytes, bytearray, memoryview, int, float, complex, bool, list, tuple,
                set, frozenset)


def _is_record(value: Any) -> bool:
    """A mapping or an object read by attribute (an SDK model), not a plain value."""
    return isinstance(value, Mapping) or not isinstance(value, _NOT_RECORDS)


def _misshapen(where: str, field: str, want: str, value: Any) -> StreamShapeError:
    return StreamShapeError(f"malformed {where}: field {field!r} must be {want}, "
                            f"not {_type_name(value)}")


def _text_field(obj: Any, name: str, where: str) -> str | None:
    value = _get(obj, name)
    if value is None or isinstance(value, str):
        return value
    raise _misshapen(where, name, "a string", value)


def _int_field(obj: Any, name: str, where: str) -> int | None:
    value = _get(obj, name)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise _misshapen(where, name, "an integer", value)


def _record_field(obj: Any, name: str, where: str) -> Any:
    value = _get(obj, name)
    if value is None or _is_record(value):
        return value
    raise _misshapen(where, name, "an object", value)


def _records_field(obj: Any, name: str, where: str) -> list[Any]:
    """A list of objects (``choices``, ``tool_calls``, ...); [] when absent."""
    value = _get(obj, name)
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise _misshapen(where, name, "a list", value)
    for i, item in enumerate(value):
        if not _is_record(item):
            raise _misshapen(where, f"{name}[{i}]", "an object", item)
    return list(value)


def _delta(text: Any, calls: list[ToolCallDelta]) -> Delta | None:
    text = text if isinstance(text, str) else ""
    if not text and not calls:
        return None
    return Delta(text, tuple(calls))


def _content_text(obj: Any, where: str) -> str:
    """Text of a ``content`` field: a string, or a list of content blocks."""
    content = _get(obj, "content")
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):  # LangChain / Anthropic-style content blocks
        parts = []
        for i, block in enumerate(content):
            if isinstance(block, str):
                parts.append(block)
            elif not _is_record(block):
                raise _misshapen(where, f"content[{i}]", "a string or a content block", block)
            elif _get(block, "type") in ("text", "text_delta", "output_text"):
                parts.append(_text_field(block, "text", f"{where} content[{i}]") or "")
        return "".join(parts)
    raise _misshapen(where, "content", "a string or a list of content blocks", content)


def _openai_call(part: Any, where: str) -> ToolCallDelta:
    function = _record_field(part, "function", where)
    source, inner = (part, where) if function is None else (function, f"{where}.function")
    return ToolCallDelta(index=_int_field(part, "index", where),
                         id=_text_field(part, "id", where),
                         name=_text_field(source, "name", inner) or None,
                         arguments=_text_field(source, "arguments", inner) or "")


def _openai_delta(delta: Any, where: str) -> Delta | None:
    """A chat-completions choice delta (SDK ``ChoiceDelta``, litellm ``Delta`` or dict)."""
    if delta is None:
        return None
    calls = [_openai_call(part, f"{where}.tool_calls[{i}]")
             for i, part in enumerate(_records_field(delta, "tool_calls", where))]
    return _delta(_content_text(delta, where), calls)


def _langchain(chunk: Any) -> Delta | None:
    where = "LangChain message chunk"
    calls = []
    for i, c in enumerate(_records_field(chunk, "tool_call_chunks", where)):
        at = f"{where} tool_call_chunks[{i}]"
        calls.append(ToolCallDelta(index=_int_field(c, "index", at), id=_text_field(c, "id", at),
                                   name=_text_field(c, "name", at) or None,
                                   arguments=_text_field(c, "args", at) or ""))
    return _delta(_content_text(chunk, where), calls)


def _anthropic(kind: str, chunk: Any) -> Delta | None:
    where = f"Anthropic {kind} event"
    index = _int_field(chunk, "index", where)
    if kind == "content_block_start":
        block = _record_field(chunk, "content_block", where)
        at = f"{where} content_block"
        block_type = _text_field(block, "type", at) if block is not None else None
        if block_type in ("tool_use", "server_tool_use"):
            given = _get(block, "input")
            if given is not None and not isinstance(given, Mapping):
                raise _misshapen(at, "input", "an object", given)
            try:
                arguments = json.dumps(dict(given)) if given else ""   # streamed input starts as {}
            except (TypeError, ValueError):
                raise _misshapen(at, "input", "JSON data", given) from None
            return Delta("", (ToolCallDelta(index, _text_field(block, "id", at),
                                            _text_field(block, "name", at), arguments),))
        return _delta(_text_field(block, "text", at) if block_type == "text" else "", [])
    delta = _record_field(chunk, "delta", where)
    at = f"{where} delta"
    delta_type = _get(delta, "type") if delta is not None else None
    if delta_type == "text_delta":
        return _delta(_text_field(delta, "text", at), [])
    if delta_type == "input_json_delta":
        fragment = _text_field(delta, "partial_json", at) or ""
        return Delta("", (ToolCallDelta(index, None, None, fragment),)) if fragment else None
    return None  # thinking / signature / citations deltas carry no message text


def _responses(kind: str, event: Any) -> Delta | None:
    """OpenAI Responses API stream events (also inside the Agents SDK's raw events)."""
    where = f"Responses API {kind} event"
    if kind == "response.output_text.delta":
        return _delta(_text_field(event, "delta", where), [])
    if kind == "response.output_item.added":
        item = _record_field(event, "item", where)
        if item is not None and _get(item, "type") == "function_call":
            at = f"{where} item"
            return Delta("", (ToolCallDelta(_int_field(event, "output_index", where),
                                            _text_field(item, "call_id", at),
                                            _text_field(item, "name", at),
                                            _text_field(item, "arguments", at) or ""),))
        return None
    if kind == "response.function_call_arguments.delta":
        fragment = _text_field(event, "delta", where) or ""
        return (Delta("", (ToolCallDelta(_int_field(event, "output_index", where), None, None,
                                         fragment),))
                if fragment else None)
    return None  # created / in_progress / done / completed ...: nothing new


def normalize(chunk: Any) -> Delta | None:
    """One stream item -> ``Delta`` (``None``: nothing in it). Bytes need a
    ``StreamNormalizer`` (a character may span chunks). Raises ``StreamShapeError``
    for an item of no known shape or a known shape with a field of the wrong type
    (naming the field), and ``StreamAdapterError`` when reading the item failed
    otherwise (the adapter's own exception is its ``__cause__``)."""
    if chunk is None:
        return None
    if isinstance(chunk, str):
        return Delta(chunk) if chunk else None
    if isinstance(chunk, Delta):  # already normalised (e.g. the output of deltas())
        return chunk if chunk.text or chunk.tool_calls else None
    if isinstance(chunk, (bytes, bytearray, memoryview)):
        raise _refuse(chunk, "bytes need a StreamNormalizer or deltas(): "
                             "a character may span chunks")
    try:
        return _adapt(chunk)
    except StreamShapeError:
        raise
    except Exception as exc:
        raise StreamAdapterError(f"the stream adapter failed on an item of type "
                                 f"{_type_name(chunk)}: {exc!r}"[:500]) from exc


def _adapt(chunk: Any) -> Delta | None:
    kind = _get(chunk, "type")
    if isinstance(kind, str):
        if kind == "raw_response_event":          # OpenAI Agents SDK wrapper
            return normalize(_get(chunk, "data"))
        if kind in _AGENTS_SKIP or kind in _ANTHROPIC_SKIP:
            return None
        if kind.startswith("response."):
            return _responses(kind, chunk)
        if kind in ("content_block_start", "content_block_delta"):
            return _anthropic(kind, chunk)
        if kind in ("AIMessageChunk", "ai"):      # LangChain message chunks (or dumps)
            return _langchain(chunk)
    if _get(chunk, "tool_call_chunks") is not None:  # LangChain chunk of another type tag
        return _langchain(chunk)
    if _get(chunk, "choices") is not None:          # a whole chat.completion.chunk
        where = "chat completion chunk"
        choices = _records_field(chunk, "choices", where)
        if not choices:
            return None
        return _openai_delta(_record_field(choices[0], "delta", f"{where} choices[0]"),
                             f"{where} choices[0].delta")
    if isinstance(chunk, Mapping):
        if "tool_calls" in chunk or "content" in chunk or "role" in chunk:
            return _openai_delta(chunk, "chat completion delta")
        if "name" in chunk or "arguments" in chunk:  # flat tool-call form
            return Delta("", (_openai_call(chunk, "tool-call delta"),))
        if not chunk:
            return None
    elif hasattr(chunk, "tool_calls") and hasattr(chunk, "content"):  # an SDK choice delta
        return _openai_delta(chunk, "chat completion delta")
    raise _refuse(chunk)


class StreamNormalizer:
    """Stateful ``normalize``: decodes bytes incrementally (UTF-8, invalid bytes become
    U+FFFD, as a text decoder with ``errors="replace"`` does)."""

    def __init__(self) -> None:
        self._decoder: Any = None

    def feed(self, chunk: Any) -> Delta | None:
        if isinstance(chunk, str):  # the hot path: plain text deltas
            return Delta(chunk) if chunk else None
        if isinstance(chunk, (bytes, bytearray, memoryview)):
            if self._decoder is None:
                self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
            text = self._decoder.decode(bytes(chunk))
            return Delta(text) if text else None
        return normalize(chunk)

    def close(self) -> Delta | None:
        """End of stream: the text of an incomplete UTF-8 sequence (as U+FFFD)."""
        if self._decoder is None:
            return None
        tail = self._decoder.decode(b"", final=True)
        return Delta(tail) if tail else None


async def deltas(stream: AsyncIterable[Any] | Iterable[Any]) -> AsyncIterator[Delta]:
    """Normalised, non-empty deltas of a sync or async stream; closes the stream."""
    normalizer = StreamNormalizer()
    if not hasattr(stream, "__aiter__"):
        for chunk in stream:
            delta = normalizer.feed(chunk)
            if delta is not None:
                yield delta
            await anyio.lowlevel.checkpoint()
    else:
        iterator = stream.__aiter__()
        try:
            async for chunk in iterator:
                delta = normalizer.feed(chunk)
                if delta is not None:
                    yield delta
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()
    tail = normalizer.close()
    if tail is not None:
        yield tail


async def text_deltas(stream: AsyncIterable[Any] | Iterable[Any]) -> AsyncIterator[str]:
    """The message text of any accepted stream, as non-empty ``str`` deltas."""
    deltas_ = deltas(stream)
    try:
        async for delta in deltas_:
            if delta.text:
                yield delta.text
    finally:
        with anyio.CancelScope(shield=True):
            await deltas_.aclose()
