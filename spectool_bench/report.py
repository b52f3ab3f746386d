"""Summaries of benchmark runs: waste labelling, per-mode and per-shape tables, checks.

Pure functions over the run dictionaries that ``spectool_bench.runner`` records (times in
simulated seconds for simulated models). ``summarise`` gives the rows behind the
stdout table and the JSON report; ``render_blocks`` lays them out, naming the scorer,
as text lines and ``spectool.tables.Table`` s (``_table`` over a list of column specs);
``render_table`` is its plain text: fixed-width columns, each row splits on white space
into its values, so the tables stay easy to parse and to diff. On a terminal the CLI
shows the same blocks as rich tables.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any, Callable

from spectool.tables import Block, Column as TableColumn, Table, text

from .gaps import Gap
from .programs import MIXES, SHAPES

from .config import DECODINGS, MODES  # noqa: F401 (importable from here too)

if TYPE_CHECKING:  # pragma: no cover
    from .config import BenchConfig

_ORDER = DECODINGS + ("real",)  # "real": root model is a real (litellm) model


def label_waste(runs: list[dict[str, Any]]) -> None:
    """Mark each server request: launched during decoding or after the message; and
    'wasted' = a finished request beyond the baseline's calls of the same prompt in the
    same episode turn (the real calls are the same in every mode)."""
    base = {(r["decoding"], r["concurrency"], r.get("seed"), r.get("repeat")): r
            for r in runs if r["mode"] == "baseline"}
    for run in runs:
        ref = base.get((run["decoding"], run["concurrency"], run.get("seed"), run.get("repeat")))
        need = Counter((q["episode"], q["turn"], q["prompt_hash"]) for q in ref["requests"]
                       if q["kind"] == "sub") if ref else None
        ends = {}
        for e in run["episodes"]:
            for t in e["turns"]:
                if "stream_end" in t:
                    ends[(e["episode"], t["index"])] = e["t_start"] + t["stream_end"]
        for q in sorted(run["requests"], key=lambda q: q["t_submit"]):
            end = ends.get((q["episode"], q["turn"]))
            q["during_decoding"] = end is not None and q["t_submit"] < end - 1e-9
            if q["status"] == "cancelled":
                q["fate"] = "cancelled"
            elif need is None or q["kind"] != "sub":
                q["fate"] = "used"
            else:
                k = (q["episode"], q["turn"], q["prompt_hash"])
                q["fate"] = "used" if need[k] > 0 else "wasted"
                need[k] -= 1


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def summarise(cfg: BenchConfig, runs: list[dict[str, Any]],
              oracle: dict[tuple, float | None]) -> dict[str, Any]:
    rows, shape_rows = [], []
    groups = defaultdict(list)
    for run in runs:
        groups[(run["decoding"], run["concurrency"], run["mode"])].append(run)
    for (dec, conc, mode), rs in sorted(groups.items(), key=lambda kv: (
            _ORDER.index(kv[0][0]), kv[0][1], MODES.index(kv[0][2]))):
        base = groups.get((dec, conc, "baseline"))
        eps = [e for r in rs for e in r["episodes"]]
        speedups = []
        if base:
            bmap = {(r["seed"], r["repeat"]): r["wall"] for r in base}
            speedups = [bmap[(r["seed"], r["repeat"])] / r["wall"] for r in rs
                        if (r["seed"], r["repeat"]) in bmap and r["wall"] > 0]
        o_speed = None
        if conc == 1 and base:
            b_tot = sum(e["t_total"] for r in base for e in r["episodes"])
            o_tot = [oracle.get((dec, r["seed"], r["repeat"], e["episode"]))
                     for r in base for e in r["episodes"]]
            if o_tot and all(o is not None for o in o_tot):
                o_speed = b_tot / sum(o_tot)
        speed = _mean(speedups)
        van = groups.get(("vanilla", conc, "baseline"))
        e2e = None
        if van and dec != "real":  # both tiers: vs baseline with vanilla root decoding
            vmap = {(r["seed"], r["repeat"]): r["wall"] for r in van}
            e2e = _mean([vmap[(r["seed"], r["repeat"])] / r["wall"] for r in rs
                         if (r["seed"], r["repeat"]) in vmap and r["wall"] > 0])
        rows.append({
            "decoding": dec, "concurrency": conc, "mode": mode,
            "wall_s": _mean([r["wall"] for r in rs]), "speedup": speed,
            "speedup_vs_vanilla_baseline": e2e,
            "oracle_speedup": o_speed,
            "pct_of_oracle": speed / o_speed * 100 if speed and o_speed else None,
            "score_official": _mean([e["score_official"] for e in eps]),
            "score_lenient": _mean([e["score_lenient"] for e in eps]),
            "episodes": len(eps),
            **{k: sum(e["stats"].get(k, 0) for e in eps) for k in
               ("dispatched", "hits", "misses", "wasted", "evicted")},
            "sub_calls": sum(e["sub_calls"] for e in eps),
            "server_requests": sum(1 for r in rs for q in r["requests"] if q["kind"] == "sub"),
        })
    # per shape, concurrency 1
    by_shape = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if run["concurrency"] != min(cfg.concurrency):
            continue
        for e in run["episodes"]:
            by_shape[(run["decoding"], e["shape"])][run["mode"]].append(e)
    for (dec, shape), per_mode in sorted(by_shape.items(), key=lambda kv: (
            _ORDER.index(kv[0][0]), _shape_order(kv[0][1]))):
        row: dict[str, Any] = {"decoding": dec, "shape": shape}
        b = sum(e["t_total"] for e in per_mode.get("baseline", []))
        for mode in MODES:
            if mode in per_mode:
                row[f"{mode}_s"] = sum(e["t_total"] for e in per_mode[mode])
                row[f"{mode}_score"] = _mean([e["score_official"] for e in per_mode[mode]])
        if "spec" in per_mode:
            row["hits"] = sum(e["stats"].get("hits", 0) for e in per_mode["spec"])
            row["wasted"] = sum(e["stats"].get("wasted", 0) for e in per_mode["spec"])
            row["spec_speedup"] = b / row["spec_s"] if b and row["spec_s"] else None
            gaps = [e["gap"] for e in per_mode["spec"] if "gap" in e]
            if gaps and len(gaps) == len(per_mode["spec"]):
                row.update(_gap_sum(gaps))
        if min(cfg.concurrency) == 1 and "baseline" in per_mode:
            os_ = [oracle.get((dec, e["seed"], e.get("repeat", 0), e["episode"]))
                   for e in per_mode["baseline"]]
            if os_ and all(o is not None for o in os_) and sum(os_) > 0:
                row["oracle_speedup"] = b / sum(os_)
        shape_rows.append(row)
    return {"rows": rows, "shapes": shape_rows, "mixes": mix_rows(shape_rows),
            "checks": _checks(runs, rows)}


def _gap_sum(gaps: list[dict[str, Any]]) -> dict[str, Any]:
    """Episodes' gaps to the oracle (``spectool_bench.gaps``) summed: gap, closable,
    unclosable and per-cause seconds, and the dominant causes."""
    total = Gap()
    for g in gaps:
        total.add(Gap(g["gap_s"], dict(g["gap_causes"])))
    return {**total.to_dict(), "gap_dominant": [[c, v] for c, v in total.dominant()]}


def mix_rows(shape_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per decoding and mix (``programs.MIXES``): the shapes' times summed per mode, the
    speed-ups and the oracle bound over the same shapes."""
    out = []
    for dec in dict.fromkeys(r["decoding"] for r in shape_rows):
        for mix, shapes in MIXES.items():
            rs = [r for r in shape_rows if r["decoding"] == dec and r["shape"] in shapes]
            if not rs or any("baseline_s" not in r for r in rs):
                continue
            row: dict[str, Any] = {"decoding": dec, "mix": mix,
                                   "shapes": [r["shape"] for r in rs]}
            b = sum(r["baseline_s"] for r in rs)
            for mode in MODES:
                if all(f"{mode}_s" in r for r in rs):
                    row[f"{mode}_s"] = sum(r[f"{mode}_s"] for r in rs)
                    row[f"{mode}_speedup"] = b / row[f"{mode}_s"] if row[f"{mode}_s"] else None
            if all(r.get("oracle_speedup") for r in rs):
                row["oracle_speedup"] = b / sum(r["baseline_s"] / r["oracle_speedup"] for r in rs)
            out.append(row)
    return out


