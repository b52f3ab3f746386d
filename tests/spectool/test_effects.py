"""Effects only where the real run goes: idempotent tools get a
globally unique key and a required ``on_unclaimed`` compensation hook; two_phase tools
prepare early, commit on claim and abort otherwise.

Invariant checked by ``Ledger.check``: every run of an idempotent tool's body is either
claimed by the real run (its key reached the namespace) or compensated exactly once,
after the run settled, and never both. The negative controls switch the settlement
off (``spectool.speculation.store.settle`` replaced by a no-op) and show the check fails.

Ordering uses anyio Events and the trace listener; nothing sleeps.
"""

from __future__ import annotations

import anyio
import pytest

import spectool
import spectool.speculation.store
from effects_helpers import Ledger, claimed_keys, open_store, stream_then
from rt_helpers import EventGate, chunks, fenced
from spectool.speculation.ledger import Ledger as OccurrenceLedger


async def launched_turn(tool, head: str, rest: str, **runtime_kwargs) -> spectool.TurnResult:
    """A spec turn of ``tool`` whose message streams ``rest`` only once a speculation
    was launched from ``head``."""
    gate = EventGate("launch")
    rt = spectool.Runtime([tool], mode="spec", on_event=gate, **runtime_kwargs)
    return await rt.run(stream_then(head, gate, rest))


class Broken:
    """A namespace object the shadow cannot model; its method raises for real."""

    def fail(self):
        raise RuntimeError("real failure")


CASES = {
    # the last line does not parse: the real run runs nothing of the cell
    "last_line_syntax_error": ("```repl\na = post('x')\n", "broken = (\n```\n"),
    # the message ends inside an unfinished block: the cell does not parse
    "stream_ends_mid_cell": ("```repl\na = post('x')\n", "if a:\n"),
    # an earlier statement raises for real (the shadow cannot know: opaque object)
    "earlier_statement_raised": ("```repl\nobj.fail()\na = post('x')\n", "b = 1\n```\n"),
}


async def run_case(name: str, ledger: Ledger) -> spectool.TurnResult:
    head, rest = CASES[name]
    return await launched_turn(ledger.tool(), head, rest, namespace={"obj": Broken()})


@pytest.mark.anyio
@pytest.mark.parametrize("case", sorted(CASES))
async def test_unclaimed_idempotent_speculation_is_compensated_once(anyio_backend, case):
    ledger = Ledger()
    res = await run_case(case, ledger)
    assert res.error is not None                       # the real run never made the call
    assert len(ledger.started) == 1                    # the speculation DID run
    assert [(args, kwargs) for _, args, kwargs in ledger.compensated] == [(("x",), {})]
    assert ledger.compensated[0][0] == ledger.started[0]
    ledger.check(claimed_keys(res.namespace))


@pytest.mark.anyio
async def test_negative_control_without_settlement_the_check_fails(anyio_backend, monkeypatch):
    async def no_settle(entry, trace):
        return None

    monkeypatch.setattr(spectool.speculation.store, "settle", no_settle)
    ledger = Ledger()
    res = await run_case("last_line_syntax_error", ledger)
    assert ledger.started and not ledger.compensated
    with pytest.raises(AssertionError, match="neither claimed nor compensated"):
        ledger.check(claimed_keys(res.namespace))


@pytest.mark.anyio
async def test_claimed_idempotent_speculation_is_not_compensated(anyio_backend):
    ledger = Ledger()
    res = await launched_turn(ledger.tool(), "```repl\na = post('x')\n", "b = post('x')\n```\n")
    assert res.error is None and res.stats.hits >= 1
    assert ledger.compensated == []
    assert res.namespace["a"] != res.namespace["b"]     # two occurrences, two keys
    ledger.check(claimed_keys(res.namespace))


@pytest.mark.anyio
async def test_keys_are_unique_across_runtimes_and_turns(anyio_backend):
    ledger = Ledger()
    keys = []
    for _ in range(2):
        rt = spectool.Runtime([ledger.tool()], mode="spec")
        for _ in range(2):
            res = await rt.run(chunks(fenced("a = post('x')\n")))
            keys.append(res.namespace["a"])
    assert len(set(keys)) == 4
    # the key names the runtime (a uuid4), the turn, the tool and the occurrence
    runtime_id, turn, tool, occurrence, digest = keys[0].split(":")
    assert len(runtime_id) == 32 and turn == "t1" and tool == "post" and occurrence == "0"


# ----------------------------------------------------------------- store level


@pytest.mark.anyio
async def test_diverged_arguments_leave_the_speculation_unclaimed(anyio_backend):
    ledger = Ledger()
    post = ledger.tool()
    async with anyio.create_task_group() as tg:
        store = await open_store([post], tg)
        store.launch("post", ("a",), {})
        await anyio.wait_all_tasks_blocked()
        real = await store.call("post", ("b",), {})        # the real run went elsewhere
        store.close()
    assert [args for _, args, _ in ledger.compensated] == [("a",)]
    ledger.check({real})


