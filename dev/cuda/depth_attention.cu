/*
Kernel lab: Depth-Attention's softmax over depth, forward and backward (value_paths.md section 5),
kernels/depth_attention.cuh.

Compile and run (bf16; build/dev/cuda/fp32/depth_attention is the lab's FP32 build):
  make build/dev/cuda/bf16/depth_attention         (all labs: make dev-cuda)
  ./build/dev/cuda/bf16/depth_attention            check every version, then time each
  ./build/dev/cuda/bf16/depth_attention --check    check only (dev/device_check.sh, the emulator)

Checked shapes (B*T rows, query heads H, KV heads Hkv, head dim D, stride s, layer l, |S(l)|):
  GPT-2 124M's heads:  600 rows,  H = Hkv = 12, D = 64,  s = 6, l = 7:  anchors {0, 6}
  Llama-style GQA:     333 rows,  H = 8, Hkv = 2, D = 128, s = 2, l = 5:  anchors {0, 2, 4}
  small heads:         257 rows,  H = Hkv = 4, D = 16, s = 1, l = 6:  anchors {0..5} (two chunks)
Row counts that leave the last block ragged. The reference is the CPU trainer's VpDepth (fp32) on
the same floatX-rounded inputs: its forward for the anchors below l then for l (each anchor's mixed
value rounded to floatX, as the GPU stores it), its backward for l with u = dL/dv~ random.
The GPU backward overwrites anchor 0's accumulators (overwrite_mask bit 0, poisoned first) and
adds into the others' (random initial values), as the first and later readers do in the trainer.
Timed: GPT-2 124M at B=64, T=1024 (65536 rows), stride 6, layer 7 (|S| = 2, the trainer's
heaviest layers), with the L2 flushed.

version 1: one warp per (position, KV head) item, 2-byte loads per lane, one candidate's row at a
  time.
version 2: D / VEC lanes per item (4 items per warp at D = 64 in bf16), one 16-byte word per lane,
  a chunk of candidates' rows loaded before any is used. The trainer's forward.
version 2 deferred (the trainer's backward): version 2's backward, keeping
  de_n and a copy of u instead of adding to the anchors' accumulators; depth_anchor_gather then
  sums every reader's terms once per anchor. Checked here: the same dv, dk, dq; the kept u equal
  to u; the gather over this one reader bit-identical to version 2's accumulators (both from 0);
  and, on synthetic readers, a gather over 30 readers (two launches) against a CPU sum.
Napkin math, per item and layer, in elements of floatX unless fp32 (nc = |S| + 1 candidates):
  forward   reads q (G D), nc keys and values (2 nc D); writes v~ (D), alpha (nc fp32)
  backward  reads u (D), q (G D), nc values and keys (2 nc D), alpha; reads and writes dk (2 D),
            dq (2 G D); writes dv (D); reads and writes the |S| anchors' two fp32 accumulators
            (4 |S| D fp32); deferred: instead writes u's copy (D) and de (|S| fp32)
  gather    per item and reader: u (D), q (G D), alpha and de; writes two fp32 accumulators once
The GB/s printed are of those bytes. The timing ends with the estimate of a whole GPT-2 124M step's
depth backward (layers 1-6 read one anchor, 7-11 two; the gathers: anchor 0 from 11 readers,
anchor 6 from 5), the accumulate way against the deferred one.
Fused into the attention kernels (BF16; gpu::depth_fused_forward and _backward, off by default in
the trainer): checked (GPT-2's head dim with a ragged tile; GQA with three tiles) as the same bits
as the standalone kernels around the attention kernels, every output; timed at GPT-2 124M's
layer 7 (B=64, T=1024) against the attention kernels alone and the two kernels one after another.
*/
#include "dev/cuda/common.h"
#include "kernels/depth_attention.cuh"

struct DepthShape {
    int BT, H, Hkv, D, stride, layer;
};

// One layer's q, k, v as the trainer lays them out: rows of the fused projection (H + 2 Hkv) D.
struct LayerData {
    std::vector<float> qkv;
    floatX* d_qkv = nullptr;
};

static int qkv_width(const DepthShape& s) { return (s.H + 2 * s.Hkv) * s.D; }

static double forward_bytes(const DepthShape& s, int nc) {
    double items = (double)s.BT * s.Hkv, G = s.H / s.Hkv;
    return items * ((G * s.D + 2.0 * nc * s.D + s.D) * sizeof(floatX) + nc * sizeof(float));
}
// deferred as the trainer runs it: u left in place (no copy), de written
static double backward_bytes(const DepthShape& s, int nc, bool deferred) {
    double items = (double)s.BT * s.Hkv, G = s.H / s.Hkv;
    double common = (s.D + G * s.D + 2.0 * nc * s.D + 2.0 * s.D + 2.0 * G * s.D + s.D) * sizeof(floatX) + nc * sizeof(float);
    return items * (common + (deferred ? (nc - 1) * sizeof(float) : 4.0 * (nc - 1) * s.D * sizeof(float)));
}
static double gather_bytes(int BT, int H, int Hkv, int D, int readers) {
    double items = (double)BT * Hkv, G = H / Hkv;
    return items * (readers * ((D + G * D) * sizeof(floatX) + 2 * sizeof(float)) + 2.0 * D * sizeof(float));
}

