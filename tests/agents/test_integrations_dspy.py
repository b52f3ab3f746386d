"""spectool as DSPy RLM's interpreter, with a scripted root LM and sub-LM (offline).

The two ``llm_query`` calls of one block must be in flight together (a barrier of
two that times out otherwise); the negative control runs the same block in
``baseline`` mode, where the barrier breaks.
"""

from __future__ import annotations

import threading

import pytest

dspy = pytest.importorskip("dspy")

from dspy.primitives.code_interpreter import CodeExecutionError, FinalOutput  # noqa: E402
from dspy.utils.dummies import DummyLM  # noqa: E402

from spectool_agents.integrations.dspy import SpectoolInterpreter, spectool_interpreter  # noqa: E402

BLOCK = "parts = [llm_query('count ' + p) for p in context.split('|')]\nprint(parts)"


class BarrierSubLM:
    """A sub-LM whose calls must overlap in pairs (else BrokenBarrierError)."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2, timeout=3)
        self.prompts: list[str] = []

    def __call__(self, prompt: str, **kwargs):
        self.prompts.append(prompt)
        self.barrier.wait()
        return [prompt.upper()]


def test_rlm_runs_on_spectool_and_fans_out_llm_queries():
    root = DummyLM([
        {"reasoning": "query both parts", "code": f"```python\n{BLOCK}\n```"},
        {"reasoning": "done", "code": "```python\nSUBMIT(answer=' + '.join(parts))\n```"},
    ])
    sub = BarrierSubLM()
    rlm = dspy.RLM("context, query -> answer", max_iters=3, sub_lm=sub,
                   interpreter_factory=spectool_interpreter())
    with dspy.context(lm=root):
        prediction = rlm(context="a|b", query="count the parts")
    assert prediction.answer == "COUNT A + COUNT B"
    assert sorted(sub.prompts) == ["count a", "count b"]     # each once: claimed, not repeated


def test_negative_control_baseline_queries_one_at_a_time():
    sub = BarrierSubLM()
    interpreter = SpectoolInterpreter(mode="baseline")
    interpreter.tools["llm_query"] = lambda prompt: sub(prompt)[0]
    try:
        with pytest.raises(CodeExecutionError, match="BrokenBarrierError"):
            interpreter.execute(BLOCK, {"context": "a|b"})
    finally:
        interpreter.shutdown()


def test_interpreter_contract_submit_errors_and_output():
    interpreter = SpectoolInterpreter(output_fields=[{"name": "answer"}, {"name": "n"}])
    try:
        assert interpreter.execute("x = 41") is None
        assert interpreter.execute("print(x + 1)") == "42\n"            # state persists
        assert interpreter.execute("SUBMIT('yes', x)") == FinalOutput({"answer": "yes", "n": 41})
        with pytest.raises(CodeExecutionError, match="ZeroDivisionError"):
            interpreter.execute("1 / 0")
        with pytest.raises(SyntaxError):
            interpreter.execute("def broken(:")
        with pytest.raises(CodeExecutionError, match="output fields"):
            interpreter.execute("SUBMIT(answer='only one')")
    finally:
        interpreter.shutdown()
