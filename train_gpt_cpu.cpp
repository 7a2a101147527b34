/*
valuepath CPU reference trainer: GPT-2 and Llama-family models in plain C++ with OpenMP.

This file is the spec that everything else in valuepath is checked against: the GPU trainer
(train_gpt.cu) is diffed against it by test_gpt.cu, and it is itself checked by finite
differences (tests/test_gpt_cpu.cpp) and against an independent PyTorch model.

Readable first, and not slow: plain loops that the compiler vectorises, OpenMP over rows, and
one cache-blocked packed GEMM (cpu/gemm.h) for every matmul. Every op is templated on the float
type `real`: training runs in float (fp32), the gradient checks run the very same code in double.
Results never depend on the number of threads: every reduction runs in a fixed order (parameter
gradients are reduced over rows by the thread that owns the column), which is what makes
--resume bit-exact.

The file runs top to bottom: layers (each forward next to its backward), the model (parameters,
activations, forward, backward, AdamW), sampling, then the training program, which sits inside
#ifndef TESTING so the tests can include this file whole.
*/

#include <omp.h>

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
// host code shared with the GPU trainer
#include "host/utils.h"        // defines: usage_error, runtime_error, fopen_check, fread_check, malloc_check
#include "host/value_path.h"   // defines: ValuePathConfig, VALUE_PATH_ID, value path flags
#include "host/config.h"       // defines: ModelConfig, RunConfig, parse_command_line, model_config_from_flags
#include "host/rng.h"          // defines: Rng, rng_stream, rng_normal, rng_uniform
#include "host/schedule.h"     // defines: lr_at_step
#include "host/dataloader.h"   // defines: DataLoader, dataloader_init, dataloader_next_batch, DataLoaderState
#include "host/checkpoint.h"   // defines: checkpoint_write, checkpoint_read, checkpoint_list_steps
#include "host/distributed.h"  // defines: dist_rank, dist_world, dist_allreduce_sum, dist_shard (no-ops without USE_MPI)
#include "host/logger.h"       // defines: Logger, logger_step, logger_val
#include "host/tokenizer.h"    // defines: Tokenizer, tokenizer_init, tokenizer_print
#include "host/params.h"       // defines: ParamSpec, param_specs, ParamTensors, layer_params, AdamWSettings, init_params_from_seed, sample_token
// CPU kernels
#include "cpu/gemm.h"          // defines: gemm (packed, cache-blocked, deterministic)
#include "cpu/fast_exp.h"      // defines: fast_exp, vexp, gelu_tanh (float: vectorizable, the same bits everywhere)
#include "cpu/value_paths.h"   // defines: VpVanilla, VpResformer, VpSvformer, VpSla, VpDepth, ActiveValuePath

// ----------------------------------------------------------------------------
// Layers. Legend: B = batch, T = sequence length, C = channels, OC = output channels,
// H = query heads, Hkv = key/value heads, G = H/Hkv, D = head dim, F = MLP hidden size,
// V = vocab, Vp = padded vocab, BT = B*T rows.
// Conventions (as llm.c): outputs first, then caches for backward, then inputs, weights, sizes.
// Backward functions ACCUMULATE (+=) into every gradient they produce, so residual fan-in and
// gradient accumulation need no special cases; callers zero scratch gradients first.

// Token (+ learned position) embedding. PyTorch: wte(idx) + wpe(arange(T)).
template <typename real>
void encoder_forward(real* out, const int* inp, const real* wte, const real* wpe, int B, int T, int C) {
    // out (B,T,C), inp (B,T), wte (Vp,C), wpe (maxT,C) or NULL (Llama: positions come from RoPE)
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            real* out_bt = out + ((size_t)b * T + t) * C;
            const real* wte_ix = wte + (size_t)inp[b * T + t] * C;
            for (int c = 0; c < C; c++) out_bt[c] = wte_ix[c] + (wpe ? wpe[(size_t)t * C + c] : (real)0);
        }
    }
}

template <typename real>
void encoder_backward(real* dwte, real* dwpe, const real* dout, const int* inp, int B, int T, int C) {
    // Several positions may hold the same token, so rows of dwte receive several adds: each thread
    // owns a slice of channels and walks all positions in order (deterministic, no atomics).
#pragma omp parallel for
    for (int c0 = 0; c0 < C; c0 += 64) {
        int c1 = std::min(C, c0 + 64);
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                const real* dout_bt = dout + ((size_t)b * T + t) * C;
                real* dwte_ix = dwte + (size_t)inp[b * T + t] * C;
                for (int c = c0; c < c1; c++) dwte_ix[c] += dout_bt[c];
                if (dwpe)
                    for (int c = c0; c < c1; c++) dwpe[(size_t)t * C + c] += dout_bt[c];
            }
        }
    }
}

// LayerNorm over the last dim, with gain and bias. PyTorch: F.layer_norm(x, (C,), w, b, eps).
template <typename real>
void layernorm_forward(real* out, real* mean, real* rstd, const real* inp, const real* weight, const real* bias, int N, int C, real eps) {
    // out, inp (N,C); mean, rstd (N): cached for backward
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const real* x = inp + (size_t)i * C;
        real m = 0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        real var = 0;
        for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
        var /= C;
        real s = (real)1 / std::sqrt(var + eps);
        real* o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[i] = m;
        rstd[i] = s;
    }
}

