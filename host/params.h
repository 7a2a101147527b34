// host/params.h: the parameter layout, init, optimizer settings and sampling, shared by the CPU
// and GPU builds. The layout is the checkpoint format: both builds point their buffers with the
// same table, so a checkpoint written by one resumes in the other.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "host/config.h"
#include "host/rng.h"
#include "host/value_path.h"

// Parameter tensors. Per-layer tensors are stacked along L. A tensor a config does not use has
// size 0 and a NULL pointer (GPT-2 and a tied Llama have no lm_head, Llama has no biases or wpe).
template <typename real>
struct ParamTensors {
    real* wte;        // (Vp, C) token embedding; GPT-2: also the output head (tied)
    real* wpe;        // (maxT, C) GPT-2 learned positions
    real* ln1_w;      // (L, C)
    real* ln1_b;      // (L, C) GPT-2
    real* qk_w;       // (L, (H+Hkv)*D, C) query and key projections, rows [q heads | k heads]
    real* qk_b;       // (L, (H+Hkv)*D) GPT-2
    real* v_w;        // (L, Hkv*D, C) value projection
    real* v_b;        // (L, Hkv*D) GPT-2
    real* q_norm_w;   // (L, D) QK-norm gain for queries (Llama --qk-norm 1)
    real* k_norm_w;   // (L, D) QK-norm gain for keys
    real* attproj_w;  // (L, C, H*D)
    real* attproj_b;  // (L, C) GPT-2
    real* ln2_w;      // (L, C)
    real* ln2_b;      // (L, C) GPT-2
    real* fc_w;       // (L, FW, C): GPT-2 FW = F; Llama FW = 2F, rows [gate (w1) | up (w3)]
    real* fc_b;       // (L, FW) GPT-2
    real* fcproj_w;   // (L, C, F)
    real* fcproj_b;   // (L, C) GPT-2
    real* lnf_w;      // (C)
    real* lnf_b;      // (C) GPT-2
    real* lm_head;    // (Vp, C) Llama's output head unless tied (--tie-embeddings 1: wte is)
    real* vp_lambda;  // (L) ResFormer --resformer-lambda learn: the per-layer mixing weights
};
#define NUM_PARAM_TENSORS 22
static_assert(sizeof(ParamTensors<float>) == NUM_PARAM_TENSORS * sizeof(float*), "ParamTensors must be exactly its pointers");

struct ParamSpec {
    const char* name;
    size_t count;      // elements in all layers
    int decay;         // 1 = AdamW weight decay applies (matrices), 0 = biases and gains
    double init_std;   // normal(0, std) init; 0 = constant init_value
    float init_value;  // for gains (1) and biases (0)
    // >= 0: this tensor's own peak learning rate (same schedule; 0 freezes it, as
    // --resformer-lambda-lr 0 asks); -1: --lr
    float own_lr = -1;
};

