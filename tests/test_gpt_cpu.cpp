// tests/test_gpt_cpu.cpp: the CPU reference checked against itself in ways that can fail.
//
//   * every layer's backward against central finite differences of its forward, in double;
//   * the whole model (both families, GQA with group size 2, QK-norm on and off) the same way;
//   * the float build against the double build on the same weights;
//   * results independent of the number of threads (what makes resume bit-exact);
//   * parameter counts against GPT-2 124M's published count and the Llama formula;
//   * padded vocabulary entries never get probability or gradient;
//   * a tiny model trained on a learnable token stream: the loss falls.
//
// The finite-difference tolerance is stated and justified in tests/gradcheck.h.
#define TESTING
#include "train_gpt_cpu.cpp"
#include "tests/testing.h"

#include "tests/gradcheck.h"

// ----------------------------------------------------------------------------
// layer by layer

TEST(fd_layernorm) {
    int N = 5, C = 7;
    auto x = random_vector(N * C, 1), w = random_vector(C, 2), b = random_vector(C, 3), R = random_vector(N * C, 4);
    std::vector<double> out(N * C), mean(N), rstd(N);
    auto loss = [&]() { layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5); return dot(R, out.data()); };
    loss();
    std::vector<double> dx(N * C, 0), dw(C, 0), db(C, 0);
    layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    check_gradient("layernorm dx", x.data(), dx.data(), x.size(), loss);
    check_gradient("layernorm dw", w.data(), dw.data(), w.size(), loss);
    check_gradient("layernorm db", b.data(), db.data(), b.size(), loss);
}

TEST(fd_rmsnorm) {
    int N = 5, C = 6;
    auto x = random_vector(N * C, 5), w = random_vector(C, 6), R = random_vector(N * C, 7);
    std::vector<double> out(N * C), rstd(N);
    auto loss = [&]() { rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5); return dot(R, out.data()); };
    loss();
    std::vector<double> dx(N * C, 0), dw(C, 0);
    rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, C);
    check_gradient("rmsnorm dx", x.data(), dx.data(), x.size(), loss);
    check_gradient("rmsnorm dw", w.data(), dw.data(), w.size(), loss);
}

TEST(fd_qknorm_gqa) {
    // rows hold [q (H heads) | k (Hkv heads) | v (Hkv heads)], as the qkv activation does
    int BT = 3, H = 4, Hkv = 2, D = 4, W = (H + 2 * Hkv) * D, QK = (H + Hkv) * D;
    auto x = random_vector(BT * W, 8), qw = random_vector(D, 9), kw = random_vector(D, 10), R = random_vector(BT * QK, 11);
    std::vector<double> out(BT * QK), rstd(BT * (H + Hkv));
    auto loss = [&]() { qknorm_forward(out.data(), rstd.data(), x.data(), qw.data(), kw.data(), BT, H, Hkv, D, W, QK, 1e-5); return dot(R, out.data()); };
    loss();
    std::vector<double> dx(BT * W, 0), dqw(D, 0), dkw(D, 0);
    qknorm_backward(dx.data(), dqw.data(), dkw.data(), R.data(), x.data(), qw.data(), kw.data(), rstd.data(), BT, H, Hkv, D, W, QK);
    check_gradient("qknorm dx", x.data(), dx.data(), x.size(), loss);
    check_gradient("qknorm dq_w", qw.data(), dqw.data(), D, loss);
    check_gradient("qknorm dk_w", kw.data(), dkw.data(), D, loss);
    for (int i = 0; i < BT; i++)
        for (int j = QK; j < W; j++) CHECK(dx[i * W + j] == 0, "qknorm touched the v columns");
}

TEST(fd_rope) {
    int B = 2, T = 5, NH = 3, D = 6, half = D / 2, rs = NH * D + 2;  // rs > NH*D: strided rows
    std::vector<double> cs(T * half), sn(T * half);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double f = std::pow(10000.0, -2.0 * i / D);
            cs[t * half + i] = std::cos(t * f);
            sn[t * half + i] = std::sin(t * f);
        }
    auto x = random_vector(B * T * rs, 12), R = random_vector(B * T * rs, 13);
    std::vector<double> y(x.size());
    auto loss = [&]() { y = x; rope_forward(y.data(), cs.data(), sn.data(), B, T, NH, D, rs); return dot(R, y.data()); };
    std::vector<double> dx = R;
    rope_backward(dx.data(), cs.data(), sn.data(), B, T, NH, D, rs);
    check_gradient("rope dx", x.data(), dx.data(), x.size(), loss);
    // position 0 is the identity
    loss();
    for (int j = 0; j < NH * D; j++) CHECK(y[j] == x[j], "rope at t=0 must not rotate");
}

TEST(fd_matmul_strided) {
    int N = 4, C = 5, OC = 3, rs = 7;  // output rows strided, as the qkv projections write them
    auto x = random_vector(N * C, 14), w = random_vector(OC * C, 15), b = random_vector(OC, 16), R = random_vector(N * rs, 17);
    for (int i = 0; i < N; i++)
        for (int o = OC; o < rs; o++) R[i * rs + o] = 0;  // columns the matmul does not own
    std::vector<double> out(N * rs, 0);
    auto loss = [&]() { matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC, rs); return dot(R, out.data()); };
    loss();
    std::vector<double> dx(N * C, 0), dw(OC * C, 0), db(OC, 0);
    matmul_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), N, C, OC, rs);
    check_gradient("matmul dx", x.data(), dx.data(), x.size(), loss);
    check_gradient("matmul dw", w.data(), dw.data(), w.size(), loss);
    check_gradient("matmul db", b.data(), db.data(), b.size(), loss);
}

static void attention_fd(int H, int Hkv) {
    int B = 2, T = 5, D = 3, W = (H + 2 * Hkv) * D;
    auto qkv = random_vector(B * T * W, 18 + H), R = random_vector(B * T * H * D, 19 + H);
    std::vector<double> out(B * T * H * D), lse(B * H * T);
    const double* q = qkv.data();
    auto loss = [&]() {
        attention_forward(out.data(), lse.data(), q, qkv.data() + H * D, qkv.data() + (H + Hkv) * D, B, T, H, Hkv, D, W, W, W);
        return dot(R, out.data());
    };
    loss();
    std::vector<double> dqkv(qkv.size(), 0);
    attention_backward(dqkv.data(), dqkv.data() + H * D, dqkv.data() + (H + Hkv) * D, R.data(), q, qkv.data() + H * D, qkv.data() + (H + Hkv) * D, out.data(),
                       lse.data(), B, T, H, Hkv, D, W, W, W, W);
    check_gradient(H == Hkv ? "attention dqkv (MHA)" : "attention dqkv (GQA)", qkv.data(), dqkv.data(), qkv.size(), loss);
    // causality: the output at t=0 depends only on position 0
    std::vector<double> before = out;
    qkv[(1 * T + 0) * W] += 0;  // no-op to keep indices readable
    qkv[(0 * T + 3) * W + H * D] += 1.0;  // perturb the key at t=3 of batch 0
    loss();
    for (int h = 0; h < H; h++)
        for (int d = 0; d < D; d++) CHECK(out[h * D + d] == before[h * D + d], "a later key changed the output at t=0");
}