// Times of one shape's kernels (ms), for the step estimate
struct DepthTimes {
    float bwd_accumulate = 0, bwd_deferred = 0;
};

// The forward's DepthArgs of a layer whose own q|k|v rows ((H + 2 Hkv) D wide) are at own_qkv,
// with src_qkv.size() sources: source n's key from its q|k|v rows src_qkv[n], its value anchor 0's
// raw v (in those rows) or, for n >= 1, the anchor's stored v~ (anchor_vmix[n], Hkv D wide);
// alpha (one row of n_src + 1 a position and KV head) and vmix where the forward writes them.
static gpu::DepthArgs depth_layer_args(int BT, int H, int Hkv, int D, floatX* own_qkv, const std::vector<floatX*>& src_qkv,
                                       const std::vector<floatX*>& anchor_vmix, float* alpha, floatX* vmix) {
    int W = (H + 2 * Hkv) * D, KV = Hkv * D, nS = (int)src_qkv.size();
    gpu::DepthArgs d;
    d.BT = BT, d.H = H, d.Hkv = Hkv, d.D = D;
    d.q = own_qkv, d.k = d.q + H * D, d.v = d.k + KV, d.q_rs = d.k_rs = d.v_rs = W;
    d.n_src = nS;
    for (int n = 0; n < nS; n++) {
        d.src_k[n] = src_qkv[n] + H * D;
        d.src_v[n] = n == 0 ? src_qkv[0] + H * D + KV : anchor_vmix[n];
        d.src_v_rs[n] = n == 0 ? W : KV;
    }
    d.alpha = alpha, d.alpha_stride = nS + 1, d.vmix = vmix;
    return d;
}

