// tests/emu/cublaslt_emu.h: the part of cuBLAS/cuBLASLt that kernels/matmul.cuh uses, for the CUDA
// emulator (tests/emu/cuda_emu.h). cublasLtMatmul computes
//     D = alpha * op(A) @ op(B) + beta * C (+ bias broadcast along columns, epilogue BIAS)
// on column-major operands, accumulating in fp32 over k in order and rounding D once -- what
// CUBLAS_COMPUTE_32F promises, in some order. Epilogue DGELU multiplies the fp32 product by the
// derivative of the tanh-approximation GELU at the aux matrix (the GELU's input) before rounding;
// GELU_AUX(_BIAS) writes the fp32 result (with the bias) rounded into aux and its tanh GELU into D.
// BGRADB also writes the sums over k of op(B)'s columns (fp32, in order) to the bias pointer, with
// D's type (the only case emulated: alpha 1, fp32 D); VP_EMU_LT_NO_BGRADB=1 makes the heuristic
// answer NOT_SUPPORTED for it, as a library without such a kernel would, and =2 the matmul call
// (after the heuristic offered an algorithm). It checks what a real call would reject: layouts
// whose shapes do not chain, leading dimensions below the row count, mixed A/B types, pointers
// less aligned than the preference promised, bias without a bias pointer.
#pragma once

#include "cuda_emu.h"

enum cublasStatus_t {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 };
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 };
typedef cudaDataType_t cudaDataType;
enum cublasLtEpilogue_t {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
    CUBLASLT_EPILOGUE_DGELU = 64 | 128,
    CUBLASLT_EPILOGUE_BGRADB = 512
};
enum cublasLtMatmulDescAttributes_t {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
};
enum cublasLtMatmulPreferenceAttributes_t {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};

// how a split-K algorithm adds its partial products (cuBLASLt's values): in place in D (in D's
// type), in a workspace in the compute type, or in a workspace in D's type
enum cublasLtReductionScheme_t {
    CUBLASLT_REDUCTION_SCHEME_NONE = 0,
    CUBLASLT_REDUCTION_SCHEME_INPLACE = 1,
    CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2,
    CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE = 4,
    CUBLASLT_REDUCTION_SCHEME_MASK = 7,
};

struct VpEmuLtHandle;
struct VpEmuLtMatmulDesc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    cudaDataType_t bias_type = CUDA_R_32F;
    const void* bias = nullptr;
    const void* aux = nullptr;  // the GELU's input, of D's type, m x n with leading dimension aux_ld: DGELU reads it, GELU_AUX(_BIAS) writes it
    int64_t aux_ld = 0;
};
struct VpEmuLtLayout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
struct VpEmuLtPreference {
    size_t max_workspace = 0;
    uint32_t min_align[4] = {256, 256, 256, 256};  // A, B, C, D; cuBLASLt assumes 256 unless told
    uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;  // the split-K reductions allowed (default: all)
};
typedef VpEmuLtHandle* cublasLtHandle_t;
typedef VpEmuLtMatmulDesc* cublasLtMatmulDesc_t;
typedef VpEmuLtLayout* cublasLtMatrixLayout_t;
typedef VpEmuLtPreference* cublasLtMatmulPreference_t;
struct cublasLtMatmulAlgo_t {
    uint64_t data[8];  // [0..3] the promised alignments, so that cublasLtMatmul can check the pointers;
                       // [4] 1 for a split-K algorithm that adds its partial products in D's type
};
struct cublasLtMatmulHeuristicResult_t {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
};

const char* cublasGetStatusString(cublasStatus_t st);
cublasStatus_t cublasLtCreate(cublasLtHandle_t* h);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t bytes);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const void* buf, size_t bytes);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl, cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* found);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha, const void* a, cublasLtMatrixLayout_t la, const void* b,
                              cublasLtMatrixLayout_t lb, const void* beta, const void* c, cublasLtMatrixLayout_t lc, void* dd, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes, cudaStream_t stream);
