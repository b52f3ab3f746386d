"""``token_spec audit`` against simulated endpoints (tiny Starlette apps, no model):
a pair that agrees, and a pair that differs on purpose at known positions."""

from __future__ import annotations

import argparse
import json
import zlib

import pytest

pytest.importorskip("starlette")

from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, PlainTextResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from token_spec.audit import DOMAINS, compare, first_divergence, load_prompts, main, Reply  # noqa: E402
from token_spec.serve.server import running  # noqa: E402

WORDS = ["alpha", " beta", " gamma", " delta", " eps", " zeta", " eta", " theta", " iota", " kappa"]


def simulated_endpoint(*, flip_at: int | None = None, logprobs: bool = True, drafts_per_request: int = 0) -> Starlette:
    """SIMULATED OpenAI endpoint: greedy output = words picked by a hash of the prompt.
    flip_at: on prompts whose hash is even, the token at that position is replaced
    (a deliberate divergence with margin 3.0 there; elsewhere the margin is 0.5)."""
    state = {"drafts": 0, "accepted": 0}

    async def chat(request: Request):
        body = await request.json()
        if body.get("logprobs") and not logprobs:
            return JSONResponse({"error": {"message": "logprobs not supported"}}, status_code=400)
        prompt = json.dumps(body["messages"])
        h = zlib.crc32(prompt.encode())
        n = body["max_tokens"]
        toks = [WORDS[(h >> (i % 24) ^ i) % len(WORDS)] for i in range(n)]
        flipped = flip_at is not None and h % 2 == 0 and flip_at < n
        if flipped:
            toks[flip_at] = " FLIP"
        state["drafts"] += drafts_per_request
        state["accepted"] += 2 * drafts_per_request
        choice = {"index": 0, "message": {"role": "assistant", "content": "".join(toks)}, "finish_reason": "length"}
        if body.get("logprobs"):
            choice["logprobs"] = {"content": [
                {"token": t, "logprob": -0.1, "bytes": list(t.encode()),
                 "top_logprobs": [{"token": t, "logprob": -0.1}, {"token": "x", "logprob": -3.1 if
                                  (flipped and i == flip_at) else -0.6}]} for i, t in enumerate(toks)]}
        return JSONResponse({"id": "x", "object": "chat.completion", "model": "sim", "choices": [choice],
                             "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": n + 5}})

    async def models(request: Request):
        return JSONResponse({"object": "list", "data": [{"id": "sim", "object": "model"}]})

    async def metrics(request: Request):
        return PlainTextResponse(f'vllm:spec_decode_num_drafts_total{{model_name="sim"}} {state["drafts"]}\n'
                                 f'vllm:spec_decode_num_accepted_tokens_total{{model_name="sim"}} {state["accepted"]}\n')

    routes = [Route("/v1/chat/completions", chat, methods=["POST"]), Route("/v1/models", models)]
    if drafts_per_request:
        routes.append(Route("/metrics", metrics))
    return Starlette(routes=routes)


def _args(a: str, b: str, out, **kw) -> argparse.Namespace:
    base = dict(base_url_a=a + "/v1", base_url_b=b + "/v1", out=str(out), max_tokens=6, domains=",".join(DOMAINS),
                prompts=2, model_a=None, model_b=None, label_a="A", label_b="B", api_key="none", timeout=30.0,
                prompt_file=None)
    base.update(kw)
    return argparse.Namespace(**base)


def test_shipped_prompt_set_has_five_domains_of_at_least_ten():
    prompts = load_prompts()
    for d in DOMAINS:
        assert sum(p["domain"] == d for p in prompts) >= 10
    assert len({p["id"] for p in prompts}) == len(prompts)


def test_first_divergence_and_margins():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    a = Reply(text="ab", tokens=["a", "b"], top=[[-0.1, -2.0], [-0.2, -0.3]], completion_tokens=2, seconds=1)
    b = Reply(text="ac", tokens=["a", "c"], top=[[-0.1, -2.0], [-0.25, -0.3]], completion_tokens=2, seconds=1)
    c = compare(a, b)
    assert c["identical"] is False and c["divergence"] == 1 and c["unit"] == "token"
    assert c["margin_a"] == pytest.approx(0.1) and c["margin_b"] == pytest.approx(0.05)


def test_identical_endpoints_report_full_identity(tmp_path, capsys):
    with running(simulated_endpoint(drafts_per_request=1)) as a, running(simulated_endpoint()) as b:
        assert main(_args(a, b, tmp_path)) == 0
    result = json.loads((tmp_path / "audit.json").read_text())
    assert result["overall"]["identity_rate"] == 1.0 and result["overall"]["prompts"] == 10
    assert all(d["tau_a"] == pytest.approx(3.0) and d["tau_b"] is None for d in result["domains"])
    assert (tmp_path / "audit.png").stat().st_size > 0
    assert "all" in capsys.readouterr().out


def test_endpoints_that_differ_on_purpose_are_caught_with_position_and_margin(tmp_path):
    with running(simulated_endpoint()) as a, running(simulated_endpoint(flip_at=3)) as b:
        main(_args(a, b, tmp_path))
    result = json.loads((tmp_path / "audit.json").read_text())
    diverged = [r for r in result["prompts"] if not r["identical"]]
    assert diverged, "the deliberately different endpoint must be caught"
    assert all(r["divergence"] == 3 and r["unit"] == "token" for r in diverged)
    assert all(r["margin_b"] == pytest.approx(3.0) and r["margin_a"] == pytest.approx(0.5) for r in diverged)
    assert result["overall"]["identity_rate"] < 1.0
    for d in result["domains"]:
        if d["identical"] < d["prompts"]:
            assert d["mean_divergence"] == 3.0


def test_an_endpoint_without_logprobs_is_compared_by_text(tmp_path):
    with running(simulated_endpoint()) as a, running(simulated_endpoint(flip_at=2, logprobs=False)) as b:
        main(_args(a, b, tmp_path, domains="coding", prompts=4))
    result = json.loads((tmp_path / "audit.json").read_text())
    assert result["b"]["logprobs"] is False
    assert all(r["unit"] == "char" for r in result["prompts"])
    assert any(not r["identical"] for r in result["prompts"])


def test_an_unknown_domain_is_refused_by_name(tmp_path):
    with running(simulated_endpoint()) as a:
        with pytest.raises(SystemExit, match="unknown domain"):
            main(_args(a, a, tmp_path, domains="poetry"))
