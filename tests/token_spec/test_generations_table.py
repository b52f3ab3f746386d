"""The README's table of the article's drafter generations is the rendered data file,
and the renderer refuses a bench file that did not run every generation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from token_spec.generations import GENERATIONS, render_generations

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "results" / "generations_bench.json"


def _rows(taus: dict[str, float]) -> list[dict]:
    rows = [{"domain": "code", "method": "bf16:vanilla", "tau": None}]
    rows += [{"domain": "code", "method": f"bf16:spec:{d}", "tau": t} for d, t in taus.items()]
    return rows


def test_the_ordering_column_compares_each_generation_with_the_one_it_follows():
    taus = {"eagle3": 2.0, "dflash:8": 1.5, "dspark": 3.0, "dflash2:8": 1.4}
    table = render_generations({"command": "c", "rows": _rows(taus)})
    assert "| DFlash | `dflash:8` |" in table and "does not hold (vs EAGLE-3)" in table
    assert "| 3.00 | 3.00 | holds (vs DFlash) |" in table          # DSpark over DFlash
    assert "| 1.40 | 1.40 | does not hold (vs DFlash) |" in table   # DFlash 2 under DFlash


def test_a_bench_file_without_a_generation_is_refused_by_name():
    with pytest.raises(ValueError, match="dspark"):
        render_generations({"command": "c", "rows": _rows({"eagle3": 1.0, "dflash:8": 1.0,
                                                           "dflash2:8": 1.0})})


def test_the_readme_table_is_the_rendered_data_file():
    data = json.loads(DATA.read_text())
    assert {g.drafter for g in GENERATIONS} <= {r["method"].split(":spec:")[-1] for r in data["rows"]}
    assert render_generations(data) in (ROOT / "README.md").read_text()


def test_negative_control_an_edited_tau_no_longer_matches():
    data = json.loads(DATA.read_text())
    row = next(r for r in data["rows"] if r["method"].endswith(":spec:eagle3"))
    row["tau"] += 0.5
    assert render_generations(data) not in (ROOT / "README.md").read_text()
