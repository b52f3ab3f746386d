"""A speculation stands for the real call only where baseline's call would have done
exactly the same: effects and identities, not only equal values.

* A batched tool that takes ``idempotency_key`` gets one key per element it is sent,
  each element's own (never ``None``), unique across elements, turns and runtimes.
* A speculative call is passed a copy of the arguments. When its result (or error)
  holds one of them, baseline's would hold the cell's own object (``b = f(a)``, then
  ``b.append(1)`` changes ``a``); when the tool changed an argument, baseline's call
  would have changed the cell's object. Either way the speculation is not claimed: the
  real call runs with the real arguments (a miss).
* A NaN does not cross the shadow worker protocol (its sign and identity would not
  survive): a bet holding one is declined, a value holding one reaches the worker
  as unknown.

Every check runs against baseline; the negative controls put the old behaviour back.
Ordering uses anyio events and ``wait_all_tasks_blocked``; nothing sleeps.
"""

from __future__ import annotations

import math

import anyio
import pytest

import spectool
import spectool.speculation.claims
from rt_helpers import EventGate
from spectool.shadow_host import protocol as proto
from spectool.shadow import Unknown
from spectool.speculation import Budget, Store
from spectool.speculation.claims import RealCalls
from spectool.trace import Trace, TurnStats


async def open_store(tools, tg):
    return Store({t.name: t for t in tools}, tg, budget=Budget(16, 1 << 20),
                 trace=Trace(), stats=TurnStats(), turn_id="rid:t1")


# ---------------------------------------------------------------- batched keys

class Backend:
    """An idempotent element tool and its batched form; records every key sent."""

    def __init__(self) -> None:
        self.keys: list[object] = []
        self.compensated: list[str] = []
        backend = self

        def forget(key, args, kwargs):
            backend.compensated.append(key)

        @spectool.tool(speculate="idempotent", on_unclaimed=forget)
        async def post(body: str, *, idempotency_key: str) -> str:
            backend.keys.append(idempotency_key)
            await anyio.lowlevel.checkpoint()
            return f"{body}@{idempotency_key}"

        @spectool.tool(speculate="idempotent", on_unclaimed=forget, batched_of="post")
        async def post_batched(bodies: list[str], *, idempotency_key) -> list[str]:
            backend.keys.extend(idempotency_key if isinstance(idempotency_key, list)
                                else [idempotency_key] * len(bodies))
            await anyio.lowlevel.checkpoint()
            if not isinstance(idempotency_key, list):
                return [f"{b}@{idempotency_key}" for b in bodies]
            return [f"{b}@{k}" for b, k in zip(bodies, idempotency_key)]

        self.tools = [post, post_batched]


def element_keys(values: list[str]) -> list[str]:
    return [v.split("@", 1)[1] for v in values]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["baseline", "lazy", "spec"])
async def test_batched_idempotent_elements_get_their_own_keys(anyio_backend, mode):
    backend = Backend()
    rt = spectool.Runtime(backend.tools, mode=mode, shadow="thread")
    seen = []
    for _ in range(2):
        res = await rt.run_cell("r = post_batched(['a', 'b', 'a'])\n")
        assert res.error is None
        keys = element_keys(res.namespace["r"])
        assert all(isinstance(k, str) and k != "None" for k in keys)
        assert len(set(keys)) == 3           # the two 'a' elements are two calls
        seen += keys
    assert len(set(seen)) == 6               # and no key repeats in a later turn
    assert None not in backend.keys


@pytest.mark.anyio
async def test_batched_call_sends_the_keys_of_its_missed_elements(anyio_backend):
    backend = Backend()
    post, post_batched = backend.tools
    async with anyio.create_task_group() as tg:
        store = await open_store(backend.tools, tg)
        store.launch("post", ("a",), {})              # element 0 speculated
        await anyio.wait_all_tasks_blocked()
        out = await store.call("post_batched", (["a", "b", "c"],), {})
        store.close()
    keys = element_keys(out)
    assert len(set(keys)) == 3 and backend.keys.count(keys[0]) == 1
    assert keys[1:] == backend.keys[1:]          # the batched call got the other two
    assert all(k.startswith("rid:t1:post:") for k in keys)


@pytest.mark.anyio
async def test_negative_control_a_batched_call_without_keys_is_caught(anyio_backend,
                                                                      monkeypatch):
    original = spectool.tools.Tool.run

    async def old_run(self, args, kwargs, *, idempotency_key=None, **kw):
        if isinstance(idempotency_key, list):
            idempotency_key = None                   # what the batched tool used to get
        return await original(self, args, kwargs, idempotency_key=idempotency_key, **kw)

    monkeypatch.setattr(spectool.tools.Tool, "run", old_run)
    backend = Backend()
    rt = spectool.Runtime(backend.tools, mode="baseline")
    res = await rt.run_cell("r = post_batched(['a', 'b', 'a'])\n")
    keys = element_keys(res.namespace["r"])
    assert keys == ["None"] * 3 and None in backend.keys


