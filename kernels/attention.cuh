// kernels/attention.cuh: causal self-attention, flash style: the forward keeps only the log-sum-exp
// (LSE) of each row of scores, the backward recomputes the probabilities from it, so memory is
// O(T) per row, never O(T^2).  GQA: query head h reads KV head h / G (HF repeat_kv).
//   PyTorch: F.scaled_dot_product_attention(q, k.repeat_interleave(G, 1), v.repeat_interleave(G, 1), is_causal=True)
//
// The math (value_paths.md section 0), per (b, query head h), scale = 1/sqrt(D):
//   forward   S_ij = q_i . K_j * scale (j <= i), P = softmax_j(S), o_i = sum_j P_ij V_j, lse_i = log sum_j exp(S_ij)
//   backward  delta_i = dO_i . o_i,  P_ij = exp(S_ij - lse_i),  dV_j = sum_i P_ij dO_i,
//             dS_ij = P_ij (dO_i . V_j - delta_i),  dq_i = scale sum_j dS_ij K_j,  dK_j = scale sum_i dS_ij q_i
//   with GQA, dK and dV of a KV head are summed over the G query heads of its group.
//
// Interface: AttentionArgs holds every input and output as a pointer plus a row stride, and the
// range of query heads [h0, h1) to process. This is where value paths (the next issue) plug in
// without touching the kernels: a path points a layer's k/v at another layer's qkv slice (or at a
// gathered/mixed buffer), may split the heads over several calls with different k/v (SLA: the
// last heads read the source layer), and points dk/dv at per-layer accumulation buffers with
// accumulate_dkv = true (dk += ...), so cross-layer gradients add up without atomics.
//
// Kernels (numbers as in dev/cuda/attention_forward.cu and attention_backward.cu):
//   version 1 (SIMT, any floatX): one thread per query row (forward, dQ) or key row (dK/dV), K/V or
//     Q/dO tiles staged in shared memory as fp32, online softmax per key. Readable and exact in
//     fp32: the FP32 build uses it (tensor cores would mean TF32, too coarse for the fp32 bounds).
//   version 2 (tensor cores, bf16): FlashAttention-2 tiling, 64x64 tiles, 4 warps of 16 rows,
//     mma.sync.m16n8k16 bf16 -> fp32 with ldmatrix fragments, the score accumulators re-used in
//     registers as the A operand of P @ V (no shared-memory round trip), exp2 with the scale folded
//     into log2(e).
//   version 3 (tensor cores, bf16): version 2 with the backward's dK/dV kernel taking each query
//     tile 16 queries at a time, to hold fewer registers (see the kernel); bit-identical results.
//   version 4 (tensor cores, bf16): version 2's forward and version 3's backward with their
//     streamed tiles (K/V, or Q/dO in the dK/dV kernel) double buffered: the next tile is started
//     as cp.async copies before the current one's math, so the loads overlap it. Bit-identical.
//     The BF16 build's (attention_tc_version, below).
//   version 5 (forward only, tensor cores, bf16): version 4 with 32 query rows per warp (two
//     m-tiles, 128 rows per block), so each K/V fragment read from shared memory feeds two mma.
//     Bit-identical to version 4, and not faster: on an H200 (2026-11-27) its lab at B=8, T=1024
//     took 0.130 ms against version 4's 0.120, and a whole step built with it ran 0.995x and 1.003x
//     the default's in two calls (dev/results/2026-11-27-h200*.md): the two m-tiles' registers
//     (229 at D = 64) leave 2 blocks of 4 warps per SM against version 4's 4. Kept for the lab.
//   version 6 (forward only, D = 64, Hopper: sm_90a): version 4's tiles and softmax on the
//     warpgroup MMA (wgmma, kernels/wgmma.cuh): two warpgroups of 64 query rows per block, Q and
//     K read by the tensor core from 128-byte-swizzled shared tiles, P from registers, V read
//     MN-major. Bit-identical to version 4 under the CUDA emulator (which sums each k16 step in
//     order); on a GPU within the bounds of test_gpt's attention_wgmma_versions, not identical.
//   version 6 of the backward: version 4's with the dQ kernel on wgmma (the same tiles, S and dP
//     from shared memory, dQ += dS K with dS from registers) and the dK/dV kernel on wgmma
//     (version 4's block, 32 queries a step: S^T and dP^T from shared memory, dV += P^T dO and
//     dK += dS^T Q with P^T and dS^T from registers), D = 64, Hopper. On an H200 both gave the
//     same bits as version 4 (test_gpt, 2026-11-28).
//   The trainer's default since 2026-11-28: version 6 for all three kernels where it can run
//     (attention_wgmma_supported: D = 64 on an H100/H200 in an sm_90a build), version 4 elsewhere.
//     On an H200 a GPT-2 124M step (B=64, T=1024) took 119.1 ms with the three against 122.3 with
//     version 4 (0.974; forward alone 0.985, dQ 0.987, dK/dV 0.976; Depth 0.967, ResFormer 0.977),
//     dev/results/2026-11-28-h200.md. bench_gpt --attention-forward 4 --attention-dq 4
//     --attention-dkdv 4 (the variant att_v4) times version 4 against it.
//   version 7 (all three kernels, D = 64, Hopper): version 6 with the operand that a block
//     multiplies by every tile (the forward's Q rows, the dQ kernel's Q and dO rows, the dK/dV
//     kernel's K and V rows) read once from its swizzled tile into registers as wgmma A
//     fragments (sw128_a_fragments), so each score product reads one operand from shared memory,
//     not two. Why: an m64n64k16 with both operands in shared memory reads 4 KiB per 32 cycles of
//     an SM's tensor cores, 128 B/clk, an SM's whole shared-memory bandwidth (an m64n32k16, the
//     dK/dV kernel's, 3 KiB per 16: 192 B/clk), while the tiles' copies also land there; with A in
//     registers half or a third. The same products in the same order: bit-identical to version 6
//     under the emulator. Registers (ptxas): dQ and dK/dV 168 (3 blocks per SM, as version 6's
//     151 and 147), the forward 122 (no spill: its K/V source moved to shared memory; version
//     6's 128). Not yet run on a GPU: bench_gpt
//     --attention-forward 7 --attention-dq 7 --attention-dkdv 7 (the variants att_v7, att_v7_bwd).
// Backward, both versions: three kernels, in this order: delta = rowsum(dO * O); dQ with one
// block per (b, query head, query tile) looping over key tiles; dK/dV with one block per
// (b, KV head, key tile) looping over the G query heads of the group and the query tiles in a
// fixed order (the group sum is deterministic, no atomics). After the delta pass nothing reads O,
// and after the dQ kernel nothing but each dK/dV block reads its own K/V rows: the value paths
// write into that memory (ResFormer's and SVFormer's kept terms over O, Depth's dv~ over V).
// FlashAttention-2 accumulates dQ with atomicAdd inside the
// dK/dV kernel; we recompute S and dP in a separate dQ kernel instead (about 40% more attention
// backward FLOPs) so that results are bit-reproducible.
//
// defines: AttentionArgs, KVGradRoute, KeptSumArgs, attention_head_dim_supported, attention_forward,
//          attention_backward, attention_sum_kept, attention_wgmma_supported, attention_grid_fits
//          (the launch limit on B x heads)
//          (and attention_forward1/2/4/5/6/7, attention_backward1/2/3/4/6/7 for the dev labs);
//          for a value path that extends the version 4 kernels (Depth's, depth_attention.cuh):
//          attention_forward_with_prologue, attention_backward_with_epilogue (AttNoPrologue and
//          AttNoEpilogue are the plain ones), attention_forward4_active,
//          attention_backward_dkdv4_active
#pragma once

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/common.cuh"
#include "kernels/wgmma.cuh"