// The size table, in the struct's order: one place that says how big every tensor is.
inline std::vector<ParamSpec> param_specs(const ModelConfig& c) {
    size_t L = c.n_layer, C = c.n_embd, D = c.head_dim, H = c.n_head, Hkv = c.n_kv_head, F = c.ffn_dim, Vp = c.padded_vocab_size;
    bool gpt2 = c.arch == ARCH_GPT2, qkn = c.arch == ARCH_LLAMA && c.qk_norm;
    size_t Lv = value_path_value_proj_layers(c.vp, c.n_layer);  // layers with a value projection (SVFormer: 1)
    size_t FW = gpt2 ? F : 2 * F;
    // GPT-2 init (as GPT-2 / llm.c): normal(0, 0.02), and the projections that write into the
    // residual stream scaled by 1/sqrt(2L) so the stream's variance does not grow with depth.
    double std_ = 0.02, std_res = 0.02 / std::sqrt(2.0 * L);
    return {
        {"wte", Vp * C, 1, std_, 0},
        {"wpe", gpt2 ? (size_t)c.max_seq_len * C : 0, 1, std_, 0},
        {"ln1_w", L * C, 0, 0, 1},
        {"ln1_b", gpt2 ? L * C : 0, 0, 0, 0},
        {"qk_w", L * (H + Hkv) * D * C, 1, std_, 0},
        {"qk_b", gpt2 ? L * (H + Hkv) * D : 0, 0, 0, 0},
        {"v_w", Lv * Hkv * D * C, 1, std_, 0},
        {"v_b", gpt2 ? Lv * Hkv * D : 0, 0, 0, 0},
        {"q_norm_w", qkn ? L * D : 0, 0, 0, 1},
        {"k_norm_w", qkn ? L * D : 0, 0, 0, 1},
        {"attproj_w", L * C * H * D, 1, std_res, 0},
        {"attproj_b", gpt2 ? L * C : 0, 0, 0, 0},
        {"ln2_w", L * C, 0, 0, 1},
        {"ln2_b", gpt2 ? L * C : 0, 0, 0, 0},
        {"fc_w", L * FW * C, 1, std_, 0},
        {"fc_b", gpt2 ? L * FW : 0, 0, 0, 0},
        {"fcproj_w", L * C * F, 1, std_res, 0},
        {"fcproj_b", gpt2 ? L * C : 0, 0, 0, 0},
        {"lnf_w", C, 0, 0, 1},
        {"lnf_b", gpt2 ? C : 0, 0, 0, 0},
        {"lm_head", config_tied_head(c) ? 0 : Vp * C, 1, std_, 0},
        {"vp_lambda", (size_t)value_path_num_lambdas(c.vp, c.n_layer), 0, 0, 0.5f, c.vp.resformer_lambda_lr},
    };
}

// The output head's tensor (Vp, C) in a set of parameters or of their gradients: wte where the
// embeddings are tied (GPT-2, --tie-embeddings 1), else lm_head. The forward and backward of both
// builds take it from here, so the logits and the head's gradient always use the same tensor.
template <typename real>
real* output_head(const ParamTensors<real>& t, const ModelConfig& c) { return config_tied_head(c) ? t.wte : t.lm_head; }

// Training FLOPs per token as nanoGPT and llm.c count them for MFU (the PaLM paper, appendix B):
// 6 N + 12 L H D T, N = the parameters without GPT-2's position table (a tied token embedding
// counts once: it is also the LM head), 12 L H D T = the attention scores and their backward,
// without the causal halving (the usual 12 L C T wherever H D = C, as in GPT-2). A value path's
// own FLOPs (value_paths.md "Cost") are not added, so every path divides by the same formula;
// SVFormer's smaller N makes its figure lower.
inline size_t params_for_flops(const ModelConfig& c, size_t num_params) {
    return num_params - (c.arch == ARCH_GPT2 ? (size_t)c.max_seq_len * c.n_embd : 0);
}

inline double training_flops_per_token(const ModelConfig& c, size_t num_params, int T) {
    return 6.0 * (double)params_for_flops(c, num_params) + 12.0 * c.n_layer * c.n_head * c.head_dim * (double)T;
}

inline size_t count_params(const std::vector<ParamSpec>& specs) {
    size_t n = 0;
    for (const ParamSpec& s : specs) n += s.count;
    return n;
}

// Points the struct's fields into one flat buffer, in spec order.
template <typename real>
void point_param_tensors(ParamTensors<real>* t, real* memory, const std::vector<ParamSpec>& specs) {
    real** ptrs = reinterpret_cast<real**>(t);
    size_t off = 0;
    for (size_t i = 0; i < specs.size(); i++) {
        ptrs[i] = specs[i].count ? memory + off : nullptr;
        off += specs[i].count;
    }
}

// One layer's slice of every per-layer tensor.
template <typename real>
struct LayerParams {
    real *ln1_w, *ln1_b, *qk_w, *qk_b, *v_w, *v_b, *q_norm_w, *k_norm_w, *attproj_w, *attproj_b, *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
};

