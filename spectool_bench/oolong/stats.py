"""Window statistics of the generator next to the official construction's.

``python -m spectool_bench.oolong.stats [--windows N]`` prints the README table.

Generator side: ``generate_window`` over seeds ``0..N-1``. Official side: a separate,
direct simulation of the official formulas (``datasets_loader.get_examples_in_context``
for N; FACTS.md §4 for labels ``softmax(randint(1, 30) ** (1/T))``, ``T ~ randint(2, 6)``,
and users: 10% of N common ids taken with probability 0.8, else fresh ids), written
here without the generator's helpers. Questions per window: the official subsample
keeps the first 25 (``subsample.py``). Family (task-type) mix: no official generator
run is available offline, so the official side is the pooled public per-type counts of
released trec_coarse questions (300 questions: 50 of the 131K split — MOST_FREQ 5,
LEAST_FREQ 4, RELATIVE_FREQ 29, NUMERIC_ONE_CLASS 12 — and 250 of a published GPT-5
run — 25, 16, 140, 65, SECOND_MOST_FREQ 4); their own sampling error is about
±1.5-3 points per type (binomial, n = 300).
"""

from __future__ import annotations

import argparse
import math
import random
from collections import Counter

from .generator import generate_window
from .specs import SPECS


MIX_TYPES = {"relative": "TASK_TYPE.RELATIVE_FREQ", "numeric": "TASK_TYPE.NUMERIC_ONE_CLASS",
             "most": "TASK_TYPE.MOST_FREQ", "least": "TASK_TYPE.LEAST_FREQ"}
PUBLIC_MIX = {"relative": 169 / 300, "numeric": 77 / 300, "most": 30 / 300, "least": 20 / 300}


def _official_window(dataset: str, L: int, rng: random.Random) -> dict:
    s = SPECS[dataset]
    n = int((L * 0.95 - s.prompt_tokens - 250) // s.per_example_tokens)
    k = {"trec_coarse": 6, "yahoo": 10, "agnews": 4, "multinli": 3}.get(dataset, 2)
    t = rng.randint(2, 6)
    w = [rng.randint(1, 30) ** (1 / t) for _ in range(k)]
    z = sum(math.exp(x) for x in w)
    counts = [round(math.exp(x) / z * n) for x in w]
    counts[0] += n - sum(counts)
    commons = list(range(max(1, int(0.1 * n))))
    users = Counter(rng.choice(commons) if rng.random() < 0.8 else -1 - i for i in range(n))
    top = users.most_common(2)
    return {"lines": n, "top_user": top[0][1] / n, "tie": float(len(top) > 1 and top[0][1] == top[1][1]),
            "label_skew": max(counts) / n, "questions": 25.0, **PUBLIC_MIX}


def _generated_window(dataset: str, L: int, seed: int) -> dict:
    w = generate_window(dataset, L, seed)
    n = len(w.instances)
    top = Counter(i.user for i in w.instances).most_common(2)
    labels = Counter(i.label for i in w.instances)
    return {"lines": n, "top_user": top[0][1] / n,
            "tie": float(len(top) > 1 and top[0][1] == top[1][1]),
            "label_skew": max(labels.values()) / n, "questions": float(len(w.questions)),
            **{k: sum(q.task_type == t for q in w.questions) / len(w.questions)
               for k, t in MIX_TYPES.items()}}


def compare(dataset: str, L: int, windows: int) -> tuple[dict, dict]:
    """Mean statistics ``(generator, official)`` over ``windows`` windows each."""
    rng = random.Random(f"official:{dataset}:{L}")
    gen = [_generated_window(dataset, L, s) for s in range(windows)]
    off = [_official_window(dataset, L, rng) for _ in range(windows)]

    def mean(rows):
        return {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
    return mean(gen), mean(off)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--windows", type=int, default=400)
    ap.add_argument("--dataset", default="trec_coarse", choices=sorted(SPECS))
    args = ap.parse_args(argv)
    keys = ("lines", "top_user", "tie", "label_skew", "questions", "relative", "numeric", "most",
            "least")
    print("| size | side | lines | top-user share | top-2 tie rate | top-label share | "
          "questions/window | RELATIVE_FREQ | NUMERIC_ONE_CLASS | MOST_FREQ | LEAST_FREQ |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for L in (8192, 32768, 131072):
        gen, off = compare(args.dataset, L, args.windows if L < 131072 else args.windows // 4)
        for side, row in (("generator", gen), ("official", off)):
            cells = [f"{row[k]:.1f}" if k in ("lines", "questions") else f"{row[k]:.3f}"
                     for k in keys]
            print(f"| {L // 1024}K | {side} | " + " | ".join(cells) + " |")
        gaps = " | ".join(f"{abs(gen[k] - off[k]) / off[k]:.0%}" for k in keys)
        print(f"| {L // 1024}K | relative gap | {gaps} |")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