template <typename real>
void layernorm_backward(real* dinp, real* dweight, real* dbias, const real* dout, const real* inp, const real* weight, const real* mean, const real* rstd, int N, int C) {
    // dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), with norm = (x - mean) * rstd, dnorm = w * dout
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const real* dy = dout + (size_t)i * C;
        const real* x = inp + (size_t)i * C;
        real m = mean[i], s = rstd[i];
        real dnorm_mean = 0, dnorm_norm_mean = 0;
        for (int c = 0; c < C; c++) {
            real norm = (x[c] - m) * s, dnorm = weight[c] * dy[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        real* dx = dinp + (size_t)i * C;
        for (int c = 0; c < C; c++) {
            real norm = (x[c] - m) * s, dnorm = weight[c] * dy[c];
            dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
    // parameter gradients: reduced over rows by the thread that owns each channel
#pragma omp parallel for
    for (int c = 0; c < C; c++) {
        real dw = 0, db = 0;
        for (int i = 0; i < N; i++) {
            real dy = dout[(size_t)i * C + c];
            dw += (inp[(size_t)i * C + c] - mean[i]) * rstd[i] * dy;
            db += dy;
        }
        dweight[c] += dw;
        dbias[c] += db;
    }
}

// RMSNorm of one vector of n values. PyTorch: x * rsqrt(x.pow(2).mean(-1) + eps) * w.
template <typename real>
inline real rmsnorm_vector_forward(real* out, const real* x, const real* w, int n, real eps) {
    real ss = 0;
    for (int c = 0; c < n; c++) ss += x[c] * x[c];
    real s = (real)1 / std::sqrt(ss / n + eps);
    for (int c = 0; c < n; c++) out[c] = x[c] * s * w[c];
    return s;
}

// dx += s * (w*dy) - x * s^3 * <w*dy, x> / n
template <typename real>
inline void rmsnorm_vector_backward(real* dx, const real* dy, const real* x, const real* w, real s, int n) {
    real dot = 0;
    for (int c = 0; c < n; c++) dot += w[c] * dy[c] * x[c];
    real k = s * s * s * dot / n;
    for (int c = 0; c < n; c++) dx[c] += s * w[c] * dy[c] - k * x[c];
}

template <typename real>
void rmsnorm_forward(real* out, real* rstd, const real* inp, const real* weight, int N, int C, real eps) {
    // out, inp (N,C); rstd (N)
#pragma omp parallel for
    for (int i = 0; i < N; i++) rstd[i] = rmsnorm_vector_forward(out + (size_t)i * C, inp + (size_t)i * C, weight, C, eps);
}

template <typename real>
void rmsnorm_backward(real* dinp, real* dweight, const real* dout, const real* inp, const real* weight, const real* rstd, int N, int C) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) rmsnorm_vector_backward(dinp + (size_t)i * C, dout + (size_t)i * C, inp + (size_t)i * C, weight, rstd[i], C);
#pragma omp parallel for
    for (int c = 0; c < C; c++) {
        real dw = 0;
        for (int i = 0; i < N; i++) dw += dout[(size_t)i * C + c] * inp[(size_t)i * C + c] * rstd[i];
        dweight[c] += dw;
    }
}

// QK-norm (Qwen3): RMSNorm over the head dim of every query head (gain q_w, shared by the heads)
// and every key head (gain k_w), before RoPE. PyTorch: q = q_norm(q.view(B,T,H,D)).
template <typename real>
void qknorm_forward(real* out, real* rstd, const real* inp, const real* q_w, const real* k_w, int BT, int H, int Hkv, int D, long in_rs, long out_rs, real eps) {
    // inp rows of in_rs floats whose first (H+Hkv)*D are [q heads | k heads]; out rows of out_rs;
    // rstd (BT, H+Hkv)
    int NH = H + Hkv;
#pragma omp parallel for
    for (int i = 0; i < BT; i++)
        for (int j = 0; j < NH; j++)
            rstd[(size_t)i * NH + j] = rmsnorm_vector_forward(out + i * out_rs + (size_t)j * D, inp + i * in_rs + (size_t)j * D, j < H ? q_w : k_w, D, eps);
}

template <typename real>
void qknorm_backward(real* dinp, real* dq_w, real* dk_w, const real* dout, const real* inp, const real* q_w, const real* k_w, const real* rstd, int BT, int H, int Hkv, int D,
                     long in_rs, long out_rs) {
    int NH = H + Hkv;
#pragma omp parallel for
    for (int i = 0; i < BT; i++)
        for (int j = 0; j < NH; j++)
            rmsnorm_vector_backward(dinp + i * in_rs + (size_t)j * D, dout + i * out_rs + (size_t)j * D, inp + i * in_rs + (size_t)j * D, j < H ? q_w : k_w,
                                    rstd[(size_t)i * NH + j], D);
#pragma omp parallel for
    for (int d = 0; d < D; d++) {
        real dq = 0, dk = 0;
        for (int i = 0; i < BT; i++)
            for (int j = 0; j < NH; j++) {
                real g = dout[i * out_rs + (size_t)j * D + d] * inp[i * in_rs + (size_t)j * D + d] * rstd[(size_t)i * NH + j];
                if (j < H) dq += g;
                else dk += g;
            }
        dq_w[d] += dq;
        dk_w[d] += dk;
    }
}

// Rotary position embedding, HF "rotate_half" pairing: element i rotates with element i + D/2
// by angle t * theta^(-2i/D). PyTorch: q * cos + rotate_half(q) * sin.
// cos, sin: (maxT, D/2) tables. Applied in place to the first NH heads of each row.
template <typename real>
void rope_forward(real* x, const real* cos_tab, const real* sin_tab, int B, int T, int NH, int D, long rs) {
    int half = D / 2;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            real* row = x + ((size_t)b * T + t) * rs;
            const real* cs = cos_tab + (size_t)t * half;
            const real* sn = sin_tab + (size_t)t * half;
            for (int j = 0; j < NH; j++) {
                real* v = row + (size_t)j * D;
                for (int i = 0; i < half; i++) {
                    real a = v[i], c = v[i + half];
                    v[i] = a * cs[i] - c * sn[i];
                    v[i + half] = c * cs[i] + a * sn[i];
                }
            }
        }
}

// The rotation is orthogonal, so its backward is the rotation by -angle (in place on the gradient).
template <typename real>
void rope_backward(real* dx, const real* cos_tab, const real* sin_tab, int B, int T, int NH, int D, long rs) {
    int half = D / 2;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            real* row = dx + ((size_t)b * T + t) * rs;
            const real* cs = cos_tab + (size_t)t * half;
            const real* sn = sin_tab + (size_t)t * half;
            for (int j = 0; j < NH; j++) {
                real* v = row + (size_t)j * D;
                for (int i = 0; i < half; i++) {
                    real da = v[i], dc = v[i + half];
                    v[i] = da * cs[i] + dc * sn[i];
                    v[i + half] = dc * cs[i] - da * sn[i];
                }
            }
        }
}

// Linear layer out = inp @ weight^T + bias. PyTorch: F.linear(inp, weight, bias).
// Rows of out may be strided (out_rs >= OC) so a projection can write into a slice of a wider
// buffer (the q|k and v parts of the qkv activation).
template <typename real>
void matmul_forward(real* out, const real* inp, const real* weight, const real* bias, int N, int C, int OC, long out_rs) {
    // out (N, out_rs), inp (N,C), weight (OC,C), bias (OC) or NULL
    gemm<real>(N, OC, C, inp, C, 1, weight, 1, C, out, out_rs, false);
    if (bias) {
#pragma omp parallel for
        for (int i = 0; i < N; i++)
            for (int o = 0; o < OC; o++) out[i * out_rs + o] += bias[o];
    }
}

template <typename real>
void matmul_backward(real* dinp, real* dweight, real* dbias, const real* dout, const real* inp, const real* weight, int N, int C, int OC, long dout_rs) {
    // dinp (N,C) += dout (N,OC) @ weight (OC,C)
    gemm<real>(N, C, OC, dout, dout_rs, 1, weight, C, 1, dinp, C, true);
    // dweight (OC,C) += dout^T (OC,N) @ inp (N,C)
    gemm<real>(OC, C, N, dout, 1, dout_rs, inp, C, 1, dweight, C, true);
    if (dbias) {
#pragma omp parallel for
        for (int o = 0; o < OC; o++) {
            real s = 0;
            for (int i = 0; i < N; i++) s += dout[i * dout_rs + o];
            dbias[o] += s;
        }
    }
}

// One head's keys (or values) transposed: x_t[d * T + j] = x[j * x_rs + d], (T, D) -> (D, T), so
// that a query's scores against every key can be taken over j in unit stride (scores_of_row).
template <typename real>
static void transpose_head(real* x_t, const real* x, int T, int D, long x_rs) {
    for (int j = 0; j < T; j++)
        for (int d = 0; d < D; d++) x_t[(size_t)d * T + j] = x[(size_t)j * x_rs + d];
}

// out[j] = sum_d a[d] * x_t[d * T + j] for j < n: the dot products of a with n keys, each a
// chain of fused multiply-adds in d order, the n chains run side by side, which vectorizes over j.
// (One dot product at a time is a serial chain that the compiler may not reorder without
// -ffast-math: 11% of a quickstart step, with the loop below. GCC also made that chain's products
// unfused at -O3, as at -O1, but fused ones elsewhere; std::fma fixes the bits at every level.)
template <typename real>
static void scores_of_row(real* out, const real* a, const real* x_t, int n, int T, int D) {
    for (int j = 0; j < n; j++) out[j] = 0;
    for (int d = 0; d < D; d++) {
        real a_d = a[d];
        const real* x_d = x_t + (size_t)d * T;
        for (int j = 0; j < n; j++) out[j] = std::fma(a_d, x_d[j], out[j]);
    }
}

