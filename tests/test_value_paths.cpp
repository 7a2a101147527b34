// tests/test_value_paths.cpp: the five value paths of the CPU reference, all in one program.
//
//   * finite differences in double of every parameter gradient (dlambda included) for every
//     path x family, at shapes that exercise the cross-layer routes (value_paths.md section 7):
//     L = 5, GQA group 2 (Llama, with QK-norm), Depth stride 2 (anchor 2's mixed value feeds
//     anchor 4, and contains v^0), SLA n_l = 2 so 2 n_l < L and ORIG differs from CHAIN;
//   * the equivalences: ResFormer lambda=0 == vanilla; ResFormer lambda=1 forward == SVFormer;
//     SLA n_h=0 == vanilla; SLA ORIG == CHAIN when 2 n_l >= L, and != when 2 n_l < L;
//     Depth-Attention with anchor logits at -inf == vanilla;
//   * parameter counts per path against the formula;
//   * Depth-Attention's mean weights as logged (depth_alpha);
//   * multiple-choice scoring (host/mc_eval.h): batched, padded and truncated rows against the
//     definition one token at a time, for every path x family; the accuracies worked by hand.
// Tolerances of the finite differences: tests/gradcheck.h. Equivalences compare double-precision
// runs and must agree to 1e-12 relative (they are the same arithmetic up to adding exact zeros).
#define TESTING
#include "train_gpt_cpu.cpp"
#include "tests/testing.h"
#include "tests/gradcheck.h"

// A small model of the given family with the given value path and settings.
// head_dim > 0: a llama whose heads are not C / H wide (--head-dim; Qwen3's D = 128 at any C).
static ModelConfig path_config(int arch, int path, int sla_layers = 2, int sla_heads = 2, int sla_chain = 0, int depth_stride = 2, int learn = 0,
                               int head_dim = 0) {
    RunConfig rc;
    const char* argv[] = {"test"};
    parse_command_line(&rc, 1, (char**)argv);
    rc.arch = arch == ARCH_GPT2 ? "gpt2" : "llama";
    rc.layers = 5;
    rc.heads = 4;
    rc.kv_heads = arch == ARCH_GPT2 ? 4 : 2;  // GQA group 2 for Llama
    rc.dim = 16;                              // D = 4 unless head_dim says otherwise
    rc.head_dim = head_dim;
    rc.ffn_dim = arch == ARCH_GPT2 ? 0 : 12;
    rc.vocab = 11;
    rc.max_seq = 8;
    rc.qk_norm = arch == ARCH_LLAMA;
    ModelConfig c = model_config_from_flags(rc);
    memset(&c.vp, 0, sizeof(c.vp));
    c.vp.path = path;
    c.vp.resformer_learn = learn;
    c.vp.resformer_lambda_lr = 0.02f;
    c.vp.sla_layers = sla_layers;
    c.vp.sla_heads = sla_heads;
    c.vp.sla_chain = sla_chain;
    c.vp.depth_stride = depth_stride;
    return c;
}

static const int FAMILIES[] = {ARCH_GPT2, ARCH_LLAMA};

// ----------------------------------------------------------------------------
// finite differences

// Both families, and llamas with D = 6 and D = 2 (attention H*D = 24 wider and 8 narrower than
// C = 16), where a C that should be H*D (or the reverse) in a path's routing changes sizes and
// strides (until 2026-11-30 the narrow case ran for vanilla only, in test_gpt_cpu).
template <typename VP>
static void fd_path(int learn_or_chain = 0) {
    struct { int arch, head_dim; } models[] = {{ARCH_GPT2, 0}, {ARCH_LLAMA, 0}, {ARCH_LLAMA, 6}, {ARCH_LLAMA, 2}};
    for (auto m : models) {
        ModelConfig c = path_config(m.arch, VP::id, 2, 2, VP::id == VP_SLA ? learn_or_chain : 0, 2, VP::id == VP_RESFORMER ? learn_or_chain : 0,
                                    m.head_dim);
        CHECK(m.head_dim == 0 || c.n_head * c.head_dim != c.n_embd, "the model with --head-dim has H*D = C");
        int checked = model_fd_check<VP>(c, 100 + m.arch + m.head_dim);
        CHECK(checked >= 10, "%s: only %d tensors checked", value_path_name(VP::id), checked);
    }
}

TEST(fd_vanilla) { fd_path<VpVanilla>(); }
TEST(fd_resformer_fixed) { fd_path<VpResformer>(0); }
TEST(fd_resformer_learn_dlambda) { fd_path<VpResformer>(1); }
TEST(fd_svformer) { fd_path<VpSvformer>(); }
TEST(fd_sla_orig) { fd_path<VpSla>(0); }
TEST(fd_sla_chain) { fd_path<VpSla>(1); }
TEST(fd_depth) { fd_path<VpDepth>(); }

// ----------------------------------------------------------------------------
// equivalences

struct Outputs {
    double loss;
    std::vector<double> grads;                      // flat, in the model's own layout
    std::vector<std::pair<std::string, size_t>> at;  // tensor name -> offset
};

template <typename VP>
static Outputs run_model(GPT<double, VP>* m, uint64_t seed) {
    int B = 2, T = 6;
    std::vector<int> inp, tgt;
    tiny_batch(inp, tgt, B, T, m->config.vocab_size, seed);
    gpt_forward(m, inp.data(), tgt.data(), B, T);
    Outputs o;
    o.loss = 0;
    for (int i = 0; i < B * T; i++) o.loss += m->acts.losses[i];
    o.loss /= B * T;
    gpt_zero_grad(m);
    gpt_backward(m, 1.0);
    o.grads.assign(m->grads_memory, m->grads_memory + m->num_params);
    size_t off = 0;
    for (const ParamSpec& s : m->specs) {
        o.at.push_back({s.name, off});
        off += s.count;
    }
    return o;
}

static size_t offset_of(const Outputs& o, const char* name) {
    for (auto& p : o.at)
        if (p.first == name) return p.second;
    return (size_t)-1;
}

