"""Both tiers for real: ``spectool bench oolong --sub-model local``.

Starts two of the project's own OpenAI-compatible token-tier servers on 127.0.0.1
(``spectool_bench.local_server``): one with speculative decoding off
(``--speculative none``) and one with it on (``--speculative <method>``), and sends
the OOLONG episodes' sub-calls to them through litellm. The root model stays
**simulated** (``SimulatedRootModel``: scripted RLM programs streamed at a simulated
decoding speed in real time); the table says so.

Both servers run the same engine (``--target``, default ``bf16-q4``: Q4_1 layers and a
Q8_0 head, the fast exact path) at the same thread count, so the only difference
between them is speculation.

The 2x2: token speculation off/on x tool speculation off/on (runtime mode
``baseline`` / ``spec``). Every combination is warmed up once (untimed) before
timing; each repeat runs the four combinations interleaved, in an order rotated by
one per repeat. Reported per combination: median wall seconds and the [min, max]
spread; per ratio to (token off, tool off): the median of the per-repeat ratios and
their spread, flagged ``overlaps 1.0`` when the spread includes 1.0 (not a
measurable difference on this machine).

``run`` results are data: ``--out DIR`` writes ``DIR/two_tier.json`` with the command,
date, machine and load average, and :func:`render_markdown` renders the docs' table
from such a file (``python -m spectool_bench.two_tier render FILE``).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from dataclasses import dataclass, replace
from datetime import date
from typing import Any

import anyio

from spectool.tables import Block, Column, Table, text

from .local_server import LocalTokenServer
from .machine import describe
from .markdown import at_start_and_end, markdown_table, measured_on

COMBOS = (("off", "baseline"), ("off", "spec"), ("on", "baseline"), ("on", "spec"))


@dataclass
class TwoTierConfig:
    token_method: str = "ngram"
    gamma: int = 4
    target: str = "bf16-q4"         # both servers' --target
    threads: int = 1                # both servers' --threads
    repeats: int = 2
    max_tokens: int = 24
    context_tokens: int = 1024
    shapes: tuple[str, ...] = ("loop_blocking", "batched")
    seed: int = 0
    command: list[str] | None = None       # the server command (default: token_spec)
    health_timeout_s: float = 300.0
    root_time_scale: float = 1.0    # <1 streams the simulated root faster (tests)
    progress: bool = False          # a line on stderr per timed run


def _rotated(items: tuple, k: int) -> tuple:
    k %= len(items)
    return items[k:] + items[:k]


def spread_overlaps_one(lo: float, hi: float) -> bool:
    """A ratio whose [min, max] over repeats contains 1.0 is not a measured difference."""
    return lo <= 1.0 <= hi


async def run_two_tier(tcfg: TwoTierConfig) -> dict[str, Any]:
    from spectool_agents.models import aclose_litellm, import_litellm

    from .runner import BenchConfig, make_workload, run_once

    await anyio.to_thread.run_sync(import_litellm)
    base_cfg = BenchConfig(context_tokens=(tcfg.context_tokens,), shapes=tcfg.shapes,
                           decoding=("vanilla",), concurrency=(1,), modes=("baseline", "spec"),
                           time_scale=tcfg.root_time_scale, seeds=(tcfg.seed,), progress=False, plots=False,
                           loaded_alpha=None, sub_model="local")
    episodes = make_workload(replace(base_cfg, sub_model=None), tcfg.seed)
    walls: dict[tuple[str, str], list[float]] = {c: [] for c in COMBOS}
    scores: dict[tuple[str, str], list[float]] = {c: [] for c in COMBOS}
    try:
        engine = ["--target", tcfg.target, "--threads", str(tcfg.threads)]
        async with LocalTokenServer("none", gamma=tcfg.gamma, model_name="local-vanilla",
                                    command=tcfg.command, extra_args=engine,
                                    health_timeout_s=tcfg.health_timeout_s) as off, \
                LocalTokenServer(tcfg.token_method, gamma=tcfg.gamma,
                                 model_name=f"local-{tcfg.token_method}", command=tcfg.command,
                                 extra_args=engine,
                                 health_timeout_s=tcfg.health_timeout_s) as on:
            servers = {"off": off, "on": on}

            def cfg_for(token: str) -> BenchConfig:
                srv = servers[token]
                return replace(base_cfg, sub_model=srv.litellm_model,
                               model_kwargs={**srv.litellm_kwargs(),
                                             "max_tokens": tcfg.max_tokens, "temperature": 0})

            for token, mode in COMBOS:                      # warm-up, untimed
                await run_once(cfg_for(token), episodes[:1], mode, "vanilla", 1)
            for r in range(tcfg.repeats):
                for token, mode in _rotated(COMBOS, r):
                    run = await run_once(cfg_for(token), episodes, mode, "vanilla", 1)
                    walls[(token, mode)].append(run["wall"])
                    if tcfg.progress:
                        print(f"repeat {r + 1}/{tcfg.repeats}: token speculation {token}, "
                              f"tool {mode}: {run['wall']:.2f} s", file=sys.stderr, flush=True)
                    scores[(token, mode)].append(statistics.fmean(
                        e["score_official"] for e in run["episodes"]))
    finally:
        await aclose_litellm()
    ref = walls[("off", "baseline")]
    rows = []
    for combo in COMBOS:
        ws = walls[combo]
        ratios = [b / w for b, w in zip(ref, ws) if w > 0]
        lo, hi = min(ratios), max(ratios)
        rows.append({"token_spec": combo[0], "tool_spec": combo[1] == "spec", "mode": combo[1],
                     "wall_median_s": statistics.median(ws), "wall_min_s": min(ws),
                     "wall_max_s": max(ws), "speedup_median": statistics.median(ratios),
                     "speedup_min": lo, "speedup_max": hi,
                     "overlaps_1": combo != ("off", "baseline") and spread_overlaps_one(lo, hi),
                     "score": statistics.fmean(scores[combo])})
    return {"root_model": "SIMULATED (spectool_bench.simulated.SimulatedRootModel, real time)",
            "sub_model": "token_spec serve (SmolLM2-135M-Instruct) through litellm",
            "token_method": tcfg.token_method, "gamma": tcfg.gamma, "target": tcfg.target,
            "threads": tcfg.threads, "repeats": tcfg.repeats,
            "shapes": list(tcfg.shapes), "context_tokens": tcfg.context_tokens,
            "max_tokens": tcfg.max_tokens, "rows": rows}


def render_two_tier(report: dict[str, Any]) -> str:
    """The 2x2 table as plain text."""
    return text(two_tier_blocks(report))


def two_tier_blocks(report: dict[str, Any]) -> list[Block]:
    """The 2x2 table as text lines and a ``spectool.tables.Table``."""
    lines: list[Block] = [
        f"both tiers: root model {report['root_model']}; sub-model {report['sub_model']}",
        f"token speculation on = --speculative {report['token_method']} --gamma "
        f"{report['gamma']}; both servers --target {report.get('target', 'bf16')} "
        f"--threads {report.get('threads', 1)}; shapes {', '.join(report['shapes'])}; "
        f"{report['context_tokens']} context tokens; max_tokens {report['max_tokens']}; "
        f"{report['repeats']} repeats, interleaved, order rotated; warm-up untimed; "
        "wall seconds (real)",
        ""]
    columns = [Column("token spec", 11, "<"), Column("tool spec", 10, "<"), Column("wall med", 9),
               Column("[min, max]", 16), Column("speed-up", 9), Column("[min, max]", 14),
               Column("  note", 0, "<")]
    rows = [[r["token_spec"], "on" if r["tool_spec"] else "off", f"{r['wall_median_s']:.2f}",
             f"[{r['wall_min_s']:.2f}, {r['wall_max_s']:.2f}]", f"{r['speedup_median']:.2f}",
             f"[{r['speedup_min']:.2f}, {r['speedup_max']:.2f}]",
             "  spread overlaps 1.0" if r["overlaps_1"] else "  "]
            for r in report["rows"]]
    return lines + [Table(columns, rows)]


def render_markdown(report: dict[str, Any]) -> str:
    """The docs' table of a ``two_tier.json``: one row per combination, then the line
    that says how it was measured."""
    rows: list[str] = []
    for r in report["rows"]:
        note = " (spread overlaps 1.0)" if r["overlaps_1"] else ""
        rows.append(
            f"| {r['token_spec']} | {'on' if r['tool_spec'] else 'off'} "
            f"| {r['wall_median_s']:.2f} [{r['wall_min_s']:.2f}, {r['wall_max_s']:.2f}] "
            f"| {r['speedup_median']:.2f} [{r['speedup_min']:.2f}, {r['speedup_max']:.2f}]{note} "
            f"| {r['score']:.3f} |")
    load = report.get("load_average")
    return markdown_table(
        ["token speculation", "tool speculation", "wall s, median [min, max]",
         "× (off, off), median [min, max]", "mean score"],
        rows, measured_on(report, at_start_and_end(load) if load else None)
              + f"; root model {report['root_model']}; sub-model {report['sub_model']}, "
              f"both servers `--target {report['target']} --threads {report['threads']}`, "
              f"the 'on' server `--speculative {report['token_method']} --gamma "
              f"{report['gamma']}`; shapes {', '.join(report['shapes'])}, "
              f"{report['context_tokens']} context tokens, max_tokens {report['max_tokens']}, "
              f"{report['repeats']} repeats interleaved.")


def main_two_tier(tcfg: TwoTierConfig, out: str | os.PathLike | None = None,
                  command: str | None = None) -> dict[str, Any]:
    start_load = os.getloadavg()[0]
    report = anyio.run(run_two_tier, tcfg)     # asyncio: litellm needs it
    report.update(command=command or "spectool bench oolong --sub-model local",
                  date=date.today().isoformat(), machine=describe(),
                  load_average=[start_load, os.getloadavg()[0]])
    if out is not None:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "two_tier.json"), "w") as f:
            json.dump(report, f, indent=1)
    report["table"] = render_two_tier(report)
    return report


def main(argv: list[str] | None = None) -> int:
    """``python -m spectool_bench.two_tier render FILE``: the docs' table of a results file."""
    from spectool.tables import render_file_main

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["render"]:
        argv = argv[1:]
    return render_file_main("python -m spectool_bench.two_tier render",
                            "Render the docs' table of a two_tier.json.",
                            "a two_tier.json written by spectool bench oolong --sub-model "
                            "local --out DIR", render_markdown, argv)


if __name__ == "__main__":
    raise SystemExit(main())
