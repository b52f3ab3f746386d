"""Simulated models for the OOLONG benchmark's embedded default (**simulated**).

Nothing here is a real language model. Three pieces, all seeded and deterministic:

* ``DecodingModel`` + ``SimulatedRootModel``: a root model that streams the text of
  RLM-style programs (written by ``spectool_bench.programs``) token by token. A token is a
  few characters (``split_tokens``). Emission times follow a decoding-speed model:
  *vanilla* decoding emits one token per step time ``1 / tokens_per_s``; *speculative*
  decoding emits bursts of ``tau = accepted + 1`` tokens per verification round, each
  round costing ``gamma * t_draft + t_verify`` (accepted drafted tokens drawn with a
  per-position acceptance probability, as in Leviathan et al.).
* ``SimulatedServer``: a shared inference server of finite capacity. At most
  ``max_batch`` requests are served at once (others queue, FIFO); with ``n`` requests
  in service each one progresses at ``1 / (1 + alpha * (n - 1))`` of its solo speed (a
  batching curve: throughput grows sub-linearly with the batch). Every request,
  speculative or not, occupies capacity until it finishes or is cancelled; a cancelled
  request frees its slot at once.
* ``SimulatedSubModel``: ``async complete(prompt) -> str``. It finds the instance
  lines in the prompt, reads their hidden labels from the generator's side table
  (``Window.label_of``), and answers each one right with probability ``accuracy``
  (a random wrong label otherwise), seeded by ``(seed, prompt)`` so every mode gets the
  same answer to the same prompt. Its solo service time ("work") grows with prompt
  and output length: ``base_s + prompt_tokens / prefill_tps + output_tokens / decode_tps``.

All latencies are in *simulated seconds*; they are slept as
``simulated_seconds * time_scale`` real seconds with anyio, so a run keeps the ratios
of a realistic deployment while taking a fraction of the wall time.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

import anyio

from .oolong.model import estimate_tokens

SIMULATED = "simulated"  # the label every output of these models carries

_TOKEN_RE = re.compile(r"\s*[A-Za-z_]+|\s*\d{1,3}|\s*[^\sA-Za-z_\d]|\s+")


def split_tokens(text: str, max_chars: int = 6) -> list[str]:
    """Split text into simulated tokens of a few characters (words, digits, symbols;
    long words cut into pieces of at most ``max_chars``). ``"".join`` restores the text."""
    out: list[str] = []
    for m in _TOKEN_RE.finditer(text):
        piece = m.group(0)
        while len(piece) > max_chars:
            out.append(piece[:4])
            piece = piece[4:]
        out.append(piece)
    assert "".join(out) == text
    return out


def prompt_digest(prompt: str) -> str:
    """The short digest the server's records carry for a sub-model prompt."""
    return hashlib.sha256(prompt.encode()).hexdigest()[:12]


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()
    return random.Random(int(digest[:16], 16))


# --- decoding speed ----------------------------------------------------------------


@dataclass(frozen=True)
class DecodingModel:
    """Token emission times of a root model (simulated seconds from request start).

    ``kind="vanilla"``: token ``i`` at ``ttft + (i + 1) / tokens_per_s``.
    ``kind="speculative"``: rounds of ``gamma * t_draft + t_verify`` seconds, where
    ``t_verify = verify_cost * step`` and ``t_draft = draft_cost * step`` with
    ``step = 1 / tokens_per_s``; each round emits ``accepted + 1`` tokens at its end,
    ``accepted`` counting leading drafted tokens accepted with probability
    ``acceptance`` each (at most ``gamma``).
    """

    kind: str = "vanilla"
    tokens_per_s: float = 100.0
    ttft_s: float = 0.25
    gamma: int = 4
    acceptance: float = 0.7
    draft_cost: float = 0.05
    verify_cost: float = 1.1

    def __post_init__(self) -> None:
        if self.kind not in ("vanilla", "speculative"):
            raise ValueError(f"decoding kind must be 'vanilla' or 'speculative', got {self.kind!r}")
        if self.tokens_per_s <= 0:
            raise ValueError("tokens_per_s must be > 0")

    @property
    def step_s(self) -> float:
        return 1.0 / self.tokens_per_s

    def expected_tau(self) -> float:
        a, g = self.acceptance, self.gamma
        return (1 - a ** (g + 1)) / (1 - a) if a < 1 else g + 1.0

    def schedule(self, n_tokens: int, rng: random.Random) -> list[float]:
        """Emission time of each of ``n_tokens`` tokens."""
        times: list[float] = []
        if self.kind == "vanilla":
            return [self.ttft_s + (i + 1) * self.step_s for i in range(n_tokens)]
        t = self.ttft_s
        round_s = self.gamma * self.draft_cost * self.step_s + self.verify_cost * self.step_s
        while len(times) < n_tokens:
            accepted = 0
            while accepted < self.gamma and rng.random() < self.acceptance:
                accepted += 1
            t += round_s
            times.extend([t] * min(accepted + 1, n_tokens - len(times)))
        return times


