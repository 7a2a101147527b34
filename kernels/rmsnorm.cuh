// kernels/rmsnorm.cuh: RMSNorm over the channel dim, with gain (Llama).
//
//   rmsnorm_forward   out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps); caches rstd (fp32)
//                     PyTorch: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
//   rmsnorm_backward  dinp += rstd * w * dout - x * rstd^3 * <w * dout, x> / C;  dw += sum_rows dout * x * rstd
//
// One warp per row, fp32 statistics, 16-byte loads; dw by the fixed-order two-stage reduction of
// kernels/reduce.cuh. Versions and timings: dev/cuda/rmsnorm.cu.
//
// defines: rmsnorm_forward, rmsnorm_backward
#pragma once

#include "kernels/common.cuh"
#include "kernels/reduce.cuh"

namespace gpu {

// ----------------------------------------------------------------------------
// kernels

static __global__ void rmsnorm_forward_kernel2(floatX* out, float* rstd, const floatX* inp, const floatX* weight, int N, int C, float eps) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const floatX* x = inp + (size_t)row * C;
    float ss = 0.0f;
    for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
        x128 v = load128(x + c);
        for (int k = 0; k < x128::size; k++) ss += to_float(v[k]) * to_float(v[k]);
    }
    float s = 1.0f / sqrtf(warp_sum(ss) / C + eps);
    floatX* o = out + (size_t)row * C;
    for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
        x128 v = load128(x + c), w = load128(weight + c), r;
        for (int k = 0; k < x128::size; k++) r[k] = from_float<floatX>(to_float(v[k]) * s * to_float(w[k]));
        store128(o + c, r);
    }
    if (lane == 0) rstd[row] = s;
}

static __global__ void rmsnorm_backward_kernel2(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* weight, const float* rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const floatX* dy = dout + (size_t)row * C;
    const floatX* x = inp + (size_t)row * C;
    float s = rstd[row], dot = 0.0f;
    for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
        x128 g = load128(dy + c), v = load128(x + c), w = load128(weight + c);
        for (int k = 0; k < x128::size; k++) dot += to_float(w[k]) * to_float(g[k]) * to_float(v[k]);
    }
    float kx = s * s * s * warp_sum(dot) / C;
    floatX* dx = dinp + (size_t)row * C;
    for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
        x128 g = load128(dy + c), v = load128(x + c), w = load128(weight + c), d = load128(dx + c);
        for (int k = 0; k < x128::size; k++) d[k] = from_float<floatX>(to_float(d[k]) + s * to_float(w[k]) * to_float(g[k]) - kx * to_float(v[k]));
        store128(dx + c, d);
    }
}

// stage 1 of dw[c] = sum_rows dout * x * rstd
static __global__ void rmsnorm_param_backward_kernel1(float* partial, const floatX* dout, const floatX* inp, const float* rstd, int N, int C) {
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * PARTIAL_ROWS, r1 = min(N, r0 + PARTIAL_ROWS);
    float dw = 0.0f;
    if (c < C)
        for (int r = r0 + threadIdx.y; r < r1; r += 8) dw += to_float(dout[(size_t)r * C + c]) * to_float(inp[(size_t)r * C + c]) * rstd[r];
    column_partials_finish(partial, dw, c, C, C);
}

// ----------------------------------------------------------------------------
// launchers

// out, inp (N,C) floatX; rstd (N) fp32; weight (C)
inline void rmsnorm_forward(floatX* out, float* rstd, const floatX* inp, const floatX* weight, int N, int C, float eps, cudaStream_t stream) {
    const int block_size = 256;  // 8 rows per block
    KERNEL_ASSERT(C % x128::size == 0);
    rmsnorm_forward_kernel2<<<CEIL_DIV(N, block_size / 32), block_size, 0, stream>>>(out, rstd, inp, weight, N, C, eps);
    cudaCheck(cudaGetLastError());
}

// dinp (N,C) floatX, accumulated; dweight (C) fp32, accumulated; partial: num_partials(N) * C floats
inline void rmsnorm_backward(floatX* dinp, float* dweight, const floatX* dout, const floatX* inp, const floatX* weight, const float* rstd, float* partial, int N,
                             int C, cudaStream_t stream) {
    const int block_size = 256;
    KERNEL_ASSERT(C % x128::size == 0);
    rmsnorm_backward_kernel2<<<CEIL_DIV(N, block_size / 32), block_size, 0, stream>>>(dinp, dout, inp, weight, rstd, N, C);
    cudaCheck(cudaGetLastError());
    rmsnorm_param_backward_kernel1<<<dim3(CEIL_DIV(C, 32), num_partials(N)), dim3(32, 8), 0, stream>>>(partial, dout, inp, rstd, N, C);
    cudaCheck(cudaGetLastError());
    reduce_partials(dweight, partial, num_partials(N), C, C, stream);
}

}  // namespace gpu
