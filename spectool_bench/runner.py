"""`spectool bench oolong`: run the OOLONG-style benchmark in baseline / lazy / spec.

Workload: for each seed and context size, one generated window (seed *i* = the *i*-th
window the official subsample keeps, ``oolong.generator.kept_window``; ``all_windows``
keeps every window with all its questions); for each program shape
(``spectool_bench.programs.SHAPES``) one question from it (label shapes rotate over the
tasks that need labels; ``pure_python`` takes a label-free task). ``tasks`` picks the
question set: ``synth`` (the OOLONG-synth questions, the default), ``pairs`` (the 20
OOLONG-Pairs tasks, ``oolong.pairs``: per label shape one task, rotating over the 20;
the program classifies each user's lines with sub-calls and builds the pairs in code;
scored by ``pairs_f1``) or ``both``. Each (question, shape) is an *episode*: a ``spectool_agents.ReplAgent`` run with a root model and a
sub-model. By default both are **simulated** (``spectool_bench.simulated``) and every
latency is slept at ``time_scale`` of its simulated value; all times reported are
*simulated seconds* (wall seconds / time_scale). With ``--root-model`` /
``--sub-model`` (litellm model strings) the real models are used through the agents
package's litellm adapters; times are then wall seconds.

A *run* is one (decoding, concurrency, mode, seed, repeat): its episodes go through
one shared simulated server with at most ``concurrency`` episodes in flight; its wall
time is the makespan. Speed-up = baseline wall / mode wall for the same (decoding,
concurrency, seed, repeat). The oracle bound (``spectool_bench.oracle``) is computed for
concurrency 1 from the baseline run's recorded call works and the deterministic stream
schedules; each spec episode at concurrency 1 also gets its gap to that bound by cause,
read from the run's trace (``spectool_bench.gaps``). Scores: official OOLONG-synth
scorer (Pairs questions: set F1), and the lenient variant; every output names its
scorer.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio

from .oolong import generate_window, score
from .oolong.generator import kept_window
from .oolong.model import Question, Window
from .oolong.pairs import pairs_questions
from .gaps import EventLog, episode_gap
from .oracle import OracleTurn, oracle_turn
from .programs import GUIDE_TOOL_S, SHAPES, Program, build_program
from .config import DECODINGS, MODES, TASKS, BenchConfig  # noqa: F401 (importable from here too)
from .report import label_waste, render_table, summarise
from .simulated import (SIMULATED, DecodingModel, SimulatedRootModel, SimulatedServer,
                        SimulatedSubModel, SimulatedToolLatency)

GUIDE_TEXT = ("Labelling guide: read each line's instance text and pick the single best "
              "label from the list; never skip a line.\n")


@dataclass
class EpisodeSpec:
    eid: str
    window: Window
    question: Question
    shape: str
    program: Program | None
    tokens_per_s: float
    seed: int
    kind: str = "synth"  # "synth" | "pairs"

    @property
    def label(self) -> str:
        """The shape name reports use (Pairs episodes: ``pairs-<shape>``)."""
        return self.shape if self.kind == "synth" else f"pairs-{self.shape}"


def window_for(cfg: BenchConfig, context_tokens: int, seed: int) -> Window:
    """The generated window of ``seed``: the ``seed``-th one the official subsample keeps
    (``kept_window``), or with ``all_windows`` the generator's own ``seed`` with every
    question even when the official subsample would drop it."""
    if not cfg.all_windows:
        return kept_window(cfg.dataset, context_tokens, seed)
    window = generate_window(cfg.dataset, context_tokens, seed)
    if window.dropped:
        window.questions = list(window.all_questions)
    return window


def make_workload(cfg: BenchConfig, seed: int) -> list[EpisodeSpec]:
    """The episodes of one seed (deterministic)."""
    episodes = []
    if cfg.data is not None:  # official files: seed i = the i-th window of each length
        from .oolong.loader import select_windows

        windows = select_windows(cfg.data, cfg.context_tokens, seed)
    else:
        windows = [window_for(cfg, L, seed) for L in cfg.context_tokens]
    for window in windows:
        L = window.context_tokens or cfg.context_tokens[0]
        rng = random.Random(f"workload:{cfg.dataset}:{L}:{seed}")
        pairs = pairs_questions(window) if cfg.tasks != "synth" else []
        if cfg.root_model is not None:  # a real root model writes its own programs
            synth = window.questions if cfg.tasks != "pairs" else []
            for kind, qs in (("synth", synth), ("pairs", pairs)):
                for q in qs[:cfg.max_questions]:
                    episodes.append(EpisodeSpec(
                        f"s{seed}-{L // 1024}K-{q.task}-{len(episodes)}", window, q,
                        "model-written", None, 0.0, seed, kind))
            continue
        if cfg.tasks == "pairs":
            episodes += _pairs_episodes(cfg, window, pairs, seed, rng)
            continue
        labelled = [q for q in window.questions if q.needs_labels]
        # label-free questions rarely survive OOLONG's 25-question cut: draw from all
        free = [q for q in window.all_questions if not q.needs_labels]
        rng.shuffle(labelled)
        k = 0
        for shape in cfg.shapes:
            if shape == "pure_python":
                if not free:
                    continue
                q = free[rng.randrange(len(free))]
            else:
                q = labelled[k % len(labelled)]
                k += 1
            program = build_program(window, q, shape, seed) if cfg.root_model is None else None
            eid = f"s{seed}-{L // 1024}K-{shape}"
            episodes.append(EpisodeSpec(eid, window, q, shape, program,
                                        rng.uniform(50.0, 150.0), seed))
        if cfg.tasks == "both":
            episodes += _pairs_episodes(cfg, window, pairs, seed, rng)
    return episodes


def _pairs_episodes(cfg: BenchConfig, window: Window, pairs: list[Question], seed: int,
                    rng: random.Random) -> list[EpisodeSpec]:
    """One OOLONG-Pairs task per label shape (``pure_python`` has none: every Pairs task
    needs labels), rotating over the 20 tasks in a seeded order."""
    L = window.context_tokens
    order = list(range(len(pairs)))
    random.Random(f"pairs:{cfg.dataset}:{L}:{seed}").shuffle(order)
    out = []
    for k, shape in enumerate(sh for sh in cfg.shapes if sh != "pure_python"):
        q = pairs[order[k % len(order)]]
        out.append(EpisodeSpec(f"s{seed}-{L // 1024}K-pairs-{shape}", window, q, shape,
                               build_program(window, q, shape, seed), rng.uniform(50.0, 150.0),
                               seed, "pairs"))
    return out


def _rotated(items: tuple, k: int) -> tuple:
    k %= max(1, len(items))
    return items[k:] + items[:k]


def _sim(t: float, cfg: BenchConfig) -> float:
    return t / cfg.time_scale if cfg.simulated else t


async def _run_episode(cfg: BenchConfig, ep: EpisodeSpec, mode: str, decoding: str,
                       server: SimulatedServer, tool_latency: SimulatedToolLatency,
                       t_run0: float) -> dict[str, Any]:
    import spectool
    import spectool_agents

    scale = cfg.time_scale
    if cfg.root_model is None:
        root: Any = SimulatedRootModel(ep.program.turns, DecodingModel(decoding, ep.tokens_per_s),
                                       seed=ep.seed, time_scale=scale, name=f"simulated-{ep.eid}")
        turn_of = lambda: root.turn  # noqa: E731
    else:
        root = spectool_agents.LiteLLMModel(cfg.root_model, **(cfg.model_kwargs or {}))
        turn_of = lambda: 0  # noqa: E731
    if cfg.sub_model is None:
        sub: Any = SimulatedSubModel(server, ep.window.label_of, ep.window.labels,
                                     accuracy=cfg.accuracy, seed=ep.seed, episode=ep.eid,
                                     turn_of=turn_of)
    else:
        sub = spectool_agents.LiteLLMSubModel(cfg.sub_model, **(cfg.model_kwargs or {}))

    @spectool.tool(speculate="never", name="labelling_guide")
    async def labelling_guide() -> str:
        """A non-speculatable tool (simulated latency): the shadow never starts it."""
        await tool_latency.wait(GUIDE_TOOL_S, episode=ep.eid, turn=turn_of())
        return GUIDE_TEXT

    extra = [labelling_guide] if ep.shape == "nonspec_dep" else []
    events = EventLog(anyio.current_time())
    agent = spectool_agents.ReplAgent(root, sub, mode=mode, max_turns=cfg.max_turns,
                                      tools=extra, admission=cfg.admission, on_event=events)
    t0 = anyio.current_time()
    result = await agent.run(ep.window.context, ep.question.text)
    t1 = anyio.current_time()
    answer = str(result.answer)
    q = ep.question
    official = score(answer, q.answer, q.answer_type, "official")
    lenient = score(answer, q.answer, q.answer_type, "lenient")
    streams = getattr(root, "records", [])
    turns = []
    for k, tr in enumerate(result.turns):
        row = {"index": tr.index, "t_turn": _sim(tr.t_turn, cfg),
               "stats": {key: (_sim(v, cfg) if key.startswith("t_") or key == "saved_s" else v)
                         for key, v in tr.stats.items()},
               "error": tr.error, "final": tr.final}
        if k < len(streams):
            s = streams[k]
            row["stream_start"] = _sim(s.t_start - t0, cfg)
            row["stream_end"] = row["stream_start"] + s.duration
            row["tokens"] = len(s.token_times)
        turns.append(row)
    totals = {key: (_sim(v, cfg) if key.startswith("t_") or key == "saved_s" else v)
              for key, v in result.stats.items()}
    return {
        "episode": ep.eid, "shape": ep.label, "kind": ep.kind, "task": q.task, "group": q.group,
        "context_tokens": ep.window.context_tokens, "seed": ep.seed, "mode": mode,
        "decoding": decoding, "tokens_per_s": round(ep.tokens_per_s, 1),
        "answer": answer, "gold": q.answer, "answer_type": q.answer_type,
        "score_official": official, "score_lenient": lenient,
        "scorer": "pairs_f1" if q.answer_type == "ANSWER_TYPE.PAIRS" else "official",
        "finished_by": result.finished_by, "t_start": _sim(t0 - t_run0, cfg),
        "t_total": _sim(t1 - t0, cfg), "turns": turns, "stats": totals,
        "sub_calls": result.sub_calls,
        "_events": events,  # the trace's timings, read by the gap attribution, not saved
    }


async def run_once(cfg: BenchConfig, episodes: list[EpisodeSpec], mode: str, decoding: str,
                   concurrency: int, on_episode=None) -> dict[str, Any]:
    """One run: all episodes through one shared simulated server."""
    server = SimulatedServer(max_batch=cfg.max_batch, alpha=cfg.alpha, time_scale=cfg.time_scale)
    tool_latency = SimulatedToolLatency(cfg.time_scale)
    limiter = anyio.CapacityLimiter(concurrency)
    results: list[dict[str, Any] | None] = [None] * len(episodes)
    t_run0 = anyio.current_time()

    async def one(i: int) -> None:
        async with limiter:
            results[i] = await _run_episode(cfg, episodes[i], mode, decoding, server,
                                            tool_latency, t_run0)
        if on_episode is not None:
            on_episode()

    async with anyio.create_task_group() as tg:
        for i in range(len(episodes)):
            tg.start_soon(one, i)
    wall = _sim(anyio.current_time() - t_run0, cfg)
    requests = [{**asdict(r), "t_submit": _sim(r.t_submit - t_run0, cfg),
                 "t_start": None if r.t_start is None else _sim(r.t_start - t_run0, cfg),
                 "t_end": None if r.t_end is None else _sim(r.t_end - t_run0, cfg)}
                for r in server.requests + tool_latency.requests]
    return {"mode": mode, "decoding": decoding, "concurrency": concurrency, "wall": wall,
            "episodes": results, "requests": requests, "peak_in_flight": server.peak_running,
            "_t0": t_run0}


def _oracle_for(cfg: BenchConfig, ep: EpisodeSpec, decoding: str,
                baseline_run: dict[str, Any]) -> list[OracleTurn] | None:
    """Oracle schedule of each turn of an episode from the baseline run's recorded works
    (see spectool_bench.oracle); the episode's oracle time is the sum of their times."""
    if ep.program is None or not cfg.simulated:
        return None
    root = SimulatedRootModel(ep.program.turns, DecodingModel(decoding, ep.tokens_per_s),
                              seed=ep.seed, time_scale=cfg.time_scale)
    ep_result = next(e for e in baseline_run["episodes"] if e["episode"] == ep.eid)
    n_turns = len(ep_result["turns"])
    works: list[list[float]] = [[] for _ in range(n_turns)]
    for r in sorted(baseline_run["requests"], key=lambda r: r["t_submit"]):
        if r["episode"] == ep.eid and r["kind"] == "sub" and r["turn"] < n_turns:
            works[r["turn"]].append(r["work"])
    calls = [ep.program.calls[k] if k < len(ep.program.calls) else [] for k in range(n_turns)]
    try:
        return [oracle_turn(root.plan(k), calls[k], works[k], max_batch=cfg.max_batch,
                            alpha=cfg.alpha) for k in range(n_turns)]
    except ValueError:
        return None


