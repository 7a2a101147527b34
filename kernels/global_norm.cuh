// kernels/global_norm.cuh: the global L2 norm of all gradients (for clipping and the log).
//
//   global_norm_squared   out = sum_i grads[i]^2, in double
//
// Deterministic by construction: a grid of GLOBAL_NORM_BLOCKS blocks (never derived from the SM
// count, so every GPU gives the same bits) strides over the gradients, each thread summing in
// double in index order; each block reduces its threads in a fixed tree into partial[block]; one
// block then sums the partials in a fixed tree. No atomics.
// Fewer blocks where n fills fewer than GLOBAL_NORM_BLOCKS x 512 threads: the blocks left out
// would hold no element and write a partial of exactly +0.0, and the finish's tree adds each
// partial at the same place whatever their number (the missing ones read as 0.0; squares are
// never -0.0), so the bits are the full grid's (test_gpt: global_norm_grid_fits_n). The left-out
// blocks had no work, so a GPU should not notice (not yet timed on one); the CUDA emulator
// (tests/emu), which runs every thread, is spared 4 million empty threads per step of a small test
// model (0.6 of its 0.74 s, 2026-11-30).
//
// defines: global_norm_squared, global_norm_blocks, GLOBAL_NORM_BLOCKS
#pragma once

#include <algorithm>

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

constexpr int GLOBAL_NORM_BLOCK_SIZE = 512;

// the blocks of global_norm_kernel1 for n elements: one per 512 elements, GLOBAL_NORM_BLOCKS at most
inline int global_norm_blocks(size_t n) {
    size_t filled = (n + GLOBAL_NORM_BLOCK_SIZE - 1) / GLOBAL_NORM_BLOCK_SIZE;
    return (int)std::max<size_t>(1, std::min<size_t>(GLOBAL_NORM_BLOCKS, filled));
}

// out: one device double; partial: GLOBAL_NORM_BLOCKS doubles of scratch (global_norm_blocks(n) used).
// blocks: the grid; 0 (every caller but test_gpt's check of the bits) for global_norm_blocks(n).
inline void global_norm_squared(double* out, double* partial, const float* grads, size_t n, cudaStream_t stream, int blocks = 0) {
    if (blocks == 0) blocks = global_norm_blocks(n);
    KERNEL_ASSERT(blocks >= 1 && blocks <= GLOBAL_NORM_BLOCKS);
    global_norm_kernel1<<<blocks, GLOBAL_NORM_BLOCK_SIZE, 0, stream>>>(partial, grads, n);
    cudaCheck(cudaGetLastError());
    // 1024 threads, each adding at most one partial: thread t's is partial t's, whatever the grid
    static_assert(GLOBAL_NORM_BLOCKS <= 1024, "the finish kernel's one block adds one partial per thread");
    global_norm_finish_kernel1<<<1, 1024, 0, stream>>>(out, partial, blocks);
    cudaCheck(cudaGetLastError());
}

}  // namespace gpu
