// host/train_loop.h: the training program, shared by the CPU and GPU trainers.
//
// Everything a run does besides the math lives here once: reading the command line, choosing
// between a new run, --resume and --init-from, the data loaders, the step loop with gradient
// accumulation, clipping and the LR schedule, evaluation, samples, checkpoints and logs.
// A trainer includes this after defining its Model type and these functions (the "backend"; the
// GPU ones live in namespace gpu and are found by argument-dependent lookup):
//
//   void  gpt_build(Model*, const ModelConfig&)              allocate parameters and gradients
//   void  gpt_init_params(Model*, uint64_t seed)             fill from the seed (host/params.h: same in every build)
//   void  gpt_ensure_activations(Model*, B, T)               allocate the activations for forwards of up to B x T
//   void  gpt_forward(Model*, inputs, targets, B, T)         sets model->mean_loss; B x T within the allocated
//   void  gpt_zero_grad(Model*)
//   void  gpt_backward(Model*, float loss_scale)             accumulate gradients of loss * loss_scale
//   double gpt_grad_sumsq(Model*, size_t off, size_t count)  sum of squares of gradients [off, off + count), in double
//   double model_weights_sumsq(Model*)                       sum of squares of the (master) weights this rank holds, in double
//   void  gpt_update(Model*, const AdamWSettings&, int step) step is 1-based
//   void  gpt_last_logits(Model*, const int* tokens, int T, std::vector<float>* logits)
//                                                            forward one sequence (no targets); the logits of its
//                                                            last position, Vp floats
//   void  gpt_position_losses(const Model*, std::vector<double>*)  the B*T per-position losses of the last
//                                                            forward with targets (--eval-mc: host/mc_eval.h)
//   std::vector<float> model_lambdas(const Model*)           ResFormer's learnable lambdas (L), else empty
//   bool  model_depth_alpha_add(Model*, DepthAlphaSums*)     optional: Depth-Attention's weights of the last forward,
//                                                            added to sums sized by depth_alpha_sums (host/value_path.h);
//                                                            false for other paths
//                                                            (a backend's version takes a non-const Model*, so that
//                                                            it, not the fallback below, is chosen)
//   void  gpt_free(Model*)
//   void  model_load(Model*, const std::string& path, CheckpointMeta*, bool with_optimizer)
//   void  model_save(Model*, const std::string& dir, CheckpointMeta*)   fills the tensors of meta's checkpoint
//   const char* model_build_name(const Model*)               e.g. "cpu-fp32"
//   void  model_set_run_options(Model*, const RunConfig&)    optional, before gpt_build: flags only one build uses (GPU: --recompute, --overlap-reduce)
//   double model_peak_tflops(const Model*)                   optional: the device's peak that MFU divides by (0 = no MFU)
// and the fields model->config, model->num_params, model->mean_loss.
//
// Data parallel (host/distributed.h, docs/distributed.md): under mpirun every rank runs this same
// program on its own slice of the data. A backend that supports it defines
//   bool  model_supports_dist(const Model*)                  true
//   void  model_dist_init(const Model*)                      before gpt_build: the backend's own setup (GPU: this rank's device, NCCL)
//   void  model_dist_finalize(const Model*)                  before dist_finalize
//   void  model_dist_last_backward(Model*)                   the next gpt_backward is the step's last (GPU: it starts
//                                                            summing each layer's gradients over the ranks as it goes)
//   void  model_dist_reduce_grads(Model*)                    sum the gradients over ranks: every element (ZeRO-0),
//                                                            or at least this rank's dist_shard (ZeRO-1)
//   void  model_dist_shard_optimizer(Model*)                 --zero 1, after gpt_build and before model_load: keep only this rank's optimizer slice
//   void  model_dist_update(Model*, const AdamWSettings&, int step)   update (own slice + all-gather under ZeRO-1)
// The gradient norm is then sharded the same way in both ZeRO modes: each rank sums the squares
// of its own dist_shard and the partial sums are added in rank order (dist_allreduce_sum), so
// ZeRO-1 needs the summed gradient of its own shard only, and ZeRO-0 and ZeRO-1 agree bit for bit.
// and a model_save that every rank calls (collective) and only rank 0 writes. The fallbacks below
// serve a backend without them: one process only (or nothing to set up).
// VP_DIST_FORCE=1 (MPI builds) runs this data-parallel code even with one rank, so that a machine
// with one GPU still exercises it (the results must equal the plain run's, bit for bit).
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "host/checkpoint.h"
#include "host/config.h"
#include "host/dataloader.h"
#include "host/distributed.h"
#include "host/logger.h"
#include "host/mc_eval.h"
#include "host/params.h"
#include "host/rng.h"
#include "host/schedule.h"
#include "host/tokenizer.h"
#include "host/update_guard.h"
#include "host/utils.h"

// Independent random streams derived from --seed (see rng_stream): the init uses the
// per-tensor streams 1000+, the data loader its own seed, samples this one.
#define RNG_STREAM_SAMPLES 1

template <typename Model>
void model_set_run_options(Model*, const RunConfig&) {}
template <typename Model>
double model_peak_tflops(const Model*) { return 0; }
template <typename Model>
bool model_depth_alpha_add(Model*, DepthAlphaSums*) { return false; }
template <typename Model>
bool model_supports_dist(const Model*) { return false; }
template <typename Model>
void model_dist_init(const Model*) {}
template <typename Model>
void model_dist_finalize(const Model*) {}
template <typename Model>
void model_dist_last_backward(Model*) {}
template <typename Model>
void model_dist_reduce_grads(Model*) {}
template <typename Model>
void model_dist_shard_optimizer(Model*) {}
template <typename Model>
void model_dist_update(Model* m, const AdamWSettings& s, int step) { gpt_update(m, s, step); }

struct ValSet {
    std::string name;
    DataLoader loader;
    int batches = 0;  // micro-batches per evaluation: --eval-batches, fewer if the set is smaller
};

// Decides where the model comes from and returns its config; fills meta/ckpt_path when a
// checkpoint is involved.
inline ModelConfig resolve_model_config(const RunConfig& rc, CheckpointMeta* meta, std::string* ckpt_path) {
    if (rc.resume) {
        std::vector<int64_t> steps = checkpoint_list_steps(rc.out_dir);
        if (steps.empty())
            runtime_error("run without --resume 1 to start a new run in this directory (--resume auto does either, as the directory holds)",
                          "--resume 1: no checkpoint (ckpt_*.bin) in '%s'", rc.out_dir.c_str());
        *ckpt_path = checkpoint_path(rc.out_dir, steps.back());
    } else if (!rc.init_from.empty()) {
        *ckpt_path = rc.init_from;
    } else {
        return model_config_from_flags(rc);
    }
    checkpoint_read_meta(*ckpt_path, meta);
    const ModelConfig& c = meta->model;
    value_path_check_checkpoint(c.vp, ckpt_path->c_str());
    // The header is CRC-checked only from version 2, and a CRC does not catch a header written
    // wrong: a shape that does not hold together would size buffers wrongly, so refuse it here.
    std::string problem = model_config_problem(c);
    if (problem.empty()) problem = value_path_config_problem(c.vp, c.n_head, c.n_kv_head);
    size_t config_params = problem.empty() ? count_params(param_specs(c)) : 0;
    if (problem.empty() && config_params != (size_t)meta->num_params)
        problem = "its model config makes " + std::to_string(config_params) + " parameters, its header says " + std::to_string(meta->num_params);
    if (problem.empty() && meta->step < 0) problem = "a negative step " + std::to_string(meta->step);
    // the run counts steps in an int (--max-steps): a larger step would resume at another one
    if (problem.empty() && meta->step > INT32_MAX) problem = "a step " + std::to_string(meta->step) + " beyond the 2^31-1 steps a run can have";
    if (!problem.empty())
        runtime_error("the checkpoint is damaged or was not written by valuepath: use an earlier checkpoint, or restore this one from a copy",
                      "checkpoint '%s' has an invalid header: %s", ckpt_path->c_str(), problem.c_str());
    check_shape_flags_match(rc, c, ckpt_path->c_str());
    value_path_check_flags_match(rc.vp_flags, c.vp, c.n_layer, c.n_head, c.n_kv_head, ckpt_path->c_str());
    return c;
}

