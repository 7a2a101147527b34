/*
valuepath GPU trainer: GPT-2 and Llama-family models in CUDA, one kernel header per op (kernels/).

The same model as the CPU reference (train_gpt_cpu.cpp, the spec), the same training program
(host/train_loop.h: CLI, data, schedule, checkpoints, logs), a different backend. test_gpt.cu
diffs this file against the reference layer by layer, gradient by gradient, step by step.

  Precision (build time): PRECISION=BF16 (default): activations and the weights the kernels read
  are bf16, matmuls and attention run on tensor cores with fp32 accumulation. PRECISION=FP32: the
  same program in fp32 (no TF32), compared with the CPU reference to tight bounds. In both,
  master weights, gradients and AdamW moments are fp32, so checkpoints (fp32 master weights in
  param_specs order) move freely between this build and the CPU one.

  Determinism: no atomics anywhere; every reduction (parameter gradients of biases and norms, the
  embedding scatter-add, the GQA group sum in attention, the global norm) runs in a fixed order;
  cuBLASLt is run-to-run reproducible with the algorithm cached per shape. Two runs with the same
  seed give bit-identical losses, and --resume continues bit-exactly.

  Memory: parameters, gradients and optimizer state are allocated at build (18 bytes per
  parameter in bf16, 16 in fp32; under data parallel --zero 1 over W GPUs 6 + 12/W in bf16,
  8 + 8/W in fp32); activations at the first forward for its (B, T). Before each
  allocation the free device memory is checked, and the error gives the bytes it needed.
  --recompute 1 recomputes the MLP activation (GELU / SwiGLU) in backward; --recompute 2 also
  recomputes both norms of each block: less activation memory, bit-identical results.

The file runs top to bottom: includes (a table of contents of the kernels), the model (parameter
table, activations, build, forward, backward, update), sampling, the backend of host/train_loop.h,
then main (inside #ifndef TESTING so the tests and benchmarks include this file whole). Everything
GPU-side lives in namespace gpu, so test_gpt.cu can hold this model and the CPU one in one program.

Legend: B = batch, T = sequence length, C = channels, L = layers, H = query heads, Hkv = KV heads,
G = H/Hkv, D = head dim, F = MLP hidden, FW = fc width (GPT-2 F, Llama 2F: [gate | up]),
QK = (H+Hkv)D, KV = Hkv*D, W = QK + KV (the fused qkv row), V = vocab, Vp = padded vocab, BT = B*T.
*/

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// ----------------------------------------------------------------------------
// host code shared with the CPU trainer
#include "host/utils.h"        // defines: usage_error, runtime_error, fopen_check, fread_check, malloc_check
#include "host/value_path.h"   // defines: ValuePathConfig, VALUE_PATH_ID, value path flags
#include "host/config.h"       // defines: ModelConfig, RunConfig, parse_command_line, model_config_from_flags
#include "host/rng.h"          // defines: Rng, rng_stream, rng_normal, rng_uniform
#include "host/schedule.h"     // defines: lr_at_step
#include "host/dataloader.h"   // defines: DataLoader, dataloader_init, dataloader_next_batch, DataLoaderState
#include "host/checkpoint.h"   // defines: checkpoint_write, checkpoint_read, checkpoint_list_steps
#include "host/logger.h"       // defines: Logger, logger_step, logger_val
#include "host/tokenizer.h"    // defines: Tokenizer, tokenizer_init, tokenizer_print
#include "host/params.h"       // defines: ParamSpec, param_specs, ParamTensors, layer_params, AdamWSettings, init_params_from_seed, sample_token


// ----------------------------------------------------------------------------
// GPU utilities
#include "kernels/common.cuh"       // defines: floatX, cudaCheck, cublasCheck, KERNEL_ASSERT, cuda_malloc_check, x128, warp/block sums
#include "kernels/reduce.cuh"       // defines: num_partials, reduce_partials (fixed-order parameter-gradient sums)
// layers
#include "kernels/encoder.cuh"      // defines: encoder_forward, encoder_backward, encoder_buckets
#include "kernels/layernorm.cuh"    // defines: layernorm_forward, layernorm_backward
#include "kernels/rmsnorm.cuh"      // defines: rmsnorm_forward, rmsnorm_backward
#include "kernels/matmul.cuh"       // defines: matmul_init, matmul_forward (bias, residual), matmul_backward (dinp, dweight, dbias)
#include "kernels/qknorm.cuh"       // defines: qknorm_forward, qknorm_backward
#include "kernels/rope.cuh"         // defines: rope_forward, rope_backward
#include "kernels/attention.cuh"    // defines: AttentionArgs, KVGradRoute, attention_forward, attention_backward (flash, GQA, value-path reads and routes), attention_sum_kept
// ResFormer's and SVFormer's dL/dv^0 is deferred the same way (VP_KEEP_V0_TERMS, the default):
// each layer l >= 1's dK/dV epilogue keeps its term lambda_l G^l (SVFormer: G^l) in its own
// attention output atty, dead once the backward's delta pass has read it, and one pass before
// layer 0's attention backward (attention_sum_kept) sums the terms of layers L-1..1 into the fp32
// accumulator, in the order and fp32 operations of adding them at every layer. Each reader then
// writes its term once (2 bytes an element in bf16) instead of reading and writing the fp32
// accumulator (8 bytes), about 0.4 GB a layer at GPT-2 124M, B=64, T=1024. The FP32 build gives
// the same bits both ways; the BF16 build rounds each term to bf16 before the fp32 sum (the
// layer's own dv is rounded the same way). -DVP_KEEP_V0_TERMS=0 (build variants v0_accumulate,
// sv0_accumulate) is the accumulate way, for timing the two on a GPU.
#ifndef VP_KEEP_V0_TERMS
#define VP_KEEP_V0_TERMS 1
#endif
#include "kernels/depth_attention.cuh"  // defines: DepthArgs, DepthGatherArgs, depth_attention_forward, depth_attention_backward, depth_anchor_gather
// Depth-Attention's anchor gradients are deferred: each reader layer's depth backward keeps its
// de_n (fp32, alpha's size) and its u = dL/dv~ (in its own v~ slot, which its attention backward
// writes u over: the dQ kernel, the slot's other reader, runs before the dK/dV kernel), and one
// pass at each anchor (depth_anchor_gather) sums alpha_n u and de_n q_bar / sqrt(D) over the
// readers, in the same order and fp32 operations as adding them into the anchors' accumulators at
// every reader (bit-identical to it in dev/cuda/depth_attention.cu).
// That way read and wrote two fp32 accumulators per anchor at every reader (4 |S(l)| D fp32 words
// a position, most of the depth backward's bytes) and kept a pair per anchor; on an H100
// (2026-11-27, dev/results/2026-11-27-h100.md) a build of it (variant depth_accumulate) ran 1.013x
// this one's step time, alternating in one call.
#include "kernels/gelu.cuh"         // defines: gelu_forward, gelu_backward_bias (fc bias gradient fused)
// GPT-2's MLP backward: GELU's backward in the fcproj GEMM's epilogue (cuBLASLt DGELU) in the BF16
// build. On an H100 (2026-11-26, dev/results/2026-11-26-h100-4.md) the separate pass with the fc
// bias gradient took 5.0 ms a step; the DGELU GEMM costs about 1.8 ms more than the plain one and
// the fc bias pass 1.9 ms, and a build with -DVP_GELU_FUSION=0 (the separate pass, build variant
// gelu_unfused) ran 1.011x this one's step time. The FP32 build keeps the separate kernel (accurate
// tanhf, for its tight bounds against the CPU).
#ifndef VP_GELU_FUSION
#define VP_GELU_FUSION (!FLOATX_IS_FLOAT)
#endif
// The forward's GELU in the fc GEMM's epilogue (cuBLASLt GELU_AUX_BIAS, writing both the
// pre-activation for the backward and the GELU for fcproj), BF16 build, --recompute 0: on an H200
// (2026-11-27, dev/results/2026-11-27-h200.md) the build with it ran 0.983x the step time of the
// build with the GEMM plus gelu_forward_kernel2 (3.3 ms a step), alternating in one call; in the
// next call the unfused build ran 1.010x this one's (-h200-2.md). The
// epilogue applies GELU to the fp32 pre-activation; --recompute 1 and 2 recompute GELU from the
// stored bf16 one with our kernel, so they run the unfused forward too (the backward must see
// what the forward used), and --recompute 0 then differs from them by that rounding.
// GpuOptions::gelu_forward_fusion turns it off at run time: test_gpt's recompute test compares
// the levels with it off, bit for bit. -DVP_GELU_FORWARD_FUSION=0 (build variant
// gelu_forward_unfused) builds it off; the FP32 build keeps the exact kernel.
#ifndef VP_GELU_FORWARD_FUSION
#define VP_GELU_FORWARD_FUSION (!gpu::FLOATX_IS_FLOAT)
#endif
#include "kernels/swiglu.cuh"       // defines: swiglu_forward, swiglu_backward
#include "kernels/classifier.cuh"   // defines: fused_classifier (softmax, loss, dlogits in place)
// optimizer
#include "kernels/global_norm.cuh"  // defines: global_norm_squared
#include "kernels/adamw.cuh"        // defines: adamw_update, params_from_master
// data parallel
#include "kernels/zero.cuh"         // defines: nccl_init, nccl_allreduce_sum_slices, nccl_reduce_sum_slices_to_owners, nccl_all_gather, nccl_broadcast_from_owners, nccl_wait (one rank without USE_MPI)

