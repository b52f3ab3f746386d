"""Speculative decoding on GPUs through vLLM (optional extra: ``pip install '.[vllm]'``).

On a GPU, the token tier is vLLM's own: its rejection sampler is the verified one, and
its drafters (EAGLE-3, DFlash, DSpark, n-gram, a draft model, ...) are configured with
a ``speculative_config`` dict. This module is the thin, testable layer around it:

* ``speculative_config(method, ...)`` builds and validates that dict (pure);
* ``spec_counters_from_metrics`` / ``spec_counters_from_prometheus`` read vLLM's
  spec-decode counters (offline ``LLM.get_metrics()`` objects, or a server's
  ``/metrics`` text) into one ``SpecCounters`` (pure);
* ``VLLMEngine`` wraps ``vllm.LLM`` (imported lazily: vLLM needs a CUDA torch and is
  never imported on CPU machines) and reports per-call counter deltas, since vLLM's
  counters are cumulative.

Counter meanings (vLLM docs, FACTS.md §1): ``num_drafts`` = verification rounds with a
draft, ``num_draft_tokens`` = drafted tokens, ``num_accepted_tokens`` = accepted draft
tokens, ``accepted_per_pos[i]`` = drafts whose first i+1 tokens were all accepted.
Mean acceptance length τ = 1 + accepted / drafts (includes the bonus/recovered token);
vLLM's "acceptance rate" = accepted / draft_tokens (this is not α).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SPEC_METHODS",
    "SpecCounters",
    "speculative_config",
    "spec_counters_from_metrics",
    "spec_counters_from_prometheus",
    "VLLMEngine",
]

# vLLM speculative_config["method"] values (vLLM docs; FACTS.md §1)
SPEC_METHODS = frozenset({
    "ngram", "draft_model", "eagle", "eagle3", "medusa", "mtp", "suffix", "dflash", "dspark",
})
# methods that need a separate draft / head checkpoint in speculative_config["model"]
_NEEDS_MODEL = frozenset({"draft_model", "eagle", "eagle3", "medusa", "dflash", "dspark"})

_PREFIX = "vllm:spec_decode_"
_COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
_PER_POS = "num_accepted_tokens_per_pos"


@dataclass(frozen=True)
class SpecCounters:
    """vLLM spec-decode counters (cumulative, or a difference of two snapshots)."""

    num_drafts: float = 0.0
    num_draft_tokens: float = 0.0
    num_accepted_tokens: float = 0.0
    accepted_per_pos: tuple[float, ...] = field(default_factory=tuple)

    @property
    def mean_acceptance_length(self) -> float | None:
        """τ = 1 + accepted / drafts (tokens per target pass, bonus included)."""
        return None if not self.num_drafts else 1.0 + self.num_accepted_tokens / self.num_drafts

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / draft_tokens, vLLM's "acceptance rate" (not α)."""
        return None if not self.num_draft_tokens else self.num_accepted_tokens / self.num_draft_tokens

    def __sub__(self, other: SpecCounters) -> SpecCounters:
        width = max(len(self.accepted_per_pos), len(other.accepted_per_pos))
        mine = self.accepted_per_pos + (0.0,) * (width - len(self.accepted_per_pos))
        theirs = other.accepted_per_pos + (0.0,) * (width - len(other.accepted_per_pos))
        return SpecCounters(
            self.num_drafts - other.num_drafts,
            self.num_draft_tokens - other.num_draft_tokens,
            self.num_accepted_tokens - other.num_accepted_tokens,
            tuple(a - b for a, b in zip(mine, theirs)),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "num_accepted_tokens_per_pos": list(self.accepted_per_pos),
            "mean_acceptance_length": self.mean_acceptance_length,
            "acceptance_rate": self.acceptance_rate,
        }


def speculative_config(method: str, *, num_speculative_tokens: int, model: str | None = None,
                       **extra: Any) -> dict[str, Any]:
    """The ``speculative_config`` dict for ``vllm.LLM`` / ``vllm serve --speculative-config``."""
    if method not in SPEC_METHODS:
        raise ValueError(f"unknown vLLM speculative method {method!r}; expected one of {sorted(SPEC_METHODS)}")
    if isinstance(num_speculative_tokens, bool) or not isinstance(num_speculative_tokens, int) \
            or num_speculative_tokens < 1:
        raise ValueError(f"num_speculative_tokens must be an int >= 1, got {num_speculative_tokens!r}")
    if method in _NEEDS_MODEL and not model:
        raise ValueError(f"speculative method {method!r} needs model=<draft or head checkpoint>")
    config: dict[str, Any] = {"method": method, "num_speculative_tokens": num_speculative_tokens}
    if model:
        config["model"] = model
    config.update(extra)
    return config


