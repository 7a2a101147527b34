// kernels/matmul.cuh: every linear layer, through cuBLASLt, plus the bias gradient.
//
//   matmul_forward   out = inp @ weight^T (+ bias) (+ residual)     PyTorch: F.linear(inp, w, b) (+ x)
//   matmul_forward_lerp  out = (1 - lambda) (inp @ weight^T + bias) + lambda other   (ResFormer's value mix)
//   matmul_backward  dinp (+)= dout @ weight (or gelu'(x) * (dout @ weight)),  dweight += dout^T @ inp,  dbias += sum_rows dout
//
// Row-major (PyTorch) matrices are column-major matrices transposed, so every product below is
// written in cuBLAS's column-major terms; each call says which. Operands are floatX, accumulation
// is fp32 (CUBLAS_COMPUTE_32F: in the FP32 build this is true fp32, no TF32), the weight gradient
// is written in fp32 (mixed-type GEMM: bf16 A/B, fp32 C/D) and accumulated with beta = 1, so
// gradient accumulation over micro-batches happens in fp32.
//
// Epilogues used: BIAS (bias added in fp32 before the single rounding of the output), the C
// operand with beta = 1 for the residual add (res_att = x + attproj(...) in one GEMM: the residual
// adds are fused here, so there is no separate residual kernel), DGELU in the BF16 build's MLP
// backward (the GELU's backward applied to the fcproj input gradient before it is rounded), and,
// behind matmul_bias_grad_epilogue (off by default until a GPU has timed it), BGRADB: the bias
// gradient's column sums of dout taken by the weight-gradient GEMM, which reads dout anyway.
//
// Determinism: cuBLAS(Lt) documents bit-wise reproducible results run to run on the same GPU
// model and toolkit version (split-K reductions, when chosen, are ordered: see
// cublasLtReductionScheme_t). For a bf16 output the preference allows split-K only with its
// partial sums in fp32 (COMPUTE_TYPE), so that the output is rounded once: by default cuBLASLt may
// also add them in place in D, in bf16 (the emulator picks that wherever it is allowed, and
// test_gpt's GELU epilogue tests then fail). The algorithm is picked once per shape by the
// heuristic and cached, so every step (and a resumed process) runs the same kernels. The bias gradient is ours by
// default: a two-stage fixed-order reduction (kernels/reduce.cuh), never atomics; with the BGRADB
// epilogue it is cuBLASLt's, inside the cached algorithm, so just as reproducible.
//
// defines: matmul_init, matmul_free, matmul_forward, matmul_forward_gelu, matmul_forward_lerp, matmul_backward, bias_backward,
//          matmul_bias_grad_epilogue
#pragma once

#include <map>
#include <set>
#include <string>

#include "kernels/common.cuh"
#include "kernels/reduce.cuh"