// Causal self-attention core, flash-style: the forward keeps only the log-sum-exp of each row of
// scores, and the backward recomputes the probabilities from it (memory O(T), not O(T^2)).
// With GQA, query head h reads KV head h / G (HF repeat_kv). PyTorch:
//   F.scaled_dot_product_attention(q, k.repeat_interleave(G,1), v.repeat_interleave(G,1), is_causal=True)
// q: rows of q_rs with H heads of D; k, v: rows of k_rs, v_rs with Hkv heads of D.
// out (B,T,H*D); lse (B,H,T).
template <typename real>
void attention_forward(real* out, real* lse, const real* q, const real* k, const real* v, int B, int T, int H, int Hkv, int D, long q_rs, long k_rs, long v_rs) {
    int G = H / Hkv;
    real scale = (real)1 / std::sqrt((real)D);
#pragma omp parallel
    {
        std::vector<real> p(T), k_t((size_t)D * T);
#pragma omp for collapse(2)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                int g = h / G;
                transpose_head(k_t.data(), k + (size_t)b * T * k_rs + (size_t)g * D, T, D, k_rs);
                for (int i = 0; i < T; i++) {
                    const real* qi = q + ((size_t)b * T + i) * q_rs + (size_t)h * D;
                    scores_of_row(p.data(), qi, k_t.data(), i + 1, T, D);
                    real maxs = -INFINITY;
                    for (int j = 0; j <= i; j++) {
                        p[j] = p[j] * scale;
                        maxs = std::max(maxs, p[j]);
                    }
                    real sum = 0;
                    for (int j = 0; j <= i; j++) {
                        p[j] = std::exp(p[j] - maxs);
                        sum += p[j];
                    }
                    real inv = (real)1 / sum;
                    real* oi = out + ((size_t)b * T + i) * H * D + (size_t)h * D;
                    for (int d = 0; d < D; d++) oi[d] = 0;
                    for (int j = 0; j <= i; j++) {
                        const real* vj = v + ((size_t)b * T + j) * v_rs + (size_t)g * D;
                        real pj = p[j] * inv;
                        for (int d = 0; d < D; d++) oi[d] = std::fma(pj, vj[d], oi[d]);
                    }
                    lse[((size_t)b * H + h) * T + i] = maxs + std::log(sum);
                }
            }
    }
}

// Core VJP (value_paths.md section 0): delta_i = dO_i . o_i, P_ij = exp(S_ij - lse_i),
// dS_ij = P_ij (dO_i . V_j - delta_i), dq_i += dS_ij K_j / sqrt(D), dK_j += dS_ij q_i / sqrt(D),
// dV_j += P_ij dO_i. One task per (b, KV head) so the G query heads that share a KV head add into
// its dK, dV in a fixed order without atomics. dq has rows of q_rs; dk and dv rows of dkv_rs.
template <typename real>
void attention_backward(real* dq, real* dk, real* dv, const real* dout, const real* q, const real* k, const real* v, const real* out, const real* lse, int B, int T, int H,
                        int Hkv, int D, long q_rs, long k_rs, long v_rs, long dkv_rs) {
    int G = H / Hkv;
    real scale = (real)1 / std::sqrt((real)D);
#pragma omp parallel
    {
        std::vector<real> s(T), dp(T), k_t((size_t)D * T), v_t((size_t)D * T);
#pragma omp for collapse(2)
        for (int b = 0; b < B; b++)
            for (int g = 0; g < Hkv; g++) {
                transpose_head(k_t.data(), k + (size_t)b * T * k_rs + (size_t)g * D, T, D, k_rs);
                transpose_head(v_t.data(), v + (size_t)b * T * v_rs + (size_t)g * D, T, D, v_rs);
                for (int h = g * G; h < (g + 1) * G; h++)
                    for (int i = 0; i < T; i++) {
                        size_t row_i = (size_t)b * T + i;
                        const real* qi = q + row_i * q_rs + (size_t)h * D;
                        const real* doi = dout + row_i * H * D + (size_t)h * D;
                        const real* oi = out + row_i * H * D + (size_t)h * D;
                        real l = lse[((size_t)b * H + h) * T + i];
                        real delta = 0;
                        for (int d = 0; d < D; d++) delta = std::fma(doi[d], oi[d], delta);
                        real* dqi = dq + row_i * q_rs + (size_t)h * D;
                        scores_of_row(s.data(), qi, k_t.data(), i + 1, T, D);     // S_ij (before the scale)
                        scores_of_row(dp.data(), doi, v_t.data(), i + 1, T, D);   // dP_ij = dO_i . V_j
                        for (int j = 0; j <= i; j++) {
                            size_t row_j = (size_t)b * T + j;
                            const real* kj = k + row_j * k_rs + (size_t)g * D;
                            real pj = std::exp(std::fma(s[j], scale, -l));
                            real ds = pj * (dp[j] - delta) * scale;
                            real* dkj = dk + row_j * dkv_rs + (size_t)g * D;
                            real* dvj = dv + row_j * dkv_rs + (size_t)g * D;
                            // three loops, not one: with six streams GCC left the joint loop
                            // scalar (its alias checks); each alone vectorizes
                            for (int d = 0; d < D; d++) dqi[d] = std::fma(ds, kj[d], dqi[d]);
                            for (int d = 0; d < D; d++) dkj[d] = std::fma(ds, qi[d], dkj[d]);
                            for (int d = 0; d < D; d++) dvj[d] = std::fma(pj, doi[d], dvj[d]);
                        }
                    }
            }
    }
}

// GELU, tanh approximation (GPT-2). PyTorch: F.gelu(x, approximate="tanh").
#define GELU_SCALE 0.7978845608028654  // sqrt(2/pi)
template <typename real>
void gelu_forward(real* out, const real* inp, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) {
        real x = inp[i];
        out[i] = (real)0.5 * x * ((real)1 + gelu_tanh((real)GELU_SCALE * (x + (real)0.044715 * x * x * x)));
    }
}

template <typename real>
void gelu_backward(real* dinp, const real* inp, const real* dout, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) {
        real x = inp[i];
        real u = (real)GELU_SCALE * (x + (real)0.044715 * x * x * x);
        real th = gelu_tanh(u);
        real sech2 = (real)1 - th * th;
        real grad = (real)0.5 * ((real)1 + th) + (real)0.5 * x * sech2 * (real)GELU_SCALE * ((real)1 + (real)3 * (real)0.044715 * x * x);
        dinp[i] += grad * dout[i];
    }
}

// SwiGLU (Llama): out = silu(gate) * up, where each row of inp is [gate (F) | up (F)].
// PyTorch: F.silu(x @ w1.T) * (x @ w3.T).
template <typename real>
void swiglu_forward(real* out, const real* inp, int N, int F) {
    // out (N,F), inp (N,2F)
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const real* gate = inp + (size_t)i * 2 * F;
        const real* up = gate + F;
        for (int f = 0; f < F; f++) {
            real sig = (real)1 / ((real)1 + vexp(-gate[f]));
            out[(size_t)i * F + f] = gate[f] * sig * up[f];
        }
    }
}

template <typename real>
void swiglu_backward(real* dinp, const real* inp, const real* dout, int N, int F) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const real* gate = inp + (size_t)i * 2 * F;
        const real* up = gate + F;
        real* dgate = dinp + (size_t)i * 2 * F;
        real* dup = dgate + F;
        for (int f = 0; f < F; f++) {
            real x = gate[f], sig = (real)1 / ((real)1 + vexp(-x));
            real dy = dout[(size_t)i * F + f];
            dgate[f] += dy * up[f] * sig * ((real)1 + x * ((real)1 - sig));
            dup[f] += dy * x * sig;
        }
    }
}

template <typename real>
void residual_forward(real* out, const real* a, const real* b, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}

