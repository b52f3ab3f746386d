"""The runtime: wires segmenter -> shadow -> store -> real executor -> trace for a turn.

``Runtime(tools, mode=...)``; ``await runtime.run(stream)`` consumes the text deltas
of one model message and returns a :class:`TurnResult`.

Modes:

``baseline``
    the cells run after the stream ends; every tool call runs when the real run
    reaches it.
``lazy``
    as baseline, plus the shadow runs over the finished cells *after* the stream
    ends, concurrently with the real run (parallelises independent calls).
``spec``
    the shadow runs each closed statement *while the message streams* and peeks into
    the unfinished tail, so tool latency overlaps decoding.

In every mode the real executor starts the moment the stream ends; it never waits
for the shadow; the shadow is stopped when the real run finishes and unclaimed
speculations are then cancelled. Every task of a turn lives in one task group, so
none outlives the turn (also when the caller cancels ``run``).

Cells run in order; a cell that raises (or does not parse) ends the turn's real
execution: later cells do not run. ``TurnResult.error`` is that error.
"""

from __future__ import annotations

import dataclasses
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterable, Iterable, Literal

import anyio
import anyio.lowlevel

from .speculation.admission import Admission
from .cell_defs import replayable
from .errors import RuntimeClosedError, StreamAdapterError, StreamError, StreamShapeError
from .execution.inprocess import InProcessExecutor
from .host_budget import DELTA_SLICE_CHARS
from .stream.segmenter import CellClosed, Segmenter, StatementClosed, TailChanged
from .speculation import Budget, Store
from .stream.adapters import StreamNormalizer
from .tools import Tool, as_tool, check_tool_set
from .trace import Trace, TurnStats

if TYPE_CHECKING:  # the shadow's modules load when a runtime first needs them
    from .shadow.limits import Limits
    from .shadow_host.driver import ShadowDriverProtocol
    from .shadow_host.pool import ShadowPool
    from .shadow_host.snapshot import ThreadSnapshot

__all__ = ["Runtime", "TurnResult", "CellResult"]

Mode = Literal["baseline", "lazy", "spec"]
_MODES = ("baseline", "lazy", "spec")
_SHADOWS = ("process", "thread")
_BACKTICKS = re.compile("`+")
# how long the real run may wait for an unfinished namespace copy before cutting it short
_SNAPSHOT_GRACE_S = 0.05


@dataclass
class CellResult:
    index: int
    source: str
    stdout: str = ""
    error: BaseException | None = None
    ran: bool = False          # False: not parsed, or not reached after an earlier error
    complete: bool = True      # False: the message ended inside the fence


@dataclass
class TurnResult:
    namespace: dict[str, Any]
    stdout: str
    error: BaseException | None
    stats: TurnStats
    trace: Trace
    cells: list[CellResult] = field(default_factory=list)