@pytest.mark.anyio
async def test_cancelled_running_speculation_is_compensated_after_it_settled(anyio_backend):
    ledger = Ledger()
    gate = anyio.Event()                                   # never set: the call hangs
    post = ledger.tool(gate=gate)
    async with anyio.create_task_group() as tg:
        store = await open_store([post], tg)
        store.launch("post", ("a",), {})
        await anyio.wait_all_tasks_blocked()
        assert len(ledger.started) == 1 and ledger.settled == []
        store.close()                                      # turn end: cancelled for real
    assert ledger.settled == ledger.started               # the cancellation settled it
    assert len(ledger.compensated) == 1
    ledger.check(set())


@pytest.mark.anyio
async def test_speculation_that_never_started_is_not_compensated(anyio_backend):
    ledger = Ledger()
    post = ledger.tool(gate=anyio.Event())                 # 'a' holds the one slot
    async with anyio.create_task_group() as tg:
        store = await open_store([post], tg, max_in_flight=1)
        store.launch("post", ("a",), {})
        store.launch("post", ("b",), {})                   # waits for budget
        await anyio.wait_all_tasks_blocked()
        store.close()
    assert len(ledger.started) == 1                        # 'b' never ran...
    assert [args for _, args, _ in ledger.compensated] == [("a",)]   # ...nor is undone
    ledger.check(set())


@pytest.mark.anyio
async def test_turn_cancelled_by_its_caller_still_compensates(anyio_backend):
    ledger = Ledger()
    post = ledger.tool()
    with anyio.CancelScope() as outer:
        async with anyio.create_task_group() as tg:
            store = await open_store([post], tg)
            store.launch("post", ("a",), {})
            await anyio.wait_all_tasks_blocked()        # the call finished, unclaimed
            outer.cancel()                               # no close(): the caller left
    assert len(ledger.started) == 1 and len(ledger.compensated) == 1
    ledger.check(set())


@pytest.mark.anyio
async def test_failing_hook_is_traced_and_does_not_fail_the_turn(anyio_backend):
    def bad_hook(key, args, kwargs):
        raise OSError("compensation backend down")

    @spectool.tool(speculate="idempotent", on_unclaimed=bad_hook)
    async def post(body: str, *, idempotency_key: str) -> str:
        return idempotency_key

    async with anyio.create_task_group() as tg:
        store = await open_store([post], tg)
        store.launch("post", ("a",), {})
        await anyio.wait_all_tasks_blocked()
        store.close()
    assert [e.kind for e in store.trace.events if e.kind.startswith("compensat")] \
        == ["compensation_error"]


# ------------------------------------------------------------------- two phase

class TwoPhaseLedger:
    def __init__(self) -> None:
        self.log: list[tuple] = []

    def tool(self, fail_prepare: bool = False):
        log = self.log

        async def commit(key, prepared):
            log.append(("commit", key, prepared))
            return f"done:{prepared}"

        def abort(key, prepared):
            log.append(("abort", key, prepared))

        @spectool.tool(speculate="two_phase", commit=commit, abort=abort)
        async def transfer(amount: int, *, idempotency_key: str) -> str:
            log.append(("prepare", idempotency_key, amount))
            if fail_prepare:
                raise ValueError("insufficient funds")
            return f"hold-{amount}"

        return transfer

    def kinds(self):
        return [entry[0] for entry in self.log]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["baseline", "spec"])
async def test_two_phase_claimed_prepares_once_and_commits(anyio_backend, mode):
    ledger = TwoPhaseLedger()
    gate = EventGate("launch")
    rt = spectool.Runtime([ledger.tool()], mode=mode, on_event=gate)
    if mode == "spec":
        stream = stream_then("```repl\nr = transfer(5)\n", gate, "```\n")
    else:
        stream = chunks(fenced("r = transfer(5)\n"))
    res = await rt.run(stream)
    assert res.error is None and res.namespace["r"] == "done:hold-5"
    assert ledger.kinds() == ["prepare", "commit"]
    assert ledger.log[0][1] == ledger.log[1][1]             # one key for both phases
    if mode == "spec":
        assert res.stats.hits == 1


@pytest.mark.anyio
async def test_two_phase_unclaimed_is_aborted_with_what_prepare_returned(anyio_backend):
    ledger = TwoPhaseLedger()
    res = await launched_turn(ledger.tool(), "```repl\nr = transfer(5)\n", "broken = (\n```\n")
    assert isinstance(res.error, SyntaxError)
    assert ledger.kinds() == ["prepare", "abort"]
    assert ledger.log[1][1:] == (ledger.log[0][1], "hold-5")