// max(x[0..n)) in 16 lanes (lane k takes x[j] for j = k mod 16), then the lanes. The max of a set
// does not depend on the order it is taken in, but a loop of std::max is one serial chain that
// the compiler does not vectorize without -ffast-math. A NaN is passed over, as std::max passed
// it over before; its exp still makes the row's sum and loss NaN.
template <typename real>
static real max_in_lanes(const real* x, int n) {
    constexpr int LANES = 16;
    real lane_max[LANES];
    for (int k = 0; k < LANES; k++) lane_max[k] = -INFINITY;
    int j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int k = 0; k < LANES; k++) lane_max[k] = x[j + k] > lane_max[k] ? x[j + k] : lane_max[k];
    real m = -INFINITY;
    for (int k = 0; k < LANES; k++) m = lane_max[k] > m ? lane_max[k] : m;
    for (; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

// sum(x[0..n)) in double, in 16 fixed lanes (lane k adds x[j] for j = k mod 16, in order), the
// lanes added pairwise, then the tail: a fixed order, the same bits at any vector width.
template <typename real>
static double sum_in_double_lanes(const real* x, int n) {
    constexpr int LANES = 16;
    double lane_sum[LANES] = {};
    int j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int k = 0; k < LANES; k++) lane_sum[k] += (double)x[j + k];
    for (int width = LANES / 2; width >= 1; width /= 2)
        for (int k = 0; k < width; k++) lane_sum[k] += lane_sum[k + width];
    double sum = lane_sum[0];
    for (; j < n; j++) sum += (double)x[j];
    return sum;
}

// Fused classifier: softmax over the V real tokens (the Vp - V padded logits get probability 0
// and gradient 0), the cross-entropy loss per position, and in backward dlogits in place.
// PyTorch: F.cross_entropy(logits[..., :V], targets, reduction="none").
template <typename real>
void crossentropy_softmax_forward(real* losses, real* logits_to_probs, const int* targets, int N, int V, int Vp) {
    // losses (N); logits (N,Vp) overwritten by probs; the row sum in double, so that the float
    // build's loss is accurate even for a 50k vocabulary. The loss is log(sum) + max - logit[target]
    // (log-sum-exp, as PyTorch and the GPU kernel compute it), not -log(prob[target]): a target
    // whose probability underflows (a logit gap beyond ~88 in fp32, as a confidently wrong model
    // gives) still costs its full loss; clamping the probability would cap it at a wrong value.
    // Each row's max, exps and sum are three loops that vectorize (fast_exp, and 16 fixed lanes for
    // the max and the sum: one serial chain of double adds was most of this function's time, 21% of
    // a quickstart step on a Zen 5, with libm's expf another 10%). The lanes are fixed, so the bits
    // depend neither on the machine's vector width nor on the thread count.
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        real* row = logits_to_probs + (size_t)i * Vp;
        real maxv = max_in_lanes(row, V);
        double target_logit = row[targets[i]];
        for (int j = 0; j < V; j++) row[j] = vexp(row[j] - maxv);
        double sum = sum_in_double_lanes(row, V);
        real inv = (real)(1.0 / sum);
        for (int j = 0; j < V; j++) row[j] *= inv;
        for (int j = V; j < Vp; j++) row[j] = 0;
        if (losses) losses[i] = (real)(std::log(sum) + (double)maxv - target_logit);
    }
}

template <typename real>
void crossentropy_softmax_backward(real* probs_to_dlogits, const int* targets, real dloss, int N, int Vp) {
    // dlogits = (probs - onehot(target)) * dloss, where dloss = 1/(number of positions averaged)
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        real* row = probs_to_dlogits + (size_t)i * Vp;
        for (int j = 0; j < Vp; j++) row[j] *= dloss;
        row[targets[i]] -= dloss;
    }
}

// ----------------------------------------------------------------------------
// The model

// Activations kept for backward, for one (B, T). Per-layer ones are stacked along L.
template <typename real>
struct Activations {
    real* encoded;   // (B,T,C) embedding output = input of layer 0
    real* ln1;       // (L,B,T,C)
    real* ln1_mean;  // (L,B,T) GPT-2
    real* ln1_rstd;  // (L,B,T)
    real* qkv;       // (L,B,T,W) raw projections [q | k | v], W = (H+2Hkv)D
    real* qk_rot;    // (L,B,T,(H+Hkv)D) Llama: q, k after QK-norm and RoPE (what attention reads)
    real* qk_rstd;   // (L,B,T,H+Hkv) Llama QK-norm
    real* atty;      // (L,B,T,H*D) attention output, before the output projection
    real* att_lse;   // (L,B,H,T) log-sum-exp of each score row
    real* res_att;   // (L,B,T,C) residual stream after the attention block
    real* ln2;       // (L,B,T,C)
    real* ln2_mean;  // (L,B,T) GPT-2
    real* ln2_rstd;  // (L,B,T)
    real* fch;       // (L,B,T,FW) MLP pre-activation
    real* fch_act;   // (L,B,T,F) GELU / SwiGLU output
    real* res_mlp;   // (L,B,T,C) residual stream after the block = input of layer l+1
    real* lnf;       // (B,T,C)
    real* lnf_mean;  // (B,T) GPT-2
    real* lnf_rstd;  // (B,T)
    real* logits;    // (B,T,Vp) logits, then probs, then dlogits (in place)
    real* losses;    // (B,T)
};
#define NUM_ACTIVATION_TENSORS 21
static_assert(sizeof(Activations<float>) == NUM_ACTIVATION_TENSORS * sizeof(float*), "Activations must be exactly its pointers");

inline std::vector<size_t> activation_sizes(const ModelConfig& c, int B, int T) {
    size_t L = c.n_layer, BT = (size_t)B * T, C = c.n_embd, D = c.head_dim, H = c.n_head, Hkv = c.n_kv_head, F = c.ffn_dim;
    bool gpt2 = c.arch == ARCH_GPT2;
    size_t W = (H + 2 * Hkv) * D, FW = gpt2 ? F : 2 * F;
    return {BT * C,
            L * BT * C, gpt2 ? L * BT : 0, L * BT,
            L * BT * W, gpt2 ? 0 : L * BT * (H + Hkv) * D, (!gpt2 && c.qk_norm) ? L * BT * (H + Hkv) : 0,
            L * BT * H * D, L * B * H * T,
            L * BT * C,
            L * BT * C, gpt2 ? L * BT : 0, L * BT,
            L * BT * FW, L * BT * F,
            L * BT * C,
            BT * C, gpt2 ? BT : 0, BT,
            BT * c.padded_vocab_size, BT};
}

// Gradients of activations during backward: scratch reused by every layer (the reverse layer
// loop consumes each before the next layer overwrites it). Value paths add their cross-layer
// accumulators here.
template <typename real>
struct BackwardScratch {
    real* dresidual;  // (B,T,C) gradient of the residual stream, carried down through the layers
    real* dln;        // (B,T,C) gradient of a norm's output (ln1, ln2 or lnf)
    real* datty;      // (B,T,H*D)
    real* dqkv;       // (B,T,W)
    real* dqk_rot;    // (B,T,(H+Hkv)D) Llama: gradient wrt q, k after RoPE
    real* dfch;       // (B,T,FW)
    real* dfch_act;   // (B,T,F)
    real* dk_att;     // (B,T,Hkv*D) the core's gradient wrt the keys it read (the value path routes it)
    real* dv_att;     // (B,T,Hkv*D) likewise for values
};
#define NUM_SCRATCH_TENSORS 9

