// kernels/reduce.cuh: deterministic sums over rows, for parameter gradients (biases, norm gains).
//
// A parameter gradient such as dbias[c] = sum_i dout[i, c] sums over all B*T rows. Atomics would
// make the order (and so the rounding) depend on timing, and --resume must be bit-exact, so every
// such sum runs in two fixed-order stages:
//   stage 1 (op-specific kernel): block y sums rows [y*PARTIAL_ROWS, (y+1)*PARTIAL_ROWS) of its
//            32 columns, in a fixed order, into partial[y][c]  (fp32)
//   stage 2 (reduce_partials):    dst[c] += sum over y = 0, 1, ... of partial[y][c], in order
// The grid depends only on the shape, never on the GPU, so the result is the same on every run
// and every device. The partial buffer is model scratch of num_partials(BT) x (widest row) floats.
//
// Kernels that already read every row for another reason (the norms' backward, GELU's backward)
// fuse stage 1 into that pass instead of reading the rows again: each of their blocks owns
// FUSED_PARTIAL_ROWS rows (fewer than PARTIAL_ROWS, so the row pass still has enough blocks to
// fill the GPU) and writes one partial row; fused_num_partials(BT) x (its row) floats of scratch.
//
// Stage 2 sums R partials per column with 32 row-lanes per column (each lane R/32 rows in order,
// then the 32 lane sums in order): R sequential loads per thread would leave it latency-bound.
//
// defines: PARTIAL_ROWS, num_partials, FUSED_PARTIAL_ROWS, fused_num_partials, reduce_partials,
//          sum_into_scalar, column_partials_finish (device helper)
#pragma once

#include <algorithm>

#include "kernels/common.cuh"

namespace gpu {

constexpr int PARTIAL_ROWS = 256;  // rows per stage-1 block: 256 rows x 32 columns, 8 rows in flight per column
inline int num_partials(int N) { return CEIL_DIV(N, PARTIAL_ROWS); }
constexpr int FUSED_PARTIAL_ROWS = 64;  // rows per block of a row pass with fused column sums
inline int fused_num_partials(int N) { return CEIL_DIV(N, FUSED_PARTIAL_ROWS); }

// ----------------------------------------------------------------------------
// kernels

// Stage-1 helper for blocks of (32, 8) threads whose block covers 32 K columns from c0: each
// thread holds the sums of its rows for the K adjacent columns c0 + threadIdx.x*K + k; this adds
// the 8 row-lanes of each column in order and writes partial[y][c] (column c0 + t by thread
// t = threadIdx.y*32 + threadIdx.x). `stride` is the row length of partial (several sums may share
// one partial buffer side by side). Safe to call several times in a row (it synchronises first).
template <int K>
__device__ __forceinline__ void column_partials_finish(float* partial, const float (&acc)[K], int c0, int ncols, int stride) {
    __shared__ float s[8][32 * K + 1];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < K; k++) s[threadIdx.y][threadIdx.x * K + k] = acc[k];
    __syncthreads();
    int t = threadIdx.y * 32 + threadIdx.x, c = c0 + t;
    if (t < 32 * K) {
        float sum = 0.0f;
        for (int k = 0; k < 8; k++) sum += s[k][t];
        if (c < ncols) partial[(size_t)blockIdx.y * stride + c] = sum;
    }
}
// One column per thread: c = blockIdx.x*32 + threadIdx.x.
__device__ __forceinline__ void column_partials_finish(float* partial, float acc, int c, int ncols, int stride) {
    const float one[1] = {acc};
    column_partials_finish<1>(partial, one, c - (int)threadIdx.x, ncols, stride);
}

// Fused stage 1 for one-warp-per-row kernels. A lane owns the x128 chunks c = j*32*S + lane*S
// (S = x128::size, j = 0, 1, ...) of every row it handles, so it can sum its columns over its rows
// without talking to other lanes. Each warp keeps NACC such column sums (for example LayerNorm's
// dweight and dbias) in its own slice of shared memory, of NACC * fused_padded_cols(C) floats; the
// element k of chunk j of a lane sits at ((j*S/4 + k/4)*32 + lane)*4 + k%4, so the warp's float4
// accesses are consecutive (no bank conflicts). At the end the block adds its warps' slices in
// warp order and writes one partial row per block: partial[blockIdx.x][a*C + c] for sum a.
__host__ __device__ inline int fused_padded_cols(int C) { return CEIL_DIV(C, 32 * x128::size) * 32 * x128::size; }
__device__ __forceinline__ int fused_slot(int c) {
    constexpr int S = x128::size;
    int j = c / (32 * S), lane = (c / S) % 32, k = c % S;
    return ((j * (S / 4) + k / 4) * 32 + lane) * 4 + k % 4;
}
// acc[slot of chunk c0 .. c0+S) += v[0 .. S)  (c0 = j*32*S + lane*S, the calling lane's chunk)
__device__ __forceinline__ void fused_accumulate(float* acc, int c0, const float (&v)[x128::size]) {
    constexpr int S = x128::size;
    for (int q = 0; q < S / 4; q++) {
        float4* p = reinterpret_cast<float4*>(acc + fused_slot(c0 + 4 * q));
        float4 a = *p;
        a.x += v[4 * q];
        a.y += v[4 * q + 1];
        a.z += v[4 * q + 2];
        a.w += v[4 * q + 3];
        *p = a;
    }
}
__device__ __forceinline__ void fused_zero(float* acc, int c0) {
    for (int q = 0; q < x128::size / 4; q++) *reinterpret_cast<float4*>(acc + fused_slot(c0 + 4 * q)) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}
