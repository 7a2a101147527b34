// tests/gradcheck.h: finite-difference gradient checks shared by the CPU test suites.
// Include after train_gpt_cpu.cpp (TESTING) and tests/testing.h.
//
// Tolerance. Central differences with step h in double have truncation error ~h^2 |f'''| / 6
// and round-off ~1e-16 |f| / h. With h = 1e-5 and O(1) inputs both are ~1e-10 relative, so we
// require |analytic - numeric| <= 1e-6 * max|numeric| + 1e-9 per element: four orders of
// magnitude above the expected error, and far below what any wrong term gives (a missing or
// mis-scaled term is an O(1) relative error).
#pragma once

#include <functional>

static const double FD_STEP = 1e-5;
static const double FD_RTOL = 1e-6;
static const double FD_ATOL = 1e-9;

inline std::vector<double> random_vector(size_t n, uint64_t seed, double scale = 1.0) {
    Rng r = rng_stream(seed, 7);
    std::vector<double> v(n);
    for (double& x : v) x = scale * rng_normal(&r);
    return v;
}

// Compares analytic gradient `grad` of `loss()` wrt x[0..n) with central differences. Checks every
// element when n is small, else `max_checks` elements spread over the tensor.
static void check_gradient(const char* what, double* x, const double* grad, size_t n, const std::function<double()>& loss, size_t max_checks = 400) {
    size_t stride = n <= max_checks ? 1 : n / max_checks;
    std::vector<double> numeric;
    std::vector<size_t> idx;
    double max_num = 0;
    for (size_t i = 0; i < n; i += stride) {
        double old = x[i];
        x[i] = old + FD_STEP;
        double lp = loss();
        x[i] = old - FD_STEP;
        double lm = loss();
        x[i] = old;
        numeric.push_back((lp - lm) / (2 * FD_STEP));
        idx.push_back(i);
        max_num = std::max(max_num, std::fabs(numeric.back()));
    }
    int bad = 0;
    for (size_t k = 0; k < idx.size(); k++) {
        double err = std::fabs(grad[idx[k]] - numeric[k]);
        if (err > FD_ATOL + FD_RTOL * max_num) {
            if (bad < 3) CHECK(false, "%s[%zu]: analytic %.12g numeric %.12g (max |numeric| %.3g)", what, idx[k], grad[idx[k]], numeric[k], max_num);
            bad++;
        }
    }
    CHECK(bad == 0, "%s: %d of %zu elements off", what, bad, idx.size());
    CHECK(max_num > 1e-8, "%s: the gradient is all ~zero, so this check would prove nothing", what);
}

// Weighted sum <R, out>: a scalar loss whose gradient wrt out is R.
inline double dot(const std::vector<double>& a, const double* b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
    return s;
}

// Weights with O(1) spread so every nonlinearity is exercised (the 0.02 init is nearly linear).
template <typename real, typename VP>
static void spread_params(GPT<real, VP>* m, uint64_t seed) {
    Rng r = rng_stream(seed, 99);
    for (size_t i = 0; i < m->num_params; i++) m->params_memory[i] += (real)(0.3 * rng_normal(&r));
}

static void tiny_batch(std::vector<int>& inp, std::vector<int>& tgt, int B, int T, int V, uint64_t seed) {
    Rng r = rng_stream(seed, 5);
    inp.resize(B * T);
    tgt.resize(B * T);
    for (int i = 0; i < B * T; i++) {
        inp[i] = (int)(rng_next_u64(&r) % V);
        tgt[i] = (int)(rng_next_u64(&r) % V);
    }
}


// Checks the gradient of every parameter tensor of a whole model (the mean loss of one batch,
// B=2, T=5) against central differences; the padded vocabulary rows must get exactly zero.
// Returns the number of tensors checked.
template <typename VP>
static int model_fd_check(const ModelConfig& c, uint64_t seed) {
    GPT<double, VP> m;
    gpt_build(&m, c);
    gpt_init_params(&m, seed);
    spread_params(&m, seed + 1);
    int B = 2, T = 5;
    std::vector<int> inp, tgt;
    tiny_batch(inp, tgt, B, T, c.vocab_size, seed + 2);
    // the loss in double, from the per-position losses (mean_loss is a float, for logging)
    auto loss = [&]() {
        gpt_forward(&m, inp.data(), tgt.data(), B, T);
        double s = 0;
        for (int i = 0; i < B * T; i++) s += m.acts.losses[i];
        return s / (B * T);
    };
    loss();
    gpt_zero_grad(&m);
    gpt_backward(&m, 1.0);
    std::vector<double> grads(m.grads_memory, m.grads_memory + m.num_params);
    size_t off = 0;
    int checked = 0;
    for (const ParamSpec& s : m.specs) {
        if (s.count) {
            char what[128];
            snprintf(what, sizeof(what), "%s/%s%s d%s", value_path_name(c.vp.path), arch_name(c.arch), c.qk_norm ? "+qknorm" : "", s.name);
            bool vocab_rows = !strcmp(s.name, "wte") || !strcmp(s.name, "lm_head");
            size_t n = vocab_rows ? (size_t)c.vocab_size * c.n_embd : s.count;  // padded rows: checked below
            check_gradient(what, m.params_memory + off, grads.data() + off, n, loss, 300);
            if (vocab_rows)
                for (size_t i = n; i < s.count; i++) CHECK(grads[off + i] == 0, "padded vocab row of %s got a gradient", s.name);
            checked++;
        }
        off += s.count;
    }
    gpt_free(&m);
    return checked;
}