inline std::vector<size_t> scratch_sizes(const ModelConfig& c, int B, int T) {
    size_t BT = (size_t)B * T, C = c.n_embd, D = c.head_dim, H = c.n_head, Hkv = c.n_kv_head, F = c.ffn_dim;
    bool gpt2 = c.arch == ARCH_GPT2;
    return {BT * C, BT * C, BT * H * D, BT * (H + 2 * Hkv) * D, gpt2 ? 0 : BT * (H + Hkv) * D, BT * (gpt2 ? F : 2 * F), BT * F, BT * Hkv * D, BT * Hkv * D};
}

// Carves one allocation into the fields of a struct made only of real* pointers.
template <typename real, typename Struct>
real* alloc_and_point(Struct* s, const std::vector<size_t>& sizes, const char* what) {
    size_t total = 0;
    for (size_t n : sizes) total += n;
    real* mem = (real*)calloc_check(total, sizeof(real), what);
    real** ptrs = reinterpret_cast<real**>(s);
    size_t off = 0;
    for (size_t i = 0; i < sizes.size(); i++) {
        ptrs[i] = sizes[i] ? mem + off : nullptr;
        off += sizes[i];
    }
    return mem;
}

// VP: the value path (cpu/value_paths.h). The trainer uses ActiveValuePath, chosen at compile
// time; the tests instantiate every path.
template <typename real, typename VP = ActiveValuePath>
struct GPT {
    ModelConfig config;
    std::vector<ParamSpec> specs;
    size_t num_params = 0;
    ParamTensors<real> params, grads;  // same layout over two buffers
    real* params_memory = nullptr;
    real* grads_memory = nullptr;
    real* m_memory = nullptr;  // AdamW first moment (allocated on the first update)
    real* v_memory = nullptr;  // AdamW second moment
    bool zero_shard = false;   // ZeRO-1: m_memory, v_memory hold only this rank's dist_shard of the parameters
    // activations, allocated for the (B, T) of the first forward; smaller B, T reuse them
    int alloc_B = 0, alloc_T = 0;
    Activations<real> acts;
    real* acts_memory = nullptr;
    BackwardScratch<real> scratch;
    real* scratch_memory = nullptr;
    real* rope_cos = nullptr;  // (maxT, D/2) Llama
    real* rope_sin = nullptr;
    // the value path's buffers, and the K/V each layer's attention read in the last forward
    typename VP::template State<real> vp;
    std::vector<AttnKV<real>> kv_read;
    // the batch of the last forward, which backward uses
    int B = 0, T = 0;
    std::vector<int> inputs, targets;
    float mean_loss = -1.0f;  // of the last forward with targets
    // tests: keep a copy of the logits (B,T,Vp) before the softmax overwrites them
    bool save_logits = false;
    std::vector<real> debug_logits;
};

template <typename real, typename VP>
void gpt_build(GPT<real, VP>* m, const ModelConfig& c) {
    if (c.vp.path != VP::id)
        runtime_error(nullptr, "internal: a %s model built with the %s value path code", value_path_name(c.vp.path), value_path_name(VP::id));
    m->config = c;
    m->specs = param_specs(c);
    m->num_params = count_params(m->specs);
    m->params_memory = (real*)calloc_check(m->num_params, sizeof(real), "parameters");
    m->grads_memory = (real*)calloc_check(m->num_params, sizeof(real), "gradients");
    point_param_tensors(&m->params, m->params_memory, m->specs);
    point_param_tensors(&m->grads, m->grads_memory, m->specs);
    if (c.arch == ARCH_LLAMA) {
        int half = c.head_dim / 2;
        m->rope_cos = (real*)malloc_check(sizeof(real) * c.max_seq_len * half, "rope table");
        m->rope_sin = (real*)malloc_check(sizeof(real) * c.max_seq_len * half, "rope table");
        for (int t = 0; t < c.max_seq_len; t++)
            for (int i = 0; i < half; i++) {
                double freq = std::pow((double)c.rope_theta, -2.0 * i / c.head_dim);
                m->rope_cos[(size_t)t * half + i] = (real)std::cos(t * freq);  // maxT * D/2 may pass 2^31 (--max-seq 2^20)
                m->rope_sin[(size_t)t * half + i] = (real)std::sin(t * freq);
            }
    }
}

// Fills the parameters from the seed (host/params.h: the same values in every build).
template <typename real, typename VP>
void gpt_init_params(GPT<real, VP>* m, uint64_t seed) {
    init_params_from_seed(m->specs, m->config, m->params_memory, seed);
}

template <typename real, typename VP>
void gpt_free(GPT<real, VP>* m) {
    free(m->params_memory);
    free(m->grads_memory);
    free(m->m_memory);
    free(m->v_memory);
    free(m->acts_memory);
    free(m->scratch_memory);
    free(m->rope_cos);
    free(m->rope_sin);
    *m = GPT<real, VP>();
}

template <typename real, typename VP>
void gpt_ensure_activations(GPT<real, VP>* m, int B, int T) {
    if (m->acts_memory) {
        if ((size_t)B * T > (size_t)m->alloc_B * m->alloc_T || T > m->alloc_T)
            runtime_error(nullptr, "internal: forward with B=%d T=%d exceeds the allocated B=%d T=%d", B, T, m->alloc_B, m->alloc_T);
        return;
    }
    if (T > m->config.max_seq_len) runtime_error("lower --seq-len", "T=%d exceeds the model's max sequence length %d", T, m->config.max_seq_len);
    m->alloc_B = B;
    m->alloc_T = T;
    m->acts_memory = alloc_and_point<real>(&m->acts, activation_sizes(m->config, B, T), "activations");
    m->scratch_memory = alloc_and_point<real>(&m->scratch, scratch_sizes(m->config, B, T), "backward scratch");
    VP::init(&m->vp, m->config, vp_dims(m->config, B, T));
    m->kv_read.assign(m->config.n_layer, AttnKV<real>());
}