class Runtime:
    """Speculative tool-calling runtime for streamed code cells.

    tools: ``Tool`` objects (plain callables become ``speculate="never"`` tools).
    mode: ``"baseline" | "lazy" | "spec"``.
    executor: ``"inprocess"`` (non-isolated) or ``"subprocess"`` (or an executor object).
    namespace: the initial REPL variables (in-process: used and mutated as is).
    max_in_flight / max_arg_bytes_in_flight: speculative calls and argument bytes in
    flight across this runtime's turns (waits, never refuses; real calls are exempt).
    max_dispatches_per_turn: speculative dispatches per turn (later launches are declined).
    max_output_bytes: default output cap for tools without their own.
    shadow_limits (alias ``limits``): a ``spectool.shadow.Limits`` for the shadow.
    worker_limits: a ``spectool.WorkerLimits`` for the subprocess executor.
    shadow: where the shadow interpreter runs: ``"process"`` (default; a lane of a worker
    process of ``shadow_host.pool``, isolated from the host by hard limits) or ``"thread"``
    (worker threads of this process; not isolated). Default: ``$SPECTOOL_SHADOW`` or
    ``"process"``.
    shadow_pool: a ``spectool.ShadowPool`` (default: the process-wide pool).
    on_event: called synchronously with every trace ``Event`` as it happens (progress
    displays, tests); it must not block.
    admission: ``True`` (default: a speculation is launched only when its expected
    saving beats its expected cost, ``spectool.speculation.admission``), ``False``
    (launch every bet), or an ``Admission`` object (e.g. shared by several runtimes on
    one server).
    """

    def __init__(self, tools: Iterable[Any] = (), mode: Mode = "spec",
                 executor: Any = "inprocess", namespace: dict[str, Any] | None = None, *,
                 max_in_flight: int = 16, max_dispatches_per_turn: int = 256,
                 max_arg_bytes_in_flight: int = 4 << 20, max_output_bytes: int | None = None,
                 shadow_limits: Limits | None = None, languages: tuple[str, ...] = ("repl", "python"),
                 worker_limits: Any = None, on_event: Any = None, limits: Limits | None = None,
                 admission: bool | Admission = True, shadow: str | None = None,
                 shadow_pool: ShadowPool | None = None) -> None:
        if limits is not None:
            if shadow_limits is not None:
                raise ValueError("pass limits or shadow_limits, not both")
            shadow_limits = limits
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, not {mode!r}")
        self.mode: Mode = mode
        self.tools: dict[str, Tool] = {}
        for obj in tools:
            t = as_tool(obj)
            if t.name in self.tools:
                raise ValueError(f"two tools named {t.name!r}")
            self.tools[t.name] = t
        check_tool_set(self.tools)
        if executor == "inprocess":
            self.executor: Any = InProcessExecutor(namespace)
        elif executor == "subprocess":
            from .execution.subprocess_executor import SubprocessExecutor
            self.executor = SubprocessExecutor(namespace, limits=worker_limits)
        elif isinstance(executor, str):
            raise ValueError(f"executor must be 'inprocess' or 'subprocess', not {executor!r}")
        else:
            self.executor = executor
        self.budget = Budget(max_in_flight, max_arg_bytes_in_flight)
        # cost-aware admission (spectool.speculation.admission), learned across this
        # runtime's turns
        if isinstance(admission, bool):
            admission = Admission(enabled=admission)
        elif not isinstance(admission, Admission):
            raise TypeError("admission must be True, False or a "
                            "spectool.speculation.admission.Admission")
        self.admission: Admission = admission
        if shadow is None:
            shadow = os.environ.get("SPECTOOL_SHADOW") or "process"
        if shadow not in _SHADOWS:
            raise ValueError(f"shadow must be one of {_SHADOWS}, not {shadow!r}")
        self.shadow = shadow
        self.shadow_pool = shadow_pool
        if mode != "baseline":
            # import the shadow now, not inside the first turn's worker thread (where its
            # import time would delay the first speculations)
            from . import shadow as _shadow
            from .shadow_host import thread_driver  # noqa: F401
            if shadow == "process" and self.shadow_pool is None:
                from .shadow_host.pool import default_pool
                self.shadow_pool = default_pool()   # warm workers start now
        self.max_dispatches_per_turn = max_dispatches_per_turn
        self.max_output_bytes = max_output_bytes
        self.shadow_limits = shadow_limits
        self.languages = tuple(languages)
        self.on_event = on_event
        # globally unique (a uuid4): idempotency keys never repeat across runtimes or
        # processes
        self.id = uuid.uuid4().hex
        self._turns = 0
        # functions earlier cells defined: name -> (def source, its tree, the function
        # object the real run made); replayed into the next turns' shadow while the
        # name still holds that object, so calls to them can be speculated
        self._defs: dict[str, tuple[str, Any, Any]] = {}
        # cells that ran in another process (the subprocess executor): the allow-listed
        # modules and builtins they may have patched there, and their module aliases
        self._cell_patches: frozenset[str] = frozenset()
        self._module_aliases: dict[str, str] = {}
        self._lock: anyio.Lock | None = None
        self._closed = False

    # ---------------------------------------------------------------- public API
    @property
    def namespace(self) -> dict[str, Any]:
        """The REPL variables now (no dunders, no tool proxies)."""
        return self.executor.variables()

    async def run_cell(self, source: str) -> TurnResult:
        """Run one complete cell given as a string (a one-chunk stream)."""
        fence = "`" * max(3, _longest_backtick_run(source) + 1)
        text = f"{fence}{self.languages[0]}\n{source}\n{fence}\n"
        return await self._run([text], exact_source=source)

    async def run(self, stream: AsyncIterable[Any] | Iterable[Any]) -> TurnResult:
        """Consume one model message and run its cells; see the module docstring.

        ``stream`` yields text deltas in any shape ``spectool.stream.adapters`` accepts
        (str, bytes, OpenAI / litellm / Anthropic / LangChain chunks); ``None`` and empty
        deltas are skipped, an unknown shape raises ``StreamShapeError``.
        """
        return await self._run(stream)

    async def _run(self, stream: Any, exact_source: str | None = None) -> TurnResult:
        if self._closed:
            raise RuntimeClosedError("runtime is closed")
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:  # turns of one runtime share a namespace: one at a time
            self._turns += 1
            turn = _Turn(self, f"{self.id}:t{self._turns}", exact_source)
            return await turn.run(stream)

    async def aclose(self) -> None:
        self._closed = True
        await self.executor.aclose()

    async def __aenter__(self) -> "Runtime":
        await self.executor.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class _Turn:
    """One turn: stream consumption, shadow, real execution, cleanup."""

    def __init__(self, runtime: Runtime, turn_id: str, exact_source: str | None = None) -> None:
        self.rt = runtime
        self.exact_source = exact_source
        self.turn_id = turn_id
        self.trace = Trace(listener=runtime.on_event)
        self.stats = TurnStats()
        self.cells: list[Any] = []
        self.shadow: ShadowDriverProtocol | None = None
        self.store: Store | None = None
        self._pending_statements: list[tuple[str, Any]] = []
        self._too_long = 0

    async def run(self, stream: Any) -> TurnResult:
        rt = self.rt
        await rt.executor.start()
        try:
            return await self._run(stream)
        finally:
            if self.shadow is not None:
                self.shadow.close()

    async def _run(self, stream: Any) -> TurnResult:
        rt = self.rt
        stream_error: BaseException | None = None
        results: list[CellResult] = []
        async with anyio.create_task_group() as tg:
            store = Store(rt.tools, tg, budget=rt.budget, trace=self.trace, stats=self.stats,
                          turn_id=self.turn_id, max_dispatches=rt.max_dispatches_per_turn,
                          max_output_bytes=rt.max_output_bytes,
                          passthrough=rt.mode == "baseline",
                          admission=None if rt.mode == "baseline" else rt.admission)
            shadow_scope = anyio.CancelScope()
            snap = None
            if rt.mode != "baseline":
                from .shadow_host.thread_driver import ShadowDriver
                from .shadow_host.process_driver import ProcessShadowDriver
                variables = rt.executor.variables()
                limits = _turn_limits(rt.shadow_limits, rt._cell_patches)
                if rt.shadow == "process":
                    # the process driver copies the names the fed text mentions at feed
                    # time (before the real run can change them) and sends them over
                    self.shadow = ProcessShadowDriver(rt.tools, store, self.trace,
                                                      limits, _bindings(variables),
                                                      rt.shadow_pool, owner=rt.id)
                else:
                    snap = _snapshot(variables, limits)
                    snap.taken = anyio.Event()
                    tg.start_soon(_take_snapshot, snap)
                    self.shadow = ShadowDriver(rt.tools, store, self.trace, limits, snap)
                self.store = store
                for name, (source, tree, obj) in list(rt._defs.items()):
                    # replayed only while the name holds that object and the object
                    # still does what its source says (cell_defs.replayable)
                    if variables.get(name) is obj and replayable(obj, tree):
                        self._feed_statement(source, tree)
                    else:                       # re-bound or changed since: forget it
                        del rt._defs[name]
                if rt.mode == "spec":
                    tg.start_soon(self._run_shadow, shadow_scope)
            # baseline needs the cells only: its statements are not parsed
            segmenter = Segmenter(rt.languages, parse=rt.mode != "baseline")
            try:
                await self._consume(stream, segmenter)
            except Exception as exc:
                stream_error = exc
            if self.exact_source is not None and stream_error is None:
                # run_cell: the real run executes exactly the given source
                statements = [st for _, sts in self.cells for st in sts]
                self.cells = [(_ExactCell(self.exact_source), statements)]
            self.stats.t_stream = self.trace.now()
            self.trace.add("stream_end", error=None if stream_error is None else repr(stream_error))
            if rt.mode == "spec":
                self.shadow.finish()
            if stream_error is None:
                if rt.mode == "lazy":
                    fed = 0
                    for cell in self.cells:
                        for source, tree in cell[1]:
                            self._feed_statement(source, tree)
                            fed += len(source)
                            if fed >= DELTA_SLICE_CHARS:   # a slice at a time, as streamed
                                fed = 0
                                await anyio.lowlevel.checkpoint()
                    self.shadow.finish()
                    tg.start_soon(self._run_shadow, shadow_scope)
                if snap is not None:    # the real run may now change the namespace
                    await _stop_snapshot(snap)
                elif self.shadow is not None:
                    await self.shadow.freeze()   # the process shadow's copier stops
                t0 = self.trace.now()
                results = await self._execute(store)
                self.stats.t_exec = self.trace.now() - t0
                self._remember_defs(results)
                self._remember_patches(results)
            shadow_scope.cancel()      # the shadow stops when the real run finishes
            store.close()              # unclaimed speculations are cancelled for real
        self.stats.t_turn = self.trace.now()
        self.trace.add("turn_end", **{k: v for k, v in self.stats.to_dict().items()})
        if isinstance(stream_error, (StreamShapeError, StreamAdapterError)):
            raise stream_error  # names the item's type; the stream itself did not fail
        if stream_error is not None:
            raise StreamError(f"the model stream raised: {stream_error!r}") from stream_error
        error = next((c.error for c in results if c.error is not None), None)
        return TurnResult(namespace=rt.executor.variables(),
                          stdout="".join(c.stdout for c in results), error=error,
                          stats=self.stats, trace=self.trace, cells=results)

    async def _consume(self, stream: Any, segmenter: Any) -> None:
        # every accepted delta shape (str, bytes, SDK chunks, ...): spectool.stream.adapters
        normalizer = StreamNormalizer()
        if not hasattr(stream, "__aiter__"):
            for chunk in stream:
                await self._feed(normalizer.feed(chunk), segmenter)
                await anyio.lowlevel.checkpoint()
        else:
            iterator = stream.__aiter__()
            try:
                async for chunk in iterator:
                    await self._feed(normalizer.feed(chunk), segmenter)
            finally:
                aclose = getattr(iterator, "aclose", None)
                if aclose is not None:
                    with anyio.CancelScope(shield=True):
                        await aclose()
        await self._feed(normalizer.close(), segmenter)
        self._handle(segmenter.close())
        self._note_too_long(segmenter)

    async def _feed(self, delta: Any, segmenter: Any) -> None:
        """One delta to the segmenter. A long delta goes in slices of
        ``DELTA_SLICE_CHARS`` with a checkpoint between them: the segmenter's work and
        the statements it closes are handled a slice at a time, never all on one pass
        of the loop (the segmenter accepts any split of the text)."""
        if delta is None or not delta.text:
            return
        text = delta.text
        self.trace.add("chunk", chars=len(text))
        for start in range(0, len(text), DELTA_SLICE_CHARS):
            if start:
                await anyio.lowlevel.checkpoint()
            self._handle(segmenter.feed(text[start:start + DELTA_SLICE_CHARS]))
            self._note_too_long(segmenter)

    def _note_too_long(self, segmenter: Any) -> None:
        """Trace each statement the segmenter left unparsed for its length."""
        while self._too_long < segmenter.too_long:
            self._too_long += 1
            self.trace.add("statement_too_long", limit=segmenter.max_statement_chars)

    def _handle(self, events: list[Any]) -> None:
        spec = self.rt.mode == "spec"
        for ev in events:
            if isinstance(ev, StatementClosed):
                self.trace.add("statement", cell=ev.cell, index=ev.index, lineno=ev.lineno)
                self._pending_statements.append((ev.source, getattr(ev, "tree", None)))
                if spec:
                    self._feed_statement(ev.source, getattr(ev, "tree", None))
            elif isinstance(ev, TailChanged):
                if spec:
                    self.shadow.feed_tail(ev.tail)
            elif isinstance(ev, CellClosed):
                self.trace.add("cell_closed", cell=ev.cell, complete=ev.complete,
                               chars=len(ev.source))
                self.cells.append((ev, self._pending_statements))
                self._pending_statements = []
                if spec:
                    self.shadow.feed_tail("")

    def _feed_statement(self, source: str, tree: Any) -> None:
        """A statement to the shadow."""
        self.shadow.feed_statement(source, tree)

    def _remember_defs(self, results: list[CellResult]) -> None:
        """Top-level ``def`` statements (no decorators) of the cells that ran: kept
        with the function object they made (see ``Runtime._defs``)."""
        if self.rt.mode == "baseline":
            return
        variables = None
        for (_cell, statements), res in zip(self.cells, results):
            if not res.ran or res.error is not None:
                continue
            for source, tree in statements:
                body = getattr(tree, "body", None)
                if (not body or len(body) != 1 or type(body[0]).__name__ != "FunctionDef"
                        or body[0].decorator_list):
                    continue
                if variables is None:
                    variables = self.rt.executor.variables()
                obj = variables.get(body[0].name)
                if callable(obj):
                    self.rt._defs[body[0].name] = (source, tree, obj)

    def _remember_patches(self, results: list[CellResult]) -> None:
        """Cells that ran in another process: what they may have patched there (this
        process's modules show nothing; ``shadow.rebinding.patched_by``)."""
        if self.rt.mode == "baseline" or not getattr(self.rt.executor, "isolated", False):
            return
        from .shadow.rebinding import patched_by
        found: set[str] = set()
        for (_cell, statements), res in zip(self.cells, results):
            if res.ran:
                for _source, tree in statements:
                    found |= patched_by(tree, self.rt._module_aliases)
        if found:
            self.rt._cell_patches |= found

    async def _run_shadow(self, scope: anyio.CancelScope) -> None:
        with scope:
            try:
                await self.shadow.run()
            except Exception as exc:  # the shadow is best effort: never fails the turn
                self.trace.add("shadow_error", where="driver", error=repr(exc))

    async def _execute(self, store: Store) -> list[CellResult]:
        rt = self.rt
        results: list[CellResult] = []
        names = list(rt.tools)
        stopped = False
        for index, (cell, _statements) in enumerate(self.cells):
            res = CellResult(index=index, source=cell.source, complete=cell.complete)
            results.append(res)
            if stopped:
                continue
            self.trace.add("cell_start", cell=index)
            outcome = await rt.executor.run_cell(cell.source, names, store.call)
            res.stdout, res.error, res.ran = outcome.stdout, outcome.error, outcome.ran
            self.trace.add("cell_end", cell=index, ran=outcome.ran,
                           error=None if outcome.error is None else repr(outcome.error))
            if outcome.error is not None:
                stopped = True
        return results


