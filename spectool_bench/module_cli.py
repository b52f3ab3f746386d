"""The command line of a benchmark module run as ``python -m spectool_bench.<module>``."""

from __future__ import annotations

import argparse

__all__ = ["module_parser"]


def module_parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of ``python -m <module>``, described by the first paragraph of the
    module's docstring ``doc``."""
    return argparse.ArgumentParser(prog=f"python -m {module}", description=(doc or "").split("\n\n")[0])
