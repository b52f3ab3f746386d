"""The lean forward's decoder-layer loop, compiled, with fused row kernels.

At SmolLM2-135M's size a decode step on one CPU thread is mostly fixed costs: ~40 small
ATen ops per layer (norms, RoPE, cache writes, attention, residuals) x 30 layers, each
paying its allocation and set-up, against only four GEMMs per layer that do real work
(docs/token-tier-benchmark.md, "Where the time of one step goes"). ``run_layers`` runs
the whole layer loop in one C++ call, and between the GEMMs it runs five hand-written
kernels instead of the ATen op chains: residual add + RMSNorm, RoPE with the K/V cache
writes, causal attention, SiLU * up (and RMSNorm alone for the first layer).

Exactness (the contract: every row of a pass is bit for bit the row a one-token pass
gives) is kept by construction: each kernel computes **each row alone**, by the same
code in the same order whatever the number of rows in the call; a reduction runs in
fixed blocks of L lanes summed in one fixed order. Attention reads, for a query row at
position p, exactly the cached keys 0..p (no mask, no key padding, no query padding), so
neither the pass's width nor the cache's length can reach a row's result. Products and
sums are plain IEEE operations (``-ffp-contract=off``; the attention's dot products are
explicit fused multiply-adds), so the vector width and the blocking change no bit.
``tests/token_spec/test_fused_kernels.py`` checks each kernel's row invariance bitwise
(with a negative control) and its closeness to the ATen ops it replaces; RoPE and the
residual add keep ATen's roundings and match them bitwise. The kernels reduce in
another order than ATen's, so this loop's logits differ slightly from the ATen loop's
(``FastLlama(native=False)``, the fallback), within a tolerance
(``tests/token_spec/test_native_layers.py``); within one engine either loop is exact.
``mirror`` runs the same kernels one call at a time from Python: the reference the C++
loop is compared with bitwise.

The four GEMMs per layer stay Python callables (dense, oneDNN, Q4_1 or int8: ``Dense``,
``Int4Linear``, ``Int8Linear``): where one names its kernel (its ``native`` attribute),
C++ calls that ATen op directly with the same arguments, otherwise it calls the object
back. Padded rows (a short pass padded to the GEMMs' row-invariant width) run the GEMMs
and norms only: they attend to nothing and write no cache. ``run_layers_packed`` is the
same loop for the server's packed pass (``token_spec.packed``): several sequences share
the GEMMs, and each row attends over its own sequence's cache.

``q4_mm`` is the Q4_1 path's GEMM where the CPU has AVX512-BF16 (``has_q4_mm``): 4-bit
codes with per-group scales and zeros, each block unpacked once for all the rows of a
call and applied with bf16 dot products, each row in the same order whatever the row
count (``token_spec.q4_weights``; the layer loop calls it directly for a linear whose
``native`` is ``("q4_mm", codes, sz, N)``).

The extension is compiled on first use with ``torch.utils.cpp_extension.load_inline``
(g++ and ninja, ``-O3 -march=native``; ~1-2 min on this project's 2 cores, then cached
under ``~/.cache/torch_extensions`` under a name that hashes the source, the flags, the
CPU's model and flags, and the torch install, so a build is never loaded on another
kind of CPU and two virtual environments never rebuild each other's;
``scripts/setup.sh`` builds it once). ``available()`` says whether it built; where it
cannot (no compiler), ``FastLlama`` keeps the Python loop and says so
(``FastLlama.native``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
from pathlib import Path

__all__ = ["available", "load", "build_error", "mirror", "compiled_gemm"]

_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <pybind11/pybind11.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

// Every reduction below runs in fixed-width blocks of L lanes: element i of a row always
// lands in lane i % L and the lanes are summed in one fixed order at the end, so a row's
// result depends on that row's values and length only, never on how many rows a call has.
constexpr int64_t L = 16;

inline float to_f(float v) { return v; }
// bf16 is handled as its bits (uint16_t): plain integer loads and shifts the compiler vectorizes
inline float to_f(uint16_t v) {
    uint32_t u = uint32_t(v) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline void put(float* p, float v) { *p = v; }
// round to nearest even, NaN stays NaN (c10::BFloat16's rounding, branch-free)
inline void put(uint16_t* p, float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    *p = (u & 0x7fffffffu) > 0x7f800000u ? uint16_t(0x7fc0) : uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
// v rounded to T and read back as float (a product the ATen path stores in T)
template <class T> inline float as_t(float v) {
    T t;
    put(&t, v);
    return to_f(t);
}

// exp(x) for x in [-87, 88] (clamped): Cody-Waite reduction and Cephes' degree-6
// polynomial, plain arithmetic the compiler vectorizes (no libm call); within ~2 ulp of expf.
inline float fexp(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest: + 1.5 * 2^23
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t e = (int32_t(n) + 127) << 23;
    float s;
    std::memcpy(&s, &e, 4);
    return p * s;
}

inline float lane_sum(const float* a) {  // fixed pairwise order over the L lanes
    float b[L / 2];
    for (int64_t j = 0; j < L / 2; ++j) b[j] = a[j] + a[j + L / 2];
    for (int64_t w = L / 4; w >= 1; w /= 2)
        for (int64_t j = 0; j < w; ++j) b[j] = b[j] + b[j + w];
    return b[0];
}

// RMSNorm of one row: out = (x * 1/sqrt(mean(x^2) + eps)) * w, in fp32, stored as T.
template <class T> void rms_row(const T* x, const float* w, T* out, int64_t H, float eps) {
    float acc[L] = {0};
    int64_t i = 0;
    for (; i + L <= H; i += L)
        for (int64_t j = 0; j < L; ++j) {
            const float v = to_f(x[i + j]);
            acc[j] += v * v;
        }
    for (int64_t j = 0; i + j < H; ++j) {
        const float v = to_f(x[i + j]);
        acc[j] += v * v;
    }
    const float r = 1.0f / std::sqrt(lane_sum(acc) / float(H) + eps);
    for (int64_t k = 0; k < H; ++k) put(out + k, to_f(x[k]) * r * w[k]);
}

// x += y (stored as T, as ATen's add), then h = RMSNorm(x) when w is given.
template <class T> void add_rms_row(T* x, const T* y, const float* w, T* h, int64_t H, float eps) {
    for (int64_t k = 0; k < H; ++k) put(x + k, to_f(x[k]) + to_f(y[k]));
    if (w != nullptr) rms_row(x, w, h, H, eps);
}

// RoPE of one row's q and k heads (HF's rotate_half: t*cos + roll(t, hd/2) * sin_signed,
// each product stored as T before the sum, as the ATen path does), q in place; the
// rotated k and the v of the row go to the caches at position pos (keys transposed).
template <class T> void rope_cache_row(T* row, const T* cos, const T* sin, int64_t n_heads, int64_t nkv, int64_t hd,
                                       T* kc, T* vc, int64_t cap, int64_t pos) {
    const int64_t half = hd / 2;
    float buf[1024];
    for (int64_t h = 0; h < n_heads + nkv; ++h) {
        T* t = row + h * hd;
        for (int64_t i = 0; i < hd; ++i) {
            const float a = as_t<T>(to_f(t[i]) * to_f(cos[i]));
            const float b = as_t<T>(to_f(t[(i + half) % hd]) * to_f(sin[i]));
            buf[i] = a + b;
        }
        if (h < n_heads) {
            for (int64_t i = 0; i < hd; ++i) put(t + i, buf[i]);
        } else {
            T* k = kc + (h - n_heads) * hd * cap + pos;
            for (int64_t d = 0; d < hd; ++d) put(k + d * cap, buf[d]);
        }
    }
    const T* v = row + (n_heads + nkv) * hd;
    for (int64_t kh = 0; kh < nkv; ++kh)
        std::memcpy(vc + (kh * cap + pos) * hd, v + kh * hd, hd * sizeof(T));
}

// Attention of one query row at position p for the G query heads of one kv head, over
// the keys at positions 0..p (nothing else is read into the result: no mask, no padding):
// scores = (sum over the head dim, in order, of q_d * k_d) * scale; softmax in fp32 with
// the sum of exps in L lanes over blocks of L keys; out = (sum over keys, in order, of
// e_t * v_t) / (sum of exps), each product-sum one fused multiply-add (fmaf, correctly
// rounded in scalar and vector code alike). Every element is a fixed sequence of IEEE
// operations (no other contraction: -ffp-contract=off), so blocking and vector width
// change no bit.
// q: the group's G heads, consecutive; kc: [HD, cap]; vc: [cap, HD]; s: scratch of
// G * (p + 1 rounded up to L) floats. G, HD: compile-time (0 = the run-time g, hd).
constexpr int64_t KB = 64;  // keys per score block

template <class T, int64_t W, int64_t G, int64_t HD>
inline void score_block(const T* q, const T* kc, int64_t cap, int64_t hd, int64_t b0, float* s, int64_t stride,
                        float scale) {
    float a[G][W] = {};
    for (int64_t d = 0; d < HD; ++d) {
        const T* kr = kc + d * cap + b0;
        float k[W];
        for (int64_t j = 0; j < W; ++j) k[j] = to_f(kr[j]);
        for (int64_t hh = 0; hh < G; ++hh) {
            const float qd = to_f(q[hh * hd + d]);
            for (int64_t j = 0; j < W; ++j) a[hh][j] = __builtin_fmaf(qd, k[j], a[hh][j]);
        }
    }
    for (int64_t hh = 0; hh < G; ++hh)
        for (int64_t j = 0; j < W; ++j) s[hh * stride + b0 + j] = a[hh][j] * scale;
}

// softmax over each head's first nk scores (row stride `stride`, a multiple of L), in
// place: e = exp(s - max), zero past nk; inv[h] = 1 / (sum of that head's e, in L lanes).
inline void softmax_rows(float* s, int64_t g, int64_t nk, int64_t stride, float* inv) {
    for (int64_t hh = 0; hh < g; ++hh) {
        float* sh = s + hh * stride;
        float mx[L];  // the max is exact in any order
        for (int64_t j = 0; j < L; ++j) mx[j] = sh[0];
        for (int64_t b = 0; b < stride; b += L)
            for (int64_t j = 0; j < L; ++j) {
                const float v = b + j < nk ? sh[b + j] : sh[0];
                mx[j] = v > mx[j] ? v : mx[j];
            }
        float m = mx[0];
        for (int64_t j = 1; j < L; ++j) m = mx[j] > m ? mx[j] : m;
        float lanes[L] = {0};
        for (int64_t b = 0; b < stride; b += L)
            for (int64_t j = 0; j < L; ++j) {
                const float e = fexp(sh[b + j] - m);
                sh[b + j] = b + j < nk ? e : 0.0f;
                lanes[j] += sh[b + j];
            }
        inv[hh] = 1.0f / lane_sum(lanes);
    }
}

template <class T, int64_t G, int64_t HD>
void attend_row(const T* q, const T* kc, const T* vc, int64_t cap, int64_t p, float scale, T* out, float* s) {
    const int64_t nk = p + 1, stride = (nk + L - 1) / L * L, hd = HD;
    int64_t b0 = 0;
    for (; b0 + KB <= stride; b0 += KB) score_block<T, KB, G, HD>(q, kc, cap, hd, b0, s, stride, scale);
    for (; b0 < stride; b0 += L) score_block<T, L, G, HD>(q, kc, cap, hd, b0, s, stride, scale);
    float inv[G];
    softmax_rows(s, G, nk, stride, inv);
    float acc[G][HD] = {};
    for (int64_t t = 0; t < nk; ++t) {
        const T* vr = vc + t * HD;
        float v[HD];
        for (int64_t d = 0; d < HD; ++d) v[d] = to_f(vr[d]);
        for (int64_t hh = 0; hh < G; ++hh) {
            const float e = s[hh * stride + t];
            for (int64_t d = 0; d < HD; ++d) acc[hh][d] = __builtin_fmaf(e, v[d], acc[hh][d]);
        }
    }
    for (int64_t hh = 0; hh < G; ++hh)
        for (int64_t d = 0; d < HD; ++d) put(out + hh * HD + d, acc[hh][d] * inv[hh]);
}

// The same arithmetic, element for element, for any (g, hd) (run-time sizes, slower).
template <class T>
void attend_generic(int64_t g, int64_t hd, const T* q, const T* kc, const T* vc, int64_t cap, int64_t p, float scale,
                    T* out, float* s) {
    const int64_t nk = p + 1, stride = (nk + L - 1) / L * L;
    for (int64_t b0 = 0; b0 < stride; b0 += L)
        for (int64_t hh = 0; hh < g; ++hh) {
            float a[L] = {0};
            for (int64_t d = 0; d < hd; ++d) {
                const float qd = to_f(q[hh * hd + d]);
                for (int64_t j = 0; j < L; ++j) a[j] = __builtin_fmaf(qd, to_f(kc[d * cap + b0 + j]), a[j]);
            }
            for (int64_t j = 0; j < L; ++j) s[hh * stride + b0 + j] = a[j] * scale;
        }
    std::vector<float> inv(g), acc(g * hd, 0.0f);
    softmax_rows(s, g, nk, stride, inv.data());
    for (int64_t t = 0; t < nk; ++t)
        for (int64_t hh = 0; hh < g; ++hh) {
            const float e = s[hh * stride + t];
            for (int64_t d = 0; d < hd; ++d) acc[hh * hd + d] = __builtin_fmaf(e, to_f(vc[t * hd + d]), acc[hh * hd + d]);
        }
    for (int64_t i = 0; i < g * hd; ++i) put(out + i, acc[i] * inv[i / hd]);
}

// compiled shapes: SmolLM2's (3 query heads per kv head, dim 64) and common neighbours
template <class T>
void attend_any(int64_t g, int64_t hd, const T* q, const T* kc, const T* vc, int64_t cap, int64_t p, float scale,
                T* out, float* s) {
#define SHAPE(G, HD) if (g == G && hd == HD) return attend_row<T, G, HD>(q, kc, vc, cap, p, scale, out, s);
    SHAPE(1, 64) SHAPE(2, 64) SHAPE(3, 64) SHAPE(4, 64) SHAPE(1, 128) SHAPE(2, 128) SHAPE(4, 128)
#undef SHAPE
    attend_generic<T>(g, hd, q, kc, vc, cap, p, scale, out, s);
}

// out = silu(gate) * up of one row, in fp32, stored as T.
template <class T> void silu_mul_row(const T* gate, const T* up, T* out, int64_t I) {
    for (int64_t i = 0; i < I; ++i) {
        const float gv = to_f(gate[i]);
        put(out + i, gv / (1.0f + fexp(-gv)) * to_f(up[i]));
    }
}

template <class T> T* ptr(const at::Tensor& t) { return static_cast<T*>(t.data_ptr()); }

void check(const at::Tensor& t, at::ScalarType dt, const char* what) {
    TORCH_CHECK(t.scalar_type() == dt && t.is_contiguous(), what, " must be a contiguous tensor of the compute dtype");
}

#define DISPATCH(dt, ...)                                                              \
    if ((dt) == at::kFloat) {                                                          \
        using T = float;                                                               \
        __VA_ARGS__                                                                    \
    } else if ((dt) == at::kBFloat16) {                                                \
        using T = uint16_t;                                                            \
        __VA_ARGS__                                                                    \
    } else {                                                                           \
        TORCH_CHECK(false, "the fused kernels run in float32 or bfloat16");            \
    }

}  // namespace

// -- the fused kernels, one call per op over all rows (each row computed alone) ----------

// h = RMSNorm(x) row by row (x [rows, H], w fp32 [H]).
at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
    check(x, x.scalar_type(), "x");
    TORCH_CHECK(w.scalar_type() == at::kFloat && w.is_contiguous(), "the norm weight must be contiguous fp32");
    at::Tensor h = at::empty_like(x);
    const int64_t rows = x.size(0), H = x.size(1);
    DISPATCH(x.scalar_type(), {
        for (int64_t r = 0; r < rows; ++r)
            rms_row(ptr<T>(x) + r * H, w.data_ptr<float>(), ptr<T>(h) + r * H, H, float(eps));
    })
    return h;
}

// x += y in place; returns h = RMSNorm(x) when w is given (else None).
py::object add_rms_norm_(at::Tensor& x, const at::Tensor& y, py::object w_obj, double eps) {
    check(x, x.scalar_type(), "x");
    check(y, x.scalar_type(), "y");
    const int64_t rows = x.size(0), H = x.size(1);
    at::Tensor w, h;
    const bool norm = !w_obj.is_none();
    if (norm) {
        w = w_obj.cast<at::Tensor>();
        TORCH_CHECK(w.scalar_type() == at::kFloat && w.is_contiguous(), "the norm weight must be contiguous fp32");
        h = at::empty_like(x);
    }
    DISPATCH(x.scalar_type(), {
        for (int64_t r = 0; r < rows; ++r)
            add_rms_row(ptr<T>(x) + r * H, ptr<T>(y) + r * H, norm ? w.data_ptr<float>() : nullptr,
                        norm ? ptr<T>(h) + r * H : nullptr, H, float(eps));
    })
    if (!norm) return py::none();
    return py::cast(h);
}

// RoPE in place on rows off..off+n of qkv [rows, (heads + 2 kv) * hd] (cos / sin rows
// indexed like qkv's), and their k, v written to the caches at positions start.. .
void rope_cache_(at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, at::Tensor& kc, at::Tensor& vc,
                 int64_t off, int64_t n, int64_t start, int64_t n_heads, int64_t nkv, int64_t hd) {
    const auto dt = qkv.scalar_type();
    check(qkv, dt, "qkv"); check(cos, dt, "cos"); check(sin, dt, "sin"); check(kc, dt, "the key cache"); check(vc, dt, "the value cache");
    TORCH_CHECK(hd <= 1024 && qkv.size(1) == (n_heads + 2 * nkv) * hd, "qkv's width must be (heads + 2 kv) * hd");
    const int64_t cap = kc.size(2), width = qkv.size(1);
    TORCH_CHECK(start + n <= cap && vc.size(1) == cap, "cache positions out of range");
    DISPATCH(dt, {
        for (int64_t r = off; r < off + n; ++r)
            rope_cache_row(ptr<T>(qkv) + r * width, ptr<T>(cos) + r * hd, ptr<T>(sin) + r * hd,
                           n_heads, nkv, hd, ptr<T>(kc), ptr<T>(vc), cap, start + r - off);
    })
}

// att rows off..off+n = attention of qkv's query rows (row off + i at position start + i)
// over the cached keys 0..start + i.
void attention_(const at::Tensor& qkv, const at::Tensor& kc, const at::Tensor& vc, at::Tensor& att, int64_t off,
                int64_t n, int64_t start, int64_t n_heads, int64_t nkv, int64_t hd, double scale) {
    const auto dt = qkv.scalar_type();
    check(qkv, dt, "qkv"); check(kc, dt, "the key cache"); check(vc, dt, "the value cache"); check(att, dt, "att");
    const int64_t cap = kc.size(2), width = qkv.size(1), g = n_heads / nkv, q_dim = n_heads * hd;
    TORCH_CHECK(att.size(1) == q_dim, "att's width must be heads * hd");
    TORCH_CHECK(((start + n - 1) / L + 1) * L <= cap, "the key cache needs L positions of slack past the pass");
    DISPATCH(dt, {
        const T* q0 = ptr<T>(qkv);
        const T* k0 = ptr<T>(kc);
        const T* v0 = ptr<T>(vc);
        T* a0 = ptr<T>(att);
        // one task per (row, kv head); each computes alone, so any split across threads gives the same bits
        at::parallel_for(0, n * nkv, 1, [&](int64_t lo, int64_t hi) {
            std::vector<float> s(g * (((start + n - 1) / L + 1) * L));
            for (int64_t task = lo; task < hi; ++task) {
                const int64_t i = task / nkv, kh = task % nkv, r = off + i;
                attend_any<T>(g, hd, q0 + r * width + kh * g * hd, k0 + kh * hd * cap, v0 + kh * cap * hd, cap,
                              start + i, float(scale), a0 + r * q_dim + kh * g * hd, s.data());
            }
        });
    })
}

// silu(gate) * up of gu [rows, 2I] -> [rows, I].
at::Tensor silu_mul(const at::Tensor& gu) {
    check(gu, gu.scalar_type(), "gu");
    const int64_t rows = gu.size(0), I = gu.size(1) / 2;
    at::Tensor out = at::empty({rows, I}, gu.options());
    DISPATCH(gu.scalar_type(), {
        for (int64_t r = 0; r < rows; ++r)
            silu_mul_row(ptr<T>(gu) + r * 2 * I, ptr<T>(gu) + r * 2 * I + I, ptr<T>(out) + r * I, I);
    })
    return out;
}

// ---- Q4 GEMM over nibble codes with bf16 dot products -------------------------------
// y[m, n] = sum_g ( scale[g, n] * sum_i code[n, 32g+i] * x[m, 32g+i] + zero[g, n] * sum_i x[m, 32g+i] ),
// codes 0..15 (exact in bf16), x bf16, products exact and sums in fp32, y rounded once to
// bf16. Each row of x runs the same instructions in the same order whatever M is (the
// weights of a block are unpacked once and then applied to every row), so a row's
// result never depends on the other rows: row-invariant by construction, and the pass's
// cost grows with M only by the dot products (no per-row unpacking).
// Layout (``token_spec.q4_weights.pack_nibbles``): outputs in blocks of 64 (4 tiles of 16
// lanes), inputs in groups of 32. codes [N/64][K/32][4][8][32] bytes: chunk q, byte
// 2*lane + p holds the codes of output 16*tile + lane at inputs 32g + 4q + p (low
// nibble) and 32g + 4q + 2 + p (high nibble). sz [N/64][K/32][2][64] fp16: the scales,
// then the zeros, of the block's 64 outputs in group g.
#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
constexpr bool HAS_Q4_MM = true;

at::Tensor q4_mm(const at::Tensor& x_in, const at::Tensor& codes, const at::Tensor& sz, int64_t N) {
    TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == at::kBFloat16, "q4_mm: x must be bf16 [M, K]");
    TORCH_CHECK(codes.scalar_type() == at::kByte && sz.scalar_type() == at::kHalf, "q4_mm: codes uint8, sz fp16");
    const at::Tensor x = x_in.contiguous();
    const int64_t M = x.size(0), K = x.size(1), G = K / 32, NB = N / 64;
    TORCH_CHECK(K % 32 == 0 && N % 64 == 0, "q4_mm: K must be a multiple of 32 and N of 64");
    TORCH_CHECK(codes.numel() == N * K / 2 && sz.numel() == NB * G * 128, "q4_mm: packed weights do not match x's K");
    auto out = at::empty({M, N}, x.options());
    if (M == 0) return out;
    const uint16_t* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
    const uint8_t* cp = codes.data_ptr<uint8_t>();
    const uint16_t* sp = reinterpret_cast<const uint16_t*>(sz.data_ptr<at::Half>());
    uint16_t* op = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
    // per row and group, the fp32 sum of its 32 inputs: one bf16 dot product with ones (16
    // lanes of pair sums), then the lanes added in the intrinsic's fixed order
    std::vector<float> sx(M * G);
    const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);
    for (int64_t m = 0; m < M; ++m)
        for (int64_t g = 0; g < G; ++g) {
            const __m512bh xv = (__m512bh)_mm512_loadu_si512(xp + m * K + 32 * g);
            sx[m * G + g] = _mm512_reduce_add_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), xv, ones));
        }
    alignas(64) static const uint16_t bf16_of[32] = {  // the bf16 bits of 0..15
        0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0,
        0x4100, 0x4110, 0x4120, 0x4130, 0x4140, 0x4150, 0x4160, 0x4170};
    at::parallel_for(0, NB, 1, [&](int64_t b0, int64_t b1) {
        const __m512i table = _mm512_load_si512(bf16_of);
        const __m256i low4 = _mm256_set1_epi8(0x0F);
        std::vector<__m512> acc(M * 4);
        __m512bh w[4][16];
        for (int64_t b = b0; b < b1; ++b) {
            for (auto& a : acc) a = _mm512_setzero_ps();
            for (int64_t g = 0; g < G; ++g) {
                const uint8_t* c = cp + (b * G + g) * 1024;
                // the weights stream from memory once per call: fetch a few blocks ahead
                const char* ahead = reinterpret_cast<const char*>(c + 4 * 1024);
                for (int l = 0; l < 1024; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
                const char* sz_ahead = reinterpret_cast<const char*>(sp + (b * G + g + 4) * 128);
                for (int l = 0; l < 256; l += 64) _mm_prefetch(sz_ahead + l, _MM_HINT_T0);
                for (int j = 0; j < 4; ++j)  // unpack the block's 64 x 32 codes once, as bf16 pairs
                    for (int q = 0; q < 8; ++q) {
                        __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + (j * 8 + q) * 32));
                        __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
                        w[j][2 * q] = (__m512bh)_mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(lo), table);
                        w[j][2 * q + 1] = (__m512bh)_mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(hi), table);
                    }
                const uint16_t* s = sp + (b * G + g) * 128;
                __m512 sc[4], zr[4];
                for (int j = 0; j < 4; ++j) {
                    sc[j] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 16 * j)));
                    zr[j] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 64 + 16 * j)));
                }
                for (int64_t m = 0; m < M; ++m) {
                    // w[j][2q] pairs inputs (4q, 4q+1) and w[j][2q+1] (4q+2, 4q+3): input pair t = x[2t], x[2t+1]
                    const int32_t* xr = reinterpret_cast<const int32_t*>(xp + m * K + 32 * g);
                    __m512 d[8];  // two chains per tile (even and odd pairs), summed in a fixed order
                    for (int j = 0; j < 8; ++j) d[j] = _mm512_setzero_ps();
                    for (int t = 0; t < 16; t += 2) {
                        const __m512bh xa = (__m512bh)_mm512_set1_epi32(xr[t]);
                        const __m512bh xb = (__m512bh)_mm512_set1_epi32(xr[t + 1]);
                        for (int j = 0; j < 4; ++j) {
                            d[j] = _mm512_dpbf16_ps(d[j], w[j][t], xa);
                            d[4 + j] = _mm512_dpbf16_ps(d[4 + j], w[j][t + 1], xb);
                        }
                    }
                    const __m512 sxg = _mm512_set1_ps(sx[m * G + g]);
                    for (int j = 0; j < 4; ++j) {
                        const __m512 dot = _mm512_add_ps(d[j], d[4 + j]);
                        const __m512 part = _mm512_add_ps(_mm512_mul_ps(sc[j], dot), _mm512_mul_ps(zr[j], sxg));
                        acc[m * 4 + j] = _mm512_add_ps(acc[m * 4 + j], part);
                    }
                }
            }
            for (int64_t m = 0; m < M; ++m)
                for (int j = 0; j < 4; ++j)
                    _mm256_storeu_si256(reinterpret_cast<__m256i*>(op + m * N + b * 64 + 16 * j),
                                        (__m256i)_mm512_cvtneps_pbh(acc[m * 4 + j]));
        }
    });
    return out;
}

// ---- bf16 GEMM with bf16 dot products ----------------------------------------------
// y[m, n] = sum_k w[n, k] * x[m, k], bf16 in, each pair of products summed in fp32 by
// vdpbf16ps, y rounded once to bf16. Four chains per tile of 16 outputs (the input pairs
// t % 4), summed in one fixed order at the end; every row runs the same instructions in
// the same order whatever M is, so a row's result never depends on the other rows
// (row-invariant by construction). The weights are laid out in the order the loop reads
// them, so one row streams them from memory sequentially (a one-row call reads the
// weights at about the machine's streaming bandwidth: 2-3x ATen's bf16 GEMV here).
// Layout (``token_spec.exact_kernels.pack_bf16``): w [N/64][K/32][4][4][4][32] bf16: block
// b, group g, pair quad tq, tile j, pair c holds at 2*lane + p w[64b + 16j + lane, 32g + 2(4tq + c) + p].
at::Tensor bf16_mm(const at::Tensor& x_in, const at::Tensor& w, int64_t N) {
    TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == at::kBFloat16, "bf16_mm: x must be bf16 [M, K]");
    TORCH_CHECK(w.scalar_type() == at::kBFloat16 && w.is_contiguous(), "bf16_mm: packed weights must be bf16");
    const at::Tensor x = x_in.contiguous();
    const int64_t M = x.size(0), K = x.size(1), G = K / 32, NB = N / 64;
    TORCH_CHECK(K % 32 == 0 && N % 64 == 0, "bf16_mm: K must be a multiple of 32 and N of 64");
    TORCH_CHECK(w.numel() == N * K, "bf16_mm: packed weights do not match x's K");
    auto out = at::empty({M, N}, x.options());
    if (M == 0) return out;
    const uint16_t* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
    const uint16_t* wp = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
    uint16_t* op = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
    // rows outer, inputs inner: a row's 16 accumulators stay in registers over the whole
    // block (the block's weights stream from memory for the first row, from cache after)
    at::parallel_for(0, NB, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b)
            for (int64_t m = 0; m < M; ++m) {
                __m512 a[16];  // [tile j][chain c]
                for (auto& v : a) v = _mm512_setzero_ps();
                const int32_t* xr0 = reinterpret_cast<const int32_t*>(xp + m * K);
                for (int64_t g = 0; g < G; ++g) {
                    const uint16_t* blk = wp + (b * G + g) * 2048;  // 16 pairs x 4 tiles x 32 bf16
                    const int32_t* xr = xr0 + 16 * g;
                    for (int t = 0; t < 16; t += 4) {
                        const __m512bh x0 = (__m512bh)_mm512_set1_epi32(xr[t]);
                        const __m512bh x1 = (__m512bh)_mm512_set1_epi32(xr[t + 1]);
                        const __m512bh x2 = (__m512bh)_mm512_set1_epi32(xr[t + 2]);
                        const __m512bh x3 = (__m512bh)_mm512_set1_epi32(xr[t + 3]);
                        for (int j = 0; j < 4; ++j) {
                            const uint16_t* wj = blk + 128 * (t + j);  // pairs t..t+3 of tile j, in the order read
                            a[4 * j] = _mm512_dpbf16_ps(a[4 * j], (__m512bh)_mm512_loadu_si512(wj), x0);
                            a[4 * j + 1] = _mm512_dpbf16_ps(a[4 * j + 1], (__m512bh)_mm512_loadu_si512(wj + 32), x1);
                            a[4 * j + 2] = _mm512_dpbf16_ps(a[4 * j + 2], (__m512bh)_mm512_loadu_si512(wj + 64), x2);
                            a[4 * j + 3] = _mm512_dpbf16_ps(a[4 * j + 3], (__m512bh)_mm512_loadu_si512(wj + 96), x3);
                        }
                    }
                }
                for (int j = 0; j < 4; ++j) {
                    const __m512 y = _mm512_add_ps(_mm512_add_ps(a[4 * j], a[4 * j + 1]),
                                                   _mm512_add_ps(a[4 * j + 2], a[4 * j + 3]));
                    _mm256_storeu_si256(reinterpret_cast<__m256i*>(op + m * N + b * 64 + 16 * j),
                                        (__m256i)_mm512_cvtneps_pbh(y));
                }
            }
    });
    return out;
}
#else
constexpr bool HAS_Q4_MM = false;

at::Tensor bf16_mm(const at::Tensor&, const at::Tensor&, int64_t) {
    TORCH_CHECK(false, "bf16_mm needs AVX512-BF16 (this build's CPU has none): use the BLAS GEMM");
    return at::Tensor();
}

at::Tensor q4_mm(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t) {
    TORCH_CHECK(false, "q4_mm needs AVX512-BF16 (this build's CPU has none): use the ATen int4 kernel");
    return at::Tensor();
}
#endif

bool has_q4_mm() { return HAS_Q4_MM; }

// A layer GEMM. Where the Python object names its kernel (``native``: ("q4", packed,
// scales_zeros), ("q4_mm", codes, sz, N), ("bf16_mm", packed, N, most rows) or ("int8",
// codes, scales)), the same op its
// __call__ runs is called here with the same arguments, without a round trip through
// Python; anything else (dense BLAS, oneDNN, a test's wrapper) is called back.
static at::Tensor call(const py::handle& f, const at::Tensor& x) {
    py::object spec = py::getattr(f, "native", py::none());
    if (!spec.is_none()) {
        py::tuple t = spec.cast<py::tuple>();
        const std::string kind = t[0].cast<std::string>();
        if (kind == "q4")
            return at::_weight_int4pack_mm_for_cpu(x, t[1].cast<at::Tensor>(), 32, t[2].cast<at::Tensor>());
        if (kind == "int8") return at::_weight_int8pack_mm(x, t[1].cast<at::Tensor>(), t[2].cast<at::Tensor>());
        if (kind == "q4_mm") return q4_mm(x, t[1].cast<at::Tensor>(), t[2].cast<at::Tensor>(), t[3].cast<int64_t>());
        // up to its row limit (wider calls, a prompt's prefill, go back to Python's BLAS call)
        if (kind == "bf16_mm" && x.size(0) <= t[3].cast<int64_t>())
            return bf16_mm(x, t[1].cast<at::Tensor>(), t[2].cast<int64_t>());
    }
    return f(x).cast<at::Tensor>().contiguous();
}

// The decoder layers over the rows of x [rows, H] (a copy is returned; x is not
// written): the rows of sequence s are off[s]..off[s]+n[s], at positions start[s].., with
// caches kcaches[s] / vcaches[s] per layer; other rows (padding) run the GEMMs and norms
// only (their attention output is zero, nothing of theirs is cached). cos / sin: a table
// row per row of x.
at::Tensor run_layers_packed(at::Tensor x, py::list layers, std::vector<std::vector<at::Tensor>> kcaches,
                             std::vector<std::vector<at::Tensor>> vcaches, at::Tensor cos, at::Tensor sin,
                             std::vector<int64_t> offs, std::vector<int64_t> ns, std::vector<int64_t> starts,
                             int64_t n_heads, int64_t nkv, int64_t hd, double eps, double scale) {
    x = x.contiguous().clone();
    cos = cos.contiguous();
    sin = sin.contiguous();
    const int64_t rows = x.size(0), q_dim = n_heads * hd;
    const int64_t n_layers = static_cast<int64_t>(py::len(layers));
    at::Tensor att = at::zeros({rows, q_dim}, x.options());
    at::Tensor h;
    for (int64_t li = 0; li < n_layers; ++li) {
        py::tuple layer = layers[li].cast<py::tuple>();
        if (li == 0) h = fused_rms_norm(x, layer[0].cast<at::Tensor>(), eps);
        at::Tensor qkv = call(layer[1], h);
        for (size_t s = 0; s < offs.size(); ++s) {
            rope_cache_(qkv, cos, sin, kcaches[s][li], vcaches[s][li], offs[s], ns[s], starts[s], n_heads, nkv, hd);
            attention_(qkv, kcaches[s][li], vcaches[s][li], att, offs[s], ns[s], starts[s], n_heads, nkv, hd, scale);
        }
        h = add_rms_norm_(x, call(layer[2], att), layer[3], eps).cast<at::Tensor>();
        at::Tensor act = silu_mul(call(layer[4], h));
        py::object next = li + 1 < n_layers ? py::object(layers[li + 1].cast<py::tuple>()[0]) : py::object(py::none());
        py::object hn = add_rms_norm_(x, call(layer[5], act), next, eps);
        if (!hn.is_none()) h = hn.cast<at::Tensor>();
    }
    return x;
}

// One sequence: rows 0..n-1 of x at positions start.. (rows n.. are padding).
at::Tensor run_layers(at::Tensor x, py::list layers, std::vector<at::Tensor> kcache, std::vector<at::Tensor> vcache,
                      at::Tensor cos, at::Tensor sin, int64_t start, int64_t n, int64_t n_heads, int64_t nkv,
                      int64_t hd, double eps, double scale) {
    return run_layers_packed(x, layers, {kcache}, {vcache}, cos, sin, {0}, {n}, {start}, n_heads, nkv, hd, eps, scale);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("run_layers", &run_layers, "FastLlama's decoder-layer loop with the fused row kernels");
    m.def("run_layers_packed", &run_layers_packed, "the packed multi-sequence layer loop with the fused row kernels");
    m.def("rms_norm", &fused_rms_norm, "RMSNorm row by row");
    m.def("add_rms_norm_", &add_rms_norm_, "x += y in place, then RMSNorm(x) when a weight is given");
    m.def("rope_cache_", &rope_cache_, "RoPE in place on q, rotated k and v into the caches");
    m.def("attention_", &attention_, "causal attention of query rows over their visible cached keys");
    m.def("silu_mul", &silu_mul, "silu(gate) * up");
    m.def("q4_mm", &q4_mm, "x @ W.T for nibble codes with per-group scales and zeros (bf16 dot products)");
    m.def("bf16_mm", &bf16_mm, "x @ W.T for tiled bf16 weights (bf16 dot products, row-invariant)");
    m.def("has_q4_mm", &has_q4_mm, "whether q4_mm was built (AVX512-BF16)");
}
"""