namespace gpu {

// Where the core's gradient wrt the K (or V) it read goes, per KV head (value_paths.md section 0:
// a path changes only which K/V a layer reads and where their gradients go). G below is the core's
// gradient (summed over the G query heads of the group); "own" is the layer's own dk (dv) slot of
// AttentionArgs, "src" another layer's fp32 accumulator; both dense rows of Hkv*D for src/add.
//   heads g >= from_head are routed:  src (= or +=) src_scale * G',  own = own_scale * G' (+ add)
//   other heads:                       own = G' (+ add)
//   G' = G + add with chain (SLA CHAIN: what later readers sent joins the routed gradient),
//   else G' = G and add (this layer's accumulator, filled by its readers) goes to own only.
// add applies to heads g >= add_from_head (SLA: only skip heads are ever read by other layers).
// Vanilla: src = add = keep = NULL. The values are fp32 so that sums over many layers do not round in bf16.
// Deferred source (keep instead of src; ResFormer's and SVFormer's v^0): routed heads write their
// term src_scale * G' (rounded to floatX) to keep, laid out as src, in memory of this layer that is
// dead by then, and attention_sum_kept later sums the readers' terms into the source's fp32
// accumulator in the order the += would have run: one write per reader instead of an fp32 read
// and write, and one pass over the terms at the source.
struct KVGradRoute {
    const float* add = nullptr;  // (B*T, Hkv*D) fp32, or NULL
    int add_from_head = 0;
    float* src = nullptr;  // (B*T, Hkv*D) fp32, or NULL
    int from_head = 0;
    float src_scale = 1.0f;
    float own_scale = 0.0f;
    bool src_overwrite = false;  // first contributor in the reverse layer order: = rather than +=
    bool chain = false;
    floatX* keep = nullptr;  // (B*T, Hkv*D), or NULL; never together with src
};

struct AttentionArgs {
    int B = 0, T = 0, H = 0, Hkv = 0, D = 0;
    int h0 = 0, h1 = 0;  // query heads processed: [h0, h1), multiples of G = H/Hkv (default: all)
    // inputs: row (b*T + t) of q starts at q + (b*T + t)*q_rs; head h at column h*D (k, v: KV head g at g*D)
    const floatX* q = nullptr;
    long q_rs = 0;
    const floatX* k = nullptr;
    long k_rs = 0;
    const floatX* v = nullptr;
    long v_rs = 0;
    floatX* out = nullptr;  // (B,T,H*D) dense: the forward's output, read again by the backward
    float* lse = nullptr;   // (B,H,T) log-sum-exp of each score row (natural log)
    // Value paths, read in place by the kernels (no gathered copies):
    //  SLA: KV heads g >= kv_alt_from read k_alt / v_alt (the source layer's projections) instead
    int kv_alt_from = 1 << 30;
    const floatX* k_alt = nullptr;
    long k_alt_rs = 0;
    const floatX* v_alt = nullptr;
    long v_alt_rs = 0;
    //  ResFormer: the core reads V = (1 - lambda) v + lambda v_mix, mixed in fp32 as each tile is
    //  loaded; lambda from *lambda_ptr (the learnable fp32 master weight) when set
    const floatX* v_mix = nullptr;
    long v_mix_rs = 0;
    float lambda = 0.5f;
    const float* lambda_ptr = nullptr;
    // backward only
    const floatX* dout = nullptr;  // (B,T,H*D) dense
    float* delta = nullptr;        // (B,H,T) scratch: rowsum(dO * O)
    floatX* dq = nullptr;          // written (overwritten), rows of dq_rs
    long dq_rs = 0;
    floatX* dk = nullptr;  // own slots: written, or added to when accumulate_dkv; rows of dk_rs; dv may be
    long dk_rs = 0;        // NULL when the layer has no value projection (SVFormer l >= 1, dv routed)
    floatX* dv = nullptr;  // dv may also be v itself (dv_rs = v_rs; Depth keeps dv~ in its v~ slot): the
    long dv_rs = 0;        // dQ kernel runs first (version 8's, after, reads no V), and each dK/dV
                           // block writes the rows it alone reads
    bool accumulate_dkv = false;
    KVGradRoute dk_route, dv_route;  // with v_mix, dv_route's scales are 1 - lambda (own) and lambda (src)
    float* dlambda_partial = nullptr;  // with v_mix: per dK/dV block, sum of G_v (v_mix - v) (attention_dkdv_blocks)
    // dQ version 8 only: scratch for the dS^T tiles that the dK/dV kernel writes and the dQ kernel
    // reads back (attention_ds_elems(B, H, T) bf16 at least; attention_ds_tile)
    floatX* ds = nullptr;
    size_t ds_elems = 0;
};

// dQ version 8's scratch: for every (b, query head h) the causal tiles (query tile qt, key tile
// kt <= qt) of 64 x 64, tile (qt, kt) at index qt (qt + 1) / 2 + kt of the pair's nqt (nqt + 1) / 2,
// each dS^T (PyTorch: ds.transpose(-2, -1) of the (64 queries, 64 keys) block, rounded to bf16)
// stored row-major: 64 key rows of 64 queries (128-byte rows), 4096 elements.
constexpr int ATT_DS_TILE_ELEMS = 64 * 64;
__host__ __device__ inline size_t attention_ds_tiles_per_head(int T) {
    size_t nqt = (size_t)(T + 63) / 64;
    return nqt * (nqt + 1) / 2;
}
inline size_t attention_ds_elems(int B, int H, int T) { return (size_t)B * H * attention_ds_tiles_per_head(T) * ATT_DS_TILE_ELEMS; }
// The first element of tile (qt, kt) of (b, h) in a.ds; the tiles kt = 0..qt of one (b, h, qt)
// follow each other.
__device__ __forceinline__ floatX* attention_ds_tile(const AttentionArgs& a, int b, int h, int qt, int kt) {
    size_t pair = (size_t)b * a.H + h;
    return a.ds + (pair * attention_ds_tiles_per_head(a.T) + (size_t)qt * (qt + 1) / 2 + kt) * ATT_DS_TILE_ELEMS;
}
// The dK/dV kernels' (STORE_DS) store of one k16 step of dS^T: sa, the bf16 A fragment of the
// warp's 16 keys (rows) x 16 queries (columns), each register a pair of one key and two adjacent
// queries; t, the tile element at this thread's first key row and first query column
__device__ __forceinline__ void attention_ds_store_fragment(floatX* t, const uint32_t (&sa)[4]) {
    *reinterpret_cast<uint32_t*>(t) = sa[0];
    *reinterpret_cast<uint32_t*>(t + 8 * 64) = sa[1];
    *reinterpret_cast<uint32_t*>(t + 8) = sa[2];
    *reinterpret_cast<uint32_t*>(t + 8 * 64 + 8) = sa[3];
}

inline bool attention_head_dim_supported(int D) { return D == 16 || D == 32 || D == 64 || D == 128; }

// attention_sum_kept: a source's accumulator from the terms its readers kept (KVGradRoute::keep),
//   acc[i] = sum over the slots, in the order given, of slot[i]   (all (BT, Hkv*D))
// in fp32, starting from 0 (overwrite) or from acc: the += of the readers' epilogues, in their order.
constexpr int KEPT_SUM_SLOTS = 32;  // slots per launch; the launcher adds more in further launches
struct KeptSumArgs {
    long n_elems = 0;        // BT * Hkv * D
    float* acc = nullptr;    // fp32: written
    // set by the launcher, per launch
    int n = 0;
    bool overwrite = true;
    const floatX* slot[KEPT_SUM_SLOTS] = {};
};

// ----------------------------------------------------------------------------
// value-path helpers shared by both kernel versions

// The K and V that KV head g of batch b reads: base pointers (row 0 of the sequence, column g*D)
// and row strides. SLA skip heads read another layer's projections in place; ResFormer's V is the
// mix of two sources, made as the tile is loaded.
struct KVSource {
    const floatX* k;
    long k_rs;
    const floatX* v;
    long v_rs;
    const floatX* vmix;  // NULL: V = v
    long vmix_rs;
    float lambda;
};

__host__ __device__ __forceinline__ KVSource attn_kv_source(const AttentionArgs& a, int b, int g) {
    KVSource s;
    bool alt = g >= a.kv_alt_from;
    s.k_rs = alt ? a.k_alt_rs : a.k_rs;
    s.v_rs = alt ? a.v_alt_rs : a.v_rs;
    s.k = (alt ? a.k_alt : a.k) + (size_t)b * a.T * s.k_rs + (size_t)g * a.D;
    s.v = (alt ? a.v_alt : a.v) + (size_t)b * a.T * s.v_rs + (size_t)g * a.D;
    s.vmix = a.v_mix ? a.v_mix + (size_t)b * a.T * a.v_mix_rs + (size_t)g * a.D : nullptr;
    s.vmix_rs = a.v_mix_rs;
    s.lambda = a.lambda_ptr ? *a.lambda_ptr : a.lambda;
    return s;
}

// What a query-side block (the forwards, the dQ kernels) works on: query tile qt of query head h
// (KV head g) in batch b. Grid (query tiles, B x the heads h0..h1-1), the heaviest (last) query
// tiles first, so that the short ones fill the tail of the launch.
struct AttQueryBlock {
    int qt, b, h, g;
};
__device__ __forceinline__ AttQueryBlock att_query_block(const AttentionArgs& a) {
    int nh = a.h1 - a.h0, G = a.H / a.Hkv;
    int qt = gridDim.x - 1 - blockIdx.x;
    int b = blockIdx.y / nh, h = a.h0 + blockIdx.y % nh, g = h / G;  // blockIdx's unsigned division, as it always was
    return {qt, b, h, g};
}

// The forward kernel's prologue parameter for plain attention: the block's tile from its index
// (attention_forward_kernel2)
struct AttNoPrologue {
    template <int D>
    __device__ __forceinline__ AttQueryBlock block(const AttentionArgs& a, unsigned char*) const { return att_query_block(a); }
};

// The dK/dV kernels' epilogue parameter for plain attention: none (attention_backward_dkdv_kernel2)
struct AttNoEpilogue {
    static constexpr bool active = false;
    template <int D>
    __device__ __forceinline__ void run(const AttentionArgs&, int, int, int, unsigned char*) const {}
};

// V as the core sees it at (row, d) of a KVSource: (1 - lambda) v + lambda v_mix for ResFormer
// (the same expression as the CPU reference's mix), v otherwise.
__host__ __device__ __forceinline__ float attn_mix_value(float v, float vmix, float lambda) { return (1.0f - lambda) * v + lambda * vmix; }

// One element of a routed K/V gradient (see KVGradRoute): performs the write to the source
// accumulator and returns what the own slot receives. idx = (b*T + row)*Hkv*D + g*D + d.
// A keep route leaves the source's term to the caller: src_scale * grad at keep[idx] where
// attn_route_keeps (a keep route is never chained, so G' = G; a pair of bf16 stores at once in the
// tensor-core epilogue).
// These helpers (and attn_dv_scales below) also compile for the host: tests/test_gpu_routes.cu runs the trainer's
// value-path plumbing with them on the CPU against the reference's policies. The scaled terms are
// mul_unfused: every dK/dV kernel version runs this code, and the sum of the kept terms
// (attention_sum_kept) adds each term as a rounded product too.
__host__ __device__ __forceinline__ float attn_route_grad(const KVGradRoute& r, int g, size_t idx, float grad, float own_scale, float src_scale) {
    float in = (r.add && g >= r.add_from_head) ? r.add[idx] : 0.0f;
    float gr = r.chain ? grad + in : grad;
    bool routed = (r.src || r.keep) && g >= r.from_head;
    if (routed && r.src) r.src[idx] = (r.src_overwrite ? 0.0f : r.src[idx]) + mul_unfused(src_scale, gr);
    return (routed ? mul_unfused(own_scale, gr) : gr) + (r.chain ? 0.0f : in);
}

// Whether KV head g's routed terms go to keep.
__host__ __device__ __forceinline__ bool attn_route_keeps(const KVGradRoute& r, int g) { return r.keep && g >= r.from_head; }

// The own/source scales of the value gradient's route: with a ResFormer mix they follow lambda
// (own 1 - lambda, the v^0 accumulator lambda), otherwise they are the route's own.
__host__ __device__ __forceinline__ void attn_dv_scales(const AttentionArgs& a, const KVSource& src, float* own_scale, float* src_scale) {
    *own_scale = a.v_mix ? 1.0f - src.lambda : a.dv_route.own_scale;
    *src_scale = a.v_mix ? src.lambda : a.dv_route.src_scale;
}

// ----------------------------------------------------------------------------
// kernels, version 1: SIMT, fp32 math, one thread per row

constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

// rows per block of the version-1 kernels: 64 for D <= 64, 32 for D = 128 (registers)
__host__ __device__ constexpr int attn1_tile_rows(int D) { return D <= 64 ? 64 : 32; }
template <int D>
__host__ __device__ constexpr int attn1_tile() { return attn1_tile_rows(D); }

// copies rows [row0, row0 + nrows) of a strided floatX source into a dense fp32 shared tile
// (rows of ld floats), zero rows past T; all threads of the block take part
template <int D>
__device__ __forceinline__ void attn1_load_tile(float* dst, int ld, const floatX* src, long rs, int row0, int nrows, int T) {
    for (int idx = threadIdx.x; idx < nrows * D; idx += blockDim.x) {
        int r = idx / D, d = idx % D, row = row0 + r;
        dst[r * ld + d] = row < T ? to_float(src[(size_t)row * rs + d]) : 0.0f;
    }
}

// V rows of a KVSource into a dense fp32 tile, mixed (ResFormer) where the source says so
template <int D>
__device__ __forceinline__ void attn1_load_v_tile(float* dst, int ld, const KVSource& s, int row0, int nrows, int T) {
    if (!s.vmix) {
        attn1_load_tile<D>(dst, ld, s.v, s.v_rs, row0, nrows, T);
        return;
    }
    for (int idx = threadIdx.x; idx < nrows * D; idx += blockDim.x) {
        int r = idx / D, d = idx % D, row = row0 + r;
        dst[r * ld + d] = row < T ? attn_mix_value(to_float(s.v[(size_t)row * s.v_rs + d]), to_float(s.vmix[(size_t)row * s.vmix_rs + d]), s.lambda) : 0.0f;
    }
}

template <int D>
static __global__ void attention_forward_kernel1(AttentionArgs a) {
    constexpr int TILE = attn1_tile<D>();
    extern __shared__ float smem1[];
    float* ks = smem1;            // (TILE, D)
    float* vs = smem1 + TILE * D;  // (TILE, D)
    const auto [qt, b, h, g] = att_query_block(a);
    int i = qt * TILE + threadIdx.x;
    const floatX* qb = a.q + (size_t)b * a.T * a.q_rs + (size_t)h * D;
    KVSource src = attn_kv_source(a, b, g);
    float scale = 1.0f / sqrtf((float)D);
    float q[D], o[D];
#pragma unroll
    for (int d = 0; d < D; d++) {
        q[d] = i < a.T ? to_float(qb[(size_t)i * a.q_rs + d]) : 0.0f;
        o[d] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int kt = 0; kt <= qt; kt++) {
        __syncthreads();
        attn1_load_tile<D>(ks, D, src.k, src.k_rs, kt * TILE, TILE, a.T);
        attn1_load_v_tile<D>(vs, D, src, kt * TILE, TILE, a.T);
        __syncthreads();
        int jn = min(TILE, i - kt * TILE + 1);  // keys j <= i
        for (int jj = 0; jj < jn; jj++) {
            float s = 0.0f;
#pragma unroll
            for (int d = 0; d < D; d++) s += q[d] * ks[jj * D + d];
            s *= scale;
            if (s > m) {  // a new running max: rescale what was accumulated
                float c = expf(m - s);
                l *= c;
#pragma unroll
                for (int d = 0; d < D; d++) o[d] *= c;
                m = s;
            }
            float p = expf(s - m);
            l += p;
#pragma unroll
            for (int d = 0; d < D; d++) o[d] += p * vs[jj * D + d];
        }
    }
    if (i >= a.T) return;
    floatX* ob = a.out + ((size_t)b * a.T + i) * a.H * D + (size_t)h * D;
#pragma unroll
    for (int d = 0; d < D; d++) ob[d] = from_float<floatX>(o[d] / l);
    a.lse[((size_t)b * a.H + h) * a.T + i] = m + logf(l);
}

// delta[b,h,t] = sum_d dout * out, shared by every version. LPR = D / (16-byte vector) lanes per
// row, 32 / LPR rows per warp: each lane reads 16 bytes of dO and of O, sums its products in order,
// then the row's lanes add their partials in a fixed xor tree (deterministic). One thread per row
// reading its D values one by one was 8x under the memory bandwidth (rows are H*D apart): 6.2 ms a
// step at GPT-2 124M, B=64, T=1024 on an H100 (dev/results/2026-11-26-h100.md), against ~0.8 ms
// for the 2.4 GB it must read; this kernel took 0.84 ms there (dev/results/2026-11-26-h100-2.md).
//   PyTorch: delta = (dout * out).sum(-1)
template <int D>
static __global__ void attention_backward_preprocess_kernel2(AttentionArgs a) {
    constexpr int VEC = x128::size, LPR = D / VEC >= 32 ? 32 : D / VEC, CHUNKS = D / VEC / LPR;
    int nh = a.h1 - a.h0;
    long row = ((long)blockIdx.x * blockDim.x + threadIdx.x) / LPR;  // (b, h in range, t), t fastest
    int sub = threadIdx.x % LPR;
    bool live = row < (long)a.B * nh * a.T;
    float acc = 0.0f;
    int t = 0, h = 0, b = 0;
    if (live) {
        t = (int)(row % a.T), h = a.h0 + (int)(row / a.T % nh), b = (int)(row / ((long)a.T * nh));
        size_t off = ((size_t)b * a.T + t) * a.H * D + (size_t)h * D;
#pragma unroll
        for (int c = 0; c < CHUNKS; c++) {
            int d0 = (c * LPR + sub) * VEC;
            x128 g = load128(a.dout + off + d0), o = load128(a.out + off + d0);
#pragma unroll
            for (int i = 0; i < VEC; i++) acc += to_float(g[i]) * to_float(o[i]);
        }
    }
    // every lane of the warp takes part in the shuffles (whole warps are live or share a row group)
#pragma unroll
    for (int m = LPR / 2; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
    if (live && sub == 0) a.delta[((size_t)b * a.H + h) * a.T + t] = acc;
}

// One thread per 16-byte word: each slot read once, the sum in registers in the slots' order, the
// fp32 accumulator written once. Every version's backward.
static __global__ void attention_sum_kept_kernel(KeptSumArgs a) {
    constexpr int VEC = x128::size;
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (i0 >= (size_t)a.n_elems) return;
    float x[VEC];
    if (a.overwrite) {
#pragma unroll
        for (int i = 0; i < VEC; i++) x[i] = 0.0f;
    } else {
        load_float4s(x, a.acc + i0);
    }
    for (int r = 0; r < a.n; r++) {
        x128 w = load128(a.slot[r] + i0);
#pragma unroll
        for (int i = 0; i < VEC; i++) x[i] += to_float(w[i]);
    }
    store_float4s(a.acc + i0, x);
}

// dK, dV: one thread per key row j of KV head g; loops over the group's query heads, then query tiles
template <int D>
static __global__ void attention_backward_dkdv_kernel1(AttentionArgs a) {
    constexpr int TILE = attn1_tile<D>();
    constexpr int LDO = D + 1;  // own-row tiles: +1 so that threads reading their own rows hit distinct banks
    extern __shared__ float smem1[];
    float* qs = smem1;                 // (TILE, D)   queries of the current tile
    float* dos = qs + TILE * D;        // (TILE, D)   their output gradients
    float* kown = dos + TILE * D;      // (TILE, LDO) this block's keys
    float* vown = kown + TILE * LDO;   // (TILE, LDO) this block's values
    float* lse_s = vown + TILE * LDO;  // (TILE)
    float* delta_s = lse_s + TILE;     // (TILE)
    int G = a.H / a.Hkv, ng = (a.h1 - a.h0) / G;
    int kt = blockIdx.x, b = blockIdx.y / ng, g = a.h0 / G + blockIdx.y % ng;
    int j = kt * TILE + threadIdx.x;
    int nqt = CEIL_DIV(a.T, TILE);
    float scale = 1.0f / sqrtf((float)D);
    KVSource src = attn_kv_source(a, b, g);
    attn1_load_tile<D>(kown, LDO, src.k, src.k_rs, kt * TILE, TILE, a.T);
    attn1_load_v_tile<D>(vown, LDO, src, kt * TILE, TILE, a.T);
    float dk[D], dv[D];
#pragma unroll
    for (int d = 0; d < D; d++) dk[d] = dv[d] = 0.0f;
    const float* kj = kown + threadIdx.x * LDO;
    const float* vj = vown + threadIdx.x * LDO;
    for (int h = g * G; h < (g + 1) * G; h++) {
        for (int qt = kt; qt < nqt; qt++) {
            __syncthreads();
            attn1_load_tile<D>(qs, D, a.q + (size_t)b * a.T * a.q_rs + (size_t)h * D, a.q_rs, qt * TILE, TILE, a.T);
            attn1_load_tile<D>(dos, D, a.dout + (size_t)b * a.T * a.H * D + (size_t)h * D, (long)a.H * D, qt * TILE, TILE, a.T);
            for (int r = threadIdx.x; r < TILE; r += blockDim.x) {
                int row = qt * TILE + r;
                lse_s[r] = row < a.T ? a.lse[((size_t)b * a.H + h) * a.T + row] : INFINITY;
                delta_s[r] = row < a.T ? a.delta[((size_t)b * a.H + h) * a.T + row] : 0.0f;
            }
            __syncthreads();
            for (int ii = 0; ii < TILE; ii++) {
                int i = qt * TILE + ii;
                if (i < j || i >= a.T) continue;
                const float* qi = qs + ii * D;
                const float* doi = dos + ii * D;
                float s = 0.0f, dp = 0.0f;
#pragma unroll
                for (int d = 0; d < D; d++) {
                    s += qi[d] * kj[d];
                    dp += doi[d] * vj[d];
                }
                float p = expf(s * scale - lse_s[ii]);
                float ds = p * (dp - delta_s[ii]);
#pragma unroll
                for (int d = 0; d < D; d++) {
                    dv[d] += p * doi[d];
                    dk[d] += ds * qi[d];
                }
            }
        }
    }
    // write out: own slots, value-path routes, and (ResFormer learn) this block's share of dlambda
    float v_own, v_src;
    attn_dv_scales(a, src, &v_own, &v_src);
    float dlam = 0.0f;
    if (j < a.T) {
        size_t row = (size_t)b * a.T + j, acc = row * a.Hkv * D + (size_t)g * D;
        floatX* dkj = a.dk + row * a.dk_rs + (size_t)g * D;
        floatX* dvj = a.dv ? a.dv + row * a.dv_rs + (size_t)g * D : nullptr;
        floatX* keepj = attn_route_keeps(a.dv_route, g) ? a.dv_route.keep + acc : nullptr;
#pragma unroll
        for (int d = 0; d < D; d++) {
            float k_new = attn_route_grad(a.dk_route, g, acc + d, mul_unfused(dk[d], scale), a.dk_route.own_scale, a.dk_route.src_scale);
            float v_new = attn_route_grad(a.dv_route, g, acc + d, dv[d], v_own, v_src);
            if (keepj) keepj[d] = from_float<floatX>(v_src * dv[d]);
            if (a.dlambda_partial) dlam += dv[d] * (to_float(src.vmix[(size_t)j * src.vmix_rs + d]) - to_float(src.v[(size_t)j * src.v_rs + d]));
            if (a.accumulate_dkv) k_new += to_float(dkj[d]);
            dkj[d] = from_float<floatX>(k_new);
            if (dvj) {
                if (a.accumulate_dkv) v_new += to_float(dvj[d]);
                dvj[d] = from_float<floatX>(v_new);
            }
        }
    }
    if (a.dlambda_partial) {
        float t = block_sum(dlam);  // fixed tree: deterministic
        if (threadIdx.x == 0) a.dlambda_partial[blockIdx.y * gridDim.x + blockIdx.x] = t;
    }
}

// dQ: one thread per query row i of head h; loops over key tiles
template <int D>
static __global__ void attention_backward_dq_kernel1(AttentionArgs a) {
    constexpr int TILE = attn1_tile<D>();
    constexpr int LDO = D + 1;
    extern __shared__ float smem1[];
    float* ks = smem1;                 // (TILE, D)
    float* vs = ks + TILE * D;         // (TILE, D)
    float* qown = vs + TILE * D;       // (TILE, LDO)
    float* doown = qown + TILE * LDO;  // (TILE, LDO)
    const auto [qt, b, h, g] = att_query_block(a);
    int i = qt * TILE + threadIdx.x;
    float scale = 1.0f / sqrtf((float)D);
    KVSource src = attn_kv_source(a, b, g);
    attn1_load_tile<D>(qown, LDO, a.q + (size_t)b * a.T * a.q_rs + (size_t)h * D, a.q_rs, qt * TILE, TILE, a.T);
    attn1_load_tile<D>(doown, LDO, a.dout + (size_t)b * a.T * a.H * D + (size_t)h * D, (long)a.H * D, qt * TILE, TILE, a.T);
    float lse = i < a.T ? a.lse[((size_t)b * a.H + h) * a.T + i] : INFINITY;
    float delta = i < a.T ? a.delta[((size_t)b * a.H + h) * a.T + i] : 0.0f;
    const float* qi = qown + threadIdx.x * LDO;
    const float* doi = doown + threadIdx.x * LDO;
    float dq[D];
#pragma unroll
    for (int d = 0; d < D; d++) dq[d] = 0.0f;
    for (int kt = 0; kt <= qt; kt++) {
        __syncthreads();
        attn1_load_tile<D>(ks, D, src.k, src.k_rs, kt * TILE, TILE, a.T);
        attn1_load_v_tile<D>(vs, D, src, kt * TILE, TILE, a.T);
        __syncthreads();
        int jn = min(TILE, i - kt * TILE + 1);
        for (int jj = 0; jj < jn; jj++) {
            float s = 0.0f, dp = 0.0f;
#pragma unroll
            for (int d = 0; d < D; d++) {
                s += qi[d] * ks[jj * D + d];
                dp += doi[d] * vs[jj * D + d];
            }
            float p = expf(s * scale - lse);
            float ds = p * (dp - delta);
#pragma unroll
            for (int d = 0; d < D; d++) dq[d] += ds * ks[jj * D + d];
        }
    }
    if (i >= a.T) return;
    floatX* dqi = a.dq + ((size_t)b * a.T + i) * a.dq_rs + (size_t)h * D;
#pragma unroll
    for (int d = 0; d < D; d++) dqi[d] = from_float<floatX>(dq[d] * scale);
}

// ----------------------------------------------------------------------------
// kernels, version 2: tensor cores (bf16 mma.sync), FlashAttention-2 tiling
#ifdef ENABLE_BF16

// Fragment layouts of mma.m16n8k16 (PTX ISA, "Matrix fragments for mma.m16n8k16"), with
// g = lane / 4 and t = lane % 4:
//   A (16x16, row): a0a1 = (g, 2t..2t+1), a2a3 = (g+8, 2t..), a4a5 = (g, 2t+8..), a6a7 = (g+8, 2t+8..)
//   B (16x8, col):  b0b1 = (k = 2t..2t+1, n = g), b2b3 = (k = 2t+8.., n = g)
//   C (16x8):       c0c1 = (g, 2t..2t+1), c2c3 = (g+8, 2t..2t+1)
// so the C fragments of two adjacent n-tiles (n = 0..15) are exactly an A fragment with k = 0..15:
// scores computed as C become the A operand of P @ V without leaving registers.
// ldmatrix.x4 loads four 8x8 b16 matrices; lane L gives the address of row L%8 of matrix L/8.

constexpr int ATT2_TILE = 64;  // query and key rows per tile
constexpr int ATT2_THREADS = 128;  // 4 warps x 16 rows
// The backward kernels' launch bounds. At D <= 64 they ask for 4 blocks per SM, so ptxas keeps
// to 128 registers (16 bytes of spill in dK/dV); above, only the block size, so ptxas picks.
// Measured on an H100 (GPT-2 124M, B=64, T=1024):
//   - ptxas's own choice, 167 (dK/dV) and 160 (dQ) registers, 3 blocks per SM: the default until
//     2026-11-26; dK/dV 18.7 and dQ 12.0 ms a step (ncu, dev/results/2026-11-26-h100-3.md);
//   - __launch_bounds__(ATT2_THREADS, 1): ptxas took 190 and 180 (2 blocks per SM), dK/dV and dQ
//     went to 22.8 and 14.3 ms (dev/results/2026-11-26-h100-2.md);
//   - 4 blocks per SM: whole steps 134.4 and 135.4 ms against 137.0 and 136.3 for ptxas's choice,
//     alternating in one call (build variant bwd_minblocks4, dev/results/2026-11-26-h100-3.md).
// D = 128 (Llama's head dim) would spill heavily at 128 registers and has not been timed, so it
// keeps ptxas's choice (a minimum of 0 blocks emits no .minnctapersm). -DATT2_BWD_MIN_BLOCKS=0
// restores ptxas's choice at every head dim.
#ifndef ATT2_BWD_MIN_BLOCKS
#define ATT2_BWD_MIN_BLOCKS 4
#endif
template <int D>
__host__ __device__ constexpr int att2_bwd_min_blocks() { return D <= 64 ? ATT2_BWD_MIN_BLOCKS : 0; }
#define ATT2_BWD_LAUNCH_BOUNDS __launch_bounds__(ATT2_THREADS, att2_bwd_min_blocks<D>())
__host__ __device__ constexpr int att2_lds(int D) { return D + 8; }  // shared row stride (bf16): +16 bytes, so ldmatrix rows hit distinct banks

// (VP_CUDA_EMU: the CUDA emulator of tests/emu runs these three as warp collectives on the CPU)
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const __nv_bfloat16* p) {
#ifdef VP_CUDA_EMU
    vp_emu::ldmatrix_x4(r, p, false);
#else
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
#endif
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const __nv_bfloat16* p) {
#ifdef VP_CUDA_EMU
    vp_emu::ldmatrix_x4(r, p, true);
#else
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
#endif
}
// c (16x8 fp32) += a (16x16 bf16) @ b (16x8 bf16)
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef VP_CUDA_EMU
    vp_emu::mma_m16n8k16_bf16(c, a, b0, b1);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
// Asynchronous copies (sm_80+), for the double-buffered tile loads of version 4: cp_async16
// starts a 16-byte copy global -> shared that bypasses the registers (and L1: .cg), zero-filling
// the bytes past src_bytes (0: a row past T, nothing is read); cp_async_commit closes this
// thread's copies issued since the last commit into a group; cp_async_wait<N> waits until at most
// the N newest groups are in flight. A copy is visible to the issuing thread after its wait, to
// the block after a __syncthreads that follows the waits. PyTorch has no equivalent: it is how
// FlashAttention-2 overlaps the next tile's loads with the current tile's math.
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src, int src_bytes) {
#ifdef VP_CUDA_EMU
    vp_emu::cp_async16(smem_dst, gmem_src, src_bytes);
#else
    uint32_t dst = (uint32_t)__cvta_generic_to_shared(smem_dst);
    size_t src = __cvta_generic_to_global(gmem_src);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
#endif
}
// The same for one 4-byte word (cp.async.ca: .cg takes only 16 bytes); both addresses 4-byte
// aligned. The dK/dV kernel brings each query row's lse and delta with it.
__device__ __forceinline__ void cp_async4(void* smem_dst, const void* gmem_src, int src_bytes) {
#ifdef VP_CUDA_EMU
    vp_emu::cp_async(smem_dst, gmem_src, 4, src_bytes);
#else
    uint32_t dst = (uint32_t)__cvta_generic_to_shared(smem_dst);
    size_t src = __cvta_generic_to_global(gmem_src);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#ifdef VP_CUDA_EMU
    vp_emu::cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifdef VP_CUDA_EMU
    vp_emu::cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    return bits_as<uint32_t>(__floats2bfloat162_rn(lo, hi));  // lo -> low 16 bits = the lower column
}

