// kernels/global_norm.cuh: the global L2 norm of all gradients (for clipping and the log).
//
//   global_norm_squared   out = sum_i grads[i]^2, in double
//
// Deterministic by construction: a FIXED grid of GLOBAL_NORM_BLOCKS blocks (never derived from the
// SM count, so every GPU gives the same bits) strides over the gradients, each thread summing in
// double in index order; each block reduces its threads in a fixed tree into partial[block]; one
// block then sums the partials in a fixed tree. No atomics.
//
// defines: global_norm_squared, GLOBAL_NORM_BLOCKS
#pragma once

#include "kernels/common.cuh"

namespace gpu {

constexpr int GLOBAL_NORM_BLOCKS = 1024;

// ----------------------------------------------------------------------------
// kernels

static __global__ void global_norm_kernel1(double* partial, const float* grads, size_t n) {
    double acc = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) acc += (double)grads[i] * grads[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

static __global__ void global_norm_finish_kernel1(double* out, const double* partial, int n) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) *out = acc;
}

// ----------------------------------------------------------------------------
// launchers

// out: one device double; partial: GLOBAL_NORM_BLOCKS doubles of scratch
inline void global_norm_squared(double* out, double* partial, const float* grads, size_t n, cudaStream_t stream) {
    const int block_size = 512;
    global_norm_kernel1<<<GLOBAL_NORM_BLOCKS, block_size, 0, stream>>>(partial, grads, n);
    cudaCheck(cudaGetLastError());
    global_norm_finish_kernel1<<<1, 1024, 0, stream>>>(out, partial, GLOBAL_NORM_BLOCKS);
    cudaCheck(cudaGetLastError());
}

}  // namespace gpu
