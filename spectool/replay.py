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
its sandbox (:mod:`spectool.execution.sandbox`), unless ``executor="inprocess"`` is
asked for, which runs them as the user (the report then carries a warning). The whole
replay has a time limit.

Harness (``harness=``, :mod:`spectool.harness_presets`): ``"rlm"``, ``"verifiers"`` or
``"both"`` (default) presets the names that harness's REPL starts with and its
sub-call tools, simulated by :mod:`spectool.replay_tools` (which also fixes every
call's latency: :class:`LatencyBook`). The lower bound of a turn:
:mod:`spectool.replay_bound`; the table, JSON and timeline: :mod:`spectool.replay_report`.

Self-checks (:mod:`spectool.replay_checks`), per turn and per mode, before any figure
is reported: each call slept its latency, and that latency equals the baseline's for
the same (tool, arguments, occurrence); no wall time is below the turn's bound (less
a small scheduling tolerance); the real run made as many sub-calls as the baseline's.
A violation raises :class:`ReplayCheckError` naming the turn and the call.

Times are log seconds: wall seconds / ``time_scale`` (everything, stream and tools,
runs ``time_scale`` times faster than recorded).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable

import anyio

from .harness_presets import HARNESS_NAMES, harness_namespace
from .replay_bound import CHARS_PER_TOKEN, n_chunks, stream_time, turn_bound
from .replay_checks import (ReplayCheckError, check_bound, check_call_counts,
                            check_latencies, occurrences)
from .replay_log import (ReplayError, RecordedCall, ReplayLog, ReplayTurn, check_latency,
                         check_rate, load_log, parse_log)
from .replay_report import format_table, table_blocks, totals, write_outputs
from .replay_tools import CallSpan, LatencyBook, Recorder, simulated_tools
from .runtime import Runtime

__all__ = ["ReplayTurn", "ReplayLog", "RecordedCall", "load_log", "parse_log", "replay",
           "format_table", "write_outputs", "ReplayError", "ReplayCheckError", "MODES",
           "LatencyBook", "EXECUTORS"]

MODES = ("baseline", "lazy", "spec")
EXECUTORS = ("subprocess", "inprocess")
INPROCESS_WARNING = ("executor 'inprocess': the log's cells ran in this process, as you, "
                     "with your files and network")


async def _stream(text: str, rate: float, time_scale: float):
    """``text`` in chunks of ``CHARS_PER_TOKEN`` characters, chunk k at ``k / rate``."""
    t0 = time.perf_counter()
    for k in range(n_chunks(text)):
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
        rec = Recorder(1.0)
        rec.book = LatencyBook(None, lambda key: 0.0)
        rec.book.begin("baseline")
        async with Runtime(simulated_tools(rec, "both", extra_tools), mode=m) as rt:
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
    modes = run_modes(modes)
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ReplayError(f"unknown mode(s) {bad}; choose from {MODES}")
    return modes


def run_modes(modes) -> tuple[str, ...]:
    """The modes a replay runs: baseline first (always), then the others, each once."""
    return tuple(dict.fromkeys(("baseline", *modes)))


ANNOUNCE_AFTER_S = 30.0   # the CLI says how long a replay will take at least when it is this long


def stream_floor(log: ReplayLog, tokens_per_s: float) -> float:
    """Log seconds spent streaming the log's turns once: no mode can replay it faster."""
    return sum(stream_time(t.text, t.tokens_per_s or tokens_per_s) for t in log.turns)


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
    floor = stream_floor(log, tokens_per_s)
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
    recs = {m: Recorder(time_scale) for m in modes}
    runtimes = {m: Runtime(simulated_tools(recs[m], harness, extra_tools), mode=m, executor=executor,
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
            "modes": list(modes), "turns": turns, "total": totals(turns, modes),
            "latency_fallbacks": fallbacks, "recorded_calls_unused": unused,
            "checks": "passed", "warnings": warnings}


async def _replay_turn(index: int, turn: ReplayTurn, log: ReplayLog, modes: tuple[str, ...],
                       runtimes: dict[str, Runtime], recs: dict[str, Recorder],
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


def main(argv_args: Any) -> int:
    """The ``spectool replay`` subcommand (``argv_args``: the parsed arguments)."""
    import sys

    from .tables import print_json, show

    context = None
    if argv_args.context is not None:
        context = Path(argv_args.context).read_text(encoding="utf-8")
    log = load_log(argv_args.log, context)
    modes = run_modes(argv_args.modes)
    floor = stream_floor(log, argv_args.rate) * argv_args.time_scale * len(modes)
    if floor >= ANNOUNCE_AFTER_S:   # a long wait is said before it starts, with the way to shorten it
        print(f"spectool replay: {len(log.turns)} turns in {len(modes)} modes; streaming alone takes "
              f"{floor:.1f} s at --time-scale {argv_args.time_scale:g} (0.1 replays 10x faster)",
              file=sys.stderr, flush=True)
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