# ---------------------------------------------------------------- aliasing, mutation

class Box:
    """A user object holding what it was given."""

    def __init__(self, item):
        self.item = item


def tools():
    ran: list[str] = []

    @spectool.tool(speculate="pure")
    async def ident(xs):
        ran.append("ident")
        return xs

    @spectool.tool(speculate="pure")
    async def first(xs):
        ran.append("first")
        return xs[0]

    @spectool.tool(speculate="pure")
    async def boxed(xs):
        ran.append("boxed")
        return Box(xs)

    @spectool.tool(speculate="pure")
    async def keyed(*, data):
        ran.append("keyed")
        return {"data": data}

    @spectool.tool(speculate="pure")
    async def failing(xs):
        ran.append("failing")
        raise ValueError(xs)

    @spectool.tool(speculate="pure")
    async def grow(xs):
        ran.append("grow")
        xs.append(99)
        return len(xs)

    @spectool.tool(speculate="pure")
    async def grow_inner(xs):
        ran.append("grow_inner")
        xs[0].append(7)
        return 0

    @spectool.tool(speculate="pure")
    async def fresh(xs):
        ran.append("fresh")
        return [list(x) if isinstance(x, list) else x for x in xs]

    return [ident, first, boxed, keyed, failing, grow, grow_inner, fresh], ran


CELL = (
    "a = [1]\nn = [[2], [3]]\n"
    "b = ident(a)\nc = first(n)\nd = boxed(a)\ne = keyed(data=a)\n"
    "f = fresh(n)\ng = grow(a)\nh = grow_inner(n)\n"
    "try:\n    failing(a)\nexcept ValueError as exc:\n    err = exc.args[0]\n"
    "b.append(5)\nc.append(6)\nd.item.append(8)\ne['data'].append(9)\nerr.append(10)\n"
    "same = [b is a, c is n[0], d.item is a, e['data'] is a, err is a, f[0] is n[0]]\n"
)
SPECULATED = 8


async def alias_turn(mode: str, shadow: str):
    tool_list, ran = tools()
    gate = EventGate("launch", SPECULATED)
    if mode == "baseline":
        gate.seen.set()
    rt = spectool.Runtime(tool_list, mode=mode, shadow=shadow, on_event=gate,
                          admission=False)

    async def stream():
        yield "```repl\n" + CELL + "w = 1\n"
        await gate.seen.wait()                  # spec: every call was launched early
        yield "```\n"

    with anyio.fail_after(60):
        res = await rt.run(stream())
    assert res.error is None
    ns = res.namespace
    return ({k: ns[k] for k in ("a", "n", "g", "h", "f", "same")}, res.stats, ran)


@pytest.mark.anyio
@pytest.mark.parametrize("shadow", ["thread", "process"])
async def test_results_and_arguments_keep_baseline_identities(anyio_backend, shadow):
    base, _, _ = await alias_turn("baseline", shadow)
    spec, stats, ran = await alias_turn("spec", shadow)
    assert spec == base
    assert base["same"] == [True, True, True, True, True, False]
    assert base["a"] == [1, 99, 5, 8, 9, 10] and base["n"] == [[2, 7, 6], [3]]
    # the aliasing and mutating calls ran again for real; the fresh one was a hit
    assert stats.hits == 1 and ran.count("fresh") == 1
    assert all(ran.count(name) == 2 for name in
               ("ident", "first", "boxed", "keyed", "failing", "grow", "grow_inner"))


@pytest.mark.anyio
async def test_negative_control_claiming_every_speculation_diverges(anyio_backend,
                                                                    monkeypatch):
    monkeypatch.setattr(spectool.speculation.claims, "not_reusable", lambda entry: None)
    base, _, _ = await alias_turn("baseline", "thread")
    spec, stats, _ = await alias_turn("spec", "thread")
    assert stats.hits == SPECULATED
    assert spec["same"] == [False] * 6 and spec["a"] == [1] and spec["n"] == [[2], [3]]
    assert spec != base


@pytest.mark.anyio
async def test_store_level_alias_and_mutation_are_misses(anyio_backend):
    tool_list, ran = tools()
    async with anyio.create_task_group() as tg:
        store = await open_store(tool_list, tg)
        store.launch("ident", ([1],), {})
        store.launch("grow", ([1],), {})
        store.launch("fresh", ([[1]],), {})
        await anyio.wait_all_tasks_blocked()
        a = [1]
        assert await store.call("ident", (a,), {}) is a
        assert await store.call("grow", (a,), {}) == 2 and a == [1, 99]
        n = [[1]]
        f = await store.call("fresh", (n,), {})
        store.close()
    assert f == n and f[0] is not n[0]
    assert store.stats.hits == 1 and store.stats.misses == 2


