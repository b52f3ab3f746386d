#!/usr/bin/env python
"""Draft time per serving step, the draft models' steps packed across sequences
(``propose_many``) against one sequence at a time, on the real target, one thread.

    .venv/bin/python scripts/batch_draft_cost.py                       # prints a table
    .venv/bin/python scripts/batch_draft_cost.py --widths 1,2,4,8 --repeats 3 --out x.json

For each batch width w, w requests (the bench's prompts, greedy, ``--max-tokens`` each)
are submitted at once to a ``BatchEngine`` and stepped to the end; the first step (the
prefills) is not timed. Arms, interleaved in a rotating order within every repeat so
that a change in the machine's load hits all of them alike: no speculation, and each
``--methods`` drafter with ``batch_drafts`` on and off. Per arm: the time spent drafting
per step (``BatchEngine._draft``), the whole step, and tokens per second; then the paired
ratios (batched / per-sequence draft time, and each arm's token rate over no
speculation's) per repeat, as medians. The greedy outputs of every arm are checked equal
(the serving contract). No ``DraftSwitch``: drafting runs wherever the budget (and,
with ``--gate on``, the gates) allow, so the draft cost is seen at every width.
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
from token_spec.gamma import measure_pass_costs  # noqa: E402
from token_spec.packed import PackedLM  # noqa: E402
from token_spec.prompts import DOMAINS  # noqa: E402
from token_spec.sampling import SamplingParams  # noqa: E402
from token_spec.serve.engine import BatchEngine, Request  # noqa: E402
from token_spec.serve.server import load_server_target, make_drafter_factory  # noqa: E402


def _prompts(target, n: int) -> list[list[int]]:
    texts = [t for group in zip(*DOMAINS.values()) for t in group]
    return [target.encode([{"role": "user", "content": texts[i % len(texts)]}]) for i in range(n)]


def run_arm(target, factory, costs, prompts, max_tokens: int, batch: bool) -> dict:
    engine = BatchEngine(PackedLM(target.fast), target.tokenizer, target.eos_ids, drafter_factory=factory,
                         gamma=4, max_rows=16, max_seqs=len(prompts), pass_costs=costs, batch_drafts=batch)
    spent = [0.0]
    draft = engine._draft

    def timed(decoding, k_budget):
        t0 = time.perf_counter()
        try:
            return draft(decoding, k_budget)
        finally:
            spent[0] += time.perf_counter() - t0

    engine._draft = timed
    outs = {f"r{i}": [] for i in range(len(prompts))}
    for i, ids in enumerate(prompts):
        engine.submit(Request(id=f"r{i}", prompt_ids=ids, params=SamplingParams(temperature=0, max_tokens=max_tokens)))
    steps, tokens, step_time = 0, 0, 0.0
    first = True
    while engine.has_work():
        before = spent[0]
        t0 = time.perf_counter()
        updates = engine.step()
        took = time.perf_counter() - t0
        for rid, upd in updates:
            outs[rid].extend(upd.token_ids)
        if first:  # the prefills
            spent[0], first = before, False
            continue
        steps += 1
        step_time += took
        tokens += sum(len(u.token_ids) for _, u in updates)
    return {"steps": steps, "tokens": tokens, "step_s": step_time, "draft_s": spent[0], "outputs": outs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="bf16-q4", choices=["bf16", "bf16-q4", "fp32"])
    ap.add_argument("--widths", default="1,2,4,8")
    ap.add_argument("--methods", default="ngram+draft,dspark")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gate", choices=["on", "off"], default="off",
                    help="on: the draft model behind the server's gates (measured pass costs)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    widths = [int(w) for w in args.widths.split(",")]
    methods = [m for m in args.methods.split(",") if m]

    target = load_server_target(args.target)
    costs = measure_pass_costs(target, max_width=16)
    gate_costs = costs if args.gate == "on" else None
    factories = {m: make_drafter_factory(m, target, target.fast.dtype, gate_costs=gate_costs, max_tokens=4)
                 for m in methods}
    arms = [("none", False)] + [(m, b) for m in methods for b in (False, True)]
    load = [os.getloadavg()[0]]
    raw: dict[str, list[dict]] = {}
    for rep in range(args.repeats):
        for w in widths:
            prompts = _prompts(target, w)
            order = arms[rep % len(arms):] + arms[: rep % len(arms)]
            outputs = None
            for method, batch in order:
                factory = None if method == "none" else factories[method]
                res = run_arm(target, factory, costs if method != "none" else None, prompts, args.max_tokens, batch)
                if outputs is None:
                    outputs = res["outputs"]
                elif res["outputs"] != outputs:
                    raise SystemExit(f"greedy outputs differ: {method} batch={batch} at width {w}")
                del res["outputs"]
                raw.setdefault(f"{w}/{method}/{'batched' if batch else 'per-seq'}", []).append(res)
            load.append(os.getloadavg()[0])
            print(f"repeat {rep + 1}/{args.repeats} width {w} done (load {load[-1]:.2f})", file=sys.stderr)

    def key(w, method, batch):
        return f"{w}/{method}/{'batched' if batch else 'per-seq'}"

    rows = []
    print(f"{describe()}; target {args.target}, {args.threads} thread(s), gate {args.gate}; "
          f"load average {min(load):.2f}..{max(load):.2f}")
    print(f"{'width':>5} {'method':<12} {'path':<8} {'draft ms/step':>13} {'step ms':>8} {'tok/s':>7} "
          f"{'draft b/p':>9} {'vs none':>8}")
    for w in widths:
        base = raw[key(w, "none", False)]
        for method, batch in arms:
            runs = raw[key(w, method, batch)]
            draft_ms = statistics.median(1e3 * r["draft_s"] / max(1, r["steps"]) for r in runs)
            step_ms = statistics.median(1e3 * r["step_s"] / max(1, r["steps"]) for r in runs)
            rate = statistics.median(r["tokens"] / r["step_s"] for r in runs)
            vs_none = statistics.median((r["tokens"] / r["step_s"]) / (b["tokens"] / b["step_s"])
                                        for r, b in zip(runs, base))
            paired = None
            if method != "none" and batch:
                per_seq = raw[key(w, method, False)]
                paired = statistics.median(r["draft_s"] / max(p["draft_s"], 1e-9) for r, p in zip(runs, per_seq))
            rows.append({"width": w, "method": method, "batched": batch, "draft_ms_per_step": draft_ms,
                         "step_ms": step_ms, "tokens_per_s": rate, "vs_none": vs_none,
                         "draft_batched_over_per_seq": paired})
            print(f"{w:>5} {method:<12} {'batched' if batch else 'per-seq':<8} {draft_ms:>13.2f} {step_ms:>8.2f} "
                  f"{rate:>7.1f} {'' if paired is None else f'{paired:.2f}':>9} {vs_none:>8.3f}")
    if args.out is not None:
        args.out.write_text(json.dumps({"machine": describe(), "args": {k: str(v) for k, v in vars(args).items()},
                                        "load_average": load, "rows": rows, "raw": raw}, indent=1))


if __name__ == "__main__":
    main()
