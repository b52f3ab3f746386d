"""Window statistics of the generator next to the official construction's.

``python -m spectool_bench.oolong.stats [--windows N]`` prints the two tables of docs/oolong.md.

**Windows** (8K / 32K / 128K). Generator side: ``generate_window`` over seeds
``0..N-1`` (N/4 at 128K). Official side: a separate, direct simulation of the official
formulas (``datasets_loader.get_examples_in_context`` for N; FACTS.md §4 for labels
``softmax(randint(1, 30) ** (1/T))``, ``T ~ randint(2, 6)``, and users: 10% of N common
ids taken with probability 0.8, else fresh ids), written here without the generator's
helpers. "kept" is the share of windows the official subsample keeps (``subsample.py``
skips a window with fewer than 25 questions); questions per window count kept windows.

**Task-type mix** (share of the kept questions). No official generator run is available
offline; the public figures are per-type counts of released trec_coarse questions, and
they pool context lengths: the validation split holds 50 trec_coarse questions per
length (two windows x 25, ``subsample.py``; 1,300 rows = trec_coarse and spam x 13
lengths 1K..4M x 50), so the 300 public questions (50 of the 131K split, 250 of a
published GPT-5 run whose lengths are not stated) span at least six lengths. Like is
compared with like: the 131K public counts with the generator at 128K, and the pooled
public counts with the generator pooled over the release's 13 lengths 1K..4M, each
length weighted equally as the release weights them (and, for reference, over 1K..128K).
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
# public per-type counts (the rest of the 300 are 4 SECOND_MOST_FREQ)
PUBLIC_131K = {"relative": 29, "numeric": 12, "most": 5, "least": 4}  # of 50 (2 windows)
PUBLIC_POOLED = {"relative": 169, "numeric": 77, "most": 30, "least": 20}  # of 300
PUBLIC_250 = {k: PUBLIC_POOLED[k] - PUBLIC_131K[k] for k in PUBLIC_POOLED}  # the GPT-5 run
# spam, validation split, the first three parquet shards (lengths not stated): a public
# replication's per-type totals over its 558 questions (trec_coarse 250 + spam 308;
# Cornjebus/rlm-replication-study README.md) minus its 250 trec_coarse questions (the
# GPT-5 run above, GPT5_BENCHMARK_REPORT.md); the rest of the 308 are 7 SECOND_MOST_FREQ
# and 12 REPRESENTED_N_TIMES
PUBLIC_SPAM = {"relative": 228 - 140, "numeric": 138 - 65, "most": 107 - 25, "least": 62 - 16}  # of 308
WINDOW_SIZES = (8192, 32768, 131072)
MIX_SIZES = tuple(1024 * 2**k for k in range(13))  # 1K .. 4M, the release's lengths


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
            "label_skew": max(counts) / n}


def _generated(dataset: str, L: int, windows: int) -> tuple[dict, Counter, int]:
    """Mean window statistics, task-type counts over kept questions, kept question total."""
    rows, types, total = [], Counter(), 0
    for seed in range(windows):
        w = generate_window(dataset, L, seed)
        n = len(w.instances)
        top = Counter(i.user for i in w.instances).most_common(2)
        labels = Counter(i.label for i in w.instances)
        rows.append({"lines": n, "top_user": top[0][1] / n,
                     "tie": float(len(top) > 1 and top[0][1] == top[1][1]),
                     "label_skew": max(labels.values()) / n, "kept": float(not w.dropped)})
        types.update(q.task_type for q in w.questions)
        total += len(w.questions)
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
    kept = sum(r["kept"] for r in rows)
    mean["questions"] = total / kept if kept else 0.0
    return mean, types, total


def _windows_for(L: int, windows: int) -> int:
    """Fewer windows at the long lengths (generation time grows with N: a 4M window
    holds about 102,000 lines and takes about 1.6 s)."""
    div = (40 if L >= 1 << 20 else 20 if L >= 1 << 18 else 4 if L >= 1 << 17
           else 2 if L >= 1 << 16 else 1)
    return max(8, windows // div)


def _share(types: Counter, total: int) -> dict:
    return {k: types[t] / total if total else 0.0 for k, t in MIX_TYPES.items()}


def _size(L: int) -> str:
    return f"{L >> 20}M" if L >= 1 << 20 else f"{L >> 10}K"


def _gap(a: float, b: float) -> str:
    return f"{abs(a - b) / b:.1%}" if b else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--windows", type=int, default=400,
                    help="windows per length up to 32K (half at 64K, a quarter at 128K)")
    ap.add_argument("--dataset", default="trec_coarse", choices=sorted(SPECS))
    ap.add_argument("--max-length", type=int, default=MIX_SIZES[-1],
                    help="longest context length of the task-type mix (default 4M)")
    args = ap.parse_args(argv)
    if args.windows < 1:
        ap.error("--windows must be >= 1")
    if args.max_length < WINDOW_SIZES[-1]:
        ap.error(f"--max-length must be >= {WINDOW_SIZES[-1]}")
    gen: dict[int, tuple[dict, Counter, int]] = {}
    mix_sizes = [L for L in MIX_SIZES if L <= args.max_length]
    for L in sorted(set(mix_sizes) | set(WINDOW_SIZES)):
        try:
            gen[L] = _generated(args.dataset, L, _windows_for(L, args.windows))
        except ValueError:  # a length too short for this dataset
            continue
    keys = ("lines", "top_user", "tie", "label_skew", "kept", "questions")
    print("| size | side | lines | top-user share | top-2 tie rate | top-label share | "
          "windows kept | questions/kept window |")
    print("|---|---|---|---|---|---|---|---|")
    for L in WINDOW_SIZES:
        g = gen[L][0]
        rng = random.Random(f"official:{args.dataset}:{L}")
        sim = [_official_window(args.dataset, L, rng) for _ in range(_windows_for(L, args.windows))]
        off = {k: sum(r[k] for r in sim) / len(sim) for k in sim[0]}
        off.update(kept=None, questions=25.0)
        for side, row in (("generator", g), ("official", off)):
            cells = ["-" if row[k] is None else f"{row[k]:.1f}" if k in ("lines", "questions")
                     else f"{row[k]:.3f}" for k in keys]
            print(f"| {L // 1024}K | {side} | " + " | ".join(cells) + " |")
        print(f"| {L // 1024}K | relative gap | "
              + " | ".join("-" if off[k] is None else _gap(g[k], off[k]) for k in keys) + " |")
    print()
    print("| task-type mix | questions | RELATIVE_FREQ | NUMERIC_ONE_CLASS | MOST_FREQ | "
          "LEAST_FREQ |")
    print("|---|---|---|---|---|---|")
    shares = {}
    for L in mix_sizes:
        if L in gen:
            _, types, total = gen[L]
            shares[L] = _share(types, total)
            print(f"| generator {_size(L)} | {total} | "
                  + " | ".join(f"{shares[L][k]:.3f}" for k in MIX_TYPES) + " |")

    def pooled_over(sizes) -> dict:
        """Equal weight per length, as the release holds 50 questions per length."""
        return {k: sum(shares[L][k] for L in sizes) / len(sizes) for k in MIX_TYPES}

    sizes = sorted(shares)
    short = [L for L in sizes if L <= 131072]
    pools = [short, sizes] if len(short) < len(sizes) else [sizes]
    if args.dataset == "spam":
        return _compare_public(pools, pooled_over, "public spam, validation shards 1-3 (derived)", 308, PUBLIC_SPAM)
    if args.dataset != "trec_coarse":
        for pool in pools:
            share = pooled_over(pool)
            print(f"| generator pooled {_size(pool[0])}..{_size(pool[-1])} (equal weight) | - | "
                  + " | ".join(f"{share[k]:.3f}" for k in MIX_TYPES) + " |")
        print(f"\n(no public per-type counts known for {args.dataset})")
        return 0
    p131 = {k: v / 50 for k, v in PUBLIC_131K.items()}
    p300 = {k: v / 300 for k, v in PUBLIC_POOLED.items()}
    rows = [
        *((f"generator pooled {_size(pool[0])}..{_size(pool[-1])} (equal weight)", "-",
           pooled_over(pool)) for pool in pools),
        ("public 131K (2 windows)", "50", p131),
        ("public GPT-5 run (lengths not stated)", "250",
         {k: v / 250 for k, v in PUBLIC_250.items()}),
        ("public pooled (>= 6 lengths)", "300", p300),
    ]
    for name, n, share in rows:
        print(f"| {name} | {n} | " + " | ".join(f"{share[k]:.3f}" for k in MIX_TYPES) + " |")
    se = {k: math.sqrt(p300[k] * (1 - p300[k]) / 300) for k in MIX_TYPES}
    print("| public pooled, 1 standard error | | "
          + " | ".join(f"±{se[k]:.3f}" for k in MIX_TYPES) + " |")
    if 131072 in shares:
        print("| gap: generator 128K vs public 131K | | "
              + " | ".join(_gap(shares[131072][k], p131[k]) for k in MIX_TYPES) + " |")
    for pool in pools:
        share = pooled_over(pool)
        print(f"| gap: generator pooled {_size(pool[0])}..{_size(pool[-1])} vs public "
              "pooled | | " + " | ".join(_gap(share[k], p300[k]) for k in MIX_TYPES) + " |")
    return 0


def _compare_public(pools, pooled_over, name: str, n: int, counts: dict) -> int:
    """Rows: the generator pooled, one public sample of ``n`` questions, its standard
    error, and the relative gaps."""
    public = {k: v / n for k, v in counts.items()}
    for pool in pools:
        share = pooled_over(pool)
        print(f"| generator pooled {_size(pool[0])}..{_size(pool[-1])} (equal weight) | - | "
              + " | ".join(f"{share[k]:.3f}" for k in MIX_TYPES) + " |")
    print(f"| {name} | {n} | " + " | ".join(f"{public[k]:.3f}" for k in MIX_TYPES) + " |")
    print(f"| {name}, 1 standard error | | "
          + " | ".join(f"±{math.sqrt(public[k] * (1 - public[k]) / n):.3f}" for k in MIX_TYPES) + " |")
    for pool in pools:
        share = pooled_over(pool)
        print(f"| gap: generator pooled {_size(pool[0])}..{_size(pool[-1])} vs {name} | | "
              + " | ".join(_gap(share[k], public[k]) for k in MIX_TYPES) + " |")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