// Copies every tensor the two models share by name, element for element (a tensor that is
// shorter in `to`, like SVFormer's v_w, gets its prefix: layer 0).
template <typename VPa, typename VPb>
static void copy_shared_params(GPT<double, VPb>* to, const GPT<double, VPa>* from) {
    size_t off_from = 0;
    for (const ParamSpec& sf : from->specs) {
        size_t off_to = 0;
        for (const ParamSpec& st : to->specs) {
            if (!strcmp(st.name, sf.name)) memcpy(to->params_memory + off_to, from->params_memory + off_from, sizeof(double) * std::min(st.count, sf.count));
            off_to += st.count;
        }
        off_from += sf.count;
    }
}

// Compares gradients tensor by tensor over the first `count` elements of each named tensor.
static void check_same_grads(const char* what, const Outputs& a, const Outputs& b, const std::vector<ParamSpec>& specs, const char* skip = nullptr) {
    for (const ParamSpec& s : specs) {
        if (!s.count || (skip && strstr(skip, s.name))) continue;
        size_t oa = offset_of(a, s.name), ob = offset_of(b, s.name);
        double scale = 0, err = 0;
        for (size_t i = 0; i < s.count; i++) {
            scale = std::max(scale, std::fabs(a.grads[oa + i]));
            err = std::max(err, std::fabs(a.grads[oa + i] - b.grads[ob + i]));
        }
        CHECK(err <= 1e-12 * scale + 1e-15, "%s: d%s differs by %.3g (scale %.3g)", what, s.name, err, scale);
    }
}

// The two runs compute the same model: equal loss and equal gradient of every shared tensor.
static void check_equivalent(const char* what, int arch, const Outputs& a, const Outputs& b, const std::vector<ParamSpec>& specs) {
    CHECK(close_enough(b.loss, a.loss, 0, 1e-12), "%s (%s): loss %.15g vs %.15g", what, arch_name(arch), b.loss, a.loss);
    check_same_grads(what, a, b, specs);
}

template <typename VP>
static GPT<double, VP> make_model(const ModelConfig& c, uint64_t seed) {
    GPT<double, VP> m;
    gpt_build(&m, c);
    gpt_init_params(&m, seed);
    spread_params(&m, seed + 1);
    return m;
}

TEST(resformer_lambda0_equals_vanilla) {
    for (int arch : FAMILIES) {
        auto van = make_model<VpVanilla>(path_config(arch, VP_VANILLA), 5);
        auto res = make_model<VpResformer>(path_config(arch, VP_RESFORMER, 2, 2, 0, 2, /*learn=*/1), 6);
        copy_shared_params(&res, &van);
        for (int l = 0; l < 5; l++) res.params.vp_lambda[l] = 0;
        Outputs a = run_model(&van, 7), b = run_model(&res, 7);
        check_equivalent("resformer lambda=0 vs vanilla", arch, a, b, van.specs);
        gpt_free(&van);
        gpt_free(&res);
    }
}

TEST(resformer_lambda1_forward_equals_svformer) {
    for (int arch : FAMILIES) {
        auto res = make_model<VpResformer>(path_config(arch, VP_RESFORMER, 2, 2, 0, 2, /*learn=*/1), 8);
        auto sv = make_model<VpSvformer>(path_config(arch, VP_SVFORMER), 9);
        for (int l = 0; l < 5; l++) res.params.vp_lambda[l] = 1;
        copy_shared_params(&sv, &res);  // sv gets layer 0's value projection, the rest it lacks
        Outputs a = run_model(&res, 10), b = run_model(&sv, 10);
        CHECK(close_enough(b.loss, a.loss, 0, 1e-12), "%s loss %.15g vs %.15g", arch_name(arch), b.loss, a.loss);
        // and the mixing did something: with lambda = 1/2 the loss differs
        for (int l = 0; l < 5; l++) res.params.vp_lambda[l] = 0.5;
        Outputs h = run_model(&res, 10);
        CHECK(std::fabs(h.loss - a.loss) > 1e-6, "lambda has no effect on the loss");
        gpt_free(&res);
        gpt_free(&sv);
    }
}

TEST(sla_no_skip_heads_equals_vanilla) {
    for (int arch : FAMILIES) {
        auto van = make_model<VpVanilla>(path_config(arch, VP_VANILLA), 11);
        auto sla = make_model<VpSla>(path_config(arch, VP_SLA, 2, /*n_h=*/0), 12);
        copy_shared_params(&sla, &van);
        Outputs a = run_model(&van, 13), b = run_model(&sla, 13);
        check_equivalent("sla n_h=0 vs vanilla", arch, a, b, van.specs);
        gpt_free(&van);
        gpt_free(&sla);
    }
}

TEST(sla_orig_equals_chain_iff_2nl_ge_L) {
    for (int arch : FAMILIES) {
        for (int n_l : {3, 2}) {  // L = 5: 2*3 >= 5 (readings coincide), 2*2 < 5 (they differ)
            auto orig = make_model<VpSla>(path_config(arch, VP_SLA, n_l, 2, 0), 14);
            auto chain = make_model<VpSla>(path_config(arch, VP_SLA, n_l, 2, 1), 14);
            Outputs a = run_model(&orig, 15), b = run_model(&chain, 15);
            if (2 * n_l >= 5) {
                check_equivalent("sla orig vs chain (2 n_l >= L)", arch, a, b, orig.specs);
            } else {
                CHECK(std::fabs(b.loss - a.loss) > 1e-6, "%s n_l=%d: ORIG and CHAIN should differ when 2 n_l < L", arch_name(arch), n_l);
            }
            gpt_free(&orig);
            gpt_free(&chain);
        }
    }
}

TEST(depth_neg_inf_anchor_logits_equals_vanilla) {
    for (int arch : FAMILIES) {
        auto van = make_model<VpVanilla>(path_config(arch, VP_VANILLA), 16);
        auto dep = make_model<VpDepth>(path_config(arch, VP_DEPTH), 17);
        copy_shared_params(&dep, &van);
        Outputs a = run_model(&van, 18);
        Outputs plain = run_model(&dep, 18);
        CHECK(std::fabs(plain.loss - a.loss) > 1e-6, "depth mixing has no effect");
        gpt_ensure_activations(&dep, 2, 6);  // the flag lives in the path's state, which the first forward created
        dep.vp.force_anchor_logits_neg_inf = true;
        Outputs b = run_model(&dep, 18);
        check_equivalent("depth -inf vs vanilla", arch, a, b, van.specs);
        gpt_free(&van);
        gpt_free(&dep);
    }
}

