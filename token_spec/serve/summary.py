"""A short serving table from a ``loadtest.json``: ours against llama.cpp's server.

``token_spec loadtest --methods none,ngram,...,llamacpp --out DIR`` writes every row;
the README keeps only what a user deciding between the two servers reads: per
concurrency, the tok/s per client of our fastest exact method and of llama.cpp's
server, the aggregate tok/s of both, and each speculative method's tok/s over our
``none`` (the median of the paired per-repeat ratios, with their spread). Where the run
had the A/A control (``--control``), its ratio comes last: the run's noise floor.

``python -m token_spec.serve.summary FILE`` prints the markdown; the README's table is
that output for ``docs/results/serve_loadtest_1thread.json`` (a test checks it).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from spectool.tables import render_file_main

from ..report import load_average, markdown_table
from .loadtest import CONTROL

__all__ = ["render_summary", "main"]


def _rows_by(data: dict[str, Any]) -> dict[int, dict[str, dict[str, Any]]]:
    out: dict[int, dict[str, dict[str, Any]]] = {}
    for r in data["rows"]:
        out.setdefault(int(r["clients"]), {})[r["method"]] = r
    return out


def render_summary(data: dict[str, Any]) -> str:
    """The markdown table and the line naming the command that produced ``data``.

    Raises ``ValueError`` naming what is missing when the file has no ``none`` or no
    ``llamacpp`` rows (the table compares exactly those)."""
    by = _rows_by(data)
    if not by:
        raise ValueError("no rows")
    seen = {m for rows in by.values() for m in rows}
    spec = sorted(seen - {"none", "llamacpp", CONTROL}) + ([CONTROL] if CONTROL in seen else [])
    for c, rows in sorted(by.items()):
        for need in ("none", "llamacpp"):
            if need not in rows:
                raise ValueError(f"no {need!r} row at {c} clients")
    head = ["clients", "ours, best exact tok/s per client", "llama.cpp tok/s per client",
            "ours aggregate tok/s", "llama.cpp aggregate tok/s"]
    head += [f"{m} ÷ none" + (" (A/A: the noise)" if m == CONTROL else "") for m in spec]
    table = []
    for c, rows in sorted(by.items()):
        ours = max((r for m, r in rows.items() if m not in ("llamacpp", CONTROL)),
                   key=lambda r: r["tokens_per_s"])
        peer = rows["llamacpp"]
        cells = [str(c), f"{ours['tokens_per_s_per_client']:.1f} ({ours['method']})",
                 f"{peer['tokens_per_s_per_client']:.1f}", f"{ours['tokens_per_s']:.1f}",
                 f"{peer['tokens_per_s']:.1f}"]
        for m in spec:
            r = rows.get(m)
            cells.append("-" if r is None or r.get("vs_none") is None else
                         f"{r['vs_none']:.2f} ({r['vs_none_min']:.2f}–{r['vs_none_max']:.2f})")
        table.append(cells)
    cfg = data.get("config", {})
    return markdown_table(head, table, f"`{data['command']}`: {cfg.get('repeats', '?')} repeats interleaved, "
                          f"medians; {cfg.get('threads', '?')} thread(s) per server"
                          + load_average(data.get("environment", {})) + ".")


# main(argv=None) -> exit status: prints the table of the file named on the command line
main = partial(render_file_main, 'python -m token_spec.serve.summary',
               "Print the short serving table of a loadtest.json (ours against llama.cpp's server).",
               'a loadtest.json with none and llamacpp rows', render_summary)


if __name__ == "__main__":
    raise SystemExit(main())
