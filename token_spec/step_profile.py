"""Where one decode step's time goes, and what the fused row kernels changed.

``python -m token_spec.step_profile [--threads N]``: for each target configuration
(bf16, bf16 with Q4_1 weights, fp32, and the unpadded ``exact=False`` variants) it
times, interleaved and best of ``--repeats``: a one-token step and an 8-token pass over
``--context`` cached tokens, the step's layer GEMMs alone (the same callables and row
counts the forward uses) and the LM head alone; "other" is the rest (attention, norms,
RoPE, cache writes, Python dispatch).

``python -m token_spec.step_profile --ab [--samples N] [--out FILE.json]``: the old/new
A/B of the layer loop. One process holds two ``FastLlama`` over the same weights, the
Python loop of ATen ops (``native=False``, "old") and the compiled loop with the fused
row kernels (``native=True``, "new", ``token_spec.native_layers``), and alternates them
sample by sample (the order flips every sample) on four cells: a one-token step, an
8-token and a 16-token pass over ``--context`` cached tokens, and a ``--prefill``-token
prefill into an empty cache. Before timing it checks, and refuses to measure otherwise,
that each loop keeps the exactness contract bitwise on these inputs (the step's logits
are row 0 of the 8- and 16-token passes, the 8-token pass is the 16-token pass's first
rows) and that the two loops agree within the tolerance the tests hold them to (their
kernels reduce in other orders, so not bitwise); while timing, every sample's logits
must equal the untimed first run's bitwise. The results file keeps every sample, their
min and median, the checks, the exact command, date, machine, threads and load average.

``--ab --ab-of q4-kernel`` holds instead the Q4_1 target on its two 4-bit GEMMs (torch's
int4 kernel, the compiled nibble GEMM), and ``--ab --ab-of bf16-kernel`` the bf16 target
on its two dense GEMMs (BLAS, the compiled ``bf16_mm``), both in the compiled loop, with
the same checks.

``python -m token_spec.step_profile --render FILE.json``: the docs' table of such a file,
recomputed from its samples (a stored summary that disagrees with them is refused).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from datetime import date

__all__ = ["main", "CONFIGS", "AB_CELLS", "loop_twin", "check_loops", "run_ab", "render_ab"]

CONFIGS = {
    "bf16": {"dtype": "bfloat16"},
    "bf16-q4": {"dtype": "bfloat16", "weights": "q4"},
    "fp32": {"dtype": "float32"},
    "fp32-unpadded": {"dtype": "float32", "exact": False},
    "bf16-unpadded": {"dtype": "bfloat16", "exact": False},
}
AB_CONFIGS = ("bf16-q4", "bf16", "fp32")  # the exact (padded) ones: the contract the A/B checks
AB_CELLS = ("step", "pass8", "pass16", "prefill")
LOOPS = {"old": "Python loop of ATen ops (FastLlama native=False)",
         "new": "C++ loop with the fused row kernels (FastLlama native=True)"}
# --ab-of q4-kernel: the Q4_1 target's two 4-bit GEMMs, both in the compiled loop
KERNELS = {"old": "torch's int4 kernel (TOKEN_SPEC_Q4_KERNEL=aten)",
           "new": "the compiled nibble GEMM (TOKEN_SPEC_Q4_KERNEL=native)"}
# --ab-of bf16-kernel: the bf16 target's two dense GEMMs, both in the compiled loop
BF16_KERNELS = {"old": "BLAS (F.linear; TOKEN_SPEC_BF16_KERNEL=blas)",
                "new": "the compiled bf16 GEMM (TOKEN_SPEC_BF16_KERNEL=native)"}
AB_OF = {"loop": LOOPS, "q4-kernel": KERNELS, "bf16-kernel": BF16_KERNELS}
# fused against ATen logits: max |difference| <= TOLERANCE * max |logit|, as
# tests/token_spec/test_native_layers.py holds them
TOLERANCE = {"bfloat16": 0.06, "float32": 1e-3}
PROG = "python -m token_spec.step_profile"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7, help="time split: best of this many")
    p.add_argument("--context", type=int, default=512, help="cached tokens before a step or pass")
    p.add_argument("--configs", default=None,
                   help=f"comma list of {list(CONFIGS)} (--ab: of {list(AB_CONFIGS)}, default bf16-q4,bf16)")
    p.add_argument("--ab", action="store_true", help="the old/new A/B of the layer loop (or of --ab-of)")
    p.add_argument("--ab-of", choices=list(AB_OF), default="loop",
                   help="--ab: what the two sides differ in: the layer loop, the Q4_1 GEMM (bf16-q4 only) "
                        "or the dense bf16 GEMM (bf16 only)")
    p.add_argument("--samples", type=int, default=24, help="--ab: samples per cell and loop")
    p.add_argument("--prefill-samples", type=int, default=6, help="--ab: samples of the prefill cell")
    p.add_argument("--prefill", type=int, default=300, help="--ab: tokens of the prefill cell")
    p.add_argument("--out", help="--ab: write the results to this JSON file")
    p.add_argument("--render", metavar="FILE", help="print the docs' table of an --ab results file")
    args = p.parse_args(argv)
    if args.render is not None:
        from spectool.tables import render_file_main

        return render_file_main(f"{PROG} --render", "Render the docs' table of a step_profile --ab file.",
                                "a JSON file written by step_profile --ab --out", render_ab, [args.render])
    if args.ab:
        if args.ab_of == "q4-kernel":
            names = _names(args.configs or "bf16-q4", ("bf16-q4",))
        elif args.ab_of == "bf16-kernel":
            names = _names(args.configs or "bf16", ("bf16",))
        else:
            names = _names(args.configs or "bf16-q4,bf16", AB_CONFIGS)
        if min(args.samples, args.prefill_samples, args.context, args.prefill) < 1:
            raise SystemExit("--samples, --prefill-samples, --context and --prefill must be at least 1")
        report = run_ab(names, samples=args.samples, prefill_samples=args.prefill_samples,
                        context=args.context, prefill=args.prefill, threads=args.threads, of=args.ab_of,
                        command=shlex.join([*PROG.split(), *argv]))
        print(render_ab(report))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(report, f, indent=1)
            print(f"\nwrote {args.out}")
        return 0
    return _split(_names(args.configs or ",".join(CONFIGS), tuple(CONFIGS)), args)


def _names(text: str, allowed: tuple[str, ...]) -> list[str]:
    names = [c for c in text.split(",") if c]
    unknown = [c for c in names if c not in allowed]
    if unknown or not names:
        raise SystemExit(f"unknown configuration(s) {unknown}; choose from {list(allowed)}")
    return names


def _load(name: str, **kernels):
    """The target of configuration ``name``; ``q4_kernel=`` ("aten" / "native") or
    ``dense_kernel=`` ("blas" / "native"): its GEMMs on that kernel (``load_target``'s
    arguments of those names)."""
    import torch

    from .target import load_target

    kw = dict(CONFIGS[name])
    kw["dtype"] = getattr(torch, kw["dtype"])
    return load_target(**kw, **kernels)


def _twins(name: str, of: str) -> dict:
    """The A/B's two forwards of configuration ``name``: "old" and "new" (see ``AB_OF``)."""
    if of == "q4-kernel":
        return {"old": _load(name, q4_kernel="aten").fast, "new": _load(name, q4_kernel="native").fast}
    if of == "bf16-kernel":
        return {"old": _load(name, dense_kernel="blas").fast, "new": _load(name, dense_kernel="native").fast}
    lm = _load(name).fast
    return {loop: loop_twin(lm, loop == "new") for loop in ("old", "new")}


