"""Assemble a server from a configuration, and run it (uvicorn), in the foreground or in a thread.

``ServeConfig`` holds the start-up choices (target configuration, method, γ, gate,
acceptance, attention, rows per pass). ``build(config, target)`` returns the Starlette
app around a fresh ``BatchEngine`` over ``PackedLM(target.fast)`` (the lean forward,
``token_spec.packed``); ``running(app)`` serves it on an
ephemeral 127.0.0.1 port in a background thread for the duration of a ``with`` block
(tests, the load test and the audit's documented runs), and shuts uvicorn down cleanly.
"""

from __future__ import annotations

import copy
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["ServeConfig", "build", "running", "SPECULATIVE_METHODS", "TARGET_CHOICES", "GATE_CHOICES",
           "make_drafter_factory", "load_server_target", "MAX_GAMMA"]

SPECULATIVE_METHODS = ("ngram", "suffix", "draft", "ngram+draft", "dspark", "none")
TARGET_CHOICES = ("auto", "bf16", "bf16-q4", "fp32")  # the bench's target configurations, and auto
GATE_CHOICES = ("auto", "on", "off")
# the most draft tokens per sequence and step (--gamma): the widest exact verify segment is
# the lean forward's padding width (fast_forward.PAD_WIDTH, 16 rows) = the pending token + 15
MAX_GAMMA = 15


@dataclass
class ServeConfig:
    model_name: str = "smollm2-135m-instruct"
    speculative: str = "ngram"
    gamma: int = 4
    gate: str = "auto"
    acceptance: str = "strict"
    relaxed_threshold: float = 0.1
    attention: str = "exact"
    target: str = "auto"
    max_rows: int = 16
    max_seqs: int = 32
    default_max_tokens: int = 256

    def __post_init__(self) -> None:
        if self.speculative not in SPECULATIVE_METHODS:
            raise ValueError(f"--speculative must be one of {SPECULATIVE_METHODS}, got {self.speculative!r}")
        if self.acceptance not in ("strict", "relaxed"):
            raise ValueError(f"--acceptance must be 'strict' or 'relaxed', got {self.acceptance!r}")
        if self.gamma < 1:
            raise ValueError(f"--gamma must be >= 1, got {self.gamma}")
        if self.target not in TARGET_CHOICES:
            raise ValueError(f"--target must be one of {TARGET_CHOICES}, got {self.target!r}")
        if self.gate not in GATE_CHOICES:
            raise ValueError(f"--gate must be one of {GATE_CHOICES}, got {self.gate!r}")
        if self.attention not in ("exact", "sdpa"):
            raise ValueError(f"--attention must be 'exact' or 'sdpa', got {self.attention!r}")
        if self.max_rows < 1 or self.max_seqs < 1 or self.default_max_tokens < 1:
            raise ValueError("--max-rows, --max-seqs and --default-max-tokens must be >= 1")
        if not 0.0 < self.relaxed_threshold <= 1.0:
            raise ValueError(f"--relaxed-threshold must be in (0, 1], got {self.relaxed_threshold}")
        if self.acceptance == "relaxed" and self.speculative == "none":
            raise ValueError("--acceptance relaxed needs a drafter (--speculative ngram|suffix|draft|ngram+draft)")


class _SuffixView:
    """One request's view of a shared ``SuffixDrafter``: its own context index, the
    shared corpus of earlier outputs (read only), and ``end`` feeding the shared one."""

    def __init__(self, shared) -> None:
        self.shared = shared
        self.name = shared.name
        self.view = copy.copy(shared)

    def begin(self, prompt_ids) -> None:
        self.view = copy.copy(self.shared)  # shares the corpus; begin() gives it a fresh context
        self.view.begin(prompt_ids)

    def propose(self, context, k, params, generator):
        return self.view.propose(context, k, params, generator)

    def end(self, output_ids) -> None:
        self.shared.end(output_ids)


def make_drafter_factory(method: str, target: Any, dtype: Any = None, *, gate_costs=None, max_tokens: int = 4):
    """A callable giving each request a fresh drafter, or None for ``none``. The draft
    model runs on the lean forward (``fast_draft``) in ``dtype`` (the server's compute
    dtype; default the target's) where the target has one.

    gate_costs: None (ungated) or the target's relative pass costs (``costs[w-1]`` = a
    pass over w rows, ``token_spec.gamma.measure_pass_costs``). Given, every drafter of a
    request (the lookup, the draft model, or both in the hybrid) is wrapped in a
    ``GatedDrafter`` with its own ``DraftGate`` (at most ``max_tokens`` tokens): it drafts
    only in rounds where its acceptance so far pays for the wider verify pass and, for
    the draft model, its own steps (its cost per step relative to a target step is
    measured here, ``measure_step_ratio``; a lookup's is taken as 0). The engine gives
    the gates each step's per-sequence costs at that step's batch width
    (``token_spec.serve.engine.batch_costs``)."""
    from ..drafters import GatedDrafter, HybridDrafter, ModelDrafter, NgramDrafter, SuffixDrafter
    from ..gamma import DraftGate

    def gated(make, draft_cost: float = 0.0):
        if gate_costs is None:
            return make
        return lambda: GatedDrafter(make(), DraftGate(costs=tuple(gate_costs), draft_cost=draft_cost,
                                                      max_tokens=max_tokens))

    if method == "none":
        return None
    if method == "ngram":
        return gated(NgramDrafter)
    if method == "suffix":
        shared = SuffixDrafter()
        return gated(lambda: _SuffixView(shared))
    if method in ("draft", "ngram+draft", "dspark"):
        from ..draft_model import fast_draft, load_draft

        lm = load_draft(target.model)
        if getattr(target, "fast", None) is not None:
            lm = fast_draft(lm, dtype if dtype is not None else target.dtype)
        if method == "dspark":
            return _dspark_factory(lm, target, gate_costs, max_tokens)
        draft_cost = 0.0
        if gate_costs is not None:
            from ..gamma import measure_step_ratio

            draft_cost = measure_step_ratio(lm, target)

        model = gated(lambda: ModelDrafter(lm, confidence=0.4, name="draft"), draft_cost)
        if method == "draft":
            return model
        # the lookup where it matches, the draft model (<= 4 tokens) elsewhere
        lookup = gated(NgramDrafter)
        return lambda: HybridDrafter(lookup(), model(), name="ngram+draft")
    raise ValueError(f"unknown speculative method {method!r}; choose from {SPECULATIVE_METHODS}")


