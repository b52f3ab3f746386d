"""Shadow interpreter: evaluation, speculation, waiting and taint."""

import pytest

from spectool.shadow import Outcome, Pending, ShadowInterpreter, ToolInfo, Unknown, WaitFor, is_opaque
from shadow_driver import RecordingHost, shadow


def known(interp, name):
    v = interp.value_of(name)
    assert not is_opaque(v), f"{name} is {type(v).__name__}"
    return v


def unknowns(interp, *names) -> list[str]:
    """Those of ``names`` whose value the shadow holds as ``Unknown``."""
    return [name for name in names if type(interp.value_of(name)) is Unknown]


def test_helper_called_in_a_loop_fans_out_without_waiting():
    ctx = "\n".join(f"line {i}" for i in range(25))
    interp, host = shadow([
        'lines = context.split("\\n")',
        "def label(chunk):\n    prompt = f'Label each line:\\n{chunk}'\n    return llm_query(prompt)\n",
        "results = []",
        "for i in range(0, len(lines), 10):\n"
        "    batch = '\\n'.join(lines[i:i + 10])\n"
        "    results.append(label(batch))\n"
        "    print(f'batch {i} -> {results[-1][:20]}')\n",
    ], {"context": ctx})
    assert [l[1][0].count("\n") for l in host.launches] == [10, 10, 5]
    assert host.launches[0][1][0].startswith("Label each line:\nline 0\n")
    assert all(l[3] == "statement" for l in host.launches)
    assert host.waits == []  # nothing read the results: no waiting, a full fan-out
    results = interp.value_of("results")
    assert len(results) == 3 and all(type(r) is Pending for r in results)


def test_reading_a_pending_value_waits_and_chains():
    interp, host = shadow([
        "a = llm_query('first')",
        "b = llm_query('second: ' + a.upper())",
        "n = len(b)",
    ])
    assert [l[1] for l in host.launches] == [("first",), ("second: <FIRST>",)]
    assert host.waits == [0, 1]
    assert known(interp, "n") == len("<second: <FIRST>>")


def test_list_comprehension_and_join_of_pending_results():
    interp, host = shadow([
        "answers = [llm_query(f'q{i}') for i in range(4)]",
        "joined = ' | '.join(answers)",
        "final = llm_query(joined)",
    ])
    assert [l[1][0] for l in host.launches] == ["q0", "q1", "q2", "q3", "<q0> | <q1> | <q2> | <q3>"]
    assert known(interp, "joined") == "<q0> | <q1> | <q2> | <q3>"


def test_batched_tool_launches_one_call_per_prompt():
    interp, host = shadow(["outs = llm_query_batched([f'p{i}' for i in range(3)], model='m')"])
    assert host.launches == [("llm_query", (f"p{i}",), {"model": "m"}, "statement") for i in range(3)]
    assert all(type(o) is Pending for o in interp.value_of("outs"))


def test_non_speculatable_tool_is_never_launched_and_taints():
    interp, host = shadow([
        "hits = search('x')",
        "n = len(hits)",
        "safe = 2 * 21",
        "r = llm_query(hits)",
        "write_file('out.txt', 'data')",
        "m = llm_query('ok')",
    ])
    assert [l[0] for l in host.launches] == ["llm_query"]
    assert host.launches[0][1] == ("ok",)
    assert unknowns(interp, "n", "r") == ["n", "r"]
    assert known(interp, "safe") == 42


def test_unknown_condition_skips_block_and_taints_what_it_writes():
    interp, host = shadow([
        "hits = search('x')",
        "count = 0\nother = 5",
        "items = []",
        "if hits:\n    count += 1\n    items.append(1)\nelse:\n    llm_query('never known')\n",
        "after = other + 1",
    ])
    assert host.launches == []
    assert unknowns(interp, "count", "items") == ["count", "items"]
    assert known(interp, "after") == 6