# --- root model ----------------------------------------------------------------------


@dataclass
class StreamRecord:
    """What one streamed message looked like: for the timeline and the oracle bound."""

    turn: int
    t_start: float  # real clock (anyio.current_time) when stream() was first iterated
    chars: int
    token_ends: list[int]  # cumulative character offset after each token
    token_times: list[float]  # simulated seconds after t_start at which each token was due

    def char_time(self, offset: int) -> float:
        """Simulated time (from stream start) at which character ``offset - 1`` had arrived,
        i.e. when the first ``offset`` characters of the message were all streamed."""
        if offset <= 0:
            return 0.0
        lo, hi = 0, len(self.token_ends) - 1
        while lo < hi:  # first token whose end covers the offset
            mid = (lo + hi) // 2
            if self.token_ends[mid] >= offset:
                hi = mid
            else:
                lo = mid + 1
        return self.token_times[lo]

    @property
    def duration(self) -> float:
        return self.token_times[-1] if self.token_times else 0.0


class SimulatedRootModel:
    """A **simulated** root model that streams a scripted RLM-style program.

    ``turns`` are the assistant messages, one per turn (turn = number of assistant
    messages already in ``messages``); past the last one it repeats the last. The
    stream sleeps until each token's due time (absolute schedule: processing delays in
    the consumer do not accumulate; tokens already due are sent as one delta).
    """

    label = SIMULATED

    def __init__(self, turns: Sequence[str], decoding: DecodingModel, *, seed: int = 0,
                 time_scale: float = 0.1, name: str = "simulated-root") -> None:
        if not turns:
            raise ValueError("a simulated root model needs at least one turn")
        self.turns = list(turns)
        self.decoding = decoding
        self.seed = seed
        self.time_scale = time_scale
        self.name = name
        self.records: list[StreamRecord] = []
        self.turn = 0

    def plan(self, turn: int) -> StreamRecord:
        """The token split and schedule of ``turn`` (deterministic), without streaming."""
        text = self.turns[min(turn, len(self.turns) - 1)]
        tokens = split_tokens(text)
        ends, total = [], 0
        for tok in tokens:
            total += len(tok)
            ends.append(total)
        times = self.decoding.schedule(len(tokens), _rng("decode", self.seed, turn))
        return StreamRecord(turn, 0.0, total, ends, times)

    async def stream(self, messages: list[dict]) -> AsyncIterator[str]:
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        self.turn = turn
        text = self.turns[min(turn, len(self.turns) - 1)]
        record = self.plan(turn)
        record.t_start = anyio.current_time()
        self.records.append(record)
        pos = 0
        i, n = 0, len(record.token_times)
        while i < n:
            await anyio.sleep_until(record.t_start + record.token_times[i] * self.time_scale)
            now = anyio.current_time()
            j = i + 1
            while j < n and record.t_start + record.token_times[j] * self.time_scale <= now:
                j += 1
            end = record.token_ends[j - 1]
            yield text[pos:end]
            pos, i = end, j


# --- shared server ----------------------------------------------------------------


@dataclass
class Request:
    """One request to the simulated server, as recorded (real clock times)."""

    kind: str  # "sub" (sub-model) | "tool" (a non-speculatable tool's simulated latency)
    episode: str
    turn: int
    work: float  # solo service time, simulated seconds
    t_submit: float
    t_start: float | None = None
    t_end: float | None = None
    status: str = "queued"  # queued | running | done | cancelled
    prompt_hash: str = ""