@pytest.mark.anyio
@pytest.mark.parametrize("take_over", [True, False])
async def test_a_speculation_that_never_started_runs_on_the_real_arguments(
        anyio_backend, monkeypatch, take_over):
    """The real call takes over a speculation still waiting for budget: the tool then
    gets the cell's objects, not the shadow's copy. ``take_over=False`` is the
    negative control: the takeover runs on the copy, as it used to."""
    if not take_over:
        monkeypatch.setattr(RealCalls, "_take_over",
                            staticmethod(lambda entry, args, kwargs: None))
    release = anyio.Event()

    @spectool.tool(speculate="pure")
    async def hold() -> int:
        await release.wait()
        return 0

    tool_list, _ = tools()
    async with anyio.create_task_group() as tg:
        store = Store({t.name: t for t in [hold, *tool_list]}, tg, budget=Budget(1, 1 << 20),
                      trace=Trace(), stats=TurnStats(), turn_id="rid:t1")
        store.launch("hold", (), {})                    # takes the only slot
        store.launch("ident", ([1],), {})               # waits for budget
        await anyio.wait_all_tasks_blocked()
        a = [1]
        got = await store.call("ident", (a,), {})
        release.set()
        store.close()
    assert (got is a) is take_over


# ---------------------------------------------------------------- NaN and the protocol

def test_nan_is_not_plain_across_the_protocol_but_other_floats_are():
    payload = proto.encode_reply(("bets", [("q", (float("-nan"), -0.0, float("inf")), {})]))
    kind, bets = proto.parse_reply(proto.decode_reply(payload[proto.LENGTH.size:]))
    (tool, args, kwargs), = bets
    assert args[0] is proto.NOT_PLAIN
    assert math.copysign(1, args[1]) == -1.0 and args[2] == float("inf")


def test_a_forged_nan_from_a_worker_is_not_plain():
    text = b'[[2,[0,0],NaN,-Infinity],[4]]'
    payload = proto.LENGTH.pack(len(text)) + text + b"bets"
    assert proto.decode_reply(payload) == ("bets", proto.NOT_PLAIN, float("-inf"))


def test_nan_reaches_the_worker_as_unknown():
    from spectool.shadow_host.process_driver import _turn_copier, plain_outcome
    from spectool.shadow import Outcome

    x = float("nan")
    copied = _turn_copier(1000).copy_name([x, x, 1.5])
    assert type(copied[0]) is Unknown and copied[2] == 1.5
    value, _ = plain_outcome(Outcome(value={"v": x}), 1000)
    assert type(value["v"]) is Unknown


def _floats_as_is(original):
    """The old node codec: every float crosses as JSON (NaN as ``NaN``)."""
    def node(self, item, depth):
        return item if type(item) is float else original(self, item, depth)
    return node


def test_negative_control_the_old_codec_loses_nan_sign_and_identity(monkeypatch):
    monkeypatch.setattr(proto._Encoder, "node", _floats_as_is(proto._Encoder.node))
    monkeypatch.setattr(proto._Decoder, "node", _floats_as_is(proto._Decoder.node))
    x, y = -float("nan"), float("nan")                     # two distinct NaNs
    payload = proto.encode_reply(("bets", [("q", ([x, y],), {})]))
    _, bets = proto.parse_reply(proto.decode_reply(payload[proto.LENGTH.size:]))
    (x1, y1), = bets[0][1]
    assert math.copysign(1, x1) == 1.0 and x1 is y1        # what a tool would then get


@pytest.mark.anyio
@pytest.mark.parametrize("shadow", ["thread", "process"])
async def test_nan_arguments_give_baseline_results(anyio_backend, shadow):
    async def turn(mode):
        @spectool.tool(speculate="pure")
        async def probe(xs: list) -> list:
            return [math.copysign(1, xs[0]), xs[0] is xs[1], xs[0] is xs[2]]

        decided = anyio.Event()
        kinds = []

        def on_event(event):
            if event.kind in ("launch", "decline"):
                kinds.append(event.kind)
                decided.set()

        if mode == "baseline":
            decided.set()
        rt = spectool.Runtime([probe], mode=mode, shadow=shadow, on_event=on_event,
                              admission=False)

        async def stream():
            yield "```repl\nx = -float('nan')\nr = probe([x, x, float('nan')])\nw = 1\n"
            await decided.wait()             # the shadow launched or declined the call
            yield "```\n"

        with anyio.fail_after(60):
            res = await rt.run(stream())
        return res.namespace["r"], res.error, kinds, res.stats.hits

    spec, base = await turn("spec"), await turn("baseline")
    assert spec[:2] == base[:2] == ([-1.0, True, False], None)
    if shadow == "process":
        assert spec[2] == ["decline"]        # a NaN does not cross: the bet is declined
    else:
        assert spec[2] == ["launch"] and spec[3] == 1   # same process: the same NaNs
