"""PNG plots of an OOLONG benchmark report (matplotlib, Agg backend).

* ``walltime.png``: per mode wall time and speed-up vs baseline for every (decoding,
  concurrency), with the oracle bound's speed-up where it is defined.
* ``timeline_<shape>.png``: per-turn timelines of one episode per shape (lowest
  concurrency, first decoding, first seed/repeat), one panel per mode: decoding
  spans of the root model, each sub-call / tool call as a bar (launched while the
  message was still decoding vs after it ended; used, wasted or cancelled).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

_MODE_COLORS = {"baseline": "#888888", "lazy": "#4c72b0", "spec": "#dd8452"}
_FATE = {("used", True): "#2ca02c", ("used", False): "#1f77b4",
         ("wasted", True): "#d62728", ("wasted", False): "#d62728",
         ("cancelled", True): "#ff9896", ("cancelled", False): "#ff9896"}


def _title_label(report: dict[str, Any]) -> str:
    return "SIMULATED models" if report["models"] == "simulated" else "real models"


def plot_walltime(report: dict[str, Any], path: Path) -> Path:
    rows = report["summary"]["rows"]
    order = ("vanilla", "speculative", "real")
    groups = sorted({(r["decoding"], r["concurrency"]) for r in rows},
                    key=lambda g: (order.index(g[0]) if g[0] in order else 9, g[1]))
    modes = [m for m in ("baseline", "lazy", "spec") if any(r["mode"] == m for r in rows)]
    fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(groups)), 4.2))
    width = 0.8 / max(len(modes), 1)
    for gi, g in enumerate(groups):
        for mi, mode in enumerate(modes):
            r = next((x for x in rows if (x["decoding"], x["concurrency"], x["mode"]) == (*g, mode)), None)
            if r is None or r["wall_s"] is None:
                continue
            x = gi + (mi - (len(modes) - 1) / 2) * width
            ax.bar(x, r["wall_s"], width, color=_MODE_COLORS[mode],
                   label=mode if gi == 0 else None)
            if r["speedup"] is not None:
                ax.text(x, r["wall_s"], f"{r['speedup']:.2f}x", ha="center", va="bottom", fontsize=7)
        orc = next((x["oracle_speedup"] for x in rows
                    if (x["decoding"], x["concurrency"]) == g and x["oracle_speedup"]), None)
        base = next((x["wall_s"] for x in rows
                     if (x["decoding"], x["concurrency"], x["mode"]) == (*g, "baseline")), None)
        if orc and base:
            ax.hlines(base / orc, gi - 0.45, gi + 0.45, colors="k", linestyles="dashed",
                      label="oracle bound" if gi == 0 else None)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{d}\nconcurrency {c}" for d, c in groups], fontsize=8)
    ax.set_ylabel(f"wall time ({report['time_unit']})")
    ax.set_title(f"OOLONG-style benchmark: wall time and speed-up vs baseline [{_title_label(report)}]",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_timeline(report: dict[str, Any], shape: str, path: Path) -> Path | None:
    runs = report["runs"]
    if not runs:
        return None
    conc = min(r["concurrency"] for r in runs)
    dec = runs[0]["decoding"]
    seed, rep = runs[0]["seed"], runs[0]["repeat"]
    chosen = [r for r in runs if (r["concurrency"], r["decoding"], r["seed"], r["repeat"])
              == (conc, dec, seed, rep)]
    panels = []
    for run in chosen:
        ep = next((e for e in run["episodes"] if e["shape"] == shape), None)
        if ep is not None:
            panels.append((run, ep))
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 1.9 + 1.6 * len(panels)), squeeze=False)
    t_max = max(e["t_total"] for _, e in panels)
    for ax, (run, ep) in zip(axes[:, 0], panels):
        t0 = ep["t_start"]
        y = 0
        labels = []
        for turn in ep["turns"]:
            if "stream_start" in turn:
                ax.barh(y, turn["stream_end"] - turn["stream_start"], left=turn["stream_start"],
                        color="#9467bd", height=0.8)
            labels.append(f"turn {turn['index']} decode")
            y += 1
            reqs = [q for q in run["requests"] if q["episode"] == ep["episode"]
                    and q["turn"] == turn["index"] and q["t_start"] is not None]
            for q in sorted(reqs, key=lambda q: q["t_submit"]):
                color = _FATE[(q.get("fate", "used"), bool(q.get("during_decoding")))]
                hatch = "//" if q["kind"] == "tool" else None
                ax.barh(y, q["t_end"] - q["t_start"], left=q["t_start"] - t0, color=color,
                        height=0.8, hatch=hatch)
                ax.plot([q["t_submit"] - t0, q["t_start"] - t0], [y, y], color="k", lw=0.5)
                labels.append("")
                y += 1
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=6)
        ax.invert_yaxis()
        ax.set_xlim(0, t_max * 1.02)
        s = ep["stats"]
        ax.set_title(f"{run['mode']}: {ep['t_total']:.1f} {report['time_unit']}, hits "
                     f"{s.get('hits', 0)}, misses {s.get('misses', 0)}, wasted {s.get('wasted', 0)}, "
                     f"evicted {s.get('evicted', 0)}", fontsize=8)
    axes[-1, 0].set_xlabel(f"time since episode start ({report['time_unit']})")
    handles = [Patch(color="#9467bd", label="root decoding"),
               Patch(color=_FATE[("used", True)], label="call launched while decoding (speculative)"),
               Patch(color=_FATE[("used", False)], label="call launched after the message"),
               Patch(color=_FATE[("wasted", True)], label="wasted (finished, unclaimed)"),
               Patch(color=_FATE[("cancelled", True)], label="cancelled"),
               Patch(facecolor="white", edgecolor="k", hatch="//", label="non-speculatable tool")]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=7)
    fig.suptitle(f"Per-turn timeline, shape '{shape}', {dec} decoding, concurrency {conc} "
                 f"[{_title_label(report)}]", fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 0.96))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_plots(report: dict[str, Any], out: Path) -> list[Path]:
    out = Path(out)
    paths = [plot_walltime(report, out / "walltime.png")]
    shapes = []
    for run in report["runs"]:
        for e in run["episodes"]:
            if e["shape"] not in shapes:
                shapes.append(e["shape"])
    for shape in shapes:
        p = plot_timeline(report, shape, out / f"timeline_{shape}.png")
        if p is not None:
            paths.append(p)
    return paths
