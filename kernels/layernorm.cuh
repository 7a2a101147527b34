// kernels/layernorm.cuh: LayerNorm over the channel dim, with gain and bias (GPT-2).
//
//   layernorm_forward   out = (x - mean) * rstd * w + b; caches mean, rstd (fp32) per row
//                       PyTorch: F.layer_norm(x, (C,), w, b, eps)
//   layernorm_backward  dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)),
//                       dnorm = w * dout, norm = (x - mean) * rstd;  dw += sum_rows dout * norm;
//                       db += sum_rows dout; optionally dinp_colsum += sum_rows dinp (the bias
//                       gradient of the linear layer whose output gradient dinp is)
//
// One warp per row; statistics in fp32 from floatX inputs, two passes (mean, then variance of the
// centred values, as the CPU reference), 16-byte loads. The parameter gradients are sums over all
// rows, done by the fixed-order two-stage reduction of kernels/reduce.cuh (deterministic), its
// first stage fused into the backward's row pass so dout and inp are read once, not twice.
// Versions and timings: dev/cuda/layernorm.cu.
//
// defines: layernorm_forward, layernorm_backward
#pragma once

#include "kernels/common.cuh"
#include "kernels/reduce.cuh"

namespace gpu {

// ----------------------------------------------------------------------------
// kernels

// one warp per row; lane handles 16-byte chunks lane, lane+32, ...
static __global__ void layernorm_forward_kernel2(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight, const floatX* bias, int N,
                                                 int C, float eps) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const floatX* x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
        x128 v = load128(x + c);
        for (int k = 0; k < x128::size; k++) sum += to_float(v[k]);
    }
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
        x128 v = load128(x + c);
        for (int k = 0; k < x128::size; k++) {
            float d = to_float(v[k]) - m;
            var += d * d;
        }
    }
    float s = 1.0f / sqrtf(warp_sum(var) / C + eps);
    floatX* o = out + (size_t)row * C;
    for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
        x128 v = load128(x + c), w = load128(weight + c), b = load128(bias + c), r;
        for (int k = 0; k < x128::size; k++) r[k] = from_float<floatX>((to_float(v[k]) - m) * s * to_float(w[k]) + to_float(b[k]));
        store128(o + c, r);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// One warp's share of the backward for one row: dinp[row] += the LayerNorm VJP. FUSED: each lane
// also adds dout*norm and dout of its columns into acc_dw, acc_db (its warp's slices, see
// fused_accumulate in kernels/reduce.cuh), and, if acc_dinp is not NULL, the updated dinp
// (rounded, as stored) into acc_dinp.
template <bool FUSED>
__device__ __forceinline__ void layernorm_backward_row(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* weight, float m, float s, int row,
                                                       int C, int lane, float* acc_dw, float* acc_db, float* acc_dinp) {
    const floatX* dy = dout + (size_t)row * C;
    const floatX* x = inp + (size_t)row * C;
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
        x128 g = load128(dy + c), v = load128(x + c), w = load128(weight + c);
        for (int k = 0; k < x128::size; k++) {
            float norm = (to_float(v[k]) - m) * s, dnorm = to_float(w[k]) * to_float(g[k]);
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
    }
    dnorm_mean = warp_sum(dnorm_mean) / C;
    dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
    floatX* dx = dinp + (size_t)row * C;
    for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
        x128 g = load128(dy + c), v = load128(x + c), w = load128(weight + c), d = load128(dx + c);
        float dw[x128::size], db[x128::size], dd[x128::size];
        for (int k = 0; k < x128::size; k++) {
            float norm = (to_float(v[k]) - m) * s, dnorm = to_float(w[k]) * to_float(g[k]);
            d[k] = from_float<floatX>(to_float(d[k]) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s);
            dw[k] = to_float(g[k]) * norm;
            db[k] = to_float(g[k]);
            dd[k] = to_float(d[k]);
        }
        store128(dx + c, d);
        if (FUSED) {
            fused_accumulate(acc_dw, c, dw);
            fused_accumulate(acc_db, c, db);
            if (acc_dinp) fused_accumulate(acc_dinp, c, dd);
        }
    }
}

// dinp part (version 2): one warp per row; the parameter sums are a second pass (kernel1 below)
static __global__ void layernorm_backward_kernel2(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* weight, const float* mean,
                                                  const float* rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    layernorm_backward_row<false>(dinp, dout, inp, weight, mean[row], rstd[row], row, C, lane, nullptr, nullptr, nullptr);
}