namespace gpu {

// ----------------------------------------------------------------------------
// cuBLASLt state: one handle, one workspace (32 MiB: cuBLAS's recommendation for Hopper), and the
// algorithm chosen for each shape.

struct MatmulState {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 32u << 20;
    std::map<std::string, cublasLtMatmulAlgo_t> algos;
    std::set<std::string> refused;  // shapes whose optional epilogue (BGRADB) the heuristic had no algorithm for
};
inline MatmulState& matmul_state() {
    static MatmulState s;
    return s;
}

inline void matmul_init() {
    MatmulState& s = matmul_state();
    if (s.handle) return;
    cublasCheck(cublasLtCreate(&s.handle));
    s.workspace = cuda_malloc_check(s.workspace_bytes, "cuBLASLt workspace");
}

inline void matmul_free() {
    MatmulState& s = matmul_state();
    if (!s.handle) return;
    cudaCheck(cudaFree(s.workspace));
    cublasCheck(cublasLtDestroy(s.handle));
    s = MatmulState();
}

constexpr cudaDataType_t CUDA_FLOATX = FLOATX_IS_FLOAT ? CUDA_R_32F : CUDA_R_16BF;

// largest power of two (<= 256) dividing both the address and the leading dimension in bytes:
// what we may promise cuBLASLt about alignment (it assumes 256 unless told)
inline uint32_t operand_alignment(const void* p, long ld, size_t elem) {
    uint64_t x = (uint64_t)(uintptr_t)p | (uint64_t)(ld * (long)elem) | 256u;
    return (uint32_t)(x & (~x + 1));
}

// D (m x n, column-major, ld ldd) = alpha * op(A) @ op(B) + beta * C (+ bias[m] broadcast over n).
// A, B are floatX; C and D have type `cd_type` (floatX or fp32). op(A) is m x k, op(B) is k x n.
// GELU epilogues, with aux an m x n floatX matrix of leading dimension ld_aux (cuBLASLt: a
// multiple of 8, at least m), no C (beta = 0) and D of type floatX:
//   GELU_EPI_FORWARD   (GELU_AUX_BIAS, or GELU_AUX without a bias) aux = alpha op(A) @ op(B) + bias,
//                      D = gelu(that), both rounded once from fp32;
//   GELU_EPI_BACKWARD  (DGELU) D = gelu'(aux) * (alpha op(A) @ op(B)), aux being the GELU's input.
// bias_grad (n floats, or NULL): epilogue BGRADB, bias_grad[j] = sum over the k rows of op(B)'s
// column j, written (not added) in fp32; D must be fp32, alpha 1, no bias and no GELU.
// Returns false, having run nothing, only when bias_grad is given and cuBLASLt has no algorithm
// with BGRADB for this call, or refuses the one its heuristic offered (the caller then sums the
// bias gradient itself; the refusal is remembered per shape); any other refusal is an error that
// names the call.
enum GeluEpilogue { GELU_EPI_NONE, GELU_EPI_FORWARD, GELU_EPI_BACKWARD };
inline bool matmul_cublaslt(void* d, const void* c, cudaDataType_t cd_type, const floatX* a, const floatX* b, const floatX* bias, int m, int n, int k,
                            bool trans_a, bool trans_b, long lda, long ldb, long ldc, long ldd, float alpha, float beta, cudaStream_t stream,
                            GeluEpilogue gelu = GELU_EPI_NONE, const floatX* aux = nullptr, long ld_aux = 0, float* bias_grad = nullptr) {
    MatmulState& s = matmul_state();
    KERNEL_ASSERT(s.handle != nullptr);  // matmul_init() first
    KERNEL_ASSERT(m > 0 && n > 0 && k > 0);
    // cuBLASLt: the GELU input's leading dimension a multiple of 8 and at least the rows
    KERNEL_ASSERT(gelu == GELU_EPI_NONE ||
                  (aux != nullptr && beta == 0.0f && cd_type == CUDA_FLOATX && ld_aux >= m && ld_aux % 8 == 0 && (gelu == GELU_EPI_FORWARD || bias == nullptr)));
    KERNEL_ASSERT(lda >= (trans_a ? k : m) && ldb >= (trans_b ? n : k) && ldd >= m);
    KERNEL_ASSERT(beta == 0.0f || (c != nullptr && ldc >= m));
    KERNEL_ASSERT(bias_grad == nullptr || (bias == nullptr && gelu == GELU_EPI_NONE && cd_type == CUDA_R_32F && alpha == 1.0f));
    if (beta == 0.0f) {
        c = d;
        ldc = ldd;
    }
    size_t cd_size = cd_type == CUDA_R_32F ? 4 : 2;

    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    cublasLtEpilogue_t epilogue = gelu == GELU_EPI_BACKWARD ? CUBLASLT_EPILOGUE_DGELU
                                  : gelu == GELU_EPI_FORWARD  ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                  : bias                      ? CUBLASLT_EPILOGUE_BIAS
                                  : bias_grad                 ? CUBLASLT_EPILOGUE_BGRADB
                                                              : CUBLASLT_EPILOGUE_DEFAULT;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (gelu != GELU_EPI_NONE) {
        int64_t ld_aux64 = ld_aux;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux64, sizeof(ld_aux64)));
    }
    if (bias) {
        cudaDataType_t bias_type = CUDA_FLOATX;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    if (bias_grad) {  // the bias gradient in fp32, D's type (also the attribute's documented default)
        cudaDataType_t bias_type = CUDA_R_32F;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_grad, sizeof(bias_grad)));
    }
    cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUDA_FLOATX, trans_a ? k : m, trans_a ? m : k, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUDA_FLOATX, trans_b ? n : k, trans_b ? k : n, ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&lc, cd_type, m, n, ldc));
    cublasCheck(cublasLtMatrixLayoutCreate(&ld, cd_type, m, n, ldd));

    uint32_t al_a = operand_alignment(a, lda, sizeof(floatX)), al_b = operand_alignment(b, ldb, sizeof(floatX));
    uint32_t al_c = operand_alignment(c, ldc, cd_size), al_d = operand_alignment(d, ldd, cd_size);
    // the heuristic also reads the bias pointer's alignment, so it is part of the cached choice
    uint32_t al_bias = bias ? operand_alignment(bias, 0, sizeof(floatX)) : bias_grad ? operand_alignment(bias_grad, 0, sizeof(float)) : 0;
    uint32_t al_aux = gelu != GELU_EPI_NONE ? operand_alignment(aux, ld_aux, sizeof(floatX)) : 0;
    char key[256];
    snprintf(key, sizeof(key), "%d %d %d %d%d %ld %ld %ld %ld %d %d%d %u %u %u %u %u %d %ld %u", m, n, k, (int)trans_a, (int)trans_b, lda, ldb, ldc, ldd,
             (int)cd_type, bias != nullptr, bias_grad != nullptr, al_a, al_b, al_c, al_d, al_bias, (int)gelu, ld_aux, al_aux);
    // a refused call names everything cuBLASLt was asked for: the shape, types and alignments
    auto fail = [&](const char* what, cublasStatus_t st) {
        runtime_error(nullptr,
                      "internal: cuBLASLt %s (%s) for m=%d n=%d k=%d trans_a=%d trans_b=%d lda=%ld ldb=%ld ldc=%ld ldd=%ld, A/B %s, C/D %s, "
                      "bias %s, bias gradient %s, GELU epilogue %s (aux ld %ld), alignment in bytes A %u B %u C %u D %u bias %u aux %u",
                      what, cublasGetStatusString(st), m, n, k, (int)trans_a, (int)trans_b, lda, ldb, ldc, ldd, FLOATX_IS_FLOAT ? "fp32" : "bf16",
                      cd_type == CUDA_R_32F ? "fp32" : "bf16", bias ? "yes" : "no", bias_grad ? "yes (BGRADB)" : "no",
                      gelu == GELU_EPI_FORWARD ? "GELU_AUX" : gelu == GELU_EPI_BACKWARD ? "DGELU" : "none", ld_aux, al_a, al_b, al_c, al_d, al_bias, al_aux);
    };
    auto destroy = [&]() {
        cublasCheck(cublasLtMatrixLayoutDestroy(la));
        cublasCheck(cublasLtMatrixLayoutDestroy(lb));
        cublasCheck(cublasLtMatrixLayoutDestroy(lc));
        cublasCheck(cublasLtMatrixLayoutDestroy(ld));
        cublasCheck(cublasLtMatmulDescDestroy(desc));
    };
    // BGRADB is an optional epilogue: where cuBLASLt has no algorithm for it (the heuristic) or
    // refuses the one offered (the call; nothing ran), say so once per shape, remember the shape
    // and let the caller do without it
    auto refuse_bgradb = [&](const char* what, cublasStatus_t st) {
        fflush(stdout);  // after what the program printed before, in a log of both
        fprintf(stderr, "note: cuBLASLt %s BGRADB (bias gradient) algorithm for m=%d n=%d k=%d (%s); the bias gradient uses its own kernel there\n", what,
                m, n, k, cublasGetStatusString(st));
        s.algos.erase(key);
        s.refused.insert(key);
        destroy();
        return false;
    };
    if (s.refused.count(key)) {
        destroy();
        return false;
    }
    auto it = s.algos.find(key);
    if (it == s.algos.end()) {
        cublasLtMatmulPreference_t pref;
        cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &s.workspace_bytes, sizeof(s.workspace_bytes)));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d)));
        if (cd_type == CUDA_R_16BF) {
            // a bf16 output is rounded once from fp32 (above): a split-K algorithm may keep its
            // partial products in fp32 only, never add them in place in D or in bf16 (by default
            // cuBLASLt allows every cublasLtReductionScheme_t)
            uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
            cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions, sizeof(reductions)));
        }
        cublasLtMatmulHeuristicResult_t result;
        int found = 0;
        // NOT_SUPPORTED here means no kernel exists for this combination at all
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(s.handle, desc, la, lb, lc, ld, pref, 1, &result, &found);
        cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
        if (st != CUBLAS_STATUS_SUCCESS || found == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
            if (bias_grad) return refuse_bgradb("has no", st != CUBLAS_STATUS_SUCCESS ? st : result.state);
            fail("has no algorithm", st != CUBLAS_STATUS_SUCCESS ? st : result.state);
        }
        it = s.algos.emplace(key, result.algo).first;
    }
    cublasStatus_t st = cublasLtMatmul(s.handle, desc, &alpha, a, la, b, lb, &beta, c, lc, d, ld, &it->second, s.workspace, s.workspace_bytes, stream);
    if (st != CUBLAS_STATUS_SUCCESS && bias_grad) return refuse_bgradb("refused its", st);
    if (st != CUBLAS_STATUS_SUCCESS) fail("refused the matmul", st);
    destroy();
    return true;
}

