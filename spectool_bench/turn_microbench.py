"""Micro-benchmark of one spectool turn: tools that sleep for set latencies, a message
that streams at a set token rate; wall time of ``baseline``, ``lazy`` and ``spec``
and the oracle bound.

Oracle (same definition as ``spectool_bench.oracle``, without a shared server): call ``c``
is ready at ``max(t(o_c), finish of the calls its arguments use)``, where ``t(o_c)``
is the moment the message's first ``o_c`` characters had streamed (``o_c`` = end of
the call expression that determines its arguments); it then takes its latency. The
oracle turn time is ``max(T_stream, max_c finish_c)``: every call starts the instant
its arguments exist, nothing is wasted, executing Python takes no time.

Loaded-server scenarios (``server_alpha`` set): ``llm_query`` is served by a
**simulated** shared server (``spectool_bench.simulated.SimulatedServer``) whose latency
grows with the calls in flight (``1 + alpha * (n - 1)`` times the solo latency), so a
speculation nobody claims slows the calls the cell does need. ``exec`` columns count
tool executions actually started per mode; the baseline's count is what the cell needs.

Run: ``.venv/bin/python -m spectool_bench.turn_microbench [--rate 100] [--latency 0.5]``
(wall clock: about 40 s with the defaults; ``--quick`` scales everything by 1/4;
``--no-admission`` launches every bet, as before cost-aware admission existed).
Every number is measured with real sleeps on this machine; the model is simulated.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from dataclasses import dataclass, field

import anyio

import spectool

from .simulated import SimulatedServer

CHARS_PER_TOKEN = 4


@dataclass
class Call:
    src: str                  # the call expression as written (its end = the offset o_c)
    tool: str = "llm_query"
    deps: tuple[int, ...] = ()
    repeat: int = 1           # loop iterations that issue this call
    nth: int = 0              # which occurrence of ``src`` in the message


@dataclass
class Scenario:
    name: str
    message: str
    calls: list[Call]
    namespace: dict = field(default_factory=dict)
    server_alpha: float | None = None   # None: llm_query sleeps; else a loaded server


CONTEXT = "\n".join(f"record {i}: user{i % 3} wrote about topic {i % 4}" for i in range(8))


def _loop_over_lines(name: str, server_alpha: float | None = None) -> Scenario:
    """A loop with one call per line of ``CONTEXT`` (8 independent calls), then a count."""
    return Scenario(
        name,
        "Classify each record, then count.\n```repl\n"
        'lines = context.split("\\n")\n'
        "labels = []\n"
        "for line in lines:\n"
        '    labels.append(llm_query(f"classify: {line}"))\n'
        'print(sum(1 for x in labels if "topic" in x))\n```\n',
        [Call('llm_query(f"classify: {line}")', repeat=8)],
        {"context": CONTEXT}, server_alpha)


SCENARIOS = [
    Scenario(
        "independent x4",
        "I will summarise the four parts separately.\n```repl\n"
        'a = llm_query("summarise part 1 of the report")\n'
        'b = llm_query("summarise part 2 of the report")\n'
        'c = llm_query("summarise part 3 of the report")\n'
        'd = llm_query("summarise part 4 of the report")\n'
        "print(len(a + b + c + d))\n```\n",
        [Call('llm_query("summarise part 1 of the report")'),
         Call('llm_query("summarise part 2 of the report")'),
         Call('llm_query("summarise part 3 of the report")'),
         Call('llm_query("summarise part 4 of the report")')]),
    _loop_over_lines("loop over lines x8"),
    Scenario(
        "dependent chain x3",
        "Refine the answer step by step.\n```repl\n"
        'draft = llm_query("draft an answer")\n'
        'better = llm_query("improve: " + draft)\n'
        'final = llm_query("shorten: " + better)\n'
        "print(final[:40])\n```\n",
        [Call('llm_query("draft an answer")'),
         Call('llm_query("improve: " + draft)', deps=(0,)),
         Call('llm_query("shorten: " + better)', deps=(1,))]),
    Scenario(
        "helper + never-tool",
        "A helper, a logged checkpoint, two questions.\n```repl\n"
        "def ask(x):\n"
        '    return llm_query("question: " + x)\n'
        'r1 = ask("alpha")\n'
        'log("checkpoint")\n'
        'r2 = ask("beta")\n'
        "print(len(r1), len(r2))\n```\n",
        [Call('ask("alpha")'), Call('log("checkpoint")', tool="log"), Call('ask("beta")')]),
    # CPU-heavy user code: the shadow runs the helper too (until its limits), competing
    # with the real run for the interpreter; nothing to speculate before the results
    Scenario(
        "CPU-heavy helper + 2 calls",
        "Score the records with a helper, then ask twice.\n```repl\n"
        "def score(n):\n"
        "    t = 0\n"
        "    for k in range(n):\n"
        "        t += (k * k) % 7\n"
        "    return t\n"
        "s1 = score(400000)\n"
        'a = llm_query("summary " + str(s1))\n'
        "s2 = score(400000)\n"
        'b = llm_query("check " + str(s2))\n'
        "print(len(a + b))\n```\n",
        [Call('llm_query("summary " + str(s1))'), Call('llm_query("check " + str(s2))')]),
    # a chain whose argument is re-assigned later in the loop body: a peek at the next
    # iteration still sees the old binding and bets on a call nobody will make
    Scenario(
        "re-assigned chain x6, loaded",
        "Improve the note six times, each step building on the last.\n```repl\n"
        'note = "start"\n'
        "for step in range(6):\n"
        "    out = llm_query(note)\n"
        '    note = "improve: " + out[:24]\n'
        "print(note[:40])\n```\n",
        [Call("llm_query(note)", deps=(i - 1,) if i else ()) for i in range(6)],
        server_alpha=0.5),
    # the re-bound name is only part of the argument: the stale bet has a new key
    Scenario(
        "note + line x8, loaded",
        "Classify each record, carrying a note from the previous answer.\n```repl\n"
        'lines = context.split("\\n")\n'
        'note = ""\n'
        "labels = []\n"
        "for line in lines:\n"
        '    out = llm_query(note + "classify: " + line)\n'
        "    labels.append(out)\n"
        "    note = out[:16]\n"
        "print(len(labels))\n```\n",
        [Call('llm_query(note + "classify: " + line)', deps=(i - 1,) if i else ())
         for i in range(8)],
        {"context": CONTEXT}, server_alpha=0.5),
    _loop_over_lines("loop over lines x8, loaded", server_alpha=0.5),
]


def make_tools(latency: float, log_latency: float, server_alpha: float | None = None):
    server = (None if server_alpha is None else
              SimulatedServer(max_batch=64, alpha=server_alpha, time_scale=1.0))

    @spectool.tool(speculate="pure")
    async def llm_query(prompt: str) -> str:
        if server is None:
            await anyio.sleep(latency)
        else:
            await server.serve(latency)
        digest = hashlib.sha256(prompt.encode()).hexdigest()[:8]
        return f"answer {digest} to <{prompt[:30]}> about topic"

    @spectool.tool
    async def log(msg: str) -> None:
        await anyio.sleep(log_latency)

    return [llm_query, log]


async def token_stream(message: str, rate: float):
    """Deltas of CHARS_PER_TOKEN characters on an absolute schedule of ``rate`` tokens/s."""
    t0 = time.perf_counter()
    for k, i in enumerate(range(0, len(message), CHARS_PER_TOKEN)):
        delay = t0 + k / rate - time.perf_counter()
        if delay > 0:
            await anyio.sleep(delay)
        yield message[i:i + CHARS_PER_TOKEN]


def stream_time(message: str, rate: float, offset: int) -> float:
    """When the first ``offset`` characters have arrived (the token holding the last one)."""
    return ((max(offset, 1) - 1) // CHARS_PER_TOKEN) / rate


def oracle_time(sc: Scenario, rate: float, latency: float, log_latency: float) -> float:
    t_stream = stream_time(sc.message, rate, len(sc.message))
    finish: list[float] = []
    for call in sc.calls:
        start = -1
        for _ in range(call.nth + 1):
            start = sc.message.index(call.src, start + 1)
        known = stream_time(sc.message, rate, start + len(call.src))
        ready = max([known] + [finish[d] for d in call.deps])
        finish.append(ready + (latency if call.tool == "llm_query" else log_latency))
    return max([t_stream] + finish)


async def run_turn(sc: Scenario, mode: str, rate: float, latency: float, log_latency: float,
                   admission: bool = True):
    rt = spectool.Runtime(make_tools(latency, log_latency, sc.server_alpha), mode=mode,
                          namespace=dict(sc.namespace), admission=admission)
    t0 = time.perf_counter()
    res = await rt.run(token_stream(sc.message, rate))
    wall = time.perf_counter() - t0
    if res.error is not None:
        raise RuntimeError(f"{sc.name} [{mode}] failed: {res.error!r}")
    return wall, res


async def bench(rate: float, latency: float, log_latency: float, repeat: int,
                admission: bool = True, scenarios: list[Scenario] | None = None) -> list[dict]:
    rows = []
    modes = ("baseline", "lazy", "spec")
    for sc in SCENARIOS if scenarios is None else scenarios:
        walls: dict[str, list[float]] = {m: [] for m in modes}
        outputs, stats = {}, {}
        for r in range(repeat):
            for mode in modes[r % 3:] + modes[:r % 3]:   # rotate the order per repeat
                wall, res = await run_turn(sc, mode, rate, latency, log_latency, admission)
                walls[mode].append(wall)
                outputs[mode] = (res.stdout, {k: v for k, v in res.namespace.items()
                                              if not callable(v)})
                stats[mode] = res.stats
        if not (outputs["baseline"] == outputs["lazy"] == outputs["spec"]):
            raise AssertionError(f"{sc.name}: modes disagree: {outputs}")
        med = {m: statistics.median(v) for m, v in walls.items()}
        oracle = oracle_time(sc, rate, latency, log_latency)
        rows.append({
            "scenario": sc.name,
            "calls": sum(c.repeat for c in sc.calls),
            "t_stream": stats["spec"].t_stream,
            "baseline": med["baseline"], "lazy": med["lazy"], "spec": med["spec"],
            "oracle": oracle,
            "spec/baseline": med["spec"] / med["baseline"],
            "spec/lazy": med["spec"] / med["lazy"],
            "oracle/baseline": oracle / med["baseline"],
            "hits": stats["spec"].hits, "dispatched": stats["spec"].dispatched,
            "exec base": stats["baseline"].executions, "exec lazy": stats["lazy"].executions,
            "exec spec": stats["spec"].executions,
            "lazy speed": med["baseline"] / med["lazy"],
            "spec speed": med["baseline"] / med["spec"],
        })
    return rows


def format_table(rows: list[dict]) -> str:
    cols = ["scenario", "calls", "t_stream", "baseline", "lazy", "spec", "oracle",
            "spec/baseline", "spec/lazy", "oracle/baseline", "hits", "dispatched",
            "exec base", "exec lazy", "exec spec", "lazy speed", "spec speed"]
    cells = [[c for c in cols]]
    for r in rows:
        cells.append([f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c]) for c in cols])
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    lines = ["  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths)))
             for row in cells]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=100.0, help="model tokens per second")
    ap.add_argument("--latency", type=float, default=0.5, help="llm_query latency (s)")
    ap.add_argument("--log-latency", type=float, default=0.2, help="never-tool latency (s)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per mode (median)")
    ap.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    ap.add_argument("--quick", action="store_true", help="4x faster rate, 4x shorter latencies")
    ap.add_argument("--no-admission", action="store_true",
                    help="launch every bet (no cost-aware admission), for comparison")
    args = ap.parse_args(argv)
    rate, lat, log_lat = args.rate, args.latency, args.log_latency
    if args.quick:
        rate, lat, log_lat = rate * 4, lat / 4, log_lat / 4
    rows = anyio.run(bench, rate, lat, log_lat, args.repeat, not args.no_admission,
                     backend=args.backend)
    print(f"spectool turn micro-benchmark (simulated model at {rate:g} tok/s, "
          f"{CHARS_PER_TOKEN} chars/token; llm_query {lat:g} s, log {log_lat:g} s; "
          f"'loaded': a simulated server, latency x (1 + 0.5 (n - 1)) with n calls in flight; "
          f"backend {args.backend}; wall seconds, median of {args.repeat}; admission "
          f"{'off' if args.no_admission else 'on'}; speed = baseline / mode)")
    print(format_table(rows))


if __name__ == "__main__":
    main()
