// host/config.h: the model and run configuration, and the command line that fills it.
//
// Shared by the CPU reference (train_gpt_cpu.cpp) and the GPU trainer: one CLI, one set of
// defaults, one validation. The command line is a table (flag_table() below): each row names a
// long flag, where its value goes, its default (as text, parsed by the same code as the user's
// value) and a help line, so `--help` can never disagree with what is parsed.
//
// Dimension legend used across valuepath:
//   L = layers, C = model dim, H = query heads, Hkv = key/value heads, G = H/Hkv (GQA group),
//   D = head dim (C/H), F = MLP hidden dim, V = vocab, Vp = V padded up to a multiple of 128,
//   W = width of the fused qkv projection = (H + 2*Hkv)*D.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "host/schedule.h"
#include "host/utils.h"
#include "host/value_path.h"

enum Arch : int32_t { ARCH_GPT2 = 0, ARCH_LLAMA = 1 };

inline const char* arch_name(int arch) { return arch == ARCH_GPT2 ? "gpt2" : arch == ARCH_LLAMA ? "llama" : "?"; }

// Everything that fixes the shapes and the math of the model. It is written verbatim into
// checkpoints (fixed-size fields only), so its layout is part of the checkpoint format:
// append new fields at the end and bump CHECKPOINT_VERSION.
struct ModelConfig {
    int32_t arch;               // ARCH_GPT2 or ARCH_LLAMA
    int32_t n_layer;            // L
    int32_t n_head;             // H
    int32_t n_kv_head;          // Hkv (GPT-2: = H)
    int32_t n_embd;             // C
    int32_t head_dim;           // D: C / H, except a llama with --head-dim (Qwen3: 128 at any width)
    int32_t ffn_dim;            // F: GPT-2 4C; Llama the SwiGLU hidden size
    int32_t vocab_size;         // V: real tokens
    int32_t padded_vocab_size;  // Vp: V rounded up to a multiple of 128 (tensor-core friendly rows)
    int32_t max_seq_len;        // GPT-2: rows of the learned position table; Llama: the longest T allowed
    float rope_theta;           // Llama: RoPE base
    int32_t qk_norm;            // Llama: 1 = per-head RMSNorm on q and k before RoPE (Qwen3)
    float norm_eps;             // LayerNorm / RMSNorm epsilon
    ValuePathConfig vp;         // which value path this model was built for, and its settings
    int32_t tie_embeddings;     // Llama: 1 = the output head is wte (Qwen3's small models); 0 = its own
                                // lm_head. GPT-2 always ties and keeps 0 here. Checkpoints before
                                // 2026-11-25 hold 0 in this slot (it was vp's last reserved int).
};
static_assert(sizeof(ModelConfig) == 116, "ModelConfig is the checkpoint header's model block (docs/formats.md)");

// Whether the output head is the token embedding: logits = lnf(x) @ wte^T (PyTorch:
// lm_head.weight = wte.weight), so wte's gradient gets the classifier's and the lookup's parts.
inline bool config_tied_head(const ModelConfig& c) { return c.arch == ARCH_GPT2 || c.tie_embeddings; }

inline int config_qkv_width(const ModelConfig& c) { return (c.n_head + 2 * c.n_kv_head) * c.head_dim; }

// ----------------------------------------------------------------------------
// The run configuration: everything the command line sets.

struct NamedGlob {
    std::string name;  // "" for the unnamed set (logged as "val_loss", or "mc_acc", ...)
    std::string glob;  // --val-data: a glob of shards; --eval-mc: one file
};

// A set as its flag gave it: "GLOB", or "NAME=GLOB" (checkpoints' run text, log.jsonl's config line)
inline std::string named_glob_text(const NamedGlob& ng) { return ng.name.empty() ? ng.glob : ng.name + "=" + ng.glob; }

// --resume auto: resume where --out-dir holds a checkpoint, else start a new run (train_main decides)
constexpr int RESUME_AUTO = 2;

struct RunConfig {
    // model shape (ignored where a checkpoint supplies it, but an explicit conflicting flag is an error)
    std::string arch;
    int layers, heads, kv_heads, dim, head_dim, ffn_dim, vocab, max_seq, qk_norm, tie_embeddings;
    float rope_theta;
    std::string init_from;
    // optimisation
    float lr, beta1, beta2, eps, weight_decay, min_lr_frac, cooldown_frac, grad_clip;
    float skip_loss_z, skip_norm_z;  // outlier steps whose update is skipped (host/update_guard.h)
    int skip_window;
    std::string lr_schedule;  // cosine | linear | wsd | constant (host/schedule.h)
    int warmup_steps, max_steps, batch_size, seq_len;
    int overfit_batch;  // 1 = every step trains on the first step's batch (a debugging check)
    long total_batch_tokens;
    uint64_t seed;
    // data
    std::string train_data;
    std::vector<NamedGlob> val_data;
    int eval_every, eval_batches;
    std::vector<NamedGlob> eval_mc;  // multiple-choice sets (host/mc_eval.h)
    // samples
    int sample_every, sample_tokens, sample_top_k;
    float sample_temperature;
    std::string tokenizer;
    std::string sample_prompt;  // text the samples continue (encoded with --tokenizer)
    // checkpoints and logs
    std::string out_dir;
    int checkpoint_every, keep_checkpoints, keep_checkpoints_every;
    // --resume as given: "0", "1" or "auto"; resume is what it means (RESUME_AUTO until train_main
    // has looked in --out-dir, then 0 or 1)
    std::string resume_arg;
    int resume;
    // data parallel (mpirun; host/distributed.h)
    int zero;
    int recompute;  // GPU build: activation recomputation level (the CPU build keeps every activation)
    int overlap_reduce;  // GPU data parallel: 1 = each layer's gradient all-reduce during the backward, 0 = after it
    // value path settings (strings so that "not given" is distinguishable: see value_path.h)
    ValuePathFlags vp_flags;
    // which flags the user gave explicitly (by flag name), to detect conflicts with --init-from/--resume
    std::vector<std::string> given;