def _checks(runs: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Score identity across modes, and the issue's targets at the lowest concurrency."""
    by_key = defaultdict(dict)
    for run in runs:
        key = (run["decoding"], run["concurrency"], run["seed"], run["repeat"])
        by_key[key][run["mode"]] = {e["episode"]: e["score_official"] for e in run["episodes"]}
    identical = all(len({tuple(sorted(v.items())) for v in modes.values()}) == 1
                    for modes in by_key.values())
    targets = []
    conc = min((r["concurrency"] for r in rows), default=1)
    for r in rows:
        if r["mode"] == "spec" and r["concurrency"] == conc:
            targets.append({"decoding": r["decoding"], "concurrency": conc,
                            "spec_speedup": r["speedup"], "oracle_speedup": r["oracle_speedup"],
                            "pct_of_oracle": r["pct_of_oracle"],
                            "speedup_ge_1_5": None if r["speedup"] is None else r["speedup"] >= 1.5,
                            "ge_90pct_of_oracle": None if r["pct_of_oracle"] is None
                            else r["pct_of_oracle"] >= 90.0})
    return {"scores_identical_across_modes": identical, "targets": targets}


def _shape_order(shape: str) -> int:
    return SHAPES.index(shape) if shape in SHAPES else len(SHAPES)


def _fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


# A table column: (heading, width, alignment "<" or ">", row -> cell text). A cell is
# padded to the width (wider text is kept whole), so every row of a table lines up with
# its heading and splits on white space into the columns' values.
Column = tuple[str, int, str, Callable[[dict[str, Any]], str]]


def _num(key: str, spec: str = ".2f") -> Callable[[dict[str, Any]], str]:
    """A row's number at ``key`` formatted by ``spec``; "-" where absent or None."""
    return lambda r: _fmt(r.get(key), spec)


def _count(key: str) -> Callable[[dict[str, Any]], str]:
    """A row's count at ``key`` (0 where absent)."""
    return lambda r: str(r.get(key, 0))


def _text(key: str) -> Callable[[dict[str, Any]], str]:
    return lambda r: str(r[key])


def _table(columns: list[Column], rows: list[dict[str, Any]]) -> list[Block]:
    """The rows as a table (plain text: heading, rule as wide as the heading, a line per row)."""
    return [Table([TableColumn(name, width, align) for name, width, align, _ in columns],
                  [[cell(r) for _, _, _, cell in columns] for r in rows])]


def _run_columns(unit: str) -> list[Column]:
    """The per-mode table (one row per decoding, concurrency and mode)."""
    return [("decoding", 12, "<", _text("decoding")), ("conc", 5, ">", _text("concurrency")),
            (" mode", 10, "<", lambda r: " " + r["mode"]),
            ("wall " + unit, 11, ">", _num("wall_s", ".1f")), ("speedup", 9, ">", _num("speedup")),
            ("vs van", 8, ">", _num("speedup_vs_vanilla_baseline")),
            ("oracle", 8, ">", _num("oracle_speedup")), ("%orcl", 7, ">", _num("pct_of_oracle", ".0f")),
            ("score", 7, ">", _num("score_official", ".3f")),
            ("lenient", 8, ">", _num("score_lenient", ".3f")), ("calls", 7, ">", _text("sub_calls")),
            ("sent", 6, ">", _text("server_requests")), ("hits", 6, ">", _text("hits")),
            ("miss", 6, ">", _text("misses")), ("waste", 6, ">", _text("wasted")),
            ("evict", 6, ">", _text("evicted"))]


def _mode_columns(group: str, width: int) -> list[Column]:
    """Decoding, the ``group`` (shape or mix) and the three modes' wall seconds."""
    return [("decoding", 12, "<", _text("decoding")), (group, width, "<", _text(group)),
            ("baseline", 9, ">", _num("baseline_s", ".1f")), ("lazy", 8, ">", _num("lazy_s", ".1f")),
            ("spec", 8, ">", _num("spec_s", ".1f"))]


_SPEC_X: Column = ("spec x", 8, ">", _num("spec_speedup"))
_ORACLE_X: Column = ("oracle x", 9, ">", _num("oracle_speedup"))

_SHAPE_COLUMNS: list[Column] = _mode_columns("shape", 15) + [
    _SPEC_X, _ORACLE_X, ("hits", 6, ">", _count("hits")), ("waste", 6, ">", _count("wasted")),
    ("score", 7, ">", lambda r: _fmt(r.get("spec_score", r.get("baseline_score")), ".3f")),
    ("gap s", 7, ">", _num("gap_s")), ("closable s", 11, ">", _num("closable_s")),
    ("unclosable s", 13, ">", _num("unclosable_s"))]

_MIX_COLUMNS: list[Column] = _mode_columns("mix", 12) + [
    ("lazy x", 8, ">", _num("lazy_speedup")), _SPEC_X, _ORACLE_X]


def _loaded_columns(unit: str) -> list[Column]:
    """The loaded-server scenario (one row per mode and admission setting)."""
    return [("mode", 9, "<", _text("mode")),
            ("admission", 10, ">", lambda r: "on" if r["admission"] else "off"),
            ("wall " + unit, 11, ">", _num("wall_s", ".1f")), ("speed", 7, ">", _num("speed")),
            ("sent", 6, ">", _text("sent")),
            ("needed", 7, ">", lambda r: "-" if r["needed"] is None else str(r["needed"])),
            ("hits", 6, ">", _text("hits"))]


def render_table(cfg: BenchConfig, summary: dict[str, Any]) -> str:
    """The report as plain text (``table.txt``, and stdout when it is not a terminal)."""
    return text(render_blocks(cfg, summary))


def render_blocks(cfg: BenchConfig, summary: dict[str, Any]) -> list[Block]:
    """The report as text lines and tables (``spectool.tables.show`` prints it)."""
    unit = "sim s" if cfg.simulated else "s"
    label = ("SIMULATED models (spectool_bench.simulated): times are simulated seconds"
             if cfg.simulated else f"root={cfg.root_model or 'simulated'} "
                                   f"sub={cfg.sub_model or 'simulated'}")
    lines: list[Block] = [f"OOLONG-style benchmark [{label}]",
             f"dataset={cfg.dataset} context_tokens={list(cfg.context_tokens)} "
             f"seeds={list(cfg.seeds)} repeats={cfg.repeats} time_scale={cfg.time_scale} "
             f"tasks={getattr(cfg, 'tasks', 'synth')}",
             "score = official OOLONG-synth scorer (Pairs: set F1); lenient = lenient scorer",
             "speedup = vs baseline, same decoding; vs van = vs baseline with vanilla root "
             "decoding (both tiers); oracle = bound's speed-up (concurrency 1); "
             "%orcl = speedup / oracle; calls = sub-calls the cells made; sent = requests "
             "the server got (speculative ones included)",
             ""]
    lines += _table(_run_columns(unit), summary["rows"])
    if summary["shapes"]:
        lines += ["", f"per shape (concurrency {min(cfg.concurrency)}; time in {unit}; "
                      "oracle = speed-up bound if every call started when its arguments were known)"]
        width = max([15] + [len(r["shape"]) + 1 for r in summary["shapes"]])  # pairs-<shape> rows are longer
        columns = [(n, width, al, c) if n == "shape" else (n, w, al, c) for n, w, al, c in _SHAPE_COLUMNS]
        lines += _table(columns, summary["shapes"])
        lines += _gap_lines(summary["shapes"])
    if summary.get("mixes"):
        lines += ["", "per mix (the shapes' times summed; loop-heavy = "
                  + ", ".join(MIXES["loop-heavy"]) + "; batched = " + ", ".join(MIXES["batched"])
                  + ")"]
        lines += _table(_MIX_COLUMNS, summary["mixes"])
    if summary.get("loaded"):
        lines += ["", f"loaded server (SIMULATED server, latency x (1 + {cfg.loaded_alpha:g} (n - 1)) "
                      f"with n requests in service; shapes {', '.join(cfg.loaded_shapes)}; "
                      "concurrency 1, vanilla decoding; speed = baseline wall / wall; "
                      "sent = sub-model requests the server got, needed = baseline's)"]
        lines += _table(_loaded_columns(unit), summary["loaded"])
    checks = summary.get("checks")
    if checks:
        lines += ["", "scores identical across modes (same seed): "
                  + ("yes" if checks["scores_identical_across_modes"] else "NO")]
        for t in checks["targets"]:
            lines.append(
                f"target ({t['decoding']}, concurrency {t['concurrency']}): spec speed-up "
                f"{_fmt(t['spec_speedup'])} (>= 1.5: {_yn(t['speedup_ge_1_5'])}); "
                f"{_fmt(t['pct_of_oracle'], '.0f')}% of the oracle's {_fmt(t['oracle_speedup'])}x "
                f"(>= 90%: {_yn(t['ge_90pct_of_oracle'])})")
    return lines


def _gap_lines(shape_rows: list[dict[str, Any]]) -> list[str]:
    """Below the per-shape table: what the columns mean and each shape's dominant
    cause(s) of its gap, with seconds."""
    rows = [r for r in shape_rows if "gap_s" in r]
    if not rows:
        return []
    out = ["", "gap s = spec - oracle; closable s = admission declined + lookahead limit + "
           "shadow lag; unclosable s = not yet streamed + data dependency; the rest is other",
           "dominant causes of the gap (s):"]
    for r in rows:
        causes = ", ".join(f"{c} {v:.2f}" for c, v in r["gap_dominant"]) or "none"
        out.append(f"  {r['decoding']} {r['shape']}: {causes}")
    return out


def _yn(v):
    return "n/a" if v is None else ("yes" if v else "no")