// ----------------------------------------------------------------------------
// kernels

// stage 1 of dbias[c] = sum_i dout[i*rs + c]: block (32, 8) sums PARTIAL_ROWS rows of 32 columns
static __global__ void bias_backward_kernel1(float* partial, const floatX* dout, int N, int OC, long rs) {
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * PARTIAL_ROWS, r1 = min(N, r0 + PARTIAL_ROWS);
    float acc = 0.0f;
    if (c < OC)
        for (int r = r0 + threadIdx.y; r < r1; r += 8) acc += to_float(dout[(size_t)r * rs + c]);
    column_partials_finish(partial, acc, c, OC, OC);
}

// Version 2 of stage 1: each thread sums 8 adjacent columns, read as one 16-byte word per row, so a
// warp reads 512 contiguous bytes of a row instead of 64 (version 1's 2-byte loads). Every column
// is summed in version 1's order (rows y, y + 8, ... of thread row y, then the 8 thread rows in
// order): the same bits. Needs OC % 8 == 0, rs % 8 == 0 and a 16-byte aligned dout. On an H100
// (2026-11-27, dev/results/2026-11-27-h100-3.md) a build with version 1 instead ran 1.007x this
// one's step time (vanilla GPT-2 124M, B=64, T=1024, alternating in one call); ncu had put
// version 1 at 3.4 ms a step, about 1.8 TB/s.
// Block (32, 8): 256 columns x PARTIAL_ROWS rows.
constexpr int BIAS_BWD2_COLS = 8 * 32;
static __global__ void bias_backward_kernel2(float* partial, const floatX* dout, int N, int OC, long rs) {
    int c0 = blockIdx.x * BIAS_BWD2_COLS + threadIdx.x * 8;
    int r0 = blockIdx.y * PARTIAL_ROWS, r1 = min(N, r0 + PARTIAL_ROWS);
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (c0 < OC) {
#pragma unroll 4
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {
            x128 x = load128(dout + (size_t)r * rs + c0);  // 8 of them in the BF16 build, the only caller
#pragma unroll
            for (int k = 0; k < 8; k++) acc[k] += to_float(x[k]);
        }
    }
    column_partials_finish<8>(partial, acc, blockIdx.x * BIAS_BWD2_COLS, OC, OC);
}

