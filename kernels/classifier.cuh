// kernels/classifier.cuh: the fused classifier: softmax over the V real tokens, the cross-entropy
// loss of each position, and (in the same kernel) the logit gradient written in place over the
// logits, so the (B*T, Vp) probabilities are never stored.
//   PyTorch: F.cross_entropy(logits[..., :V], targets, reduction="none"), and its backward
//
// Per row (one block per position): pass 1 reads the row once with an online softmax (running max
// and running sum of exp, merged across threads in a fixed tree order); the loss is
// log(sum) + max - logit[target]. Pass 2 (only with write_dlogits) reads the row again (it is
// still in L2) and overwrites it with dlogits = softmax - onehot(target), 0 on the padded columns
// V..Vp. The 1/(B*T) of the mean loss (and the gradient-accumulation scale) is NOT applied here:
// the LM-head backward GEMM applies it as its alpha (matmul_backward), so the forward does not
// need to know the loss scale.
//
// Version 2 updates the running max element by element (a branch and an expf per element).
// Version 3 (the trainer's) takes each 16-byte vector's max first, rescales the running sum at
// most once per vector, and computes each logit's exponential as exp2f(x log2(e) - m log2(e)): one FFMA
// and the hardware's ex2 instead of expf's range reduction. The GPT-2 head computes two
// exponentials per logit (one per pass) for 50257 x B*T logits, 6.6 billion of them per step at
// B=64, T=1024, which made version 2 slower than its bytes (7.8 ms measured on an H100 against
// 4.4 ms of traffic at 3 TB/s). The argument's rounding, |m| log2(e) 2^-24 (about 1e-6 for
// logits of magnitude 30), is a relative error of the same size in each probability: below the
// FP32 build's 1e-5 bounds and far below bf16's. Measured on an H100 (2026-11-26,
// dev/results/2026-11-26-h100-3.md): 6.8 ms a step against version 2's 7.8 (ncu), and a build
// with version 2 (-DVP_CLASSIFIER_VERSION=2) ran 1.006x this one's step time. At that size pass 2
// does not find its row in L2 (512 threads per row leave 4 rows per SM in flight, about 53 MB on
// 132 SMs against a 50 MB L2), so the kernel moves about 3 row-passes of bytes, not 2: 6.8 ms is
// 2.9 TB/s of those. 1024 threads per row (2 rows per SM, 26 MB) did not help: 1.005x the step
// time (H100, 2026-11-27, dev/results/2026-11-27-h100-3.md).
// Version 4 is version 3 with the row kept in shared memory: pass 1 also stores each vector it
// reads there, and pass 2 reads the row back from shared memory instead of global memory. One
// read and one write of the row, whether or not L2 would have held it. The row takes
// Vp * sizeof(floatX) bytes (98 KiB at GPT-2's Vp = 50304 in bf16), so two 1024-thread blocks fit
// an SM (2048 threads, version 3's 4 x 512); wider rows run version 3. The same vectors per thread
// in the same order as version 3 with 1024 threads, so the same bits as that (not as the trainer's
// 512-thread version 3). Not yet timed on a GPU: the lab and the build variant classifier_v4
// (-DVP_CLASSIFIER_VERSION=4).
// Versions and timings: dev/cuda/classifier.cu.
//
// defines: fused_classifier (and fused_classifier2/3/4 for the lab and the build variants)
#pragma once

#include <algorithm>

#include "kernels/common.cuh"

