"""Where one decode step's time goes: ``python -m token_spec.step_profile [--threads N]``.

For each target configuration (bf16, bf16 with Q4_1 weights, fp32, and the unpadded
``exact=False`` variants) it times, interleaved and best of ``--repeats``: a one-token
step and an 8-token pass over ``--context`` cached tokens, the step's layer GEMMs alone
(the same callables and row counts the forward uses) and the LM head alone; "other" is
the rest (attention, norms, RoPE, cache writes, Python dispatch).
"""

from __future__ import annotations

import argparse
import time

__all__ = ["main", "CONFIGS"]

CONFIGS = {
    "bf16": {"dtype": "bfloat16"},
    "bf16-q4": {"dtype": "bfloat16", "weights": "q4"},
    "fp32": {"dtype": "float32"},
    "fp32-unpadded": {"dtype": "float32", "exact": False},
    "bf16-unpadded": {"dtype": "bfloat16", "exact": False},
}


def main(argv: list[str] | None = None) -> int:
    import torch

    from .target import load_target

    p = argparse.ArgumentParser(prog="python -m token_spec.step_profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"comma list of {list(CONFIGS)}")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    names = [c for c in args.configs.split(",") if c]
    unknown = [c for c in names if c not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown configuration(s) {unknown}; choose from {list(CONFIGS)}")
    targets = {}
    for name in names:
        kw = dict(CONFIGS[name])
        kw["dtype"] = getattr(torch, kw["dtype"])
        targets[name] = load_target(**kw)
    res = {k: {"step": [], "w8": [], "gemm": [], "head": []} for k in targets}
    sessions = {k: t.start(list(range(100, 100 + args.context))) for k, t in targets.items()}
    for _ in range(args.repeats):
        for k, t in targets.items():
            f, s = t.fast, sessions[k]
            base = s.length
            t0 = time.perf_counter()
            s.extend(torch.tensor([5]))
            res[k]["step"].append(time.perf_counter() - t0)
            s.truncate(base)
            t0 = time.perf_counter()
            s.extend(torch.arange(5, 13))
            res[k]["w8"].append(time.perf_counter() - t0)
            s.truncate(base)
            rows = f.gemm_width()
            x = torch.randn(rows, f.hidden).to(f.dtype)
            xi = torch.randn(rows, f.layers[0][5].in_features).to(f.dtype)
            with torch.inference_mode():
                t0 = time.perf_counter()
                for _, qkv, o, _, gate_up, down in f.layers:
                    qkv(x)
                    o(x)
                    gate_up(x)
                    down(xi)
                t1 = time.perf_counter()
                f._head(x)
                t2 = time.perf_counter()
            res[k]["gemm"].append(t1 - t0)
            res[k]["head"].append(t2 - t1)
    for k, r in res.items():
        m = {n: 1000 * min(v) for n, v in r.items()}
        print(f"{k:14s} step {m['step']:6.1f} ms  8-token pass {m['w8']:6.1f} ms  layer GEMMs {m['gemm']:5.1f} ms  "
              f"LM head {m['head']:5.1f} ms  other {m['step'] - m['gemm'] - m['head']:5.1f} ms")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
