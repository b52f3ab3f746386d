"""A command line's ``main`` called in-process, as its user would call it: the exit
status and what it printed, the one-line error a bad command line must cost, and the
bad flag values a test feeds it."""

from __future__ import annotations

import pytest


def exit_of(main, argv: list[str], capsys) -> tuple[object, str, str]:
    """Call ``main(argv)``, which must exit (raise ``SystemExit``): its exit code, then
    what it wrote to stdout and to stderr."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    captured = capsys.readouterr()
    return exc.value.code, captured.out, captured.err


def one_line_error(main, argv: list[str], capsys, out: str | None = None) -> str:
    """``main(argv)`` exits with status 2 having written one line to stderr (and, where
    ``out`` is given, exactly ``out`` to stdout): that line."""
    code, printed, err = exit_of(main, argv, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    if out is not None:
        assert printed == out
    return lines[0]


def flag_cases(bad: dict[str, tuple[str, ...]]) -> list:
    """Parameters ``(argv, named)``: each bad value of each flag, and the flag that its
    error line must name."""
    return [pytest.param([flag, value], flag, id=f"{flag} {value}")
            for flag, values in bad.items() for value in values]
