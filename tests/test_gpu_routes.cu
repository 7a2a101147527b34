// tests/test_gpu_routes.cu: the GPU trainer's value-path plumbing, run on the CPU against the
// reference's policies (cpu/vp_*.h). No GPU needed: compiled by nvcc, it runs wherever the tests run.
//
// A value path on the GPU is (a) pointers and routes that train_gpt.cu's hooks hand to the
// attention kernels (attention_forward_args / attention_backward_args), (b) what the kernels do
// with them per element (attn_kv_source, attn_mix_value, attn_dv_scales, attn_route_grad:
// __host__ __device__, the very functions the kernels call), and (c) the host bookkeeping of which accumulator already
// holds a contribution (value_path_record_writes), and Depth's slots (depth_backward_args,
// depth_anchor_readers). This test points a GpuModel's activation,
// scratch and value-path buffers into host memory, fills every layer's q/k/v with random values,
// and checks, layer by layer, against the CPU policy given the same inputs:
//   forward:  the K and V every KV head of every layer reads, element by element;
//   backward: with random core gradients dK^l, dV^l for every layer, visited L-1..0 as gpt_backward
//             does, each layer's own k and v gradient slots after its routes (cross-layer
//             accumulators included; ResFormer's and SVFormer's v^0 terms kept in each layer's
//             attention output and summed before layer 0, which starts as NaN so that a slot
//             nobody kept would show), and ResFormer's dlambda_l;
// for ResFormer (fixed, learnable), SVFormer, SLA (ORIG and CHAIN, one or all KV heads skipping,
// several skip distances) on both families, GQA. What it cannot cover: the kernels' tiling and
// arithmetic (test_gpt on a GPU), and Depth-Attention, whose mixing happens in its own kernels
// (kernels/depth_attention.cuh), so only its bookkeeping (what each reader keeps, which slots
// each anchor's gather sums) is checked here.
#define TESTING
#include "train_gpt_cpu.cpp"
#include "train_gpt.cu"
#include "tests/testing.h"

#ifndef ENABLE_FP32
#error "tests/test_gpu_routes.cu is built with -DENABLE_FP32 (floatX = float on the host)"
#endif

struct RouteCase {
    const char* name;
    const char* arch;
    int L, H, Hkv;
    ValuePathConfig vp;
};

static ValuePathConfig vp_of(int path, int learn = 0, int sla_layers = 0, int sla_heads = 0, int chain = 0, int stride = 1) {
    ValuePathConfig v;
    memset(&v, 0, sizeof(v));
    v.path = path;
    v.resformer_learn = learn;
    v.sla_layers = sla_layers;
    v.sla_heads = sla_heads;
    v.sla_chain = chain;
    v.depth_stride = stride;
    return v;
}

static std::vector<RouteCase> route_cases() {
    return {
        {"resformer_fixed_gpt2", "gpt2", 4, 2, 2, vp_of(VP_RESFORMER)},
        {"resformer_learn_llama_gqa", "llama", 4, 4, 2, vp_of(VP_RESFORMER, 1)},
        {"svformer_gpt2", "gpt2", 4, 2, 2, vp_of(VP_SVFORMER)},
        {"svformer_llama_gqa", "llama", 3, 4, 2, vp_of(VP_SVFORMER)},
        {"sla_orig_gpt2_nl1", "gpt2", 5, 4, 4, vp_of(VP_SLA, 0, 1, 3, 0)},
        {"sla_chain_gpt2_nl1", "gpt2", 5, 4, 4, vp_of(VP_SLA, 0, 1, 3, 1)},
        {"sla_orig_gpt2_nl2", "gpt2", 6, 4, 4, vp_of(VP_SLA, 0, 2, 1, 0)},
        {"sla_chain_gpt2_nl2", "gpt2", 6, 4, 4, vp_of(VP_SLA, 0, 2, 1, 1)},
        {"sla_orig_llama_gqa", "llama", 5, 4, 2, vp_of(VP_SLA, 0, 1, 2, 0)},
        {"sla_chain_llama_allheads", "llama", 5, 4, 1, vp_of(VP_SLA, 0, 2, 4, 1)},
        {"sla_no_skip_heads", "gpt2", 3, 2, 2, vp_of(VP_SLA, 0, 1, 0, 0)},
    };
}

static const int RB = 2, RT = 5, RD = 4;  // tiny: the plumbing, not the numerics, is under test

