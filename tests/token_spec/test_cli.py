"""`token_spec bench` on a tiny setting writes the JSON and the PNG and prints the table."""

from __future__ import annotations

import json

import pytest

from cli_helpers import one_line_error
from token_spec.cli import build_parser, main

pytestmark = pytest.mark.model


def test_parser_defaults_and_flags():
    args = build_parser().parse_args(["bench", "--out", "x", "--gamma", "6", "--domains", "code,agent"])
    assert args.gamma == 6 and args.domains == "code,agent" and args.max_tokens == 64 and args.repeats == 3


def test_bench_tiny_run_writes_json_and_png(target, tmp_path, capsys):
    out = tmp_path / "bench"
    rc = main(["bench", "--out", str(out), "--max-tokens", "6", "--repeats", "1", "--domains", "code",
               "--prompts", "1", "--drafters", "ngram,suffix", "--gamma", "3", "--targets", "fp32",
               "--hf-methods", "greedy,prompt_lookup", "--llamacpp", "off", "--threads", "1"])
    assert rc == 0
    result = json.loads((out / "bench.json").read_text())
    methods = {r["method"] for r in result["rows"]}
    assert {"fp32:vanilla", "fp32:spec:ngram", "fp32:spec:suffix", "hf-fp32:greedy", "hf-fp32:prompt_lookup"} <= methods
    for row in result["rows"]:
        assert row["domain"] == "code" and row["tokens"] > 0 and row["tokens_per_s"] > 0 and row["threads"] == 1
        assert row["prefill_ms"] > 0 and row["decode_tokens_per_s"] > 0
        # greedy: every method reproduces its own engine's vanilla tokens on this prompt
        assert row["identical"] is True
    vanilla = next(r for r in result["rows"] if r["method"] == "fp32:vanilla")
    assert vanilla["speedup"] == pytest.approx(1.0)
    spec = next(r for r in result["rows"] if r["method"] == "fp32:spec:ngram")
    assert spec["counters"]["num_emitted_tokens"] == spec["tokens"]
    assert result["command"].startswith("token_spec bench")
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "spec:ngram" in printed and "tok/s" in printed and "bench.json" in printed


def test_unknown_target_configuration_is_refused_before_any_model_loads(tmp_path, capsys):
    line = one_line_error(main, ["bench", "--out", str(tmp_path), "--targets", "fp16",
                                 "--llamacpp", "off"], capsys)
    assert "--targets" in line and "'fp16'" in line and "bf16" in line


def test_suffix_memory_restarts_for_every_thread_count(target, tmp_path):
    """The second thread-count pass must not look up the answers of the first (nor the
    warm-up's): with the reset, both passes draft and accept exactly the same tokens."""
    out = tmp_path / "bench"
    rc = main(["bench", "--out", str(out), "--max-tokens", "24", "--repeats", "1", "--domains", "code",
               "--prompts", "1", "--drafters", "suffix", "--targets", "fp32", "--hf", "none",
               "--llamacpp", "off", "--threads", "1,0"])
    assert rc == 0
    rows = [r for r in json.loads((out / "bench.json").read_text())["rows"] if r["method"] == "fp32:spec:suffix"]
    assert sorted(r["threads"] for r in rows) == [0, 1]
    first, second = (r["counters"] for r in sorted(rows, key=lambda r: -r["threads"]))
    assert first["num_accepted_tokens"] == second["num_accepted_tokens"]
    assert first["num_draft_tokens"] == second["num_draft_tokens"]


def test_the_control_is_a_second_vanilla_measured_against_vanilla(target, tmp_path):
    out = tmp_path / "bench"
    rc = main(["bench", "--out", str(out), "--max-tokens", "6", "--repeats", "2", "--domains", "code",
               "--prompts", "1", "--drafters", "ngram", "--targets", "fp32", "--hf", "none",
               "--llamacpp", "off", "--threads", "1", "--control"])
    assert rc == 0
    result = json.loads((out / "bench.json").read_text())
    rows = {r["method"]: r for r in result["rows"]}
    control, vanilla = rows["fp32:vanilla-control"], rows["fp32:vanilla"]
    assert control["identical"] is True and control["tokens"] == vanilla["tokens"]
    # its speed-up is over our vanilla of the same target (not the bf16 default of other engines)
    assert control["speedup"] == pytest.approx(control["tokens_per_s"] / vanilla["tokens_per_s"])
    # each method's paired interval: its two repeats against vanilla's; vanilla has none
    assert vanilla["decode_speedup_interval"] is None
    lo, hi = control["decode_speedup_interval"]
    assert lo - 1e-9 <= control["decode_speedup"] <= hi + 1e-9
    assert all(run["decode_tokens"] == run["tokens"] for run in result["runs"])   # ours: every new token


def test_a_cost_aware_run_records_the_pass_costs_its_gates_used(target, tmp_path, monkeypatch):
    import token_spec.gamma as gamma

    used = (1.0, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0, 3.25, 3.5, 3.75, 4.0, 4.25, 4.5)
    monkeypatch.setattr(gamma, "measure_pass_costs", lambda target, **kw: used)  # what the gates get
    out = tmp_path / "bench"
    assert main(["bench", "--out", str(out), "--max-tokens", "2", "--repeats", "1", "--domains", "code",
                 "--prompts", "1", "--drafters", "ngram", "--targets", "fp32", "--hf", "none",
                 "--llamacpp", "off", "--threads", "1", "--cost-aware"]) == 0
    assert json.loads((out / "bench.json").read_text())["environment"]["pass_costs"] == {"fp32": list(used)}


def test_without_the_flags_there_is_no_control_and_no_pass_costs(target, tmp_path):
    out = tmp_path / "bench"
    assert main(["bench", "--out", str(out), "--max-tokens", "4", "--repeats", "1", "--domains", "code",
                 "--prompts", "1", "--drafters", "ngram", "--targets", "fp32", "--hf", "none",
                 "--llamacpp", "off", "--threads", "1"]) == 0
    result = json.loads((out / "bench.json").read_text())
    assert not any("control" in r["method"] for r in result["rows"])
    assert result["environment"]["pass_costs"] == {}   # no gate, no schedule: nothing measured
