"""Greedy speculative decoding emits exactly vanilla greedy SmolLM2, token for token.

For every drafter, on 20 prompts (code, chat, prose, RLM-style agent code). At
temperature 0 the verifier accepts a draft token iff it is the target's argmax, and
the recovered/bonus token is the argmax of the row after the accepted prefix, so any
difference from vanilla is a bug (bonus row, rollback, pending token), never chance.

A caveat this test would expose rather than hide: the speculative path computes
target logits in (k+1)-token forwards, vanilla in 1-token forwards, and CPU float
kernels may round the two differently; a flip is only possible at an exact near-tie
of the top two logits. ``test_near_ties_are_not_hidden`` records the smallest top-2
gap along the reference outputs so a future flip can be told apart from a bug.
"""

from __future__ import annotations

import pytest
import torch

from token_spec.drafters import ModelDrafter, NgramDrafter, SuffixDrafter
from token_spec.engine import SpeculativeDecoder, VanillaDecoder
from token_spec.gamma import AdaptiveGamma, FixedGamma
from token_spec.sampling import SamplingParams

pytestmark = pytest.mark.model

NEW_TOKENS = 10
PARAMS = SamplingParams(temperature=0, max_tokens=NEW_TOKENS)


def chat(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


PROMPTS: list = [
    # code (raw completions: short prompts keep prefill cheap)
    "def fibonacci(n):\n    ",
    "import json\n\ndef load_config(path):\n    with open(path) as f:\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
    "# Sort a list of dicts by the 'age' key\npeople = [{'name': 'a', 'age': 3}, {'name': 'b', 'age': 1}]\n",
    "for i in range(10):\n    if i % 2 == 0:\n",
    chat("Write a Python function that reverses a string."),
    # chat
    chat("What is the capital of France?"),
    chat("Give me three tips for sleeping better."),
    chat("How do I boil an egg?"),
    "User: What's a good name for a cat?\nAssistant:",
    "Q: Why is the sky blue?\nA:",
    # prose
    "Once upon a time, in a small village by the sea,",
    "The history of the printing press begins",
    "In summary, the results of the experiment show that",
    "Dear hiring manager, I am writing to apply for",
    "The mitochondria is",
    # RLM-style agent code
    "```repl\nchunks = context.split('\\n\\n')\nanswers = []\nfor chunk in chunks:\n",
    "```repl\nresult = llm_query(f\"Summarise this: {context[:1000]}\")\nprint(",
    "```repl\nprompts = [f'Count the labels in: {c}' for c in chunks]\nanswers = llm_query_batched(",
    chat("Write a repl cell that splits `context` into lines and counts the lines containing 'error'."),
]

assert len(PROMPTS) >= 20


@pytest.fixture(scope="module")
def references(target):
    dec = VanillaDecoder(target)
    return [dec.generate(p, PARAMS).token_ids for p in PROMPTS]


def _model_drafter(target):
    from token_spec.draft_model import DraftWeightsMissing, load_draft

    try:
        return ModelDrafter(load_draft(target.model), name="draft_model")
    except DraftWeightsMissing as exc:
        pytest.skip(f"distilled draft weights not built yet: {exc}")


DRAFTERS = {
    "ngram": (lambda t: NgramDrafter(n_min=1), lambda: FixedGamma(4)),  # n_min=1: drafts as often as possible
    "suffix": (lambda t: SuffixDrafter(n_min=1), lambda: AdaptiveGamma(initial=3, max_gamma=8)),
    "draft_model": (_model_drafter, lambda: FixedGamma(3)),
}


@pytest.mark.parametrize("name", list(DRAFTERS))
def test_greedy_speculative_equals_vanilla_greedy(target, references, name):
    make_drafter, make_policy = DRAFTERS[name]
    dec = SpeculativeDecoder(target, make_drafter(target), gamma_policy=make_policy())
    mismatches = []
    for i, (prompt, ref) in enumerate(zip(PROMPTS, references, strict=True)):
        got = dec.generate(prompt, PARAMS).token_ids
        if got != ref:
            first = next(j for j, (a, b) in enumerate(zip(got + [-1], ref + [-1])) if a != b)
            mismatches.append((i, first, got, ref))
    assert not mismatches, f"{name}: {len(mismatches)} prompts differ; first (prompt, position): " + str(
        [(i, j) for i, j, _, _ in mismatches]
    )
    m = dec.metrics.cumulative
    assert m.num_requests == len(PROMPTS)
    assert m.num_drafts > 0  # the drafter really drafted, so identity is not vacuous
    assert m.num_accepted_tokens > 0


def test_near_ties_are_not_hidden(target, references):
    """The top-2 logit gap along each reference output (teacher-forced, one forward).

    Not a pass/fail on speed: it documents that the prompts' greedy paths have no exact
    ties, where a 1-token vs (k+1)-token rounding difference could legitimately flip
    the argmax. A gap of exactly 0 would make the identity test ill-posed."""
    gaps = []
    for prompt, ref in zip(PROMPTS, references, strict=True):
        ids = target.encode(prompt)
        logits = target.logits(ids + ref)[len(ids) - 1 : -1]  # row j predicts ref[j]
        top2 = torch.topk(logits, 2, dim=-1).values
        gaps.append(float((top2[:, 0] - top2[:, 1]).min()))
        assert torch.equal(logits.argmax(-1), torch.tensor(ref)) or min(gaps) < 1e-3
    assert min(gaps) > 0
