"""A stand-in for ``token_spec serve`` that follows the same command-line contract,
for the launcher's tests only (stdlib; no model):

    python stub_token_server.py serve --host 127.0.0.1 --port P --speculative S
                                      --gamma G --served-model-name NAME [--load-s X]
                                      [--fail] [--target T] [--threads N]

``GET /health`` answers 503 until ``--load-s`` seconds have passed, then 200;
``POST /v1/chat/completions`` (non-streaming) answers ``"<NAME>/<S>: <last 12 chars of
the prompt>"`` with the OpenAI response shape. ``--fail`` exits with status 3 before
serving (a server that never becomes healthy).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["serve"])
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--speculative", choices=["ngram", "suffix", "draft", "ngram+draft", "dspark",
                                              "none"], required=True)
    ap.add_argument("--target", default="auto")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--gamma", type=int, required=True)
    ap.add_argument("--served-model-name", required=True)
    ap.add_argument("--load-s", type=float, default=0.3)
    ap.add_argument("--fail", action="store_true")
    args = ap.parse_args()
    if args.fail:
        print("stub: failing on purpose", file=sys.stderr)
        return 3
    ready_at = time.monotonic() + args.load_s

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):  # quiet
            pass

        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                ok = time.monotonic() >= ready_at
                self._send(200 if ok else 503, {"ok": ok})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self):
            if self.path != "/v1/chat/completions":
                self._send(404, {"error": "not found"})
                return
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            prompt = body["messages"][-1]["content"]
            text = f"{args.served_model_name}/{args.speculative}: {prompt[-12:]}"
            self._send(200, {
                "id": "stub", "object": "chat.completion", "created": int(time.time()),
                "model": args.served_model_name,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