// Address helpers for a 16x16 block at (row0, col0) of a shared tile with row stride LDS:
//   A operand (rows = M, cols = K), or B^T stored row-major as [N][K] (then x4 gives two n-tiles):
__device__ __forceinline__ const __nv_bfloat16* frag_a_addr(const __nv_bfloat16* s, int lds, int row0, int col0, int lane) {
    return s + (row0 + lane % 16) * lds + col0 + (lane / 16) * 8;
}
__device__ __forceinline__ const __nv_bfloat16* frag_bt_addr(const __nv_bfloat16* s, int lds, int n0, int k0, int lane) {
    // B given as rows n (e.g. keys) of K columns: regs {0,1} = n-tile n0, {2,3} = n-tile n0+8
    return s + (n0 + lane % 8 + (lane / 16) * 8) * lds + k0 + ((lane / 8) % 2) * 8;
}
__device__ __forceinline__ const __nv_bfloat16* frag_a_trans_addr(const __nv_bfloat16* s, int lds, int k0, int m0, int lane) {
    // A given row-major as [K][M] (e.g. dS^T: keys x queries), loaded with .trans: regs 0..3 = the
    // A fragment's (m0, k0), (m0 + 8, k0), (m0, k0 + 8), (m0 + 8, k0 + 8) blocks of 8 x 8
    return s + (k0 + lane % 8 + (lane / 16) * 8) * lds + m0 + ((lane / 8) % 2) * 8;
}
__device__ __forceinline__ const __nv_bfloat16* frag_b_trans_addr(const __nv_bfloat16* s, int lds, int k0, int n0, int lane) {
    // B given row-major as [K][N] (e.g. V: keys x dims), loaded with .trans: regs {0,1} = n-tile n0, {2,3} = n0+8
    return s + (k0 + lane % 8 + ((lane / 8) % 2) * 8) * lds + n0 + (lane / 16) * 8;
}

// rows [row0, row0+ROWS) of a strided bf16 source -> shared tile (row stride LDS), zeros past T;
// 16-byte loads (row strides and head offsets are multiples of 8 elements: checked by the launcher)
template <int D, int ROWS = ATT2_TILE>
__device__ __forceinline__ void att2_load_tile(__nv_bfloat16* dst, const __nv_bfloat16* src, long rs, int row0, int T) {
    constexpr int LDS = att2_lds(D), CPR = D / 8;  // 16-byte chunks per row
    for (int c = threadIdx.x; c < ROWS * CPR; c += ATT2_THREADS) {
        int r = c / CPR, cc = (c % CPR) * 8, row = row0 + r;
        uint4 val = make_uint4(0, 0, 0, 0);
        if (row < T) val = *reinterpret_cast<const uint4*>(src + (size_t)row * rs + cc);
        *reinterpret_cast<uint4*>(dst + r * LDS + cc) = val;
    }
}

// ResFormer's mix of 8 bf16 values (one 16-byte word of v and of v_mix): in fp32 with the CPU
// reference's expression (attn_mix_value), rounded once to bf16, as the tensor cores read it.
__device__ __forceinline__ uint4 att2_mix8(uint4 own, uint4 mix, float lambda) {
    using Bf16x8 = Packed128<__nv_bfloat16>;
    Bf16x8 o = bits_as<Bf16x8>(own), m = bits_as<Bf16x8>(mix);
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        w[i] = pack_bf16x2(attn_mix_value(to_float(o[2 * i]), to_float(m[2 * i]), lambda),
                           attn_mix_value(to_float(o[2 * i + 1]), to_float(m[2 * i + 1]), lambda));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// V rows of a KVSource into a shared bf16 tile; ResFormer's mix is made here in fp32 from two
// 16-byte loads and rounded once to bf16 (what the tensor cores read), so no mixed copy exists.
template <int D>
__device__ __forceinline__ void att2_load_v_tile(__nv_bfloat16* dst, const KVSource& s, int row0, int T) {
    if (!s.vmix) {
        att2_load_tile<D>(dst, s.v, s.v_rs, row0, T);
        return;
    }
    constexpr int LDS = att2_lds(D), CPR = D / 8;
    for (int c = threadIdx.x; c < ATT2_TILE * CPR; c += ATT2_THREADS) {
        int r = c / CPR, cc = (c % CPR) * 8, row = row0 + r;
        uint4 out = make_uint4(0, 0, 0, 0);
        if (row < T)
            out = att2_mix8(*reinterpret_cast<const uint4*>(s.v + (size_t)row * s.v_rs + cc),
                            *reinterpret_cast<const uint4*>(s.vmix + (size_t)row * s.vmix_rs + cc), s.lambda);
        *reinterpret_cast<uint4*>(dst + r * LDS + cc) = out;
    }
}

// The same two loads started as cp.async copies (version 4): nothing is in shared memory until the
// caller's cp_async_wait and __syncthreads. ResFormer's mixed V is computed from two sources, so
// it is loaded (synchronously) by att2_load_v_tile; it is visible after the same __syncthreads.
// Not unrolled: unrolled, ptxas keeps each chunk's global address in registers across the math
// between two issues (nvcc 13.0, sm_90a, dev/ptxas_report.sh): the dK/dV kernel spilled at D = 64,
// the forward took 133 registers at D = 64 (3 blocks per SM instead of 4) and 245 at D = 128.
template <int D, int ROWS = ATT2_TILE>
__device__ __forceinline__ void att2_load_tile_async(__nv_bfloat16* dst, const __nv_bfloat16* src, long rs, int row0, int T) {
    constexpr int LDS = att2_lds(D), CPR = D / 8;
#pragma unroll 1
    for (int c = threadIdx.x; c < ROWS * CPR; c += ATT2_THREADS) {
        int r = c / CPR, cc = (c % CPR) * 8, row = row0 + r;
        bool inside = row < T;  // rows past T: zeros, read from nowhere (src itself stays a valid address)
        cp_async16(dst + r * LDS + cc, inside ? src + (size_t)row * rs + cc : src, inside ? 16 : 0);
    }
}
template <int D>
__device__ __forceinline__ void att2_load_v_tile_async(__nv_bfloat16* dst, const KVSource& s, int row0, int T) {
    if (s.vmix) att2_load_v_tile<D>(dst, s, row0, T);
    else att2_load_tile_async<D>(dst, s.v, s.v_rs, row0, T);
}

// K/V tiles of the forward's and the dQ kernel's loop over key tiles. KVs holds one K/V buffer
// pair (version 2, ASYNC = false) or two (version 4); tile kt's K is in buffer kt % 2, its V at
// + ATT2_TILE * LDS.
template <int D, bool ASYNC>
__device__ __forceinline__ __nv_bfloat16* att2_kv_buffer(__nv_bfloat16* KVs, int kt) {
    return KVs + (ASYNC ? (kt & 1) * 2 * ATT2_TILE * att2_lds(D) : 0);
}
// Loads tile kt into its buffer: cp.async copies with ASYNC (visible after a cp_async_wait and a
// __syncthreads), plain loads otherwise.
template <int D, bool ASYNC>
__device__ __forceinline__ void att2_kv_tile_start(__nv_bfloat16* KVs, const KVSource& src, int kt, int T) {
    __nv_bfloat16* K = att2_kv_buffer<D, ASYNC>(KVs, kt);
    if constexpr (ASYNC) {
        att2_load_tile_async<D>(K, src.k, src.k_rs, kt * ATT2_TILE, T);
        att2_load_v_tile_async<D>(K + ATT2_TILE * att2_lds(D), src, kt * ATT2_TILE, T);
    } else {
        att2_load_tile<D>(K, src.k, src.k_rs, kt * ATT2_TILE, T);
        att2_load_v_tile<D>(K + ATT2_TILE * att2_lds(D), src, kt * ATT2_TILE, T);
    }
}
// Step kt of the loop over tiles 0..last: tile kt in shared memory, visible to the whole block;
// returns its K. Version 2 loads it between two __syncthreads. Version 4 waits for its copies
// (started by the previous step, or for tile 0 before the loop), then starts tile kt + 1's into
// the other buffer, whose reader (tile kt - 1) every thread has finished by that __syncthreads.
template <int D, bool ASYNC>
__device__ __forceinline__ __nv_bfloat16* att2_kv_tile(__nv_bfloat16* KVs, const KVSource& src, int kt, int last, int T) {
    if constexpr (ASYNC) {
        cp_async_wait<0>();  // this thread's copies of tile kt (the only group in flight)
        __syncthreads();     // everyone's; and everyone is done with tile kt - 1, whose buffer is refilled next
        if (kt < last) {     // tile kt + 1 flies while tile kt is used
            att2_kv_tile_start<D, true>(KVs, src, kt + 1, T);
            cp_async_commit();
        }
    } else {
        __syncthreads();  // everyone is done with the previous K, V tiles
        att2_kv_tile_start<D, false>(KVs, src, kt, T);
        __syncthreads();
    }
    return att2_kv_buffer<D, ASYNC>(KVs, kt);
}

// The backward's two score products, for one warp: c1 = A1 B1^T and c2 = A2 B2^T, with A1, A2 the
// warp's 16 rows [a_row0, a_row0 + 16) of two shared tiles, B1, B2 the rows [b_row0, b_row0 + 16 NP)
// of two others, and k running over the D head dims. The dQ kernel computes S = Q K^T and
// dP = dO V^T with it; the dK/dV kernel the transposed S^T = K Q^T and dP^T = V dO^T.
template <int D, int NP>
__device__ __forceinline__ void att2_paired_products(float (&c1)[2 * NP][4], float (&c2)[2 * NP][4], const __nv_bfloat16* A1, const __nv_bfloat16* A2,
                                                     int a_row0, const __nv_bfloat16* B1, const __nv_bfloat16* B2, int b_row0, int lane) {
    constexpr int LDS = att2_lds(D);
#pragma unroll
    for (int j = 0; j < 2 * NP; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) c1[j][e] = c2[j][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
        uint32_t a1[4], a2[4];
        ldsm_x4(a1, frag_a_addr(A1, LDS, a_row0, ks * 16, lane));
        ldsm_x4(a2, frag_a_addr(A2, LDS, a_row0, ks * 16, lane));
#pragma unroll
        for (int np = 0; np < NP; np++) {
            uint32_t b1[4], b2[4];
            ldsm_x4(b1, frag_bt_addr(B1, LDS, b_row0 + np * 16, ks * 16, lane));
            ldsm_x4(b2, frag_bt_addr(B2, LDS, b_row0 + np * 16, ks * 16, lane));
            mma_bf16_16816(c1[2 * np], a1, b1[0], b1[1]);
            mma_bf16_16816(c1[2 * np + 1], a1, b1[2], b1[3]);
            mma_bf16_16816(c2[2 * np], a2, b2[0], b2[1]);
            mma_bf16_16816(c2[2 * np + 1], a2, b2[2], b2[3]);
        }
    }
}

// The forward's online softmax over one key tile, for the two query rows a thread holds (row and
// row + 8 of its warp's 16) in the mma.m16n8 C fragment layout, which wgmma's D fragment repeats:
// s[j][e] is key key0 + 8j + 2tq + (e & 1) of row + 8 (e >= 2). In: the raw scores. Out: P =
// exp2(s sl2 - m_new), with the causal mask applied where diag (keys past the row, and past T);
// the running max mrow (log2 units) and this thread's part of the row sums lrow updated, and the
// output accumulators o (ND blocks of 8 columns) rescaled by exp2(m_old - m_new). Versions 2, 4,
// 5 and 6 run this same code, so a row's softmax has the same bits in each, as long as the
// compiler rounds it the same way in each: nvcc may fuse a product and a following sum into one
// FMA (one rounding instead of two) wherever it sees fit, and it decided differently in different
// kernels (the forward's lse, below, 2026-11-28). The products here that a sum follows are
// therefore mul_unfused (kernels/common.cuh): s sl2 (then - m_new) and lrow corr (then + p).
template <int NT, int ND>
__device__ __forceinline__ void att_softmax_tile(float (&s)[NT][4], float (&o)[ND][4], float (&mrow)[2], float (&lrow)[2], int row, int key0,
                                                 bool diag, int T, int tq, float sl2) {
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = row + (e >= 2 ? 8 : 0), col = key0 + j * 8 + 2 * tq + (e & 1);
            float x = mul_unfused(s[j][e], sl2);  // not fused with exp2f's argument's "- m_new" below
            if (diag && (col > r || col >= T)) x = -INFINITY;
            s[j][e] = x;
            mx[e >> 1] = fmaxf(mx[e >> 1], x);
        }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        float m_new = fmaxf(mrow[r], mx[r]);  // finite: every row has a key <= itself in its first tile
        float corr = exp2f(mrow[r] - m_new);  // 0 on the first tile (mrow = -inf)
        mrow[r] = m_new;
        lrow[r] = mul_unfused(lrow[r], corr);  // not fused with the "+= p" below
#pragma unroll
        for (int j = 0; j < ND; j++) {
            o[j][2 * r] *= corr;
            o[j][2 * r + 1] *= corr;
        }
    }
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p = exp2f(s[j][e] - mrow[e >> 1]);
            s[j][e] = p;
            lrow[e >> 1] += p;  // this thread's part of the row sum; the quad is summed at the end
        }
}

// P of 16 keys (blocks 2kk and 2kk + 1 of att_softmax_tile's s) as the bf16 A fragment of O += P V:
// the C layout of two 8-key blocks is the A layout of one k16 step.
template <int NT>
__device__ __forceinline__ void att_p_fragment(uint32_t (&pa)[4], const float (&s)[NT][4], int kk) {
    pa[0] = pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
    pa[1] = pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
    pa[2] = pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[3] = pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// The forward's end for a thread's two rows (row, row + 8): the quad's row sums, O / l to out as
// bf16 pairs, the lse (natural log) from lane tq == 0; rows past T are not written. The lse is
// one explicit fmaf(m, ln 2, log l): written as m ln 2 + log l, nvcc fused it in version 5's
// second m-tile and not in version 4 (PTX: fma.rn.f32 against mul.f32 then add.f32), and the two
// versions' lse differed in the last bit on an H200 (dev/results/2026-11-28-h200.md).
template <int D>
__device__ __forceinline__ void att_forward_store_rows(const float (&o)[D / 8][4], const float (&mrow)[2], float (&lrow)[2], int row, int tq,
                                                       const AttentionArgs& a, int b, int h) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 1);
        lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int rr = row + 8 * r;
        if (rr >= a.T) continue;
        float inv = 1.0f / lrow[r];
        __nv_bfloat16* ob = a.out + ((size_t)b * a.T + rr) * a.H * D + (size_t)h * D;
#pragma unroll
        for (int j = 0; j < D / 8; j++) *reinterpret_cast<uint32_t*>(ob + j * 8 + 2 * tq) = pack_bf16x2(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
        if (tq == 0) a.lse[((size_t)b * a.H + h) * a.T + rr] = fmaf(mrow[r], LN2, logf(lrow[r]));
    }
}

// Version 2 (ASYNC = false): the K/V tile is loaded, then used, with the block waiting on the
// loads. Version 4 (ASYNC = true): two K/V buffers; while tile kt is used, tile kt + 1 is already
// on its way into the other buffer as cp.async copies. The math is the same code: same bits.
// MT: m-tiles of 16 query rows per warp. MT = 1 (versions 2 and 4): the block's 4 warps own 64
// rows. MT = 2 (version 5, with ASYNC): 128 rows per block, warp w owning rows 16w.. and
// 64 + 16w.. of it, so that every K and V fragment a warp reads from shared memory feeds two mma
// instead of one (half the ldmatrix per mma; FlashAttention-2 gives each warp more rows for the
// same reason). Each row meets the same key tiles in the same order through the same code: the
// same bits as version 4. An m-tile whose rows all precede a key tile skips it (only the block's
// last key tile, for its first 64 rows): its scores would all be -inf and change nothing.
// Shared memory: Q (64 MT rows), then K and V once (version 2) or twice (versions 4, 5), each
// ATT2_TILE x LDS bf16.
// Pro: which query tile, batch and head the block takes, and what it does first. AttNoPrologue
// (every path's forward): att_query_block, the same code as without the parameter. Depth's fused
// forward (kernels/depth_attention.cuh) passes its own: it takes the block's work by ticket and
// first makes the V rows that other blocks will read (pro.block<D>(a, the dynamic shared memory),
// which returns with the block synchronised and the shared memory free).
template <int D, bool ASYNC, int MT, class Pro>
static __global__ void __launch_bounds__(ATT2_THREADS) attention_forward_kernel2(AttentionArgs a, Pro pro) {
    constexpr int LDS = att2_lds(D), NT = ATT2_TILE / 8, QTILE = MT * ATT2_TILE;  // NT: n-tiles of 8 keys per tile
    extern __shared__ __align__(16) unsigned char smem2[];
    __nv_bfloat16* Qs = reinterpret_cast<__nv_bfloat16*>(smem2);
    __nv_bfloat16* KVs = Qs + QTILE * LDS;  // buffer i: K at KVs + 2i TILE LDS, V after it
    const auto [qt, b, h, g] = pro.template block<D>(a, smem2);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;
    const float sl2 = LOG2E / sqrtf((float)D);  // scores in log2 units: exp(x) = exp2(x * log2 e)
    KVSource src = attn_kv_source(a, b, g);
    const __nv_bfloat16* qsrc = a.q + (size_t)b * a.T * a.q_rs + (size_t)h * D;
    static_assert(MT == 1 || MT == 2, "m-tiles per warp: 1 (versions 2, 4) or 2 (version 5)");
    // key tiles 0..last: through the block's last row (and not past T). At MT = 1 (versions 2 and
    // 4) last = qt, every m-tile live and diag = (kt == qt), each said so at compile time. At MT = 2
    // the block's first 64 rows (every warp's m-tile 0) precede key tile 2 qt + 1, which only its
    // last 64 reach: the loop runs tiles 0..all_last (at most 2 qt) on both m-tiles, and tile 2 qt
    // + 1, where T reaches it, after the loop on m-tile 1 alone. A per-m-tile test inside the loop
    // instead left every mma predicated (cuobjdump): version 4's forward so built, when it shared
    // that test, took 11.1 ms a GPT-2 step under ncu against 8.7 without it (H100, 2026-11-27
    // against 2026-11-26); without it, 127 registers at D = 64 and no predicated mma.
    const int last = MT == 1 ? qt : min(2 * qt + 1, (a.T - 1) / ATT2_TILE);
    const int all_last = MT == 1 ? qt : min(last, 2 * qt);

    uint32_t qf[MT][D / 16][4];  // this warp's query rows as A fragments, per m-tile
    if constexpr (ASYNC) {  // Q and the first K/V tile: group 0, waited for at the top of the loop
        att2_load_tile_async<D, QTILE>(Qs, qsrc, a.q_rs, qt * QTILE, a.T);
        att2_kv_tile_start<D, true>(KVs, src, 0, a.T);
        cp_async_commit();
    } else {
        att2_load_tile<D, QTILE>(Qs, qsrc, a.q_rs, qt * QTILE, a.T);
        __syncthreads();
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++) ldsm_x4(qf[m][ks], frag_a_addr(Qs, LDS, m * ATT2_TILE + warp * 16, ks * 16, lane));
    }

    float o[MT][D / 8][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int j = 0; j < D / 8; j++) o[m][j][0] = o[m][j][1] = o[m][j][2] = o[m][j][3] = 0.0f;
    float mrow[MT][2], lrow[MT][2];  // per m-tile, rows gr and gr+8 of the warp's 16
