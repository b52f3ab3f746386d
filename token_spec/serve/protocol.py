"""OpenAI request bodies (pydantic) and OpenAI-style error bodies.

Only what the server implements is accepted: ``n`` must be 1; penalties, ``logit_bias``,
tools and ``response_format`` other than text are refused with a 400 that names the
parameter (never silently ignored). Unknown extra fields are ignored, as vLLM does.
Every problem becomes ``APIError(status, message, param)``, rendered as
``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..sampling import SamplingParams

__all__ = ["APIError", "ChatRequest", "CompletionRequest", "parse_request", "error_body"]

MAX_TOP_LOGPROBS = 20
MAX_STOP = 4


class APIError(Exception):
    """An error the client caused (4xx) or the server hit, with an OpenAI-style body."""

    def __init__(self, status: int, message: str, param: str | None = None, *,
                 type: str = "invalid_request_error", code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.type, self.code = status, message, param, type, code

    def body(self) -> dict:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def _only(accepted: Callable[[Any], bool], message: str) -> AfterValidator:
    """A field constraint for a parameter the server implements only in part: a value
    ``accepted`` rejects is refused with ``message`` (a 400 naming the parameter,
    never silently ignored)."""
    def check(value: Any) -> Any:
        if not accepted(value):
            raise ValueError(message)
        return value
    return AfterValidator(check)


_PENALTY = _only(lambda v: v == 0, "penalties are not supported (they would change the "
                                   "target distribution); use 0")


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=-1)  # vLLM: -1 (or 0) = off
    seed: int | None = None
    stop: str | list[str] | None = None
    n: Annotated[int, _only(lambda v: v == 1, "only n=1 is supported")] = 1
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    presence_penalty: Annotated[float, _PENALTY] = 0.0
    frequency_penalty: Annotated[float, _PENALTY] = 0.0
    logit_bias: Annotated[dict[str, float] | None,
                          _only(lambda v: not v, "logit_bias is not supported")] = None
    user: str | None = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, v):
        if v is None:
            return v
        stops = [v] if isinstance(v, str) else v
        if len(stops) > MAX_STOP:
            raise ValueError(f"at most {MAX_STOP} stop sequences are allowed")
        if any(s == "" for s in stops):
            raise ValueError("stop sequences must be non-empty")
        return v

    def sampling(self, default_max_tokens: int) -> SamplingParams:
        stop = () if self.stop is None else ((self.stop,) if isinstance(self.stop, str) else tuple(self.stop))
        return SamplingParams(temperature=self.temperature, top_k=max(0, self.top_k), top_p=self.top_p,
                              max_tokens=self.max_tokens or default_max_tokens, stop=stop, seed=self.seed)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError("only text content parts are supported")
            parts.append(part["text"])
        return "".join(parts)


class ChatRequest(_Common):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    tools: Annotated[list[Any] | None,
                     _only(lambda v: not v, "tools are not supported by this server")] = None
    response_format: Annotated[dict[str, Any] | None,
                               _only(lambda v: not v or v.get("type") in (None, "text"),
                                     "only response_format type 'text' is supported")] = None

    def chat_messages(self) -> list[dict]:
        return [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in self.messages]

    def sampling(self, default_max_tokens: int) -> SamplingParams:
        if self.max_tokens is None and self.max_completion_tokens is not None:
            self.max_tokens = self.max_completion_tokens
        return super().sampling(default_max_tokens)

    @property
    def num_logprobs(self) -> int | None:
        if self.top_logprobs is not None and not self.logprobs:
            raise APIError(400, "top_logprobs requires logprobs=true", "top_logprobs")
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(_Common):
    prompt: str | list[str] | list[int]
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: Annotated[bool, _only(lambda v: not v, "echo is not supported")] = False
    suffix: Annotated[str | None, _only(lambda v: not v, "suffix is not supported")] = None
    best_of: Annotated[int | None,
                       _only(lambda v: v in (None, 1), "only best_of=1 is supported")] = None

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v):
        if isinstance(v, list) and v and isinstance(v[0], str):
            if len(v) != 1:
                raise ValueError("one prompt per request (a list of several prompts is not supported)")
        if isinstance(v, list) and not v:
            raise ValueError("the prompt is empty")
        return v

    @property
    def num_logprobs(self) -> int | None:
        return self.logprobs


def parse_request(kind: type[_Common], body: Any) -> _Common:
    """Validate a decoded JSON body; any problem -> APIError(400) naming the parameter."""
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    try:
        return kind.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ".".join(str(p) for p in err.get("loc", ())) or None
        msg = err.get("msg", "invalid value")
        msg = msg.removeprefix("Value error, ")
        raise APIError(400, f"invalid parameter {param}: {msg}" if param else msg, param) from None
