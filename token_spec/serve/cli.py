"""Command-line parsers of ``token_spec serve``, ``token_spec loadtest`` and ``token_spec audit``.

``add_subcommands(sub)`` registers them on ``token_spec.cli``'s sub-parsers with only
argparse imported; each handler imports the ``serve`` extra when it runs, so the
``bench`` command keeps working without it.

``token_spec serve --host 127.0.0.1 --port P --speculative {ngram,suffix,draft,ngram+draft,none}
--gamma G --served-model-name NAME`` serves OpenAI chat completions at
``http://127.0.0.1:P/v1``; ``GET /health`` answers 200 once the model is loaded.
"""

from __future__ import annotations

import argparse
import os

from .server import SPECULATIVE_METHODS

__all__ = ["add_subcommands", "serve_main", "add_serve_options"]


def add_serve_options(p: argparse.ArgumentParser) -> None:
    """Options shared by ``serve`` and ``loadtest`` (how the server is built)."""
    p.add_argument("--speculative", choices=SPECULATIVE_METHODS, default="ngram",
                   help="drafter (default ngram; ngram+draft = the lookup where it matches, the draft model "
                   "elsewhere; none = plain decoding)")
    p.add_argument("--gamma", type=int, default=4, help="most draft tokens per sequence and step (default 4)")
    p.add_argument("--acceptance", choices=("strict", "relaxed"), default="strict",
                   help="strict = lossless rejection sampling (default); relaxed = LOSSY (marked in every response)")
    p.add_argument("--relaxed-threshold", type=float, default=0.1,
                   help="relaxed acceptance: accept a draft token whose target probability is >= this (default 0.1)")
    p.add_argument("--attention", choices=("exact", "sdpa"), default="exact",
                   help="exact = per-row attention, batch-invariant (default); sdpa = per-segment, not invariant")
    p.add_argument("--dtype", choices=("auto", "bf16", "fp32"), default="auto",
                   help="matmul dtype (auto = bf16 where the CPU has AVX512-BF16/AMX, else fp32)")
    p.add_argument("--max-rows", type=int, default=16,
                   help="rows per forward pass the scheduler fills with draft tokens (default 16)")
    p.add_argument("--max-seqs", type=int, default=32, help="most requests in the batch at once (default 32)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")


def add_subcommands(sub) -> None:
    s = sub.add_parser("serve", help="OpenAI-compatible speculative server with continuous batching",
                       description=__doc__.split("\n\n")[0])
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 = any free port)")
    s.add_argument("--served-model-name", default="smollm2-135m-instruct", help="the model id clients send")
    s.add_argument("--default-max-tokens", type=int, default=256, help="max_tokens when a request gives none")
    add_serve_options(s)
    s.set_defaults(func=serve_main)

    from ..audit import add_parser as add_audit  # argparse only

    add_audit(sub)

    from .loadtest import add_parser as add_loadtest  # argparse only

    add_loadtest(sub)


def _config(args):
    from .server import ServeConfig

    return ServeConfig(
        model_name=getattr(args, "served_model_name", "smollm2-135m-instruct"), speculative=args.speculative,
        gamma=args.gamma, acceptance=args.acceptance, relaxed_threshold=args.relaxed_threshold,
        attention=args.attention, dtype=args.dtype, max_rows=args.max_rows, max_seqs=args.max_seqs,
        default_max_tokens=getattr(args, "default_max_tokens", 256),
    )


def serve_main(args) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        config = _config(args)
    except ValueError as exc:
        raise SystemExit(f"token_spec serve: {exc}") from None
    try:
        import uvicorn
    except ImportError:
        raise SystemExit("token_spec serve needs the serve extra: pip install 'spectool[serve]'") from None
    import torch

    from .server import build

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    app = build(config)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", lifespan="on", ws="none", loop="asyncio",
                http="h11")
    return 0
