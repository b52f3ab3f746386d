"""The benchmark page's token-tier tables from committed results files are exactly
``token_spec.bench.format_table`` of those files (the figures are never typed by hand)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from token_spec.bench import decode_intervals, format_table

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "token-tier-benchmark.md"
FILES = pytest.mark.parametrize("name", ["token_bench_1thread.json", "token_bench_gates_q4.json",
                                         "token_bench_control_q4.json",
                                         "token_bench_control_q4_before_shortcut.json",
                                         "token_bench_control_q4_rotation.json",
                                         "token_bench_q4_nibble.json", "token_bench_q4_hybrids.json",
                                         "token_bench_bf16_generations.json", "token_bench_bf16_block_gated.json",
                                         "token_bench_bf16_compiled.json", "token_bench_bf16_compiled_rerun.json"])


@FILES
def test_the_page_shows_the_formatted_results_file(name):
    result = json.loads((ROOT / "docs" / "results" / name).read_text())
    assert result["command"] in " ".join(PAGE.read_text().replace("\\\n", " ").split())
    assert format_table(result) in PAGE.read_text()


@FILES
def test_negative_control_a_changed_row_is_not_the_page(name):
    result = json.loads((ROOT / "docs" / "results" / name).read_text())
    changed = copy.deepcopy(result)
    changed["rows"][0]["decode_tokens_per_s"] *= 1.5      # one decode speed, not measured
    assert format_table(changed) != format_table(result)
    assert format_table(changed) not in PAGE.read_text()


def test_the_pages_count_of_a_a_intervals_holding_one_is_the_data():
    names = FILES.args[1]
    cells = [iv for name in names
             for (_, _, method), iv in decode_intervals(
                 json.loads((ROOT / "docs" / "results" / name).read_text())["runs"]).items()
             if method.endswith(":vanilla-control")]
    held = sum(lo <= 1.0 <= hi for lo, hi in cells)
    assert cells
    assert f"holds 1.00 in {held} of the {len(cells)} A/A cells" in " ".join(PAGE.read_text().split())
