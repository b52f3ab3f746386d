"""Command-line parsers of ``token_spec serve``, ``token_spec loadtest`` and ``token_spec audit``.

``add_subcommands(sub)`` registers them on ``token_spec.cli``'s sub-parsers with only
argparse imported; each handler imports the ``serve`` extra when it runs, so the
``bench`` command keeps working without it.

``token_spec serve --host 127.0.0.1 --port P --target {auto,bf16,bf16-q4,fp32}
--speculative {ngram,suffix,draft,ngram+draft,none} --gamma G --served-model-name NAME``
serves OpenAI chat completions at ``http://127.0.0.1:P/v1``; ``GET /health`` answers 200
once the model is loaded.

Every flag is checked before the model loads, and the listening socket is bound first
too (a port in use or a host that cannot be bound is reported at once): a bad value
costs one error line naming the flag and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import socket

from spectool.arg_types import float_within, int_at_least, int_within
from .server import GATE_CHOICES, MAX_GAMMA, SPECULATIVE_METHODS, TARGET_CHOICES

__all__ = ["add_subcommands", "serve_main", "add_serve_options", "MAX_GAMMA"]


def add_serve_options(p: argparse.ArgumentParser) -> None:
    """Options shared by ``serve`` and ``loadtest`` (how the server is built)."""
    p.add_argument("--target", "--dtype", dest="target", choices=TARGET_CHOICES, default="auto",
                   help="target configuration, as the bench's: bf16, bf16-q4 (Q4_1 layers, Q8_0 head), fp32; "
                   "auto = bf16 where the CPU has AVX512-BF16/AMX, else fp32 (--dtype is the old name)")
    p.add_argument("--speculative", choices=SPECULATIVE_METHODS, default="ngram",
                   help="drafter (default ngram; ngram+draft = the lookup where it matches, the draft model "
                   "elsewhere; none = plain decoding)")
    p.add_argument("--gamma", type=int_within(1, MAX_GAMMA), default=4,
                   help=f"most draft tokens per sequence and step, 1..{MAX_GAMMA} (default 4)")
    p.add_argument("--gate", choices=GATE_CHOICES, default="auto",
                   help="per-request draft gate: on = each drafter drafts only while its acceptance so far pays "
                   "for its steps and the wider pass at this step's batch width (pass costs measured at start-up), "
                   "and the server drafts at a batch width only while steps that draft have measured at least as "
                   "many tokens per second there as steps that do not; "
                   "off = draft whatever the budget allows; auto (default) = on")
    p.add_argument("--acceptance", choices=("strict", "relaxed"), default="strict",
                   help="strict = lossless rejection sampling (default); relaxed = LOSSY (marked in every response)")
    p.add_argument("--relaxed-threshold", type=float_within(0.0, 1.0, low_open=True), default=0.1,
                   help="relaxed acceptance: accept a draft token whose target probability is >= this (default 0.1)")
    p.add_argument("--attention", choices=("exact", "sdpa"), default="exact",
                   help="exact = eager attention (C++ layer loop where it builds, default); sdpa = torch's "
                   "scaled_dot_product_attention at a padded width (exact too, slower here)")
    p.add_argument("--max-rows", type=int_within(1, 16), default=16,
                   help="rows per packed forward pass that the scheduler fills with draft tokens, 1..16 (default 16)")
    p.add_argument("--max-seqs", type=int_at_least(1), default=32, help="most requests in the batch at once (default 32)")
    p.add_argument("--threads", type=int_at_least(1), default=1, help="torch intra-op threads (default 1)")


def add_subcommands(sub) -> None:
    s = sub.add_parser("serve", help="OpenAI-compatible speculative server with continuous batching",
                       description="Serve SmolLM2-135M over an OpenAI-compatible API (chat and text completions, streaming), "
                       "with exact speculative decoding and continuous batching.")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    s.add_argument("--port", type=int_within(0, 65535), default=8000,
                   help="TCP port, 0..65535 (default 8000; 0 = any free port)")
    s.add_argument("--served-model-name", default="smollm2-135m-instruct", help="the model id clients send")
    s.add_argument("--default-max-tokens", type=int_at_least(1), default=256,
                   help="max_tokens when a request gives none")
    add_serve_options(s)
    s.set_defaults(func=serve_main, parser=s)

    from ..audit import add_parser as add_audit  # argparse only

    add_audit(sub)

    from .loadtest import add_parser as add_loadtest  # argparse only

    add_loadtest(sub)


def _config(args):
    from .server import ServeConfig

    return ServeConfig(
        model_name=getattr(args, "served_model_name", "smollm2-135m-instruct"), speculative=args.speculative,
        gamma=args.gamma, gate=args.gate, acceptance=args.acceptance, relaxed_threshold=args.relaxed_threshold,
        attention=args.attention, target=args.target, max_rows=args.max_rows, max_seqs=args.max_seqs,
        default_max_tokens=getattr(args, "default_max_tokens", 256),
    )


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the model loads (OSError names the cause)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def serve_main(args) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    parser = args.parser
    try:
        config = _config(args)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        import uvicorn
    except ImportError:
        parser.error("needs the serve extra: pip install 'spectool[serve]'")
    try:
        sock = _bind(args.host, args.port)
    except (OSError, UnicodeError) as exc:
        parser.error(f"argument --host/--port: cannot listen on {args.host}:{args.port}: "
                     f"{getattr(exc, 'strerror', None) or exc}")
    import torch

    from .server import build

    torch.set_num_threads(args.threads)
    app = build(config)
    server = uvicorn.Server(uvicorn.Config(app, log_level="info", lifespan="on", ws="none", loop="asyncio",
                                           http="h11"))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    return 0