def _base_name(name: str) -> str | None:
    """'vllm:spec_decode_num_drafts_total' -> 'num_drafts' (None for other metrics)."""
    if not name.startswith(_PREFIX):
        return None
    base = name[len(_PREFIX):]
    return base[: -len("_total")] if base.endswith("_total") else base


def spec_counters_from_metrics(metrics: Iterable[Any]) -> SpecCounters:
    """Counters from ``vllm.LLM.get_metrics()`` (objects with ``name`` and ``value``/``values``)."""
    found: dict[str, Any] = {}
    for metric in metrics:
        base = _base_name(getattr(metric, "name", ""))
        if base in _COUNTERS:
            found[base] = found.get(base, 0.0) + float(metric.value)
        elif base == _PER_POS:
            values = tuple(float(v) for v in metric.values)
            old = found.get(base, ())
            width = max(len(old), len(values))
            old += (0.0,) * (width - len(old))
            values += (0.0,) * (width - len(values))
            found[base] = tuple(a + b for a, b in zip(old, values))
    return SpecCounters(
        found.get("num_drafts", 0.0), found.get("num_draft_tokens", 0.0),
        found.get("num_accepted_tokens", 0.0), found.get(_PER_POS, ()),
    )


_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)')
_POSITION = re.compile(r'position="(\d+)"')


def spec_counters_from_prometheus(text: str) -> SpecCounters:
    """Counters from a vLLM server's ``/metrics`` text (summed over label sets)."""
    totals = dict.fromkeys(_COUNTERS, 0.0)
    per_pos: dict[int, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        base = _base_name(match["name"])
        if base is None:
            continue
        try:
            value = float(match["value"])
        except ValueError as exc:
            raise ValueError(f"bad value in metrics line {line!r}") from exc
        if base in totals:
            totals[base] += value
        elif base == _PER_POS:
            pos = _POSITION.search(match["labels"] or "")
            if pos is None:
                raise ValueError(f"{match['name']} sample without a position label: {line!r}")
            per_pos[int(pos.group(1))] = per_pos.get(int(pos.group(1)), 0.0) + value
    positions = tuple(per_pos.get(i, 0.0) for i in range(max(per_pos) + 1)) if per_pos else ()
    return SpecCounters(totals["num_drafts"], totals["num_draft_tokens"],
                        totals["num_accepted_tokens"], positions)


class VLLMEngine:
    """``vllm.LLM`` with speculative decoding and per-call spec-decode counters.

    Needs the ``vllm`` extra and a CUDA GPU. Greedy outputs match vanilla vLLM up to
    the engine's own numerics (vLLM promises algorithmic losslessness, not bitwise
    output stability across batch sizes).
    """

    def __init__(self, model: str, *, speculative: Mapping[str, Any] | None = None, **llm_kwargs: Any):
        try:
            import vllm  # noqa: PLC0415 - optional, GPU-only dependency
        except ImportError as exc:  # pragma: no cover - exercised only where vllm is missing
            raise ImportError("VLLMEngine needs vLLM: pip install 'spectool[vllm]' on a CUDA machine") from exc
        if speculative is not None:
            speculative = speculative_config(**dict(speculative))
        self._vllm = vllm
        self.llm = vllm.LLM(model=model, speculative_config=speculative,
                            disable_log_stats=False, **llm_kwargs)

    def counters(self) -> SpecCounters:
        return spec_counters_from_metrics(self.llm.get_metrics())

    def generate(self, prompts: Sequence[str], *, temperature: float = 0.0, max_tokens: int = 128,
                 top_p: float = 1.0, top_k: int = -1, seed: int | None = None) -> tuple[list[str], SpecCounters]:
        """Texts for ``prompts`` and the spec-decode counters of this call alone."""
        params = self._vllm.SamplingParams(temperature=temperature, max_tokens=max_tokens,
                                           top_p=top_p, top_k=top_k, seed=seed)
        before = self.counters()
        outputs = self.llm.generate(list(prompts), params)
        return [o.outputs[0].text for o in outputs], self.counters() - before