// Runs one shape: checks every version against the CPU (check = true) or times them (into *times).
static bool run_shape(const DepthShape& s, bool check, uint64_t seed, DepthTimes* times = nullptr) {
    ModelConfig c{};
    c.n_layer = s.layer + 1;
    c.n_head = s.H;
    c.n_kv_head = s.Hkv;
    c.head_dim = s.D;
    c.vp.path = VP_DEPTH;
    c.vp.depth_stride = s.stride;
    VpDims dims = {c.n_layer, 1, s.BT, s.H, s.Hkv, s.D};
    int nS = depth_num_sources(c.vp, s.layer), nc = nS + 1, W = qkv_width(s), KV = s.Hkv * s.D;
    size_t layer_elems = (size_t)s.BT * KV;
    printf("depth_attention: B*T=%d H=%d Hkv=%d D=%d stride=%d layer=%d |S|=%d (%s)\n", s.BT, s.H, s.Hkv, s.D, s.stride, s.layer, nS, PRECISION_NAME);

    // the layers involved: the anchors below `layer`, then `layer`
    std::vector<int> layers;
    for (int n = 0; n < nS; n++) layers.push_back(n * s.stride);
    layers.push_back(s.layer);
    std::vector<LayerData> data(layers.size());
    for (size_t i = 0; i < layers.size(); i++) {
        data[i].qkv = round_to_floatx(random_normal((size_t)s.BT * W, seed + i));
        data[i].d_qkv = dev_upload_x(data[i].qkv);
    }
    auto own_of = [&](size_t i) {
        LayerQKV<float> o;
        o.q = data[i].qkv.data();
        o.k = o.q + s.H * s.D;
        o.v = o.k + KV;
        o.q_rs = o.k_rs = o.v_rs = W;
        return o;
    };

    // CPU forward: the anchors in order (their mixed values rounded as the GPU stores them), then
    // the layer. Timing needs none of the references: the anchors' mixed values are then random.
    VpDepth::State<float> st;
    if (check) VpDepth::init(&st, c, dims);
    KERNEL_ASSERT(!check || st.max_cands == nc);  // alpha rows hold exactly this layer's candidates
    std::vector<floatX*> d_anchor_vmix(nS, nullptr);
    for (size_t i = 0; i < layers.size(); i++) {
        int l = layers[i];
        if (!check) {
            if (l > 0 && l != s.layer) d_anchor_vmix[i] = dev_upload_x(round_to_floatx(random_normal(layer_elems, seed + 50 + i)));
            continue;
        }
        VpDepth::forward(&st, c, dims, l, own_of(i), (const float*)nullptr);
        if (l > 0 && l != s.layer) {
            float* vm = st.v_mixed.data() + (size_t)l * layer_elems;
            std::vector<float> rounded = round_to_floatx(std::vector<float>(vm, vm + layer_elems));
            std::copy(rounded.begin(), rounded.end(), vm);
            d_anchor_vmix[i] = dev_upload_x(rounded);
        }
    }
    std::vector<float> vmix_ref, alpha_ref(layer_elems / s.D * nc);
    if (check) {
        const float* vmix_ref_p = st.v_mixed.data() + (size_t)s.layer * layer_elems;
        vmix_ref.assign(vmix_ref_p, vmix_ref_p + layer_elems);
        const float* alpha_p = st.alpha.data() + (size_t)s.layer * s.BT * s.Hkv * nc;
        std::copy(alpha_p, alpha_p + alpha_ref.size(), alpha_ref.begin());
    }

    // CPU backward of the layer: u = dL/dv~ random; dq, dk start random (they are added to), dv at 0
    std::vector<float> u = round_to_floatx(random_normal(layer_elems, seed + 100));
    std::vector<float> dq0 = round_to_floatx(random_normal((size_t)s.BT * s.H * s.D, seed + 101));
    std::vector<float> dk0 = round_to_floatx(random_normal(layer_elems, seed + 102));
    std::vector<float> acc0 = random_normal((size_t)nS * layer_elems, seed + 103);
    std::vector<float> dq_ref = dq0, dk_ref = dk0, dv_ref(layer_elems, 0.0f), zeros(layer_elems, 0.0f), acck_ref, accv_ref;
    if (check) {
        VpDepth::backward_begin(&st, c, dims);
        LayerQKVGrads<float> gr;
        gr.dq = dq_ref.data();
        gr.dk = dk_ref.data();
        gr.dv = dv_ref.data();
        gr.dq_rs = s.H * s.D;
        gr.dk_rs = gr.dv_rs = KV;
        VpDepth::backward(&st, c, dims, s.layer, zeros.data(), u.data(), gr, (const float*)nullptr, (float*)nullptr);
        // accumulators: anchor 0 overwritten (bit 0), the others added to their initial values
        acck_ref.resize((size_t)nS * layer_elems);
        accv_ref.resize((size_t)nS * layer_elems);
        for (int n = 0; n < nS; n++)
            for (size_t e = 0; e < layer_elems; e++) {
                size_t i = (size_t)n * layer_elems + e;
                acck_ref[i] = (n == 0 ? 0.0f : acc0[i]) + st.acc_k[i];
                accv_ref[i] = (n == 0 ? 0.0f : acc0[i]) + st.acc_v[i];
            }
    }

    // GPU buffers
    size_t nl = layers.size() - 1;  // the layer's own data
    floatX *d_vmix = dev_alloc<floatX>(layer_elems), *d_u = dev_upload_x(u), *d_dq = dev_alloc<floatX>(dq0.size()), *d_dk = dev_alloc<floatX>(layer_elems),
           *d_dv = dev_alloc<floatX>(layer_elems);
    float *d_alpha = dev_alloc<float>(alpha_ref.size()), *d_acck = dev_alloc<float>(acc0.size()), *d_accv = dev_alloc<float>(acc0.size());
    float *d_de = dev_alloc<float>(alpha_ref.size()), *d_gk = dev_alloc<float>(layer_elems), *d_gv = dev_alloc<float>(layer_elems);
    floatX* d_ukeep = dev_alloc<floatX>(layer_elems);
    std::vector<floatX*> src_qkv(nS);
    for (int n = 0; n < nS; n++) src_qkv[n] = data[n].d_qkv;
    gpu::DepthArgs a = depth_layer_args(s.BT, s.H, s.Hkv, s.D, data[nl].d_qkv, src_qkv, d_anchor_vmix, d_alpha, d_vmix);
    a.u = d_u, a.dv = d_dv, a.dv_rs = KV, a.dk = d_dk, a.dk_rs = KV, a.dq = d_dq, a.dq_rs = s.H * s.D;
    a.acc_k = d_acck, a.acc_v = d_accv, a.overwrite_mask = 1;

    auto reset_backward = [&] {
        std::vector<floatX> tmp(dq0.size());
        for (size_t i = 0; i < dq0.size(); i++) tmp[i] = (floatX)dq0[i];
        cudaCheck(cudaMemcpy(d_dq, tmp.data(), tmp.size() * sizeof(floatX), cudaMemcpyHostToDevice));
        for (size_t i = 0; i < layer_elems; i++) tmp[i] = (floatX)dk0[i];
        cudaCheck(cudaMemcpy(d_dk, tmp.data(), layer_elems * sizeof(floatX), cudaMemcpyHostToDevice));
        poison(d_dv, layer_elems);
        for (float* acc : {d_acck, d_accv}) {
            cudaCheck(cudaMemcpy(acc, acc0.data(), acc0.size() * sizeof(float), cudaMemcpyHostToDevice));
            poison(acc, layer_elems);  // anchor 0: overwritten
        }
    };

    bool ok = true;
    for (int v = 1; v <= 2; v++) {
        gpu::depth_attention_version = v;
        if (check) {
            printf(" version %d\n", v);
            poison(d_vmix, layer_elems);
            poison(d_alpha, alpha_ref.size());
            gpu::depth_attention_forward(a, 0);
            cudaCheck(cudaDeviceSynchronize());
            ok &= validate_result(d_vmix, vmix_ref, "v~");
            // alpha: fp32 softmax of fp32 dot products of the same rounded inputs, summed in
            // another order than the CPU's: a few ulps of the logits, times |logit| <= ~5. Every
            // column is written: the model ends at `layer`, so alpha_stride (max_cands) = nc.
            ok &= validate_result(d_alpha, alpha_ref, "alpha", 1e-4f, 1e-6f);
            reset_backward();
            gpu::depth_attention_backward(a, 0);
            cudaCheck(cudaDeviceSynchronize());
            ok &= validate_result(d_dv, dv_ref, "dv");
            ok &= validate_result(d_dk, dk_ref, "dk");
            ok &= validate_result(d_dq, dq_ref, "dq");
            // the accumulators are fp32 sums of a few fp32 products of floatX inputs
            ok &= validate_result(d_acck, acck_ref, "acc_k", 1e-4f, 1e-5f);
            ok &= validate_result(d_accv, accv_ref, "acc_v", 1e-4f, 1e-5f);
        } else {
            float fwd = benchmark_kernel(20, [&] { gpu::depth_attention_forward(a, 0); });
            reset_backward();
            float bwd = benchmark_kernel(20, [&] { gpu::depth_attention_backward(a, 0); });
            printf("  version %d: forward %.4f ms, %.0f GB/s; backward %.4f ms, %.0f GB/s\n", v, fwd, forward_bytes(s, nc) / fwd / 1e6, bwd,
                   backward_bytes(s, nc, false) / bwd / 1e6);
            if (v == 2 && times) times->bwd_accumulate = bwd;
        }
    }
    gpu::depth_attention_version = 2;

    // version 2 deferred: the same dv, dk, dq; de and u kept (a copy in u_keep; the trainer's u
    // stays where the attention backward wrote it, u_keep = NULL); the gather over this one reader
    gpu::DepthArgs ad = a;
    ad.acc_k = ad.acc_v = nullptr;
    ad.overwrite_mask = 0;
    ad.de = d_de, ad.u_keep = d_ukeep;
    if (check) {
        printf(" version 2 deferred\n");
        gpu::depth_attention_forward(a, 0);  // alpha
        // the accumulate way's sums from 0 (every bit of the mask): what the gathers must give
        gpu::DepthArgs az = a;
        az.overwrite_mask = ~0ull;
        reset_backward();
        gpu::depth_attention_backward(az, 0);
        cudaCheck(cudaDeviceSynchronize());
        std::vector<float> acck_exact = dev_download(d_acck, acc0.size()), accv_exact = dev_download(d_accv, acc0.size());
        reset_backward();
        poison(d_ukeep, layer_elems);
        poison(d_de, alpha_ref.size());
        gpu::depth_attention_backward(ad, 0);
        cudaCheck(cudaDeviceSynchronize());
        ok &= validate_result(d_dv, dv_ref, "dv");
        ok &= validate_result(d_dk, dk_ref, "dk");
        ok &= validate_result(d_dq, dq_ref, "dq");
        ok &= validate_result(d_ukeep, u, "u kept", 0.0f, 0.0f);
        for (int n = 0; n < nS; n++) {
            gpu::DepthGatherArgs ga;
            ga.BT = s.BT, ga.H = s.H, ga.Hkv = s.Hkv, ga.D = s.D, ga.n = n, ga.q_rs = W, ga.alpha_stride = nc;
            ga.acc_k = d_gk, ga.acc_v = d_gv;
            gpu::DepthReader r;
            r.u = d_ukeep, r.q = a.q, r.alpha = d_alpha, r.de = d_de;
            poison(d_gk, layer_elems);
            poison(d_gv, layer_elems);
            gpu::depth_anchor_gather(ga, {r}, 0);
            cudaCheck(cudaDeviceSynchronize());
            std::vector<float> ek(acck_exact.begin() + n * layer_elems, acck_exact.begin() + (n + 1) * layer_elems);
            std::vector<float> ev(accv_exact.begin() + n * layer_elems, accv_exact.begin() + (n + 1) * layer_elems);
            ok &= validate_result(d_gk, ek, "gather k", 0.0f, 0.0f);
            ok &= validate_result(d_gv, ev, "gather v", 0.0f, 0.0f);
        }
        // u in place (u_keep = NULL, the trainer's): the same gradients and de, to the bit
        printf(" version 2 deferred, u in place\n");
        std::vector<float> de_copy = dev_download(d_de, alpha_ref.size()), dv_copy = dev_download(d_dv, layer_elems),
                           dk_copy = dev_download(d_dk, layer_elems), dq_copy = dev_download(d_dq, dq0.size());
        gpu::DepthArgs ap = ad;
        ap.u_keep = nullptr;
        reset_backward();
        poison(d_de, alpha_ref.size());
        gpu::depth_attention_backward(ap, 0);
        cudaCheck(cudaDeviceSynchronize());
        ok &= validate_result(d_dv, dv_copy, "dv", 0.0f, 0.0f);
        ok &= validate_result(d_dk, dk_copy, "dk", 0.0f, 0.0f);
        ok &= validate_result(d_dq, dq_copy, "dq", 0.0f, 0.0f);
        ok &= validate_result(d_de, de_copy, "de", 0.0f, 0.0f);
    } else {
        gpu::DepthArgs ap = ad;  // the trainer's: u in place
        ap.u_keep = nullptr;
        float bwd = benchmark_kernel(20, [&] { gpu::depth_attention_backward(ap, 0); });
        printf("  version 2 deferred: backward %.4f ms, %.0f GB/s\n", bwd, backward_bytes(s, nc, true) / bwd / 1e6);
        if (times) times->bwd_deferred = bwd;
    }
    for (auto& dl : data) cudaCheck(cudaFree(dl.d_qkv));
    for (floatX* p : d_anchor_vmix)
        if (p) cudaCheck(cudaFree(p));
    for (void* p : {(void*)d_vmix, (void*)d_u, (void*)d_dq, (void*)d_dk, (void*)d_dv, (void*)d_alpha, (void*)d_acck, (void*)d_accv, (void*)d_de, (void*)d_gk,
                    (void*)d_gv, (void*)d_ukeep})
        cudaCheck(cudaFree(p));
    return ok;
}

