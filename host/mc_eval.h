// host/mc_eval.h: multiple-choice evaluation (HellaSwag and the like), shared by the CPU and GPU
// trainers. `--eval-mc NAME=FILE` scores a .vpmc file (written by scripts/prepare_hellaswag.py;
// format in docs/formats.md) at every evaluation.
//
// An example is a context and 2 or more endings, one of them right (its label). Each ending is
// scored by the model's log-probability of its tokens after the context, and the example counts
// as right when the label's ending scores best. Three scores, as the usual harnesses define them:
//   acc         sum of the ending's token log-probs                     (lm-evaluation-harness "acc")
//   acc_norm    that sum divided by the ending's length in characters (lm-evaluation-harness "acc_norm")
//   acc_tokavg  the mean log-prob per ending token                       (llm.c's and build-nanogpt's "acc_norm")
// A tie goes to the lowest choice index. Every (example, choice) pair is one row of a batch:
// context + ending, right-padded with token 0; only the ending's positions are read (the model is
// causal, so the padding after a row's end changes nothing before it). A row longer than T + 1
// tokens keeps its last T + 1 (the ending and as much context as fits, as lm-evaluation-harness
// truncates); such examples are counted and reported.
//
// The rows are batched longest first, and each batch is forwarded at its longest row's length
// rounded up to MC_FORWARD_STEP positions (at most T), not at the training T: HellaSwag's rows
// are about 100 tokens, so at T = 1024 this does about a tenth of the work. The step bounds the
// number of distinct shapes (the GPU build picks a GEMM algorithm per shape, once) and keeps
// each GEMM's row count a multiple of 16.
//
// Under data parallelism rank r forwards batches r, r + W, ...; the per-row sums are then added
// over the ranks (each row is non-zero on one rank only, so the sum is exact) and every rank
// computes the same accuracies.
//
// The backend provides, besides gpt_forward:
//   void gpt_position_losses(const Model*, std::vector<double>* out)   the B*T per-position losses
//        (-log p(target)) of the last gpt_forward with targets, row-major (b, t)
#pragma once

#include <cstdint>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "host/distributed.h"
#include "host/utils.h"

#define MC_MAGIC 20241125
#define MC_VERSION 1
#define MC_HEADER_INTS 256
#define MC_MAX_CHOICES 64
#define MC_MAX_TOKENS (1 << 20)      // per context or ending
#define MC_MAX_EXAMPLES (1 << 24)
#define MC_MAX_FILE_BYTES (1ull << 34)
#define MC_FORWARD_STEP 16           // a batch's sequence length is a multiple of this (or T)

struct McExample {
    int label = 0;
    std::vector<int> context;                 // >= 1 token
    std::vector<std::vector<int>> endings;    // >= 2 endings of >= 1 token each
    std::vector<int> ending_chars;            // length of each ending's text in characters (acc_norm), >= 1
};

struct McSet {
    std::string name;  // "" = unnamed (log keys mc_acc, ...); else mc_acc_NAME, ...
    std::string path;
    std::string tokenizer;  // as the file names it, e.g. "gpt2"
    std::vector<McExample> examples;
};

struct McResult {
    double acc = 0, acc_norm = 0, acc_tokavg = 0;
};