// The per-layer tensors are ParamTensors' fields ln1_w .. fcproj_b, in LayerParams' order.
#define FIRST_LAYER_TENSOR 2
#define NUM_LAYER_TENSORS 16
static_assert(sizeof(LayerParams<float>) == NUM_LAYER_TENSORS * sizeof(float*), "LayerParams must be exactly its pointers");
static_assert(offsetof(ParamTensors<float>, ln1_w) == FIRST_LAYER_TENSOR * sizeof(float*) &&
                  offsetof(ParamTensors<float>, fcproj_b) == (FIRST_LAYER_TENSOR + NUM_LAYER_TENSORS - 1) * sizeof(float*),
              "ParamTensors' per-layer fields must match LayerParams");

// Elements in layer l's slice of each per-layer tensor, in LayerParams' order (0: none in layer l;
// SVFormer has a value projection in layer 0 only).
inline std::array<size_t, NUM_LAYER_TENSORS> layer_tensor_sizes(const ModelConfig& c, int l) {
    size_t C = c.n_embd, D = c.head_dim, QK = (size_t)(c.n_head + c.n_kv_head) * D, KV = (size_t)c.n_kv_head * D, F = c.ffn_dim;
    size_t FW = c.arch == ARCH_GPT2 ? F : 2 * F;
    bool has_v = l < value_path_value_proj_layers(c.vp, c.n_layer);
    //       ln1_w ln1_b qk_w    qk_b v_w               v_b            q_norm k_norm attproj_w         attproj_b ln2_w ln2_b fc_w    fc_b fcproj_w fcproj_b
    return {C, C, QK * C, QK, has_v ? KV * C : 0, has_v ? KV : 0, D, D, C * c.n_head * D, C, C, C, FW * C, FW, C * F, C};
}

template <typename real>
LayerParams<real> layer_params(const ParamTensors<real>& p, const ModelConfig& c, int l) {
    std::array<size_t, NUM_LAYER_TENSORS> sizes = layer_tensor_sizes(c, l);
    real* const* base = reinterpret_cast<real* const*>(&p) + FIRST_LAYER_TENSOR;
    LayerParams<real> lp;
    real** out = reinterpret_cast<real**>(&lp);
    for (int i = 0; i < NUM_LAYER_TENSORS; i++) out[i] = base[i] && sizes[i] ? base[i] + (size_t)l * sizes[i] : nullptr;  // absent: nullptr
    return lp;
}

// (pointer, elements) of layer l's slice of every per-layer tensor that layer has, or with l = -1
// of every tensor outside the layers (embeddings, final norm, head, ResFormer's lambdas). Data
// parallel sums a layer's gradients as soon as the backward is done with that layer.
template <typename real>
std::vector<std::pair<real*, size_t>> param_slices(const ParamTensors<real>& p, const std::vector<ParamSpec>& specs, const ModelConfig& c, int l) {
    std::vector<std::pair<real*, size_t>> out;
    real* const* ptrs = reinterpret_cast<real* const*>(&p);
    if (l >= 0) {
        LayerParams<real> lp = layer_params(p, c, l);
        real* const* lptrs = reinterpret_cast<real* const*>(&lp);
        std::array<size_t, NUM_LAYER_TENSORS> sizes = layer_tensor_sizes(c, l);
        for (int i = 0; i < NUM_LAYER_TENSORS; i++)
            if (lptrs[i]) out.push_back({lptrs[i], sizes[i]});
        return out;
    }
    for (int i = 0; i < NUM_PARAM_TENSORS; i++)
        if ((i < FIRST_LAYER_TENSOR || i >= FIRST_LAYER_TENSOR + NUM_LAYER_TENSORS) && ptrs[i]) out.push_back({ptrs[i], specs[i].count});
    return out;
}

// Elements one thread of init_params_from_seed draws in a row
constexpr size_t INIT_BLOCK = 1 << 16;

