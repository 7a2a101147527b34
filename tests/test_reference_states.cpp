// tests/test_reference_states.cpp: the CPU reference against the independent PyTorch reference.
//
// dev/reference/model.py implements both families and all five value paths from
// docs/value_paths.md and the papers, in PyTorch, not translated from this code base;
// dev/reference/make_states.py wrote one state per (family x path) into tests/reference_states/:
// parameters, a batch, the logits, the loss, every gradient, and (16 of the 18 states: all but the
// two extreme-regime ones below, "train": null) a 10-step AdamW trajectory, computed in float64.
// This test loads each state into GPT<real, Vp*> and compares, in float32 (the trainer's
// precision) and in float64 (where only the states' float32 storage limits the agreement). A
// missing or unreadable state is a failure, never a skip.
//
// The metric for arrays is the scaled error max|a - ref| / max|ref| per tensor. Bounds:
//   float32 run. The same PyTorch reference evaluated in float32 differs from its float64 self by
//     at most (over the 16 states with a trajectory; see "fp32_noise" in each state's JSON): logits 8.7e-7,
//     per-tensor gradients 4.9e-6, gradient norms along the trajectory 1.1e-5, 10-step losses
//     1.1e-6 (states are drawn so that AdamW does not amplify rounding: make_states.py). The
//     largest three are the tied llama's; without it they were 3.7e-6, 7.8e-6 and 1.1e-6.
//     Rounding in float32 is u = 6e-8 per operation; the longest sums here have K <= 64 terms
//     (F = 64 in fcproj, B*T = 16 positions in every weight gradient) and reach ~sqrt(K)*u to
//     K*u ~ 4e-6 relative to the magnitudes summed, and the backward through five blocks of
//     norms and softmaxes multiplies that by their condition (~10). So: loss, per-position
//     losses, logits 1e-5; gradients 5e-5 per tensor; first gradient norm 1e-5; 10-step losses
//     5e-5 and gradient norms 1e-4 (a norm is a derivative: more sensitive to the parameters
//     than the loss). Every bound is >10x the measured float32 noise (but 9x for the tied llama's
//     trajectory gradient norms; its C++ fp32 run is at 1.3e-6 there) and >40x below the smallest
//     optimizer error measured (2.4e-3: wte without weight decay).
//   float64 run. The states hold float32 arrays (rounded from float64: relative error <= 2^-24
//     = 6e-8 per element), so arrays get 2e-7. Loss, gradient norms and trajectory are float64
//     numbers in the JSON (17 digits) and the reference rounds the optimizer's per-step inputs
//     (lr, clip scale, the lambdas' lr) to float32 as AdamWSettings does, so what is left is
//     float64 rounding in different summation orders, amplified a little by 10 AdamW steps
//     (measured <= 3e-14): loss and first gradient norm 1e-12, 10-step values 1e-11.
//   The extreme-regime states (gpt2x_vanilla, llamax_depth: embeddings and head x12, q/k x3;
//     mean losses 76 and 63 nats, many target probabilities below 1e-30; GPT-2's attention
//     scores 9x larger, the llama's QK-norm normalizes that away) get the same bounds and have no
//     trajectory. Their float32 noise is of the same order as the others' (logits 3.0e-7,
//     gradients 3.7e-6 at most); the C++ float32 run measured, 2026-11-26: loss 8.5e-9, logits
//     3.2e-7, gradients 1.7e-6 at most. Before the CPU loss became log-sum-exp, their loss checks
//     failed (a token's loss was capped at 69 nats).
//   VP_REFERENCE_STATES_DIR=DIR checks the states of DIR instead (dev/reference/fuzz_states.py's
//     random shapes, run_states_dir below) with these same checks and bounds. That generator
//     keeps each state's float32 yardstick (the larger of the reference's float32 noise and its
//     float64 change under one float32 rounding of the parameters) within a tenth of each bound,
//     and writes "fp32_check": false where no batch can: only the float64 run is compared then.
//   Everywhere: the gradient elements that are zero by construction (the state's
//     zero_grad_ranges: padded vocab rows, position rows >= T, unseen tokens of an untied llama's
//     embedding, lambda_0, SLA dead slices of section 4b) must be exactly 0.
#define TESTING
#include "train_gpt_cpu.cpp"