// --resume auto: --resume 1 where --out-dir holds a checkpoint, else a new run there, so that a
// batch job submitted again and again needs one command line (llm.c's -y 1 behaves so). The
// ranks must see the same directory (as --resume 1 needs): if only some find a checkpoint, they
// would start different runs, so that is an error. Collective.
inline void resolve_resume_auto(RunConfig* rc) {
    std::vector<int64_t> steps = checkpoint_list_steps(rc->out_dir);
    double found = steps.empty() ? 0.0 : 1.0;
    int world = dist_world();
    dist_allreduce_sum(&found, 1);  // a no-op in one process
    if (found != 0 && found != world)
        runtime_error("put --out-dir on a file system that every rank sees (as --resume 1 needs)",
                      "--resume auto: %d of %d ranks find a checkpoint in '%s'", (int)found, world, rc->out_dir.c_str());
    rc->resume = found ? 1 : 0;
    if (dist_rank() == 0) {
        if (rc->resume) printf("--resume auto: continuing from the newest checkpoint in '%s' (step %lld)\n", rc->out_dir.c_str(), (long long)steps.back());
        else printf("--resume auto: no checkpoint in '%s': a new run\n", rc->out_dir.c_str());
    }
}

// Training flags that differ from those stored in the checkpoint being resumed: allowed (you may
// want to extend --max-steps), but the run is then no longer the uninterrupted one, so say so.
inline void warn_changed_flags(const std::string& before, const std::string& now) {
    size_t pos = 0;
    while (pos < now.size()) {
        size_t end = now.find('\n', pos);
        std::string line = now.substr(pos, end - pos);
        if (!line.empty() && before.find(line + "\n") == std::string::npos && line.rfind("--resume=", 0) != 0)
            printf("note: resumed with a changed flag: %s (the checkpoint's run had otherwise)\n", line.c_str());
        pos = end == std::string::npos ? now.size() : end + 1;
    }
}

// alpha: where Depth-Attention's weights of every forward are summed, or null. cut_short, if
// given: the batches end early once a stop signal is pending, and *cut_short says so (the value
// is then partial; every rank still makes the one all-reduce).
template <typename Model>
float evaluate_loss(Model* model, ValSet* vs, int B, int T, DepthAlphaSums* alpha = nullptr, bool* cut_short = nullptr) {
    dataloader_reset(&vs->loader);
    std::vector<int> inputs((size_t)B * T), targets((size_t)B * T);
    double sum = 0;
    // rank r evaluates micro-batches r, r+world, ...: the same batches (and value) as one process
    for (int i = 0; i < vs->batches; i++) {
        if (stop_cuts_here(cut_short)) break;
        dataloader_next_batch(&vs->loader, inputs.data(), targets.data());
        if (i % dist_world() != dist_rank()) continue;
        gpt_forward(model, inputs.data(), targets.data(), B, T);
        sum += model->mean_loss;
        if (alpha) model_depth_alpha_add(model, alpha);
    }
    dist_allreduce_sum(&sum, 1);
    return (float)(sum / vs->batches);
}

// n tokens after the context (the delimiter, then a prompt's tokens), each sampled from the model's
// logits over the last T tokens (a sliding window; no KV cache: samples are short and occasional).
// cut_short, if given: the tokens end early once a stop signal is pending, and *cut_short says so;
// the RNG then skips the draws of the tokens left out, and ends where the whole n would leave it.
// on_token, if given, is called with each token as it is drawn (print_sample streams them).
template <typename Model>
std::vector<int> generate_tokens(Model* model, const std::vector<int>& context, int n, int T, const SampleSettings& settings, Rng* rng,
                                 bool* cut_short = nullptr, const std::function<void(int)>& on_token = {}) {
    std::vector<int> seq = context;
    std::vector<float> logits;
    for (int i = 0; i < n; i++) {
        if (stop_cuts_here(cut_short)) {
            rng_skip(rng, sample_draws_per_token(settings) * (uint64_t)(n - i));
            break;
        }
        int ctx = std::min((int)seq.size(), T);
        gpt_last_logits(model, seq.data() + seq.size() - ctx, ctx, &logits);
        for (int v = 0; v < model->config.vocab_size; v++)
            if (!std::isfinite(logits[(size_t)v]))
                runtime_error("lower --lr or raise --warmup-steps (the training diverged), or use a checkpoint of a run that did not",
                              "a sample's logit for token %d is %g: the weights give non-finite logits", v, logits[(size_t)v]);
        seq.push_back(sample_token(logits.data(), model->config.vocab_size, settings, rng));
        if (on_token) on_token(seq.back());
    }
    return std::vector<int>(seq.begin() + context.size(), seq.end());
}

// The tokens a sample starts from: the document delimiter (what every document in a shard starts
// with), then --sample-prompt's tokens. Checks the prompt: a usage error if it cannot be encoded
// or does not fit in T.
inline std::vector<int> sample_context(const RunConfig& rc, const Tokenizer* tok, int vocab_size, int T) {
    int start = tok ? tokenizer_eot(tok) : -1;
    if (start < 0 || start >= vocab_size) start = 0;
    std::vector<int> context = {start};
    if (rc.sample_prompt.empty()) return context;
    if (!tokenizer_can_encode(tok)) {
        usage_error("pass a tokenizer file that encodes (docs/formats.md), or drop --sample-prompt",
                    "--sample-prompt cannot be encoded with --tokenizer '%s': %s", rc.tokenizer.c_str(), tok->encoder_missing.c_str());
    }
    std::vector<int> prompt;
    if (!tokenizer_encode(tok, rc.sample_prompt, &prompt)) usage_error("pass the prompt as UTF-8 text", "--sample-prompt is not valid UTF-8");
    for (int id : prompt) {
        if (id >= vocab_size) {
            usage_error("pass the tokenizer the model was trained with", "--sample-prompt encodes to token %d, outside the model's vocabulary of %d: the tokenizer does not match the model", id, vocab_size);
        }
    }
    if ((int)prompt.size() + 1 > T) {
        usage_error("shorten the prompt, or raise --seq-len", "--sample-prompt is %zu tokens; with the delimiter before it, it must fit in --seq-len %d", prompt.size(), T);
    }
    context.insert(context.end(), prompt.begin(), prompt.end());
    return context;
}

inline SampleSettings sample_settings(const RunConfig& rc) { return SampleSettings{rc.sample_temperature, rc.sample_top_k}; }

