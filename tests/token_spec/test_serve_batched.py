"""The serving engine's lossless contract: a request's output does not depend on the batch.

Pinned here, on the real SmolLM2 target:
* the packed pass gives a sequence bit-identical logits whether it runs alone one token
  at a time or packed with other sequences at varying widths (exact attention), and the
  negative control (per-segment sdpa attention) is caught by the same comparison;
* greedy output of a request run alone without speculation equals its output batched
  with others under speculation (negative control: the lossy relaxed acceptance diverges);
* the draft budget is a pure function of counts; cancelling frees the KV at once.
"""

from __future__ import annotations

import random

import pytest
import torch

pytest.importorskip("starlette")

from token_spec.sampling import SamplingParams  # noqa: E402
from token_spec.serve.batched import BatchedLM, Segment  # noqa: E402
from token_spec.serve.engine import BatchEngine, ContextTooLong, Request, draft_budget  # noqa: E402
from token_spec.serve.server import make_drafter_factory  # noqa: E402

pytestmark = pytest.mark.model

CODE_PROMPT = [{"role": "user", "content": "Add type hints to this function:\n\ndef merge(a, b):\n"
                "    out = dict(a)\n    out.update(b)\n    return out\n"}]
OTHER_PROMPTS = [
    [{"role": "user", "content": "Write a haiku about autumn rain."}],
    [{"role": "user", "content": "Rewrite as a list comprehension:\n\nresult = []\nfor x in range(20):\n"
                                 "    if x % 3 == 0:\n        result.append(x * x)\n"}],
    [{"role": "user", "content": "What is binary search?"}],
]


def _logits_alone_and_packed(target, attention: str, dtype: str) -> tuple[torch.Tensor, torch.Tensor]:
    lm = BatchedLM(target.model, dtype=dtype, attention=attention)
    prompt = target.encode(CODE_PROMPT)
    seq = [prompt[-1]] + target.encode(" def merge(a: dict, b: dict) -> dict:\n    out")
    kv = lm.new_kv()
    lm.forward([Segment(kv, prompt[:-1], prefill=True)])
    alone = torch.cat([lm.forward([Segment(kv, [t])])[0] for t in seq])  # one token per pass

    rng = random.Random(7)
    others = [(lm.new_kv(), target.encode(p)) for p in OTHER_PROMPTS]
    kv = lm.new_kv()
    lm.forward([Segment(kv, prompt[:-1], prefill=True)] + [Segment(k, p, prefill=True) for k, p in others])
    packed, i = [], 0
    while i < len(seq):
        width = rng.randint(1, 5)  # a verify segment of 1..5 rows
        segs = [Segment(kv, seq[i : i + width])]
        segs += [Segment(k, [rng.randrange(1000)] * rng.randint(1, 4)) for k, _ in others[: rng.randint(0, 3)]]
        rng.shuffle(segs)
        out = lm.forward(segs)
        packed.append(out[[s.kv is kv for s in segs].index(True)])
        i += width
    return alone, torch.cat(packed)


@pytest.mark.parametrize("dtype", ["auto", "fp32"])
def test_packed_pass_gives_bit_identical_logits_to_one_token_passes(target, dtype):
    alone, packed = _logits_alone_and_packed(target, "exact", dtype)
    assert alone.shape == packed.shape
    assert torch.equal(alone, packed), f"max |diff| = {(alone - packed).abs().max().item()}"


def test_negative_control_sdpa_attention_is_caught_by_the_bitwise_comparison(target):
    alone, packed = _logits_alone_and_packed(target, "sdpa", "auto")
    assert not torch.equal(alone, packed)


def _engine(target, method: str, *, acceptance: str = "strict", gamma: int = 4, attention: str = "exact"):
    lm = BatchedLM(target.model, dtype="auto", attention=attention)
    return BatchEngine(lm, target.tokenizer, target.eos_ids, drafter_factory=make_drafter_factory(method, target),
                       gamma=gamma, max_rows=16, acceptance=acceptance, relaxed_threshold=0.05)


def _run(engine: BatchEngine, prompts: list, max_tokens: int) -> dict[str, list[int]]:
    outs: dict[str, list[int]] = {}
    for i, ids in enumerate(prompts):
        engine.submit(Request(id=f"r{i}", prompt_ids=ids, params=SamplingParams(temperature=0, max_tokens=max_tokens)))
        outs[f"r{i}"] = []
    while engine.has_work():
        for rid, upd in engine.step():
            outs[rid].extend(upd.token_ids)
    return outs


@pytest.fixture(scope="module")
def alone_outputs(target):
    """Each prompt decoded alone, no speculation, greedy, 24 tokens."""
    prompts = [target.encode(CODE_PROMPT)] + [target.encode(p) for p in OTHER_PROMPTS]
    vanilla = _engine(target, "none")
    return prompts, {f"r{i}": _run(vanilla, [ids], 24)["r0"] for i, ids in enumerate(prompts)}


@pytest.mark.parametrize("method", ["ngram", "suffix", "draft", "ngram+draft"])
def test_greedy_output_alone_equals_output_batched_with_speculation(target, alone_outputs, method):
    prompts, alone = alone_outputs
    spec = _engine(target, method)
    batched = _run(spec, prompts, 24)
    assert spec.steps <= 1 + 24  # one prefill pass + at most one pass per token: the four shared passes
    assert batched == alone
    assert all(len(v) >= 8 for v in alone.values())


def test_negative_control_relaxed_acceptance_changes_greedy_output(target):
    prompts = [target.encode(CODE_PROMPT)] + [target.encode(p) for p in OTHER_PROMPTS]
    alone = _run(_engine(target, "none"), prompts, 24)
    relaxed = _run(_engine(target, "ngram", acceptance="relaxed"), prompts, 24)
    assert any(relaxed[k] != alone[k] for k in alone)


def test_draft_budget_spends_only_free_rows():
    assert draft_budget(1, 0, 16, 4) == 4  # alone: full gamma
    assert draft_budget(4, 0, 16, 4) == 3  # (16 - 4) // 4
    assert draft_budget(16, 0, 16, 4) == 0  # a full batch drafts nothing
    assert draft_budget(2, 40, 16, 4) == 0  # a prefill fills the pass
    assert draft_budget(0, 0, 16, 4) == 0


def test_cancel_frees_the_kv_cache_at_once(target):
    engine = _engine(target, "ngram")
    for i, ids in enumerate([target.encode(CODE_PROMPT), target.encode(OTHER_PROMPTS[0])]):
        engine.submit(Request(id=f"r{i}", prompt_ids=ids, params=SamplingParams(temperature=0, max_tokens=50)))
    engine.step()
    engine.step()
    kv = engine.active["r0"].kv
    assert kv.length > 0 and kv.nbytes > 0
    engine.cancel("r0")  # no step running: dropped now
    assert "r0" not in engine.active and kv.nbytes == 0 and kv.length == 0
    assert "r1" in engine.active


def test_a_request_longer_than_the_context_is_refused_with_its_numbers(target):
    engine = _engine(target, "none")
    with pytest.raises(ContextTooLong, match="maximum context length is 8192"):
        engine.submit(Request(id="x", prompt_ids=[1] * 100, params=SamplingParams(max_tokens=8100)))
