// kernels/encoder.cuh: token (+ learned position) embedding, forward and backward.
//
//   encoder_forward   out[b,t,:] = wte[inp[b,t], :] (+ wpe[t, :])      PyTorch: wte(idx) + wpe(arange(T))
//   encoder_backward  dwte[tok, :] += sum of dout over the positions holding tok;  dwpe[t, :] += sum_b dout[b,t,:]
//
// dwte is a scatter-add: several positions may hold the same token. Atomics would add them in a
// timing-dependent order, so instead the host groups the positions by token (a counting sort of
// the batch, which the host holds anyway: encoder_buckets) and one thread per (token, channel)
// adds that token's positions in ascending order. Deterministic, and it reads dout exactly once.
//
// defines: encoder_forward, encoder_backward, encoder_buckets (host)
#pragma once

#include <vector>

#include "kernels/common.cuh"

namespace gpu {

// ----------------------------------------------------------------------------
// kernels

// The element index runs over all B*T*C outputs, 2^31 of them at C = 4096, B*T = 2^19, so it is
// 64-bit; the row and column it splits into fit int.
static __global__ void encoder_forward_kernel3(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int BT, int T, int C) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;  // element index in out
    if (idx >= (size_t)BT * C) return;
    int bt = (int)(idx / C), c = (int)(idx % C);
    x128 w = load128(wte + (size_t)inp[bt] * C + c), o;
    if (wpe) {
        x128 p = load128(wpe + (size_t)(bt % T) * C + c);
        for (int k = 0; k < x128::size; k++) o[k] = from_float<floatX>(to_float(w[k]) + to_float(p[k]));
    } else {
        o = w;
    }
    store128(out + idx, o);
}

// one block per (distinct token, 256 channels): positions of the token in ascending order
static __global__ void wte_backward_kernel1(float* dwte, const floatX* dout, const int* bucket_token, const int* bucket_start, const int* bucket_pos, int C) {
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int tok = bucket_token[blockIdx.x];
    float acc = 0.0f;
    for (int i = bucket_start[blockIdx.x]; i < bucket_start[blockIdx.x + 1]; i++) acc += to_float(dout[(size_t)bucket_pos[i] * C + c]);
    dwte[(size_t)tok * C + c] += acc;
}

static __global__ void wpe_backward_kernel1(float* dwpe, const floatX* dout, int B, int T, int C) {
    int c = blockIdx.y * blockDim.x + threadIdx.x, t = blockIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int b = 0; b < B; b++) acc += to_float(dout[((size_t)b * T + t) * C + c]);
    dwpe[(size_t)t * C + c] += acc;
}

// ----------------------------------------------------------------------------
// launchers

// out (B,T,C) floatX; inp (B,T) device token ids; wte (Vp,C); wpe (maxT,C) or NULL (Llama)
inline void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C, cudaStream_t stream) {
    const int block_size = 256;
    KERNEL_ASSERT(C % x128::size == 0);
    size_t n = (size_t)B * T * C / x128::size;  // 16-byte vectors of out
    encoder_forward_kernel3<<<(unsigned)CEIL_DIV(n, (size_t)block_size), block_size, 0, stream>>>(out, inp, wte, wpe, B * T, T, C);
    cudaCheck(cudaGetLastError());
}

// Host side of the wte backward: groups positions 0..BT-1 by token (counting sort, stable, so each
// token's positions are ascending). bucket_token[u] is the u-th distinct token (ascending id),
// its positions are bucket_pos[bucket_start[u] .. bucket_start[u+1]).
inline void encoder_buckets(const int* inputs, int BT, int V, std::vector<int>* bucket_token, std::vector<int>* bucket_start, std::vector<int>* bucket_pos,
                            std::vector<int>* scratch_count) {
    std::vector<int>& count = *scratch_count;
    count.assign((size_t)V + 1, 0);
    for (int i = 0; i < BT; i++) count[inputs[i] + 1]++;
    bucket_token->clear();
    bucket_start->clear();
    for (int v = 0; v < V; v++)
        if (count[v + 1]) {
            bucket_token->push_back(v);
            bucket_start->push_back(count[v]);  // running prefix sum: start of token v
            count[v + 1] += count[v];
        } else {
            count[v + 1] = count[v];
        }
    bucket_start->push_back(BT);
    bucket_pos->resize(BT);
    for (int i = 0; i < BT; i++) (*bucket_pos)[count[inputs[i]]++] = i;
}

// dwte (Vp,C), dwpe (maxT,C) or NULL: fp32, accumulated. dout (B,T,C). The bucket arrays are on
// the device (num_buckets distinct tokens).
inline void encoder_backward(float* dwte, float* dwpe, const floatX* dout, const int* bucket_token, const int* bucket_start, const int* bucket_pos,
                             int num_buckets, int B, int T, int C, cudaStream_t stream) {
    const int block_size = 256;
    KERNEL_ASSERT(num_buckets >= 1 && num_buckets <= B * T);
    wte_backward_kernel1<<<dim3(num_buckets, CEIL_DIV(C, block_size)), block_size, 0, stream>>>(dwte, dout, bucket_token, bucket_start, bucket_pos, C);
    cudaCheck(cudaGetLastError());
    if (dwpe) {
        wpe_backward_kernel1<<<dim3(T, CEIL_DIV(C, block_size)), block_size, 0, stream>>>(dwpe, dout, B, T, C);
        cudaCheck(cudaGetLastError());
    }
}

}  // namespace gpu