#include <dirent.h>

#include <algorithm>
#include <set>

#include "dev/reference/reference_state.h"
#include "tests/testing.h"

#ifndef REFERENCE_STATES_DIR
#define REFERENCE_STATES_DIR "tests/reference_states"
#endif

struct Bounds {
    const char* precision;
    double loss, logits, losses, grads;  // the forward and backward of the state's parameters
    double norm0;                        // the gradient norm of the first step (same gradient)
    double traj, traj_norm;              // losses and gradient norms after 1..10 AdamW steps
};
static const Bounds BOUNDS_F32 = {"fp32", 1e-5, 1e-5, 1e-5, 5e-5, 1e-5, 5e-5, 1e-4};
static const Bounds BOUNDS_F64 = {"fp64", 1e-12, 2e-7, 2e-7, 2e-7, 1e-12, 1e-11, 1e-11};

static double rel(double a, double ref) { return std::fabs(a - ref) / std::fabs(ref); }

// Loss of the last forward from the per-position losses, summed in double (m.mean_loss is a
// float, which would cap the float64 run at float32 precision).
template <typename real, typename VP>
static double mean_loss(const GPT<real, VP>& m) {
    double s = 0;
    for (int i = 0; i < m.B * m.T; i++) s += (double)m.acts.losses[i];
    return s / (m.B * m.T);
}

static const char* tensor_at(const RefState& s, size_t i) {
    for (const RefLayoutEntry& e : s.layout)
        if (i >= e.offset && i < e.offset + e.count) return e.name.c_str();
    return "?";
}

template <typename real, typename VP>
static void load_params(GPT<real, VP>* m, const RefState& s) {
    for (size_t i = 0; i < s.num_params; i++) m->params_memory[i] = (real)s.params[i];
}

// The C++ parameter layout must be the state's (names, order, sizes, decay, the lambdas' own lr).
template <typename real, typename VP>
static bool check_layout(const GPT<real, VP>& m, const RefState& s) {
    bool ok = true;
    CHECK(m.num_params == s.num_params, "%s: %zu params, the reference has %zu", s.name.c_str(), m.num_params, s.num_params);
    size_t k = 0;
    for (const ParamSpec& spec : m.specs) {
        if (spec.count == 0) continue;
        if (k >= s.layout.size()) {
            CHECK(false, "%s: C++ tensor '%s' is not in the reference layout", s.name.c_str(), spec.name);
            return false;
        }
        const RefLayoutEntry& e = s.layout[k++];
        bool same = e.name == spec.name && e.count == spec.count && e.decay == spec.decay;
        CHECK(same, "%s: layout entry %zu: C++ %s (%zu, decay %d), reference %s (%zu, decay %d)", s.name.c_str(), k - 1, spec.name,
              spec.count, spec.decay, e.name.c_str(), e.count, e.decay);
        ok = ok && same;
        if (e.name == "vp_lambda")
            CHECK(spec.own_lr == s.config.vp.resformer_lambda_lr, "%s: vp_lambda own lr %g, config says %g", s.name.c_str(), spec.own_lr,
                  s.config.vp.resformer_lambda_lr);
    }
    CHECK(k == s.layout.size(), "%s: the C++ layout has %zu tensors, the reference %zu", s.name.c_str(), k, s.layout.size());
    return ok && k == s.layout.size();
}