_ERROR: list[str] = []


def build_error() -> str | None:
    """Why the extension did not build (None if it did or was not tried)."""
    return _ERROR[0] if _ERROR else None


_FLAGS = ["-O3", "-march=native", "-ffp-contract=off"]


def _machine() -> str:
    """What ``-march=native`` compiles for: the CPU's model and flags (Linux), else the
    platform. Part of the build's name, so a cached build never runs on another CPU."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags", "Features"))]
        return "".join(sorted(set(lines)))
    except OSError:
        return platform.machine() + platform.processor()


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
        # named by a hash of the source, the flags, the CPU and the torch install: a changed
        # loop never loads a stale build, checkouts with different sources (or virtual
        # environments: the build's include paths) never overwrite each other's cached
        # build, and a build for one CPU (-march=native) is never loaded on another
        import torch

        parts = [_SOURCE, *_FLAGS, _machine(), os.path.dirname(torch.__file__), torch.__version__]
        key = hashlib.sha1("\0".join(parts).encode()).hexdigest()[:12]
        return cpp_extension.load_inline(
            name="token_spec_native_layers_" + key,
            cpp_sources=[_SOURCE],
            extra_cflags=_FLAGS,
            verbose=False,
        )
    except Exception as exc:  # any build failure: the Python loop stays
        _ERROR.append(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
        return None


def compiled_gemm(op: str, env: str, fallback: str, what: str):
    """The compiled GEMM ``op`` of this module (``q4_mm``, ``bf16_mm``: built only where the
    CPU has AVX512-BF16) unless the environment variable ``env`` says ``fallback`` (the
    ATen kernel the caller runs instead); None where it is not built, or an error naming
    ``what`` when ``env`` asks for "native" there. ``env``: auto (default), ``fallback`` or
    native; anything else is refused with one clear error."""
    choice = os.environ.get(env, "auto")
    if choice not in ("auto", fallback, "native"):
        raise ValueError(f"{env} must be auto, {fallback} or native, got {choice!r}")
    if choice == fallback:
        return None
    module = load()
    if module is None or not module.has_q4_mm():  # every compiled GEMM is built with q4_mm
        if choice == "native":
            raise RuntimeError(f"{env}=native, but {what} is not built here "
                               f"({build_error() or 'the CPU has no AVX512-BF16'})")
        return None
    return getattr(module, op)


def available() -> bool:
    return load() is not None


def mirror(module):
    """``(run_layers, run_layers_packed)`` written in Python over ``module``'s fused kernels
    (each kernel called on its own, the GEMMs through their Python callables): the same
    kernels in the same order as the C++ loop, so the same bits
    (``tests/token_spec/test_native_layers.py``). A reference for the loop, not a fast path."""

    def run_layers_packed(x, layers, kcaches, vcaches, cos, sin, offs, ns, starts, n_heads, nkv, hd, eps, scale):
        import torch

        x, cos, sin = x.contiguous().clone(), cos.contiguous(), sin.contiguous()
        att = torch.zeros(x.shape[0], n_heads * hd, dtype=x.dtype)
        h = module.rms_norm(x, layers[0][0], eps)
        for li, (_, w_qkv, w_o, w_post, w_gu, w_down) in enumerate(layers):
            qkv = w_qkv(h).contiguous()
            for s, (off, n, start) in enumerate(zip(offs, ns, starts)):
                module.rope_cache_(qkv, cos, sin, kcaches[s][li], vcaches[s][li], off, n, start, n_heads, nkv, hd)
                module.attention_(qkv, kcaches[s][li], vcaches[s][li], att, off, n, start, n_heads, nkv, hd, scale)
            h = module.add_rms_norm_(x, w_o(att).contiguous(), w_post, eps)
            act = module.silu_mul(w_gu(h).contiguous())
            nxt = layers[li + 1][0] if li + 1 < len(layers) else None
            h = module.add_rms_norm_(x, w_down(act).contiguous(), nxt, eps)
        return x

    def run_layers(x, layers, kcache, vcache, cos, sin, start, n, n_heads, nkv, hd, eps, scale):
        return run_layers_packed(x, layers, [kcache], [vcache], cos, sin, [0], [n], [start], n_heads, nkv, hd, eps,
                                 scale)

    return run_layers, run_layers_packed
