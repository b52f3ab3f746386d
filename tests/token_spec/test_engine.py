"""The engine on the real target: verified-only streaming, stopping, metrics, async backends."""

from __future__ import annotations

import threading

import anyio
import pytest
import torch

from token_spec.drafters import Draft, NgramDrafter
from token_spec.engine import SpeculativeDecoder, VanillaDecoder
from token_spec.gamma import FixedGamma
from token_spec.relaxed import RelaxedVerifier
from token_spec.sampling import SamplingParams

pytestmark = pytest.mark.model

CODE = [{"role": "user", "content": "Write a Python function `add(a, b)` that returns a + b."}]
GREEDY = SamplingParams(temperature=0, max_tokens=12)


class JunkDrafter:
    """Proposes a fixed run of one token (almost always rejected) and records which
    thread each proposal ran on."""

    name = "junk"

    def __init__(self, token: int):
        self.token, self.threads, self.ended = token, [], []

    def begin(self, prompt_ids):
        pass

    def propose(self, context, k, params, generator):
        self.threads.append(threading.get_ident())
        return Draft(tokens=torch.full((k,), self.token, dtype=torch.long))

    def end(self, output_ids):
        self.ended.append(list(output_ids))


@pytest.fixture(scope="module")
def vanilla_code(target):
    return VanillaDecoder(target).generate(CODE, GREEDY)


def test_vanilla_generation_basics(target, vanilla_code):
    g = vanilla_code
    assert len(g.token_ids) == 12 and g.finish_reason == "length"
    assert g.text == target.decode(g.token_ids)
    assert g.metrics.num_emitted_tokens == 12 and g.metrics.num_rounds == 12
    assert g.metrics.num_drafts == 0 and g.lossless


def test_rejected_drafts_never_reach_the_text(target, vanilla_code):
    junk = target.tokenizer.encode(" banana", add_special_tokens=False)[0]
    drafter = JunkDrafter(junk)
    g = SpeculativeDecoder(target, drafter, gamma_policy=FixedGamma(3)).generate(CODE, GREEDY)
    assert g.token_ids == vanilla_code.token_ids and g.text == vanilla_code.text
    assert "banana" not in g.text
    m = g.metrics
    assert m.num_drafts > 0 and m.num_accepted_tokens < m.num_draft_tokens
    assert drafter.ended and drafter.ended[-1][: len(g.token_ids)] == g.token_ids


def test_metrics_counters_are_consistent(target):
    dec = SpeculativeDecoder(target, NgramDrafter(n_min=1), gamma_policy=FixedGamma(4))
    g1 = dec.generate(CODE, GREEDY)
    g2 = dec.generate(CODE, GREEDY)
    for m in (g1.metrics, g2.metrics):
        assert m.num_emitted_tokens == 12
        assert m.num_draft_tokens <= 4 * m.num_drafts
        assert sum(m.num_accepted_tokens_per_pos) == m.num_accepted_tokens
        pos = m.num_accepted_tokens_per_pos
        assert all(a >= b for a, b in zip(pos, pos[1:])) and (not pos or pos[0] <= m.num_drafts)
        # every round emits accepted + 1 tokens, except that the budget may cut the last one
        assert m.num_emitted_tokens <= m.num_rounds + m.num_accepted_tokens
        assert m.mean_acceptance_length == pytest.approx(1 + m.num_accepted_tokens / max(m.num_drafts, 1))
        assert m.verification_s > 0 and m.total_s >= m.verification_s + m.drafting_s
        assert m.tokens_per_s == pytest.approx(12 / m.total_s)
    cum = dec.metrics.cumulative
    assert cum.num_requests == 2 and dec.metrics.last is g2.metrics
    assert cum.num_accepted_tokens == g1.metrics.num_accepted_tokens + g2.metrics.num_accepted_tokens
    assert cum.num_emitted_tokens == 24


