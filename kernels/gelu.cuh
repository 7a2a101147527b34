// kernels/gelu.cuh: GELU, tanh approximation (GPT-2 MLP).
//
//   gelu_forward   out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   PyTorch: F.gelu(x, approximate="tanh")
//   gelu_backward  dinp = gelu'(x) * dout   (overwrites dinp)
//
// Elementwise, 16-byte vectors, math in fp32 with the accurate tanhf (the build has no
// --use_fast_math: the FP32 build is compared with the CPU reference to tight bounds).
//
// defines: gelu_forward, gelu_backward
#pragma once

#include "kernels/common.cuh"

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

static __global__ void gelu_backward_kernel2(floatX* dinp, const floatX* inp, const floatX* dout, size_t N) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= N) return;
    x128 x = load128(inp + i), g = load128(dout + i), o;
    for (int k = 0; k < x128::size; k++) {
        float v = to_float(x[k]);
        float th = tanhf(GELU_SCALING_FACTOR * (v + 0.044715f * v * v * v));
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * v * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * v * v);
        o[k] = from_float<floatX>(grad * to_float(g[k]));
    }
    store128(dinp + i, o);
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

inline void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t N, cudaStream_t stream) {
    const int block_size = 256;
    KERNEL_ASSERT(N % x128::size == 0);
    gelu_backward_kernel2<<<(unsigned)CEIL_DIV(N / x128::size, (size_t)block_size), block_size, 0, stream>>>(dinp, inp, dout, N);
    cudaCheck(cudaGetLastError());
}

}  // namespace gpu
