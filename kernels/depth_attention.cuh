// kernels/depth_attention.cuh: Depth-Attention's softmax over depth (value_paths.md section 5),
// forward and backward, each one fused kernel per layer.
//
// For layer l >= 1 with sources S(l) = {anchors j < l} (anchors: 0, s, 2s, ...), per position
// (b, t) and KV head g, with q_bar the mean of the group's G query heads:
//   e_n = <q_bar, kappa^n> / sqrt(D)   for n in S(l) and n = l (kappa^n: layer n's key at (b, t, g))
//   alpha = softmax_n(e),  v~^l = alpha_l v^l + sum_{n in S(l)} alpha_n nu^n
// where nu^n is what anchor n stores (v^0 for layer 0, else its own v~). The attention core then
// reads v~^l in place of v^l. Backward, with u = dL/dv~^l (an anchor's u already includes what its
// readers sent back, added by the attention backward's route):
//   c_n = <u, nu^n>, c_bar = sum_n alpha_n c_n, de_n = alpha_n (c_n - c_bar)
//   dv^l = alpha_l u;  dkappa^l += de_l q_bar / sqrt(D);  dq_h += (sum_n de_n kappa^n / sqrt(D)) / G
//   A_v[n] (=|+=) alpha_n u,  A_k[n] (=|+=) de_n q_bar / sqrt(D)   for n in S(l)
// PyTorch, one position: a = softmax(stack([q_bar @ k_n for n]) / sqrt(D)); v = (a[:, None] * stack(v_n)).sum(0)
//
// Version 1: one warp per (position, KV head). The whole depth softmax lives in a warp (lane i
// holds dimensions i, i+32, ...; dot products are warp sums in a fixed tree), so nothing is written
// between the logits and the mix: the forward reads q, the |S|+1 keys and values once and writes
// v~ and alpha; the backward reads u, alpha, q, the keys and values once and writes every gradient.
// Its loads are 2 bytes per lane (bf16) and one candidate's row at a time; on an H100 the two
// kernels took 6.7 and 15.4 ms a step at GPT-2 124M, B=64, T=1024, stride 6, about 2x and 1.4x the
// time their bytes need (ncu, dev/results/2026-11-26-h100-3.md).
// Version 2 (the trainer's): the same math and the same memory traffic, with each (position, KV
// head) item taken by LPI = D / VEC lanes (VEC = 16 bytes of floatX: 8 bf16 or 4 fp32), each lane
// one 16-byte word of every row, so a warp holds 32 / LPI items (4 at D = 64 in bf16). Dot
// products are sums over the item's LPI lanes (xor shuffles in a fixed tree). The candidates' rows
// are loaded a chunk of DEPTH2_CHUNK at a time, all loads of a chunk issued before any is used, so
// a lane has several 16-byte loads in flight instead of one 2-byte load.
// The anchors' gradients, two ways. Accumulated (versions 1 and 2): the anchors' accumulators get
// one contribution per (position, head) per layer, from the lanes that own that position: no
// atomics; the first contributor in the reverse layer order overwrites (overwrite_mask), so the
// accumulators never need zeroing. Deferred (version 2, the trainer's): each reader keeps de_n and
// u, and depth_anchor_gather sums them once per anchor, in the same fp32 operations and order (the
// same bits), reading each reader's u and q once instead of reading and writing two fp32
// accumulators per anchor at every reader (1.013x the step time the other way, H100 2026-11-27).
//
// defines: DEPTH_MAX_SOURCES, DepthArgs, depth_attention_forward, depth_attention_backward,
//          depth_attention_version (1 or 2: dev/cuda/depth_attention.cu times both),
//          DepthReader, DepthGatherArgs, depth_anchor_gather; the fused variants (off by default):
//          depth_fused_forward, DepthForwardSync, depth_fused_forward_active,
//          attention_forward_depth_fused; depth_fused_backward, depth_fused_backward_active,
//          attention_backward_depth_fused
#pragma once

#include <vector>

#include "kernels/attention.cuh"
#include "kernels/common.cuh"

