// tests/emu/test_emu.cu: the CUDA emulator (tests/emu/cuda_emu.h) checked on its own, so that a
// pass of test_gpt under it means something. Built by emu.mk through the same rewriter as the
// trainer (build/emu/test_emu); the bf16 build, because the tensor-core helpers exist only there.
//
//   * warp shuffles and block reductions give the sums they must (gpu::warp_sum, gpu::block_sum);
//   * the tensor-core path the bf16 attention uses -- ldmatrix x4 (plain and .trans) through the
//     kernels' own address helpers, then mma m16n8k16 -- against a plain matmul, where the
//     fragments are laid out by the PTX ISA's formulas as written out again here, and on small
//     integers, so the products and sums are exact and the comparison is equality;
//   * Hopper's wgmma through kernels/wgmma.cuh and kernels/wgmma_probe.cuh (both operand sources,
//     both majors, N = 64 and 32, from 128-byte-swizzled tiles) against a plain matmul on small
//     integers, and its faults: a missing
//     wgmma.fence or fence.proxy.async, and an accumulator read before the wait seeing old values;
//   * cuBLASLt through kernels/matmul.cuh (forward with bias and residual, backward dinp and the
//     fp32 dweight accumulation) against the PyTorch definitions, again on small integers;
//   * the CUDA rules it enforces, each in a child process that must die with the named message:
//     __syncthreads after some threads returned, a shuffle naming a returned lane, a deadlock;
//     and the launches it must refuse (too many threads, too much shared memory without the
//     attribute) and the copies (a host pointer where the copy kind says device);
//   * a missing __syncthreads changes the result (NaN-filled shared memory, forward thread order);
//   * under VP_EMU_STREAMS' hold policies, a missing event between two streams, or a host read of
//     an async copy's destination before the wait, changes the result; a correct event does not;
//     an operation in flight holds back its stream and cudaStreamQuery reports it;
//   * cp.async lands at the issuing thread's wait (zeros past src-size): a read before the wait,
//     or of another thread's row before __syncthreads, sees the old contents; returning with
//     copies in flight and misaligned addresses are faults;
//   * in the _race build (build/emu/test_emu_race), the race detector names each planted race --
//     between blocks, a missing __syncthreads in dynamic and static shared memory and before
//     ldmatrix, __syncwarp masks that leave a lane out, a shuffle taken for a barrier, a host
//     pointer written by a kernel, a cp.async row read without __syncthreads or refilled while
//     another thread reads it, a block reading rows another block released without acquiring
//     them -- with both threads and source lines, and passes their twins;
//   * grid tickets number the blocks in the order they start and reset for the next launch; a
//     flag released by one block is acquired by the next; a wait no block satisfies is a fault.
#define TESTING
#include "train_gpt.cu"
#include "kernels/wgmma_probe.cuh"
#include "tests/testing.h"

#include <sys/wait.h>
#include <unistd.h>

using gpu::floatX;

static std::vector<float> download(const float* d, size_t n) {
    std::vector<float> h(n);
    cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}
template <typename T>
static T* upload(const std::vector<T>& h) {
    T* d;
    cudaCheck(cudaMalloc(&d, h.size() * sizeof(T)));
    cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
static int small_int(uint64_t* s) {  // -3..3
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((*s >> 33) % 7) - 3;
}

// ----------------------------------------------------------------------------
// warp and block reductions

static __global__ void reductions_kernel(float* out) {
    float lane_sum = gpu::warp_sum((float)(threadIdx.x % 32));
    float block_total = gpu::block_sum((float)threadIdx.x);
    out[2 * threadIdx.x] = lane_sum;
    out[2 * threadIdx.x + 1] = block_total;
}

TEST(warp_and_block_sums) {
    const int n = 256;
    float* d;
    cudaCheck(cudaMalloc(&d, 2 * n * sizeof(float)));
    reductions_kernel<<<1, n>>>(d);
    cudaCheck(cudaGetLastError());
    std::vector<float> h = download(d, 2 * n);
    for (int i = 0; i < n; i++) {
        CHECK(h[2 * i] == 496.0f, "thread %d: warp sum %g, expected 0+1+...+31 = 496", i, h[2 * i]);
        CHECK(h[2 * i + 1] == n * (n - 1) / 2.0f, "thread %d: block sum %g, expected %d", i, h[2 * i + 1], n * (n - 1) / 2);
    }
    cudaCheck(cudaFree(d));
}

// ----------------------------------------------------------------------------
// tensor cores: ldmatrix + mma as the bf16 attention kernels use them

// A (16x16, row-major) in shared memory via frag_a_addr; B either as B^T rows [n][k] via
// frag_bt_addr (like K in S = QK^T) or row-major [k][n] via frag_b_trans_addr and .trans (like V
// in O = PV). Writes C (16x16: two n-tiles) and the raw A registers for the layout check.
static __global__ void mma_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, int b_transposed, float* c, uint32_t* a_regs) {
    constexpr int LDS = 24;  // padded row stride, as the kernels pad theirs
    __shared__ __align__(16) __nv_bfloat16 as[16 * LDS];
    __shared__ __align__(16) __nv_bfloat16 bs[16 * LDS];
    int lane = threadIdx.x;
    for (int i = lane; i < 256; i += 32) {
        as[(i / 16) * LDS + i % 16] = a[i];
        bs[(i / 16) * LDS + i % 16] = b[i];
    }
    __syncthreads();
    uint32_t ra[4], rb[4];
    gpu::ldsm_x4(ra, gpu::frag_a_addr(as, LDS, 0, 0, lane));
    if (b_transposed) gpu::ldsm_x4_trans(rb, gpu::frag_b_trans_addr(bs, LDS, 0, 0, lane));
    else gpu::ldsm_x4(rb, gpu::frag_bt_addr(bs, LDS, 0, 0, lane));
    float acc[2][4] = {};
    gpu::mma_bf16_16816(acc[0], ra, rb[0], rb[1]);  // n-tile 0: columns 0..7
    gpu::mma_bf16_16816(acc[1], ra, rb[2], rb[3]);  // n-tile 1: columns 8..15
    // C fragment (PTX ISA, m16n8k16 accumulators): c_i is at row groupID + 8 (i >= 2), column
    // 2 * threadID_in_group + (i & 1), groupID = lane >> 2, threadID_in_group = lane % 4
    int group = lane >> 2, tig = lane % 4;
    for (int nt = 0; nt < 2; nt++)
        for (int i = 0; i < 4; i++) c[(group + 8 * (i >= 2)) * 16 + nt * 8 + 2 * tig + (i & 1)] = acc[nt][i];
    for (int i = 0; i < 4; i++) a_regs[lane * 4 + i] = ra[i];
}