# -- the time split -----------------------------------------------------------------------
def _split(names: list[str], args) -> int:
    import torch

    torch.set_num_threads(args.threads)
    targets = {name: _load(name) for name in names}
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


# -- the old/new A/B of the layer loop ------------------------------------------------------
def loop_twin(lm, native: bool):
    """A ``FastLlama`` over ``lm``'s weights (the same Q4_1 / int8 GEMM callables where it
    has custom ones) whose decoder layers run in the chosen loop."""
    from .fast_forward import FastLlama

    custom = lm.weights == "custom"
    linears = [(layer[1], layer[2], layer[4], layer[5]) for layer in lm.layers] if custom else None
    twin = FastLlama(lm.source, lm.dtype, exact=lm.exact, linears=linears,
                     head=lm._head if custom else None, native=native)
    assert twin.native == native
    return twin


class _Cell:
    """One timed cell: ``ids`` run through ``session``, which then rolls back to where it
    was (a prefill computes the last row's logits only, as ``FastSession.prefill`` does)."""

    def __init__(self, lm, session, ids, prefill: bool) -> None:
        self.lm, self.session, self.ids, self.rows = lm, session, ids, 1 if prefill else None

    def run(self):
        """(seconds, logits) of one pass."""
        import torch

        cached = self.session.length
        with torch.inference_mode():
            t0 = time.perf_counter()
            logits = self.lm.forward(self.session, self.ids, logits_rows=self.rows)
            seconds = time.perf_counter() - t0
        self.session.truncate(cached)
        return seconds, logits