static ModelConfig route_config(const RouteCase& rc) {
    ModelConfig c;
    memset(&c, 0, sizeof(c));
    c.arch = !strcmp(rc.arch, "gpt2") ? ARCH_GPT2 : ARCH_LLAMA;
    c.n_layer = rc.L;
    c.n_head = rc.H;
    c.n_kv_head = rc.Hkv;
    c.head_dim = RD;
    c.n_embd = rc.H * RD;
    c.ffn_dim = 4 * c.n_embd;
    c.vocab_size = 16;
    c.padded_vocab_size = 128;
    c.max_seq_len = RT;
    c.qk_norm = 0;
    c.vp = rc.vp;
    return c;
}

// A GpuModel whose buffers live in host memory: the hooks only do pointer arithmetic on them.
struct HostGpuModel {
    gpu::GpuModel m;
    std::vector<char> memory;
    std::vector<float> lambdas;  // the fp32 master lambdas (ResFormer learn)
};

static void host_model_init(HostGpuModel* h, const ModelConfig& c, Rng* rng) {
    gpu::GpuModel& m = h->m;
    m.config = c;
    m.B = m.alloc_B = RB;
    m.T = m.alloc_T = RT;
    m.options.recompute = 0;
    std::vector<gpu::TensorSpec> plan = gpu::activation_plan(m.acts, c, RB, RT, 0);
    std::vector<gpu::TensorSpec> s = gpu::scratch_plan(m.scratch, c, RB, RT), v = gpu::value_path_plan(m.vpb, c, RB, RT);
    plan.insert(plan.end(), s.begin(), s.end());
    plan.insert(plan.end(), v.begin(), v.end());
    h->memory.assign(gpu::plan_bytes(plan) + gpu::TENSOR_ALIGN, 0);
    char* base = h->memory.data() + (gpu::TENSOR_ALIGN - (uintptr_t)h->memory.data() % gpu::TENSOR_ALIGN) % gpu::TENSOR_ALIGN;
    gpu::plan_point(plan, base);
    // every layer's projections (raw qkv; Llama's rotated q|k too) get random values
    size_t BT = RB * RT, W = (size_t)(c.n_head + 2 * c.n_kv_head) * RD, QK = (size_t)(c.n_head + c.n_kv_head) * RD;
    for (size_t i = 0; i < (size_t)c.n_layer * BT * W; i++) m.acts.qkv[i] = (float)rng_normal(rng);
    if (m.acts.qk_rot)
        for (size_t i = 0; i < (size_t)c.n_layer * BT * QK; i++) m.acts.qk_rot[i] = (float)rng_normal(rng);
    // the accumulators start as NaN: the routes must never read what no layer wrote (the trainer
    // zeroes its buffers once at allocation, but its correctness must not depend on that)
    size_t nacc = (size_t)gpu::vp_num_accumulators(c) * BT * c.n_kv_head * RD;
    if (m.vpb.acc_k) std::fill(m.vpb.acc_k, m.vpb.acc_k + nacc, NAN);
    if (m.vpb.acc_v) std::fill(m.vpb.acc_v, m.vpb.acc_v + nacc, NAN);
    h->lambdas.resize(c.n_layer);
    for (int l = 0; l < c.n_layer; l++) h->lambdas[l] = 0.2f + 0.15f * l;  // distinct per layer, away from 0 and 1
    m.lambda_f32 = c.vp.resformer_learn ? h->lambdas.data() : nullptr;
}

static bool near(double a, double b) { return std::fabs(a - b) <= 1e-5 * (1.0 + std::fabs(b)); }

// K and V read by every (row, KV head, d) of layer l, as the kernels see them through the args.
static float kernel_k(const gpu::AttentionArgs& aa, int b, int t, int g, int d) {
    gpu::KVSource s = gpu::attn_kv_source(aa, b, g);
    return s.k[(size_t)t * s.k_rs + d];
}
static float kernel_v(const gpu::AttentionArgs& aa, int b, int t, int g, int d) {
    gpu::KVSource s = gpu::attn_kv_source(aa, b, g);
    float v = s.v[(size_t)t * s.v_rs + d];
    return s.vmix ? gpu::attn_mix_value(v, s.vmix[(size_t)t * s.vmix_rs + d], s.lambda) : v;
}