namespace gpu {

// ----------------------------------------------------------------------------
// kernels

struct SoftmaxStat {
    float m, s;  // running max, sum of exp(x - m)
};

__device__ __forceinline__ SoftmaxStat softmax_merge(SoftmaxStat a, SoftmaxStat b) {
    if (a.m == -INFINITY) return b;
    if (b.m == -INFINITY) return a;
    float m = fmaxf(a.m, b.m);
    return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

// The row's statistics from every thread's: across each warp by shuffles, then the warps in a
// fixed order, so every thread of the block gets the same bits.
__device__ __forceinline__ SoftmaxStat softmax_block_merge(SoftmaxStat st) {
    __shared__ SoftmaxStat warp_stats[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    for (int o = 16; o > 0; o >>= 1) {
        SoftmaxStat other = {__shfl_xor_sync(0xffffffffu, st.m, o), __shfl_xor_sync(0xffffffffu, st.s, o)};
        st = softmax_merge(st, other);
    }
    if (lane == 0) warp_stats[warp] = st;
    __syncthreads();
    st = warp_stats[0];
    for (int w = 1; w < nwarps; w++) st = softmax_merge(st, warp_stats[w]);
    return st;
}

static __global__ void fused_classifier_kernel2(floatX* logits, float* losses, const int* targets, int V, int Vp, bool write_dlogits) {
    int row = blockIdx.x;
    floatX* x = logits + (size_t)row * Vp;
    SoftmaxStat st = {-INFINITY, 0.0f};
    for (int c = threadIdx.x * x128::size; c < V; c += blockDim.x * x128::size) {
        x128 v = load128(x + c);
        for (int k = 0; k < x128::size && c + k < V; k++) {
            float f = to_float(v[k]);
            if (f > st.m) {
                st.s = st.s * expf(st.m - f) + 1.0f;
                st.m = f;
            } else {
                st.s += expf(f - st.m);
            }
        }
    }
    st = softmax_block_merge(st);
    int target = targets[row];
    if (threadIdx.x == 0) losses[row] = logf(st.s) + st.m - to_float(x[target]);
    if (!write_dlogits) return;
    __syncthreads();  // every thread has read x[target] before anyone overwrites the row
    float inv_sum = 1.0f / st.s;
    for (int c = threadIdx.x * x128::size; c < Vp; c += blockDim.x * x128::size) {
        x128 v = load128(x + c), d;
        for (int k = 0; k < x128::size; k++) {
            int j = c + k;
            float p = j < V ? expf(to_float(v[k]) - st.m) * inv_sum : 0.0f;
            d[k] = from_float<floatX>(p - (j == target ? 1.0f : 0.0f));
        }
        store128(x + c, d);
    }
}

#define CLASSIFIER_LOG2E 1.4426950408889634f

// Version 3's update of a thread's running statistics by one 16-byte vector of the row, of which
// the first n elements are real tokens (the last vector of a row may straddle V)
__device__ __forceinline__ void classifier_stat_update(SoftmaxStat& st, const x128& v, int n) {
    float vmax = -INFINITY;
    for (int k = 0; k < n; k++) vmax = fmaxf(vmax, to_float(v[k]));
    if (vmax > st.m) {
        st.s *= exp2f((st.m - vmax) * CLASSIFIER_LOG2E);  // 0 while st.m is -inf (st.s is 0 then)
        st.m = vmax;
    }
    float neg_m2 = -st.m * CLASSIFIER_LOG2E, sum = 0.0f;
    for (int k = 0; k < n; k++) sum += exp2f(fmaf(to_float(v[k]), CLASSIFIER_LOG2E, neg_m2));
    st.s += sum;
}

// dlogits = softmax - onehot(target) of the vector v at column c (0 on the padded columns >= V)
__device__ __forceinline__ x128 classifier_dlogits(const x128& v, int c, int V, int target, float neg_m2, float inv_sum) {
    x128 d;
    for (int k = 0; k < x128::size; k++) {
        int j = c + k;
        float p = j < V ? exp2f(fmaf(to_float(v[k]), CLASSIFIER_LOG2E, neg_m2)) * inv_sum : 0.0f;
        d[k] = from_float<floatX>(p - (j == target ? 1.0f : 0.0f));
    }
    return d;
}

// version 3: the row's statistics in log2 units of the input, per 16-byte vector (see the top)
static __global__ void fused_classifier_kernel3(floatX* logits, float* losses, const int* targets, int V, int Vp, bool write_dlogits) {
    int row = blockIdx.x;
    floatX* x = logits + (size_t)row * Vp;
    SoftmaxStat st = {-INFINITY, 0.0f};  // m: running max (natural units); s: sum of exp(x - m)
    for (int c = threadIdx.x * x128::size; c < V; c += blockDim.x * x128::size) classifier_stat_update(st, load128(x + c), min(x128::size, V - c));
    st = softmax_block_merge(st);
    int target = targets[row];
    if (threadIdx.x == 0) losses[row] = logf(st.s) + st.m - to_float(x[target]);
    if (!write_dlogits) return;
    __syncthreads();  // every thread has read x[target] before anyone overwrites the row
    float inv_sum = 1.0f / st.s, neg_m2 = -st.m * CLASSIFIER_LOG2E;
    for (int c = threadIdx.x * x128::size; c < Vp; c += blockDim.x * x128::size) store128(x + c, classifier_dlogits(load128(x + c), c, V, target, neg_m2, inv_sum));
}

// version 4: version 3 with the row staged in shared memory for pass 2 (see the top)
constexpr int CLASSIFIER4_THREADS = 1024;
static __global__ void __launch_bounds__(CLASSIFIER4_THREADS, 2) fused_classifier_kernel4(floatX* logits, float* losses, const int* targets, int V, int Vp,
                                                                                         bool write_dlogits) {
    extern __shared__ __align__(16) unsigned char classifier_smem[];
    floatX* row_s = reinterpret_cast<floatX*>(classifier_smem);  // (Vp)
    int row = blockIdx.x;
    floatX* x = logits + (size_t)row * Vp;
    SoftmaxStat st = {-INFINITY, 0.0f};
    for (int c = threadIdx.x * x128::size; c < Vp; c += blockDim.x * x128::size) {
        x128 v = load128(x + c);
        store128(row_s + c, v);
        if (c < V) classifier_stat_update(st, v, min(x128::size, V - c));  // a padded vector: kept for pass 2 only
    }
    st = softmax_block_merge(st);  // its __syncthreads also makes every thread's part of row_s visible
    int target = targets[row];
    if (threadIdx.x == 0) losses[row] = logf(st.s) + st.m - to_float(row_s[target]);
    if (!write_dlogits) return;
    float inv_sum = 1.0f / st.s, neg_m2 = -st.m * CLASSIFIER_LOG2E;
    for (int c = threadIdx.x * x128::size; c < Vp; c += blockDim.x * x128::size)
        store128(x + c, classifier_dlogits(load128(row_s + c), c, V, target, neg_m2, inv_sum));
}

// ----------------------------------------------------------------------------
// launchers

// logits (N, Vp) floatX: read, and overwritten by dlogits = softmax - onehot if write_dlogits;
// losses (N) fp32; targets (N) in [0, V)
inline void fused_classifier2(floatX* logits, float* losses, const int* targets, int N, int V, int Vp, bool write_dlogits, cudaStream_t stream) {
    KERNEL_ASSERT(Vp % x128::size == 0 && V <= Vp && V >= 1);
    fused_classifier_kernel2<<<N, 512, 0, stream>>>(logits, losses, targets, V, Vp, write_dlogits);
    cudaCheck(cudaGetLastError());
}
// Version 3's threads per row: 512, or fewer where a row of V tokens has fewer 16-byte vectors
// than that (64 tokens are 8 vectors in bf16). In pass 1 each thread then reads the one vector it
// read among 512 (a row of at most 512 vectors gives each at most one), the threads left out
// would have held the empty statistic, which softmax_merge passes through unchanged, and pass 2
// is elementwise: the bits of 512 threads (test_gpt: classifier_threads_fit_v). The left-out
// threads had no work, so a GPU should not notice (not yet timed on one; GPT-2's vocabulary keeps
// 512); the CUDA emulator (tests/emu), which runs every thread, took 0.4 s of a small test model's
// 1.2 s run in the 512-thread classifier (2026-11-30).
constexpr int CLASSIFIER3_THREADS = 512;
inline int classifier3_threads(int V) {
    int vectors = (V + x128::size - 1) / x128::size;
    if (vectors >= CLASSIFIER3_THREADS) return CLASSIFIER3_THREADS;
    return std::max(32, (vectors + 31) / 32 * 32);
}
// threads: 0 (every caller but test_gpt's check of the bits) for classifier3_threads(V)
inline void fused_classifier3(floatX* logits, float* losses, const int* targets, int N, int V, int Vp, bool write_dlogits, cudaStream_t stream,
                              int threads = 0) {
    KERNEL_ASSERT(Vp % x128::size == 0 && V <= Vp && V >= 1);
    if (threads == 0) threads = classifier3_threads(V);
    KERNEL_ASSERT(threads % 32 == 0 && threads >= classifier3_threads(V) && threads <= CLASSIFIER3_THREADS);
    fused_classifier_kernel3<<<N, threads, 0, stream>>>(logits, losses, targets, V, Vp, write_dlogits);
    cudaCheck(cudaGetLastError());
}

// Version 4 where its row fits two blocks' shared memory on an SM (113 KiB each), version 3
// elsewhere (wider vocabularies, or GPT-2's in the FP32 build).
constexpr size_t CLASSIFIER4_MAX_ROW_BYTES = 113 * 1024;
inline void fused_classifier4(floatX* logits, float* losses, const int* targets, int N, int V, int Vp, bool write_dlogits, cudaStream_t stream) {
    KERNEL_ASSERT(Vp % x128::size == 0 && V <= Vp && V >= 1);
    size_t smem = (size_t)Vp * sizeof(floatX);
    if (smem > CLASSIFIER4_MAX_ROW_BYTES) return fused_classifier3(logits, losses, targets, N, V, Vp, write_dlogits, stream);
    cudaCheck(cudaFuncSetAttribute(fused_classifier_kernel4, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    fused_classifier_kernel4<<<N, CLASSIFIER4_THREADS, smem, stream>>>(logits, losses, targets, V, Vp, write_dlogits);
    cudaCheck(cudaGetLastError());
}

// The trainer's version; VP_CLASSIFIER_VERSION=2 at build time restores version 2 (what the build
// variant classifier_v2 timed against this one), 4 picks version 4 (build variant classifier_v4).
#ifndef VP_CLASSIFIER_VERSION
#define VP_CLASSIFIER_VERSION 3
#endif
inline void fused_classifier(floatX* logits, float* losses, const int* targets, int N, int V, int Vp, bool write_dlogits, cudaStream_t stream) {
    if (VP_CLASSIFIER_VERSION == 2) fused_classifier2(logits, losses, targets, N, V, Vp, write_dlogits, stream);
    else if (VP_CLASSIFIER_VERSION == 4) fused_classifier4(logits, losses, targets, N, V, Vp, write_dlogits, stream);
    else fused_classifier3(logits, losses, targets, N, V, Vp, write_dlogits, stream);
}

}  // namespace gpu