// Fills a flat parameter buffer (spec order) from the seed: every tensor draws from its own RNG
// stream (stream = its index), so adding a tensor to one family never changes the init of the
// others; element j of a drawn tensor is its stream's j-th normal. The padded vocabulary rows
// (V..Vp) start at zero: they are never looked up and never get a gradient. Runs on the host in
// every build, so the CPU and GPU builds start from the same weights. The normals (a log and a cos
// in double each: 5 s for GPT-2 124M on one core) are drawn by blocks of INIT_BLOCK on every OpenMP
// thread, each block's generator moved to its first element by rng_skip: the same bits for any
// number of threads (test_host: init_from_seed_is_each_streams_normals_in_order).
template <typename T>
void init_params_from_seed(const std::vector<ParamSpec>& specs, const ModelConfig& c, T* p, uint64_t seed) {
    for (size_t i = 0; i < specs.size(); i++) {
        const ParamSpec& s = specs[i];
        const Rng stream = rng_stream(seed, 1000 + i);
        bool vocab_rows = !strcmp(s.name, "wte") || !strcmp(s.name, "lm_head");
        size_t real = vocab_rows ? std::min(s.count, (size_t)c.vocab_size * c.n_embd) : s.count;  // the rest: padded rows
        long blocks = (long)((real + INIT_BLOCK - 1) / INIT_BLOCK);
#pragma omp parallel for schedule(static)
        for (long b = 0; b < blocks; b++) {
            size_t begin = (size_t)b * INIT_BLOCK, end = std::min(real, begin + INIT_BLOCK);
            Rng rng = stream;
            rng_skip(&rng, begin * RNG_DRAWS_PER_NORMAL);
            for (size_t j = begin; j < end; j++) p[j] = s.init_std > 0 ? (T)(s.init_std * rng_normal(&rng)) : (T)s.init_value;
        }
        for (size_t j = real; j < s.count; j++) p[j] = 0;
        p += s.count;
    }
}

struct AdamWSettings {
    float lr, beta1, beta2, eps, weight_decay;
    float grad_scale;  // multiplies every gradient first (global-norm clipping)
    float lr_peak;     // --lr: a tensor with its own peak lr (ParamSpec.own_lr) uses own_lr * lr / lr_peak
};

// The learning rate of one tensor at this step: lr, or for a tensor with its own peak lr the same
// schedule scaled to it (own_lr * lr / lr_peak). Computed in float, as every build's AdamW uses it.
inline float tensor_lr(const ParamSpec& spec, const AdamWSettings& s) { return spec.own_lr >= 0 && s.lr_peak > 0 ? spec.own_lr * (s.lr / s.lr_peak) : s.lr; }


struct SampleSettings {
    float temperature;  // 0 = greedy (argmax)
    int top_k;          // > 0: draw only among the k largest logits (and any equal to the k-th); 0 = all
};

// How many numbers of the sample RNG sample_token draws per token, whatever the logits: one
// uniform, or none when greedy. Fixed, so that the draws of tokens not drawn can be skipped.
inline uint64_t sample_draws_per_token(const SampleSettings& s) { return s.temperature <= 0 ? 0 : 1; }

// Draws a token from the logits row (length V). sample_draws_per_token(s) draws, so a resumed
// run's samples continue exactly. PyTorch (nanoGPT's sample.py): logits / temperature,
// logits[logits < topk(logits, k).values[-1]] = -inf, softmax, multinomial.
template <typename real>
int sample_token(const real* logits, int V, const SampleSettings& s, Rng* rng) {
    int best = 0;
    for (int j = 1; j < V; j++)
        if (logits[j] > logits[best]) best = j;
    if (s.temperature <= 0) return best;
    double cutoff = -INFINITY;  // logits below it are never drawn
    if (s.top_k > 0 && s.top_k < V) {
        std::vector<double> sorted(logits, logits + V);
        std::nth_element(sorted.begin(), sorted.begin() + (s.top_k - 1), sorted.end(), std::greater<double>());
        cutoff = sorted[s.top_k - 1];
    }
    std::vector<double> w(V);
    double sum = 0;
    for (int j = 0; j < V; j++)
        sum += (w[j] = (double)logits[j] < cutoff ? 0.0 : std::exp(((double)logits[j] - logits[best]) / s.temperature));
    double r = rng_uniform(rng) * sum, acc = 0;
    int last_drawable = best;
    for (int j = 0; j < V; j++) {
        if (w[j] == 0) continue;
        acc += w[j];
        last_drawable = j;
        if (r < acc) return j;
    }
    return last_drawable;  // r rounded up to the whole sum
}