static void check_mma(bool b_transposed) {
    uint64_t seed = b_transposed ? 7 : 3;
    std::vector<__nv_bfloat16> a(256), b(256);
    std::vector<float> af(256), bf(256);
    for (int i = 0; i < 256; i++) {
        af[i] = (float)small_int(&seed);
        bf[i] = (float)small_int(&seed);
        a[i] = __float2bfloat16_rn(af[i]);
        b[i] = __float2bfloat16_rn(bf[i]);
    }
    __nv_bfloat16 *da = upload(a), *db = upload(b);
    float* dc;
    uint32_t* dregs;
    cudaCheck(cudaMalloc(&dc, 256 * sizeof(float)));
    cudaCheck(cudaMalloc(&dregs, 128 * sizeof(uint32_t)));
    mma_kernel<<<1, 32>>>(da, db, b_transposed, dc, dregs);
    cudaCheck(cudaGetLastError());
    std::vector<float> c = download(dc, 256);
    std::vector<uint32_t> regs(128);
    cudaCheck(cudaMemcpy(regs.data(), dregs, regs.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost));
    // C = A @ B with B[k][n] = b[k*16+n] (row-major) or b[n*16+k] (given as B^T)
    int bad = 0;
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            float want = 0;
            for (int k = 0; k < 16; k++) want += af[m * 16 + k] * (b_transposed ? bf[k * 16 + n] : bf[n * 16 + k]);
            bad += c[m * 16 + n] != want;
        }
    CHECK(bad == 0, "ldmatrix%s + mma: %d of 256 outputs differ from A @ B", b_transposed ? ".trans" : "", bad);
    // A registers (PTX ISA, m16n8k16 .bf16 multiplicand A): element a_j (j = 0..7, two per
    // register, low half first) is at row groupID + 8 for j in {2,3,6,7}, column
    // 2 * threadID_in_group + (j & 1) + 8 for j >= 4
    int bad_regs = 0;
    for (int lane = 0; lane < 32; lane++)
        for (int j = 0; j < 8; j++) {
            int row = lane / 4 + ((j == 2 || j == 3 || j == 6 || j == 7) ? 8 : 0), col = 2 * (lane % 4) + (j & 1) + (j >= 4 ? 8 : 0);
            uint32_t reg = regs[lane * 4 + j / 2];
            uint16_t half = (uint16_t)(j % 2 ? reg >> 16 : reg & 0xffff);
            bad_regs += half != a[row * 16 + col].__x;
        }
    CHECK(bad_regs == 0, "ldmatrix: %d of 256 A-fragment elements are not where the PTX layout puts them", bad_regs);
    cudaCheck(cudaFree(da));
    cudaCheck(cudaFree(db));
    cudaCheck(cudaFree(dc));
    cudaCheck(cudaFree(dregs));
}

TEST(ldmatrix_mma_against_matmul) {
    check_mma(false);  // B^T rows (K of S = Q K^T)
    check_mma(true);   // B row-major through .trans (V of O = P V)
}

// ----------------------------------------------------------------------------
// cuBLASLt through kernels/matmul.cuh

TEST(matmul_against_pytorch_definitions) {
    const int N = 5, C = 12, OC = 7;
    uint64_t seed = 11;
    auto ints = [&](size_t n) {
        std::vector<float> v(n);
        for (float& x : v) x = (float)small_int(&seed);
        return v;
    };
    std::vector<float> inp = ints(N * C), w = ints(OC * C), bias = ints(OC), res = ints(N * OC), dout = ints(N * OC);
    auto to_x = [](const std::vector<float>& v) {
        std::vector<floatX> x(v.size());
        for (size_t i = 0; i < v.size(); i++) x[i] = gpu::from_float<floatX>(v[i]);
        return x;
    };
    floatX *d_inp = upload(to_x(inp)), *d_w = upload(to_x(w)), *d_bias = upload(to_x(bias)), *d_res = upload(to_x(res)), *d_dout = upload(to_x(dout));
    floatX *d_out, *d_dinp;
    float *d_dw, *d_partial;
    cudaCheck(cudaMalloc(&d_out, N * OC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_dinp, N * C * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_dw, OC * C * sizeof(float)));
    cudaCheck(cudaMalloc(&d_partial, (size_t)gpu::num_partials(N) * OC * sizeof(float)));
    std::vector<float> dw0 = ints(OC * C);  // dweight accumulates into what is there
    cudaCheck(cudaMemcpy(d_dw, dw0.data(), dw0.size() * sizeof(float), cudaMemcpyHostToDevice));
    gpu::matmul_init();
    // out = F.linear(inp, w, bias) + res
    gpu::matmul_forward(d_out, d_inp, d_w, d_bias, d_res, N, C, OC, C, OC, nullptr);
    // dinp = dout @ w; dweight += dout^T @ inp
    gpu::matmul_backward(d_dinp, d_dw, nullptr, d_dout, d_inp, d_w, d_partial, N, C, OC, OC, false, 1.0f, nullptr);
    std::vector<floatX> out(N * OC), dinp(N * C);
    cudaCheck(cudaMemcpy(out.data(), d_out, out.size() * sizeof(floatX), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(dinp.data(), d_dinp, dinp.size() * sizeof(floatX), cudaMemcpyDeviceToHost));
    std::vector<float> dw = download(d_dw, OC * C);
    int bad = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            float want = bias[o] + res[n * OC + o];
            for (int c = 0; c < C; c++) want += inp[n * C + c] * w[o * C + c];
            bad += gpu::to_float(out[n * OC + o]) != want;
        }
    CHECK(bad == 0, "matmul_forward: %d outputs differ from inp @ w^T + bias + residual", bad);
    bad = 0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            float want = 0;
            for (int o = 0; o < OC; o++) want += dout[n * OC + o] * w[o * C + c];
            bad += gpu::to_float(dinp[n * C + c]) != want;
        }
    CHECK(bad == 0, "matmul_backward: %d of dinp differ from dout @ w", bad);
    bad = 0;
    for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++) {
            float want = dw0[o * C + c];
            for (int n = 0; n < N; n++) want += dout[n * OC + o] * inp[n * C + c];
            bad += dw[o * C + c] != want;
        }
    CHECK(bad == 0, "matmul_backward: %d of dweight differ from dweight + dout^T @ inp", bad);
    for (void* p : {(void*)d_inp, (void*)d_w, (void*)d_bias, (void*)d_res, (void*)d_dout, (void*)d_out, (void*)d_dinp, (void*)d_dw, (void*)d_partial})
        cudaCheck(cudaFree(p));
    gpu::matmul_free();
}

