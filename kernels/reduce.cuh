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
// defines: PARTIAL_ROWS, num_partials, reduce_partials, sum_into_scalar, column_partials_finish (device helper)
#pragma once

#include "kernels/common.cuh"

namespace gpu {

constexpr int PARTIAL_ROWS = 256;  // rows per stage-1 block: 256 rows x 32 columns, 8 rows in flight per column
inline int num_partials(int N) { return CEIL_DIV(N, PARTIAL_ROWS); }

// ----------------------------------------------------------------------------
// kernels

// Stage-1 helper for blocks of (32, 8) threads: each thread holds the sum of its rows for column
// c = blockIdx.x*32 + threadIdx.x; this adds the 8 row-lanes in order and writes partial[y][c].
// `stride` is the row length of partial (several sums may share one partial buffer side by side).
// Safe to call several times in a row (it synchronises first).
__device__ __forceinline__ void column_partials_finish(float* partial, float acc, int c, int ncols, int stride) {
    __shared__ float s[8][33];
    __syncthreads();
    s[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0) {
        float t = 0.0f;
        for (int k = 0; k < 8; k++) t += s[k][threadIdx.x];
        if (c < ncols) partial[(size_t)blockIdx.y * stride + c] = t;
    }
}

static __global__ void reduce_partials_kernel(float* dst, const float* partial, int R, int ncols, int stride) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= ncols) return;
    float t = 0.0f;
    for (int r = 0; r < R; r++) t += partial[(size_t)r * stride + c];
    dst[c] += t;
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
    const int block_size = 256;
    KERNEL_ASSERT(R >= 1 && ncols >= 1 && stride >= ncols);
    reduce_partials_kernel<<<CEIL_DIV(ncols, block_size), block_size, 0, stream>>>(dst, partial, R, ncols, stride);
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