def _cells(lm, context: int, prefill: int) -> dict:
    """``AB_CELLS`` over ``lm``: the passes share one session holding ``context`` cached
    tokens; the prefill runs into an empty one."""
    import torch

    cached = lm.start(list(range(100, 100 + context)))
    cells = {c: _Cell(lm, cached, torch.arange(5, 5 + w), False) for c, w in (("step", 1), ("pass8", 8), ("pass16", 16))}
    cells["prefill"] = _Cell(lm, lm.session(), torch.arange(2000, 2000 + prefill), True)
    return cells


def check_loops(logits: dict, dtype_name: str) -> dict:
    """The A/B's checks over ``logits[loop][cell]`` (loop "old" / "new", cells as
    ``AB_CELLS``); raises ``ValueError`` naming the first one that fails.

    Per loop, bitwise: the step's row is row 0 of both passes and the 8-token pass is the
    16-token pass's first 8 rows (the exactness contract). Between the loops: every
    logit within ``TOLERANCE`` times the largest |logit| (not bitwise: the fused kernels
    reduce in another order), and the share of rows whose greedy token agrees."""
    import torch

    for loop in ("old", "new"):
        c = logits[loop]
        if not (torch.equal(c["step"], c["pass8"][:1]) and torch.equal(c["step"], c["pass16"][:1])
                and torch.equal(c["pass8"], c["pass16"][:8])):
            raise ValueError(f"the {loop} side is not row-invariant: the one-token step "
                             "and the 8- and 16-token passes disagree on a shared row")
    a = torch.cat([logits["old"][c] for c in AB_CELLS])
    b = torch.cat([logits["new"][c] for c in AB_CELLS])
    diff, scale = (a - b).abs().max().item(), a.abs().max().item()
    tol = TOLERANCE[dtype_name]
    if not diff <= tol * scale:
        raise ValueError(f"the loops' logits differ by {diff:.4g}, over {tol} x max |logit| {scale:.4g}")
    return {"row_invariant_bitwise": True, "max_abs_diff": diff, "max_abs_logit": scale, "tolerance": tol,
            "greedy_agreement": (a.argmax(-1) == b.argmax(-1)).float().mean().item()}


def _summary(samples_ms: list[float]) -> dict:
    return {"min_ms": min(samples_ms), "median_ms": statistics.median(samples_ms)}


def run_ab(names: list[str], *, samples: int, prefill_samples: int, context: int, prefill: int,
           threads: int, command: str, of: str = "loop") -> dict:
    """Measure the A/B (see the module docstring); the results file's dict."""
    import torch

    from .report import describe_machine as describe

    torch.set_num_threads(threads)
    load_start = os.getloadavg()[0]
    report = {"command": command, "date": date.today().isoformat(), "machine": describe(),
              "threads": threads, "samples": samples, "prefill_samples": prefill_samples,
              "context": context, "prefill_tokens": prefill, "ab_of": of, "loops": dict(AB_OF[of]), "configs": {}}
    runs = {}
    for name in names:
        cells = {loop: _cells(twin, context, prefill) for loop, twin in _twins(name, of).items()}
        first = {loop: {c: cell.run()[1] for c, cell in cs.items()} for loop, cs in cells.items()}  # untimed
        checks = check_loops(first, CONFIGS[name]["dtype"])
        runs[name] = (cells, first)
        report["configs"][name] = {"checks": checks,
                                   "cells": {c: {"old_ms": [], "new_ms": []} for c in AB_CELLS}}
    for i in range(samples):
        order = ("old", "new") if i % 2 == 0 else ("new", "old")
        for name, (cells, first) in runs.items():
            for c in AB_CELLS:
                if c == "prefill" and i >= prefill_samples:
                    continue
                for loop in order:
                    seconds, logits = cells[loop][c].run()
                    if not torch.equal(logits, first[loop][c]):
                        raise ValueError(f"{name} {c}: the {loop} loop's logits changed between samples")
                    report["configs"][name]["cells"][c][f"{loop}_ms"].append(1000 * seconds)
    for name in names:
        report["configs"][name]["checks"]["repeatable_bitwise"] = True
        for cell in report["configs"][name]["cells"].values():
            cell.update({f"{loop}_{k}": v for loop in ("old", "new") for k, v in _summary(cell[f"{loop}_ms"]).items()})
    report["load_average"] = [load_start, os.getloadavg()[0]]
    return report


