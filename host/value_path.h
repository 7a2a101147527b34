// host/value_path.h: which cross-layer value path a binary is built for, and its run-time settings.
//
// The path is chosen at compile time (make VALUE_PATH=vanilla|resformer|svformer|sla|depth sets
// -DVALUE_PATH_ID=...), so each binary carries exactly one path's code. Its settings are run-time
// flags that exist only in that binary: a flag of another path is a usage error that says which
// VALUE_PATH it belongs to. The settings are stored in every checkpoint (ValuePathConfig is part
// of ModelConfig) and a checkpoint of another path is refused. The math of each path is in
// docs/value_paths.md; this file is only the configuration.
#pragma once

#include <cfloat>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "host/utils.h"

#define VP_VANILLA 0
#define VP_RESFORMER 1
#define VP_SVFORMER 2
#define VP_SLA 3
#define VP_DEPTH 4

#ifndef VALUE_PATH_ID
#define VALUE_PATH_ID VP_VANILLA
#endif
#if VALUE_PATH_ID < VP_VANILLA || VALUE_PATH_ID > VP_DEPTH
#error "VALUE_PATH_ID must be one of VP_VANILLA..VP_DEPTH (use make VALUE_PATH=...)"
#endif

inline const char* value_path_name(int id) {
    switch (id) {
        case VP_VANILLA: return "vanilla";
        case VP_RESFORMER: return "resformer";
        case VP_SVFORMER: return "svformer";
        case VP_SLA: return "sla";
        case VP_DEPTH: return "depth";
    }
    return "unknown";
}

// Stored in checkpoints: fixed-size fields only; append, never reorder.
struct ValuePathConfig {
    int32_t path;               // VP_*: the path the model was built for
    int32_t resformer_learn;    // ResFormer: 0 = fixed lambda 1/2, 1 = one trainable lambda per layer
    float resformer_lambda_lr;  // ResFormer learn: peak learning rate of the lambdas (no weight decay)
    int32_t sla_layers;         // SLA: skip distance n_l (layer l >= n_l reads layer l - n_l)
    int32_t sla_heads;          // SLA: skip heads n_h, counted in query heads (the last n_h)
    int32_t sla_chain;          // SLA: 0 = ORIG reading, 1 = CHAIN reading (value_paths.md section 4)
    int32_t depth_stride;       // Depth-Attention: anchors are layers 0, s, 2s, ...
    int32_t reserved[8];  // 0 (the ninth became ModelConfig::tie_embeddings: same file layout)
};

// The flags as the user typed them; "" = not given (the default is then derived from the shape).
struct ValuePathFlags {
    std::string resformer_lambda, resformer_lambda_lr, sla_layers, sla_heads, sla_chain, depth_stride;
};

// The resolved setting of a ValuePathConfig that one flag controls, as text ("learn", "9", "0.02"),
// to compare a flag with a checkpoint's setting one flag at a time (the ints: std::to_string).
inline std::string vp_float_text(float v) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%g", v);
    return buf;
}

struct ValuePathFlagSpec {
    const char* name;
    int path;                           // the VP_* this flag belongs to
    std::string ValuePathFlags::*field;
    const char* dflt;                   // as shown in --help
    const char* help;
    std::string (*setting_text)(const ValuePathConfig&);  // the setting it controls, resolved
};