// depth_anchor_gather over `readers` synthetic readers (u, q in rows of the fused projection,
// alpha, de): checked against a CPU sum in the same order (check = true), or timed. Returns the ms
// (timed) or whether it matched.
static float run_gather(int BT, int H, int Hkv, int D, int readers, bool check, uint64_t seed) {
    int KV = Hkv * D, W = (H + 2 * Hkv) * D, stride = 3, n = 1, G = H / Hkv;
    size_t layer = (size_t)BT * KV, arows = (size_t)BT * Hkv * stride;
    std::vector<std::vector<float>> u(readers), q(readers), al(readers), de(readers);
    std::vector<floatX*> d_u(readers), d_q(readers);
    std::vector<float*> d_al(readers), d_de(readers);
    std::vector<gpu::DepthReader> rs(readers);
    for (int r = 0; r < readers; r++) {
        if (check || r == 0) {  // timed: every reader its own device copy of reader 0's values (a GPT-2 step's 2 G normals take minutes on the host)
            u[r] = round_to_floatx(random_normal(layer, seed + 4 * r));
            q[r] = round_to_floatx(random_normal((size_t)BT * W, seed + 4 * r + 1));
            al[r] = random_normal(arows, seed + 4 * r + 2);
            de[r] = random_normal(arows, seed + 4 * r + 3);
        } else {
            u[r] = u[0], q[r] = q[0], al[r] = al[0], de[r] = de[0];
        }
        d_u[r] = dev_upload_x(u[r]), d_q[r] = dev_upload_x(q[r]), d_al[r] = dev_upload(al[r]), d_de[r] = dev_upload(de[r]);
        rs[r].u = d_u[r], rs[r].q = d_q[r], rs[r].alpha = d_al[r], rs[r].de = d_de[r];
    }
    float *d_k = dev_alloc<float>(layer), *d_v = dev_alloc<float>(layer);
    gpu::DepthGatherArgs ga;
    ga.BT = BT, ga.H = H, ga.Hkv = Hkv, ga.D = D, ga.n = n, ga.q_rs = W, ga.alpha_stride = stride, ga.acc_k = d_k, ga.acc_v = d_v;
    float result;
    if (check) {
        printf("depth_anchor_gather: B*T=%d H=%d Hkv=%d D=%d, %d readers (%s)\n", BT, H, Hkv, D, readers, PRECISION_NAME);
        std::vector<float> ref_k(layer, 0.0f), ref_v(layer, 0.0f);
        float scale = 1.0f / std::sqrt((float)D);
        for (int r = 0; r < readers; r++)
            for (int row = 0; row < BT; row++)
                for (int g = 0; g < Hkv; g++) {
                    size_t ad = ((size_t)row * Hkv + g) * stride + n;
                    for (int d = 0; d < D; d++) {
                        float qb = 0.0f;
                        for (int h = g * G; h < (g + 1) * G; h++) qb += q[r][(size_t)row * W + h * D + d];
                        qb /= G;
                        size_t i = (size_t)row * KV + g * D + d;
                        ref_v[i] += al[r][ad] * u[r][i];
                        ref_k[i] += de[r][ad] * scale * qb;
                    }
                }
        poison(d_k, layer);
        poison(d_v, layer);
        gpu::depth_anchor_gather(ga, rs, 0);
        cudaCheck(cudaDeviceSynchronize());
        // fp32 sums of `readers` products of the same inputs, in the same order; the GPU contracts
        // them (FMA) and the CPU may not: at most about readers * 2^-24 * sum |terms| apart, with
        // sum |terms| ~ 30 * E|N(0,1) N(0,1)| ~ 19 here: 3.4e-5, so 1e-4 abs
        bool ok = validate_result(d_k, ref_k, "gather k", 1e-5f, 1e-4f);
        ok &= validate_result(d_v, ref_v, "gather v", 1e-5f, 1e-4f);
        result = ok ? 1.0f : 0.0f;
    } else {
        result = benchmark_kernel(20, [&] { gpu::depth_anchor_gather(ga, rs, 0); });
        printf("  depth_anchor_gather, %d readers: %.4f ms, %.0f GB/s\n", readers, result, gather_bytes(BT, H, Hkv, D, readers) / result / 1e6);
    }
    for (int r = 0; r < readers; r++)
        for (void* p : {(void*)d_u[r], (void*)d_q[r], (void*)d_al[r], (void*)d_de[r]}) cudaCheck(cudaFree(p));
    cudaCheck(cudaFree(d_k));
    cudaCheck(cudaFree(d_v));
    return result;
}