// Forward pass. inputs, targets (B,T). With targets, computes the mean loss and leaves probs in
// acts.logits for backward. With targets == NULL (sampling), only the logits of the last position
// of each sequence are computed (rows b*T + T-1 of acts.logits).
template <typename real, typename VP>
void gpt_forward(GPT<real, VP>* m, const int* inputs, const int* targets, int B, int T) {
    const ModelConfig& c = m->config;
    gpt_ensure_activations(m, B, T);
    int L = c.n_layer, C = c.n_embd, H = c.n_head, Hkv = c.n_kv_head, D = c.head_dim, F = c.ffn_dim, V = c.vocab_size, Vp = c.padded_vocab_size;
    int BT = B * T;
    bool gpt2 = c.arch == ARCH_GPT2;
    int QK = (H + Hkv) * D, W = (H + 2 * Hkv) * D, FW = gpt2 ? F : 2 * F;
    real eps = (real)c.norm_eps;
    check_token_ids(inputs, targets, BT, V);
    m->B = B;
    m->T = T;
    m->inputs.assign(inputs, inputs + BT);
    if (targets) m->targets.assign(targets, targets + BT);

    Activations<real>& a = m->acts;
    ParamTensors<real>& p = m->params;
    encoder_forward(a.encoded, inputs, p.wte, p.wpe, B, T, C);
    for (int l = 0; l < L; l++) {
        LayerParams<real> lp = layer_params(p, c, l);
        size_t lBT = (size_t)l * BT;
        const real* x = l == 0 ? a.encoded : a.res_mlp + (lBT - BT) * C;  // the block's input
        real* ln1 = a.ln1 + lBT * C;
        real* ln1_rstd = a.ln1_rstd + lBT;
        real* qkv = a.qkv + lBT * W;
        real* atty = a.atty + lBT * H * D;
        real* lse = a.att_lse + lBT * H;
        real* res_att = a.res_att + lBT * C;
        real* ln2 = a.ln2 + lBT * C;
        real* ln2_rstd = a.ln2_rstd + lBT;
        real* fch = a.fch + lBT * FW;
        real* fch_act = a.fch_act + lBT * F;
        real* res_mlp = a.res_mlp + lBT * C;

        // attention block: x + attproj(attention(norm1(x)))
        if (gpt2) layernorm_forward(ln1, a.ln1_mean + lBT, ln1_rstd, x, lp.ln1_w, lp.ln1_b, BT, C, eps);
        else rmsnorm_forward(ln1, ln1_rstd, x, lp.ln1_w, BT, C, eps);
        matmul_forward(qkv, ln1, lp.qk_w, lp.qk_b, BT, C, QK, W);            // q|k into columns [0, QK)
        if (lp.v_w) matmul_forward(qkv + QK, ln1, lp.v_w, lp.v_b, BT, C, Hkv * D, W);  // v into columns [QK, W)
        const real* q = qkv;
        const real* k = qkv + H * D;
        long qk_rs = W;
        if (!gpt2) {
            // Llama: optional QK-norm, then RoPE, into qk_rot; values stay raw in qkv
            real* qk_rot = a.qk_rot + lBT * QK;
            if (c.qk_norm) qknorm_forward(qk_rot, a.qk_rstd + lBT * (H + Hkv), qkv, lp.q_norm_w, lp.k_norm_w, BT, H, Hkv, D, W, QK, eps);
            else
                for (int i = 0; i < BT; i++) memcpy(qk_rot + (size_t)i * QK, qkv + (size_t)i * W, sizeof(real) * QK);
            rope_forward(qk_rot, m->rope_cos, m->rope_sin, B, T, H + Hkv, D, QK);
            q = qk_rot;
            k = qk_rot + H * D;
            qk_rs = QK;
        }
        // the value path chooses the keys and values this layer's attention reads
        LayerQKV<real> own;
        own.q = q;
        own.q_rs = qk_rs;
        own.k = k;
        own.k_rs = qk_rs;
        own.v = lp.v_w ? qkv + QK : nullptr;
        own.v_rs = W;
        AttnKV<real> kv = m->kv_read[l] = VP::forward(&m->vp, c, vp_dims(c, B, T), l, own, p.vp_lambda);
        attention_forward(atty, lse, q, kv.k, kv.v, B, T, H, Hkv, D, qk_rs, kv.k_rs, kv.v_rs);
        matmul_forward(res_att, atty, lp.attproj_w, lp.attproj_b, BT, H * D, C, C);
        residual_forward(res_att, res_att, x, (size_t)BT * C);

        // MLP block: res_att + fcproj(act(fc(norm2(res_att))))
        if (gpt2) layernorm_forward(ln2, a.ln2_mean + lBT, ln2_rstd, res_att, lp.ln2_w, lp.ln2_b, BT, C, eps);
        else rmsnorm_forward(ln2, ln2_rstd, res_att, lp.ln2_w, BT, C, eps);
        matmul_forward(fch, ln2, lp.fc_w, lp.fc_b, BT, C, FW, FW);
        if (gpt2) gelu_forward(fch_act, fch, (size_t)BT * F);
        else swiglu_forward(fch_act, fch, BT, F);
        matmul_forward(res_mlp, fch_act, lp.fcproj_w, lp.fcproj_b, BT, F, C, C);
        residual_forward(res_mlp, res_mlp, res_att, (size_t)BT * C);
    }
    const real* x_final = a.res_mlp + (size_t)(L - 1) * BT * C;
    if (gpt2) layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, x_final, p.lnf_w, p.lnf_b, BT, C, eps);
    else rmsnorm_forward(a.lnf, a.lnf_rstd, x_final, p.lnf_w, BT, C, eps);
    const real* head = output_head(p, c);  // (Vp, C)

    if (!targets) {
        // sampling: only the last position of each row is needed
        for (int b = 0; b < B; b++)
            matmul_forward(a.logits + ((size_t)b * T + T - 1) * Vp, a.lnf + ((size_t)b * T + T - 1) * C, head, (const real*)nullptr, 1, C, Vp, Vp);
        m->mean_loss = -1.0f;
        return;
    }
    matmul_forward(a.logits, a.lnf, head, (const real*)nullptr, BT, C, Vp, Vp);
    if (m->save_logits) m->debug_logits.assign(a.logits, a.logits + (size_t)BT * Vp);
    crossentropy_softmax_forward(a.losses, a.logits, targets, BT, V, Vp);
    double loss = 0;
    for (int i = 0; i < BT; i++) loss += a.losses[i];
    m->mean_loss = (float)(loss / BT);
}

template <typename real, typename VP>
void gpt_zero_grad(GPT<real, VP>* m) {
    memset(m->grads_memory, 0, sizeof(real) * m->num_params);
}