TEST(fd_attention_mha) { attention_fd(2, 2); }
TEST(fd_attention_gqa) { attention_fd(4, 2); }

// The float attention's bits against its definition written one score at a time: every dot product
// a chain of fused multiply-adds in d order, the softmax and the three gradient sums in j order.
// attention_forward/backward run the scores of a row side by side over j (scores_of_row, on keys
// transposed per head); this checks that the bits are the definition's, with GQA, a T and a D that
// fill no vector evenly. (Built at -O1 here; the same inputs hashed the same at -O0 to -O3, with
// clang++ -O3 and without hardware FMA, on 2026-11-30: every multiply-add is an explicit std::fma.)
TEST(attention_float_bits_are_the_definition) {
    int B = 2, T = 37, H = 4, Hkv = 2, D = 24, G = H / Hkv;
    long W = (H + 2 * Hkv) * D;
    auto init = random_vector(B * T * W, 31), init_dout = random_vector(B * T * H * D, 32);
    std::vector<float> qkv(init.begin(), init.end()), dout(init_dout.begin(), init_dout.end());
    const float *q = qkv.data(), *k = q + H * D, *v = k + Hkv * D;
    std::vector<float> out(B * T * H * D), lse(B * H * T), dqkv(qkv.size(), 0.0f);
    attention_forward(out.data(), lse.data(), q, k, v, B, T, H, Hkv, D, W, W, W);
    attention_backward(dqkv.data(), dqkv.data() + H * D, dqkv.data() + (H + Hkv) * D, dout.data(), q, k, v, out.data(), lse.data(), B, T, H, Hkv, D, W, W, W, W);

    float scale = 1.0f / std::sqrt((float)D);
    auto dot = [&](const float* a, const float* b) {
        float s = 0;
        for (int d = 0; d < D; d++) s = std::fma(a[d], b[d], s);
        return s;
    };
    std::vector<float> want_out(out.size(), 0.0f), want_lse(lse.size()), want_d(qkv.size(), 0.0f);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int g = h / G;
            for (int i = 0; i < T; i++) {
                const float* qi = &qkv[(b * T + i) * W + h * D];
                std::vector<float> p(i + 1);
                float m = -INFINITY, sum = 0;
                for (int j = 0; j <= i; j++) m = std::max(m, p[j] = dot(qi, &qkv[(b * T + j) * W + H * D + g * D]) * scale);
                for (int j = 0; j <= i; j++) sum += (p[j] = std::exp(p[j] - m));
                float* o = &want_out[(b * T + i) * H * D + h * D];
                for (int j = 0; j <= i; j++)
                    for (int d = 0; d < D; d++) o[d] = std::fma(p[j] * (1.0f / sum), qkv[(b * T + j) * W + (H + Hkv) * D + g * D + d], o[d]);
                want_lse[(b * H + h) * T + i] = m + std::log(sum);
            }
        }
    // the backward reads the forward's own out and lse (as the trainer does), so it is checked
    // even where the forward is not; its loops in the trainer's order: b, g, the group's h, i, j
    for (int b = 0; b < B; b++)
        for (int g = 0; g < Hkv; g++)
            for (int h = g * G; h < (g + 1) * G; h++)
                for (int i = 0; i < T; i++) {
                    const float* qi = &qkv[(b * T + i) * W + h * D];
                    const float* doi = &dout[(b * T + i) * H * D + h * D];
                    float delta = dot(doi, &out[(b * T + i) * H * D + h * D]), l = lse[(b * H + h) * T + i];
                    for (int j = 0; j <= i; j++) {
                        const float* kj = &qkv[(b * T + j) * W + H * D + g * D];
                        const float* vj = &qkv[(b * T + j) * W + (H + Hkv) * D + g * D];
                        float pj = std::exp(std::fma(dot(qi, kj), scale, -l)), ds = pj * (dot(doi, vj) - delta) * scale;
                        for (int d = 0; d < D; d++) {
                            float* dqi = &want_d[(b * T + i) * W + h * D];
                            float* dkj = &want_d[(b * T + j) * W + H * D + g * D];
                            float* dvj = &want_d[(b * T + j) * W + (H + Hkv) * D + g * D];
                            dqi[d] = std::fma(ds, kj[d], dqi[d]);
                            dkj[d] = std::fma(ds, qi[d], dkj[d]);
                            dvj[d] = std::fma(pj, doi[d], dvj[d]);
                        }
                    }
                }
    auto same_bits = [](const std::vector<float>& got, const std::vector<float>& want, const char* what) {
        size_t differ = 0, first = 0;
        for (size_t i = 0; i < got.size(); i++)
            if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && differ++ == 0) first = i;
        CHECK(differ == 0, "%s: %zu of %zu differ, the first at %zu: %.9g against %.9g", what, differ, got.size(), first, got[first], want[first]);
    };
    same_bits(out, want_out, "out");
    same_bits(lse, want_lse, "lse");
    same_bits(dqkv, want_d, "dq, dk, dv");
}

TEST(fd_gelu_swiglu) {
    size_t N = 20;
    auto x = random_vector(N, 20, 2.0), R = random_vector(N, 21);
    std::vector<double> y(N);
    auto loss = [&]() { gelu_forward(y.data(), x.data(), N); return dot(R, y.data()); };
    std::vector<double> dx(N, 0);
    gelu_backward(dx.data(), x.data(), R.data(), N);
    check_gradient("gelu dx", x.data(), dx.data(), N, loss);

    int rows = 3, F = 4;
    auto z = random_vector(rows * 2 * F, 22, 2.0), R2 = random_vector(rows * F, 23);
    std::vector<double> s(rows * F);
    auto loss2 = [&]() { swiglu_forward(s.data(), z.data(), rows, F); return dot(R2, s.data()); };
    std::vector<double> dz(z.size(), 0);
    swiglu_backward(dz.data(), z.data(), R2.data(), rows, F);
    check_gradient("swiglu dinp", z.data(), dz.data(), z.size(), loss2);
}

TEST(fd_crossentropy_padded) {
    int N = 4, V = 37, Vp = 40;  // V: two 16-wide lanes of the max and the sum, and a tail of 5
    auto logits = random_vector(N * Vp, 24, 2.0);
    std::vector<int> targets = {0, 36, 20, 1};
    std::vector<double> work(N * Vp), losses(N);
    auto loss = [&]() {
        work = logits;
        crossentropy_softmax_forward(losses.data(), work.data(), targets.data(), N, V, Vp);
        double s = 0;
        for (double l : losses) s += l;
        return s / N;
    };
    loss();
    for (int i = 0; i < N; i++) {
        double sum = 0;
        for (int j = 0; j < V; j++) sum += work[i * Vp + j];
        CHECK(std::fabs(sum - 1) < 1e-12, "probs of row %d sum to %.15g", i, sum);
        for (int j = V; j < Vp; j++) CHECK(work[i * Vp + j] == 0, "padded logit %d got probability", j);
    }
    std::vector<double> d = work;
    crossentropy_softmax_backward(d.data(), targets.data(), 1.0 / N, N, Vp);
    check_gradient("crossentropy dlogits", logits.data(), d.data(), logits.size(), loss);
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) CHECK(d[i * Vp + j] == 0, "padded logit got a gradient");
}