template <typename real, typename VP>
static void check_state_with(const RefState& s, const Bounds& bd) {
    const ModelConfig& c = s.config;
    const int B = s.B, T = s.T, BT = B * T, V = c.vocab_size, Vp = c.padded_vocab_size;
    const char* nm = s.name.c_str();
    const char* pr = bd.precision;
    GPT<real, VP> m;
    gpt_build(&m, c);
    if (!check_layout(m, s)) {
        gpt_free(&m);
        return;
    }
    load_params(&m, s);

    // forward: loss, per-position losses, logits (real vocab columns of the (B,T,Vp) copy)
    m.save_logits = true;
    gpt_forward(&m, s.inputs.data(), s.targets.data(), B, T);
    double loss = mean_loss(m);
    CHECK(rel(loss, s.loss) <= bd.loss, "%s %s: loss %.9g, reference %.9g (rel %.2e > %.0e)", nm, pr, loss, s.loss, rel(loss, s.loss), bd.loss);
    CHECK(rel(m.mean_loss, s.loss) <= std::max(bd.loss, 2e-7), "%s %s: mean_loss %.9g, reference %.9g", nm, pr, m.mean_loss, s.loss);
    std::vector<double> logits((size_t)BT * V);
    REQUIRE(m.debug_logits.size() == (size_t)BT * Vp, "%s %s: debug_logits has %zu values, want B*T*Vp = %d", nm, pr, m.debug_logits.size(), BT * Vp);
    for (int i = 0; i < BT; i++)
        for (int v = 0; v < V; v++) logits[(size_t)i * V + v] = (double)m.debug_logits[(size_t)i * Vp + v];
    size_t wi;
    double e_logits = ref_scaled_err(logits.data(), s.logits.data(), logits.size(), &wi);
    CHECK(e_logits <= bd.logits, "%s %s: logits scaled error %.2e > %.0e (worst at b,t=%zu v=%zu: %.7g vs %.7g)", nm, pr, e_logits, bd.logits,
          wi / V, wi % V, logits[wi], s.logits[wi]);
    double e_losses = ref_scaled_err(m.acts.losses, s.losses.data(), (size_t)BT, &wi);
    CHECK(e_losses <= bd.losses, "%s %s: per-position losses scaled error %.2e > %.0e (position %zu)", nm, pr, e_losses, bd.losses, wi);

    // backward: every gradient tensor, by name
    gpt_zero_grad(&m);
    gpt_backward(&m, (real)1);
    double e_grads = 0;
    std::string worst_tensor;
    for (const RefLayoutEntry& e : s.layout) {
        const real* g = m.grads_memory + e.offset;
        const float* r = s.grads.data() + e.offset;
        double err = ref_scaled_err(g, r, e.count, &wi);
        if (err > e_grads) {
            e_grads = err;
            worst_tensor = e.name;
        }
        CHECK(err <= bd.grads, "%s %s: d%s scaled error %.2e > %.0e (element %zu: %.7g vs %.7g)", nm, pr, e.name.c_str(), err, bd.grads, wi,
              (double)g[wi], (double)r[wi]);
    }
    for (const auto& zr : s.zero_grad_ranges) {
        size_t nonzero = 0, first = 0;
        for (size_t i = zr.first; i < zr.first + zr.second; i++)
            if (m.grads_memory[i] != (real)0 && nonzero++ == 0) first = i;
        CHECK(nonzero == 0, "%s %s: %zu nonzero gradient elements in [%zu, %zu), which get no gradient by construction (first: %s element %zu = %.3g)",
              nm, pr, nonzero, zr.first, zr.first + zr.second, tensor_at(s, first), first, nonzero ? (double)m.grads_memory[first] : 0.0);
    }

    // the 10-step AdamW trajectory on the same batch (host/schedule.h lr, global-norm clipping);
    // the extreme-regime states have none
    const RefTrain& tr = s.train;
    double e_traj = 0, e_norm = 0;
    for (int step = 0; s.has_train && step <= tr.steps; step++) {
        gpt_forward(&m, s.inputs.data(), s.targets.data(), B, T);
        double l = mean_loss(m);
        e_traj = std::max(e_traj, rel(l, tr.losses[step]));
        CHECK(rel(l, tr.losses[step]) <= bd.traj, "%s %s: loss after %d AdamW steps %.9g, reference %.9g (rel %.2e > %.0e)", nm, pr, step, l,
              tr.losses[step], rel(l, tr.losses[step]), bd.traj);
        if (step == tr.steps) break;
        gpt_zero_grad(&m);
        gpt_backward(&m, (real)1);
        double norm = gpt_grad_norm(&m);
        double nb = step == 0 ? bd.norm0 : bd.traj_norm;
        e_norm = std::max(e_norm, rel(norm, tr.grad_norms[step]));
        CHECK(rel(norm, tr.grad_norms[step]) <= nb, "%s %s: step %d gradient norm %.9g, reference %.9g (rel %.2e > %.0e)", nm, pr, step, norm,
              tr.grad_norms[step], rel(norm, tr.grad_norms[step]), nb);
        // host/schedule.h must give the reference's lr (to float rounding); the update then uses
        // the reference's own value, so that the trajectories see the very same lr
        float lr_cpp = lr_at_step(step, tr.lr, tr.warmup, tr.max_steps, tr.min_lr_frac);
        CHECK(rel(lr_cpp, tr.lrs[step]) <= 1e-6, "%s: step %d lr %.9g, reference %.9g", nm, step, lr_cpp, tr.lrs[step]);
        float lr = (float)tr.lrs[step];
        float scale = norm > tr.grad_clip ? (float)(tr.grad_clip / norm) : 1.0f;
        AdamWSettings st = {lr, tr.beta1, tr.beta2, tr.eps, tr.weight_decay, scale, tr.lr};
        gpt_update(&m, st, step + 1);
    }
    if (s.has_train)
        printf("     %-22s %s: loss %.1e logits %.1e grads %.1e (d%s) norms %.1e 10-step %.1e\n", nm, pr, rel(loss, s.loss), e_logits, e_grads,
               worst_tensor.c_str(), e_norm, e_traj);
    else
        printf("     %-22s %s: loss %.1e logits %.1e grads %.1e (d%s) (no trajectory)\n", nm, pr, rel(loss, s.loss), e_logits, e_grads,
               worst_tensor.c_str());
    gpt_free(&m);
}

