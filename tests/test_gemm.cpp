// tests/test_gemm.cpp: cpu/gemm.h against a naive triple loop, and bit-exact across thread counts.
//
// build: g++ -O3 -march=native -fopenmp -std=c++17 -I. tests/test_gemm.cpp -o /tmp/test_gemm
//
// How close must the float result be? Any way of summing K products (each rounded or fused) and
// adding the sum to C obeys the classic bound (Higham, "Accuracy and Stability of Numerical
// Algorithms", 3.1):
//     |computed - exact| <= gamma_{K+1} * (sum_k |A(i,k)| |B(k,j)| + |C_old(i,j)|),
//     gamma_n = n*u / (1 - n*u),  u = eps/2 (unit roundoff)
// so we allow (K+2) * eps * (that sum): twice the bound, and still far below the size of any real
// mistake (a dropped or doubled term, a wrong stride, a stale C), which are all O(|A(i,k) B(k,j)|)
// ~ 0.3 for our values in [-1, 1]. The reference is summed in double for float (its own error,
// ~K * 1e-16, is negligible) and in long double for double, where the same formula is the tight
// tolerance.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu/gemm.h"
#include "tests/testing.h"

// The accumulator type of the reference: wider than T.
template <typename T> struct reference_type;
template <> struct reference_type<float> { typedef double type; };
template <> struct reference_type<double> { typedef long double type; };

// How an operand is laid out in memory. For an R x S logical matrix X(r, s):
enum Layout {
    ROW_MAJOR,     // X[r*ld + s], ld >= S     (s contiguous)
    COL_MAJOR,     // X[r + s*ld], ld >= R     (r contiguous, i.e. a transpose)
    BOTH_STRIDED,  // X[r*rs + s*cs], neither stride 1 (e.g. every other element of something)
};
static const char* layout_name(Layout l) {
    return l == ROW_MAJOR ? "row" : l == COL_MAJOR ? "col" : "strided";
}

// An R x S matrix in the given layout, with padding (never read by gemm) filled with garbage.
template <typename T>
struct StridedMatrix {
    std::vector<T> data;
    long rs = 0, cs = 0;
    T at(int r, int s) const { return data[r * rs + s * cs]; }
};

template <typename T>
static StridedMatrix<T> make_matrix(int R, int S, Layout layout, int pad, std::mt19937& rng) {
    StridedMatrix<T> m;
    if (layout == ROW_MAJOR) {
        m.rs = S + pad;
        m.cs = 1;
    } else if (layout == COL_MAJOR) {
        m.rs = 1;
        m.cs = R + pad;
    } else {
        m.cs = 2;                      // every other element along s
        m.rs = 2 * (long)S + 1 + pad;  // odd, so rows do not line up
    }
    const long size = std::max(1L, (R - 1L) * m.rs + (S - 1L) * m.cs + 1);
    // Padding gets a huge value, so a read of it would show up as an enormous error.
    m.data.assign(R == 0 || S == 0 ? 1 : size, T(1e30));
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) m.data[r * m.rs + s * m.cs] = T(dist(rng));
    return m;
}

// One gemm call checked against the reference: A is M x K, B is K x N, C is M x N with row
// stride ldc = N + c_pad. Returns false (after recording why) on the first bad element.
template <typename T>
static bool check_one_gemm(int M, int N, int K, Layout a_layout, Layout b_layout, bool accumulate, int pad,
                           std::mt19937& rng) {
    typedef typename reference_type<T>::type R;
    StridedMatrix<T> A = make_matrix<T>(M, K, a_layout, pad, rng);
    StridedMatrix<T> B = make_matrix<T>(K, N, b_layout, pad, rng);
    const long ldc = N + pad;
    const T guard = T(-12345.0);
    std::vector<T> C(std::max(1L, M * ldc), guard);
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            // Without accumulate, C's old contents must be ignored entirely, even a NaN.
            C[i * ldc + j] = accumulate ? T(dist(rng)) : std::numeric_limits<T>::quiet_NaN();
    const std::vector<T> C_old = C;

    gemm<T>(M, N, K, A.data.data(), A.rs, A.cs, B.data.data(), B.rs, B.cs, C.data(), ldc, accumulate);

    const double eps = std::numeric_limits<T>::epsilon();
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            R exact = accumulate ? R(C_old[i * ldc + j]) : R(0);
            R magnitude = accumulate ? std::fabs(R(C_old[i * ldc + j])) : R(0);
            for (int k = 0; k < K; k++) {
                exact += R(A.at(i, k)) * R(B.at(k, j));
                magnitude += std::fabs(R(A.at(i, k)) * R(B.at(k, j)));
            }
            const double tolerance = (K + 2) * eps * (double)magnitude;
            const double got = C[i * ldc + j];
            if (!(std::fabs(got - (double)exact) <= tolerance)) {
                CHECK(false, "M=%d N=%d K=%d A=%s B=%s accumulate=%d pad=%d: C(%d,%d) = %.17g, expected %.17g (tolerance %.3g)",
                      M, N, K, layout_name(a_layout), layout_name(b_layout), (int)accumulate, pad, i, j, got,
                      (double)exact, tolerance);
                return false;
            }
        }
        for (long j = N; j < ldc; j++) {  // the padding of C's rows is not gemm's to touch
            if (C[i * ldc + j] != guard) {
                CHECK(false, "M=%d N=%d K=%d: gemm wrote into the padding of C's row %d (column %ld)", M, N, K, i, j);
                return false;
            }
        }
    }
    return true;
}

