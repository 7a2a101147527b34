// cpu/gemm.h: the one matrix multiply of the CPU trainer. Header-only, float and double.
//
//   C[i*ldc + j] (+)= sum_k A(i,k) * B(k,j)      i < M, j < N, k < K
//   A(i,k) = A[i*a_rs + k*a_cs]     B(k,j) = B[k*b_rs + j*b_cs]
//
// Every operand is given by a row stride and a column stride, so any transpose is just a choice
// of strides and nothing is ever transposed in memory up front. accumulate=false overwrites C
// (its old contents are never read, NaNs included), accumulate=true adds the product to what C
// holds. C must not overlap A or B. The trainer's three forms, BT = B*T rows:
//   forward  out(BT,OC)  = inp(BT,C) . W(OC,C)^T      gemm(BT,OC,C,  inp,C,1,   W,1,C,   out,OC, false)
//   dinp     dinp(BT,C) += dout(BT,OC) . W(OC,C)      gemm(BT,C,OC,  dout,OC,1, W,C,1,   dinp,C, true)
//   dweight  dW(OC,C)   += dout(BT,OC)^T . inp(BT,C)  gemm(OC,C,BT,  dout,1,OC, inp,C,1, dW,C,   true)
//
// How it is fast (the classic Goto/BLIS scheme, in plain C++):
//
//   for each NC-wide column block of C                      (B panel, KC x NC, lives in L2/L3)
//     for each KC-deep slice of K                           (pack the B panel)
//       for each MC-tall row block of C                     (A block, MC x KC, lives in L2)
//         pack the A block
//         for each NR-wide micro-panel of the B panel       (KC x NR, stays in L1)
//           for each MR-tall micro-panel of the A block
//             micro-kernel: an MR x NR tile of C held in registers, KC rank-1 updates
//
// * Packing. Whatever the strides, A and B are first copied into small contiguous buffers laid
//   out exactly in the order the micro-kernel reads them: an A micro-panel is KC groups of MR
//   values (a[p*MR + i] = A(i, p)), a B micro-panel is KC groups of NR values
//   (b[p*NR + j] = B(p, j)). The kernel then walks both with unit stride, the hardware
//   prefetchers see two simple streams, and ragged edges are padded with zeros so the kernel
//   never needs a bounds check. The copy is O(MK + KN) next to the O(MNK) multiply, but it is
//   not free: each packed B value feeds only 2*BT = 512 flops (~5 ns of one core), so packing
//   must cost well under 0.5 ns per value. A plain copy does (0.3 ns); the transposing packs
//   (W^T in forward, inp/dout for A) needed some care, see gemm_transpose_chunk.
//
// * The micro-kernel. With AVX-512 it is MR x NR = 6 x 32: for float 6 rows x two 16-wide zmm
//   registers = 12 accumulators; each k step loads 2 vectors of B, broadcasts 6 scalars of A and
//   issues 12 FMAs, so the FMA pipes, not the loads, are the limit. Measured on the Zen4 box
//   (one core, operands in L1): 6x32 114 GFLOP/s (~the peak: 16 fp32 FMAs/cycle at ~3.6 GHz),
//   8x32 111, 12x32 106, 6x64 113, 16x16 12(!). For double, 6 x 32 is 6 rows x four 8-wide
//   registers = 24 accumulators (57 GFLOP/s, the double peak).
//   With AVX2 and FMA but no AVX-512 (Zen 3, most Intel desktops) there are 16 ymm registers of 8
//   floats, so 6 x 32 would need 24 accumulators: it spills, and ran at about 40% of the peak.
//   There it is 6 x 16 for float and 6 x 8 for double (12 accumulators of the 16 registers),
//   the classic Haswell shape. On a 2-core Zen 3 (AMD EPYC, family 25 model 1, 2026-11-30), one
//   GPT-2 124M step's matmuls in dev/bench_gemm: 97-114 GFLOP/s against the loops' 65-75 (two
//   alternated rounds; dev/results/2026-11-30-cpu-zen3-avx2.md).
//
// * Why plain loops where they do: GCC 12 -O3 -march=native turns the AVX-512 kernel below (a
//   local acc[MR][NR] array, a k loop around an i loop around a j loop of constant trip count
//   NR = 32) into exactly the hand-written code: the accumulators stay in zmm registers, one
//   vbroadcastss + 2 vfmadd231ps per row per k, nothing spilled (checked in the assembly). It is
//   fragile in one known way: with NR = 16 GCC unrolls the j loop before vectorising it and emits
//   scalar code (10x slower; with AVX2 too, 2 GFLOP/s), which is why AVX2's kernel, which needs
//   NR = 16, is written with intrinsics (gemm_micro_kernel_avx2). GCC's generic vector types
//   would not do there either: they have no fused multiply-add but the compiler's contraction of
//   a*b+c, which -ffp-contract decides, and a lane-by-lane fmaf stayed scalar. If a future
//   compiler regresses, look at `objdump -d` of the micro-kernel first: dev/bench_gemm will show
//   ~10 GFLOP/s instead of ~200 (AVX-512) or ~110 (AVX2). The only non-standard things used
//   are __builtin_prefetch (a GCC builtin: a no-op on targets without prefetch), __builtin_fma(f),
//   GCC's optimize and unroll pragmas (below) and, with AVX2 only, its intrinsics. Every kernel
//   gives the same bits (tests/test_gemm.cpp checks them against their definition).
//   Other targets (ARM's NEON, x86 without AVX2) get the 6 x 32 loops, which are not tuned for
//   them.
//
// * Floating point. The FMA is spelled __builtin_fma(f), the body of std::fma (with FMA enabled
//   at compile time, e.g. by -march=native, GCC vectorises it to vfmadd), so the result does not
//   depend on -ffp-contract or on how the compiler schedules things. A build without FMA (plain
//   -march=x86-64) uses a*b+c instead: still deterministic, but its bits differ from an FMA build's.
//
// * Optimisation level. The micro-kernel and gemm_madd are compiled at -O3 (GCC's optimize pragma)
//   even where the file including this one is not: the emulated GPU builds (emu.mk, -Og) run the
//   CPU reference as the oracle of every test_gpt, and there the kernel, unvectorised and calling
//   an out-of-line std::fma, was a quarter of the run time (vanilla bf16's 10 steps: 111 s, 70 s
//   with this; 2026-11-30). Same bits either way: the vector lanes are separate j, each its own
//   chain of FMAs in k order. The builtin, because -Og does not inline std::fma into -O3 code.
//
// * Blocking sizes (float; 32 KiB L1d and 1 MiB L2 per Zen4 core, 32 MiB shared L3):
//   KC = 256: the B micro-panel (KC x NR floats = 32 KiB; 16 KiB with AVX2) is reused by every
//     MR-row strip of the A block; K is also the dimension along which we add into C once per
//     slice, so deeper slices mean fewer passes over C (dweight of the LM head updates a 154 MB
//     dW: with K = BT = 256 that is exactly one pass). KC = 384 measured the same, 128 and 512 slower.
//   MC = 264: an A block of MC x KC floats = 264 KiB sits comfortably in the 1 MiB L2, and
//     264 = 44 * 6 covers the trainer's M = BT = 256 rows in a single block.
//   NC = 3072: the B panel KC x NC = 3 MiB per thread streams through L2/L3; a wide NC means the
//     A block is repacked only N/NC times. 1536 and 6144 measured the same.
//   The C tile is prefetched before its kernel runs, since C (the LM head's 51 MB logits or
//   154 MB dW) is often far bigger than the caches.
//
// * Determinism. The trainer's checkpoint resume must be bit-exact, so the result may not depend
//   on the number of threads. It does not, by construction: every element C(i,j) is computed by
//   the same sequence of floating point operations no matter how the work is split:
//     for each KC slice s (in order):  t = 0; for k in slice s (in order): t = fma(A(i,k), B(k,j), t)
//                                      C(i,j) = (first slice && !accumulate) ? t : C(i,j) + t
//   The slices depend only on K and KC (a compile-time constant), never on the thread count, and
//   one output element is owned by exactly one thread (threads split C into disjoint blocks). An
//   element that lands in a ragged edge tile runs the very same kernel (the zero padding only
//   fills the unused lanes), so even where the tile boundaries fall does not matter; that is
//   also why the split may freely depend on the thread count and the shape.
//
// * Threads. gemm() opens its own `#pragma omp parallel` (call it from serial code; called from
//   inside a parallel region it runs on the calling thread). C is cut into as many contiguous
//   strips as there are threads, each a whole number of micro-tiles: along N when N is the longer
//   side or M fits in one A block (forward, dinp: each thread packs its own part of B), else along
//   M (dweight with OC > C). Each thread packs into its own 64-byte aligned thread_local buffers,
//   kept between calls, so there is no malloc per call. Without -fopenmp all runs on the caller.
//
// * Speed on the 2-core Zen4 box, 2 threads, trainer shapes (BT=256): ~180-215 GFLOP/s per shape,
//   one GPT-2 124M step's worth of matmuls (190 GFLOP) in ~0.95 s; on the 2-core Zen 3 with the
//   AVX2 kernel ~80-120 GFLOP/s per shape, the step's matmuls in ~1.6-1.8 s. See dev/bench_gemm.cpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#ifdef _OPENMP
#include <omp.h>
#endif