// A split-K reduction in bf16, which cuBLASLt may pick for a bf16 output unless the preference's
// reduction mask rules it out: the emulator picks it whenever it is allowed. One output of K = 64
// ones times a column whose first half sums to 257 and second half to 1: rounded once from fp32,
// 258 (bf16 spacing 2 there); reduced in bf16, 257 -> 256 (ties to even), then 256 + 1 -> 256.
// The raw API with the default preference gives 256, with NONE | COMPUTE_TYPE 258, and the
// trainer's matmul_cublaslt (which sets that mask for every bf16 output) 258.
static float one_lt_output(const floatX* d_a, const floatX* d_b, floatX* d_d, int k, uint32_t reduction_mask) {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtCreate(&h));
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, 1, k, 1));  // A: 1 x k
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, 1, k));  // B: k x 1
    cublasCheck(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, 1, 1, 1));
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    if (reduction_mask != CUBLASLT_REDUCTION_SCHEME_MASK)
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction_mask, sizeof(reduction_mask)));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 1, &result, &found));
    float alpha = 1.0f, beta = 0.0f;
    cublasCheck(cublasLtMatmul(h, desc, &alpha, d_a, la, d_b, lb, &beta, d_d, ld, d_d, ld, &result.algo, nullptr, 0, 0));
    floatX out;
    cudaCheck(cudaMemcpy(&out, d_d, sizeof(out), cudaMemcpyDeviceToHost));
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    for (cublasLtMatrixLayout_t l : {la, lb, ld}) cublasCheck(cublasLtMatrixLayoutDestroy(l));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
    cublasCheck(cublasLtDestroy(h));
    return gpu::to_float(out);
}

TEST(bf16_outputs_are_rounded_once) {
    const int k = 64;
    std::vector<floatX> a(k, gpu::from_float<floatX>(1.0f)), b(k, gpu::from_float<floatX>(0.0f));
    b[0] = gpu::from_float<floatX>(256.0f), b[1] = gpu::from_float<floatX>(1.0f), b[k - 1] = gpu::from_float<floatX>(1.0f);
    floatX *d_a = upload(a), *d_b = upload(b), *d_d;
    cudaCheck(cudaMalloc(&d_d, 256));
    float any = one_lt_output(d_a, d_b, d_d, k, CUBLASLT_REDUCTION_SCHEME_MASK);
    float fp32_only = one_lt_output(d_a, d_b, d_d, k, CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
    CHECK(any == 256.0f, "every reduction allowed: %g, not the 256 of a split-K sum in bf16", any);
    CHECK(fp32_only == 258.0f, "split-K in fp32 only: %g, not 258 (one rounding)", fp32_only);
    gpu::matmul_init();  // the trainer's call, in cuBLAS's column-major terms: D (1 x 1) = A (1 x k) B (k x 1)
    gpu::matmul_cublaslt(d_d, nullptr, CUDA_R_16BF, d_a, d_b, nullptr, 1, 1, k, false, false, 1, k, 1, 1, 1.0f, 0.0f, nullptr);
    floatX out;
    cudaCheck(cudaMemcpy(&out, d_d, sizeof(out), cudaMemcpyDeviceToHost));
    CHECK(gpu::to_float(out) == 258.0f, "matmul_cublaslt's bf16 output is %g, not 258: its preference allows a reduction in bf16", gpu::to_float(out));
    gpu::matmul_free();
    for (void* p : {(void*)d_a, (void*)d_b, (void*)d_d}) cudaCheck(cudaFree(p));
}

// cuBLASLt's type table, as the emulator enforces it, and the trainer's message when a call is
// refused: a bias of another type than D (bf16 bias, fp32 output) has no kernel in the real library
TEST(unsupported_cublaslt_types_are_refused_with_the_shape) {
    const int N = 4, C = 8, OC = 8;
    uint64_t seed = 5;
    std::vector<floatX> x(N * C), w(OC * C), bias(OC);
    for (floatX& v : x) v = gpu::from_float<floatX>((float)small_int(&seed));
    for (floatX& v : w) v = gpu::from_float<floatX>((float)small_int(&seed));
    for (floatX& v : bias) v = gpu::from_float<floatX>((float)small_int(&seed));
    floatX *d_x = upload(x), *d_w = upload(w), *d_bias = upload(bias);
    float* d_out;
    cudaCheck(cudaMalloc(&d_out, N * OC * sizeof(float)));
    gpu::matmul_init();
    // supported: fp32 output of bf16 operands, no bias (the weight-gradient form)
    gpu::matmul_cublaslt(d_out, nullptr, CUDA_R_32F, d_w, d_x, nullptr, OC, N, C, true, false, C, C, OC, OC, 1.0f, 0.0f, nullptr);
    std::string msg;
    try {
        gpu::matmul_cublaslt(d_out, nullptr, CUDA_R_32F, d_w, d_x, d_bias, OC, N, C, true, false, C, C, OC, OC, 1.0f, 0.0f, nullptr);
    } catch (const VpError& e) {
        msg = e.what();
    }
    CHECK(msg.find("cuBLASLt has no algorithm (CUBLAS_STATUS_NOT_SUPPORTED) for m=8 n=4 k=8") != std::string::npos &&
              msg.find("C/D fp32, bias yes") != std::string::npos,
          "a bf16 bias with an fp32 output was not refused with the shape: '%s'", msg.c_str());
    gpu::matmul_free();
    for (void* p : {(void*)d_x, (void*)d_w, (void*)d_bias, (void*)d_out}) cudaCheck(cudaFree(p));
}

// ----------------------------------------------------------------------------
// the rules: a broken kernel must stop the program with the named message

// Runs fn in a child process; true if it died (signal or nonzero exit) with `needle` in stderr.
template <typename F>
static bool dies_with(F fn, const char* needle, std::string* err_out) {
    int fds[2];
    if (pipe(fds) != 0) return false;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fn();
        cudaDeviceSynchronize();
        _exit(0);
    }
    close(fds[1]);
    std::string err;
    char buf[4096];
    ssize_t r;
    while ((r = read(fds[0], buf, sizeof(buf))) > 0) err.append(buf, (size_t)r);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    *err_out = err;
    bool died = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
    return died && err.find(needle) != std::string::npos;
}