template <typename VP>
static void check_case(const RouteCase& rc) {
    ModelConfig c = route_config(rc);
    Rng rng = rng_stream(77, 1);
    HostGpuModel h;
    host_model_init(&h, c, &rng);
    gpu::GpuModel& m = h.m;
    int L = c.n_layer, Hkv = c.n_kv_head, KV = Hkv * RD, BT = RB * RT;
    VpDims dims = vp_dims(c, RB, RT);
    typename VP::template State<float> st;
    VP::init(&st, c, dims);
    const float* lambda = h.lambdas.data();

    // ResFormer with a fixed lambda: the value projection of layers >= 1 writes the mix into the
    // v slot (matmul_forward_lerp, whose arithmetic test_gpt checks on a GPU); here the slots get
    // what it computes from the raw values, and the reference sees the raw values
    size_t W = (size_t)(c.n_head + 2 * Hkv) * RD;
    std::vector<float> raw_qkv(m.acts.qkv, m.acts.qkv + (size_t)L * BT * W);
    for (int l = 1; l < L; l++)
        if (gpu::resformer_mix_in_projection(c, l)) {
            gpu::OwnQKV o = gpu::own_qkv(&m, l), first = gpu::own_qkv(&m, 0);
            for (int row = 0; row < BT; row++)
                for (int i = 0; i < KV; i++)
                    o.v[(size_t)row * o.v_rs + i] =
                        gpu::attn_mix_value(o.v[(size_t)row * o.v_rs + i], first.v[(size_t)row * first.v_rs + i], gpu::RESFORMER_FIXED_LAMBDA);
        }
    // forward: the K/V every layer reads
    size_t mismatches = 0;
    for (int l = 0; l < L; l++) {
        gpu::OwnQKV o = gpu::own_qkv(&m, l);
        LayerQKV<float> own;
        own.q = o.q;
        own.q_rs = o.qk_rs;
        own.k = o.k;
        own.k_rs = o.qk_rs;
        own.v = raw_qkv.data() + (o.v - m.acts.qkv);  // the raw projection (the slot itself, except above)
        own.v_rs = o.v_rs;
        AttnKV<float> ref = VP::forward(&st, c, dims, l, own, lambda);
        gpu::AttentionArgs aa = gpu::attention_forward_args(&m, l);
        for (int b = 0; b < RB; b++)
            for (int t = 0; t < RT; t++)
                for (int g = 0; g < Hkv; g++)
                    for (int d = 0; d < RD; d++) {
                        size_t row = (size_t)b * RT + t;
                        float rk = ref.k[row * ref.k_rs + g * RD + d], rv = ref.v[row * ref.v_rs + g * RD + d];
                        bool ok = near(kernel_k(aa, b, t, g, d), rk) && near(kernel_v(aa, b, t, g, d), rv);
                        if (!ok && mismatches++ == 0)
                            printf("    %s: layer %d row %zu head %d dim %d: gpu k %g v %g, reference k %g v %g\n", rc.name, l, row, g, d,
                                   kernel_k(aa, b, t, g, d), kernel_v(aa, b, t, g, d), rk, rv);
                    }
    }
    CHECK(mismatches == 0, "%s: %zu K/V elements read differently from the reference's policy", rc.name, mismatches);

    // backward: random core gradients per layer, routed layer L-1..0
    std::vector<std::vector<float>> gk(L), gv(L);
    for (int l = 0; l < L; l++) {
        gk[l].resize((size_t)BT * KV);
        gv[l].resize((size_t)BT * KV);
        for (size_t i = 0; i < gk[l].size(); i++) {
            gk[l][i] = (float)rng_normal(&rng);
            gv[l][i] = (float)rng_normal(&rng);
        }
    }
    VP::backward_begin(&st, c, dims);
    m.acc_written.assign(gpu::vp_num_accumulators(c), 0);
    // the attention outputs start as NaN too: the forward wrote them, and the backward may only
    // read terms it kept there (ResFormer, SVFormer: VP_KEEP_V0_TERMS)
    std::fill(m.acts.atty, m.acts.atty + (size_t)L * BT * c.n_head * RD, NAN);
    std::vector<float> ref_dlambda(L, 0.0f);
    size_t k_bad = 0, v_bad = 0;
    bool own_v_missing_ok = true;
    for (int l = L - 1; l >= 0; l--) {
        // reference: own slots start at zero for every layer (the trainer's dqkv is per-layer scratch)
        std::vector<float> rdq((size_t)BT * c.n_head * RD, 0.0f), rdk((size_t)BT * KV, 0.0f), rdv((size_t)BT * KV, 0.0f);
        LayerQKVGrads<float> g;
        g.dq = rdq.data();
        g.dq_rs = c.n_head * RD;
        g.dk = rdk.data();
        g.dk_rs = KV;
        g.dv = rdv.data();
        g.dv_rs = KV;
        VP::backward(&st, c, dims, l, gk[l].data(), gv[l].data(), g, lambda, ref_dlambda.data());

        // before layer 0 (ResFormer, SVFormer): the accumulator summed from the kept terms, as
        // attention_sum_kept_kernel sums them (fp32, the slots in the order given)
        if (l == 0 && VP_KEEP_V0_TERMS && (rc.vp.path == VP_RESFORMER || rc.vp.path == VP_SVFORMER) && L > 1) {
            std::vector<const gpu::floatX*> slots;
            gpu::KeptSumArgs ka = gpu::v0_kept_sum_args(&m, &slots);
            for (long i = 0; i < ka.n_elems; i++) {
                float x = 0.0f;
                for (const gpu::floatX* slot : slots) x += slot[i];
                ka.acc[i] = x;
            }
        }
        // the GPU's epilogue, element by element, with this layer's routes
        gpu::AttentionArgs aa = gpu::attention_backward_args(&m, l);
        double dlam = 0;
        for (int b = 0; b < RB; b++)
            for (int t = 0; t < RT; t++)
                for (int gh = 0; gh < Hkv; gh++) {
                    gpu::KVSource src = gpu::attn_kv_source(aa, b, gh);
                    float v_own, v_src;
                    gpu::attn_dv_scales(aa, src, &v_own, &v_src);
                    for (int d = 0; d < RD; d++) {
                        size_t row = (size_t)b * RT + t, idx = row * KV + gh * RD + d;
                        float gkv = gk[l][idx], gvv = gv[l][idx];
                        float k_new = gpu::attn_route_grad(aa.dk_route, gh, idx, gkv, aa.dk_route.own_scale, aa.dk_route.src_scale);
                        float v_new = gpu::attn_route_grad(aa.dv_route, gh, idx, gvv, v_own, v_src);
                        if (gpu::attn_route_keeps(aa.dv_route, gh)) aa.dv_route.keep[idx] = v_src * gvv;  // as the epilogues store it
                        if (aa.dlambda_partial) dlam += gvv * (src.vmix[(size_t)t * src.vmix_rs + d] - src.v[(size_t)t * src.v_rs + d]);
                        if (!near(k_new, rdk[idx]) && k_bad++ == 0)
                            printf("    %s: layer %d dk row %zu head %d dim %d: gpu %g, reference %g\n", rc.name, l, row, gh, d, k_new, rdk[idx]);
                        if (aa.dv) {
                            if (!near(v_new, rdv[idx]) && v_bad++ == 0)
                                printf("    %s: layer %d dv row %zu head %d dim %d: gpu %g, reference %g\n", rc.name, l, row, gh, d, v_new, rdv[idx]);
                        } else if (rdv[idx] != 0.0f) {
                            own_v_missing_ok = false;  // the GPU drops a value gradient the reference keeps
                        }
                    }
                }
        gpu::value_path_record_writes(&m, l);
        if (aa.dlambda_partial)
            CHECK(near(dlam, ref_dlambda[l]), "%s: dlambda_%d %g, reference %g", rc.name, l, dlam, ref_dlambda[l]);
        else
            CHECK(ref_dlambda[l] == 0.0f, "%s: the reference has dlambda_%d = %g, the GPU computes none", rc.name, l, ref_dlambda[l]);
    }
    CHECK(k_bad == 0, "%s: %zu own key-gradient elements differ from the reference's routing", rc.name, k_bad);
    CHECK(v_bad == 0, "%s: %zu own value-gradient elements differ from the reference's routing", rc.name, v_bad);
    CHECK(own_v_missing_ok, "%s: a layer without a GPU value slot gets a value gradient in the reference", rc.name);
    printf("    %-28s %d layers, H %d, Hkv %d: K/V reads and routed gradients match the reference\n", rc.name, L, c.n_head, Hkv);
}

