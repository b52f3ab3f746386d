"""vLLM backend: config and counter parsing run everywhere; the engine only on GPUs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from token_spec.vllm_backend import (
    SpecCounters,
    spec_counters_from_metrics,
    spec_counters_from_prometheus,
    speculative_config,
)

PROMETHEUS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 25.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 5.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 7.0
vllm:num_requests_running{model_name="m"} 3.0
"""


def test_prometheus_counters_give_vllm_tau_and_acceptance_rate():
    c = spec_counters_from_prometheus(PROMETHEUS)
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (10.0, 40.0, 25.0)
    assert c.accepted_per_pos == (9.0, 7.0, 5.0)
    assert c.mean_acceptance_length == pytest.approx(3.5)   # 1 + 25/10
    assert c.acceptance_rate == pytest.approx(0.625)       # 25/40


def test_prometheus_per_pos_sample_without_position_is_an_error():
    with pytest.raises(ValueError, match="position"):
        spec_counters_from_prometheus('vllm:spec_decode_num_accepted_tokens_per_pos_total{a="b"} 1\n')


def test_offline_metric_objects_are_summed_and_differenced():
    def snapshot(drafts, tokens, accepted, per_pos):
        return [
            SimpleNamespace(name="vllm:spec_decode_num_drafts", value=drafts),
            SimpleNamespace(name="vllm:spec_decode_num_draft_tokens", value=tokens),
            SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens", value=accepted),
            SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens_per_pos", values=per_pos),
            SimpleNamespace(name="vllm:generation_tokens", value=999),
        ]
    before = spec_counters_from_metrics(snapshot(2, 8, 5, [2, 2, 1]))
    after = spec_counters_from_metrics(snapshot(6, 24, 9, [5, 3, 1, 0]))
    delta = after - before
    assert delta == SpecCounters(4.0, 16.0, 4.0, (3.0, 1.0, 0.0, 0.0))
    assert delta.mean_acceptance_length == pytest.approx(2.0)
    assert SpecCounters().mean_acceptance_length is None


@pytest.mark.parametrize("kwargs, message", [
    ({"method": "medusa2", "num_speculative_tokens": 3}, "unknown vLLM speculative method"),
    ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": True}, "num_speculative_tokens"),
    ({"method": "eagle3", "num_speculative_tokens": 4}, "needs model="),
])
def test_bad_speculative_config_names_the_problem(kwargs, message):
    with pytest.raises(ValueError, match=message):
        speculative_config(**kwargs)


def test_speculative_config_matches_vllm_shape():
    assert speculative_config("ngram", num_speculative_tokens=4, prompt_lookup_max=3) == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}
    assert speculative_config("eagle3", num_speculative_tokens=7, model="org/eagle3-head")["model"] == "org/eagle3-head"


@pytest.mark.vllm
def test_vllm_ngram_greedy_matches_vanilla():
    """Runs only where vLLM and a CUDA GPU exist (see tests/conftest.py)."""
    from token_spec.vllm_backend import VLLMEngine

    prompts = ["def fibonacci(n):\n    ", "The three laws of thermodynamics are"]
    vanilla_texts, _ = VLLMEngine("HuggingFaceTB/SmolLM2-135M-Instruct", gpu_memory_utilization=0.3) \
        .generate(prompts, max_tokens=48)
    engine = VLLMEngine("HuggingFaceTB/SmolLM2-135M-Instruct", gpu_memory_utilization=0.3,
                        speculative={"method": "ngram", "num_speculative_tokens": 4,
                                     "prompt_lookup_max": 3, "prompt_lookup_min": 1})
    texts, counters = engine.generate(prompts, max_tokens=48)
    assert texts == vanilla_texts
    assert counters.num_drafts >= 0 and counters.num_accepted_tokens <= counters.num_draft_tokens
