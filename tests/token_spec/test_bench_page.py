"""The benchmark page's token-tier tables from committed results files are exactly
``token_spec.bench.format_table`` of those files (the figures are never typed by hand)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from token_spec.bench import format_table

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "token-tier-benchmark.md"
FILES = pytest.mark.parametrize("name", ["token_bench_1thread.json", "token_bench_gates_q4.json",
                                         "token_bench_control_q4.json",
                                         "token_bench_control_q4_before_shortcut.json",
                                         "token_bench_control_q4_rotation.json",
                                         "token_bench_q4_nibble.json", "token_bench_q4_hybrids.json",
                                         "token_bench_bf16_generations.json", "token_bench_bf16_block_gated.json",
                                         "token_bench_bf16_compiled.json"])


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