    bool was_given(const char* flag) const {
        for (const std::string& g : given)
            if (g == flag) return true;
        return false;
    }
};

enum FlagType { FLAG_INT, FLAG_LONG, FLAG_U64, FLAG_FLOAT, FLAG_STRING, FLAG_VALSETS };

struct FlagSpec {
    const char* name;      // long flag, with the leading "--"
    FlagType type;
    void* dst;             // the RunConfig field it fills
    const char* dflt;      // default, as text (parsed like a user value); "" for empty strings
    const char* help;
};

// The whole command line, bound to the fields of one RunConfig. Value-path flags are listed
// by value_path.h (they exist only in the binary of their path).
inline std::vector<FlagSpec> flag_table(RunConfig* rc) {
#define RC_FIELD(f) ((void*)&rc->f)
    return {
    // model
    {"--arch",        FLAG_STRING, RC_FIELD(arch),        "gpt2",  "model family: gpt2 (LayerNorm, GELU, learned positions, tied embeddings) or llama (RMSNorm, RoPE, SwiGLU, GQA, untied unless --tie-embeddings 1)"},
    {"--layers",      FLAG_INT,    RC_FIELD(layers),      "12",    "number of transformer blocks L"},
    {"--heads",       FLAG_INT,    RC_FIELD(heads),       "12",    "query heads H"},
    {"--kv-heads",    FLAG_INT,    RC_FIELD(kv_heads),    "0",     "key/value heads Hkv for grouped-query attention (0 = same as --heads; gpt2 requires Hkv = H)"},
    {"--dim",         FLAG_INT,    RC_FIELD(dim),         "768",   "model width C (a multiple of --heads unless --head-dim is given)"},
    {"--head-dim",    FLAG_INT,    RC_FIELD(head_dim),    "0",     "llama: per-head width D of q, k, v (0 = --dim / --heads); the attention is H*D wide, as Qwen3's head_dim 128"},
    {"--ffn-dim",     FLAG_INT,    RC_FIELD(ffn_dim),     "0",     "MLP hidden size F (0 = 4C for gpt2, round_up(8C/3, 64) for llama)"},
    {"--vocab",       FLAG_INT,    RC_FIELD(vocab),       "50257", "vocabulary size V (padded to a multiple of 128 internally)"},
    {"--max-seq",     FLAG_INT,    RC_FIELD(max_seq),     "1024",  "longest sequence the model accepts (gpt2: rows of the position table)"},
    {"--rope-theta",  FLAG_FLOAT,  RC_FIELD(rope_theta),  "10000", "llama: RoPE base frequency"},
    {"--qk-norm",     FLAG_INT,    RC_FIELD(qk_norm),     "0",     "llama: 1 = per-head RMSNorm on q and k before RoPE (Qwen3 style)"},
    {"--tie-embeddings",FLAG_INT,  RC_FIELD(tie_embeddings),"0",   "llama: 1 = the output head is the token embedding (tied, as gpt2 and Qwen3's small models); 0 = its own lm_head"},
    {"--init-from",   FLAG_STRING, RC_FIELD(init_from),   "",      "start from the weights (and shape) of this checkpoint, with a fresh optimizer at step 0"},
    // optimisation
    {"--lr",          FLAG_FLOAT,  RC_FIELD(lr),          "6e-4",  "peak learning rate of AdamW"},
    {"--beta1",       FLAG_FLOAT,  RC_FIELD(beta1),       "0.9",   "AdamW beta1"},
    {"--beta2",       FLAG_FLOAT,  RC_FIELD(beta2),       "0.95",  "AdamW beta2"},
    {"--eps",         FLAG_FLOAT,  RC_FIELD(eps),         "1e-8",  "AdamW epsilon"},
    {"--weight-decay",FLAG_FLOAT,  RC_FIELD(weight_decay),"0.1",   "AdamW decoupled weight decay, applied to every matrix, the embeddings included (not to biases, norm gains or ResFormer's lambdas)"},
    {"--lr-schedule", FLAG_STRING, RC_FIELD(lr_schedule), "cosine","after warmup: cosine or linear decay to lr * min-lr-frac at --max-steps; wsd (stable at lr, then a linear decay over the last --cooldown-frac); constant"},
    {"--warmup-steps",FLAG_INT,    RC_FIELD(warmup_steps),"0",     "linear warmup steps before the schedule"},
    {"--min-lr-frac", FLAG_FLOAT,  RC_FIELD(min_lr_frac), "0.1",   "the decay ends at lr * min-lr-frac at --max-steps (cosine, linear, wsd; not constant)"},
    {"--cooldown-frac",FLAG_FLOAT, RC_FIELD(cooldown_frac),"0.2",  "wsd: the fraction of the steps after warmup that decay linearly to lr * min-lr-frac"},
    {"--grad-clip",   FLAG_FLOAT,  RC_FIELD(grad_clip),   "1.0",   "clip the global gradient norm to this (0 = off)"},
    {"--skip-loss-z", FLAG_FLOAT,  RC_FIELD(skip_loss_z), "0",     "skip the update of a step whose loss is more than this many standard deviations above the recent steps' mean (0 = off; llm.c's -sl)"},
    {"--skip-norm-z", FLAG_FLOAT,  RC_FIELD(skip_norm_z), "0",     "the same for the gradient norm before clipping (0 = off; llm.c's -sg)"},
    {"--skip-window", FLAG_INT,    RC_FIELD(skip_window), "128",   "steps that the recent mean and deviation of --skip-loss-z/--skip-norm-z average over; no step is judged before this many"},
    {"--batch-size",  FLAG_INT,    RC_FIELD(batch_size),  "4",     "micro-batch size B (sequences per forward/backward)"},
    {"--seq-len",     FLAG_INT,    RC_FIELD(seq_len),     "64",    "sequence length T (at most --max-seq)"},
    {"--total-batch-tokens", FLAG_LONG, RC_FIELD(total_batch_tokens), "0", "tokens per optimizer step; a multiple of B*T, the rest is gradient accumulation (0 = B*T)"},
    {"--max-steps",   FLAG_INT,    RC_FIELD(max_steps),   "50",    "optimizer steps to train (0 = no training: evaluate and sample the initial weights, or a checkpoint given by --init-from)"},
    {"--seed",        FLAG_U64,    RC_FIELD(seed),        "1337",  "seed for the init, the data shuffling and the samples"},
    {"--overfit-batch",FLAG_INT,   RC_FIELD(overfit_batch),"0",    "1 = every step trains on the first step's batch (all its micro-batches): the loss should fall towards 0, a check that a model or value path can learn at all (llm.c's -a)"},
    // data
    {"--train-data",  FLAG_STRING, RC_FIELD(train_data),  "",      "glob of training shards (llm.c .bin format), e.g. 'data/tinyshakespeare/tinyshakespeare_train_*.bin'"},
    {"--val-data",    FLAG_VALSETS,RC_FIELD(val_data),    "",      "glob of validation shards, or NAME=GLOB; repeat for one val loss per named set"},
    {"--eval-every",  FLAG_INT,    RC_FIELD(eval_every),  "0",     "evaluate (val loss, --eval-mc) every N steps and at the end (0 = only at the end, if --val-data or --eval-mc is set)"},
    {"--eval-batches",FLAG_INT,    RC_FIELD(eval_batches),"20",    "micro-batches per val set per evaluation (fewer if the set is smaller)"},
    {"--eval-mc",     FLAG_VALSETS,RC_FIELD(eval_mc),     "",      "multiple-choice file (.vpmc, e.g. from scripts/prepare_hellaswag.py), or NAME=FILE; repeatable; scored at every evaluation"},
    // samples
    {"--sample-every",FLAG_INT,    RC_FIELD(sample_every),"0",     "print a generated sample every N steps and at the end (0 = never)"},
    {"--sample-tokens",FLAG_INT,   RC_FIELD(sample_tokens),"64",   "tokens per sample"},
    {"--sample-temperature",FLAG_FLOAT,RC_FIELD(sample_temperature),"1.0","sampling temperature (0 = greedy)"},
    {"--sample-top-k",FLAG_INT,    RC_FIELD(sample_top_k),"0",     "draw each sampled token among the k most likely only, and any tied with the k-th (0 = among all)"},
    {"--tokenizer",   FLAG_STRING, RC_FIELD(tokenizer),   "",      "GPT-2 encoder.json (vocab.bpe beside it to encode) or a .vptok file, to decode samples and encode --sample-prompt (none: samples are printed as token ids)"},
    {"--sample-prompt", FLAG_STRING, RC_FIELD(sample_prompt), "", "text (UTF-8) that every sample continues, after the document delimiter; needs --tokenizer and --sample-every (none: samples start a new document)"},
    // checkpoints and logs
    {"--out-dir",     FLAG_STRING, RC_FIELD(out_dir),     "",      "directory for checkpoints and log.jsonl (empty: no checkpoints, no log file)"},
    {"--checkpoint-every",FLAG_INT,RC_FIELD(checkpoint_every),"0", "write a checkpoint every N steps (and always at the end when --out-dir is set)"},
    {"--keep-checkpoints",FLAG_INT,RC_FIELD(keep_checkpoints),"0", "keep only the newest N checkpoints (0 = keep all)"},
    {"--keep-checkpoints-every",FLAG_INT,RC_FIELD(keep_checkpoints_every),"0", "with --keep-checkpoints N: also keep, for good, every checkpoint whose step is a multiple of this (0 = none; llm.c's major checkpoints)"},
    {"--resume",      FLAG_STRING, RC_FIELD(resume_arg),  "0",     "1 = continue from the newest checkpoint in --out-dir (bit-exact); auto = that if --out-dir has one, else start a new run there (a job submitted again and again)"},
    {"--zero",        FLAG_INT,    RC_FIELD(zero),        "0",     "data parallel under mpirun: 0 = every rank keeps the whole AdamW state, 1 = ZeRO-1 (sharded over the ranks)"},
    {"--overlap-reduce",FLAG_INT,  RC_FIELD(overlap_reduce),"1",   "GPU data parallel: 1 = sum each layer's gradients over the ranks during the backward; 0 = after it (identical results; to measure the overlap)"},
    // memory
    {"--recompute",   FLAG_INT,    RC_FIELD(recompute),   "0",     "GPU build: 0 = keep every activation; 1 = recompute GELU/SwiGLU in backward; 2 = also the norms (least memory; 1 and 2 give identical results, and 0's too except GPT-2 in bf16, whose GELU at 0 is the GEMM epilogue's; the CPU build ignores it)"},
    };
#undef RC_FIELD
}

