"""What-if replay of a user's own agent log: would speculation help *this* agent?

``spectool replay LOG`` reads a conversation (formats: :mod:`spectool.replay_log`),
streams each assistant turn's text at a chosen token rate into a fresh
:class:`~spectool.Runtime` per mode (``baseline``, ``lazy``, ``spec``; one runtime per
mode for the whole conversation, so cells share a namespace as they did), with
**simulated** tools that sleep for the recorded latency (or a latency model) and
return placeholder answers. It reports per turn and in total: wall time, a lower bound
no schedule can beat, hits, wasted executions and whether the turn's output is
identical to the baseline's; and writes a table, JSON and a timeline PNG.

Safety: the log's cells are untrusted code. They run in the subprocess executor, in
its sandbox (:mod:`spectool.sandbox`), unless ``executor="inprocess"`` is asked for,
which runs them as the user (the report then carries a warning). The whole replay has
a time limit.

Harness (``harness=``, :mod:`spectool.harness_presets`): ``"rlm"``, ``"verifiers"`` or
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

Lower bound (per turn): ``max(T_stream, max_c (t_site(c) + L_c))``: ``T_stream`` is
the nominal time to stream the turn's text; ``t_site`` is when the first mention of a
sub-call tool's name (or of a function an earlier turn defined or aliased) had
streamed; ``L_c`` is the call's latency. Every call starts at the earliest moment any
runtime could know it, ignoring dependencies; no mode can beat it.

Self-checks (:mod:`spectool.replay_checks`), per turn and per mode, before any figure
is reported: each call slept its latency, and that latency equals the baseline's for
the same (tool, arguments, occurrence); no wall time is below the turn's bound (less
a small scheduling tolerance); the real run made as many sub-calls as the baseline's.
A violation raises :class:`ReplayCheckError` naming the turn and the call.

Times are log seconds: wall seconds / ``time_scale`` (everything, stream and tools,
runs ``time_scale`` times faster than recorded).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import anyio
import pydantic

from .harness_presets import HARNESS_NAMES, HARNESS_TOOLS, harness_namespace
from .replay_checks import (ReplayCheckError, check_bound, check_call_counts,
                            check_latencies, occurrences)
from .replay_log import (BATCHED, ReplayError, RecordedCall, ReplayLog, ReplayTurn,
                         check_latency, check_rate, load_log, parse_log)
from .runtime import Runtime
from .tables import Block, Column, Table, text
from .tools import tool

__all__ = ["ReplayTurn", "ReplayLog", "RecordedCall", "load_log", "parse_log", "replay",
           "format_table", "write_outputs", "ReplayError", "ReplayCheckError", "MODES",
           "LatencyBook", "EXECUTORS"]

MODES = ("baseline", "lazy", "spec")
EXECUTORS = ("subprocess", "inprocess")
CHARS_PER_TOKEN = 4
SUB_CALLS = ("llm_query",) + BATCHED
INPROCESS_WARNING = ("executor 'inprocess': the log's cells ran in this process, as you, "
                     "with your files and network")

Prompt = pydantic.JsonValue


# -- latencies ----------------------------------------------------------------------------


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


class _Recorder:
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


def _tools(rec: _Recorder, harness: str, extra: tuple[str, ...]) -> list[Any]:
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


# -- the lower bound ------------------------------------------------------------------------


def _n_chunks(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def _stream_time(text: str, rate: float) -> float:
    """Log seconds until the last chunk of ``text`` is sent (chunk k at k / rate)."""
    return (_n_chunks(text) - 1) / rate


_DEFINED = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)|^[ \t]*(\w+)[ \t]*=[ \t]*"
                      r"(?:lambda\b|[A-Za-z_]\w*[ \t]*$)", re.M)


def _earlier_names(texts: Sequence[str]) -> set[str]:
    """Functions earlier turns defined or aliased: calling one may call a tool."""
    names: set[str] = set()
    for text in texts:
        for m in _DEFINED.finditer(text):
            names.add(m.group(1) or m.group(2))
    return names


def _site_time(text: str, names: Sequence[str], rate: float) -> float:
    """Log seconds until the first mention of one of ``names`` had streamed (0 if none:
    the call may come from anywhere)."""
    best = None
    for name in names:
        m = re.search(rf"\b{re.escape(name)}\b", text)
        if m and (best is None or m.end() < best):
            best = m.end()
    return 0.0 if best is None else ((best - 1) // CHARS_PER_TOKEN) / rate


def turn_bound(text: str, rate: float, calls: Sequence[tuple[str, float]],
               earlier: Sequence[str] = ()) -> float:
    """The turn's lower bound (module docstring) for ``calls`` = [(tool, latency)]."""
    helpers = sorted(_earlier_names(earlier))
    bound = _stream_time(text, rate)
    for name, latency in calls:
        names = (SUB_CALLS if name in SUB_CALLS else (name,)) + tuple(helpers)
        bound = max(bound, _site_time(text, names, rate) + latency)
    return bound