def _attach_gaps(cfg: BenchConfig, workloads: dict[int, list[EpisodeSpec]],
                 runs: list[dict[str, Any]],
                 schedules: dict[tuple, list[OracleTurn] | None]) -> None:
    """Each spec episode at concurrency 1 gets ``gap`` (``spectool_bench.gaps``): its time
    minus the oracle's, by cause. Drops the trace timings the runs kept for it."""
    base = {(r["decoding"], r["seed"], r["repeat"]): r for r in runs
            if r["mode"] == "baseline" and r["concurrency"] == 1}
    for run in runs:
        ref = base.get((run["decoding"], run["seed"], run["repeat"]))
        t_run0 = run.pop("_t0", 0.0)
        for e in run["episodes"]:
            events = e.pop("_events", None)
            if run["mode"] != "spec" or run["concurrency"] != 1 or ref is None or events is None:
                continue
            oracle = schedules.get((run["decoding"], run["seed"], run["repeat"], e["episode"]))
            ep = next(x for x in workloads[run["seed"]] if x.eid == e["episode"])
            if oracle is None or ep.program is None:
                continue
            calls = [ep.program.calls[k] if k < len(ep.program.calls) else []
                     for k in range(len(oracle))]
            e["gap"] = episode_gap(
                calls, oracle, [q for q in ref["requests"] if q["episode"] == e["episode"]], e,
                [q for q in run["requests"] if q["episode"] == e["episode"]], events,
                lambda t: _sim(t - t_run0, cfg)).to_dict()