// SLA's forward on hand-made K/V, one position, llama (H = 4, Hkv = 2, G = 2, D = 4): n_h = 2 query
// heads are ONE KV head (section 10), so from layer n_l = 2 on only KV head 1 (columns [D, 2D))
// comes from layer l - 2; KV head 0 stays the layer's own. Layers 0 and 1 are untouched.
TEST(sla_gqa_skip_heads_by_hand) {
    ModelConfig c = path_config(ARCH_LLAMA, VP_SLA, 2, 2, 0);
    VpDims d = vp_dims(c, 1, 1);
    CHECK(d.H == 4 && d.Hkv == 2 && d.D == 4, "H %d Hkv %d D %d", d.H, d.Hkv, d.D);
    const int L = d.L, KV = d.KV();
    std::vector<std::vector<double>> q(L, std::vector<double>(d.H * d.D)), k(L, std::vector<double>(KV)), v(L, std::vector<double>(KV));
    VpSla::State<double> s;
    VpSla::init(&s, c, d);
    for (int l = 0; l < L; l++) {
        for (int i = 0; i < KV; i++) k[l][i] = 100 * l + i, v[l][i] = -(100 * l + i) - 1;
        LayerQKV<double> own{q[l].data(), (long)(d.H * d.D), k[l].data(), (long)KV, v[l].data(), (long)KV};
        AttnKV<double> e = VpSla::forward(&s, c, d, l, own, (const double*)nullptr);
        int src = l >= 2 ? l - 2 : l;
        for (int i = 0; i < KV; i++) {
            int want = i < d.D ? l : src;  // KV head 0 own, KV head 1 from the source layer
            CHECK(e.k[i] == k[want][i] && e.v[i] == v[want][i], "layer %d column %d: k %g v %g, want layer %d's", l, i, e.k[i], e.v[i], want);
        }
    }
}

// Depth-Attention's forward at layer 1 on hand-made tensors, one position, llama (G = 2, D = 4):
// q_bar = mean of the group's two query heads, e_n = <q_bar, k^n> / sqrt(D) over n = {0, own},
// v~ = softmax(e) . (v^0, v^1), each KV head on its own; worked here independently of the path.
TEST(depth_forward_by_hand) {
    ModelConfig c = path_config(ARCH_LLAMA, VP_DEPTH);
    VpDims d = vp_dims(c, 1, 1);
    CHECK(d.H == 4 && d.Hkv == 2 && d.D == 4, "H %d Hkv %d D %d", d.H, d.Hkv, d.D);
    const int KV = d.KV(), D = d.D;
    std::vector<double> q0(d.H * D, 0.0), q1(d.H * D), k0(KV), k1(KV), v0(KV), v1(KV);
    for (int i = 0; i < d.H * D; i++) q1[i] = 0.3 * ((i * 7) % 5) - 0.5;
    for (int i = 0; i < KV; i++) k0[i] = 0.2 * ((i * 3) % 7) - 0.4, k1[i] = 0.5 - 0.15 * i, v0[i] = 1.0 + i, v1[i] = -2.0 + 0.5 * i;
    VpDepth::State<double> s;
    VpDepth::init(&s, c, d);
    VpDepth::forward(&s, c, d, 0, LayerQKV<double>{q0.data(), (long)(d.H * D), k0.data(), (long)KV, v0.data(), (long)KV}, (const double*)nullptr);
    AttnKV<double> e = VpDepth::forward(&s, c, d, 1, LayerQKV<double>{q1.data(), (long)(d.H * D), k1.data(), (long)KV, v1.data(), (long)KV},
                                        (const double*)nullptr);
    CHECK(e.k == k1.data(), "the core keeps layer 1's own keys");
    for (int g = 0; g < d.Hkv; g++) {
        double e0 = 0, e1 = 0;
        for (int i = 0; i < D; i++) {
            double qb = (q1[(2 * g) * D + i] + q1[(2 * g + 1) * D + i]) / 2;
            e0 += qb * k0[g * D + i] / 2.0;  // sqrt(D) = 2
            e1 += qb * k1[g * D + i] / 2.0;
        }
        double a0 = 1 / (1 + std::exp(e1 - e0)), a1 = 1 - a0;
        CHECK(std::fabs(e0 - e1) > 0.05, "head %d: the two logits should differ (%g, %g)", g, e0, e1);
        for (int i = 0; i < D; i++) {
            double want = a0 * v0[g * D + i] + a1 * v1[g * D + i];
            CHECK(close_enough(e.v[g * D + i], want, 1e-14, 1e-12), "head %d column %d: v~ %.15g, by hand %.15g", g, i, e.v[g * D + i], want);
        }
    }
}

// ----------------------------------------------------------------------------
// a path's hooks alone, at settings the whole-model tests (L = 5, Depth s = 2, SLA n_l = 2,
// n_h = 2) do not reach

