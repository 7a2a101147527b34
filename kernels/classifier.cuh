// kernels/classifier.cuh: the fused classifier: softmax over the V real tokens, the cross-entropy
// loss of each position, and (in the same kernel) the logit gradient written in place over the
// logits, so the (B*T, Vp) probabilities are never stored.
//   PyTorch: F.cross_entropy(logits[..., :V], targets, reduction="none"), and its backward
//
// Per row (one block per position): pass 1 reads the row once with an online softmax (running max
// and running sum of exp, merged across threads in a fixed tree order); the loss is
// log(sum) + max - logit[target]. Pass 2 (only with write_dlogits) reads the row again (it is
// still in L2) and overwrites it with dlogits = softmax - onehot(target), 0 on the padded columns
// V..Vp. The 1/(B*T) of the mean loss (and the gradient-accumulation scale) is NOT applied here:
// the LM-head backward GEMM applies it as its alpha (matmul_backward), so the forward does not
// need to know the loss scale.
// Versions and timings: dev/cuda/classifier.cu.
//
// defines: fused_classifier
#pragma once

#include "kernels/common.cuh"

namespace gpu {

// ----------------------------------------------------------------------------
// kernels

struct SoftmaxStat {
    float m, s;  // running max, sum of exp(x - m)
};

__device__ __forceinline__ SoftmaxStat softmax_merge(SoftmaxStat a, SoftmaxStat b) {
    if (a.m == -INFINITY) return b;
    if (b.m == -INFINITY) return a;
    float m = fmaxf(a.m, b.m);
    return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

static __global__ void fused_classifier_kernel2(floatX* logits, float* losses, const int* targets, int V, int Vp, bool write_dlogits) {
    __shared__ SoftmaxStat warp_stats[32];
    int row = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    floatX* x = logits + (size_t)row * Vp;
    SoftmaxStat st = {-INFINITY, 0.0f};
    for (int c = threadIdx.x * x128::size; c < V; c += blockDim.x * x128::size) {
        x128 v = load128(x + c);
        for (int k = 0; k < x128::size && c + k < V; k++) {
            float f = to_float(v[k]);
            if (f > st.m) {
                st.s = st.s * expf(st.m - f) + 1.0f;
                st.m = f;
            } else {
                st.s += expf(f - st.m);
            }
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        SoftmaxStat other = {__shfl_xor_sync(0xffffffffu, st.m, o), __shfl_xor_sync(0xffffffffu, st.s, o)};
        st = softmax_merge(st, other);
    }
    if (lane == 0) warp_stats[warp] = st;
    __syncthreads();
    st = warp_stats[0];
    for (int w = 1; w < nwarps; w++) st = softmax_merge(st, warp_stats[w]);  // same order in every thread
    int target = targets[row];
    if (threadIdx.x == 0) losses[row] = logf(st.s) + st.m - to_float(x[target]);
    if (!write_dlogits) return;
    __syncthreads();  // every thread has read x[target] before anyone overwrites the row
    float inv_sum = 1.0f / st.s;
    for (int c = threadIdx.x * x128::size; c < Vp; c += blockDim.x * x128::size) {
        x128 v = load128(x + c), d;
        for (int k = 0; k < x128::size; k++) {
            int j = c + k;
            float p = j < V ? expf(to_float(v[k]) - st.m) * inv_sum : 0.0f;
            d[k] = from_float<floatX>(p - (j == target ? 1.0f : 0.0f));
        }
        store128(x + c, d);
    }
}

// ----------------------------------------------------------------------------
// launchers

// logits (N, Vp) floatX: read, and overwritten by dlogits = softmax - onehot if write_dlogits;
// losses (N) fp32; targets (N) in [0, V)
inline void fused_classifier(floatX* logits, float* losses, const int* targets, int N, int V, int Vp, bool write_dlogits, cudaStream_t stream) {
    const int block_size = 512;
    KERNEL_ASSERT(Vp % x128::size == 0 && V <= Vp && V >= 1);
    fused_classifier_kernel2<<<N, block_size, 0, stream>>>(logits, losses, targets, V, Vp, write_dlogits);
    cudaCheck(cudaGetLastError());
}

}  // namespace gpu