// The float build's softmax over a vocabulary wider than its lanes (fast_exp, the 16-lane max
// and double sum) against the same softmax in double: each probability within
// (3 + |z_j - max|) * 2^-24 of its value (the exp's 1 ulp, the sum's and the reciprocal's
// roundings, and z_j - max rounded to float, whose error the exp multiplies by |z_j - max|; and 2
// ulps of a denormal, for the probabilities that underflow), and each loss within 2^-22 of the log-sum-exp. Rows: a spread of logits, one that underflows most
// of its probabilities, and a constant one (every probability 1/V).
TEST(crossentropy_float_over_a_wide_vocabulary) {
    int N = 3, V = 1003, Vp = 1024;
    std::vector<float> logits(N * Vp, 0.0f);
    auto spread = random_vector(V, 28, 6.0);
    for (int j = 0; j < V; j++) {
        logits[j] = (float)spread[j];
        logits[Vp + j] = (float)(spread[j] * 20);
        logits[2 * Vp + j] = 0.25f;
    }
    std::vector<int> targets = {7, 1002, 500};
    std::vector<float> work = logits, losses(N);
    crossentropy_softmax_forward(losses.data(), work.data(), targets.data(), N, V, Vp);
    for (int i = 0; i < N; i++) {
        const float* z = &logits[(size_t)i * Vp];
        double m = *std::max_element(z, z + V), s = 0;
        for (int j = 0; j < V; j++) s += std::exp((double)z[j] - m);
        int bad = 0;
        for (int j = 0; j < V; j++) {
            double want = std::exp((double)z[j] - m) / s, got = work[(size_t)i * Vp + j];
            double bound = (3 + std::fabs(z[j] - m)) * std::ldexp(want, -24) + std::ldexp(1.0, -148);  // + 2 denormal ulps
            if (std::fabs(got - want) > bound && bad++ < 3) test_fail(__FILE__, __LINE__, "row %d prob %d: %.9g, double gives %.9g", i, j, got, want);
        }
        CHECK(bad == 0, "row %d: %d probabilities off", i, bad);
        for (int j = V; j < Vp; j++) CHECK(work[(size_t)i * Vp + j] == 0, "padded logit %d got probability", j);
        double want_loss = m + std::log(s) - z[targets[i]];
        CHECK(std::fabs(losses[i] - want_loss) <= std::ldexp(std::fabs(want_loss), -22), "row %d: loss %.9g, log-sum-exp %.9g", i, losses[i], want_loss);
    }
    // the lanes' helpers alone: the max wherever it stands, any length, and the sum's accuracy
    for (int n = 0; n <= 40; n++)
        for (int at = 0; at < std::max(n, 1); at++) {
            std::vector<float> x(n, -3.0f);
            if (n) x[at] = 2.0f;
            float want = n ? 2.0f : -INFINITY;
            CHECK(max_in_lanes(x.data(), n) == want, "max of %d with the largest at %d: %g", n, at, max_in_lanes(x.data(), n));
        }
    std::vector<float> terms(1003);
    long double exact = 0;
    for (int j = 0; j < 1003; j++) exact += terms[j] = (float)std::exp(-std::fabs(spread[j]));
    double sum = sum_in_double_lanes(terms.data(), 1003);
    CHECK(std::fabs(sum - (double)exact) <= 1e-14 * (double)exact, "sum %.17g, long double gives %.17Lg", sum, exact);
}

// A confidently wrong row: the target's probability underflows fp32 (logit gaps of 150 and 400),
// yet its loss is the full log-sum-exp, log(sum_j exp(z_j)) - z_target, as F.cross_entropy gives.
// (The float build once returned -log(max(p, 1e-30)) = 69.08 here, so a diverged or untrained
// model's val loss and the multiple-choice log-likelihoods came out too small.)
TEST(crossentropy_loss_of_an_underflowing_target) {
    int N = 3, V = 5, Vp = 8;
    std::vector<float> logits = {150, 0, -3, 2, 1, 0, 0, 0,
                                 -200, 200, 0, 0, 0, 0, 0, 0,
                                 1, 2, 3, 4, 5, 0, 0, 0};
    std::vector<int> targets = {1, 0, 3};
    std::vector<float> work = logits, losses(N);
    crossentropy_softmax_forward(losses.data(), work.data(), targets.data(), N, V, Vp);
    for (int i = 0; i < N; i++) {
        double m = -1e300, s = 0;  // the reference, in double
        for (int j = 0; j < V; j++) m = std::max(m, (double)logits[i * Vp + j]);
        for (int j = 0; j < V; j++) s += std::exp((double)logits[i * Vp + j] - m);
        double want = m + std::log(s) - logits[i * Vp + targets[i]];
        CHECK(std::fabs(losses[i] - want) <= 1e-6 * want, "row %d: loss %.9g, log-sum-exp gives %.9g", i, losses[i], want);
    }
    CHECK(losses[1] > 399, "the 400-nat loss is %g", losses[1]);
}

TEST(fd_encoder) {
    int B = 2, T = 3, C = 4, V = 5;
    std::vector<int> inp = {1, 3, 1, 4, 1, 0};  // repeated ids: rows of dwte get several adds
    auto wte = random_vector(V * C, 25), wpe = random_vector(T * C, 26), R = random_vector(B * T * C, 27);
    std::vector<double> out(B * T * C);
    auto loss = [&]() { encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C); return dot(R, out.data()); };
    std::vector<double> dwte(V * C, 0), dwpe(T * C, 0);
    encoder_backward(dwte.data(), dwpe.data(), R.data(), inp.data(), B, T, C);
    check_gradient("encoder dwte", wte.data(), dwte.data(), wte.size(), loss);
    check_gradient("encoder dwpe", wpe.data(), dwpe.data(), wpe.size(), loss);
}

// encoder_backward splits the channels into slices of 64, one per thread. At C <= 64 (the test
// above, and every tiny model here and in tests/reference_states) there is a single slice, so a
// wrong slice width or bound would only show at a real width: C = 150 is two whole slices and a
// ragged third (64 + 64 + 22), checked element by element against finite differences.
TEST(fd_encoder_wider_than_one_channel_slice) {
    int B = 2, T = 3, C = 150, V = 3;
    std::vector<int> inp = {2, 0, 2, 1, 2, 0};
    auto wte = random_vector(V * C, 28), wpe = random_vector(T * C, 29), R = random_vector(B * T * C, 30);
    std::vector<double> out(B * T * C);
    auto loss = [&]() { encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C); return dot(R, out.data()); };
    std::vector<double> dwte(V * C, 0), dwpe(T * C, 0);
    encoder_backward(dwte.data(), dwpe.data(), R.data(), inp.data(), B, T, C);
    check_gradient("encoder dwte (C = 150)", wte.data(), dwte.data(), wte.size(), loss, wte.size());
    check_gradient("encoder dwpe (C = 150)", wpe.data(), dwpe.data(), wpe.size(), loss, wpe.size());
}

// ----------------------------------------------------------------------------
// whole model