static __global__ void early_return_kernel(float* out) {
    if (threadIdx.x >= 16) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}
static __global__ void shuffle_after_return_kernel(float* out) {
    if (threadIdx.x == 5) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}
static __global__ void divergent_barriers_kernel(float* out) {
    if (threadIdx.x < 16) out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);  // waits for lanes 16..31,
    else __syncthreads();                                                           // which wait for lanes 0..15
}

TEST(broken_kernels_are_stopped_with_a_message) {
    float* d;
    cudaCheck(cudaMalloc(&d, 64 * sizeof(float)));
    std::string err;
    CHECK(dies_with([&] { early_return_kernel<<<1, 32>>>(d); }, "__syncthreads reached by 16 threads while 16 threads of the block had returned", &err),
          "early return before __syncthreads: %s", err.c_str());
    CHECK(dies_with([&] { shuffle_after_return_kernel<<<1, 32>>>(d); }, "lane 5 has already returned", &err), "shuffle with a returned lane: %s",
          err.c_str());
    CHECK(dies_with([&] { divergent_barriers_kernel<<<1, 32>>>(d); }, "divergent_barriers_kernel", &err) && err.find("deadlock") != std::string::npos,
          "deadlock: %s", err.c_str());
    cudaCheck(cudaFree(d));
}

static __global__ void noop_kernel() {}

