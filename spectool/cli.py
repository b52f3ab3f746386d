"""The ``spectool`` command line: a thin dispatcher.

    spectool --version
    spectool replay LOG [--out DIR] [--rate TOK_S] [--latency S] [--time-scale X]
                        [--harness rlm|verifiers|both] [--executor subprocess|inprocess] [--json]
    spectool bench oolong [...]      (provided by spectool_bench; see its cli module)

The core registers no benchmark itself and never imports ``spectool_bench``:
subcommands come from the ``spectool.commands`` entry-point group. Each entry point
is a ``register(subparsers)`` function that adds its subparser(s) and sets
``func=handler`` on them (``handler(args) -> int``; it reports a bad
flag with its own parser's ``error``). A provider that cannot
be imported (an extra not installed) still shows up, as a subcommand that says
what to install.

Shared by every CLI (``spectool``, its providers, ``token_spec``): ``ensure_writable_dir``
(an output folder is checked before any work starts, so a bad ``--out`` costs one
error line, not a lost run), ``OneLineErrorParser`` and ``run_interruptible`` (Ctrl-C
is one line and exit status 130); flag types live in ``spectool.arg_types`` and result
tables in ``spectool.tables``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from .arg_types import existing_file, nonnegative_float, positive_float

__all__ = ["main", "run_interruptible", "build_parser", "ensure_writable_dir", "version",
           "OneLineErrorParser",
           "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "spectool.commands"


def version() -> str:
    """The installed distribution's version ("unknown" when run from a bare checkout)."""
    try:
        return metadata.version("spectool")
    except metadata.PackageNotFoundError:  # pragma: no cover - not installed
        return "unknown"