// Every layer's own projections in one fused buffer per layer, laid out as GPT-2's qkv
// (B*T rows of W = (H + 2 Hkv) D: q at columns [0, H*D), k at [H*D, H*D + KV), v after), so
// the hooks see row strides that are not KV, as in the trainer. The attention core is replaced
// by a fixed linear read-out, loss = sum_l <Rq_l, q^l> + <Rk_l, K_l> + <Rv_l, V_l>, where (K_l,
// V_l) is what the path's forward hands layer l's core: then the core's VJP is exactly dq = Rq,
// dK = Rk, dV = Rv, and whatever the hooks' backward makes of that must be the derivative of
// this loss wrt every layer's own q, k, v (PyTorch: torch.autograd.grad of the same sum).
struct HookRig {
    ModelConfig c;
    VpDims d;
    int W = 0;
    std::vector<std::vector<double>> qkv, rq, rk, rv;  // per layer: (BT, W), (BT, H*D), (BT, KV), (BT, KV)
    HookRig(const ModelConfig& cfg, int L, int B, int T, uint64_t seed) : c(cfg) {
        c.n_layer = L;
        d = vp_dims(c, B, T);
        W = (d.H + 2 * d.Hkv) * d.D;
        for (int l = 0; l < L; l++) {
            qkv.push_back(random_vector((size_t)d.BT() * W, seed + 4 * l));
            rq.push_back(random_vector((size_t)d.BT() * d.H * d.D, seed + 4 * l + 1));
            rk.push_back(random_vector((size_t)d.BT() * d.KV(), seed + 4 * l + 2));
            rv.push_back(random_vector((size_t)d.BT() * d.KV(), seed + 4 * l + 3));
        }
    }
    LayerQKV<double> own(int l) const {
        const double* p = qkv[l].data();
        int HD = d.H * d.D;
        return {p, (long)W, p + HD, (long)W, p + HD + d.KV(), (long)W};
    }
    // Runs the forward hooks of all layers; kv[l] gets layer l's (K_l, V_l) as dense (BT, KV) copies.
    template <typename VP>
    double forward(typename VP::template State<double>* s, std::vector<std::pair<std::vector<double>, std::vector<double>>>* kv = nullptr) {
        double loss = 0;
        int KV = d.KV(), HD = d.H * d.D;
        if (kv) kv->assign(d.L, {});
        for (int l = 0; l < d.L; l++) {
            AttnKV<double> e = VP::forward(s, c, d, l, own(l), (const double*)nullptr);
            for (int r = 0; r < d.BT(); r++) {
                for (int i = 0; i < HD; i++) loss += rq[l][(size_t)r * HD + i] * qkv[l][(size_t)r * W + i];
                for (int i = 0; i < KV; i++) {
                    loss += rk[l][(size_t)r * KV + i] * e.k[r * e.k_rs + i] + rv[l][(size_t)r * KV + i] * e.v[r * e.v_rs + i];
                    if (kv) (*kv)[l].first.push_back(e.k[r * e.k_rs + i]), (*kv)[l].second.push_back(e.v[r * e.v_rs + i]);
                }
            }
        }
        return loss;
    }
    // The hooks' backward as gpt_backward calls them: layers L-1 .. 0, the core's dq already in
    // the layer's dq slot (the hooks accumulate into it). Returns d loss / d qkv[l] per layer.
    template <typename VP>
    std::vector<std::vector<double>> backward(typename VP::template State<double>* s) {
        int HD = d.H * d.D;
        std::vector<std::vector<double>> dqkv(d.L, std::vector<double>((size_t)d.BT() * W, 0.0));
        VP::backward_begin(s, c, d);
        for (int l = d.L - 1; l >= 0; l--) {
            double* g = dqkv[l].data();
            for (int r = 0; r < d.BT(); r++)
                for (int i = 0; i < HD; i++) g[(size_t)r * W + i] = rq[l][(size_t)r * HD + i];
            LayerQKVGrads<double> grads{g, (long)W, g + HD, (long)W, g + HD + d.KV(), (long)W};
            VP::backward(s, c, d, l, rk[l].data(), rv[l].data(), grads, (const double*)nullptr, (double*)nullptr);
        }
        return dqkv;
    }
    // Central differences of every element of every layer's q, k, v against the hooks' backward.
    template <typename VP>
    void fd_check(const char* what) {
        typename VP::template State<double> s;
        VP::init(&s, c, d);
        forward<VP>(&s);
        std::vector<std::vector<double>> g = backward<VP>(&s);
        for (int l = 0; l < d.L; l++) {
            char name[160];
            snprintf(name, sizeof(name), "%s layer %d dqkv", what, l);
            check_gradient(name, qkv[l].data(), g[l].data(), qkv[l].size(), [&]() { return forward<VP>(&s); }, 100000);
        }
    }
};

// Depth-Attention's forward written out from value_paths.md section 5a/5b, independently of
// cpu/vp_depth.h: S(l) = {j < l : j mod s = 0}; per (row, KV head g) q_bar = mean of query heads
// gG..gG+G-1, e_n = <q_bar, k^n>/sqrt(D) over n in S(l) + [l], alpha = softmax(e),
// v~^l = sum_n alpha_n nu^n with nu^j = v~^j (the anchor's stored mixed value, v~^0 = v^0) and
// nu^l = v^l raw. PyTorch: dev/reference/model.py vp_depth. Returns v~^l per layer, (BT, KV).
static std::vector<std::vector<double>> depth_values_by_spec(const HookRig& rig, int s) {
    const VpDims& d = rig.d;
    int G = d.H / d.Hkv, D = d.D, KV = d.KV(), HD = d.H * D;
    std::vector<std::vector<double>> vt(d.L, std::vector<double>((size_t)d.BT() * KV));
    for (int l = 0; l < d.L; l++) {
        std::vector<int> cands;
        for (int j = 0; j < l; j++)
            if (j % s == 0) cands.push_back(j);
        cands.push_back(l);
        for (int r = 0; r < d.BT(); r++)
            for (int g = 0; g < d.Hkv; g++) {
                const double* row = rig.qkv[l].data() + (size_t)r * rig.W;
                std::vector<double> qbar(D, 0.0), e;
                for (int h = g * G; h < (g + 1) * G; h++)
                    for (int i = 0; i < D; i++) qbar[i] += row[h * D + i] / G;
                double mx = -INFINITY, z = 0;
                for (int n : cands) {
                    const double* kn = rig.qkv[n].data() + (size_t)r * rig.W + HD + g * D;
                    double dot = 0;
                    for (int i = 0; i < D; i++) dot += qbar[i] * kn[i];
                    e.push_back(dot / std::sqrt((double)D));
                    mx = std::max(mx, e.back());
                }
                for (double& x : e) z += (x = std::exp(x - mx));
                for (int i = 0; i < D; i++) {
                    double sum = 0;
                    for (size_t n = 0; n < cands.size(); n++) {
                        int j = cands[n];
                        double nu = j == l ? rig.qkv[l][(size_t)r * rig.W + HD + KV + g * D + i] : vt[j][(size_t)r * KV + g * D + i];
                        sum += e[n] / z * nu;
                    }
                    vt[l][(size_t)r * KV + g * D + i] = sum;
                }
            }
    }
    return vt;
}

