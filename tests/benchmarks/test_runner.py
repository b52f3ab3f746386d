"""The benchmark runner and CLI on a tiny simulated workload.

Only deterministic facts are asserted (files, scores, answers, which calls were made);
never timings."""

import json
from collections import Counter

import pytest

from benchmarks.runner import BenchConfig, main_bench, make_workload
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