// The AVX2 micro-kernel (intrinsics, 6 x 8-wide registers of float or 6 x 4 of double) where
// the compiler targets AVX2 and FMA but not AVX-512; the plain loops everywhere else.
// -DGEMM_AVX2_KERNEL=0 takes the loops (to compare them).
#ifndef GEMM_AVX2_KERNEL
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#define GEMM_AVX2_KERNEL 1
#else
#define GEMM_AVX2_KERNEL 0
#endif
#endif
#if GEMM_AVX2_KERNEL
#include <immintrin.h>
#endif

// Block sizes per element type. MR/NR: register tile; KC: depth of a K slice; MC/NC: the A block
// height and B panel width (multiples of MR and NR). KC fixes where the sums of a C element are
// cut (see Determinism), so it is the same for every kernel; MR/NR, MC and NC change no bits.
template <typename T> struct gemm_blocking;
template <> struct gemm_blocking<float> {
    static constexpr int MR = 6, NR = GEMM_AVX2_KERNEL ? 16 : 32;
    static constexpr int KC = 256, MC = 264, NC = 3072;
};
template <> struct gemm_blocking<double> {
    static constexpr int MR = 6, NR = GEMM_AVX2_KERNEL ? 8 : 32;
    static constexpr int KC = 128, MC = 132, NC = 1536;  // same bytes per block as float
};