#pragma unroll
    for (int m = 0; m < MT; m++) mrow[m][0] = mrow[m][1] = -INFINITY, lrow[m][0] = lrow[m][1] = 0.0f;
    int row = qt * QTILE + warp * 16 + gr;  // m-tile m's rows: row + m ATT2_TILE (+ 8)

    // One key tile on m-tiles FIRST..MT-1 (FIRST = 1: m-tile 0's rows all precede the tile). qt
    // by value: a lambda may capture a structured binding only from C++20 on.
    auto key_tile = [&, qt = qt](int kt, auto first) {
        constexpr int FIRST = decltype(first)::value;
        const __nv_bfloat16* Ks = att2_kv_tile<D, ASYNC>(KVs, src, kt, last, a.T);
        const __nv_bfloat16* Vs = Ks + ATT2_TILE * LDS;
        if (ASYNC && kt == 0) {  // Q arrived with tile 0
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int ks = 0; ks < D / 16; ks++) ldsm_x4(qf[m][ks], frag_a_addr(Qs, LDS, m * ATT2_TILE + warp * 16, ks * 16, lane));
        }
        bool diag = MT == 1 ? kt == qt : kt >= qt * MT;  // a key tile that overlaps the block's rows: the causal mask applies
        // S = Q K^T  (16 rows x 64 keys per m-tile)
        float s[MT][NT][4];
#pragma unroll
        for (int m = FIRST; m < MT; m++)
#pragma unroll
            for (int j = 0; j < NT; j++) s[m][j][0] = s[m][j][1] = s[m][j][2] = s[m][j][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++)
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                uint32_t kf[4];
                ldsm_x4(kf, frag_bt_addr(Ks, LDS, np * 16, ks * 16, lane));
#pragma unroll
                for (int m = FIRST; m < MT; m++) {
                    mma_bf16_16816(s[m][2 * np], qf[m][ks], kf[0], kf[1]);
                    mma_bf16_16816(s[m][2 * np + 1], qf[m][ks], kf[2], kf[3]);
                }
            }
#pragma unroll
        for (int m = FIRST; m < MT; m++)  // causal mask (only key tiles overlapping the block's rows), running max and sum
            att_softmax_tile<NT, D / 8>(s[m], o[m], mrow[m], lrow[m], row + m * ATT2_TILE, kt * ATT2_TILE, diag, a.T, tq, sl2);
        // O += P V: P from registers (C layout of two n-tiles = A layout of one k-step)
#pragma unroll
        for (int kk = 0; kk < NT / 2; kk++) {
            uint32_t pa[MT][4];
#pragma unroll
            for (int m = FIRST; m < MT; m++) att_p_fragment<NT>(pa[m], s[m], kk);
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t vf[4];
                ldsm_x4_trans(vf, frag_b_trans_addr(Vs, LDS, kk * 16, dp * 16, lane));
#pragma unroll
                for (int m = FIRST; m < MT; m++) {
                    mma_bf16_16816(o[m][2 * dp], pa[m], vf[0], vf[1]);
                    mma_bf16_16816(o[m][2 * dp + 1], pa[m], vf[2], vf[3]);
                }
            }
        }
    };
    for (int kt = 0; kt <= all_last; kt++) key_tile(kt, std::integral_constant<int, 0>());
    if constexpr (MT == 2)
        if (last > all_last) key_tile(last, std::integral_constant<int, 1>());
#pragma unroll
    for (int m = 0; m < MT; m++) att_forward_store_rows<D>(o[m], mrow[m], lrow[m], row + m * ATT2_TILE, tq, a, b, h);
}

// Version 6 (forward, D = 64, sm_90a): version 4's tiling and math on Hopper's warpgroup MMA
// (kernels/wgmma.cuh) instead of mma.sync. A block is two warpgroups of 64 query rows (128 rows);
// each key tile of 64 is S = Q K^T as 4 wgmma.m64n64k16 with Q and K read by the tensor core from
// shared memory (no ldmatrix, no Q fragments held in registers), the online softmax in registers as
// in version 4, then O += P V as 4 more with P from registers (the accumulators of S packed to
// bf16 are the A fragments, as before) and V read MN-major from the same tile layout. K/V tiles are
// double buffered by cp.async as in version 4, into 128-byte-swizzled rows (sw128_offset) that
// the descriptors describe. A warpgroup whose rows all precede a key tile skips it (the block's
// last tile, for its first 64 rows). Each row meets the same keys in the same order with the same
// fp32 softmax code as version 4; only the tensor core's own summation inside a k16 step may
// differ (the emulator sums k in order for both, so there versions 4 and 6 give the same bits).
// Shared memory: Q (128 rows), then two buffers of K and V (64 rows each), rows of 128 bytes, on a
// 1024-byte boundary of the shared window (the launcher adds 1 KiB to align the start).
// The FLOP rate this aims at: the mma.sync version ran about 140 TFLOP/s on an H100 (docs/gpu.md).
constexpr int ATT6_WARPGROUPS = 2;
constexpr int ATT6_THREADS = 128 * ATT6_WARPGROUPS;
constexpr int ATT6_QROWS = 64 * ATT6_WARPGROUPS;  // query rows per block
constexpr int ATT6_KTILE = 64;                    // keys per tile
constexpr int ATT6_ROW_BYTES = 128;               // a row of 64 bf16
inline size_t att6_smem_forward() { return (size_t)(ATT6_QROWS + 4 * ATT6_KTILE) * ATT6_ROW_BYTES + SW128_ALIGN_SLACK; }

// rows [row0, row0 + ROWS) of a strided bf16 source (64 columns) -> a swizzled tile, by cp.async;
// zeros past T. Not unrolled, for the reason att2_load_tile_async gives.
template <int ROWS, int THREADS>
__device__ __forceinline__ void att6_load_tile_async(unsigned char* dst, const __nv_bfloat16* src, long rs, int row0, int T) {
#pragma unroll 1
    for (int c = threadIdx.x; c < ROWS * 8; c += THREADS) {
        int r = c / 8, cc = c % 8, row = row0 + r;
        bool inside = row < T;
        cp_async16(dst + sw128_offset(r, cc), inside ? src + (size_t)row * rs + cc * 8 : src, inside ? 16 : 0);
    }
}
// ResFormer's mixed V rows (att2_mix8) -> a swizzled tile, by plain stores
template <int THREADS>
__device__ __forceinline__ void att6_load_v_tile_mixed(unsigned char* dst, const KVSource& s, int row0, int T) {
    for (int c = threadIdx.x; c < ATT6_KTILE * 8; c += THREADS) {
        int r = c / 8, cc = c % 8, row = row0 + r;
        uint4 out = make_uint4(0, 0, 0, 0);
        if (row < T)
            out = att2_mix8(*reinterpret_cast<const uint4*>(s.v + (size_t)row * s.v_rs + cc * 8),
                            *reinterpret_cast<const uint4*>(s.vmix + (size_t)row * s.vmix_rs + cc * 8), s.lambda);
        *reinterpret_cast<uint4*>(dst + sw128_offset(r, cc)) = out;
    }
}
// Starts key tile kt's K and V into K and the 64 rows after it, with THREADS threads.
template <int THREADS>
__device__ __forceinline__ void att6_load_kv_tiles(unsigned char* K, const KVSource& src, int kt, int T) {
    att6_load_tile_async<ATT6_KTILE, THREADS>(K, src.k, src.k_rs, kt * ATT6_KTILE, T);
    if (src.vmix) att6_load_v_tile_mixed<THREADS>(K + ATT6_KTILE * ATT6_ROW_BYTES, src, kt * ATT6_KTILE, T);
    else att6_load_tile_async<ATT6_KTILE, THREADS>(K + ATT6_KTILE * ATT6_ROW_BYTES, src.v, src.v_rs, kt * ATT6_KTILE, T);
}
// The same into buffer kt % 2 of KVs (the loops over key tiles).
template <int THREADS>
__device__ __forceinline__ void att6_kv_tile_start(unsigned char* KVs, const KVSource& src, int kt, int T) {
    att6_load_kv_tiles<THREADS>(KVs + (kt & 1) * 2 * ATT6_KTILE * ATT6_ROW_BYTES, src, kt, T);
}

// The top of key tile kt's step: this thread's copies of tile kt (and of the tiles that came with
// tile 0) landed, its writes fenced for the tensor core's reads (the async proxy), the block
// synchronised (so every warpgroup is also done with tile kt - 1's buffer), and tile kt + 1
// started into that buffer.
template <int THREADS>
__device__ __forceinline__ void att6_tile_step(unsigned char* KVs, const KVSource& src, int kt, int last, int T) {
    cp_async_wait<0>();
    fence_proxy_async_shared();
    __syncthreads();
    if (kt < last) {
        att6_kv_tile_start<THREADS>(KVs, src, kt + 1, T);
        cp_async_commit();
    }
}
// Issues acc (64 x 64) = A B^T over D = 64 (4 k16 steps) with A (the warpgroup's 64 rows) and B
// (64 rows) both K-major in swizzled tiles at window addresses a_addr and b_addr; the caller
// fences before and commits and waits after.
__device__ __forceinline__ void att6_issue_rows_dot_rows(float (&acc)[8][4], uint32_t a_addr, uint32_t b_addr) {
#pragma unroll
    for (int ks = 0; ks < 4; ks++) wgmma_m64n64k16_ss(acc, wgmma_desc_sw128(a_addr + 32 * ks, 16, 1024), wgmma_desc_sw128(b_addr + 32 * ks, 16, 1024), ks > 0);
}
// The same with A (the warp's 16 rows, all 64 columns) from registers: frags as
// sw128_a_fragments reads them (version 7).
__device__ __forceinline__ void att6_issue_frags_dot_rows(float (&acc)[8][4], const uint32_t (&frags)[4][4], uint32_t b_addr) {
#pragma unroll
    for (int ks = 0; ks < 4; ks++) wgmma_m64n64k16_rs(acc, frags[ks], wgmma_desc_sw128(b_addr + 32 * ks, 16, 1024), ks > 0);
}
// acc (64 x 64) += P B: P the warpgroup's 64 rows x 64 keys in the score fragments (rounded to
// bf16 as A fragments), B a 64-key tile read MN-major at window address b_addr (16 keys, 2048
// bytes, a k step). Waited for.
template <int NT>
__device__ __forceinline__ void att6_rows_times_tile(float (&acc)[8][4], const float (&p)[NT][4], uint32_t b_addr) {
    uint32_t pa[NT / 2][4];
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) att_p_fragment<NT>(pa[kk], p, kk);
    wgmma_fence_operand(acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) wgmma_m64n64k16_rs_mn(acc, pa[kk], wgmma_desc_sw128(b_addr + 2048 * kk, 16, 1024), 1);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operand(acc);
}

template <int D, bool Q_FRAGS>
static __global__ void __launch_bounds__(ATT6_THREADS, 2) attention_forward_kernel6(AttentionArgs a) {
    static_assert(D == 64, "version 6: rows of 64 bf16, one 128-byte swizzle atom wide");
    constexpr int NT = ATT6_KTILE / 8;  // 8-key blocks of a tile
    extern __shared__ __align__(16) unsigned char smem6[];
    unsigned char* Qs = sw128_align(smem6);
    unsigned char* KVs = Qs + ATT6_QROWS * ATT6_ROW_BYTES;
    const auto [qt, b, h, g] = att_query_block(a);
    int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;
    const float sl2 = LOG2E / sqrtf((float)D);
    KVSource src = attn_kv_source(a, b, g);
    const __nv_bfloat16* qsrc = a.q + (size_t)b * a.T * a.q_rs + (size_t)h * D;
    int q0 = qt * ATT6_QROWS;
    int last = min((q0 + ATT6_QROWS - 1) / ATT6_KTILE, (a.T - 1) / ATT6_KTILE);  // the block's key tiles 0..last
    int wg_last = min((q0 + 64 * wg + 63) / ATT6_KTILE, last);                    // this warpgroup's
    // group 0: Q and key tile 0, waited for at the top of the loop
    att6_load_tile_async<ATT6_QROWS, ATT6_THREADS>(Qs, qsrc, a.q_rs, q0, a.T);
    if constexpr (Q_FRAGS) cp_async_commit();  // Q a group of its own
    att6_kv_tile_start<ATT6_THREADS>(KVs, src, 0, a.T);
    cp_async_commit();
    const uint32_t q_addr = smem_window_address(Qs + wg * 64 * ATT6_ROW_BYTES);  // this warpgroup's 64 rows
    // Q_FRAGS (version 7): the warp's 16 query rows as A fragments, read once, for every key
    // tile's S (the tensor core then reads only K and V from shared memory)
    // Q_FRAGS: the K/V source's pointers and strides (13 registers) kept in shared memory and read
    // as each tile's copies start, for the 16 registers of the fragments (with them in registers
    // too ptxas spilled)
    uint32_t qf[Q_FRAGS ? 4 : 1][4];
    __shared__ KVSource src_shared[1];
    if constexpr (Q_FRAGS) {
        if (threadIdx.x == 0) src_shared[0] = src;
        cp_async_wait<1>();  // this thread's Q copies (key tile 0's may still be in flight)
        __syncthreads();
        sw128_a_fragments(qf, Qs + wg * 64 * ATT6_ROW_BYTES, warp, gr, tq);
    }

    float o[D / 8][4], s[NT][4];  // D fragments (kernels/wgmma.cuh): [j][2r + c] = row + 8r, column 8j + 2tq + c
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[j][e] = s[j][e] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};  // rows gr and gr + 8 of the warp's 16
    int row = q0 + 64 * wg + 16 * warp + gr;

    for (int kt = 0; kt <= last; kt++) {
        if constexpr (Q_FRAGS) att6_tile_step<ATT6_THREADS>(KVs, src_shared[0], kt, last, a.T);
        else att6_tile_step<ATT6_THREADS>(KVs, src, kt, last, a.T);
        if (kt > wg_last) continue;  // the same for the whole warpgroup
        const uint32_t k_addr = smem_window_address(KVs + (kt & 1) * 2 * ATT6_KTILE * ATT6_ROW_BYTES), v_addr = k_addr + ATT6_KTILE * ATT6_ROW_BYTES;
        // S = Q K^T
        wgmma_fence_operand(s);
        wgmma_fence();
        if constexpr (Q_FRAGS) att6_issue_frags_dot_rows(s, qf, k_addr);
        else att6_issue_rows_dot_rows(s, q_addr, k_addr);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operand(s);
        // a tile reaching past the warpgroup's first row has masked entries
        bool diag = kt * ATT6_KTILE + ATT6_KTILE - 1 > q0 + 64 * wg;
        att_softmax_tile<NT, D / 8>(s, o, mrow, lrow, row, kt * ATT6_KTILE, diag, a.T, tq, sl2);
        att6_rows_times_tile<NT>(o, s, v_addr);  // O += P V
    }
    att_forward_store_rows<D>(o, mrow, lrow, row, tq, a, b, h);
}

// Pieces of the dK/dV kernels (versions 2-4 and 6), which share their block shape: 4 warps of 16
// keys (one warpgroup), one block per (b, KV head g, 64-key tile), a loop over the (query head h,
// query tile qt) pairs of the group, and each pair's lse and delta rows in shared memory.
//
// Batch b's rows of q, dO, lse and delta: the 64-bit addresses that every pair's loads start from,
// kept in shared memory (batch_rows[4], filled by att_dkdv_batch_rows_init before a
// __syncthreads) and read through a volatile reference at each use so that they do not occupy
// registers across the loop. In registers, ptxas (at 128, for 4 blocks per SM) spilled them to
// local memory, and their reloads, from L2 (shared memory leaves L1 little room), stalled each
// tile's prefetch: ncu on an H100 (dev/results/2026-11-27-h100-3.md).
__device__ __forceinline__ void att_dkdv_batch_rows_init(uintptr_t* batch_rows, const AttentionArgs& a, int b, int D) {
    if (threadIdx.x == 0) {
        batch_rows[0] = reinterpret_cast<uintptr_t>(a.q + (size_t)b * a.T * a.q_rs);
        batch_rows[1] = reinterpret_cast<uintptr_t>(a.dout + (size_t)b * a.T * a.H * D);
        batch_rows[2] = reinterpret_cast<uintptr_t>(a.lse + (size_t)b * a.H * a.T);
        batch_rows[3] = reinterpret_cast<uintptr_t>(a.delta + (size_t)b * a.H * a.T);
    }
}
__device__ __forceinline__ const void* att_dkdv_batch_row(const uintptr_t* batch_rows, int i) {
    return reinterpret_cast<const void*>(*reinterpret_cast<const volatile uintptr_t*>(&batch_rows[i]));
}
// Query head h's column of batch b's q (i = 0) or dO (i = 1) rows.
__device__ __forceinline__ const __nv_bfloat16* att_dkdv_head_rows(const uintptr_t* batch_rows, int i, int h, int D) {
    return reinterpret_cast<const __nv_bfloat16*>(att_dkdv_batch_row(batch_rows, i)) + (size_t)h * D;
}
// Pair (h, qt)'s lse and delta rows into buffer buf of lse_all / delta_all (64 floats per
// buffer): threads 0..63 copy lse (row threadIdx.x), 64..127 delta. ASYNC: as 4-byte cp.async
// copies in the caller's group; otherwise plain loads. Rows past T: nothing is read and the word
// is zero (delta = 0; att_dkdv_lse_landed makes lse inf).
template <bool ASYNC>
__device__ __forceinline__ void att_dkdv_lse_delta_start(float* lse_all, float* delta_all, const uintptr_t* batch_rows, int h, int qt, int buf, int T) {
    static_assert(ATT2_THREADS == 2 * ATT2_TILE, "a thread per row of lse, one per row of delta");
    int r = threadIdx.x % ATT2_TILE, qrow = qt * ATT2_TILE + r;
    bool is_lse = threadIdx.x < ATT2_TILE, inside = qrow < T;
    const float* row = reinterpret_cast<const float*>(att_dkdv_batch_row(batch_rows, is_lse ? 2 : 3)) + (size_t)h * T;
    float* dst = (is_lse ? lse_all : delta_all) + buf * ATT2_TILE + r;
    if constexpr (ASYNC) cp_async4(dst, inside ? row + qrow : row, inside ? 4 : 0);
    else *dst = inside ? row[qrow] : 0.0f;
}
// After the copies of pair (h, qt) landed (ASYNC: this thread's wait) and before the
// __syncthreads that shows them: each lse thread turns its own word into log2 units, P = 0 past T.
__device__ __forceinline__ void att_dkdv_lse_landed(float* lse_all, int qt, int buf, int T) {
    if (threadIdx.x < ATT2_TILE) {
        float* w = lse_all + buf * ATT2_TILE + threadIdx.x;
        *w = qt * ATT2_TILE + (int)threadIdx.x < T ? *w * LOG2E : INFINITY;
    }
}
// The transposed probabilities and score gradients of a thread's two keys (key, key + 8) against
// NJ blocks of 8 queries from block qb0 of the pair's tile, in the C/D fragment layout (see
// att_softmax_tile, rows = keys): query column ql = 8 (qb0 + j) + 2tq + (e & 1) of the tile (row
// qrow0 + ql). In: pt = S^T (raw scores), dpt = dP^T. Out: pt = P^T = exp2(S^T sl2 - lse2) with
// the causal mask (query >= key), dpt = dS^T = P^T (dP^T - delta); lse_s, delta_s: the tile's rows
// (log2 units, inf past T). The column is written (qb0 + j) * 8, as version 4 had it inline: as
// ql0 + 8j (the same value), ptxas spilled 16 bytes instead of 8 in version 4's kernel.
template <int NJ>
__device__ __forceinline__ void att_dkdv_p_ds_tile(float (&pt)[NJ][4], float (&dpt)[NJ][4], int key, int qb0, int qrow0, const float* lse_s,
                                                   const float* delta_s, int tq, float sl2) {
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int kr = key + (e >= 2 ? 8 : 0), ql = (qb0 + j) * 8 + 2 * tq + (e & 1), qrow = qrow0 + ql;
            // one explicit FMA, as ptxas may or may not fuse s sl2 - lse per kernel (att_softmax_tile)
            float p = qrow >= kr ? exp2f(fmaf(pt[j][e], sl2, -lse_s[ql])) : 0.0f;  // qrow >= T: lse = inf -> 0
            pt[j][e] = p;
            dpt[j][e] = p * (dpt[j][e] - delta_s[ql]);
        }
}