static const ValuePathFlagSpec VALUE_PATH_FLAGS[] = {
    {"--resformer-lambda", VP_RESFORMER, &ValuePathFlags::resformer_lambda, "fixed",
     "ResFormer mix v^ = (1-lambda) v + lambda v0: 'fixed' (lambda = 1/2, the paper) or 'learn' (one trainable lambda per layer, init 1/2)",
     [](const ValuePathConfig& c) -> std::string { return c.resformer_learn ? "learn" : "fixed"; }},
    {"--resformer-lambda-lr", VP_RESFORMER, &ValuePathFlags::resformer_lambda_lr, "0.02",
     "ResFormer learn: peak learning rate of the lambdas (same schedule, no weight decay)",
     [](const ValuePathConfig& c) { return vp_float_text(c.resformer_lambda_lr); }},
    {"--sla-layers", VP_SLA, &ValuePathFlags::sla_layers, "round(3L/4)", "SLA: skip distance n_l; layer l >= n_l reads layer l-n_l's K/V on its skip heads",
     [](const ValuePathConfig& c) { return std::to_string(c.sla_layers); }},
    {"--sla-heads", VP_SLA, &ValuePathFlags::sla_heads, "round(3H/4)",
     "SLA: number of skip heads n_h (the last n_h query heads; with GQA a multiple of H/Hkv)",
     [](const ValuePathConfig& c) { return std::to_string(c.sla_heads); }},
    {"--sla-chain", VP_SLA, &ValuePathFlags::sla_chain, "0", "SLA: 0 = ORIG (source layer's own K/V), 1 = CHAIN (source layer's effective K/V)",
     [](const ValuePathConfig& c) { return std::to_string(c.sla_chain); }},
    {"--depth-stride", VP_DEPTH, &ValuePathFlags::depth_stride, "L/2", "Depth-Attention: anchor stride s (anchors are layers 0, s, 2s, ...)",
     [](const ValuePathConfig& c) { return std::to_string(c.depth_stride); }},
};

inline void value_path_flags_init(ValuePathFlags* f) { *f = ValuePathFlags(); }

inline const ValuePathFlagSpec* value_path_find_flag(const char* name) {
    for (const ValuePathFlagSpec& s : VALUE_PATH_FLAGS)
        if (!strcmp(s.name, name)) return &s;
    return nullptr;
}

inline bool value_path_is_flag(const char* name) {
    const ValuePathFlagSpec* s = value_path_find_flag(name);
    return s && s->path == VALUE_PATH_ID;
}

inline bool value_path_flag_of_other_path(const char* name) {
    const ValuePathFlagSpec* s = value_path_find_flag(name);
    return s && s->path != VALUE_PATH_ID;
}

inline void value_path_set_flag(ValuePathFlags* flags, const char* name, const char* value) {
    const ValuePathFlagSpec* s = value_path_find_flag(name);
    std::string& dst = flags->*(s->field);
    if (!dst.empty()) usage_error(nullptr, "%s is given twice", name);
    if (!*value) usage_error(nullptr, "%s needs a non-empty value", name);
    dst = value;
}

inline void value_path_print_flags(FILE* out) {
    for (const ValuePathFlagSpec& s : VALUE_PATH_FLAGS)
        if (s.path == VALUE_PATH_ID) fprintf(out, "  %-22s %s [%s]\n", s.name, s.help, s.dflt);
}

inline std::string value_path_flags_to_text(const ValuePathFlags& flags) {
    std::string s;
    for (const ValuePathFlagSpec& spec : VALUE_PATH_FLAGS)
        if (spec.path == VALUE_PATH_ID) s += std::string(spec.name) + "=" + flags.*(spec.field) + "\n";
    return s;
}

inline int value_path_int_flag(const std::string& text, const char* name) {
    long v = 0;
    if (!parse_long_strict(text.c_str(), &v) || v < 0 || v > 1000000) usage_error(nullptr, "%s expects a non-negative integer, got '%s'", name, text.c_str());
    return (int)v;
}

