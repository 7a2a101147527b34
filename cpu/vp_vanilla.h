// cpu/vp_vanilla.h: vanilla attention (value_paths.md section 1). Every layer reads its own K, V
// and its gradients go back to its own projections. The baseline the other paths are measured
// against, and the shape of the interface they implement (cpu/value_paths.h).
#pragma once

struct VpVanilla {
    static const int id = VP_VANILLA;

    template <typename real>
    struct State {};

    template <typename real>
    static void init(State<real>*, const ModelConfig&, const VpDims&) {}

    template <typename real>
    static AttnKV<real> forward(State<real>*, const ModelConfig&, const VpDims&, int l, const LayerQKV<real>& own, const real* lambda) {
        return {own.k, own.k_rs, own.v, own.v_rs};
    }

    template <typename real>
    static void backward_begin(State<real>*, const ModelConfig&, const VpDims&) {}

    // dk_att, dv_att: (B,T,Hkv*D) gradients wrt the K and V the core read
    template <typename real>
    static void backward(State<real>*, const ModelConfig&, const VpDims& d, int l, const real* dk_att, const real* dv_att, const LayerQKVGrads<real>& g,
                         const real* lambda, real* dlambda) {
        add_rows(g.dk, g.dk_rs, dk_att, d.KV(), d.KV(), d.BT());
        add_rows(g.dv, g.dv_rs, dv_att, d.KV(), d.KV(), d.BT());
    }
};
