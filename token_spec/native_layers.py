"""The lean forward's decoder-layer loop, compiled: the same ATen ops, called from C++.

At SmolLM2-135M's size a decode step on one CPU thread is mostly dispatch: ~40 small
PyTorch ops per layer (norms, RoPE, cache writes, attention, residuals) x 30 layers, each
paying Python's per-op overhead, against only four GEMMs per layer that do real work
(docs/token-tier-benchmark.md, "Where the time of one step goes"). ``run_layers`` runs
the whole layer loop in one C++ call. It issues **the same ATen ops, with the same
arguments, in the same order** as ``FastLlama.forward``'s Python loop, so its results are
bitwise those of the Python loop (``tests/token_spec/test_native_layers.py`` compares
them bitwise at every width, KV length and weight kind, with a perturbed-epsilon
negative control), and batch invariance, a property of the kernels, carries over
unchanged. The four GEMMs per layer stay Python callables (dense, oneDNN, Q4_1 or int8:
``Dense``, ``Int4Linear``, ``Int8Linear``): where one names its kernel (its ``native``
attribute), C++ calls that ATen op directly with the same arguments, otherwise it calls
the object back. ``run_layers_packed`` is the same loop for the
server's packed pass (``token_spec.packed``): several sequences share the GEMMs, and each
writes its own cache and attends alone, as in a one-sequence pass at its own width.

The extension is compiled on first use with ``torch.utils.cpp_extension.load_inline``
(g++ and ninja; ~20 s on this project's 2 cores, then cached under
``~/.cache/torch_extensions``; ``scripts/setup.sh`` builds it once).
``available()`` says whether it built; where it cannot (no compiler), ``FastLlama`` keeps
the Python loop and says so (``FastLlama.native``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
from pathlib import Path

__all__ = ["available", "load", "build_error"]

_SOURCE = r"""
#include <torch/extension.h>
#include <pybind11/pybind11.h>
#include <string>
#include <vector>

namespace py = pybind11;

// RMSNorm as FastLlama._rms: y = w * x / sqrt(mean(x^2) + eps) over one row, in fp32,
// cast back to the compute dtype.
static at::Tensor rms(const at::Tensor& x, const at::Tensor& w, int64_t hidden, double eps, at::ScalarType dt) {
    return at::rms_norm(x.to(at::kFloat), {hidden}, w, eps).to(dt);
}

// A layer GEMM. Where the Python object names its kernel (``native``: ("q4", packed,
// scales_zeros) or ("int8", codes, scales)), the same ATen op its
// __call__ runs is called here with the same arguments, without a round trip through
// Python; anything else (oneDNN, a test's wrapper) is called back.
static at::Tensor call(const py::handle& f, const at::Tensor& x) {
    py::object spec = py::getattr(f, "native", py::none());
    if (!spec.is_none()) {
        py::tuple t = spec.cast<py::tuple>();
        const std::string kind = t[0].cast<std::string>();
        if (kind == "q4")
            return at::_weight_int4pack_mm_for_cpu(x, t[1].cast<at::Tensor>(), 32, t[2].cast<at::Tensor>());
        if (kind == "int8") return at::_weight_int8pack_mm(x, t[1].cast<at::Tensor>(), t[2].cast<at::Tensor>());
    }
    return f(x).cast<at::Tensor>();
}

