// kernels/adamw.cuh: the AdamW update on fp32 master weights, and the floatX copy the kernels read.
//
//   adamw_update   g = grad * grad_scale (global-norm clipping);  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//                  p -= lr * (m/b1c / (sqrt(v/b2c) + eps) + wd * p);  params_x = floatX(p)
//                  PyTorch: torch.optim.AdamW(params, lr, betas, eps, weight_decay)
//   params_from_master   params_x = floatX(master)  (after init or a checkpoint load)
//
// Master weights, gradients and both moments are fp32 in every build; in the BF16 build the
// weights the forward pass reads are the master rounded to nearest (deterministic; no stochastic
// rounding). The bias corrections b1c = 1 - beta1^step, b2c = 1 - beta2^step are computed on the
// host in double and rounded to float, as the CPU reference does. One launch per parameter tensor
// (weight decay applies to matrices only: the caller passes wd = 0 for biases and gains).
//
// defines: adamw_update, params_from_master
#pragma once

#include "kernels/common.cuh"

namespace gpu {

// ----------------------------------------------------------------------------
// kernels

static __global__ void adamw_kernel2(float* master, floatX* params_x, const float* grads, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                                     float one_minus_beta1, float one_minus_beta2, float b1c, float b2c, float eps, float wd, float grad_scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float grad = grads[i] * grad_scale;
    float mm = beta1 * m[i] + one_minus_beta1 * grad;
    float vv = beta2 * v[i] + one_minus_beta2 * grad * grad;
    m[i] = mm;
    v[i] = vv;
    float mhat = mm / b1c, vhat = vv / b2c;
    float p = master[i];
    p -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p);
    master[i] = p;
    params_x[i] = from_float<floatX>(p);  // in the FP32 build params_x may alias master: same value
}

static __global__ void params_from_master_kernel1(floatX* params_x, const float* master, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) params_x[i] = from_float<floatX>(master[i]);
}

// ----------------------------------------------------------------------------
// launchers

// One tensor of n elements. step is 1-based.
inline void adamw_update(float* master, floatX* params_x, const float* grads, float* m, float* v, size_t n, float lr, float beta1, float beta2, int step,
                         float eps, float wd, float grad_scale, cudaStream_t stream) {
    const int block_size = 512;
    KERNEL_ASSERT(step >= 1);
    if (n == 0) return;
    float b1c = (float)(1.0 - std::pow((double)beta1, step)), b2c = (float)(1.0 - std::pow((double)beta2, step));
    adamw_kernel2<<<(unsigned)CEIL_DIV(n, (size_t)block_size), block_size, 0, stream>>>(master, params_x, grads, m, v, n, lr, beta1, beta2, 1.0f - beta1,
                                                                                        1.0f - beta2, b1c, b2c, eps, wd, grad_scale);
    cudaCheck(cudaGetLastError());
}

inline void params_from_master(floatX* params_x, const float* master, size_t n, cudaStream_t stream) {
    const int block_size = 512;
    if (n == 0 || (void*)params_x == (const void*)master) return;  // FP32 build: one buffer
    params_from_master_kernel1<<<(unsigned)CEIL_DIV(n, (size_t)block_size), block_size, 0, stream>>>(params_x, master, n);
    cudaCheck(cudaGetLastError());
}

}  // namespace gpu
