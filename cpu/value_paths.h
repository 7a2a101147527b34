// cpu/value_paths.h: the interface every cross-layer value path implements, and the selection.
//
// value_paths.md section 0: in all five paths the attention core is unchanged. A path only
// decides (a) which keys and values a layer's attention reads, and (b) where the core's
// gradients wrt those keys and values go. So each path is one policy type with three hooks,
// called at exactly three places in gpt_forward / gpt_backward:
//
//   forward(state, l, own, lambda)        -> AttnKV: the K and V layer l's attention reads
//   backward_begin(state)                    zero the cross-layer accumulators
//   backward(state, l, dk_att, dv_att, g, lambda, dlambda)
//                                            route the core's dK, dV (and, for Depth-Attention,
//                                            a query gradient) into layer l's own q/k/v gradients
//                                            and into other layers' accumulators
//
// The backward visits layers L-1 .. 0. A source layer j is only ever read by layers l > j, so by
// the time the backward reaches j every contribution to j's accumulator is in: no atomics, and a
// fixed summation order (value_paths.md section 0, "reverse-order argument").
//
// Each path lives in its own header, whole: to see what SLA changes, read cpu/vp_sla.h.
// The trainer binary uses ActiveValuePath (chosen by VALUE_PATH_ID at compile time); the tests
// instantiate all five in one program to check the equivalences between them.
#pragma once

#include <cmath>
#include <cstring>
#include <vector>

#include "host/config.h"
#include "host/value_path.h"

// A layer's own projections, as the attention core would read them in vanilla attention.
// Row strides are in elements; rows are the B*T positions.
template <typename real>
struct LayerQKV {
    const real* q = nullptr;  // (B,T,H*D) queries after QK-norm and RoPE (Llama) or raw (GPT-2)
    long q_rs = 0;
    const real* k = nullptr;  // (B,T,Hkv*D) keys, likewise
    long k_rs = 0;
    const real* v = nullptr;  // (B,T,Hkv*D) raw value projection; NULL where the layer has none (SVFormer l >= 1)
    long v_rs = 0;
};

// The keys and values the attention core of one layer reads.
template <typename real>
struct AttnKV {
    const real* k = nullptr;  // (B,T,Hkv*D)
    long k_rs = 0;
    const real* v = nullptr;  // (B,T,Hkv*D)
    long v_rs = 0;
};

// Gradients of a layer's own q, k, v (the slots LayerQKV points at). Hooks ACCUMULATE (+=).
template <typename real>
struct LayerQKVGrads {
    real* dq = nullptr;
    long dq_rs = 0;
    real* dk = nullptr;
    long dk_rs = 0;
    real* dv = nullptr;
    long dv_rs = 0;
};

// Sizes the hooks need.
struct VpDims {
    int L, B, T, H, Hkv, D;
    int BT() const { return B * T; }
    int KV() const { return Hkv * D; }  // width of a row of K or V
};

inline VpDims vp_dims(const ModelConfig& c, int B, int T) { return {c.n_layer, B, T, c.n_head, c.n_kv_head, c.head_dim}; }

// dst[r, 0:width] += scale * src[r, 0:width] for rows r < rows.
template <typename real>
inline void add_rows(real* dst, long dst_rs, const real* src, long src_rs, int width, int rows, real scale = 1) {
#pragma omp parallel for
    for (int r = 0; r < rows; r++) {
        real* d = dst + r * dst_rs;
        const real* s = src + r * src_rs;
        for (int i = 0; i < width; i++) d[i] += scale * s[i];
    }
}

// d[r, 0:width] = s[r, 0:width]
template <typename real>
inline void copy_rows(real* dst, long dst_rs, const real* src, long src_rs, int width, int rows) {
#pragma omp parallel for
    for (int r = 0; r < rows; r++) memcpy(dst + r * dst_rs, src + r * src_rs, sizeof(real) * width);
}

#include "cpu/vp_vanilla.h"    // defines: VpVanilla
#include "cpu/vp_resformer.h"  // defines: VpResformer
#include "cpu/vp_svformer.h"   // defines: VpSvformer
#include "cpu/vp_sla.h"        // defines: VpSla
#include "cpu/vp_depth.h"      // defines: VpDepth

#if VALUE_PATH_ID == VP_VANILLA
typedef VpVanilla ActiveValuePath;
#elif VALUE_PATH_ID == VP_RESFORMER
typedef VpResformer ActiveValuePath;
#elif VALUE_PATH_ID == VP_SVFORMER
typedef VpSvformer ActiveValuePath;
#elif VALUE_PATH_ID == VP_SLA
typedef VpSla ActiveValuePath;
#elif VALUE_PATH_ID == VP_DEPTH
typedef VpDepth ActiveValuePath;
#endif