static ModelConfig tiny_config(int arch, int H, int Hkv, int qk_norm, int tie_embeddings = 0, int head_dim = 0) {
    RunConfig rc;
    const char* argv[] = {"test"};
    parse_command_line(&rc, 1, (char**)argv);
    rc.arch = arch == ARCH_GPT2 ? "gpt2" : "llama";
    rc.layers = 2;
    rc.heads = H;
    rc.kv_heads = Hkv;
    rc.dim = 4 * H;  // D = 4, or head_dim (llama --head-dim)
    rc.head_dim = head_dim;
    rc.ffn_dim = arch == ARCH_GPT2 ? 0 : 12;
    rc.vocab = 11;   // padded to 128
    rc.max_seq = 8;
    rc.qk_norm = qk_norm;
    rc.tie_embeddings = tie_embeddings;
    return model_config_from_flags(rc);
}

// The value path this binary was built for (VALUE_PATH_ID, as the config from the flags says):
// VpVanilla here threw "a resformer model built with the vanilla value path code" in every
// build but vanilla's. Every path is also checked at test_value_paths' deeper shapes (L = 5).
static void model_fd(int arch, int H, int Hkv, int qk_norm, int tie_embeddings = 0, int head_dim = 0) {
    ModelConfig c = tiny_config(arch, H, Hkv, qk_norm, tie_embeddings, head_dim);
    int checked = model_fd_check<ActiveValuePath>(c, 42);
    CHECK(checked >= (arch == ARCH_GPT2 ? 16 : (qk_norm ? 12 : 10) - tie_embeddings), "only %d tensors checked", checked);
}

TEST(fd_model_gpt2) { model_fd(ARCH_GPT2, 2, 2, 0); }
TEST(fd_model_llama_gqa) { model_fd(ARCH_LLAMA, 4, 2, 0); }
TEST(fd_model_llama_gqa_qknorm) { model_fd(ARCH_LLAMA, 4, 2, 1); }
TEST(fd_model_llama_mha_qknorm) { model_fd(ARCH_LLAMA, 2, 2, 1); }
TEST(fd_model_llama_tied) { model_fd(ARCH_LLAMA, 4, 2, 1, 1); }
// --head-dim: attention H*D wider (Qwen3) and narrower than the model width C = 16
TEST(fd_model_llama_wide_heads) { model_fd(ARCH_LLAMA, 4, 2, 1, 1, 8); }
TEST(fd_model_llama_narrow_heads) { model_fd(ARCH_LLAMA, 4, 1, 0, 0, 2); }

// --tie-embeddings 1 is the untied model with lm_head := wte (PyTorch: lm_head.weight =
// wte.weight): the same logits and loss, and wte's gradient is the untied model's wte and lm_head
// gradients added (in double, to round-off). The tied model has no lm_head tensor.
TEST(tied_llama_is_untied_with_the_head_set_to_wte) {
    ModelConfig ct = tiny_config(ARCH_LLAMA, 4, 2, 1, 1), cu = tiny_config(ARCH_LLAMA, 4, 2, 1, 0);
    GPT<double> tied, untied;
    gpt_build(&tied, ct);
    gpt_build(&untied, cu);
    gpt_init_params(&tied, 5);
    spread_params(&tied, 6);
    size_t head = (size_t)cu.padded_vocab_size * cu.n_embd;
    REQUIRE(tied.num_params + head == untied.num_params && !tied.params.lm_head, "the tied model has %zu params, the untied %zu", tied.num_params,
            untied.num_params);
    // the untied model's tensors, in spec order, are the tied one's with lm_head inserted
    size_t head_off = (size_t)(untied.params.lm_head - untied.params_memory);
    std::copy(tied.params_memory, tied.params_memory + head_off, untied.params_memory);
    std::copy(tied.params.wte, tied.params.wte + head, untied.params.lm_head);
    std::copy(tied.params_memory + head_off, tied.params_memory + tied.num_params, untied.params_memory + head_off + head);
    std::vector<int> inp, tgt;
    tiny_batch(inp, tgt, 2, 6, ct.vocab_size, 3);
    for (GPT<double>* m : {&tied, &untied}) {
        gpt_forward(m, inp.data(), tgt.data(), 2, 6);
        gpt_zero_grad(m);
        gpt_backward(m, 1.0);
    }
    CHECK(tied.mean_loss == untied.mean_loss, "loss tied %.17g untied %.17g", tied.mean_loss, untied.mean_loss);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < head; i++) {
        double want = untied.grads.wte[i] + untied.grads.lm_head[i];
        worst = std::max(worst, std::fabs(tied.grads.wte[i] - want));
        scale = std::max(scale, std::fabs(want));
    }
    CHECK(scale > 0 && worst <= 1e-14 * scale, "wte gradient: worst difference %.3g at scale %.3g", worst, scale);
    bool rest_equal = std::equal(tied.grads_memory + head, tied.grads_memory + head_off, untied.grads_memory + head) &&
                      std::equal(tied.grads_memory + head_off, tied.grads_memory + tied.num_params, untied.grads_memory + head_off + head);
    CHECK(rest_equal, "the other gradients differ between the tied and untied models");
    gpt_free(&tied);
    gpt_free(&untied);
}

// The float instantiation is the one that trains; the double one is what finite differences
// checked. Same weights, same batch: the loss must agree to fp32 accuracy (~1e-6 relative after
// a few hundred accumulations) and the gradients to ~1e-4 of their scale.
TEST(float_matches_double) {
    for (int arch : {ARCH_GPT2, ARCH_LLAMA}) {
        ModelConfig c = tiny_config(arch, 4, arch == ARCH_GPT2 ? 4 : 2, arch == ARCH_LLAMA);
        GPT<double> md;
        GPT<float> mf;
        gpt_build(&md, c);
        gpt_build(&mf, c);
        gpt_init_params(&md, 7);
        spread_params(&md, 8);
        for (size_t i = 0; i < md.num_params; i++) mf.params_memory[i] = (float)md.params_memory[i];
        for (size_t i = 0; i < md.num_params; i++) md.params_memory[i] = (double)mf.params_memory[i];  // identical weights
        std::vector<int> inp, tgt;
        tiny_batch(inp, tgt, 2, 6, c.vocab_size, 9);
        gpt_forward(&md, inp.data(), tgt.data(), 2, 6);
        gpt_forward(&mf, inp.data(), tgt.data(), 2, 6);
        CHECK(close_enough(mf.mean_loss, md.mean_loss, 0, 2e-6), "%s loss float %.9g double %.9g", arch_name(arch), mf.mean_loss, md.mean_loss);
        gpt_zero_grad(&md);
        gpt_zero_grad(&mf);
        gpt_backward(&md, 1.0);
        gpt_backward(&mf, 1.0f);
        double gmax = 0, err = 0;
        for (size_t i = 0; i < md.num_params; i++) {
            gmax = std::max(gmax, std::fabs(md.grads_memory[i]));
            err = std::max(err, std::fabs(md.grads_memory[i] - mf.grads_memory[i]));
        }
        CHECK(err <= 1e-4 * gmax, "%s max grad diff %.3g vs scale %.3g", arch_name(arch), err, gmax);
        gpt_free(&md);
        gpt_free(&mf);
    }
}

