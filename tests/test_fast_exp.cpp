// tests/test_fast_exp.cpp: cpu/fast_exp.h against double-precision exp and tanh.
//
//   * fast_exp under 1 ulp of exp on a dense sample of every float it can return something finite
//     and nonzero for, denormals included (ulp of the correctly rounded result);
//   * its edges: 1 at 0, NaN, +-inf, the overflow and underflow thresholds where exp's are;
//   * gelu_tanh within 1.51 * 2^-24 of tanh in absolute terms;
//   * a loop the compiler vectorizes gives the same bits as one element at a time (what makes
//     the trainer's results independent of the vector width).
#include "cpu/fast_exp.h"
#include "tests/testing.h"

#include <cstdint>
#include <cstring>
#include <vector>

static float float_of_bits(uint32_t bits) {
    float x;
    std::memcpy(&x, &bits, 4);
    return x;
}
static uint32_t bits_of_float(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    return bits;
}

// |got - exact| in units of the last place of the correctly rounded float result (2^-149 for a
// denormal). exact is exp in double, whose own error (< 1 ulp of a double) is 2^-29 of a float's.
static double ulp_error(float got, double exact) {
    float rounded = (float)exact;
    int exponent = 0;
    std::frexp(rounded == 0 ? 1e-45 : (double)rounded, &exponent);
    double ulp = std::ldexp(1.0, std::max(exponent - 24, -149));
    return std::fabs((double)got - exact) / ulp;
}

// every float of [lo, hi] whose bit pattern is a multiple of stride, through fn(x) (x ascending
// for lo >= 0, descending magnitudes for negative x: the order does not matter)
template <typename Fn>
static void for_floats_in(float lo, float hi, uint32_t stride, Fn fn) {
    for (uint64_t b = 0; b < (1ull << 32); b += stride) {
        float x = float_of_bits((uint32_t)b);
        if (x >= lo && x <= hi) fn(x);
    }
}

TEST(fast_exp_is_under_one_ulp) {
    // exp is finite and nonzero in float for x in about [-103.97, 88.72]; a stride of 61 bit
    // patterns samples 37 million of its 2.2 billion floats (every float was checked once by hand:
    // 0.894 ulp at worst, cpu/fast_exp.h)
    double worst = 0;
    float worst_x = 0;
    long count = 0, correctly_rounded = 0;
    for_floats_in(-104.5f, 89.5f, 61, [&](float x) {
        double exact = std::exp((double)x);
        float got = fast_exp(x);
        if (exact > 3.4028234663852886e38) {  // beyond FLT_MAX: must be inf (exp's float is too)
            CHECK(std::isinf(got) && got > 0, "fast_exp(%.9g) = %g, exp overflows float", x, got);
            return;
        }
        double err = ulp_error(got, exact);
        if (err > worst) worst = err, worst_x = x;
        correctly_rounded += got == (float)exact;
        count++;
    });
    REQUIRE(count > 30000000, "sampled %ld floats", count);
    CHECK(worst < 0.9, "worst error %.4f ulp at x = %.9g (fast_exp %.9g, exp %.17g)", worst, worst_x, fast_exp(worst_x), std::exp((double)worst_x));
    CHECK(correctly_rounded > 0.99 * count, "%ld of %ld correctly rounded", correctly_rounded, count);
    printf("    %ld floats of [-104.5, 89.5]: worst %.4f ulp, %.2f%% correctly rounded\n", count, worst, 100.0 * correctly_rounded / count);
}