// The decoder layers of FastLlama.forward (eager attention), op for op.
// x [gw, H]; layers: per layer (w_in, qkv, o, w_post, gate_up, down); caches per layer:
// keys transposed [kv, hd, cap], values [kv, cap, hd]; cos_b / sin_b [gw, 1, hd]; mask [1, g*aw, kend] additive;
// qpad [heads, aw-gw, hd] or None. Returns the new x [gw, H].
at::Tensor run_layers(at::Tensor x, py::list layers, std::vector<at::Tensor> kcache, std::vector<at::Tensor> vcache,
                      at::Tensor cos_b, at::Tensor sin_b, at::Tensor mask, py::object qpad_obj,
                      int64_t start, int64_t gw, int64_t aw, int64_t kend, int64_t n_heads, int64_t nkv,
                      int64_t hd, int64_t hidden, double eps, double scale) {
    const auto dt = x.scalar_type();
    const int64_t g = n_heads / nkv, q_dim = n_heads * hd, kv_dim = nkv * hd, qk_dim = q_dim + kv_dim;
    const int64_t half = hd / 2;
    const bool padq = !qpad_obj.is_none();
    at::Tensor qpad;
    if (padq) qpad = qpad_obj.cast<at::Tensor>();
    const int64_t n_layers = static_cast<int64_t>(py::len(layers));
    for (int64_t li = 0; li < n_layers; ++li) {
        py::tuple layer = layers[li].cast<py::tuple>();
        const at::Tensor w_in = layer[0].cast<at::Tensor>();
        const at::Tensor w_post = layer[3].cast<at::Tensor>();
        at::Tensor h = rms(x, w_in, hidden, eps, dt);
        at::Tensor qkv = call(layer[1], h);  // [gw, q+2kv]
        at::Tensor qk = qkv.slice(1, 0, qk_dim).view({gw, n_heads + nkv, hd});
        qk = qk * cos_b + qk.roll({half}, {-1}) * sin_b;
        at::Tensor q = qk.slice(1, 0, n_heads).transpose(0, 1);  // [heads, gw, hd]
        at::Tensor k = qk.slice(1, n_heads).transpose(0, 1);     // [kv, gw, hd]
        at::Tensor v = qkv.slice(1, qk_dim).view({gw, nkv, hd}).transpose(0, 1);
        if (padq) q = at::cat({q, qpad}, 1);  // [heads, aw, hd]
        at::Tensor& kc = kcache[li];
        at::Tensor& vc = vcache[li];
        kc.slice(2, start, start + gw).copy_(k.transpose(1, 2));  // keys cached transposed
        vc.slice(1, start, start + gw).copy_(v);
        at::Tensor keys_t = kc.slice(2, 0, kend), vals = vc.slice(1, 0, kend);
        at::Tensor qg = q.reshape({nkv, g * aw, hd});
        at::Tensor scores = at::baddbmm(mask, qg, keys_t, /*beta=*/1, /*alpha=*/scale);
        at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(qg.scalar_type());
        at::Tensor att = at::bmm(probs, vals);
        att = att.view({n_heads, aw, hd}).slice(1, 0, gw).transpose(0, 1).reshape({gw, q_dim});
        x = x + call(layer[2], att);
        h = rms(x, w_post, hidden, eps, dt);
        at::Tensor gu = call(layer[4], h);  // [gw, 2I]
        const int64_t inter = gu.size(-1) / 2;
        x = x + call(layer[5], at::silu(gu.slice(1, 0, inter)) * gu.slice(1, inter));
    }
    return x;
}

