"""The two tiers together: token_spec's decoder streaming into spectool.Runtime.

The ``model`` test decodes on the real SmolLM2-135M-Instruct target (at most 32
tokens, greedy) and streams the verified text into a ``spec`` runtime; the same
message replayed through a ``baseline`` runtime must give the same result. The other
tests pin the adapter's behaviour with a stand-in decoder.
"""

from __future__ import annotations

import pytest
import spectool

from spectool_agents import ReplAgent, ScriptedModel, TokenSpecModel

pytestmark = pytest.mark.anyio


class EchoDecoder:
    """Stand-in with the decoder's interface: ``stream(prompt, params)`` of text."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces
        self.prompts: list[tuple[str, object]] = []

    async def stream(self, prompt: str, params: object = None):
        self.prompts.append((prompt, params))
        for piece in self.pieces:
            yield piece


async def test_adapter_streams_the_decoder_text_with_prefill():
    decoder = EchoDecoder(["print(", "6 * 7", ")\n```", ""])
    model = TokenSpecModel(decoder, params="P", assistant_prefix="```repl\n")
    deltas = [d async for d in model.stream([{"role": "user", "content": "hi"}])]
    assert deltas == ["```repl\n", "print(", "6 * 7", ")\n```"]
    prompt, params = decoder.prompts[0]
    assert params == "P"
    assert prompt == "user: hi\nassistant: ```repl\n"   # no tokenizer: plain transcript


async def test_adapter_drives_a_repl_agent():
    decoder = EchoDecoder(["x = 6 * 7\n", "FINAL(x)\n", "```"])
    agent = ReplAgent(TokenSpecModel(decoder, assistant_prefix="```repl\n"),
                      _NoSub(), mode="spec")
    result = await agent.run("ctx", "q")
    assert (result.answer, result.finished_by) == ("42", "FINAL")


class _NoSub:
    async def complete(self, prompt: str) -> str:  # pragma: no cover - never called
        raise AssertionError("no sub-calls expected")


@pytest.fixture(scope="module")
def smollm_decoder():
    from token_spec.drafters import NgramDrafter
    from token_spec.engine import SpeculativeDecoder
    from token_spec.target import load_target

    return SpeculativeDecoder(load_target(), NgramDrafter())


@pytest.mark.model
async def test_smollm2_stream_feeds_the_runtime(smollm_decoder):
    from token_spec.sampling import SamplingParams

    # short on purpose (a shared 2-core machine): the cell closes within ~6 tokens
    params = SamplingParams(temperature=0.0, max_tokens=10)
    model = TokenSpecModel(smollm_decoder, params, assistant_prefix="```repl\nprint(")
    messages = [{"role": "user",
                 "content": "Write one line of Python that prints 2 + 3, in a ```repl block."}]
    parts: list[str] = []

    async def recorded():
        async for delta in model.stream(messages):
            parts.append(delta)
            yield delta

    async with spectool.Runtime(tools=[], mode="spec") as runtime:
        spec = await runtime.run(recorded())
    text = "".join(parts)
    assert len(parts) >= 2 and text.startswith("```repl\nprint(") and spec.cells
    async with spectool.Runtime(tools=[], mode="baseline") as runtime:
        base = await runtime.run(ScriptedModel([text]).stream([]))
    assert spec.stdout == base.stdout
    assert type(spec.error) is type(base.error)
    assert [c.source for c in spec.cells] == [c.source for c in base.cells]