template <typename VP>
static void check_state_path(const RefState& s) {
    if (s.fp32_check) check_state_with<float, VP>(s, BOUNDS_F32);
    else printf("     %-22s fp32: not compared (\"fp32_check\": false: float32 rounding alone moves this state by more than a tenth of a bound)\n", s.name.c_str());
    check_state_with<double, VP>(s, BOUNDS_F64);
}

// Checks the state in file `path`, which must be named `name`.
static void check_state_file(const std::string& path, const std::string& name) {
    RefState s;
    std::string err;
    REQUIRE(ref_state_read(path, &s, &err), "reference state %s: %s (regenerate: .venv/bin/python dev/reference/make_states.py, or fuzz_states.py for VP_REFERENCE_STATES_DIR)", name.c_str(), err.c_str());
    REQUIRE(s.name == name, "%s holds state '%s'", path.c_str(), s.name.c_str());
    // a model the trainer would refuse is no test of it (a generated state must stay within them)
    std::string problem = model_config_problem(s.config);
    if (problem.empty()) problem = value_path_config_problem(s.config.vp, s.config.n_head, s.config.n_kv_head);
    REQUIRE(problem.empty(), "%s: the trainer refuses this config: %s", path.c_str(), problem.c_str());
    switch (s.config.vp.path) {
        case VP_VANILLA: check_state_path<VpVanilla>(s); break;
        case VP_RESFORMER: check_state_path<VpResformer>(s); break;
        case VP_SVFORMER: check_state_path<VpSvformer>(s); break;
        case VP_SLA: check_state_path<VpSla>(s); break;
        case VP_DEPTH: check_state_path<VpDepth>(s); break;
        default: CHECK(false, "%s: unknown value path %d", name.c_str(), s.config.vp.path);
    }
}

// The states that have a STATE_TEST below, noted as each registers (before main runs).
static std::vector<std::string>& state_tests() {
    static std::vector<std::string> names;
    return names;
}
struct StateTestNoted {
    explicit StateTestNoted(const char* name) { state_tests().push_back(name); }
};

