"""The compiled layer loop (token_spec.native_layers) is the Python loop, bit for bit.

It issues the same ATen ops in the same order as ``FastLlama.forward``'s Python loop, so
every pass, at every width, KV length and after rollback, must give the same logits
bitwise, for dense bf16, Q4_1 (int4 GEMMs, Q8_0 head) and fp32 weights. Negative
control: the native loop run with a different RMSNorm epsilon (one value in its
argument list) is caught by the same comparison.
"""

from __future__ import annotations

import pytest
import torch

from token_spec import native_layers
from token_spec.fast_forward import FastLlama

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def native_module():
    module = native_layers.load()
    if module is None:  # pragma: no cover - a machine without g++/ninja
        pytest.fail(f"the native layer loop did not build here: {native_layers.build_error()}")
    return module


def _twin(lm: FastLlama, native: bool) -> FastLlama:
    """A FastLlama over the same weights and GEMM callables, with the chosen layer loop."""
    custom = lm.weights == "custom"
    linears = [(layer[1], layer[2], layer[4], layer[5]) for layer in lm.layers] if custom else None
    return FastLlama(lm.source, lm.dtype, exact=lm.exact, linears=linears,
                     head=lm._head if custom else None, native=native)


def _passes(lm: FastLlama) -> list[torch.Tensor]:
    """Logits of a prefill, passes of widths 1..16 and 40, and passes after rollbacks."""
    s = lm.start(list(range(300, 420)))
    out = []
    for w in (1, 2, 3, 4, 5, 7, 8, 11, 16, 40):
        out.append(s.extend(list(range(1000 + 3 * w, 1000 + 4 * w))))
    for length in (200, 130, 121):
        s.truncate(length)
        out.append(s.extend([7, 8, 9]))
    return out


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module", params=["bf16", "q4", "fp32"])
def lean(request, native_module):
    from token_spec.target import load_target

    if request.param == "fp32":
        target = load_target(dtype=torch.float32)
    else:
        target = load_target(dtype=torch.bfloat16, weights="q4" if request.param == "q4" else "float")
    return target.fast


def test_native_loop_gives_the_python_loops_logits_bitwise(lean):
    python, native = _twin(lean, False), _twin(lean, True)
    assert native.native and not python.native
    assert _same(_passes(python), _passes(native))


def test_a_one_value_change_in_the_native_loop_is_caught(lean, native_module, monkeypatch):
    # negative control: the comparison above sees a perturbation of one scalar argument
    python, native = _twin(lean, False), _twin(lean, True)
    real = native_module.run_layers

    def perturbed(*args):
        args = list(args)
        args[-2] = args[-2] * 4  # the RMSNorm epsilon
        return real(*args)

    monkeypatch.setattr(native, "_run_layers", perturbed)
    assert not _same(_passes(python), _passes(native))


def test_auto_uses_the_native_loop_where_it_builds_and_sdpa_stays_in_python(lean, native_module):
    assert _twin(lean, "auto").native
    if lean.weights != "custom":
        assert not FastLlama(lean.source, lean.dtype, attention="sdpa").native
        with pytest.raises(ValueError, match="eager attention only"):
            FastLlama(lean.source, lean.dtype, attention="sdpa", native=True)
    with pytest.raises(ValueError, match="native must be True, False or 'auto'"):
        FastLlama(lean.source, lean.dtype, native="yes")


def test_a_native_forward_survives_deepcopy(lean):
    # the bench deep-copies drafters, and with them a draft's FastLlama
    import copy

    twin = copy.deepcopy(_twin(lean, True))
    assert twin.native and twin._run_layers is _twin(lean, True)._run_layers


def test_disabled_build_falls_back_to_the_python_loop_and_says_why(monkeypatch):
    monkeypatch.setenv("TOKEN_SPEC_NATIVE", "0")
    native_layers.load.cache_clear()
    try:
        assert native_layers.load() is None
        assert "TOKEN_SPEC_NATIVE=0" in native_layers.build_error()
    finally:
        native_layers.load.cache_clear()
        native_layers._ERROR.clear()