def test_unknown_break_in_loop_abandons_the_loop():
    interp, host = shadow([
        "flag = search('x')",
        "done = []\nstill = 1",
        "for i in range(5):\n    llm_query(str(i))\n    if flag:\n        break\n    done.append(i)\n",
        "y = still",
    ])
    assert [l[1] for l in host.launches] == [("0",)]
    assert unknowns(interp, "done") == ["done"]
    assert known(interp, "y") == 1


def test_try_except_fallback_with_tool_error():
    def answer(tool, args, kwargs):
        if args[0] == "bad":
            return Outcome(error=TimeoutError("slow"))
        return Outcome(value="fine")

    interp, host = shadow([
        "try:\n    r = llm_query('bad').strip()\nexcept Exception as e:\n    r = 'fallback: ' + str(e)\n",
        "s = llm_query(r)",
    ], answer=answer)
    assert known(interp, "r") == "fallback: slow"
    assert host.launches[1][1] == ("fallback: slow",)


def test_uncaught_error_stops_the_shadow_like_the_real_cell():
    interp, host = shadow([
        "x = {}['missing']",
        "llm_query('after the error')",
    ])
    assert host.launches == []
    assert interp.stopped
    assert interp.records[0].status == "error" and "KeyError" in interp.records[0].detail


def test_namespace_is_copied_not_mutated():
    data = {"items": [1, 2]}
    interp, host = shadow(["data['items'].append(3)", "n = len(data['items'])"], {"data": data})
    assert data == {"items": [1, 2]}
    assert known(interp, "n") == 3


def test_non_plain_namespace_values_are_unknown():
    class Weird(str):
        def __eq__(self, other):  # pragma: no cover - must never run
            raise AssertionError("user __eq__ ran")

        __hash__ = str.__hash__

    interp, host = shadow(["r = llm_query(w)", "k = llm_query(plain)"], {"w": Weird("x"), "plain": "p"})
    assert [l[1] for l in host.launches] == [("p",)]


def test_host_declining_gives_unknown():
    interp, host = shadow(["r = llm_query('a')", "n = len(r)"], decline={"llm_query"})
    assert unknowns(interp, "n") == ["n"]


def test_launch_arguments_are_snapshots():
    interp, host = shadow(["msgs = ['a']", "r = llm_query(msgs)", "msgs.append('b')"])
    assert host.launches[0][1] == (["a"],)


def test_prints_are_swallowed_and_do_not_wait():
    interp, host = shadow([
        "rs = [llm_query(str(i)) for i in range(3)]",
        "for r in rs:\n    print('got', r.upper(), flush=True)\n",
    ])
    assert host.waits == []


def test_common_builtins_and_modules():
    interp, host = shadow([
        "import re, json, math, collections\nfrom collections import Counter",
        "text = 'Date: Jan 01, 2023 || User: 12345 || Instance: hello'",
        "users = re.findall(r'User: (\\d+)', text)",
        "c = Counter(['a', 'b', 'a'])\ntop = c.most_common(1)[0][0]",
        "d = json.dumps({'k': [1, 2]}, sort_keys=True)",
        "s = sorted({'x': 3, 'y': 1}.items(), key=lambda kv: kv[1])",
        "m = max(['aa', 'b', 'ccc'], key=len)",
        "f = math.floor(2.7) + sum(x * x for x in range(4))",
        "g = list(map(lambda x: x + 1, [1, 2]))",
        "h = '{} and {k}'.format(1, k='two')",
        "w = ' '.join(sorted(set('b a c a'.split())))",
        "e = dict(enumerate('ab'))",
        "z = [(i, j) for i in range(2) for j in 'xy' if j != 'y']",
        "u = isinstance(text, str) and type(3) is int",
        "from functools import reduce\nv = reduce(lambda a, b: a * b, [1, 2, 3, 4])",
        "dd = collections.defaultdict(list)\ndd['k'].append(1)",
        "nested = {'a': {'b': [1, 2, 3]}}\nnested['a']['b'][0] += 10",
        "first, *rest = [1, 2, 3]",
        "walrus = [y for x in range(3) if (y := x * 2) > 0]",
    ])
    assert known(interp, "users") == ["12345"]
    assert known(interp, "top") == "a"
    assert known(interp, "d") == '{"k": [1, 2]}'
    assert known(interp, "s") == [("y", 1), ("x", 3)]
    assert known(interp, "m") == "ccc"
    assert known(interp, "f") == 16
    assert known(interp, "g") == [2, 3]
    assert known(interp, "h") == "1 and two"
    assert known(interp, "w") == "a b c"
    assert known(interp, "e") == {0: "a", 1: "b"}
    assert known(interp, "z") == [(0, "x"), (1, "x")]
    assert known(interp, "u") is True
    assert known(interp, "v") == 24
    assert known(interp, "dd") == {"k": [1]}
    assert known(interp, "nested") == {"a": {"b": [11, 2, 3]}}
    assert known(interp, "rest") == [2, 3]
    assert known(interp, "walrus") == [2, 4]
    assert all(r.status == "ok" for r in interp.records), interp.records