// a*b + c with one rounding where the hardware has FMA (GCC defines __FMA__ under -march=native
// on any recent x86). It must be the same in every kernel call, which it is: one definition.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("O3")
#endif
template <typename T>
static inline T gemm_madd(T a, T b, T c) {
#ifdef __FMA__
    if constexpr (sizeof(T) == sizeof(float)) return __builtin_fmaf(a, b, c);
    else return __builtin_fma(a, b, c);
#else
    return a * b + c;
#endif
}

// The portable micro-kernel: tile[MR][NR] = sum_{p<kc} a_panel[p*MR + i] * b_panel[p*NR + j].
// a_panel: MR x kc packed (MR values per k), b_panel: kc x NR packed (NR values per k). The
// product goes to a small aligned scratch tile rather than straight into C: with a fixed,
// contiguous destination GCC keeps acc[][] in registers for every kc (with the runtime ldc of C
// in the loop it did not), and copying 6x32 values out costs nothing next to kc*12 FMAs.
// noinline keeps the code generation of this loop independent of whoever calls it.
template <typename T, int MR, int NR>
__attribute__((noinline)) void gemm_micro_kernel_loops(int kc, const T* __restrict a_panel,
                                                       const T* __restrict b_panel, T* __restrict tile) {
    T acc[MR][NR] = {};
    for (int p = 0; p < kc; p++) {
        const T* a = a_panel + (long)p * MR;
        const T* b = b_panel + (long)p * NR;
        for (int i = 0; i < MR; i++) {
            const T a_ip = a[i];
            for (int j = 0; j < NR; j++) acc[i][j] = gemm_madd(a_ip, b[j], acc[i][j]);
        }
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) tile[i * NR + j] = acc[i][j];
}

