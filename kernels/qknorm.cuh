// kernels/qknorm.cuh: QK-norm (Qwen3 style, Llama family with --qk-norm 1): RMSNorm over the head
// dim of every query head (gain q_w, shared by all query heads of the layer) and every key head
// (gain k_w), applied before RoPE.  PyTorch: q = q_norm(q.view(B, T, H, D)); k = k_norm(...)
//
//   qknorm_forward   out[i, j*D:(j+1)*D] = rmsnorm(inp[i, j*D:(j+1)*D]) * (j < H ? q_w : k_w),
//                    for the H + Hkv heads [q heads | k heads] at the start of each row; caches
//                    rstd (BT, H+Hkv) fp32
//   qknorm_backward  dinp (overwritten) = the RMSNorm VJP per head; dq_w, dk_w += sums over rows
//                    and heads (fixed-order two-stage reduction, kernels/reduce.cuh)
//
// Rows are strided: inp is the raw qkv activation (rows of W = (H+2Hkv)D), out the q|k buffer
// that RoPE and attention read (rows of (H+Hkv)D). One warp per (row, head).
//
// defines: qknorm_forward, qknorm_backward
#pragma once

#include "kernels/common.cuh"
#include "kernels/reduce.cuh"

namespace gpu {

// ----------------------------------------------------------------------------
// kernels

static __global__ void qknorm_forward_kernel1(floatX* out, float* rstd, const floatX* inp, const floatX* q_w, const floatX* k_w, int BT, int H, int NH, int D,
                                              long in_rs, long out_rs, float eps) {
    long w = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // (row, head) pairs: B*T*(H+Hkv) may pass 2^31
    int lane = threadIdx.x % 32;
    if (w >= (long)BT * NH) return;
    int i = (int)(w / NH), j = (int)(w % NH);
    const floatX* x = inp + (size_t)i * in_rs + (size_t)j * D;
    const floatX* g = j < H ? q_w : k_w;
    float ss = 0.0f;
    for (int d = lane; d < D; d += 32) ss += to_float(x[d]) * to_float(x[d]);
    float s = 1.0f / sqrtf(warp_sum(ss) / D + eps);
    floatX* o = out + (size_t)i * out_rs + (size_t)j * D;
    for (int d = lane; d < D; d += 32) o[d] = from_float<floatX>(to_float(x[d]) * s * to_float(g[d]));
    if (lane == 0) rstd[w] = s;
}

static __global__ void qknorm_backward_kernel1(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* q_w, const floatX* k_w, const float* rstd,
                                               int BT, int H, int NH, int D, long in_rs, long out_rs) {
    long w = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // (row, head) pairs: B*T*(H+Hkv) may pass 2^31
    int lane = threadIdx.x % 32;
    if (w >= (long)BT * NH) return;
    int i = (int)(w / NH), j = (int)(w % NH);
    const floatX* x = inp + (size_t)i * in_rs + (size_t)j * D;
    const floatX* dy = dout + (size_t)i * out_rs + (size_t)j * D;
    const floatX* g = j < H ? q_w : k_w;
    float s = rstd[w], dot = 0.0f;
    for (int d = lane; d < D; d += 32) dot += to_float(g[d]) * to_float(dy[d]) * to_float(x[d]);
    float kx = s * s * s * warp_sum(dot) / D;
    floatX* dx = dinp + (size_t)i * in_rs + (size_t)j * D;
    for (int d = lane; d < D; d += 32) dx[d] = from_float<floatX>(s * to_float(g[d]) * to_float(dy[d]) - kx * to_float(x[d]));
}

// stage 1 of dq_w[d] (heads j < H) and dk_w[d] (heads j >= H): partial row = [dq_w (D) | dk_w (D)]
static __global__ void qknorm_param_backward_kernel1(float* partial, const floatX* dout, const floatX* inp, const float* rstd, int BT, int H, int NH, int D,
                                                     long in_rs, long out_rs) {
    int d = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * PARTIAL_ROWS, r1 = min(BT, r0 + PARTIAL_ROWS);
    float dq = 0.0f, dk = 0.0f;
    if (d < D)
        for (int r = r0 + threadIdx.y; r < r1; r += 8)
            for (int j = 0; j < NH; j++) {
                float g = to_float(dout[(size_t)r * out_rs + (size_t)j * D + d]) * to_float(inp[(size_t)r * in_rs + (size_t)j * D + d]) * rstd[(size_t)r * NH + j];
                if (j < H) dq += g;
                else dk += g;
            }
    column_partials_finish(partial, dq, d, D, 2 * D);
    column_partials_finish(partial + D, dk, d, D, 2 * D);
}

// ----------------------------------------------------------------------------
// launchers

// out rows of out_rs, inp rows of in_rs: the first (H+Hkv)*D of each row; rstd (BT, H+Hkv)
inline void qknorm_forward(floatX* out, float* rstd, const floatX* inp, const floatX* q_w, const floatX* k_w, int BT, int H, int Hkv, int D, long in_rs,
                           long out_rs, float eps, cudaStream_t stream) {
    const int block_size = 256;  // 8 (row, head) pairs per block
    int NH = H + Hkv;
    KERNEL_ASSERT(in_rs >= (long)NH * D && out_rs >= (long)NH * D);
    unsigned blocks = (unsigned)CEIL_DIV((long)BT * NH, (long)(block_size / 32));
    qknorm_forward_kernel1<<<blocks, block_size, 0, stream>>>(out, rstd, inp, q_w, k_w, BT, H, NH, D, in_rs, out_rs, eps);
    cudaCheck(cudaGetLastError());
}

// dinp rows of in_rs (the q|k part is overwritten), dout rows of out_rs; dq_w, dk_w (D) fp32,
// accumulated; partial: num_partials(BT) * 2D floats
inline void qknorm_backward(floatX* dinp, float* dq_w, float* dk_w, const floatX* dout, const floatX* inp, const floatX* q_w, const floatX* k_w,
                            const float* rstd, float* partial, int BT, int H, int Hkv, int D, long in_rs, long out_rs, cudaStream_t stream) {
    const int block_size = 256;
    int NH = H + Hkv;
    KERNEL_ASSERT(in_rs >= (long)NH * D && out_rs >= (long)NH * D);
    unsigned blocks = (unsigned)CEIL_DIV((long)BT * NH, (long)(block_size / 32));
    qknorm_backward_kernel1<<<blocks, block_size, 0, stream>>>(dinp, dout, inp, q_w, k_w, rstd, BT, H, NH, D, in_rs, out_rs);
    cudaCheck(cudaGetLastError());
    qknorm_param_backward_kernel1<<<dim3(CEIL_DIV(D, 32), num_partials(BT)), dim3(32, 8), 0, stream>>>(partial, dout, inp, rstd, BT, H, NH, D, in_rs, out_rs);
    cudaCheck(cudaGetLastError());
    reduce_partials(dq_w, partial, num_partials(BT), D, 2 * D, stream);
    reduce_partials(dk_w, partial + D, num_partials(BT), D, 2 * D, stream);
}

}  // namespace gpu