namespace gpu {

constexpr int DEPTH_MAX_SOURCES = 64;  // |S(l)| a kernel accepts (anchors below a layer)
constexpr int DEPTH_WARPS = 4;         // (position, head) items per block of 128 threads

struct DepthArgs {
    int BT = 0, H = 0, Hkv = 0, D = 0;
    const floatX* q = nullptr;  // (BT, H*D) rows of q_rs: layer l's queries as the core reads them
    long q_rs = 0;
    const floatX* k = nullptr;  // (BT, Hkv*D) rows of k_rs: layer l's keys; every anchor's keys share this layout
    long k_rs = 0;
    const floatX* v = nullptr;  // (BT, Hkv*D) rows of v_rs: layer l's raw values
    long v_rs = 0;
    int n_src = 0;  // |S(l)|, candidates are [sources..., own]
    const floatX* src_k[DEPTH_MAX_SOURCES];  // kappa^n, rows of k_rs
    const floatX* src_v[DEPTH_MAX_SOURCES];  // nu^n
    long src_v_rs[DEPTH_MAX_SOURCES];
    float* alpha = nullptr;  // (BT, Hkv, alpha_stride): forward writes, backward reads
    int alpha_stride = 0;
    floatX* vmix = nullptr;  // forward out: (BT, Hkv*D) dense
    // backward
    const floatX* u = nullptr;  // (BT, Hkv*D) dense
    floatX* dv = nullptr;       // own raw value's gradient: written
    long dv_rs = 0;
    floatX* dk = nullptr;  // own key's gradient: added to
    long dk_rs = 0;
    floatX* dq = nullptr;  // queries' gradient: added to
    long dq_rs = 0;
    // the anchors' gradients, one of two ways (version 2 does both; version 1 only the first):
    // accumulated here: (n_src, BT, Hkv*D) fp32, anchor n's accumulators at n*BT*Hkv*D
    float* acc_k = nullptr;
    float* acc_v = nullptr;
    unsigned long long overwrite_mask = 0;  // bit n: anchor n gets its first contribution here
    // or deferred (the trainer's): the layer keeps de_n (n < n_src, fp32, laid out as alpha) and u,
    // and depth_anchor_gather sums every reader's alpha_n u and de_n q_bar / sqrt(D) once, at the
    // anchor. u stays where it is (the trainer's attention backward writes it into the layer's v~
    // slot), or a copy goes to u_keep
    float* de = nullptr;
    floatX* u_keep = nullptr;  // (BT, Hkv*D) dense, or NULL
};

// depth_anchor_gather: anchor n's accumulators from the layers that read it, in the order given
// (the trainer: descending layers, the order in which the accumulate way adds them):
//   A_v[n] = sum_r alpha^r_n u^r,  A_k[n] = sum_r de^r_n q_bar^r / sqrt(D)
struct DepthReader {
    const floatX* u = nullptr;      // its kept u, (BT, Hkv*D) dense
    const floatX* q = nullptr;      // its queries, rows of DepthGatherArgs::q_rs
    const float* alpha = nullptr;   // its alpha and de, (BT, Hkv, alpha_stride)
    const float* de = nullptr;
};
constexpr int DEPTH_GATHER_READERS = 24;  // readers per launch; the launcher sums more in further launches
struct DepthGatherArgs {
    int BT = 0, H = 0, Hkv = 0, D = 0;
    int n = 0;  // the anchor's candidate index in its readers' alpha/de rows
    long q_rs = 0;
    int alpha_stride = 0;
    float* acc_k = nullptr;  // (BT, Hkv*D) fp32: written (the sums)
    float* acc_v = nullptr;
    // set by the launcher, per launch
    int n_readers = 0;
    bool overwrite = true;  // the accumulators start from 0 (else: added to, a later launch)
    DepthReader r[DEPTH_GATHER_READERS];
};

// ----------------------------------------------------------------------------
// kernels

// lane's dimensions d = lane + 32e, e < EPL; for D = 16 lanes 16..31 hold nothing
template <int D>
__host__ __device__ constexpr int depth_epl() { return D >= 32 ? D / 32 : 1; }

// q_bar = mean of the group's query heads (in head order, then / G, as the CPU reference)
template <int D>
__device__ __forceinline__ void depth_load_qbar(float (&qb)[depth_epl<D>()], const DepthArgs& a, int row, int g, int lane) {
    int G = a.H / a.Hkv;
#pragma unroll
    for (int e = 0; e < depth_epl<D>(); e++) {
        int d = lane + 32 * e;
        float sum = 0.0f;
        if (d < D)
            for (int h = g * G; h < (g + 1) * G; h++) sum += to_float(a.q[(size_t)row * a.q_rs + (size_t)h * D + d]);
        qb[e] = sum / G;
    }
}

// <x, rows of p at (row, g)> summed over the warp (every lane gets it)
template <int D>
__device__ __forceinline__ float depth_dot(const float (&x)[depth_epl<D>()], const floatX* p, long rs, int row, int g, int lane) {
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < depth_epl<D>(); e++) {
        int d = lane + 32 * e;
        if (d < D) dot += x[e] * to_float(p[(size_t)row * rs + (size_t)g * D + d]);
    }
    return warp_sum(dot);
}

template <int D>
static __global__ void __launch_bounds__(32 * DEPTH_WARPS) depth_attention_forward_kernel(DepthArgs a) {
    constexpr int EPL = depth_epl<D>();
    __shared__ float logits[DEPTH_WARPS][DEPTH_MAX_SOURCES + 1];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    long item = (long)blockIdx.x * DEPTH_WARPS + warp;
    if (item >= (long)a.BT * a.Hkv) return;  // whole warps only: no block-level sync below
    int row = (int)(item / a.Hkv), g = (int)(item % a.Hkv), nS = a.n_src, nc = nS + 1;
    const float scale = 1.0f / sqrtf((float)D);
    float qb[EPL];
    depth_load_qbar<D>(qb, a, row, g, lane);
    float mx = -INFINITY;
    for (int n = 0; n < nc; n++) {
        float e = depth_dot<D>(qb, n < nS ? a.src_k[n] : a.k, a.k_rs, row, g, lane) * scale;
        if (lane == 0) logits[warp][n] = e;
        mx = fmaxf(mx, e);
    }
    __syncwarp();
    float sum = 0.0f;
    for (int n = 0; n < nc; n++) sum += expf(logits[warp][n] - mx);
    float* alpha = a.alpha + ((size_t)row * a.Hkv + g) * a.alpha_stride;
    // v~ = alpha_own v + sum_n alpha_n nu^n (own term first, as the CPU reference sums)
    float a_own = expf(logits[warp][nS] - mx) / sum, out[EPL];
#pragma unroll
    for (int e = 0; e < EPL; e++) {
        int d = lane + 32 * e;
        out[e] = d < D ? a_own * to_float(a.v[(size_t)row * a.v_rs + (size_t)g * D + d]) : 0.0f;
    }
    for (int n = 0; n < nS; n++) {
        float an = expf(logits[warp][n] - mx) / sum;
        if (lane == 0) alpha[n] = an;
#pragma unroll
        for (int e = 0; e < EPL; e++) {
            int d = lane + 32 * e;
            if (d < D) out[e] += an * to_float(a.src_v[n][(size_t)row * a.src_v_rs[n] + (size_t)g * D + d]);
        }
    }
    if (lane == 0) alpha[nS] = a_own;
#pragma unroll
    for (int e = 0; e < EPL; e++) {
        int d = lane + 32 * e;
        if (d < D) a.vmix[(size_t)row * a.Hkv * D + (size_t)g * D + d] = from_float<floatX>(out[e]);
    }
}