// ----------------------------------------------------------------------------
// parsing

inline void flag_set_value(const FlagSpec& f, const char* value) {
    char* base = reinterpret_cast<char*>(f.dst);
    // checkpoints store the flags one per line (run_config_to_text)
    if (strpbrk(value, "\n\r"))
        usage_error("rename the file or directory, or reach it through a symlink without one", "%s: a value with a line break is not supported", f.name);
    switch (f.type) {
        case FLAG_INT:
        case FLAG_LONG:
        case FLAG_U64: {
            long v;
            if (!parse_long_strict(value, &v)) usage_error(nullptr, "%s expects an integer, got '%s'", f.name, value);
            if (f.type == FLAG_INT) {
                if (v < INT32_MIN || v > INT32_MAX) usage_error(nullptr, "%s value %ld is out of range", f.name, v);
                *reinterpret_cast<int*>(base) = (int)v;
            } else if (f.type == FLAG_LONG) {
                *reinterpret_cast<long*>(base) = v;
            } else {
                if (v < 0) usage_error(nullptr, "%s must be >= 0, got %ld", f.name, v);
                *reinterpret_cast<uint64_t*>(base) = (uint64_t)v;
            }
            break;
        }
        case FLAG_FLOAT: {
            double v = 0;
            if (!parse_decimal_number(value, &v) || !std::isfinite(v))
                usage_error(nullptr, "%s expects a decimal number (like 3e-4 or 0.1), got '%s'", f.name, value);
            // the flag is stored as a float: 1e39 is a finite double but an infinite float
            if (!std::isfinite((float)v)) usage_error(nullptr, "%s value '%s' is out of range (at most %g)", f.name, value, (double)FLT_MAX);
            // and 1e-50 a float 0, which turns off what 0 means off (--grad-clip, --skip-loss-z)
            if (v != 0 && (float)v == 0) usage_error(nullptr, "%s value '%s' is below the smallest float (%g): it would be 0", f.name, value, (double)FLT_TRUE_MIN);
            *reinterpret_cast<float*>(base) = (float)v;
            break;
        }
        case FLAG_STRING:
            *reinterpret_cast<std::string*>(base) = value;
            break;
        case FLAG_VALSETS: {
            if (!*value) break;  // the empty default: no val sets
            auto* sets = reinterpret_cast<std::vector<NamedGlob>*>(base);
            NamedGlob ng;
            const char* eq = strchr(value, '=');
            if (eq) {
                ng.name.assign(value, eq - value);
                ng.glob = eq + 1;
                for (char ch : ng.name)
                    if (!(isalnum((unsigned char)ch) || ch == '_' || ch == '-'))
                        usage_error("a path with '=' in it needs a name first: NAME=PATH (the name ends at the first '=')",
                                    "%s name '%s' may only use letters, digits, '_' and '-' (it becomes part of a log key)", f.name, ng.name.c_str());
                if (ng.name.empty() || ng.glob.empty()) usage_error(nullptr, "%s '%s' must be PATH or NAME=PATH", f.name, value);
            } else {
                ng.glob = value;
            }
            for (const NamedGlob& other : *sets)
                if (other.name == ng.name)
                    usage_error(nullptr, "%s: the set name '%s' is used twice%s", f.name, ng.name.c_str(),
                                ng.name.empty() ? " (give each set a NAME=PATH)" : "");
            sets->push_back(ng);
            break;
        }
    }
}

