"""What ``spectool replay`` reports: totals, the table, the JSON and the timeline.

The report is plain data (log seconds); :func:`format_table` prints it per turn and in
total, :func:`write_outputs` writes ``replay.json``, ``table.txt`` and
``timeline.png`` (matplotlib, imported only then).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .tables import Block, Column, Table, text

__all__ = ["totals", "format_table", "write_outputs"]


def totals(turns: list[dict[str, Any]], modes: tuple[str, ...]) -> dict[str, Any]:
    """The whole log's figures per mode, from the per-turn rows."""
    total: dict[str, Any] = {"modes": {}}
    for m in modes:
        ws = [t["modes"][m] for t in turns]
        total["modes"][m] = {
            "wall_s": sum(w["wall_s"] for w in ws), "hits": sum(w["hits"] for w in ws),
            "executions": sum(w["executions"] for w in ws),
            "wasted": sum(w["wasted"] for w in ws),
            "modelled_calls": sum(w["modelled_calls"] for w in ws),
            "identical": all(w["identical"] for w in ws)}
    b = total["modes"]["baseline"]["wall_s"]
    for m in modes:
        w = total["modes"][m]["wall_s"]
        total["modes"][m]["speedup"] = b / w if w > 0 else None
    total["bound_s"] = sum(t["bound_s"] for t in turns)
    total["bound_speedup"] = b / total["bound_s"] if total["bound_s"] > 0 else None
    return total



def format_table(report: dict[str, Any]) -> str:
    """The summary as plain text (``table.txt``, and stdout when it is not a terminal):
    one row per turn and one for the whole log."""
    return text(table_blocks(report))


def table_blocks(report: dict[str, Any]) -> list[Block]:
    """The summary as text lines and a table (``spectool.tables.show`` prints it)."""
    modes = report["modes"]
    lines: list[Block] = [
        f"spectool replay ({report['format']} log, {report['turns_replayed']} turns, "
        f"harness {report['harness']}, executor {report['executor']} (sandbox "
        f"{report['sandbox']}); SIMULATED tools: recorded or modelled latencies, "
        f"placeholder answers; {report['tokens_per_s']:g} tok/s unless the log says; "
        f"times in log seconds; self-checks {report['checks']})",
        "bound = no schedule can beat it (every call starts as soon as its tool is "
        "first named); wasted = executions beyond the baseline's; same = output "
        "identical to baseline"]
    columns = ([Column("turn", 4)] + [Column(m, 10) for m in modes] + [Column("bound", 8)]
               + [Column(m + " x", 9) for m in modes[1:]] + [Column("bound x", 9)]
               + [c for m in modes[1:] for c in (Column("hits " + m, 10), Column("waste", 6))]
               + [Column("same", 6)])

    def row(label: str, bound: float, bound_x: float | None, per: dict[str, Any]) -> list[str]:
        cells = [label] + [f"{per[m]['wall_s']:.2f}" for m in modes] + [f"{bound:.2f}"]
        cells += [f"{per[m]['speedup'] or 0:.2f}" for m in modes[1:]] + [f"{bound_x or 0:.2f}"]
        cells += [str(c) for m in modes[1:] for c in (per[m]["hits"], per[m]["wasted"])]
        return cells + ["yes" if all(per[m]["identical"] for m in modes) else "NO"]

    tot = report["total"]
    turns = Table(columns, [row(str(t["turn"]), t["bound_s"], t["bound_speedup"], t["modes"])
                            for t in report["turns"]],
                  totals=[row("all", tot["bound_s"], tot["bound_speedup"], tot["modes"])])
    return lines + [turns] + [f"warning: {w}" for w in report.get("warnings", ())]


def write_outputs(report: dict[str, Any], out: str | Path) -> list[Path]:
    """``replay.json``, ``table.txt`` and ``timeline.png`` in ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "replay.json", out / "table.txt", out / "timeline.png"]
    paths[0].write_text(json.dumps(report, indent=1))
    paths[1].write_text(format_table(report) + "\n")
    _timeline(report, paths[2])
    return paths


def _timeline(report: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes, turns = report["modes"], report["turns"]
    fig, axes = plt.subplots(len(turns), 1, figsize=(10, 1.2 + 1.1 * len(modes) * len(turns)),
                             squeeze=False)
    colours = {"llm_query": "#2ca02c"}
    for ax, t in zip(axes[:, 0], turns):
        for y, m in enumerate(modes):
            r = t["modes"][m]
            ax.barh(y, r["t_stream_s"], left=0, height=0.8, color="#cccccc")
            spans = r["spans"]
            for k, (name, a, b) in enumerate(spans):
                h = 0.6 / max(1, len(spans))
                ax.barh(y - 0.3 + h * (k + 0.5), b - a, left=a, height=h,
                        color=colours.get(name, "#1f77b4"))
            ax.plot([r["wall_s"]] * 2, [y - 0.45, y + 0.45], color="black", lw=1.5)
        ax.axvline(t["bound_s"], color="#d62728", ls="--", lw=1)
        ax.set_yticks(range(len(modes)), modes)
        ax.set_title(f"turn {t['turn']}: grey = streaming, bars = tool executions, "
                     f"| = turn end, dashed = bound", fontsize=8)
    axes[-1, 0].set_xlabel("log seconds (SIMULATED tools)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