@dataclass(frozen=True)
class _ExactCell:
    source: str
    complete: bool = True


def _turn_limits(limits: Limits | None,
                 cell_patches: frozenset[str] = frozenset()) -> Limits | None:
    """The shadow's limits for one turn: with the allow-listed modules and builtins
    that code in this process has changed since the shadow was imported, or that cells
    run elsewhere may have changed (the shadow reads them as unknown, see
    ``shadow.rebinding``)."""
    from .shadow import Limits
    from .shadow.rebinding import patched_names
    stale = patched_names() | cell_patches
    if not stale:
        return limits
    return dataclasses.replace(limits or Limits(), stale_names=stale)


def _snapshot(variables: dict[str, Any], limits: Limits | None = None) -> ThreadSnapshot:
    """The REPL variables handed to the shadow: a private copy taken at turn start, in
    a worker thread (``_take_snapshot``), and finished or cut short before the real run
    can change anything (a copy taken later, when the shadow first reads a name, could
    see the real run's changes and bet on a stale view).

    ``copy.deepcopy`` would run user ``__deepcopy__`` / ``__reduce_ex__`` code in the
    host, an effect the baseline never has: the shadow's copier copies plain data only
    (exact-type checks, no user code, aliasing kept) and turns everything else into
    Unknown (``spectool.shadow.copying.snapshot``).
    """
    from .shadow_host.snapshot import ThreadSnapshot
    from .shadow.limits import Limits
    return ThreadSnapshot(_bindings(variables), (limits or Limits()).max_namespace_items)