// Reads and checks a .vpmc file: every count within bounds, every id below vocab_size, the
// tokenizer's vocabulary equal to the model's (ids of another tokenizer may all be in range and
// still mean other words). Any fault is a runtime error that names the file.
inline void mc_load(McSet* set, const std::string& path, int vocab_size) {
    const char* hint = "re-create it with scripts/prepare_hellaswag.py (with the tokenizer the model was trained with)";
    require_regular_file(path.c_str(), "multiple-choice file", hint, MC_MAX_FILE_BYTES);
    FILE* f = fopen_check(path.c_str(), "rb", hint);
    int32_t header[MC_HEADER_INTS] = {0};
    size_t got = fread(header, sizeof(int32_t), MC_HEADER_INTS, f);
    fseek(f, 0, SEEK_END);
    long long file_bytes = ftell(f);
    auto fail = [&](const char* fmt, long long a, long long b) {
        fclose(f);
        char msg[512];
        snprintf(msg, sizeof(msg), fmt, a, b);
        runtime_error(hint, "multiple-choice file '%s': %s", path.c_str(), msg);
    };
    if (got != MC_HEADER_INTS) fail("%lld bytes, shorter than the %lld-byte header", file_bytes, MC_HEADER_INTS * 4);
    if (header[0] != MC_MAGIC) fail("magic %lld, expected %lld: not a .vpmc file", header[0], MC_MAGIC);
    if (header[1] != MC_VERSION) fail("version %lld; this build reads version %lld", header[1], MC_VERSION);
    long long n_examples = header[2], file_vocab = header[3], body_ints = header[4];
    if (n_examples < 1 || n_examples > MC_MAX_EXAMPLES) fail("%lld examples (expected 1 to %lld)", n_examples, MC_MAX_EXAMPLES);
    if (body_ints < 0 || file_bytes != (long long)sizeof(int32_t) * (MC_HEADER_INTS + body_ints))
        fail("%lld bytes, but its header promises %lld: truncated or damaged", file_bytes, (long long)sizeof(int32_t) * (MC_HEADER_INTS + body_ints));
    // the smallest example is 10 ints (3 + 2 choices x 2, one context token, two ending tokens)
    if (n_examples * 10 > body_ints) fail("%lld examples in %lld ints: damaged", n_examples, body_ints);
    char name[33] = {0};
    memcpy(name, header + 8, 32);
    for (int i = 0; i < 32 && name[i]; i++)
        if (name[i] < 0x20 || name[i] > 0x7e) fail("a tokenizer name with byte %lld at %lld", (unsigned char)name[i], i);
    set->tokenizer = name;
    set->path = path;
    if (file_vocab != vocab_size) {
        fclose(f);
        runtime_error("prepare the file with the tokenizer the model was trained with (scripts/prepare_hellaswag.py --tokenizer ...)",
                      "multiple-choice file '%s' was tokenized with %s (vocabulary %lld); the model's vocabulary is %d", path.c_str(),
                      name[0] ? name : "an unnamed tokenizer", file_vocab, vocab_size);
    }
    std::vector<int32_t> body((size_t)body_ints);
    fseek(f, (long)sizeof(int32_t) * MC_HEADER_INTS, SEEK_SET);
    if (body_ints && fread(body.data(), sizeof(int32_t), body.size(), f) != body.size()) fail("cannot read its %lld body ints", body_ints, 0);
    size_t at = 0;
    auto next = [&](long long ex) -> long long {
        if (at >= body.size()) fail("example %lld runs past the end of the file", ex, 0);
        return body[at++];
    };
    set->examples.assign((size_t)n_examples, McExample());
    for (long long e = 0; e < n_examples; e++) {
        McExample& ex = set->examples[(size_t)e];
        long long n_choices = next(e), label = next(e), ctx_len = next(e);
        if (n_choices < 2 || n_choices > MC_MAX_CHOICES) fail("example %lld has %lld choices (expected 2 to 64)", e, n_choices);
        if (label < 0 || label >= n_choices) fail("example %lld has label %lld, not one of its choices", e, label);
        if (ctx_len < 1 || ctx_len > MC_MAX_TOKENS) fail("example %lld has a context of %lld tokens (expected 1 to 2^20)", e, ctx_len);
        ex.label = (int)label;
        std::vector<long long> lens((size_t)n_choices);
        ex.ending_chars.resize((size_t)n_choices);
        for (long long j = 0; j < n_choices; j++) {
            lens[(size_t)j] = next(e);
            long long chars = next(e);
            if (lens[(size_t)j] < 1 || lens[(size_t)j] > MC_MAX_TOKENS) fail("example %lld has an ending of %lld tokens (expected 1 to 2^20)", e, lens[(size_t)j]);
            if (chars < 1) fail("example %lld has an ending of %lld characters", e, chars);
            ex.ending_chars[(size_t)j] = (int)chars;
        }
        auto read_tokens = [&](std::vector<int>* out, long long n) {
            if ((long long)(body.size() - at) < n) fail("example %lld runs past the end of the file", e, 0);
            out->resize((size_t)n);
            for (long long i = 0; i < n; i++) {
                int32_t id = body[at++];
                if (id < 0 || id >= vocab_size) fail("example %lld has token id %lld, outside the vocabulary", e, id);
                (*out)[(size_t)i] = id;
            }
        };
        read_tokens(&ex.context, ctx_len);
        ex.endings.resize((size_t)n_choices);
        for (long long j = 0; j < n_choices; j++) read_tokens(&ex.endings[(size_t)j], lens[(size_t)j]);
    }
    if (at != body.size()) fail("%lld ints after the last example: damaged", (long long)(body.size() - at), 0);
    fclose(f);
}

