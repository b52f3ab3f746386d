"""token_spec: lossless speculative decoding.

A drafter proposes γ tokens, the target scores them in one forward pass, and
rejection sampling (``verify``) keeps the emitted sequence distributed exactly as the
target's (Leviathan et al. 2023; Chen et al. 2023)::

    import token_spec

    out = token_spec.verify(target_probs, draft_tokens, draft_probs)   # 1..k+1 tokens

    target = token_spec.load_target()                     # SmolLM2-135M-Instruct, offline
    decoder = token_spec.SpeculativeDecoder(target, token_spec.NgramDrafter())
    async for text in decoder.stream("Write a haiku", token_spec.SamplingParams()):
        print(text, end="")

The pure pieces (sampling, sampler, gamma, relaxed, rounds) import only torch; the
model-backed names (``load_target``, the decoders, the drafters, ``load_draft``) load
the model code too. Every name is imported on first use, so ``import token_spec`` stays
cheap and imports no torch (the command line checks its flags before torch loads).
"""

from __future__ import annotations

import importlib
import importlib.util
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# The core install (pip install spectool) has no torch: say what to install. Found, not
# imported: the command line checks its flags before torch loads.
if importlib.util.find_spec("torch") is None:  # pragma: no cover - exercised by tests/test_core_install.py
    raise ImportError("token_spec needs the token extra: pip install 'spectool[token]' "
                      "(on a CPU-only machine install torch from PyTorch's CPU index first; "
                      "No module named 'torch')")

# name -> submodule, imported on first attribute access (PEP 562)
_LAZY = {
    "AdaptiveGamma": "gamma",
    "CostAwareGamma": "gamma",
    "DraftGate": "gamma",
    "FixedGamma": "gamma",
    "GammaPolicy": "gamma",
    "RelaxedResult": "relaxed",
    "RelaxedVerifier": "relaxed",
    "verify_relaxed": "relaxed",
    "speculative_ids": "rounds",
    "vanilla_ids": "rounds",
    "verify": "sampler",
    "SamplingParams": "sampling",
    "sample": "sampling",
    "warp": "sampling",
    "load_target": "target",
    "Target": "target",
    "TargetUnavailable": "target",
    "SpeculativeDecoder": "engine",
    "VanillaDecoder": "engine",
    "Generation": "engine",
    "Draft": "drafters",
    "Drafter": "drafters",
    "NgramDrafter": "drafters",
    "SuffixDrafter": "drafters",
    "ModelDrafter": "drafters",
    "HybridDrafter": "drafters",
    "GatedDrafter": "drafters",
    "CausalLM": "models",
    "LMSession": "models",
    "HFCausalLM": "models",
    "SpecMetrics": "metrics",
    "MetricsBook": "metrics",
    "load_draft": "draft_model",
    "fast_draft": "draft_model",
    "DraftModel": "draft_model",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'token_spec' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = list(_LAZY)