// Depth's kernels fused into the attention kernels (kernels/depth_attention.cuh, off by default in
// the trainer): the layer's forward as the standalone depth forward then attention_forward,
// against attention_forward_depth_fused, and its backward as attention_backward then the deferred
// depth backward, against attention_backward_depth_fused. check = true: both ways on the same
// inputs, every output bit for bit (v~, alpha, out, lse; u, dq, dk, dv, de). Otherwise timed, with
// the attention kernels alone for reference: what the fusion saves is separate - fused, what the
// depth work still costs inside them is fused - attention alone.
static bool run_fused(int B, int T, int H, int Hkv, int D, int stride, int layer, bool check, uint64_t seed) {
#ifdef ENABLE_BF16
    ModelConfig c{};
    c.n_layer = layer + 1;
    c.vp.path = VP_DEPTH;
    c.vp.depth_stride = stride;
    int BT = B * T, nS = depth_num_sources(c.vp, layer), nc = nS + 1, W = (H + 2 * Hkv) * D, KV = Hkv * D;
    size_t kv = (size_t)BT * KV, qrows = (size_t)BT * H * D, arows = (size_t)BT * Hkv * nc;
    printf("depth fused into attention: B=%d T=%d H=%d Hkv=%d D=%d stride=%d layer=%d |S|=%d\n", B, T, H, Hkv, D, stride, layer, nS);
    // timed: every layer a device copy of the first one's values (GPT-2's shape is 150 M normals a
    // layer, slow on the host; the kernels' speed does not depend on the values)
    std::vector<floatX*> qkv(nS + 1), anchor_vmix(nS, nullptr);
    for (int i = 0; i <= nS; i++) {
        if (check || i == 0) qkv[i] = dev_upload_x(round_to_floatx(random_normal((size_t)BT * W, seed + i)));
        else qkv[i] = dev_alloc<floatX>((size_t)BT * W), cudaCheck(cudaMemcpy(qkv[i], qkv[0], (size_t)BT * W * sizeof(floatX), cudaMemcpyDeviceToDevice));
    }
    for (int n = 1; n < nS; n++) {
        if (check) anchor_vmix[n] = dev_upload_x(round_to_floatx(random_normal(kv, seed + 20 + n)));
        else anchor_vmix[n] = dev_alloc<floatX>(kv), cudaCheck(cudaMemcpy(anchor_vmix[n], qkv[0], kv * sizeof(floatX), cudaMemcpyDeviceToDevice));
    }
    floatX *d_vmix = dev_alloc<floatX>(kv), *d_out = dev_alloc<floatX>(qrows), *d_dout = dev_upload_x(round_to_floatx(random_normal(qrows, seed + 40)));
    floatX *d_dq = dev_alloc<floatX>(qrows), *d_dk = dev_alloc<floatX>(kv), *d_dv = dev_alloc<floatX>(kv);
    float *d_alpha = dev_alloc<float>(arows), *d_de = dev_alloc<float>(arows), *d_lse = dev_alloc<float>((size_t)B * H * T),
          *d_delta = dev_alloc<float>((size_t)B * H * T);
    int* d_sync = dev_alloc<int>(gpu::depth_forward_sync_ints(B, T, Hkv));
    cudaCheck(cudaMemset(d_sync, 0, gpu::depth_forward_sync_ints(B, T, Hkv) * sizeof(int)));
    gpu::DepthArgs d = depth_layer_args(BT, H, Hkv, D, qkv[nS], std::vector<floatX*>(qkv.begin(), qkv.begin() + nS), anchor_vmix, d_alpha, d_vmix);
    gpu::AttentionArgs fa;
    fa.B = B, fa.T = T, fa.H = H, fa.Hkv = Hkv, fa.D = D, fa.h0 = 0, fa.h1 = H;
    fa.q = d.q, fa.k = d.k, fa.q_rs = fa.k_rs = W, fa.v = d_vmix, fa.v_rs = KV, fa.out = d_out, fa.lse = d_lse;
    gpu::AttentionArgs ba = fa;  // the trainer's Depth layer: dL/dv~ (u) written over v~
    ba.dout = d_dout, ba.delta = d_delta, ba.dq = d_dq, ba.dq_rs = H * D, ba.dk = d_dk, ba.dk_rs = KV, ba.dv = d_vmix, ba.dv_rs = KV;
    gpu::DepthArgs bd = d;
    bd.u = d_vmix, bd.dv = d_dv, bd.dv_rs = KV, bd.dk = d_dk, bd.dk_rs = KV, bd.dq = d_dq, bd.dq_rs = H * D, bd.de = d_de;
    static int gen = 0;
    gpu::DepthForwardSync sync = gpu::depth_forward_sync_in(d_sync, B, T, Hkv);
    int saved_fwd = gpu::depth_fused_forward, saved_bwd = gpu::depth_fused_backward;
    gpu::depth_fused_forward = gpu::depth_fused_backward = 1;
    bool ok = gpu::depth_fused_forward_active(fa, d, sync) && gpu::depth_fused_backward_active(ba, bd);
    if (!ok) printf("  the fused kernels cannot run here (attention kernels at version 6, or the shape)\n");
    auto fwd_separate = [&] {
        gpu::depth_attention_forward(d, 0);
        gpu::attention_forward(fa, 0);
    };
    auto fwd_fused = [&] {
        sync.gen = ++gen;
        gpu::attention_forward_depth_fused(fa, d, sync, 0);
    };
    auto bwd_separate = [&] {
        gpu::attention_backward(ba, 0);
        gpu::depth_attention_backward(bd, 0);
    };
    auto bwd_fused = [&] { gpu::attention_backward_depth_fused(ba, bd, 0); };
    if (ok && check) {
        // both ways from the same inputs, their outputs poisoned first: each way's forward, then
        // its backward (which writes u over the v~ its forward made)
        auto outputs = [&](bool forward) {
            std::vector<std::vector<float>> o;
            cudaCheck(cudaDeviceSynchronize());
            if (forward) {
                for (const floatX* p : {(const floatX*)d_vmix, (const floatX*)d_out}) o.push_back(dev_download(p, p == d_out ? qrows : kv));
                o.push_back(dev_download(d_alpha, arows));
                o.push_back(dev_download(d_lse, (size_t)B * H * T));
            } else {
                o.push_back(dev_download(d_vmix, kv));
                o.push_back(dev_download(d_dq, qrows));
                o.push_back(dev_download(d_dk, kv));
                o.push_back(dev_download(d_dv, kv));
                o.push_back(dev_download(d_de, arows));
            }
            return o;
        };
        const char* fwd_names[] = {"v~", "out", "alpha", "lse"};
        const char* bwd_names[] = {"u", "dq", "dk", "dv", "de"};
        std::vector<std::vector<float>> sep[2], fus[2];
        for (int fused = 0; fused <= 1; fused++) {
            poison(d_vmix, kv), poison(d_out, qrows), poison(d_alpha, arows), poison(d_lse, (size_t)B * H * T);
            fused ? fwd_fused() : fwd_separate();
            (fused ? fus : sep)[0] = outputs(true);
            if (fused && gpu::depth_forward_sync_failed(sync, 0)) printf("  %s\n", gpu::depth_forward_sync_error()), ok = false;
            poison(d_dq, qrows), poison(d_dk, kv), poison(d_dv, kv), poison(d_de, arows);
            fused ? bwd_fused() : bwd_separate();
            (fused ? fus : sep)[1] = outputs(false);
        }
        for (int pass = 0; pass < 2; pass++)
            for (size_t i = 0; i < sep[pass].size(); i++) {
                bool same = sep[pass][i].size() == fus[pass][i].size() &&
                            !memcmp(sep[pass][i].data(), fus[pass][i].data(), sep[pass][i].size() * sizeof(float));
                printf("  %s %-5s fused %s the separate kernels' bits\n", pass ? "backward" : "forward ", pass ? bwd_names[i] : fwd_names[i],
                       same ? "has" : "DIFFERS FROM");
                ok &= same;
            }
    } else if (ok) {
        float att_f = benchmark_kernel(20, [&] { gpu::attention_forward(fa, 0); });
        float sep_f = benchmark_kernel(20, fwd_separate), fus_f = benchmark_kernel(20, fwd_fused);
        if (gpu::depth_forward_sync_failed(sync, 0)) printf("  %s\n", gpu::depth_forward_sync_error()), ok = false;
        float att_b = benchmark_kernel(20, [&] { gpu::attention_backward(ba, 0); });
        float sep_b = benchmark_kernel(20, bwd_separate), fus_b = benchmark_kernel(20, bwd_fused);
        printf("  forward:  attention alone %.4f ms, + depth kernel %.4f ms, fused %.4f ms (saves %.4f, depth inside costs %.4f)\n", att_f, sep_f, fus_f,
               sep_f - fus_f, fus_f - att_f);
        printf("  backward: attention alone %.4f ms, + depth kernel %.4f ms, fused %.4f ms (saves %.4f, depth inside costs %.4f)\n", att_b, sep_b, fus_b,
               sep_b - fus_b, fus_b - att_b);
    }
    gpu::depth_fused_forward = saved_fwd;
    gpu::depth_fused_backward = saved_bwd;
    for (floatX* p : qkv) cudaCheck(cudaFree(p));
    for (floatX* p : anchor_vmix)
        if (p) cudaCheck(cudaFree(p));
    for (void* p : {(void*)d_vmix, (void*)d_out, (void*)d_dout, (void*)d_dq, (void*)d_dk, (void*)d_dv, (void*)d_alpha, (void*)d_de, (void*)d_lse,
                    (void*)d_delta, (void*)d_sync})
        cudaCheck(cudaFree(p));
    return ok;
#else
    (void)B, (void)T, (void)H, (void)Hkv, (void)D, (void)stride, (void)layer, (void)check, (void)seed;
    return true;  // the fused kernels are the BF16 build's
#endif
}