template <int D>
static __global__ void __launch_bounds__(32 * DEPTH_WARPS) depth_attention_backward_kernel(DepthArgs a) {
    constexpr int EPL = depth_epl<D>();
    __shared__ float de_s[DEPTH_WARPS][DEPTH_MAX_SOURCES + 1];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    long item = (long)blockIdx.x * DEPTH_WARPS + warp;
    if (item >= (long)a.BT * a.Hkv) return;
    int row = (int)(item / a.Hkv), g = (int)(item % a.Hkv), nS = a.n_src, nc = nS + 1, G = a.H / a.Hkv;
    const float scale = 1.0f / sqrtf((float)D);
    size_t kv_row = (size_t)row * a.Hkv * D + (size_t)g * D, acc_layer = (size_t)a.BT * a.Hkv * D;
    const float* alpha = a.alpha + ((size_t)row * a.Hkv + g) * a.alpha_stride;
    float qb[EPL], u[EPL];
    depth_load_qbar<D>(qb, a, row, g, lane);
#pragma unroll
    for (int e = 0; e < EPL; e++) {
        int d = lane + 32 * e;
        u[e] = d < D ? to_float(a.u[kv_row + d]) : 0.0f;
    }
    // c_n = <u, nu^n>, c_bar = sum_n alpha_n c_n; de_n = alpha_n (c_n - c_bar)
    float cbar = 0.0f;
    for (int n = 0; n < nc; n++) {
        float c = n < nS ? depth_dot<D>(u, a.src_v[n], a.src_v_rs[n], row, g, lane) : depth_dot<D>(u, a.v, a.v_rs, row, g, lane);
        if (lane == 0) de_s[warp][n] = c;
        cbar += alpha[n] * c;
    }
    __syncwarp();
    float dqbar[EPL];
#pragma unroll
    for (int e = 0; e < EPL; e++) dqbar[e] = 0.0f;
    for (int n = 0; n < nc; n++) {
        float de = alpha[n] * (de_s[warp][n] - cbar);
        const floatX* kp = n < nS ? a.src_k[n] : a.k;
        bool first = (a.overwrite_mask >> n) & 1ull;
#pragma unroll
        for (int e = 0; e < EPL; e++) {
            int d = lane + 32 * e;
            if (d >= D) continue;
            dqbar[e] += de * scale * to_float(kp[(size_t)row * a.k_rs + (size_t)g * D + d]);
            if (n < nS) {
                float* ak = a.acc_k + n * acc_layer + kv_row + d;
                float* av = a.acc_v + n * acc_layer + kv_row + d;
                *av = (first ? 0.0f : *av) + alpha[n] * u[e];
                *ak = (first ? 0.0f : *ak) + de * scale * qb[e];
            } else {
                // own key and raw value
                floatX* dk = a.dk + (size_t)row * a.dk_rs + (size_t)g * D + d;
                *dk = from_float<floatX>(to_float(*dk) + de * scale * qb[e]);
                a.dv[(size_t)row * a.dv_rs + (size_t)g * D + d] = from_float<floatX>(alpha[n] * u[e]);
            }
        }
    }
    // every query head of the group gets dq_bar / G
    for (int h = g * G; h < (g + 1) * G; h++)
#pragma unroll
        for (int e = 0; e < EPL; e++) {
            int d = lane + 32 * e;
            if (d >= D) continue;
            floatX* dq = a.dq + (size_t)row * a.dq_rs + (size_t)h * D + d;
            *dq = from_float<floatX>(to_float(*dq) + dqbar[e] / G);
        }
}

// ----------------------------------------------------------------------------
// version 2: LPI lanes per (position, KV head) item, 16-byte words

constexpr int DEPTH2_CHUNK = 4;  // candidates whose rows one lane loads before using any of them

template <int D>
__host__ __device__ constexpr int depth2_lpi() { return D / (int)(16 / sizeof(floatX)); }  // lanes per item
template <int D>
__host__ __device__ constexpr int depth2_items_per_block() { return 32 * DEPTH_WARPS / depth2_lpi<D>(); }