// Every layout combination, accumulate on and off, for one shape.
template <typename T>
static bool check_all_layouts(int M, int N, int K, std::mt19937& rng) {
    const Layout layouts[] = {ROW_MAJOR, COL_MAJOR, BOTH_STRIDED};
    for (Layout a : layouts)
        for (Layout b : layouts)
            for (int accumulate = 0; accumulate < 2; accumulate++) {
                const int pad = (M + N + K + (int)a + 3 * (int)b) % 3 == 0 ? 0 : 5;  // sometimes padded
                if (!check_one_gemm<T>(M, N, K, a, b, accumulate, pad, rng)) return false;
            }
    return true;
}

// Sizes around every edge of the blocking: micro-tile (MR, NR), K slice (KC), A block (MC).
template <typename T>
static std::vector<int> edge_sizes() {
    typedef gemm_blocking<T> blk;
    return {1, 2, blk::MR - 1, blk::MR, blk::MR + 1, blk::NR - 1, blk::NR + 1, 37, blk::KC - 1, blk::KC + 1,
            blk::MC + 1};
}

TEST(gemm_float_small_shapes_all_layouts) {
    std::mt19937 rng(1);
    const int sizes[] = {1, 2, 3, 5, 7, 8, 13, 16, 31, 32, 33};
    for (int M : sizes)
        for (int N : sizes)
            for (int K : {1, 2, 7, 16, 33})
                if (!check_all_layouts<float>(M, N, K, rng)) return;
}

TEST(gemm_float_blocking_edges) {
    std::mt19937 rng(2);
    const std::vector<int> sizes = edge_sizes<float>();
    for (int M : sizes)
        for (int N : sizes)
            for (int K : {3, gemm_blocking<float>::KC - 1, gemm_blocking<float>::KC + 1, 2 * gemm_blocking<float>::KC + 5})
                if (!check_one_gemm<float>(M, N, K, (Layout)((M + K) % 3), (Layout)((N + K) % 3), (M + N) % 2,
                                           (M * N) % 2 ? 3 : 0, rng))
                    return;
}

TEST(gemm_float_random_shapes) {
    std::mt19937 rng(3);
    std::uniform_int_distribution<int> size(1, 200);
    for (int trial = 0; trial < 40; trial++) {
        const int M = size(rng), N = size(rng), K = size(rng) * 3;
        if (!check_all_layouts<float>(M, N, K, rng)) return;
    }
}

TEST(gemm_float_wider_than_one_b_panel) {
    // N past NC (one packed B panel) and K past several KC slices, with primes everywhere.
    std::mt19937 rng(4);
    const int NC = gemm_blocking<float>::NC;
    check_one_gemm<float>(7, NC + 37, 523, ROW_MAJOR, COL_MAJOR, true, 0, rng);
    check_one_gemm<float>(13, NC + 1, 263, ROW_MAJOR, ROW_MAJOR, false, 1, rng);
}

