"""``--json``: a command prints its result as one JSON document on stdout (the same data
as the JSON file it writes), and what it wrote goes to stderr."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from spectool import cli as spectool_cli



def test_replay_json_is_the_report(tmp_path, capsys):
    log = tmp_path / "one.jsonl"
    log.write_text(json.dumps({"text": "```repl\nx = 1\n```\n"}) + "\n")
    assert spectool_cli.main(["replay", str(log), "--time-scale", "0.02", "--executor", "inprocess",
                              "--out", str(tmp_path / "out"), "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["turns_replayed"] == 1 and set(report["total"]["modes"]) == {"baseline", "lazy", "spec"}
    assert report == json.loads((tmp_path / "out" / "replay.json").read_text())
    assert "wrote" in captured.err and "wrote" not in captured.out


def test_bench_oolong_json_is_the_report(tmp_path, capsys):
    assert spectool_cli.main(["bench", "oolong", "--out", str(tmp_path), "--modes", "baseline", "spec",
                              "--context-tokens", "1K", "--decoding", "speculative", "--shapes", "batched",
                              "--time-scale", "0.004", "--no-progress", "--no-plots", "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert {r["mode"] for r in report["summary"]["rows"]} == {"baseline", "spec"}
    assert report["config"]["shapes"] == ["batched"] and "table" not in report
    assert report["summary"] == json.loads((tmp_path / "oolong.json").read_text())["summary"]
    assert "oolong.json" in captured.err


RESULTS = {
    "bench": {"rows": [{"domain": "code", "threads": 1, "method": "ours vanilla", "tokens_per_s": 12.5,
                        "decode_tokens_per_s": 15.0, "prefill_ms": 30.0, "decode_speedup": 1.0, "tau": None,
                        "identical_prompts": "5/5"}]},
    "loadtest": {"rows": [{"method": "none", "clients": 1, "tokens_per_s": 10.0, "requests_per_s": 0.5,
                           "latency_p50_s": 1.0}], "runs": []},
    "audit": {"a": {"label": "A"}, "b": {"label": "B"}, "config": {"max_tokens": 8},
              "domains": [{"domain": "coding", "prompts": 2, "identical": 2, "identity_rate": 1.0,
                           "mean_divergence": None, "tok_s_a": 5.0, "tok_s_b": 6.0, "tau_a": None,
                           "tau_b": None}],
              "overall": {"prompts": 2, "identical": 2, "identity_rate": 1.0}, "prompts": []},
}
URL = "http://127.0.0.1:9/v1"
ARGV = {"bench": ["bench"], "loadtest": ["loadtest"], "audit": ["audit", URL, URL]}
RUNNER = {"bench": ("token_spec.bench", "run_bench"), "loadtest": ("token_spec.serve.loadtest", "run_loadtest"),
          "audit": ("token_spec.audit", "run_audit")}


@pytest.mark.parametrize("command", list(RESULTS))
@pytest.mark.parametrize("as_json", [True, False], ids=["json", "table"])
def test_token_spec_json_is_the_written_result(command, as_json, monkeypatch, capsys, tmp_path):
    cli = pytest.importorskip("token_spec.cli")
    module_name, runner = RUNNER[command]
    module = pytest.importorskip(module_name)
    monkeypatch.setattr(module, runner, lambda args: json.loads(json.dumps(RESULTS[command])))
    monkeypatch.setattr(module, "plot", lambda result, path: Path(path).write_bytes(b""))
    argv = [*ARGV[command], "--out", str(tmp_path), *(["--json"] if as_json else [])]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    written = json.loads((tmp_path / f"{command}.json").read_text())
    if as_json:
        printed = json.loads(captured.out)
        assert printed == written
        assert printed["rows" if command != "audit" else "domains"] == RESULTS[command][
            "rows" if command != "audit" else "domains"]
        assert "wrote" in captured.err
    else:   # the table, in plain text (stdout is not a terminal here)
        with pytest.raises(json.JSONDecodeError):
            json.loads(captured.out)
        first = RESULTS[command]["rows" if command != "audit" else "domains"][0]
        row = next(line for line in captured.out.splitlines()
                   if line.split()[:1] == [first.get("domain", first.get("method"))])
        assert ("12.5" if command == "bench" else "10.00" if command == "loadtest" else "2/2") in row.split()


def test_negative_control_a_table_is_not_json():
    with pytest.raises(json.JSONDecodeError):
        json.loads("method  clients\n------\nnone 1")


def test_every_command_that_prints_a_results_table_has_json():
    parser = spectool_cli.build_parser()
    commands = {("replay",), ("bench", "oolong")}
    token = pytest.importorskip("token_spec.cli").build_parser()
    found = set()
    for p, words in ((parser, ()), (token, ("token_spec",))):
        stack = [(p, words)]
        while stack:
            current, path = stack.pop()
            for action in current._actions:
                if isinstance(action, argparse._SubParsersAction):
                    stack += [(sub, (*path, name)) for name, sub in action.choices.items()]
                elif "--json" in action.option_strings:
                    found.add(path)
    assert commands | {("token_spec", c) for c in ("bench", "race", "audit", "loadtest")} <= found