// sum over the LPI lanes of one item (aligned groups of LPI lanes), fixed tree; every lane gets it
template <int D>
__device__ __forceinline__ float depth2_item_sum(float v) {
#pragma unroll
    for (int o = depth2_lpi<D>() / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// This lane's word of q_bar: columns [d0, d0 + VEC) of the group's query heads, summed in head
// order, then / G (as the CPU reference and version 1).
__device__ __forceinline__ void depth2_load_qbar(float (&qb)[x128::size], const floatX* qp, long q_rs, int G, int D, int row, int g, int d0) {
#pragma unroll
    for (int i = 0; i < x128::size; i++) qb[i] = 0.0f;
    for (int h = g * G; h < (g + 1) * G; h++) {
        x128 q = load128(qp + (size_t)row * q_rs + (size_t)h * D + d0);
#pragma unroll
        for (int i = 0; i < x128::size; i++) qb[i] += to_float(q[i]);
    }
#pragma unroll
    for (int i = 0; i < x128::size; i++) qb[i] /= G;
}

__device__ __forceinline__ float depth2_dot(const float (&x)[x128::size], const x128& y) {
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < x128::size; i++) dot += x[i] * to_float(y[i]);
    return dot;
}

// Candidate n's key (n < n_src: anchor n's kappa, else the layer's own) and value (nu^n, or the
// own raw v) at (row, g), this lane's word.
__device__ __forceinline__ const floatX* depth2_key(const DepthArgs& a, int n, int row, int g, int d0) {
    return (n < a.n_src ? a.src_k[n] : a.k) + (size_t)row * a.k_rs + (size_t)g * a.D + d0;
}
__device__ __forceinline__ const floatX* depth2_value(const DepthArgs& a, int n, int row, int g, int d0) {
    return n < a.n_src ? a.src_v[n] + (size_t)row * a.src_v_rs[n] + (size_t)g * a.D + d0 : a.v + (size_t)row * a.v_rs + (size_t)g * a.D + d0;
}

// The per-item bodies of version 2 (depth2_forward_item, depth2_backward_item) are device
// functions: the standalone kernels below run one item per LPI lanes of their grid, and the fused
// variants run them on the rows of an attention block (the end of this file), so both ways compute
// the same operations in the same order: the same bits.
// Each call is one item = row * Hkv + g (position row of the B*T, KV head g) per LPI lanes of the
// calling thread's slot = threadIdx.x / LPI; every lane of a warp must call it together
// (shuffles). An invalid item (past the rows, or past BT * Hkv in a grid's tail) computes on a
// valid one and stores nothing. scratch: n_src + 1 floats of shared memory for the slot (logits,
// or c_n), which the slot's lanes alone use (the standalone kernels: DEPTH_SCRATCH, any n_src).
constexpr int DEPTH_SCRATCH = DEPTH_MAX_SOURCES + 1;

template <int D>
__device__ __forceinline__ void depth2_forward_item(const DepthArgs& a, long item, bool valid, float* logits) {
    constexpr int VEC = x128::size, LPI = depth2_lpi<D>(), CH = DEPTH2_CHUNK;
    static_assert(LPI >= 1 && LPI <= 32 && D % VEC == 0, "one 16-byte word per lane, at most a warp per item");
    int d0 = (threadIdx.x % LPI) * VEC;
    bool leader = valid && threadIdx.x % LPI == 0;
    int row = (int)(item / a.Hkv), g = (int)(item % a.Hkv), nS = a.n_src, nc = nS + 1;
    const float scale = 1.0f / sqrtf((float)D);
    float qb[VEC];
    depth2_load_qbar(qb, a.q, a.q_rs, a.H / a.Hkv, D, row, g, d0);
    // e_n = <q_bar, kappa^n> / sqrt(D), the keys of a chunk loaded before any is used
    float mx = -INFINITY;
    for (int n0 = 0; n0 < nc; n0 += CH) {  // nc is the same for the whole grid: no divergence
        x128 kw[CH];
#pragma unroll
        for (int c = 0; c < CH; c++)
            if (n0 + c < nc) kw[c] = load128(depth2_key(a, n0 + c, row, g, d0));
#pragma unroll
        for (int c = 0; c < CH; c++)
            if (n0 + c < nc) {
                float e = depth2_item_sum<D>(depth2_dot(qb, kw[c])) * scale;
                if (threadIdx.x % LPI == 0) logits[n0 + c] = e;
                mx = fmaxf(mx, e);
            }
    }
    __syncwarp();
    float sum = 0.0f;
    for (int n = 0; n < nc; n++) sum += expf(logits[n] - mx);
    float* alpha = a.alpha + ((size_t)row * a.Hkv + g) * a.alpha_stride;
    // v~ = alpha_own v + sum_n alpha_n nu^n (own term first, as the CPU reference sums)
    float a_own = expf(logits[nS] - mx) / sum, out[VEC];
    x128 vo = load128(depth2_value(a, nS, row, g, d0));
#pragma unroll
    for (int i = 0; i < VEC; i++) out[i] = a_own * to_float(vo[i]);
    for (int n0 = 0; n0 < nS; n0 += CH) {
        x128 vw[CH];
#pragma unroll
        for (int c = 0; c < CH; c++)
            if (n0 + c < nS) vw[c] = load128(depth2_value(a, n0 + c, row, g, d0));
#pragma unroll
        for (int c = 0; c < CH; c++)
            if (n0 + c < nS) {
                float an = expf(logits[n0 + c] - mx) / sum;
                if (leader) alpha[n0 + c] = an;
#pragma unroll
                for (int i = 0; i < VEC; i++) out[i] += an * to_float(vw[c][i]);
            }
    }
    if (leader) alpha[nS] = a_own;
    if (valid) {
        x128 o;
#pragma unroll
        for (int i = 0; i < VEC; i++) o[i] = from_float<floatX>(out[i]);
        store128(a.vmix + (size_t)row * a.Hkv * D + (size_t)g * D + d0, o);
    }
}

// DEFERRED: the anchors' terms are kept (de, u_keep) for depth_anchor_gather instead of added to
// their accumulators here
template <int D, bool DEFERRED>
__device__ __forceinline__ void depth2_backward_item(const DepthArgs& a, long item, bool valid, float* c_s) {
    constexpr int VEC = x128::size, LPI = depth2_lpi<D>(), CH = DEPTH2_CHUNK;
    int d0 = (threadIdx.x % LPI) * VEC;
    int row = (int)(item / a.Hkv), g = (int)(item % a.Hkv), nS = a.n_src, nc = nS + 1, G = a.H / a.Hkv;
    const float scale = 1.0f / sqrtf((float)D);
    size_t kv_word = (size_t)row * a.Hkv * D + (size_t)g * D + d0, acc_layer = (size_t)a.BT * a.Hkv * D;
    const float* alpha = a.alpha + ((size_t)row * a.Hkv + g) * a.alpha_stride;
    float qb[VEC], u[VEC];
    depth2_load_qbar(qb, a.q, a.q_rs, a.H / a.Hkv, D, row, g, d0);
    x128 uw = load128(a.u + kv_word);
    if (DEFERRED && valid && a.u_keep) store128(a.u_keep + kv_word, uw);
#pragma unroll
    for (int i = 0; i < VEC; i++) u[i] = to_float(uw[i]);
    // c_n = <u, nu^n>, c_bar = sum_n alpha_n c_n (in candidate order)
    float cbar = 0.0f;
    for (int n0 = 0; n0 < nc; n0 += CH) {
        x128 vw[CH];
#pragma unroll
        for (int c = 0; c < CH; c++)
            if (n0 + c < nc) vw[c] = load128(depth2_value(a, n0 + c, row, g, d0));
#pragma unroll
        for (int c = 0; c < CH; c++)
            if (n0 + c < nc) {
                float cn = depth2_item_sum<D>(depth2_dot(u, vw[c]));
                if (threadIdx.x % LPI == 0) c_s[n0 + c] = cn;
                cbar += alpha[n0 + c] * cn;
            }
    }
    __syncwarp();
    // de_n = alpha_n (c_n - c_bar): dq_bar += de_n kappa^n / sqrt(D); anchors: A_v[n] (=|+=)
    // alpha_n u, A_k[n] (=|+=) de_n q_bar / sqrt(D); own: dk += de_l q_bar / sqrt(D), dv = alpha_l u
    float dqbar[VEC];
#pragma unroll
    for (int i = 0; i < VEC; i++) dqbar[i] = 0.0f;
    for (int n0 = 0; n0 < nc; n0 += CH) {
        x128 kw[CH];
#pragma unroll
        for (int c = 0; c < CH; c++)
            if (n0 + c < nc) kw[c] = load128(depth2_key(a, n0 + c, row, g, d0));
#pragma unroll
        for (int c = 0; c < CH; c++) {
            int n = n0 + c;
            if (n >= nc) continue;
            float an = alpha[n], de = an * (c_s[n] - cbar);
#pragma unroll
            for (int i = 0; i < VEC; i++) dqbar[i] += de * scale * to_float(kw[c][i]);
            if (!valid) continue;
            if (DEFERRED && n < nS) {
                if (threadIdx.x % LPI == 0) a.de[((size_t)row * a.Hkv + g) * a.alpha_stride + n] = de;
            } else if (n < nS) {
                float* ak = a.acc_k + n * acc_layer + kv_word;
                float* av = a.acc_v + n * acc_layer + kv_word;
                float xk[VEC], xv[VEC];
                if ((a.overwrite_mask >> n) & 1ull) {
#pragma unroll
                    for (int i = 0; i < VEC; i++) xk[i] = xv[i] = 0.0f;
                } else {
                    load_float4s(xk, ak);
                    load_float4s(xv, av);
                }
#pragma unroll
                for (int i = 0; i < VEC; i++) {
                    xv[i] += an * u[i];
                    xk[i] += de * scale * qb[i];
                }
                store_float4s(ak, xk);
                store_float4s(av, xv);
            } else {
                floatX* dkp = a.dk + (size_t)row * a.dk_rs + (size_t)g * D + d0;
                x128 dk = load128(dkp), dv;
#pragma unroll
                for (int i = 0; i < VEC; i++) {
                    dk[i] = from_float<floatX>(to_float(dk[i]) + de * scale * qb[i]);
                    dv[i] = from_float<floatX>(an * u[i]);
                }
                store128(dkp, dk);
                store128(a.dv + (size_t)row * a.dv_rs + (size_t)g * D + d0, dv);
            }
        }
    }
    if (!valid) return;  // no shuffles below
    // every query head of the group gets dq_bar / G
    for (int h = g * G; h < (g + 1) * G; h++) {
        floatX* dqp = a.dq + (size_t)row * a.dq_rs + (size_t)h * D + d0;
        x128 dq = load128(dqp);
#pragma unroll
        for (int i = 0; i < VEC; i++) dq[i] = from_float<floatX>(to_float(dq[i]) + dqbar[i] / G);
        store128(dqp, dq);
    }
}

// The standalone kernels' grid: IPB items a block, one per slot of LPI lanes, each slot's scratch
// a row of the block's shared array. Items past BT * Hkv (the last block's tail) compute on item 0
// and store nothing. BACKWARD picks the item function (the deferred backward, or not).
template <int D, bool BACKWARD, bool DEFERRED>
__device__ __forceinline__ void depth2_grid_item(const DepthArgs& a) {
    constexpr int LPI = depth2_lpi<D>(), IPB = depth2_items_per_block<D>();
    __shared__ float scratch[IPB][DEPTH_SCRATCH];
    int slot = threadIdx.x / LPI;
    long item = (long)blockIdx.x * IPB + slot;
    bool valid = item < (long)a.BT * a.Hkv;
    if (!valid) item = 0;
    if constexpr (BACKWARD) depth2_backward_item<D, DEFERRED>(a, item, valid, scratch[slot]);
    else depth2_forward_item<D>(a, item, valid, scratch[slot]);
}

template <int D>
static __global__ void __launch_bounds__(32 * DEPTH_WARPS) depth_attention_forward_kernel2(DepthArgs a) {
    depth2_grid_item<D, false, false>(a);
}

template <int D, bool DEFERRED>
static __global__ void __launch_bounds__(32 * DEPTH_WARPS) depth_attention_backward_kernel2(DepthArgs a) {
    depth2_grid_item<D, true, DEFERRED>(a);
}

// One thread per 16-byte word of an anchor's (BT, Hkv*D) accumulators: a pure stream over the
// readers' kept u and queries (each read once per anchor, 16 bytes per load), with the sums in
// registers in the readers' order, so the result is the accumulate way's, bit for bit: the same
// fp32 operations in the same order, where that way read and wrote the fp32 accumulators once per
// reader. Per word and reader: q_bar as depth2_load_qbar, then v += alpha_n u; k += de_n/sqrt(D) q_bar.
static __global__ void depth_anchor_gather_kernel(DepthGatherArgs a) {
    constexpr int VEC = x128::size;
    int words = a.D / VEC, G = a.H / a.Hkv;
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)a.BT * a.Hkv * words) return;
    long item = idx / words;
    int row = (int)(item / a.Hkv), g = (int)(item % a.Hkv), d0 = (int)(idx % words) * VEC;
    const float scale = 1.0f / sqrtf((float)a.D);
    size_t kv_word = (size_t)item * a.D + d0, ad = (size_t)item * a.alpha_stride + a.n;
    float xk[VEC], xv[VEC];
    if (a.overwrite) {
#pragma unroll
        for (int i = 0; i < VEC; i++) xk[i] = xv[i] = 0.0f;
    } else {
        load_float4s(xk, a.acc_k + kv_word);
        load_float4s(xv, a.acc_v + kv_word);
    }
    for (int r = 0; r < a.n_readers; r++) {
        const DepthReader& rd = a.r[r];
        float an = rd.alpha[ad], de = rd.de[ad], qb[VEC];
        x128 uw = load128(rd.u + kv_word);
        depth2_load_qbar(qb, rd.q, a.q_rs, G, a.D, row, g, d0);
#pragma unroll
        for (int i = 0; i < VEC; i++) {
            xv[i] += an * to_float(uw[i]);
            xk[i] += de * scale * qb[i];
        }
    }
    store_float4s(a.acc_k + kv_word, xk);
    store_float4s(a.acc_v + kv_word, xv);
}

