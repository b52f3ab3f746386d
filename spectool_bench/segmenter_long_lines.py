"""Segmenter cost on one very long line and on long cells.

Feeds each shape in 16-character deltas at growing lengths and reports characters per
second (CPU time of this process) and the segmenter's own work counter
(``Segmenter.scanned``: characters copied, lexed, parsed or searched) per input
character. Linear cost shows as flat work per character. ``--compare`` runs, in the
same process and interleaved, the pre-fix behaviour (every tail change reported in
full, string literals re-searched after every backslash) for contrast.

    python -m spectool_bench.segmenter_long_lines [--compare] [--max 640000]

Note: the chars/s column includes CPython's ``compile`` of each closed statement
(the one parse the segmenter does); the work column counts it once per statement.
"""

from __future__ import annotations

import argparse
import contextlib
import time

import spectool.stream.segmenter as segmenter
from spectool.stream.segmenter import LineLexer, Segmenter

SHAPES = {
    "one line of calls": lambda n: "```repl\nx = [" + "f(1), " * (n // 6) + "]\n```\n",
    "one escaped string": lambda n: "```repl\nx = '" + "\\n" * (n // 2) + "'\n```\n",
    "one long block": lambda n: "```repl\ndef g():\n" + "    y = f(1)\n" * (n // 13) + "```\n",
    "many statements": lambda n: "```repl\n" + "x = f(1, 'abc')\n" * (n // 16) + "```\n",
}


def naive_skip_string(self, line, pos):
    """The pre-fix string scan: the closing quote searched again after each backslash."""
    quote, n = self.quote, len(line)
    while pos < n:
        i = line.find(quote, pos)
        self.scanned += (n if i == -1 else i) - pos
        b = line.find("\\", pos)
        if b != -1 and (i == -1 or b < i):
            if b + 1 >= n:
                self.continued = True
                return n
            pos = b + 2
            continue
        if i == -1:
            return n
        self.quote = None
        return i + len(quote)
    return n


@contextlib.contextmanager
def prefix_behaviour():
    eager, skip = segmenter.TAIL_EAGER_CHARS, LineLexer._skip_string
    segmenter.TAIL_EAGER_CHARS = 10 ** 12
    LineLexer._skip_string = naive_skip_string
    try:
        yield
    finally:
        segmenter.TAIL_EAGER_CHARS, LineLexer._skip_string = eager, skip


def measure(text: str, step: int = 16) -> tuple[float, float]:
    """(chars per CPU second, work per char). No statement-length bounds: every long
    line here is parsed, as the measurement is of the segmenter's own scaling."""
    seg = Segmenter(max_statement_chars=1 << 62, max_parsed_chars=1 << 62,
                    max_parsed_statements=1 << 62)
    t0 = time.process_time()
    for i in range(0, len(text), step):
        seg.feed(text[i:i + step])
    seg.close()
    dt = max(time.process_time() - t0, 1e-9)
    return len(text) / dt, seg.scanned / len(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", action="store_true", help="also run the pre-fix behaviour")
    ap.add_argument("--max", type=int, default=640_000, help="largest length in characters")
    args = ap.parse_args()
    sizes = [n for n in (10_000, 40_000, 160_000, 640_000, 2_560_000) if n <= args.max]
    print("segmenter cost at growing lengths (16-character deltas, CPU time)")
    head = f"{'shape':20} {'chars':>9} {'chars/s':>12} {'work/char':>10}"
    if args.compare:
        head += f" {'pre-fix chars/s':>16} {'pre-fix work/char':>18}"
    print(head)
    print("-" * len(head))
    for name, shape in SHAPES.items():
        for n in sizes:
            text = shape(n)
            rate, work = measure(text)
            row = f"{name:20} {len(text):>9} {rate:>12.0f} {work:>10.2f}"
            if args.compare:
                if n > 160_000:
                    row += f" {'(skipped)':>16} {'':>18}"
                else:
                    with prefix_behaviour():
                        old_rate, old_work = measure(text)
                    row += f" {old_rate:>16.0f} {old_work:>18.2f}"
            print(row, flush=True)


if __name__ == "__main__":
    main()