// One scored row: context + ending of one choice, cut to its last T + 1 tokens.
struct McRow {
    std::vector<int> tokens;  // at most T + 1
    int first_scored;         // index into tokens of the first ending token that is scored (>= 1)
    bool truncated;           // the row lost tokens to fit T
};

// The tokens a row keeps at this T: context + ending, at most the last T + 1. One definition, so
// that a batch's length (mc_batches) always holds the row that mc_row builds.
inline size_t mc_row_length(const McExample& ex, int choice, int T) {
    return std::min(ex.context.size() + ex.endings[(size_t)choice].size(), (size_t)T + 1);
}

inline McRow mc_row(const McExample& ex, int choice, int T) {
    const std::vector<int>& end = ex.endings[(size_t)choice];
    size_t n = ex.context.size() + end.size(), keep = mc_row_length(ex, choice, T), start = n - keep;
    McRow r;
    r.tokens.reserve(keep);
    for (size_t i = start; i < n; i++) r.tokens.push_back(i < ex.context.size() ? ex.context[i] : end[i - ex.context.size()]);
    // token k of the full sequence is predicted from position k - 1: the ending's first token
    // (k = context length) is scored unless the cut left it without a predecessor in the row
    r.first_scored = (int)std::max<size_t>(ex.context.size(), start + 1) - (int)start;
    r.truncated = start > 0;
    return r;
}

// Counts the examples of the set that lose tokens at this T.
inline int mc_count_truncated(const McSet& set, int T) {
    int n = 0;
    for (const McExample& ex : set.examples) {
        bool cut = false;
        for (size_t j = 0; j < ex.endings.size(); j++) cut |= ex.context.size() + ex.endings[j].size() > (size_t)T + 1;
        n += cut;
    }
    return n;
}

// One forward of multiple-choice rows: which rows (indices in (example, choice) order, as
// mc_row_losses returns their sums) and the sequence length they are forwarded at.
struct McBatch {
    std::vector<int> rows;  // 1..B rows
    int T;                  // >= every row's input length (its tokens - 1), <= the training T
    size_t row_positions;   // the rows' input lengths summed: rows.size() * T less the padding
};

// The batches of a set: rows sorted by input length, longest first (ties in row order), B to a
// batch, each at its longest row's length rounded up to len_step and capped at T.
inline std::vector<McBatch> mc_batches(const McSet& set, int B, int T, int len_step) {
    std::vector<int> len;  // per row, its input positions: the tokens it keeps - 1
    for (const McExample& ex : set.examples)
        for (size_t j = 0; j < ex.endings.size(); j++) len.push_back((int)mc_row_length(ex, (int)j, T) - 1);
    std::vector<int> order(len.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = (int)i;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return len[(size_t)a] > len[(size_t)b]; });
    std::vector<McBatch> batches;
    for (size_t i = 0; i < order.size(); i += (size_t)B) {
        McBatch mb;
        mb.rows.assign(order.begin() + (long)i, order.begin() + (long)std::min(order.size(), i + (size_t)B));
        int longest = len[(size_t)mb.rows[0]];
        mb.T = std::min(T, (int)CEIL_DIV(longest, len_step) * len_step);
        mb.row_positions = 0;
        for (int r : mb.rows) mb.row_positions += (size_t)len[(size_t)r];
        batches.push_back(std::move(mb));
    }
    return batches;
}

