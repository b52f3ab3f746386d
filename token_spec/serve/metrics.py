"""Prometheus metrics of the server, under vLLM's names (``/metrics``).

Speculative decoding counters, as vLLM exposes them (prometheus-client appends
``_total`` to counters in the text format, so they read e.g.
``vllm:spec_decode_num_drafts_total``, exactly like vLLM's own):

* ``vllm:spec_decode_num_drafts``            verification rounds that had a draft;
* ``vllm:spec_decode_num_draft_tokens``      draft tokens proposed;
* ``vllm:spec_decode_num_accepted_tokens``   draft tokens accepted;
* ``vllm:spec_decode_num_accepted_tokens_per_pos{position=i}``  drafts whose first
  i+1 tokens were all accepted.

Mean acceptance length = 1 + accepted / drafts. Plus request counters, the running /
waiting gauges, and the latency histograms ``vllm:e2e_request_latency_seconds`` and
``vllm:time_to_first_token_seconds``. Each server has its own registry (several
servers can live in one process, as in the tests).
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import disable_created_metrics

# vLLM exposes no ``*_created`` series either (a process-wide switch of prometheus-client).
disable_created_metrics()

__all__ = ["ServeMetrics", "CONTENT_TYPE_LATEST"]

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0)


class ServeMetrics:
    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        self.model_name = model_name
        labels = ["model_name"]
        r = self.registry
        self.num_drafts = Counter("vllm:spec_decode_num_drafts", "Speculative rounds with a draft", labels, registry=r)
        self.num_draft_tokens = Counter("vllm:spec_decode_num_draft_tokens", "Draft tokens proposed", labels, registry=r)
        self.num_accepted_tokens = Counter("vllm:spec_decode_num_accepted_tokens", "Draft tokens accepted", labels,
                                           registry=r)
        self.accepted_per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                                        "Drafts whose first position+1 tokens were accepted",
                                        labels + ["position"], registry=r)
        self.requests = Counter("vllm:request_success", "Finished requests", labels + ["finished_reason"], registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens processed", labels, registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Tokens generated", labels, registry=r)
        self.running = Gauge("vllm:num_requests_running", "Requests in the batch", labels, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Requests waiting for a slot", labels, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Request latency", labels,
                             buckets=_LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token", labels,
                              buckets=_TTFT_BUCKETS, registry=r)

    def record_round(self, proposed: int, accepted: int) -> None:
        """One verification with ``proposed`` draft tokens of which the first ``accepted`` were kept."""
        m = self.model_name
        self.num_drafts.labels(m).inc()
        self.num_draft_tokens.labels(m).inc(proposed)
        self.num_accepted_tokens.labels(m).inc(accepted)
        for i in range(accepted):
            self.accepted_per_pos.labels(m, str(i)).inc()

    def record_request(self, *, finish_reason: str, prompt_tokens: int, completion_tokens: int,
                       latency_s: float, ttft_s: float | None) -> None:
        m = self.model_name
        self.requests.labels(m, finish_reason).inc()
        self.prompt_tokens.labels(m).inc(prompt_tokens)
        self.generation_tokens.labels(m).inc(completion_tokens)
        self.e2e.labels(m).observe(latency_s)
        if ttft_s is not None:
            self.ttft.labels(m).observe(ttft_s)

    def render(self, *, running: int, waiting: int) -> bytes:
        self.running.labels(self.model_name).set(running)
        self.waiting.labels(self.model_name).set(waiting)
        return generate_latest(self.registry)
