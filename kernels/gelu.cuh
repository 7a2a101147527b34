// kernels/gelu.cuh: GELU, tanh approximation (GPT-2 MLP).
//
//   gelu_forward   out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   PyTorch: F.gelu(x, approximate="tanh")
//   gelu_backward  dinp = gelu'(x) * dout   (overwrites dinp)
//   gelu_backward_bias  the same, and dbias += sum_rows dinp: the fc bias gradient in the same pass
//
// Elementwise, 16-byte vectors, math in fp32 with the accurate tanhf (the build has no
// --use_fast_math: the FP32 build is compared with the CPU reference to tight bounds).
//
// defines: gelu_forward, gelu_backward, gelu_backward_bias, gelu_backward_bias_partial_floats
#pragma once

#include "kernels/common.cuh"
#include "kernels/reduce.cuh"

namespace gpu {

#define GELU_SCALING_FACTOR 0.7978845608028654f  // sqrt(2/pi)

// ----------------------------------------------------------------------------
// kernels

static __global__ void gelu_forward_kernel2(floatX* out, const floatX* inp, size_t N) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= N) return;
    x128 x = load128(inp + i), o;
    for (int k = 0; k < x128::size; k++) {
        float v = to_float(x[k]);
        o[k] = from_float<floatX>(0.5f * v * (1.0f + tanhf(GELU_SCALING_FACTOR * (v + 0.044715f * v * v * v))));
    }
    store128(out + i, o);
}

__device__ __forceinline__ x128 gelu_backward_x128(const x128& x, const x128& g) {
    x128 o;
    for (int k = 0; k < x128::size; k++) {
        float v = to_float(x[k]);
        float th = tanhf(GELU_SCALING_FACTOR * (v + 0.044715f * v * v * v));
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * v * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * v * v);
        o[k] = from_float<floatX>(grad * to_float(g[k]));
    }
    return o;
}

static __global__ void gelu_backward_kernel2(floatX* dinp, const floatX* inp, const floatX* dout, size_t N) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= N) return;
    store128(dinp + i, gelu_backward_x128(load128(inp + i), load128(dout + i)));
}

// The backward with the bias gradient of the GEMM that produced inp fused in (version 3): the fc
// bias gradient is the column sum of this kernel's output, so summing it here saves the bias pass
// a full read of dinp. Grid (column chunks of 32*S, row blocks of FUSED_PARTIAL_ROWS), 8 warps:
// lane l of warp w handles columns [x*32*S + l*S, +S) of rows w, w + 8, ... of its row block and
// keeps its S column sums (of the rounded outputs, what a separate pass would read) in registers;
// the block adds its warps in order into partial[blockIdx.y][c].
static __global__ void gelu_backward_bias_kernel3(floatX* dinp, float* partial, const floatX* inp, const floatX* dout, int N, int OC) {
    constexpr int S = x128::size;
    __shared__ float warp_sums[8][32 * S];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int c = blockIdx.x * 32 * S + lane * S;
    float db[S] = {};
    if (c < OC) {
        int r1 = min(N, ((int)blockIdx.y + 1) * FUSED_PARTIAL_ROWS);
        for (int row = (int)blockIdx.y * FUSED_PARTIAL_ROWS + warp; row < r1; row += 8) {
            size_t i = (size_t)row * OC + c;
            x128 o = gelu_backward_x128(load128(inp + i), load128(dout + i));
            store128(dinp + i, o);
            for (int k = 0; k < S; k++) db[k] += to_float(o[k]);
        }
    }
    for (int k = 0; k < S; k++) warp_sums[warp][lane * S + k] = db[k];
    __syncthreads();
    int col = blockIdx.x * 32 * S + threadIdx.x;
    if (threadIdx.x < 32 * S && col < OC) {
        float t = 0.0f;
        for (int w = 0; w < 8; w++) t += warp_sums[w][threadIdx.x];
        partial[(size_t)blockIdx.y * OC + col] = t;
    }
}

// ----------------------------------------------------------------------------
// launchers

// out, inp: N elements (N a multiple of 8 for bf16, 4 for fp32)
inline void gelu_forward(floatX* out, const floatX* inp, size_t N, cudaStream_t stream) {
    const int block_size = 256;
    KERNEL_ASSERT(N % x128::size == 0);
    gelu_forward_kernel2<<<(unsigned)CEIL_DIV(N / x128::size, (size_t)block_size), block_size, 0, stream>>>(out, inp, N);
    cudaCheck(cudaGetLastError());
}

// dinp, inp, dout: N rows of OC (dense); dbias (OC, fp32) += the column sums of dinp.
// partial: gelu_backward_bias_partial_floats(N, OC) floats of scratch.
inline size_t gelu_backward_bias_partial_floats(int N, int OC) { return (size_t)fused_num_partials(N) * OC; }
inline void gelu_backward_bias(floatX* dinp, float* dbias, const floatX* inp, const floatX* dout, float* partial, int N, int OC, cudaStream_t stream) {
    KERNEL_ASSERT(N >= 1 && OC % x128::size == 0);
    dim3 grid(CEIL_DIV(OC, 32 * x128::size), fused_num_partials(N));
    gelu_backward_bias_kernel3<<<grid, 256, 0, stream>>>(dinp, partial, inp, dout, N, OC);
    cudaCheck(cudaGetLastError());
    reduce_partials(dbias, partial, fused_num_partials(N), OC, OC, stream);
}

// dinp = gelu'(inp) * dout, N elements, no bias gradient
inline void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t N, cudaStream_t stream) {
    const int block_size = 256;
    KERNEL_ASSERT(N % x128::size == 0);
    gelu_backward_kernel2<<<(unsigned)CEIL_DIV(N / x128::size, (size_t)block_size), block_size, 0, stream>>>(dinp, inp, dout, N);
    cudaCheck(cudaGetLastError());
}

}  // namespace gpu