inline void print_usage(FILE* out, const char* prog) {
    fprintf(out, "usage: %s [flags]   (value path compiled in: %s)\n\n", prog, value_path_name(VALUE_PATH_ID));
    fprintf(out, "Every flag takes a value: --flag VALUE or --flag=VALUE. Defaults in brackets.\n\n");
    RunConfig scratch;
    for (const FlagSpec& f : flag_table(&scratch)) fprintf(out, "  %-22s %s [%s]\n", f.name, f.help, f.dflt[0] ? f.dflt : "none");
    value_path_print_flags(out);
    fprintf(out, "  %-22s print this help and exit\n", "--help");
    fprintf(out, "\nExit codes: 0 success, 1 runtime error (bad data, checkpoint, I/O), 2 usage error.\n");
}

inline const FlagSpec* find_flag(const std::vector<FlagSpec>& table, const char* name) {
    for (const FlagSpec& f : table)
        if (!strcmp(f.name, name)) return &f;
    return nullptr;
}

// Fills rc from argv. Returns false if --help was asked (usage already printed to stdout).
inline bool parse_command_line(RunConfig* rc, int argc, char** argv) {
    *rc = RunConfig();
    std::vector<FlagSpec> table = flag_table(rc);
    for (const FlagSpec& f : table) flag_set_value(f, f.dflt);
    value_path_flags_init(&rc->vp_flags);
    for (int i = 1; i < argc; i++) {
        std::string arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            print_usage(stdout, argv[0]);
            return false;
        }
        if (arg.rfind("--", 0) != 0) usage_error(nullptr, "unexpected argument '%s' (flags start with --)", argv[i]);
        std::string name = arg, value;
        bool has_value = false;
        size_t eq = arg.find('=');
        if (eq != std::string::npos) {
            name = arg.substr(0, eq);
            value = arg.substr(eq + 1);
            has_value = true;
        }
        const FlagSpec* f = find_flag(table, name.c_str());
        bool is_vp_flag = !f && value_path_is_flag(name.c_str());
        if (!f && !is_vp_flag) {
            if (value_path_flag_of_other_path(name.c_str()))
                usage_error("rebuild with the matching VALUE_PATH (make train_cpu VALUE_PATH=..., or make train VALUE_PATH=... for the GPU trainer) or drop the flag",
                            "%s belongs to another value path; this binary was built with VALUE_PATH=%s",
                            name.c_str(), value_path_name(VALUE_PATH_ID));
            usage_error(nullptr, "unknown flag '%s'", name.c_str());
        }
        if (!has_value) {
            if (i + 1 >= argc) usage_error(nullptr, "%s needs a value", name.c_str());
            value = argv[++i];
        }
        if (f) {
            if (f->type != FLAG_VALSETS && rc->was_given(name.c_str())) usage_error(nullptr, "%s is given twice", name.c_str());
            flag_set_value(*f, value.c_str());
        } else {
            value_path_set_flag(&rc->vp_flags, name.c_str(), value.c_str());
        }
        rc->given.push_back(name);
    }
    rc->resume = rc->resume_arg == "0" ? 0 : rc->resume_arg == "1" ? 1 : rc->resume_arg == "auto" ? RESUME_AUTO : -1;
    return true;
}

// Bounds on a model's shape: generous for any model this trainer can hold, and small enough that
// no size derived from them (4C, V rounded up, L*C*F) overflows the int32 fields and the
// size_t products the builds compute.
constexpr int MAX_LAYERS = 1024, MAX_HEADS = 1024, MAX_DIM = 1 << 16, MAX_FFN_DIM = 1 << 20, MAX_VOCAB = 1 << 24, MAX_SEQ = 1 << 20;