TEST(gemm_float_trainer_forms) {
    // The three forms the trainer uses, with its strides, at a reduced size (BT=67, C=96, OC=3*96+7).
    std::mt19937 rng(5);
    const int BT = 67, C = 96, OC = 295;
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> inp(BT * C), W(OC * C), dout(BT * OC);
    for (auto* v : {&inp, &W, &dout})
        for (float& x : *v) x = dist(rng);
    // forward: out(BT,OC) = inp . W^T
    std::vector<float> out(BT * OC, 7.0f);
    gemm<float>(BT, OC, C, inp.data(), C, 1, W.data(), 1, C, out.data(), OC, false);
    for (int t = 0; t < BT; t++)
        for (int o = 0; o < OC; o++) {
            double ref = 0, mag = 0;
            for (int c = 0; c < C; c++) ref += (double)inp[t * C + c] * W[o * C + c], mag += std::fabs((double)inp[t * C + c] * W[o * C + c]);
            REQUIRE(std::fabs(out[t * OC + o] - ref) <= (C + 2) * 1.2e-7 * mag, "forward out(%d,%d) = %g vs %g", t, o, out[t * OC + o], ref);
        }
    // dinp(BT,C) += dout . W
    std::vector<float> dinp(BT * C, 0.5f);
    gemm<float>(BT, C, OC, dout.data(), OC, 1, W.data(), C, 1, dinp.data(), C, true);
    for (int t = 0; t < BT; t++)
        for (int c = 0; c < C; c++) {
            double ref = 0.5, mag = 0.5;
            for (int o = 0; o < OC; o++) ref += (double)dout[t * OC + o] * W[o * C + c], mag += std::fabs((double)dout[t * OC + o] * W[o * C + c]);
            REQUIRE(std::fabs(dinp[t * C + c] - ref) <= (OC + 2) * 1.2e-7 * mag, "dinp(%d,%d) = %g vs %g", t, c, dinp[t * C + c], ref);
        }
    // dW(OC,C) += dout^T . inp
    std::vector<float> dW(OC * C, -0.25f);
    gemm<float>(OC, C, BT, dout.data(), 1, OC, inp.data(), C, 1, dW.data(), C, true);
    for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++) {
            double ref = -0.25, mag = 0.25;
            for (int t = 0; t < BT; t++) ref += (double)dout[t * OC + o] * inp[t * C + c], mag += std::fabs((double)dout[t * OC + o] * inp[t * C + c]);
            REQUIRE(std::fabs(dW[o * C + c] - ref) <= (BT + 2) * 1.2e-7 * mag, "dW(%d,%d) = %g vs %g", o, c, dW[o * C + c], ref);
        }
}

TEST(gemm_double_all_layouts) {
    std::mt19937 rng(6);
    const std::vector<int> sizes = edge_sizes<double>();
    for (int M : {1, 5, 6, 7, 33})
        for (int N : {1, 31, 32, 33, 70})
            for (int K : {1, 9, gemm_blocking<double>::KC + 3})
                if (!check_all_layouts<double>(M, N, K, rng)) return;
    for (int M : sizes)
        for (int N : sizes)
            if (!check_one_gemm<double>(M, N, 2 * gemm_blocking<double>::KC + 1, (Layout)(M % 3), (Layout)(N % 3),
                                        (M + N) % 2, 0, rng))
                return;
    std::uniform_int_distribution<int> size(1, 150);
    for (int trial = 0; trial < 20; trial++)
        if (!check_all_layouts<double>(size(rng), size(rng), size(rng) * 2, rng)) return;
}

TEST(gemm_zero_sizes) {
    std::mt19937 rng(7);
    // M = 0 or N = 0: nothing to do, nothing touched (the check also covers C's padding).
    for (int accumulate = 0; accumulate < 2; accumulate++) {
        CHECK(check_one_gemm<float>(0, 5, 7, ROW_MAJOR, ROW_MAJOR, accumulate, 2, rng));
        CHECK(check_one_gemm<float>(5, 0, 7, COL_MAJOR, ROW_MAJOR, accumulate, 2, rng));
        CHECK(check_one_gemm<float>(0, 0, 0, ROW_MAJOR, COL_MAJOR, accumulate, 2, rng));
        CHECK(check_one_gemm<double>(0, 3, 0, ROW_MAJOR, COL_MAJOR, accumulate, 0, rng));
    }
    // K = 0: an empty sum. accumulate=false gives exact zeros (even over NaN), accumulate=true
    // leaves C as it was.
    std::vector<float> C(4 * 6, std::numeric_limits<float>::quiet_NaN());
    float dummy = 1.0f;
    gemm<float>(4, 5, 0, &dummy, 1, 1, &dummy, 1, 1, C.data(), 6, false);
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 5; j++) CHECK(C[i * 6 + j] == 0.0f, "K=0 overwrite: C(%d,%d) = %g", i, j, C[i * 6 + j]);
        CHECK(std::isnan(C[i * 6 + 5]), "K=0 overwrite touched the padding of row %d", i);
    }
    for (float& x : C) x = 3.0f;
    gemm<float>(4, 5, 0, &dummy, 1, 1, &dummy, 1, 1, C.data(), 6, true);
    for (float x : C) CHECK(x == 3.0f, "K=0 accumulate changed C to %g", x);
    CHECK(check_one_gemm<double>(3, 4, 0, BOTH_STRIDED, COL_MAJOR, true, 1, rng));
}

