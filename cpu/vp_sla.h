// cpu/vp_sla.h: Skip-Layer Attention (value_paths.md section 4; Chen et al., arXiv 2406.11274).
//
// Forward: in every layer l >= n_l (--sla-layers), the last n_h query heads (--sla-heads) are
// skip heads: they attend with their own queries over the keys and values of layer l - n_l.
// Skip heads are counted on KV heads (section 10): with GQA, the last n_h / G KV heads of the
// layer are replaced, so n_h must be a multiple of G. Layers below n_l are vanilla. No new
// parameters, no extra FLOPs. Two readings of "the K/V of layer l - n_l":
//   ORIG  (--sla-chain 0, default): the source layer's own projections k^{l-n_l}, v^{l-n_l};
//   CHAIN (--sla-chain 1): the source layer's effective K/V, itself possibly skipped, so a skip
//         head resolves recursively to layer l mod n_l.
// They coincide whenever 2 n_l >= L (for example n_l = 9 on 12 layers).
//
// Backward (dK^l, dV^l from the core; same for V):
//   ORIG : skip heads of layer l send dK^l to acc_k[l - n_l]; other heads go to layer l's own k.
//          Every layer j adds acc_k[j] (from its readers) into its own k.
//   CHAIN: the gradient of layer l's effective K is dK^l + acc_k[l]; skip heads send it to
//          acc_k[l - n_l], other heads to layer l's own k.
// The reverse layer order completes acc_k[j] before layer j is reached.
// PyTorch (one layer, ORIG): k[:, :, split:] = k_src[:, :, split:] before SDPA, split = Hkv - n_h/G.
#pragma once

struct VpSla {
    static const int id = VP_SLA;

    template <typename real>
    struct State {
        std::vector<LayerQKV<real>> own;  // per layer: its own projections
        std::vector<AttnKV<real>> eff;    // per layer: the K/V its attention read (own, or the gathered buffers)
        std::vector<real> k_gather;       // (L,B,T,Hkv*D): gathered K of skip layers
        std::vector<real> v_gather;       // (L,B,T,Hkv*D)
        std::vector<real> acc_k;          // (L,B,T,Hkv*D): gradient from later readers, per source layer
        std::vector<real> acc_v;
    };

    static int first_skip_kv_head(const ModelConfig& c) { return c.n_kv_head - c.vp.sla_heads / (c.n_head / c.n_kv_head); }
    static bool is_skip_layer(const ModelConfig& c, int l) { return c.vp.sla_heads > 0 && l >= c.vp.sla_layers; }

    template <typename real>
    static void init(State<real>* s, const ModelConfig&, const VpDims& d) {
        size_t n = (size_t)d.L * d.BT() * d.KV();
        s->own.assign(d.L, LayerQKV<real>());
        s->eff.assign(d.L, AttnKV<real>());
        s->k_gather.assign(n, 0);
        s->v_gather.assign(n, 0);
        s->acc_k.assign(n, 0);
        s->acc_v.assign(n, 0);
    }

    template <typename real>
    static AttnKV<real> forward(State<real>* s, const ModelConfig& c, const VpDims& d, int l, const LayerQKV<real>& own, const real* lambda) {
        s->own[l] = own;
        if (!is_skip_layer(c, l)) return s->eff[l] = AttnKV<real>{own.k, own.k_rs, own.v, own.v_rs};
        int src = l - c.vp.sla_layers;
        AttnKV<real> from = c.vp.sla_chain ? s->eff[src] : AttnKV<real>{s->own[src].k, s->own[src].k_rs, s->own[src].v, s->own[src].v_rs};
        int KV = d.KV(), split = first_skip_kv_head(c) * d.D;  // columns [split, KV) are the skip heads
        real* kg = s->k_gather.data() + (size_t)l * d.BT() * KV;
        real* vg = s->v_gather.data() + (size_t)l * d.BT() * KV;
#pragma omp parallel for
        for (int r = 0; r < d.BT(); r++) {
            memcpy(kg + (size_t)r * KV, own.k + r * own.k_rs, sizeof(real) * split);
            memcpy(vg + (size_t)r * KV, own.v + r * own.v_rs, sizeof(real) * split);
            memcpy(kg + (size_t)r * KV + split, from.k + r * from.k_rs + split, sizeof(real) * (KV - split));
            memcpy(vg + (size_t)r * KV + split, from.v + r * from.v_rs + split, sizeof(real) * (KV - split));
        }
        return s->eff[l] = AttnKV<real>{kg, (long)KV, vg, (long)KV};
    }

    template <typename real>
    static void backward_begin(State<real>* s, const ModelConfig&, const VpDims&) {
        std::fill(s->acc_k.begin(), s->acc_k.end(), (real)0);
        std::fill(s->acc_v.begin(), s->acc_v.end(), (real)0);
    }

    // Sends columns [0, split) of grad to layer l's own slot and [split, KV) to the source's accumulator.
    template <typename real>
    static void route(real* own, long own_rs, real* acc_src, const real* grad, int split, int KV, int BT) {
#pragma omp parallel for
        for (int r = 0; r < BT; r++) {
            const real* gr = grad + (size_t)r * KV;
            for (int i = 0; i < split; i++) own[r * own_rs + i] += gr[i];
            for (int i = split; i < KV; i++) acc_src[(size_t)r * KV + i] += gr[i];
        }
    }

    template <typename real>
    static void backward(State<real>* s, const ModelConfig& c, const VpDims& d, int l, const real* dk_att, const real* dv_att, const LayerQKVGrads<real>& g,
                         const real* lambda, real* dlambda) {
        int KV = d.KV(), BT = d.BT();
        size_t layer_off = (size_t)l * BT * KV;
        real* acc_k_l = s->acc_k.data() + layer_off;
        real* acc_v_l = s->acc_v.data() + layer_off;
        const real* dk = dk_att;
        const real* dv = dv_att;
        std::vector<real> dk_total, dv_total;
        if (c.vp.sla_chain) {
            // CHAIN: later readers read this layer's effective K/V, so their gradient joins the core's
            dk_total.assign(dk_att, dk_att + (size_t)BT * KV);
            dv_total.assign(dv_att, dv_att + (size_t)BT * KV);
            add_rows(dk_total.data(), (long)KV, acc_k_l, KV, KV, BT);
            add_rows(dv_total.data(), (long)KV, acc_v_l, KV, KV, BT);
            dk = dk_total.data();
            dv = dv_total.data();
        } else {
            // ORIG: later readers read this layer's own projections
            add_rows(g.dk, g.dk_rs, acc_k_l, KV, KV, BT);
            add_rows(g.dv, g.dv_rs, acc_v_l, KV, KV, BT);
        }
        if (!is_skip_layer(c, l)) {
            add_rows(g.dk, g.dk_rs, dk, KV, KV, BT);
            add_rows(g.dv, g.dv_rs, dv, KV, KV, BT);
            return;
        }
        size_t src_off = (size_t)(l - c.vp.sla_layers) * BT * KV;
        int split = first_skip_kv_head(c) * d.D;
        route(g.dk, g.dk_rs, s->acc_k.data() + src_off, dk, split, KV, BT);
        route(g.dv, g.dv_rs, s->acc_v.data() + src_off, dv, split, KV, BT);
    }
};
