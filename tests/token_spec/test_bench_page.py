"""The benchmark page's latest token-tier table is exactly ``token_spec.bench.format_table``
of the committed results file (the figures are never typed by hand)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from token_spec.bench import format_table

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "results" / "token_bench_1thread.json"
PAGE = ROOT / "docs" / "token-tier-benchmark.md"


def test_the_page_shows_the_formatted_results_file():
    result = json.loads(DATA.read_text())
    assert result["command"] in " ".join(PAGE.read_text().replace("\\\n", " ").split())
    assert format_table(result) in PAGE.read_text()


def test_negative_control_a_changed_row_is_not_the_page():
    result = json.loads(DATA.read_text())
    changed = copy.deepcopy(result)
    changed["rows"][0]["decode_tokens_per_s"] *= 1.5      # one decode speed, not measured
    assert format_table(changed) != format_table(result)
    assert format_table(changed) not in PAGE.read_text()