@pytest.mark.anyio
async def test_two_phase_failed_prepare_is_aborted_with_none_and_raises_on_claim(anyio_backend):
    ledger = TwoPhaseLedger()
    async with anyio.create_task_group() as tg:
        store = await open_store([ledger.tool(fail_prepare=True)], tg)
        store.launch("transfer", (1,), {})
        store.launch("transfer", (2,), {})
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(ValueError, match="insufficient"):
            await store.call("transfer", (1,), {})          # claimed: prepare's error
        store.close()
    assert ledger.kinds() == ["prepare", "prepare", "abort"]
    assert ledger.log[2][2] is None


# ------------------------------------------------------------------- declaration

def test_idempotent_tool_requires_a_compensation_hook():
    with pytest.raises(TypeError, match="on_unclaimed.*required.*did run"):
        @spectool.tool(speculate="idempotent")
        async def post(body: str, *, idempotency_key: str) -> str:
            return body
    with pytest.raises(TypeError, match="on_unclaimed must accept"):
        spectool.tool(speculate="idempotent", on_unclaimed=lambda key: None, name="p")(
            lambda body, *, idempotency_key: body)
    with pytest.raises(TypeError, match="only for speculate='idempotent'"):
        spectool.tool(speculate="pure", on_unclaimed=lambda k, a, kw: None, name="p")(
            lambda x: x)


def test_two_phase_tool_is_validated():
    ok = dict(commit=lambda key, prepared: prepared, abort=lambda key, prepared: None)
    with pytest.raises(TypeError, match="commit.*required"):
        spectool.tool(speculate="two_phase", abort=ok["abort"], name="t")(lambda x: x)
    with pytest.raises(TypeError, match="abort must accept"):
        spectool.tool(speculate="two_phase", commit=ok["commit"], abort=lambda: None, name="t")(
            lambda x: x)
    with pytest.raises(TypeError, match="abort must be callable"):
        spectool.tool(speculate="two_phase", commit=ok["commit"], abort="nope", name="t")(lambda x: x)
    with pytest.raises(ValueError, match="cannot be deterministic"):
        spectool.tool(speculate="two_phase", deterministic=True, name="t", **ok)(lambda x: x)
    with pytest.raises(TypeError, match="only for speculate='two_phase'"):
        spectool.tool(speculate="pure", name="t", **ok)(lambda x: x)
    t = spectool.tool(speculate="two_phase", name="t", **ok)(lambda x: x)
    assert t.speculatable and t.settled and "idempotency_key" not in t.signature.parameters
    batched = spectool.tool(speculate="never", batched_of="t", name="tb")(lambda xs: xs)
    with pytest.raises(ValueError, match="two_phase tool"):
        spectool.Runtime([t, batched])


@pytest.mark.anyio
async def test_two_phase_direct_call_prepares_and_commits(anyio_backend):
    ledger = TwoPhaseLedger()
    assert await ledger.tool().acall(3) == "done:hold-3"
    assert ledger.kinds() == ["prepare", "commit"]
    assert ledger.log[0][1].startswith("direct:")


async def surrogate_runs() -> dict:
    @spectool.tool(speculate="pure")
    async def q(x: str) -> str:
        return "r" + repr(x)

    cell = "s = chr(0xd800)\nv = q(s)\nw = q('\\udc80x')\n"
    out = {}
    for mode in ("baseline", "spec"):
        res = await spectool.Runtime([q], mode=mode).run_cell(cell)
        out[mode] = (repr(res.error), res.namespace)
    return out


@pytest.mark.anyio
async def test_lone_surrogate_arguments_match_baseline(anyio_backend):
    out = await surrogate_runs()
    assert out["spec"] == out["baseline"] and out["baseline"][0] == "None"


@pytest.mark.anyio
async def test_negative_control_a_strict_key_digest_fails_on_a_lone_surrogate(
        anyio_backend, monkeypatch):
    import hashlib

    def strict_place(self, entry, k, occ):             # the old digest: encode() strict
        entry.occurrence = occ
        digest = hashlib.sha256(k[1].encode()).hexdigest()[:16]
        entry.idempotency_key = f"{self.turn_id}:{k[0]}:{occ}:{digest}"
        self._fifo[k].append(entry)

    monkeypatch.setattr(OccurrenceLedger, "_place", strict_place)
    out = await surrogate_runs()
    assert out["spec"] != out["baseline"] and "UnicodeEncodeError" in out["spec"][0]