// Run gemm on the given inputs with `threads` OpenMP threads; return C.
template <typename T>
static std::vector<T> run_with_threads(int threads, int M, int N, int K, const std::vector<T>& A, long a_rs,
                                       long a_cs, const std::vector<T>& B, long b_rs, long b_cs,
                                       const std::vector<T>& C0, bool accumulate) {
#ifdef _OPENMP
    omp_set_num_threads(threads);
#else
    (void)threads;
#endif
    std::vector<T> C = C0;
    gemm<T>(M, N, K, A.data(), a_rs, a_cs, B.data(), b_rs, b_cs, C.data(), N, accumulate);
    return C;
}

template <typename T>
static void check_bit_identical_across_threads(int M, int N, int K, Layout a_layout, Layout b_layout,
                                               bool accumulate, std::mt19937& rng) {
    StridedMatrix<T> A = make_matrix<T>(M, K, a_layout, 0, rng);
    StridedMatrix<T> B = make_matrix<T>(K, N, b_layout, 0, rng);
    std::vector<T> C0((size_t)M * N);
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    for (T& x : C0) x = T(dist(rng));
    const std::vector<T> one = run_with_threads<T>(1, M, N, K, A.data, A.rs, A.cs, B.data, B.rs, B.cs, C0, accumulate);
    for (int threads : {2, 3, 4}) {
        const std::vector<T> many =
            run_with_threads<T>(threads, M, N, K, A.data, A.rs, A.cs, B.data, B.rs, B.cs, C0, accumulate);
        CHECK(memcmp(one.data(), many.data(), one.size() * sizeof(T)) == 0,
              "M=%d N=%d K=%d A=%s B=%s accumulate=%d: 1 thread and %d threads differ", M, N, K,
              layout_name(a_layout), layout_name(b_layout), (int)accumulate, threads);
    }
}

TEST(gemm_bit_identical_with_1_and_2_threads) {
#ifndef _OPENMP
    printf("     (built without -fopenmp: both runs are single-threaded)\n");
#endif
    std::mt19937 rng(8);
    // The trainer's three forms (BT=256 rows, C=768, OC=2304/3 -> smaller OC to keep it quick),
    // large enough to be split across threads and to need several K slices.
    const int BT = 256, C = 768, OC = 1000;
    check_bit_identical_across_threads<float>(BT, OC, C, ROW_MAJOR, COL_MAJOR, false, rng);  // forward
    check_bit_identical_across_threads<float>(BT, C, OC, ROW_MAJOR, ROW_MAJOR, true, rng);   // dinp
    check_bit_identical_across_threads<float>(OC, C, BT, COL_MAJOR, ROW_MAJOR, true, rng);   // dweight
    // Ragged shapes split along M and along N, odd strides, and double.
    check_bit_identical_across_threads<float>(517, 131, 611, BOTH_STRIDED, COL_MAJOR, true, rng);
    check_bit_identical_across_threads<float>(37, gemm_blocking<float>::NC + 77, 300, COL_MAJOR, BOTH_STRIDED, false, rng);
    check_bit_identical_across_threads<double>(301, 257, 700, ROW_MAJOR, COL_MAJOR, true, rng);
#ifdef _OPENMP
    omp_set_num_threads(omp_get_num_procs());
#endif
}

TEST(gemm_element_depends_only_on_its_row_and_column) {
    // The determinism argument in gemm.h is that C(i,j) is computed the same way wherever the
    // tile boundaries fall. Check it directly: computing a ragged sub-block of C on its own (so
    // every tile boundary moves) gives the very same bits as computing all of C.
    std::mt19937 rng(9);
    const int M = 203, N = 301, K = 777;
    StridedMatrix<float> A = make_matrix<float>(M, K, ROW_MAJOR, 0, rng);
    StridedMatrix<float> B = make_matrix<float>(K, N, COL_MAJOR, 0, rng);
    std::vector<float> C_full((size_t)M * N), C_part((size_t)M * N, 0.0f);
    gemm<float>(M, N, K, A.data.data(), A.rs, A.cs, B.data.data(), B.rs, B.cs, C_full.data(), N, false);
    const int i0 = 5, i1 = 190, j0 = 7, j1 = 250;
    gemm<float>(i1 - i0, j1 - j0, K, A.data.data() + i0 * A.rs, A.rs, A.cs, B.data.data() + j0 * B.cs, B.rs,
                B.cs, C_part.data() + i0 * N + j0, N, false);
    for (int i = i0; i < i1; i++)
        for (int j = j0; j < j1; j++)
            if (C_part[i * N + j] != C_full[i * N + j]) {
                CHECK(false, "C(%d,%d): %.9g computed in a sub-block, %.9g in the full product", i, j,
                      C_part[i * N + j], C_full[i * N + j]);
                return;
            }
}