// ----------------------------------------------------------------------------
// launchers

inline void depth_check_args(const DepthArgs& a, bool backward) {
    KERNEL_ASSERT(a.BT >= 1 && a.Hkv >= 1 && a.H % a.Hkv == 0 && (a.D == 16 || a.D == 32 || a.D == 64 || a.D == 128));
    KERNEL_ASSERT(a.n_src >= 1 && a.n_src <= DEPTH_MAX_SOURCES && a.alpha && a.alpha_stride >= a.n_src + 1);
    KERNEL_ASSERT(a.q && a.k && a.v && a.q_rs >= (long)a.H * a.D && a.k_rs >= (long)a.Hkv * a.D && a.v_rs >= (long)a.Hkv * a.D);
    for (int n = 0; n < a.n_src; n++) KERNEL_ASSERT(a.src_k[n] && a.src_v[n] && a.src_v_rs[n] >= (long)a.Hkv * a.D);
    if (!backward) KERNEL_ASSERT(a.vmix);
    else KERNEL_ASSERT(a.u && a.dv && a.dk && a.dq && (a.acc_k && a.acc_v) != (a.de != nullptr));  // one way, not both
}

// Version 2 reads and writes whole 16-byte words: every row pointer and stride must keep them
// aligned. The trainer's layouts do (head dims are multiples of 16, rows start at multiples of D).
inline bool depth2_aligned(const DepthArgs& a, bool backward) {
    const long vec = 16 / sizeof(floatX);
    auto ok_ptr = [](const void* p) { return p == nullptr || aligned16(p); };  // NULL: not used
    bool ok = a.q_rs % vec == 0 && a.k_rs % vec == 0 && a.v_rs % vec == 0 && ok_ptr(a.q) && ok_ptr(a.k) && ok_ptr(a.v) && ok_ptr(a.vmix);
    for (int n = 0; n < a.n_src; n++) ok = ok && ok_ptr(a.src_k[n]) && ok_ptr(a.src_v[n]) && a.src_v_rs[n] % vec == 0;
    if (backward)
        ok = ok && a.dk_rs % vec == 0 && a.dv_rs % vec == 0 && a.dq_rs % vec == 0 && ok_ptr(a.u) && ok_ptr(a.dk) && ok_ptr(a.dv) && ok_ptr(a.dq) &&
             ok_ptr(a.acc_k) && ok_ptr(a.acc_v) && ok_ptr(a.u_keep);
    return ok;
}