// Bit-identical gradients with 1 and 2 threads: every reduction has a fixed order.
TEST(deterministic_across_threads) {
    ModelConfig c = tiny_config(ARCH_LLAMA, 4, 2, 1);
    c.n_embd = 64;
    c.head_dim = 16;
    c.ffn_dim = 96;
    std::vector<float> g1, g2;
    for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        GPT<float> m;
        gpt_build(&m, c);
        gpt_init_params(&m, 3);
        std::vector<int> inp, tgt;
        tiny_batch(inp, tgt, 3, 8, c.vocab_size, 4);
        gpt_forward(&m, inp.data(), tgt.data(), 3, 8);
        gpt_zero_grad(&m);
        gpt_backward(&m, 1.0f);
        (threads == 1 ? g1 : g2).assign(m.grads_memory, m.grads_memory + m.num_params);
        gpt_free(&m);
    }
    omp_set_num_threads(omp_get_num_procs());
    CHECK(memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)) == 0, "gradients differ between 1 and 2 threads");
}

// The global gradient norm that clipping divides by (PyTorch: clip_grad_norm_'s total norm,
// sqrt(sum g^2) over every element) is summed in chunks of 2^16 elements, then the chunks are
// added (sumsq_fixed_chunks). Every tiny model of these tests and of tests/reference_states has
// fewer parameters than one chunk, so a chunk dropped, or an element at a chunk boundary, would
// not show there; GPT-2 124M has 1900 chunks. Values (i % 7) - 3 are small integers, so the sum of
// their squares is exact in double whatever the order and the reference is the plain loop.
TEST(grad_norm_sums_every_chunk) {
    const size_t chunk = 1 << 16, n = 3 * chunk + 1234, off = 5000, count = 2 * chunk + 777;
    std::vector<float> x(n);
    for (size_t i = 0; i < n; i++) x[i] = (float)((int)(i % 7) - 3);
    double want = 0;
    for (size_t i = off; i < off + count; i++) want += (double)x[i] * x[i];
    double got = sumsq_fixed_chunks(x.data(), off, count);
    CHECK(got == want, "sum of squares of [%zu, %zu): %.17g, the plain sum %.17g", off, off + count, got, want);
    // the same through the model: a llama with V = 2100 (Vp = 2176) has 2 x 2176 x 16 = 69632
    // embedding and head values alone, so its gradients span two chunks
    ModelConfig c = tiny_config(ARCH_LLAMA, 4, 2, 1);
    c.vocab_size = 2100;
    c.padded_vocab_size = 2176;
    GPT<float> m;
    gpt_build(&m, c);
    REQUIRE(m.num_params > chunk, "the model has %zu parameters, not more than one chunk", m.num_params);
    double sumsq = 0;
    for (size_t i = 0; i < m.num_params; i++) {
        m.grads_memory[i] = (float)((int)(i % 7) - 3);
        sumsq += (double)m.grads_memory[i] * m.grads_memory[i];
    }
    CHECK(gpt_grad_norm(&m) == std::sqrt(sumsq), "gradient norm %.17g, sqrt of the plain sum %.17g", gpt_grad_norm(&m), std::sqrt(sumsq));
    gpt_free(&m);
}

// model_weights_sumsq is how the trainer refuses to evaluate, sample or save weights that an update
// made NaN or inf (host/train_loop.h weights_finite): it must read every weight. A single NaN or inf
// anywhere, the first and last weight included, makes the sum of squares non-finite (IEEE: NaN and
// inf propagate through + and *); finite weights give the plain sum.
TEST(weights_sumsq_sees_every_weight) {
    ModelConfig c = tiny_config(ARCH_LLAMA, 4, 2, 1);
    GPT<float> m;
    gpt_build(&m, c);
    gpt_init_params(&m, 31);
    double want = 0;
    for (size_t i = 0; i < m.num_params; i++) want += (double)m.params_memory[i] * m.params_memory[i];
    CHECK(close_enough(model_weights_sumsq(&m), want, 0, 1e-12), "finite weights: %.17g, the plain sum %.17g", model_weights_sumsq(&m), want);
    for (size_t at : {(size_t)0, m.num_params / 2, m.num_params - 1})
        for (float bad : {NAN, INFINITY}) {
            float keep = m.params_memory[at];
            m.params_memory[at] = bad;
            CHECK(!std::isfinite(model_weights_sumsq(&m)), "a %g at weight %zu of %zu was not seen", bad, at, m.num_params);
            m.params_memory[at] = keep;
        }
    gpt_free(&m);
}

// gpt_backward's loss_scale: the trainer passes 1/(grad_accum x world), so that the gradients
// added over the micro-batches of a step are those of the step's mean loss. Every other test calls
// it with 1, where a loss_scale ignored gives the same result. The identity it must satisfy: the
// mean over a B = 2 batch (2T positions) is the average of its two rows' means, so backward of
// row 0 and of row 1 (B = 1 each) with loss_scale 1/2, accumulated, equals backward of the B = 2
// batch with loss_scale 1. In double the two differ only in summation order (~1e-15 relative).
TEST(gradient_accumulation_with_loss_scale_is_the_whole_batch) {
    for (int arch : {ARCH_GPT2, ARCH_LLAMA}) {
        ModelConfig c = tiny_config(arch, 4, arch == ARCH_GPT2 ? 4 : 2, arch == ARCH_LLAMA);
        GPT<double> m;
        gpt_build(&m, c);
        gpt_init_params(&m, 12);
        spread_params(&m, 13);
        const int T = 6;
        std::vector<int> inp, tgt;
        tiny_batch(inp, tgt, 2, T, c.vocab_size, 14);
        gpt_forward(&m, inp.data(), tgt.data(), 2, T);  // B = 2 first: it sizes the activations
        gpt_zero_grad(&m);
        gpt_backward(&m, 1.0);
        std::vector<double> whole(m.grads_memory, m.grads_memory + m.num_params);
        gpt_zero_grad(&m);
        for (int b = 0; b < 2; b++) {
            gpt_forward(&m, inp.data() + b * T, tgt.data() + b * T, 1, T);
            gpt_backward(&m, 0.5);
        }
        double worst = 0, scale = 0;
        for (size_t i = 0; i < m.num_params; i++) {
            worst = std::max(worst, std::fabs(m.grads_memory[i] - whole[i]));
            scale = std::max(scale, std::fabs(whole[i]));
        }
        CHECK(scale > 0 && worst <= 1e-12 * scale, "%s: two micro-batches at loss_scale 1/2 differ from the whole batch by %.3g at scale %.3g",
              arch_name(arch), worst, scale);
        gpt_free(&m);
    }
}

// The published counts below are of vanilla attention; model_config_from_flags gives the path of
// VALUE_PATH_ID (in the SVFormer build, GPT-2 124M counted 117,979,392: its layers past the first
// have no V projection), so each config is counted as vanilla, in every path's build. Every
// path's own count: test_value_paths' param_counts_per_path.
static ModelConfig as_vanilla(ModelConfig c) {
    memset(&c.vp, 0, sizeof(c.vp));
    c.vp.path = VP_VANILLA;
    return c;
}

