"""``token_spec serve`` request parsing without a model: every OpenAI parameter the
server does not implement is refused with one 400 that names it (never ignored), and
the values it does implement pass."""

from __future__ import annotations

import pytest

pytest.importorskip("pydantic")

from token_spec.serve.protocol import (  # noqa: E402
    APIError, ChatRequest, CompletionRequest, parse_request,
)

CHAT = {"messages": [{"role": "user", "content": "hi"}]}
COMPLETION = {"prompt": "hi"}

REFUSED = [
    (ChatRequest, {"n": 2}, "n", "only n=1"),
    (ChatRequest, {"presence_penalty": 0.5}, "presence_penalty", "penalties"),
    (ChatRequest, {"frequency_penalty": -1.0}, "frequency_penalty", "penalties"),
    (ChatRequest, {"logit_bias": {"50256": -100}}, "logit_bias", "logit_bias"),
    (ChatRequest, {"tools": [{"type": "function"}]}, "tools", "tools"),
    (ChatRequest, {"response_format": {"type": "json_object"}}, "response_format", "'text'"),
    (ChatRequest, {"stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4"),
    (ChatRequest, {"stop": ["a", ""]}, "stop", "non-empty"),
    (CompletionRequest, {"n": 3}, "n", "only n=1"),
    (CompletionRequest, {"echo": True}, "echo", "echo"),
    (CompletionRequest, {"suffix": "end"}, "suffix", "suffix"),
    (CompletionRequest, {"best_of": 2}, "best_of", "best_of=1"),
    (CompletionRequest, {"prompt": ["a", "b"]}, "prompt", "one prompt"),
    (CompletionRequest, {"prompt": []}, "prompt", "empty"),
]


@pytest.mark.parametrize("kind, extra, param, words", REFUSED)
def test_unsupported_parameter_is_a_400_naming_it(kind, extra, param, words):
    body = {**(CHAT if kind is ChatRequest else COMPLETION), **extra}
    with pytest.raises(APIError) as info:
        parse_request(kind, body)
    err = info.value
    assert (err.status, err.param) == (400, param)
    assert err.message.startswith(f"invalid parameter {param}: ") and words in err.message
    assert "Value error" not in err.message


@pytest.mark.parametrize("kind, body", [
    (ChatRequest, {**CHAT, "n": 1, "presence_penalty": 0, "frequency_penalty": 0.0,
                   "logit_bias": {}, "tools": [], "response_format": {"type": "text"},
                   "stop": ["a", "b", "c", "d"]}),
    (ChatRequest, {**CHAT, "response_format": {}, "tools": None, "logit_bias": None}),
    (CompletionRequest, {**COMPLETION, "n": 1, "echo": False, "suffix": "", "best_of": 1,
                         "stop": "x"}),
    (CompletionRequest, {"prompt": [1, 2, 3], "best_of": None, "suffix": None}),
    (CompletionRequest, {"prompt": ["one"]}),
])
def test_supported_values_of_the_same_parameters_pass(kind, body):
    req = parse_request(kind, body)
    assert isinstance(req, kind) and req.n == 1


def test_a_body_that_is_not_an_object_is_a_400():
    with pytest.raises(APIError, match="JSON object") as info:
        parse_request(ChatRequest, ["not", "an", "object"])
    assert info.value.status == 400 and info.value.param is None