// Backward of the last forward. loss_scale multiplies d(mean loss): 1/grad_accum_steps, so the
// gradients accumulated over micro-batches are those of the mean over the whole step.
template <typename real, typename VP>
void gpt_backward(GPT<real, VP>* m, real loss_scale) {
    if (m->mean_loss < 0) runtime_error(nullptr, "internal: backward without a forward with targets");
    const ModelConfig& c = m->config;
    int B = m->B, T = m->T;
    int L = c.n_layer, C = c.n_embd, H = c.n_head, Hkv = c.n_kv_head, D = c.head_dim, F = c.ffn_dim, Vp = c.padded_vocab_size;
    int BT = B * T;
    bool gpt2 = c.arch == ARCH_GPT2;
    int QK = (H + Hkv) * D, W = (H + 2 * Hkv) * D, FW = gpt2 ? F : 2 * F;
    Activations<real>& a = m->acts;
    ParamTensors<real>& p = m->params;
    ParamTensors<real>& g = m->grads;
    BackwardScratch<real>& s = m->scratch;

    // the loss is the mean over BT positions: dloss = 1/BT per position (a small inline backward of the mean)
    crossentropy_softmax_backward(a.logits, m->targets.data(), loss_scale / (real)BT, BT, Vp);
    memset(s.dln, 0, sizeof(real) * BT * C);
    // tied: wte's gradient is the classifier's plus the lookup's (encoder_backward below)
    matmul_backward(s.dln, output_head(g, c), (real*)nullptr, a.logits, a.lnf, output_head(p, c), BT, C, Vp, Vp);
    memset(s.dresidual, 0, sizeof(real) * BT * C);
    VpDims dims = vp_dims(c, B, T);
    VP::backward_begin(&m->vp, c, dims);
    const real* x_final = a.res_mlp + (size_t)(L - 1) * BT * C;
    if (gpt2) layernorm_backward(s.dresidual, g.lnf_w, g.lnf_b, s.dln, x_final, p.lnf_w, a.lnf_mean, a.lnf_rstd, BT, C);
    else rmsnorm_backward(s.dresidual, g.lnf_w, s.dln, x_final, p.lnf_w, a.lnf_rstd, BT, C);

    for (int l = L - 1; l >= 0; l--) {
        LayerParams<real> lp = layer_params(p, c, l);
        LayerParams<real> lg = layer_params(g, c, l);
        size_t lBT = (size_t)l * BT;
        const real* x = l == 0 ? a.encoded : a.res_mlp + (lBT - BT) * C;
        const real* ln1 = a.ln1 + lBT * C;
        const real* qkv = a.qkv + lBT * W;
        const real* atty = a.atty + lBT * H * D;
        const real* res_att = a.res_att + lBT * C;
        const real* ln2 = a.ln2 + lBT * C;
        const real* fch = a.fch + lBT * FW;
        const real* fch_act = a.fch_act + lBT * F;
        // s.dresidual holds dL/d(res_mlp of layer l): the block output

        // MLP block backward
        memset(s.dfch_act, 0, sizeof(real) * BT * F);
        matmul_backward(s.dfch_act, lg.fcproj_w, lg.fcproj_b, s.dresidual, fch_act, lp.fcproj_w, BT, F, C, C);
        memset(s.dfch, 0, sizeof(real) * BT * FW);
        if (gpt2) gelu_backward(s.dfch, fch, s.dfch_act, (size_t)BT * F);
        else swiglu_backward(s.dfch, fch, s.dfch_act, BT, F);
        memset(s.dln, 0, sizeof(real) * BT * C);
        matmul_backward(s.dln, lg.fc_w, lg.fc_b, s.dfch, ln2, lp.fc_w, BT, C, FW, FW);
        // the residual branch passes dresidual through unchanged; the norm adds its part
        if (gpt2) layernorm_backward(s.dresidual, lg.ln2_w, lg.ln2_b, s.dln, res_att, lp.ln2_w, a.ln2_mean + lBT, a.ln2_rstd + lBT, BT, C);
        else rmsnorm_backward(s.dresidual, lg.ln2_w, s.dln, res_att, lp.ln2_w, a.ln2_rstd + lBT, BT, C);
        // s.dresidual now holds dL/d(res_att)

        // attention block backward
        memset(s.datty, 0, sizeof(real) * BT * H * D);
        matmul_backward(s.datty, lg.attproj_w, lg.attproj_b, s.dresidual, atty, lp.attproj_w, BT, H * D, C, C);
        // attention core: dq into the layer's own query slot, dK and dV of what it read into
        // dk_att, dv_att, which the value path routes (own k/v slots, or other layers' accumulators)
        memset(s.dqkv, 0, sizeof(real) * BT * W);
        memset(s.dk_att, 0, sizeof(real) * BT * Hkv * D);
        memset(s.dv_att, 0, sizeof(real) * BT * Hkv * D);
        const real* q = gpt2 ? qkv : a.qk_rot + lBT * QK;
        long q_rs = gpt2 ? W : QK;
        LayerQKVGrads<real> own;
        own.dq = gpt2 ? s.dqkv : s.dqk_rot;
        own.dq_rs = q_rs;
        own.dk = own.dq + H * D;
        own.dk_rs = q_rs;
        own.dv = s.dqkv + QK;
        own.dv_rs = W;
        if (!gpt2) memset(s.dqk_rot, 0, sizeof(real) * BT * QK);
        const AttnKV<real>& kv = m->kv_read[l];
        attention_backward(own.dq, s.dk_att, s.dv_att, s.datty, q, kv.k, kv.v, atty, a.att_lse + lBT * H, B, T, H, Hkv, D, q_rs, kv.k_rs, kv.v_rs,
                           (long)Hkv * D);
        // the core wrote dK, dV densely: (B,T,Hkv*D)
        VP::backward(&m->vp, c, dims, l, s.dk_att, s.dv_att, own, p.vp_lambda, g.vp_lambda);
        if (!gpt2) {
            rope_backward(s.dqk_rot, m->rope_cos, m->rope_sin, B, T, H + Hkv, D, QK);
            if (c.qk_norm)
                qknorm_backward(s.dqkv, lg.q_norm_w, lg.k_norm_w, s.dqk_rot, qkv, lp.q_norm_w, lp.k_norm_w, a.qk_rstd + lBT * (H + Hkv), BT, H, Hkv, D, W, QK);
            else
                for (int i = 0; i < BT; i++)
                    for (int j = 0; j < QK; j++) s.dqkv[(size_t)i * W + j] += s.dqk_rot[(size_t)i * QK + j];
        }
        memset(s.dln, 0, sizeof(real) * BT * C);
        matmul_backward(s.dln, lg.qk_w, lg.qk_b, s.dqkv, ln1, lp.qk_w, BT, C, QK, W);
        if (lp.v_w) matmul_backward(s.dln, lg.v_w, lg.v_b, s.dqkv + QK, ln1, lp.v_w, BT, C, Hkv * D, W);
        if (gpt2) layernorm_backward(s.dresidual, lg.ln1_w, lg.ln1_b, s.dln, x, lp.ln1_w, a.ln1_mean + lBT, a.ln1_rstd + lBT, BT, C);
        else rmsnorm_backward(s.dresidual, lg.ln1_w, s.dln, x, lp.ln1_w, a.ln1_rstd + lBT, BT, C);
        // s.dresidual now holds dL/d(x): the gradient of the block's input
    }
    encoder_backward(g.wte, g.wpe, s.dresidual, m->inputs.data(), B, T, C);
}

// Sum of the squares of x[off, off + count), in double over fixed chunks from off, then the chunks
// in order, so the result does not depend on the thread count.
template <typename real>
double sumsq_fixed_chunks(const real* x, size_t off, size_t count) {
    const size_t chunk = 1 << 16;
    size_t end = off + count, nchunks = CEIL_DIV(count, chunk);
    std::vector<double> partial(nchunks);
#pragma omp parallel for
    for (size_t ci = 0; ci < nchunks; ci++) {
        double s = 0;
        for (size_t i = off + ci * chunk; i < std::min(end, off + (ci + 1) * chunk); i++) s += (double)x[i] * x[i];
        partial[ci] = s;
    }
    double total = 0;
    for (double s : partial) total += s;
    return total;
}

// Sum of the squared gradients [off, off + count). Data parallel adds the ranks' shards of it
// (host/train_loop.h).
template <typename real, typename VP>
double gpt_grad_sumsq(const GPT<real, VP>* m, size_t off, size_t count) {
    return sumsq_fixed_chunks(m->grads_memory, off, count);
}

// Sum of the squared weights (every rank holds them all, ZeRO-1 or not), in double: finite exactly
// when every weight is, so the trainer can refuse to evaluate, sample or save weights that an update
// made NaN or inf (host/train_loop.h).
template <typename real, typename VP>
double model_weights_sumsq(const GPT<real, VP>* m) {
    return sumsq_fixed_chunks(m->params_memory, 0, m->num_params);
}

// Global L2 norm of all gradients. PyTorch: torch.nn.utils.clip_grad_norm_'s total norm.
template <typename real, typename VP>
double gpt_grad_norm(const GPT<real, VP>* m) {
    return std::sqrt(gpt_grad_sumsq(m, 0, m->num_params));
}

// AdamW (Loshchilov & Hutter), decoupled weight decay on tensors with spec.decay = 1, on the
// parameters [off, off+count) only, with m, v indexed from off (ZeRO-1 keeps only that slice; the
// per-element arithmetic does not depend on the range, so a sharded step is bit-identical to the
// full one). PyTorch: torch.optim.AdamW(params, lr, betas=(beta1, beta2), eps, weight_decay).
// step is 1-based.
template <typename real, typename VP>
void gpt_update_range(GPT<real, VP>* m, const AdamWSettings& s, int step, size_t off, size_t count) {
    if (!m->m_memory) {
        m->m_memory = (real*)calloc_check(std::max<size_t>(1, count), sizeof(real), "AdamW m");
        m->v_memory = (real*)calloc_check(std::max<size_t>(1, count), sizeof(real), "AdamW v");
    }
    real b1c = (real)(1.0 - std::pow((double)s.beta1, step)), b2c = (real)(1.0 - std::pow((double)s.beta2, step));
    size_t start = 0;
    for (const ParamSpec& spec : m->specs) {
        size_t lo = std::max(start, off), hi = std::min(start + spec.count, off + count);
        start += spec.count;
        if (lo >= hi) continue;
        real wd = spec.decay ? (real)s.weight_decay : (real)0;
        real lr = (real)tensor_lr(spec, s);
        real* p = m->params_memory;
        real* g = m->grads_memory;
        real* mm = m->m_memory - off;  // indexed by the global position
        real* vv = m->v_memory - off;
#pragma omp parallel for
        for (size_t i = lo; i < hi; i++) {
            real grad = g[i] * (real)s.grad_scale;
            mm[i] = (real)s.beta1 * mm[i] + (real)(1 - s.beta1) * grad;
            vv[i] = (real)s.beta2 * vv[i] + (real)(1 - s.beta2) * grad * grad;
            real mhat = mm[i] / b1c, vhat = vv[i] / b2c;
            p[i] -= lr * (mhat / (std::sqrt(vhat) + (real)s.eps) + wd * p[i]);
        }
    }
}