// Strides and depths the whole-model tests (L = 5, s = 2) do not reach: s = 1 (every layer an
// anchor, layer 4 mixes 5 candidates), s = 3 and 4 (L not a multiple of s: the last anchor has
// fewer readers), s >= L (only anchor 0), an anchor that is the last layer (L = 7, s = 3: anchor
// 6 is read by nobody) and L = 8, s = 4 (the default L/2). For each, G = 1 (GPT-2) and G = 2
// (llama GQA): the values every layer's core reads against the spec's formula, keys unchanged,
// and the hooks' backward against central differences.
TEST(depth_other_strides_by_spec_and_fd) {
    struct { int L, s; } cases[] = {{5, 1}, {5, 3}, {5, 4}, {5, 5}, {5, 9}, {7, 3}, {8, 4}, {4, 2}};
    for (int arch : FAMILIES)
        for (auto cs : cases) {
            ModelConfig c = path_config(arch, VP_DEPTH, 2, 2, 0, cs.s);
            HookRig rig(c, cs.L, 1, 2, 1000 + 10 * cs.L + cs.s + arch);
            VpDepth::State<double> s;
            VpDepth::init(&s, rig.c, rig.d);
            std::vector<std::pair<std::vector<double>, std::vector<double>>> kv;
            rig.forward<VpDepth>(&s, &kv);
            std::vector<std::vector<double>> want = depth_values_by_spec(rig, cs.s);
            int KV = rig.d.KV(), HD = rig.d.H * rig.d.D;
            for (int l = 0; l < cs.L; l++) {
                double err = 0, scale = 0;
                for (size_t i = 0; i < want[l].size(); i++) {
                    err = std::max(err, std::fabs(kv[l].second[i] - want[l][i]));
                    scale = std::max(scale, std::fabs(want[l][i]));
                    size_t r = i / KV, col = i % KV;
                    CHECK(kv[l].first[i] == rig.qkv[l][r * rig.W + HD + col], "%s L=%d s=%d layer %d: the core must read its own keys", arch_name(arch),
                          cs.L, cs.s, l);
                }
                CHECK(err <= 1e-13 * scale, "%s L=%d s=%d layer %d: v~ off the spec by %.3g (scale %.3g)", arch_name(arch), cs.L, cs.s, l, err, scale);
            }
            char what[96];
            snprintf(what, sizeof(what), "depth %s L=%d s=%d", arch_name(arch), cs.L, cs.s);
            rig.fd_check<VpDepth>(what);
        }
}

// SLA at settings the whole-model tests (n_l = 2, n_h = 2, L = 5) do not reach: n_l = 1 (under
// CHAIN every skip head of every layer resolves to layer 0), n_l = 3 and 4, n_l >= L (vanilla),
// n_h = 1 and 3 on GPT-2 (odd counts), n_h = H (every head skips: no own columns left), and a
// deeper L = 7. The K/V each layer's core reads against section 4a written out here: KV head g
// of layer l is a skip head iff l >= n_l and g >= Hkv - n_h/G; its source is layer l - n_l's own
// K/V (ORIG) or the K/V layer l - n_l's core read (CHAIN, so recursively layer l mod n_l); every
// other head is the layer's own. PyTorch: dev/reference/model.py vp_sla. Then the hooks' backward
// (section 4b's accumulators) against central differences.
TEST(sla_other_settings_by_spec_and_fd) {
    struct { int arch, L, n_l, n_h; } cases[] = {{ARCH_GPT2, 5, 1, 1}, {ARCH_GPT2, 5, 1, 4}, {ARCH_GPT2, 5, 3, 3}, {ARCH_GPT2, 7, 2, 3},
                                                 {ARCH_GPT2, 5, 5, 2}, {ARCH_LLAMA, 5, 1, 2}, {ARCH_LLAMA, 5, 1, 4}, {ARCH_LLAMA, 7, 3, 2},
                                                 {ARCH_LLAMA, 5, 4, 4}, {ARCH_LLAMA, 7, 2, 2}};
    for (auto cs : cases)
        for (int chain : {0, 1}) {
            ModelConfig c = path_config(cs.arch, VP_SLA, cs.n_l, cs.n_h, chain);
            HookRig rig(c, cs.L, 1, 2, 2000 + 100 * cs.L + 10 * cs.n_l + cs.n_h + chain);
            VpSla::State<double> s;
            VpSla::init(&s, rig.c, rig.d);
            std::vector<std::pair<std::vector<double>, std::vector<double>>> kv;
            rig.forward<VpSla>(&s, &kv);
            const VpDims& d = rig.d;
            int KV = d.KV(), HD = d.H * d.D, G = d.H / d.Hkv, first_skip = d.Hkv - cs.n_h / G;
            // want[l][g]: the layer whose own K/V fills KV head g of layer l's core
            std::vector<std::vector<int>> want(cs.L, std::vector<int>(d.Hkv));
            for (int l = 0; l < cs.L; l++)
                for (int g = 0; g < d.Hkv; g++) {
                    bool skip = l >= cs.n_l && g >= first_skip;
                    want[l][g] = !skip ? l : chain ? want[l - cs.n_l][g] : l - cs.n_l;
                }
            for (int l = 0; l < cs.L; l++)
                for (int r = 0; r < d.BT(); r++)
                    for (int i = 0; i < KV; i++) {
                        int src = want[l][i / d.D];
                        const double* row = rig.qkv[src].data() + (size_t)r * rig.W;
                        double k = kv[l].first[(size_t)r * KV + i], v = kv[l].second[(size_t)r * KV + i];
                        CHECK(k == row[HD + i] && v == row[HD + KV + i], "%s L=%d n_l=%d n_h=%d chain=%d layer %d row %d column %d: want layer %d's K/V",
                              arch_name(cs.arch), cs.L, cs.n_l, cs.n_h, chain, l, r, i, src);
                    }
            // value_paths.md: with n_l = 1 the chain takes every skip head of every layer back to
            // layer 0's own K/V. Checked on the K/V the path gave the last layer, against layer 0's
            // projection directly (not through want, which the check above shares)
            if (chain && cs.n_l == 1 && cs.n_h / G >= 1 && cs.L >= 2) {
                int g = d.Hkv - 1;  // the last KV head: a skip head when n_h >= G
                const std::pair<std::vector<double>, std::vector<double>>& last = kv[cs.L - 1];
                for (int r = 0; r < d.BT(); r++)
                    for (int i = g * d.D; i < (g + 1) * d.D; i++) {
                        const double* row0 = rig.qkv[0].data() + (size_t)r * rig.W;
                        CHECK(last.first[(size_t)r * KV + i] == row0[HD + i] && last.second[(size_t)r * KV + i] == row0[HD + KV + i],
                              "n_l = 1 CHAIN, L=%d: layer %d's skip head %d does not read layer 0's K/V (row %d column %d)", cs.L, cs.L - 1, g, r, i);
                    }
            }
            char what[96];
            snprintf(what, sizeof(what), "sla %s L=%d n_l=%d n_h=%d chain=%d", arch_name(cs.arch), cs.L, cs.n_l, cs.n_h, chain);
            rig.fd_check<VpSla>(what);
        }
}

