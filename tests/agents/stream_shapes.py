"""One message (text, or two tool calls) as every stream shape spectool accepts.

The SDK shapes are built from the real SDK classes (openai, litellm, anthropic,
langchain-core: dev extra); the dict shapes are the documented wire formats.
Every builder splits text and arguments into small fragments and mixes in items
that carry nothing (None, "", role-only deltas, start/stop events).
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

CALLS = [("c1", "search", {"q": "alpha"}), ("c2", "search", {"q": "beta } \" {"})]


def pieces(text: str, size: int = 5) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def _chunk_dict(delta: dict) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def _openai_deltas(text: str, calls) -> list[dict]:
    out: list[dict] = [{"role": "assistant"}]
    out += [{"content": p} for p in pieces(text)]
    for i, (cid, name, args) in enumerate(calls):
        out.append({"tool_calls": [{"index": i, "id": cid, "type": "function",
                                    "function": {"name": name, "arguments": ""}}]})
        out += [{"tool_calls": [{"index": i, "function": {"arguments": p}}]}
                for p in pieces(json.dumps(args))]
    return out


def openai_dicts(text: str, calls=()) -> list:
    return [None, *[_chunk_dict(d) for d in _openai_deltas(text, calls)], {"choices": []}]


def openai_sdk(text: str, calls=()) -> list:
    from openai.types.chat import ChatCompletionChunk

    return [ChatCompletionChunk.model_validate(_chunk_dict(d)) for d in _openai_deltas(text, calls)]


def litellm_chunks(text: str, calls=()) -> list:
    from litellm.types.utils import Delta, ModelResponseStream, StreamingChoices

    return [ModelResponseStream(choices=[StreamingChoices(delta=Delta(**d))])
            for d in _openai_deltas(text, calls)]


def anthropic_events(text: str, calls=()) -> list:
    from anthropic.types import (InputJSONDelta, RawContentBlockDeltaEvent,
                                 RawContentBlockStartEvent, RawContentBlockStopEvent,
                                 RawMessageStopEvent, TextBlock, TextDelta, ToolUseBlock)

    out: list = [RawContentBlockStartEvent(type="content_block_start", index=0,
                                           content_block=TextBlock(type="text", text=""))]
    out += [RawContentBlockDeltaEvent(type="content_block_delta", index=0,
                                      delta=TextDelta(type="text_delta", text=p))
            for p in pieces(text)]
    out.append(RawContentBlockStopEvent(type="content_block_stop", index=0))
    for i, (cid, name, args) in enumerate(calls, start=1):
        out.append(RawContentBlockStartEvent(
            type="content_block_start", index=i,
            content_block=ToolUseBlock(type="tool_use", id=cid, name=name, input={})))
        out += [RawContentBlockDeltaEvent(type="content_block_delta", index=i,
                                          delta=InputJSONDelta(type="input_json_delta",
                                                               partial_json=p))
                for p in pieces(json.dumps(args))]
        out.append(RawContentBlockStopEvent(type="content_block_stop", index=i))
    out.append(RawMessageStopEvent(type="message_stop"))
    return out


def anthropic_dicts(text: str, calls=()) -> list:
    return [e.model_dump() for e in anthropic_events(text, calls)]


def langchain_chunks(text: str, calls=()) -> list:
    from langchain_core.messages import AIMessageChunk

    out = [AIMessageChunk(content=p) for p in pieces(text)] + [AIMessageChunk(content="")]
    for i, (cid, name, args) in enumerate(calls):
        out.append(AIMessageChunk(content="", tool_call_chunks=[
            {"name": name, "args": "", "id": cid, "index": i}]))
        out += [AIMessageChunk(content="", tool_call_chunks=[
            {"name": None, "args": p, "id": None, "index": i}]) for p in pieces(json.dumps(args))]
    return out


def responses_events(text: str, calls=()) -> list:
    from openai.types.responses import (ResponseFunctionCallArgumentsDeltaEvent,
                                        ResponseFunctionToolCall, ResponseOutputItemAddedEvent,
                                        ResponseTextDeltaEvent)

    out: list = [ResponseTextDeltaEvent(type="response.output_text.delta", item_id="m",
                                        output_index=0, content_index=0, delta=p, logprobs=[],
                                        sequence_number=n)
                 for n, p in enumerate(pieces(text))]
    for i, (cid, name, args) in enumerate(calls, start=1):
        out.append(ResponseOutputItemAddedEvent(
            type="response.output_item.added", output_index=i, sequence_number=0,
            item=ResponseFunctionToolCall(type="function_call", call_id=cid, name=name,
                                          arguments="", id=f"fc{i}")))
        out += [ResponseFunctionCallArgumentsDeltaEvent(
            type="response.function_call_arguments.delta", item_id=f"fc{i}", output_index=i,
            delta=p, sequence_number=0) for p in pieces(json.dumps(args))]
    return out


def text_only(text: str, calls=()) -> list:
    return [None, "", *pieces(text)]


def utf8_bytes(text: str, calls=()) -> list:
    data = text.encode()
    return [data[i:i + 3] for i in range(0, len(data), 3)]   # splits multi-byte characters


TEXT_SHAPES = {"str": text_only, "bytes": utf8_bytes, "openai_dict": openai_dicts,
               "openai_sdk": openai_sdk, "litellm": litellm_chunks,
               "anthropic_sdk": anthropic_events, "anthropic_dict": anthropic_dicts,
               "langchain": langchain_chunks, "responses": responses_events}
CALL_SHAPES = {k: v for k, v in TEXT_SHAPES.items() if k not in ("str", "bytes")}
