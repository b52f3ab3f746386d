"""``token_spec serve`` over real HTTP: uvicorn on an ephemeral 127.0.0.1 port, driven by
the ``openai`` client, litellm and raw httpx (streaming and not, concurrent clients,
a disconnect mid-stream, bad parameters)."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import httpx  # noqa: E402
import openai  # noqa: E402

from token_spec.serve.server import ServeConfig, build, running  # noqa: E402

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm  # noqa: E402

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def target(fast_target):
    """The server runs on the lean forward (bf16 where the CPU has it)."""
    return fast_target

MODEL = "smol-test"
MSG = [{"role": "user", "content": "Rewrite as a list comprehension:\n\nresult = []\nfor x in range(9):\n"
                                   "    result.append(x * x)\n"}]


@pytest.fixture(scope="module")
def server(target):
    app = build(ServeConfig(model_name=MODEL, speculative="ngram", gamma=4), target)
    with running(app) as url:
        yield url, app


@pytest.fixture(scope="module")
def vanilla_text(target):
    """Greedy output of the same target with speculation off (a separate server)."""
    app = build(ServeConfig(model_name=MODEL, speculative="none"), target)
    with running(app) as url:
        c = openai.OpenAI(base_url=url + "/v1", api_key="none")
        yield {n: c.chat.completions.create(model=MODEL, messages=MSG, max_tokens=n, temperature=0)
               .choices[0].message.content for n in (12,)}


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)


def test_chat_completion_with_openai_client_is_greedy_identical_to_vanilla(server, vanilla_text):
    url, _ = server
    r = _client(url).chat.completions.create(model=MODEL, messages=MSG, max_tokens=12, temperature=0)
    assert r.choices[0].message.content == vanilla_text[12]
    assert r.usage.completion_tokens == 12 and r.usage.prompt_tokens > 10
    assert r.choices[0].finish_reason == "length"
    assert r.model_extra["lossless"] is True


def test_streamed_chat_equals_unary_and_reports_usage(server):
    url, _ = server
    c = _client(url)
    unary = c.chat.completions.create(model=MODEL, messages=MSG, max_tokens=10, temperature=0)
    chunks = list(c.chat.completions.create(model=MODEL, messages=MSG, max_tokens=10, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == unary.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].usage.completion_tokens == 10


def test_raw_stream_ends_with_done(server):
    url, _ = server
    body = {"model": MODEL, "messages": MSG, "max_tokens": 4, "temperature": 0, "stream": True}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=120) as r:
        lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2][6:])["choices"][0]["finish_reason"] == "length"


def test_completions_endpoint_logprobs_and_stop(server):
    url, _ = server
    c = _client(url)
    r = c.completions.create(model=MODEL, prompt="def add(a, b):\n", max_tokens=8, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 8 and len(lp.token_logprobs) == 8 and all(len(t) == 2 for t in lp.top_logprobs)
    assert "".join(lp.tokens) == r.choices[0].text
    first = r.choices[0].text[:3]
    stop = r.choices[0].text[3:5]
    s = c.completions.create(model=MODEL, prompt="def add(a, b):\n", max_tokens=8, temperature=0, stop=[stop])
    assert s.choices[0].finish_reason == "stop" and s.choices[0].text.startswith(first)
    assert stop not in s.choices[0].text


def test_chat_logprobs_top2_are_sorted_and_include_the_chosen_token(server):
    url, _ = server
    r = _client(url).chat.completions.create(model=MODEL, messages=MSG, max_tokens=5, temperature=0,
                                             logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == 5
    for tok in content:
        assert tok.top_logprobs[0].logprob >= tok.top_logprobs[1].logprob
        assert tok.top_logprobs[0].token == tok.token  # greedy: the chosen token is the most likely


def test_seeded_sampling_is_reproducible(server):
    url, _ = server
    c = _client(url)
    kw = dict(model=MODEL, messages=MSG, max_tokens=8, temperature=0.9, top_p=0.95, seed=123,
              extra_body={"top_k": 40})
    assert c.chat.completions.create(**kw).choices[0].message.content == \
        c.chat.completions.create(**kw).choices[0].message.content


def test_concurrent_clients_share_passes_and_get_their_own_greedy_output(server):
    url, app = server
    prompts = [[{"role": "user", "content": f"Count from {i} to {i + 5}."}] for i in range(4)]
    c = _client(url)

    def ask(m):
        return c.chat.completions.create(model=MODEL, messages=m, max_tokens=8, temperature=0).choices[0].message.content

    alone = [ask(m) for m in prompts]
    steps0 = app.state.engine.steps
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(ask, prompts))
    assert together == alone
    assert app.state.engine.steps - steps0 < 4 * 9  # fewer passes than one request after another


# pydantic warns about ReadOnly TypedDict items while litellm lazily builds a schema (third-party notice).
# litellm's sync API leaves an event loop open in the calling thread, so its async API is used,
# on asyncio only (litellm's HTTP clients are asyncio-only), closed with the project's helper.
@pytest.mark.filterwarnings("ignore:Item.*ReadOnly:UserWarning")
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_litellm_drives_the_server_streaming_and_not(server, vanilla_text, anyio_backend):
    from spectool_agents.models import aclose_litellm

    url, _ = server
    kw = dict(model=f"openai/{MODEL}", api_base=url + "/v1", api_key="none", messages=MSG, max_tokens=12,
              temperature=0)
    try:
        r = await litellm.acompletion(**kw)
        assert r.choices[0].message.content == vanilla_text[12]
        stream = await litellm.acompletion(stream=True, **kw)
        streamed = "".join([ch.choices[0].delta.content or "" async for ch in stream])
        assert streamed == vanilla_text[12]
    finally:
        await aclose_litellm()


def _successes(url: str) -> float:
    from token_spec.serve.loadtest import counter, parse_metrics

    return counter(parse_metrics(httpx.get(url + "/metrics").text), "vllm:request_success")


def test_client_disconnect_mid_stream_cancels_and_frees_kv(server):
    url, app = server
    engine = app.state.engine
    before = _successes(url)
    story = [{"role": "user", "content": "Tell me a very long story about a dragon and a lighthouse keeper."}]
    body = {"model": MODEL, "messages": story, "max_tokens": 400, "temperature": 0, "stream": True}
    with httpx.Client(timeout=120) as client:
        with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
            for line in r.iter_lines():
                if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                    break  # got tokens: the request is in the batch; leaving closes the connection
    # The server notices the disconnect and drops the request (its KV with it) within a
    # pass or so; wait for that, bounded (uvicorn gives no event to wait on).
    import time

    deadline = time.monotonic() + 60
    while (engine.active or engine.waiting) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine.active == {} and len(engine.waiting) == 0
    assert engine.kv_bytes == 0
    # cancelled, not finished: 400 tokens of a story take far longer than the wait above
    assert _successes(url) == before


@pytest.mark.parametrize("body, status, param", [
    ({"n": 2}, 400, "n"),
    ({"temperature": -1}, 400, "temperature"),
    ({"top_p": 0}, 400, "top_p"),
    ({"max_tokens": 0}, 400, "max_tokens"),
    ({"max_tokens": 10_000}, 400, "max_tokens"),
    ({"top_logprobs": 3}, 400, "top_logprobs"),
    ({"stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ({"presence_penalty": 0.5}, 400, "presence_penalty"),
    ({"model": "no-such-model"}, 404, "model"),
    ({"messages": []}, 400, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages.0.role"),
])
def test_bad_parameters_get_a_4xx_with_an_openai_error_body(server, body, status, param):
    url, _ = server
    full = {"model": MODEL, "messages": MSG, "max_tokens": 4, **body}
    r = httpx.post(url + "/v1/chat/completions", json=full, timeout=60)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"]


def test_malformed_json_and_unknown_route_are_4xx(server):
    url, _ = server
    r = httpx.post(url + "/v1/chat/completions", content=b"{not json", timeout=30)
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    assert httpx.get(url + "/v1/nothing", timeout=30).status_code == 404
    with pytest.raises(openai.BadRequestError):
        _client(url).chat.completions.create(model=MODEL, messages=MSG, n=3)


def test_models_health_and_vllm_metrics(target):
    # gate off: the draft switch (on by default) decides from step timings whether a step
    # drafts, so whether this one request drafts would depend on the machine's load
    app = build(ServeConfig(model_name=MODEL, speculative="ngram", gamma=4, gate="off"), target)
    with running(app) as url:
        assert httpx.get(url + "/health").status_code == 200
        assert [m.id for m in _client(url).models.list()] == [MODEL]
        _client(url).chat.completions.create(model=MODEL, messages=MSG, max_tokens=12, temperature=0)
        text = httpx.get(url + "/metrics").text
    for name in ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                 "vllm:e2e_request_latency_seconds_bucket", "vllm:time_to_first_token_seconds_bucket"):
        assert name in text
    from token_spec.serve.loadtest import counter, parse_metrics

    m = parse_metrics(text)
    assert counter(m, "vllm:spec_decode_num_drafts") > 0
    assert counter(m, "vllm:spec_decode_num_accepted_tokens") <= counter(m, "vllm:spec_decode_num_draft_tokens")


def test_relaxed_acceptance_is_marked_lossy_in_every_response(target):
    app = build(ServeConfig(model_name=MODEL, speculative="ngram", acceptance="relaxed"), target)
    with running(app) as url:
        r = httpx.post(url + "/v1/chat/completions", json={"model": MODEL, "messages": MSG, "max_tokens": 3},
                       timeout=60)
        assert r.headers["x-token-spec-lossless"] == "false" and r.json()["lossless"] is False
        with httpx.stream("POST", url + "/v1/chat/completions",
                          json={"model": MODEL, "messages": MSG, "max_tokens": 3, "stream": True}, timeout=60) as s:
            chunks = [json.loads(ln[6:]) for ln in s.iter_lines() if ln.startswith("data: {")]
            assert s.headers["x-token-spec-lossless"] == "false"
        assert chunks and all(ch["lossless"] is False for ch in chunks)
        assert httpx.get(url + "/health").headers["x-token-spec-lossless"] == "false"
