// host/logger.h: the per-step console line and DIR/log.jsonl.
//
// log.jsonl is one JSON object per line, flushed as it is written (a crashed run keeps its log):
//   {"event":"config", ...model and run settings..., "num_params":N, "value_path":"..."}
//   {"step":S,"train_loss":..,"lr":..,"grad_norm":..,"ms":..,"tok_per_s":..}     every step
//   {"step":S,"val_loss":..,"val_loss_NAME":..,"mc_acc_NAME":..,...}               every eval
//   {"event":"stopped","step":S,"signal":"SIGTERM"}   last, where a signal stopped the run (host/train_loop.h)
// A resumed run appends to the same file, starting with a config line that has "resumed_from".
// A new run moves an earlier run's log.jsonl aside to log.jsonl.N rather than overwrite it.
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "host/utils.h"

struct Logger {
    FILE* jsonl = nullptr;  // NULL when no --out-dir is given: console only
};

// A new run (append false) never truncates a log.jsonl already there (a run that stopped before
// its first checkpoint leaves one): it is kept as log.jsonl.1 (or .2, ...), and the run says so.
inline void logger_open(Logger* lg, const std::string& out_dir, bool append) {
    lg->jsonl = nullptr;
    if (out_dir.empty()) return;
    std::string path = out_dir + "/log.jsonl";
    struct stat st;
    if (!append && stat(path.c_str(), &st) == 0) {
        std::string kept;
        for (int n = 1; kept.empty() || stat(kept.c_str(), &st) == 0; n++) kept = path + "." + std::to_string(n);
        if (rename(path.c_str(), kept.c_str()) != 0)
            runtime_error("move the old log.jsonl away, or choose another --out-dir", "cannot keep the earlier run's log: rename '%s' to '%s': %s", path.c_str(),
                          kept.c_str(), strerror(errno));
        printf("note: '%s' held an earlier run's log; kept as '%s'\n", path.c_str(), kept.c_str());
    }
    lg->jsonl = fopen(path.c_str(), append ? "a" : "w");
    if (!lg->jsonl) runtime_error("check that --out-dir is writable", "cannot open '%s': %s", path.c_str(), strerror(errno));
}

inline void logger_close(Logger* lg) {
    if (lg->jsonl) fclose(lg->jsonl);
    lg->jsonl = nullptr;
}

inline void logger_write_line(Logger* lg, const std::string& json) {
    if (!lg->jsonl) return;
    fputs(json.c_str(), lg->jsonl);
    fputc('\n', lg->jsonl);
    fflush(lg->jsonl);
}

// JSON string escaping for the few strings we log (paths, globs, names).
inline std::string json_escape(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') { out += '\\'; out += (char)c; }
        else if (c < 0x20) { char b[8]; snprintf(b, sizeof(b), "\\u%04x", c); out += b; }
        else out += (char)c;
    }
    return out + "\"";
}

// A number for log.jsonl: %.9g (every bit of a float), or null for NaN and inf, which JSON has no
// word for (the trainer stops on a non-finite loss, norm or val loss before logging it; this keeps
// the file readable should any other value ever be one).
inline std::string json_number(double v) {
    if (!std::isfinite(v)) return "null";
    char buf[64];
    snprintf(buf, sizeof(buf), "%.9g", v);
    return buf;
}

// %.9g keeps every bit of a float, so losses in the log can be compared exactly between runs.
// mfu: model FLOPs utilisation in [0, 1] (host/params.h training_flops_per_token over the device's
// peak), printed and logged when > 0 (a GPU with a known peak).
// lambdas: ResFormer's learnable lambdas after this step's update (layer 0 first), logged as
// "resformer_lambdas" (the config line's "resformer_lambda" is the setting); empty otherwise.
inline void logger_step(Logger* lg, int step, int max_steps, float loss, float lr, float grad_norm, double ms, double tok_per_s, double mfu,
                        const std::vector<float>& lambdas, bool update_skipped = false) {
    printf("step %5d/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s", step, max_steps, loss, lr, grad_norm, ms, tok_per_s);
    if (mfu > 0) printf(" | MFU %.1f%%", 100 * mfu);
    if (update_skipped) printf(" | update skipped");
    printf("\n");
    fflush(stdout);
    char buf[256];
    snprintf(buf, sizeof(buf), "{\"step\":%d,\"train_loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"ms\":%.3f,\"tok_per_s\":%.1f", step, loss, lr,
             grad_norm, ms, tok_per_s);
    std::string json = buf;
    if (mfu > 0) {
        snprintf(buf, sizeof(buf), ",\"mfu\":%.6f", mfu);
        json += buf;
    }
    if (update_skipped) json += ",\"skipped\":1";  // --skip-loss-z / --skip-norm-z: no AdamW update this step
    if (!lambdas.empty()) {
        json += ",\"resformer_lambdas\":[";
        for (size_t l = 0; l < lambdas.size(); l++) {
            json += (l ? "," : "") + json_number(lambdas[l]);
        }
        json += "]";
    }
    logger_write_line(lg, json + "}");
}

