"""The methods of ``token_spec bench`` by name: our target configurations
(``TARGET_CONFIGS``), each as vanilla and with every drafter of ``--drafters``
(``make_drafter``, ``KNOWN_DRAFTERS``), and Hugging Face ``generate()`` (``HF_KINDS``) on
the same weights; ``build_methods`` turns the bench's flags into the engines
(``token_spec.bench_engines``) and the vanilla each one's output is checked against.
"""

from __future__ import annotations

import copy

from .bench_engines import HFGenerate, Ours

__all__ = ["OUR_DRAFTERS", "FEATURE_DRAFTERS", "LOOKUP_HYBRIDS", "KNOWN_DRAFTERS", "TARGET_CONFIGS", "HF_KINDS", "target_configs",
           "load_config", "make_drafter", "build_methods"]

OUR_DRAFTERS = ("ngram", "suffix", "draft", "ngram+draft", "suffix+draft")
# also accepted by --drafters (not run by default): the EAGLE-3-style head, DSpark-style
# verification over the draft model, and over the EAGLE-3 head, the DFlash-style block
# drafter and its DFlash 2-style variant (path selector, two-tap convolutions)
FEATURE_DRAFTERS = ("eagle3", "dspark", "dspark-eagle3", "dflash", "dflash2")
# prompt lookup where it matches, the feature drafter (behind its gate) elsewhere
LOOKUP_HYBRIDS = ("ngram+eagle3", "ngram+dspark")
KNOWN_DRAFTERS = OUR_DRAFTERS + FEATURE_DRAFTERS + LOOKUP_HYBRIDS
TARGET_CONFIGS = ("bf16", "bf16-q4", "fp32")
HF_KINDS = ("greedy", "prompt_lookup", "assisted")


def target_configs(spec: str) -> list[str]:
    from .fast_forward import supports_bf16

    if spec == "auto":
        return ["bf16", "bf16-q4"] if supports_bf16() else ["fp32"]
    names = [s for s in spec.split(",") if s]
    bad = [s for s in names if s not in TARGET_CONFIGS]
    if bad:
        raise ValueError(f"unknown target configuration(s) {bad}; choose from {list(TARGET_CONFIGS)}")
    return names


def load_config(cfg: str):
    import torch

    from .target import load_target

    if cfg == "bf16":
        return load_target(dtype=torch.bfloat16)
    if cfg == "bf16-q4":
        return load_target(dtype=torch.bfloat16, weights="q4")
    return load_target(dtype=torch.float32)