def _dspark_factory(lm, target: Any, costs, max_tokens: int):
    """DSpark (``token_spec.dspark``) over the draft model: each request's rounds verify
    as many drafts as the calibrated confidence and the pass costs make worth it, position
    by position (non-anticipating), at most ``max_tokens``. ``costs``: the target's
    relative pass costs (measured here when None: the schedule needs them). The engine
    sets the schedule's costs to each step's per-sequence share at its batch width, as it
    does for the gates."""
    from ..drafters import ModelDrafter
    from ..dspark import DSparkDrafter, SurvivalSchedule, TopProbConfidence, measure_step_cost
    from ..gamma import measure_pass_costs

    costs = tuple(costs) if costs is not None else measure_pass_costs(target)
    confidence = TopProbConfidence.load("draft")
    draft_cost = measure_step_cost(ModelDrafter(lm, name="draft"), target)

    def make():
        return DSparkDrafter(ModelDrafter(lm, name="draft"), confidence,
                             SurvivalSchedule(costs=costs, draft_cost=draft_cost, max_tokens=max_tokens))

    return make


def load_server_target(choice: str, *, exact: bool = True, attention: str = "eager"):
    """The target for ``--target`` (the bench's configurations): ``auto`` (bf16 where the
    CPU has native bf16, else fp32), ``bf16``, ``bf16-q4`` (Q4_1 layers, Q8_0 head) or
    ``fp32``, on the lean forward."""
    import torch

    from ..fast_forward import FastLlama
    from ..target import load_target

    if choice not in TARGET_CHOICES:
        raise ValueError(f"--target must be one of {TARGET_CHOICES}, got {choice!r}")
    kwargs: dict[str, Any] = {"exact": exact}
    if choice == "bf16":
        kwargs["dtype"] = torch.bfloat16
    elif choice == "fp32":
        kwargs["dtype"] = torch.float32
    elif choice == "bf16-q4":
        kwargs.update(dtype=torch.bfloat16, weights="q4")
    target = load_target(**kwargs)
    if attention != "eager":
        fast = target.fast
        linears = None if fast.weights == "float" else [layer[1:3] + layer[4:6] for layer in fast.layers]
        target.fast = FastLlama(target.model, fast.dtype, exact=exact, attention=attention, linears=linears,
                                head=None if linears is None else fast._head)
    return target


def target_label(target: Any) -> str:
    """``bf16``, ``bf16-q4`` or ``fp32``: the configuration a loaded target runs."""
    import torch

    fast = target.fast
    if fast.dtype == torch.float32:
        return "fp32"
    return "bf16" if fast.weights == "float" else "bf16-q4"


def build(config: ServeConfig, target: Any = None):
    """The app for ``config`` over ``target`` (a ``Target`` on the lean forward; loaded
    for ``config.target`` when None)."""
    from ..packed import PackedLM
    from .app import ServerInfo, build_app
    from .engine import BatchEngine
    from .switch import DraftSwitch

    if target is None:
        target = load_server_target(config.target, exact=config.attention == "exact")
    if getattr(target, "fast", None) is None:
        raise ValueError("the server runs on the lean forward: load the target with fast=True")
    lm = PackedLM(target.fast)
    costs = None
    if config.speculative == "dspark" or (config.speculative != "none" and config.gate in ("auto", "on")):
        from ..gamma import measure_pass_costs

        costs = measure_pass_costs(target, max_width=lm.max_rows)
    engine = BatchEngine(
        lm, target.tokenizer, getattr(target, "eos_ids", (target.eos_id,)),
        drafter_factory=make_drafter_factory(config.speculative, target, lm.dtype, gate_costs=costs,
                                             max_tokens=config.gamma),
        gamma=config.gamma, max_rows=config.max_rows, max_seqs=config.max_seqs, acceptance=config.acceptance,
        relaxed_threshold=config.relaxed_threshold, pass_costs=costs,
        switch=DraftSwitch() if config.speculative != "none" and config.gate in ("auto", "on") else None,
    )
    info = ServerInfo(model_name=config.model_name, speculative=config.speculative, gamma=config.gamma,
                      acceptance=config.acceptance, attention=config.attention, dtype=target_label(target),
                      default_max_tokens=config.default_max_tokens)
    return build_app(engine, target.tokenizer, info, encode_chat=target.encode, encode_text=target.encode)


@contextmanager
def running(app, host: str = "127.0.0.1", *, startup_timeout: float = 60.0) -> Iterator[str]:
    """Serve ``app`` with uvicorn on an ephemeral port in a thread; yield its base URL
    (``http://host:port``). The server is shut down (and the thread joined) on exit."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on", ws="none",
                            loop="asyncio", http="h11", timeout_graceful_shutdown=10)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + startup_timeout
        while not server.started:  # readiness wait (uvicorn offers no event to wait on)
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server on port {port} did not start")
            time.sleep(0.02)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()