// What is wrong with a model config, or "" if nothing: the shape rules of model_config_from_flags,
// for configs that come from a file (a checkpoint's header is only CRC-checked from version 2).
inline std::string model_config_problem(const ModelConfig& c) {
    char buf[256];
    auto bad = [&](const char* fmt, long a, long b) { snprintf(buf, sizeof(buf), fmt, a, b); return std::string(buf); };
    if (c.arch != ARCH_GPT2 && c.arch != ARCH_LLAMA) return bad("unknown architecture %ld", c.arch, 0);
    if (c.n_layer < 1 || c.n_layer > MAX_LAYERS) return bad("n_layer %ld outside [1, %ld]", c.n_layer, MAX_LAYERS);
    if (c.n_head < 1 || c.n_head > MAX_HEADS) return bad("n_head %ld outside [1, %ld]", c.n_head, MAX_HEADS);
    if (c.n_kv_head < 1 || c.n_head % c.n_kv_head) return bad("n_kv_head %ld does not divide n_head %ld", c.n_kv_head, c.n_head);
    if (c.n_embd < 1 || c.n_embd > MAX_DIM) return bad("n_embd %ld outside [1, %ld]", c.n_embd, MAX_DIM);
    // GPT-2's heads split the width (D = C / H); a llama's D is free (--head-dim), with H*D bounded as C is
    if (c.arch == ARCH_GPT2 && (c.n_embd % c.n_head || c.head_dim != c.n_embd / c.n_head))
        return bad("a gpt2 model's head_dim %ld is not n_embd / n_head (n_embd %ld)", c.head_dim, c.n_embd);
    if (c.head_dim < 1 || (long)c.head_dim * c.n_head > MAX_DIM) return bad("head_dim %ld times n_head is outside [1, %ld]", c.head_dim, MAX_DIM);
    if (c.ffn_dim < 1 || c.ffn_dim > MAX_FFN_DIM) return bad("ffn_dim %ld outside [1, %ld]", c.ffn_dim, MAX_FFN_DIM);
    if (c.vocab_size < 2 || c.vocab_size > MAX_VOCAB) return bad("vocab_size %ld outside [2, %ld]", c.vocab_size, MAX_VOCAB);
    if (c.padded_vocab_size != CEIL_DIV(c.vocab_size, 128) * 128) return bad("padded_vocab_size %ld is not vocab_size rounded up to 128 (%ld)", c.padded_vocab_size, CEIL_DIV(c.vocab_size, 128) * 128);
    if (c.max_seq_len < 1 || c.max_seq_len > MAX_SEQ) return bad("max_seq_len %ld outside [1, %ld]", c.max_seq_len, MAX_SEQ);
    if (c.qk_norm != 0 && c.qk_norm != 1) return bad("qk_norm %ld is not 0 or 1", c.qk_norm, 0);
    if (c.tie_embeddings != 0 && c.tie_embeddings != 1) return bad("tie_embeddings %ld is not 0 or 1", c.tie_embeddings, 0);
    if (!(c.norm_eps > 0) || !std::isfinite(c.norm_eps)) return "norm_eps is not a positive number";
    if (c.arch == ARCH_GPT2 && (c.n_kv_head != c.n_head || c.qk_norm || c.tie_embeddings)) return "a gpt2 model with GQA, QK-norm or the llama tie flag";
    if (c.arch == ARCH_LLAMA && (c.head_dim % 2 || !(c.rope_theta > 0) || !std::isfinite(c.rope_theta))) return "a llama model with an odd head_dim or a bad rope_theta";
    return "";
}

// Model config from the shape flags. Usage errors for shapes that do not fit together.
// --ffn-dim 0: the family's default, 4C for gpt2 and round_up(8C/3, 64) for llama (SwiGLU's
// two thirds of 4C, as Llama rounds it); a checkpoint's shape is checked against the same rule
inline int default_ffn_dim(int32_t arch, int C) { return arch == ARCH_GPT2 ? 4 * C : CEIL_DIV(8 * C / 3, 64) * 64; }

