"""Test helpers: a recording host and a driver for ShadowInterpreter.run_statement."""

from __future__ import annotations

from spectool.shadow import Outcome, ShadowInterpreter, ToolInfo, until_wait

TOOLS = {
    "llm_query": ToolInfo("llm_query", "pure"),
    "llm_query_batched": ToolInfo("llm_query_batched", "pure", batched_of="llm_query"),
    "search": ToolInfo("search", "never"),
    "write_file": ToolInfo("write_file", "never"),
}


class RecordingHost:
    """Records launches; answers each with ``answer(tool, args, kwargs)``."""

    def __init__(self, answer=None, decline=()):
        self.launches: list[tuple[str, tuple, dict, str]] = []
        self.waits: list[int] = []
        self.answer = answer or (lambda tool, args, kwargs: Outcome(value=f"<{args[0]}>"))
        self.decline = set(decline)

    def launch(self, tool_name, args, kwargs, *, origin):
        if tool_name in self.decline:
            return None
        self.launches.append((tool_name, args, kwargs, origin))
        return len(self.launches) - 1

    def outcome(self, handle):
        self.waits.append(handle)
        tool, args, kwargs, _ = self.launches[handle]
        return self.answer(tool, args, kwargs)


def _not_a_wait(event) -> None:
    raise AssertionError(f"run_statement yielded {event!r}, not a WaitFor")


def drive(interp: ShadowInterpreter, source: str, host: RecordingHost) -> None:
    """Run one statement to its end, answering each wait with ``host.outcome``."""
    gen = interp.run_statement(source)
    wait = until_wait(gen, None, _not_a_wait)
    while wait is not None:
        wait = until_wait(gen, host.outcome(wait.handle), _not_a_wait)


def shadow(statements, namespace=None, tools=TOOLS, host=None, limits=None, **host_kw):
    from spectool.shadow import Limits

    host = host or RecordingHost(**host_kw)
    interp = ShadowInterpreter(namespace or {}, tools, host, limits or Limits())
    for src in statements:
        drive(interp, src, host)
    return interp, host