_HEADINGS = {"step": "1-token step", "pass8": "8-token pass", "pass16": "16-token pass", "prefill": "{n}-token prefill"}
_CHECKS = ("row_invariant_bitwise", "repeatable_bitwise", "max_abs_diff", "max_abs_logit", "tolerance",
           "greedy_agreement")


def _validated(report: dict) -> dict:
    """``report``'s configurations with every cell's summary recomputed from its samples;
    ``ValueError`` naming what is missing, failed or disagrees."""
    try:
        return _recomputed(report)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a step_profile --ab file: field {exc} missing or malformed") from None


def _recomputed(report: dict) -> dict:
    missing = [k for k in ("command", "date", "machine", "threads", "samples", "prefill_samples", "context",
                           "prefill_tokens", "loops", "load_average", "configs") if k not in report]
    if missing:
        raise ValueError(f"not a step_profile --ab file: fields {missing} missing")
    out = {}
    for name, cfg in report["configs"].items():
        checks = cfg["checks"]
        missing = [k for k in _CHECKS if k not in checks]
        if missing:
            raise ValueError(f"{name}: checks {missing} missing")
        if not (checks["row_invariant_bitwise"] is True and checks["repeatable_bitwise"] is True
                and checks["max_abs_diff"] <= checks["tolerance"] * checks["max_abs_logit"]):
            raise ValueError(f"{name}: the loops' checks did not pass: {checks}")
        cells = {}
        for c in AB_CELLS:
            cell, summary = cfg["cells"][c], {}
            for loop in ("old", "new"):
                samples = cell[f"{loop}_ms"]
                if not samples:
                    raise ValueError(f"{name} {c}: no {loop} samples")
                for k, v in _summary(samples).items():
                    if abs(cell[f"{loop}_{k}"] - v) > 1e-9 * max(1.0, v):
                        raise ValueError(f"{name} {c}: {loop}_{k} is {cell[f'{loop}_{k}']} but its samples give {v}")
                    summary[f"{loop}_{k}"] = v
            if len(cell["old_ms"]) != len(cell["new_ms"]):
                raise ValueError(f"{name} {c}: {len(cell['old_ms'])} old samples against {len(cell['new_ms'])} new")
            cells[c] = summary | {"n": len(cell["old_ms"])}
        out[name] = cells
    if not out:
        raise ValueError("no configurations")
    return out


def render_ab(report: dict) -> str:
    """The docs' markdown table of an ``--ab`` results file: per configuration the old and
    new loop's min (median) in ms per cell and the new/old ratio of each, then the line
    that says how it was measured."""
    configs = _validated(report)
    headings = [_HEADINGS[c].format(n=report["prefill_tokens"]) for c in AB_CELLS]
    lines = ["| configuration | loop | " + " | ".join(headings) + " |", "|---|---|" + "---|" * len(AB_CELLS)]
    for name, cells in configs.items():
        for loop in ("old", "new"):
            lines.append(f"| {name} | {loop} | " + " | ".join(
                f"{cells[c][f'{loop}_min_ms']:.1f} ({cells[c][f'{loop}_median_ms']:.1f})" for c in AB_CELLS) + " |")
        lines.append(f"| {name} | new / old | " + " | ".join(
            f"{cells[c]['new_min_ms'] / cells[c]['old_min_ms']:.2f} "
            f"({cells[c]['new_median_ms'] / cells[c]['old_median_ms']:.2f})" for c in AB_CELLS) + " |")
    load = report["load_average"]
    agreement = ", ".join(f"{n} max |Δ logit| {cfg['checks']['max_abs_diff']:.3g} of max |logit| "
                          f"{cfg['checks']['max_abs_logit']:.3g}, greedy token agrees on "
                          f"{100 * cfg['checks']['greedy_agreement']:.0f} % of rows"
                          for n, cfg in report["configs"].items())
    lines += ["", f"ms, min (median) of {report['samples']} samples per cell and loop "
              f"({report['prefill_samples']} for the prefill), loops alternated sample by sample; "
              f"passes after {report['context']} cached tokens. old: {report['loops']['old']}; "
              f"new: {report['loops']['new']}. Each loop's step, 8- and 16-token rows bitwise equal, "
              f"every sample's logits bitwise the first's; old against new: {agreement}. "
              f"`{report['command']}`, {report['date']}, {report['machine']}, "
              f"{report['threads']} thread(s), load average {load[0]:.1f} at the start and {load[1]:.1f} at the end."]
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
