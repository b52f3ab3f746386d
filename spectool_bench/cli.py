"""``spectool bench ...``: the benchmark subcommands, registered into the core CLI.

The core ``spectool`` CLI never imports this package; it finds ``register`` through
the ``spectool.commands`` entry point (``pyproject.toml``)::

    spectool bench oolong [--out DIR] [--modes baseline lazy spec] [--concurrency 1 4]
                          [--repeats N] [--seed S ...] [--context-tokens 8192 ...]
                          [--decoding vanilla speculative] [--shapes ...]
                          [--root-model LITELLM_MODEL] [--sub-model LITELLM_MODEL]
                          [--api-base URL] [--api-key KEY]
                          [--time-scale X] [--no-plots] [--no-progress] [--json]

Without model strings the benchmark runs on the embedded **simulated** models
(``spectool_bench.simulated``) and reports simulated seconds. Every flag is checked
(and the output folder proved writable) before any work starts. The tables print
through ``spectool.tables`` (rich on a terminal, plain text elsewhere); ``--json``
prints ``oolong.json``'s data instead.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from spectool.arg_types import existing_path, float_within, http_url, int_at_least, positive_float

from .programs import SHAPES
from .config import DECODINGS, MODES

__all__ = ["register"]


def _context_tokens(text: str) -> int:
    t = text.strip().upper()
    mult = 1024 if t.endswith("K") else 1
    try:
        value = int(t[:-1] if mult > 1 else t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a token count: {text!r} (e.g. 8192 or 8K)") from None
    if not 1024 <= value <= 131072:
        raise argparse.ArgumentTypeError(f"context tokens must be within 1K..128K, got {text}")
    return value


def register(subparsers: Any) -> None:
    """Add ``bench`` (with ``oolong``) to the core CLI's subparsers."""
    bench = subparsers.add_parser(
        "bench", help="run a benchmark (spectool_bench)",
        description="Run one of spectool's benchmarks; 'spectool bench BENCHMARK --help' lists its flags.")
    which = bench.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    oo = which.add_parser(
        "oolong", help="OOLONG-style long-context benchmark (simulated models by default)",
        description="Run the OOLONG-style benchmark in baseline / lazy / spec modes and "
                    "write a table, JSON and PNG plots. Without --root-model/--sub-model the "
                    "models are SIMULATED.")
    oo.add_argument("--out", type=Path, default=Path("out/oolong"),
                    help="output folder for oolong.json and the plots (default: out/oolong)")
    oo.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES),
                    help="runtime modes to compare (default: all)")
    oo.add_argument("--concurrency", nargs="+", type=int_at_least(1), default=[1, 4],
                    help="episodes in flight sharing the server (e.g. 1 4 8)")
    oo.add_argument("--repeats", type=int_at_least(1), default=1,
                    help="runs of each configuration (default 1)")
    oo.add_argument("--seed", nargs="+", type=int_at_least(0), default=[0], help="one or more seeds (integers >= 0)")
    oo.add_argument("--context-tokens", nargs="+", type=_context_tokens, default=[8192],
                    help="window sizes, e.g. 4K 8192 32K (1K..128K)")
    oo.add_argument("--decoding", nargs="+", choices=DECODINGS, default=list(DECODINGS),
                    help="simulated root decoding: vanilla and/or token-level speculative")
    oo.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES),
                    help="program shapes of the simulated root model (default: all)")
    oo.add_argument("--dataset", default="trec_coarse",
                    choices=["trec_coarse", "spam", "imdb", "agnews", "negation", "yahoo",
                             "formality", "multinli", "metaphors", "app_reviews"],
                    help="label set of the generated windows (default trec_coarse)")
    oo.add_argument("--tasks", choices=["synth", "pairs", "both"], default="synth",
                    help="questions: synth (OOLONG-synth, default), pairs (the 20 OOLONG-Pairs "
                         "tasks, scored by pair F1; trec_coarse only) or both")
    oo.add_argument("--all-windows", action="store_true",
                    help="keep windows the official subsample drops (fewer than 25 "
                         "questions) with all their questions; default: seed i is the i-th "
                         "window the official subsample keeps")
    oo.add_argument("--data", type=existing_path, default=None,
                    help="official OOLONG files (parquet/JSONL/JSON, or a folder) instead of "
                         "the generator; needs --root-model")
    oo.add_argument("--accuracy", type=float_within(0.0, 1.0), default=0.95,
                    help="simulated sub-model: probability each label is right (0..1)")
    oo.add_argument("--root-model", default=None, help="litellm model string for the root model")
    oo.add_argument("--sub-model", default=None,
                    help="litellm model string for the sub-model; 'local' starts the project's "
                         "own token-tier server (token_spec serve) and prints the 2x2 table "
                         "token speculation x tool speculation (root model simulated)")
    oo.add_argument("--token-spec", default="ngram",
                    choices=["ngram", "suffix", "draft", "ngram+draft", "dspark"],
                    help="with --sub-model local: the speculative method of the 'on' server")
    oo.add_argument("--sub-target", default="bf16-q4", choices=["bf16", "bf16-q4", "fp32"],
                    help="with --sub-model local: both servers' --target (default bf16-q4: "
                         "Q4_1 layers, Q8_0 head)")
    oo.add_argument("--sub-threads", type=int_at_least(1), default=1,
                    help="with --sub-model local: both servers' --threads (default 1)")
    oo.add_argument("--gamma", type=int_at_least(1), default=4,
                    help="with --sub-model local: draft length of the 'on' server")
    oo.add_argument("--sub-max-tokens", type=int_at_least(1), default=24,
                    help="with --sub-model local: max_tokens per sub-call")
    oo.add_argument("--max-questions", type=int_at_least(1), default=None,
                    help="with --root-model: questions per window (default: all)")
    oo.add_argument("--api-base", type=http_url, default=None,
                    help="OpenAI-compatible base URL for the litellm models (e.g. a vLLM server)")
    oo.add_argument("--api-key", default=None,
                    help="API key for the litellm models (default: the provider's env variable)")
    oo.add_argument("--time-scale", type=positive_float, default=None,
                    help="real seconds per simulated second (default 0.1; 1.0 with real models)")
    oo.add_argument("--max-turns", type=int_at_least(1), default=6,
                    help="root-model turns per question at most (default 6)")
    oo.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    oo.add_argument("--no-progress", action="store_true", help="no progress bar")
    oo.add_argument("--json", action="store_true",
                    help="print the report (oolong.json's data) as JSON on stdout instead of the table")
    oo.set_defaults(func=lambda args: run_oolong(args, oo))