// Which version the trainer runs: 2; dev/cuda/depth_attention.cu sets 1 to time the first one.
inline int depth_attention_version = 2;

template <int D>
void depth_launch(const DepthArgs& a, bool backward, cudaStream_t stream) {
    if (depth_attention_version == 1) {
        KERNEL_ASSERT(!a.de);  // version 1 accumulates only
        unsigned blocks = (unsigned)CEIL_DIV((long)a.BT * a.Hkv, (long)DEPTH_WARPS);
        if (backward) depth_attention_backward_kernel<D><<<blocks, 32 * DEPTH_WARPS, 0, stream>>>(a);
        else depth_attention_forward_kernel<D><<<blocks, 32 * DEPTH_WARPS, 0, stream>>>(a);
    } else {
        KERNEL_ASSERT(depth2_aligned(a, backward));
        unsigned blocks = (unsigned)CEIL_DIV((long)a.BT * a.Hkv, (long)depth2_items_per_block<D>());
        if (backward && a.de) depth_attention_backward_kernel2<D, true><<<blocks, 32 * DEPTH_WARPS, 0, stream>>>(a);
        else if (backward) depth_attention_backward_kernel2<D, false><<<blocks, 32 * DEPTH_WARPS, 0, stream>>>(a);
        else depth_attention_forward_kernel2<D><<<blocks, 32 * DEPTH_WARPS, 0, stream>>>(a);
    }
    cudaCheck(cudaGetLastError());
}

inline void depth_dispatch(const DepthArgs& a, bool backward, cudaStream_t stream) {
    depth_check_args(a, backward);
    with_head_dim(a.D, [&](auto d) { depth_launch<decltype(d)::value>(a, backward, stream); });
}

// forward: writes vmix (what the core reads) and alpha
inline void depth_attention_forward(const DepthArgs& a, cudaStream_t stream) { depth_dispatch(a, false, stream); }
// backward: writes dv, adds into dk and dq; the anchors' accumulators (= or +=, overwrite_mask) or
// de and u_keep (deferred)
inline void depth_attention_backward(const DepthArgs& a, cudaStream_t stream) { depth_dispatch(a, true, stream); }

// anchor n's accumulators: acc = the sums over the readers (their kept de and u), in the order
// given, DEPTH_GATHER_READERS per launch (the later launches add to the first's sums)
inline void depth_anchor_gather(DepthGatherArgs a, const std::vector<DepthReader>& readers, cudaStream_t stream) {
    const long vec = 16 / sizeof(floatX);
    KERNEL_ASSERT(a.BT >= 1 && a.Hkv >= 1 && a.H % a.Hkv == 0 && a.D % vec == 0 && a.q_rs % vec == 0 && a.q_rs >= (long)a.H * a.D);
    KERNEL_ASSERT(!readers.empty() && a.n >= 0 && a.n < a.alpha_stride);
    KERNEL_ASSERT(a.acc_k && a.acc_v && aligned16(a.acc_k) && aligned16(a.acc_v));
    for (const DepthReader& r : readers) KERNEL_ASSERT(r.u && r.q && r.alpha && r.de && aligned16(r.u) && aligned16(r.q));
    long threads = (long)a.BT * a.Hkv * (a.D / vec);
    for (size_t first = 0; first < readers.size(); first += DEPTH_GATHER_READERS) {
        a.n_readers = (int)std::min(readers.size() - first, (size_t)DEPTH_GATHER_READERS);
        a.overwrite = first == 0;
        for (int r = 0; r < a.n_readers; r++) a.r[r] = readers[first + r];
        depth_anchor_gather_kernel<<<(unsigned)CEIL_DIV(threads, 256L), 256, 0, stream>>>(a);
        cudaCheck(cudaGetLastError());
    }
}

#ifdef ENABLE_BF16
// The depth items of one attention tile: the ATT2_TILE positions [t0, t0 + ATT2_TILE) of batch row
// b and KV head g, as items of LPI lanes (16 at a time at D = 64), run by all ATT2_THREADS threads
// of an attention block, each slot's scratch (n_src + 1 floats) in smem, the block's shared tiles.
// Positions past T compute on t0 and store nothing. BACKWARD: the deferred backward, else the
// forward. Both fused ways below use it.
template <int D, bool BACKWARD>
__device__ __forceinline__ void depth_tile_items(const DepthArgs& d, int T, int b, int g, int t0, unsigned char* smem) {
    constexpr int LPI = depth2_lpi<D>(), IPB = ATT2_THREADS / LPI;
    static_assert(ATT2_THREADS % 32 == 0 && 32 % LPI == 0, "whole items in whole warps");
    int slot = threadIdx.x / LPI;
    float* scratch = reinterpret_cast<float*>(smem) + slot * (d.n_src + 1);
    for (int r0 = 0; r0 < ATT2_TILE; r0 += IPB) {
        int t = t0 + r0 + slot;
        bool valid = t < T;
        long item = ((long)b * T + (valid ? t : t0)) * d.Hkv + g;
        if constexpr (BACKWARD) depth2_backward_item<D, true>(d, item, valid, scratch);
        else depth2_forward_item<D>(d, item, valid, scratch);
        __syncwarp();  // the slot's scratch is written again by its next row
    }
}
#endif

