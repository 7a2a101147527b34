// cpu/vp_resformer.h: ResFormer, the value residual to layer 0 (value_paths.md section 2).
//
// Forward: layer 0 is vanilla and keeps its raw value projection v^0 (bias included, no norm, no
// RoPE, native KV heads). Every layer l >= 1 mixes its value with it before attention:
//     v^_l = (1 - lambda_l) v^l + lambda_l v^0        (keys and queries unchanged)
// lambda_l = 1/2 (--resformer-lambda fixed, the paper and its code), or one trainable scalar per
// layer initialised at 1/2 (--resformer-lambda learn, modded-nanogpt's "learnable lambda"; layer
// 0's lambda exists but is a no-op and gets zero gradient).
//
// Backward, with G^l = dL/dv^_l from the core (summed over each GQA group by the core):
//     dL/dv^l       += (1 - lambda_l) G^l                          l >= 1
//     dL/dv^0       += G^0 + sum_{l>=1} lambda_l G^l               via the accumulator dv0_acc
//     dL/dlambda_l  += <G^l, v^0 - v^l>
// PyTorch: v = (1 - lam) * v + lam * v0 before F.scaled_dot_product_attention.
// Cost: one (B,T,Hkv*D) buffer per mixing layer for v^ (the core reads it) and one accumulator.
#pragma once

struct VpResformer {
    static const int id = VP_RESFORMER;

    template <typename real>
    struct State {
        std::vector<LayerQKV<real>> own;  // per layer: its own projections (v^0 is own[0].v)
        std::vector<real> v_mixed;        // (L,B,T,Hkv*D): v^_l for l >= 1
        std::vector<real> dv0_acc;        // (B,T,Hkv*D): sum_{l>=1} lambda_l G^l, added into layer 0
        // (L), --resformer-lambda learn, written by the backward: dlambda_l's rounding scale,
        // sqrt(sum_i (|G_i| (|v^0_i| + |v^l_i|))^2), the 2-norm of its terms at the size their
        // inputs have before v^0 - v^l and the sum cancel. dlambda_l is one sum that can cancel
        // (sum |terms| 300x |sum|), so an error in it is judged against this, not |dlambda_l|
        // (test_gpt's random_shapes); nothing else reads it.
        std::vector<double> dlambda_scale;
    };

    template <typename real>
    static void init(State<real>* s, const ModelConfig& c, const VpDims& d) {
        s->own.assign(d.L, LayerQKV<real>());
        s->v_mixed.assign((size_t)d.L * d.BT() * d.KV(), 0);
        s->dv0_acc.assign((size_t)d.BT() * d.KV(), 0);
        s->dlambda_scale.assign(d.L, 0.0);
    }

    template <typename real>
    static real lambda_of(const ModelConfig& c, int l, const real* lambda) {
        return c.vp.resformer_learn ? lambda[l] : (real)0.5;
    }

    template <typename real>
    static AttnKV<real> forward(State<real>* s, const ModelConfig& c, const VpDims& d, int l, const LayerQKV<real>& own, const real* lambda) {
        s->own[l] = own;
        if (l == 0) return {own.k, own.k_rs, own.v, own.v_rs};
        const LayerQKV<real>& first = s->own[0];
        real lam = lambda_of(c, l, lambda);
        real* mixed = s->v_mixed.data() + (size_t)l * d.BT() * d.KV();
        int KV = d.KV();
#pragma omp parallel for
        for (int r = 0; r < d.BT(); r++)
            for (int i = 0; i < KV; i++) mixed[(size_t)r * KV + i] = ((real)1 - lam) * own.v[r * own.v_rs + i] + lam * first.v[r * first.v_rs + i];
        return {own.k, own.k_rs, mixed, (long)KV};
    }

    template <typename real>
    static void backward_begin(State<real>* s, const ModelConfig&, const VpDims&) {
        std::fill(s->dv0_acc.begin(), s->dv0_acc.end(), (real)0);
    }

    template <typename real>
    static void backward(State<real>* s, const ModelConfig& c, const VpDims& d, int l, const real* dk_att, const real* dv_att, const LayerQKVGrads<real>& g,
                         const real* lambda, real* dlambda) {
        int KV = d.KV(), BT = d.BT();
        add_rows(g.dk, g.dk_rs, dk_att, KV, KV, BT);
        if (l == 0) {
            // every later layer's share of v^0 is in the accumulator by now (reverse layer order)
            add_rows(g.dv, g.dv_rs, dv_att, KV, KV, BT);
            add_rows(g.dv, g.dv_rs, s->dv0_acc.data(), KV, KV, BT);
            return;
        }
        real lam = lambda_of(c, l, lambda);
        add_rows(g.dv, g.dv_rs, dv_att, KV, KV, BT, (real)1 - lam);
        add_rows(s->dv0_acc.data(), (long)KV, dv_att, KV, KV, BT, lam);
        if (c.vp.resformer_learn) {
            const LayerQKV<real>& own = s->own[l];
            const LayerQKV<real>& first = s->own[0];
            double dlam = 0, scale2 = 0;  // one fixed-order sum: the gradient of one scalar
            for (int r = 0; r < BT; r++)
                for (int i = 0; i < KV; i++) {
                    real g = dv_att[(size_t)r * KV + i], v0 = first.v[r * first.v_rs + i], vl = own.v[r * own.v_rs + i];
                    dlam += (double)g * (v0 - vl);
                    double size = std::fabs((double)g) * (std::fabs((double)v0) + std::fabs((double)vl));
                    scale2 += size * size;
                }
            dlambda[l] += (real)dlam;
            s->dlambda_scale[l] = std::sqrt(scale2);
        }
    }
};