template <typename real, typename VP>
void gpt_update(GPT<real, VP>* m, const AdamWSettings& s, int step) {
    gpt_update_range(m, s, step, 0, m->num_params);
}

// ----------------------------------------------------------------------------
// Sampling

// For the shared sampler (host/train_loop.h generate_tokens): the logits of a sequence's last
// position, in float whatever real is.
template <typename real, typename VP>
void gpt_last_logits(GPT<real, VP>* m, const int* tokens, int T, std::vector<float>* logits) {
    gpt_forward(m, tokens, (const int*)nullptr, 1, T);
    const real* last = m->acts.logits + (size_t)(T - 1) * m->config.padded_vocab_size;
    logits->assign(last, last + m->config.padded_vocab_size);
}

// The per-position losses -log p(target), (B,T) row-major, of the last forward with targets
// (multiple-choice evaluation, host/mc_eval.h).
template <typename real, typename VP>
void gpt_position_losses(const GPT<real, VP>* m, std::vector<double>* out) {
    size_t n = (size_t)m->B * m->T;
    out->assign(m->acts.losses, m->acts.losses + n);
}

// Depth-Attention: adds the depth softmax weights of the last forward, summed over positions and
// KV heads, to a (host/value_path.h); false for the other paths.
template <typename real, typename VP>
bool model_depth_alpha_add(GPT<real, VP>* m, DepthAlphaSums* a) {  // not const: see host/train_loop.h
    if constexpr (VP::id == VP_DEPTH) {
        const ModelConfig& c = m->config;
        int mc = m->vp.max_cands;
        size_t rows = (size_t)m->B * m->T * c.n_kv_head;  // B x T is an int, times Hkv may not be
        size_t layer = rows * mc;  // each layer's block, at this forward's B x T (cpu/vp_depth.h)
        for (int l = 1; l < c.n_layer; l++)
            for (size_t r = 0; r < rows; r++)
                for (int n = 0; n <= depth_num_sources(c.vp, l); n++) a->sum[(size_t)l * mc + n] += m->vp.alpha[l * layer + (size_t)r * mc + n];
        a->count += rows;
        return true;
    } else {
        (void)m;
        (void)a;
        return false;
    }
}

// ----------------------------------------------------------------------------
// The backend of the shared training program (host/train_loop.h lists what it needs)

// The CPU model of the training program. A distinct name (not "Model"), so that test_gpt.cu can
// hold this model and the GPU one in one program and diff them.
typedef GPT<float> CpuModel;

inline const char* model_build_name(const CpuModel*) { return "cpu-fp32"; }

inline std::vector<float> model_lambdas(const CpuModel* m) {
    int n = value_path_num_lambdas(m->config.vp, m->config.n_layer);
    return n ? std::vector<float>(m->params.vp_lambda, m->params.vp_lambda + n) : std::vector<float>();
}

// Under ZeRO-1 (model_dist_shard_optimizer came first) only this rank's slice of m and v is kept;
// the file streams through in pieces, so loading never holds a second copy of the state.
inline void model_load(CpuModel* m, const std::string& path, CheckpointMeta* meta, bool with_optimizer) {
    DistShard own = m->zero_shard ? dist_shard(m->num_params, dist_rank(), dist_world()) : DistShard{0, m->num_params};
    if (with_optimizer) {
        free(m->m_memory);
        free(m->v_memory);
        m->m_memory = (float*)calloc_check(std::max<size_t>(1, own.count), sizeof(float), "AdamW m");
        m->v_memory = (float*)calloc_check(std::max<size_t>(1, own.count), sizeof(float), "AdamW v");
    }
    float* dst[3] = {m->params_memory, m->m_memory, m->v_memory};
    checkpoint_read_shard(path, meta, m->num_params, with_optimizer, own,
                          [&](int t, size_t at, const float* x, size_t count) { memcpy(dst[t] + at, x, count * sizeof(float)); });
}

// Every rank calls this (with world > 1 it is collective); only rank 0 writes. Under ZeRO-1 rank 0
// gathers the optimizer shards, so a checkpoint is always the whole state, whatever the world.
// The state streams to the file in pieces (checkpoint_save_streamed), so rank 0 holds one piece
// beyond the model instead of a full copy of m and v.
inline void model_save(CpuModel* m, const std::string& dir, CheckpointMeta* meta) {
    meta->num_params = (int64_t)m->num_params;
    meta->has_optimizer = m->m_memory != nullptr;
    size_t from = m->zero_shard ? dist_shard(m->num_params, dist_rank(), dist_world()).offset : 0;  // where m, v begin
    const float* src[3] = {m->params_memory, m->m_memory, m->v_memory};
    const bool sharded[3] = {false, m->zero_shard, m->zero_shard};  // the weights are whole on every rank
    checkpoint_save_streamed(dir, *meta, sharded, [&](int t, size_t off, size_t count, float* out) {
        memcpy(out, src[t] + (off - (t ? from : 0)), count * sizeof(float));
    });
}

// ----------------------------------------------------------------------------
// Data parallel (host/distributed.h). host/train_loop.h calls these only when world > 1; every rank
// holds the whole model and identical parameters.

inline bool model_supports_dist(const CpuModel*) { return true; }

// Gradients: the sum over ranks (each rank's backward already scaled by 1/world). ZeRO-1 needs
// only its own shard summed (its update and its share of the norm read nothing else): the
// reduce-scatter alone, half the traffic of the all-reduce (= reduce-scatter + all-gather), whose
// shard values are the same bits.
inline void model_dist_reduce_grads(CpuModel* m) {
    if (m->zero_shard) dist_reduce_scatter_sum(m->grads_memory, m->num_params);
    else dist_allreduce_sum(m->grads_memory, m->num_params);
}

// ZeRO-1: AdamW m, v only for this rank's contiguous slice of the flat parameters, from now on:
// the first update allocates that slice (gpt_update_range), a load reads only it (model_load).
inline void model_dist_shard_optimizer(CpuModel* m) {
    if (m->m_memory) runtime_error(nullptr, "internal: --zero 1 must be set before the optimizer state exists (before model_load)");
    m->zero_shard = true;
}

// The optimizer step on reduced gradients. ZeRO-0: every rank updates everything (identically).
// ZeRO-1: every rank updates its slice, then the slices are gathered.
inline void model_dist_update(CpuModel* m, const AdamWSettings& s, int step) {
    if (!m->zero_shard) {
        gpt_update(m, s, step);
        return;
    }
    DistShard sh = dist_shard(m->num_params, dist_rank(), dist_world());
    gpt_update_range(m, s, step, sh.offset, sh.count);
    dist_allgather(m->params_memory, m->num_params);
}

#include "host/train_loop.h"   // defines: train_main, the training program shared with the GPU build

#ifndef TESTING
int main(int argc, char** argv) { return train_main<CpuModel>(argc, argv); }
#endif