// ----------------------------------------------------------------------------
// the depth backward fused into the attention backward's dK/dV kernel (BF16 build)
//
// Why: the standalone backward (version 2, deferred) is a memory-bound pass of its own after the
// attention backward: on an H100 it took 7.0 ms of a 153 ms GPT-2 step (ncu, docs/gpu.md), where
// the target leaves about 2 ms for all of Depth's kernels. Each block of the dK/dV kernel
// has just computed u = dL/dv~ (+ A_v at an anchor) and dk for its 64 key rows of KV head g, and it
// alone owns those rows: u and dk, and the same positions' dq (for the G heads of g), which the dQ
// kernel finished before this kernel started. So the block runs depth2_backward_item (deferred) on
// exactly those rows after its stores: u and dk come back from L2, no launch of its own, and the
// depth backward's loads overlap the other blocks' tensor-core work on the SM. The same function on
// the same inputs as the standalone kernel: the same bits (test_gpt's depth_fused).
// Off by default: on an H200 (2026-11-28) it took a Depth step to 0.992x of the standalone way's
// with version 4's dK/dV kernel, which version 6 beats (0.967x for all three attention kernels).
// Since then it joins either dK/dV kernel (version 4's or 6's: the same block of 64 key rows and
// the same write-out before it), to time against the default with version 6:
// -DVP_DEPTH_FUSED_BACKWARD=1, bench_gpt --depth-fused-backward 1 (the variant depth_fused_bwd).
#ifndef VP_DEPTH_FUSED_BACKWARD
#define VP_DEPTH_FUSED_BACKWARD 0
#endif
inline int depth_fused_backward = VP_DEPTH_FUSED_BACKWARD;

#ifdef ENABLE_BF16
// The dK/dV kernel's epilogue (attention_backward_dkdv_kernel2 and _kernel6): the block's 64 key
// rows of KV head g, as items of LPI lanes (16 at a time at D = 64), each slot's scratch in the
// freed shared memory.
struct DepthBackwardEpilogue {
    static constexpr bool active = true;
    DepthArgs d;
    template <int D>
    __device__ __forceinline__ void run(const AttentionArgs& a, int b, int g, int key0, unsigned char* smem) const {
        depth_tile_items<D, true>(d, a.T, b, g, key0, smem);
    }
};

// Whether the scratch of an attention block's depth items (a slot of n_src + 1 floats per item of
// LPI lanes, ATT2_THREADS / LPI items) fits in smem_bytes, the shared tiles it reuses.
inline bool depth_block_scratch_fits(int D, int n_src, size_t smem_bytes) {
    int lpi = D / (int)(16 / sizeof(floatX));
    return lpi >= 1 && (size_t)(ATT2_THREADS / lpi) * (n_src + 1) * sizeof(float) <= smem_bytes;
}
#endif

// Whether the fused way runs this layer: the BF16 build, the switch on, the trainer's dK/dV kernel
// for these arguments one that takes an epilogue (version 4's or 6's), the depth items' scratch
// within its shared memory.
inline bool depth_fused_backward_active(const AttentionArgs& aa, const DepthArgs& d) {
#ifdef ENABLE_BF16
    return depth_fused_backward && attention_backward_dkdv_epilogue_ok(aa) && depth_block_scratch_fits(d.D, d.n_src, attention_backward_dkdv_smem(aa));
#else
    (void)aa, (void)d;
    return false;
#endif
}

// The attention backward of a Depth layer and its depth backward in one: aa as for
// attention_backward, d as for depth_attention_backward with the deferred way (de set, no u_keep)
// and u the attention's dv (the layer's v~ slot), dk and dq its dk and dq. Where
// depth_fused_backward_active.
inline void attention_backward_depth_fused(const AttentionArgs& aa, const DepthArgs& d, cudaStream_t stream) {
#ifdef ENABLE_BF16
    KERNEL_ASSERT(depth_fused_backward_active(aa, d));
    depth_check_args(d, true);
    KERNEL_ASSERT(depth2_aligned(d, true) && d.de && !d.u_keep && d.BT == aa.B * aa.T && d.H == aa.H && d.Hkv == aa.Hkv && d.D == aa.D);
    KERNEL_ASSERT(d.u == aa.dv && aa.dv_rs == (long)aa.Hkv * aa.D && d.dk == aa.dk && d.dk_rs == aa.dk_rs && d.dq == aa.dq && d.dq_rs == aa.dq_rs);
    KERNEL_ASSERT((aa.h1 == 0 || (aa.h0 == 0 && aa.h1 == aa.H)) && !aa.accumulate_dkv);
    attention_backward_with_epilogue(aa, DepthBackwardEpilogue{d}, stream);
#else
    (void)aa, (void)d, (void)stream;
    runtime_error(nullptr, "internal: the fused depth backward runs in the BF16 build only");
#endif
}

// ----------------------------------------------------------------------------
// the depth softmax and mix fused into the attention forward (BF16 build)
//
// Why: the standalone forward is a memory-bound pass before the attention forward (3.6 ms of a
// 153 ms GPT-2 step on an H100, ncu), and the attention forward, which runs right after it, is
// bound by its math: the same loads inside it overlap that math instead of adding to it. The
// catch: the block of query tile qt reads v~ of key tiles 0..qt, which other blocks make. So the
// blocks take their work by ticket (grid_ticket: the order in which they start) and each first
// makes some tiles of v~ (64 positions of one KV head: depth2_forward_item, the standalone
// kernel's code, so the same bits), releases them (flag_release on that tile's ready flag), then
// waits for the tiles its own attention reads (flag_wait_acquire) and runs version 4's forward.
// Production runs one (b, KV head) ahead of consumption: ticket n makes tiles [f(n), f(n+1)) of
// the B Hkv nq tiles in (b, g, tile) order, f(0) = 0, f(n) = (n - 1) / G + nq (ticket 0 the first
// nq), and attends to (b, h, qt) = tile n of the (b, h)-major order, the heaviest tile of each
// (b, h) first as in version 4. Ticket n reads tiles up to (b g + 1) nq - 1 with b g = n / (G nq)
// (whole GQA groups), all made by tickets <= n: a block waits only on blocks that started before
// it, so no deadlock whatever the block order. The flags hold a generation number, new at every
// launch, so they are never cleared. Should a wait still last VP_FLAG_WAIT_TIMEOUT_MS, it gives up
// and sets the error word (flag_wait_acquire), and the caller stops with an error after the
// launch (depth_forward_sync_failed): a bug there ends the run, it does not hang it. Off by default
// until a GPU has timed it:
// -DVP_DEPTH_FUSED_FORWARD=1, bench_gpt --depth-fused-forward 1 (the variant depth_fused_fwd).
#ifndef VP_DEPTH_FUSED_FORWARD
#define VP_DEPTH_FUSED_FORWARD 0
#endif
inline int depth_fused_forward = VP_DEPTH_FUSED_FORWARD;