namespace gpu {

// ----------------------------------------------------------------------------
// Run-time options of the GPU build only (from the shared CLI: model_set_run_options; the tests
// and the benchmark set them directly)

struct GpuOptions {
    int recompute = 0;  // 0: keep every activation; 1: recompute the MLP activation; 2: also the norms
    bool overlap_reduce = true;  // data parallel: each layer's gradient all-reduce during the backward (--overlap-reduce)
    bool zero1 = false;  // data parallel --zero 1: gpt_build keeps the master weights and AdamW m, v of this rank's shard only
    bool gelu_forward_fusion = VP_GELU_FORWARD_FUSION;  // GPT-2 at recompute 0: GELU in the fc GEMM's epilogue (above)
    // the run's micro-batch shape where it is known before gpt_build (model_set_run_options), so
    // that gpt_build refuses a shape past the kernels' limits before it allocates anything
    // (check_gpu_index_limits); 0: not known (the tests and the benchmark: checked at the first forward)
    int batch_size = 0, seq_len = 0;
};

// Parameters: the layout, init and per-layer views are host/params.h, shared with the CPU build.

// ----------------------------------------------------------------------------
// Activations (kept for backward) and backward scratch, for the (B, T) of the first forward.
// Per-layer tensors are stacked along L; those that --recompute drops are one (B,T,.) buffer that
// every layer overwrites and backward refills.

struct Activations {
    floatX* encoded;  // (B,T,C) embedding output = input of layer 0
    floatX* ln1;      // (L,B,T,C); (B,T,C) with --recompute 2
    float* ln1_mean;  // (L,B,T) GPT-2
    float* ln1_rstd;  // (L,B,T)
    floatX* qkv;      // (L,B,T,W) raw projections [q | k | v]
    floatX* qk_rot;   // (L,B,T,QK) Llama: q, k after QK-norm and RoPE (what attention reads)
    float* qk_rstd;   // (L,B,T,H+Hkv) Llama QK-norm
    floatX* atty;     // (L,B,T,H*D) attention output
    float* att_lse;   // (L,B,H,T) log-sum-exp of each score row
    floatX* res_att;  // (L,B,T,C) residual stream after the attention block
    floatX* ln2;      // (L,B,T,C); (B,T,C) with --recompute 2
    float* ln2_mean;  // (L,B,T) GPT-2
    float* ln2_rstd;  // (L,B,T)
    floatX* fch;      // (L,B,T,FW) MLP pre-activation
    floatX* fch_act;  // (L,B,T,F) GELU / SwiGLU output; (B,T,F) with --recompute >= 1
    floatX* res_mlp;  // (L,B,T,C) residual stream after the block = input of layer l+1
    floatX* lnf;      // (B,T,C)
    float* lnf_mean;  // (B,T) GPT-2
    float* lnf_rstd;  // (B,T)
    floatX* logits;   // (B,T,Vp) logits, overwritten in place by dlogits (fused classifier)
    float* losses;    // (B,T)
    int* inputs;      // (B,T) token ids on the device
    int* targets;     // (B,T)
};

// Gradients of activations: scratch that each layer of the reverse loop reuses. The value paths'
// cross-layer accumulators (per source layer dK/dV sums, value_paths.md section 0) go here.
struct BackwardScratch {
    floatX* dresidual;   // (B,T,C) gradient of the residual stream, carried down through the layers
    floatX* dln;         // (B,T,C) gradient of a norm's output
    floatX* datty;       // (B,T,H*D)
    floatX* dqkv;        // (B,T,W)
    floatX* dqk_rot;     // (B,T,QK) Llama: gradient wrt q, k after RoPE
    floatX* dfch;        // (B,T,FW)
    floatX* dfch_act;    // (B,T,F); not allocated for GPT-2 with VP_GELU_FUSION (the GEMM writes dfch)
    float* att_delta;    // (B,H,T) rowsum(dO * O) of the attention backward
    floatX* att_ds;      // dQ version 8 only (attention_ds_needed): the dS^T tiles, attention_ds_elems(B, H, T)
    float* partial;      // (num_partials(BT), widest parameter-gradient row) fixed-order reduction stage 1
    double* norm_scratch;  // GLOBAL_NORM_BLOCKS partials + 1 result
    int* bucket_token;   // (BT) encoder backward: distinct tokens of the batch
    int* bucket_start;   // (BT+1)
    int* bucket_pos;     // (BT)
};

// The value paths' own buffers (value_paths.md section 6; NULL where the path has none). These
// and nothing else are what a path adds to vanilla's memory; the attention kernels read other
// layers' projections in place, and ResFormer's mixed values are written by the value projection
// itself (fixed lambda) or mixed as the kernels load them (learnable lambda), so no path keeps a
// gathered or mixed copy except Depth-Attention's v~ (which anchors must store).
//   ResFormer, SVFormer: acc_v (1, BT, KV): dL/dv^0 from layers >= 1 (dV0acc), summed before
//          layer 0's backward from the terms that each layer kept in its dead atty slot
//          (VP_KEEP_V0_TERMS), or added to by each layer's attention backward
//   ResFormer fixed, GPT-2: v_bias_scaled (KV): (1 - lambda) b_v of the current layer
//   SLA: acc_k, acc_v (L - n_l, BT, KV): per source layer j, what its reader j + n_l sent back
//   Depth: acc_k, acc_v (1, BT, KV): the anchor being processed, summed from its readers; vmix
//          (L-1, BT, KV) v~ of layers 1..L-1, in backward each layer's u once its attention
//          backward is done; alpha and depth_de (L-1, BT, Hkv, max candidates) the depth softmax's
//          weights and their gradients de
//   ResFormer learn: dlambda_partial, one float per dK/dV block of the attention backward
// Accumulators are fp32 whatever the precision: a source's gradient sums up to L-1 layers.
struct ValuePathBuffers {
    float* acc_k;
    float* acc_v;
    floatX* vmix;
    float* alpha;
    float* depth_de;
    float* dlambda_partial;
    floatX* v_bias_scaled;
    int* depth_sync;  // Depth's fused forward: its ticket counter, error word, ready flags (DepthForwardSync)
};

// One entry of an allocation plan: where the pointer goes, how many elements, of what size.
struct TensorSpec {
    void** ptr;
    size_t count;
    size_t elem;
};
#define TENSOR(field, n) TensorSpec{reinterpret_cast<void**>(&(field)), (size_t)(n), sizeof(*(field))}

constexpr size_t TENSOR_ALIGN = 256;  // every tensor starts 256-byte aligned (cuBLASLt, 16-byte vector loads)

inline size_t plan_bytes(const std::vector<TensorSpec>& specs) {
    size_t total = 0;
    for (const TensorSpec& s : specs) total += CEIL_DIV(s.count * s.elem, TENSOR_ALIGN) * TENSOR_ALIGN;
    return total;
}

// Points every tensor of the plan into one allocation; zero-sized tensors become NULL.
inline void plan_point(const std::vector<TensorSpec>& specs, char* base) {
    size_t off = 0;
    for (const TensorSpec& s : specs) {
        *s.ptr = s.count ? base + off : nullptr;
        off += CEIL_DIV(s.count * s.elem, TENSOR_ALIGN) * TENSOR_ALIGN;
    }
}

inline std::vector<TensorSpec> activation_plan(Activations& a, const ModelConfig& c, int B, int T, int recompute) {
    size_t L = c.n_layer, BT = (size_t)B * T, C = c.n_embd, D = c.head_dim, H = c.n_head, Hkv = c.n_kv_head, F = c.ffn_dim;
    bool gpt2 = c.arch == ARCH_GPT2;
    size_t W = (H + 2 * Hkv) * D, QK = (H + Hkv) * D, FW = gpt2 ? F : 2 * F;
    size_t Lnorm = recompute >= 2 ? 1 : L, Lact = recompute >= 1 ? 1 : L;
    return {TENSOR(a.encoded, BT * C),
            TENSOR(a.ln1, Lnorm * BT * C),        TENSOR(a.ln1_mean, gpt2 ? L * BT : 0), TENSOR(a.ln1_rstd, L * BT),
            TENSOR(a.qkv, L * BT * W),            TENSOR(a.qk_rot, gpt2 ? 0 : L * BT * QK), TENSOR(a.qk_rstd, (!gpt2 && c.qk_norm) ? L * BT * (H + Hkv) : 0),
            TENSOR(a.atty, L * BT * H * D),       TENSOR(a.att_lse, L * BT * H),
            TENSOR(a.res_att, L * BT * C),
            TENSOR(a.ln2, Lnorm * BT * C),        TENSOR(a.ln2_mean, gpt2 ? L * BT : 0), TENSOR(a.ln2_rstd, L * BT),
            TENSOR(a.fch, L * BT * FW),           TENSOR(a.fch_act, Lact * BT * F),
            TENSOR(a.res_mlp, L * BT * C),
            TENSOR(a.lnf, BT * C),                TENSOR(a.lnf_mean, gpt2 ? BT : 0), TENSOR(a.lnf_rstd, BT),
            TENSOR(a.logits, BT * c.padded_vocab_size), TENSOR(a.losses, BT),
            TENSOR(a.inputs, BT),                 TENSOR(a.targets, BT)};
}

// Depth-Attention bookkeeping (the same definitions as cpu/vp_depth.h, from the shared config)
inline bool depth_is_anchor(const ModelConfig& c, int l) { return l % c.vp.depth_stride == 0; }
inline int depth_num_sources(const ModelConfig& c, int l) { return ::depth_num_sources(c.vp, l); }  // |S(l)|
inline int depth_max_cands(const ModelConfig& c) { return depth_num_sources(c, c.n_layer - 1) + 1; }
inline bool depth_anchor_has_readers(const ModelConfig& c, int l) { return depth_is_anchor(c, l) && l < c.n_layer - 1; }  // every layer above reads it
// SLA: skip layers and the first skip KV head (cpu/vp_sla.h)
inline bool sla_is_skip_layer(const ModelConfig& c, int l) { return c.vp.sla_heads > 0 && l >= c.vp.sla_layers; }
inline int sla_first_skip_kv_head(const ModelConfig& c) { return c.n_kv_head - c.vp.sla_heads / (c.n_head / c.n_kv_head); }
// ResFormer with a fixed lambda: layer l >= 1's value projection writes the mixed values
// V = (1 - lambda) v^l + lambda v^0 into its own v slot (matmul_forward_lerp), so its attention
// reads plain V and routes (1 - lambda) of dV to its own slot and lambda to the v^0 accumulator.
// The raw v^l is then never stored: only the learnable lambda's gradient <G, v^0 - v^l> needs it,
// so with --resformer-lambda learn the kernels mix as they load V instead.
constexpr float RESFORMER_FIXED_LAMBDA = 0.5f;
inline bool resformer_mix_in_projection(const ModelConfig& c, int l) { return c.vp.path == VP_RESFORMER && !c.vp.resformer_learn && l > 0; }
// layers whose K/V gradient accumulators exist (fp32, (BT, KV) each)
inline int vp_num_accumulators(const ModelConfig& c) {
    switch (c.vp.path) {
        case VP_RESFORMER:
        case VP_SVFORMER: return c.n_layer > 1 ? 1 : 0;
        case VP_SLA: return c.vp.sla_heads > 0 ? std::max(0, c.n_layer - c.vp.sla_layers) : 0;
        case VP_DEPTH: return c.n_layer > 1 ? 1 : 0;  // the anchor being processed
        default: return 0;
    }
}

inline std::vector<TensorSpec> value_path_plan(ValuePathBuffers& v, const ModelConfig& c, int B, int T) {
    size_t BT = (size_t)B * T, KV = (size_t)c.n_kv_head * c.head_dim, L = c.n_layer, nacc = vp_num_accumulators(c);
    int path = c.vp.path;
    bool depth = path == VP_DEPTH, keys = path == VP_SLA || depth;
    bool learn = path == VP_RESFORMER && c.vp.resformer_learn;
    size_t depth_weights = depth ? (L - 1) * BT * c.n_kv_head * depth_max_cands(c) : 0;  // alpha and de: one row per layer >= 1, position, KV head
    return {TENSOR(v.acc_k, keys ? nacc * BT * KV : 0),
            TENSOR(v.acc_v, nacc * BT * KV),
            TENSOR(v.vmix, depth ? (L - 1) * BT * KV : 0),
            TENSOR(v.alpha, depth_weights),
            TENSOR(v.depth_de, depth_weights),
            TENSOR(v.dlambda_partial, learn ? attention_dkdv_blocks(B, T, c.n_kv_head, c.head_dim) : 0),
            TENSOR(v.v_bias_scaled, path == VP_RESFORMER && !learn && c.arch == ARCH_GPT2 ? KV : 0),
            TENSOR(v.depth_sync, depth ? depth_forward_sync_ints(B, T, c.n_kv_head) : 0)};
}

inline std::vector<TensorSpec> scratch_plan(BackwardScratch& s, const ModelConfig& c, int B, int T) {
    size_t BT = (size_t)B * T, C = c.n_embd, D = c.head_dim, H = c.n_head, Hkv = c.n_kv_head, F = c.ffn_dim;
    bool gpt2 = c.arch == ARCH_GPT2;
    size_t W = (H + 2 * Hkv) * D, QK = (H + Hkv) * D, FW = gpt2 ? F : 2 * F;
    size_t widest = std::max({2 * C, FW, W, 2 * D});  // the widest row of any stage-1 partial sum
    // the norms' and GELU's backward fuse stage 1 into their row pass, with more (shorter) row blocks
    size_t partial_floats = std::max({(size_t)num_partials((int)BT) * widest, layernorm_backward_partial_floats((int)BT, (int)C),
                                      rmsnorm_backward_partial_floats((int)BT, (int)C), gelu_backward_bias_partial_floats((int)BT, (int)F)});
    return {TENSOR(s.dresidual, BT * C), TENSOR(s.dln, BT * C),          TENSOR(s.datty, BT * H * D), TENSOR(s.dqkv, BT * W),
            TENSOR(s.dqk_rot, gpt2 ? 0 : BT * QK), TENSOR(s.dfch, BT * FW), TENSOR(s.dfch_act, gpt2 && VP_GELU_FUSION ? 0 : BT * F), TENSOR(s.att_delta, BT * H),
            TENSOR(s.att_ds, attention_ds_needed() ? attention_ds_elems(B, c.n_head, T) : 0),
            TENSOR(s.partial, partial_floats), TENSOR(s.norm_scratch, GLOBAL_NORM_BLOCKS + 1),
            TENSOR(s.bucket_token, BT), TENSOR(s.bucket_start, BT + 1), TENSOR(s.bucket_pos, BT)};
}

// ----------------------------------------------------------------------------
// The model

struct GpuModel {
    ModelConfig config;
    GpuOptions options;  // set before the first forward (model_set_run_options, or directly by tests)
    std::vector<ParamSpec> specs;
    size_t num_params = 0;
    // parameters, all in param_specs order: the floatX weights the kernels read (every element),
    // fp32 gradients (every element), and the fp32 master weights and AdamW moments of the
    // elements [shard_offset, shard_offset + shard_count): all of them (0, num_params), or under
    // ZeRO-1 (zero_shard) this rank's dist_shard only ("Data parallel (NCCL)"). In the FP32 build
    // the master weights are the weights: master is a view into params_memory.
    float* master = nullptr;
    floatX* params_memory = nullptr;  // num_params, padded under ZeRO-1 to W * slot (the in-place all-gather)
    float* grads_memory = nullptr;
    float* adam_m = nullptr;
    float* adam_v = nullptr;
    size_t shard_offset = 0, shard_count = 0;
    double* weights_sumsq_scratch = nullptr;  // GLOBAL_NORM_BLOCKS partials + 1 result: model_weights_sumsq
    bool has_optimizer_state = false;  // false until the first update (or a load with optimizer state), as the CPU build
    bool zero_shard = false;
    ParamTensors<floatX> params;
    ParamTensors<float> grads;
    float* rope_cos = nullptr;  // (maxT, D/2) Llama
    float* rope_sin = nullptr;
    // activations and scratch, allocated for the (B, T) of the first forward; smaller ones reuse them
    int alloc_B = 0, alloc_T = 0;
    Activations acts;
    BackwardScratch scratch;
    ValuePathBuffers vpb;
    std::vector<char> acc_written;  // backward: accumulator j has had its first contribution (then +=)
    int depth_sync_gen = 0;          // Depth's fused forward: the last launch's generation (DepthForwardSync)
    bool depth_fused_forward_ran = false;  // in the current forward (depth_forward_check)
    // ResFormer's learnable lambdas (L) in fp32, as the attention kernels read them: a view into
    // the master weights, or under ZeRO-1 (where one rank holds them) a copy on every rank
    float* lambda_f32 = nullptr;
    bool lambda_f32_owned = false;
    char* acts_memory = nullptr;
    // host side: pinned staging buffers, the encoder's token buckets
    int* h_inputs = nullptr;
    int* h_targets = nullptr;
    float* h_losses = nullptr;
    double* h_norm = nullptr;
    int* h_buckets = nullptr;  // [tokens (BT) | starts (BT+1) | positions (BT)]
    std::vector<int> bucket_token, bucket_start, bucket_pos, bucket_count;
    int num_buckets = 0;
    // the batch of the last forward
    int B = 0, T = 0;
    float mean_loss = -1.0f;     // of the last forward with targets
    bool dlogits_ready = false;  // the last forward left dlogits in acts.logits (backward may run)
    bool keep_logits = false;    // tests: leave the logits in place (no dlogits)
    cudaStream_t stream = nullptr;
    size_t bytes_allocated = 0;  // device memory held by this model (the cuBLASLt workspace aside)
    double peak_tflops = 0;      // what MFU divides by (device_peak_tflops); 0 = unknown, no MFU
    // data parallel (model_dist_*): during the last backward of a step, each layer's gradients are
    // summed over the ranks on comm_stream while the backward goes on to the layers below
    bool reduce_during_backward = false;
    cudaStream_t comm_stream = nullptr;  // created on first use, after `stream`
    cudaEvent_t grads_ready = nullptr;   // recorded on `stream` when a layer's gradients are final
};

// Device memory check before a large allocation: a clear error with the figure it needed.
inline void check_device_memory(size_t needed, const char* what, const char* hint) {
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    if (needed > free_b)
        runtime_error(hint, "not enough GPU memory for %s: needs %s, the device has %s free of %s", what, human_bytes(needed).c_str(),
                      human_bytes(free_b).c_str(), human_bytes(total_b).c_str());
}

// The GPU kernels' index and launch limits, checked before anything is allocated. Tensors are
// addressed with 64-bit offsets (B*T*Vp logits, B*T*F activations, 8e9 parameters and the
// per-layer slices of them: audited at GPT-2 1.5B, B=128, T=4096, and a Llama-3-8B shape at
// B=8, T=8192), so what bounds a shape is what stays 32-bit or lands in a bounded launch setting:
//   - B*T: the kernels take the rows as int (the trainer's flag check bounds it too; the tests
//     and the benchmark call the model directly);
//   - B x heads, at most 65535: the attention kernels' gridDim.y, one block row per (sequence,
//     head) (attention_grid_fits);
//   - gridDim.y, at most 65535, also in the fixed-order parameter-gradient sums (kernels/reduce.cuh) give
//     each block row of their stage-1 grid PARTIAL_ROWS = 256 rows of B*T (bias_backward: GPT-2's
//     biases; qknorm_backward: QK-norm's gains), and GELU's backward with the fc bias gradient
//     FUSED_PARTIAL_ROWS = 64 (GPT-2 where GELU's backward is not in the GEMM's epilogue: the FP32
//     build, -DVP_GELU_FUSION=0): at most 16,776,960 and 4,194,240 tokens a micro-batch;
//   - shared memory: the norms' backward keeps nacc fp32 column sums of C per warp (one warp at
//     least): LayerNorm's 3, RMSNorm's 1: C <= 19200 (19328 in FP32) and 58112 on an H100 (227 KiB).
// A shape past one is a usage error naming the limit. B = T = 0: the model's own limits only
// (gpt_build before the batch shape is known). Any other limit of the kernels belongs here too.
inline void check_gpu_index_limits(const ModelConfig& c, int B, int T) {
    bool gpt2 = c.arch == ARCH_GPT2;
    int C = c.n_embd, nacc = gpt2 ? 3 : 1;  // LayerNorm: dw, db and the column sums of dinp (a bias gradient); RMSNorm: dw
    size_t smem = (size_t)fused_block_warps(nacc, C) * nacc * fused_padded_cols(C) * sizeof(float);
    if (smem > (size_t)cuda_max_smem_optin())
        usage_error("choose a smaller --dim; a checkpoint of such a width runs in ./train_cpu",
                    "the GPU %s backward keeps %d fp32 sum%s per column of --dim %d for each warp in shared memory: %zu bytes, more than the %d "
                    "bytes a block may have on this GPU",
                    gpt2 ? "LayerNorm" : "RMSNorm", nacc, nacc == 1 ? "" : "s", C, smem, cuda_max_smem_optin());
    if (B <= 0 || T <= 0) return;
    long bt = (long)B * T;
    const char* hint = "lower --batch-size or --seq-len (--total-batch-tokens accumulates the gradients of several micro-batches)";
    if (bt > INT32_MAX)
        usage_error(hint, "--batch-size %d x --seq-len %d = %ld tokens per micro-batch; the GPU kernels count them in 32 bits: at most %d", B, T, bt,
                    INT32_MAX);
    if (!attention_grid_fits(B, c.n_head))  // one block row per (sequence, head) in the attention kernels' grid y
        usage_error("lower --batch-size (--total-batch-tokens accumulates the gradients of several micro-batches)",
                    "--batch-size %d x %d heads = %ld attention blocks in CUDA's grid y, at most %ld: --batch-size at most %ld", B, c.n_head,
                    (long)B * c.n_head, CUDA_MAX_GRID_Y, CUDA_MAX_GRID_Y / c.n_head);
    int rows = 0;  // rows of B*T per block row of the widest such grid this model launches
    const char* sums = nullptr;
    if (gpt2 && !VP_GELU_FUSION) rows = FUSED_PARTIAL_ROWS, sums = "the fc bias gradient in GELU's backward";
    else if (gpt2) rows = PARTIAL_ROWS, sums = "the bias gradients";
    else if (c.qk_norm) rows = PARTIAL_ROWS, sums = "QK-norm's gain gradients";
    if (rows && bt > CUDA_MAX_GRID_Y * rows)
        usage_error(hint,
                    "--batch-size %d x --seq-len %d = %ld tokens per micro-batch; the GPU build sums %s over blocks of %d tokens, at most %ld of them "
                    "(CUDA's gridDim.y limit): at most %ld tokens",
                    B, T, bt, sums, rows, CUDA_MAX_GRID_Y, CUDA_MAX_GRID_Y * rows);
}

inline void* model_device_alloc(GpuModel* m, size_t bytes, const char* what) {
    void* p = cuda_malloc_check(bytes, what);
    m->bytes_allocated += bytes;
    return p;
}

// The dense peak FLOP/s (in TFLOP/s) of this build's math on the device, from NVIDIA's datasheets
// without sparsity: bf16 tensor cores 989.4 (H100 SXM, H200), 835 (H100 NVL, H200 NVL: half their
// datasheets' 1,671 with sparsity), 756 (H100 PCIe), 312 (A100); FP32 builds the fp32
// non-tensor-core peak, 67 / 60 / 51 / 19.5. 0 for any other device, unless the
// environment gives VP_PEAK_TFLOPS (the trainer; dev/cuda/bench_gpt takes --peak-tflops).
inline double device_peak_tflops(const cudaDeviceProp& p) {
    std::string name = p.name;
    bool h100 = name.find("H100") != std::string::npos, h200 = name.find("H200") != std::string::npos, a100 = name.find("A100") != std::string::npos;
    bool pcie = name.find("PCIe") != std::string::npos;
    // the H100 NVL (a PCIe card at a higher clock than the H100 PCIe) has its own datasheet figure
    bool nvl = name.find("NVL") != std::string::npos;
#ifdef ENABLE_FP32
    if (h100 || h200) return pcie ? 51.0 : nvl ? 60.0 : 67.0;
    if (a100) return 19.5;
#else
    if (h100 || h200) return pcie ? 756.0 : nvl ? 835.0 : 989.4;
    if (a100) return 312.0;
#endif
    return 0;
}

inline double peak_tflops_for_mfu(const cudaDeviceProp& p) {
    double v = env_number("VP_PEAK_TFLOPS", 0, 0, 1e6);  // TFLOP/s, e.g. 989.4 (H100 SXM, dense bf16)
    return v > 0 ? v : device_peak_tflops(p);
}

inline double model_peak_tflops(const GpuModel* m) { return m->peak_tflops; }

// Where ResFormer's lambdas (the vp_lambda tensor, L floats) start in the flat parameter vector.
inline size_t lambda_offset(const GpuModel* m) { return (size_t)(m->params.vp_lambda - m->params_memory); }

inline void gpt_build(GpuModel* m, const ModelConfig& c) {
    if (c.vp.path != VALUE_PATH_ID)
        runtime_error("rebuild with make train VALUE_PATH=... for this model's path", "a VALUE_PATH=%s model in a binary built for VALUE_PATH=%s",
                      value_path_name(c.vp.path), value_path_name(VALUE_PATH_ID));
    if (c.vp.path == VP_DEPTH && depth_num_sources(c, c.n_layer - 1) > DEPTH_MAX_SOURCES)
        usage_error("raise --depth-stride", "the GPU Depth-Attention kernels read at most %d anchors per layer; --depth-stride %d on %d layers gives %d",
                    DEPTH_MAX_SOURCES, c.vp.depth_stride, c.n_layer, depth_num_sources(c, c.n_layer - 1));
    // (a checkpoint's shape cannot be changed by flags: the hint says what else to do with it)
    if (!attention_head_dim_supported(c.head_dim))
        usage_error("choose --dim and --heads (or, for llama, --head-dim) so that the head dim is one of these; a checkpoint of another head dim runs in ./train_cpu",
                    "the GPU attention kernels support head dims 16, 32, 64 and 128; this model has %d", c.head_dim);
    if (c.n_embd % 8 || c.ffn_dim % 8)
        usage_error("choose them so; a checkpoint of such a shape runs in ./train_cpu", "the GPU kernels need --dim (%d) and --ffn-dim (%d) to be multiples of 8",
                    c.n_embd, c.ffn_dim);
    // no GPU, no driver, or a driver older than the CUDA toolkit this was built with (the last two
    // both read as cudaErrorInsufficientDriver): CUDA's own words say which
    int dev_count = 0;
    cudaError_t count_err = cudaGetDeviceCount(&dev_count);
    if (count_err != cudaSuccess || dev_count == 0)
        runtime_error("run on a machine with an NVIDIA GPU and a driver at least as new as this CUDA toolkit (nvidia-smi lists the GPU and the "
                      "newest CUDA its driver runs), or use ./train_cpu",
                      "no CUDA device found (%s)", count_err == cudaSuccess ? "no GPU is visible" : cudaGetErrorString(count_err));
    check_device_runs_this_build();  // compute capability 8.0+, and code for it in this binary
    check_gpu_index_limits(c, m->options.batch_size, m->options.seq_len);  // before the first allocation
    m->config = c;
    m->specs = param_specs(c);
    m->num_params = 0;
    for (const ParamSpec& s : m->specs) {
        // the norms and the embedding read parameter tensors with 16-byte loads, so each must start
        // at a multiple of 8 elements of the packed buffer: true of every tensor the shape checks
        // above allow (vp_lambda, the one odd-sized tensor, is last); kept true by this assert
        KERNEL_ASSERT(s.count == 0 || m->num_params % 8 == 0);
        m->num_params += s.count;
    }
    cudaCheck(cudaStreamCreate(&m->stream));
    matmul_init();

    // ZeRO-1: the master weights and moments of this rank's shard only, the weights padded to
    // W slots; otherwise one shard of everything
    size_t n = m->num_params;
    int shards = m->options.zero1 ? dist_world() : 1;
    DistShard own = dist_shard(n, m->options.zero1 ? dist_rank() : 0, shards);
    size_t n_padded = dist_slot(n, shards) * shards, sc = std::max<size_t>(1, own.count);
    m->zero_shard = m->options.zero1;
    m->shard_offset = own.offset;
    m->shard_count = own.count;
    size_t bytes = n_padded * sizeof(floatX) + n * sizeof(float) + sc * sizeof(float) * (FLOATX_IS_FLOAT ? 2 : 3);
    const char* hint = m->options.zero1     ? "use a smaller model, or more GPUs"
                       : dist_world() > 1 ? "use a smaller model, or --zero 1 (shards the master weights and AdamW state)"
                                          : "use a smaller model, or several GPUs under mpirun with --zero 1 (docs/distributed.md)";
    check_device_memory(bytes, "the weights, gradients, master weights and AdamW state", hint);
    m->params_memory = (floatX*)model_device_alloc(m, n_padded * sizeof(floatX), "weights");
    m->master = FLOATX_IS_FLOAT ? (float*)m->params_memory + own.offset : (float*)model_device_alloc(m, sc * sizeof(float), "master weights");
    m->grads_memory = (float*)model_device_alloc(m, n * sizeof(float), "gradients");
    m->adam_m = (float*)model_device_alloc(m, sc * sizeof(float), "AdamW m");
    m->adam_v = (float*)model_device_alloc(m, sc * sizeof(float), "AdamW v");
    m->weights_sumsq_scratch = (double*)model_device_alloc(m, (GLOBAL_NORM_BLOCKS + 1) * sizeof(double), "weights check");
    cudaCheck(cudaMemset(m->params_memory, 0, n_padded * sizeof(floatX)));
    if (!FLOATX_IS_FLOAT) cudaCheck(cudaMemset(m->master, 0, sc * sizeof(float)));
    cudaCheck(cudaMemset(m->grads_memory, 0, n * sizeof(float)));
    cudaCheck(cudaMemset(m->adam_m, 0, sc * sizeof(float)));
    cudaCheck(cudaMemset(m->adam_v, 0, sc * sizeof(float)));
    point_param_tensors(&m->params, m->params_memory, m->specs);
    point_param_tensors(&m->grads, m->grads_memory, m->specs);
    if (m->params.vp_lambda) {
        if (m->zero_shard) {
            m->lambda_f32 = (float*)model_device_alloc(m, c.n_layer * sizeof(float), "ResFormer's lambdas (fp32 copy)");
            m->lambda_f32_owned = true;
        } else {
            m->lambda_f32 = m->master + lambda_offset(m);
        }
    }
    if (c.arch == ARCH_LLAMA) {
        // the same tables as the CPU reference: computed in double, rounded to float
        int half = c.head_dim / 2;
        std::vector<float> cs((size_t)c.max_seq_len * half), sn((size_t)c.max_seq_len * half);
        for (int t = 0; t < c.max_seq_len; t++)
            for (int i = 0; i < half; i++) {
                double freq = std::pow((double)c.rope_theta, -2.0 * i / c.head_dim);
                cs[(size_t)t * half + i] = (float)std::cos(t * freq);
                sn[(size_t)t * half + i] = (float)std::sin(t * freq);
            }
        m->rope_cos = (float*)model_device_alloc(m, cs.size() * sizeof(float), "rope table");
        m->rope_sin = (float*)model_device_alloc(m, sn.size() * sizeof(float), "rope table");
        cudaCheck(cudaMemcpy(m->rope_cos, cs.data(), cs.size() * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(m->rope_sin, sn.data(), sn.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
    cudaCheck(cudaDeviceSynchronize());
    cudaDeviceProp prop;
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    m->peak_tflops = peak_tflops_for_mfu(prop);
    printf("device: %s (%d SMs, %.1f GiB), %s, --recompute %d, ", prop.name, prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, PRECISION_NAME,
           m->options.recompute);
    if (m->peak_tflops > 0) printf("MFU of %g TFLOP/s\n", m->peak_tflops);
    else printf("no MFU (peak unknown: set VP_PEAK_TFLOPS)\n");
    if (m->zero_shard)
        printf("ZeRO-1: master weights and AdamW state of %zu of %zu parameters on this rank; weights, gradients and state: %zu bytes\n", m->shard_count, n,
               bytes);
}

// Where all num_params fp32 weights are put while they are loaded (an init or a checkpoint):
// the weights themselves in the FP32 build (master is a view into them); in the BF16 build the
// gradient buffer, free at this point (a load comes before any backward; params_from_staging
// zeroes it afterwards), so that no extra num_params floats of device memory are needed.
inline float* params_staging(GpuModel* m) { return FLOATX_IS_FLOAT ? (float*)(void*)m->params_memory : m->grads_memory; }

// The staged fp32 weights into the model: the floatX weights the kernels read, the master weights
// of this rank's shard, ResFormer's fp32 lambdas.
inline void params_from_staging(GpuModel* m) {
    size_t n = m->num_params;
    float* staged = params_staging(m);
    if (m->lambda_f32_owned)
        cudaCheck(cudaMemcpyAsync(m->lambda_f32, staged + lambda_offset(m), m->config.n_layer * sizeof(float), cudaMemcpyDeviceToDevice, m->stream));
    if (!FLOATX_IS_FLOAT) {
        params_from_master(m->params_memory, staged, n, m->stream);
        cudaCheck(cudaMemcpyAsync(m->master, staged + m->shard_offset, m->shard_count * sizeof(float), cudaMemcpyDeviceToDevice, m->stream));
        cudaCheck(cudaMemsetAsync(m->grads_memory, 0, n * sizeof(float), m->stream));
    }
    cudaCheck(cudaStreamSynchronize(m->stream));
}

inline void upload_params(GpuModel* m, const float* host) {
    cudaCheck(cudaStreamSynchronize(m->stream));
    cudaCheck(cudaMemcpy(params_staging(m), host, m->num_params * sizeof(float), cudaMemcpyHostToDevice));
    params_from_staging(m);
}

// Fills the parameters from the seed exactly as the CPU reference does (on the host, then one
// copy): every tensor draws from its own stream, the padded vocabulary rows start at zero.
inline void gpt_init_params(GpuModel* m, uint64_t seed) {
    std::vector<float> host(m->num_params);
    init_params_from_seed(m->specs, m->config, host.data(), seed);
    upload_params(m, host.data());
}

inline void gpt_free(GpuModel* m) {
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaFree(m->params_memory));
    if (!FLOATX_IS_FLOAT) cudaCheck(cudaFree(m->master));  // FP32: a view into params_memory
    if (m->lambda_f32_owned) cudaCheck(cudaFree(m->lambda_f32));
    cudaCheck(cudaFree(m->grads_memory));
    cudaCheck(cudaFree(m->adam_m));
    cudaCheck(cudaFree(m->adam_v));
    cudaCheck(cudaFree(m->weights_sumsq_scratch));
    cudaCheck(cudaFree(m->rope_cos));
    cudaCheck(cudaFree(m->rope_sin));
    cudaCheck(cudaFree(m->acts_memory));
    cudaCheck(cudaFreeHost(m->h_inputs));
    cudaCheck(cudaFreeHost(m->h_targets));
    cudaCheck(cudaFreeHost(m->h_losses));
    cudaCheck(cudaFreeHost(m->h_norm));
    cudaCheck(cudaFreeHost(m->h_buckets));
    if (m->stream) cudaCheck(cudaStreamDestroy(m->stream));
    if (m->comm_stream) cudaCheck(cudaStreamDestroy(m->comm_stream));
    if (m->grads_ready) cudaCheck(cudaEventDestroy(m->grads_ready));
    *m = GpuModel();
}

// Activations and scratch for (B, T): one allocation, after checking that it fits.
inline void gpt_ensure_activations(GpuModel* m, int B, int T) {
    if (m->acts_memory) {
        if ((size_t)B * T > (size_t)m->alloc_B * m->alloc_T || T > m->alloc_T)
            runtime_error(nullptr, "internal: forward with B=%d T=%d exceeds the allocated B=%d T=%d", B, T, m->alloc_B, m->alloc_T);
        return;
    }
    const ModelConfig& c = m->config;
    if (T > c.max_seq_len) runtime_error("lower --seq-len", "T=%d exceeds the model's max sequence length %d", T, c.max_seq_len);
    check_gpu_index_limits(c, B, T);
    std::vector<TensorSpec> plan = activation_plan(m->acts, c, B, T, m->options.recompute);
    std::vector<TensorSpec> splan = scratch_plan(m->scratch, c, B, T), vplan = value_path_plan(m->vpb, c, B, T);
    plan.insert(plan.end(), splan.begin(), splan.end());
    plan.insert(plan.end(), vplan.begin(), vplan.end());
    size_t bytes = plan_bytes(plan);
    char what[160];
    snprintf(what, sizeof(what), "the activations of B=%d T=%d (--recompute %d)", B, T, m->options.recompute);
    check_device_memory(bytes, what, m->options.recompute < 2 ? "lower --batch-size or --seq-len, or pass --recompute 2" : "lower --batch-size or --seq-len");
    m->acts_memory = (char*)model_device_alloc(m, bytes, what);
    // zeroed once, so that no kernel ever reads uninitialised memory (e.g. padded rows)
    cudaCheck(cudaMemset(m->acts_memory, 0, bytes));
    plan_point(plan, m->acts_memory);
    m->alloc_B = B;
    m->alloc_T = T;
    size_t BT = (size_t)B * T;
    cudaCheck(cudaMallocHost((void**)&m->h_inputs, BT * sizeof(int)));
    cudaCheck(cudaMallocHost((void**)&m->h_targets, BT * sizeof(int)));
    cudaCheck(cudaMallocHost((void**)&m->h_losses, BT * sizeof(float)));
    cudaCheck(cudaMallocHost((void**)&m->h_norm, sizeof(double)));
    cudaCheck(cudaMallocHost((void**)&m->h_buckets, (3 * BT + 1) * sizeof(int)));
}

// Per-layer activation pointers (the recompute-aware "seek" of every per-layer tensor).
struct LayerActs {
    floatX *ln1, *qkv, *qk_rot, *atty, *res_att, *ln2, *fch, *fch_act, *res_mlp;
    float *ln1_mean, *ln1_rstd, *qk_rstd, *att_lse, *ln2_mean, *ln2_rstd;
    const floatX* x;  // the block's input: the embedding for layer 0, else the previous block's output
};

inline LayerActs layer_acts(GpuModel* m, int l) {
    const ModelConfig& c = m->config;
    Activations& a = m->acts;
    size_t BT = (size_t)m->B * m->T, lBT = (size_t)l * BT, C = c.n_embd, D = c.head_dim, H = c.n_head, Hkv = c.n_kv_head, F = c.ffn_dim;
    size_t W = (H + 2 * Hkv) * D, QK = (H + Hkv) * D, FW = c.arch == ARCH_GPT2 ? F : 2 * F;
    size_t lnorm = m->options.recompute >= 2 ? 0 : lBT, lact = m->options.recompute >= 1 ? 0 : lBT;
    auto at = [](auto* base, size_t off) { return base ? base + off : nullptr; };
    LayerActs la;
    la.ln1 = a.ln1 + lnorm * C;
    la.qkv = a.qkv + lBT * W;
    la.qk_rot = at(a.qk_rot, lBT * QK);
    la.atty = a.atty + lBT * H * D;
    la.res_att = a.res_att + lBT * C;
    la.ln2 = a.ln2 + lnorm * C;
    la.fch = a.fch + lBT * FW;
    la.fch_act = a.fch_act + lact * F;
    la.res_mlp = a.res_mlp + lBT * C;
    la.ln1_mean = at(a.ln1_mean, lBT);
    la.ln1_rstd = a.ln1_rstd + lBT;
    la.qk_rstd = at(a.qk_rstd, lBT * (H + Hkv));
    la.att_lse = a.att_lse + lBT * H;
    la.ln2_mean = at(a.ln2_mean, lBT);
    la.ln2_rstd = a.ln2_rstd + lBT;
    la.x = l == 0 ? a.encoded : a.res_mlp + (lBT - BT) * C;
    return la;
}

// ----------------------------------------------------------------------------
// Value paths (value_paths.md; the CPU policies in cpu/vp_*.h are the reference). A path changes
// only which K/V each layer's attention reads and where the gradients of those go; here that is
// five hooks: attention_forward_args, attention_backward_args (pointers and routes handed to the
// attention kernels), value_path_attention_forward / value_path_attention_backward (the attention
// kernels, with Depth-Attention's depth softmax by its own kernels or inside them), and
// value_path_after_attention_backward (ResFormer's dlambda). The backward visits layers L-1..0, so a source layer's accumulator is
// complete before its own backward reads it.

// A layer's own projections as vanilla attention reads them (and their gradients' slots):
// GPT-2: q, k, v raw in qkv (rows of W); Llama: q, k after QK-norm/RoPE in qk_rot (rows of QK),
// v raw in qkv. v is NULL for SVFormer layers >= 1 (no value projection).
struct OwnQKV {
    floatX *q, *k, *v;
    long qk_rs, v_rs;
};

// The slots in the fused layout: GPT-2 has q, k, v raw in a (BT, W) buffer; Llama has q, k rotated
// in a (BT, QK) buffer and v raw in the (BT, W) one. Activations and their gradients alike.
inline OwnQKV qkv_slots(const ModelConfig& c, floatX* qkv, floatX* qk_rot, bool has_v) {
    int H = c.n_head, Hkv = c.n_kv_head, D = c.head_dim, QK = (H + Hkv) * D, W = QK + Hkv * D;
    bool gpt2 = c.arch == ARCH_GPT2;
    OwnQKV o;
    o.q = gpt2 ? qkv : qk_rot;
    o.k = o.q + H * D;
    o.qk_rs = gpt2 ? W : QK;
    o.v = has_v ? qkv + QK : nullptr;
    o.v_rs = W;
    return o;
}

inline OwnQKV own_qkv(GpuModel* m, int l) {
    LayerActs la = layer_acts(m, l);
    return qkv_slots(m->config, la.qkv, la.qk_rot, l < value_path_value_proj_layers(m->config.vp, m->config.n_layer));
}

inline OwnQKV own_qkv_grads(GpuModel* m) { return qkv_slots(m->config, m->scratch.dqkv, m->scratch.dqk_rot, true); }

inline size_t kv_layer_elems(GpuModel* m) { return (size_t)m->B * m->T * m->config.n_kv_head * m->config.head_dim; }
inline floatX* depth_vmix(GpuModel* m, int l) { return m->vpb.vmix + (size_t)(l - 1) * kv_layer_elems(m); }  // l >= 1
inline size_t depth_alpha_layer_elems(GpuModel* m) { return (size_t)m->B * m->T * m->config.n_kv_head * depth_max_cands(m->config); }
inline float* depth_alpha(GpuModel* m, int l) { return m->vpb.alpha + (size_t)(l - 1) * depth_alpha_layer_elems(m); }
inline float* depth_de(GpuModel* m, int l) { return m->vpb.depth_de + (size_t)(l - 1) * depth_alpha_layer_elems(m); }

// Which q, K, V layer l's attention reads.
inline AttentionArgs attention_forward_args(GpuModel* m, int l) {
    const ModelConfig& c = m->config;
    LayerActs la = layer_acts(m, l);
    OwnQKV own = own_qkv(m, l);
    AttentionArgs aa;
    aa.B = m->B;
    aa.T = m->T;
    aa.H = c.n_head;
    aa.Hkv = c.n_kv_head;
    aa.D = c.head_dim;
    aa.h0 = 0;
    aa.h1 = c.n_head;
    aa.q = own.q;
    aa.k = own.k;
    aa.q_rs = aa.k_rs = own.qk_rs;
    aa.v = own.v;
    aa.v_rs = own.v_rs;
    aa.out = la.atty;
    aa.lse = la.att_lse;
    if (l == 0) return aa;  // layer 0 is vanilla in every path
    switch (c.vp.path) {
        case VP_RESFORMER: {  // V = (1 - lambda_l) v^l + lambda_l v^0: already in the v slot, or mixed as the kernel loads V
            if (resformer_mix_in_projection(c, l)) break;
            OwnQKV first = own_qkv(m, 0);
            aa.v_mix = first.v;
            aa.v_mix_rs = first.v_rs;
            aa.lambda = 0.5f;
            aa.lambda_ptr = c.vp.resformer_learn ? m->lambda_f32 + l : nullptr;
            break;
        }
        case VP_SVFORMER: {  // V = v^0, read in place
            OwnQKV first = own_qkv(m, 0);
            aa.v = first.v;
            aa.v_rs = first.v_rs;
            break;
        }
        case VP_SLA:  // skip heads read the source layer's own K/V in place (CHAIN: resolved to l mod n_l)
            if (sla_is_skip_layer(c, l)) {
                OwnQKV src = own_qkv(m, c.vp.sla_chain ? l % c.vp.sla_layers : l - c.vp.sla_layers);
                aa.kv_alt_from = sla_first_skip_kv_head(c);
                aa.k_alt = src.k;
                aa.k_alt_rs = src.qk_rs;
                aa.v_alt = src.v;
                aa.v_alt_rs = src.v_rs;
            }
            break;
        case VP_DEPTH:  // V = v~^l, which value_path_attention_forward makes first
            aa.v = depth_vmix(m, l);
            aa.v_rs = c.n_kv_head * c.head_dim;
            break;
    }
    return aa;
}

// Where the gradients of layer l's attention go: dq into the own query slot (GPT-2: dqkv; Llama:
// dqk_rot, then back through RoPE and QK-norm), dK/dV into the own k/v slots and, by the path's
// routes, into other layers' fp32 accumulators; what later readers sent into this layer's
// accumulator is added on the way (KVGradRoute). Reads m->acc_written: an accumulator's first
// contribution overwrites (no zeroing pass), and one nobody wrote is not read.
inline AttentionArgs attention_backward_args(GpuModel* m, int l) {
    const ModelConfig& c = m->config;
    BackwardScratch& s = m->scratch;
    ValuePathBuffers& vb = m->vpb;
    AttentionArgs aa = attention_forward_args(m, l);
    OwnQKV g = own_qkv_grads(m);
    aa.dout = s.datty;
    aa.delta = s.att_delta;
    aa.ds = s.att_ds;
    aa.ds_elems = s.att_ds ? attention_ds_elems(m->alloc_B, c.n_head, m->alloc_T) : 0;
    aa.dq = g.q;
    aa.dk = g.k;
    aa.dq_rs = aa.dk_rs = g.qk_rs;
    aa.dv = g.v;
    aa.dv_rs = g.v_rs;
    aa.accumulate_dkv = false;
    size_t layer = kv_layer_elems(m);
    auto written = [&](int j) { return j < (int)m->acc_written.size() && m->acc_written[j]; };
    switch (c.vp.path) {
        case VP_RESFORMER:
        case VP_SVFORMER:
            if (l == 0) {
                if (written(0)) aa.dv_route.add = vb.acc_v;  // dL/dv^0 from every later layer
            } else {
                // ResFormer: own (1 - lambda) G, acc += lambda G (the kernel takes lambda from the mix);
                // SVFormer: no value projection here, acc += G. Kept: the term goes to the start
                // of this layer's atty ((BT, KV) in its (BT, H*D)), summed before layer 0
                // (v0_kept_sum_args)
                if (VP_KEEP_V0_TERMS) {
                    aa.dv_route.keep = layer_acts(m, l).atty;
                } else {
                    aa.dv_route.src = vb.acc_v;
                    aa.dv_route.src_overwrite = !written(0);
                }
                aa.dv_route.from_head = 0;
                if (c.vp.path == VP_SVFORMER) {
                    aa.dv = nullptr;
                    aa.dv_route.src_scale = 1.0f;
                } else if (resformer_mix_in_projection(c, l)) {  // no v_mix in the args: the scales are the route's
                    aa.dv_route.own_scale = 1.0f - RESFORMER_FIXED_LAMBDA;
                    aa.dv_route.src_scale = RESFORMER_FIXED_LAMBDA;
                } else if (c.vp.resformer_learn) {
                    aa.dlambda_partial = vb.dlambda_partial;
                }
            }
            break;
        case VP_SLA: {
            int split = sla_first_skip_kv_head(c);
            for (KVGradRoute* r : {&aa.dk_route, &aa.dv_route}) {
                r->chain = c.vp.sla_chain != 0;
                r->add_from_head = split;  // readers only ever read (and send back) skip heads
                r->from_head = split;
                r->own_scale = 0.0f;
                r->src_scale = 1.0f;
            }
            if (written(l)) {  // this layer is a source: its reader l + n_l sent gradient back
                aa.dk_route.add = vb.acc_k + l * layer;
                aa.dv_route.add = vb.acc_v + l * layer;
            }
            if (sla_is_skip_layer(c, l)) {
                int src = l - c.vp.sla_layers;
                aa.dk_route.src = vb.acc_k + src * layer;
                aa.dv_route.src = vb.acc_v + src * layer;
                aa.dk_route.src_overwrite = aa.dv_route.src_overwrite = !written(src);
            }
            break;
        }
        case VP_DEPTH: {
            if (depth_anchor_has_readers(c, l)) {
                // step 1: what its readers sent (value_path_before_attention_backward summed it
                // into the pair), before the depth backward
                aa.dk_route.add = vb.acc_k;
                aa.dv_route.add = vb.acc_v;
            }
            if (l > 0) {  // the core's dL/dv~ (+ A_v) = u, over v~ itself (read by the kernels, dead after
                          // them; the dQ kernel runs first): the depth backward splits it, the gathers read it
                aa.dv = depth_vmix(m, l);
                aa.dv_rs = c.n_kv_head * c.head_dim;
            }
            break;
        }
    }
    return aa;
}

// Depth-Attention's per-layer arguments: the layer's own q/k/v and its anchors' (kappa, nu).
inline DepthArgs depth_args(GpuModel* m, int l) {
    const ModelConfig& c = m->config;
    OwnQKV own = own_qkv(m, l);
    DepthArgs d;
    d.BT = m->B * m->T;
    d.H = c.n_head;
    d.Hkv = c.n_kv_head;
    d.D = c.head_dim;
    d.q = own.q;
    d.q_rs = own.qk_rs;
    d.k = own.k;
    d.k_rs = own.qk_rs;
    d.v = own.v;
    d.v_rs = own.v_rs;
    d.n_src = depth_num_sources(c, l);
    for (int n = 0; n < d.n_src; n++) {
        int j = n * c.vp.depth_stride;  // anchor n stores (kappa^j, v^0) for j = 0, else (kappa^j, v~^j)
        OwnQKV anchor = own_qkv(m, j);
        d.src_k[n] = anchor.k;
        d.src_v[n] = j == 0 ? anchor.v : depth_vmix(m, j);
        d.src_v_rs[n] = j == 0 ? anchor.v_rs : (long)c.n_kv_head * c.head_dim;
    }
    d.alpha = depth_alpha(m, l);
    d.alpha_stride = depth_max_cands(c);
    d.vmix = depth_vmix(m, l);
    return d;
}

// Depth's fused forward: where its ticket counter, error word and ready flags live (gen set per
// launch)
inline DepthForwardSync depth_forward_sync(GpuModel* m) {
    return depth_forward_sync_in(m->vpb.depth_sync, m->alloc_B, m->alloc_T, m->config.n_kv_head);
}
// After a forward's last stream sync: stop if a fused Depth forward of it gave up a wait (its
// outputs garbage; before any gradient or update is made from them)
inline void depth_forward_check(GpuModel* m) {
    if (m->depth_fused_forward_ran && depth_forward_sync_failed(depth_forward_sync(m), m->stream)) runtime_error(nullptr, depth_forward_sync_error());
}
// Layer l's attention forward, after its q, k, v exist (after RoPE). Depth: the depth softmax and
// mix first, by its own kernel, or inside the attention forward (attention_forward_depth_fused;
// VP_DEPTH_FUSED_FORWARD, off by default): the same bits either way.
inline void value_path_attention_forward(GpuModel* m, int l) {
    AttentionArgs aa = attention_forward_args(m, l);
    if (m->config.vp.path == VP_DEPTH && l > 0) {
        DepthArgs d = depth_args(m, l);
        DepthForwardSync sync = depth_forward_sync(m);
        if (depth_fused_forward_active(aa, d, sync)) {
            if (++m->depth_sync_gen <= 0) runtime_error(nullptr, "internal: the fused depth forward's generation counter wrapped");
            sync.gen = m->depth_sync_gen;
            attention_forward_depth_fused(aa, d, sync, m->stream);
            m->depth_fused_forward_ran = true;
            return;
        }
        depth_attention_forward(d, m->stream);
    }
    attention_forward(aa, m->stream);
}

// Depth: the readers of anchor l (every layer above it), in descending order (the order of the
// CPU reference's sums), each with what its depth backward kept (depth_backward_args)
inline std::vector<DepthReader> depth_anchor_readers(GpuModel* m, int l) {
    std::vector<DepthReader> readers;
    for (int reader = m->config.n_layer - 1; reader > l; reader--) {
        DepthReader r;
        r.u = depth_vmix(m, reader);
        r.q = own_qkv(m, reader).q;
        r.alpha = depth_alpha(m, reader);
        r.de = depth_de(m, reader);
        readers.push_back(r);
    }
    return readers;
}

// Depth, before anchor l's attention backward: its accumulator pair, summed from its readers
inline DepthGatherArgs depth_gather_args(GpuModel* m, int l) {
    const ModelConfig& c = m->config;
    DepthGatherArgs ga;
    ga.BT = m->B * m->T;
    ga.H = c.n_head;
    ga.Hkv = c.n_kv_head;
    ga.D = c.head_dim;
    ga.n = l / c.vp.depth_stride;
    ga.q_rs = own_qkv(m, l).qk_rs;
    ga.alpha_stride = depth_max_cands(c);
    ga.acc_k = m->vpb.acc_k;
    ga.acc_v = m->vpb.acc_v;
    return ga;
}

// ResFormer, SVFormer (VP_KEEP_V0_TERMS), before layer 0's attention backward: its accumulator
// acc_v = the terms layers L-1..1 kept in their atty slots (attention_backward_args), in that order
inline KeptSumArgs v0_kept_sum_args(GpuModel* m, std::vector<const floatX*>* slots) {
    const ModelConfig& c = m->config;
    KeptSumArgs ka;
    ka.n_elems = (long)kv_layer_elems(m);
    ka.acc = m->vpb.acc_v;
    slots->clear();
    for (int l = c.n_layer - 1; l >= 1; l--) slots->push_back(layer_acts(m, l).atty);
    return ka;
}

// Before layer l's attention backward. Depth: at an anchor with readers, the sums of what they
// kept; ResFormer and SVFormer: at layer 0, the sum of the v^0 terms the layers above kept
inline void value_path_before_attention_backward(GpuModel* m, int l) {
    const ModelConfig& c = m->config;
    if (c.vp.path == VP_DEPTH && depth_anchor_has_readers(c, l))
        depth_anchor_gather(depth_gather_args(m, l), depth_anchor_readers(m, l), m->stream);
    bool v0_path = c.vp.path == VP_RESFORMER || c.vp.path == VP_SVFORMER;
    if (VP_KEEP_V0_TERMS && v0_path && l == 0 && c.n_layer > 1) {
        std::vector<const floatX*> slots;
        KeptSumArgs ka = v0_kept_sum_args(m, &slots);
        attention_sum_kept(ka, slots, m->stream);
    }
}

// Which accumulators layer l's attention routes contribute to: after it, they hold a
// contribution, so later writers add (+=). (Depth's readers write none: they keep their terms.)
inline void value_path_record_writes(GpuModel* m, int l) {
    const ModelConfig& c = m->config;
    std::vector<char>& written = m->acc_written;
    switch (c.vp.path) {
        case VP_RESFORMER:
        case VP_SVFORMER:
            if (l > 0) written[0] = 1;
            break;
        case VP_SLA:
            if (sla_is_skip_layer(c, l)) written[l - c.vp.sla_layers] = 1;
            break;
    }
}

// Depth: layer l's depth backward (l >= 1): u, the core's dL/dv~ (+ A_v at an anchor), which the
// attention backward left in the v~ slot, where the anchors' gathers read it (depth_anchor_readers);
// its own gradients' slots, and where it keeps de
inline DepthArgs depth_backward_args(GpuModel* m, int l) {
    DepthArgs d = depth_args(m, l);
    OwnQKV g = own_qkv_grads(m);
    d.u = depth_vmix(m, l);  // where the attention backward left it, over v~^l: kept there
    d.dv = g.v;
    d.dv_rs = g.v_rs;
    d.dk = g.k;
    d.dk_rs = g.qk_rs;
    d.dq = g.q;
    d.dq_rs = g.qk_rs;
    d.de = depth_de(m, l);
    d.u_keep = nullptr;
    return d;
}

// Layer l's attention backward. Depth (l >= 1): then its depth backward, by its own kernel, or
// inside the attention backward's dK/dV kernel (attention_backward_depth_fused;
// VP_DEPTH_FUSED_BACKWARD, off by default): the same bits either way.
inline void value_path_attention_backward(GpuModel* m, int l) {
    AttentionArgs aa = attention_backward_args(m, l);
    if (m->config.vp.path == VP_DEPTH && l > 0) {
        DepthArgs d = depth_backward_args(m, l);
        if (depth_fused_backward_active(aa, d)) {
            attention_backward_depth_fused(aa, d, m->stream);
        } else {
            attention_backward(aa, m->stream);
            depth_attention_backward(d, m->stream);
        }
        return;
    }
    attention_backward(aa, m->stream);
}

// After layer l's attention backward (and Depth's, value_path_attention_backward): ResFormer's
// dlambda_l, and the bookkeeping of the accumulators.
inline void value_path_after_attention_backward(GpuModel* m, int l) {
    const ModelConfig& c = m->config;
    value_path_record_writes(m, l);
    switch (c.vp.path) {
        case VP_RESFORMER:
            if (l > 0 && c.vp.resformer_learn) {
                int blocks = attention_dkdv_blocks(m->B, m->T, c.n_kv_head, c.head_dim);
                if (blocks > attention_dkdv_blocks(m->alloc_B, m->alloc_T, c.n_kv_head, c.head_dim))
                    runtime_error(nullptr, "internal: backward at B=%d T=%d needs more dlambda partials than allocated", m->B, m->T);
                sum_into_scalar(m->grads.vp_lambda + l, m->vpb.dlambda_partial, blocks, m->stream);
            }
            break;
    }
}

// Norm of the family: LayerNorm (GPT-2, gain and bias, caches mean and rstd) or RMSNorm (Llama).
inline void norm_forward(GpuModel* m, floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w, const floatX* b, int N) {
    const ModelConfig& c = m->config;
    if (c.arch == ARCH_GPT2) layernorm_forward(out, mean, rstd, inp, w, b, N, c.n_embd, c.norm_eps, m->stream);
    else rmsnorm_forward(out, rstd, inp, w, N, c.n_embd, c.norm_eps, m->stream);
}

// The MLP's activation of the family from the stored pre-activation: fch_act = GELU(fch) (GPT-2)
// or SwiGLU([gate | up] of fch) (Llama), N rows. The forward and --recompute's backward both call
// it, so a recomputed activation is the forward's to the bit.
inline void mlp_activation_forward(GpuModel* m, const LayerActs& la, int N) {
    const ModelConfig& c = m->config;
    if (c.arch == ARCH_GPT2) gelu_forward(la.fch_act, la.fch, (size_t)N * c.ffn_dim, m->stream);
    else swiglu_forward(la.fch_act, la.fch, N, c.ffn_dim, m->stream);
}

// dinp_bias_grad (GPT-2 only, or NULL): += the column sums of the updated dinp, which is the bias
// gradient of the projection (attproj, fcproj) whose output gradient dinp then is
inline void norm_backward(GpuModel* m, floatX* dinp, float* dw, float* db, float* dinp_bias_grad, const floatX* dout, const floatX* inp, const floatX* w,
                          const float* mean, const float* rstd, int N) {
    const ModelConfig& c = m->config;
    if (c.arch == ARCH_GPT2) layernorm_backward(dinp, dw, db, dinp_bias_grad, dout, inp, w, mean, rstd, m->scratch.partial, N, c.n_embd, m->stream);
    else rmsnorm_backward(dinp, dw, dout, inp, w, rstd, m->scratch.partial, N, c.n_embd, m->stream);
}

// Forward pass. inputs, targets: (B,T) on the host. With targets: the loss (mean over positions)
// and, unless keep_logits, dlogits left in acts.logits for backward. With targets == NULL
// (sampling): the logits of the last position of each sequence in rows 0..B-1 of acts.logits.
inline void gpt_forward(GpuModel* m, const int* inputs, const int* targets, int B, int T) {
    const ModelConfig& c = m->config;
    gpt_ensure_activations(m, B, T);
    int L = c.n_layer, C = c.n_embd, H = c.n_head, Hkv = c.n_kv_head, D = c.head_dim, F = c.ffn_dim, V = c.vocab_size, Vp = c.padded_vocab_size;
    int BT = B * T;
    bool gpt2 = c.arch == ARCH_GPT2;
    int QK = (H + Hkv) * D, KV = Hkv * D, W = QK + KV, FW = gpt2 ? F : 2 * F;
    check_token_ids(inputs, targets, BT, V);
    m->B = B;
    m->T = T;
    m->dlogits_ready = false;
    m->depth_fused_forward_ran = false;
    cudaStream_t st = m->stream;
    Activations& a = m->acts;
    ParamTensors<floatX>& p = m->params;
    memcpy(m->h_inputs, inputs, BT * sizeof(int));
    cudaCheck(cudaMemcpyAsync(a.inputs, m->h_inputs, BT * sizeof(int), cudaMemcpyHostToDevice, st));
    if (targets) {
        memcpy(m->h_targets, targets, BT * sizeof(int));
        cudaCheck(cudaMemcpyAsync(a.targets, m->h_targets, BT * sizeof(int), cudaMemcpyHostToDevice, st));
    }

    encoder_forward(a.encoded, a.inputs, p.wte, p.wpe, B, T, C, st);
    for (int l = 0; l < L; l++) {
        LayerParams<floatX> lp = layer_params(p, c, l);
        LayerActs la = layer_acts(m, l);
        // attention block: x + attproj(attention(norm1(x)))
        norm_forward(m, la.ln1, la.ln1_mean, la.ln1_rstd, la.x, lp.ln1_w, lp.ln1_b, BT);
        matmul_forward(la.qkv, la.ln1, lp.qk_w, lp.qk_b, nullptr, BT, C, QK, C, W, st);        // q|k into columns [0, QK)
        // v into columns [QK, W) (SVFormer: layer 0 only; ResFormer fixed: mixed with v^0 here)
        if (resformer_mix_in_projection(c, l))
            matmul_forward_lerp(la.qkv + QK, la.ln1, lp.v_w, lp.v_b, m->vpb.v_bias_scaled, a.qkv + QK, RESFORMER_FIXED_LAMBDA, BT, C, KV, C, W, st);
        else if (lp.v_w)
            matmul_forward(la.qkv + QK, la.ln1, lp.v_w, lp.v_b, nullptr, BT, C, KV, C, W, st);
        if (!gpt2) {
            // Llama: optional QK-norm, then RoPE, into qk_rot; values stay raw in qkv
            if (c.qk_norm) {
                qknorm_forward(la.qk_rot, la.qk_rstd, la.qkv, lp.q_norm_w, lp.k_norm_w, BT, H, Hkv, D, W, QK, c.norm_eps, st);
                rope_forward(la.qk_rot, la.qk_rot, m->rope_cos, m->rope_sin, B, T, H + Hkv, D, QK, QK, st);
            } else {
                rope_forward(la.qk_rot, la.qkv, m->rope_cos, m->rope_sin, B, T, H + Hkv, D, W, QK, st);
            }
        }
        value_path_attention_forward(m, l);
        matmul_forward(la.res_att, la.atty, lp.attproj_w, lp.attproj_b, la.x, BT, H * D, C, H * D, C, st);  // + x: residual fused
        // MLP block: res_att + fcproj(act(fc(norm2(res_att))))
        norm_forward(m, la.ln2, la.ln2_mean, la.ln2_rstd, la.res_att, lp.ln2_w, lp.ln2_b, BT);
        if (gpt2 && m->options.gelu_forward_fusion && m->options.recompute == 0) {
            matmul_forward_gelu(la.fch_act, la.fch, la.ln2, lp.fc_w, lp.fc_b, BT, C, FW, C, st);
        } else {
            matmul_forward(la.fch, la.ln2, lp.fc_w, lp.fc_b, nullptr, BT, C, FW, C, FW, st);
            mlp_activation_forward(m, la, BT);
        }
        matmul_forward(la.res_mlp, la.fch_act, lp.fcproj_w, lp.fcproj_b, la.res_att, BT, F, C, F, C, st);  // + res_att: residual fused
    }
    const floatX* x_final = a.res_mlp + (size_t)(L - 1) * BT * C;
    norm_forward(m, a.lnf, a.lnf_mean, a.lnf_rstd, x_final, p.lnf_w, p.lnf_b, BT);
    const floatX* head = output_head(p, c);  // (Vp, C)

    if (!targets) {
        // sampling: only the last position of each sequence: rows b*T + T-1 of lnf (a strided B x C operand)
        matmul_forward(a.logits, a.lnf + (size_t)(T - 1) * C, head, nullptr, nullptr, B, C, Vp, (long)T * C, Vp, st);
        m->mean_loss = -1.0f;
        cudaCheck(cudaStreamSynchronize(st));
        depth_forward_check(m);
        return;
    }
    matmul_forward(a.logits, a.lnf, head, nullptr, nullptr, BT, C, Vp, C, Vp, st);
    fused_classifier(a.logits, a.losses, a.targets, BT, V, Vp, !m->keep_logits, st);
    cudaCheck(cudaMemcpyAsync(m->h_losses, a.losses, BT * sizeof(float), cudaMemcpyDeviceToHost, st));
    // while the GPU runs the forward: group the positions by token for the embedding backward
    encoder_buckets(inputs, BT, V, &m->bucket_token, &m->bucket_start, &m->bucket_pos, &m->bucket_count);
    m->num_buckets = (int)m->bucket_token.size();
    int* hb = m->h_buckets;
    int* hb_pos = hb + 2 * (size_t)BT + 1;  // (2 BT + 1 passes int from B*T = 2^30 on)
    memcpy(hb, m->bucket_token.data(), m->num_buckets * sizeof(int));
    memcpy(hb + BT, m->bucket_start.data(), (m->num_buckets + 1) * sizeof(int));
    memcpy(hb_pos, m->bucket_pos.data(), BT * sizeof(int));
    BackwardScratch& s = m->scratch;
    cudaCheck(cudaMemcpyAsync(s.bucket_token, hb, m->num_buckets * sizeof(int), cudaMemcpyHostToDevice, st));
    cudaCheck(cudaMemcpyAsync(s.bucket_start, hb + BT, (m->num_buckets + 1) * sizeof(int), cudaMemcpyHostToDevice, st));
    cudaCheck(cudaMemcpyAsync(s.bucket_pos, hb_pos, BT * sizeof(int), cudaMemcpyHostToDevice, st));
    cudaCheck(cudaStreamSynchronize(st));  // the losses are on the host, the pinned staging buffers free again
    depth_forward_check(m);
    double loss = 0;  // summed in double in position order, as the CPU reference
    for (int i = 0; i < BT; i++) loss += m->h_losses[i];
    m->mean_loss = (float)(loss / BT);
    m->dlogits_ready = !m->keep_logits;
}

inline void gpt_zero_grad(GpuModel* m) { cudaCheck(cudaMemsetAsync(m->grads_memory, 0, m->num_params * sizeof(float), m->stream)); }

inline void dist_reduce_grads_async(GpuModel* m, int layer);  // Data parallel, below

// Backward of the last forward; accumulates (+=) into the fp32 gradients. loss_scale multiplies
// d(mean loss): 1/grad_accum_steps.
inline void gpt_backward(GpuModel* m, float loss_scale) {
    if (!m->dlogits_ready) runtime_error(nullptr, "internal: backward without a forward with targets (or after a keep_logits forward)");
    const ModelConfig& c = m->config;
    int B = m->B, T = m->T;
    int L = c.n_layer, C = c.n_embd, H = c.n_head, Hkv = c.n_kv_head, D = c.head_dim, F = c.ffn_dim, Vp = c.padded_vocab_size;
    int BT = B * T;
    bool gpt2 = c.arch == ARCH_GPT2;
    int QK = (H + Hkv) * D, KV = Hkv * D, W = QK + KV, FW = gpt2 ? F : 2 * F;
    cudaStream_t st = m->stream;
    Activations& a = m->acts;
    ParamTensors<floatX>& p = m->params;
    ParamTensors<float>& g = m->grads;
    BackwardScratch& s = m->scratch;

    // acts.logits holds dlogits = softmax - onehot; the mean over BT positions (and loss_scale) is
    // the alpha of the LM-head GEMMs (a small inline backward of the mean)
    float alpha = loss_scale / (float)BT;
    // tied: wte's gradient is the classifier's plus the lookup's (encoder_backward below)
    matmul_backward(s.dln, output_head(g, c), nullptr, a.logits, a.lnf, output_head(p, c), s.partial, BT, C, Vp, Vp, false, alpha, st);
    cudaCheck(cudaMemsetAsync(s.dresidual, 0, (size_t)BT * C * sizeof(floatX), st));
    const floatX* x_final = a.res_mlp + (size_t)(L - 1) * BT * C;
    // GPT-2: the projections that write the residual stream (attproj, fcproj) get their bias
    // gradients from the norm backward that leaves their output gradient in s.dresidual, in the
    // same pass: lnf's for the last layer's fcproj, ln2's for attproj, ln1's for the layer below's fcproj
    auto fcproj_bias_grad = [&](int l) { return gpt2 && l >= 0 ? layer_params(g, c, l).fcproj_b : nullptr; };
    norm_backward(m, s.dresidual, g.lnf_w, g.lnf_b, fcproj_bias_grad(L - 1), s.dln, x_final, p.lnf_w, a.lnf_mean, a.lnf_rstd, BT);
    m->acc_written.assign(vp_num_accumulators(c), 0);  // the value paths' accumulators start empty

    for (int l = L - 1; l >= 0; l--) {
        LayerParams<floatX> lp = layer_params(p, c, l);
        LayerParams<float> lg = layer_params(g, c, l);
        LayerActs la = layer_acts(m, l);
        // s.dresidual holds dL/d(res_mlp of layer l): the block output

        // MLP block backward (recompute first what --recompute dropped: same kernels, same bits)
        if (m->options.recompute >= 2) norm_forward(m, la.ln2, la.ln2_mean, la.ln2_rstd, la.res_att, lp.ln2_w, lp.ln2_b, BT);
        if (m->options.recompute >= 1) mlp_activation_forward(m, la, BT);
        // GPT-2 with VP_GELU_FUSION: GELU's backward in the fcproj input-gradient GEMM's epilogue
        // (writes dfch directly), and the fc bias gradient from the fc backward's bias pass over
        // dfch. Otherwise a separate pass: GELU's (the fc bias gradient summed inside it) or SwiGLU's.
        bool dgelu = gpt2 && VP_GELU_FUSION;
        matmul_backward(dgelu ? s.dfch : s.dfch_act, lg.fcproj_w, nullptr, s.dresidual, la.fch_act, lp.fcproj_w, s.partial, BT, F, C, C, false, 1.0f, st,
                        dgelu ? la.fch : nullptr);
        if (gpt2 && !dgelu) gelu_backward_bias(s.dfch, lg.fc_b, la.fch, s.dfch_act, s.partial, BT, F, st);
        if (!gpt2) swiglu_backward(s.dfch, la.fch, s.dfch_act, BT, F, st);
        matmul_backward(s.dln, lg.fc_w, dgelu ? lg.fc_b : nullptr, s.dfch, la.ln2, lp.fc_w, s.partial, BT, C, FW, FW, false, 1.0f, st);
        // the residual branch passes dresidual through unchanged; the norm adds its part
        norm_backward(m, s.dresidual, lg.ln2_w, lg.ln2_b, gpt2 ? lg.attproj_b : nullptr, s.dln, la.res_att, lp.ln2_w, la.ln2_mean, la.ln2_rstd, BT);
        // s.dresidual now holds dL/d(res_att)

        // attention block backward
        matmul_backward(s.datty, lg.attproj_w, nullptr, s.dresidual, la.atty, lp.attproj_w, s.partial, BT, H * D, C, C, false, 1.0f, st);
        value_path_before_attention_backward(m, l);
        value_path_attention_backward(m, l);
        value_path_after_attention_backward(m, l);
        if (!gpt2) {
            // back through RoPE (in place on dqk_rot), then QK-norm (or a copy) into dqkv's q|k columns
            if (c.qk_norm) {
                rope_backward(s.dqk_rot, s.dqk_rot, m->rope_cos, m->rope_sin, B, T, H + Hkv, D, QK, QK, st);
                qknorm_backward(s.dqkv, lg.q_norm_w, lg.k_norm_w, s.dqk_rot, la.qkv, lp.q_norm_w, lp.k_norm_w, la.qk_rstd, s.partial, BT, H, Hkv, D, W, QK, st);
            } else {
                rope_backward(s.dqkv, s.dqk_rot, m->rope_cos, m->rope_sin, B, T, H + Hkv, D, QK, W, st);
            }
        }
        if (m->options.recompute >= 2) norm_forward(m, la.ln1, la.ln1_mean, la.ln1_rstd, la.x, lp.ln1_w, lp.ln1_b, BT);
        matmul_backward(s.dln, lg.qk_w, lg.qk_b, s.dqkv, la.ln1, lp.qk_w, s.partial, BT, C, QK, W, false, 1.0f, st);
        if (lp.v_w) matmul_backward(s.dln, lg.v_w, lg.v_b, s.dqkv + QK, la.ln1, lp.v_w, s.partial, BT, C, KV, W, true, 1.0f, st);
        norm_backward(m, s.dresidual, lg.ln1_w, lg.ln1_b, fcproj_bias_grad(l - 1), s.dln, la.x, lp.ln1_w, la.ln1_mean, la.ln1_rstd, BT);
        // s.dresidual now holds dL/d(x): the gradient of the block's input
        // layer l's parameter gradients are final (the value paths route gradients into earlier
        // layers' activations, never into their weights; ln1's pass above wrote layer l-1's fcproj
        // bias gradient, which layer l-1's own reduce sums later): data parallel sums them now
        if (m->reduce_during_backward) dist_reduce_grads_async(m, l);
    }
    encoder_backward(g.wte, g.wpe, s.dresidual, s.bucket_token, s.bucket_start, s.bucket_pos, m->num_buckets, B, T, C, st);
    m->dlogits_ready = false;  // dlogits were consumed (a second backward would need a new forward)
}

// Sum of the squared gradients [off, off + count) (fixed-order, in double). Data parallel adds the
// ranks' shards of it (host/train_loop.h).
inline double gpt_grad_sumsq(GpuModel* m, size_t off, size_t count) {
    double* result = m->scratch.norm_scratch + GLOBAL_NORM_BLOCKS;
    if (!m->acts_memory) runtime_error(nullptr, "internal: grad norm before any forward");
    if (off + count > m->num_params) runtime_error(nullptr, "internal: grad norm of [%zu, %zu) beyond %zu parameters", off, off + count, m->num_params);
    global_norm_squared(result, m->scratch.norm_scratch, m->grads_memory + off, count, m->stream);
    cudaCheck(cudaMemcpyAsync(m->h_norm, result, sizeof(double), cudaMemcpyDeviceToHost, m->stream));
    cudaCheck(cudaStreamSynchronize(m->stream));
    return *m->h_norm;
}

// Sum of the squared fp32 master weights this rank holds (all of them, or its ZeRO-1 shard), in
// double: finite exactly when every weight is (a float's square is at most 1.2e77), so the trainer
// can refuse to evaluate, sample or save weights that an update made NaN or inf
// (host/train_loop.h). Its own scratch, so that it runs before the first forward (after a load).
inline double model_weights_sumsq(GpuModel* m) {
    double* result = m->weights_sumsq_scratch + GLOBAL_NORM_BLOCKS;
    global_norm_squared(result, m->weights_sumsq_scratch, m->master, m->shard_count, m->stream);
    double h = 0;
    cudaCheck(cudaMemcpyAsync(&h, result, sizeof(double), cudaMemcpyDeviceToHost, m->stream));
    cudaCheck(cudaStreamSynchronize(m->stream));
    return h;
}

// Global L2 norm of all gradients. PyTorch: torch.nn.utils.clip_grad_norm_'s total norm.
inline double gpt_grad_norm(GpuModel* m) { return std::sqrt(gpt_grad_sumsq(m, 0, m->num_params)); }

// AdamW on parameters [off, off + count) of the flat vector, which must lie in the model's
// master shard (the master weights and m, v are indexed from shard_offset): weight decay on
// spec.decay tensors only, each tensor's own lr (tensor_lr), the same kernel and arguments
// whatever the range, so a sharded step is bit-identical to the full one. step is 1-based.
inline void gpt_update_range(GpuModel* m, const AdamWSettings& s, int step, size_t off, size_t count) {
    if (off < m->shard_offset || off + count > m->shard_offset + m->shard_count)
        runtime_error(nullptr, "internal: update of [%zu, %zu) outside this rank's master shard [%zu, %zu)", off, off + count, m->shard_offset,
                      m->shard_offset + m->shard_count);
    size_t start = 0;
    for (const ParamSpec& spec : m->specs) {
        size_t lo = std::max(start, off), hi = std::min(start + spec.count, off + count);
        start += spec.count;
        if (lo >= hi) continue;
        size_t at = lo - m->shard_offset;  // index into the shard's master, m, v
        adamw_update(m->master + at, m->params_memory + lo, m->grads_memory + lo, m->adam_m + at, m->adam_v + at, hi - lo, tensor_lr(spec, s), s.beta1,
                     s.beta2, step, s.eps, spec.decay ? s.weight_decay : 0.0f, s.grad_scale, m->stream);
    }
    m->has_optimizer_state = true;
}

inline void gpt_update(GpuModel* m, const AdamWSettings& s, int step) {
    gpt_update_range(m, s, step, 0, m->num_params);
    cudaCheck(cudaStreamSynchronize(m->stream));  // the step's wall time (train_loop's log) includes the update
}

// The per-position losses -log p(target), (B,T) row-major, of the last forward with targets: the
// forward already copied them to the host (multiple-choice evaluation, host/mc_eval.h).
inline void gpt_position_losses(const GpuModel* m, std::vector<double>* out) {
    size_t n = (size_t)m->B * m->T;
    out->assign(m->h_losses, m->h_losses + n);
}

// Depth-Attention: adds the depth softmax weights of the last forward, summed over positions and
// KV heads, to a (host/value_path.h); false for the other paths. Copies the (L-1, B*T, Hkv,
// max_cands) weights to the host: an evaluation's cost, not a training step's.
inline bool model_depth_alpha_add(GpuModel* m, DepthAlphaSums* a) {
    const ModelConfig& c = m->config;
    if (c.vp.path != VP_DEPTH) return false;
    int mc = depth_max_cands(c);
    size_t rows = (size_t)m->B * m->T * c.n_kv_head, n = (size_t)(c.n_layer - 1) * rows * mc;
    std::vector<float> host(n);
    if (n) cudaCheck(cudaMemcpyAsync(host.data(), m->vpb.alpha, n * sizeof(float), cudaMemcpyDeviceToHost, m->stream));
    cudaCheck(cudaStreamSynchronize(m->stream));
    for (int l = 1; l < c.n_layer; l++) {
        const float* block = host.data() + (size_t)(l - 1) * rows * mc;  // as depth_alpha(m, l)
        for (size_t r = 0; r < rows; r++)
            for (int k = 0; k <= depth_num_sources(c, l); k++) a->sum[(size_t)l * mc + k] += block[r * mc + k];
    }
    a->count += (double)rows;
    return true;
}

// ----------------------------------------------------------------------------
// Sampling (on the host, from the logits of the last position)

// rows [0, nrows) of acts.logits (Vp wide) to the host as float
inline void copy_logits_to_host(GpuModel* m, int nrows, std::vector<float>* out) {
    size_t n = (size_t)nrows * m->config.padded_vocab_size;
    std::vector<floatX> tmp(n);
    cudaCheck(cudaMemcpyAsync(tmp.data(), m->acts.logits, n * sizeof(floatX), cudaMemcpyDeviceToHost, m->stream));
    cudaCheck(cudaStreamSynchronize(m->stream));
    out->resize(n);
    for (size_t i = 0; i < n; i++) (*out)[i] = (float)tmp[i];
}

// Without targets the forward computes the logits of the last position only: one row.
inline void gpt_last_logits(GpuModel* m, const int* tokens, int T, std::vector<float>* logits) {
    gpt_forward(m, tokens, (const int*)nullptr, 1, T);
    copy_logits_to_host(m, 1, logits);
}

// ----------------------------------------------------------------------------
// The backend of the shared training program (host/train_loop.h lists what it needs). Found by
// argument-dependent lookup: GpuModel lives in namespace gpu.

inline const char* model_build_name(const GpuModel*) { return "gpu-" PRECISION_NAME; }

// ResFormer's lambdas as the kernels read them (the fp32 copy, current on every rank after an update)
inline std::vector<float> model_lambdas(const GpuModel* m) {
    std::vector<float> out(m->lambda_f32 ? m->config.n_layer : 0);
    if (!out.empty()) {
        cudaCheck(cudaMemcpyAsync(out.data(), m->lambda_f32, out.size() * sizeof(float), cudaMemcpyDeviceToHost, m->stream));
        cudaCheck(cudaStreamSynchronize(m->stream));
    }
    return out;
}

// Flags of the shared CLI that only this build uses: --recompute (activation memory); and the
// micro-batch shape, for gpt_build's check of the kernels' limits.
inline void model_set_run_options(GpuModel* m, const RunConfig& rc) {
    m->options.recompute = rc.recompute;
    m->options.overlap_reduce = rc.overlap_reduce != 0;
    m->options.zero1 = rc.zero == 1 && dist_active();
    m->options.batch_size = rc.batch_size;
    m->options.seq_len = rc.seq_len;
}

// fp32 tensors of num_params floats between host and device
inline void copy_params_to_host(const float* dev, float* host, size_t n) { cudaCheck(cudaMemcpy(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost)); }

// The checkpoint streams through the host in pieces (host/checkpoint.h checkpoint_read_shard):
// the weights to the staging buffer, and of m, v only the part in this rank's shard (all of them
// without ZeRO-1), so a rank's host memory holds one piece, not 12 bytes per parameter.
inline void model_load(GpuModel* m, const std::string& path, CheckpointMeta* meta, bool with_optimizer) {
    cudaCheck(cudaStreamSynchronize(m->stream));
    float* dst[3] = {params_staging(m), m->adam_m, m->adam_v};
    checkpoint_read_shard(path, meta, m->num_params, with_optimizer, DistShard{m->shard_offset, m->shard_count},
                          [&](int t, size_t at, const float* x, size_t count) {
                              cudaCheck(cudaMemcpy(dst[t] + at, x, count * sizeof(float), cudaMemcpyHostToDevice));
                          });
    params_from_staging(m);
    if (!with_optimizer) {
        cudaCheck(cudaMemset(m->adam_m, 0, m->shard_count * sizeof(float)));
        cudaCheck(cudaMemset(m->adam_v, 0, m->shard_count * sizeof(float)));
    }
    m->has_optimizer_state = with_optimizer;
}

// Every rank calls this; rank 0 writes. The master weights and m, v of [shard_offset,
// shard_offset + shard_count) are on this GPU: all of them in one process or with replicated
// state (ZeRO-0: rank 0 alone writes what it holds), this rank's shard under ZeRO-1, where rank 0
// gathers the other shards over MPI, so a checkpoint is always the whole state, whatever the
// world. They stream to the file in pieces (host/checkpoint.h checkpoint_save_streamed): the host
// holds one piece, not 12 bytes per parameter.
inline void model_save(GpuModel* m, const std::string& dir, CheckpointMeta* meta) {
    meta->num_params = (int64_t)m->num_params;
    meta->has_optimizer = m->has_optimizer_state;
    cudaCheck(cudaStreamSynchronize(m->stream));
    const float* src[3] = {m->master, m->adam_m, m->adam_v};
    const bool sharded[3] = {m->zero_shard, m->zero_shard, m->zero_shard};
    checkpoint_save_streamed(dir, *meta, sharded, [&](int t, size_t off, size_t count, float* out) {
        copy_params_to_host(src[t] + (off - m->shard_offset), out, count);
    });
}

// ----------------------------------------------------------------------------
// Data parallel (NCCL)
//
// The data-parallel hooks of host/train_loop.h (docs/distributed.md). Under mpirun every rank is
// one process with one GPU and the whole model, reading its own slice of the data; train_loop.h
// calls these only with world > 1 (or VP_DIST_FORCE=1: the same code with one rank, for tests).
// kernels/zero.cuh does the device collectives over NCCL; host/distributed.h (MPI, shared with
// the CPU build) gives the ranks, the watchdog and the host-side gather of a checkpoint. Without
// USE_MPI every collective is the identity of one rank.
//
// Gradients are summed during the backward, overlapped with it: train_loop.h calls
// model_dist_last_backward before a step's last backward, which then hands each layer's gradient
// slices (host/params.h param_slices, one NCCL group per layer, ~7M floats for GPT-2 124M) to
// comm_stream as soon as that layer is done, behind an event on the compute stream;
// model_dist_reduce_grads adds the tensors outside the layers (the embeddings, which the backward
// finishes last, the final norm, the head, ResFormer's lambdas) and waits. The gradient norm is
// then summed by shards in both modes (train_loop.h: each rank's dist_shard, added in rank order).
//
// ZeRO-0 (--zero 0; PyTorch DDP): every slice is all-reduced, every rank does the whole update.
//
// ZeRO-1 (--zero 1; PyTorch: ZeroRedundancyOptimizer): rank r owns the contiguous shard
// dist_shard(n, r, W) of the flat parameters and keeps the fp32 master weights and AdamW m, v of
// that shard only (gpt_build: 12 of the 18 bytes per parameter become 12/W in bf16). Each part
// of a gradient slice is summed onto its owner only (NCCL reduce: half the traffic of an
// all-reduce, which is a reduce-scatter plus an all-gather); the owner updates its shard, writing
// its floatX weights, and the floatX weights are then all-gathered in place (bf16 in the BF16
// build: half the bytes of the fp32 master). Per step that moves 1.5x the gradient's bytes in
// the BF16 build (2x in FP32) against ZeRO-0's 2x. ResFormer's learnable lambdas, which the
// attention kernels read in fp32, are broadcast from their owners after each update. With 2
// ranks ZeRO-0 and ZeRO-1 give bit-identical weights (each reduce adds the same two numbers as
// the all-reduce), as the CPU build does for any W; with more GPUs NCCL's reduce may add in
// another order than its all-reduce (docs/distributed.md).
//
// Checkpoints stay one ordinary file: rank 0 gathers the master and m, v shards over MPI in host
// memory (as the CPU build gathers m, v) and writes it, so any world size, one process or the
// CPU build resumes it.

inline bool model_supports_dist(const GpuModel*) { return true; }

// Before gpt_build on every rank: pick this rank's GPU, create the NCCL communicator.
inline void model_dist_init(const GpuModel*) { nccl_init(); }
inline void model_dist_finalize(const GpuModel*) { nccl_finalize(); }

// Sums the gradient slices of `layer` (-1: the tensors outside the layers) over the ranks, on
// comm_stream after the compute stream's work so far: onto every rank (ZeRO-0), or each part
// onto the rank that owns it (ZeRO-1). PyTorch: a DDP bucket's all_reduce.
inline void dist_reduce_grads_async(GpuModel* m, int layer) {
    if (!m->comm_stream) {
        // the highest priority the device has: when an SM frees up, the block scheduler gives it
        // to NCCL's reduction kernels before the next GEMM tile of the backward, so the overlapped
        // reduce is not starved until the backward ends (PyTorch: ProcessGroupNCCL's
        // is_high_priority_stream). Priorities only order blocks waiting to start; results are
        // the same.
        int least_priority = 0, greatest_priority = 0;
        cudaCheck(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
        cudaCheck(cudaStreamCreateWithPriority(&m->comm_stream, cudaStreamDefault, greatest_priority));
        cudaCheck(cudaEventCreateWithFlags(&m->grads_ready, cudaEventDisableTiming));  // an ordering point only: no timestamp
    }
    std::vector<std::pair<float*, size_t>> slices = param_slices(m->grads, m->specs, m->config, layer);
    cudaCheck(cudaEventRecord(m->grads_ready, m->stream));
    cudaCheck(cudaStreamWaitEvent(m->comm_stream, m->grads_ready, 0));  // the comm stream waits for the layer's backward
    if (m->zero_shard) nccl_reduce_sum_slices_to_owners(slices, m->grads_memory, m->num_params, m->comm_stream);
    else nccl_allreduce_sum_slices(slices, m->comm_stream);
}

// The next gpt_backward is the step's last: it starts each layer's all-reduce as it goes (unless
// --overlap-reduce 0: then model_dist_reduce_grads issues the same all-reduces after it).
inline void model_dist_last_backward(GpuModel* m) { m->reduce_during_backward = m->options.overlap_reduce; }

// grads (n fp32, each rank's backward already scaled by 1/world) = their sum over the ranks
// (ZeRO-1: on this rank's shard; the rest keeps partial sums that nothing reads).
inline void model_dist_reduce_grads(GpuModel* m) {
    if (!m->reduce_during_backward)  // no model_dist_last_backward: every layer now
        for (int l = m->config.n_layer - 1; l >= 0; l--) dist_reduce_grads_async(m, l);
    m->reduce_during_backward = false;
    dist_reduce_grads_async(m, -1);
    // The compute stream has nothing queued after the last event, so once comm_stream is done the
    // backward is too; what the host issues next (the grad norm) comes after both.
    nccl_wait(m->comm_stream, m->zero_shard ? "the gradient reduce" : "the gradient all-reduce");
}

// ZeRO-1: gpt_build already allocated this rank's shard only (model_set_run_options set
// options.zero1 before it, and model_load / gpt_init_params fill the shard).
inline void model_dist_shard_optimizer(GpuModel* m) {
    if (!m->zero_shard) runtime_error(nullptr, "internal: --zero 1, but the model was built unsharded (model_set_run_options must come before gpt_build)");
}

// The optimizer step on summed gradients. ZeRO-0: every rank does the same full update.
// ZeRO-1: every rank updates its shard (master weights, m, v and its floatX weights), then the
// floatX weights are all-gathered in place and ResFormer's fp32 lambdas broadcast.
inline void model_dist_update(GpuModel* m, const AdamWSettings& s, int step) {
    if (!m->zero_shard) {
        gpt_update(m, s, step);
        return;
    }
    gpt_update_range(m, s, step, m->shard_offset, m->shard_count);
    nccl_all_gather(m->params_memory, dist_slot(m->num_params, dist_world()), m->stream);
    if (m->lambda_f32_owned) nccl_broadcast_from_owners(m->lambda_f32, m->master, lambda_offset(m), m->config.n_layer, m->num_params, m->stream);
    nccl_wait(m->stream, "the weight all-gather");
}

}  // namespace gpu

using gpu::GpuModel;

#include "host/train_loop.h"   // defines: train_main, the training program shared with the CPU build

// ----------------------------------------------------------------------------
// main: the shared training program (host/train_loop.h) with this backend

#ifndef TESTING
int main(int argc, char** argv) { return train_main<GpuModel>(argc, argv); }
#endif