// Every expected state is there and nothing else, and each has its comparison test: the
// directory, ref_state_names() and the STATE_TEST list below are three lists kept by hand, so a
// state that disappears, a file no test reads, or a state added without its test each fail here.
TEST(reference_states_all_present) {
    std::vector<std::string> names = ref_state_names();
    CHECK(names.size() == 18, "expected 18 states (2 families x 7 path settings, the tied llama, 2 extreme-regime states, the wide-head Qwen3)");
    std::set<std::string> known(names.begin(), names.end());
    CHECK(known.size() == names.size(), "ref_state_names() lists a state twice");
    for (const std::string& n : names) {
        FILE* f = fopen((std::string(REFERENCE_STATES_DIR) + "/" + n + ".bin").c_str(), "rb");
        CHECK(f != nullptr, "missing reference state %s/%s.bin", REFERENCE_STATES_DIR, n.c_str());
        if (f) fclose(f);
    }
    DIR* dir = opendir(REFERENCE_STATES_DIR);
    REQUIRE(dir != nullptr, "cannot list %s", REFERENCE_STATES_DIR);
    size_t files = 0;
    for (struct dirent* e; (e = readdir(dir)) != nullptr;) {
        std::string f = e->d_name;
        if (f == "." || f == "..") continue;
        files++;
        bool is_state = f.size() > 4 && f.compare(f.size() - 4, 4, ".bin") == 0 && known.count(f.substr(0, f.size() - 4));
        CHECK(is_state, "%s/%s is not a state of ref_state_names() (a stale state, or a new one the reader does not know)", REFERENCE_STATES_DIR,
              f.c_str());
    }
    closedir(dir);
    CHECK(files == names.size(), "%s holds %zu files, ref_state_names() %zu states", REFERENCE_STATES_DIR, files, names.size());
    std::set<std::string> tested(state_tests().begin(), state_tests().end());
    CHECK(tested.size() == state_tests().size(), "a state has two STATE_TESTs");
    for (const std::string& n : names) CHECK(tested.count(n), "state %s has no STATE_TEST: nothing compares against it", n.c_str());
    for (const std::string& n : tested) CHECK(known.count(n), "STATE_TEST(%s) is not in ref_state_names()", n.c_str());
}

// ref_scaled_err: a NaN or inf anywhere is an infinite error at its index, whatever comes after it
// (after a NaN every comparison is false, so a running maximum once let a later element win).
TEST(ref_scaled_err_catches_nan_and_inf) {
    const float ref[4] = {1, 2, 3, 4};
    struct Case {
        float a[4];
        size_t at;
    };
    const Case cases[] = {{{NAN, 2, 3, 4.0001f}, 0}, {{1, NAN, 3, 4}, 1}, {{1, 2, 3, NAN}, 3}, {{1, 2, INFINITY, 4}, 2}, {{1, -INFINITY, 3, 4}, 1}};
    for (const Case& c : cases) {
        size_t wi = 99;
        double e = ref_scaled_err(c.a, ref, 4, &wi);
        CHECK(std::isinf(e) && wi == c.at, "{%g,%g,%g,%g}: error %g at %zu, want inf at %zu", c.a[0], c.a[1], c.a[2], c.a[3], e, wi, c.at);
    }
    const float a[4] = {1, 2, 3, 4}, bad_ref[4] = {1, 2, NAN, 4};
    size_t wi = 99;
    double e = ref_scaled_err(a, bad_ref, 4, &wi);
    CHECK(std::isinf(e) && wi == 2, "a NaN in the reference: error %g at %zu, want inf at 2", e, wi);
    const double d[4] = {1, 2.5, 3, 4};
    e = ref_scaled_err(d, ref, 4, &wi);
    CHECK(e == 0.5 / 4 && wi == 1, "finite: error %g at %zu, want 0.125 at 1", e, wi);
}