// The per-row sums of -log p over each row's scored tokens, in (example, choice) order.
// Collective under data parallelism. cut_short, if given: the batches end early once a stop
// signal is pending (g_stop_signal), and *cut_short says so (the sums are then partial; every
// rank still makes the one all-reduce, whichever of them stopped).
template <typename Model>
void mc_row_losses(Model* model, const McSet& set, int B, int T, std::vector<double>* sums, int len_step = MC_FORWARD_STEP, bool* cut_short = nullptr) {
    std::vector<std::pair<int, int>> rows;  // (example, choice)
    for (size_t e = 0; e < set.examples.size(); e++)
        for (size_t j = 0; j < set.examples[e].endings.size(); j++) rows.push_back({(int)e, (int)j});
    sums->assign(rows.size(), 0.0);
    std::vector<McBatch> batches = mc_batches(set, B, T, len_step);
    std::vector<int> inputs, targets;
    std::vector<double> losses;
    for (size_t b = 0; b < batches.size(); b++) {
        if ((int)(b % (size_t)dist_world()) != dist_rank()) continue;
        if (stop_cuts_here(cut_short)) break;
        const McBatch& mb = batches[b];
        int nb = (int)mb.rows.size(), Tb = mb.T;
        inputs.assign((size_t)nb * Tb, 0);
        targets.assign((size_t)nb * Tb, 0);
        std::vector<McRow> batch_rows;
        for (int i = 0; i < nb; i++) {
            const auto& rc = rows[(size_t)mb.rows[(size_t)i]];
            McRow r = mc_row(set.examples[(size_t)rc.first], rc.second, T);
            for (size_t t = 0; t + 1 < r.tokens.size(); t++) {
                inputs[(size_t)i * Tb + t] = r.tokens[t];
                targets[(size_t)i * Tb + t] = r.tokens[t + 1];
            }
            batch_rows.push_back(std::move(r));
        }
        gpt_forward(model, inputs.data(), targets.data(), nb, Tb);
        gpt_position_losses(model, &losses);
        for (int i = 0; i < nb; i++) {
            const McRow& r = batch_rows[(size_t)i];
            double s = 0;
            for (size_t k = (size_t)r.first_scored; k < r.tokens.size(); k++) s += losses[(size_t)i * Tb + (k - 1)];  // position k-1 predicts token k
            (*sums)[(size_t)mb.rows[(size_t)i]] = s;
        }
    }
    dist_allreduce_sum(sums->data(), (int)sums->size());
}

// The three accuracies from the per-row sums (as mc_row_losses orders them) at this T, which
// fixes how many tokens of each row are scored (acc_tokavg's divisor).
inline McResult mc_accuracies(const McSet& set, const std::vector<double>& sums, int T) {
    McResult res;
    size_t row = 0;
    int right[3] = {0, 0, 0};
    for (const McExample& ex : set.examples) {
        int best[3] = {0, 0, 0};
        double best_score[3] = {0, 0, 0};
        for (size_t j = 0; j < ex.endings.size(); j++, row++) {
            McRow r = mc_row(ex, (int)j, T);
            int scored = (int)r.tokens.size() - r.first_scored;  // >= 1
            double score[3] = {sums[row], sums[row] / ex.ending_chars[j], sums[row] / scored};  // lower is better
            for (int m = 0; m < 3; m++)
                if (j == 0 || score[m] < best_score[m]) best_score[m] = score[m], best[m] = (int)j;
        }
        for (int m = 0; m < 3; m++) right[m] += best[m] == ex.label;
    }
    double n = (double)set.examples.size();
    res.acc = right[0] / n;
    res.acc_norm = right[1] / n;
    res.acc_tokavg = right[2] / n;
    return res;
}

template <typename Model>
McResult evaluate_mc(Model* model, const McSet& set, int B, int T, bool* cut_short = nullptr) {
    std::vector<double> sums;
    bool cut = false;
    mc_row_losses(model, set, B, T, &sums, MC_FORWARD_STEP, cut_short ? &cut : nullptr);
    if (cut) {
        *cut_short = true;
        return McResult{};  // partial sums: not a result (the caller logs none)
    }
    // a NaN sum loses every comparison, so the first ending would win: an accuracy made up
    for (double v : sums)
        if (!std::isfinite(v))
            runtime_error("lower --lr or raise --warmup-steps (the training diverged), or use a checkpoint of a run that did not",
                          "multiple choice%s%s: an ending's log-likelihood is %g: the weights give a non-finite loss", set.name.empty() ? "" : " ", set.name.c_str(), v);
    return mc_accuracies(set, sums, T);
}