def test_max_tokens_and_eos(target):
    dec = SpeculativeDecoder(target, NgramDrafter())
    short = dec.generate(CODE, temperature=0, max_tokens=3)  # keyword overrides of SamplingParams()
    assert len(short.token_ids) == 3 and short.finish_reason == "length"
    msgs = [{"role": "user", "content": "Is 2 bigger than 1? Answer yes or no."}]  # greedy: "No." then EOS
    g = dec.generate(msgs, SamplingParams(temperature=0, max_tokens=12))
    assert g.finish_reason == "eos" and len(g.token_ids) < 12
    assert not set(g.token_ids) & set(target.eos_ids)
    assert "<|im_end|>" not in g.text and g.text.strip()


def test_stop_string_split_across_rounds(target, vanilla_code):
    # Choose a stop string that straddles two tokens of the greedy output, then check that
    # every drafter stops right before it, with the stop string itself not emitted.
    ids, text = vanilla_code.token_ids, vanilla_code.text
    cut = len(target.decode(ids[:8]))
    stop = text[cut - 2 : cut + 2]
    assert target.decode(ids[:7]) != text[: cut - 2]
    expected = text[: text.find(stop)]
    for drafter in (NgramDrafter(), JunkDrafter(5)):
        g = SpeculativeDecoder(target, drafter, gamma_policy=FixedGamma(2)).generate(
            CODE, SamplingParams(temperature=0, max_tokens=12, stop=(stop, "never-there"))
        )
        assert g.finish_reason == "stop" and g.text == expected


def test_multibyte_prompt_and_output_stream_is_utf8_safe(target):
    msgs = [{"role": "user", "content": "Repeat exactly: «日本語のテキスト» — café 🙂🙂🙂"}]
    params = SamplingParams(temperature=0, max_tokens=14)
    dec = SpeculativeDecoder(target, NgramDrafter())
    deltas = []

    async def collect():
        async for d in dec.stream(msgs, params):
            deltas.append(d)

    anyio.run(collect)
    full = dec.generate(msgs, params)
    assert "".join(deltas) == full.text
    assert all(d and "\ufffd" not in d for d in deltas)
    assert any(ord(c) > 127 for c in full.text)  # the model echoed multi-byte characters


def test_relaxed_acceptance_is_labelled_lossy(target):
    dec = SpeculativeDecoder(target, NgramDrafter(), acceptance=RelaxedVerifier(threshold_single=0.5))
    g = dec.generate(CODE, SamplingParams(temperature=0.7, max_tokens=6, seed=1))
    assert g.lossless is False and g.metrics.lossless is False and dec.metrics.cumulative.lossless is False
    assert SpeculativeDecoder(target, NgramDrafter()).lossless is True


def test_drafter_with_another_vocabulary_is_refused(target):
    class Other(NgramDrafter):
        vocab_size = 32000

    with pytest.raises(ValueError, match="vocabulary size 32000"):
        SpeculativeDecoder(target, Other())


def test_seeded_sampling_is_reproducible(target):
    dec = SpeculativeDecoder(target, NgramDrafter())
    p = SamplingParams(temperature=0.9, top_p=0.9, max_tokens=6, seed=123)
    assert dec.generate(CODE, p).token_ids == dec.generate(CODE, p).token_ids


@pytest.mark.anyio
async def test_stream_runs_rounds_off_the_event_loop_and_yields_verified_text(target, vanilla_code):
    drafter = JunkDrafter(7)
    dec = SpeculativeDecoder(target, drafter, gamma_policy=FixedGamma(2))
    loop_thread = threading.get_ident()
    seen = []
    async for delta in dec.stream(CODE, GREEDY):
        seen.append(delta)
        # verified text only: what has been yielded is always a prefix of the final text
        assert vanilla_code.text.startswith("".join(seen))
    assert "".join(seen) == vanilla_code.text
    assert drafter.threads and loop_thread not in drafter.threads
    assert dec.metrics.last.num_emitted_tokens == 12


@pytest.mark.anyio
async def test_stream_can_be_abandoned_and_the_decoder_reused(target, vanilla_code):
    dec = SpeculativeDecoder(target, NgramDrafter())
    agen = dec.stream(CODE, GREEDY)
    first = await agen.__anext__()
    await agen.aclose()
    assert vanilla_code.text.startswith(first)
    assert dec.metrics.last.num_emitted_tokens < 12
    rest = [d async for d in dec.stream(CODE, SamplingParams(temperature=0, max_tokens=5))]
    assert vanilla_code.text.startswith("".join(rest))