def ensure_writable_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` if needed and prove a file can be written there.

    Raises ``ValueError`` with one line naming the problem (a file in the way, no
    permission, a read-only file system).
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"output folder {str(out)!r} exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise ValueError(f"output folder {str(out)!r} is not writable: "
                         f"{exc.strerror or exc}") from None
    return out


class OneLineErrorParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line: ``prog: error: ... (see prog --help)``.

    Subparsers made from it are of the same class.
    """

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _missing_provider(name: str, error: BaseException) -> Callable[[Any], None]:
    """A stand-in subcommand for a provider whose imports failed."""

    def register(subparsers: Any) -> None:
        parser = subparsers.add_parser(name, help=f"(unavailable: {error})", add_help=False)
        parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

        def handler(args: argparse.Namespace) -> int:
            parser.error(f"'spectool {name}' is unavailable: {error} "
                      f"(install the extra: pip install 'spectool[{name}]')")
            return 2

        parser.set_defaults(func=handler)

    return register


def _providers() -> list[tuple[str, Callable[[Any], None]]]:
    found = []
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            found.append((ep.name, ep.load()))
        except ImportError as exc:
            found.append((ep.name, _missing_provider(ep.name, exc)))
    return found


def _modes(text: str) -> tuple[str, ...]:
    """argparse type: comma-separated replay modes."""
    modes = tuple(m.strip() for m in text.split(",") if m.strip())
    bad = [m for m in modes if m not in ("baseline", "lazy", "spec")]
    if not modes or bad:
        raise argparse.ArgumentTypeError(f"choose from baseline, lazy, spec, not {text!r}")
    return modes


def _register_replay(subparsers: Any) -> None:
    """``spectool replay LOG``: the core's own subcommand (``spectool.replay``)."""
    rp = subparsers.add_parser(
        "replay", help="what-if replay of your own agent log through baseline / lazy / spec",
        description="Replay an agent log (OpenAI chat-completions messages, JSON or JSONL, "
                    "or spectool's replay JSONL) through baseline, lazy and spec with "
                    "SIMULATED tools (recorded or modelled latencies). See spectool.replay.")
    rp.add_argument("log", type=Path, help="the log file")
    rp.add_argument("--out", type=Path, default=None,
                    help="folder for replay.json, table.txt and timeline.png")
    rp.add_argument("--rate", type=positive_float, default=50.0,
                    help="model tokens per second when the log records none (default 50)")
    rp.add_argument("--latency", type=positive_float, default=2.0,
                    help="seconds per sub-call when the log records none (default 2)")
    rp.add_argument("--latency-per-ktok", type=nonnegative_float, default=0.0,
                    help="latency model: extra seconds per 1000 prompt tokens (default 0)")
    rp.add_argument("--time-scale", type=positive_float, default=1.0,
                    help="real seconds per log second (e.g. 0.1 replays 10x faster)")
    rp.add_argument("--context", type=existing_file, default=None,
                    help="a file whose text is the REPL's `context` (default: from the log)")
    rp.add_argument("--tool", action="append", default=None,
                    help="another speculatable one-argument tool the cells call (repeatable)")
    rp.add_argument("--harness", choices=("rlm", "verifiers", "both"), default="both",
                    help="the REPL namespace and tools the log's harness gave its cells: "
                         "rlm (context, llm_query, llm_query_batched, FINAL), verifiers "
                         "(extra_data, answer, llm_batch), or both (default)")
    rp.add_argument("--executor", choices=("subprocess", "inprocess"), default="subprocess",
                    help="where the log's cells run: subprocess (default: sandboxed) or "
                         "inprocess (in this process, as you: only for logs you trust)")
    rp.add_argument("--modes", type=_modes, default=("baseline", "lazy", "spec"),
                    help="comma-separated modes to replay (baseline always runs first; "
                         "default baseline,lazy,spec)")
    rp.add_argument("--time-limit", type=positive_float, default=3600.0,
                    help="real seconds the whole replay may take (default 3600)")
    rp.add_argument("--json", action="store_true",
                    help="print the report (replay.json's data) as JSON on stdout instead of the table")

    def handler(args: argparse.Namespace) -> int:
        from .replay import ReplayError, main as replay_main

        try:
            if args.out is not None:
                ensure_writable_dir(args.out)
            return replay_main(args)
        except (ReplayError, OSError, UnicodeDecodeError, ValueError) as exc:
            rp.error(str(exc))
            return 2

    rp.set_defaults(func=handler)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="spectool", description="spectool command line (speculative tool calling)")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}",
                        help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _register_replay(sub)
    for _name, register in _providers():
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse, run the subcommand; Ctrl-C prints one line and exits 130, removing an
    ``--out`` folder this run made and left empty."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "func", None)
    if handler is None:  # pragma: no cover - every registered subcommand sets func
        parser.error(f"no handler for {args.command!r}")
    return run_interruptible(f"spectool {args.command}", getattr(args, "out", None), lambda: handler(args))


def _is_interrupt(exc: BaseException) -> bool:
    """Ctrl-C: a ``KeyboardInterrupt``, also one that a task group (anyio, asyncio, trio)
    wrapped in an exception group, alone or beside the cancellations it caused."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    if isinstance(exc, BaseExceptionGroup):
        interrupts, _rest = exc.split(KeyboardInterrupt)
        return interrupts is not None
    return False


def run_interruptible(label: str, out: str | os.PathLike | None, run: Callable[[], int]) -> int:
    """``run()`` as a command: the one Ctrl-C handler of every CLI.

    On Ctrl-C (``KeyboardInterrupt``, also inside an anyio/asyncio/trio run and its
    exception groups) print one line, ``<label>: interrupted``, to stderr and return
    130. Whenever ``run`` does not return normally, an ``out`` folder that did not exist
    before and is still empty is removed (a folder that existed, or has content, stays).
    """
    # The event loop's modules (asyncio loads ssl, a C extension) are imported before the
    # command runs and makes its --out: a Ctrl-C that lands inside a C extension's import
    # can surface as an unrelated error instead of a KeyboardInterrupt. A command's own
    # heavy imports belong before its --out too.
    import asyncio  # noqa: F401

    fresh_out = out is not None and not Path(out).exists()
    try:
        return run()
    except BaseException as exc:
        if fresh_out:
            try:
                Path(out).rmdir()          # only if empty: nothing written is lost
            except OSError:
                pass
        if not _is_interrupt(exc):
            raise
        print(f"{label}: interrupted", file=sys.stderr, flush=True)
        _forget_interrupt()
        return 130


def _forget_interrupt() -> None:
    """Keep the exit status 130 after a Ctrl-C that was handled.

    CPython marks a ``KeyboardInterrupt`` as unhandled when it leaves any evaluation
    of source text (``exec`` of a string, which ``dataclasses`` and ``namedtuple``
    use to build methods at import time) and, at exit, may then end the process by
    SIGINT instead of with our status, even though the interrupt was caught further
    up. Evaluating source text again clears that mark.
    """
    exec("None")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
