// cpu/vp_svformer.h: SVFormer, every layer shares layer 0's values (value_paths.md section 3).
//
// Forward: layer 0 is vanilla and keeps v^0; layers l >= 1 attend with their own queries and keys
// over v^0. Those layers have no value projection at all: the parameter layout drops it
// (value_path_value_proj_layers in host/value_path.h), so the model is
// (L-1)(C*Hkv*D + Hkv*D) parameters smaller and no FLOPs are spent on values after layer 0.
// Backward: dL/dv^0 = sum over all layers of G^l (the core's value gradient), via dv0_acc.
// PyTorch: o_l = F.scaled_dot_product_attention(q_l, k_l, v_0).
#pragma once

struct VpSvformer {
    static const int id = VP_SVFORMER;

    template <typename real>
    struct State {
        LayerQKV<real> first;       // layer 0's projections: its v is the value of every layer
        std::vector<real> dv0_acc;  // (B,T,Hkv*D): sum_{l>=1} G^l
    };

    template <typename real>
    static void init(State<real>* s, const ModelConfig&, const VpDims& d) {
        s->dv0_acc.assign((size_t)d.BT() * d.KV(), 0);
    }

    template <typename real>
    static AttnKV<real> forward(State<real>* s, const ModelConfig&, const VpDims&, int l, const LayerQKV<real>& own, const real* lambda) {
        if (l == 0) s->first = own;
        return {own.k, own.k_rs, s->first.v, s->first.v_rs};
    }

    template <typename real>
    static void backward_begin(State<real>* s, const ModelConfig&, const VpDims&) {
        std::fill(s->dv0_acc.begin(), s->dv0_acc.end(), (real)0);
    }

    template <typename real>
    static void backward(State<real>* s, const ModelConfig&, const VpDims& d, int l, const real* dk_att, const real* dv_att, const LayerQKVGrads<real>& g,
                         const real* lambda, real* dlambda) {
        int KV = d.KV(), BT = d.BT();
        add_rows(g.dk, g.dk_rs, dk_att, KV, KV, BT);
        if (l > 0) {
            add_rows(s->dv0_acc.data(), (long)KV, dv_att, KV, KV, BT);  // g.dv: this layer has no value projection
            return;
        }
        add_rows(g.dv, g.dv_rs, dv_att, KV, KV, BT);
        add_rows(g.dv, g.dv_rs, s->dv0_acc.data(), KV, KV, BT);
    }
};