// Resolves the flags against the model shape (L layers, H query heads, Hkv KV heads).
inline ValuePathConfig value_path_config_from_flags(const ValuePathFlags& f, int L, int H, int Hkv) {
    ValuePathConfig c;
    memset(&c, 0, sizeof(c));
    c.path = VALUE_PATH_ID;
    int G = H / Hkv;
#if VALUE_PATH_ID == VP_RESFORMER
    if (f.resformer_lambda.empty() || f.resformer_lambda == "fixed") c.resformer_learn = 0;
    else if (f.resformer_lambda == "learn") c.resformer_learn = 1;
    else usage_error(nullptr, "--resformer-lambda must be 'fixed' or 'learn', got '%s'", f.resformer_lambda.c_str());
    c.resformer_lambda_lr = 0.02f;
    if (!f.resformer_lambda_lr.empty()) {
        double v = 0;
        // stored as a float: 1e39 is a finite double but an infinite float
        if (!parse_decimal_number(f.resformer_lambda_lr.c_str(), &v) || !(v >= 0) || !std::isfinite((float)v)) usage_error(nullptr, "--resformer-lambda-lr expects a number >= 0 and at most %g, got '%s'", (double)FLT_MAX, f.resformer_lambda_lr.c_str());
        if (v > 0 && (float)v == 0) usage_error(nullptr, "--resformer-lambda-lr %s is below the smallest float (%g): it would be 0", f.resformer_lambda_lr.c_str(), (double)FLT_TRUE_MIN);
        if (!c.resformer_learn) usage_error(nullptr, "--resformer-lambda-lr only applies with --resformer-lambda learn");
        c.resformer_lambda_lr = (float)v;
    }
#elif VALUE_PATH_ID == VP_SLA
    c.sla_layers = f.sla_layers.empty() ? (int)lround(0.75 * L) : value_path_int_flag(f.sla_layers, "--sla-layers");
    // Skip heads are counted on KV heads (value_paths.md section 10), so the default n_h is
    // round(3*Hkv/4) whole KV groups; with H = Hkv this is round(3H/4).
    c.sla_heads = f.sla_heads.empty() ? G * (int)lround(0.75 * Hkv) : value_path_int_flag(f.sla_heads, "--sla-heads");
    c.sla_chain = f.sla_chain.empty() ? 0 : value_path_int_flag(f.sla_chain, "--sla-chain");
    if (c.sla_layers < 1) usage_error(nullptr, "--sla-layers must be >= 1 (n_l >= L means vanilla)");
    if (c.sla_heads > H) usage_error(nullptr, "--sla-heads %d exceeds the %d query heads", c.sla_heads, H);
    if (c.sla_heads % G)
        usage_error("with GQA, skip heads are whole KV groups", "--sla-heads %d must be a multiple of the GQA group size %d", c.sla_heads, G);
    if (c.sla_chain > 1) usage_error(nullptr, "--sla-chain must be 0 or 1");
#elif VALUE_PATH_ID == VP_DEPTH
    c.depth_stride = f.depth_stride.empty() ? (L / 2 > 1 ? L / 2 : 1) : value_path_int_flag(f.depth_stride, "--depth-stride");
    if (c.depth_stride < 1) usage_error(nullptr, "--depth-stride must be >= 1");
#endif
    (void)f; (void)L; (void)H; (void)G;
    return c;
}

// ----------------------------------------------------------------------------
// What a path changes in the parameter layout (shared by the CPU and GPU builds, so their
// checkpoints agree). Everything else about a path is in cpu/vp_<path>.h (and its GPU twin).

// Layers that own a value projection: all of them, except under SVFormer, where only layer 0
// does (value_paths.md section 3: layers >= 1 have no v_proj at all).
inline int value_path_value_proj_layers(const ValuePathConfig& c, int L) { return c.path == VP_SVFORMER ? 1 : L; }

// Trainable per-layer scalars: ResFormer's lambda_l with --resformer-lambda learn, else none.
inline int value_path_num_lambdas(const ValuePathConfig& c, int L) { return (c.path == VP_RESFORMER && c.resformer_learn) ? L : 0; }

// A checkpoint's value path must be this binary's. Flags given explicitly must match its settings.
inline void value_path_check_checkpoint(const ValuePathConfig& ckpt, const char* source) {
    if (ckpt.path != VALUE_PATH_ID)
        runtime_error("build the binary of the checkpoint's path (make train_cpu VALUE_PATH=..., or make train VALUE_PATH=... for the GPU trainer) or start a new run",
                      "%s was written by a VALUE_PATH=%s build, but this binary is VALUE_PATH=%s",
                      source, value_path_name(ckpt.path), value_path_name(VALUE_PATH_ID));
}

inline void value_path_check_flags_match(const ValuePathFlags& flags, const ValuePathConfig& ckpt, int L, int H, int Hkv, const char* source) {
    ValuePathConfig asked = value_path_config_from_flags(flags, L, H, Hkv);
    for (const ValuePathFlagSpec& spec : VALUE_PATH_FLAGS) {
        if (spec.path != VALUE_PATH_ID || (flags.*(spec.field)).empty()) continue;
        std::string want = spec.setting_text(asked), have = spec.setting_text(ckpt);
        if (want != have)
            runtime_error("drop the value-path flags (the checkpoint fixes them) or start a new run",
                          "%s %s does not match %s, which has %s %s", spec.name, (flags.*(spec.field)).c_str(), source, spec.name, have.c_str());
    }
}

