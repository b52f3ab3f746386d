"""ReplAgent on scripted root-model streams, under asyncio and trio.

Every test drives the real ``spectool.Runtime``; only the models are scripted.
"""

from __future__ import annotations

import anyio
import pytest

from spectool_agents import AgentResult, FunctionSubModel, ReplAgent, ScriptedModel

pytestmark = pytest.mark.anyio


def cell(code: str, prose: str = "Let me look.") -> str:
    return f"{prose}\n```repl\n{code.strip()}\n```\n"


def echo_sub() -> FunctionSubModel:
    return FunctionSubModel(lambda prompt: f"<{prompt}>")


async def run(script, *, sub=None, question="q?", context="the context", **kw) -> AgentResult:
    agent = ReplAgent(ScriptedModel(script), sub or echo_sub(), **kw)
    return await agent.run(context, question)


async def test_final_ends_the_run_and_output_is_fed_back():
    model = ScriptedModel([
        cell("x = llm_query('hi')\nprint(x, len(context))"),
        cell("FINAL(x.upper())"),
        cell("FINAL('never reached')"),
    ])
    result = await ReplAgent(model, echo_sub()).run("abcdef", "what?")
    assert result.answer == "<HI>"
    assert result.finished_by == "FINAL"
    assert len(result.turns) == 2 and len(model.messages) == 2
    # the second request carries the first cell's printed output as a user message
    assert model.messages[1][-1] == {"role": "user", "content": "REPL output:\n<hi> 6\n"}
    assert model.messages[1][-2]["role"] == "assistant"
    assert "```repl" in model.messages[1][-2]["content"]
    assert "what?" in model.messages[0][1]["content"]


async def test_final_var_answers_with_the_variables_value():
    result = await run([cell("total = 40 + 2"), cell("FINAL_VAR('total')")])
    assert (result.answer, result.finished_by) == ("42", "FINAL_VAR")


async def test_answer_dict_marked_ready_ends_the_run():
    result = await run([
        cell("answer['content'] = 'draft'"),       # not ready yet: the run goes on
        cell("answer = {'content': 'done', 'ready': True}"),
    ])
    assert (result.answer, result.finished_by, len(result.turns)) == ("done", "answer", 2)


async def test_answer_dict_item_assignment():
    result = await run([cell("answer['content'] = 7\nanswer['ready'] = True")])
    assert (result.answer, result.finished_by) == ("7", "answer")


async def test_plain_text_final_outside_the_fences():
    result = await run([cell("n = 3"), "I am sure now.\nFINAL(three (3))\n"])
    assert (result.answer, result.finished_by) == ("three (3)", "text")


async def test_plain_text_final_var():
    result = await run([cell("best = 'blue'"), "FINAL_VAR(best)"])
    assert (result.answer, result.finished_by) == ("blue", "text")


async def test_max_turns_stops_a_model_that_never_finishes():
    result = await run([cell("try:\n    i += 1\nexcept NameError:\n    i = 1\nprint(i)")], max_turns=3)
    assert result.finished_by == "max_turns" and result.answer == ""
    assert [t.stdout for t in result.turns] == ["1\n", "2\n", "3\n"]


async def test_silent_cell_is_reported_as_such():
    result = await run([cell("x = 1"), cell("FINAL(x)")])
    assert result.messages[3]["content"] == "REPL output:\n(the cell ran and printed nothing)"
    assert result.turns[0].stdout == ""


async def test_message_without_a_cell_gets_a_nudge():
    result = await run(["Hmm, thinking.", cell("FINAL(1)")])
    assert "No ```repl block ran" in result.turns[0].output
    assert result.answer == "1"


async def test_output_is_truncated():
    result = await run([cell("print('a' * 500)"), cell("FINAL('ok')")], output_limit=100)
    fed = result.messages[3]["content"]
    assert fed.startswith("REPL output:\n" + "a" * 100 + "\n")
    assert "truncated: 401 more characters" in fed      # 500 a's + newline
    assert len(result.turns[0].stdout) == 501


async def test_error_in_a_cell_is_fed_back_and_the_run_goes_on():
    result = await run([
        cell("print('before')\n1 / 0"),
        cell("FINAL('recovered')"),
    ])
    first = result.turns[0]
    assert first.stdout == "before\n"
    assert first.error is not None and "ZeroDivisionError" in first.error
    assert "ZeroDivisionError" in result.messages[3]["content"]
    assert result.answer == "recovered"


async def test_namespace_persists_across_turns():
    result = await run([
        cell("x = 5\nitems = [1, 2]"),
        cell("items.append(x)"),
        cell("FINAL(sum(items) * 2)"),
    ])
    assert result.answer == "16"
    assert result.namespace["items"] == [1, 2, 5]


async def test_sub_calls_go_to_the_sub_model_not_the_root():
    sub = FunctionSubModel(lambda p: "SUB:" + p)
    root = ScriptedModel([cell("FINAL(llm_query('z'))")])
    result = await ReplAgent(root, sub).run("ctx", "q")
    assert result.answer == "SUB:z" and sub.prompts == ["z"]
    assert len(root.messages) == 1


CHUNKED = [
    cell(
        "chunks = [context[i:i + 10] for i in range(0, len(context), 10)]\n"
        "labels = []\n"
        "for c in chunks:\n"
        "    labels.append(llm_query('classify: ' + c))\n"
        "print(len(labels))"
    ),
    cell(
        "first = llm_query('judge: ' + labels[0])\n"
        "both = llm_query_batched(['a', 'b', first])\n"
        "FINAL(' | '.join(labels) + ' / ' + ' '.join(both))"
    ),
]


