"""``token_spec`` command line.

* ``token_spec bench``: see ``token_spec.bench`` (our vanilla and speculative decoders vs
  Hugging Face ``generate()`` vs llama.cpp, interleaved in one run);
* ``token_spec race PROMPT``: see ``token_spec.race`` (one prompt, vanilla and every
  drafter, replayed side by side at their measured per-token timing);
* ``token_spec serve`` / ``audit`` / ``loadtest``: see ``token_spec.serve.cli``.

Every flag is checked (and ``--out`` proved writable) before any model loads; a bad one
costs one error line; Ctrl-C costs one line too (exit status 130, and an ``--out`` folder
the run made and left empty is removed). Example:
``token_spec bench --out bench-out --max-tokens 64 --repeats 3``
"""

from __future__ import annotations

import argparse
import os

from spectool.arg_types import comma_list, float_within, int_at_least, int_list

__all__ = ["main", "build_parser", "run_bench"]


def _drafter_list(text: str) -> str:
    """``ngram,suffix,draft:2``: known drafters, an optional ``:G`` with G >= 1."""
    from .bench import KNOWN_DRAFTERS as OUR_DRAFTERS

    specs = [d for d in text.split(",") if d]
    if not specs:
        raise argparse.ArgumentTypeError(f"empty drafter list; choose from {list(OUR_DRAFTERS)}")
    for spec in specs:
        name, colon, g = spec.partition(":")
        if name not in OUR_DRAFTERS:
            raise argparse.ArgumentTypeError(f"unknown drafter {name!r}; choose from {list(OUR_DRAFTERS)}")
        if colon and not (g.isdigit() and int(g) >= 1):
            raise argparse.ArgumentTypeError(f"{spec!r}: the gamma after ':' must be an integer >= 1")
    return ",".join(dict.fromkeys(specs))


# flag -> its checked type (``token_spec.bench.add_arguments`` declares the flags)
def _checked_types() -> dict[str, object]:
    from .bench import HF_KINDS, TARGET_CONFIGS
    from .prompts import DOMAINS

    return {
        "max_tokens": int_at_least(1),
        "repeats": int_at_least(1),
        "domains": comma_list(DOMAINS),
        "prompts": int_at_least(0),
        "drafters": _drafter_list,
        "targets": comma_list(set(TARGET_CONFIGS) | {"auto"}),
        "gamma": int_at_least(1),
        "hybrid_model_tokens": int_at_least(1),
        "draft_confidence": float_within(0.0, 1.0),
        "temperature": float_within(0.0),
        "seed": int_at_least(0),
        "hf": comma_list({"auto", "none", "bf16", "fp32"}),
        "hf_methods": comma_list(HF_KINDS),
        "threads": int_list(0),
    }


def build_parser() -> argparse.ArgumentParser:
    from spectool.cli import OneLineErrorParser, version

    from .bench import add_arguments

    parser = OneLineErrorParser(
        prog="token_spec",
        description="Lossless speculative decoding on SmolLM2-135M: benchmark the decoders, serve them over "
                    "an OpenAI-compatible API, and audit or load-test any two endpoints.",
        epilog="Run 'token_spec COMMAND --help' for a command's flags.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}",
                        help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    b = sub.add_parser("bench", help="benchmark vanilla vs speculative vs HF generate() vs llama.cpp",
                       description="Benchmark our vanilla and speculative decoders against Hugging Face generate() "
                       "and llama.cpp on the shipped prompt set, interleaved in one run; writes bench.json and "
                       "bench.png into --out and prints a table (--json: the same data as JSON).")
    add_arguments(b)
    types = _checked_types()
    for action in b._actions:
        if action.dest in types:
            action.type = types[action.dest]   # string defaults go through it too
    from .race import add_arguments as add_race_arguments

    r = sub.add_parser("race", help="decode one prompt with vanilla and every drafter, replayed side by side",
                       description="Decode one prompt with vanilla decoding and every drafter, then replay the "
                       "lanes side by side at their measured per-token timing; writes race.json, race.html and "
                       "race.png into --out.")
    add_race_arguments(r, _drafter_list)
    for p in (b, r):
        p.set_defaults(parser=p)   # errors found after parsing name the sub-command
    from .serve.cli import add_subcommands  # serve, loadtest, audit (their own module)

    add_subcommands(sub)
    return parser


def run_bench(args) -> dict:
    """See ``token_spec.bench.run_bench``."""
    from .bench import run_bench as run

    return run(args)


def main(argv: list[str] | None = None) -> int:
    """Parse, then run the command under the shared Ctrl-C handler
    (``spectool.cli.run_interruptible``: one line, exit status 130, no empty ``--out``)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from spectool.cli import ensure_writable_dir, run_interruptible

    parser = build_parser()
    args = parser.parse_args(argv)
    out = getattr(args, "out", None)
    if args.command not in ("bench", "race"):
        return run_interruptible(f"token_spec {args.command}", out, lambda: args.func(args))

    def run() -> int:
        try:  # before the model loads: a bad --out costs one line, not a lost run
            ensure_writable_dir(args.out)
        except ValueError as exc:
            args.parser.error(f"argument --out: {exc}")
        if args.command == "race":
            from .race import main_race

            return main_race(args, argv)
        from .bench import main_bench

        return main_bench(args, argv)

    return run_interruptible(f"token_spec {args.command}", out, run)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
