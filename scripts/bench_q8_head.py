"""Benchmark: the Q4_1 target with its LM head as a bf16 GEMM vs as the GGUF's Q8_0 blocks.

Both configurations share one ``load_target(weights="q4")`` (the same Q4_1 layer
objects); "bf16-head" rebuilds the fast forward with the dense bf16 head (the q4
configuration before ``Q8Head``), "q8-head" is ``load_target(weights="q4")`` itself.
Everything is interleaved per repeat in a rotating order, so load changes on a shared
machine hit both alike:

* one-token step time (median of ``--steps`` greedy steps per run, best run), and the
  head's own share of it (the head call timed inside those same steps);
* the time of one pass over w tokens (after a rollback, at the same KV length);
* greedy output (64 tokens by default) on the code prompts, bf16-head vs q8-head;
* optionally (``--kernels``) the head's candidate kernels alone, with a 96 MB buffer
  touched before each call so the weights come from memory, not cache: the bf16 GEMM,
  ``Q8Head`` (one int4 GEMM over ``[x | x]``), the same split as two int4 GEMMs (hi and
  lo halves) plus a bf16 add, ``_weight_int8pack_mm`` with one scale per row (the head re-quantised:
  lossy, timed for comparison only) and 18 per-block ``_weight_int8pack_mm`` calls summed
  (the exact Q8_0 weights, but one bf16 rounding per block);
* optionally (``--spec``) n-gram speculative decoding with cost-aware gamma, each
  configuration with its own measured pass costs: decode tok/s.

Usage: ``python scripts/bench_q8_head.py --threads 1 --repeats 5``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from token_spec.fast_forward import FastLlama
from token_spec.prompts import prompts_for
from token_spec.target import Target, load_target


class _TimedHead:
    """Wraps a head callable; accumulates the wall time of its calls."""

    def __init__(self, head) -> None:
        self.head, self.in_features, self.spent, self.calls = head, head.in_features, 0.0, 0
        if hasattr(head, "weight"):
            self.weight = head.weight

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        y = self.head(x)
        self.spent += time.perf_counter() - t0
        self.calls += 1
        return y


def _configs():
    q8 = load_target(weights="q4")
    layers = [(lay[1], lay[2], lay[4], lay[5]) for lay in q8.fast.layers]
    dense = FastLlama(q8.model, torch.bfloat16, linears=layers)  # the dense bf16 tied head
    bf = Target(q8.model, q8.tokenizer, fast=dense)
    return {"bf16-head": bf, "q8-head": q8}


def _step_run(target, prompt_ids, steps):
    """Greedy one-token steps after a prefill -> (median step s, median head s per step)."""
    timed = _TimedHead(target.fast._head)
    target.fast._head = timed
    try:
        s = target.fast.session()
        logits = s.extend(torch.tensor(prompt_ids))[-1]
        times, heads = [], []
        for _ in range(steps):
            tok = int(logits.argmax())
            before = timed.spent
            t0 = time.perf_counter()
            logits = s.extend(torch.tensor([tok]))[-1]
            times.append(time.perf_counter() - t0)
            heads.append(timed.spent - before)
        return statistics.median(times), statistics.median(heads)
    finally:
        target.fast._head = timed.head


def _pass_time(target, prompt_ids, width):
    s = target.fast.session()
    s.prefill(prompt_ids)
    base = s.length
    s.extend(torch.arange(300, 300 + width))  # warm this shape
    s.truncate(base)
    t0 = time.perf_counter()
    s.extend(torch.arange(300, 300 + width))
    return time.perf_counter() - t0


def _greedy(target, prompt_ids, n):
    s = target.fast.session()
    logits = s.extend(torch.tensor(prompt_ids))[-1]
    out = []
    for _ in range(n):
        tok = int(logits.argmax())
        out.append(tok)
        if tok in target.eos_ids:
            break
        logits = s.extend(torch.tensor([tok]))[-1]
    return out


def _kernels(target, widths, repeats) -> None:
    from gguf import GGUFReader

    from token_spec.q4_weights import GROUP, read_q8_0, split_int8
    from token_spec.target import find_gguf

    tensor = next(t for t in GGUFReader(str(find_gguf())).tensors if t.name == "token_embd.weight")
    q, d = read_q8_0(tensor)
    rows, nb = d.shape
    w = (q.float().view(rows, nb, GROUP) * d[..., None]).reshape(q.shape)
    dense = w.to(torch.bfloat16)
    row_scale = w.abs().amax(1) / 127  # per-row int8: NOT the GGUF's blocks
    q_row = torch.round(w / row_scale[:, None]).to(torch.int8)
    q_blk = q.to(torch.int8).view(rows, nb, GROUP).transpose(0, 1).contiguous()  # [nb, V, 32]
    d_blk = d.t().to(torch.bfloat16).contiguous()
    mm8 = torch.ops.aten._weight_int8pack_mm
    mm4 = torch.ops.aten._weight_int4pack_mm_for_cpu
    head = target.fast._head
    hi, lo = split_int8(q)
    pack_hi = torch.ops.aten._convert_weight_to_int4pack_for_cpu((hi + 8).contiguous(), 1)
    pack_lo = torch.ops.aten._convert_weight_to_int4pack_for_cpu(lo.contiguous(), 1)
    sz_hi = torch.stack([16 * d.t(), torch.zeros_like(d.t())], -1).to(torch.bfloat16).contiguous()
    sz_lo = torch.stack([d.t(), 8 * d.t()], -1).to(torch.bfloat16).contiguous()

    def per_block(x):
        out = mm8(x[:, :GROUP].contiguous(), q_blk[0], d_blk[0]).float()
        for g in range(1, nb):
            out += mm8(x[:, g * GROUP : (g + 1) * GROUP].contiguous(), q_blk[g], d_blk[g])
        return out

    kernels = {"bf16 GEMM": lambda x: torch.nn.functional.linear(x, dense), "Q8Head": head,
               "int4 x2 GEMMs + add": lambda x: mm4(x, pack_hi, GROUP, sz_hi) + mm4(x, pack_lo, GROUP, sz_lo),
               "int8 per-row (lossy)": lambda x: mm8(x, q_row, row_scale.to(torch.bfloat16)),
               "int8 x18 blocks": per_block}
    flush = torch.zeros(96 << 20, dtype=torch.uint8)
    best = {}
    with torch.inference_mode():
        for _ in range(repeats):
            for m in widths:
                x = torch.randn(m, head.in_features).to(torch.bfloat16)
                for name, fn in kernels.items():
                    flush.add_(1)
                    t0 = time.perf_counter()
                    fn(x)
                    t = time.perf_counter() - t0
                    best[(name, m)] = min(best.get((name, m), t), t)
    print("head kernels alone, cold weights, ms (best of repeats)")
    print(f"{'kernel':<22} " + " ".join(f"{'M=' + str(m):>7}" for m in widths))
    for name in kernels:
        print(f"{name:<22} " + " ".join(f"{1e3 * best[(name, m)]:7.2f}" for m in widths))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--widths", default="1,2,3,4,5,8,16")
    ap.add_argument("--kernels", action="store_true", help="also time the head kernels alone (cold weights)")
    ap.add_argument("--spec", action="store_true", help="also n-gram speculative decoding, cost-aware gamma")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    configs = _configs()
    names = list(configs)
    prompts = [configs["q8-head"].encode(p) for p in prompts_for("code")]
    widths = [int(w) for w in args.widths.split(",")]
    step, head, passes = {}, {}, {}
    for name in names:  # warm-up (and the row-invariance probe)
        _step_run(configs[name], prompts[0], 4)
    for rep in range(args.repeats):
        order = names[rep % 2 :] + names[: rep % 2]
        for name in order:
            st, hd = _step_run(configs[name], prompts[rep % len(prompts)], args.steps)
            step.setdefault(name, []).append(st)
            head.setdefault(name, []).append(hd)
            for w in widths:
                passes.setdefault((name, w), []).append(_pass_time(configs[name], prompts[0], w))
    print(f"threads={args.threads} repeats={args.repeats} (best of repeats; step = median of {args.steps} steps)")
    print(f"{'config':<10} {'step ms':>8} {'head ms':>8} " + " ".join(f"{'w=' + str(w):>7}" for w in widths))
    for name in names:
        cells = " ".join(f"{1e3 * min(passes[(name, w)]):7.2f}" for w in widths)
        print(f"{name:<10} {1e3 * min(step[name]):8.2f} {1e3 * min(head[name]):8.2f} {cells}")
    same, first_diff = 0, []
    for i, p in enumerate(prompts):
        a, b = (_greedy(configs[n], p, args.max_tokens) for n in names)
        if a == b:
            same += 1
        else:
            j = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            first_diff.append((i, j))
    print(f"greedy {args.max_tokens} tokens, code prompts: identical {same}/{len(prompts)}; "
          f"first differing token (prompt, index): {first_diff}")
    if args.kernels:
        _kernels(configs["q8-head"], widths, args.repeats)
    if args.spec:
        from token_spec.drafters import NgramDrafter
        from token_spec.engine import SpeculativeDecoder
        from token_spec.gamma import CostAwareGamma, measure_pass_costs

        costs = {n: measure_pass_costs(configs[n]) for n in names}
        rates = {}
        for rep in range(args.repeats):
            for name in names[rep % 2 :] + names[: rep % 2]:
                dec = SpeculativeDecoder(configs[name], NgramDrafter(), gamma_policy=CostAwareGamma(costs=costs[name]))
                for p in prompts:
                    t0 = time.perf_counter()
                    g = dec.generate(p, temperature=0.0, max_tokens=args.max_tokens)
                    rates.setdefault(name, []).append(len(g.token_ids) / (time.perf_counter() - t0))
        for name in names:
            print(f"spec ngram cost-aware {name}: pass costs w=2,5,16: "
                  f"{costs[name][1]:.2f} {costs[name][4]:.2f} {costs[name][15]:.2f}; "
                  f"e2e tok/s median {statistics.median(rates[name]):.1f}")


if __name__ == "__main__":
    main()