// The header and the prompt come first, then each token as it is drawn (flushed: a sample of a big
// model on a CPU takes minutes, and shows its progress as llm.c's does), decoded with the tokenizer
// or as ids. cut_short: as for generate_tokens; a sample cut short prints what it drew and says so.
template <typename Model>
void print_sample(Model* model, const RunConfig& rc, const Tokenizer* tok, const std::vector<int>& context, int T, Rng* rng, int step,
                  bool* cut_short = nullptr) {
    printf("---- sample at step %d ----\n", step);
    fwrite(rc.sample_prompt.data(), 1, rc.sample_prompt.size(), stdout);  // the prompt, as given
    fflush(stdout);
    bool first = true;
    auto print_token = [&](int id) {
        if (tok) tokenizer_print(tok, &id, 1, stdout);  // a token's bytes as stored: a character split over two tokens comes out whole
        else printf(first ? "%d" : " %d", id);
        first = false;
        fflush(stdout);
    };
    std::vector<int> ids = generate_tokens(model, context, rc.sample_tokens, T, sample_settings(rc), rng, cut_short, print_token);
    if (!tok && !ids.empty()) printf("\n");
    if (cut_short && *cut_short) printf("\n(cut short by %s after %zu of %d tokens)", stop_signal_name(g_stop_signal), ids.size(), rc.sample_tokens);
    printf("\n---------------------------\n");
    fflush(stdout);
}

// A sample that is due but not drawn (the run stops here): its draws are skipped, so that the
// sample RNG the checkpoint keeps is the one of a run that drew it.
inline void skip_sample(const RunConfig& rc, Rng* rng) {
    rng_skip(rng, sample_draws_per_token(sample_settings(rc)) * (uint64_t)rc.sample_tokens);
}

template <typename Model>
std::string config_json(const RunConfig& rc, const ModelConfig& c, size_t num_params, int grad_accum, int64_t resumed_from) {
    char buf[2048];
    snprintf(buf, sizeof(buf),
             "{\"event\":\"config\",\"build\":\"%s\",\"arch\":\"%s\",\"layers\":%d,\"heads\":%d,\"kv_heads\":%d,\"dim\":%d,\"head_dim\":%d,\"ffn_dim\":%d,"
             "\"vocab\":%d,\"padded_vocab\":%d,\"max_seq\":%d,\"rope_theta\":%g,\"qk_norm\":%d,\"tie_embeddings\":%d,\"norm_eps\":%g,"
             "\"batch_size\":%d,\"seq_len\":%d,\"grad_accum\":%d,\"tokens_per_step\":%ld,\"max_steps\":%d,\"lr\":%g,\"min_lr_frac\":%g,\"cooldown_frac\":%g,\"warmup_steps\":%d,"
             "\"beta1\":%g,\"beta2\":%g,\"eps\":%g,\"weight_decay\":%g,\"grad_clip\":%g,\"seed\":%llu,\"num_params\":%zu,",
             model_build_name((const Model*)nullptr), arch_name(c.arch), c.n_layer, c.n_head, c.n_kv_head, c.n_embd, c.head_dim, c.ffn_dim, c.vocab_size, c.padded_vocab_size,
             c.max_seq_len, c.rope_theta, c.qk_norm, (int)config_tied_head(c), c.norm_eps, rc.batch_size, rc.seq_len, grad_accum, (long)rc.batch_size * rc.seq_len * grad_accum * dist_world(),
             rc.max_steps, rc.lr, rc.min_lr_frac, rc.cooldown_frac, rc.warmup_steps, rc.beta1, rc.beta2, rc.eps, rc.weight_decay, rc.grad_clip, (unsigned long long)rc.seed,
             num_params);
    // the strings outside the fixed buffer: a glob has no length limit
    std::string s = buf;
    s += "\"lr_schedule\":" + json_escape(rc.lr_schedule) + ",\"train_data\":" + json_escape(rc.train_data) + ",";
    // what the run is evaluated on and started from: runs compared side by side (plot_runs.py
    // --group and --baseline) must agree on these too, not only on the training setup
    auto sets_json = [](const std::vector<NamedGlob>& sets) {
        std::string a = "[";
        for (size_t i = 0; i < sets.size(); i++) a += (i ? "," : "") + json_escape(named_glob_text(sets[i]));
        return a + "]";
    };
    s += "\"val_data\":" + sets_json(rc.val_data) + ",\"eval_batches\":" + std::to_string(rc.eval_batches) + ",\"eval_mc\":" + sets_json(rc.eval_mc) +
         ",\"init_from\":" + json_escape(rc.init_from) + ",";
    s += value_path_config_json(c.vp);
    if (resumed_from >= 0) s += ",\"resumed_from\":" + std::to_string(resumed_from);
    s += ",\"world\":" + std::to_string(dist_world()) + ",\"zero\":" + std::to_string(rc.zero);
    if (rc.overfit_batch) s += ",\"overfit_batch\":1";  // a debugging run: every step on one batch
    if (rc.skip_loss_z > 0 || rc.skip_norm_z > 0) {  // --skip-loss-z / --skip-norm-z on (host/update_guard.h)
        snprintf(buf, sizeof(buf), ",\"skip_loss_z\":%g,\"skip_norm_z\":%g,\"skip_window\":%d", rc.skip_loss_z, rc.skip_norm_z, rc.skip_window);
        s += buf;
    }
    return s + "}";
}

// Weights that an update made NaN or inf are never evaluated, sampled or saved (a checkpoint of
// them would be worse than none: --resume would diverge again at once). Collective: every rank
// calls it at the same point, and all get the same answer.
template <typename Model>
bool weights_finite(Model* model) {
    double sumsq = model_weights_sumsq(model);
    dist_allreduce_sum(&sumsq, 1);  // a no-op in one process
    return std::isfinite(sumsq);
}

// What to do after the training diverged at a step: a lower lr, from the newest checkpoint left.
inline std::string diverged_hint(const RunConfig& rc) {
    std::vector<int64_t> kept = rc.out_dir.empty() ? std::vector<int64_t>{} : checkpoint_list_steps(rc.out_dir);
    std::string hint = "lower --lr or raise --warmup-steps";
    if (!kept.empty()) hint += ", then --resume 1 continues from the newest checkpoint (step " + std::to_string(kept.back()) + ")";
    else if (!rc.out_dir.empty()) hint += ", and start again (no good checkpoint is left)";
    return hint;
}

// Stopping on a signal: Ctrl-C (SIGINT), a scheduler's SIGTERM before it kills a job, or Slurm's
// `--signal=USR1@SECONDS` warning. The first such signal lets the step in progress finish; its
// evaluation and sample are skipped, or cut short if they have begun (a long one, such as
// HellaSwag's, could outlast a scheduler's grace period), and the evaluation is not logged. Then
// the run saves that step's checkpoint (where --out-dir is set) and exits with 128 + the signal's
// number, as a shell reports a process the signal ended (130, 143, 138). `--resume 1` continues
// from there exactly as if the run had not stopped, but for the evaluation and sample left out
// (the sample RNG skips the draws not made, so later samples are an unstopped run's). The last
// step's evaluation and sample are not cut: the run is complete. A second Ctrl-C ends the process
// at once: SIGINT's handler is one-shot (SA_RESETHAND), and the atomic checkpoint write leaves a
// file complete or absent. SIGTERM and SIGUSR1 again change nothing: schedulers deliver them more
// than once (measured at a Slurm job's time limit: srun's tasks get SIGTERM from slurmstepd and
// from srun, an mpirun's ranks from slurmstepd and a second later from mpirun; docs/distributed.md,
// "Slurm"), and a scheduler that will not wait sends SIGKILL. The run stops by its first signal,
// whatever comes after. Under data parallelism the ranks agree at the step's all-reduce (or the
// evaluation's, or after rank 0's sample), so all stop after the same step whichever rank got the
// signal. The handler is installed only for the step loop (and a --max-steps 0 evaluation):
// before it there is nothing to save.
// SIGHUP (a terminal or ssh session that closed under a run started without nohup, tmux or a
// scheduler) stops it the same way, so that the steps since the last checkpoint are saved, unless
// it was ignored when the trainer started (nohup: hangups are to change nothing then).
constexpr int STOP_SIGNALS[] = {SIGINT, SIGTERM, SIGUSR1, SIGHUP};
constexpr int NUM_STOP_SIGNALS = sizeof(STOP_SIGNALS) / sizeof(STOP_SIGNALS[0]);

