"""Checked argparse types shared by every command line (``spectool``, ``spectool bench``,
``token_spec``).

Each is a callable ``text -> value`` that raises ``argparse.ArgumentTypeError`` with a
short reason; argparse prefixes the flag's name, so a bad value costs one line naming
the flag (``token_spec serve: error: argument --port: must be within 0..65535, got 99999``)
and exit status 2, before any model loads. Standard library only: ``--help`` and flag
checks import nothing heavy.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["int_within", "int_at_least", "float_within", "positive_float", "nonnegative_float", "comma_list",
           "int_list", "http_url", "existing_file", "existing_path"]


def int_within(low: int, high: int | None = None):
    """An integer in ``low..high`` (``high`` None: no upper bound)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"within {low}..{high}" if high is not None else f">= {low}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value

    parse.__name__ = f"int>={low}" if high is None else f"int{low}..{high}"
    return parse


def int_at_least(low: int):
    """An integer >= ``low``."""
    return int_within(low)


def float_within(low: float, high: float | None = None, *, low_open: bool = False):
    """A number in ``low..high`` (``low_open``: strictly above ``low``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        above = value > low if low_open else value >= low
        if not (math.isfinite(value) and above and (high is None or value <= high)):
            if high is not None and not low_open:
                bound = f"within {low:g}..{high:g}"
            else:
                above_text = f"{'>' if low_open else '>='} {low:g}"
                bound = f"{above_text} and <= {high:g}" if high is not None else above_text
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value

    parse.__name__ = "float"
    return parse


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = _finite(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def nonnegative_float(text: str) -> float:
    """A finite number >= 0."""
    value = _finite(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def comma_list(allowed):
    """A comma list of names from ``allowed`` (each once, order kept)."""
    def parse(text: str) -> str:
        names = [n for n in text.split(",") if n]
        bad = [n for n in names if n not in allowed]
        if not names or bad:
            raise argparse.ArgumentTypeError(f"unknown {bad or 'empty list'}; choose from {sorted(allowed)}")
        return ",".join(dict.fromkeys(names))

    parse.__name__ = "list"
    return parse


def int_list(low: int = 0):
    """A comma list of integers >= ``low`` (thread counts, client counts)."""
    def parse(text: str) -> str:
        items = [t for t in text.split(",") if t]
        if not items or not all(t.isdigit() and int(t) >= low for t in items):
            raise argparse.ArgumentTypeError(f"not a comma list of integers >= {low}: {text!r}")
        return ",".join(dict.fromkeys(items))

    parse.__name__ = "list"
    return parse


def http_url(text: str) -> str:
    """An ``http://`` or ``https://`` URL with a host (and a valid port, if given)."""
    try:
        parts = urlsplit(text)
        port = parts.port  # ValueError for a port that is not a number or out of range
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"malformed URL {text!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"malformed URL {text!r}: need http://HOST[:PORT]/...")
    del port
    return text


def existing_file(text: str) -> Path:
    """A path to a file that exists and can be read."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text!r}" if not path.exists()
                                         else f"not a file: {text!r}")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"cannot read {text!r}")
    return path


def existing_path(text: str) -> Path:
    """A path (file or folder) that exists."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no such file or folder: {text!r}")
    return path