inline ModelConfig model_config_from_flags(const RunConfig& rc) {
    ModelConfig c;
    memset(&c, 0, sizeof(c));
    if (rc.arch == "gpt2") c.arch = ARCH_GPT2;
    else if (rc.arch == "llama") c.arch = ARCH_LLAMA;
    else usage_error(nullptr, "--arch must be gpt2 or llama, got '%s'", rc.arch.c_str());
    c.n_layer = rc.layers;
    c.n_head = rc.heads;
    c.n_kv_head = rc.kv_heads > 0 ? rc.kv_heads : rc.heads;
    c.n_embd = rc.dim;
    c.vocab_size = rc.vocab;
    c.max_seq_len = rc.max_seq;
    c.rope_theta = rc.rope_theta;
    c.qk_norm = rc.qk_norm;
    c.tie_embeddings = rc.tie_embeddings;
    c.norm_eps = 1e-5f;
    if (c.n_layer < 1 || c.n_layer > MAX_LAYERS) usage_error(nullptr, "--layers must be in [1, %d], got %d", MAX_LAYERS, c.n_layer);
    if (c.n_head < 1 || c.n_head > MAX_HEADS) usage_error(nullptr, "--heads must be in [1, %d], got %d", MAX_HEADS, c.n_head);
    if (rc.head_dim < 0) usage_error(nullptr, "--head-dim must be >= 0 (0 = --dim / --heads), got %d", rc.head_dim);
    if (c.n_embd < 1 || (rc.head_dim == 0 && c.n_embd % c.n_head))
        usage_error("or give the llama family an explicit --head-dim", "--dim %d must be a positive multiple of --heads %d", c.n_embd, c.n_head);
    if (c.n_embd > MAX_DIM) usage_error(nullptr, "--dim must be at most %d, got %d", MAX_DIM, c.n_embd);
    if ((long)rc.head_dim * c.n_head > MAX_DIM) usage_error(nullptr, "--head-dim %d times --heads %d must be at most %d", rc.head_dim, c.n_head, MAX_DIM);
    if (rc.ffn_dim > MAX_FFN_DIM) usage_error(nullptr, "--ffn-dim must be at most %d, got %d", MAX_FFN_DIM, rc.ffn_dim);
    if (c.vocab_size > MAX_VOCAB) usage_error(nullptr, "--vocab must be at most %d, got %d", MAX_VOCAB, c.vocab_size);
    if (c.max_seq_len > MAX_SEQ) usage_error(nullptr, "--max-seq must be at most %d, got %d", MAX_SEQ, c.max_seq_len);
    if (rc.kv_heads < 0) usage_error(nullptr, "--kv-heads must be >= 0 (0 = the same as --heads), got %d", rc.kv_heads);
    if (rc.ffn_dim < 0) usage_error(nullptr, "--ffn-dim must be >= 0 (0 = the family's default), got %d", rc.ffn_dim);
    if (c.n_head % c.n_kv_head) usage_error(nullptr, "--heads %d must be a multiple of --kv-heads %d", c.n_head, c.n_kv_head);
    if (c.vocab_size < 2) usage_error(nullptr, "--vocab must be >= 2, got %d", c.vocab_size);
    if (c.max_seq_len < 1) usage_error(nullptr, "--max-seq must be >= 1, got %d", c.max_seq_len);
    if (rc.qk_norm != 0 && rc.qk_norm != 1) usage_error(nullptr, "--qk-norm must be 0 or 1, got %d", rc.qk_norm);
    if (rc.tie_embeddings != 0 && rc.tie_embeddings != 1) usage_error(nullptr, "--tie-embeddings must be 0 or 1, got %d", rc.tie_embeddings);
    c.head_dim = rc.head_dim > 0 ? rc.head_dim : c.n_embd / c.n_head;
    if (c.arch == ARCH_GPT2) {
        if (c.n_embd % c.n_head || c.head_dim != c.n_embd / c.n_head)
            usage_error("drop --head-dim, or use --arch llama for a head width other than --dim / --heads",
                        "gpt2's heads split --dim %d into --heads %d; --head-dim %d is a llama-family option", c.n_embd, c.n_head, rc.head_dim);
        if (c.n_kv_head != c.n_head) usage_error("use --arch llama for grouped-query attention", "gpt2 has no GQA: --kv-heads must equal --heads");
        if (rc.qk_norm) usage_error("use --arch llama for QK-norm", "--qk-norm is a llama-family option");
        if (rc.was_given("--tie-embeddings"))
            usage_error("drop --tie-embeddings: gpt2's output head is always its token embedding", "--tie-embeddings is a llama-family option");
        if (rc.was_given("--rope-theta")) usage_error("use --arch llama for RoPE", "--rope-theta is a llama-family option (gpt2 learns its positions)");
        c.ffn_dim = rc.ffn_dim > 0 ? rc.ffn_dim : default_ffn_dim(c.arch, c.n_embd);
    } else {
        if (c.head_dim % 2) usage_error(nullptr, "RoPE needs an even head dim; %s = %d", rc.head_dim > 0 ? "--head-dim" : "--dim/--heads", c.head_dim);
        if (!(c.rope_theta > 0)) usage_error(nullptr, "--rope-theta must be > 0");
        c.ffn_dim = rc.ffn_dim > 0 ? rc.ffn_dim : default_ffn_dim(c.arch, c.n_embd);
    }
    c.padded_vocab_size = CEIL_DIV(c.vocab_size, 128) * 128;
    c.vp = value_path_config_from_flags(rc.vp_flags, c.n_layer, c.n_head, c.n_kv_head);
    std::string problem = model_config_problem(c);  // every rule above should have caught it first
    if (problem.empty()) problem = value_path_config_problem(c.vp, c.n_head, c.n_kv_head);
    if (!problem.empty()) usage_error(nullptr, "the shape flags give an invalid model: %s", problem.c_str());
    return c;
}

// Shape flags the user gave that disagree with a model config loaded from a checkpoint.
inline void check_shape_flags_match(const RunConfig& rc, const ModelConfig& c, const char* source) {
    struct { const char* flag; long asked, have; } rows[] = {
        {"--layers", rc.layers, c.n_layer},   {"--heads", rc.heads, c.n_head},
        {"--kv-heads", rc.kv_heads, c.n_kv_head}, {"--dim", rc.dim, c.n_embd}, {"--head-dim", rc.head_dim, c.head_dim},
        {"--ffn-dim", rc.ffn_dim, c.ffn_dim}, {"--vocab", rc.vocab, c.vocab_size},
        {"--max-seq", rc.max_seq, c.max_seq_len}, {"--qk-norm", rc.qk_norm, c.qk_norm},
        {"--tie-embeddings", rc.tie_embeddings, c.tie_embeddings},
    };
    for (auto& r : rows) {
        // 0 asks for the default of --kv-heads (= --heads), --ffn-dim and --head-dim: check the
        // default the checkpoint's shape implies, as the same flags would derive it
        if (!rc.was_given(r.flag)) continue;
        bool derived = r.asked == 0 && (!strcmp(r.flag, "--kv-heads") || !strcmp(r.flag, "--ffn-dim") || !strcmp(r.flag, "--head-dim"));
        if (derived) {
            long want = !strcmp(r.flag, "--kv-heads") ? c.n_head : !strcmp(r.flag, "--head-dim") ? c.n_embd / c.n_head : default_ffn_dim(c.arch, c.n_embd);
            if (want != r.have)
                runtime_error("drop the shape flags (the checkpoint fixes the shape) or use a matching checkpoint",
                              "%s 0 (the default, %ld here) does not match %s, which has %ld", r.flag, want, source, r.have);
            continue;
        }
        if (r.asked != r.have)
            runtime_error("drop the shape flags (the checkpoint fixes the shape) or use a matching checkpoint",
                          "%s %ld does not match %s, which has %ld", r.flag, r.asked, source, r.have);
    }
    if (c.arch == ARCH_GPT2)  // llama-family flags, which a new gpt2 model refuses (model_config_from_flags)
        for (const char* flag : {"--rope-theta", "--tie-embeddings", "--qk-norm"})
            if (rc.was_given(flag))
                runtime_error("drop it: the checkpoint fixes the model, a gpt2", "%s is a llama-family option, and %s is a gpt2 model", flag, source);
    if (rc.was_given("--arch") && rc.arch != arch_name(c.arch))
        runtime_error("drop --arch or use a matching checkpoint", "--arch %s does not match %s, which is %s", rc.arch.c_str(), source, arch_name(c.arch));
    if (rc.was_given("--rope-theta") && rc.rope_theta != c.rope_theta)
        runtime_error("drop --rope-theta or use a matching checkpoint", "--rope-theta %g does not match %s (%g)", rc.rope_theta, source, c.rope_theta);
}