// The dK/dV kernels' write-out for a thread's two keys (key, key + 8), dk (unscaled) and dv in the
// C/D fragment layout: own slots, value-path routes, and (ResFormer learn) the block's share of
// dlambda, which takes the whole block (block_sum).
// Element by element: each route load waits for the store before it. Tried on an H100
// (2026-11-27, dev/results/2026-11-27-h100-3.md) and reverted: loading a row's route inputs as
// float pairs, 4 column pairs at a time, before the first store. ResFormer's step took 1.05x
// as long (this kernel 2.9 ms a launch against 1.7, ncu), not in the epilogue: the extra
// registers moved spills into the loop over query tiles. One pair at a time: 1.006x.
template <int D>
__device__ __forceinline__ void att_dkdv_store_rows(const float (&dk)[D / 8][4], const float (&dv)[D / 8][4], int key, int tq, float scale,
                                                    const AttentionArgs& a, const KVSource& src, int b, int g) {
    float v_own, v_src;
    attn_dv_scales(a, src, &v_own, &v_src);
    float dlam = 0.0f;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int kr = key + 8 * r;
        if (kr >= a.T) continue;
        size_t row = (size_t)b * a.T + kr, acc = row * a.Hkv * D + (size_t)g * D;
        __nv_bfloat16* dkb = a.dk + row * a.dk_rs + (size_t)g * D;
        __nv_bfloat16* dvb = a.dv ? a.dv + row * a.dv_rs + (size_t)g * D : nullptr;
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            int d = j * 8 + 2 * tq;
            float gv0 = dv[j][2 * r], gv1 = dv[j][2 * r + 1];
            // dk scale: unfused, as every product this write-out adds to something (attn_route_grad)
            float k0 = attn_route_grad(a.dk_route, g, acc + d, mul_unfused(dk[j][2 * r], scale), a.dk_route.own_scale, a.dk_route.src_scale);
            float k1 = attn_route_grad(a.dk_route, g, acc + d + 1, mul_unfused(dk[j][2 * r + 1], scale), a.dk_route.own_scale, a.dk_route.src_scale);
            float v0 = attn_route_grad(a.dv_route, g, acc + d, gv0, v_own, v_src);
            float v1 = attn_route_grad(a.dv_route, g, acc + d + 1, gv1, v_own, v_src);
            if (a.dlambda_partial) {
                const __nv_bfloat16* vr = src.v + (size_t)kr * src.v_rs + d;
                const __nv_bfloat16* mr = src.vmix + (size_t)kr * src.vmix_rs + d;
                dlam += gv0 * (__bfloat162float(mr[0]) - __bfloat162float(vr[0])) + gv1 * (__bfloat162float(mr[1]) - __bfloat162float(vr[1]));
            }
            if (a.accumulate_dkv) {
                k0 += __bfloat162float(dkb[d]);
                k1 += __bfloat162float(dkb[d + 1]);
            }
            *reinterpret_cast<uint32_t*>(dkb + d) = pack_bf16x2(k0, k1);
            if (dvb) {
                if (a.accumulate_dkv) {
                    v0 += __bfloat162float(dvb[d]);
                    v1 += __bfloat162float(dvb[d + 1]);
                }
                *reinterpret_cast<uint32_t*>(dvb + d) = pack_bf16x2(v0, v1);
            }
        }
    }
    if (attn_route_keeps(a.dv_route, g)) {  // the source's terms (KVGradRoute::keep), after the own slots
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int kr = key + 8 * r;
            if (kr >= a.T) continue;
            __nv_bfloat16* kb = a.dv_route.keep + ((size_t)b * a.T + kr) * a.Hkv * D + (size_t)g * D;
#pragma unroll
            for (int j = 0; j < D / 8; j++)
                *reinterpret_cast<uint32_t*>(kb + j * 8 + 2 * tq) = pack_bf16x2(v_src * dv[j][2 * r], v_src * dv[j][2 * r + 1]);
        }
    }
    if (a.dlambda_partial) {
        float t = block_sum(dlam);  // fixed tree: deterministic
        if (threadIdx.x == 0) a.dlambda_partial[blockIdx.y * gridDim.x + blockIdx.x] = t;
    }
}

// dK, dV: block = (b, KV head g, 64-key tile), 4 warps x 16 keys; loops over the G query heads of
// the group and the query tiles at or after the key tile. Computes transposed scores S^T (keys x
// queries) so that P^T and dS^T come out in the C layout that is the A operand of dV += P^T dO and
// dK += dS^T Q. Each query tile is taken QSTEP queries at a time (64: version 2, one pass; 16:
// version 3), see below. ASYNC (version 4 = version 3 + this): the Q/dO tiles are double
// buffered, the next one arriving by cp.async while the current one is used, as in the forward.
// Shared memory: K, V (ATT2_TILE x LDS bf16 each), then per buffer Q and dO tiles, then per
// buffer the tile's lse (log2 units) and delta (ATT2_TILE floats each).
// Epi: what the block does after its rows are stored. AttNoEpilogue (every path's attention
// backward): nothing, the same code as without the parameter. A value path with per-row work on
// the gradients this block alone owns passes its own (Depth-Attention's fused depth backward,
// kernels/depth_attention.cuh): after a __syncthreads (the block's stores visible to all its
// threads, the shared tiles free), epi.run<D>(a, b, g, first key row, the dynamic shared memory).
// STORE_DS (dQ version 8): each pair's dS^T, the bf16 A fragments of dK += dS^T Q, also goes to
// its tile of a.ds (attention_ds_tile), for attention_backward_dq_kernel8.
template <int D, int QSTEP, bool ASYNC, class Epi, bool STORE_DS = false>
static __global__ void ATT2_BWD_LAUNCH_BOUNDS attention_backward_dkdv_kernel2(AttentionArgs a, Epi epi) {
    static_assert(QSTEP % 16 == 0 && ATT2_TILE % QSTEP == 0, "QSTEP: whole mma k-steps that tile the query tile");
    static_assert(ATT2_THREADS >= ATT2_TILE, "one thread per query row loads lse and delta");
    constexpr int LDS = att2_lds(D), NT = ATT2_TILE / 8, NBUF = ASYNC ? 2 : 1;
    extern __shared__ __align__(16) unsigned char smem2[];
    __nv_bfloat16* Ks = reinterpret_cast<__nv_bfloat16*>(smem2);
    __nv_bfloat16* Vs = Ks + ATT2_TILE * LDS;
    __nv_bfloat16* QdOs = Vs + ATT2_TILE * LDS;  // buffer i: Q at QdOs + 2i TILE LDS, dO after it
    float* lse_all = reinterpret_cast<float*>(QdOs + 2 * NBUF * ATT2_TILE * LDS);  // buffer i at + i TILE
    float* delta_all = lse_all + NBUF * ATT2_TILE;
    int G = a.H / a.Hkv, ng = (a.h1 - a.h0) / G;
    int kt = blockIdx.x, b = blockIdx.y / ng, g = a.h0 / G + blockIdx.y % ng;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;
    int nqt = CEIL_DIV(a.T, ATT2_TILE);
    const float scale = 1.0f / sqrtf((float)D), sl2 = LOG2E * scale;
    // the (query head h, query tile qt) pairs in order: heads of the group outer, tiles kt.. inner;
    // the pair after (h, qt) is (h, qt + 1), or (h + 1, kt) after the last tile (next_pair)
    int n_iter = G * (nqt - kt);
    __shared__ uintptr_t batch_rows[4];  // see att_dkdv_batch_rows_init
    att_dkdv_batch_rows_init(batch_rows, a, b, D);
    __syncthreads();
    auto q_of = [&](int h) { return att_dkdv_head_rows(batch_rows, 0, h, D); };
    auto dout_of = [&](int h) { return att_dkdv_head_rows(batch_rows, 1, h, D); };
    auto next_pair = [&](int& h, int& qt) {
        if (++qt == nqt) qt = kt, h++;
    };
    int h = g * G, qt = kt;  // the pair of iteration it (h_next, qt_next: of it + 1)

    KVSource src = attn_kv_source(a, b, g);
    if constexpr (ASYNC) {  // K, V and the first Q/dO tile with its lse and delta: group 0
        att2_load_tile_async<D>(Ks, src.k, src.k_rs, kt * ATT2_TILE, a.T);
        att2_load_v_tile_async<D>(Vs, src, kt * ATT2_TILE, a.T);
        att2_load_tile_async<D>(QdOs, q_of(h), a.q_rs, qt * ATT2_TILE, a.T);
        att2_load_tile_async<D>(QdOs + ATT2_TILE * LDS, dout_of(h), (long)a.H * D, qt * ATT2_TILE, a.T);
        att_dkdv_lse_delta_start<ASYNC>(lse_all, delta_all, batch_rows, h, qt, 0, a.T);
        cp_async_commit();
    } else {
        att2_load_tile<D>(Ks, src.k, src.k_rs, kt * ATT2_TILE, a.T);
        att2_load_v_tile<D>(Vs, src, kt * ATT2_TILE, a.T);
    }
    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[j][e] = dv[j][e] = 0.0f;
    int key = kt * ATT2_TILE + warp * 16 + gr;  // this thread's keys: key, key + 8

    for (int it = 0; it < n_iter; it++) {
        int buf = ASYNC ? it & 1 : 0, h_next = h, qt_next = qt;
        next_pair(h_next, qt_next);
        __nv_bfloat16* Qs = QdOs + 2 * buf * ATT2_TILE * LDS;
        __nv_bfloat16* dOs = Qs + ATT2_TILE * LDS;
        float* lse_s = lse_all + buf * ATT2_TILE;
        float* delta_s = delta_all + buf * ATT2_TILE;
        bool prefetch = ASYNC && it + 1 < n_iter;
        if constexpr (ASYNC) {
            cp_async_wait<0>();  // this thread's copies of pair it (the only group in flight)
            att_dkdv_lse_landed(lse_all, qt, buf, a.T);
            __syncthreads();     // everyone's; and everyone is done with pair it - 1's buffer, refilled next
            if (prefetch) {
                __nv_bfloat16* Qn = QdOs + 2 * (buf ^ 1) * ATT2_TILE * LDS;
                att2_load_tile_async<D>(Qn, q_of(h_next), a.q_rs, qt_next * ATT2_TILE, a.T);
                att2_load_tile_async<D>(Qn + ATT2_TILE * LDS, dout_of(h_next), (long)a.H * D, qt_next * ATT2_TILE, a.T);
                att_dkdv_lse_delta_start<ASYNC>(lse_all, delta_all, batch_rows, h_next, qt_next, buf ^ 1, a.T);
                cp_async_commit();
            }
        } else {
            __syncthreads();
            att2_load_tile<D>(Qs, q_of(h), a.q_rs, qt * ATT2_TILE, a.T);
            att2_load_tile<D>(dOs, dout_of(h), (long)a.H * D, qt * ATT2_TILE, a.T);
            att_dkdv_lse_delta_start<ASYNC>(lse_all, delta_all, batch_rows, h, qt, buf, a.T);
            att_dkdv_lse_landed(lse_all, qt, buf, a.T);
            __syncthreads();
        }
        // Per group of QSTEP queries (NPG steps of 16), all in registers:
        //   S^T = K Q^T, P^T = exp(S^T - lse) with the causal mask (query >= key),
        //   dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - delta), dK += dS^T Q.
        // Why groups: the dK and dV accumulators of 16 keys x D take D fp32 registers per
        // thread; P^T and dP^T of all 64 queries add 32 more, and with them D = 128 spills and
        // D = 64 needs 168 registers (3 blocks per SM). With QSTEP = 16 they add 8: D = 64 takes
        // 128 (4 blocks per SM) and D = 128 246, without spills (nvcc 13.0, sm_90a; ptxas_report.sh).
        // The price: the K and V fragments are read from shared memory once per group, 4 times
        // instead of once, which is 33% more ldmatrix for the same mma count at D = 64. Every sum
        // runs in the same order as in one pass, so both versions give the same bits.
        // Unrolling 2 of the 4 groups, not all: fully unrolled, ptxas schedules the groups'
        // loads together and the registers come back (D = 128 spills again).
        constexpr int NPG = QSTEP / 16;
#pragma unroll 2
        for (int q0 = 0; q0 < NT / 2; q0 += NPG) {
            float pt[2 * NPG][4], dpt[2 * NPG][4];
            att2_paired_products<D, NPG>(pt, dpt, Ks, Vs, warp * 16, Qs, dOs, q0 * 16, lane);
            att_dkdv_p_ds_tile<2 * NPG>(pt, dpt, key, 2 * q0, qt * ATT2_TILE, lse_s, delta_s, tq, sl2);
#pragma unroll
            for (int np = 0; np < NPG; np++) {
                uint32_t pa[4], sa[4];
                att_p_fragment<2 * NPG>(pa, pt, np);
                att_p_fragment<2 * NPG>(sa, dpt, np);
                if constexpr (STORE_DS)  // the warp's 16 keys x these 16 queries of tile (qt, kt)
                    attention_ds_store_fragment(attention_ds_tile(a, b, h, qt, kt) + (warp * 16 + gr) * 64 + (q0 + np) * 16 + 2 * tq, sa);
#pragma unroll
                for (int dp = 0; dp < D / 16; dp++) {
                    uint32_t df[4], qf[4];
                    ldsm_x4_trans(df, frag_b_trans_addr(dOs, LDS, (q0 + np) * 16, dp * 16, lane));
                    ldsm_x4_trans(qf, frag_b_trans_addr(Qs, LDS, (q0 + np) * 16, dp * 16, lane));
                    mma_bf16_16816(dv[2 * dp], pa, df[0], df[1]);
                    mma_bf16_16816(dv[2 * dp + 1], pa, df[2], df[3]);
                    mma_bf16_16816(dk[2 * dp], sa, qf[0], qf[1]);
                    mma_bf16_16816(dk[2 * dp + 1], sa, qf[2], qf[3]);
                }
            }
        }
        h = h_next, qt = qt_next;
    }
    att_dkdv_store_rows<D>(dk, dv, key, tq, scale, a, src, b, g);
    if constexpr (Epi::active) {
        __syncthreads();
        epi.template run<D>(a, b, g, kt * ATT2_TILE, smem2);
    }
}

// The dQ kernel's pieces for a thread's two query rows (row, row + 8) in the C/D fragment layout
// (see att_softmax_tile), shared by versions 2, 4 and 6: the rows' lse (log2 units) and delta;
// dS = P (dP - delta) with P = exp2(S sl2 - lse2) and the causal mask (s: the scores in, dS out);
// and dQ (times the softmax scale) stored as bf16 pairs.
__device__ __forceinline__ void att_dq_row_stats(float (&lse2)[2], float (&delta)[2], int row, const AttentionArgs& a, int b, int h) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int rr = row + 8 * r;
        lse2[r] = rr < a.T ? a.lse[((size_t)b * a.H + h) * a.T + rr] * LOG2E : INFINITY;
        delta[r] = rr < a.T ? a.delta[((size_t)b * a.H + h) * a.T + rr] : 0.0f;
    }
}
template <int NT>
__device__ __forceinline__ void att_dq_ds_tile(float (&s)[NT][4], const float (&dp)[NT][4], int row, int key0, const float (&lse2)[2],
                                               const float (&delta)[2], int T, int tq, float sl2) {
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = e >> 1, col = key0 + j * 8 + 2 * tq + (e & 1);
            float p = (col <= row + 8 * r && col < T) ? exp2f(fmaf(s[j][e], sl2, -lse2[r])) : 0.0f;  // one FMA, as in the dK/dV kernels
            s[j][e] = p * (dp[j][e] - delta[r]);
        }
}
template <int D>
__device__ __forceinline__ void att_dq_store_rows(const float (&dq)[D / 8][4], int row, int tq, float scale, const AttentionArgs& a, int b, int h) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int rr = row + 8 * r;
        if (rr >= a.T) continue;
        __nv_bfloat16* dqb = a.dq + ((size_t)b * a.T + rr) * a.dq_rs + (size_t)h * D;
#pragma unroll
        for (int j = 0; j < D / 8; j++) *reinterpret_cast<uint32_t*>(dqb + j * 8 + 2 * tq) = pack_bf16x2(dq[j][2 * r] * scale, dq[j][2 * r + 1] * scale);
    }
}

// dQ += dS K over keys 16 kk .. 16 kk + 15 of a K tile (rows of att2_lds(D)): sa, their dS as the
// A fragment of the warp's 16 queries (versions 2, 4 and 8)
template <int D>
__device__ __forceinline__ void att_dq_add_ds_keys(float (&dq)[D / 8][4], const uint32_t (&sa)[4], const __nv_bfloat16* Ks, int kk, int lane) {
#pragma unroll
    for (int dd = 0; dd < D / 16; dd++) {
        uint32_t kf[4];
        ldsm_x4_trans(kf, frag_b_trans_addr(Ks, att2_lds(D), kk * 16, dd * 16, lane));
        mma_bf16_16816(dq[2 * dd], sa, kf[0], kf[1]);
        mma_bf16_16816(dq[2 * dd + 1], sa, kf[2], kf[3]);
    }
}

