// kernels/swiglu.cuh: SwiGLU (Llama MLP). Each row of the input is [gate (F) | up (F)].
//
//   swiglu_forward   out = silu(gate) * up = gate * sigmoid(gate) * up     PyTorch: F.silu(x @ w1.T) * (x @ w3.T)
//   swiglu_backward  dgate = dout * up * s * (1 + gate (1 - s)), dup = dout * gate * s, s = sigmoid(gate)
//                    (overwrites dinp)
//
// defines: swiglu_forward, swiglu_backward
#pragma once

#include "kernels/common.cuh"

namespace gpu {

// ----------------------------------------------------------------------------
// kernels

// one thread per 16-byte vector of the output (N rows x F)
static __global__ void swiglu_forward_kernel1(floatX* out, const floatX* inp, int N, int F) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (idx >= (size_t)N * F) return;
    size_t i = idx / F, f = idx % F;
    x128 gate = load128(inp + i * 2 * F + f), up = load128(inp + i * 2 * F + F + f), o;
    for (int k = 0; k < x128::size; k++) {
        float x = to_float(gate[k]);
        float sig = 1.0f / (1.0f + expf(-x));
        o[k] = from_float<floatX>(x * sig * to_float(up[k]));
    }
    store128(out + idx, o);
}

static __global__ void swiglu_backward_kernel1(floatX* dinp, const floatX* inp, const floatX* dout, int N, int F) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (idx >= (size_t)N * F) return;
    size_t i = idx / F, f = idx % F;
    x128 gate = load128(inp + i * 2 * F + f), up = load128(inp + i * 2 * F + F + f), dy = load128(dout + idx), dg, du;
    for (int k = 0; k < x128::size; k++) {
        float x = to_float(gate[k]), u = to_float(up[k]), g = to_float(dy[k]);
        float sig = 1.0f / (1.0f + expf(-x));
        dg[k] = from_float<floatX>(g * u * sig * (1.0f + x * (1.0f - sig)));
        du[k] = from_float<floatX>(g * x * sig);
    }
    store128(dinp + i * 2 * F + f, dg);
    store128(dinp + i * 2 * F + F + f, du);
}

// ----------------------------------------------------------------------------
// launchers

// out (N,F); inp (N,2F)
inline void swiglu_forward(floatX* out, const floatX* inp, int N, int F, cudaStream_t stream) {
    const int block_size = 256;
    KERNEL_ASSERT(F % x128::size == 0);
    size_t n = (size_t)N * F / x128::size;
    swiglu_forward_kernel1<<<(unsigned)CEIL_DIV(n, (size_t)block_size), block_size, 0, stream>>>(out, inp, N, F);
    cudaCheck(cudaGetLastError());
}

// dinp (N,2F) overwritten; inp (N,2F); dout (N,F)
inline void swiglu_backward(floatX* dinp, const floatX* inp, const floatX* dout, int N, int F, cudaStream_t stream) {
    const int block_size = 256;
    KERNEL_ASSERT(F % x128::size == 0);
    size_t n = (size_t)N * F / x128::size;
    swiglu_backward_kernel1<<<(unsigned)CEIL_DIV(n, (size_t)block_size), block_size, 0, stream>>>(dinp, inp, dout, N, F);
    cudaCheck(cudaGetLastError());
}

}  // namespace gpu
