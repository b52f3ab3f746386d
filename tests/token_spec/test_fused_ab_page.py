"""The benchmark page's A/B tables (the fused kernels, the Q4_1 GEMMs, the bf16 GEMMs) are exactly what
``step_profile --render`` prints for the committed results files (the figures are never
typed by hand)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from token_spec.step_profile import render_ab

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "token-tier-benchmark.md"
FILES = pytest.mark.parametrize("name", ["fused_ab.json", "q4_kernel_ab.json", "bf16_kernel_ab.json"])


def _data(name: str) -> dict:
    return json.loads((ROOT / "docs" / "results" / name).read_text())


@FILES
def test_the_page_shows_the_rendered_results_file(name):
    assert render_ab(_data(name)) in PAGE.read_text()


@FILES
def test_negative_control_a_results_file_from_another_run_is_not_the_page(name):
    report = _data(name)
    other = copy.deepcopy(report)
    other["load_average"] = [x + 3.0 for x in other["load_average"]] if isinstance(
        other.get("load_average"), list) else other.get("load_average")
    other["date"] = "1999-01-01"
    assert render_ab(other) != render_ab(report)
    assert render_ab(other) not in PAGE.read_text()


@FILES
def test_negative_control_an_inconsistent_results_file_is_refused(name):
    report = _data(name)
    name, config = next(iter(report["configs"].items()))
    samples = _first_sample_list(config)
    samples[:] = [x * 1.5 for x in samples]
    with pytest.raises(ValueError, match=name):
        render_ab(report)


def _first_sample_list(node):
    """The first list of numbers inside a results file's configuration."""
    if isinstance(node, list) and node and all(isinstance(x, (int, float)) for x in node):
        return node
    if isinstance(node, dict):
        for value in node.values():
            found = _first_sample_list(value)
            if found is not None:
                return found
    return None
