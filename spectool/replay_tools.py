"""The simulated sub-call tools of ``spectool replay`` and the latencies they sleep.

Harness (:mod:`spectool.harness_presets`): ``"rlm"``, ``"verifiers"`` or
``"both"`` (default) presets the names that harness's REPL starts with (``context``;
``extra_data`` and ``answer``) and its sub-call tools: ``llm_query(prompt)``,
``llm_query_batched(prompts)`` / ``llm_batch(prompts, **kw)`` (batched forms of
``llm_query``: their elements are speculated one by one), ``FINAL(x)`` and
``FINAL_VAR(name)`` (never speculated, no effect), plus any ``extra_tools`` names as
pure tools of one argument. Prompts may be any JSON value (strings, message dicts,
lists of messages). A sub-call answers ``"[answer <hash of prompt>]"`` (the same in
every mode).

Latency of a call (:class:`LatencyBook`): the baseline run fixes every call's latency
once: its calls are matched, in execution order per tool, to the turn's recorded
calls (a batched call takes one record: one number for each element, or a list with
one per element); a call beyond the record, and every call of a turn without one,
takes the latency model ``latency_s + latency_per_ktok * prompt_tokens / 1000`` (4
characters a token). Every mode then looks each call up by (tool, arguments,
occurrence), so every mode sees exactly the baseline's latency for the same call;
nothing recorded is consumed twice. Where the baseline's calls and the record
disagree (more calls, fewer, other tools), the report warns and counts the calls that
fell back to the model.

Each simulated call sleeps its latency (times ``time_scale``) and records a
:class:`CallSpan` in its mode's :class:`Recorder`; the self-checks
(:mod:`spectool.replay_checks`) read the spans.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import anyio
import pydantic

from .harness_presets import HARNESS_TOOLS
from .replay_log import BATCHED, RecordedCall
from .tools import tool

__all__ = ["LatencyBook", "CallSpan", "Recorder", "simulated_tools"]

Prompt = pydantic.JsonValue


class LatencyBook:
    """The latency of every sub-call of one turn, fixed by the baseline, looked up by
    every other mode (see the module docstring).

    ``begin(mode)`` starts a mode (the baseline first); ``call(tool, key)`` and
    ``batch(batched_tool, keys)`` give latencies; ``modelled[mode]`` counts the calls
    that took the latency model; after the baseline, ``beyond_record`` counts its
    calls the record had no entry for and ``unused_records`` the entries no call took.
    """

    def __init__(self, recorded: Sequence[RecordedCall] | None,
                 model: Callable[[str], float]) -> None:
        self.has_record = recorded is not None
        self._queues: dict[str, deque[RecordedCall]] = defaultdict(deque)
        for rec in recorded or ():
            self._queues[rec.tool].append(rec)
        self._model = model
        self._fixed: dict[tuple[str, str, int], float] = {}
        self._seen: dict[tuple[str, str], int] = {}
        self.mode: str | None = None
        self.modelled: dict[str, int] = {}
        self.beyond_record = 0

    def begin(self, mode: str) -> None:
        if mode != "baseline" and "baseline" not in self.modelled:
            raise RuntimeError("the baseline must run first: it fixes the latencies")
        self.mode = mode
        self._seen = {}
        self.modelled[mode] = 0

    @property
    def unused_records(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def _occurrence(self, tool_name: str, key: str) -> tuple[str, str, int]:
        occ = self._seen.get((tool_name, key), 0)
        self._seen[(tool_name, key)] = occ + 1
        return (tool_name, key, occ)

    def _lookup_or_model(self, k: tuple[str, str, int]) -> float:
        if k in self._fixed:
            return self._fixed[k]
        assert self.mode is not None
        self.modelled[self.mode] += 1
        return self._model(k[1])

    def _fix(self, k: tuple[str, str, int], recorded: float | None) -> float:
        if recorded is None:
            if self.has_record:
                self.beyond_record += 1
            self.modelled["baseline"] += 1
            recorded = self._model(k[1])
        self._fixed[k] = recorded
        return recorded

    def call(self, tool_name: str, key: str) -> float:
        """The latency of one call of ``tool_name`` with arguments ``key``."""
        k = self._occurrence(tool_name, key)
        if self.mode != "baseline":
            return self._lookup_or_model(k)
        queue = self._queues.get(tool_name)
        # (a list of latencies is a batched call's record: the parser allows it only for
        # the batched tools, whose records ``batch`` takes)
        rec = queue.popleft() if queue else None
        return self._fix(k, None if rec is None else rec.latency_s)  # type: ignore[arg-type]

    def batch(self, batched_tool: str, element_tool: str, keys: Sequence[str]) -> list[float]:
        """The latencies of a batched call's elements (each an ``element_tool`` call)."""
        ks = [self._occurrence(element_tool, key) for key in keys]
        if self.mode != "baseline":
            return [self._lookup_or_model(k) for k in ks]
        queue = self._queues.get(batched_tool)
        rec = queue.popleft() if queue else None
        if rec is None:
            per: list[float | None] = [None] * len(ks)
        elif isinstance(rec.latency_s, float):
            per = [rec.latency_s] * len(ks)
        else:
            given = list(rec.latency_s)
            per = [given[i] if i < len(given) else None for i in range(len(ks))]
            self.beyond_record += max(0, len(given) - len(ks))   # elements that never ran
        return [self._fix(k, lat) for k, lat in zip(ks, per)]


