"""spectool as smolagents' CodeAgent executor, against a scripted model (offline).

The two ``search`` calls of one code action must be in flight together (a barrier
of two that times out otherwise): in ``lazy`` mode the shadow starts both before
the real run reaches the second; the negative control shows ``baseline`` (one call
at a time) cannot pass the same barrier.
"""

from __future__ import annotations

import threading

import pytest

smolagents = pytest.importorskip("smolagents")

from smolagents import CodeAgent, tool  # noqa: E402
from smolagents.models import ChatMessage, Model  # noqa: E402

from spectool_agents.integrations.smolagents import SpectoolExecutor  # noqa: E402

STEPS = [
    "Thought: search both.\n<code>\nr = [search(q) for q in ['a', 'b']]\nprint(r)\n</code>",
    "Thought: done.\n<code>\nfinal_answer(r[0] + ' & ' + r[1])\n</code>",
]


class Scripted(Model):
    def __init__(self, steps):
        super().__init__(model_id="scripted")
        self.steps = list(steps)
        self.seen: list = []

    def generate(self, messages, stop_sequences=None, response_format=None,
                 tools_to_call_from=None, **kwargs):
        self.seen.append(messages)
        return ChatMessage(role="assistant", content=self.steps[len(self.seen) - 1])


def make_search(parties: int):
    barrier = threading.Barrier(parties, timeout=3)
    calls: list[str] = []

    @tool
    def search(q: str) -> str:
        """Search the web.

        Args:
            q: the query
        """
        calls.append(q)
        barrier.wait()          # both calls must be in flight at once
        return f"hits for {q}"

    return search, calls


def run_agent(mode: str):
    search, calls = make_search(2)
    executor = SpectoolExecutor(pure={"search"}, mode=mode)
    with CodeAgent(tools=[search], model=Scripted(STEPS), executor=executor,
                   max_steps=3, verbosity_level=0) as agent:
        answer = agent.run("search a and b")
    return answer, calls


def test_code_agent_runs_on_spectool_and_fans_out_pure_calls():
    answer, calls = run_agent("lazy")
    assert answer == "hits for a & hits for b"
    assert sorted(calls) == ["a", "b"]                  # each once: the real run claimed both


def test_negative_control_baseline_runs_calls_one_at_a_time():
    """Control: without speculation the second call waits for the first, so the
    barrier breaks: the test above would catch an executor that did not fan out."""
    search, _ = make_search(2)
    executor = SpectoolExecutor(pure={"search"}, mode="baseline")
    executor.send_tools({"search": search})
    try:
        with pytest.raises(RuntimeError, match="BrokenBarrierError"):
            executor("r = [search(q) for q in ['a', 'b']]")
    finally:
        executor.cleanup()


def test_errors_reach_the_model_and_unknown_pure_names_are_refused():
    search, _ = make_search(1)
    model = Scripted(["<code>\nx = 1 / 0\n</code>", "<code>\nfinal_answer('ok')\n</code>"])
    with CodeAgent(tools=[search], model=model, executor=SpectoolExecutor(pure={"search"}),
                   max_steps=3, verbosity_level=0) as agent:
        assert agent.run("divide") == "ok"
    assert "ZeroDivisionError" in str(model.seen[1])
    with pytest.raises(KeyError, match="nope"):
        SpectoolExecutor(pure={"nope"}).send_tools({"search": search})