#if GEMM_AVX2_KERNEL
// The same tile with AVX2 intrinsics: row i of the tile is NR / W registers of W lanes (W = 8
// floats or 4 doubles), 12 accumulators in all of the 16 ymm registers, 2 loads of B and a
// broadcast of A per row per k. Lane j of a register is the loop kernel's acc[i][j], updated by
// the same fused multiply-add in the same k order: the same bits (tests/test_gemm.cpp checks it).
template <typename T> struct gemm_avx2;
template <> struct gemm_avx2<float> {
    typedef __m256 reg;
    static constexpr int W = 8;
    static reg zero() { return _mm256_setzero_ps(); }
    static reg load(const float* p) { return _mm256_loadu_ps(p); }
    static reg broadcast(const float* p) { return _mm256_broadcast_ss(p); }
    static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
    static void store(float* p, reg r) { _mm256_storeu_ps(p, r); }
};
template <> struct gemm_avx2<double> {
    typedef __m256d reg;
    static constexpr int W = 4;
    static reg zero() { return _mm256_setzero_pd(); }
    static reg load(const double* p) { return _mm256_loadu_pd(p); }
    static reg broadcast(const double* p) { return _mm256_broadcast_sd(p); }
    static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_pd(a, b, c); }
    static void store(double* p, reg r) { _mm256_storeu_pd(p, r); }
};
template <typename T, int MR, int NR>
__attribute__((noinline)) void gemm_micro_kernel_avx2(int kc, const T* __restrict a_panel,
                                                      const T* __restrict b_panel, T* __restrict tile) {
    typedef gemm_avx2<T> V;
    constexpr int NV = NR / V::W;
    static_assert(NR % V::W == 0, "NR must be a whole number of registers");
    // Every loop but k's unrolled by hand: GCC keeps acc[][] in registers only once its indices
    // are constants; without the pragmas it stored all 12 to the stack at every k (2026-11-30,
    // GCC 12: the kernel ran at a third of its speed inside gemm, where kc is not a constant).
    typename V::reg acc[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) acc[i][v] = V::zero();
    for (int p = 0; p < kc; p++) {
        typename V::reg b[NV];
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) b[v] = V::load(b_panel + (long)p * NR + v * V::W);
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            const typename V::reg a_ip = V::broadcast(a_panel + (long)p * MR + i);
#pragma GCC unroll 16
            for (int v = 0; v < NV; v++) acc[i][v] = V::fma(a_ip, b[v], acc[i][v]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) V::store(tile + i * NR + v * V::W, acc[i][v]);
}
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

// The micro-kernel gemm_block runs: AVX2's where it is built, else the loops.
template <typename T, int MR, int NR>
static inline void gemm_micro_kernel(int kc, const T* __restrict a_panel, const T* __restrict b_panel,
                                     T* __restrict tile) {
#if GEMM_AVX2_KERNEL
    gemm_micro_kernel_avx2<T, MR, NR>(kc, a_panel, b_panel, tile);
#else
    gemm_micro_kernel_loops<T, MR, NR>(kc, a_panel, b_panel, tile);
#endif
}

// Transpose a chunk of R strided rows into interleaved order:
//   dst[q*dst_stride + r] = src[r*src_stride + q]      r < R, q < CHUNK
// This is the packing step whenever the operand is contiguous along k but the kernel wants the
// values of one k side by side (A = inp or dout in forward/dinp, B = W^T in forward). The naive
// loop (for p: for r: ...) keeps R read streams open at once; with W's rows 3072 floats = 12 KiB
// apart all of them land in the same L1 set and it ran at 1.7 ns per element. Here each row
// gives a 16-value chunk (a cache line) in one go into a small tile on the stack, and the tile
// is written out transposed: about 0.3 ns per element whatever the stride (R = 4 and 6).
// (Reading a row's chunk with memcpy or with a loop makes no difference to the result and, in
// GCC 12, a 1.6x difference in speed, in opposite directions for A and B: hence the flag.)
constexpr int GEMM_TRANSPOSE_CHUNK = 16;
template <typename T, int R, bool READ_WITH_MEMCPY>
static inline void gemm_transpose_chunk(const T* src, long src_stride, T* dst, int dst_stride) {
    constexpr int CHUNK = GEMM_TRANSPOSE_CHUNK;
    T chunk[R][CHUNK];
    for (int r = 0; r < R; r++) {
        if (READ_WITH_MEMCPY)
            memcpy(chunk[r], src + r * src_stride, sizeof(chunk[r]));
        else
            for (int q = 0; q < CHUNK; q++) chunk[r][q] = src[r * src_stride + q];
    }
    for (int q = 0; q < CHUNK; q++)
        for (int r = 0; r < R; r++) dst[q * dst_stride + r] = chunk[r][q];
}

