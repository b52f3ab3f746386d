"""The run order of interleaved measurements: reproducible, and no method always runs after the same one."""

from __future__ import annotations

from collections import Counter

from token_spec.interleave import run_order

NAMES = ["vanilla", "control", "eagle3", "dspark"]


def _predecessors(orders) -> dict[str, Counter]:
    seen: dict[str, Counter] = {n: Counter() for n in NAMES}
    for order in orders:
        for before, name in zip(order, order[1:]):
            seen[name][before] += 1
    return seen


def test_every_order_is_a_permutation_and_reproducible():
    for p in range(5):
        for r in range(3):
            order = run_order(NAMES, p, r, seed=7)
            assert sorted(order) == sorted(NAMES) and order == run_order(NAMES, p, r, seed=7)
    assert {tuple(run_order(NAMES, p, r)) for p in range(5) for r in range(3)} != {tuple(NAMES)}


def test_every_method_follows_every_other_one():
    seen = _predecessors(run_order(NAMES, p, r) for p in range(15) for r in range(3))
    for name in NAMES:
        assert set(seen[name]) == set(NAMES) - {name}, (name, seen[name])


def test_negative_control_a_rotation_gives_each_method_one_fixed_predecessor():
    def rotation(p: int, r: int) -> list[str]:
        shift = (p + r) % len(NAMES)
        return NAMES[shift:] + NAMES[:shift]

    seen = _predecessors(rotation(p, r) for p in range(15) for r in range(3))
    assert seen["control"] and set(seen["control"]) == {"vanilla"}  # the check above would catch it
