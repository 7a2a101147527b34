// cpu/vp_depth.h: Depth-Attention, a softmax over depth that mixes each layer's value with the
// values stored by anchor layers (value_paths.md section 5; LUMIA Lab, arXiv 2606.05014).
//
// Anchors are the layers 0, s, 2s, ... (--depth-stride s, absolute multiples, default L/2).
// Layer l >= 1 reads S(l) = {anchors j < l}. For every position (b, t) and KV head g:
//   q_bar   = mean of the G query heads of group g                       (GQA; identity when G = 1)
//   e_n     = <q_bar, kappa^n> / sqrt(D)       for n in S(l) and n = l    (kappa^n: layer n's key)
//   alpha   = softmax_n(e)
//   v~^l    = sum_n alpha_n nu^n,  nu^n = v~^n (the anchor's stored MIXED value) for n in S(l),
//                                  nu^l = v^l  (the layer's own raw value)
// and the attention core reads (q^l, k^l, v~^l): only the value is replaced, at the same position
// t (attention over depth, no mixing over the sequence). An anchor stores (kappa^l, v~^l), so the
// mixing is recursive: anchor s's value already contains v^0. Layer 0 stores (k^0, v^0).
// The q and k are the ones the core uses (after QK-norm and RoPE for Llama; RoPE does not change
// a same-position dot product). Scale 1/sqrt(D), no new parameters.
//
// Backward for layer l (order matters: step 1 before step 2), u = dL/dv~^l:
//   1. if l is an anchor: u += A_v[l], dkappa^l += A_k[l]     (from later readers)
//   2. c_n = <u, nu^n>, c_bar = sum_n alpha_n c_n, de_n = alpha_n (c_n - c_bar);
//      dv^l += alpha_l u;  A_v[n] += alpha_n u and A_k[n] += de_n q_bar / sqrt(D) for n in S(l);
//      dkappa^l += de_l q_bar / sqrt(D);  dq_h += (sum_n de_n kappa^n / sqrt(D)) / G for h in g.
// PyTorch (one position): a = softmax(stack([q_bar @ k_n for n]) / sqrt(D)); v = sum(a_n * v_n).
#pragma once

struct VpDepth {
    static const int id = VP_DEPTH;

    template <typename real>
    struct State {
        std::vector<LayerQKV<real>> own;   // per layer: its own projections (keys are the anchors' kappa)
        std::vector<real> v_mixed;         // (L,B,T,Hkv*D): v~^l for l >= 1 (what the core reads, and anchors store)
        std::vector<real> q_bar;           // (L,B,T,Hkv*D): group-mean queries
        std::vector<real> alpha;           // (L,B,T,Hkv,max_cands): depth softmax weights, candidates [anchors..., own]
        std::vector<real> acc_k, acc_v;    // (num_anchors,B,T,Hkv*D): gradients from readers, per anchor
        int max_cands = 0;
        bool force_anchor_logits_neg_inf = false;  // tests only: alpha_own = 1, so the path must equal vanilla
    };

    static int num_anchors(const ModelConfig& c) { return CEIL_DIV(c.n_layer, c.vp.depth_stride); }
    static bool is_anchor(const ModelConfig& c, int l) { return l % c.vp.depth_stride == 0; }
    static int num_sources(const ModelConfig& c, int l) { return depth_num_sources(c.vp, l); }  // |S(l)|

    template <typename real>
    static void init(State<real>* s, const ModelConfig& c, const VpDims& d) {
        size_t layer = (size_t)d.BT() * d.KV();
        s->own.assign(d.L, LayerQKV<real>());
        s->v_mixed.assign(d.L * layer, 0);
        s->q_bar.assign(d.L * layer, 0);
        s->max_cands = num_sources(c, d.L - 1) + 1;
        s->alpha.assign((size_t)d.L * d.BT() * d.Hkv * s->max_cands, 0);
        s->acc_k.assign(num_anchors(c) * layer, 0);
        s->acc_v.assign(num_anchors(c) * layer, 0);
    }

    // The stored value of anchor j: v^0 for layer 0, else its mixed value.
    template <typename real>
    static const real* anchor_value(const State<real>* s, int j, const VpDims& d, long* rs) {
        if (j == 0) {
            *rs = s->own[0].v_rs;
            return s->own[0].v;
        }
        *rs = d.KV();
        return s->v_mixed.data() + (size_t)j * d.BT() * d.KV();
    }