// dQ: block = (b, query head h, 64-query tile), 4 warps x 16 queries; loops over the key tiles.
// ASYNC (version 4): K/V double buffered with cp.async, as in the forward. Shared memory: Q, dO,
// then K and V once or twice (ATT2_TILE x LDS bf16 each).
template <int D, bool ASYNC>
static __global__ void ATT2_BWD_LAUNCH_BOUNDS attention_backward_dq_kernel2(AttentionArgs a) {
    constexpr int LDS = att2_lds(D), NT = ATT2_TILE / 8;
    extern __shared__ __align__(16) unsigned char smem2[];
    __nv_bfloat16* Qs = reinterpret_cast<__nv_bfloat16*>(smem2);
    __nv_bfloat16* dOs = Qs + ATT2_TILE * LDS;
    __nv_bfloat16* KVs = dOs + ATT2_TILE * LDS;  // buffer i: K at KVs + 2i TILE LDS, V after it
    const auto [qt, b, h, g] = att_query_block(a);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;
    const float scale = 1.0f / sqrtf((float)D), sl2 = LOG2E * scale;
    KVSource src = attn_kv_source(a, b, g);

    const __nv_bfloat16* qsrc = a.q + (size_t)b * a.T * a.q_rs + (size_t)h * D;
    const __nv_bfloat16* dosrc = a.dout + (size_t)b * a.T * a.H * D + (size_t)h * D;
    if constexpr (ASYNC) {  // Q, dO and the first K/V tile: group 0
        att2_load_tile_async<D>(Qs, qsrc, a.q_rs, qt * ATT2_TILE, a.T);
        att2_load_tile_async<D>(dOs, dosrc, (long)a.H * D, qt * ATT2_TILE, a.T);
        att2_kv_tile_start<D, true>(KVs, src, 0, a.T);
        cp_async_commit();
    } else {
        att2_load_tile<D>(Qs, qsrc, a.q_rs, qt * ATT2_TILE, a.T);
        att2_load_tile<D>(dOs, dosrc, (long)a.H * D, qt * ATT2_TILE, a.T);
    }
    int row = qt * ATT2_TILE + warp * 16 + gr;
    float lse2[2], delta[2];
    att_dq_row_stats(lse2, delta, row, a, b, h);
    float dq[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;

    for (int kt = 0; kt <= qt; kt++) {
        const __nv_bfloat16* Ks = att2_kv_tile<D, ASYNC>(KVs, src, kt, qt, a.T);
        const __nv_bfloat16* Vs = Ks + ATT2_TILE * LDS;
        // S = Q K^T, dP = dO V^T (16 queries x 64 keys per warp)
        float s[NT][4], dp[NT][4];
        att2_paired_products<D, NT / 2>(s, dp, Qs, dOs, warp * 16, Ks, Vs, 0, lane);
        att_dq_ds_tile<NT>(s, dp, row, kt * ATT2_TILE, lse2, delta, a.T, tq, sl2);  // s := dS
        // dQ += dS K  (k = the 64 keys)
#pragma unroll
        for (int kk = 0; kk < NT / 2; kk++) {
            uint32_t sa[4];
            att_p_fragment<NT>(sa, s, kk);
            att_dq_add_ds_keys<D>(dq, sa, Ks, kk, lane);
        }
    }
    att_dq_store_rows<D>(dq, row, tq, scale, a, b, h);
}


// dQ, version 6 (D = 64, sm_90a): version 4's dQ kernel on the warpgroup MMA. A block is one
// warpgroup of 64 query rows (the backward's tiles: 64 x 64); per key tile, S = Q K^T and dP =
// dO V^T as 4 + 4 wgmma.m64n64k16 with Q, dO, K and V read from 128-byte-swizzled shared tiles,
// dS = P (dP - delta) in registers (version 4's code), then dQ += dS K as 4 more with dS from
// registers and K read MN-major. K/V double buffered by cp.async, with ResFormer's mix and SLA's
// second source loaded as in the forward's version 6. The same products in the same k order as
// version 4: under the emulator the same bits. Three blocks per SM (168 registers at most: S, dP
// and dQ are 96 fp32 accumulators a thread). Shared memory: Q, dO (64 rows each), then two
// buffers of K and V (64 rows each), rows of 128 bytes, + 1 KiB to align the start.
constexpr int ATT6_DQ_THREADS = 128;
inline size_t att6_smem_dq() { return (size_t)(2 * 64 + 4 * ATT6_KTILE) * ATT6_ROW_BYTES + SW128_ALIGN_SLACK; }

template <int D, bool QDO_FRAGS>
static __global__ void __launch_bounds__(ATT6_DQ_THREADS, 3) attention_backward_dq_kernel6(AttentionArgs a) {
    static_assert(D == 64, "version 6: rows of 64 bf16, one 128-byte swizzle atom wide");
    constexpr int NT = ATT6_KTILE / 8;
    extern __shared__ __align__(16) unsigned char smem6[];
    unsigned char* Qs = sw128_align(smem6);
    unsigned char* dOs = Qs + 64 * ATT6_ROW_BYTES;
    unsigned char* KVs = dOs + 64 * ATT6_ROW_BYTES;
    const auto [qt, b, h, g] = att_query_block(a);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;
    const float scale = 1.0f / sqrtf((float)D), sl2 = LOG2E * scale;
    KVSource src = attn_kv_source(a, b, g);
    const __nv_bfloat16* qsrc = a.q + (size_t)b * a.T * a.q_rs + (size_t)h * D;
    const __nv_bfloat16* dosrc = a.dout + (size_t)b * a.T * a.H * D + (size_t)h * D;
    // group 0: Q, dO and key tile 0, waited for at the top of the loop (QDO_FRAGS: Q and dO a group
    // of their own)
    att6_load_tile_async<64, ATT6_DQ_THREADS>(Qs, qsrc, a.q_rs, qt * 64, a.T);
    att6_load_tile_async<64, ATT6_DQ_THREADS>(dOs, dosrc, (long)a.H * D, qt * 64, a.T);
    if constexpr (QDO_FRAGS) cp_async_commit();
    att6_kv_tile_start<ATT6_DQ_THREADS>(KVs, src, 0, a.T);
    cp_async_commit();
    int row = qt * 64 + warp * 16 + gr;
    float lse2[2], delta[2];
    att_dq_row_stats(lse2, delta, row, a, b, h);
    const uint32_t q_addr = smem_window_address(Qs), do_addr = smem_window_address(dOs);
    // QDO_FRAGS (version 7): the warp's 16 rows of Q and dO as A fragments, read once, for every
    // key tile's S and dP (the tensor core then reads only K and V from shared memory)
    uint32_t qf[QDO_FRAGS ? 4 : 1][4], dof[QDO_FRAGS ? 4 : 1][4];
    if constexpr (QDO_FRAGS) {
        cp_async_wait<1>();  // this thread's Q and dO copies (key tile 0's may still be in flight)
        __syncthreads();
        sw128_a_fragments(qf, Qs, warp, gr, tq);
        sw128_a_fragments(dof, dOs, warp, gr, tq);
    }
    float s[NT][4], dp[NT][4], dq[D / 8][4];  // D fragments (kernels/wgmma.cuh)
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = dq[j][e] = 0.0f;

    for (int kt = 0; kt <= qt; kt++) {
        att6_tile_step<ATT6_DQ_THREADS>(KVs, src, kt, qt, a.T);
        const uint32_t k_addr = smem_window_address(KVs + (kt & 1) * 2 * ATT6_KTILE * ATT6_ROW_BYTES), v_addr = k_addr + ATT6_KTILE * ATT6_ROW_BYTES;
        // S = Q K^T and dP = dO V^T, one batch
        wgmma_fence_operand(s);
        wgmma_fence_operand(dp);
        wgmma_fence();
        if constexpr (QDO_FRAGS) {
            att6_issue_frags_dot_rows(s, qf, k_addr);
            att6_issue_frags_dot_rows(dp, dof, v_addr);
        } else {
            att6_issue_rows_dot_rows(s, q_addr, k_addr);
            att6_issue_rows_dot_rows(dp, do_addr, v_addr);
        }
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operand(s);
        wgmma_fence_operand(dp);
        att_dq_ds_tile<NT>(s, dp, row, kt * ATT6_KTILE, lse2, delta, a.T, tq, sl2);  // s := dS
        att6_rows_times_tile<NT>(dq, s, k_addr);  // dQ += dS K
    }
    att_dq_store_rows<D>(dq, row, tq, scale, a, b, h);
}

// dK, dV, version 6 (D = 64, sm_90a): version 4's dK/dV kernel on the warpgroup MMA. The block is
// version 4's, one warpgroup (4 warps of 16 keys) per (b, KV head g, 64-key tile), walking the
// same (query head, query tile) pairs in the same order with the Q/dO tiles, lse and delta double
// buffered by cp.async; its tiles are 128-byte swizzled. Each query tile is taken 32 queries at a
// time:
//   S^T = K Q^T and dP^T = V dO^T: 4 + 4 wgmma.m64n32k16, K, V, Q and dO read from shared memory;
//   P^T and dS^T in registers (version 4's code, att_dkdv_p_ds_tile);
//   dV += P^T dO and dK += dS^T Q: 2 + 2 wgmma.m64n64k16, P^T and dS^T from registers as A
//   fragments, dO and Q read MN-major (their rows are the k of these products).
// Why 32 queries: dK and dV are 64 fp32 accumulators a thread; the scores of 32 queries add 32
// more (of all 64, 64 more, past the 168 registers that 3 blocks per SM allow). Version 4 takes 16
// queries a step with mma.sync; each of this version's k16 steps is one of those, in the same
// order, so the sums are the same and the emulator gives the same bits. The write-out is version
// 4's (att_dkdv_store_rows): a warp's D fragment is the mma C fragment of its 16 keys.
// Shared memory: K, V (64 rows each), then per buffer Q and dO (64 rows each), rows of 128 bytes
// from a 1024-byte boundary (+ 1 KiB to align), then per buffer lse and delta (64 floats each).
constexpr int ATT6_DKDV_THREADS = 128;
constexpr int ATT6_DKDV_QSTEP = 32;  // queries per step
inline size_t att6_smem_dkdv() { return (size_t)6 * 64 * ATT6_ROW_BYTES + 4 * 64 * sizeof(float) + SW128_ALIGN_SLACK; }

// Epi: as version 4's kernel (attention_backward_dkdv_kernel2): run by the block after its stores,
// with the shared memory free (the last pair's wgmma waited for, no copy in flight).
// STORE_DS (dQ version 8): each pair's dS^T, the bf16 A fragments of dK += dS^T Q, also goes to
// its tile of a.ds (attention_ds_tile), for attention_backward_dq_kernel8.
template <int D, class Epi, bool KV_FRAGS, bool STORE_DS = false>
static __global__ void __launch_bounds__(ATT6_DKDV_THREADS, 3) attention_backward_dkdv_kernel6(AttentionArgs a, Epi epi) {
    static_assert(D == 64, "version 6: rows of 64 bf16, one 128-byte swizzle atom wide");
    static_assert(ATT6_DKDV_THREADS == ATT2_THREADS && ATT2_TILE == 64, "version 4's lse and delta loaders: a thread per row");
    constexpr int NJ = ATT6_DKDV_QSTEP / 8, TILE_BYTES = 64 * ATT6_ROW_BYTES;
    extern __shared__ __align__(16) unsigned char smem6[];
    unsigned char* Ks = sw128_align(smem6);
    unsigned char* QdOs = Ks + 2 * TILE_BYTES;  // buffer i: Q at QdOs + 2i TILE_BYTES, dO after it
    float* lse_all = reinterpret_cast<float*>(QdOs + 4 * TILE_BYTES);  // buffer i at + 64 i
    float* delta_all = lse_all + 2 * 64;
    int G = a.H / a.Hkv, ng = (a.h1 - a.h0) / G;
    int kt = blockIdx.x, b = blockIdx.y / ng, g = a.h0 / G + blockIdx.y % ng;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;
    int nqt = CEIL_DIV(a.T, 64);
    const float scale = 1.0f / sqrtf((float)D), sl2 = LOG2E * scale;
    int n_iter = G * (nqt - kt);  // pairs: heads of the group outer, query tiles kt.. inner
    __shared__ uintptr_t batch_rows[4];
    att_dkdv_batch_rows_init(batch_rows, a, b, D);
    __syncthreads();
    KVSource src = attn_kv_source(a, b, g);
    int h = g * G, qt = kt;  // the pair of iteration it
    // group 0: K, V and the first pair's Q, dO, lse and delta (KV_FRAGS: K and V a group of their own)
    att6_load_kv_tiles<ATT6_DKDV_THREADS>(Ks, src, kt, a.T);
    if constexpr (KV_FRAGS) cp_async_commit();
    att6_load_tile_async<64, ATT6_DKDV_THREADS>(QdOs, att_dkdv_head_rows(batch_rows, 0, h, D), a.q_rs, qt * 64, a.T);
    att6_load_tile_async<64, ATT6_DKDV_THREADS>(QdOs + TILE_BYTES, att_dkdv_head_rows(batch_rows, 1, h, D), (long)a.H * D, qt * 64, a.T);
    att_dkdv_lse_delta_start<true>(lse_all, delta_all, batch_rows, h, qt, 0, a.T);
    cp_async_commit();
    const uint32_t k_addr = smem_window_address(Ks), v_addr = k_addr + TILE_BYTES;
    // KV_FRAGS (version 7): the warp's 16 keys of K and V as A fragments, read once, for every
    // pair's S^T and dP^T (the tensor core then reads only Q and dO from shared memory)
    uint32_t kf[KV_FRAGS ? 4 : 1][4], vf[KV_FRAGS ? 4 : 1][4];
    if constexpr (KV_FRAGS) {
        cp_async_wait<1>();  // this thread's K and V copies (the pair's may still be in flight)
        __syncthreads();     // and everyone's (ResFormer's mixed V: plain stores)
        sw128_a_fragments(kf, Ks, warp, gr, tq);
        sw128_a_fragments(vf, Ks + TILE_BYTES, warp, gr, tq);
    }
    float dk[D / 8][4], dv[D / 8][4], pt[NJ][4], dpt[NJ][4];  // D fragments (kernels/wgmma.cuh), rows = keys
#pragma unroll
    for (int j = 0; j < D / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[j][e] = dv[j][e] = 0.0f;
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) pt[j][e] = dpt[j][e] = 0.0f;
    int key = kt * 64 + warp * 16 + gr;  // this thread's keys: key, key + 8

    for (int it = 0; it < n_iter; it++) {
        int buf = it & 1, h_next = h, qt_next = qt + 1;
        if (qt_next == nqt) qt_next = kt, h_next++;
        cp_async_wait<0>();  // this thread's copies of pair it (the only group in flight)
        att_dkdv_lse_landed(lse_all, qt, buf, a.T);
        fence_proxy_async_shared();
        __syncthreads();  // everyone's; and everyone is done with pair it - 1's buffer, refilled next
        if (it + 1 < n_iter) {
            unsigned char* Qn = QdOs + 2 * (buf ^ 1) * TILE_BYTES;
            att6_load_tile_async<64, ATT6_DKDV_THREADS>(Qn, att_dkdv_head_rows(batch_rows, 0, h_next, D), a.q_rs, qt_next * 64, a.T);
            att6_load_tile_async<64, ATT6_DKDV_THREADS>(Qn + TILE_BYTES, att_dkdv_head_rows(batch_rows, 1, h_next, D), (long)a.H * D, qt_next * 64, a.T);
            att_dkdv_lse_delta_start<true>(lse_all, delta_all, batch_rows, h_next, qt_next, buf ^ 1, a.T);
            cp_async_commit();
        }
        const float* lse_s = lse_all + buf * 64;
        const float* delta_s = delta_all + buf * 64;
        const uint32_t q_addr = smem_window_address(QdOs + 2 * buf * TILE_BYTES), do_addr = q_addr + TILE_BYTES;
#pragma unroll 1
        for (int qc = 0; qc < 64; qc += ATT6_DKDV_QSTEP) {
            // S^T = K Q^T and dP^T = V dO^T for queries qc.. (32), one batch
            wgmma_fence_operand(pt);
            wgmma_fence_operand(dpt);
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < 4; ks++) {
                uint64_t qd = wgmma_desc_sw128(q_addr + qc * ATT6_ROW_BYTES + 32 * ks, 16, 1024);
                if constexpr (KV_FRAGS) wgmma_m64n32k16_rs(pt, kf[ks], qd, ks > 0);
                else wgmma_m64n32k16_ss(pt, wgmma_desc_sw128(k_addr + 32 * ks, 16, 1024), qd, ks > 0);
            }
#pragma unroll
            for (int ks = 0; ks < 4; ks++) {
                uint64_t dod = wgmma_desc_sw128(do_addr + qc * ATT6_ROW_BYTES + 32 * ks, 16, 1024);
                if constexpr (KV_FRAGS) wgmma_m64n32k16_rs(dpt, vf[ks], dod, ks > 0);
                else wgmma_m64n32k16_ss(dpt, wgmma_desc_sw128(v_addr + 32 * ks, 16, 1024), dod, ks > 0);
            }
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_operand(pt);
            wgmma_fence_operand(dpt);
            att_dkdv_p_ds_tile<NJ>(pt, dpt, key, qc / 8, qt * 64, lse_s, delta_s, tq, sl2);  // pt := P^T, dpt := dS^T
            // dV += P^T dO, dK += dS^T Q (k = the 32 queries, two steps of 16), one batch
            uint32_t pa[NJ / 2][4], sa[NJ / 2][4];
#pragma unroll
            for (int kk = 0; kk < NJ / 2; kk++) {
                att_p_fragment<NJ>(pa[kk], pt, kk);
                att_p_fragment<NJ>(sa[kk], dpt, kk);
            }
            if constexpr (STORE_DS) {  // the warp's 16 keys x these 32 queries of tile (qt, kt)
                floatX* t = attention_ds_tile(a, b, h, qt, kt) + (warp * 16 + gr) * 64 + qc + 2 * tq;
#pragma unroll
                for (int kk = 0; kk < NJ / 2; kk++) attention_ds_store_fragment(t + 16 * kk, sa[kk]);
            }
            wgmma_fence_operand(dv);
            wgmma_fence_operand(dk);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < NJ / 2; kk++) {
                uint32_t row_bytes = (qc + 16 * kk) * ATT6_ROW_BYTES;
                wgmma_m64n64k16_rs_mn(dv, pa[kk], wgmma_desc_sw128(do_addr + row_bytes, 16, 1024), 1);
                wgmma_m64n64k16_rs_mn(dk, sa[kk], wgmma_desc_sw128(q_addr + row_bytes, 16, 1024), 1);
            }
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_operand(dv);
            wgmma_fence_operand(dk);
        }
        h = h_next, qt = qt_next;
    }
    att_dkdv_store_rows<D>(dk, dv, key, tq, scale, a, src, b, g);
    if constexpr (Epi::active) {
        __syncthreads();
        epi.template run<D>(a, b, g, kt * 64, smem6);
    }
}

// dQ, version 8: dQ = dS K from the dS^T tiles that the dK/dV kernel (version 4, 6 or 7 with
// STORE_DS) wrote to a.ds, instead of computing S, P, dP and dS a second time as versions 4-7 do
// (of the dQ kernel's four products of 64 x 64 x 64 per tile, three and its exponentials go). The
// price: the dS^T tiles' bytes, written once and read once (2 x 8 KiB per tile; at GPT-2 124M,
// B = 64, T = 1024: 0.86 GB per layer each way). Version 4's dQ kernel otherwise (PyTorch:
// dq = (ds @ k) * scale): block = (b, query head h, 64-query tile), 4 warps of 16 queries, the key
// tiles in order with their dS^T and K tiles double buffered by cp.async into padded rows; dS's A
// fragments by ldmatrix.trans from the dS^T tile, K's B fragments as version 4 reads them, the
// same mma in the same order: the same bits as version 4 wherever dS is (as under the emulator).
// Every head dim (the dS^T tiles are 64 x 64 whatever D is). Shared memory: two buffers of a dS^T
// tile (64 rows of att2_lds(64) bf16) and a K tile (64 rows of att2_lds(D)).
template <int D>
__host__ __device__ constexpr int att8_buffer_elems() { return ATT2_TILE * (att2_lds(64) + att2_lds(D)); }  // dS^T, then K
template <int D>
inline size_t att8_smem_dq() { return (size_t)2 * att8_buffer_elems<D>() * sizeof(__nv_bfloat16); }
// Starts key tile kt's dS^T (the whole tile: rows past T hold zeros) and K into buffer kt % 2.
template <int D>
__device__ __forceinline__ void att8_dq_tile_start(__nv_bfloat16* bufs, const __nv_bfloat16* ds, const KVSource& src, int kt, int T) {
    __nv_bfloat16* S = bufs + (kt & 1) * att8_buffer_elems<D>();
    att2_load_tile_async<64>(S, ds + (size_t)kt * ATT_DS_TILE_ELEMS, 64, 0, ATT2_TILE);
    att2_load_tile_async<D>(S + ATT2_TILE * att2_lds(64), src.k, src.k_rs, kt * ATT2_TILE, T);
    cp_async_commit();
}