inline void stop_signal_handler(int sig) {
    static const char first[] = ": stopping after this step (with --out-dir its checkpoint is saved); a second Ctrl-C (SIGINT) or SIGKILL stops at once\n";
    static const char again[] = ": already stopping after this step; a second Ctrl-C (SIGINT) or SIGKILL stops at once\n";
    bool repeat = g_stop_signal != 0;  // a SIGTERM or SIGUSR1 after the first stop signal, or a first Ctrl-C after one
    if (!repeat) {
        g_stop_signal = sig;
        // A Ctrl-C reaches the whole foreground group: a `| tee` of the console (the recipes') dies of
        // it, and the next console line would end this process by SIGPIPE before its save. From here
        // on, a console that is gone makes writes fail instead (log.jsonl and the checkpoint go on).
        struct sigaction ignore;
        memset(&ignore, 0, sizeof(ignore));
        ignore.sa_handler = SIG_IGN;
        sigaction(SIGPIPE, &ignore, nullptr);
    }
    // async-signal-safe (as sigaction is): write(2) of constant text, nothing that allocates or locks
    const char* name = stop_signal_name(sig);
    const char* msg = repeat ? again : first;
    ssize_t ignored = write(STDERR_FILENO, name, strlen(name));
    ignored = write(STDERR_FILENO, msg, strlen(msg));
    (void)ignored;
}

inline void install_stop_signal_handlers() {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = stop_signal_handler;
    sigemptyset(&sa.sa_mask);
    for (int sig : STOP_SIGNALS) {
        struct sigaction before;
        if (sig == SIGHUP && sigaction(SIGHUP, nullptr, &before) == 0 && before.sa_handler == SIG_IGN) continue;  // nohup
        // reads and writes go on (SA_RESTART); a second SIGINT takes the default action (SA_RESETHAND)
        sa.sa_flags = SA_RESTART | (sig == SIGINT ? SA_RESETHAND : 0);
        sigaction(sig, &sa, nullptr);
    }
}

// The stop signals as all-reduce slots: slot k is 1 where this rank received STOP_SIGNALS[k].
inline void stop_signal_slots(double* slots) {
    int own = g_stop_signal;
    for (int k = 0; k < NUM_STOP_SIGNALS; k++) slots[k] = own == STOP_SIGNALS[k] ? 1.0 : 0.0;
}

// From the slots summed over the ranks: the first signal in STOP_SIGNALS' order that any rank got, or 0.
inline int stop_signal_of_slots(const double* slots) {
    for (int k = 0; k < NUM_STOP_SIGNALS; k++)
        if (slots[k] > 0) return STOP_SIGNALS[k];
    return 0;
}

// After an evaluation (or rank 0's sample) that a stop signal may have cut short on some rank
// (cut: this rank's): 0 if none did, else the stop signal that every rank then agrees to stop by.
// Collective.
inline int agreed_cut(bool cut) {
    double v[1 + NUM_STOP_SIGNALS] = {cut ? 1.0 : 0.0};
    stop_signal_slots(v + 1);
    dist_allreduce_sum(v, 1 + NUM_STOP_SIGNALS);  // a no-op in one process
    if (v[0] == 0) return 0;
    int sig = stop_signal_of_slots(v + 1);
    return sig ? sig : SIGTERM;  // (unreachable: a rank that cut its evaluation had a signal)
}

// --keep-checkpoints N: the newest N are kept, and besides them every multiple of
// --keep-checkpoints-every. A checkpoint just written is not yet known to be good: weights can be
// finite and still give a NaN loss at the next step (whose check then moves the checkpoint aside).
// So until the next step's loss is seen to be finite it does not count among the N (the run keeps
// N + 1 meanwhile), and a run that diverges still has N good checkpoints to resume from.
// confirmed: the newest checkpoint is known good (the step after it was finite), or the run ends.
inline void prune_checkpoints(const RunConfig& rc, bool confirmed) {
    if (dist_rank() != 0 || rc.out_dir.empty() || rc.keep_checkpoints <= 0) return;
    checkpoint_prune(rc.out_dir, rc.keep_checkpoints + (confirmed ? 0 : 1), rc.keep_checkpoints_every);
}

// train_state: the data position to record, if not train's current one (a step cut short)
// confirmed: see prune_checkpoints
template <typename Model>
void save_checkpoint(Model* model, const RunConfig& rc, const ModelConfig& c, int64_t step, const Rng& sample_rng, const UpdateGuardState& guard,
                     const DataLoader* train, bool confirmed, const DataLoaderState* train_state = nullptr) {
    CheckpointMeta meta;
    meta.model = c;
    meta.step = step;
    meta.sample_rng = sample_rng;
    meta.update_guard = guard;
    if (train_state) meta.train_data = *train_state;
    else if (train) meta.train_data = dataloader_get_state(train);  // none with --max-steps 0 and no data
    meta.run_text = run_config_to_text(rc);
    model_save(model, rc.out_dir, &meta);  // every rank: collective under ZeRO-1; rank 0 writes
    if (dist_rank() != 0) return;
    prune_checkpoints(rc, confirmed);
    printf("checkpoint: %s\n", checkpoint_path(rc.out_dir, step).c_str());
}