TEST(fast_exp_edges) {
    CHECK(fast_exp(0.0f) == 1.0f && fast_exp(-0.0f) == 1.0f, "exp(0) = %.9g", fast_exp(0.0f));
    CHECK(std::isnan(fast_exp(NAN)), "exp(NaN) = %g", fast_exp(NAN));
    CHECK(fast_exp(-INFINITY) == 0.0f && fast_exp(-1000.0f) == 0.0f, "exp(-inf) = %g", fast_exp(-INFINITY));
    CHECK(std::isinf(fast_exp(INFINITY)) && std::isinf(fast_exp(1000.0f)), "exp(inf) = %g", fast_exp(INFINITY));
    CHECK(fast_exp(1.0f) == (float)std::exp(1.0), "e = %.9g", fast_exp(1.0f));
    // the thresholds: every float around the last finite result and around the last nonzero one
    // overflows and underflows where the correctly rounded exp does
    int disagreements = 0;
    for (float x : {88.72f, -103.9f}) {
        for (int i = -2000; i <= 2000; i++) {
            float xi = float_of_bits(bits_of_float(x) + i);
            float want = (float)std::exp((double)xi), got = fast_exp(xi);
            bool same_class = std::isinf(want) == std::isinf(got) && (want == 0) == (got == 0);
            bool close = std::isinf(got) || ulp_error(got, std::exp((double)xi)) < 1;
            if (!same_class || !close) {
                if (disagreements++ < 5) test_fail(__FILE__, __LINE__, "exp(%.9g): fast_exp %.9g, exp %.9g", xi, got, want);
            }
        }
    }
    CHECK(fast_exp(88.7228f) < INFINITY && std::isinf(fast_exp(88.7229f)), "the overflow threshold moved");
    CHECK(fast_exp(-103.97f) > 0 && fast_exp(-103.98f) == 0, "the underflow threshold moved");
    CHECK(fast_exp(-100.0f) > 0 && fast_exp(-100.0f) < 1.17549435e-38f, "exp(-100) = %g is not a denormal", fast_exp(-100.0f));
}

TEST(gelu_tanh_absolute_error) {
    double worst = 0;
    float worst_u = 0;
    for_floats_in(-20.0f, 20.0f, 61, [&](float u) {
        double err = std::fabs((double)gelu_tanh(u) - std::tanh((double)u));
        if (err > worst) worst = err, worst_u = u;
    });
    double bound = 1.51 * std::ldexp(1.0, -24);
    CHECK(worst <= bound, "worst absolute error %.3g (%.3f * 2^-24) at u = %.9g", worst, worst / std::ldexp(1.0, -24), worst_u);
    CHECK(gelu_tanh(INFINITY) == 1 && gelu_tanh(-INFINITY) == -1 && gelu_tanh(50.0f) == 1, "tanh(inf) = %g", gelu_tanh(INFINITY));
    CHECK(gelu_tanh(0.0f) == 0 && std::isnan(gelu_tanh(NAN)), "tanh(0) = %g", gelu_tanh(0.0f));
    CHECK(gelu_tanh(-1.5f) == -gelu_tanh(1.5f), "tanh is odd");
    printf("    worst absolute error %.3f * 2^-24\n", worst / std::ldexp(1.0, -24));
}

// The same function as a loop GCC vectorizes at -O3 (the trainer's form) and one element at a
// time through a volatile, which no compiler can vectorize: the bits must be the same.
__attribute__((noinline)) static void exp_loop(float* out, const float* in, int n) {
    for (int i = 0; i < n; i++) out[i] = fast_exp(in[i]);
}
__attribute__((noinline)) static void tanh_loop(float* out, const float* in, int n) {
    for (int i = 0; i < n; i++) out[i] = gelu_tanh(in[i]);
}

TEST(vectorized_loops_give_the_scalar_bits) {
    std::vector<float> in;
    uint64_t state = 88172645463325252ull;
    for (int i = 0; i < 100003; i++) {  // odd length: the vector loop's tail runs too
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        in.push_back((float)((double)(state >> 11) / (double)(1ull << 53) * 200.0 - 110.0));
    }
    in[5] = NAN, in[6] = -INFINITY, in[7] = INFINITY, in[8] = -103.95f, in[9] = 88.72f;
    std::vector<float> vec(in.size()), tanh_vec(in.size());
    exp_loop(vec.data(), in.data(), (int)in.size());
    tanh_loop(tanh_vec.data(), in.data(), (int)in.size());
    int mismatches = 0;
    for (size_t i = 0; i < in.size(); i++) {
        volatile float x = in[i];
        float scalar = fast_exp(x), tanh_scalar = gelu_tanh(x);
        // NaN against NaN counts as the same (their payloads may come from either operand)
        auto same_bits = [](float a, float b) { return (std::isnan(a) && std::isnan(b)) || bits_of_float(a) == bits_of_float(b); };
        bool same = same_bits(scalar, vec[i]) && same_bits(tanh_scalar, tanh_vec[i]);
        if (!same && mismatches++ < 5)
            test_fail(__FILE__, __LINE__, "x = %.9g: exp %a (loop) against %a (scalar), tanh %a against %a", in[i], vec[i], scalar, tanh_vec[i], tanh_scalar);
    }
    CHECK(mismatches == 0, "%d of %zu elements differ", mismatches, in.size());
}

TEST_MAIN()