// dinp and the parameter sums in one pass (version 3): block b owns rows [b*64, b*64 + 64), its
// warps take them in turn (warp w: rows w, w + warps, ...), one warp per row as kernel2; each lane
// also adds dout*norm and dout (and with nacc = 3 the updated dinp) of its columns into its warp's
// slice of shared memory (dynamic: warps x nacc x fused_padded_cols(C) floats); the block then
// writes partial[b] = [dw (C) | db (C) (| dinp column sums (C))].
static __global__ void layernorm_backward_kernel3(floatX* dinp, float* partial, const floatX* dout, const floatX* inp, const floatX* weight,
                                                  const float* mean, const float* rstd, int N, int C, int nacc) {
    extern __shared__ __align__(16) float fused_acc[];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32, Cp = fused_padded_cols(C);
    float* acc_dw = fused_acc + (size_t)warp * nacc * Cp;
    float* acc_db = acc_dw + Cp;
    float* acc_dinp = nacc == 3 ? acc_db + Cp : nullptr;
    for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
        fused_zero(acc_dw, c);
        fused_zero(acc_db, c);
        if (acc_dinp) fused_zero(acc_dinp, c);
    }
    int r1 = min(N, ((int)blockIdx.x + 1) * FUSED_PARTIAL_ROWS);
    for (int row = (int)blockIdx.x * FUSED_PARTIAL_ROWS + warp; row < r1; row += warps)
        layernorm_backward_row<true>(dinp, dout, inp, weight, mean[row], rstd[row], row, C, lane, acc_dw, acc_db, acc_dinp);
    fused_partials_finish(partial, fused_acc, nacc, C);
}

// parameter part, stage 1: block (32, 8) over PARTIAL_ROWS rows x 32 channels;
// partial row y = [sum dout*norm (C) | sum dout (C)]
static __global__ void layernorm_param_backward_kernel1(float* partial, const floatX* dout, const floatX* inp, const float* mean, const float* rstd, int N,
                                                        int C) {
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * PARTIAL_ROWS, r1 = min(N, r0 + PARTIAL_ROWS);
    float dw = 0.0f, db = 0.0f;
    if (c < C)
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {
            float dy = to_float(dout[(size_t)r * C + c]);
            dw += dy * (to_float(inp[(size_t)r * C + c]) - mean[r]) * rstd[r];
            db += dy;
        }
    column_partials_finish(partial, dw, c, C, 2 * C);
    column_partials_finish(partial + C, db, c, C, 2 * C);
}

// ----------------------------------------------------------------------------
// launchers

// out, inp (N,C) floatX; mean, rstd (N) fp32; weight, bias (C)
inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight, const floatX* bias, int N, int C, float eps,
                              cudaStream_t stream) {
    const int block_size = 256;  // 8 rows per block
    KERNEL_ASSERT(C % x128::size == 0);
    layernorm_forward_kernel2<<<CEIL_DIV(N, block_size / 32), block_size, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C, eps);
    cudaCheck(cudaGetLastError());
}

// scratch floats layernorm_backward needs in `partial` (the larger of versions 2 and 3)
inline size_t layernorm_backward_partial_floats(int N, int C) { return std::max((size_t)num_partials(N) * 2, (size_t)fused_num_partials(N) * 3) * C; }

// dinp (N,C) floatX, accumulated (+=); dweight, dbias (C) fp32, accumulated;
// dinp_colsum (C) fp32 or NULL, accumulated: += the column sums of dinp after the update. In the
// residual stream dinp is the output gradient of the linear layer that wrote the residual before
// this norm (GPT-2's attproj and fcproj), so these sums are that layer's bias gradient, got here
// without another pass over dinp (version 3 only).
// partial: layernorm_backward_partial_floats(N, C) floats of scratch.
// version 3 (the trainer's): one pass for dinp and the parameter sums; version 2: a row pass for
// dinp, then a column pass that reads dout and inp again (kept for the lab's comparison).
inline void layernorm_backward(floatX* dinp, float* dweight, float* dbias, float* dinp_colsum, const floatX* dout, const floatX* inp, const floatX* weight,
                               const float* mean, const float* rstd, float* partial, int N, int C, cudaStream_t stream, int version = 3) {
    KERNEL_ASSERT(C % x128::size == 0 && N >= 1 && (version == 3 || (version == 2 && dinp_colsum == nullptr)));
    if (version == 3) {
        int nacc = dinp_colsum ? 3 : 2;
        size_t smem;
        int warps = fused_block_setup(layernorm_backward_kernel3, nacc, C, &smem);
        layernorm_backward_kernel3<<<fused_num_partials(N), warps * 32, smem, stream>>>(dinp, partial, dout, inp, weight, mean, rstd, N, C, nacc);
        cudaCheck(cudaGetLastError());
        reduce_partials(dweight, partial, fused_num_partials(N), C, nacc * C, stream);
        reduce_partials(dbias, partial + C, fused_num_partials(N), C, nacc * C, stream);
        if (dinp_colsum) reduce_partials(dinp_colsum, partial + 2 * C, fused_num_partials(N), C, nacc * C, stream);
        return;
    }
    const int block_size = 256;
    layernorm_backward_kernel2<<<CEIL_DIV(N, block_size / 32), block_size, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, N, C);
    cudaCheck(cudaGetLastError());
    layernorm_param_backward_kernel1<<<dim3(CEIL_DIV(C, 32), num_partials(N)), dim3(32, 8), 0, stream>>>(partial, dout, inp, mean, rstd, N, C);
    cudaCheck(cudaGetLastError());
    reduce_partials(dweight, partial, num_partials(N), C, 2 * C, stream);
    reduce_partials(dbias, partial + C, num_partials(N), C, 2 * C, stream);
}

}  // namespace gpu