// The fused forward's state in device memory, one int array zeroed once: [0] the ticket counter
// (zero between launches), [1] the error word (set by a wait that gave up, flag_wait_acquire;
// depth_forward_sync_failed reads it), then a ready flag per (b, KV head, query tile of
// DEPTH_FUSED_TILE rows), capacity flags. gen: the launch's generation (never 0; the flags start
// at 0). depth_forward_sync_ints: what to allocate.
constexpr int DEPTH_FUSED_TILE = 64;  // the attention kernels' ATT2_TILE
inline size_t depth_forward_sync_ints(int B, int T, int Hkv) { return 2 + (size_t)B * Hkv * CEIL_DIV(T, DEPTH_FUSED_TILE); }
struct DepthForwardSync {
    int* counter = nullptr;
    int* error = nullptr;
    int* ready = nullptr;
    long capacity = 0;
    int gen = 0;
};
// The DepthForwardSync over an array of depth_forward_sync_ints(B, T, Hkv) ints (gen to set)
inline DepthForwardSync depth_forward_sync_in(int* ints, int B, int T, int Hkv) {
    DepthForwardSync sync;
    sync.counter = ints;
    sync.error = ints + 1;
    sync.ready = ints + 2;
    sync.capacity = (long)depth_forward_sync_ints(B, T, Hkv) - 2;
    return sync;
}
// Whether a fused forward launched with sync gave up a wait (after the launch; it syncs the stream
// with a 4-byte copy): then its outputs are garbage, and the caller stops with
// depth_forward_sync_error's message.
inline bool depth_forward_sync_failed(const DepthForwardSync& sync, cudaStream_t stream) {
    int error = 0;
    cudaCheck(cudaMemcpyAsync(&error, sync.error, sizeof(int), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    return error != 0;
}
inline const char* depth_forward_sync_error() {
    return "Depth's fused forward (VP_DEPTH_FUSED_FORWARD / --depth-fused-forward): a block waited longer than "
           "VP_FLAG_WAIT_TIMEOUT_MS for a tile of v~ that other blocks make, and the launch gave up, so its outputs are "
           "not valid. This is a bug in the fused kernel, not in your data; run with the standalone kernels (build "
           "without -DVP_DEPTH_FUSED_FORWARD=1, or --depth-fused-forward 0) and please report it";
}

#ifdef ENABLE_BF16
static_assert(DEPTH_FUSED_TILE == ATT2_TILE, "one ready flag per query tile of the forward kernel");
// attention_forward_kernel2's prologue for Depth (the ticket scheme above)
struct DepthForwardPrologue {
    DepthArgs d;
    DepthForwardSync sync;
    template <int D>
    __device__ __forceinline__ AttQueryBlock block(const AttentionArgs& a, unsigned char* smem) const {
        __shared__ int ticket_s[1];
        int nq = gridDim.x, G = a.H / a.Hkv;
        if (threadIdx.x == 0) ticket_s[0] = grid_ticket(sync.counter, (int)(gridDim.x * gridDim.y));
        __syncthreads();
        int n = ticket_s[0];
        long tiles = (long)a.B * a.Hkv * nq;
        long f0 = n == 0 ? 0 : (long)(n - 1) / G + nq, f1 = (long)n / G + nq;  // f(n), f(n + 1)
        long p0 = f0 < tiles ? f0 : tiles, p1 = f1 < tiles ? f1 : tiles;
        for (long p = p0; p < p1; p++) {
            int bg = (int)(p / nq);
            depth_tile_items<D, false>(d, a.T, bg / a.Hkv, bg % a.Hkv, (int)(p % nq) * ATT2_TILE, smem);
        }
        if (p1 > p0) {
            __threadfence();
            __syncthreads();
            if (threadIdx.x == 0)
                for (long p = p0; p < p1; p++) flag_release(sync.ready + p, sync.gen);
        }
        int bh = n / nq, qt = nq - 1 - n % nq, b = bh / a.H, h = bh % a.H, g = h / G;
        if (threadIdx.x == 0)
            for (int j = 0; j <= qt; j++)
                if (!flag_wait_acquire(sync.ready + ((long)b * a.Hkv + g) * nq + j, sync.gen, sync.error)) break;  // gave up: garbage
        __syncthreads();  // the tiles are ready for every thread, and the scratch is free again
        return {qt, b, h, g};
    }
};
#endif

// Whether the fused forward runs this layer: the BF16 build, the switch on, the trainer's forward
// at version 4 for these arguments over all heads, the flags enough, the scratch within the tiles.
inline bool depth_fused_forward_active(const AttentionArgs& aa, const DepthArgs& d, const DepthForwardSync& sync) {
#ifdef ENABLE_BF16
    AttentionArgs full = attention_full_range(aa);
    return depth_fused_forward && attention_forward4_active(aa) && full.h0 == 0 && full.h1 == full.H &&
           (long)aa.B * aa.Hkv * CEIL_DIV(aa.T, ATT2_TILE) <= sync.capacity && depth_block_scratch_fits(d.D, d.n_src, att2_smem_forward(d.D, true, 1));
#else
    (void)aa, (void)d, (void)sync;
    return false;
#endif
}

// Depth's forward and the layer's attention forward in one kernel: aa as for attention_forward
// (its v the layer's v~ slot), d as for depth_attention_forward (vmix that same slot). Where
// depth_fused_forward_active; sync.gen new for every launch.
inline void attention_forward_depth_fused(const AttentionArgs& aa, const DepthArgs& d, const DepthForwardSync& sync, cudaStream_t stream) {
#ifdef ENABLE_BF16
    KERNEL_ASSERT(depth_fused_forward_active(aa, d, sync) && sync.counter && sync.error && sync.ready && sync.gen != 0);
    depth_check_args(d, false);
    KERNEL_ASSERT(depth2_aligned(d, false) && d.BT == aa.B * aa.T && d.H == aa.H && d.Hkv == aa.Hkv && d.D == aa.D);
    KERNEL_ASSERT(aa.v == d.vmix && aa.v_rs == (long)aa.Hkv * aa.D && !aa.v_mix && !(aa.kv_alt_from < aa.Hkv));
    attention_forward_with_prologue(aa, DepthForwardPrologue{d, sync}, stream);
#else
    (void)aa, (void)d, (void)sync, (void)stream;
    runtime_error(nullptr, "internal: the fused depth forward runs in the BF16 build only");
#endif
}

}  // namespace gpu