class CountingSub(FunctionSubModel):
    """Sets ``launched`` once it has received ``n`` classify prompts."""

    def __init__(self, n: int) -> None:
        super().__init__(lambda p: p.upper()[-6:])
        self.n = n
        self.launched = anyio.Event()

    async def complete(self, prompt: str) -> str:
        out = await super().complete(prompt)
        if sum(p.startswith("classify") for p in self.prompts) >= self.n:
            self.launched.set()
        return out


async def _chunked(mode: str) -> tuple[AgentResult, FunctionSubModel]:
    context = "".join(f"row {i:02d} ok\n" for i in range(6))
    sub = CountingSub(n=(len(context) + 9) // 10)
    last = -(-len(CHUNKED[0]) // 3) - 1          # index of the first message's final delta

    async def before(call: int, i: int, delta: str) -> None:
        # A scripted stream arrives all at once; a real model takes time per token.
        # In spec mode, hold the final delta until the loop's sub-calls have started
        # (an event, not a sleep), as they would while a real model decodes.
        if mode == "spec" and call == 0 and i == last:
            with anyio.fail_after(20):
                await sub.launched.wait()

    model = ScriptedModel(CHUNKED, chunk_size=3, before_delta=before)
    result = await ReplAgent(model, sub, mode=mode).run(context, "q")
    return result, sub


async def test_spec_mode_hits_with_answers_identical_to_baseline():
    base, base_sub = await _chunked("baseline")
    spec, spec_sub = await _chunked("spec")
    lazy, _ = await _chunked("lazy")
    assert base.finished_by == spec.finished_by == lazy.finished_by == "FINAL"
    assert base.answer == spec.answer == lazy.answer
    assert [t.output for t in base.turns] == [t.output for t in spec.turns]
    assert [t.output for t in base.turns] == [t.output for t in lazy.turns]
    assert base.stats.get("hits", 0) == 0 and base.stats.get("dispatched", 0) == 0
    # the first turn's loop over chunks is known while the message streams: all hits
    n_chunks = int(spec.turns[0].stdout)
    assert spec.turns[0].stats["hits"] == n_chunks
    assert spec.stats["hits"] >= n_chunks
    # the same prompts reached the sub-model: speculation added no extra sub-calls
    assert sorted(spec_sub.prompts) == sorted(base_sub.prompts)
    assert spec.sub_calls == base.sub_calls


BATCHED = [
    cell(
        "chunks = [context[i:i + 10] for i in range(0, len(context), 10)]\n"
        "labels = llm_query_batched(['classify: ' + c for c in chunks])\n"
        "print(len(labels))"
    ),
    cell("FINAL(' | '.join(labels))"),
]


async def _batched(mode: str) -> tuple[AgentResult, CountingSub]:
    context = "".join(f"row {i:02d} ok\n" for i in range(5))
    sub = CountingSub(n=(len(context) + 9) // 10)
    last = -(-len(BATCHED[0]) // 4) - 1

    async def before(call: int, i: int, delta: str) -> None:
        if mode == "spec" and call == 0 and i == last:   # see _chunked
            with anyio.fail_after(20):
                await sub.launched.wait()

    model = ScriptedModel(BATCHED, chunk_size=4, before_delta=before)
    return await ReplAgent(model, sub, mode=mode).run(context, "q"), sub


async def test_batched_calls_are_speculated_per_element():
    base, base_sub = await _batched("baseline")
    spec, spec_sub = await _batched("spec")
    assert base.answer == spec.answer and base.answer.count("|") == 4
    n = int(spec.turns[0].stdout)
    # each element was launched as its own llm_query while the message streamed,
    # and the real batched call claimed every one of them
    assert spec.turns[0].stats["dispatched"] == n
    assert spec.turns[0].stats["hits"] == n and spec.turns[0].stats["misses"] == 0
    assert base.turns[0].stats["misses"] == n and base.turns[0].stats.get("hits", 0) == 0
    assert sorted(spec_sub.prompts) == sorted(base_sub.prompts)


async def test_recursive_sub_agent_is_never_speculated():
    inner = ScriptedModel([cell("FINAL('inner:' + context)")])
    root = ScriptedModel([
        cell("r = rlm_query('sub question', 'abc')\nFINAL(r)"),
    ])
    agent = ReplAgent(root, echo_sub(), mode="spec", recursive_model=inner)
    result = await agent.run("outer", "q")
    assert result.answer == "inner:abc"
    assert len(inner.messages) == 1                  # ran once: by the real run only
    assert result.turns[0].stats.get("dispatched", 0) == 0


async def test_sub_model_error_surfaces_in_the_cell():
    def broken(prompt: str) -> str:
        raise RuntimeError("sub-model down")

    result = await run(
        [cell("try:\n    llm_query('x')\nexcept RuntimeError as e:\n    FINAL(str(e))")],
        sub=FunctionSubModel(broken),
    )
    assert result.answer == "sub-model down"


async def test_concurrent_runs_share_nothing():
    results: dict[int, str] = {}

    async def one(i: int) -> None:
        r = await run([cell(f"v = {i}"), cell("FINAL(v)")])
        results[i] = r.answer

    async with anyio.create_task_group() as tg:
        for i in range(4):
            tg.start_soon(one, i)
    assert results == {i: str(i) for i in range(4)}


async def test_cells_can_run_in_the_subprocess_executor():
    result = await run(
        [cell("x = llm_query('a')\nprint(x)"), cell("y = x * 2\nFINAL_VAR('y')")],
        executor="subprocess",
    )
    assert (result.answer, result.finished_by) == ("<a><a>", "FINAL_VAR")
    assert result.turns[0].stdout == "<a>\n"
