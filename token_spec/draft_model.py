"""A small draft model that shares SmolLM2-135M-Instruct's tokenizer and embeddings.

No draft model for SmolLM2 exists offline, so the project builds one
(``scripts/build_draft.py``): a LLaMA-architecture model with the target's config but
only ``n`` decoder layers (``n = 2`` as shipped), initialised from the target's first
layers and final norm and distilled from the target's logits.

The draft reuses the target's token embedding, which is also its LM head (tied, as in
SmolLM2). The 49152 x 576 embedding is most of the target's parameters, so the shipped
file ``token_spec/data/draft-smollm2-<n>l.safetensors`` holds only the draft's own
weights (decoder layers + final norm in fp16, ~14 MB, and the ids of its output
vocabulary); ``load_draft`` attaches the target's embedding at load time (shared, not
copied) and computes in fp32.

Output vocabulary: on CPU the 49152-wide LM head costs more than two decoder layers, so
the draft predicts over a subset of the vocabulary (the tokens with the most target
probability mass on the build's training text, see ``SubsetHead``) and gives every other
token probability 0. Its logits rows are still full width ``[n, 49152]`` (``-inf``
outside the subset), so engine and HF assisted generation see the target's vocabulary;
speculative decoding stays lossless because the target verifies every proposal.

The returned ``DraftModel`` is a ``CausalLM`` (``token_spec.models.HFCausalLM``:
``start(prompt_ids)`` -> a session with ``extend`` / exact ``truncate``) and exposes the
underlying ``transformers.LlamaForCausalLM`` as ``.hf_model`` for Hugging Face assisted
generation (``target.generate(..., assistant_model=draft.hf_model)``).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from .models import HFCausalLM  # noqa: E402

__all__ = [
    "DraftModel",
    "DraftWeightsMissing",
    "load_draft",
    "fast_draft",
    "default_weights_path",
    "init_draft_from_target",
    "SubsetHead",
    "draft_own_state_dict",
    "save_draft_weights",
    "DEFAULT_LAYERS",
    "REBUILD_COMMAND",
]

DATA_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_LAYERS = 2
REBUILD_COMMAND = "python scripts/build_draft.py"
EMBEDDING_KEY = "model.embed_tokens.weight"
LM_HEAD_KEY = "lm_head.weight"
VOCAB_IDS_KEY = "lm_head.vocab_ids"


class DraftWeightsMissing(FileNotFoundError):
    """The draft's trained weights file is not there (rebuild it with scripts/build_draft.py)."""


def default_weights_path(num_layers: int = DEFAULT_LAYERS) -> Path:
    """``token_spec/data/draft-smollm2-<n>l.safetensors``."""
    return DATA_DIR / f"draft-smollm2-{num_layers}l.safetensors"


def _draft_config(target_config, num_layers: int):
    config = copy.deepcopy(target_config)
    config.num_hidden_layers = int(num_layers)
    config.tie_word_embeddings = True
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        config.layer_types = list(layer_types)[:num_layers]
    return config


class SubsetHead(torch.nn.Module):
    """An LM head over a subset of the vocabulary (the tied embedding's rows ``vocab_ids``).

    ``forward`` returns full-width logits ``[..., V]`` with ``-inf`` outside the subset:
    the draft gives those tokens probability 0, so it never proposes them (lossless:
    the target still decides), and its head costs ``len(vocab_ids) / V`` of a full one.
    ``weight`` is the shared embedding (not the draft's own weight); the rows it uses
    are kept as a non-persistent fp32 copy (the embedding is frozen).
    """

    def __init__(self, weight: torch.nn.Parameter, vocab_ids: torch.Tensor) -> None:
        super().__init__()
        ids = torch.as_tensor(vocab_ids).reshape(-1).long()
        if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= weight.shape[0]:
            raise ValueError(f"draft vocabulary ids must lie in [0, {weight.shape[0]})")
        self.vocab_size = int(weight.shape[0])
        self.weight = weight
        self.register_buffer("vocab_ids", ids.to(torch.int32), persistent=True)
        self.register_buffer("rows", weight.detach()[ids].clone().float(), persistent=False)

    def sub_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the subset only: ``[..., len(vocab_ids)]``."""
        return torch.nn.functional.linear(hidden, self.rows)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        sub = self.sub_logits(hidden)
        full = sub.new_full((*sub.shape[:-1], self.vocab_size), float("-inf"))
        full[..., self.vocab_ids.long()] = sub
        return full


def _attach_shared_embedding(
    draft: torch.nn.Module, target: torch.nn.Module, vocab_ids: torch.Tensor | None = None
) -> None:
    """Make the draft use the target's embedding module (and thus its tied LM head,
    restricted to ``vocab_ids`` when given).

    Shared when the target is fp32; a target in another dtype gets an fp32 copy, so the
    draft always computes in fp32 and never changes the target's parameters."""
    embedding = target.get_input_embeddings()
    if embedding.weight.dtype != torch.float32:
        embedding = torch.nn.Embedding.from_pretrained(
            embedding.weight.detach().float(), freeze=True, padding_idx=embedding.padding_idx
        )
    draft.model.embed_tokens = embedding
    if vocab_ids is None:
        draft.lm_head.weight = embedding.weight
    else:
        draft.lm_head = SubsetHead(embedding.weight, vocab_ids)