// ----------------------------------------------------------------------------
// launchers

// dbias (OC) += sum over the N rows of dout (rows of rs elements). partial: num_partials(N) * OC floats.
inline void bias_backward(float* dbias, const floatX* dout, float* partial, int N, int OC, long rs, cudaStream_t stream) {
    KERNEL_ASSERT(N >= 1 && OC >= 1 && rs >= OC);
    dim3 block(32, 8);
    bool vec = false;  // version 2 reads 8 bf16 per 16-byte word (the BF16 build)
    if constexpr (sizeof(floatX) == 2) vec = OC % 8 == 0 && rs % 8 == 0 && aligned16(dout);
    if (vec)
        bias_backward_kernel2<<<dim3(CEIL_DIV(OC, BIAS_BWD2_COLS), num_partials(N)), block, 0, stream>>>(partial, dout, N, OC, rs);
    else
        bias_backward_kernel1<<<dim3(CEIL_DIV(OC, 32), num_partials(N)), block, 0, stream>>>(partial, dout, N, OC, rs);
    cudaCheck(cudaGetLastError());
    reduce_partials(dbias, partial, num_partials(N), OC, OC, stream);
}

// out (N rows of out_rs) = inp (N rows of inp_rs, C used) @ weight^T (weight: OC x C) + bias (OC, or NULL)
//                          + residual (N rows of out_rs, or NULL; may equal out)
// Column-major: out^T (OC x N) = W (OC x C, i.e. the stored C x OC transposed) @ inp^T (C x N).
inline void matmul_forward(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, const floatX* residual, int N, int C, int OC,
                           long inp_rs, long out_rs, cudaStream_t stream) {
    KERNEL_ASSERT(inp_rs >= C && out_rs >= OC);
    matmul_cublaslt(out, residual, CUDA_FLOATX, weight, inp, bias, OC, N, C, true, false, C, inp_rs, out_rs, out_rs, 1.0f, residual ? 1.0f : 0.0f,
                    stream);
}

