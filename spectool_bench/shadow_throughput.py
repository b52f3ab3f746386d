"""Throughput of the pure stages: segmenter + shadow interpreter (+ tail peeking).

A realistic RLM-style cell (helpers defined in the cell and called in loops over
``context`` lines, f-strings, dict counting, progress prints, chained ``llm_query``)
is fed as fast as possible in 4-character deltas (about one token each). Every closed
statement is run by the shadow (launched calls are answered at once by an in-memory
host) and every tail change is peeked. Reports characters per second for cells of
about 1k, 10k (the 10,000-token cell is ~40k characters) and 100k characters; linear
cost shows as a flat chars/s column.

    python -m spectool_bench.shadow_throughput [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import time

from spectool.stream.segmenter import Segmenter, StatementClosed, TailChanged
from spectool.shadow import Launch, Outcome, ShadowInterpreter, ToolInfo, until_wait

TOOLS = {"llm_query": ToolInfo("llm_query", "pure"),
         "llm_query_batched": ToolInfo("llm_query_batched", "pure", batched_of="llm_query")}

BLOCK = '''# Step {k}: label the lines of part {k}
def classify_{k}(chunk):
    prompt = f"Classify each line into one of {{labels}}. Lines:\\n{{chunk}}"
    answer = llm_query(prompt)
    return answer.strip()

part_{k} = lines[{a}:{b}]
results_{k} = []
for i in range(0, len(part_{k}), 5):
    piece = "\\n".join(part_{k}[i:i + 5])
    results_{k}.append(classify_{k}(piece))
    print(f"part {k} chunk {{i}}: {{results_{k}[-1][:30]}}")
counts_{k} = {{}}
for r in results_{k}:
    for label in r.split(","):
        label = label.strip().lower()
        counts_{k}[label] = counts_{k}.get(label, 0) + 1
top_{k} = sorted(counts_{k}.items(), key=lambda kv: -kv[1])[:3]
summary_{k} = llm_query(f"Part {k}: the most common labels are {{top_{k}}}. Summarise.")
'''


def make_cell(target_chars: int) -> str:
    out = ['labels = ["abbreviation", "entity", "description", "human", "location", "numeric"]\n',
           'lines = context.split("\\n")\n']
    k = 0
    while sum(map(len, out)) < target_chars:
        out.append(BLOCK.format(k=k, a=(k * 10) % 200, b=(k * 10) % 200 + 10))
        k += 1
    text = "".join(out)
    return "```repl\n" + text + "```\n"


class InstantHost:
    """Answers each launch event with a handle and each wait at once. It has no
    ``observe`` or ``lookahead``, so the interpreter it is given to emits launches and
    waits only (``ShadowInterpreter``'s host argument)."""

    def __init__(self) -> None:
        self.launched = 0

    def answer(self, event: Launch) -> int:
        self.launched += 1
        return self.launched

    def outcome(self, handle) -> Outcome:
        return Outcome(value="numeric, entity, human")


def run_once(message: str, context: str, peek: bool = True) -> tuple[float, dict]:
    host = InstantHost()
    # no statement-length bounds: the cells of every size are shadowed whole (the
    # runtime's segmenter stops parsing past 64 KB of statements in one message)
    seg = Segmenter(max_statement_chars=1 << 62, max_parsed_chars=1 << 62,
                    max_parsed_statements=1 << 62)
    interp = ShadowInterpreter({"context": context}, TOOLS, host)
    stats = {"statements": 0, "tails": 0, "bets": 0}
    t0 = time.perf_counter()
    c0 = time.process_time()
    step = 4
    for i in range(0, len(message), step):
        for event in seg.feed(message[i:i + step]):
            if isinstance(event, StatementClosed):
                stats["statements"] += 1
                gen = interp.events(event.source, event.tree)
                wait = until_wait(gen, None, host.answer)
                while wait is not None:
                    wait = until_wait(gen, host.outcome(wait.handle), host.answer)
            elif isinstance(event, TailChanged) and peek:
                stats["tails"] += 1
                stats["bets"] += len(interp.peek_tail(event.tail))
    seg.close()
    elapsed = time.perf_counter() - t0
    stats["cpu"] = time.process_time() - c0
    stats["launched"] = host.launched
    stats["declined"] = sum(r.status != "ok" for r in interp.records)
    return elapsed, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    context = "\n".join(f"Date: Jan {i % 28 + 1:02d}, 2023 || User: {10000 + i % 97} || "
                        f"Instance: what is the capital of country number {i}?" for i in range(400))
    print("segmenter + shadow throughput (4-character deltas, every statement run, every tail peeked)")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs "
          "(wall time suffers when the machine is shared; CPU time is this process's own)")
    print(f"{'cell chars':>10} {'~tokens':>8} {'stmts':>6} {'tails':>6} {'bets':>6} {'launched':>8} "
          f"{'declined':>8} {'wall s':>7} {'wall chars/s':>12} {'CPU chars/s':>12} {'CPU, no peek':>14}")
    for target in (1_000, 10_000, 40_000, 100_000):
        message = make_cell(target)
        runs = [run_once(message, context) for _ in range(args.repeat)]
        elapsed, stats = min(runs, key=lambda r: r[0])
        cpu = min(r[1]["cpu"] for r in runs)
        no_peek = min(run_once(message, context, peek=False)[1]["cpu"] for _ in range(args.repeat))
        print(f"{len(message):>10} {len(message) // 4:>8} {stats['statements']:>6} {stats['tails']:>6} "
              f"{stats['bets']:>6} {stats['launched']:>8} {stats['declined']:>8} {elapsed:>7.3f} "
              f"{len(message) / elapsed:>12.0f} {len(message) / cpu:>12.0f} {len(message) / no_peek:>14.0f}")


if __name__ == "__main__":
    main()
