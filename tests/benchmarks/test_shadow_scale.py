"""The scale benchmark's table: spec beside baseline per session count, from given rows
(no timing is asserted), and the docs' copy of the results file's table (docs/shadow.md)."""

from __future__ import annotations

import json
from pathlib import Path

from spectool_bench import shadow_scale

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "results" / "scale.json"


def _row(n: int, mode: str, wall: float, hits: int) -> dict:
    return {"sessions": n, "mode": mode, "wall_s": wall, "turn_mean_s": wall,
            "turn_max_s": wall, "hits": hits, "calls": 8 * n, "failed_turns": 0,
            "no_shadow": 0, "workers": 2 if mode == "spec" else 0,
            "host_peak_rss_mb": 40.0, "total_peak_rss_mb": 70.0, "workers_peak_rss_mb": 30.0}


def test_render_puts_spec_beside_baseline_and_names_a_row_that_died():
    data = {"command": "python -m spectool_bench.shadow_scale run --sessions 4 8",
            "date": "2026-01-01", "machine": "a CPU, 2 cores", "load_average": [1.0, 2.0],
            "simulated": "model and tools simulated",
            "bounds": {"stream_s": 1.0, "baseline_s": 5.0, "oracle_s": 1.5, "oracle_x": 3.3},
            "rows": [_row(4, "baseline", 5.0, 0), _row(4, "spec", 1.25, 32),
                     _row(8, "baseline", 5.0, 0),
                     {"sessions": 8, "mode": "spec", "outcome": "host died (signal 9)"}]}
    table = shadow_scale.render(data)
    assert "| 4 | 5.00 | 1.25 | 4.00 | 32 / 32 (100%) | 0 | 2 | 40 | 70 |" in table
    assert "| 8 | 5.00 |" not in table and "host died (signal 9)" in table


def test_the_message_holds_eight_independent_calls_and_the_bounds_follow():
    assert shadow_scale.MESSAGE.count("llm_query(") == shadow_scale.CALLS == 8
    b = shadow_scale.bounds()
    assert b["baseline_s"] == b["stream_s"] + 4.0
    assert b["stream_s"] < b["oracle_s"] < b["stream_s"] + 0.5 + 1e-9


def test_the_docs_table_is_the_rendered_data_file():
    data = json.loads(DATA.read_text())
    assert data["command"].startswith("python -m spectool_bench.shadow_scale run")
    assert shadow_scale.render(data) in (ROOT / "docs" / "shadow.md").read_text()
