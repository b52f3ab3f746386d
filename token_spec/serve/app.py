"""The OpenAI-compatible HTTP app (Starlette): routes, streaming, errors, lifespan.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions`` (both with
``stream: true`` as server-sent events ending ``data: [DONE]``), ``GET /v1/models``,
``GET /health`` (200 once the model is loaded: the app is built around a loaded one),
``GET /metrics`` (Prometheus text, vLLM's names; ``token_spec.serve.metrics``).

Every response carries the header ``x-token-spec-lossless: true|false``; every
completion body carries ``"lossless"`` too (false under ``--acceptance relaxed``).
A client that disconnects cancels its request (streaming: sse-starlette cancels the
generator; non-streaming: a watcher on ``http.disconnect`` cancels the handler), which
frees its KV cache at once. Client mistakes get a 4xx with an OpenAI-style error body.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .engine import BatchEngine, ContextTooLong, Request as GenRequest, TokenLogprob, Update
from .metrics import CONTENT_TYPE_LATEST, ServeMetrics
from .protocol import APIError, ChatRequest, CompletionRequest, error_body, parse_request
from .scheduler import Scheduler

__all__ = ["ServerInfo", "build_app", "LOSSLESS_HEADER"]

LOSSLESS_HEADER = "x-token-spec-lossless"


@dataclass
class ServerInfo:
    """What the server reports about itself (``/v1/models``, response fields)."""

    model_name: str
    speculative: str
    gamma: int
    acceptance: str
    attention: str
    dtype: str
    default_max_tokens: int = 256

    @property
    def lossless(self) -> bool:
        return self.acceptance == "strict"

    @property
    def fingerprint(self) -> str:
        return f"token_spec-{self.speculative}-g{self.gamma}-{self.acceptance}-{self.attention}-{self.dtype}"


class _LosslessHeader:
    """ASGI middleware: every HTTP response says whether this server is lossless."""

    def __init__(self, app, lossless: bool) -> None:
        self.app, self.value = app, (b"true" if lossless else b"false")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_header(message):
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", []), (LOSSLESS_HEADER.encode(), self.value)]
            await send(message)

        await self.app(scope, receive, send_with_header)


def build_app(engine: BatchEngine, tokenizer, info: ServerInfo, *, encode_chat, encode_text) -> Starlette:
    """The Starlette app around a loaded engine. ``encode_chat(messages) -> ids`` applies
    the chat template; ``encode_text(str) -> ids`` tokenises a raw prompt."""
    metrics = ServeMetrics(info.model_name)
    engine.on_round = metrics.record_round
    scheduler = Scheduler(engine)

    @functools.lru_cache(maxsize=65536)
    def token_text(tid: int) -> str:
        return tokenizer.decode([tid], skip_special_tokens=False, clean_up_tokenization_spaces=False)

    @asynccontextmanager
    async def lifespan(app):
        async with anyio.create_task_group() as tg:
            await tg.start(scheduler.run)
            app.state.scheduler = scheduler
            yield
            tg.cancel_scope.cancel()

    def extra_fields() -> dict:
        return {"lossless": info.lossless, "system_fingerprint": info.fingerprint,
                "speculative": {"method": info.speculative, "gamma": info.gamma, "acceptance": info.acceptance}}

    def check_model(req) -> None:
        if req.model is not None and req.model not in (info.model_name, f"openai/{info.model_name}"):
            raise APIError(404, f"The model `{req.model}` does not exist. This server serves `{info.model_name}`.",
                           "model", type="NotFoundError", code="model_not_found")

    def make_request(prefix: str, prompt_ids: list[int], req) -> GenRequest:
        try:
            params = req.sampling(info.default_max_tokens)
        except ValueError as exc:
            raise APIError(400, str(exc)) from None
        greq = GenRequest(id=f"{prefix}-{uuid.uuid4().hex}", prompt_ids=prompt_ids, params=params,
                          logprobs=req.num_logprobs)
        try:
            engine.validate(greq)
        except ContextTooLong as exc:
            raise APIError(400, str(exc), "max_tokens", code="context_length_exceeded") from None
        except ValueError as exc:
            raise APIError(400, str(exc)) from None
        return greq

    async def read_json(request: Request):
        try:
            return json.loads(await request.body())
        except (ValueError, UnicodeDecodeError):
            raise APIError(400, "the request body is not valid JSON") from None

    # -- logprobs in both OpenAI shapes --------------------------------------------
    def chat_logprobs(lps: list[TokenLogprob] | None):
        if lps is None:
            return None
        return {"content": [{
            "token": token_text(lp.token_id), "logprob": lp.logprob,
            "bytes": list(token_text(lp.token_id).encode()),
            "top_logprobs": [{"token": token_text(t), "logprob": v, "bytes": list(token_text(t).encode())}
                             for t, v in lp.top],
        } for lp in lps]}

    def completion_logprobs(lps: list[TokenLogprob] | None, offset: int):
        if lps is None:
            return None
        tokens, offsets, pos = [], [], offset
        for lp in lps:
            s = token_text(lp.token_id)
            tokens.append(s)
            offsets.append(pos)
            pos += len(s)
        return {"tokens": tokens, "token_logprobs": [lp.logprob for lp in lps],
                "top_logprobs": [{token_text(t): v for t, v in lp.top} for lp in lps], "text_offset": offsets}

    # -- generation ------------------------------------------------------------------
    async def collect(greq: GenRequest, t0: float) -> tuple[str, list[TokenLogprob], Update]:
        text, lps, last, ttft = [], [], None, None
        async with scheduler.generate(greq) as updates:
            async for upd in updates:
                if ttft is None and upd.token_ids:
                    ttft = time.perf_counter() - t0
                text.append(upd.text)
                lps.extend(upd.logprobs or [])
                last = upd
                if upd.finish_reason is not None:
                    break
        if last is None or last.finish_reason is None:  # pragma: no cover - the engine always finishes
            raise APIError(500, "generation ended without a result", type="server_error")
        if last.finish_reason == "error":
            raise APIError(500, last.error or "generation failed", type="server_error")
        metrics.record_request(finish_reason=last.finish_reason, prompt_tokens=last.prompt_tokens,
                               completion_tokens=last.completion_tokens, latency_s=time.perf_counter() - t0,
                               ttft_s=ttft)
        return "".join(text), lps, last

    async def until_disconnect(request: Request, scope: anyio.CancelScope) -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                scope.cancel()
                return

    async def run_unary(request: Request, greq: GenRequest, t0: float):
        result = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(until_disconnect, request, tg.cancel_scope)
            result = await collect(greq, t0)
            tg.cancel_scope.cancel()
        return result

    def usage(u: Update) -> dict:
        return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                "total_tokens": u.prompt_tokens + u.completion_tokens}

    async def stream_events(greq: GenRequest, t0: float, chunk, include_usage: bool) -> AsyncIterator[dict]:
        ttft = None
        async with scheduler.generate(greq) as updates:
            first = True
            async for upd in updates:
                if ttft is None and upd.token_ids:
                    ttft = time.perf_counter() - t0
                if upd.finish_reason == "error":
                    yield {"data": json.dumps(error_body(upd.error or "generation failed", "server_error"))}
                    break
                if upd.text or upd.logprobs or upd.finish_reason or first:
                    yield {"data": json.dumps(chunk(upd, first))}
                    first = False
                if upd.finish_reason is not None:
                    metrics.record_request(finish_reason=upd.finish_reason, prompt_tokens=upd.prompt_tokens,
                                           completion_tokens=upd.completion_tokens,
                                           latency_s=time.perf_counter() - t0, ttft_s=ttft)
                    if include_usage:
                        yield {"data": json.dumps(chunk(upd, False, usage_only=True))}
                    break
        yield {"data": "[DONE]"}

    # -- routes ------------------------------------------------------------------------
    async def chat_completions(request: Request) -> Response:
        t0 = time.perf_counter()
        req = parse_request(ChatRequest, await read_json(request))
        check_model(req)
        try:
            prompt_ids = encode_chat(req.chat_messages())
        except ValueError as exc:
            raise APIError(400, str(exc), "messages") from None
        greq = make_request("chatcmpl", prompt_ids, req)
        created = int(time.time())
        base = {"id": greq.id, "created": created, "model": info.model_name, **extra_fields()}
        if req.stream:
            def chunk(upd: Update, first: bool, usage_only: bool = False) -> dict:
                if usage_only:
                    return {**base, "object": "chat.completion.chunk", "choices": [], "usage": usage(upd)}
                delta = {"role": "assistant", "content": upd.text} if first else {"content": upd.text}
                return {**base, "object": "chat.completion.chunk", "choices": [{
                    "index": 0, "delta": delta, "logprobs": chat_logprobs(upd.logprobs),
                    "finish_reason": upd.finish_reason}]}

            return EventSourceResponse(stream_events(greq, t0, chunk, req.include_usage), sep="\n", ping=15)
        result = await run_unary(request, greq, t0)
        if result is None:  # client went away
            return Response(status_code=499)
        text, lps, last = result
        return JSONResponse({**base, "object": "chat.completion", "choices": [{
            "index": 0, "message": {"role": "assistant", "content": text},
            "logprobs": chat_logprobs(lps) if greq.logprobs is not None else None,
            "finish_reason": last.finish_reason}], "usage": usage(last)})

    async def completions(request: Request) -> Response:
        t0 = time.perf_counter()
        req = parse_request(CompletionRequest, await read_json(request))
        check_model(req)
        prompt = req.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            prompt_ids = encode_text(prompt)
        else:
            prompt_ids = [int(t) for t in prompt]
            if min(prompt_ids) < 0 or max(prompt_ids) >= engine.lm.vocab_size:
                raise APIError(400, f"prompt token ids must lie in [0, {engine.lm.vocab_size})", "prompt")
        if not prompt_ids:
            raise APIError(400, "the prompt is empty", "prompt")
        greq = make_request("cmpl", prompt_ids, req)
        base = {"id": greq.id, "created": int(time.time()), "model": info.model_name, **extra_fields()}
        if req.stream:
            offset = [0]

            def chunk(upd: Update, first: bool, usage_only: bool = False) -> dict:
                if usage_only:
                    return {**base, "object": "text_completion", "choices": [], "usage": usage(upd)}
                lp = completion_logprobs(upd.logprobs, offset[0])
                offset[0] += len(upd.text)
                return {**base, "object": "text_completion", "choices": [{
                    "index": 0, "text": upd.text, "logprobs": lp, "finish_reason": upd.finish_reason}]}

            return EventSourceResponse(stream_events(greq, t0, chunk, req.include_usage), sep="\n", ping=15)
        result = await run_unary(request, greq, t0)
        if result is None:
            return Response(status_code=499)
        text, lps, last = result
        return JSONResponse({**base, "object": "text_completion", "choices": [{
            "index": 0, "text": text, "logprobs": completion_logprobs(lps, 0) if greq.logprobs is not None else None,
            "finish_reason": last.finish_reason}], "usage": usage(last)})

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{
            "id": info.model_name, "object": "model", "created": 0, "owned_by": "token_spec",
            "max_model_len": engine.lm.max_positions, **extra_fields()}]})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": info.model_name, "lossless": info.lossless})

    async def metrics_route(request: Request) -> Response:
        body = await anyio.to_thread.run_sync(
            functools.partial(metrics.render, running=len(engine.active), waiting=len(engine.waiting)))
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def api_error(request: Request, exc: APIError) -> Response:
        return JSONResponse(exc.body(), status_code=exc.status)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        kind = "NotFoundError" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(exc.detail), kind), status_code=exc.status_code)

    async def server_error(request: Request, exc: Exception) -> Response:
        return JSONResponse(error_body(f"internal error: {type(exc).__name__}: {exc}", "server_error"), status_code=500)

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics_route, methods=["GET"]),
        ],
        exception_handlers={APIError: api_error, HTTPException: http_error, Exception: server_error},
        lifespan=lifespan,
    )
    app.state.engine = engine
    app.state.metrics = metrics
    app.state.info = info
    app.add_middleware(_LosslessHeader, lossless=info.lossless)
    return app
