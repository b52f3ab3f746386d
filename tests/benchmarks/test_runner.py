"""The benchmark runner and CLI on a tiny simulated workload.

Only deterministic facts are asserted (files, scores, answers, which calls were made);
never timings."""

import json
from collections import Counter

import pytest

from spectool_bench.runner import BenchConfig, main_bench, make_workload
from spectool.cli import main

TINY = dict(context_tokens=(1024,), decoding=("vanilla",), concurrency=(1,),
            shapes=("loop_blocking", "batched", "judge", "nonspec_dep", "pure_python"),
            time_scale=0.004, progress=False)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("oolong")
    return main_bench(BenchConfig(out=out, **TINY)), out


def test_writes_json_table_and_plots(report):
    rep, out = report
    data = json.loads((out / "oolong.json").read_text())
    assert data["models"] == "simulated" and data["time_unit"] == "simulated seconds"
    assert "official" in data["scorer"]
    assert (out / "walltime.png").stat().st_size > 0
    assert (out / "timeline_loop_blocking.png").stat().st_size > 0
    table = (out / "table.txt").read_text()
    assert "SIMULATED" in table and "official" in table
    assert {r["mode"] for r in data["summary"]["rows"]} == {"baseline", "lazy", "spec"}


def _episodes(rep, mode):
    run = next(r for r in rep["runs"] if r["mode"] == mode)
    return {e["episode"]: e for e in run["episodes"]}, run


def test_same_answers_and_scores_across_modes(report):
    rep, _ = report
    base, _ = _episodes(rep, "baseline")
    for mode in ("lazy", "spec"):
        eps, _ = _episodes(rep, mode)
        assert eps.keys() == base.keys()
        for k, e in eps.items():
            assert (e["answer"], e["score_official"], e["score_lenient"]) == (
                base[k]["answer"], base[k]["score_official"], base[k]["score_lenient"])
            assert len(e["turns"]) == len(base[k]["turns"])
    assert rep["summary"]["checks"]["scores_identical_across_modes"] is True


def test_calls_made(report):
    """Every mode makes the baseline's sub-calls (same prompts); speculative modes may add
    more (wasted or cancelled), never fewer."""
    rep, _ = report
    counts = {}
    for mode in ("baseline", "lazy", "spec"):
        _, run = _episodes(rep, mode)
        reqs = [q for q in run["requests"] if q["kind"] == "sub"]
        counts[mode] = len(reqs)
        used = Counter(q["prompt_hash"] for q in reqs if q["fate"] == "used")
        if mode == "baseline":
            base_used = used
            assert all(q["fate"] == "used" for q in reqs)
        else:
            assert used == base_used
    assert counts["spec"] >= counts["baseline"] and counts["lazy"] >= counts["baseline"]
    base, _ = _episodes(rep, "baseline")
    assert all(e["stats"].get("hits", 0) == 0 for e in base.values())
    spec, _ = _episodes(rep, "spec")
    assert spec["s0-1K-pure_python"]["stats"].get("dispatched", 0) == 0  # nothing to speculate


def test_oracle_defined_at_concurrency_one(report):
    rep, _ = report
    row = next(r for r in rep["summary"]["rows"] if r["mode"] == "spec")
    assert row["oracle_speedup"] is not None and row["oracle_speedup"] >= 1.0
    for shape in rep["summary"]["shapes"]:
        assert "oracle_speedup" in shape


def test_oolong_json_has_each_shapes_gap_to_the_oracle_by_cause(report):
    """Per shape (spec at concurrency 1): gap = the causes' seconds summed, closable and
    unclosable are their two groups; the trace timings behind them are not saved."""
    from spectool_bench.gaps import CAUSES, CLOSABLE, UNCLOSABLE

    _, out = report
    data = json.loads((out / "oolong.json").read_text())
    for row in data["summary"]["shapes"]:
        assert set(row["gap_causes"]) == set(CAUSES)
        assert row["gap_s"] == pytest.approx(sum(row["gap_causes"].values()))
        assert row["closable_s"] == pytest.approx(sum(row["gap_causes"][c] for c in CLOSABLE))
        assert row["unclosable_s"] == pytest.approx(
            sum(row["gap_causes"][c] for c in UNCLOSABLE))
        assert row["gap_s"] == pytest.approx(row["spec_s"] - row["baseline_s"]
                                             / row["oracle_speedup"])
    for run in data["runs"]:
        assert "_t0" not in run and all("_events" not in e for e in run["episodes"])
        assert all(("gap" in e) == (run["mode"] == "spec") for e in run["episodes"])


def test_workload_deterministic_and_shaped():
    cfg = BenchConfig(**TINY)
    a, b = make_workload(cfg, 0), make_workload(cfg, 0)
    assert [(e.eid, e.question.qid, e.program.turns) for e in a] == [
        (e.eid, e.question.qid, e.program.turns) for e in b]
    assert [e.shape for e in a] == list(TINY["shapes"])
    assert all(not e.question.needs_labels for e in a if e.shape == "pure_python")


