// cpu/fast_exp.h: exp (and GELU's tanh) for the CPU trainer's float build, in plain arithmetic
// that GCC and clang vectorize, with the same bits on every machine. Header-only.
//
// Why: libm's expf and tanhf are a function call per element, so the loops around them stay
// scalar. On a 2-core Zen 5 (perf, 2026-11-30) the classifier's softmax over GPT-2's 50,257
// tokens (libm's expf and a serial row sum) was 30% of a quickstart step and GELU's tanhf 8%;
// with these, a step took 186 ms instead of 288 (dev/results/2026-11-30-cpu-zen5.md). They are
// inline, branch-free (selects only) and use std::fma at every step, so a vectorized loop and a
// scalar one give the same bits, on any ISA with FMA (x86-64 from Haswell on, every ARMv8);
// without hardware FMA, std::fma is libm's exact software fma: slow, the same bits.
//
// fast_exp: under 1 ulp of exp (0.894 at worst, checked on every float of [-104.5, 89.5] against
// double exp, 2026-11-30; 99.54% of them correctly rounded); tests/test_fast_exp.cpp checks a
// dense sample of that range and the edges at every make test. Denormal results are rounded
// once, as libm's are; exp(x) = 0 below about -103.97, +inf above about 88.72, NaN stays NaN.
// PyTorch's CPU softmax uses a vectorized exp of the same kind (Sleef's, 1 ulp).
//
// The double build (finite differences, gradcheck) keeps std::exp and std::tanh: the double
// overloads of vexp and gelu_tanh are those.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

// exp(x) for float: x = n ln2 + r with n = round(x / ln2), |r| <= ln2/2 (Cody-Waite, ln2 in two
// parts so that n ln2 is exact enough), exp(r) by a degree-7 polynomial (Cephes' expf
// coefficients: 1 + r (1 + r (1/2 + r (1/6 + ...)))), then times 2^n as two powers of two,
// 2^(n >> 1) and 2^(n - (n >> 1)), each a normal float for every n in [-150, 128]: the first
// product is exact and the second rounds once, into a denormal, a normal or infinity.
inline float fast_exp(float x) {
    // clamp so that n stays in [-150, 128]; NaN fails both tests and goes on as NaN
    x = x < -104.0f ? -104.0f : x;
    x = x > 89.0f ? 89.0f : x;
    // n = round-to-nearest(x log2 e), as an integer in t's low mantissa bits: 1.5 * 2^23 pushes the
    // fraction out of the mantissa (valid for |x log2 e| < 2^22); no float-to-int conversion, so
    // no undefined behaviour on NaN
    const float round_magic = 12582912.0f;  // 1.5 * 2^23
    float t = std::fma(x, 1.44269504088896341f, round_magic);
    float n = t - round_magic;
    uint32_t t_bits;
    std::memcpy(&t_bits, &t, 4);
    int32_t n_int = (int32_t)(t_bits - 0x4B400000u);  // t's bits minus round_magic's
    // r = x - n ln2, ln2 = 0.693359375 - 2.12194440e-4 (the first part has 9 significant bits, so
    // n * it is exact for |n| <= 2^15)
    float r = std::fma(n, -0.693359375f, x);
    r = std::fma(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = std::fma(p, r, 1.3981999507e-3f);
    p = std::fma(p, r, 8.3334519073e-3f);
    p = std::fma(p, r, 4.1665795894e-2f);
    p = std::fma(p, r, 1.6666665459e-1f);
    p = std::fma(p, r, 5.0000001201e-1f);
    float e_r = std::fma(std::fma(p, r, 1.0f), r, 1.0f);  // 1 + r (1 + r p): 0.894 ulp at worst; 1 + (r + r^2 p) 1.010
    // 2^n = 2^n_lo * 2^n_hi, each exponent in [-75, 64]: a normal float, built from its bits
    int32_t n_lo = n_int >> 1, n_hi = n_int - n_lo;
    uint32_t lo_bits = (uint32_t)(n_lo + 127) << 23, hi_bits = (uint32_t)(n_hi + 127) << 23;
    float scale_lo, scale_hi;
    std::memcpy(&scale_lo, &lo_bits, 4);
    std::memcpy(&scale_hi, &hi_bits, 4);
    return e_r * scale_lo * scale_hi;
}

// tanh(u) for GELU's tanh approximation, where it only ever appears as 1 + tanh and 1 - tanh^2,
// sums in which only its absolute error counts: sign(u) (1 - e) / (1 + e) with e = exp(-2|u|),
// whose absolute error is at most 1.51 * 2^-24 (every float of [-20, 20] against double tanh,
// 2026-11-30; libm's tanhf reached 1.74 * 2^-24 on a sample). Its *relative* error near 0 is
// not bounded (tanh(1e-10) comes out 0): not a general tanh. NaN stays NaN, +-inf gives +-1.
inline float gelu_tanh(float u) {
    float e = fast_exp(-2.0f * std::fabs(u));
    return std::copysign((1.0f - e) / (1.0f + e), u);
}
inline double gelu_tanh(double u) {
    return std::tanh(u);
}

// The exp the trainer's float and double builds call in the classifier's softmax and SwiGLU's
// sigmoid (overloads, picked by the argument's type). The attention softmax keeps std::exp: over
// T <= 128 keys the change measured nothing in the quickstart.
inline float vexp(float x) {
    return fast_exp(x);
}
inline double vexp(double x) {
    return std::exp(x);
}
