"""The compiled layer loop (token_spec.native_layers) is its Python mirror, bit for bit,
and close to the ATen loop.

The C++ loop runs the fused row kernels; ``native_layers.mirror`` runs the same kernels,
one call each, from Python in the same order. Every pass, at every width, KV length and
after rollback, must give the same logits bitwise for dense bf16, Q4_1 (int4 GEMMs, Q8_0
head) and fp32 weights. Negative control: the native loop run with a different RMSNorm
epsilon (one value in its argument list) is caught by the same comparison. The fused
kernels reduce in another order than the ATen ops of ``FastLlama``'s Python loop (the
fallback where the extension does not build), so those two agree within a tolerance and
on the greedy token, not bitwise.
"""

from __future__ import annotations

import pytest
import torch

from token_spec import native_layers
from token_spec.fast_forward import FastLlama

pytestmark = pytest.mark.model


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


def _mirrored(lean: FastLlama, module) -> FastLlama:
    """A twin whose layer loop is the Python mirror of the compiled one."""
    twin = _twin(lean, True)
    twin._run_layers, twin._run_layers_packed = native_layers.mirror(module)
    return twin


def test_native_loop_gives_its_python_mirrors_logits_bitwise(lean, native_module):
    python, native = _mirrored(lean, native_module), _twin(lean, True)
    assert native.native and native._run_layers is native_module.run_layers
    assert _same(_passes(python), _passes(native))


def test_native_loop_is_close_to_the_aten_loop(lean):
    aten, native = _twin(lean, False), _twin(lean, True)
    assert native.native and not aten.native
    a, b = torch.cat(_passes(aten)), torch.cat(_passes(native))
    # bf16 roundings in another order, carried through 30 layers: small against the logits' range
    tol = 1e-3 if lean.dtype == torch.float32 else 0.06
    assert (a - b).abs().max().item() <= tol * a.abs().max().item()
    if lean.dtype == torch.float32:
        assert (a.argmax(-1) == b.argmax(-1)).float().mean().item() >= 0.95
        return
    # bf16: these inputs (arbitrary token ids) leave many near-ties, where either loop's
    # roundings flip the argmax (a third of the rows lead by under 0.25); so each loop is
    # held against the fp32 forward of the same weights instead: the fused loop's mean
    # error is no larger than the ATen loop's (within 10 %), and where fp32's top token
    # leads by more than 0.5 (several times the loops' mean error, about 0.1) both pick it
    ref = torch.cat(_passes(FastLlama(lean.source, torch.float32)))
    err = {k: (x - ref).abs().mean().item() for k, x in (("aten", a), ("native", b))}
    assert err["native"] <= 1.1 * err["aten"], err
    top2 = ref.topk(2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) > 0.5
    assert int(clear.sum()) >= 20, "too few clear rows for the comparison to mean anything"
    for k, x in (("aten", a), ("native", b)):
        assert torch.equal(x.argmax(-1)[clear], ref.argmax(-1)[clear]), k


def test_a_one_value_change_in_the_native_loop_is_caught(lean, native_module, monkeypatch):
    # negative control: the comparison above sees a perturbation of one scalar argument
    python, native = _mirrored(lean, native_module), _twin(lean, True)
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


def test_native_packed_loop_gives_its_python_mirrors_logits_bitwise(lean, native_module):
    from token_spec.packed import PackedLM, Segment

    def run(fast: FastLlama) -> list[torch.Tensor]:
        lm = PackedLM(fast)
        a, b = lm.new_kv(), lm.new_kv()
        lm.forward([Segment(a, list(range(300, 370)), prefill=True), Segment(b, list(range(500, 530)), prefill=True)])
        out = lm.forward([Segment(a, [1, 2, 3]), Segment(b, [4])])
        return out + lm.forward([Segment(b, [5, 6, 7, 8, 9]), Segment(a, [10])])

    assert _same(run(_mirrored(lean, native_module)), run(_twin(lean, True)))