// The bits themselves, against gemm.h's definition of them (its "Determinism"): C(i,j) is, for
// each K slice of KC (in order), t = 0; t = fma(A(i,k), B(k,j), t) over the slice's k in order;
// C(i,j) = t for the first slice without accumulate, else C(i,j) + t. Which micro-kernel runs
// (the loops, or AVX2's intrinsics; the tile MR x NR it is built for) and how the work is cut
// must not show: a machine with another kernel trains to the same bits. Exact equality, float
// and double, shapes across the tile, slice and block edges, every layout.
template <typename T>
static T fused_madd(T a, T b, T c) {
#ifdef __FMA__
    return std::fma(a, b, c);  // what gemm_madd computes where the build has FMA
#else
    return a * b + c;
#endif
}

template <typename T>
static bool check_bits_against_definition(int M, int N, int K, Layout a_layout, Layout b_layout, bool accumulate,
                                          std::mt19937& rng) {
    // the slices' depth is part of the definition, fixed for every machine and kernel: a
    // checkpoint's bits depend on it (gemm_blocking's KC must stay this)
    const int KC = sizeof(T) == sizeof(float) ? 256 : 128;
    StridedMatrix<T> A = make_matrix<T>(M, K, a_layout, 0, rng);
    StridedMatrix<T> B = make_matrix<T>(K, N, b_layout, 0, rng);
    std::vector<T> C((size_t)M * N);
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    for (T& x : C) x = T(dist(rng));
    std::vector<T> want = C;
    gemm<T>(M, N, K, A.data.data(), A.rs, A.cs, B.data.data(), B.rs, B.cs, C.data(), N, accumulate);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            T& c = want[(size_t)i * N + j];
            for (int k0 = 0; k0 < K; k0 += KC) {
                T t = 0;
                for (int k = k0; k < std::min(K, k0 + KC); k++) t = fused_madd(A.at(i, k), B.at(k, j), t);
                c = (k0 == 0 && !accumulate) ? t : c + t;
            }
            if (memcmp(&c, &C[(size_t)i * N + j], sizeof(T)) != 0) {
                CHECK(false, "M=%d N=%d K=%d A=%s B=%s accumulate=%d: C(%d,%d) = %.17g, the definition gives %.17g", M, N,
                      K, layout_name(a_layout), layout_name(b_layout), (int)accumulate, i, j, (double)C[(size_t)i * N + j],
                      (double)c);
                return false;
            }
        }
    return true;
}

TEST(gemm_bits_are_the_definitions) {
    std::mt19937 rng(10);
    printf("     (micro-kernel: %s, float tile %d x %d, double tile %d x %d)\n", GEMM_AVX2_KERNEL ? "AVX2 intrinsics" : "loops",
           gemm_blocking<float>::MR, gemm_blocking<float>::NR, gemm_blocking<double>::MR, gemm_blocking<double>::NR);
    const Layout layouts[] = {ROW_MAJOR, COL_MAJOR, BOTH_STRIDED};
    int n = 0;
    for (int M : {1, 7, 40})
        for (int N : {1, 17, 45, 70})
            for (int K : {5, 256 + 9, 2 * 256 + 1}) {
                Layout a = layouts[n % 3], b = layouts[(n / 3) % 3];
                bool accumulate = n++ % 2;
                if (!check_bits_against_definition<float>(M, N, K, a, b, accumulate, rng)) return;
                if (!check_bits_against_definition<double>(M, N, K / 2 + 1, b, a, !accumulate, rng)) return;
            }
    // the trainer's forward at a size that fills several A blocks and B panels, on every thread
    if (!check_bits_against_definition<float>(gemm_blocking<float>::MC + 13, 300, 600, ROW_MAJOR, COL_MAJOR, false, rng)) return;
}

TEST_MAIN()