def init_draft_from_target(
    target: torch.nn.Module, layers: Sequence[int], vocab_ids: torch.Tensor | None = None
) -> torch.nn.Module:
    """A ``LlamaForCausalLM`` with copies of the target's decoder ``layers`` (in order), its
    final norm and its (shared) embedding / LM head (over ``vocab_ids`` when given): the
    starting point of distillation."""
    from transformers import LlamaForCausalLM

    config = _draft_config(target.config, len(layers))
    draft = LlamaForCausalLM(config)
    own = {}
    src = target.state_dict()
    for new, old in enumerate(layers):
        prefix = f"model.layers.{old}."
        for key, value in src.items():
            if key.startswith(prefix):
                own[f"model.layers.{new}." + key[len(prefix) :]] = value.detach().clone().float()
    own["model.norm.weight"] = src["model.norm.weight"].detach().clone().float()
    _attach_shared_embedding(draft, target, vocab_ids)
    if vocab_ids is not None:
        own["lm_head.vocab_ids"] = draft.lm_head.vocab_ids
    _load_own(draft, own)
    return draft.eval()


def draft_own_state_dict(draft: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The draft's own parameters: everything except the shared embedding / LM head."""
    return {
        k: v.detach()
        for k, v in draft.state_dict().items()
        if k not in (EMBEDDING_KEY, LM_HEAD_KEY) and not k.endswith("rotary_emb.inv_freq")
    }


def save_draft_weights(draft: torch.nn.Module, path: str | os.PathLike, metadata: dict | None = None) -> Path:
    """Write the draft's own weights as fp16 safetensors (``metadata`` values become JSON strings)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {
        k: (v if k == VOCAB_IDS_KEY else v.to(torch.float16)).contiguous() for k, v in draft_own_state_dict(draft).items()
    }
    meta = {"format": "pt", "num_hidden_layers": str(draft.config.num_hidden_layers)}
    for key, value in (metadata or {}).items():
        meta[key] = value if isinstance(value, str) else json.dumps(value)
    save_file(tensors, str(path), metadata=meta)
    return path


def _load_own(draft: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    expected = set(draft_own_state_dict(draft))
    got = set(tensors)
    if got != expected:
        raise ValueError(
            f"draft weights do not fit a {draft.config.num_hidden_layers}-layer draft: "
            f"missing={sorted(expected - got)[:5]} unexpected={sorted(got - expected)[:5]}"
        )
    with torch.no_grad():
        params = dict(draft.named_parameters())
        buffers = dict(draft.named_buffers())
        for key, value in tensors.items():
            dst = params.get(key, buffers.get(key))
            if dst.shape != value.shape:
                raise ValueError(f"draft weight {key} has shape {tuple(value.shape)}, expected {tuple(dst.shape)}")
            if dst.dtype != value.dtype and not dst.dtype.is_floating_point:
                if not torch.equal(dst.long(), value.long()):
                    raise ValueError(f"draft buffer {key} differs from the weights file")
                continue
            dst.copy_(value.to(dst.dtype))


class DraftModel(HFCausalLM):
    """The distilled draft as a ``CausalLM``; ``.hf_model`` is the ``LlamaForCausalLM``.

    ``metadata``: provenance stored in the weights file (layers it was initialised from,
    training steps, seed, measured agreement; see ``draft-smollm2-<n>l.json``).
    """

    def __init__(self, model: torch.nn.Module, *, path: Path | None = None, metadata: dict | None = None) -> None:
        super().__init__(model)
        self.path = path
        self.metadata = dict(metadata or {})

    @property
    def hf_model(self) -> torch.nn.Module:
        return self.model

    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    def __repr__(self) -> str:
        return f"DraftModel(layers={self.num_layers}, vocab={self.vocab_size}, path={self.path})"


def _read_weights(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        raw_meta = f.metadata() or {}
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    meta = {}
    for key, value in raw_meta.items():
        try:
            meta[key] = json.loads(value)
        except ValueError:
            meta[key] = value
    return tensors, meta


def load_draft(
    target_hf_model: torch.nn.Module | None = None,
    *,
    path: str | os.PathLike | None = None,
    num_layers: int = DEFAULT_LAYERS,
) -> DraftModel:
    """Load the shipped draft and attach the target's embedding / LM head.

    target_hf_model: the target's Hugging Face model (``load_target().model``); loaded
    with ``token_spec.target.load_target()`` when omitted. The draft shares (does not
    copy) its embedding, so keep both in the same dtype/device; the draft computes in fp32.
    path: a weights file (default ``token_spec/data/draft-smollm2-<num_layers>l.safetensors``).
    """
    from transformers import LlamaForCausalLM

    weights = Path(path) if path is not None else default_weights_path(num_layers)
    if not weights.is_file():
        raise DraftWeightsMissing(
            f"draft model weights not found at {weights}; rebuild them (under 30 min on 2 CPU cores) with: "
            f"{REBUILD_COMMAND} --layers {num_layers}"
        )
    tensors, meta = _read_weights(weights)
    if target_hf_model is None:
        from .target import load_target

        target_hf_model = load_target().model
    n = int(meta.get("num_hidden_layers", num_layers))
    vocab = int(target_hf_model.config.vocab_size)
    if meta.get("vocab_size") is not None and int(meta["vocab_size"]) != vocab:
        raise ValueError(f"draft was built for a vocabulary of {meta['vocab_size']} tokens, the target has {vocab}")
    draft = LlamaForCausalLM(_draft_config(target_hf_model.config, n))
    _attach_shared_embedding(draft, target_hf_model, tensors.get(VOCAB_IDS_KEY))
    _load_own(draft, {k: (v if k == VOCAB_IDS_KEY else v.float()) for k, v in tensors.items()})
    for name, param in draft.named_parameters():
        if name not in (EMBEDDING_KEY, LM_HEAD_KEY):
            param.requires_grad_(False)
    return DraftModel(draft, path=weights, metadata=meta)


def fast_draft(draft: DraftModel, dtype: torch.dtype | None = None, *, weights: str = "auto"):
    """The draft on the lean forward (``token_spec.fast_forward.FastLlama``, not padded:
    a draft's numerics never reach the output), as a ``CausalLM`` for ``ModelDrafter``.

    dtype: the target's compute dtype (default: bf16 where the CPU has it, else fp32).
    weights: "int8" (decoder weights and the subset head as per-row int8, half the bytes
    of bf16; ``token_spec.int8_weights``), "float" (the dtype itself), or "auto" = int8
    in bf16, float in fp32 (the int8 GEMM takes bf16 activations). Passes wider than
    PAD_WIDTH run the dense bf16 GEMMs either way (``FastLlama(wide_dense=True)``)."""
    from .fast_forward import FastLlama, default_dtype
    from .int8_weights import Int8Linear, int8_layers

    dtype = default_dtype() if dtype is None else dtype
    if weights not in ("auto", "int8", "float"):
        raise ValueError(f"weights must be 'auto', 'int8' or 'float', got {weights!r}")
    if weights == "auto":
        weights = "int8" if dtype == torch.bfloat16 else "float"
    if weights == "float":
        return FastLlama(draft.hf_model, dtype, exact=False)
    if dtype != torch.bfloat16:
        raise ValueError("int8 draft weights run with bf16 activations: pass dtype=torch.bfloat16")
    hf = draft.hf_model
    head = hf.get_output_embeddings()
    ids = getattr(head, "vocab_ids", None)
    rows = head.weight.detach()[ids.long()] if ids is not None else head.weight.detach()
    # a catch-up wider than PAD_WIDTH (the prompt, at a request's first draft) runs dense
    # GEMMs: half the time of the int8 ones over hundreds of rows
    return FastLlama(hf, dtype, exact=False, linears=int8_layers(hf), head=Int8Linear(rows), wide_dense=True)