def _bindings(variables: dict[str, Any]) -> dict[str, Any]:
    """The REPL bindings the shadow may read (values a subprocess left opaque excluded)."""
    from .execution.subprocess_executor import Opaque
    return {name: value for name, value in variables.items() if not isinstance(value, Opaque)}


async def _take_snapshot(snap: ThreadSnapshot) -> None:
    """Copy the namespace in a worker thread (a large one would stall the loop). Its
    own limiter: it never queues behind the shared worker threads (a shadow thread
    may be waiting for this very copy)."""
    try:
        await anyio.to_thread.run_sync(snap.take, limiter=anyio.CapacityLimiter(1))
    finally:
        snap.done.set()      # cancelled before the thread started: nothing was copied
        snap.taken.set()


async def _stop_snapshot(snap: ThreadSnapshot) -> None:
    """Before the real run: cut an unfinished copy short (the names not copied yet
    read as Unknown) and wait for the copier to let go of the namespace (it stops
    within one element). Usually the copy finished during the stream: no wait."""
    if not snap.done.is_set():
        # a small namespace is copied in microseconds once its thread runs: give the
        # thread a bounded moment to start, or a fast stream (lazy mode above all) would
        # hand the shadow an empty namespace
        with anyio.move_on_after(_SNAPSHOT_GRACE_S):
            await snap.taken.wait()
    snap.stop()
    if not snap.done.is_set():
        await snap.taken.wait()


def _longest_backtick_run(text: str) -> int:
    """The longest run of backticks in ``text`` (a regex: C speed on a large cell)."""
    return max(map(len, _BACKTICKS.findall(text)), default=0)