static void run_case(const RouteCase& rc) {
    switch (rc.vp.path) {
        case VP_RESFORMER: check_case<VpResformer>(rc); break;
        case VP_SVFORMER: check_case<VpSvformer>(rc); break;
        case VP_SLA: check_case<VpSla>(rc); break;
    }
}

TEST(resformer_routes) {
    for (const RouteCase& rc : route_cases())
        if (rc.vp.path == VP_RESFORMER) run_case(rc);
}
TEST(svformer_routes) {
    for (const RouteCase& rc : route_cases())
        if (rc.vp.path == VP_SVFORMER) run_case(rc);
}
TEST(sla_routes) {
    for (const RouteCase& rc : route_cases())
        if (rc.vp.path == VP_SLA) run_case(rc);
}

// Depth-Attention's anchor gradients: each reader layer's depth backward keeps de and u in its own
// slots (and writes no accumulator); an anchor with readers (every layer above it) sums exactly
// those slots, from the top layer down, at its own candidate index in each reader's alpha/de rows,
// into the one accumulator pair, which its attention backward then adds; the last layer, an
// anchor nobody reads, reads no accumulator.
TEST(depth_anchor_bookkeeping) {
    for (int stride : {1, 2, 3}) {
        ModelConfig c = route_config({"depth", "gpt2", 7, 2, 2, vp_of(VP_DEPTH, 0, 0, 0, 0, stride)});
        Rng rng = rng_stream(5, 5);
        HostGpuModel h;
        host_model_init(&h, c, &rng);
        gpu::GpuModel& m = h.m;
        int L = c.n_layer;
        CHECK(gpu::vp_num_accumulators(c) == 1, "stride %d: %d accumulator pairs, not one", stride, gpu::vp_num_accumulators(c));
        m.acc_written.assign(gpu::vp_num_accumulators(c), 0);
        std::vector<gpu::DepthArgs> kept(L);  // each layer's depth backward arguments, once visited
        for (int l = L - 1; l >= 0; l--) {
            bool gathers = l % stride == 0 && l < L - 1;
            gpu::AttentionArgs aa = gpu::attention_backward_args(&m, l);
            CHECK((aa.dv_route.add != nullptr) == gathers && (aa.dk_route.add != nullptr) == gathers, "stride %d layer %d: the accumulator is %s", stride, l,
                  gathers ? "not added although readers kept their terms" : "added although nobody reads this layer");
            if (gathers) CHECK(aa.dv_route.add == m.vpb.acc_v && aa.dk_route.add == m.vpb.acc_k, "stride %d layer %d: another accumulator added", stride, l);
            if (gathers) {
                gpu::DepthGatherArgs ga = gpu::depth_gather_args(&m, l);
                std::vector<gpu::DepthReader> readers = gpu::depth_anchor_readers(&m, l);
                CHECK(ga.acc_k == m.vpb.acc_k && ga.acc_v == m.vpb.acc_v, "stride %d anchor %d: gathers elsewhere", stride, l);
                CHECK((int)readers.size() == L - 1 - l, "stride %d anchor %d: %zu readers, not %d", stride, l, readers.size(), L - 1 - l);
                for (size_t r = 0; r < readers.size(); r++) {
                    int reader = L - 1 - (int)r;  // descending
                    const gpu::DepthArgs& k = kept[reader];
                    CHECK(ga.n < k.n_src && k.src_k[ga.n] == gpu::own_qkv(&m, l).k, "stride %d anchor %d: candidate %d of layer %d is not this anchor", stride, l, ga.n,
                          reader);
                    CHECK(readers[r].u == k.u && readers[r].de == k.de && readers[r].alpha == k.alpha && readers[r].q == k.q,
                          "stride %d anchor %d: reader %zu is not layer %d's kept slots", stride, l, r, reader);
                }
            }
            gpu::value_path_record_writes(&m, l);
            CHECK(!m.acc_written[0], "stride %d layer %d: an accumulator marked written", stride, l);
            if (l == 0) break;
            kept[l] = gpu::depth_backward_args(&m, l);
            const gpu::DepthArgs& d = kept[l];
            // u: where this layer's attention backward wrote dv~, its own v~ slot (nothing copies it)
            CHECK(aa.dv == gpu::depth_vmix(&m, l) && aa.dv_rs == (long)c.n_kv_head * c.head_dim, "stride %d layer %d: the attention backward writes dv~ elsewhere", stride, l);
            CHECK(!d.acc_k && !d.acc_v && d.de == gpu::depth_de(&m, l) && d.u == aa.dv && !d.u_keep && d.alpha == gpu::depth_alpha(&m, l),
                  "stride %d layer %d: the depth backward keeps its terms elsewhere", stride, l);
            for (int j = 1; j < L; j++)  // no other layer's kept slots overlap
                if (j != l) CHECK(d.u != gpu::depth_vmix(&m, j) && d.de != gpu::depth_de(&m, j), "stride %d layer %d: shares layer %d's slots", stride, l, j);
        }
    }
}

int main(int argc, char** argv) { return run_registered_tests(argc, argv); }
