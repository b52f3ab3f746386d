"""Canonical argument keys: plain immutable data only, never through user objects."""

import inspect

from hypothesis import given
from hypothesis import strategies as st

from spectool.keys import call_key, canonical, plain_snapshot

plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.tuples(children, children)
    | st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=20,
)


def test_distinct_types_give_distinct_keys():
    keys = {canonical(v) for v in (1, 1.0, True, "1", [1], (1,), {"a": 1}, None, -0.0, 0.0)}
    assert None not in keys and len(keys) == 10


def test_kwargs_order_does_not_matter_but_dict_order_does():
    # a tool can observe a dict's order (list(d), json.dumps(d)): a dict built in a
    # different order (say, from a set) must never meet the other's result
    assert canonical({"a": 1, "b": 2}) != canonical({"b": 2, "a": 1})
    assert call_key(({"a": 1, "b": 2},), {}) != call_key(({"b": 2, "a": 1},), {})
    assert call_key(({"a": [{"x": 1, "y": 2}]},), {}) != call_key(({"a": [{"y": 2, "x": 1}]},), {})
    assert call_key(("x",), {"a": 1, "b": 2}) == call_key(("x",), {"b": 2, "a": 1})
    assert call_key(("x",), {}) != call_key((), {"prompt": "x"})


def test_signature_binding_unifies_positional_and_keyword():
    def f(prompt, model="small", *rest, **extra):
        pass

    sig = inspect.signature(f)
    assert call_key(("x",), {}, sig) == call_key((), {"prompt": "x"}, sig) == call_key(("x", "small"), {}, sig)
    assert call_key(("x",), {"model": "big"}, sig) != call_key(("x",), {}, sig)
    assert call_key((), {}, sig) is None  # does not bind


def test_non_plain_data_has_no_key_and_user_code_never_runs():
    class Sneaky(str):
        def __hash__(self):
            raise AssertionError("hashed a user object")

        def __eq__(self, other):
            raise AssertionError("compared a user object")

    class Obj:
        pass

    class SneakyDict(dict):
        def items(self):
            raise AssertionError("iterated a user mapping")

    for bad in (Sneaky("x"), Obj(), {1: "int key"}, SneakyDict(a=1), {"s": {1, 2}}, b"bytes",
                [Obj()], (lambda: 0), [Sneaky("y")]):
        assert canonical(bad) is None
        assert call_key((bad,), {}) is None
    deep = []
    for _ in range(100):
        deep = [deep]
    assert canonical(deep) is None


@given(plain)
def test_key_is_deterministic_and_json(value):
    import json

    key = canonical(value)
    assert key is not None
    json.loads(key)
    assert canonical(plain_snapshot(value)) == key


@given(plain, plain)
def test_equal_keys_mean_equal_values(a, b):
    if canonical(a) == canonical(b):
        assert repr(a) == repr(b) or (a == b and type(a) is type(b))


def test_snapshot_is_a_deep_copy():
    value = {"a": [1, [2]]}
    snap = plain_snapshot(value)
    value["a"][1].append(3)
    assert snap == {"a": [1, [2]]}