// Pack the mc x kc block A(i, p) = A[i*a_rs + p*a_cs] into ceil(mc/MR) micro-panels, each
// kc x MR with the MR values of one k adjacent; rows past mc are zero.
//   packed[(i/MR)*MR*kc + p*MR + i%MR] = A(i, p)
// noinline (like the kernel): inlined into the loop nest, GCC ran out of registers and spilled.
template <typename T, int MR>
__attribute__((noinline)) void gemm_pack_a(int mc, int kc, const T* A, long a_rs, long a_cs, T* packed) {
    for (int i0 = 0; i0 < mc; i0 += MR) {
        const int rows = std::min(MR, mc - i0);
        T* dst = packed + (long)i0 * kc;
        const T* src = A + (long)i0 * a_rs;
        if (rows == MR && a_rs == 1) {
            // dweight: A = dout^T, the MR values of one k are adjacent already: a plain copy.
            for (int p = 0; p < kc; p++)
                for (int i = 0; i < MR; i++) dst[(long)p * MR + i] = src[(long)p * a_cs + i];
        } else if (rows == MR && a_cs == 1) {
            // forward, dinp: A = inp or dout, row-major, contiguous along k.
            int p = 0;
            for (; p + GEMM_TRANSPOSE_CHUNK <= kc; p += GEMM_TRANSPOSE_CHUNK)
                gemm_transpose_chunk<T, MR, false>(src + p, a_rs, dst + (long)p * MR, MR);
            for (; p < kc; p++)
                for (int i = 0; i < MR; i++) dst[(long)p * MR + i] = src[i * a_rs + p];
        } else {
            // Any other strides, and the last, partial micro-panel (zero-padded).
            for (int p = 0; p < kc; p++)
                for (int i = 0; i < MR; i++)
                    dst[(long)p * MR + i] = i < rows ? src[i * a_rs + (long)p * a_cs] : T(0);
        }
    }
}

// Pack the kc x nc panel B(p, j) = B[p*b_rs + j*b_cs] into ceil(nc/NR) micro-panels, each
// kc x NR with the NR values of one k adjacent; columns past nc are zero.
//   packed[(j/NR)*NR*kc + p*NR + j%NR] = B(p, j)
template <typename T, int NR>
__attribute__((noinline)) void gemm_pack_b(int kc, int nc, const T* B, long b_rs, long b_cs, T* packed) {
    constexpr int ROWS_AT_ONCE = 4;  // transpose 4 of W's rows at a time (8 and 16 were slower)
    static_assert(NR % ROWS_AT_ONCE == 0, "NR must be a multiple of ROWS_AT_ONCE");
    for (int j0 = 0; j0 < nc; j0 += NR) {
        const int cols = std::min(NR, nc - j0);
        T* dst = packed + (long)j0 * kc;
        const T* src = B + (long)j0 * b_cs;
        if (cols == NR && b_cs == 1) {
            // dinp: B = W, dweight: B = inp, row-major: each k is a contiguous copy of NR values.
            for (int p = 0; p < kc; p++)
                for (int j = 0; j < NR; j++) dst[(long)p * NR + j] = src[(long)p * b_rs + j];
        } else if (cols == NR && b_rs == 1) {
            // forward: B = W^T, i.e. NR rows of W, each contiguous along k. Chunk by chunk of k,
            // so that the writes fill whole lines of the panel (rows first was 30% slower).
            int p = 0;
            for (; p + GEMM_TRANSPOSE_CHUNK <= kc; p += GEMM_TRANSPOSE_CHUNK)
#pragma GCC unroll 1  // unrolled, GCC kept 32 row pointers live and spilled them
                for (int j = 0; j < NR; j += ROWS_AT_ONCE)
                    gemm_transpose_chunk<T, ROWS_AT_ONCE, true>(src + j * b_cs + p, b_cs, dst + (long)p * NR + j, NR);
            for (; p < kc; p++)
                for (int j = 0; j < NR; j++) dst[(long)p * NR + j] = src[j * b_cs + p];
        } else {
            // Any other strides, and the last, partial micro-panel (zero-padded).
            for (int p = 0; p < kc; p++)
                for (int j = 0; j < NR; j++)
                    dst[(long)p * NR + j] = j < cols ? src[(long)p * b_rs + j * b_cs] : T(0);
        }
    }
}