template <int D>
static __global__ void __launch_bounds__(ATT2_THREADS) attention_backward_dq_kernel8(AttentionArgs a) {
    constexpr int LDS_S = att2_lds(64), NT = ATT2_TILE / 8;
    extern __shared__ __align__(16) unsigned char smem8[];
    __nv_bfloat16* bufs = reinterpret_cast<__nv_bfloat16*>(smem8);  // buffer i: dS^T at bufs + i att8_buffer_elems, K after it
    const auto [qt, b, h, g] = att_query_block(a);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;
    const float scale = 1.0f / sqrtf((float)D);
    KVSource src = attn_kv_source(a, b, g);
    const __nv_bfloat16* ds = attention_ds_tile(a, b, h, qt, 0);  // then kt = 1..qt
    att8_dq_tile_start<D>(bufs, ds, src, 0, a.T);
    float dq[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;

    for (int kt = 0; kt <= qt; kt++) {
        cp_async_wait<0>();  // this thread's copies of tile kt (the only group in flight)
        __syncthreads();     // everyone's; and everyone is done with tile kt - 1, whose buffer is refilled next
        if (kt < qt) att8_dq_tile_start<D>(bufs, ds, src, kt + 1, a.T);
        const __nv_bfloat16* St = bufs + (kt & 1) * att8_buffer_elems<D>();
        const __nv_bfloat16* Ks = St + ATT2_TILE * LDS_S;
        // dQ += dS K  (k = the 64 keys), as version 4's dQ kernel
#pragma unroll
        for (int kk = 0; kk < NT / 2; kk++) {
            uint32_t sa[4];
            ldsm_x4_trans(sa, frag_a_trans_addr(St, LDS_S, kk * 16, warp * 16, lane));
            att_dq_add_ds_keys<D>(dq, sa, Ks, kk, lane);
        }
    }
    att_dq_store_rows<D>(dq, qt * ATT2_TILE + warp * 16 + gr, tq, scale, a, b, h);
}

#endif  // ENABLE_BF16

// ----------------------------------------------------------------------------
// launchers

// The one shape limit of the attention kernels besides memory. Every grid is (query or key tiles,
// B x the call's query heads), the dK/dV kernels' B x its KV heads, and CUDA allows at most 65535
// blocks in y: past that a GPU refuses the launch ("invalid configuration argument"), which names
// neither the kernel nor the shape, so attention_check_args refuses it first. At the shapes the
// trainer targets B x H stays far below (GPT-2 1.5B at B = 128: 3200; Llama-3-8B at B = 8: 256).
// Everything else is indexed in 64 bits where it can pass 2^31: the row offsets ((b T + t) times a
// row stride: (B T, 3C) qkv at B = 128, T = 4096, C = 1600 is 2.5e9 elements), the (B, H, T) lse
// and delta rows, the dS^T tiles of dQ version 8 (attention_ds_tile), the route and keep offsets
// of the dK/dV write-out; what stays in int are positions and tile numbers within one sequence
// (at most T + 127) and offsets within a block's shared tiles. A trainer can refuse a batch size
// past this at startup with attention_grid_fits(B, n_head).
inline bool attention_grid_fits(int B, int heads) { return (long)B * heads <= CUDA_MAX_GRID_Y; }

inline void attention_check_args(const AttentionArgs& a, bool backward, int version) {
    KERNEL_ASSERT(a.B >= 1 && a.T >= 1 && a.H >= 1 && a.Hkv >= 1 && a.H % a.Hkv == 0);
    KERNEL_ASSERT(attention_head_dim_supported(a.D));
    int G = a.H / a.Hkv;
    KERNEL_ASSERT(0 <= a.h0 && a.h0 < a.h1 && a.h1 <= a.H && a.h0 % G == 0 && a.h1 % G == 0);
    if (!attention_grid_fits(a.B, a.h1 - a.h0)) {
        char hint[160];
        snprintf(hint, sizeof(hint), "use a batch size of at most %ld (%d heads)", CUDA_MAX_GRID_Y / (a.h1 - a.h0), a.h1 - a.h0);
        runtime_error(hint, "attention: B x heads = %d x %d = %ld blocks in grid y, past CUDA's limit of %ld", a.B, a.h1 - a.h0,
                      (long)a.B * (a.h1 - a.h0), CUDA_MAX_GRID_Y);
    }
    KERNEL_ASSERT(a.q && a.k && a.v && a.out && a.lse);
    KERNEL_ASSERT(a.q_rs >= (long)a.H * a.D && a.k_rs >= (long)a.Hkv * a.D && a.v_rs >= (long)a.Hkv * a.D);
    // value paths: a second K/V source (SLA) and a value mix (ResFormer) are never combined
    bool alt = a.kv_alt_from < a.Hkv;
    KERNEL_ASSERT(!(alt && a.v_mix));
    if (alt) KERNEL_ASSERT(a.kv_alt_from >= 0 && a.k_alt && a.v_alt && a.k_alt_rs >= (long)a.Hkv * a.D && a.v_alt_rs >= (long)a.Hkv * a.D);
    if (a.v_mix) KERNEL_ASSERT(a.v_mix_rs >= (long)a.Hkv * a.D);
    if (backward) {
        // dv may be NULL only when every head's value gradient is routed away (SVFormer l >= 1)
        KERNEL_ASSERT(a.dout && a.delta && a.dq && a.dk && (a.dv || ((a.dv_route.src || a.dv_route.keep) && a.dv_route.from_head == 0)));
        // keep: the K route never keeps, nor a chained one; the terms are stored as bf16 pairs (4-byte aligned). The
        // trainer keeps them in memory of the layer's that the delta pass of every head has
        // read by then, so one call over all the heads (a call over part of them could overwrite
        // what the next call's delta pass still has to read)
        KERNEL_ASSERT(!a.dk_route.keep && !(a.dv_route.keep && (a.dv_route.src || a.dv_route.chain)));
        if (a.dv_route.keep) KERNEL_ASSERT(((uintptr_t)a.dv_route.keep % 4) == 0 && a.h0 == 0 && a.h1 == a.H);
        KERNEL_ASSERT(a.dq_rs >= (long)a.H * a.D && a.dk_rs >= (long)a.Hkv * a.D && (!a.dv || a.dv_rs >= (long)a.Hkv * a.D));
        KERNEL_ASSERT(!a.dlambda_partial || a.v_mix);
        // dv over the V it reads: only as the same rows (the epilogue of dlambda and SLA's second
        // source read V too)
        if (a.dv && a.dv == a.v) KERNEL_ASSERT(a.dv_rs == a.v_rs && !a.v_mix && !(a.kv_alt_from < a.Hkv) && !a.accumulate_dkv);
        // the delta pass (every version) reads dO and O as 16-byte words: 16-byte aligned bases
        KERNEL_ASSERT(aligned16(a.dout) && aligned16(a.out));
    }
    if (version == 2) {  // 16-byte tile loads: 8-element aligned rows and pointers
        KERNEL_ASSERT(a.q_rs % 8 == 0 && a.k_rs % 8 == 0 && a.v_rs % 8 == 0 && aligned16(a.q) && aligned16(a.k) && aligned16(a.v) && aligned16(a.out));
        if (alt) KERNEL_ASSERT(a.k_alt_rs % 8 == 0 && a.v_alt_rs % 8 == 0 && aligned16(a.k_alt) && aligned16(a.v_alt));
        if (a.v_mix) KERNEL_ASSERT(a.v_mix_rs % 8 == 0 && aligned16(a.v_mix));
        // dq, dk, dv are written as bf16 pairs (32-bit stores): 4-byte aligned pointers and even strides.
        // The emulator would not fault on a misaligned store; a GPU does ("misaligned address").
        auto aligned4 = [](const void* p) { return ((uintptr_t)p % 4) == 0; };
        if (backward)
            KERNEL_ASSERT(aligned16(a.dout) && a.dq_rs % 2 == 0 && a.dk_rs % 2 == 0 && (!a.dv || a.dv_rs % 2 == 0) &&
                          aligned4(a.dq) && aligned4(a.dk) && (!a.dv || aligned4(a.dv)));
    }
}

// acc = the sums of the kept terms of the slots, in the order given (KeptSumArgs)
inline void attention_sum_kept(KeptSumArgs a, const std::vector<const floatX*>& slots, cudaStream_t stream) {
    const long vec = 16 / sizeof(floatX);
    KERNEL_ASSERT(a.n_elems >= 1 && a.n_elems % vec == 0 && !slots.empty() && a.acc && aligned16(a.acc));
    for (const floatX* p : slots) KERNEL_ASSERT(p && aligned16(p));
    long threads = a.n_elems / vec;
    for (size_t first = 0; first < slots.size(); first += KEPT_SUM_SLOTS) {
        a.n = (int)std::min(slots.size() - first, (size_t)KEPT_SUM_SLOTS);
        a.overwrite = first == 0;
        for (int r = 0; r < a.n; r++) a.slot[r] = slots[first + r];
        attention_sum_kept_kernel<<<(unsigned)CEIL_DIV(threads, 256L), 256, 0, stream>>>(a);
        cudaCheck(cudaGetLastError());
    }
}

// Blocks of the dK/dV kernel of the active version for a launch: the length of dlambda_partial.
inline int attention_dkdv_blocks(int B, int T, int Hkv, int D) {
#ifdef ENABLE_BF16
    int tile = ATT2_TILE;
#else
    int tile = attn1_tile_rows(D);
#endif
    return CEIL_DIV(T, tile) * B * Hkv;
}

inline AttentionArgs attention_full_range(AttentionArgs a) {
    if (a.h1 == 0) {
        a.h0 = 0;
        a.h1 = a.H;
    }
    return a;
}

template <int D>
void attention_forward1_d(const AttentionArgs& a, cudaStream_t stream) {
    constexpr int TILE = attn1_tile<D>();
    size_t smem = 2 * TILE * D * sizeof(float);
    cudaCheck(cudaFuncSetAttribute(attention_forward_kernel1<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    attention_forward_kernel1<D><<<dim3(CEIL_DIV(a.T, TILE), a.B * (a.h1 - a.h0)), TILE, smem, stream>>>(a);
    cudaCheck(cudaGetLastError());
}

template <int D>
void attention_backward1_d(const AttentionArgs& a, cudaStream_t stream) {
    constexpr int TILE = attn1_tile<D>();
    int G = a.H / a.Hkv;
    // dQ first: then nothing reads this call's K and V after the dK/dV kernel has started, so dv
    // may be the V it reads (AttentionArgs::dv)
    size_t smem_q = (2 * TILE * D + 2 * TILE * (D + 1)) * sizeof(float);
    cudaCheck(cudaFuncSetAttribute(attention_backward_dq_kernel1<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_q));
    attention_backward_dq_kernel1<D><<<dim3(CEIL_DIV(a.T, TILE), a.B * (a.h1 - a.h0)), TILE, smem_q, stream>>>(a);
    cudaCheck(cudaGetLastError());
    size_t smem_kv = (2 * TILE * D + 2 * TILE * (D + 1) + 2 * TILE) * sizeof(float);
    cudaCheck(cudaFuncSetAttribute(attention_backward_dkdv_kernel1<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv));
    attention_backward_dkdv_kernel1<D><<<dim3(CEIL_DIV(a.T, TILE), a.B * (a.h1 - a.h0) / G), TILE, smem_kv, stream>>>(a);
    cudaCheck(cudaGetLastError());
}

template <int D>
void attention_backward_preprocess_d(const AttentionArgs& a, cudaStream_t stream) {
    constexpr int VEC = x128::size, LPR = D / VEC >= 32 ? 32 : D / VEC;
    const int block_size = 256;
    long threads = (long)a.B * (a.h1 - a.h0) * a.T * LPR;
    attention_backward_preprocess_kernel2<D><<<(unsigned)CEIL_DIV(threads, (long)block_size), block_size, 0, stream>>>(a);
    cudaCheck(cudaGetLastError());
}
inline void attention_backward_preprocess(const AttentionArgs& a, cudaStream_t stream) {
    with_head_dim(a.D, [&](auto d) { attention_backward_preprocess_d<decltype(d)::value>(a, stream); });
}

// version 1 (SIMT), any floatX
inline void attention_forward1(AttentionArgs a, cudaStream_t stream) {
    a = attention_full_range(a);
    attention_check_args(a, false, 1);
    with_head_dim(a.D, [&](auto d) { attention_forward1_d<decltype(d)::value>(a, stream); });
}

inline void attention_backward1(AttentionArgs a, cudaStream_t stream) {
    a = attention_full_range(a);
    attention_check_args(a, true, 1);
    attention_backward_preprocess(a, stream);
    with_head_dim(a.D, [&](auto d) { attention_backward1_d<decltype(d)::value>(a, stream); });
}

#ifdef ENABLE_BF16
// Shared memory of the tensor-core kernels (bytes): bf16 tiles of ATT2_TILE x att2_lds(D), the
// K/V (forward, dQ) or Q/dO (dK/dV) tiles twice when double buffered (version 4), as laid out at
// each kernel. At D = 128 the largest, version 4's dK/dV, is 103 KiB: two blocks fit an SM's 228.
inline size_t att2_smem_forward(int D, bool async, int mt = 1) { return (mt + 2 * (async ? 2 : 1)) * ATT2_TILE * att2_lds(D) * sizeof(__nv_bfloat16); }
inline size_t att2_smem_dkdv(int D, bool async) {
    int nbuf = async ? 2 : 1;
    return (2 + 2 * nbuf) * ATT2_TILE * att2_lds(D) * sizeof(__nv_bfloat16) + 2 * nbuf * ATT2_TILE * sizeof(float);
}
inline size_t att2_smem_dq(int D, bool async) { return (2 + 2 * (async ? 2 : 1)) * ATT2_TILE * att2_lds(D) * sizeof(__nv_bfloat16); }
// Whether version 4's double-buffered backward kernels fit this GPU's shared memory at head dim D.
// At D = 128 the dQ kernel takes 102 KiB and the dK/dV kernel 103 KiB: more than the 99 KiB a
// block may have on compute capability 8.6, 8.9 and 12.0 (RTX 30xx, 40xx, 50xx, A10, L4, L40),
// where they run single-buffered (version 3's way, 68 and 69 KiB: the same sums in the same order,
// so the same bits). Every other head dim, and every kernel on an A100 (163 KiB) or an H100
// (227 KiB), fits; so does the forward (85 KiB at D = 128).
inline bool att2_backward_async_fits(int D) { return att2_smem_dkdv(D, true) <= (size_t)cuda_max_smem_optin() && att2_smem_dq(D, true) <= (size_t)cuda_max_smem_optin(); }

template <int D, bool ASYNC, int MT, class Pro = AttNoPrologue>
void attention_forward2_d(const AttentionArgs& a, cudaStream_t stream, const Pro& pro = Pro()) {
    size_t smem = att2_smem_forward(D, ASYNC, MT);
    cudaCheck(cudaFuncSetAttribute(attention_forward_kernel2<D, ASYNC, MT, Pro>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    attention_forward_kernel2<D, ASYNC, MT, Pro><<<dim3(CEIL_DIV(a.T, MT * ATT2_TILE), a.B * (a.h1 - a.h0)), ATT2_THREADS, smem, stream>>>(a, pro);
    cudaCheck(cudaGetLastError());
}

template <int D, bool ASYNC>
void attention_backward_dq2_d(const AttentionArgs& a, cudaStream_t stream) {
    if constexpr (ASYNC && D == 128)
        if (!att2_backward_async_fits(D)) return attention_backward_dq2_d<D, false>(a, stream);
    size_t smem_q = att2_smem_dq(D, ASYNC);
    cudaCheck(cudaFuncSetAttribute(attention_backward_dq_kernel2<D, ASYNC>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_q));
    attention_backward_dq_kernel2<D, ASYNC><<<dim3(CEIL_DIV(a.T, ATT2_TILE), a.B * (a.h1 - a.h0)), ATT2_THREADS, smem_q, stream>>>(a);
    cudaCheck(cudaGetLastError());
}
template <int D, int QSTEP, bool ASYNC, class Epi = AttNoEpilogue, bool STORE_DS = false>
void attention_backward_dkdv2_d(const AttentionArgs& a, cudaStream_t stream, const Epi& epi = Epi()) {
    if constexpr (ASYNC && D == 128)
        if (!att2_backward_async_fits(D)) return attention_backward_dkdv2_d<D, QSTEP, false, Epi, STORE_DS>(a, stream, epi);
    int G = a.H / a.Hkv;
    size_t smem_kv = att2_smem_dkdv(D, ASYNC);
    auto dkdv_kernel = attention_backward_dkdv_kernel2<D, QSTEP, ASYNC, Epi, STORE_DS>;
    cudaCheck(cudaFuncSetAttribute(dkdv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv));
    dkdv_kernel<<<dim3(CEIL_DIV(a.T, ATT2_TILE), a.B * (a.h1 - a.h0) / G), ATT2_THREADS, smem_kv, stream>>>(a, epi);
    cudaCheck(cudaGetLastError());
}
template <int D, int QSTEP, bool ASYNC, class Epi = AttNoEpilogue>
void attention_backward2_d(const AttentionArgs& a, cudaStream_t stream, const Epi& epi = Epi()) {
    // dQ first, as in version 1 (AttentionArgs::dv may be the V this call reads)
    attention_backward_dq2_d<D, ASYNC>(a, stream);
    attention_backward_dkdv2_d<D, QSTEP, ASYNC>(a, stream, epi);
}

// tensor cores, bf16 only: version 2 (ASYNC = false), version 4 (K/V tiles by cp.async, double
// buffered) and version 5 (version 4 with 32 rows per warp, MT = 2). At D = 128 version 5 runs
// version 4's kernel: two m-tiles' scores and outputs (2 x (32 + 64) fp32 per thread) would spill.
template <bool ASYNC, int MT>
void attention_forward_tc(AttentionArgs a, cudaStream_t stream) {
    a = attention_full_range(a);
    attention_check_args(a, false, 2);
    with_head_dim(a.D, [&](auto d) {
        constexpr int D = decltype(d)::value;
        attention_forward2_d<D, ASYNC, D == 128 ? 1 : MT>(a, stream);
    });
}
// Version 6 needs a Hopper GPU (compute capability 9.0) and a build for sm_90a, and runs D = 64
// only: attention_wgmma_available says whether this process can run it (under the emulator:
// wherever it reports 9.0, its default; VP_EMU_CC); the trainer's entry point falls back to
// version 4 otherwise.
#ifndef VP_CUDA_EMU
// 1 in the device code of a build for sm_90a, 0 in any other: an H100 runs a GPU_ARCH=sm_90 build
// (no "a") whose wgmma wrappers trap, so the compute capability alone does not say that version 6
// can run. Per translation unit (static), read once from the device code the GPU loaded.
#ifdef VP_WGMMA_PTX
static __device__ int attention_wgmma_in_device_code = 1;
#else
static __device__ int attention_wgmma_in_device_code = 0;
#endif
#endif
inline bool attention_wgmma_available() {
    static int available = -1;
    if (available < 0) {
        int dev = 0, major = 0, minor = 0, in_device_code = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
#ifdef VP_CUDA_EMU
        in_device_code = 1;  // every kernel is compiled for the emulator
#else
        if (10 * major + minor == 90) cudaCheck(cudaMemcpyFromSymbol(&in_device_code, attention_wgmma_in_device_code, sizeof(int)));
#endif
        available = 10 * major + minor == 90 && in_device_code == 1;
    }
    return available == 1;
}
// Whether version 6 (the forward, and the backward's dQ kernel) runs these arguments here.
inline bool attention_wgmma_supported(const AttentionArgs& a) { return a.D == 64 && attention_wgmma_available(); }
// The kernel versions that run on wgmma where attention_wgmma_supported: 6, and 7 (version 6 with
// the operand that a block multiplies by every tile held in registers as A fragments). The dQ
// kernel's 8 runs everywhere (mma.sync, with the dK/dV kernel of version 4, 6 or 7).
inline bool attention_version_wgmma(int version) { return version == 6 || version == 7; }
// The version that a kernel set to `chosen` runs for these arguments (attention_tc_version 4): a
// wgmma version where attention_wgmma_supported and version 4 where not; 4 and the forward's 5 as
// they are. The one place the trainer's dispatch and its queries (attention_runs_version4,
// attention_dkdv_active_version) make that choice.
inline int attention_version_for(const AttentionArgs& a, int chosen) {
    return attention_version_wgmma(chosen) && !attention_wgmma_supported(a) ? 4 : chosen;
}
// The version-6 launchers' first steps: the full head range, the arguments checked, and a clear
// error where version 6 cannot run.
inline AttentionArgs attention6_checked(AttentionArgs a, bool backward) {
    a = attention_full_range(a);
    attention_check_args(a, backward, 2);
    if (!attention_wgmma_supported(a))
        runtime_error("use attention version 4", "attention version 6 (wgmma) runs head dim 64 on a compute capability 9.0 GPU (H100/H200) built "
                      "for sm_90a; here head dim %d", a.D);
    return a;
}
// Q_FRAGS: version 7 (the query rows held as A fragments: attention_forward_kernel6)
template <bool Q_FRAGS = false>
void attention_forward6(AttentionArgs a, cudaStream_t stream) {
    a = attention6_checked(a, false);
    size_t smem = att6_smem_forward();
    auto kernel = attention_forward_kernel6<64, Q_FRAGS>;
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kernel<<<dim3(CEIL_DIV(a.T, ATT6_QROWS), a.B * (a.h1 - a.h0)), ATT6_THREADS, smem, stream>>>(a);
    cudaCheck(cudaGetLastError());
}
inline void attention_forward7(const AttentionArgs& a, cudaStream_t stream) { attention_forward6<true>(a, stream); }
inline void attention_forward2(const AttentionArgs& a, cudaStream_t stream) { attention_forward_tc<false, 1>(a, stream); }
inline void attention_forward4(const AttentionArgs& a, cudaStream_t stream) { attention_forward_tc<true, 1>(a, stream); }
inline void attention_forward5(const AttentionArgs& a, cudaStream_t stream) { attention_forward_tc<true, 2>(a, stream); }

// version 2 (dK/dV in one pass over each query tile), version 3 (16 queries at a time) and
// version 4 (version 3 with cp.async double buffering in both kernels); the same sums in the same
// order, so the same results bit for bit
// Epi: run by each block of the dK/dV kernel after its stores (attention_backward_with_epilogue).
template <int QSTEP, bool ASYNC, class Epi = AttNoEpilogue>
void attention_backward_tc(AttentionArgs a, cudaStream_t stream, const Epi& epi = Epi()) {
    a = attention_full_range(a);
    attention_check_args(a, true, 2);
    attention_backward_preprocess(a, stream);
    with_head_dim(a.D, [&](auto d) { attention_backward2_d<decltype(d)::value, QSTEP, ASYNC>(a, stream, epi); });
}
inline void attention_backward2(const AttentionArgs& a, cudaStream_t stream) { attention_backward_tc<ATT2_TILE, false>(a, stream); }
inline void attention_backward3(const AttentionArgs& a, cudaStream_t stream) { attention_backward_tc<16, false>(a, stream); }
inline void attention_backward4(const AttentionArgs& a, cudaStream_t stream) { attention_backward_tc<16, true>(a, stream); }
// version 6's dQ kernel alone (a checked by attention6_checked); QDO_FRAGS: version 7's
template <bool QDO_FRAGS>
void attention_backward_dq6_launch(const AttentionArgs& a, cudaStream_t stream) {
    size_t smem = att6_smem_dq();
    auto kernel = attention_backward_dq_kernel6<64, QDO_FRAGS>;
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kernel<<<dim3(CEIL_DIV(a.T, 64), a.B * (a.h1 - a.h0)), ATT6_DQ_THREADS, smem, stream>>>(a);
    cudaCheck(cudaGetLastError());
}
// version 6's dK/dV kernel alone, with Epi; KV_FRAGS: version 7's; STORE_DS: also writing the
// dS^T tiles that version 8's dQ kernel reads
template <bool KV_FRAGS, class Epi, bool STORE_DS = false>
void attention_backward_dkdv6_launch(const AttentionArgs& a, cudaStream_t stream, const Epi& epi) {
    size_t smem = att6_smem_dkdv();
    int G = a.H / a.Hkv;
    auto kernel = attention_backward_dkdv_kernel6<64, Epi, KV_FRAGS, STORE_DS>;
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kernel<<<dim3(CEIL_DIV(a.T, 64), a.B * (a.h1 - a.h0) / G), ATT6_DKDV_THREADS, smem, stream>>>(a, epi);
    cudaCheck(cudaGetLastError());
}
// The dK/dV kernel of version 7, 6 or 4 (version 4's cp.async kernel, 16 queries a step) alone,
// with Epi; STORE_DS: also writing the dS^T tiles that version 8's dQ kernel reads
template <class Epi, bool STORE_DS = false>
void attention_backward_dkdv_launch(const AttentionArgs& a, cudaStream_t stream, int version, const Epi& epi) {
    if (version == 7) attention_backward_dkdv6_launch<true, Epi, STORE_DS>(a, stream, epi);
    else if (version == 6) attention_backward_dkdv6_launch<false, Epi, STORE_DS>(a, stream, epi);
    else with_head_dim(a.D, [&](auto d) { attention_backward_dkdv2_d<decltype(d)::value, 16, true, Epi, STORE_DS>(a, stream, epi); });
}
// version 8's dQ kernel alone: after a dK/dV kernel with STORE_DS over the same arguments
inline void attention_backward_dq8_launch(const AttentionArgs& a, cudaStream_t stream) {
    with_head_dim(a.D, [&](auto d) {
        constexpr int D = decltype(d)::value;
        size_t smem = att8_smem_dq<D>();
        auto kernel = attention_backward_dq_kernel8<D>;
        cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        kernel<<<dim3(CEIL_DIV(a.T, ATT2_TILE), a.B * (a.h1 - a.h0)), ATT2_THREADS, smem, stream>>>(a);
        cudaCheck(cudaGetLastError());
    });
}
// dQ version 8: version 4's delta pass, the dK/dV kernel of dkdv_version (4, or 6 and 7 where
// attention_wgmma_supported) storing dS^T to a.ds, then version 8's dQ kernel reading it back.
// The dK/dV kernel first: version 8's dQ kernel reads neither V nor lse (the dK/dV kernel may
// overwrite V with dV, as Depth does).
inline void attention_backward8_plain(AttentionArgs a, cudaStream_t stream, int dkdv_version) {
    KERNEL_ASSERT(dkdv_version == 4 || dkdv_version == 6 || dkdv_version == 7);
    if (dkdv_version == 4) {
        a = attention_full_range(a);
        attention_check_args(a, true, 2);
    } else {
        a = attention6_checked(a, true);
    }
    size_t need = attention_ds_elems(a.B, a.H, a.T);
    KERNEL_ASSERT(aligned16(a.ds));  // 16-byte copies of its tiles
    if (!a.ds || a.ds_elems < need)
        runtime_error("allocate the dS scratch (attention_ds_needed before the model is built) or use dQ version 6",
                      "dQ version 8 needs %zu bf16 of dS^T scratch at B = %d, H = %d, T = %d; the arguments give %zu", need, a.B, a.H, a.T,
                      a.ds ? a.ds_elems : (size_t)0);
    attention_backward_preprocess(a, stream);
    attention_backward_dkdv_launch<AttNoEpilogue, true>(a, stream, dkdv_version, AttNoEpilogue());
    attention_backward_dq8_launch(a, stream);
}
// The same for any Epi of attention_backward6: none, since an epilogue runs in the dK/dV kernel,
// before this dQ kernel writes dq, and Depth's fused backward adds its term to dq there
// (attention_backward_tc4 runs dQ version 6 with one).
template <class Epi = AttNoEpilogue>
void attention_backward8(const AttentionArgs& a, cudaStream_t stream, int dkdv_version, const Epi& epi = Epi()) {
    (void)epi;
    if constexpr (Epi::active)
        runtime_error("use dQ version 6 with a dK/dV epilogue", "dQ version 8 writes dq after the dK/dV kernel, whose epilogue (Depth's fused "
                      "backward) adds to dq");
    else
        attention_backward8_plain(a, stream, dkdv_version);
}
// Version 6: the dQ and the dK/dV kernels on wgmma (head dim 64 on an H100/H200, as the forward's
// version 6) with version 4's delta pass, in the same order (dQ first). dq_version and
// dkdv_version choose each kernel: 6, 7 (6 with the block's own rows held as A fragments), or 4
// (the trainer's attention_dq_version and attention_dkdv_version), or 8 (attention_backward8).
// epi: run by each block of the dK/dV kernel, any version, after its stores
// (attention_backward_with_epilogue).
template <class Epi = AttNoEpilogue>
void attention_backward6(AttentionArgs a, cudaStream_t stream, int dq_version = 6, int dkdv_version = 6, const Epi& epi = Epi()) {
    if (dq_version == 8) return attention_backward8(a, stream, dkdv_version, epi);
    a = attention6_checked(a, true);
    KERNEL_ASSERT((dq_version == 4 || attention_version_wgmma(dq_version)) && (dkdv_version == 4 || attention_version_wgmma(dkdv_version)));
    attention_backward_preprocess(a, stream);
    if (dq_version == 7) attention_backward_dq6_launch<true>(a, stream);
    else if (dq_version == 6) attention_backward_dq6_launch<false>(a, stream);
    else attention_backward_dq2_d<64, true>(a, stream);
    attention_backward_dkdv_launch(a, stream, dkdv_version, epi);
}
inline void attention_backward7(const AttentionArgs& a, cudaStream_t stream) { attention_backward6(a, stream, 7, 7); }
#endif  // ENABLE_BF16

// The tensor-core kernels the trainer's entry points run (BF16 build): 4, with cp.async double
// buffering (the default, chosen from ptxas figures and FlashAttention-2's practice; on an H100 a
// whole step took 141.22 ms with it and 141.35 without, dev/results/2026-11-26-h100.md), or 2
// (forward) and 3 (backward) without it. Every version gives the same bits, so
// this changes only speed; dev/cuda/bench_gpt.cu's --attention-version sets it, so that one GPU
// call times whole training steps both ways.
inline int attention_tc_version = 4;
// The forward's version when attention_tc_version is 4: 6 (wgmma, where attention_wgmma_supported;
// version 4 elsewhere: the default, see the top of this file), 7 (likewise), 4, or 5 (32 query rows per warp;
// bench_gpt --attention-forward 5, the variant att_fwd5: 0.994 of version 4's step on an H200,
// 2026-11-28, slower than version 6). VP_ATT_FWD_VERSION at build time, bench_gpt
// --attention-forward at run time.
#ifndef VP_ATT_FWD_VERSION
#define VP_ATT_FWD_VERSION 6
#endif
inline int attention_forward_version = VP_ATT_FWD_VERSION;
// The backward's dQ kernel when attention_tc_version is 4: 6 (wgmma, where
// attention_wgmma_supported; version 4 elsewhere), 7 (likewise), 8 (dQ from the dS^T that the
// dK/dV kernel, of whichever version runs, writes to scratch: attention_ds_needed; every head dim
// and GPU), or 4.
// VP_ATT_DQ_VERSION, bench_gpt --attention-dq.
#ifndef VP_ATT_DQ_VERSION
#define VP_ATT_DQ_VERSION 6
#endif
inline int attention_dq_version = VP_ATT_DQ_VERSION;
// Set before a model is built where some later backward of the process runs dQ version 8 while
// attention_dq_version is another then (bench_gpt's A/B of two ways in one process).
inline bool attention_ds_reserve = false;
// The backward's dK/dV kernel likewise: 6, 7 or 4 (VP_ATT_DKDV_VERSION, bench_gpt --attention-dkdv).
// A value path that extends the dK/dV kernel (Depth's fused backward) runs with either version
// (attention_backward_dkdv_epilogue_ok).
#ifndef VP_ATT_DKDV_VERSION
#define VP_ATT_DKDV_VERSION 6
#endif
inline int attention_dkdv_version = VP_ATT_DKDV_VERSION;
// a build flag naming no kernel would otherwise run version 4 without a word
static_assert(VP_ATT_FWD_VERSION == 4 || VP_ATT_FWD_VERSION == 5 || VP_ATT_FWD_VERSION == 6 || VP_ATT_FWD_VERSION == 7,
              "-DVP_ATT_FWD_VERSION: use 4 (mma.sync), 5 (32 query rows per warp), 6 (wgmma, the default) or 7");
static_assert(VP_ATT_DQ_VERSION == 4 || VP_ATT_DQ_VERSION == 6 || VP_ATT_DQ_VERSION == 7 || VP_ATT_DQ_VERSION == 8,
              "-DVP_ATT_DQ_VERSION: use 4 (mma.sync), 6 (wgmma, the default), 7 or 8 (dQ from the dK/dV kernel's dS)");
static_assert(VP_ATT_DKDV_VERSION == 4 || VP_ATT_DKDV_VERSION == 6 || VP_ATT_DKDV_VERSION == 7,
              "-DVP_ATT_DKDV_VERSION: use 4 (mma.sync), 6 (wgmma, the default) or 7");
#ifdef ENABLE_BF16
// The backward at attention_tc_version 4: the dQ and the dK/dV kernel each at the version
// attention_dq_version / attention_dkdv_version chooses (attention_version_for), with Epi run by
// each block of the dK/dV kernel after its stores (AttNoEpilogue for every path's plain backward;
// attention_backward_with_epilogue).
template <class Epi = AttNoEpilogue>
void attention_backward_tc4(const AttentionArgs& a, cudaStream_t stream, const Epi& epi = Epi()) {
    int dq = attention_version_for(a, attention_dq_version), dkdv = attention_version_for(a, attention_dkdv_version);
    // dQ version 8 where the scratch holds this call's tiles (a call at another shape than the one
    // the scratch was sized for, B x T within the model's and T shorter, may need more) and no
    // epilogue adds to dq after the dK/dV kernel (Depth's fused backward does: attention_backward8);
    // version 6 (where it runs, else 4) otherwise. No scratch at all is attention_backward8's error.
    if (dq == 8 && (Epi::active || (a.ds && a.ds_elems < attention_ds_elems(a.B, a.H, a.T)))) dq = attention_version_for(a, 6);
    if (dq == 8) attention_backward8(a, stream, dkdv, epi);
    else if (dq != 4 || dkdv != 4) attention_backward6(a, stream, dq, dkdv, epi);
    else attention_backward_tc<16, true>(a, stream, epi);
}
#endif
// The trainer's entry points: tensor cores in the BF16 build, the exact SIMT kernels in FP32.
// Forward: reads q, k, v; writes out and lse. Backward: reads q, k, v, out, lse, dout; writes
// delta (scratch), dq, and dk/dv (or adds into them with accumulate_dkv).
inline void attention_forward(const AttentionArgs& a, cudaStream_t stream) {
#ifdef ENABLE_BF16
    if (attention_tc_version == 4) {
        switch (attention_version_for(a, attention_forward_version)) {
            case 7: attention_forward7(a, stream); break;
            case 6: attention_forward6(a, stream); break;
            case 5: attention_forward5(a, stream); break;
            default: attention_forward4(a, stream);
        }
    } else {
        attention_forward2(a, stream);
    }
#else
    attention_forward1(a, stream);
#endif
}

inline void attention_backward(const AttentionArgs& a, cudaStream_t stream) {
#ifdef ENABLE_BF16
    if (attention_tc_version == 4) attention_backward_tc4(a, stream);
    else attention_backward3(a, stream);
#else
    attention_backward1(a, stream);
#endif
}

// Whether the trainer's entry points run a kernel of version 4 for these arguments (BF16 build)
// where `chosen` is that kernel's version setting (4; the forward's 5 never; 6 and 7 where not
// attention_wgmma_supported: attention_version_for). The version 4 kernels are the ones a value
// path can extend: attention_forward4_active (the forward's prologue, attention_forward_with_prologue). The dK/dV
// kernel's epilogue (attention_backward_with_epilogue) runs in version 4's kernel and in versions
// 6 and 7's: attention_backward_dkdv_epilogue_ok.
inline bool attention_runs_version4(const AttentionArgs& a, int chosen) {
#ifdef ENABLE_BF16
    return attention_tc_version == 4 && attention_version_for(a, chosen) == 4;
#else
    (void)a, (void)chosen;
    return false;
#endif
}
inline bool attention_forward4_active(const AttentionArgs& a) { return attention_runs_version4(a, attention_forward_version); }
// Whether the trainer's dK/dV kernel for these arguments is one that takes an epilogue: version 4's
// or version 6's (not version 3's, attention_tc_version 2, nor the FP32 build's version 1).
inline bool attention_backward_dkdv_epilogue_ok(const AttentionArgs& a) {
    (void)a;  // every head dim: both versions take one
#ifdef ENABLE_BF16
    return attention_tc_version == 4;
#else
    return false;
#endif
}
// The version of the dK/dV kernel that attention_backward (and attention_backward_with_epilogue)
// runs for these arguments in the BF16 build at attention_tc_version 4: attention_dkdv_version's
// where it is a wgmma version and attention_wgmma_supported, else 4. 0 elsewhere (version 3's
// kernel at attention_tc_version 2, version 1 in the FP32 build).
inline int attention_dkdv_active_version(const AttentionArgs& a) {
#ifdef ENABLE_BF16
    return attention_tc_version == 4 ? attention_version_for(a, attention_dkdv_version) : 0;
#else
    (void)a;
    return 0;
#endif
}
// Whether a model needs dQ version 8's dS^T scratch (attention_ds_elems) in this process: the BF16
// build at attention_tc_version 4 with dQ version 8 chosen, or reserved (attention_ds_reserve).
inline bool attention_ds_needed() {
#ifdef ENABLE_BF16
    return attention_tc_version == 4 && (attention_dq_version == 8 || attention_ds_reserve);
#else
    return false;
#endif
}
// The dynamic shared memory of the dK/dV kernel that attention_backward (and
// attention_backward_with_epilogue) runs for these arguments: what an epilogue may use as scratch.
inline size_t attention_backward_dkdv_smem(const AttentionArgs& a) {
#ifdef ENABLE_BF16
    if (attention_version_wgmma(attention_dkdv_active_version(a))) return att6_smem_dkdv();  // from the unaligned start
    return att2_smem_dkdv(a.D, att2_backward_async_fits(a.D));
#else
    (void)a;
    return 0;
#endif
}

#ifdef ENABLE_BF16
// attention_forward's version 4 kernel with Pro choosing each block's tile (and running first):
// attention_forward_kernel2. Only where attention_forward4_active.
template <class Pro>
void attention_forward_with_prologue(AttentionArgs a, const Pro& pro, cudaStream_t stream) {
    KERNEL_ASSERT(attention_forward4_active(a));
    a = attention_full_range(a);
    attention_check_args(a, false, 2);
    with_head_dim(a.D, [&](auto d) { attention_forward2_d<decltype(d)::value, true, 1>(a, stream, pro); });
}

// attention_backward's kernels, the same versions as attention_backward would choose, with Epi
// run by each block of the dK/dV kernel after its stores (attention_backward_dkdv_kernel2 at
// version 4, attention_backward_dkdv_kernel6 at version 6). Only where
// attention_backward_dkdv_epilogue_ok.
template <class Epi>
void attention_backward_with_epilogue(AttentionArgs a, const Epi& epi, cudaStream_t stream) {
    KERNEL_ASSERT(attention_backward_dkdv_epilogue_ok(a));
    attention_backward_tc4(a, stream, epi);
}
#endif

}  // namespace gpu
