"""What-if replay of a user's own agent log: would speculation help *this* agent?

``spectool replay LOG`` reads a conversation, streams each assistant turn's text at a
chosen token rate into a fresh :class:`~spectool.Runtime` per mode (``baseline``,
``lazy``, ``spec``; one runtime per mode for the whole conversation, so cells share a
namespace as they did), with **simulated** tools that sleep for the recorded latency
(or a latency model) and return placeholder answers. It reports per turn and in total:
wall time, a lower bound no schedule can beat, hits, wasted executions and whether the
turn's output is identical to the baseline's; and writes a table, JSON and a timeline
PNG.

Input formats (JSON or JSONL; detected from the content):

* **OpenAI chat completions**: a list of messages (JSON array, ``{"messages": [...]}``,
  or one message per JSONL line). Each ``assistant`` message is a turn: its
  ``content`` (a string or a list of text parts) with ```` ```repl ```` / ```` ```python ````
  cells, and/or ``tool_calls`` whose ``function.arguments`` JSON holds code (key
  ``code``, ``source``, ``cell`` or ``input``, else its only string value). ``tool``
  messages (results) are counted, not needed: cells are re-executed. The REPL's
  ``context`` is the log's top-level ``"context"`` (if any) else the first ``user``
  message's text.
* **spectool replay JSONL** (this project's own): one object per line; a line with
  ``"context"`` sets the context; every line with ``"text"`` is a turn::

      {"context": "..."}                                   (optional)
      {"text": "<assistant message>", "tokens_per_s": 60,   (tokens_per_s optional)
       "calls": [{"tool": "llm_query", "latency_s": 2.1},  (execution order; a batched
                 {"tool": "llm_batch", "latency_s": 14.0}]} call: one entry, its latency
                                                            applies to each element)

Tools in the replay (both RLM harness conventions): ``llm_query(prompt)`` (pure),
``llm_query_batched(prompts)`` and ``llm_batch(prompts, **kw)`` (batched forms of
``llm_query``: their elements are speculated one by one), ``FINAL(x)`` and
``FINAL_VAR(name)`` (never speculated, no effect), plus any ``extra_tools`` names as
pure tools of one argument. A sub-call answers ``"[answer <hash of prompt>]"`` (same in
every mode).

Latency of a call: the recorded latencies of the turn, matched to the *baseline* run's
calls in execution order per tool (a batched call's latency to each of its elements);
calls beyond the record, and logs without latencies, take the latency model
``latency_s + latency_per_ktok * prompt_tokens / 1000`` (4 characters a token). Every mode
sees the same latency for the same call (looked up by tool, arguments and occurrence).

Lower bound (per turn): ``max(T_stream, max_c (t_site(c) + L_c))`` where ``t_site`` is
when the first line of the turn's text naming the call's tool had streamed (0 when the
call comes from a helper defined in an earlier turn): every call starts at the
earliest moment any runtime could know it, ignoring dependencies; no mode can beat it.

Times are log seconds: wall seconds / ``time_scale`` (everything, stream and tools,
runs ``time_scale`` times faster than recorded).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from .runtime import Runtime
from .tools import tool

__all__ = ["ReplayTurn", "ReplayLog", "load_log", "parse_log", "replay", "format_table",
           "write_outputs", "ReplayError", "MODES"]

MODES = ("baseline", "lazy", "spec")
CHARS_PER_TOKEN = 4
_CODE_KEYS = ("code", "source", "cell", "input")
BATCHED = ("llm_query_batched", "llm_batch")


class ReplayError(ValueError):
    """The log cannot be replayed (the message names the problem)."""


@dataclass
class ReplayTurn:
    text: str
    latencies: dict[str, list[float]] = field(default_factory=dict)  # tool -> in order
    tokens_per_s: float | None = None


@dataclass
class ReplayLog:
    turns: list[ReplayTurn]
    context: str = ""
    format: str = "openai"
    tool_results: int = 0


# -- reading logs -------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    raise ReplayError(f"message content must be a string or a list of parts, "
                      f"not {type(content).__name__}")


def _code_of_tool_call(call: Any, where: str) -> str | None:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict):
        raise ReplayError(f"{where}: a tool call without a 'function' object")
    raw = fn.get("arguments", "")
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as exc:
        raise ReplayError(f"{where}: tool call arguments are not JSON ({exc.msg})") from None
    if isinstance(args, str):
        return args
    if not isinstance(args, dict):
        return None
    for key in _CODE_KEYS:
        if isinstance(args.get(key), str):
            return args[key]
    strings = [v for v in args.values() if isinstance(v, str)]
    return strings[0] if len(strings) == 1 else None


def _fence(code: str) -> str:
    ticks = "`" * max(3, max((len(m) for m in re.findall(r"`+", code)), default=0) + 1)
    return f"\n{ticks}python\n{code.rstrip()}\n{ticks}\n"


def _from_openai(messages: list, context: str | None) -> ReplayLog:
    turns: list[ReplayTurn] = []
    results = 0
    first_user = None
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise ReplayError(f"message {i}: not an object with a 'role'")
        role = m["role"]
        if role == "user" and first_user is None:
            first_user = _text_of(m.get("content"))
        elif role == "tool":
            results += 1
        elif role == "assistant":
            text = _text_of(m.get("content"))
            for call in m.get("tool_calls") or []:
                code = _code_of_tool_call(call, f"message {i}")
                if code:
                    text += _fence(code)
            turns.append(ReplayTurn(text))
    if not turns:
        raise ReplayError("the log has no assistant messages to replay")
    return ReplayLog(turns, context if context is not None else (first_user or ""),
                     "openai", results)


def _from_own(rows: list[dict]) -> ReplayLog:
    turns: list[ReplayTurn] = []
    context = ""
    for i, row in enumerate(rows):
        if "context" in row:
            if not isinstance(row["context"], str):
                raise ReplayError(f"line {i + 1}: 'context' must be a string")
            context = row["context"]
        if "text" not in row:
            continue
        if not isinstance(row["text"], str):
            raise ReplayError(f"line {i + 1}: 'text' must be a string")
        lat: dict[str, list[float]] = {}
        for call in row.get("calls", []):
            try:
                name, value = call["tool"], float(call["latency_s"])
            except (KeyError, TypeError, ValueError):
                raise ReplayError(f"line {i + 1}: each call needs 'tool' and a numeric "
                                  f"'latency_s'") from None
            if value < 0:
                raise ReplayError(f"line {i + 1}: latency_s must be >= 0")
            lat.setdefault(name, []).append(value)
        rate = row.get("tokens_per_s")
        if rate is not None and not (isinstance(rate, (int, float)) and rate > 0):
            raise ReplayError(f"line {i + 1}: tokens_per_s must be a number > 0")
        turns.append(ReplayTurn(row["text"], lat, rate))
    if not turns:
        raise ReplayError("the log has no lines with 'text' to replay")
    return ReplayLog(turns, context, "spectool", 0)


def parse_log(raw: str, context: str | None = None) -> ReplayLog:
    """Parse a log's text (see the module docstring for the formats)."""
    raw = raw.strip()
    if not raw:
        raise ReplayError("the log is empty")
    try:
        data: Any = json.loads(raw)
        rows = None
    except json.JSONDecodeError:
        rows = []
        for n, line in enumerate(raw.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ReplayError(f"line {n}: not JSON ({exc.msg})") from None
        data = rows
    if isinstance(data, dict):
        if isinstance(data.get("messages"), list):
            return _from_openai(data["messages"], context if context is not None
                                else data.get("context"))
        data = [data]
    if not isinstance(data, list) or not all(isinstance(x, dict) for x in data):
        raise ReplayError("expected a JSON array of messages, {'messages': [...]}, or JSONL "
                          "objects")
    if all(isinstance(x.get("messages"), list) for x in data):   # JSONL of conversations
        return _from_openai([m for x in data for m in x["messages"]], context)
    if any("role" in x for x in data):
        return _from_openai(data, context)
    log = _from_own(data)
    if context is not None:
        log.context = context
    return log


def load_log(path: str | Path, context: str | None = None) -> ReplayLog:
    p = Path(path)
    if not p.is_file():
        raise ReplayError(f"no such log file: {p}")
    return parse_log(p.read_text(encoding="utf-8"), context)


# -- simulated tools --------------------------------------------------------------------------


def _answer(prompt: Any) -> str:
    return "[answer " + hashlib.sha256(repr(prompt).encode()).hexdigest()[:8] + "]"


class _Latencies:
    """Latency per call, fixed by the baseline run's order, the same in every mode."""

    def __init__(self, turn: ReplayTurn, default: float, per_ktok: float = 0.0) -> None:
        self.recorded = {k: list(v) for k, v in turn.latencies.items()}
        self.default = default
        self.per_ktok = per_ktok
        self.assigned: dict[tuple[str, str, int], float] = {}
        self.seen: dict[tuple[str, str], int] = {}
        self.baseline = True

    def take(self, tool_name: str, key: str, count_as: str | None = None) -> float:
        occ = self.seen.get((tool_name, key), 0)
        self.seen[(tool_name, key)] = occ + 1
        k = (tool_name, key, occ)
        if k not in self.assigned:
            queue = self.recorded.get(count_as or tool_name) if self.baseline else None
            # the latency model: a base plus a cost per 1000 prompt tokens (4 chars each)
            model = self.default + self.per_ktok * len(key) / (CHARS_PER_TOKEN * 1000)
            self.assigned[k] = queue.pop(0) if queue else model
        return self.assigned[k]

    def new_mode(self) -> None:
        self.baseline = False
        self.seen = {}


class _Recorder:
    def __init__(self, time_scale: float) -> None:
        self.time_scale = time_scale
        self.latencies: _Latencies | None = None
        self.spans: list[tuple[str, float, float]] = []   # (tool, start, end) wall clock
        self.calls = 0

    async def sleep_for(self, tool_name: str, key: str, count_as: str | None = None) -> None:
        assert self.latencies is not None
        latency = self.latencies.take(tool_name, key, count_as)
        self.calls += 1
        t0 = time.perf_counter()
        try:
            await anyio.sleep(latency * self.time_scale)
        finally:
            self.spans.append((tool_name, t0, time.perf_counter()))


def _tools(rec: _Recorder, extra: tuple[str, ...]) -> list[Any]:
    @tool(speculate="pure", name="llm_query")
    async def llm_query(prompt: str, **kw: Any) -> str:   # kw: llm_batch(prompts, **kw)
        await rec.sleep_for("llm_query", repr(prompt))
        return _answer(prompt)

    def batched(name: str):
        async def run(prompts: list[str], **kw: Any) -> list[str]:
            async def one(p: str) -> None:
                await rec.sleep_for("llm_query", repr(p), count_as=name)
            async with anyio.create_task_group() as tg:
                for p in prompts:
                    tg.start_soon(one, p)
            return [_answer(p) for p in prompts]
        run.__name__ = name
        return tool(speculate="pure", name=name, batched_of="llm_query")(run)

    @tool(name="FINAL")
    def final(answer: Any = None) -> None:
        return None

    @tool(name="FINAL_VAR")
    def final_var(name: Any = None) -> None:
        return None

    out = [llm_query, batched("llm_query_batched"), batched("llm_batch"), final, final_var]
    for name in extra:
        def make(n: str):
            async def fn(arg: Any = None) -> str:
                await rec.sleep_for(n, repr(arg))
                return _answer((n, arg))
            return tool(speculate="pure", name=n)(fn)
        out.append(make(name))
    return out


# -- replay -------------------------------------------------------------------------------------


async def _stream(text: str, rate: float, time_scale: float):
    t0 = time.perf_counter()
    for k, i in enumerate(range(0, len(text), CHARS_PER_TOKEN)):
        delay = t0 + k / rate * time_scale - time.perf_counter()
        if delay > 0:
            await anyio.sleep(delay)
        yield text[i:i + CHARS_PER_TOKEN]


def _plain(ns: dict) -> dict:
    out = {}
    for k, v in ns.items():
        if isinstance(v, (str, int, float, bool, type(None), list, tuple, dict)):
            out[k] = repr(v)
    return out


def _site_time(text: str, names: tuple[str, ...], rate: float) -> float:
    """Log seconds until the first line naming one of ``names`` had streamed (0 if none)."""
    best = None
    for name in names:
        m = re.search(rf"\b{re.escape(name)}\s*\(", text)
        if m:
            end = text.find("\n", m.end())
            end = len(text) if end < 0 else end
            best = end if best is None else min(best, end)
    return 0.0 if best is None else ((max(best, 1) - 1) // CHARS_PER_TOKEN) / rate


async def _warm_up(modes: tuple[str, ...], extra_tools: tuple[str, ...]) -> None:
    """One untimed tiny turn per mode, so first-use costs (imports, the shadow's
    start-up) do not land on whichever mode runs first."""
    warm = ReplayTurn("```repl\nw = llm_query('warm-up')\n```\n")
    for m in modes:
        rec = _Recorder(1.0)
        rec.latencies = _Latencies(warm, 0.0)
        async with Runtime(_tools(rec, extra_tools), mode=m) as rt:
            await rt.run(_stream(warm.text, 1e6, 1.0))


async def replay(log: ReplayLog, *, tokens_per_s: float = 50.0, latency_s: float = 2.0,
                 latency_per_ktok: float = 0.0, time_scale: float = 1.0,
                 modes: tuple[str, ...] = MODES,
                 extra_tools: tuple[str, ...] = ()) -> dict[str, Any]:
    """Replay every turn in every mode; the report (plain data, log seconds).
    Unrecorded calls take ``latency_s + latency_per_ktok * prompt_tokens / 1000``."""
    if tokens_per_s <= 0 or latency_s < 0 or latency_per_ktok < 0 or time_scale <= 0:
        raise ReplayError("need tokens_per_s > 0, latency_s >= 0, latency_per_ktok >= 0 "
                          "and time_scale > 0")
    if "baseline" not in modes:
        modes = ("baseline",) + tuple(modes)
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ReplayError(f"unknown mode(s) {bad}; choose from {MODES}")
    recs = {m: _Recorder(time_scale) for m in modes}
    runtimes = {m: Runtime(_tools(recs[m], extra_tools), mode=m,
                           namespace={"context": log.context,
                                      "answer": {"content": "", "ready": False}},
                           languages=("repl", "python", "py"))
                for m in modes}
    turns: list[dict[str, Any]] = []
    await _warm_up(modes, extra_tools)
    try:
        for index, turn in enumerate(log.turns):
            rate = turn.tokens_per_s or tokens_per_s
            lat = _Latencies(turn, latency_s, latency_per_ktok)
            row: dict[str, Any] = {"turn": index, "chars": len(turn.text), "modes": {}}
            base_out = None
            for m in modes:                      # baseline first: it fixes the latencies
                rec = recs[m]
                rec.latencies, rec.spans, rec.calls = lat, [], 0
                t0 = time.perf_counter()
                res = await runtimes[m].run(_stream(turn.text, rate, time_scale))
                wall = (time.perf_counter() - t0) / time_scale
                out = (res.stdout, None if res.error is None else repr(res.error),
                       _plain(res.namespace))
                if m == "baseline":
                    base_out = out
                    lat.new_mode()
                    base_calls = [(name, (e - s) / time_scale) for name, s, e in rec.spans]
                s = res.stats
                row["modes"][m] = {
                    "wall_s": wall, "t_stream_s": s.t_stream / time_scale,
                    "hits": s.hits, "misses": s.misses, "executions": s.executions,
                    "admission_declined": s.admission_declined,
                    "identical": out == base_out,
                    "error": out[1],
                    "spans": [(name, (a - t0) / time_scale, (b - t0) / time_scale)
                              for name, a, b in rec.spans],
                }
            base = row["modes"]["baseline"]
            for m in modes:
                row["modes"][m]["wasted"] = row["modes"][m]["executions"] - base["executions"]
                row["modes"][m]["speedup"] = (base["wall_s"] / row["modes"][m]["wall_s"]
                                              if row["modes"][m]["wall_s"] > 0 else None)
            bound = base["t_stream_s"]
            for name, took in base_calls:
                names = (name,) + (BATCHED if name == "llm_query" else ())
                bound = max(bound, _site_time(turn.text, names, rate) + took)
            row["bound_s"] = bound
            row["bound_speedup"] = base["wall_s"] / bound if bound > 0 else None
            turns.append(row)
    finally:
        for rt in runtimes.values():
            await rt.aclose()
    total: dict[str, Any] = {"modes": {}}
    for m in modes:
        ws = [t["modes"][m] for t in turns]
        total["modes"][m] = {
            "wall_s": sum(w["wall_s"] for w in ws), "hits": sum(w["hits"] for w in ws),
            "executions": sum(w["executions"] for w in ws),
            "wasted": sum(w["wasted"] for w in ws),
            "identical": all(w["identical"] for w in ws)}
    b = total["modes"]["baseline"]["wall_s"]
    for m in modes:
        w = total["modes"][m]["wall_s"]
        total["modes"][m]["speedup"] = b / w if w > 0 else None
    total["bound_s"] = sum(t["bound_s"] for t in turns)
    total["bound_speedup"] = b / total["bound_s"] if total["bound_s"] > 0 else None
    return {"simulated": "tools simulated (recorded or modelled latencies, placeholder "
                         "answers); the model's text streamed at the recorded/chosen rate",
            "format": log.format, "turns_replayed": len(turns),
            "tool_results_in_log": log.tool_results,
            "tokens_per_s": tokens_per_s, "latency_s": latency_s,
            "latency_per_ktok": latency_per_ktok, "time_scale": time_scale,
            "modes": list(modes), "turns": turns, "total": total}


# -- output ---------------------------------------------------------------------------------


def format_table(report: dict[str, Any]) -> str:
    modes = report["modes"]
    lines = [f"spectool replay ({report['format']} log, {report['turns_replayed']} turns; "
             f"SIMULATED tools: recorded or modelled latencies, placeholder answers; "
             f"{report['tokens_per_s']:g} tok/s unless the log says; times in log seconds)",
             "bound = no schedule can beat it (every call starts as soon as its first line "
             "streamed); wasted = executions beyond the baseline's; same = output identical "
             "to baseline"]
    head = f"{'turn':>4}" + "".join(f"{m:>10}" for m in modes) + f"{'bound':>8}" + "".join(
        f"{m + ' x':>9}" for m in modes[1:]) + f"{'bound x':>9}" + "".join(
        f"{'hits ' + m:>10}{'waste':>6}" for m in modes[1:]) + f"{'same':>6}"
    lines += [head, "-" * len(head)]

    def row(label: str, r: dict[str, Any], bound: float, bound_x: float | None,
            per: dict[str, Any]) -> str:
        text = f"{label:>4}" + "".join(f"{per[m]['wall_s']:>10.2f}" for m in modes)
        text += f"{bound:>8.2f}" + "".join(f"{per[m]['speedup'] or 0:>9.2f}" for m in modes[1:])
        text += f"{bound_x or 0:>9.2f}"
        text += "".join(f"{per[m]['hits']:>10}{per[m]['wasted']:>6}" for m in modes[1:])
        same = all(per[m]["identical"] for m in modes)
        return text + f"{'yes' if same else 'NO':>6}"

    for t in report["turns"]:
        lines.append(row(str(t["turn"]), t, t["bound_s"], t["bound_speedup"], t["modes"]))
    tot = report["total"]
    lines.append("-" * len(head))
    lines.append(row("all", tot, tot["bound_s"], tot["bound_speedup"], tot["modes"]))
    return "\n".join(lines)


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
    context = None
    if argv_args.context is not None:
        context = Path(argv_args.context).read_text(encoding="utf-8")
    log = load_log(argv_args.log, context)
    report = anyio.run(lambda: replay(
        log, tokens_per_s=argv_args.rate, latency_s=argv_args.latency,
        latency_per_ktok=argv_args.latency_per_ktok,
        time_scale=argv_args.time_scale, extra_tools=tuple(argv_args.tool or ())))
    print(format_table(report))
    if argv_args.out is not None:
        for p in write_outputs(report, argv_args.out):
            print(f"wrote {p}")
    return 0