def test_closures_defaults_and_recursion():
    interp, host = shadow([
        "def make(k):\n    def add(x, y=1, *, z=0):\n        return x + y + z + k\n    return add\n",
        "a = make(10)(1)\nb = make(10)(1, 2, z=3)",
        "def fact(n):\n    return 1 if n <= 1 else n * fact(n - 1)\n",
        "c = fact(10)",
        "def counter():\n    n = 0\n    def inc():\n        nonlocal n\n        n += 1\n        return n\n    inc()\n    return inc()\n",
        "d = counter()",
        "total = 0\ndef bump():\n    global total\n    total += 5\n",
        "bump()",
    ])
    assert known(interp, "a") == 12
    assert known(interp, "b") == 16
    assert known(interp, "c") == 3628800
    assert known(interp, "d") == 2
    assert known(interp, "total") == 5


def test_user_errors_behave_like_python():
    interp, host = shadow([
        "try:\n    x = [1][5]\nexcept IndexError:\n    x = 'caught'\n",
        "try:\n    y = int('z')\nexcept (KeyError, ValueError) as err:\n    y = type(err) is ValueError\n",
        "def f():\n    try:\n        return 1\n    finally:\n        global z\n        z = 'finally ran'\n",
        "w = f()",
    ])
    assert known(interp, "x") == "caught"
    assert known(interp, "y") is True
    assert known(interp, "w") == 1 and known(interp, "z") == "finally ran"


def test_unknown_elements_taint_only_themselves():
    interp, host = shadow([
        "xs = [search('a'), 2, 3]",
        "n = len(xs)",
        "tail = xs[1:]",
        "head = xs[0] + 1",
        "total = sum(xs)",
    ])
    assert known(interp, "n") == 3
    assert known(interp, "tail") == [2, 3]
    assert unknowns(interp, "head", "total") == ["head", "total"]


def test_run_statement_is_a_generator_of_waitfor():
    host = RecordingHost()
    interp = ShadowInterpreter({}, {"llm_query": ToolInfo("llm_query", "pure")}, host)
    gen = interp.run_statement("x = llm_query('a') + '!'")
    request = next(gen)
    assert request == WaitFor(0)
    with pytest.raises(StopIteration):
        gen.send(Outcome(value="A"))
    assert interp.value_of("x") == "A!"


def test_interrupt_stops_the_running_statement_and_the_rest():
    class InterruptingHost(RecordingHost):
        def launch(self, tool_name, args, kwargs, *, origin):
            handle = super().launch(tool_name, args, kwargs, origin=origin)
            if len(self.launches) == 3:
                interp.interrupt()
            return handle

    host = InterruptingHost()
    interp = ShadowInterpreter({}, {"llm_query": ToolInfo("llm_query", "pure")}, host)
    from shadow_driver import drive

    drive(interp, "for i in range(100000):\n    llm_query(str(i))\n", host)
    drive(interp, "llm_query('later')", host)
    assert 3 <= len(host.launches) < 5000
    assert interp.stopped and interp.records[-1].status == "skipped"
