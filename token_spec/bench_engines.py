"""The engines ``token_spec bench`` (and ``token_spec race``) time, each a callable
``ids -> Request``: ours (``Ours``: a vanilla or speculative decoder), Hugging Face
``generate()`` (``HFGenerate``: greedy, prompt lookup, assisted) and llama.cpp through
llama-cpp-python (``LlamaCpp``, built by ``llamacpp_method``).

A ``Request`` records the output ids, the whole call's time, the prefill (ours: the
prompt's prefill; HF and llama.cpp: the time to the first new token, which their
prefill yields) and each output token's arrival where the engine reports it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

__all__ = ["Request", "Ours", "HFGenerate", "LlamaCpp", "llamacpp_available", "llamacpp_method", "llamacpp_methods",
           "warm"]


@dataclass
class Request:
    out: list[int]
    total_s: float
    prefill_s: float
    decode_tokens: int
    metrics: object = None
    token_s: list[float] = field(default_factory=list)  # each output token's arrival, seconds from the call


def _strip_eos(ids: list[int], eos: set[int]) -> list[int]:
    for i, t in enumerate(ids):
        if t in eos:
            return ids[:i]
    return ids



class Ours:
    def __init__(self, decoder, params) -> None:
        self.decoder, self.params = decoder, params

    def __call__(self, ids: list[int]) -> Request:
        arrivals: list[float] = []

        def arrived(tokens: list[int]) -> None:  # a round's tokens arrive together
            arrivals.extend([time.perf_counter() - t0] * len(tokens))

        t0 = time.perf_counter()
        g = self.decoder.generate(ids, self.params, on_round=arrived)
        total = time.perf_counter() - t0
        m = g.metrics
        return Request(g.token_ids, total, m.prefill_s, len(g.token_ids), m, arrivals)


class _FirstTokenClock:
    """A ``generate(streamer=...)`` hook: the first put() is the prompt, the second the first new token."""

    def __init__(self) -> None:
        self.calls = 0
        self.first = None

    def put(self, value) -> None:
        self.calls += 1
        if self.calls == 2 and self.first is None:
            self.first = time.perf_counter()

    def end(self) -> None:
        pass


class HFGenerate:
    def __init__(self, model, kind: str, args, eos_ids, assistant=None) -> None:
        self.model, self.kind, self.args, self.eos, self.assistant = model, kind, args, set(eos_ids), assistant

    def __call__(self, ids: list[int]) -> Request:
        import torch

        inputs = torch.tensor([ids], dtype=torch.long)
        eos = sorted(self.eos)
        kwargs = dict(attention_mask=torch.ones_like(inputs), max_new_tokens=self.args.max_tokens,
                      eos_token_id=eos, pad_token_id=eos[0])
        if self.args.temperature == 0:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=self.args.temperature, top_p=None, top_k=None)
        if self.kind == "prompt_lookup":
            kwargs["prompt_lookup_num_tokens"] = self.args.gamma
        elif self.kind == "assisted":
            kwargs["assistant_model"] = self.assistant
        clock = _FirstTokenClock()
        kwargs["streamer"] = clock
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(inputs, **kwargs)
        total = time.perf_counter() - t0
        toks = _strip_eos(out[0, len(ids) :].tolist(), self.eos)
        prefill = (clock.first - t0) if clock.first is not None else float("nan")
        return Request(toks, total, prefill, max(0, len(toks) - 1))


class LlamaCpp:
    def __init__(self, llm, args, eos_ids) -> None:
        self.llm, self.args, self.eos = llm, args, set(eos_ids)

    def __call__(self, ids: list[int]) -> Request:
        llm = self.llm
        llm.reset()  # no prompt-prefix reuse from an earlier request
        out: list[int] = []
        arrivals: list[float] = []
        t0 = time.perf_counter()
        first = None
        for tok in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
            now = time.perf_counter()
            if first is None:
                first = now
            if tok in self.eos:
                break
            out.append(int(tok))
            arrivals.append(now - t0)
            if len(out) >= self.args.max_tokens:
                break
        total = time.perf_counter() - t0
        return Request(out, total, (first or time.perf_counter()) - t0, max(0, len(out) - 1), token_s=arrivals)


def llamacpp_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


def llamacpp_method(args, threads: int, eos_ids, draft_model=None) -> LlamaCpp:
    """llama.cpp on the GGUF our weights come from (``threads`` 0: every core); with
    ``draft_model`` (a llama-cpp-python draft such as ``LlamaPromptLookupDecoding``)
    it decodes speculatively."""
    import llama_cpp

    from .target import find_gguf

    n = threads if threads > 0 else (os.cpu_count() or 1)
    llm = llama_cpp.Llama(model_path=str(find_gguf()), n_ctx=4096, n_threads=n, n_threads_batch=n, verbose=False,
                          seed=args.seed, draft_model=draft_model)
    return LlamaCpp(llm, args, eos_ids)


def llamacpp_methods(args, threads: int, eos_ids) -> dict:
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    lookup = LlamaPromptLookupDecoding(num_pred_tokens=args.gamma)
    return {"llamacpp:vanilla": llamacpp_method(args, threads, eos_ids),
            "llamacpp:prompt_lookup": llamacpp_method(args, threads, eos_ids, lookup)}


def warm(fn, ids: list[int]) -> None:
    """One short call of ``fn`` (4 new tokens): kernels, allocator and GEMM probes warmed up."""
    saved = getattr(fn, "args", None)
    if isinstance(fn, Ours):
        from dataclasses import replace

        p = fn.params
        fn.params = replace(p, max_tokens=4)
        try:
            fn(ids)
        finally:
            fn.params = p
        return
    if saved is not None:
        import argparse

        fn.args = argparse.Namespace(**{**vars(saved), "max_tokens": 4})
        try:
            fn(ids)
        finally:
            fn.args = saved