// Sets the shape flags of rc to the shape of c (the model built from them or read from a
// checkpoint), so that rc describes the run as it is: 0 = "default" becomes the value it chose.
inline void run_config_set_shape(RunConfig* rc, const ModelConfig& c) {
    rc->arch = arch_name(c.arch);
    rc->layers = c.n_layer;
    rc->heads = c.n_head;
    rc->kv_heads = c.n_kv_head;
    rc->dim = c.n_embd;
    rc->head_dim = c.head_dim;
    rc->ffn_dim = c.ffn_dim;
    rc->vocab = c.vocab_size;
    rc->max_seq = c.max_seq_len;
    rc->rope_theta = c.rope_theta;
    rc->qk_norm = c.qk_norm;
    rc->tie_embeddings = c.tie_embeddings;
}

// The run's learning-rate schedule; an unknown --lr-schedule is a usage error.
inline LrSchedule run_lr_schedule(const RunConfig& rc) {
    LrSchedule s = {LR_COSINE, rc.lr, rc.warmup_steps, rc.max_steps, rc.min_lr_frac, rc.cooldown_frac};
    if (!lr_shape_from_name(rc.lr_schedule.c_str(), &s.shape))
        usage_error(nullptr, "--lr-schedule must be cosine, linear, wsd or constant, got '%s'", rc.lr_schedule.c_str());
    return s;
}

// Checks on the run flags alone that are usage errors: done before any checkpoint is looked at, so
// that a wrong combination of flags is reported as such.
inline void validate_run_flags(const RunConfig& rc) {
    if (rc.batch_size < 1) usage_error(nullptr, "--batch-size must be >= 1");
    if (rc.seq_len < 1) usage_error(nullptr, "--seq-len must be >= 1");
    long bt = (long)rc.batch_size * rc.seq_len;
    if (bt > INT32_MAX) usage_error("lower --batch-size (use --total-batch-tokens for gradient accumulation)", "--batch-size x --seq-len = %ld tokens per micro-batch; at most %d", bt, INT32_MAX);
    if (rc.total_batch_tokens < 0 || (rc.total_batch_tokens && rc.total_batch_tokens % bt))
        usage_error(nullptr, "--total-batch-tokens %ld must be a multiple of --batch-size x --seq-len = %ld", rc.total_batch_tokens, bt);
    if (rc.max_steps < 0) usage_error(nullptr, "--max-steps must be >= 0");
    if (rc.warmup_steps < 0) usage_error(nullptr, "--warmup-steps must be >= 0");
    if (!(rc.lr >= 0)) usage_error(nullptr, "--lr must be >= 0");
    if (!(rc.beta1 >= 0 && rc.beta1 < 1) || !(rc.beta2 >= 0 && rc.beta2 < 1)) usage_error(nullptr, "--beta1 and --beta2 must be in [0, 1)");
    if (!(rc.eps > 0)) usage_error(nullptr, "--eps must be > 0");
    if (!(rc.weight_decay >= 0)) usage_error(nullptr, "--weight-decay must be >= 0");
    if (!(rc.min_lr_frac >= 0 && rc.min_lr_frac <= 1)) usage_error(nullptr, "--min-lr-frac must be in [0, 1]");
    LrShape shape = run_lr_schedule(rc).shape;
    if (!(rc.cooldown_frac >= 0 && rc.cooldown_frac <= 1)) usage_error(nullptr, "--cooldown-frac must be in [0, 1]");
    if (rc.was_given("--cooldown-frac") && shape != LR_WSD)
        usage_error("add --lr-schedule wsd, or drop --cooldown-frac", "--cooldown-frac applies only to --lr-schedule wsd (this run's is %s)", rc.lr_schedule.c_str());
    if (rc.was_given("--min-lr-frac") && shape == LR_CONSTANT)
        usage_error("drop --min-lr-frac, or choose a schedule that decays (--lr-schedule cosine, linear or wsd)",
                    "--min-lr-frac has no effect with --lr-schedule constant (the lr stays at --lr)");
    if (!(rc.grad_clip >= 0)) usage_error(nullptr, "--grad-clip must be >= 0 (0 = off)");
    if (!(rc.skip_loss_z >= 0) || !(rc.skip_norm_z >= 0)) usage_error(nullptr, "--skip-loss-z and --skip-norm-z must be >= 0 (0 = off)");
    if (rc.skip_window < 2) usage_error(nullptr, "--skip-window must be >= 2, got %d", rc.skip_window);
    if (rc.was_given("--skip-window") && !(rc.skip_loss_z > 0 || rc.skip_norm_z > 0))
        usage_error("add --skip-loss-z Z or --skip-norm-z Z, or drop --skip-window", "--skip-window applies only when --skip-loss-z or --skip-norm-z is on");
    if (rc.eval_every < 0 || rc.eval_batches < 1) usage_error(nullptr, "--eval-every must be >= 0 and --eval-batches >= 1");
    if (rc.sample_every < 0 || rc.sample_tokens < 1) usage_error(nullptr, "--sample-every must be >= 0 and --sample-tokens >= 1");
    if (!(rc.sample_temperature >= 0)) usage_error(nullptr, "--sample-temperature must be >= 0");
    if (rc.sample_top_k < 0) usage_error(nullptr, "--sample-top-k must be >= 0 (0 = no limit), got %d", rc.sample_top_k);
    if (!rc.sample_prompt.empty() && rc.tokenizer.empty()) usage_error("add --tokenizer (the .vptok file beside the shards)", "--sample-prompt needs --tokenizer to encode the prompt");
    if (!rc.sample_prompt.empty() && rc.sample_every == 0) usage_error("add --sample-every N", "--sample-prompt is only used by samples, and --sample-every is 0 (no samples)");
    // the other sample flags, likewise: a flag that changes nothing is a mistake worth hearing of
    for (const char* flag : {"--sample-tokens", "--sample-temperature", "--sample-top-k", "--tokenizer"})
        if (rc.was_given(flag) && rc.sample_every == 0)
            usage_error("add --sample-every N, or drop it", "%s is only used by samples, and --sample-every is 0 (no samples)", flag);
    if (rc.eval_every > 0 && rc.val_data.empty() && rc.eval_mc.empty())
        usage_error("add --val-data GLOB or --eval-mc FILE, or drop --eval-every", "--eval-every %d: there is nothing to evaluate (no --val-data, no --eval-mc)", rc.eval_every);
    if (rc.was_given("--eval-batches") && rc.val_data.empty())
        usage_error("add --val-data GLOB, or drop --eval-batches", "--eval-batches sizes the val loss, and there is no --val-data");
    if (rc.checkpoint_every < 0 || rc.keep_checkpoints < 0 || rc.keep_checkpoints_every < 0)
        usage_error(nullptr, "--checkpoint-every, --keep-checkpoints and --keep-checkpoints-every must be >= 0");
    if (rc.keep_checkpoints_every > 0 && rc.keep_checkpoints == 0)
        usage_error("add --keep-checkpoints N (the newest N are kept besides), or drop --keep-checkpoints-every",
                    "--keep-checkpoints-every applies only with --keep-checkpoints N (without it every checkpoint is kept)");
    if (rc.resume != 0 && rc.resume != 1 && rc.resume != RESUME_AUTO) usage_error(nullptr, "--resume must be 0, 1 or auto, got '%s'", rc.resume_arg.c_str());
    if (rc.overfit_batch != 0 && rc.overfit_batch != 1) usage_error(nullptr, "--overfit-batch must be 0 or 1, got %d", rc.overfit_batch);
    if (rc.zero != 0 && rc.zero != 1) usage_error(nullptr, "--zero must be 0 (replicated optimizer) or 1 (ZeRO-1: sharded over the ranks)");
    if (rc.recompute < 0 || rc.recompute > 2) usage_error(nullptr, "--recompute must be 0, 1 or 2, got %d", rc.recompute);
    if (rc.overlap_reduce != 0 && rc.overlap_reduce != 1) usage_error(nullptr, "--overlap-reduce must be 0 or 1, got %d", rc.overlap_reduce);
    if (rc.resume && rc.out_dir.empty()) usage_error(nullptr, "--resume %s needs --out-dir (where the checkpoints are)", rc.resume_arg.c_str());
    if (rc.resume && !rc.init_from.empty()) usage_error(nullptr, "--resume and --init-from cannot be combined (resume continues a run; init-from starts a new one)");
    if (rc.checkpoint_every && rc.out_dir.empty()) usage_error(nullptr, "--checkpoint-every needs --out-dir");
    if ((rc.keep_checkpoints || rc.keep_checkpoints_every) && rc.out_dir.empty())
        usage_error("add --out-dir DIR, or drop it", "--keep-checkpoints%s prunes the checkpoints of --out-dir, and there is none (no checkpoints are written)",
                    rc.keep_checkpoints ? "" : "-every");
    if (rc.was_given("--val-data") && rc.val_data.empty())
        usage_error("drop --val-data for no evaluation, or give a GLOB (is the shell variable you passed set?)", "--val-data is empty");
    if (rc.was_given("--eval-mc") && rc.eval_mc.empty())
        usage_error("drop --eval-mc, or give a .vpmc file (is the shell variable you passed set?)", "--eval-mc is empty");
    // the log keys are mc_acc_NAME, mc_acc_norm_NAME, mc_acc_tokavg_NAME: a NAME starting with
    // "norm" or "tokavg" would read as another metric of another set
    for (const NamedGlob& ng : rc.eval_mc)
        if (ng.name.rfind("norm", 0) == 0 || ng.name.rfind("tokavg", 0) == 0)
            usage_error("choose another name, e.g. hellaswag", "--eval-mc name '%s' starts like a metric (its log key mc_acc_%s would be ambiguous)", ng.name.c_str(),
                        ng.name.c_str());
}

