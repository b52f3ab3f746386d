"""The cell-overhead micro-benchmark's figures: paired ratios and added time, from
given wall times (no timing is asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spectool_bench import cell_overhead

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "results" / "cell_overhead.json"


def test_summarise_pairs_each_turn_with_the_baseline_turn_it_ran_beside():
    walls = {"c": {"baseline": [1.0, 2.0, 1.0, 1.0], "spec (thread shadow)": [1.01, 2.02, 1.01, 1.01]}}
    data = cell_overhead.summarise(walls, 4, 100.0, (0.5, 0.7))
    base, spec = data["rows"]
    assert base["x_baseline"] == 1.0 and base["added_us"] == 0
    assert spec["x_baseline"] == pytest.approx(1 / 1.01)
    assert spec["added_us"] == pytest.approx(10_000, rel=1e-6)      # 10 ms, the median pair
    assert "| c | spec (thread shadow) |" in cell_overhead.render(data)


def test_the_results_page_table_is_the_rendered_data_file():
    data = json.loads(DATA.read_text())
    assert data["command"].startswith("python -m spectool_bench.cell_overhead")
    assert cell_overhead.render(data) in (ROOT / "docs" / "results.md").read_text()