// The depth softmax in float (the trainer's precision) with logits far beyond exp's range
// (float overflows above e^88.7): e = (200, 210) at layer 1. Section 5b computes alpha =
// softmax_n(e) "in fp32", and a softmax is invariant to a shift of its logits, so the answer is
// alpha = (1, e^10) / (1 + e^10) whatever the magnitude (PyTorch's torch.softmax subtracts the
// max); a softmax that exponentiates the raw logits gives inf / inf = NaN here. Expected values
// worked in double from that closed form. One position, llama (G = 2, D = 4, sqrt(D) = 2).
TEST(depth_softmax_large_logits_float) {
    ModelConfig c = path_config(ARCH_LLAMA, VP_DEPTH);
    VpDims d = vp_dims(c, 1, 1);
    const int KV = d.KV(), D = d.D;
    CHECK(d.H == 4 && d.Hkv == 2 && D == 4, "H %d Hkv %d D %d", d.H, d.Hkv, D);
    std::vector<float> q0(d.H * D, 0.0f), q1(d.H * D, 10.0f), k0(KV, 10.0f), k1(KV, 10.5f), v0(KV), v1(KV);
    for (int i = 0; i < KV; i++) v0[i] = 1.0f + i, v1[i] = -2.0f + 0.5f * i;
    // e_0 = <q_bar, k^0> / 2 = 4 * 10 * 10 / 2 = 200, e_1 = 4 * 10 * 10.5 / 2 = 210, every KV head
    VpDepth::State<float> s;
    VpDepth::init(&s, c, d);
    VpDepth::forward(&s, c, d, 0, LayerQKV<float>{q0.data(), (long)(d.H * D), k0.data(), (long)KV, v0.data(), (long)KV}, (const float*)nullptr);
    AttnKV<float> e = VpDepth::forward(&s, c, d, 1, LayerQKV<float>{q1.data(), (long)(d.H * D), k1.data(), (long)KV, v1.data(), (long)KV},
                                       (const float*)nullptr);
    double a1 = 1 / (1 + std::exp(-10.0)), a0 = 1 - a1;
    for (int i = 0; i < KV; i++) {
        double want = a0 * v0[i] + a1 * v1[i];
        CHECK(close_enough(e.v[i], want, 1e-6, 1e-5), "column %d: v~ %.9g, want %.9g", i, (double)e.v[i], want);
    }
}

// ----------------------------------------------------------------------------
// parameter counts

TEST(param_counts_per_path) {
    for (int arch : FAMILIES) {
        ModelConfig v = path_config(arch, VP_VANILLA);
        size_t base = count_params(param_specs(v));
        size_t L = v.n_layer, C = v.n_embd, KV = (size_t)v.n_kv_head * v.head_dim;
        size_t bias = arch == ARCH_GPT2 ? KV : 0;
        CHECK(count_params(param_specs(path_config(arch, VP_RESFORMER))) == base, "resformer fixed adds nothing");
        CHECK(count_params(param_specs(path_config(arch, VP_RESFORMER, 2, 2, 0, 2, 1))) == base + L, "resformer learn adds L lambdas");
        CHECK(count_params(param_specs(path_config(arch, VP_SVFORMER))) == base - (L - 1) * (C * KV + bias), "svformer drops (L-1)(C*Hkv*D + Hkv*D)");
        CHECK(count_params(param_specs(path_config(arch, VP_SLA))) == base, "sla adds nothing");
        CHECK(count_params(param_specs(path_config(arch, VP_DEPTH))) == base, "depth adds nothing");
    }
    // GPT-2 124M: value_paths.md section 3d says SVFormer saves 6,496,512 parameters
    RunConfig rc;
    const char* argv[] = {"test"};
    parse_command_line(&rc, 1, (char**)argv);
    ModelConfig g = model_config_from_flags(rc);
    size_t full = count_params(param_specs(g));
    g.vp.path = VP_SVFORMER;
    CHECK(full - count_params(param_specs(g)) == 6496512u, "GPT-2 124M SVFormer saves %zu", full - count_params(param_specs(g)));
}

// Data parallel sums the gradients slice by slice (host/params.h param_slices: each layer's as
// the backward finishes it, then the rest). Together the slices must cover every parameter
// exactly once, for every family and path (SVFormer's value projection sits in layer 0 only), and
// layer_params must point into its own layer's slices.
TEST(param_slices_cover_the_flat_vector_once) {
    for (int arch : FAMILIES)
        for (int path : {VP_VANILLA, VP_RESFORMER, VP_SVFORMER, VP_SLA, VP_DEPTH}) {
            ModelConfig c = path_config(arch, path, 2, 2, 0, 2, path == VP_RESFORMER);
            std::vector<ParamSpec> specs = param_specs(c);
            size_t n = count_params(specs);
            std::vector<float> flat(n);
            ParamTensors<float> t;
            point_param_tensors(&t, flat.data(), specs);
            std::vector<int> covered(n, 0);
            for (int l = -1; l < c.n_layer; l++)
                for (const auto& sl : param_slices(t, specs, c, l)) {
                    size_t off = (size_t)(sl.first - flat.data());
                    CHECK(off + sl.second <= n, "arch %d path %d layer %d: a slice past the end", arch, path, l);
                    for (size_t i = off; i < off + sl.second && i < n; i++) covered[i]++;
                }
            size_t once = 0;
            for (int k : covered) once += k == 1;
            CHECK(once == n, "arch %d path %d: %zu of %zu parameters covered exactly once", arch, path, once, n);
            LayerParams<float> l2 = layer_params(t, c, 2);
            size_t fc_w_count = 0;
            for (const ParamSpec& sp : specs)
                if (!strcmp(sp.name, "fc_w")) fc_w_count = sp.count;
            CHECK(l2.fc_w == t.fc_w + 2 * (fc_w_count / c.n_layer), "layer 2's fc_w slice");
            CHECK((layer_params(t, c, 1).v_w == nullptr) == (path == VP_SVFORMER), "layer 1's value projection");
        }
}