// What is wrong with a value-path config read from a file for a model of H query heads and Hkv KV
// heads, or "" (the rules of value_path_config_from_flags; any n_l >= 1 is valid, n_l >= L is vanilla).
inline std::string value_path_config_problem(const ValuePathConfig& c, int H, int Hkv) {
    int G = H / Hkv;
    if (c.resformer_learn != 0 && c.resformer_learn != 1) return "resformer_learn is not 0 or 1";
    if (!(c.resformer_lambda_lr >= 0) || !std::isfinite(c.resformer_lambda_lr)) return "resformer_lambda_lr is not a number >= 0";
    if (c.path == VP_SLA && (c.sla_layers < 1 || c.sla_heads < 0 || c.sla_heads > H || c.sla_heads % G || (c.sla_chain != 0 && c.sla_chain != 1)))
        return "the SLA settings (layers, heads, chain) do not fit the model";
    if (c.path == VP_DEPTH && c.depth_stride < 1) return "depth_stride is below 1";
    return "";
}

// JSON fragment for the config line of log.jsonl: "value_path":"sla","sla_layers":9,...
inline std::string value_path_config_json(const ValuePathConfig& c) {
    char buf[256];
    snprintf(buf, sizeof(buf), "\"value_path\":\"%s\"", value_path_name(c.path));
    std::string s = buf;
    if (c.path == VP_RESFORMER) {
        snprintf(buf, sizeof(buf), ",\"resformer_lambda\":\"%s\",\"resformer_lambda_lr\":%g", c.resformer_learn ? "learn" : "fixed", c.resformer_lambda_lr);
        s += buf;
    } else if (c.path == VP_SLA) {
        snprintf(buf, sizeof(buf), ",\"sla_layers\":%d,\"sla_heads\":%d,\"sla_chain\":%d", c.sla_layers, c.sla_heads, c.sla_chain);
        s += buf;
    } else if (c.path == VP_DEPTH) {
        snprintf(buf, sizeof(buf), ",\"depth_stride\":%d", c.depth_stride);
        s += buf;
    }
    return s;
}

// Depth-Attention: |S(l)|, the anchors (layers 0, s, 2s, ...) below layer l that it reads; 0 for
// layer 0. One definition for the CPU and GPU builds and the logs.
inline int depth_num_sources(const ValuePathConfig& vp, int l) { return l == 0 ? 0 : (l - 1) / vp.depth_stride + 1; }

// Depth-Attention's depth softmax weights summed over an evaluation's forwards, for the mean
// weight of every (target layer, source) pair over tokens, KV heads and evaluated sequences: what
// the Depth-Attention paper plots (its section 4.5). Filled by the backend's model_depth_alpha_add.
struct DepthAlphaSums {
    int max_cands = 0;        // |S(L-1)| + 1
    std::vector<double> sum;  // (L, max_cands): row l, candidates [anchors 0, s, ... below l, own]; row 0 unused
    double count = 0;         // (position, KV head) pairs summed into each row
};

// Sized for a Depth-Attention model of this depth (every rank the same, to be added over the
// ranks); empty for the other paths, which have no depth stride.
inline DepthAlphaSums depth_alpha_sums(const ValuePathConfig& vp, int n_layer) {
    DepthAlphaSums a;
    if (vp.path != VP_DEPTH) return a;
    a.max_cands = depth_num_sources(vp, n_layer - 1) + 1;
    a.sum.assign((size_t)n_layer * a.max_cands, 0.0);
    return a;
}

// The means, one row per layer 1..L-1, each |S(l)| + 1 long and ending with the layer's own value.
inline std::vector<std::vector<double>> depth_alpha_means(const DepthAlphaSums& a, const ValuePathConfig& vp, int n_layer) {
    std::vector<std::vector<double>> rows;
    if (a.count <= 0) return rows;
    for (int l = 1; l < n_layer; l++) {
        std::vector<double> row;
        for (int n = 0; n <= depth_num_sources(vp, l); n++) row.push_back(a.sum[(size_t)l * a.max_cands + n] / a.count);
        rows.push_back(row);
    }
    return rows;
}