async def _warm_up(cfg: BenchConfig) -> None:
    """One untimed tiny episode per mode, so first-use costs (imports, caches) do not
    land on whichever timed run happens to go first."""
    warm = BenchConfig(context_tokens=(1024,), shapes=("batched",), decoding=("vanilla",),
                       time_scale=min(cfg.time_scale, 0.01), progress=False, plots=False)
    episodes = make_workload(warm, 0)
    for mode in cfg.modes:
        await run_once(warm, episodes, mode, "vanilla", 1)


async def run_benchmark(cfg: BenchConfig) -> dict[str, Any]:
    """Run every (seed, repeat, decoding, concurrency, mode); write JSON (+ PNGs)."""
    cfg.validate()
    workloads = {seed: make_workload(cfg, seed) for seed in cfg.seeds}
    decodings = cfg.decoding if cfg.root_model is None else ("real",)
    # the mode order rotates by one per repeat, so no mode always runs first
    plan = [(seed, rep, dec, conc, mode) for seed in cfg.seeds for rep in range(cfg.repeats)
            for dec in decodings for conc in cfg.concurrency
            for mode in _rotated(tuple(cfg.modes), rep)]
    total = sum(len(workloads[s]) for s, *_ in plan)
    bar = None
    if cfg.progress:
        from tqdm import tqdm

        bar = tqdm(total=total, desc="oolong episodes", unit="ep", leave=False,
                   disable=None)  # None: shown on a terminal only
    runs = []
    t0 = time.perf_counter()
    if cfg.simulated:
        await _warm_up(cfg)
    else:  # the first litellm import takes seconds: keep it out of the timed runs
        from spectool_agents.models import import_litellm

        await anyio.to_thread.run_sync(import_litellm)
        # cold start (connections, the server's first requests, caches) must not land on
        # whichever mode is timed first: one untimed episode per mode
        first = workloads[cfg.seeds[0]][:1]
        for mode in cfg.modes:
            await run_once(cfg, first, mode, "vanilla", 1)
    try:
        for seed, rep, dec, conc, mode in plan:
            if bar is not None:
                bar.set_postfix_str(f"{dec} c={conc} {mode}")
            run = await run_once(cfg, workloads[seed], mode, dec if dec != "real" else "vanilla",
                                 conc, on_episode=(bar.update if bar is not None else None))
            run["decoding"], run["seed"], run["repeat"] = dec, seed, rep
            for e in run["episodes"]:
                e["repeat"] = rep
            runs.append(run)
    finally:
        if bar is not None:
            bar.close()
        if not cfg.simulated:
            from spectool_agents.models import aclose_litellm

            await aclose_litellm()
    label_waste(runs)
    loaded = await run_loaded(cfg) if cfg.simulated and cfg.loaded_alpha is not None else []
    schedules: dict[tuple, list[OracleTurn] | None] = {}
    for run in runs:
        if run["mode"] == "baseline" and run["concurrency"] == 1:
            for ep in workloads[run["seed"]]:
                schedules[(run["decoding"], run["seed"], run["repeat"], ep.eid)] = _oracle_for(
                    cfg, ep, run["decoding"], run)
    oracle = {k: None if v is None else sum(o.time for o in v) for k, v in schedules.items()}
    _attach_gaps(cfg, workloads, runs, schedules)
    for run in runs:
        for e in run["episodes"]:
            e["oracle_t"] = oracle.get((run["decoding"], run["seed"], run["repeat"], e["episode"]))
    summary = summarise(cfg, runs, oracle)
    summary["loaded"] = loaded
    report = {
        "models": SIMULATED if cfg.simulated else {"root": cfg.root_model or SIMULATED,
                                                   "sub": cfg.sub_model or SIMULATED},
        "time_unit": "simulated seconds" if cfg.simulated else "seconds",
        "scorer": "official OOLONG-synth (Pairs: set F1); lenient also reported",
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()
                   if k != "model_kwargs"},
        "summary": summary, "runs": runs, "host_wall_s": time.perf_counter() - t0,
    }
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "oolong.json").write_text(json.dumps(report, indent=1, default=str))
    report["table"] = render_table(cfg, summary)
    (out / "table.txt").write_text(report["table"] + "\n")
    if cfg.plots:
        from .plots import write_plots

        report["plots"] = [str(p) for p in write_plots(report, out)]
    return report