async def sync_post_order() -> list[str]:
    import threading

    release = threading.Event()
    started = threading.Event()
    log: list[str] = []

    async def on_unclaimed(key, args, kwargs):    # async: runs in the settling task
        log.append("compensated")

    @spectool.tool(speculate="idempotent", on_unclaimed=on_unclaimed)
    def post(body: str, *, idempotency_key: str) -> str:
        started.set()
        release.wait(10)
        log.append("returned")
        return idempotency_key

    async with anyio.create_task_group() as tg:
        store = await open_store([post], tg)
        store.launch("post", ("a",), {})
        await anyio.to_thread.run_sync(started.wait, 10)
        store.close()                              # turn end: the call is cancelled
        await anyio.wait_all_tasks_blocked()
        log.append("released")
        release.set()
    await anyio.to_thread.run_sync(lambda: None)   # let an abandoned thread finish
    while "returned" not in log:
        await anyio.to_thread.run_sync(release.wait, 1)
        await anyio.lowlevel.checkpoint()
    return log


@pytest.mark.anyio
async def test_sync_idempotent_tool_hook_runs_after_the_thread_returned(anyio_backend):
    assert await sync_post_order() == ["released", "returned", "compensated"]


@pytest.mark.anyio
async def test_negative_control_an_abandoned_thread_is_compensated_too_early(
        anyio_backend, monkeypatch):
    import functools

    from spectool.tools import Tool

    async def abandoning(self, args, kwargs):     # the pure/never behaviour
        return await anyio.to_thread.run_sync(functools.partial(self.fn, *args, **kwargs),
                                              abandon_on_cancel=True)

    monkeypatch.setattr(Tool, "_invoke", abandoning)
    assert (await sync_post_order())[0] == "compensated"


async def claim_then_cancel(speculate_first: bool = True) -> list[tuple]:
    log: list[tuple] = []
    gate = anyio.Event()
    started = anyio.Event()

    def abort(key, prepared):
        log.append(("abort", prepared))

    @spectool.tool(speculate="two_phase", commit=lambda key, p: log.append(("commit", p)),
                   abort=abort)
    async def transfer(amount: int) -> str:
        started.set()
        await gate.wait()
        return f"hold-{amount}"

    with anyio.CancelScope() as outer:
        async with anyio.create_task_group() as tg:
            store = await open_store([transfer], tg)
            if speculate_first:
                store.launch("transfer", (5,), {})
                await started.wait()                   # the speculative prepare runs

            async def real_call():
                await store.call("transfer", (5,), {})

            tg.start_soon(real_call)
            await anyio.wait_all_tasks_blocked()       # claimed, waiting for prepare
            outer.cancel()
    return log


@pytest.mark.anyio
async def test_two_phase_claim_cancelled_before_commit_is_aborted(anyio_backend):
    """The real call claimed the prepare but the turn was cancelled while it waited:
    nothing was committed, so the prepare is aborted (once)."""
    assert await claim_then_cancel() == [("abort", None)]


@pytest.mark.anyio
async def test_two_phase_real_call_cancelled_during_its_prepare_is_aborted(anyio_backend):
    assert await claim_then_cancel(speculate_first=False) == [("abort", None)]


@pytest.mark.anyio
async def test_negative_control_claimed_counts_as_settled_leaks_the_hold(anyio_backend,
                                                                        monkeypatch):
    import spectool.speculation.effects as effects
    monkeypatch.setattr(effects, "_unclaimed", lambda entry: not entry.claimed)
    assert await claim_then_cancel() == []


async def never_tool_mutates_argument() -> tuple[Ledger, spectool.TurnResult]:
    ledger = Ledger()
    post = ledger.tool()

    @spectool.tool
    def add(lst):                                      # a never tool with an effect on
        lst.append(99)                                 # the container it is passed
        return len(lst)

    gate = EventGate("shadow_statement", 2)
    rt = spectool.Runtime([add, post], mode="spec", namespace={"xs": [1]}, on_event=gate)
    res = await rt.run(stream_then("```repl\nn = add(xs)\nr = post(str(xs))\n", gate,
                                   "```\n"))
    return ledger, res


@pytest.mark.anyio
async def test_a_never_tool_may_change_what_it_is_passed(anyio_backend):
    ledger, res = await never_tool_mutates_argument()
    assert res.namespace["xs"] == [1, 99] and res.namespace["r"].count(":") == 4
    assert ledger.compensated == []                    # no bet on the old "[1]"
    ledger.check(claimed_keys(res.namespace))


@pytest.mark.anyio
async def test_negative_control_unpoisoned_arguments_bet_on_a_stale_view(anyio_backend,
                                                                       monkeypatch):
    monkeypatch.setenv("SPECTOOL_SHADOW", "thread")   # the patches act on this process
    from spectool.shadow.calls import CallsMixin
    monkeypatch.setattr(CallsMixin, "_poison_args", lambda self, args, kwargs: None)
    ledger, res = await never_tool_mutates_argument()
    assert [args for _, args, _ in ledger.compensated] == [("[1]",)]