def make_drafter(name: str, target, draft, args, gate=None, gate_tokens: int = 8, schedule=None):
    """A fresh drafter by bench name; ``gate(target, drafter, max_tokens, kind, opens=False)``
    -> a DraftGate for a costly drafter of that kind ("step": the draft model, "head": the
    EAGLE-3 head, "block": the DFlash blocks; None: ungated); ``schedule(target,
    step_drafter)`` -> the SurvivalSchedule of the dspark drafters."""
    from .drafters import GatedDrafter, HybridDrafter, ModelDrafter, NgramDrafter, SuffixDrafter

    if name in ("eagle3", "dspark-eagle3"):
        from .eagle3 import Eagle3Drafter, load_eagle3

        head = Eagle3Drafter(target, load_eagle3(target), name=name)
        if name == "eagle3":
            return head if gate is None else GatedDrafter(head, gate(target, head, gate_tokens, "head"), name=name)
        from .dspark import DSparkDrafter, TopProbConfidence

        spark = DSparkDrafter(head, TopProbConfidence.load("eagle3"), schedule(target, head), name=name)
        if gate is None:
            return spark
        return GatedDrafter(spark, gate(target, head, gate_tokens, "head", opens=True), name=name, caps=False)
    if name in ("dflash", "dflash2"):
        from .dflash import DFlashDrafter, load_dflash

        block = DFlashDrafter(target, *load_dflash(target, name), name=name)
        return block if gate is None else GatedDrafter(block, gate(target, block, gate_tokens, "block"), name=name)
    if name == "dspark":
        from .dspark import DSparkDrafter, TopProbConfidence

        model = ModelDrafter(draft, name="draft")
        spark = DSparkDrafter(model, TopProbConfidence.load("draft"), schedule(target, model), name=name)
        # --cost-aware: the gate shuts the rounds where the draft's measured acceptance
        # cannot pay (chat, prose); where it is open the schedule sets each round's length
        if gate is None:
            return spark
        return GatedDrafter(spark, gate(target, draft, gate_tokens, "step", opens=True), name=name, caps=False)

    lookup, plus, model = name.partition("+")
    if plus:
        if lookup not in ("ngram", "suffix") or model not in ("draft", *FEATURE_DRAFTERS):
            raise ValueError(f"unknown drafter {name!r}; choose from {list(KNOWN_DRAFTERS)}")
        return HybridDrafter(make_drafter(lookup, target, draft, args),
                             make_drafter(model, target, draft, args, gate, args.hybrid_model_tokens, schedule),
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
        return GatedDrafter(model, gate(target, draft, gate_tokens, "step"), name="draft")
    raise ValueError(f"unknown drafter {name!r}; choose from {list(KNOWN_DRAFTERS)}")


def build_methods(args, params, pass_costs_out: dict | None = None) -> tuple[dict, dict, object]:
    """name -> callable(ids) -> Request, name -> identity reference name, a tokenizer-bearing target.

    pass_costs_out: filled with target configuration -> the verify-pass costs (relative to
    a one-token step, widths 1..) measured for its gates and schedules, where any were."""
    import torch

    from .draft_model import fast_draft, load_draft
    from .engine import SpeculativeDecoder, VanillaDecoder
    from .gamma import (OPEN_PRIOR, AdaptiveGamma, CostAwareGamma, DraftGate, FixedGamma, measure_pass_costs,
                        measure_propose_cost, measure_step_ratio)

    costs = {}
    ratios = {}

    def gate(target, drafter, max_tokens: int, kind: str, opens: bool = False):
        """The DraftGate of a costly drafter, its cost measured once per target, kind and
        name: "step", the draft model's step (``drafter`` the draft model); "head", one
        EAGLE-3 head step; "block", a DFlash block's one pass (at most its block size)."""
        if kind not in ("step", "head", "block"):
            raise ValueError(f"unknown drafter kind {kind!r}; choose from step, head, block")
        block = kind == "block"
        if block:
            max_tokens = min(max_tokens, drafter.head.block)
        key = (id(target), kind, getattr(drafter, "name", ""))
        if key not in ratios:
            if kind == "step":
                ratios[key] = measure_step_ratio(drafter, target)
            else:
                ratios[key] = measure_propose_cost(drafter, target, max_tokens if block else 1)
        prior = OPEN_PRIOR if opens else {}
        return DraftGate(costs=pass_costs(target), draft_cost=ratios[key], max_tokens=max_tokens, block=block, **prior)

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
    loaded = {}
    for cfg in target_configs(args.targets):
        target = load_config(cfg)
        loaded[cfg] = target
        first = first or target
        draft_hf = None
        if (any(n in ("draft", "dspark") for d in drafters for n in d.partition(":")[0].split("+"))
                or "assisted" in args.hf_methods):
            draft_hf = load_draft(target.model)
        draft_lm = fast_draft(draft_hf, target.dtype) if draft_hf is not None and target.fast else draft_hf
        methods[f"{cfg}:vanilla"] = Ours(VanillaDecoder(target), params)
        reference[f"{cfg}:vanilla"] = f"{cfg}:vanilla"
        if getattr(args, "control", False):  # the A/A test: the very same decoding, measured as a method
            methods[f"{cfg}:vanilla-control"] = Ours(VanillaDecoder(target), params)
            reference[f"{cfg}:vanilla-control"] = f"{cfg}:vanilla"
        for spec in drafters:
            name, _, g = spec.partition(":")
            gated = gate if getattr(args, "cost_aware", False) and not g else None
            if name.startswith("dspark"):  # the schedule sets each round's length, up to G (default 8)
                most = int(g) if g else 8
                drafter = make_drafter(name, target, draft_lm, args, gated, most, schedule=schedule_for(most))
                pol = FixedGamma(most)
            else:  # a lookup hybrid's dspark drafts at most --hybrid-model-tokens, as its schedule allows
                drafter = make_drafter(name, target, draft_lm, args, gated,
                                       schedule=schedule_for(args.hybrid_model_tokens))
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
    if pass_costs_out is not None:
        pass_costs_out.update({cfg: list(costs[id(t)]) for cfg, t in loaded.items() if id(t) in costs})
    return methods, reference, first