async def run_loaded(cfg: BenchConfig) -> list[dict[str, Any]]:
    """The loaded-server scenario: ``cfg.loaded_shapes`` at concurrency 1 on a server
    with ``alpha = cfg.loaded_alpha``, every mode with admission on and (lazy, spec) off;
    the mode order rotates between the two passes. Rows: wall (simulated s), speed vs
    baseline (baseline wall / wall), sub-model requests sent vs needed (baseline's)."""
    from dataclasses import replace

    shapes = tuple(sh for sh in cfg.loaded_shapes if sh in SHAPES)
    if not shapes:
        return []
    lcfg = replace(cfg, alpha=cfg.loaded_alpha, shapes=shapes, concurrency=(1,),
                   progress=False, plots=False)
    episodes = make_workload(lcfg, cfg.seeds[0])
    variants = [(m, True) for m in cfg.modes] + [(m, False) for m in cfg.modes
                                                  if m != "baseline"]
    results: dict[tuple[str, bool], dict[str, Any]] = {}
    for mode, adm in variants:
        run = await run_once(replace(lcfg, admission=adm), episodes, mode, "vanilla", 1)
        results[(mode, adm)] = run
    base = results.get(("baseline", True))
    rows = []
    for mode, adm in variants:
        run = results[(mode, adm)]
        sent = sum(1 for q in run["requests"] if q["kind"] == "sub")
        rows.append({
            "mode": mode, "admission": adm, "wall_s": run["wall"],
            "speed": base["wall"] / run["wall"] if base and run["wall"] else None,
            "sent": sent,
            "needed": sum(1 for q in base["requests"] if q["kind"] == "sub") if base else None,
            "executions": sum(e["stats"].get("executions", 0) for e in run["episodes"]),
            "hits": sum(e["stats"].get("hits", 0) for e in run["episodes"]),
            "scores": [e["score_official"] for e in run["episodes"]],
        })
    return rows


def main_bench(cfg: BenchConfig) -> dict[str, Any]:
    """Synchronous entry point (asyncio backend; litellm needs asyncio)."""
    return anyio.run(run_benchmark, cfg)


__all__ = ["BenchConfig", "EpisodeSpec", "MODES", "DECODINGS", "make_workload", "run_benchmark",
           "run_once", "render_table", "summarise", "main_bench"]