TEST(bad_launches_and_copies_are_refused) {
    noop_kernel<<<1, 2048>>>();
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "a 2048-thread block was not refused");
    noop_kernel<<<dim3(1, 70000), 32>>>();
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "grid.y = 70000 was not refused");
    noop_kernel<<<1, 32, 64 * 1024>>>();
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "64 KiB of dynamic shared memory without the attribute was not refused");
    cudaCheck(cudaFuncSetAttribute(noop_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
    noop_kernel<<<1, 32, 64 * 1024>>>();
    CHECK(cudaGetLastError() == cudaSuccess, "64 KiB of dynamic shared memory with the attribute was refused");
    std::vector<float> host(4);
    float* d;
    cudaCheck(cudaMalloc(&d, 4 * sizeof(float)));
    CHECK(cudaMemcpy(host.data(), host.data(), 16, cudaMemcpyHostToDevice) == cudaErrorInvalidValue, "a host destination passed as device");
    CHECK(cudaMemcpy(d, host.data(), 32, cudaMemcpyHostToDevice) == cudaErrorInvalidValue, "a copy past the end of the allocation");
    CHECK(cudaMemcpy(d, host.data(), 16, cudaMemcpyHostToDevice) == cudaSuccess, "a correct copy failed");
    (void)cudaGetLastError();
    cudaCheck(cudaFree(d));
}

// ----------------------------------------------------------------------------
// Hopper's wgmma (kernels/wgmma.cuh) as the version-6 attention kernels use it, through
// kernels/wgmma_probe.cuh (the same probe dev/cuda/wgmma.cu runs on a GPU): D = A B for 64 x 64
// small integers, exact, in each mode (gpu::wgmma_probe_check); broken injects a fault (the
// probe's header says which). *out: D as the probe computed it.
static bool run_wgmma(int mode, int broken, std::vector<float>* out) {
    gpu::WgmmaProbeResult r = gpu::wgmma_probe_check(mode, broken, 11 + mode);
    *out = r.out;
    return r.bad == 0;
}

TEST(wgmma_against_matmul) {
    std::vector<float> out;
    CHECK(run_wgmma(0, 0, &out), "wgmma m64n64k16, A and B^T K-major from swizzled shared tiles: D differs from A @ B");
    CHECK(run_wgmma(1, 0, &out), "wgmma m64n64k16, A from registers, B MN-major: D differs from A @ B");
    CHECK(run_wgmma(2, 0, &out), "wgmma m64n32k16, A and B^T K-major from swizzled shared tiles: D differs from A @ B[:, :32]");
    CHECK(run_wgmma(3, 0, &out), "wgmma m64n64k16, A from registers (read from a swizzled tile), B^T K-major: D differs from A @ B");
    CHECK(run_wgmma(4, 0, &out), "wgmma m64n32k16, A from registers (read from a swizzled tile), B^T K-major: D differs from A @ B[:, :32]");
    // reading the accumulators before the wait sees what was there before (zeros), so D is wrong
    CHECK(!run_wgmma(0, 3, &out) && out[0] == 0.0f, "an accumulator read before wgmma.wait_group saw the product");
    std::string err;
    CHECK(dies_with([&] { run_wgmma(0, 1, &out); }, "without a wgmma.fence", &err), "wgmma without wgmma.fence: %s", err.c_str());
    CHECK(dies_with([&] { run_wgmma(1, 2, &out); }, "without a fence.proxy.async", &err), "cp.async then wgmma without fence.proxy.async: %s",
          err.c_str());
}

// ----------------------------------------------------------------------------
// a missing __syncthreads shows

static __global__ void neighbour_kernel(float* out, bool sync) {
    extern __shared__ float s[];
    s[threadIdx.x] = (float)threadIdx.x;
    if (sync) __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

TEST(missing_syncthreads_changes_the_result) {
    const int n = 64;
    float* d;
    cudaCheck(cudaMalloc(&d, n * sizeof(float)));
#ifdef VP_EMU_RACE  // the race detector stops the racy launch itself (race_detector_names_each_race)
    for (int sync = 1; sync >= 1; sync--) {
#else
    for (int sync = 1; sync >= 0; sync--) {
#endif
        neighbour_kernel<<<1, n, n * sizeof(float)>>>(d, sync);
        cudaCheck(cudaGetLastError());
        std::vector<float> h = download(d, n);
        int right = 0;
        for (int i = 0; i < n; i++) right += h[i] == (float)((i + 1) % n);
        if (sync) CHECK(right == n, "with __syncthreads: %d of %d right", right, n);
        else CHECK(right < n, "without __syncthreads every thread still read its neighbour's value: the race is invisible");
    }
    cudaCheck(cudaFree(d));
}

// ----------------------------------------------------------------------------
// a missing event between two streams shows (VP_EMU_STREAMS, cuda_emu.h "Streams")

static __global__ void fill_kernel(float* x, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}
static __global__ void copy_kernel(float* dst, const float* src, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}

// producer writes 7 into a on stream p; consumer copies a into b on stream c, with or without an
// event between them. Returns how many of b's elements are 7.
static int producer_consumer(bool with_event) {
    const int n = 64;
    float *a, *b;
    cudaCheck(cudaMalloc(&a, n * sizeof(float)));
    cudaCheck(cudaMalloc(&b, n * sizeof(float)));
    cudaCheck(cudaMemset(a, 0, n * sizeof(float)));
    cudaStream_t p, c;
    cudaEvent_t written;
    cudaCheck(cudaStreamCreate(&p));
    cudaCheck(cudaStreamCreate(&c));
    cudaCheck(cudaEventCreate(&written));
    fill_kernel<<<1, n, 0, p>>>(a, 7.0f, n);
    cudaCheck(cudaEventRecord(written, p));
    if (with_event) cudaCheck(cudaStreamWaitEvent(c, written, 0));
    copy_kernel<<<1, n, 0, c>>>(b, a, n);
    cudaCheck(cudaStreamSynchronize(c));
    cudaCheck(cudaStreamSynchronize(p));
    std::vector<float> h = download(b, n);
    int sevens = 0;
    for (float v : h) sevens += v == 7.0f;
    cudaCheck(cudaEventDestroy(written));
    cudaCheck(cudaStreamDestroy(c));
    cudaCheck(cudaStreamDestroy(p));
    cudaCheck(cudaFree(a));
    cudaCheck(cudaFree(b));
    return sevens;
}

TEST(missing_stream_event_changes_the_result) {
    // the producer's stream is the older one: hold-first delays it, so the consumer overtakes it
    CHECK(vp_emu::set_stream_policy("hold-first"), "hold-first refused");
    CHECK(producer_consumer(true) == 64, "hold-first, with the event: the consumer did not see the producer's writes");
    CHECK(producer_consumer(false) == 0, "hold-first, without the event: the consumer still saw the writes; the race is invisible");
    CHECK(vp_emu::set_stream_policy("hold-others"), "hold-others refused");
    CHECK(producer_consumer(true) == 64, "hold-others, with the event");
    CHECK(vp_emu::set_stream_policy("inline"), "inline refused");
    CHECK(producer_consumer(false) == 64, "inline runs in issue order");
    CHECK(!vp_emu::set_stream_policy("sometimes"), "an unknown policy was accepted");
}

TEST(async_copy_lands_only_after_the_wait) {
    CHECK(vp_emu::set_stream_policy("hold-first"), "hold-first refused");
    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    float* d;
    cudaCheck(cudaMalloc(&d, 4 * sizeof(float)));
    fill_kernel<<<1, 4, 0, s>>>(d, 3.0f, 4);
    float h[4] = {0, 0, 0, 0};
    cudaCheck(cudaMemcpyAsync(h, d, sizeof(h), cudaMemcpyDeviceToHost, s));
    CHECK(h[0] == 0.0f, "the copy landed before the host waited for the stream");
    cudaCheck(cudaStreamSynchronize(s));
    CHECK(h[0] == 3.0f && h[3] == 3.0f, "after the wait: %g %g", h[0], h[3]);
    cudaCheck(cudaFree(d));
    cudaCheck(cudaStreamDestroy(s));
    CHECK(vp_emu::set_stream_policy("inline"), "inline refused");
}

// an operation in flight (an emulated NCCL collective whose peers have not arrived) holds back
// the work queued behind it, and cudaStreamQuery says so, as the trainer's nccl_wait expects
TEST(an_operation_in_flight_holds_its_stream) {
    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    float* d;
    cudaCheck(cudaMalloc(&d, 4 * sizeof(float)));
    cudaCheck(cudaMemset(d, 0, 4 * sizeof(float)));
    bool arrived = false;
    vp_emu::enqueue_async(s, [] {}, [&arrived] { return arrived; });
    fill_kernel<<<1, 4, 0, s>>>(d, 5.0f, 4);
    CHECK(cudaStreamQuery(s) == cudaErrorNotReady, "the stream reports idle while its first operation is in flight");
    float h = -1;
    memcpy(&h, d, sizeof(float));  // the emulated device memory, read behind the stream's back
    CHECK(h == 0.0f, "the kernel queued behind the operation in flight ran: %g", h);
    arrived = true;
    CHECK(cudaStreamQuery(s) == cudaSuccess, "the stream is not idle once the operation completed");
    memcpy(&h, d, sizeof(float));
    CHECK(h == 5.0f, "the kernel did not run after the operation completed: %g", h);
    cudaCheck(cudaFree(d));
    cudaCheck(cudaStreamDestroy(s));
}

// ----------------------------------------------------------------------------
// cp.async (kernels/attention.cuh cp_async16, cp_async_commit, cp_async_wait): the emulator lands
// each group at the issuing thread's wait, the latest CUDA allows, so a read before the wait, or
// of another thread's copy before a __syncthreads, sees the old contents (here the NaN fill)

// Each thread copies one 16-byte row into buffer 0 (group 0) and one into buffer 1 (group 1; odd
// threads with src-size 0: zeros). mode 0 waits and syncs before reading its neighbour's row;
// mode 1 reads its own row before any wait; mode 2 reads its neighbour's row after its own wait
// with a __syncthreads after the issues but none after the waits (ordered after the neighbour's
// copy started, not after it ended: only the check at the wait sees it); mode 3 returns without
// waiting.
// out: [0, n) own row 0 after wait<1>, [n, 2n) own row 1 after wait<1>, [2n, 3n) own row 1 after
// wait<0>, [3n, 4n) the neighbour's row 0.
static __global__ void cp_async_kernel(float* out, const float* src, int mode) {
    extern __shared__ __align__(16) float rows[];  // (2, n, 4): two buffers of one row per thread
    int t = threadIdx.x, n = blockDim.x;
    gpu::cp_async16(rows + t * 4, src + t * 4, 16);
    gpu::cp_async_commit();
    gpu::cp_async16(rows + (n + t) * 4, src + (n + t) * 4, t % 2 ? 0 : 16);
    gpu::cp_async_commit();
    if (mode == 2) __syncthreads();
    if (mode == 3) return;
    if (mode == 1) {
        out[t] = rows[t * 4];
        gpu::cp_async_wait<0>();
        return;
    }
    gpu::cp_async_wait<1>();  // group 0 is in; group 1 may still be in flight
    out[t] = rows[t * 4];
    out[n + t] = rows[(n + t) * 4];
    gpu::cp_async_wait<0>();
    if (mode == 0) __syncthreads();
    out[2 * n + t] = rows[(n + t) * 4 + 1];
    out[3 * n + t] = rows[((t + 1) % n) * 4 + 2];
}
// each thread reads its neighbour's row, then refills its own by cp.async: with sync, after a
// __syncthreads; without, while the neighbour may still be reading it (a write-after-read race
// that only the race detector sees: the emulator's copy lands later than the read either way).
// The __syncthreads before the wait orders the read before the copy's end, not before its start,
// so only the check at the issue can see this race.
static __global__ void cp_async_refill_kernel(float* out, const float* src, bool sync) {
    extern __shared__ __align__(16) float rows[];
    int t = threadIdx.x, n = blockDim.x;
    for (int j = 0; j < 4; j++) rows[t * 4 + j] = (float)t;
    __syncthreads();
    out[t] = rows[((t + 1) % n) * 4];
    if (sync) __syncthreads();
    gpu::cp_async16(rows + t * 4, src + t * 4, 16);
    gpu::cp_async_commit();
    __syncthreads();
    gpu::cp_async_wait<0>();
    out[n + t] = rows[t * 4 + 3];
}
static __global__ void cp_async_misaligned_kernel(const float* src) {
    extern __shared__ __align__(16) float rows[];
    gpu::cp_async16(rows + 1, src, 16);
    gpu::cp_async_commit();
    gpu::cp_async_wait<0>();
}

// cp_async4 (the dK/dV kernel's lse and delta): thread t copies word t, odd threads with src-size
// 0 (a zero); out: [0, n) before the wait, [n, 2n) after it
static __global__ void cp_async4_kernel(float* out, const float* src) {
    extern __shared__ __align__(16) float words[];
    int t = threadIdx.x, n = blockDim.x;
    gpu::cp_async4(words + t, src + t, t % 2 ? 0 : 4);
    gpu::cp_async_commit();
    out[t] = words[t];
    gpu::cp_async_wait<0>();
    out[n + t] = words[t];
}
static __global__ void cp_async4_misaligned_kernel(const float* src) {
    extern __shared__ __align__(16) float words[];
    gpu::cp_async4(reinterpret_cast<char*>(words) + 2, src, 4);
    gpu::cp_async_commit();
    gpu::cp_async_wait<0>();
}

TEST(cp_async4_words) {
    const int n = 32;
    std::vector<float> h_src(n);
    for (int i = 0; i < n; i++) h_src[i] = (float)(i + 1);
    float* src = upload(h_src);
    float* out;
    cudaCheck(cudaMalloc(&out, 2 * n * sizeof(float)));
    cp_async4_kernel<<<1, n, n * sizeof(float)>>>(out, src);
    cudaCheck(cudaGetLastError());
    std::vector<float> h = download(out, 2 * n);
    int early = 0, landed = 0;
    for (int t = 0; t < n; t++) {
        early += std::isnan(h[t]);
        landed += h[n + t] == (t % 2 ? 0.0f : h_src[t]);
    }
    CHECK(early == n, "a 4-byte copy landed before its wait in %d of %d threads", n - early, n);
    CHECK(landed == n, "after the wait, %d of %d words right (odd threads: src-size 0, zero)", landed, n);
    std::string err;
    CHECK(dies_with([&] { cp_async4_misaligned_kernel<<<1, 1, 64>>>(src); }, "4-byte aligned", &err), "a misaligned 4-byte cp.async: %s", err.c_str());
    cudaCheck(cudaFree(src));
    cudaCheck(cudaFree(out));
}

TEST(cp_async_lands_at_the_wait) {
    const int n = 32;
    std::vector<float> h_src(2 * n * 4);
    for (size_t i = 0; i < h_src.size(); i++) h_src[i] = (float)(i + 1);
    float* src = upload(h_src);
    float* out;
    cudaCheck(cudaMalloc(&out, 4 * n * sizeof(float)));
    size_t smem = 2 * n * 4 * sizeof(float);
    std::vector<int> modes = {0, 1};
#ifndef VP_EMU_RACE  // mode 2 races: the race build stops it (below)
    modes.push_back(2);
#endif
    for (int mode : modes) {
        cudaCheck(cudaMemset(out, 0, 4 * n * sizeof(float)));
        cp_async_kernel<<<1, n, smem>>>(out, src, mode);
        cudaCheck(cudaGetLastError());
        std::vector<float> h = download(out, 4 * n);
        int own0 = 0, own1_early = 0, own1 = 0, neighbour = 0;
        for (int t = 0; t < n; t++) {
            own0 += h[t] == h_src[t * 4];
            own1_early += std::isnan(h[n + t]);
            own1 += h[2 * n + t] == (t % 2 ? 0.0f : h_src[(n + t) * 4 + 1]);
            neighbour += h[3 * n + t] == h_src[((t + 1) % n) * 4 + 2];
        }
        if (mode == 0) {
            CHECK(own0 == n, "after cp.async.wait_group 1, %d of %d threads saw their group-0 row", own0, n);
            CHECK(own1_early == n, "group 1 landed before its wait in %d of %d threads (the emulator lands it at the wait)", n - own1_early, n);
            CHECK(own1 == n, "after cp.async.wait_group 0, %d of %d rows right (odd threads: src-size 0, zeros)", own1, n);
            CHECK(neighbour == n, "after the waits and __syncthreads, %d of %d neighbours' rows right", neighbour, n);
        } else if (mode == 1) {
            CHECK(own0 == 0, "a read before the wait saw the copy in %d of %d threads: a missing wait would be invisible", own0, n);
        } else {
            CHECK(neighbour < n, "a neighbour's row read without __syncthreads was right in every thread: the missing barrier is invisible");
        }
    }
    std::string err;
    CHECK(dies_with([&] { cp_async_kernel<<<1, n, smem>>>(out, src, 3); }, "returned with 2 cp.async copies it never waited for", &err),
          "returning with copies in flight: %s", err.c_str());
    CHECK(dies_with([&] { cp_async_misaligned_kernel<<<1, 1, 64>>>(src); }, "16-byte aligned", &err), "a misaligned cp.async: %s", err.c_str());
    CHECK(dies_with([&] { cp_async_misaligned_kernel<<<1, 1, 64>>>(src + 1); }, "16-byte aligned", &err), "a misaligned cp.async source: %s", err.c_str());
#ifdef VP_EMU_RACE
    // the two races of the double-buffered attention kernels, each stopped with both accesses named
    CHECK(dies_with([&] { cp_async_kernel<<<1, n, smem>>>(out, src, 2); }, "data race on dynamic shared memory", &err) &&
              err.find("No __syncthreads") != std::string::npos && err.find("cp_async_kernel") != std::string::npos,
          "a cp.async row read by another thread without __syncthreads: %s", err.c_str());
    CHECK(dies_with([&] { cp_async_refill_kernel<<<1, n, smem>>>(out, src, false); }, "data race on dynamic shared memory", &err) &&
              err.find("a write by") != std::string::npos && err.find("earlier read") != std::string::npos,
          "a cp.async refill of a row another thread still reads: %s", err.c_str());
#endif
    cp_async_refill_kernel<<<1, n, smem>>>(out, src, true);
    cudaCheck(cudaGetLastError());
    std::vector<float> h = download(out, 2 * n);
    int right = 0;
    for (int t = 0; t < n; t++) right += h[t] == (float)((t + 1) % n) && h[n + t] == h_src[t * 4 + 3];
    CHECK(right == n, "refill after __syncthreads: %d of %d threads right", right, n);
    cudaCheck(cudaFree(src));
    cudaCheck(cudaFree(out));
}

// ----------------------------------------------------------------------------
// cross-block signalling (kernels/common.cuh: grid_ticket, flag_release, flag_wait_acquire, as
// Depth's fused forward uses them): each block takes a ticket n, writes row n of rows and releases
// flag n, then copies row n - 1 (another block's) into row gridDim.x + n after acquiring flag n - 1
// (acquire = false: without, a race between blocks the race detector must name). sync: the
// counter, a flag per block, the error word.
static __global__ void handoff_kernel(float* rows, int* sync, int gen, bool acquire) {
    __shared__ int ticket_s[1];
    if (threadIdx.x == 0) ticket_s[0] = gpu::grid_ticket(sync, (int)gridDim.x);
    __syncthreads();
    int n = ticket_s[0], w = blockDim.x;
    rows[n * w + threadIdx.x] = (float)(gen * 100 + n);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) gpu::flag_release(sync + 1 + n, gen);
    if (n == 0) return;  // the whole block
    if (threadIdx.x == 0 && acquire) gpu::flag_wait_acquire(sync + 1 + n - 1, gen, sync + 1 + gridDim.x);
    __syncthreads();
    rows[(gridDim.x + n) * w + threadIdx.x] = rows[(n - 1) * w + threadIdx.x];
}
// one block waits for a flag nothing sets: a fault here (a deadlock on a GPU)
static __global__ void wait_forever_kernel(int* sync) {
    if (threadIdx.x == 0) gpu::flag_wait_acquire(sync + 1, 1, sync + 2);
}

TEST(grid_ticket_and_flags) {
    const int blocks = 5, w = 32;
    float* rows;
    int* sync;
    cudaCheck(cudaMalloc(&rows, 2 * blocks * w * sizeof(float)));
    cudaCheck(cudaMalloc(&sync, (2 + blocks) * sizeof(int)));
    cudaCheck(cudaMemset(sync, 0, (2 + blocks) * sizeof(int)));
    for (int gen = 1; gen <= 2; gen++) {  // two launches: the counter reset by the last ticket, the flags by generation
        handoff_kernel<<<blocks, w>>>(rows, sync, gen, true);
        cudaCheck(cudaGetLastError());
        std::vector<float> h = download(rows, 2 * blocks * w);
        int right = 0;
        for (int n = 0; n < blocks; n++)
            for (int t = 0; t < w; t++) right += h[n * w + t] == (float)(gen * 100 + n) && (n == 0 || h[(blocks + n) * w + t] == (float)(gen * 100 + n - 1));
        CHECK(right == blocks * w, "launch %d: %d of %d rows right", gen, right, blocks * w);
        int counter = -1;
        cudaCheck(cudaMemcpy(&counter, sync, sizeof(int), cudaMemcpyDeviceToHost));
        CHECK(counter == 0, "launch %d: the ticket counter is %d after the launch, not 0", gen, counter);
    }
    std::string err;
    CHECK(dies_with([&] { wait_forever_kernel<<<1, 32>>>(sync); }, "it would wait forever here", &err), "a wait no block satisfies: %s", err.c_str());
#ifdef VP_EMU_RACE
    // the race detector: the rows another block released are ordered only by the acquire
    CHECK(dies_with([&] { handoff_kernel<<<blocks, w>>>(rows, sync, 3, false); }, "Two blocks of one grid", &err) &&
              err.find("a read by thread (0,0,0) of block (1,0,0)") != std::string::npos,
          "reading another block's released rows without the acquire: %s", err.c_str());
#endif
    cudaCheck(cudaFree(rows));
    cudaCheck(cudaFree(sync));
}

#ifdef VP_EMU_RACE
// ----------------------------------------------------------------------------
// the race detector (build/emu/test_emu_race, cuda_emu.cpp "Race detector"): each planted race is
// named with both accesses, and its correct twin runs clean

// every block adds its x into out[0] (a gradient several blocks accumulate without atomics), or
// each into its own out[block]
static __global__ void accumulate_kernel(float* out, const float* x, bool one_target) {
    if (threadIdx.x == 0) out[one_target ? 0 : blockIdx.x] += x[blockIdx.x];
}
static __global__ void static_shared_kernel(float* out, bool sync) {
    __shared__ float s[64];
    s[threadIdx.x] = (float)threadIdx.x;
    if (sync) __syncthreads();
    out[blockIdx.x * 64 + threadIdx.x] = s[63 - threadIdx.x];
}
// lanes exchange through shared memory: mode 0 orders the exchange with __syncwarp; 1 with a
// __syncwarp per half-warp, which does not order lane 16's write before lane 0's read; 2 with a
// shuffle, which exchanges registers and orders no memory
static __global__ void warp_exchange_kernel(float* out, int mode) {
    extern __shared__ float s[];
    s[threadIdx.x] = (float)threadIdx.x;
    if (mode == 0) __syncwarp();
    if (mode == 1) __syncwarp(threadIdx.x < 16 ? 0x0000ffffu : 0xffff0000u);
    float t = mode == 2 ? __shfl_xor_sync(0xffffffffu, 1.0f, 1) : 0.0f;
    out[threadIdx.x] = s[threadIdx.x ^ 16] + t;
}
static __global__ void bf16_neighbours_kernel(__nv_bfloat16* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = __float2bfloat16(1.0f); }
static __global__ void write_through_kernel(float* p) { p[threadIdx.x] = 1.0f; }
// each lane writes one 16-byte row; ldmatrix then reads row (lane + 1) % 32
static __global__ void ldmatrix_rows_kernel(uint32_t* out, bool sync) {
    __shared__ __align__(16) __nv_bfloat16 rows[32 * 8];
    for (int j = 0; j < 8; j++) rows[threadIdx.x * 8 + j] = __float2bfloat16((float)j);
    if (sync) __syncthreads();
    uint32_t r[4];
    gpu::ldsm_x4(r, &rows[((threadIdx.x + 1) % 32) * 8]);
    out[threadIdx.x] = r[0] ^ r[1] ^ r[2] ^ r[3];
}

TEST(race_detector_names_each_race) {
    float *out, *x;
    cudaCheck(cudaMalloc(&out, 128 * sizeof(float)));
    cudaCheck(cudaMalloc(&x, 64 * sizeof(float)));
    cudaCheck(cudaMemset(out, 0, 128 * sizeof(float)));
    cudaCheck(cudaMemset(x, 0, 64 * sizeof(float)));
    std::string err;
    // between blocks: each access, alone, is the emulator's right answer
    CHECK(dies_with([&] { accumulate_kernel<<<4, 32>>>(out, x, true); }, "Two blocks of one grid", &err) &&
              err.find("a read by thread (0,0,0) of block (1,0,0)") != std::string::npos &&
              err.find("earlier write by thread (0,0,0) of block (0,0,0)") != std::string::npos &&
              err.find("test_emu.cu") != std::string::npos && err.find("device memory (cudaMalloc)") != std::string::npos,
          "blocks adding into one element: %s", err.c_str());
    // within a block, in shared memory: dynamic (the trainer's attention tiles), static, and the
    // rows ldmatrix reads
    CHECK(dies_with([&] { neighbour_kernel<<<1, 64, 64 * sizeof(float)>>>(out, false); }, "data race on dynamic shared memory", &err) &&
              err.find("No __syncthreads") != std::string::npos,
          "missing __syncthreads, dynamic shared memory: %s", err.c_str());
    CHECK(dies_with([&] { static_shared_kernel<<<2, 64>>>(out, false); }, "data race on a static __shared__ array", &err),
          "missing __syncthreads, static shared memory: %s", err.c_str());
    uint32_t* regs;
    cudaCheck(cudaMalloc(&regs, 32 * sizeof(uint32_t)));
    CHECK(dies_with([&] { ldmatrix_rows_kernel<<<1, 32>>>(regs, false); }, "data race on a static __shared__ array", &err),
          "ldmatrix of rows written without __syncthreads: %s", err.c_str());
    // within a warp
    CHECK(dies_with([&] { warp_exchange_kernel<<<1, 32, 32 * sizeof(float)>>>(out, 1); }, "data race on dynamic shared memory", &err),
          "__syncwarp masks that do not name both lanes: %s", err.c_str());
    CHECK(dies_with([&] { warp_exchange_kernel<<<1, 32, 32 * sizeof(float)>>>(out, 2); }, "data race on dynamic shared memory", &err),
          "a shuffle taken for a memory barrier: %s", err.c_str());
    // a host pointer: the emulator's device memory is host memory, a GPU's is not
    std::vector<float> host(32);
    CHECK(dies_with([&] { write_through_kernel<<<1, 32>>>(host.data()); }, "a host pointer reached the kernel", &err), "kernel writing host memory: %s",
          err.c_str());

    // the correct twins, in this process: no report, and the right results
    accumulate_kernel<<<4, 32>>>(out, x, false);
    static_shared_kernel<<<2, 64>>>(out, true);
    ldmatrix_rows_kernel<<<1, 32>>>(regs, true);
    warp_exchange_kernel<<<1, 32, 32 * sizeof(float)>>>(out, 0);
    cudaCheck(cudaGetLastError());
    std::vector<float> h = download(out, 32);
    int right = 0;
    for (int i = 0; i < 32; i++) right += h[i] == (float)(i ^ 16);
    CHECK(right == 32, "__syncwarp exchange: %d of 32 right", right);
    // one launch after another is ordered: block i reads what block i - 1 of the previous grid wrote
    accumulate_kernel<<<4, 32>>>(out, x, false);
    accumulate_kernel<<<4, 32>>>(out + 1, x, false);
    // neighbouring bf16 written by two blocks share a 4-byte word, not an element
    __nv_bfloat16* b;
    cudaCheck(cudaMalloc(&b, 6 * sizeof(__nv_bfloat16)));
    bf16_neighbours_kernel<<<2, 3>>>(b);
    cudaCheck(cudaDeviceSynchronize());
    for (void* p : {(void*)out, (void*)x, (void*)regs, (void*)b}) cudaCheck(cudaFree(p));
}
#endif

TEST_MAIN()