int main(int argc, char** argv) {
    if (!lab_has_device()) return 0;
    bool check_only = lab_flag(argc, argv, "--check");
    bool ok = true;
    ok &= run_shape({600, 12, 12, 64, 6, 7}, true, 1);
    ok &= run_shape({333, 8, 2, 128, 2, 5}, true, 2);
    ok &= run_shape({257, 4, 4, 16, 1, 6}, true, 3);
    ok &= run_gather(333, 8, 2, 128, 30, true, 5) == 1.0f;  // two launches (24 + 6 readers)
    ok &= run_gather(600, 12, 12, 64, 3, true, 6) == 1.0f;
    ok &= run_fused(2, 80, 2, 2, 64, 3, 4, true, 9);   // GPT-2's head dim, a ragged tile, one anchor
    ok &= run_fused(1, 144, 4, 2, 32, 2, 5, true, 10);  // GQA, two anchors, three tiles
    if (ok && !check_only) {
        DepthTimes one, two;  // layers reading one anchor (1-6) and two (7-11)
        run_shape({65536, 12, 12, 64, 6, 6}, false, 4, &one);
        run_shape({65536, 12, 12, 64, 6, 7}, false, 4, &two);
        float g11 = run_gather(65536, 12, 12, 64, 11, false, 7), g5 = run_gather(65536, 12, 12, 64, 5, false, 8);
        float acc = 6 * one.bwd_accumulate + 5 * two.bwd_accumulate, def = 6 * one.bwd_deferred + 5 * two.bwd_deferred + g11 + g5;
        printf("GPT-2 124M step (B=64, T=1024, stride 6), the depth backward: accumulate %.3f ms; deferred %.3f ms (gathers %.3f ms)\n", acc, def, g11 + g5);
        run_fused(64, 1024, 12, 12, 64, 6, 7, false, 11);  // GPT-2 124M's heaviest layers, two anchors
    }
    printf(ok ? "All results match.\n" : "MISMATCH\n");
    return ok ? 0 : 1;
}