// Add (or, for the first K slice without accumulate, store) one mr x nr kernel tile into C.
// A plain add: C = C + tile, the same single rounding for full and ragged tiles.
template <typename T, int MR, int NR>
static inline void gemm_store_tile(const T* __restrict tile, int mr, int nr, T* __restrict c, long ldc,
                                   bool overwrite) {
    if (mr == MR && nr == NR) {
        for (int i = 0; i < MR; i++) {
            T* c_row = c + i * ldc;
            const T* t_row = tile + i * NR;
            if (overwrite)
                for (int j = 0; j < NR; j++) c_row[j] = t_row[j];
            else
                for (int j = 0; j < NR; j++) c_row[j] = c_row[j] + t_row[j];
        }
    } else {
        for (int i = 0; i < mr; i++) {
            T* c_row = c + i * ldc;
            const T* t_row = tile + i * NR;
            for (int j = 0; j < nr; j++) c_row[j] = overwrite ? t_row[j] : c_row[j] + t_row[j];
        }
    }
}

// One thread's share: the m x n block of C at C (row stride ldc), A and B already offset to
// its first row / column. Runs the BLIS loop nest described at the top with this thread's
// packing buffers.
template <typename T>
static void gemm_block(int m, int n, int K, const T* A, long a_rs, long a_cs, const T* B, long b_rs,
                       long b_cs, T* C, long ldc, bool accumulate, T* a_packed, T* b_packed) {
    constexpr int MR = gemm_blocking<T>::MR, NR = gemm_blocking<T>::NR;
    constexpr int KC = gemm_blocking<T>::KC, MC = gemm_blocking<T>::MC, NC = gemm_blocking<T>::NC;
    alignas(64) T tile[MR * NR];
    for (int jc = 0; jc < n; jc += NC) {
        const int nc = std::min(NC, n - jc);
        for (int pc = 0; pc < K; pc += KC) {
            const int kc = std::min(KC, K - pc);
            const bool overwrite = (pc == 0) && !accumulate;
            gemm_pack_b<T, NR>(kc, nc, B + pc * b_rs + jc * b_cs, b_rs, b_cs, b_packed);
            for (int ic = 0; ic < m; ic += MC) {
                const int mc = std::min(MC, m - ic);
                gemm_pack_a<T, MR>(mc, kc, A + ic * a_rs + pc * a_cs, a_rs, a_cs, a_packed);
                for (int jr = 0; jr < nc; jr += NR) {
                    const int nr = std::min(NR, nc - jr);
                    const T* b_panel = b_packed + (long)jr * kc;
                    for (int ir = 0; ir < mc; ir += MR) {
                        const int mr = std::min(MR, mc - ir);
                        T* c_tile = C + (ic + ir) * ldc + jc + jr;
                        // The C tile is read (and written) only after the kernel's kc*MR*NR/16
                        // FMAs; ask for its lines now so that they arrive meanwhile. Without this
                        // the loads of C missed all caches whenever C is large (the LM head's
                        // out or dW: 51 and 154 MB) and cost 6-10% of the time.
                        for (int i = 0; i < mr; i++) {
                            __builtin_prefetch(c_tile + i * ldc, 1);
                            __builtin_prefetch(c_tile + i * ldc + nr - 1, 1);
                        }
                        gemm_micro_kernel<T, MR, NR>(kc, a_packed + (long)ir * kc, b_panel, tile);
                        gemm_store_tile<T, MR, NR>(tile, mr, nr, c_tile, ldc, overwrite);
                    }
                }
            }
        }
    }
}