// Checks on the run that need the model (its shape from the flags or a checkpoint).
inline void validate_run_config(const RunConfig& rc, const ModelConfig& c) {
    validate_run_flags(rc);
    if (rc.train_data.empty() && rc.max_steps > 0) usage_error("prepare data with: " VP_PREPARE_DATA_COMMAND ", then pass --train-data 'data/tinyshakespeare/tinyshakespeare_train_*.bin'", "--train-data is required to train");
    if (rc.seq_len > c.max_seq_len) usage_error("raise --max-seq (for a new model) or lower --seq-len", "--seq-len %d exceeds the model's max sequence length %d", rc.seq_len, c.max_seq_len);
}

// One "key=value" line per flag as resolved, stored in checkpoints so that a resumed run can
// tell the user which training flags differ from the run it continues.
inline std::string run_config_to_text(const RunConfig& rc_in) {
    std::string s;
    char buf[64];  // a number; strings are copied whole (a path or a list of val sets has no length limit)
    RunConfig rc = rc_in;
    for (const FlagSpec& f : flag_table(&rc)) {
        const char* base = reinterpret_cast<const char*>(f.dst);
        std::string value;
        switch (f.type) {
            case FLAG_INT: snprintf(buf, sizeof(buf), "%d", *reinterpret_cast<const int*>(base)); value = buf; break;
            case FLAG_LONG: snprintf(buf, sizeof(buf), "%ld", *reinterpret_cast<const long*>(base)); value = buf; break;
            case FLAG_U64: snprintf(buf, sizeof(buf), "%llu", (unsigned long long)*reinterpret_cast<const uint64_t*>(base)); value = buf; break;
            case FLAG_FLOAT: snprintf(buf, sizeof(buf), "%.9g", *reinterpret_cast<const float*>(base)); value = buf; break;
            case FLAG_STRING: value = *reinterpret_cast<const std::string*>(base); break;
            case FLAG_VALSETS:
                for (const NamedGlob& ng : *reinterpret_cast<const std::vector<NamedGlob>*>(base)) value += named_glob_text(ng) + ";";
                break;
        }
        s += f.name;
        s += "=";
        s += value;
        s += "\n";
    }
    s += value_path_flags_to_text(rc.vp_flags);
    return s;
}