TEST(param_counts) {
    RunConfig rc;
    const char* argv[] = {"test"};
    parse_command_line(&rc, 1, (char**)argv);
    // the defaults are GPT-2 124M; llm.c's train_gpt2 reports 124,475,904 parameters for it (with
    // the vocabulary padded to 50304)
    ModelConfig g = as_vanilla(model_config_from_flags(rc));
    CHECK(g.padded_vocab_size == 50304, "Vp %d", g.padded_vocab_size);
    CHECK(count_params(param_specs(g)) == 124475904ull, "GPT-2 124M has %zu parameters", count_params(param_specs(g)));
    // Llama: untied head, no biases, GQA, SwiGLU, QK-norm gains
    rc.arch = "llama";
    rc.layers = 3;
    rc.heads = 8;
    rc.kv_heads = 2;
    rc.dim = 256;
    rc.ffn_dim = 640;
    rc.vocab = 1000;
    rc.qk_norm = 1;
    ModelConfig l = as_vanilla(model_config_from_flags(rc));
    size_t C = 256, D = 32, Hkv = 2, F = 640, Vp = 1024, L = 3;
    size_t expect = 2 * Vp * C + C + L * (2 * C + C * (8 * D + 2 * Hkv * D) + C * C + 3 * C * F + 2 * D);
    CHECK(count_params(param_specs(l)) == expect, "llama has %zu, formula %zu", count_params(param_specs(l)), expect);
    rc.tie_embeddings = 1;  // no lm_head
    ModelConfig lt = as_vanilla(model_config_from_flags(rc));
    CHECK(count_params(param_specs(lt)) == expect - Vp * C, "tied llama has %zu, formula %zu", count_params(param_specs(lt)), expect - Vp * C);
    // Qwen3-0.6B's shape: C = 1024, H = 16 heads of D = 128 (H*D = 2048 = 2C), Hkv = 8, F = 3072,
    // 28 layers, QK-norm, tied, V = 151936; transformers 5.24's Qwen3ForCausalLM at that config
    // holds 596,049,920 parameters (sum of numel, counted once on the meta device)
    rc.layers = 28;
    rc.heads = 16;
    rc.kv_heads = 8;
    rc.dim = 1024;
    rc.head_dim = 128;
    rc.ffn_dim = 3072;
    rc.vocab = 151936;
    ModelConfig q = as_vanilla(model_config_from_flags(rc));
    CHECK(q.head_dim == 128 && q.padded_vocab_size == 151936, "D %d Vp %d", q.head_dim, q.padded_vocab_size);
    CHECK(count_params(param_specs(q)) == 596049920ull, "Qwen3-0.6B's shape has %zu parameters", count_params(param_specs(q)));
}

// A tiny model on a stream where each token determines the next: the loss must fall well below
// the uniform-guess loss ln(V).
TEST(training_loss_falls) {
    for (int arch : {ARCH_GPT2, ARCH_LLAMA}) {
        ModelConfig c = tiny_config(arch, 2, arch == ARCH_GPT2 ? 2 : 1, 0);
        GPT<float> m;
        gpt_build(&m, c);
        gpt_init_params(&m, 11);
        int B = 4, T = 8;
        std::vector<int> inp(B * T), tgt(B * T);
        float first = 0, last = 0;
        for (int step = 1; step <= 60; step++) {
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++) {
                    int x = (b * 3 + t * 5 + step) % c.vocab_size;
                    inp[b * T + t] = x;
                    tgt[b * T + t] = (x * 4 + 1) % c.vocab_size;  // a fixed permutation of x
                }
            gpt_forward(&m, inp.data(), tgt.data(), B, T);
            if (step == 1) first = m.mean_loss;
            last = m.mean_loss;
            gpt_zero_grad(&m);
            gpt_backward(&m, 1.0f);
            AdamWSettings s = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 1e-2f};
            gpt_update(&m, s, step);
        }
        CHECK(std::fabs(first - std::log((float)c.vocab_size)) < 0.1, "%s: initial loss %.4f, expected about ln(V) = %.4f", arch_name(arch), first,
              std::log((float)c.vocab_size));
        CHECK(last < 0.5f, "%s: loss went from %.4f to only %.4f", arch_name(arch), first, last);
        gpt_free(&m);
    }
}

TEST(lr_schedule) {
    CHECK(lr_at_step(0, 1.0f, 10, 100, 0.1f) == 0.1f, "first warmup step");
    CHECK(lr_at_step(9, 1.0f, 10, 100, 0.1f) == 1.0f, "end of warmup");
    CHECK(close_enough(lr_at_step(55, 1.0f, 10, 100, 0.1f), 0.55, 1e-6, 0), "cosine midpoint %g", lr_at_step(55, 1.0f, 10, 100, 0.1f));
    CHECK(close_enough(lr_at_step(100, 1.0f, 10, 100, 0.1f), 0.1, 1e-7, 0), "end of decay");
    // the other shapes, against values worked out by hand: peak 2, warmup 4, max_steps 24 (so
    // n = 20 steps after warmup), min 2 * 0.25 = 0.5, wsd cooldown 0.25 * 20 = 5 steps from t = 15
    auto at = [](LrShape shape, int step) { return lr_at(LrSchedule{shape, 2.0f, 4, 24, 0.25f, 0.25f}, step); };
    for (LrShape shape : {LR_COSINE, LR_LINEAR, LR_WSD, LR_CONSTANT}) {
        CHECK(at(shape, 0) == 0.5f && at(shape, 3) == 2.0f, "%s: the warmup is the same for every shape", lr_shape_name(shape));
        CHECK(at(shape, 4) == 2.0f, "%s: the first step after warmup is at the peak", lr_shape_name(shape));
    }
    CHECK(close_enough(at(LR_LINEAR, 9), 2.0 - 1.5 * 5 / 20, 1e-6, 0), "linear, a quarter down: %g", at(LR_LINEAR, 9));
    CHECK(close_enough(at(LR_LINEAR, 24), 0.5, 1e-7, 0) && at(LR_LINEAR, 30) == at(LR_LINEAR, 24), "linear ends at min and stays");
    CHECK(close_enough(at(LR_COSINE, 14), 1.25, 1e-6, 0), "cosine half way: %g", at(LR_COSINE, 14));
    for (int step = 4; step <= 19; step++) CHECK(at(LR_WSD, step) == 2.0f, "wsd stable at step %d: %g", step, at(LR_WSD, step));
    CHECK(close_enough(at(LR_WSD, 20), 2.0 - 1.5 * 1 / 5, 1e-6, 0), "wsd, first cooldown step: %g", at(LR_WSD, 20));
    CHECK(close_enough(at(LR_WSD, 23), 2.0 - 1.5 * 4 / 5, 1e-6, 0), "wsd, last step of the run: %g", at(LR_WSD, 23));
    CHECK(close_enough(at(LR_WSD, 24), 0.5, 1e-7, 0) && at(LR_WSD, 40) == at(LR_WSD, 24), "wsd ends at min and stays");
    CHECK(at(LR_CONSTANT, 23) == 2.0f && at(LR_CONSTANT, 100) == 2.0f, "constant after warmup");
    CHECK(lr_at(LrSchedule{LR_WSD, 2.0f, 4, 24, 0.25f, 0.0f}, 23) == 2.0f, "wsd with no cooldown is constant");
    CHECK(close_enough(lr_at(LrSchedule{LR_WSD, 2.0f, 4, 24, 0.25f, 1.0f}, 9), at(LR_LINEAR, 9), 1e-7, 0), "wsd cooling down the whole run is linear");
    // --warmup-steps >= --max-steps leaves no decay span (n = 0): after warmup every shape must
    // give a finite lr between min and the peak, never the 0/0 of t / n (lr_at's guard)
    for (LrShape shape : {LR_COSINE, LR_LINEAR, LR_WSD, LR_CONSTANT})
        for (int max_steps : {4, 2})
            for (int step : {4, 5, 9}) {
                float lr = lr_at(LrSchedule{shape, 2.0f, 4, max_steps, 0.25f, 0.25f}, step);
                CHECK(std::isfinite(lr) && lr >= 0.5f && lr <= 2.0f, "%s, warmup 4, max_steps %d, step %d: lr %g", lr_shape_name(shape), max_steps, step, lr);
            }
    LrShape parsed;
    CHECK(lr_shape_from_name("wsd", &parsed) && parsed == LR_WSD && !lr_shape_from_name("Cosine", &parsed), "shape names");
}

