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
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "host/utils.h"

struct Logger {
    FILE* jsonl = nullptr;  // NULL when no --out-dir is given: console only
    std::string path;       // DIR/log.jsonl
};

// Whether text is one whole JSON object: '{', then brackets that close (outside strings) exactly
// at its last byte. Enough to tell a record that lost only its newline from one cut short.
inline bool json_object_is_whole(const std::string& text) {
    if (text.empty() || text[0] != '{') return false;
    int depth = 0;
    bool in_string = false, escaped = false;
    for (size_t i = 0; i < text.size(); i++) {
        char ch = text[i];
        if (in_string) {
            if (escaped) escaped = false;
            else if (ch == '\\') escaped = true;
            else if (ch == '"') in_string = false;
        } else if (ch == '"') {
            in_string = true;
        } else if (ch == '{' || ch == '[') {
            depth++;
        } else if (ch == '}' || ch == ']') {
            if (--depth == 0) return i + 1 == text.size();
        }
    }
    return false;
}

// A resumed run appends to log.jsonl, whose last line may be cut: the run before was killed while
// writing it, or a full disk stopped it there (logger_write_line). The partial record would glue
// onto this run's first line and damage both, so it is cut off, and printed, so that its bytes
// are not lost without a word. Scans back from the end in blocks: the file may be long.
inline void logger_drop_cut_last_line(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) return;  // none yet: the append creates it (or says why it cannot)
    std::string tail;  // the bytes after the last newline, in order
    bool found_newline = false;
    long end = (fseek(f, 0, SEEK_END) == 0) ? ftell(f) : -1;
    long pos = end;
    char block[4096];
    while (pos > 0 && !found_newline) {
        long n = std::min<long>(pos, (long)sizeof(block));
        pos -= n;
        if (fseek(f, pos, SEEK_SET) != 0 || fread(block, 1, (size_t)n, f) != (size_t)n) {
            fclose(f);
            runtime_error("check the disk and the file", "cannot read '%s' to append to it: %s", path.c_str(), strerror(errno));
        }
        long i = n;
        while (i > 0 && block[i - 1] != '\n') i--;
        found_newline = i > 0;
        tail.insert(0, block + i, (size_t)(n - i));
        if (found_newline) pos += i;  // the size to keep: up to and including that newline
    }
    fclose(f);
    if (end <= 0 || tail.empty()) return;  // empty, or it ends in a newline
    if (json_object_is_whole(tail)) {  // only its newline is missing: the record is kept
        FILE* a = fopen_check(path.c_str(), "ab", "check that --out-dir is writable");
        bool ok = fputc('\n', a) != EOF;
        if (fclose(a) != 0 || !ok) runtime_error("check that --out-dir is writable", "cannot append to '%s': %s", path.c_str(), strerror(errno));
        return;
    }
    if (truncate(path.c_str(), (off_t)pos) != 0)
        runtime_error("check that --out-dir is writable", "cannot cut the partial last line off '%s': %s", path.c_str(), strerror(errno));
    std::string shown;
    for (unsigned char ch : tail.substr(0, 200)) shown += (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    printf("note: '%s' ended in a cut line (the run before was stopped while writing it, or the disk was full); dropped its %zu bytes: %s%s\n",
           path.c_str(), tail.size(), shown.c_str(), tail.size() > 200 ? "..." : "");
}

// A new run (append false) never truncates a log.jsonl already there (a run that stopped before
// its first checkpoint leaves one): it is kept as log.jsonl.1 (or .2, ...), and the run says so.
inline void logger_open(Logger* lg, const std::string& out_dir, bool append) {
    lg->jsonl = nullptr;
    if (out_dir.empty()) return;
    std::string path = out_dir + "/log.jsonl";
    lg->path = path;
    struct stat st;
    if (!append && stat(path.c_str(), &st) == 0) {
        std::string kept;
        for (int n = 1; kept.empty() || stat(kept.c_str(), &st) == 0; n++) kept = path + "." + std::to_string(n);
        if (rename(path.c_str(), kept.c_str()) != 0)
            runtime_error("move the old log.jsonl away, or choose another --out-dir", "cannot keep the earlier run's log: rename '%s' to '%s': %s", path.c_str(),
                          kept.c_str(), strerror(errno));
        printf("note: '%s' held an earlier run's log; kept as '%s'\n", path.c_str(), kept.c_str());
    }
    if (append) logger_drop_cut_last_line(path);
    lg->jsonl = fopen(path.c_str(), append ? "a" : "w");
    if (!lg->jsonl) runtime_error("check that --out-dir is writable", "cannot open '%s': %s", path.c_str(), strerror(errno));
}

inline void logger_close(Logger* lg) {
    if (lg->jsonl) fclose(lg->jsonl);
    lg->jsonl = nullptr;
}

inline void logger_write_line(Logger* lg, const std::string& json) {
    if (!lg->jsonl) return;
    // A line that did not reach the file (a full disk, a file-size limit) stops the run: training
    // on with a log that has lost steps, unnoticed until a plot, is worse. The checkpoints already
    // written are kept; the partial line is cut off when the run is resumed.
    if (fputs(json.c_str(), lg->jsonl) == EOF || fputc('\n', lg->jsonl) == EOF || fflush(lg->jsonl) != 0) {
        int err = errno;
        fclose(lg->jsonl);  // (may fail too: the error above is the one to report)
        lg->jsonl = nullptr;
        runtime_error("free space on the disk of --out-dir (or raise the file-size limit), then run the same command with --resume 1: it goes on from the newest checkpoint",
                      "cannot write to '%s': %s", lg->path.c_str(), strerror(err));
    }
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