@dataclass
class CallSpan:
    """One simulated execution: tool, argument key, occurrence-free; latency it was
    given; wall-clock start and end; whether it ran to its end (not cancelled)."""

    tool: str
    key: str
    latency_s: float
    start: float
    end: float = 0.0
    finished: bool = False


class Recorder:
    """The calls one mode made in the current turn (``spans``), timed against ``book``."""

    def __init__(self, time_scale: float) -> None:
        self.time_scale = time_scale
        self.book: LatencyBook | None = None
        self.spans: list[CallSpan] = []

    async def sleep(self, tool_name: str, key: str, latency: float) -> None:
        span = CallSpan(tool_name, key, latency, time.perf_counter())
        self.spans.append(span)
        try:
            await anyio.sleep(latency * self.time_scale)
            span.finished = True
        finally:
            span.end = time.perf_counter()


def _answer(prompt: Any) -> str:
    return "[answer " + hashlib.sha256(repr(prompt).encode()).hexdigest()[:8] + "]"


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr) if not isinstance(value, str) \
        else repr(value)


def simulated_tools(rec: Recorder, harness: str, extra: tuple[str, ...]) -> list[Any]:
    """The harness's sub-call tools and ``extra`` pure tools, all sleeping through ``rec``."""
    @tool(speculate="pure", name="llm_query")
    async def llm_query(prompt: Prompt, **kw: Any) -> str:   # kw: llm_batch(prompts, **kw)
        assert rec.book is not None
        key = _key(prompt)
        await rec.sleep("llm_query", key, rec.book.call("llm_query", key))
        return _answer(prompt)

    def batched(name: str):
        async def run(prompts: list[Prompt], **kw: Any) -> list[str]:
            assert rec.book is not None
            keys = [_key(p) for p in prompts]
            latencies = rec.book.batch(name, "llm_query", keys)
            async with anyio.create_task_group() as tg:
                for key, latency in zip(keys, latencies):
                    tg.start_soon(rec.sleep, "llm_query", key, latency)
            return [_answer(p) for p in prompts]
        run.__name__ = name
        return tool(speculate="pure", name=name, batched_of="llm_query")(run)

    @tool(name="FINAL")
    def final(answer: Any = None) -> None:
        return None

    @tool(name="FINAL_VAR")
    def final_var(name: Any = None) -> None:
        return None

    made = {"llm_query": llm_query, "FINAL": final, "FINAL_VAR": final_var}
    for name in BATCHED:
        made[name] = batched(name)
    out = [made[name] for name in HARNESS_TOOLS[harness]]
    for name in extra:
        def make(n: str):
            async def fn(arg: Any = None) -> str:
                assert rec.book is not None
                key = _key(arg)
                await rec.sleep(n, key, rec.book.call(n, key))
                return _answer((n, arg))
            return tool(speculate="pure", name=n)(fn)
        out.append(make(name))
    return out