class SimulatedServer:
    """A **simulated** shared server: ``max_batch`` slots and a batching curve."""

    label = SIMULATED

    def __init__(self, *, max_batch: int = 8, alpha: float = 0.12,
                 time_scale: float = 0.1) -> None:
        if max_batch < 1 or alpha < 0 or time_scale <= 0:
            raise ValueError("need max_batch >= 1, alpha >= 0, time_scale > 0")
        self.max_batch = max_batch
        self.alpha = alpha
        self.time_scale = time_scale
        self.requests: list[Request] = []
        self.running = 0
        self.peak_running = 0
        self._slots: anyio.Semaphore | None = None  # made on first use, inside the event loop
        self._changed: anyio.Event | None = None

    def slowdown(self, n: int) -> float:
        """Latency multiplier with ``n`` requests in service (1 when alone)."""
        return 1.0 + self.alpha * max(n - 1, 0)

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
        self._changed = anyio.Event()

    async def serve(self, work: float, *, episode: str = "", turn: int = 0,
                    prompt_hash: str = "") -> Request:
        """Occupy the server for ``work`` solo-seconds of service (stretched by the load)."""
        req = Request("sub", episode, turn, work, anyio.current_time(), prompt_hash=prompt_hash)
        self.requests.append(req)
        if self._slots is None:
            self._slots = anyio.Semaphore(self.max_batch)
            self._changed = anyio.Event()
        try:
            async with self._slots:
                req.t_start, req.status = anyio.current_time(), "running"
                self.running += 1
                self.peak_running = max(self.peak_running, self.running)
                self._notify()
                try:
                    remaining = work
                    while remaining > 1e-6:
                        rate = 1.0 / self.slowdown(self.running)
                        changed, t0 = self._changed, anyio.current_time()
                        with anyio.move_on_after(remaining / rate * self.time_scale):
                            await changed.wait()
                        remaining -= (anyio.current_time() - t0) / self.time_scale * rate
                finally:
                    self.running -= 1
                    self._notify()
            req.status = "done"
        finally:
            req.t_end = anyio.current_time()
            if req.status != "done":
                req.status = "cancelled"
        return req


# --- sub-model -------------------------------------------------------------------------


@dataclass(frozen=True)
class SubModelLatency:
    """Solo service time of one sub-call: ``base_s + prompt/prefill_tps + output/decode_tps``."""

    base_s: float = 0.2
    prefill_tps: float = 4000.0
    decode_tps: float = 80.0

    def work(self, prompt: str, output: str) -> float:
        return (self.base_s + estimate_tokens(prompt) / self.prefill_tps
                + estimate_tokens(output) / self.decode_tps)


_INSTANCE = "Instance: "


def instance_texts(prompt: str) -> list[str]:
    """Instance texts in a prompt, in order: whatever follows ``Instance: `` on a line,
    up to a `` => `` annotation if the prompt proposes a label."""
    out = []
    for line in prompt.split("\n"):
        k = line.find(_INSTANCE)
        if k < 0:
            continue
        text = line[k + len(_INSTANCE):]
        cut = text.find(" => ")
        out.append((text[:cut] if cut >= 0 else text).strip())
    return out


class SimulatedSubModel:
    """A **simulated** sub-model behind a ``SimulatedServer``.

    ``label_of``: the generator's side table (instance text -> hidden label);
    ``labels``: the label set (wrong answers are drawn from it). For a prompt with
    instance lines the answer is one label per line, in order; for a prompt without
    any it answers ``"unknown"``. ``episode``/``turn_of`` tag the server's records.
    """

    label = SIMULATED

    def __init__(self, server: SimulatedServer, label_of: dict[str, str],
                 labels: Sequence[str], *, accuracy: float = 0.95, seed: int = 0,
                 latency: SubModelLatency = SubModelLatency(), episode: str = "",
                 turn_of: Callable[[], int] | None = None) -> None:
        if not 0.0 <= accuracy <= 1.0:
            raise ValueError("accuracy must be in [0, 1]")
        self.server = server
        if not labels:
            raise ValueError("the simulated sub-model answers from the instances' labels, "
                             "and this window has none: use a real sub-model")
        self.label_of = label_of
        self.labels = list(labels)
        self.accuracy = accuracy
        self.seed = seed
        self.latency = latency
        self.episode = episode
        self.turn_of = turn_of or (lambda: 0)
        self.calls = 0

    def answer(self, prompt: str) -> str:
        """The answer to ``prompt`` (pure: same prompt and seed, same answer)."""
        rng = _rng("sub", self.seed, prompt)
        out = []
        for text in instance_texts(prompt):
            truth = self.label_of.get(text)
            if truth is None:
                out.append(rng.choice(self.labels))
            elif rng.random() < self.accuracy or len(self.labels) < 2:
                out.append(truth)
            else:
                out.append(rng.choice([x for x in self.labels if x != truth]))
        return "\n".join(out) if out else "unknown"

    async def complete(self, prompt: str) -> str:
        self.calls += 1
        output = self.answer(prompt)
        await self.server.serve(self.latency.work(prompt, output), episode=self.episode,
                                turn=self.turn_of(), prompt_hash=prompt_digest(prompt))
        return output


@dataclass
class SimulatedToolLatency:
    """Records the fixed latency of a non-speculatable simulated tool."""

    time_scale: float
    requests: list[Request] = field(default_factory=list)

    async def wait(self, seconds: float, *, episode: str, turn: int) -> None:
        req = Request("tool", episode, turn, seconds, anyio.current_time())
        req.t_start, req.status = req.t_submit, "running"
        self.requests.append(req)
        try:
            await anyio.sleep(seconds * self.time_scale)
            req.status = "done"
        finally:
            req.t_end = anyio.current_time()
            if req.status != "done":
                req.status = "cancelled"
