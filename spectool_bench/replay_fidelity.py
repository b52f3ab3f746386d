"""Does ``spectool replay`` report what a direct run reports? Real logs, two ways.

    python -m spectool_bench.replay_fidelity run [--logs DIR] [--repeats 3]
        [--time-scale 0.02] [--out docs/results/replay_fidelity.json]
    python -m spectool_bench.replay_fidelity render [--data docs/results/replay_fidelity.json]

``run`` replays every real log in ``examples/real_logs`` (cells written by current
models in the verifiers RLM environment, with their recorded sub-call latencies;
``--harness verifiers``) twice per repeat, interleaved: once with the three modes
(baseline, lazy, spec) and once as a direct two-mode run (baseline, then spec). A
replay whose bookkeeping leaks between modes reports a different spec/baseline in the
three-mode run than in the two-mode one; the geomeans of the two must agree. The
tools are **simulated** (recorded latencies, placeholder answers); the model's text
streams at 50 tok/s (the logs record no rate). Writes the figures, with the command,
date, machine and load, as JSON; ``render`` prints them as a Markdown table.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from spectool.replay import load_log, replay

from .machine import describe
from .markdown import markdown_table, measured_on
from .module_cli import module_parser

__all__ = ["run", "render", "main"]

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "examples" / "real_logs"
DATA = ROOT / "docs" / "results" / "replay_fidelity.json"


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


async def _one(path: Path, modes: tuple[str, ...], time_scale: float) -> dict[str, Any]:
    report = await replay(load_log(path), modes=modes, harness="verifiers",
                          time_scale=time_scale)
    tot = report["total"]
    return {"baseline_s": tot["modes"]["baseline"]["wall_s"],
            "spec_s": tot["modes"]["spec"]["wall_s"],
            "spec_x": tot["modes"]["spec"]["speedup"], "bound_s": tot["bound_s"],
            "bound_x": tot["bound_speedup"], "hits": tot["modes"]["spec"]["hits"],
            "identical": tot["modes"]["spec"]["identical"],
            "latency_fallbacks": report["latency_fallbacks"]}


def run(logs: Path, repeats: int, time_scale: float) -> dict[str, Any]:
    paths = sorted(logs.glob("*.jsonl"))
    if not paths:
        raise SystemExit(f"replay_fidelity: error: no *.jsonl logs in {logs}")
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {
        p.name: {"three": [], "two": []} for p in paths}
    load = [os.getloadavg()[0]]
    for _ in range(repeats):
        for p in paths:                  # interleaved: three-mode, then two-mode
            rows[p.name]["three"].append(anyio.run(_one, p, ("baseline", "lazy", "spec"),
                                                   time_scale))
            rows[p.name]["two"].append(anyio.run(_one, p, ("baseline", "spec"), time_scale))
            load.append(os.getloadavg()[0])
    per_log = []
    for name, runs in rows.items():
        entry: dict[str, Any] = {"log": name}
        for kind in ("three", "two"):
            xs = [r["spec_x"] for r in runs[kind]]
            entry[f"{kind}_mode_spec_x"] = statistics.median(xs)
            entry[f"{kind}_mode_spec_x_range"] = [min(xs), max(xs)]
        entry["bound_x"] = statistics.median(r["bound_x"] for r in runs["three"])
        entry["hits"] = runs["three"][0]["hits"]
        entry["identical"] = all(r["identical"] for k in runs.values() for r in k)
        entry["latency_fallbacks"] = max(r["latency_fallbacks"] for k in runs.values()
                                         for r in k)
        per_log.append(entry)
    three = _geomean([e["three_mode_spec_x"] for e in per_log])
    two = _geomean([e["two_mode_spec_x"] for e in per_log])
    return {
        "command": "python -m spectool_bench.replay_fidelity run --repeats "
                   f"{repeats} --time-scale {time_scale:g}",
        "date": time.strftime("%Y-%m-%d"), "machine": describe(),
        "load_average": [min(load), max(load)],
        "simulated": "tools simulated: recorded per-element latencies, placeholder answers; "
                     "text streamed at 50 tok/s (the logs record no rate)",
        "repeats": repeats, "time_scale": time_scale, "logs": per_log,
        "geomean_three_mode_spec_x": three, "geomean_two_mode_spec_x": two,
        "three_over_two": three / two,
    }


def render(data: dict[str, Any]) -> str:
    rows: list[str] = []
    for e in data["logs"]:
        lo3, hi3 = e["three_mode_spec_x_range"]
        lo2, hi2 = e["two_mode_spec_x_range"]
        rows.append(f"| `{e['log']}` | {e['three_mode_spec_x']:.3f} ({lo3:.3f}–{hi3:.3f}) | "
                    f"{e['two_mode_spec_x']:.3f} ({lo2:.3f}–{hi2:.3f}) | "
                    f"{e['bound_x']:.3f} | {e['hits']} | "
                    f"{'yes' if e['identical'] else 'NO'} |")
    rows.append(f"| **geomean** | **{data['geomean_three_mode_spec_x']:.3f}** | "
                f"**{data['geomean_two_mode_spec_x']:.3f}** | | | |")
    lo, hi = data["load_average"]
    return markdown_table(
        ["log", "spec × (3-mode replay)", "spec × (direct 2-mode)", "bound ×", "hits", "identical"],
        rows, f"Medians of {data['repeats']} interleaved repeats (range in brackets); "
        f"three-mode / two-mode = {data['three_over_two']:.4f}. "
        f"{measured_on(data, f'{lo:.1f}–{hi:.1f}')}.")


def main(argv: list[str] | None = None) -> int:
    parser = module_parser("spectool_bench.replay_fidelity", __doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="replay the real logs three-mode and two-mode")
    r.add_argument("--logs", type=Path, default=LOGS, help="folder of replay JSONL logs")
    r.add_argument("--repeats", type=int, default=3, help="interleaved repeats (default 3)")
    r.add_argument("--time-scale", type=float, default=0.02,
                   help="real seconds per log second (default 0.02)")
    r.add_argument("--out", type=Path, default=DATA, help="where the JSON goes")
    d = sub.add_parser("render", help="print the Markdown table of a results file")
    d.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args(argv)
    if args.cmd == "run":
        if args.repeats < 1 or not (args.time_scale > 0 and math.isfinite(args.time_scale)):
            parser.error("--repeats must be >= 1 and --time-scale a finite number > 0")
        data = run(args.logs, args.repeats, args.time_scale)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        print(render(data))
        return 0
    print(render(json.loads(args.data.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
