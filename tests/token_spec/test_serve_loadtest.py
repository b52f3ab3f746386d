"""The load test's pure parts: Prometheus parsing, counter sums, medians over repeats."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")

from token_spec.serve.loadtest import _medians, counter, format_table, parse_metrics  # noqa: E402

TEXT = """# HELP vllm:spec_decode_num_drafts_total drafts
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{model_name="m"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="0"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="1"} 2.0
vllm:spec_decode_num_drafts{model_name="other"} 1.0
"""


def test_counters_are_summed_over_labels_with_or_without_the_total_suffix():
    m = parse_metrics(TEXT)
    assert counter(m, "vllm:spec_decode_num_drafts") == 5.0
    assert counter(m, "vllm:spec_decode_num_accepted_tokens_per_pos") == 5.0
    assert counter(m, "vllm:missing") == 0.0


def test_medians_over_repeats_one_row_per_method_and_level():
    runs = [{"method": "none", "clients": 1, "tokens_per_s": v, "requests_per_s": 1.0, "latency_mean_s": 1.0,
             "latency_p50_s": 1.0, "latency_p90_s": 1.0, "ttft_mean_s": None, "mean_acceptance_length": None,
             "drafts": 0} for v in (10.0, 30.0, 20.0)]
    rows = _medians(runs)
    assert len(rows) == 1 and rows[0]["tokens_per_s"] == 20.0 and rows[0]["repeats"] == 3
    assert "none" in format_table({"rows": rows})