// out_act = gelu(inp @ weight^T + bias) and out_pre = inp @ weight^T + bias (the GELU's input, kept
// for the backward), both N rows of OC dense, in one GEMM (cuBLASLt GELU_AUX_BIAS; the tanh GELU).
// PyTorch: pre = F.linear(inp, w, b); act = F.gelu(pre, approximate="tanh"). Unlike gelu_forward
// on the stored pre-activation, the GELU here sees the fp32 value before its rounding.
inline void matmul_forward_gelu(floatX* out_act, floatX* out_pre, const floatX* inp, const floatX* weight, const floatX* bias, int N, int C, int OC,
                                long inp_rs, cudaStream_t stream) {
    KERNEL_ASSERT(inp_rs >= C && out_act != out_pre);
    matmul_cublaslt(out_act, nullptr, CUDA_FLOATX, weight, inp, bias, OC, N, C, true, false, C, inp_rs, OC, OC, 1.0f, 0.0f, stream, GELU_EPI_FORWARD,
                    out_pre, OC);
}

// bias_scaled[i] = scale * bias[i], i < n
static __global__ void scale_vector_kernel(floatX* out, const floatX* in, float scale, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = from_float<floatX>(scale * to_float(in[i]));
}

// A linear layer whose output is blended with another tensor of its shape before the one rounding:
//   out = (1 - lambda) (inp @ weight^T + bias) + lambda * other        PyTorch: torch.lerp(F.linear(inp, w, b), other, lambda)
// (ResFormer's V = (1 - lambda) v^l + lambda v^0 written by layer l's value projection). cuBLASLt
// computes alpha * (A @ B) + beta * C + bias, adding the bias unscaled after alpha and beta, so the
// bias is scaled first into bias_scratch (OC floatX; exact for lambda = 1/2 in bf16). other has
// out's row stride; out must not overlap inp, weight or other.
inline void matmul_forward_lerp(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, floatX* bias_scratch, const floatX* other,
                                float lambda, int N, int C, int OC, long inp_rs, long out_rs, cudaStream_t stream) {
    KERNEL_ASSERT(inp_rs >= C && out_rs >= OC && other != nullptr && other != out);
    KERNEL_ASSERT(bias == nullptr || bias_scratch != nullptr);
    if (bias) {
        scale_vector_kernel<<<CEIL_DIV(OC, 256), 256, 0, stream>>>(bias_scratch, bias, 1.0f - lambda, OC);
        cudaCheck(cudaGetLastError());
    }
    matmul_cublaslt(out, other, CUDA_FLOATX, weight, inp, bias ? bias_scratch : nullptr, OC, N, C, true, false, C, inp_rs, out_rs, out_rs, 1.0f - lambda,
                    lambda, stream);
}