// This thread's packing buffers: room for one A block (MC x KC) and one B panel (KC x NC),
// 64-byte aligned, allocated on first use and kept for the life of the thread (OpenMP keeps its
// worker threads alive between parallel regions, so steady-state calls never allocate).
template <typename T>
static T* gemm_thread_buffers() {
    constexpr size_t count = (size_t)gemm_blocking<T>::MC * gemm_blocking<T>::KC +
                             (size_t)gemm_blocking<T>::KC * gemm_blocking<T>::NC;
    struct Buffer {
        T* ptr = nullptr;
        ~Buffer() { free(ptr); }
    };
    static thread_local Buffer buffer;
    if (!buffer.ptr) {
        buffer.ptr = static_cast<T*>(aligned_alloc(64, (count * sizeof(T) + 63) / 64 * 64));
        if (!buffer.ptr) {
            fprintf(stderr, "error: gemm: out of memory allocating %zu bytes of packing buffer\n",
                    count * sizeof(T));
            exit(1);
        }
    }
    return buffer.ptr;
}

template <typename T>
void gemm(int M, int N, int K, const T* A, long a_rs, long a_cs, const T* B, long b_rs, long b_cs, T* C,
          long ldc, bool accumulate) {
    constexpr int MR = gemm_blocking<T>::MR, NR = gemm_blocking<T>::NR, MC = gemm_blocking<T>::MC;
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {  // an empty sum: C = 0, or C unchanged
        if (!accumulate)
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) C[(long)i * ldc + j] = T(0);
        return;
    }

    // How many threads: all of them, unless the multiply is too small to pay for waking them
    // (below ~2 MFLOP the fork/join costs more than it saves). This changes nothing in the
    // result (see "Determinism" above), only the speed.
    int threads = 1;
#ifdef _OPENMP
    if ((double)M * N * K >= 1e6 && !omp_in_parallel()) threads = omp_get_max_threads();
#endif
    // Split C into `threads` strips along its longer side: along N (each thread packs its own
    // part of B and all of A) or along M (its own part of A, all of B). When M fits in one A
    // block, split N even if it is the shorter side: each thread then packs a disjoint part of
    // B and only repacks the small A. So forward and dinp (M = BT = 256) split along N, dweight
    // (M = OC, N = C) along the longer of OC and C.
    const long m_tiles = (M + MR - 1) / MR, n_tiles = (N + NR - 1) / NR;
    const bool split_n = (n_tiles * NR >= m_tiles * MR) || (M <= MC && n_tiles >= threads);
    const long tiles = split_n ? n_tiles : m_tiles;
    if (threads > tiles) threads = (int)std::max(1L, tiles);

    auto run_strip = [&](int t) {
        const long first = tiles * t / threads, last = tiles * (t + 1) / threads;
        if (first >= last) return;
        T* a_packed = gemm_thread_buffers<T>();
        T* b_packed = a_packed + (size_t)gemm_blocking<T>::MC * gemm_blocking<T>::KC;
        if (split_n) {
            const long j0 = first * NR, j1 = std::min<long>(N, last * NR);
            gemm_block<T>(M, (int)(j1 - j0), K, A, a_rs, a_cs, B + j0 * b_cs, b_rs, b_cs, C + j0, ldc,
                          accumulate, a_packed, b_packed);
        } else {
            const long i0 = first * MR, i1 = std::min<long>(M, last * MR);
            gemm_block<T>((int)(i1 - i0), N, K, A + i0 * a_rs, a_rs, a_cs, B, b_rs, b_cs, C + i0 * ldc, ldc,
                          accumulate, a_packed, b_packed);
        }
    };
    if (threads == 1) {
        run_strip(0);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
    {
        // The runtime may hand us fewer threads than asked for (OMP_DYNAMIC): then some
        // threads run more than one strip, still each strip exactly once.
        for (int t = omp_get_thread_num(); t < threads; t += omp_get_num_threads()) run_strip(t);
    }
#endif
}