// The reader refuses damaged states (so a corrupted file cannot pass by comparing nothing).
TEST(reference_state_reader_refuses_damage) {
    std::string path = std::string(REFERENCE_STATES_DIR) + "/gpt2_vanilla.bin";
    FILE* f = fopen(path.c_str(), "rb");
    REQUIRE(f, "cannot open %s", path.c_str());
    std::string raw;
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), f)) > 0) raw.append(buf, got);
    fclose(f);
    auto refused = [&](const std::string& bytes, const char* what) {
        char tmp[] = "/tmp/vp_refstate_XXXXXX";
        int fd = mkstemp(tmp);
        REQUIRE(fd >= 0, "mkstemp");
        REQUIRE(write(fd, bytes.data(), bytes.size()) == (ssize_t)bytes.size(), "write");
        close(fd);
        RefState s;
        std::string err;
        CHECK(!ref_state_read(tmp, &s, &err), "a state with %s was accepted", what);
        unlink(tmp);
    };
    refused(raw.substr(0, raw.size() - 100), "a truncated data block");
    refused(raw.substr(0, 200), "a truncated header");
    std::string bad = raw;
    bad[0] = 'X';
    refused(bad, "a bad magic");
    RefState s;
    std::string err;
    CHECK(!ref_state_read(std::string(REFERENCE_STATES_DIR) + "/no_such_state.bin", &s, &err), "a missing file was accepted");
}

// each one also notes its state for reference_states_all_present
#define STATE_TEST(n)                                                                    \
    static StateTestNoted n##_noted(#n);                                                 \
    TEST(reference_##n) { check_state_file(REFERENCE_STATES_DIR "/" #n ".bin", #n); }
STATE_TEST(gpt2_vanilla)
STATE_TEST(gpt2_resformer_fixed)
STATE_TEST(gpt2_resformer_learn)
STATE_TEST(gpt2_svformer)
STATE_TEST(gpt2_sla_orig)
STATE_TEST(gpt2_sla_chain)
STATE_TEST(gpt2_depth)
STATE_TEST(llama_vanilla)
STATE_TEST(llama_resformer_fixed)
STATE_TEST(llama_resformer_learn)
STATE_TEST(llama_svformer)
STATE_TEST(llama_sla_orig)
STATE_TEST(llama_sla_chain)
STATE_TEST(llama_depth)
STATE_TEST(llamatied_vanilla)
STATE_TEST(gpt2x_vanilla)
STATE_TEST(llamax_depth)
STATE_TEST(qwen3_depth)

// VP_REFERENCE_STATES_DIR=DIR: check every state in DIR instead of the committed ones, one test
// per file (named after it, so that argv[1] filters them as usual), with the same per-state
// checks and bounds (check_state_file). dev/reference/fuzz_states.py writes such directories:
// random shapes (make test-reference). The tests above that are about the committed set (its
// file names, the reader on gpt2_vanilla) do not run then. An empty DIR is a failure.
static int run_states_dir(const std::string& dir, int argc, char** argv) {
    std::vector<std::string> stems;
    if (DIR* d = opendir(dir.c_str())) {
        for (struct dirent* e; (e = readdir(d)) != nullptr;) {
            std::string f = e->d_name;
            if (f.size() > 4 && f.compare(f.size() - 4, 4, ".bin") == 0) stems.push_back(f.substr(0, f.size() - 4));
        }
        closedir(d);
    }
    std::sort(stems.begin(), stems.end());
    static std::vector<std::string> names;  // the tests' names: alive until main returns
    names = stems;
    test_registry().clear();
    for (const std::string& n : names) test_registry().push_back({n.c_str(), [dir, n] { check_state_file(dir + "/" + n + ".bin", n); }});
    if (names.empty())
        test_registry().push_back({"reference_states_dir", [dir] { CHECK(false, "no *.bin state in '%s' (VP_REFERENCE_STATES_DIR)", dir.c_str()); }});
    printf("checking the %zu states in %s (VP_REFERENCE_STATES_DIR)\n", names.size(), dir.c_str());
    return run_registered_tests(argc, argv);
}

int main(int argc, char** argv) {
    const char* dir = getenv("VP_REFERENCE_STATES_DIR");
    if (dir && *dir) return run_states_dir(dir, argc, argv);
    return run_registered_tests(argc, argv);
}