template <typename Model>
int train_main_unguarded(int argc, char** argv) {
    // A file-size limit (ulimit -f) would end the process by SIGXFSZ at the write that crosses it,
    // with no message and a partial checkpoint left behind; ignored, the write fails with EFBIG,
    // which the checkpoint and log writers report (and the checkpoint's partial file is removed).
    signal(SIGXFSZ, SIG_IGN);
    dist_init(&argc, &argv);
    int world = dist_world();
    bool rank0 = dist_rank() == 0;
    bool dist = dist_active();
    if (dist && !model_supports_dist((const Model*)nullptr))
        usage_error("run it as one process", "%s has no data-parallel training yet (world %d)", model_build_name((const Model*)nullptr), world);
    RunConfig rc;
    if (!parse_command_line(&rc, argc, argv)) {
        dist_finalize();
        return 0;
    }

    validate_run_flags(rc);  // a wrong combination of flags is a usage error before any file is read
    if (run_config_to_text(rc).size() > CHECKPOINT_MAX_RUN_TEXT)  // else its checkpoints could not be read back
        usage_error("shorten the paths and globs (a directory of shards needs one glob, not a list)",
                    "the flags add up to more than %d bytes, more than a checkpoint can store", CHECKPOINT_MAX_RUN_TEXT);
    OutDirLock out_dir_lock;  // rank 0's, held to the end of the run
    if (rank0) lock_out_dir(&out_dir_lock, rc.out_dir);  // before the directory is read (a new one: once made, below)
    if (rc.resume == RESUME_AUTO) resolve_resume_auto(&rc);
    CheckpointMeta meta;
    std::string ckpt_path;
    ModelConfig c = resolve_model_config(rc, &meta, &ckpt_path);
    validate_run_config(rc, c);
    // The run text in checkpoints records the shape the model has, not the flags' defaults, so
    // that a resumed run (whose shape comes from the checkpoint) is not told its shape changed.
    run_config_set_shape(&rc, c);
    // Every rank must run the same command line: a rank with another --lr or --seed would train
    // another model in lockstep (exit 0, results wrong), another shape or --zero would hang in a
    // collective. The flags as resolved (with the shape a checkpoint fixed) are compared by their
    // CRC-32, each rank's in its own slot of a sum (exact in double: below 2^32).
    if (dist) {
        std::string text = run_config_to_text(rc);
        std::vector<double> crcs((size_t)world, 0.0);
        crcs[(size_t)dist_rank()] = (double)crc32_update(0, text.data(), text.size());
        dist_allreduce_sum(crcs.data(), world);
        for (int r = 1; r < world; r++)
            if (crcs[(size_t)r] != crcs[0])
                usage_error("start every rank with the same command line (mpirun -np N ./train FLAGS)",
                            "rank %d was started with other flags than rank 0 (the CRC-32 of the resolved flags: %08x, rank 0's %08x)", r,
                            (unsigned)crcs[(size_t)r], (unsigned)crcs[0]);
    }
    if (!rc.resume && !rc.out_dir.empty() && !checkpoint_list_steps(rc.out_dir).empty())
        usage_error("pass --resume 1 (or auto) to continue that run, or choose another --out-dir",
                    "--out-dir '%s' already holds checkpoints; a new run there would overwrite them", rc.out_dir.c_str());
    int B = rc.batch_size, T = rc.seq_len;
    long rank_tokens = (long)B * T * world;  // tokens per micro-step over all ranks
    if (rc.total_batch_tokens % rank_tokens)
        usage_error("make --total-batch-tokens a multiple of --batch-size x --seq-len x ranks", "--total-batch-tokens %ld is not a multiple of %d x %d x %d ranks = %ld",
                    rc.total_batch_tokens, B, T, world, rank_tokens);
    if (rc.total_batch_tokens / rank_tokens > INT32_MAX)
        usage_error("lower --total-batch-tokens (it is tokens per optimizer step, e.g. 524288)", "--total-batch-tokens %ld is %ld micro-batches of %d x %d x %d ranks per step; at most %d",
                    rc.total_batch_tokens, rc.total_batch_tokens / rank_tokens, B, T, world, INT32_MAX);
    int grad_accum = rc.total_batch_tokens ? (int)(rc.total_batch_tokens / rank_tokens) : 1;
    // micro-batches per step over all ranks, what the loss and its gradient are averaged over: up
    // to 2^31-1 per rank times the ranks, beyond an int
    const long micro_batches = (long)grad_accum * world;
    if (rank0 && rc.zero && !dist) printf("note: --zero 1 has no effect in one process (the optimizer state has nothing to be sharded over)\n");
    if (rank0 && rc.was_given("--overlap-reduce") && !dist)
        printf("note: --overlap-reduce has no effect in one process (there is no reduce over ranks to overlap)\n");

    // data first: a bad shard should fail before minutes of model setup
    DataLoader train;
    bool have_train = !rc.train_data.empty();
    if (have_train) dataloader_init(&train, rc.train_data.c_str(), B, T, c.vocab_size, true, rc.seed, dist_rank(), world);
    std::vector<ValSet> vals(rc.val_data.size());
    for (size_t i = 0; i < rc.val_data.size(); i++) {
        vals[i].name = rc.val_data[i].name;
        dataloader_init(&vals[i].loader, rc.val_data[i].glob.c_str(), B, T, c.vocab_size, false, 0, 0, 1);
        size_t seqs = (size_t)vals[i].loader.num_seqs;
        vals[i].batches = (int)std::min<size_t>((size_t)rc.eval_batches, std::max<size_t>(1, seqs / B));
        // a val glob that also matches train shards ('data/x/*.bin' as --train-data beside
        // 'data/x/x_val_*.bin') would report the loss on training data as the val loss; a set named
        // train is that loss on purpose (logged as val_loss_train)
        std::string shared = have_train && vals[i].name != "train" ? dataloader_shared_shard(&train, &vals[i].loader) : "";
        if (!shared.empty())
            usage_error("narrow --train-data to the train shards (e.g. 'DIR/*_train_*.bin'); to track the loss on training data on purpose, name the set: --val-data train=GLOB",
                        "--val-data%s%s '%s' shard '%s' is also a --train-data '%s' shard: the val loss would be measured on training data",
                        vals[i].name.empty() ? "" : " ", vals[i].name.c_str(), rc.val_data[i].glob.c_str(), shared.c_str(), rc.train_data.c_str());
    }
    std::vector<McSet> mcs(rc.eval_mc.size());
    for (size_t i = 0; i < rc.eval_mc.size(); i++) {
        mcs[i].name = rc.eval_mc[i].name;
        mc_load(&mcs[i], rc.eval_mc[i].glob, c.vocab_size);
    }
    Tokenizer tok;
    bool have_tok = !rc.tokenizer.empty();
    if (have_tok) tokenizer_init(&tok, rc.tokenizer.c_str());
    // a tokenizer of more tokens than the model's vocabulary is not the model's: its samples would
    // be decoded into another tokenizer's text. Fewer is fine by as much as a vocabulary is padded
    // (llm.c's 50304 for GPT-2's 50257; Qwen's 151936 for 151665), not by thousands: Llama-2's
    // 32000 with a GPT-2 model of 50257 is the wrong file.
    const int tokenizer_pad_slack = 1024;
    if (have_tok && (tok.vocab_size > c.vocab_size || c.vocab_size - tok.vocab_size > tokenizer_pad_slack))
        usage_error("pass the tokenizer the model was trained with (the .vptok beside its shards), or none (samples are then printed as token ids)",
                    "--tokenizer '%s' has %d tokens, %s the model's vocabulary of %d: the tokenizer does not match the model", rc.tokenizer.c_str(),
                    tok.vocab_size, tok.vocab_size > c.vocab_size ? "more than" : "over 1024 fewer than (more than padding)", c.vocab_size);
    std::vector<int> sample_start = sample_context(rc, have_tok ? &tok : nullptr, c.vocab_size, T);

    if (dist) model_dist_init((const Model*)nullptr);  // collective; the GPU build picks its device here
    Model model;
    model_set_run_options(&model, rc);
    gpt_build(&model, c);
    // Where errors throw (VP_ERRORS_THROW: the tests and the fuzzers call train_main in-process), an
    // error after this point unwinds through here: the model, the loaders and the tokenizer are
    // freed then, as at the end of a run. Elsewhere an error ends the process, and this never runs.
    auto free_all = [&] {
        gpt_free(&model);
        if (have_train) dataloader_free(&train);
        for (ValSet& vs : vals) dataloader_free(&vs.loader);
        if (have_tok) tokenizer_free(&tok);
    };
    struct FreeOnUnwind {
        decltype(free_all)* free;
        ~FreeOnUnwind() { if (free) (*free)(); }
    } free_on_unwind{&free_all};
    if (dist && rc.zero) model_dist_shard_optimizer(&model);  // before a load, which then reads only this rank's slice
    int start_step = 0;
    Rng sample_rng = rng_stream(rc.seed, RNG_STREAM_SAMPLES);
    const UpdateGuardSettings guard_settings{rc.skip_loss_z, rc.skip_norm_z, rc.skip_window};
    UpdateGuardState guard{};  // the statistics of the steps so far; stays zero while the guard is off
    if (rc.resume) {
        model_load(&model, ckpt_path, &meta, true);
        if (!have_train) usage_error(nullptr, "--resume needs --train-data");
        dataloader_set_state(&train, &meta.train_data);
        start_step = (int)meta.step;
        sample_rng = meta.sample_rng;
        guard = meta.update_guard;
        warn_changed_flags(meta.run_text, run_config_to_text(rc));
        printf("resuming from %s (step %d)\n", ckpt_path.c_str(), start_step);
    } else if (!rc.init_from.empty()) {
        model_load(&model, ckpt_path, &meta, false);
        printf("initialised from %s\n", ckpt_path.c_str());
    } else {
        gpt_init_params(&model, rc.seed);
    }
    // a checkpoint of NaN weights (written by other software, or by an older valuepath, which saved
    // them) would give a NaN loss, val loss or sample with no word on why
    if ((rc.resume || !rc.init_from.empty()) && !weights_finite(&model))
        runtime_error(rc.resume ? "it cannot be trained on: move it aside (then --resume 1 takes the one before it), or start again"
                                : "use a checkpoint of a run that did not diverge",
                      "the weights of checkpoint '%s' are NaN or inf", ckpt_path.c_str());
    if (start_step > rc.max_steps)
        usage_error("raise --max-steps to continue training", "the checkpoint is at step %d, beyond --max-steps %d", start_step, rc.max_steps);
    // a step is judged once --skip-window values came before it: a run too short judges none
    if (guard_settings.enabled() && rank0 && start_step < rc.max_steps && guard.seen + (rc.max_steps - start_step) - 1 < rc.skip_window)
        printf("note: --skip-loss-z/--skip-norm-z judge no step of this run: a step is judged after --skip-window %d steps, and the run ends at step %d\n",
               rc.skip_window, rc.max_steps);
    if (rc.resume && start_step == rc.max_steps && rank0)
        printf("note: the checkpoint is at step %d = --max-steps: nothing to train (raise --max-steps to train on)\n", start_step);

    Logger lg;
    if (rank0) {
        if (!rc.out_dir.empty()) make_dirs(rc.out_dir);
        lock_out_dir(&out_dir_lock, rc.out_dir);
        logger_open(&lg, rc.out_dir, rc.resume != 0);
        logger_write_line(&lg, config_json<Model>(rc, c, model.num_params, grad_accum, rc.resume ? start_step : -1));
    }
    printf("valuepath %s | %s L=%d H=%d Hkv=%d C=%d F=%d V=%d | value path %s | %zu parameters\n", model_build_name(&model), arch_name(c.arch), c.n_layer, c.n_head,
           c.n_kv_head, c.n_embd, c.ffn_dim, c.vocab_size, value_path_name(c.vp.path), model.num_params);
    printf("batch %d x %d tokens x %d accumulation x %d ranks = %ld tokens per step, %d steps\n", B, T, grad_accum, world, (long)B * T * grad_accum * world,
           rc.max_steps);
    if (dist) printf("data parallel: %d ranks, ZeRO-%d (optimizer state %s)\n", world, rc.zero, rc.zero ? "sharded" : "replicated");
    if (dist_threads_split())  // rank 0's share of CPUs that other ranks may run on too (host/distributed.h)
        printf("OpenMP: %d thread%s on rank 0, not %d: the %d ranks on this node share its CPUs (set OMP_NUM_THREADS to choose)\n",
               dist_threads_split(), dist_threads_split() == 1 ? "" : "s", dist_threads_default(), dist_node_ranks());
    // SLA with n_l >= L (the default round(3L/4) is L for L = 2) or no skip head is vanilla's
    // computation exactly (value_paths.md section 10): allowed, but a comparison run should know
    if (c.vp.path == VP_SLA && (c.vp.sla_layers >= c.n_layer || c.vp.sla_heads == 0) && rank0)
        printf("note: SLA with n_l = %d of %d layers and %d skip heads skips nothing: this run computes what vanilla does (lower --sla-layers, raise --sla-heads)\n",
               c.vp.sla_layers, c.n_layer, c.vp.sla_heads);
    // the activations for the training shape now, before a forward of another shape (a multiple-
    // choice batch, a sample) would size them first; a device without the memory says so here
    gpt_ensure_activations(&model, B, T);
    if (have_train) printf("train data: %zu tokens in '%s'\n", dataloader_num_tokens(&train), rc.train_data.c_str());
    for (const McSet& mc : mcs) {
        std::vector<McBatch> batches = mc_batches(mc, B, T, MC_FORWARD_STEP);
        size_t rows = 0, forwarded = 0, in_rows = 0;
        for (const McBatch& mb : batches) rows += mb.rows.size(), forwarded += mb.rows.size() * (size_t)mb.T, in_rows += mb.row_positions;
        int cut = mc_count_truncated(mc, T);
        printf("multiple choice%s%s: %zu examples (%zu rows of %zu positions, forwarded in %zu batches as %zu) in '%s'", mc.name.empty() ? "" : " ", mc.name.c_str(),
               mc.examples.size(), rows, in_rows, batches.size(), forwarded, mc.path.c_str());
        if (cut) printf("; %d cut to their last %d tokens (raise --seq-len to score them whole)", cut, T + 1);
        printf("\n");
    }
    if (!rc.sample_prompt.empty()) printf("sample prompt: %zu tokens after the delimiter %d\n", sample_start.size() - 1, sample_start[0]);

    // The val losses and multiple-choice scores at a step, logged. cuttable: a stop signal (pending,
    // or received during it) ends the evaluation early, since a scheduler's grace period may not
    // last through a long one (HellaSwag's 40k rows) and the checkpoint comes after it; nothing of
    // it is logged then, and it returns the signal every rank agrees to stop by (else 0).
    auto run_evals = [&](int step, bool cuttable) -> int {
        if (vals.empty() && mcs.empty()) return 0;
        bool cut = false;
        bool* cut_short = cuttable ? &cut : nullptr;
        std::vector<NamedLoss> losses;
        // Depth-Attention: the mean weight of each (layer, source) over this evaluation's val batches,
        // sized here so that every rank adds the same vector (a rank may have no batch to run)
        DepthAlphaSums alpha = depth_alpha_sums(c.vp, c.n_layer);
        for (ValSet& vs : vals) losses.push_back({vs.name, evaluate_loss(&model, &vs, B, T, &alpha, cut_short)});
        if (c.vp.path == VP_DEPTH) {
            alpha.sum.push_back(alpha.count);
            dist_allreduce_sum(alpha.sum.data(), (int)alpha.sum.size());
            alpha.count = alpha.sum.back();
            alpha.sum.pop_back();
        }
        // finite weights can still overflow in the forward: a val loss of inf or NaN is not a
        // result (nor is a loss cut short, which is partial and not logged: not checked)
        for (const NamedLoss& nl : losses)
            if (!cut && !std::isfinite(nl.loss))
                runtime_error(diverged_hint(rc).c_str(), "step %d: the val loss%s%s is %g: the weights give a non-finite loss, the training diverged", step,
                              nl.name.empty() ? "" : " of ", nl.name.c_str(), nl.loss);
        std::vector<NamedMc> mc_results;
        for (const McSet& mc : mcs) {
            McResult r = evaluate_mc(&model, mc, B, T, cut_short);
            mc_results.push_back({mc.name, r.acc, r.acc_norm, r.acc_tokavg});
        }
        if (cuttable) {
            int sig = agreed_cut(cut);
            if (sig) {
                if (rank0) printf("the evaluation at step %d was cut short by %s: not logged\n", step, stop_signal_name(sig));
                return sig;
            }
        }
        std::vector<std::vector<double>> depth_alpha = depth_alpha_means(alpha, c.vp, c.n_layer);
        if (rank0) logger_val(&lg, step, losses, mc_results, depth_alpha);
        if (rank0) print_depth_alpha(step, depth_alpha);
        if (rank0) print_lambdas(step, model_lambdas(&model));  // ResFormer learn only: empty otherwise
        return 0;
    };
    // (before the signal handlers: a signal here ends the process at once, with nothing to save)
    if (!rc.resume && rc.eval_every > 0) run_evals(0, false);

    // A training shard is checked when it is first loaded, mid-run: a bad token id, or a file
    // removed or changed since startup, is found there. The run cannot go on, but the steps done
    // since the last checkpoint need not be lost: the weights and optimizer state are still those
    // after the last completed step (a step changes them only at its end, and this one stops before
    // its update), so they are saved with the data position at that step's end: exactly the
    // checkpoint that step's own save would have written. Under data parallelism the save is
    // collective, so every rank must learn of the failure at the same point of the step: the rank
    // whose data failed skips the rest of the step's forward and backward, still takes part in the
    // gradient reduce (which then reduces every layer itself, in the order the others' backward
    // does: the GPU build's model_dist_reduce_grads), and its failure rides in the loss sum that
    // every rank makes anyway.
    int last_saved = start_step;
    int last_saved_here = -1;  // the step of the newest checkpoint this process wrote, if any
    // the newest checkpoint is not yet known good (prune_checkpoints): a resumed run's may be one
    bool prune_pending = rc.resume != 0;
    DataLoaderState step_start_data{};
    auto stop_for_data_error = [&](int steps_done, const CapturedError* own, int failed_ranks) {
        // the reason first: should the save fail too (a full disk), its message adds to this one
        if (own) print_error("error", own->hint.c_str(), own->message.c_str());
        else print_error("error", "the message of the rank whose data failed names the shard and what to do",
                         ("rank " + std::to_string(dist_rank()) + " stops: " + std::to_string(failed_ranks) +
                          " other rank(s) could not read their training data").c_str());
        if (!rc.out_dir.empty() && steps_done > last_saved) {
            // the last completed step's update is not yet checked (this step's loss would have)
            if (!weights_finite(&model))
                runtime_error(diverged_hint(rc).c_str(), "the weights after step %d are NaN or inf (not saved: the training diverged)", steps_done);
            save_checkpoint(&model, rc, c, steps_done, sample_rng, guard, &train, false, &step_start_data);
            last_saved_here = steps_done;
            if (rank0) printf("saved the last completed step (%d) before stopping: fix or replace the shard named in the error, then --resume 1\n", steps_done);
        }
        dist_barrier();  // every rank has spoken before the first exits (mpirun then ends the job)
        exit_after_error(VP_EXIT_RUNTIME);
    };

    const LrSchedule schedule = run_lr_schedule(rc);
    const double peak_tflops = model_peak_tflops(&model), flops_per_token = training_flops_per_token(c, model.num_params, T);
    std::vector<int> inputs((size_t)B * T), targets((size_t)B * T);
    // --overfit-batch 1: the first step's micro-batches, kept and reused by every later step. The
    // loader goes back to where they start, so checkpoints record that position and a resumed run
    // reads the same batch again.
    std::vector<std::vector<int>> overfit_inputs, overfit_targets;
    const DataLoaderState overfit_start = have_train ? dataloader_get_state(&train) : DataLoaderState{};
    if (rank0 && rc.overfit_batch && start_step < rc.max_steps)
        printf("note: --overfit-batch 1: every step trains on the same %ld tokens; the loss should fall towards 0\n", (long)B * T * grad_accum * world);
    install_stop_signal_handlers();
    int stopped_by = 0;  // the signal that stopped the run after a step, agreed by every rank
    for (int step = start_step; step < rc.max_steps; step++) {
        auto t0 = std::chrono::steady_clock::now();
        if (have_train) step_start_data = dataloader_get_state(&train);
        gpt_zero_grad(&model);
        double loss = 0;
        std::unique_ptr<CapturedError> data_error;  // this rank's, if its data failed this step
        for (int micro = 0; micro < grad_accum; micro++) {
            if (rc.overfit_batch && overfit_inputs.size() == (size_t)grad_accum) {
                inputs = overfit_inputs[micro];
                targets = overfit_targets[micro];
            } else if (!data_error) {
                try {
                    ErrorCapture capture;
                    dataloader_next_batch(&train, inputs.data(), targets.data());
                } catch (const CapturedError& e) {
                    data_error.reset(new CapturedError(e));
                }
                if (rc.overfit_batch && !data_error) {
                    overfit_inputs.push_back(inputs);
                    overfit_targets.push_back(targets);
                    if (overfit_inputs.size() == (size_t)grad_accum) dataloader_set_state(&train, &overfit_start);
                }
            }
            if (data_error) break;  // model_dist_reduce_grads still makes every collective the others make
            gpt_forward(&model, inputs.data(), targets.data(), B, T);
            loss += model.mean_loss;
            if (dist && micro == grad_accum - 1) model_dist_last_backward(&model);
            gpt_backward(&model, 1.0f / (float)micro_batches);
        }
        double sumsq = 0;  // of the summed gradients
        if (dist) {
            model_dist_reduce_grads(&model);  // the sum over ranks, of this rank's shard at least
            // the loss and this rank's share of the norm in one rank-ordered sum, after the
            // gradients: a rank that never came is reported by the gradients' wait (GPU: nccl_wait)
            // and the number of ranks whose data failed this step
            DistShard own = dist_shard(model.num_params, dist_rank(), world);
            double own_sumsq = data_error ? 0.0 : gpt_grad_sumsq(&model, own.offset, own.count);  // (unused if any failed)
            // and, one slot per stop signal, the ranks that received it
            double sums[3 + NUM_STOP_SIGNALS] = {loss, own_sumsq, data_error ? 1.0 : 0.0};
            stop_signal_slots(sums + 3);
            dist_allreduce_sum(sums, 3 + NUM_STOP_SIGNALS);
            loss = sums[0];
            sumsq = sums[1];
            if (sums[2] > 0) stop_for_data_error(step, data_error.get(), (int)sums[2] - (data_error ? 1 : 0));
            stopped_by = stop_signal_of_slots(sums + 3);
        } else {
            if (data_error) stop_for_data_error(step, data_error.get(), 0);
            sumsq = gpt_grad_sumsq(&model, 0, model.num_params);
            stopped_by = g_stop_signal;
        }
        loss /= (double)micro_batches;
        float norm = (float)std::sqrt(sumsq);
        if (!std::isfinite(loss) || !std::isfinite(norm)) {
            // The weights at the start of this step give it. If this run saved them (the checkpoint
            // of the step before), that checkpoint is of no use: resumed, it gives the same NaN at
            // once, whatever the lr. It is moved aside (kept, not deleted) so that --resume 1
            // takes the one before it, which prune_checkpoints kept for this.
            if (last_saved_here == step && rank0) {
                std::string path = checkpoint_path(rc.out_dir, step), aside = path + ".diverged";
                if (rename(path.c_str(), aside.c_str()) == 0) printf("moved the checkpoint of step %d, whose weights give this, aside: %s\n", step, aside.c_str());
            }
            std::string hint = diverged_hint(rc);
            if (last_saved_here != step && step == start_step && rc.resume)
                hint = "the checkpoint resumed from gives it at once: move it aside (then --resume 1 takes the one before it) and lower --lr";
            if (step == start_step && !rc.init_from.empty())
                hint = "the --init-from checkpoint's weights give it at once (finite, but the forward overflows): use a checkpoint of a run that did not diverge";
            runtime_error(hint.c_str(), "step %d: the loss (%g) or gradient norm (%g) is not finite: the training diverged", step + 1, loss, norm);
        }
        // this step's loss is finite, so the newest checkpoint (its starting weights) is good
        if (prune_pending) prune_checkpoints(rc, true);
        prune_pending = false;
        // --skip-loss-z / --skip-norm-z: an outlier step keeps its batch, step count and lr, but
        // not its update (host/update_guard.h); every rank judges the same all-reduced values
        bool skip_update = false;
        if (guard_settings.enabled()) {
            const UpdateGuardState before = guard;
            // judged on the values log.jsonl records (the loss as a float), so that the log alone
            // can replay every verdict
            UpdateGuardVerdict verdict = update_guard_step(&guard, guard_settings, (float)loss, norm);
            skip_update = verdict.skip();
            if (skip_update && rank0) update_guard_print(step + 1, verdict, guard_settings, (float)loss, norm, before);
        }
        AdamWSettings opt;
        opt.lr = lr_at(schedule, step);
        opt.beta1 = rc.beta1;
        opt.beta2 = rc.beta2;
        opt.eps = rc.eps;
        opt.weight_decay = rc.weight_decay;
        opt.grad_scale = (rc.grad_clip > 0 && norm > rc.grad_clip) ? rc.grad_clip / norm : 1.0f;
        opt.lr_peak = rc.lr;
        if (!skip_update) {
            if (dist) model_dist_update(&model, opt, step + 1);
            else gpt_update(&model, opt, step + 1);
        }
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        int done = step + 1;
        // MFU per device: this rank's B * T * grad_accum tokens in the step's time
        double mfu = peak_tflops > 0 ? flops_per_token * B * T * grad_accum / (ms / 1000.0) / (peak_tflops * 1e12) : 0;
        if (rank0)
            logger_step(&lg, done, rc.max_steps, (float)loss, opt.lr, norm, ms, (double)B * T * grad_accum * world / (ms / 1000.0), mfu,
                        model_lambdas(&model), skip_update);

        bool last = done == rc.max_steps;
        if (last) stopped_by = 0;  // the run is complete: a signal now changes nothing
        bool evals_now = (rc.eval_every > 0 && done % rc.eval_every == 0) || (last && (!vals.empty() || !mcs.empty()));
        if (evals_now && stopped_by) {  // the signal came during the step: the checkpoint first
            if (rank0) printf("the evaluation at step %d is skipped: stopping (%s)\n", done, stop_signal_name(stopped_by));
            evals_now = false;
        }
        bool sample_now = rc.sample_every > 0 && (done % rc.sample_every == 0 || last);
        bool save_now = !rc.out_dir.empty() && ((rc.checkpoint_every > 0 && done % rc.checkpoint_every == 0) || last || stopped_by);
        // the update may have made the weights NaN (the next step's loss would say so, but there
        // may be none, or an eval or a sample first): checked before any of these use them
        if ((evals_now || sample_now || save_now) && !weights_finite(&model))
            runtime_error(diverged_hint(rc).c_str(), "the weights after step %d are NaN or inf", done);
        // a signal during the evaluation cuts it short and stops the run here; the last step's is
        // not cut (the run is complete: a second signal still ends it at once)
        if (evals_now) stopped_by = run_evals(done, !last);
        // the sample, likewise: skipped when stopping, cut short by a signal once begun (rank 0
        // draws it; the others wait at the agreement), but not at the last step
        if (sample_now && stopped_by) {
            if (rank0) printf("the sample at step %d is skipped: stopping (%s)\n", done, stop_signal_name(stopped_by));
            skip_sample(rc, &sample_rng);
        } else if (sample_now) {
            bool cut = false;
            if (rank0) print_sample(&model, rc, have_tok ? &tok : nullptr, sample_start, T, &sample_rng, done, last ? nullptr : &cut);
            if (!last) stopped_by = agreed_cut(cut);
        }
        save_now |= !rc.out_dir.empty() && stopped_by;
        if (save_now) {
            // the last step's checkpoint is confirmed by nothing more: the run keeps N
            save_checkpoint(&model, rc, c, done, sample_rng, guard, &train, last);
            last_saved = last_saved_here = done;
            prune_pending = !last;
        }
        if (stopped_by) {
            if (rank0) {
                if (save_now)
                    printf("stopped by %s after step %d of %d: saved %s; to go on, run the same command%s\n", stop_signal_name(stopped_by), done,
                           rc.max_steps, checkpoint_path(rc.out_dir, done).c_str(), rc.resume_arg == "0" ? " with --resume 1" : " again");
                else
                    printf("stopped by %s after step %d of %d (nothing saved: no --out-dir)\n", stop_signal_name(stopped_by), done, rc.max_steps);
                logger_write_line(&lg, "{\"event\":\"stopped\",\"step\":" + std::to_string(done) + ",\"signal\":\"" + stop_signal_name(stopped_by) + "\"}");
                fflush(stdout);
            }
            break;
        }
    }
    if (rc.max_steps == start_step && !rc.resume) {
        // --max-steps 0: no training. With --init-from this evaluates and samples a trained
        // checkpoint (nanoGPT's sample.py); without it, the initial weights. The val sets were
        // evaluated above already when --eval-every is set.
        if (rc.eval_every <= 0) stopped_by = run_evals(0, true);
        bool sampled = false;
        if (!stopped_by && rc.sample_every > 0) {
            bool cut = false;
            if (rank0) print_sample(&model, rc, have_tok ? &tok : nullptr, sample_start, T, &sample_rng, 0, &cut);
            stopped_by = agreed_cut(cut);
            sampled = true;
        }
        if (stopped_by) {  // the evaluation or the sample was the job, and it was cut short: nothing more is done
            if (rank0) {
                printf("stopped by %s: %s\n", stop_signal_name(stopped_by), sampled ? "the sample is cut short, nothing saved" : "nothing sampled or saved");
                logger_write_line(&lg, "{\"event\":\"stopped\",\"step\":0,\"signal\":\"" + std::string(stop_signal_name(stopped_by)) + "\"}");
            }
        } else if (!rc.out_dir.empty()) {
            save_checkpoint(&model, rc, c, 0, sample_rng, guard, have_train ? &train : nullptr, true);
        }
    }
    if (rank0 && guard.skipped > 0)
        printf("updates skipped by --skip-loss-z/--skip-norm-z: %lld of the run's %d steps (log.jsonl marks them \"skipped\":1)\n", (long long)guard.skipped,
               rc.max_steps);
    if (rank0) logger_close(&lg);
    free_on_unwind.free = nullptr;
    free_all();
    if (dist) model_dist_finalize((const Model*)nullptr);
    dist_finalize();
    return stopped_by ? 128 + stopped_by : 0;
}

// train_main_unguarded with running out of host memory as a clear error: a std::vector or string
// that cannot grow throws std::bad_alloc, which would otherwise end the process with
// "terminate called" and no hint. (Large buffers go through malloc_check, which says so itself.)
template <typename Model>
int train_main(int argc, char** argv) {
    try {
        int code = train_main_unguarded<Model>(argc, argv);
        // The console may hold the only copy of a result (a --max-steps 0 evaluation or sample
        // without --out-dir): output lost to a full disk must not end as a success. (A run stopped
        // by a signal keeps its 128 + N: after the first signal a console that is gone is expected.)
        // (stdio keeps no reason for a write that failed earlier: the message names the usual one)
        if (code == 0 && (fflush(stdout) != 0 || ferror(stdout)))
            runtime_error("free space where standard output goes (or send it elsewhere) and run again; log.jsonl and the checkpoints, if any, are complete",
                          "writing the console output (standard output) failed (a full disk?): what it printed is incomplete");
        return code;
    } catch (const std::bad_alloc&) {
        runtime_error("use a smaller --batch-size, --seq-len or model, or a machine with more memory", "out of host memory");
    }
}