def test_cli_runs_and_prints_table(tmp_path, capsys):
    rc = main(["bench", "oolong", "--out", str(tmp_path), "--modes", "baseline", "spec",
               "--context-tokens", "1K", "--decoding", "speculative", "--shapes", "batched",
               "--time-scale", "0.004", "--no-progress", "--no-plots"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "SIMULATED" in out and "speculative" in out
    assert (tmp_path / "oolong.json").exists()


@pytest.mark.parametrize("args", [
    ["--concurrency", "0"], ["--context-tokens", "99"], ["--modes", "fast"],
    ["--time-scale", "-1"], ["--repeats", "x"], ["--accuracy", "2"], ["--shapes", "nope"],
])
def test_cli_bad_args(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "oolong", *args])
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_real_models_through_litellm(tmp_path, capsys):
    """--root-model/--sub-model go through the agents' litellm adapters (a local
    OpenAI-compatible stub on 127.0.0.1 started here; nothing reaches the network)."""
    import re
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agents"))
    from openai_stub import OpenAIStub

    from spectool_bench.oolong import generate_window
    from spectool_bench.simulated import instance_texts

    window = generate_window("trec_coarse", 1024, 0)

    def reply(body):
        text = body["messages"][-1]["content"]
        if body["model"] == "root":
            if sum(m["role"] == "assistant" for m in body["messages"]) == 0:
                return ('```repl\nrows = [l for l in context.split("\\n") if "Instance:" in l]\n'
                        'out = llm_query("Label:\\n" + "\\n".join(rows))\nprint(out[:40])\n```')
            return "```repl\nFINAL('Answer: ' + str(len(out.split(chr(10)))))\n```"
        return "\n".join(window.label_of[t] for t in instance_texts(text))

    with OpenAIStub(reply, max_requests=40) as stub:
        rc = main(["bench", "oolong", "--out", str(tmp_path), "--modes", "baseline", "spec",
                   "--concurrency", "1", "--context-tokens", "1K", "--shapes", "batched",
                   "--root-model", "openai/root", "--sub-model", "openai/sub", "--max-questions", "2",
                   "--api-base", stub.api_base, "--api-key", "sk-dummy-local",
                   "--no-progress", "--no-plots"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "root=openai/root sub=openai/sub" in out
    data = json.loads((tmp_path / "oolong.json").read_text())
    assert data["models"] == {"root": "openai/root", "sub": "openai/sub"}
    assert "sk-dummy" not in (tmp_path / "oolong.json").read_text()
    answers = {r["mode"]: [e["answer"] for e in r["episodes"]] for r in data["runs"]}
    assert answers["baseline"] == answers["spec"] and len(answers["spec"]) == 2
    assert all(re.fullmatch(r"Answer: \d+", a) for a in answers["baseline"])
    assert {e["shape"] for r in data["runs"] for e in r["episodes"]} == {"model-written"}
    # cold start stays out of the timed runs: one untimed episode per mode came first
    # (2 timed questions x 2 modes x 2 root turns = 8 root requests, plus 2 x 2 warm-up)
    assert sum(1 for r in stub.requests if r.get("model") == "root") == 12


def test_seeds_and_repeats(tmp_path):
    cfg = BenchConfig(out=tmp_path, modes=("baseline", "spec"), seeds=(0, 1), repeats=2,
                      context_tokens=(1024,), decoding=("vanilla",), concurrency=(2,),
                      shapes=("batched", "pure_python"), time_scale=0.004, progress=False,
                      plots=False)
    rep = main_bench(cfg)
    keys = sorted((r["seed"], r["repeat"], r["mode"]) for r in rep["runs"])
    assert keys == sorted((s, k, m) for s in (0, 1) for k in (0, 1) for m in ("baseline", "spec"))
    # the mode order rotates per repeat: no mode is always timed first
    firsts = {(r["seed"], r["repeat"]): r["mode"] for r in reversed(rep["runs"])}
    assert firsts[(0, 0)] == "baseline" and firsts[(0, 1)] == "spec"
    assert rep["summary"]["checks"]["scores_identical_across_modes"] is True
    by_seed = {}
    for r in rep["runs"]:  # repeats of one seed answer identically
        answers = tuple(e["answer"] for e in r["episodes"])
        assert by_seed.setdefault(r["seed"], answers) == answers
    row = next(r for r in rep["summary"]["rows"] if r["mode"] == "spec")
    assert row["episodes"] == 8 and row["oracle_speedup"] is None  # oracle: concurrency 1 only


def test_loaded_server_scenario_and_mix_table(report):
    """The loaded-server rows run every mode with admission on and lazy/spec off; with
    admission on, no mode sends the server more requests than the cell needs (at a
    time scale where the server's contention is measurable). The mix table sums the
    shapes of each mix that ran."""
    import anyio

    from spectool_bench.runner import run_loaded

    rep, _ = report
    assert "loaded server (SIMULATED server" in rep["table"]
    assert {(r["mode"], r["admission"]) for r in rep["summary"]["loaded"]} == {
        ("baseline", True), ("lazy", True), ("spec", True), ("lazy", False), ("spec", False)}
    loaded = anyio.run(run_loaded, BenchConfig(**{**TINY, "time_scale": 0.03}))
    for r in loaded:
        if r["admission"]:
            assert r["sent"] == r["needed"] == r["executions"] > 0, r
        assert r["scores"] == loaded[0]["scores"]
    mixes = {m["mix"]: m for m in rep["summary"]["mixes"]}
    assert set(mixes) == {"loop-heavy", "batched"}
    assert mixes["batched"]["shapes"] == ["batched", "pure_python"]
    shape_b = {r["shape"]: r["baseline_s"] for r in rep["summary"]["shapes"]}
    assert mixes["batched"]["baseline_s"] == pytest.approx(shape_b["batched"] + shape_b["pure_python"])


def test_main_job_skips_windows_the_official_subsample_drops_unless_all_windows():
    from spectool_bench.runner import window_for

    cfg = BenchConfig(dataset="imdb", context_tokens=(8192,))
    assert window_for(cfg, 8192, 14).seed == 15  # generator seed 14 has < 25 questions
    every = window_for(BenchConfig(dataset="imdb", all_windows=True), 8192, 14)
    assert every.seed == 14 and every.questions == every.all_questions
    assert 0 < len(every.questions) < 25
