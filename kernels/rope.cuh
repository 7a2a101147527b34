// kernels/rope.cuh: rotary position embedding, HF "rotate_half" pairing (Llama family).
//
//   rope_forward   element i of a head rotates with element i + D/2 by angle t * theta^(-2i/D):
//                  (a, c) -> (a cos - c sin, c cos + a sin)     PyTorch: x * cos + rotate_half(x) * sin
//   rope_backward  the rotation is orthogonal: its VJP is the rotation by -angle
//
// Both read rows of in_rs and write rows of out_rs (the first NH heads of each row), so one call
// can copy-and-rotate (qkv -> qk_rot) or rotate in place (in == out: each thread reads its pair
// before writing it). cos/sin: (maxT, D/2) fp32 tables, computed on the host in double exactly as
// the CPU reference computes its tables.
//
// defines: rope_forward, rope_backward
#pragma once

#include "kernels/common.cuh"

namespace gpu {

// ----------------------------------------------------------------------------
// kernels

// one thread per (row, head, pair); sign = +1 forward, -1 backward
static __global__ void rope_kernel1(floatX* out, const floatX* inp, const float* cos_tab, const float* sin_tab, int BT, int T, int NH, int D, long in_rs,
                                    long out_rs, float sign) {
    int half = D / 2;
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)BT * NH * half) return;
    int i = (int)(idx % half), j = (int)(idx / half % NH), row = (int)(idx / ((long)half * NH));
    int t = row % T;
    float cs = cos_tab[(size_t)t * half + i], sn = sign * sin_tab[(size_t)t * half + i];
    const floatX* x = inp + (size_t)row * in_rs + (size_t)j * D;
    float a = to_float(x[i]), c = to_float(x[i + half]);
    floatX* o = out + (size_t)row * out_rs + (size_t)j * D;
    o[i] = from_float<floatX>(a * cs - c * sn);
    o[i + half] = from_float<floatX>(c * cs + a * sn);
}

// ----------------------------------------------------------------------------
// launchers

inline void rope_launch(floatX* out, const floatX* inp, const float* cos_tab, const float* sin_tab, int B, int T, int NH, int D, long in_rs, long out_rs,
                        float sign, cudaStream_t stream) {
    const int block_size = 256;
    KERNEL_ASSERT(D % 2 == 0 && in_rs >= (long)NH * D && out_rs >= (long)NH * D);
    long n = (long)B * T * NH * (D / 2);
    rope_kernel1<<<(unsigned)CEIL_DIV(n, (long)block_size), block_size, 0, stream>>>(out, inp, cos_tab, sin_tab, B * T, T, NH, D, in_rs, out_rs, sign);
    cudaCheck(cudaGetLastError());
}

// out (B,T, rows of out_rs) = RoPE(inp (B,T, rows of in_rs)) on the first NH heads; in place if out == inp
inline void rope_forward(floatX* out, const floatX* inp, const float* cos_tab, const float* sin_tab, int B, int T, int NH, int D, long in_rs, long out_rs,
                         cudaStream_t stream) {
    rope_launch(out, inp, cos_tab, sin_tab, B, T, NH, D, in_rs, out_rs, 1.0f, stream);
}

// dinp = RoPE^T(dout): overwrites dinp (may equal dout)
inline void rope_backward(floatX* dinp, const floatX* dout, const float* cos_tab, const float* sin_tab, int B, int T, int NH, int D, long dout_rs,
                          long dinp_rs, cudaStream_t stream) {
    rope_launch(dinp, dout, cos_tab, sin_tab, B, T, NH, D, dout_rs, dinp_rs, -1.0f, stream);
}

}  // namespace gpu
