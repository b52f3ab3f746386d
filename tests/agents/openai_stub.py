"""A tiny OpenAI-compatible chat server on 127.0.0.1, for tests only.

``/v1/chat/completions`` answers from a reply function ``(request_body) -> str |
dict`` (a dict ``{"tool_calls": [{"name": ..., "arguments": ...}]}`` streams tool
calls); with ``"stream": true`` it sends server-sent events, one
``chat.completion.chunk`` per ``chunk_size`` characters and ``data: [DONE]``. It
serves at most ``max_requests`` requests (later ones get HTTP 429), runs in one
daemon thread, and stops when its ``with`` block ends. stdlib only.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[[dict], "str | dict"]


class OpenAIStub:
    def __init__(self, reply: Reply, *, max_requests: int = 20, chunk_size: int = 4,
                 after_call: Callable[[int], None] | None = None) -> None:
        self.reply = reply
        self.after_call = after_call   # (call index) -> None, in the server thread, after
        #                                that call's arguments were streamed
        self.max_requests = max_requests
        self.chunk_size = chunk_size
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="openai-stub", daemon=True)

    @property
    def api_base(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> "OpenAIStub":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    # -- request handling ------------------------------------------------------------
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"   # one request per connection; EOF ends a stream

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with stub._lock:
                    if len(stub.requests) >= stub.max_requests or not self.path.endswith(
                            "/chat/completions"):
                        self.send_error(429 if self.path.endswith("/chat/completions") else 404)
                        return
                    stub.requests.append(body)
                stub._answer(self, body)

        return Handler

    def _answer(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        reply = self.reply(body)
        model = body.get("model", "stub")
        ident = f"chatcmpl-{len(self.requests)}"
        created = int(time.time())
        if not body.get("stream"):
            message = {"role": "assistant", "content": reply if isinstance(reply, str) else None}
            if isinstance(reply, dict):
                message["tool_calls"] = [
                    {"id": f"call_{i}", "type": "function", "function": call}
                    for i, call in enumerate(reply["tool_calls"])]
            payload = {"id": ident, "object": "chat.completion", "created": created,
                       "model": model,
                       "choices": [{"index": 0, "message": message,
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                 "total_tokens": 2}}
            data = json.dumps(payload).encode()
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.end_headers()

        def event(delta: dict, finish: str | None = None) -> None:
            chunk = {"id": ident, "object": "chat.completion.chunk", "created": created,
                     "model": model,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            handler.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            handler.wfile.flush()

        n = self.chunk_size
        if isinstance(reply, str):
            event({"role": "assistant", "content": ""})
            for i in range(0, len(reply), n):
                event({"content": reply[i:i + n]})
            event({}, "stop")
        else:
            event({"role": "assistant", "content": None})
            for index, call in enumerate(reply["tool_calls"]):
                event({"tool_calls": [{"index": index, "id": f"call_{index}", "type": "function",
                                       "function": {"name": call["name"], "arguments": ""}}]})
                args = call["arguments"]
                for i in range(0, len(args), n):
                    event({"tool_calls": [{"index": index,
                                           "function": {"arguments": args[i:i + n]}}]})
                if self.after_call is not None:
                    self.after_call(index)
            event({}, "tool_calls")
        handler.wfile.write(b"data: [DONE]\n\n")
        handler.wfile.flush()