    template <typename real>
    static AttnKV<real> forward(State<real>* s, const ModelConfig& c, const VpDims& d, int l, const LayerQKV<real>& own, const real* lambda) {
        s->own[l] = own;
        if (l == 0) return {own.k, own.k_rs, own.v, own.v_rs};
        int KV = d.KV(), D = d.D, G = d.H / d.Hkv, nS = num_sources(c, l), nc = nS + 1, stride = c.vp.depth_stride;
        size_t layer = (size_t)d.BT() * KV;
        real* vmix = s->v_mixed.data() + l * layer;
        real* qbar = s->q_bar.data() + l * layer;
        real* alpha = s->alpha.data() + (size_t)l * d.BT() * d.Hkv * s->max_cands;
        real scale = (real)1 / std::sqrt((real)D);
#pragma omp parallel for
        for (int r = 0; r < d.BT(); r++) {
            std::vector<real> e(nc);
            for (int g = 0; g < d.Hkv; g++) {
                real* qb = qbar + (size_t)r * KV + g * D;
                for (int i = 0; i < D; i++) {
                    real sum = 0;
                    for (int h = g * G; h < (g + 1) * G; h++) sum += own.q[r * own.q_rs + h * D + i];
                    qb[i] = sum / G;
                }
                real maxe = -INFINITY;
                for (int n = 0; n < nc; n++) {
                    const LayerQKV<real>& src = s->own[n < nS ? n * stride : l];
                    real dot = 0;
                    for (int i = 0; i < D; i++) dot += qb[i] * src.k[r * src.k_rs + g * D + i];
                    e[n] = (n < nS && s->force_anchor_logits_neg_inf) ? -INFINITY : dot * scale;
                    maxe = std::max(maxe, e[n]);
                }
                real sum = 0;
                for (int n = 0; n < nc; n++) sum += (e[n] = std::exp(e[n] - maxe));
                real* a = alpha + ((size_t)r * d.Hkv + g) * s->max_cands;
                for (int n = 0; n < nc; n++) a[n] = e[n] / sum;
                real* out = vmix + (size_t)r * KV + g * D;
                for (int i = 0; i < D; i++) out[i] = a[nS] * own.v[r * own.v_rs + g * D + i];
                for (int n = 0; n < nS; n++) {
                    long rs;
                    const real* nu = anchor_value(s, n * stride, d, &rs);
                    for (int i = 0; i < D; i++) out[i] += a[n] * nu[r * rs + g * D + i];
                }
            }
        }
        return {own.k, own.k_rs, vmix, (long)KV};
    }

    template <typename real>
    static void backward_begin(State<real>* s, const ModelConfig&, const VpDims&) {
        std::fill(s->acc_k.begin(), s->acc_k.end(), (real)0);
        std::fill(s->acc_v.begin(), s->acc_v.end(), (real)0);
    }

    template <typename real>
    static void backward(State<real>* s, const ModelConfig& c, const VpDims& d, int l, const real* dk_att, const real* dv_att, const LayerQKVGrads<real>& g,
                         const real* lambda, real* dlambda) {
        int KV = d.KV(), BT = d.BT(), D = d.D, G = d.H / d.Hkv, stride = c.vp.depth_stride;
        size_t layer = (size_t)BT * KV;
        add_rows(g.dk, g.dk_rs, dk_att, KV, KV, BT);
        // step 1: an anchor first collects what its readers sent back
        std::vector<real> u(dv_att, dv_att + layer);
        if (is_anchor(c, l)) {
            size_t a_off = (size_t)(l / stride) * layer;
            add_rows(u.data(), (long)KV, s->acc_v.data() + a_off, KV, KV, BT);
            add_rows(g.dk, g.dk_rs, s->acc_k.data() + a_off, KV, KV, BT);
        }
        if (l == 0) {
            add_rows(g.dv, g.dv_rs, u.data(), KV, KV, BT);
            return;
        }
        // step 2: the depth softmax's backward
        int nS = num_sources(c, l), nc = nS + 1;
        const LayerQKV<real>& own = s->own[l];
        const real* qbar = s->q_bar.data() + l * layer;
        const real* alpha = s->alpha.data() + (size_t)l * BT * d.Hkv * s->max_cands;
        real scale = (real)1 / std::sqrt((real)D);
        // each position touches only its own row of every buffer, so rows run in parallel
#pragma omp parallel for
        for (int r = 0; r < BT; r++) {
            std::vector<real> de(nc), cn(nc), dqbar(D);
            for (int gh = 0; gh < d.Hkv; gh++) {
                const real* a = alpha + ((size_t)r * d.Hkv + gh) * s->max_cands;
                const real* ur = u.data() + (size_t)r * KV + gh * D;
                const real* qb = qbar + (size_t)r * KV + gh * D;
                real cbar = 0;
                for (int n = 0; n < nc; n++) {
                    long rs = own.v_rs;
                    const real* nu = n < nS ? anchor_value(s, n * stride, d, &rs) : own.v;
                    real dot = 0;
                    for (int i = 0; i < D; i++) dot += ur[i] * nu[r * rs + gh * D + i];
                    cn[n] = dot;
                    cbar += a[n] * dot;
                }
                for (int n = 0; n < nc; n++) de[n] = a[n] * (cn[n] - cbar);
                for (int i = 0; i < D; i++) {
                    g.dv[r * g.dv_rs + gh * D + i] += a[nS] * ur[i];
                    g.dk[r * g.dk_rs + gh * D + i] += de[nS] * scale * qb[i];
                    dqbar[i] = 0;
                }
                for (int n = 0; n < nc; n++) {
                    const LayerQKV<real>& src = s->own[n < nS ? n * stride : l];
                    for (int i = 0; i < D; i++) dqbar[i] += de[n] * scale * src.k[r * src.k_rs + gh * D + i];
                    if (n < nS) {
                        real* ak = s->acc_k.data() + (size_t)n * layer + (size_t)r * KV + gh * D;
                        real* av = s->acc_v.data() + (size_t)n * layer + (size_t)r * KV + gh * D;
                        for (int i = 0; i < D; i++) {
                            av[i] += a[n] * ur[i];
                            ak[i] += de[n] * scale * qb[i];
                        }
                    }
                }
                for (int h = gh * G; h < (gh + 1) * G; h++)
                    for (int i = 0; i < D; i++) g.dq[r * g.dq_rs + h * D + i] += dqbar[i] / G;
            }
        }
    }
};