TEST(sample_token_top_k) {
    // the counts of 40000 draws against the softmax of the kept logits: a binomial proportion has a
    // standard deviation of at most 0.5 / sqrt(40000) = 0.0025, so 0.01 is 4 of them (the draws
    // come from a fixed seed: the outcome is the same on every run)
    const float logits[6] = {0.0f, 5.0f, 4.0f, 3.0f, -1.0f, 4.0f};
    auto frequencies = [&](SampleSettings s) {
        Rng rng;
        rng_init(&rng, 42);
        std::vector<double> f(6, 0);
        for (int i = 0; i < 40000; i++) f[sample_token(logits, 6, s, &rng)] += 1.0 / 40000;
        return f;
    };
    auto softmax_over = [&](std::vector<int> kept, float temperature) {
        std::vector<double> p(6, 0);
        double z = 0;
        for (int j : kept) z += (p[j] = std::exp(logits[j] / temperature));
        for (double& x : p) x /= z;
        return p;
    };
    struct Case { SampleSettings s; std::vector<int> kept; const char* what; } cases[] = {
        {{1.0f, 0}, {0, 1, 2, 3, 4, 5}, "no limit"},
        {{1.0f, 3}, {1, 2, 5}, "top 3: 5, 4, 4"},
        {{1.0f, 2}, {1, 2, 5}, "top 2: the k-th value (4) is tied, and both ties stay (as nanoGPT's mask)"},
        {{0.5f, 4}, {1, 2, 3, 5}, "top 4 at temperature 0.5"},
        {{1.0f, 6}, {0, 1, 2, 3, 4, 5}, "k = V"},
        {{1.0f, 100}, {0, 1, 2, 3, 4, 5}, "k > V"},
    };
    for (const Case& c : cases) {
        std::vector<double> got = frequencies(c.s), want = softmax_over(c.kept, c.s.temperature);
        for (int j = 0; j < 6; j++)
            CHECK(std::fabs(got[j] - want[j]) < 0.01 && (want[j] > 0 || got[j] == 0), "%s: token %d drawn %.4f of the time, softmax %.4f", c.what, j,
                  got[j], want[j]);
    }
    // k >= V draws exactly what no limit draws, and greedy ignores k
    CHECK(frequencies({1.0f, 6}) == frequencies({1.0f, 0}), "k = V changes the draws");
    Rng rng;
    rng_init(&rng, 1);
    CHECK(sample_token(logits, 6, {0.0f, 3}, &rng) == 1, "greedy is the argmax");
}

TEST(rng_skip_leaves_the_state_of_the_draws_it_skips) {
    // against the draws themselves, made one by one, up to past 2^32 of the counter's constant
    for (uint64_t n : {0ull, 1ull, 2ull, 7ull, 1000ull, 1ull << 20}) {
        Rng drawn = rng_stream(3, 5), skipped = drawn;
        for (uint64_t i = 0; i < n; i++) rng_next_u64(&drawn);
        rng_skip(&skipped, n);
        CHECK(drawn.state == skipped.state && rng_next_u64(&drawn) == rng_next_u64(&skipped), "rng_skip(%llu) differs from %llu draws", (unsigned long long)n,
              (unsigned long long)n);
    }
}

TEST(sample_token_draws_what_sample_draws_per_token_says) {
    // a cut sample skips sample_draws_per_token per token left out: that must be what sample_token
    // draws, for every setting and whatever the logits (ties, a single nonzero weight, top-k = 1)
    const float rows[][6] = {{0.0f, 5.0f, 4.0f, 3.0f, -1.0f, 4.0f}, {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f}, {-80.0f, 90.0f, -80.0f, 0.0f, 0.0f, 0.0f}};
    const SampleSettings settings[] = {{0.0f, 0}, {0.0f, 3}, {1.0f, 0}, {1.0f, 1}, {0.5f, 4}, {2.0f, 100}, {1e-6f, 0}};
    for (const SampleSettings& s : settings)
        for (const auto& row : rows)
            for (uint64_t seed = 0; seed < 20; seed++) {
                Rng drawn = rng_stream(seed, 9), skipped = drawn;
                sample_token(row, 6, s, &drawn);
                rng_skip(&skipped, sample_draws_per_token(s));
                CHECK(drawn.state == skipped.state, "temperature %g, top-k %d: sample_token drew other than %llu numbers", s.temperature, s.top_k,
                      (unsigned long long)sample_draws_per_token(s));
            }
}

// A model whose "forward" is free and whose n-th call raises the stop flag, as a signal handler
// would in the middle of a sample: generate_tokens only needs its vocabulary and last logits.
struct SignalAtCallModel {
    ModelConfig config;
    int calls = 0, signal_at_call = -1;
};
void gpt_last_logits(SignalAtCallModel* m, const int* tokens, int T, std::vector<float>* logits) {
    logits->assign((size_t)m->config.vocab_size, 0.0f);
    for (int v = 0; v < m->config.vocab_size; v++) (*logits)[(size_t)v] = (float)((tokens[T - 1] * 7 + v * 3) % 11);
    if (++m->calls == m->signal_at_call) g_stop_signal = SIGTERM;
}

