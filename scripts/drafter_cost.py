#!/usr/bin/env python
"""Drafting cost per round against gamma: the DFlash-style block drafter (one pass per
block) vs the EAGLE-3 head (one step per token), on the real target, one thread.

    .venv/bin/python scripts/drafter_cost.py                    # prints a table
    .venv/bin/python scripts/drafter_cost.py --out docs/results/drafter_cost.json

Both drafters read the same feature tap of one bf16 target session over a code prompt
plus the target's greedy continuation. Each timed round asks for gamma drafts after a
context 2 tokens longer than the round before (so both drafters add the newly verified
positions to their caches, as in decoding: about tau of them a round). Per gamma: the
median over ``--rounds`` rounds of ``propose`` (drafting only; no verification). Block
slots past the shipped block size (8) are timed for cost only (those drafts are never
used by the engine, which drafts at most ``block`` tokens).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import offline_env  # noqa: E402,F401  (Hugging Face offline; root and scripts/ on sys.path)

import torch  # noqa: E402

from spectool_bench.machine import describe  # noqa: E402
from token_spec.dflash import DFlashDrafter, load_dflash  # noqa: E402
from token_spec.eagle3 import Eagle3Drafter, load_eagle3  # noqa: E402
from token_spec.prompts import prompts_for  # noqa: E402
from token_spec.sampling import SamplingParams  # noqa: E402
from token_spec.target import load_target  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gammas", default="1,2,4,8,12,16")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="write the results JSON here")
    ap.add_argument("--dflash", default=None, help="block drafter weights (default: the shipped ones)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    gammas = [int(g) for g in args.gammas.split(",")]

    target = load_target(dtype=torch.bfloat16)
    prompt = target.encode(prompts_for("code")[0])
    need = 2 * args.rounds * len(gammas) + 8
    drafters = {"eagle3": Eagle3Drafter(target, load_eagle3(target))}  # installs the tap: before any pass
    head, _ = load_dflash(target, "dflash", args.dflash)
    drafters["dflash"] = DFlashDrafter(target, head)
    head.block = max(gammas)  # cost only: slots past the trained block are timed, not used
    s = target.start(prompt[:-1])
    ctx, pending = list(prompt), prompt[-1]
    for _ in range(need):  # the target's greedy continuation, one step at a time (fills the tap)
        pending = int(torch.argmax(s.extend(torch.tensor([pending]))[-1]))
        ctx.append(pending)
    params = SamplingParams(temperature=0)
    base = len(prompt)
    table: dict[str, dict[int, float]] = {n: {} for n in drafters}
    for name, d in drafters.items():
        d.begin(prompt)
        d.propose(ctx[:base], 2, params, None)  # warm-up (caches, kernels)
        n = base
        for g in gammas:
            times = []
            for _ in range(args.rounds):
                n += 2
                t0 = time.perf_counter()
                d.propose(ctx[:n], g, params, None)
                times.append(time.perf_counter() - t0)
            table[name][g] = round(1000 * statistics.median(times), 2)
    print(f"{'gamma':>5} " + " ".join(f"{n + ' ms':>10}" for n in table))
    for g in gammas:
        print(f"{g:>5} " + " ".join(f"{table[n][g]:>10.2f}" for n in table))
    if args.out:
        out = {"command": "python scripts/drafter_cost.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "what": "median ms per propose() call (drafting only) at each gamma, context growing 2 tokens a "
                       "round, bf16 target, greedy",
               "machine": describe(), "threads": args.threads, "load_average": os.getloadavg(),
               "ms_per_round": {n: {str(g): v for g, v in t.items()} for n, t in table.items()},
               "prompt_tokens": len(prompt)}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
