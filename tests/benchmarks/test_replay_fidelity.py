"""The replay-fidelity benchmark: its results-page table is rendered from its data file, and
a run compares a three-mode replay with a direct two-mode one."""

from __future__ import annotations

import json
from pathlib import Path

from spectool_bench import replay_fidelity

ROOT = Path(__file__).resolve().parents[2]


def test_the_results_page_table_is_the_rendered_data_file():
    data = json.loads(replay_fidelity.DATA.read_text())
    assert replay_fidelity.render(data) in (ROOT / "docs" / "results.md").read_text()
    assert data["command"].startswith("python -m spectool_bench.replay_fidelity run")


def test_negative_control_an_edited_figure_no_longer_renders_into_the_results_page():
    data = json.loads(replay_fidelity.DATA.read_text())
    data["logs"][0]["three_mode_spec_x"] += 0.5
    assert replay_fidelity.render(data) not in (ROOT / "docs" / "results.md").read_text()


def test_a_run_replays_every_log_three_mode_and_two_mode(tmp_path):
    row = {"text": "```python\nouts = llm_batch(['a', 'b'])\n" + "x = 1\n" * 30 + "```\n",
           "calls": [{"tool": "llm_batch", "latency_s": [1.0, 2.0]}]}
    for name in ("one.jsonl", "two.jsonl"):
        (tmp_path / name).write_text(json.dumps(row) + "\n")
    data = replay_fidelity.run(tmp_path, repeats=1, time_scale=0.01)
    assert [e["log"] for e in data["logs"]] == ["one.jsonl", "two.jsonl"]
    for e in data["logs"]:
        assert e["identical"] and e["latency_fallbacks"] == 0
        assert e["three_mode_spec_x"] > 0 and e["two_mode_spec_x"] > 0
    assert data["three_over_two"] == (data["geomean_three_mode_spec_x"]
                                      / data["geomean_two_mode_spec_x"])