TEST(generation_cut_short_leaves_the_rng_of_the_whole_sample) {
    // A stop signal in the k-th token's forward: the tokens before it are those of the whole
    // sample, the cut says so, and the sample RNG ends where the whole sample leaves it (so a run
    // resumed from the checkpoint saved then draws the samples of a run that was not stopped).
    // Without cut_short the signal changes nothing. Greedy draws nothing: its RNG stays put.
    SignalAtCallModel m;
    m.config.vocab_size = 10;
    const int n = 12, T = 4;
    for (SampleSettings s : {SampleSettings{1.0f, 0}, SampleSettings{0.7f, 3}, SampleSettings{0.0f, 0}}) {
        Rng whole_rng = rng_stream(1, 2);
        m.calls = 0, m.signal_at_call = -1;
        std::vector<int> whole = generate_tokens(&m, {0}, n, T, s, &whole_rng);
        for (int k : {1, 2, 5, n}) {
            Rng rng = rng_stream(1, 2);
            m.calls = 0, m.signal_at_call = k;
            bool cut = false;
            std::vector<int> got = generate_tokens(&m, {0}, n, T, s, &rng, &cut);
            g_stop_signal = 0;
            bool want_cut = k < n;  // the signal in the last token's forward comes after the last check
            CHECK(cut == want_cut && (int)got.size() == (want_cut ? k : n), "signal in call %d: cut %d, %zu tokens", k, (int)cut, got.size());
            CHECK(std::equal(got.begin(), got.end(), whole.begin()), "signal in call %d: the tokens drawn before it differ from the whole sample's", k);
            CHECK(rng.state == whole_rng.state, "temperature %g, signal in call %d: the sample RNG is not where the whole sample leaves it", s.temperature, k);
            Rng uncut = rng_stream(1, 2);
            m.calls = 0, m.signal_at_call = k;
            std::vector<int> ignored = generate_tokens(&m, {0}, n, T, s, &uncut);
            g_stop_signal = 0;
            CHECK(ignored == whole && uncut.state == whole_rng.state, "signal in call %d without cut_short: the sample changed", k);
        }
        if (s.temperature <= 0) CHECK(whole_rng.state == rng_stream(1, 2).state, "greedy moved the sample RNG");
    }
}

TEST(generation_continues_its_context) {
    // generate_tokens (host/train_loop.h) with a prompt in the context, greedy, against the same
    // thing done by hand: a plain forward of the whole sequence (its last T tokens once it is
    // longer than T), the argmax of the last row's logits over the real vocabulary, appended
    ModelConfig c = tiny_config(ARCH_LLAMA, 4, 2, 1);
    GPT<float> m;
    gpt_build(&m, c);
    gpt_init_params(&m, 11);
    const int T = 6, n = 5;
    gpt_ensure_activations(&m, 1, T);  // as the train loop does before any sample
    for (std::vector<int> context : {std::vector<int>{0}, std::vector<int>{0, 5, 9, 2}, std::vector<int>{3, 1, 4, 1, 5}}) {
        Rng rng;
        rng_init(&rng, 1);
        std::vector<int> got = generate_tokens(&m, context, n, T, SampleSettings{0.0f, 0}, &rng);
        std::vector<int> seq = context, want;
        for (int i = 0; i < n; i++) {
            int len = std::min((int)seq.size(), T);
            gpt_forward(&m, seq.data() + seq.size() - len, (const int*)nullptr, 1, len);
            const float* last = m.acts.logits + (size_t)(len - 1) * c.padded_vocab_size;
            int best = (int)(std::max_element(last, last + c.vocab_size) - last);
            want.push_back(best);
            seq.push_back(best);
        }
        CHECK(got == want, "context of %zu tokens: the %d generated tokens differ from the forward's argmax", context.size(), n);
    }
    gpt_free(&m);
}

// The forward without targets (sampling, host/train_loop.h generate_tokens) computes the logits of
// the last position of each row only, from its own pointer arithmetic. generation_continues_its_context
// compares the sampler with that same forward, so it cannot see a wrong row there; here it is held
// to the forward with targets, whose logits tests/reference_states checks against PyTorch: same
// weights and tokens, so row b's last logits must be the full forward's row (b, T-1), bit for bit
// (gemm computes an element the same way whatever the number of rows, cpu/gemm.h "Determinism").
// B = 3 rows of T = 5, and T = 1, where the last position is also the first.
TEST(sampling_forward_gives_the_last_positions_logits) {
    ModelConfig c = tiny_config(ARCH_GPT2, 2, 2, 0);
    const int Vp = c.padded_vocab_size;
    for (int T : {5, 1}) {
        const int B = 3;
        GPT<float> m;
        gpt_build(&m, c);
        gpt_init_params(&m, 21);
        spread_params(&m, 22);
        std::vector<int> inp, tgt;
        tiny_batch(inp, tgt, B, T, c.vocab_size, 23);
        m.save_logits = true;
        gpt_forward(&m, inp.data(), tgt.data(), B, T);
        std::vector<float> full = m.debug_logits;  // (B,T,Vp), before the softmax
        gpt_forward(&m, inp.data(), (const int*)nullptr, B, T);
        for (int b = 0; b < B; b++) {
            const float* got = m.acts.logits + ((size_t)b * T + T - 1) * Vp;
            const float* want = full.data() + ((size_t)b * T + T - 1) * Vp;
            CHECK(std::equal(want, want + c.vocab_size, got), "T=%d row %d: the sampling forward's last logits differ from the full forward's", T, b);
        }
        gpt_free(&m);
    }
}

TEST(bad_flags_are_usage_errors) {
    auto code_of = [](std::vector<const char*> args) {
        args.insert(args.begin(), "train");
        try {
            RunConfig rc;
            parse_command_line(&rc, (int)args.size(), (char**)args.data());
            ModelConfig c = model_config_from_flags(rc);
            validate_run_config(rc, c);
        } catch (const VpError& e) {
            return e.code;
        }
        return 0;
    };
    CHECK(code_of({"--bogus", "1"}) == 2, "unknown flag");
    CHECK(code_of({"--layers", "x"}) == 2, "non-integer");
    CHECK(code_of({"--heads", "5", "--dim", "768"}) == 2, "dim not a multiple of heads");
    CHECK(code_of({"--arch", "llama", "--heads", "5", "--dim", "768", "--head-dim", "64", "--train-data", "x"}) == 0,
          "llama: --head-dim frees dim from heads");
    CHECK(code_of({"--arch", "llama", "--head-dim", "63"}) == 2, "odd head dim under RoPE");
    CHECK(code_of({"--arch", "llama", "--head-dim", "-2"}) == 2, "negative head dim");
    CHECK(code_of({"--arch", "llama", "--heads", "1024", "--head-dim", "128"}) == 2, "H*D above the width bound");
    CHECK(code_of({"--arch", "gpt2", "--head-dim", "128"}) == 2, "gpt2 with a head dim other than dim/heads");
    CHECK(code_of({"--arch", "gpt2", "--head-dim", "64", "--train-data", "x"}) == 0, "gpt2 with its own head dim spelled out");
    CHECK(code_of({"--arch", "gpt2", "--kv-heads", "4"}) == 2, "gqa on gpt2");
    CHECK(code_of({"--arch", "gpt2", "--tie-embeddings", "1"}) == 2, "the llama tie flag on gpt2 (always tied)");
    CHECK(code_of({"--arch", "llama", "--tie-embeddings", "2"}) == 2, "tie flag not 0 or 1");
    CHECK(code_of({"--arch", "llama", "--heads", "12", "--kv-heads", "5"}) == 2, "heads not a multiple of kv heads");
    CHECK(code_of({"--seq-len", "2048", "--train-data", "x"}) == 2, "seq-len above max-seq");
    CHECK(code_of({"--total-batch-tokens", "1000", "--train-data", "x"}) == 2, "total batch not a multiple");
    CHECK(code_of({"--lr", "1", "--lr", "2"}) == 2, "flag given twice");
#if VALUE_PATH_ID != VP_SLA
    CHECK(code_of({"--sla-layers", "3"}) == 2, "a flag of another value path");
#endif
    CHECK(code_of({"--train-data", "x"}) == 0, "a valid command line");
}

TEST_MAIN()