// After the row pass (every warp done with its slice): partial[blockIdx.x*(nacc*C) + a*C + c] =
// sum over warps w in order of slice w's sum a at column c. acc_all: the block's slices, nacc*Cp each.
__device__ inline void fused_partials_finish(float* partial, const float* acc_all, int nacc, int C) {
    int Cp = fused_padded_cols(C), warps = blockDim.x / 32;
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        int slot = fused_slot(c);
        for (int a = 0; a < nacc; a++) {
            float t = 0.0f;
            for (int w = 0; w < warps; w++) t += acc_all[(size_t)w * nacc * Cp + a * Cp + slot];
            partial[(size_t)blockIdx.x * nacc * C + a * C + c] = t;
        }
    }
}
// warps per block of a fused row pass: up to 8, fewer when NACC column sums of C columns per warp
// would need more than 64 KB of shared memory (a function of the shape only, like the grid)
inline int fused_block_warps(int nacc, int C) {
    size_t per_warp = (size_t)nacc * fused_padded_cols(C) * sizeof(float);
    return (int)std::max<size_t>(1, std::min<size_t>(8, (64 << 10) / per_warp));
}
// The block of a fused row pass `kernel` with nacc column sums of C columns: returns its warps
// and sets *smem to its dynamic shared memory (the warps' slices), opting the kernel in to more
// than the default 48 KB where the slices need it.
template <typename Kernel>
inline int fused_block_setup(Kernel kernel, int nacc, int C, size_t* smem) {
    int warps = fused_block_warps(nacc, C);
    *smem = (size_t)warps * nacc * fused_padded_cols(C) * sizeof(float);
    if (*smem > (48 << 10)) cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)*smem));
    return warps;
}

// block (32, 32): column c = blockIdx.x*32 + threadIdx.x; row-lane y sums partial rows y, y+32, ...
// in order, then row-lane 0 adds the 32 lane sums in order (a fixed tree for a given R).

static __global__ void reduce_partials_kernel2(float* dst, const float* partial, int R, int ncols, int stride) {
    __shared__ float lane_sums[32][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float t = 0.0f;
    if (c < ncols)
        for (int r = threadIdx.y; r < R; r += 32) t += partial[(size_t)r * stride + c];
    lane_sums[threadIdx.y][threadIdx.x] = t;
    __syncthreads();
    if (threadIdx.y == 0 && c < ncols) {
        float total = 0.0f;
        for (int y = 0; y < 32; y++) total += lane_sums[y][threadIdx.x];
        dst[c] += total;
    }
}

// One block: thread t sums x[t], x[t + 1024], ... in order, then the block's fixed tree.
static __global__ void sum_into_scalar_kernel(float* dst, const float* x, int n) {
    float t = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) t += x[i];
    t = block_sum(t);
    if (threadIdx.x == 0) *dst += t;
}

// ----------------------------------------------------------------------------
// launchers

// dst[c] += sum_{r < R} partial[r*stride + c], for c < ncols (dst: fp32 gradient, accumulated)
inline void reduce_partials(float* dst, const float* partial, int R, int ncols, int stride, cudaStream_t stream) {
    KERNEL_ASSERT(R >= 1 && ncols >= 1 && stride >= ncols);
    reduce_partials_kernel2<<<CEIL_DIV(ncols, 32), dim3(32, 32), 0, stream>>>(dst, partial, R, ncols, stride);
    cudaCheck(cudaGetLastError());
}

// *dst += sum of x[0..n) (one scalar gradient from per-block partials, e.g. ResFormer's dlambda_l),
// deterministic: the order depends only on n.
inline void sum_into_scalar(float* dst, const float* x, int n, cudaStream_t stream) {
    KERNEL_ASSERT(n >= 1);
    sum_into_scalar_kernel<<<1, 1024, 0, stream>>>(dst, x, n);
    cudaCheck(cudaGetLastError());
}

}  // namespace gpu