def run_oolong(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Validate everything, prove ``--out`` writable, then run the benchmark."""
    from spectool.cli import ensure_writable_dir
    from spectool.tables import print_json, show

    from .runner import BenchConfig, main_bench

    # the agents (pydantic-core, a C extension) are imported before --out exists, as the
    # event loop is (``spectool.cli.run_interruptible``): --out marks the run as begun
    import spectool_agents  # noqa: F401

    if args.sub_model == "local":
        if args.root_model is not None:
            parser.error("--sub-model local keeps the root model simulated; drop --root-model")
        from .two_tier import TwoTierConfig, main_two_tier

        from .two_tier import two_tier_blocks

        try:
            ensure_writable_dir(args.out)
        except ValueError as exc:
            parser.error(str(exc))
        report = main_two_tier(TwoTierConfig(
            token_method=args.token_spec, gamma=args.gamma, repeats=max(2, args.repeats),
            max_tokens=args.sub_max_tokens, context_tokens=min(args.context_tokens),
            seed=args.seed[0], target=args.sub_target, threads=args.sub_threads,
            progress=not args.no_progress),
            out=args.out,
            command=(f"spectool bench oolong --sub-model local --token-spec {args.token_spec} "
                     f"--gamma {args.gamma} --sub-target {args.sub_target} "
                     f"--sub-threads {args.sub_threads} --sub-max-tokens {args.sub_max_tokens} "
                     f"--repeats {max(2, args.repeats)} --out {args.out}"))
        if args.json:
            print_json(report, omit=("table",))
        else:
            show(two_tier_blocks(report))
            print(f"\nwrote {Path(args.out) / 'two_tier.json'}", file=sys.stderr)
        return 0
    real = args.root_model is not None or args.sub_model is not None
    cfg = BenchConfig(
        out=args.out, modes=tuple(dict.fromkeys(args.modes)),
        concurrency=tuple(dict.fromkeys(args.concurrency)), repeats=args.repeats,
        seeds=tuple(dict.fromkeys(args.seed)),
        context_tokens=tuple(dict.fromkeys(args.context_tokens)),
        decoding=tuple(dict.fromkeys(args.decoding)), dataset=args.dataset,
        shapes=tuple(dict.fromkeys(args.shapes)), accuracy=args.accuracy,
        time_scale=args.time_scale or (1.0 if real else 0.1),
        root_model=args.root_model, sub_model=args.sub_model, max_turns=args.max_turns,
        max_questions=args.max_questions, data=args.data, tasks=args.tasks,
        all_windows=args.all_windows,
        model_kwargs={k: v for k, v in (("api_base", args.api_base),
                                        ("api_key", args.api_key)) if v} or None,
        progress=not args.no_progress, plots=not args.no_plots)
    try:
        cfg.validate()
        ensure_writable_dir(cfg.out)
    except ValueError as exc:
        parser.error(str(exc))
    report = main_bench(cfg)
    wrote = [Path(cfg.out) / "oolong.json", *report.get("plots", [])]
    if args.json:   # stdout is the JSON alone; what was written goes to stderr
        print_json(report, omit=("table", "plots"))
        print("\n".join(f"wrote {p}" for p in wrote), file=sys.stderr)
        return 0
    from .report import render_blocks

    show(render_blocks(cfg, report["summary"]))
    print("\n" + "\n".join(f"wrote {p}" for p in wrote))
    return 0