// The console's view of ResFormer's lambdas, at each evaluation: layer 0's never moves (it mixes
// v^0 with itself), so from layer 1.
inline void print_lambdas(int step, const std::vector<float>& lambdas) {
    if (lambdas.size() < 2) return;
    printf("step %5d | resformer lambda, layers 1..%zu |", step, lambdas.size() - 1);
    for (size_t l = 1; l < lambdas.size(); l++) printf(" %.4f", lambdas[l]);
    printf("\n");
    fflush(stdout);
}

struct NamedLoss {
    std::string name;  // "" = the unnamed set
    float loss;
};

// One multiple-choice set's accuracies (host/mc_eval.h), logged as mc_acc[_NAME], mc_acc_norm[_NAME]
// and mc_acc_tokavg[_NAME].
struct NamedMc {
    std::string name;  // "" = the unnamed set
    double acc, acc_norm, acc_tokavg;
};

// depth_alpha: Depth-Attention's mean weights over the evaluation, one row per layer 1..L-1
// ([anchors..., own]; host/value_path.h depth_alpha_means), logged as "depth_alpha"; empty otherwise.
inline void logger_val(Logger* lg, int step, const std::vector<NamedLoss>& losses, const std::vector<NamedMc>& mcs = {},
                       const std::vector<std::vector<double>>& depth_alpha = {}) {
    char buf[256];
    snprintf(buf, sizeof(buf), "{\"step\":%d", step);
    std::string json = buf;
    printf("step %5d | %s", step, losses.empty() ? "eval" : "val");
    for (const NamedLoss& nl : losses) {
        std::string key = nl.name.empty() ? "val_loss" : "val_loss_" + nl.name;
        json += ",\"" + key + "\":" + json_number(nl.loss);
        printf(" | %s %.6f", key.c_str(), nl.loss);
    }
    for (const NamedMc& mc : mcs) {
        std::string suffix = mc.name.empty() ? "" : "_" + mc.name;  // a name has no length limit: not through buf
        const char* keys[3] = {"mc_acc", "mc_acc_norm", "mc_acc_tokavg"};
        double values[3] = {mc.acc, mc.acc_norm, mc.acc_tokavg};
        for (int k = 0; k < 3; k++) {
            snprintf(buf, sizeof(buf), "%.9g", values[k]);
            json += ",\"" + std::string(keys[k]) + suffix + "\":" + buf;
        }
        printf(" | %s acc %.4f acc_norm %.4f acc_tokavg %.4f", mc.name.empty() ? "mc" : mc.name.c_str(), mc.acc, mc.acc_norm, mc.acc_tokavg);
    }
    printf("\n");
    fflush(stdout);
    if (!depth_alpha.empty()) {
        json += ",\"depth_alpha\":[";
        for (size_t l = 0; l < depth_alpha.size(); l++) {
            json += l ? ",[" : "[";
            for (size_t n = 0; n < depth_alpha[l].size(); n++) {
                snprintf(buf, sizeof(buf), "%s%.6g", n ? "," : "", depth_alpha[l][n]);
                json += buf;
            }
            json += "]";
        }
        json += "]";
    }
    logger_write_line(lg, json + "}");
}

// The console's view of Depth-Attention's weights at each evaluation: how much of each layer's
// value is its own (1 = the layer ignores its anchors, as vanilla attention).
inline void print_depth_alpha(int step, const std::vector<std::vector<double>>& depth_alpha) {
    if (depth_alpha.empty()) return;
    printf("step %5d | depth alpha on the own value, layers 1..%zu |", step, depth_alpha.size());
    for (const std::vector<double>& row : depth_alpha) printf(" %.3f", row.back());
    printf("\n");
    fflush(stdout);
}