// The decoder layers of token_spec.packed's packed pass (eager attention), op for op:
// the rows of several sequences share the GEMMs; each sequence (segment s: rows
// offs[s]..offs[s]+ns[s] of x, at cache positions starts[s]..) writes its own cache and
// attends alone, its queries padded with qpads[s] (aws[s] - ns[s] zero rows; unused
// when that is 0) to aws[s] rows, with its own mask [1, g*aws[s], kends[s]], exactly as a one-sequence
// pass of run_layers at that sequence's width would.
at::Tensor run_layers_packed(at::Tensor x, py::list layers, std::vector<std::vector<at::Tensor>> kcaches,
                             std::vector<std::vector<at::Tensor>> vcaches, at::Tensor cos_b, at::Tensor sin_b,
                             std::vector<at::Tensor> masks, std::vector<at::Tensor> qpads,
                             std::vector<int64_t> offs, std::vector<int64_t> ns, std::vector<int64_t> starts,
                             std::vector<int64_t> aws, std::vector<int64_t> kends, int64_t gw, int64_t n_heads,
                             int64_t nkv, int64_t hd, int64_t hidden, double eps, double scale) {
    const auto dt = x.scalar_type();
    const int64_t g = n_heads / nkv, q_dim = n_heads * hd, qk_dim = q_dim + nkv * hd;
    const int64_t half = hd / 2;
    const size_t n_seg = offs.size();
    const int64_t n_layers = static_cast<int64_t>(py::len(layers));
    for (int64_t li = 0; li < n_layers; ++li) {
        py::tuple layer = layers[li].cast<py::tuple>();
        const at::Tensor w_in = layer[0].cast<at::Tensor>();
        const at::Tensor w_post = layer[3].cast<at::Tensor>();
        at::Tensor h = rms(x, w_in, hidden, eps, dt);
        at::Tensor qkv = call(layer[1], h);  // [gw, q+2kv]
        at::Tensor qk = qkv.slice(1, 0, qk_dim).view({gw, n_heads + nkv, hd});
        qk = qk * cos_b + qk.roll({half}, {-1}) * sin_b;
        at::Tensor q = qk.slice(1, 0, n_heads).transpose(0, 1);  // [heads, gw, hd]
        at::Tensor k = qk.slice(1, n_heads).transpose(0, 1);     // [kv, gw, hd]
        at::Tensor v = qkv.slice(1, qk_dim).view({gw, nkv, hd}).transpose(0, 1);
        at::Tensor att = at::zeros({gw, q_dim}, x.options());
        for (size_t s = 0; s < n_seg; ++s) {
            const int64_t off = offs[s], n = ns[s], start = starts[s], aw = aws[s], kend = kends[s];
            at::Tensor& kc = kcaches[s][li];
            at::Tensor& vc = vcaches[s][li];
            kc.slice(2, start, start + n).copy_(k.slice(1, off, off + n).transpose(1, 2));
            vc.slice(1, start, start + n).copy_(v.slice(1, off, off + n));
            at::Tensor qs = q.slice(1, off, off + n);
            if (aw > n) qs = at::cat({qs, qpads[s]}, 1);  // [heads, aw, hd]
            at::Tensor qg = qs.reshape({nkv, g * aw, hd});
            at::Tensor scores = at::baddbmm(masks[s], qg, kc.slice(2, 0, kend), /*beta=*/1, /*alpha=*/scale);
            at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(qg.scalar_type());
            at::Tensor a = at::bmm(probs, vc.slice(1, 0, kend));
            att.slice(0, off, off + n).copy_(a.view({n_heads, aw, hd}).slice(1, 0, n).transpose(0, 1).reshape({n, q_dim}));
        }
        x = x + call(layer[2], att);
        h = rms(x, w_post, hidden, eps, dt);
        at::Tensor gu = call(layer[4], h);  // [gw, 2I]
        const int64_t inter = gu.size(-1) / 2;
        x = x + call(layer[5], at::silu(gu.slice(1, 0, inter)) * gu.slice(1, inter));
    }
    return x;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("run_layers", &run_layers, "FastLlama's decoder-layer loop (eager attention), op for op");
    m.def("run_layers_packed", &run_layers_packed, "the packed multi-sequence layer loop (eager attention)");
}
"""

_ERROR: list[str] = []


def build_error() -> str | None:
    """Why the extension did not build (None if it did or was not tried)."""
    return _ERROR[0] if _ERROR else None


@functools.lru_cache(maxsize=1)
def load():
    """The compiled module (built once per process; cached on disk by torch), or None."""
    if os.environ.get("TOKEN_SPEC_NATIVE", "1") == "0":
        _ERROR.append("disabled by TOKEN_SPEC_NATIVE=0")
        return None
    try:
        from torch.utils import cpp_extension

        bin_dir = str(Path(sys.executable).parent)  # the venv's ninja (pip package) first
        if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
        if shutil.which("ninja") is None or shutil.which(os.environ.get("CXX", "c++")) is None:
            raise RuntimeError("needs ninja and a C++ compiler on PATH")
        return cpp_extension.load_inline(
            # named by a hash of the source: a changed loop never loads a stale build, and
            # checkouts with different sources never overwrite each other's cached build
            name="token_spec_native_layers_" + hashlib.sha1(_SOURCE.encode()).hexdigest()[:12],
            cpp_sources=[_SOURCE],
            extra_cflags=["-O2"],
            verbose=False,
        )
    except Exception as exc:  # any build failure: the Python loop stays
        _ERROR.append(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
        return None


def available() -> bool:
    return load() is not None
