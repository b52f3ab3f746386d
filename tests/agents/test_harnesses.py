"""RLM and verifiers harness conventions in the REPL agent (spectool_agents.harnesses)."""

from __future__ import annotations

import json

import anyio
import pytest

from spectool_agents import FunctionSubModel, ReplAgent, ScriptedModel
from spectool_agents.harnesses import HARNESSES, cells_from_tool_calls, harness_tools


def label(prompt: str) -> str:
    return "L:" + prompt[-3:]


@pytest.mark.anyio
async def test_rlm_convention_llm_query_batched_and_final_var(anyio_backend):
    cell = ("```repl\nparts = context.split(',')\n"
            "firsts = [llm_query('a ' + p) for p in parts[:2]]\n"
            "rest = llm_query_batched(['b ' + p for p in parts[2:]])\n"
            "out = ' '.join(firsts + rest)\n```\nFINAL_VAR(out)")
    agent = ReplAgent(ScriptedModel([cell]), FunctionSubModel(label), mode="spec",
                      harness="rlm")
    res = await agent.run("x1,x2,x3,x4", "label")
    assert res.finished_by == "text" and res.answer == "L: x1 L: x2 L: x3 L: x4"
    assert res.sub_calls == 4


@pytest.mark.anyio
async def test_verifiers_convention_llm_batch_elements_are_speculated_one_by_one(anyio_backend):
    """Every element of llm_batch is launched by the shadow while the message streams
    (the stream does not end until three element launches were seen), and the real
    batched call claims all three: three hits, three executions."""
    launched: list[str] = []
    gate = anyio.Event()

    async def before(call, i, delta):
        if delta == "\n```" and i > 0:
            with anyio.fail_after(20):
                await gate.wait()

    class Watch(FunctionSubModel):
        async def complete(self, prompt, **kw):
            launched.append(prompt)
            if len(launched) == 3:
                gate.set()
            return "L:" + prompt + str(kw.get("temperature"))

    cell = ("```repl\nprompts = ['p%d' % i for i in range(3)]\n"
            "outs = llm_batch(prompts, temperature=0)\n"
            "answer['content'] = ','.join(outs)\nanswer['ready'] = True\n")
    agent = ReplAgent(ScriptedModel([[cell, "\n```"]], before_delta=before),
                      Watch(label), mode="spec", harness="verifiers")
    res = await agent.run("ctx", "q")
    assert res.finished_by == "answer" and res.answer == "L:p00,L:p10,L:p20"
    assert res.stats["hits"] == 3 and res.stats["executions"] == 3 == res.sub_calls


def test_harness_tool_sets_and_errors():
    names = lambda h: [t.name for t in harness_tools(h, FunctionSubModel(label),  # noqa: E731
                                                     on_final=lambda k, v: None)]
    assert names("rlm") == ["llm_query", "llm_query_batched", "FINAL", "FINAL_VAR"]
    assert names("verifiers") == ["llm_query", "llm_batch"]
    assert set(names("both")) == set(HARNESSES["rlm"].tools) | {"llm_batch"}
    with pytest.raises(ValueError, match="unknown harness"):
        harness_tools("nope", FunctionSubModel(label), on_final=lambda k, v: None)
    with pytest.raises(ValueError, match="unknown harness"):
        ReplAgent(ScriptedModel(["x"]), FunctionSubModel(label), harness="nope")


@pytest.mark.anyio
async def test_tool_call_code_becomes_a_cell_line_by_line(anyio_backend):
    code = "x = 1\ny = llm_query('a')\nprint(x, y)"
    args = json.dumps({"code": code})
    pieces = [args[i:i + 5] for i in range(0, len(args), 5)]
    deltas = [{"content": "Running it."}] + [
        {"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in pieces]
    seen: list[tuple[int, str]] = []

    async def source():
        for k, d in enumerate(deltas):
            seen.append((k, "in"))
            yield d

    out = []
    async for text in cells_from_tool_calls(source()):
        out.append((len(seen), text))
    joined = "".join(t for _, t in out)
    assert joined == "Running it.\n```python\n" + code + "\n```\n"
    # the first line was emitted before the arguments had finished streaming
    first = next(n for n, t in out if "x = 1\n" in t)
    assert first < len(deltas)


@pytest.mark.anyio
async def test_two_tool_calls_become_two_cells(anyio_backend):
    deltas = [{"tool_calls": [{"index": i, "function": {"arguments": json.dumps({"code": c})}}]}
              for i, c in enumerate(["a = 1", "b = 2\n"])]

    async def source():
        for d in deltas:
            yield d

    text = "".join([t async for t in cells_from_tool_calls(source())])
    assert text == "\n```python\na = 1\n```\n\n```python\nb = 2\n```\n"


def test_system_prompt_lists_the_harness_tools_only():
    def system(h):
        return ReplAgent(ScriptedModel(["x"]), FunctionSubModel(label),
                         harness=h)._messages("ctx", "q")[0]["content"]
    v, r = system("verifiers"), system("rlm")
    assert "llm_batch(" in v and "FINAL" not in v and "llm_query_batched" not in v
    assert "llm_query_batched(" in r and "FINAL_VAR" in r and "llm_batch(" not in r