// Depth-Attention's weights as the logs report them (model_depth_alpha_add, depth_alpha_means):
// per layer 1..L-1 the mean over positions and KV heads of each candidate's weight, read from the
// path's state at the layout of the forward that wrote it (two forwards of different B x T are
// summed); every row is a distribution; with the anchors' logits at -inf the own value takes all.
TEST(depth_alpha_means_for_the_logs) {
    for (int arch : FAMILIES) {
        ModelConfig c = path_config(arch, VP_DEPTH);
        auto m = make_model<VpDepth>(c, 21);
        const int L = c.n_layer, Hkv = c.n_kv_head;
        DepthAlphaSums sums = depth_alpha_sums(c.vp, L);
        std::vector<double> want((size_t)L * 4, 0.0);
        double pairs = 0;
        int shapes[2][2] = {{2, 6}, {1, 5}};
        for (auto& bt : shapes) {
            std::vector<int> inp, tgt;
            tiny_batch(inp, tgt, bt[0], bt[1], c.vocab_size, 22);
            gpt_forward(&m, inp.data(), tgt.data(), bt[0], bt[1]);
            CHECK(model_depth_alpha_add(&m, &sums), "the depth build reports its weights");
            int BT = bt[0] * bt[1], mc = m.vp.max_cands;
            for (int l = 1; l < L; l++)
                for (int r = 0; r < BT; r++)
                    for (int g = 0; g < Hkv; g++)
                        for (int n = 0; n < mc; n++) want[(size_t)l * 4 + n] += m.vp.alpha[(((size_t)l * BT + r) * Hkv + g) * mc + n];
            pairs += BT * Hkv;
        }
        std::vector<std::vector<double>> rows = depth_alpha_means(sums, c.vp, L);
        REQUIRE(rows.size() == (size_t)L - 1, "%zu rows", rows.size());
        for (int l = 1; l < L; l++) {
            const std::vector<double>& row = rows[(size_t)l - 1];
            int nS = (l - 1) / c.vp.depth_stride + 1;  // anchors 0, s, ... below l (stride 2 here)
            CHECK(row.size() == (size_t)nS + 1, "layer %d: %zu entries, want %d", l, row.size(), nS + 1);
            double total = 0;
            for (size_t n = 0; n < row.size(); n++) {
                total += row[n];
                CHECK(close_enough(row[n], want[(size_t)l * 4 + n] / pairs, 1e-15, 1e-12), "layer %d cand %zu: %.15g vs %.15g", l, n, row[n],
                      want[(size_t)l * 4 + n] / pairs);
                CHECK(row[n] > 0.01 && row[n] < 0.99, "layer %d cand %zu: %g (the test model should mix)", l, n, row[n]);
            }
            CHECK(close_enough(total, 1.0, 1e-12, 0), "layer %d: the weights sum to %.15g", l, total);
        }
        m.vp.force_anchor_logits_neg_inf = true;
        DepthAlphaSums own_only = depth_alpha_sums(c.vp, L);
        std::vector<int> inp, tgt;
        tiny_batch(inp, tgt, 2, 6, c.vocab_size, 23);
        gpt_forward(&m, inp.data(), tgt.data(), 2, 6);
        model_depth_alpha_add(&m, &own_only);
        for (const std::vector<double>& row : depth_alpha_means(own_only, c.vp, L))
            for (size_t n = 0; n < row.size(); n++) CHECK(row[n] == (n + 1 == row.size() ? 1.0 : 0.0), "-inf anchors: weight %g at %zu", row[n], n);
        gpt_free(&m);
        auto van = make_model<VpVanilla>(path_config(arch, VP_VANILLA), 24);
        DepthAlphaSums none = depth_alpha_sums(c.vp, L);
        gpt_forward(&van, inp.data(), tgt.data(), 2, 6);
        CHECK(!model_depth_alpha_add(&van, &none) && none.count == 0, "other paths report nothing");
        gpt_free(&van);
    }
}

// ----------------------------------------------------------------------------
// multiple-choice scoring (host/mc_eval.h)

// A set of random examples over the test vocabulary, contexts of 1..5 tokens and endings of 1..4,
// so that at T = 6 some rows fit whole, some lose context and some lose ending tokens too.
static McSet random_mc_set(int V, uint64_t seed) {
    Rng rng = rng_stream(seed, 0);
    auto below = [&](int n) { return (int)(rng_uniform(&rng) * n) % n; };
    McSet set;
    for (int e = 0; e < 7; e++) {
        McExample ex;
        int n_choices = 2 + below(3);
        ex.label = below(n_choices);
        for (int i = 1 + below(5); i > 0; i--) ex.context.push_back(below(V));
        for (int j = 0; j < n_choices; j++) {
            std::vector<int> end;
            for (int i = 1 + below(4); i > 0; i--) end.push_back(below(V));
            ex.endings.push_back(end);
            ex.ending_chars.push_back(1 + below(20));
        }
        set.examples.push_back(ex);
    }
    return set;
}

