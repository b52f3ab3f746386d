"""What the ``token_spec`` commands that write a results file share to present it: the
results table as plain text (``table_formatter``) and matplotlib's pyplot for drawing the
figure into a file (``pyplot``)."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["table_formatter", "pyplot"]


def table_formatter(results_table: Callable) -> Callable[[dict], str]:
    """``format_table(result)``: the plain text of ``results_table(result)`` (a
    ``spectool.tables.Table``)."""
    def format_table(result: dict) -> str:
        """The results table as plain text."""
        from spectool.tables import text

        return text([results_table(result)])

    return format_table


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend: figures are written to files, never shown."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
