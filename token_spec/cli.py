"""``token_spec`` command line. ``token_spec bench``: see ``token_spec.bench`` (our vanilla and
speculative decoders vs Hugging Face ``generate()`` vs llama.cpp, interleaved in one run).

Example: ``token_spec bench --out bench-out --max-tokens 64 --repeats 3``
"""

from __future__ import annotations

import argparse
import os

__all__ = ["main", "build_parser", "run_bench"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="token_spec", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench", help="benchmark vanilla vs speculative vs HF generate() vs llama.cpp")
    from .bench import add_arguments

    add_arguments(b)
    return parser


def run_bench(args) -> dict:
    """See ``token_spec.bench.run_bench``."""
    from .bench import run_bench as run

    return run(args)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    args = build_parser().parse_args(argv)
    from .bench import main_bench

    return main_bench(args, argv)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