// Batched scoring (rows packed B to a forward, right-padded, truncated on the left, the losses
// read back at the ending's positions) against the definition computed one token at a time:
// for each scored token, a forward over exactly the tokens before it (within the row's window of
// T + 1) and -log softmax of the last position's logits, in double. Every path and family: the
// padding after a row must not reach back into it, also through the cross-layer routes.
template <typename VP>
static void mc_rows_match_definition() {
    for (int arch : FAMILIES) {
        ModelConfig c = path_config(arch, VP::id, 2, 2, 0, 2, VP::id == VP_RESFORMER);
        GPT<double, VP> m = make_model<VP>(c, 40 + arch);
        const int B = 3, T = 6, V = c.vocab_size, Vp = c.padded_vocab_size;
        McSet set = random_mc_set(V, 50 + arch);
        for (int len_step : {1, 4, MC_FORWARD_STEP}) {  // batches at their own lengths, rounded to 4 or 6, all at T
        std::vector<double> sums;
        mc_row_losses(&m, set, B, T, &sums, len_step);
        size_t row = 0;
        int truncated_rows = 0;
        for (const McExample& ex : set.examples) {
            for (size_t j = 0; j < ex.endings.size(); j++) {
                const std::vector<int>& end = ex.endings[j];
                std::vector<int> seq = ex.context;
                seq.insert(seq.end(), end.begin(), end.end());
                int n = (int)seq.size(), start = std::max(0, n - (T + 1));
                truncated_rows += start > 0;
                double want = 0;
                int scored = 0;
                for (int k = std::max((int)ex.context.size(), start + 1); k < n; k++, scored++) {
                    int len = k - start;
                    gpt_forward(&m, seq.data() + start, (const int*)nullptr, 1, len);
                    const double* logits = m.acts.logits + (size_t)(len - 1) * Vp;
                    double mx = logits[0], z = 0;
                    for (int v = 1; v < V; v++) mx = std::max(mx, logits[v]);
                    for (int v = 0; v < V; v++) z += std::exp(logits[v] - mx);
                    want += -(logits[seq[k]] - mx - std::log(z));
                }
                McRow r = mc_row(ex, (int)j, T);  // what acc_tokavg divides by
                int counted = (int)r.tokens.size() - r.first_scored;
                CHECK(counted == scored, "%s %s row %zu: %d tokens scored, want %d", value_path_name(VP::id), arch_name(arch), row, counted, scored);
                CHECK(close_enough(sums[row], want, 1e-12, 1e-10), "%s %s step %d row %zu: sum %.15g, want %.15g", value_path_name(VP::id), arch_name(arch), len_step, row,
                      sums[row], want);
                row++;
            }
        }
        CHECK(row == sums.size(), "%zu rows scored, %zu expected", sums.size(), row);
        CHECK(truncated_rows > 0 && truncated_rows < (int)row, "the set should mix whole and cut rows (%d of %zu cut)", truncated_rows, row);
        }
        gpt_free(&m);
    }
}

TEST(mc_rows_vanilla) { mc_rows_match_definition<VpVanilla>(); }
TEST(mc_rows_resformer) { mc_rows_match_definition<VpResformer>(); }
TEST(mc_rows_svformer) { mc_rows_match_definition<VpSvformer>(); }
TEST(mc_rows_sla) { mc_rows_match_definition<VpSla>(); }
TEST(mc_rows_depth) { mc_rows_match_definition<VpDepth>(); }

// The three accuracies from given row sums, worked by hand: acc takes the lowest sum, acc_norm the
// lowest sum per character, acc_tokavg the lowest sum per scored token; a tie goes to the lower
// choice; truncated examples are those with any row longer than T + 1.
TEST(mc_accuracies_by_hand) {
    McSet set;
    McExample a;  // label 1: sums 4, 6, 9; chars 2, 6, 3; tokens 1, 3, 9 (token lengths as given)
    a.label = 1;
    a.context = {1, 2};
    a.endings = {{1}, {1, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
    a.ending_chars = {2, 6, 3};
    McExample b;  // label 0: sums 3, 3 (a tie), chars 1, 1, tokens 1, 1
    b.label = 0;
    b.context = {5};
    b.endings = {{7}, {8}};
    b.ending_chars = {1, 1};
    set.examples = {a, b};
    std::vector<double> sums = {4, 6, 9, 3, 3};
    // tokens scored at T = 16: 1, 3, 9, 1, 1 (every row whole)
    // a: acc picks 0 (4 < 6 < 9): wrong; acc_norm 2, 1, 3 picks 1: right; acc_tokavg 4, 2, 1 picks 2: wrong
    // b: every score ties, choice 0 wins: right
    McResult r = mc_accuracies(set, sums, 16);
    CHECK(mc_count_truncated(set, 16) == 0, "no example cut at T = 16");
    CHECK(r.acc == 0.5 && r.acc_norm == 1.0 && r.acc_tokavg == 0.5, "acc %g acc_norm %g acc_tokavg %g", r.acc, r.acc_norm, r.acc_tokavg);
    // at T = 8 example a's third row (2 + 9 = 11 tokens > 9) is cut; b's are not
    CHECK(mc_count_truncated(set, 8) == 1, "one example cut at T = 8");
    CHECK(mc_count_truncated(set, 10) == 0, "11 tokens fit T + 1 = 11");
}

// acc_tokavg divides a row's sum by the tokens actually scored at this T: a row cut to its last
// T + 1 tokens has lost ending tokens too, and its sum covers only those left. Divided by the
// whole ending's length instead, a cut row would look better per token than it is.
TEST(mc_tokavg_divides_by_the_tokens_scored_at_this_T) {
    McSet set;
    McExample a;  // label 1; context 3 tokens; ending 0 has 6 tokens, ending 1 has 1
    a.label = 1;
    a.context = {1, 2, 3};
    a.endings = {{4, 5, 6, 7, 8, 9}, {10}};
    a.ending_chars = {6, 1};
    set.examples = {a};
    std::vector<double> sums = {10, 2};  // given: what the scored tokens' -log p add up to
    // T = 4: row 0 is 3 + 6 = 9 tokens, keeps its last 5 (start 4): ending tokens 6, 7, 8, 9, each
    // with its predecessor in the row, so 4 are scored: 10 / 4 = 2.5 per token, against row 1's
    // 2 / 1 = 2.0 (whole: 4 tokens): acc_tokavg picks 1, right. acc: 2 < 10 picks 1, right.
    // acc_norm: 10 / 6 = 1.67 < 2 / 1 picks 0, wrong.
    CHECK(mc_count_truncated(set, 4) == 1, "row 0 is cut at T = 4");
    McResult r = mc_accuracies(set, sums, 4);
    CHECK(r.acc == 1.0 && r.acc_norm == 0.0 && r.acc_tokavg == 1.0, "T=4: acc %g acc_norm %g acc_tokavg %g", r.acc, r.acc_norm, r.acc_tokavg);
    // T = 16: nothing is cut, row 0 scores all 6 tokens: 10 / 6 = 1.67 < 2.0 picks 0, wrong
    r = mc_accuracies(set, sums, 16);
    CHECK(r.acc == 1.0 && r.acc_norm == 0.0 && r.acc_tokavg == 0.0, "T=16: acc %g acc_norm %g acc_tokavg %g", r.acc, r.acc_norm, r.acc_tokavg);
}

TEST_MAIN()