# -- replay -------------------------------------------------------------------------------------


async def _stream(text: str, rate: float, time_scale: float):
    t0 = time.perf_counter()
    for k in range(_n_chunks(text)):
        delay = t0 + k / rate * time_scale - time.perf_counter()
        if delay > 0:
            await anyio.sleep(delay)
        yield text[k * CHARS_PER_TOKEN:(k + 1) * CHARS_PER_TOKEN]


def _plain(ns: dict) -> dict:
    out = {}
    for k, v in ns.items():
        if isinstance(v, (str, int, float, bool, type(None), list, tuple, dict)):
            out[k] = repr(v)
    return out


async def _warm_up(modes: tuple[str, ...], harness: str, extra_tools: tuple[str, ...]) -> None:
    """One untimed tiny turn per mode (our own code, in-process), so first-use costs
    (imports, the shadow's start-up) do not land on whichever mode runs first."""
    text = "```repl\nw = llm_query('warm-up')\n```\n"
    for m in modes:
        rec = _Recorder(1.0)
        rec.book = LatencyBook(None, lambda key: 0.0)
        rec.book.begin("baseline")
        async with Runtime(_tools(rec, "both", extra_tools), mode=m) as rt:
            await rt.run(_stream(text, 1e6, 1.0))


def _check_settings(tokens_per_s: float, latency_s: float, latency_per_ktok: float,
                    time_scale: float, time_limit: float, modes: tuple[str, ...],
                    harness: str, executor: str) -> tuple[str, ...]:
    check_rate(tokens_per_s, "tokens_per_s")
    check_latency(latency_s, "latency_s")
    if not (isinstance(latency_per_ktok, (int, float)) and math.isfinite(latency_per_ktok)
            and 0 <= latency_per_ktok <= 3600):
        raise ReplayError(f"latency_per_ktok must be a finite number in [0, 3600], "
                          f"not {latency_per_ktok!r}")
    for name, value in (("time_scale", time_scale), ("time_limit", time_limit)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ReplayError(f"{name} must be a finite number > 0, not {value!r}")
    if harness not in HARNESS_NAMES:
        raise ReplayError(f"unknown harness {harness!r}; choose from "
                          f"{', '.join(HARNESS_NAMES)}")
    if executor not in EXECUTORS:
        raise ReplayError(f"unknown executor {executor!r}; choose from {', '.join(EXECUTORS)}")
    if "baseline" not in modes:
        modes = ("baseline",) + tuple(modes)
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ReplayError(f"unknown mode(s) {bad}; choose from {MODES}")
    return tuple(dict.fromkeys(modes))


async def replay(log: ReplayLog, *, tokens_per_s: float = 50.0, latency_s: float = 2.0,
                 latency_per_ktok: float = 0.0, time_scale: float = 1.0,
                 modes: tuple[str, ...] = MODES, extra_tools: tuple[str, ...] = (),
                 harness: str = "both", executor: str = "subprocess",
                 time_limit: float = 3600.0) -> dict[str, Any]:
    """Replay every turn in every mode; the report (plain data, log seconds).

    Unrecorded calls take ``latency_s + latency_per_ktok * prompt_tokens / 1000``.
    ``time_limit``: real seconds for the whole replay. Raises :class:`ReplayError`
    for bad settings, a replay that cannot fit its time limit, or one that ran past
    it, and :class:`ReplayCheckError` when a self-check fails."""
    modes = _check_settings(tokens_per_s, latency_s, latency_per_ktok, time_scale,
                            time_limit, modes, harness, executor)
    floor = sum(_stream_time(t.text, t.tokens_per_s or tokens_per_s) for t in log.turns)
    if floor * time_scale * len(modes) > time_limit:
        raise ReplayError(f"streaming the log alone takes {floor * time_scale * len(modes):.0f}"
                          f" s in {len(modes)} modes at time_scale {time_scale:g}, past the "
                          f"time limit of {time_limit:g} s")

    def model(key: str) -> float:
        # the latency model: a base plus a cost per 1000 prompt tokens (4 chars each)
        return latency_s + latency_per_ktok * len(key) / (CHARS_PER_TOKEN * 1000)

    try:
        with anyio.fail_after(time_limit):
            return await _replay(log, modes, tokens_per_s, time_scale, extra_tools, harness,
                                 executor, model, latency_s, latency_per_ktok)
    except TimeoutError:
        raise ReplayError(f"the replay ran past its time limit of {time_limit:g} s") from None


async def _replay(log: ReplayLog, modes: tuple[str, ...], tokens_per_s: float,
                  time_scale: float, extra_tools: tuple[str, ...], harness: str,
                  executor: str, model: Callable[[str], float], latency_s: float,
                  latency_per_ktok: float) -> dict[str, Any]:
    recs = {m: _Recorder(time_scale) for m in modes}
    runtimes = {m: Runtime(_tools(recs[m], harness, extra_tools), mode=m, executor=executor,
                           namespace=harness_namespace(harness, log.context),
                           languages=("repl", "python", "py"))
                for m in modes}
    turns: list[dict[str, Any]] = []
    warnings: list[str] = [INPROCESS_WARNING] if executor == "inprocess" else []
    sandbox = None
    try:
        await _warm_up(modes, harness, extra_tools)
        for rt in runtimes.values():        # untimed: the executors' start-up
            await rt.executor.start()
        sandbox = getattr(runtimes[modes[0]].executor, "sandbox_mode", None) or "none"
        for index, turn in enumerate(log.turns):
            turns.append(await _replay_turn(index, turn, log, modes, runtimes, recs,
                                            tokens_per_s, time_scale, model))
    finally:
        for rt in runtimes.values():
            with anyio.CancelScope(shield=True):
                await rt.aclose()
    fallbacks = sum(t["latency"]["beyond_record"] for t in turns)
    unused = sum(t["latency"]["unused_records"] for t in turns)
    if fallbacks or unused:
        warnings.append(f"the log's recorded calls do not match the cells' calls: "
                        f"{fallbacks} call(s) fell back to the latency model, {unused} "
                        f"recorded call(s) were not made")
    return {"simulated": "tools simulated (recorded or modelled latencies, placeholder "
                         "answers); the model's text streamed at the recorded/chosen rate",
            "format": log.format, "turns_replayed": len(turns),
            "tool_results_in_log": log.tool_results, "harness": harness,
            "executor": executor, "sandbox": sandbox,
            "tokens_per_s": tokens_per_s, "latency_s": latency_s,
            "latency_per_ktok": latency_per_ktok, "time_scale": time_scale,
            "modes": list(modes), "turns": turns, "total": _totals(turns, modes),
            "latency_fallbacks": fallbacks, "recorded_calls_unused": unused,
            "checks": "passed", "warnings": warnings}


async def _replay_turn(index: int, turn: ReplayTurn, log: ReplayLog, modes: tuple[str, ...],
                       runtimes: dict[str, Runtime], recs: dict[str, _Recorder],
                       tokens_per_s: float, time_scale: float,
                       model: Callable[[str], float]) -> dict[str, Any]:
    rate = turn.tokens_per_s or tokens_per_s
    book = LatencyBook(turn.calls, model)
    row: dict[str, Any] = {"turn": index, "chars": len(turn.text), "modes": {}}
    base_out = None
    spans: dict[str, list[CallSpan]] = {}
    for m in modes:                      # baseline first: it fixes the latencies
        rec = recs[m]
        book.begin(m)
        rec.book, rec.spans = book, []
        t0 = time.perf_counter()
        res = await runtimes[m].run(_stream(turn.text, rate, time_scale))
        wall = (time.perf_counter() - t0) / time_scale
        out = (res.stdout, None if res.error is None else repr(res.error),
               _plain(res.namespace))
        if m == "baseline":
            base_out = out
        spans[m] = rec.spans
        s = res.stats
        row["modes"][m] = {
            "wall_s": wall, "t_stream_s": s.t_stream / time_scale,
            "hits": s.hits, "misses": s.misses, "executions": s.executions,
            "sub_calls": s.hits + s.misses + s.calls,
            "admission_declined": s.admission_declined,
            "modelled_calls": book.modelled[m],
            "identical": out == base_out, "error": out[1],
            "calls": [(c.tool, c.key, c.latency_s) for c in rec.spans],
            "spans": [(c.tool, (c.start - t0) / time_scale, (c.end - t0) / time_scale)
                      for c in rec.spans],
        }
    row["latency"] = {"recorded": book.has_record, "beyond_record": book.beyond_record,
                      "unused_records": book.unused_records if book.has_record else 0}
    base = row["modes"]["baseline"]
    base_calls = [(c.tool, c.latency_s) for c in spans["baseline"]]
    earlier = [t.text for t in log.turns[:index]]
    row["bound_s"] = turn_bound(turn.text, rate, base_calls, earlier)
    row["bound_speedup"] = base["wall_s"] / row["bound_s"] if row["bound_s"] > 0 else None
    # the self-checks: nothing below is reported if one fails
    baseline_latency = occurrences([(c.tool, c.key, c.latency_s) for c in spans["baseline"]])
    for m in modes:
        check_latencies(index, m, [(c.tool, c.key, c.latency_s, c.finished,
                                    (c.end - c.start) / time_scale) for c in spans[m]],
                        baseline_latency, tolerance_s=0.002 / time_scale)
        check_bound(index, m, row["modes"][m]["wall_s"], row["bound_s"],
                    tolerance_s=0.01 * row["bound_s"] + 0.005 / time_scale)
        check_call_counts(index, m, row["modes"][m]["sub_calls"], base["sub_calls"])
    for m in modes:
        row["modes"][m]["wasted"] = row["modes"][m]["executions"] - base["executions"]
        row["modes"][m]["speedup"] = (base["wall_s"] / row["modes"][m]["wall_s"]
                                      if row["modes"][m]["wall_s"] > 0 else None)
    return row


def _totals(turns: list[dict[str, Any]], modes: tuple[str, ...]) -> dict[str, Any]:
    total: dict[str, Any] = {"modes": {}}
    for m in modes:
        ws = [t["modes"][m] for t in turns]
        total["modes"][m] = {
            "wall_s": sum(w["wall_s"] for w in ws), "hits": sum(w["hits"] for w in ws),
            "executions": sum(w["executions"] for w in ws),
            "wasted": sum(w["wasted"] for w in ws),
            "modelled_calls": sum(w["modelled_calls"] for w in ws),
            "identical": all(w["identical"] for w in ws)}
    b = total["modes"]["baseline"]["wall_s"]
    for m in modes:
        w = total["modes"][m]["wall_s"]
        total["modes"][m]["speedup"] = b / w if w > 0 else None
    total["bound_s"] = sum(t["bound_s"] for t in turns)
    total["bound_speedup"] = b / total["bound_s"] if total["bound_s"] > 0 else None
    return total


# -- output ---------------------------------------------------------------------------------


def format_table(report: dict[str, Any]) -> str:
    """The summary as plain text (``table.txt``, and stdout when it is not a terminal)."""
    return text(table_blocks(report))


def table_blocks(report: dict[str, Any]) -> list[Block]:
    """The summary as text lines and a table (``spectool.tables.show`` prints it)."""
    modes = report["modes"]
    lines: list[Block] = [
        f"spectool replay ({report['format']} log, {report['turns_replayed']} turns, "
        f"harness {report['harness']}, executor {report['executor']} (sandbox "
        f"{report['sandbox']}); SIMULATED tools: recorded or modelled latencies, "
        f"placeholder answers; {report['tokens_per_s']:g} tok/s unless the log says; "
        f"times in log seconds; self-checks {report['checks']})",
        "bound = no schedule can beat it (every call starts as soon as its tool is "
        "first named); wasted = executions beyond the baseline's; same = output "
        "identical to baseline"]
    columns = ([Column("turn", 4)] + [Column(m, 10) for m in modes] + [Column("bound", 8)]
               + [Column(m + " x", 9) for m in modes[1:]] + [Column("bound x", 9)]
               + [c for m in modes[1:] for c in (Column("hits " + m, 10), Column("waste", 6))]
               + [Column("same", 6)])

    def row(label: str, bound: float, bound_x: float | None, per: dict[str, Any]) -> list[str]:
        cells = [label] + [f"{per[m]['wall_s']:.2f}" for m in modes] + [f"{bound:.2f}"]
        cells += [f"{per[m]['speedup'] or 0:.2f}" for m in modes[1:]] + [f"{bound_x or 0:.2f}"]
        cells += [str(c) for m in modes[1:] for c in (per[m]["hits"], per[m]["wasted"])]
        return cells + ["yes" if all(per[m]["identical"] for m in modes) else "NO"]

    tot = report["total"]
    turns = Table(columns, [row(str(t["turn"]), t["bound_s"], t["bound_speedup"], t["modes"])
                            for t in report["turns"]],
                  totals=[row("all", tot["bound_s"], tot["bound_speedup"], tot["modes"])])
    return lines + [turns] + [f"warning: {w}" for w in report.get("warnings", ())]


def write_outputs(report: dict[str, Any], out: str | Path) -> list[Path]:
    """``replay.json``, ``table.txt`` and ``timeline.png`` in ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "replay.json", out / "table.txt", out / "timeline.png"]
    paths[0].write_text(json.dumps(report, indent=1))
    paths[1].write_text(format_table(report) + "\n")
    _timeline(report, paths[2])
    return paths


def _timeline(report: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes, turns = report["modes"], report["turns"]
    fig, axes = plt.subplots(len(turns), 1, figsize=(10, 1.2 + 1.1 * len(modes) * len(turns)),
                             squeeze=False)
    colours = {"llm_query": "#2ca02c"}
    for ax, t in zip(axes[:, 0], turns):
        for y, m in enumerate(modes):
            r = t["modes"][m]
            ax.barh(y, r["t_stream_s"], left=0, height=0.8, color="#cccccc")
            spans = r["spans"]
            for k, (name, a, b) in enumerate(spans):
                h = 0.6 / max(1, len(spans))
                ax.barh(y - 0.3 + h * (k + 0.5), b - a, left=a, height=h,
                        color=colours.get(name, "#1f77b4"))
            ax.plot([r["wall_s"]] * 2, [y - 0.45, y + 0.45], color="black", lw=1.5)
        ax.axvline(t["bound_s"], color="#d62728", ls="--", lw=1)
        ax.set_yticks(range(len(modes)), modes)
        ax.set_title(f"turn {t['turn']}: grey = streaming, bars = tool executions, "
                     f"| = turn end, dashed = bound", fontsize=8)
    axes[-1, 0].set_xlabel("log seconds (SIMULATED tools)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv_args: Any) -> int:
    """The ``spectool replay`` subcommand (``argv_args``: the parsed arguments)."""
    import sys

    from .tables import print_json, show

    context = None
    if argv_args.context is not None:
        context = Path(argv_args.context).read_text(encoding="utf-8")
    log = load_log(argv_args.log, context)
    report = anyio.run(lambda: replay(
        log, tokens_per_s=argv_args.rate, latency_s=argv_args.latency,
        latency_per_ktok=argv_args.latency_per_ktok,
        time_scale=argv_args.time_scale, extra_tools=tuple(argv_args.tool or ()),
        harness=argv_args.harness, executor=argv_args.executor,
        time_limit=argv_args.time_limit, modes=argv_args.modes))
    for w in report["warnings"]:
        print(f"spectool replay: warning: {w}", file=sys.stderr)
    if argv_args.json:
        print_json(report)
    else:
        show(table_blocks(report))
    if argv_args.out is not None:   # with --json, stdout is the JSON alone
        for p in write_outputs(report, argv_args.out):
            print(f"wrote {p}", file=sys.stderr if argv_args.json else sys.stdout)
    return 0