// Where matmul_backward's bias gradient comes from: 0 (the default) bias_backward's column sums of
// dout after the weight-gradient GEMM (16-byte loads, kernel2 above); 1 that GEMM's BGRADB
// epilogue, which reads dout anyway, saving the separate pass over it (GPT-2's fc and qkv bias
// gradients; ncu put the bias passes at 3.4 ms of a 124M step, B=64, T=1024, on an H100 before
// kernel2), with bias_backward kept wherever cuBLASLt has no BGRADB algorithm. Not yet timed on
// a GPU: -DVP_BIAS_GRAD_EPILOGUE=1, bench_gpt --bias-grad-epilogue 1 (build variant bias_bgradb,
// dev/bench_variants.list), test_gpt's bias_grad_epilogue test, and VP_TEST_BIAS_GRAD_EPILOGUE=1
// for a whole suite.
#ifndef VP_BIAS_GRAD_EPILOGUE
#define VP_BIAS_GRAD_EPILOGUE 0
#endif
inline int matmul_bias_grad_epilogue = VP_BIAS_GRAD_EPILOGUE;

// The backward of matmul_forward, scaled by alpha (the classifier folds 1/(B*T) in here):
//   dinp (N x C)   = or += alpha * dout (N rows of dout_rs, OC used) @ weight (OC x C)   [dinp may be NULL]
//   dweight (OC x C, fp32) += alpha * dout^T @ inp (N x C, dense)
//   dbias (OC, fp32)       += sum_rows dout                                             [alpha must be 1]
// accumulate_dinp: false overwrites dinp (its old contents are ignored), true adds to it.
// gelu_inp (N x C dense, or NULL): inp was GELU(gelu_inp), and dinp becomes the gradient wrt
// gelu_inp instead, gelu'(gelu_inp) * (dout @ weight), in the GEMM's epilogue (cuBLASLt DGELU:
// the tanh-approximation GELU's derivative, from the fp32 product before its one rounding).
inline void matmul_backward(floatX* dinp, float* dweight, float* dbias, const floatX* dout, const floatX* inp, const floatX* weight, float* partial,
                            int N, int C, int OC, long dout_rs, bool accumulate_dinp, float alpha, cudaStream_t stream,
                            const floatX* gelu_inp = nullptr) {
    KERNEL_ASSERT(dout_rs >= OC);
    KERNEL_ASSERT(dbias == nullptr || alpha == 1.0f);
    KERNEL_ASSERT(gelu_inp == nullptr || (dinp != nullptr && !accumulate_dinp));
    if (dinp) {
        // column-major: dinp^T (C x N) = weight^T (the stored C x OC) @ dout^T (OC x N, ld dout_rs)
        matmul_cublaslt(dinp, dinp, CUDA_FLOATX, weight, dout, nullptr, C, N, OC, false, false, C, dout_rs, C, C, alpha, accumulate_dinp ? 1.0f : 0.0f,
                        stream, gelu_inp ? GELU_EPI_BACKWARD : GELU_EPI_NONE, gelu_inp, C);
    }
    // column-major: dweight^T (C x OC) += inp^T (C x N) @ dout (N x OC: the stored OC x N transposed);
    // with the BGRADB epilogue the same GEMM also writes sum_rows dout (its B's sums over k) into
    // partial's first row, which is then added to dbias
    auto weight_grad = [&](float* bias_grad) {
        return matmul_cublaslt(dweight, dweight, CUDA_R_32F, inp, dout, nullptr, C, OC, N, false, true, C, dout_rs, C, C, alpha, 1.0f, stream,
                               GELU_EPI_NONE, nullptr, 0, bias_grad);
    };
    if (dbias && matmul_bias_grad_epilogue && weight_grad(partial)) {
        reduce_partials(dbias, partial, 1, OC, OC, stream);
        return;
    }
    weight_grad(nullptr);
    if (dbias) bias_backward(dbias, dout, partial, N, OC, dout_rs, stream);
}

}  // namespace gpu
