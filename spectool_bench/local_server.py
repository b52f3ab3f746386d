"""Launch the project's own token-tier server (``token_spec serve``) on 127.0.0.1.

Contract (the server side is ``token_spec``'s)::

    <command> serve --host 127.0.0.1 --port P --speculative {ngram,suffix,draft,ngram+draft,dspark,none}
                    --gamma G --served-model-name NAME

serves OpenAI chat completions at ``http://127.0.0.1:P/v1`` and ``GET /health``
returns 200 once the model is loaded. ``command`` defaults to
``[sys.executable, "-m", "token_spec"]``.

:class:`LocalTokenServer` is an async context manager: it picks a free port, starts
the subprocess (its output goes to a log file), polls ``/health`` until 200 within
``health_timeout_s`` (a process that exits or a timeout raises
:class:`LocalServerError` with the tail of its log), and on exit terminates it
(SIGTERM, then SIGKILL after ``stop_timeout_s``). ``litellm_model`` and
``litellm_kwargs`` are what the litellm sub-model needs to reach it.
"""

from __future__ import annotations

import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

__all__ = ["LocalTokenServer", "LocalServerError", "free_port", "SPECULATIVE"]

SPECULATIVE = ("ngram", "suffix", "draft", "ngram+draft", "dspark", "none")


class LocalServerError(RuntimeError):
    """The local server did not start (the message carries its log's tail)."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class LocalTokenServer:
    def __init__(self, speculative: str = "ngram", *, gamma: int = 4,
                 model_name: str = "smollm2-local", command: list[str] | None = None,
                 health_timeout_s: float = 300.0, stop_timeout_s: float = 10.0,
                 extra_args: list[str] | None = None) -> None:
        if speculative not in SPECULATIVE:
            raise ValueError(f"speculative must be one of {SPECULATIVE}, not {speculative!r}")
        if gamma < 1:
            raise ValueError("gamma must be >= 1")
        self.speculative = speculative
        self.gamma = gamma
        self.model_name = model_name
        self.command = list(command) if command else [sys.executable, "-m", "token_spec"]
        self.health_timeout_s = health_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.extra_args = list(extra_args or [])
        self.host = "127.0.0.1"
        self.port: int | None = None
        self.process: Any = None
        self.log_path: Path | None = None
        self._log: Any = None

    @property
    def api_base(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def litellm_model(self) -> str:
        return f"openai/{self.model_name}"

    def litellm_kwargs(self) -> dict[str, Any]:
        return {"api_base": self.api_base, "api_key": "local"}

    def argv(self) -> list[str]:
        return self.command + ["serve", "--host", self.host, "--port", str(self.port),
                               "--speculative", self.speculative, "--gamma", str(self.gamma),
                               "--served-model-name", self.model_name] + self.extra_args

    def _log_tail(self, chars: int = 2000) -> str:
        try:
            self._log.flush()
            return self.log_path.read_text(errors="replace")[-chars:]
        except Exception:
            return ""

    async def __aenter__(self) -> "LocalTokenServer":
        import httpx

        self.port = free_port(self.host)
        self._log = tempfile.NamedTemporaryFile("w+b", prefix="token_spec_serve_",
                                                suffix=".log", delete=False)
        self.log_path = Path(self._log.name)
        self.process = await anyio.open_process(self.argv(), stdout=self._log,
                                                stderr=self._log)
        url = f"http://{self.host}:{self.port}/health"
        try:
            with anyio.fail_after(self.health_timeout_s):
                async with httpx.AsyncClient(timeout=5.0) as client:
                    while True:
                        if self.process.returncode is not None:
                            raise LocalServerError(
                                f"the server exited with status {self.process.returncode} "
                                f"before it was healthy ({' '.join(self.argv())}):\n"
                                + self._log_tail())
                        try:
                            if (await client.get(url)).status_code == 200:
                                return self
                        except httpx.TransportError:
                            pass
                        await anyio.sleep(0.2)
        except TimeoutError:
            await self._stop()
            raise LocalServerError(f"the server was not healthy within "
                                   f"{self.health_timeout_s:g} s:\n" + self._log_tail()) from None
        except BaseException:
            await self._stop()
            raise

    async def _stop(self) -> None:
        proc, self.process = self.process, None
        if proc is not None:
            with anyio.CancelScope(shield=True):
                if proc.returncode is None:
                    proc.terminate()
                    with anyio.move_on_after(self.stop_timeout_s):
                        await proc.wait()
                    if proc.returncode is None:
                        proc.kill()
                        await proc.wait()
                await proc.aclose()
        if self._log is not None:
            self._log.close()

    async def __aexit__(self, *exc: Any) -> None:
        await self._stop()
