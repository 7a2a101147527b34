// kernels/rmsnorm.cuh: RMSNorm over the channel dim, with gain (Llama).
//
//   rmsnorm_forward   out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps); caches rstd (fp32)
//                     PyTorch: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
//   rmsnorm_backward  dinp += rstd * w * dout - x * rstd^3 * <w * dout, x> / C;  dw += sum_rows dout * x * rstd
//
// One warp per row, fp32 statistics, 16-byte loads; dw by the fixed-order two-stage reduction of
// kernels/reduce.cuh, its first stage fused into the backward's row pass (dout and inp read once).
// Versions and timings: dev/cuda/rmsnorm.cu.
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

// One warp's share of the backward for one row: dinp[row] += the RMSNorm VJP. FUSED: each lane
// also adds dout * x * rstd of its columns into acc_dw (its warp's slice, see fused_accumulate in
// kernels/reduce.cuh).
template <bool FUSED>
__device__ __forceinline__ void rmsnorm_backward_row(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* weight, float s, int row, int C,
                                                     int lane, float* acc_dw) {
    const floatX* dy = dout + (size_t)row * C;
    const floatX* x = inp + (size_t)row * C;
    float dot = 0.0f;
    for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
        x128 g = load128(dy + c), v = load128(x + c), w = load128(weight + c);
        for (int k = 0; k < x128::size; k++) dot += to_float(w[k]) * to_float(g[k]) * to_float(v[k]);
    }
    float kx = s * s * s * warp_sum(dot) / C;
    floatX* dx = dinp + (size_t)row * C;
    for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
        x128 g = load128(dy + c), v = load128(x + c), w = load128(weight + c), d = load128(dx + c);
        float dw[x128::size];
        for (int k = 0; k < x128::size; k++) {
            d[k] = from_float<floatX>(to_float(d[k]) + s * to_float(w[k]) * to_float(g[k]) - kx * to_float(v[k]));
            dw[k] = to_float(g[k]) * to_float(v[k]) * s;
        }
        store128(dx + c, d);
        if (FUSED) fused_accumulate(acc_dw, c, dw);
    }
}

// version 2: one warp per row for dinp; dw is a second pass (kernel1 below)
static __global__ void rmsnorm_backward_kernel2(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* weight, const float* rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    rmsnorm_backward_row<false>(dinp, dout, inp, weight, rstd[row], row, C, lane, nullptr);
}

// dinp and the dw sums in one pass (version 3): block b owns rows [b*64, b*64 + 64), warp w takes
// rows w, w + warps, ... (one warp per row as kernel2) and adds dout * x * rstd of its lanes'
// columns into its slice of shared memory (warps x fused_padded_cols(C) floats); the block then
// writes partial[b] = dw (C).
static __global__ void rmsnorm_backward_kernel3(floatX* dinp, float* partial, const floatX* dout, const floatX* inp, const floatX* weight, const float* rstd,
                                                int N, int C) {
    extern __shared__ __align__(16) float fused_acc[];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    float* acc_dw = fused_acc + (size_t)warp * fused_padded_cols(C);
    for (int c = lane * x128::size; c < C; c += 32 * x128::size) fused_zero(acc_dw, c);
    int r1 = min(N, ((int)blockIdx.x + 1) * FUSED_PARTIAL_ROWS);
    for (int row = (int)blockIdx.x * FUSED_PARTIAL_ROWS + warp; row < r1; row += warps)
        rmsnorm_backward_row<true>(dinp, dout, inp, weight, rstd[row], row, C, lane, acc_dw);
    fused_partials_finish(partial, fused_acc, 1, C);
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

// scratch floats rmsnorm_backward needs in `partial` (the larger of versions 2 and 3)
inline size_t rmsnorm_backward_partial_floats(int N, int C) { return (size_t)std::max(num_partials(N), fused_num_partials(N)) * C; }

// dinp (N,C) floatX, accumulated; dweight (C) fp32, accumulated; partial: rmsnorm_backward_partial_floats(N, C).
// version 3 (the trainer's): dinp and the dw sums in one pass; version 2: a row pass, then a
// column pass reading dout and inp again (kept for the lab's comparison).
inline void rmsnorm_backward(floatX* dinp, float* dweight, const floatX* dout, const floatX* inp, const floatX* weight, const float* rstd, float* partial, int N,
                             int C, cudaStream_t stream, int version = 3) {
    KERNEL_ASSERT(C % x128::size == 0 && N >= 1 && (version == 2 || version == 3));
    if (version == 3) {
        size_t smem;
        int warps = fused_block_setup(rmsnorm_backward_kernel3, 1, C, &smem);
        rmsnorm_backward_kernel3<<<fused_num_partials(N), warps * 32, smem, stream>>>(dinp, partial, dout, inp, weight, rstd, N, C);
        cudaCheck(cudaGetLastError());
        reduce_partials(dweight, partial, fused_num_partials(N), C, C, stream);
        return;
    }
    const int block_size = 256;
    rmsnorm_backward_kernel2<<<CEIL_DIV(N, block_size / 32), block_size, 0, stream>>>(dinp, dout, inp, weight, rstd, N, C);
    cudaCheck(cudaGetLastError());
    rmsnorm_param_backward_kernel1<<<dim3(CEIL_DIV(C, 32), num_partials(N)), dim3(32, 8), 0, stream>>>(partial, dout, inp, rstd, N, C);
    cudaCheck(cudaGetLastError());
    reduce_partials(dweight, partial, num_partials(N), C, C, stream);
}

}  // namespace gpu
