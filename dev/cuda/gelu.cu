/*
Kernel lab: GELU's backward with the fc bias gradient (GPT-2 MLP), kernels/gelu.cuh.

Compile and run (bf16; build/dev/cuda/fp32/gelu is the lab's FP32 build):
  make build/dev/cuda/bf16/gelu         (all labs: make dev-cuda)
  ./build/dev/cuda/bf16/gelu            check every version, then time each
  ./build/dev/cuda/bf16/gelu --check    check only (dev/device_check.sh, the emulator)

Shapes: OC = 3072 (GPT-2 124M's fc width); N = B*T = 65536 rows when timing (B=64, T=1024),
8192 + 40 with --check (the last row block ragged). Reference: the CPU trainer's gelu_backward
(fp32) and the column sums of its output, on the same floatX-rounded inputs; the bias gradient
accumulates into a non-zero dbias, as the trainer's gradients do under accumulation.

backward version 1: gelu_backward (elementwise, 16-byte vectors), then the matmul's bias pass
  (bias_backward of kernels/matmul.cuh: blocks of 256 rows x 32 columns, fixed-order stage 2)
  reads the result again. What the trainer ran before the fusion.
backward version 2: gelu_backward_bias: the elementwise pass keeps each lane's 8 column sums in
  registers over the 8 rows its warp takes of a 64-row block; the block adds its warps in order
  and writes one partial row, then the same fixed-order stage 2. The trainer's.
Napkin math: version 1 moves 4 N*OC floatX (read inp, dout; write dinp; read dinp again),
  version 2 moves 3 N*OC. The GB/s printed are of the bytes each version must move.
*/
#include "dev/cuda/common.h"
#include "kernels/gelu.cuh"
#include "kernels/matmul.cuh"

static void backward_version(int v, floatX* dinp, float* dbias, const floatX* inp, const floatX* dout, float* partial, int N, int OC) {
    if (v == 1) {
        gpu::gelu_backward(dinp, inp, dout, (size_t)N * OC, 0);
        gpu::bias_backward(dbias, dinp, partial, N, OC, OC, 0);
    } else {
        gpu::gelu_backward_bias(dinp, dbias, inp, dout, partial, N, OC, 0);
    }
}

int main(int argc, char** argv) {
    if (!lab_has_device()) return 0;
    bool check_only = lab_flag(argc, argv, "--check");
    const int N = check_only ? 8192 + 40 : 65536, OC = 3072;
    printf("gelu: N=%d OC=%d (%s)\n", N, OC, PRECISION_NAME);
    std::vector<float> x = round_to_floatx(random_normal((size_t)N * OC, 1, 2.0f)), dout = round_to_floatx(random_normal((size_t)N * OC, 2));
    std::vector<float> dinp_ref((size_t)N * OC), dbias_ref(OC, 0.5f);
    ::gelu_backward(dinp_ref.data(), x.data(), dout.data(), (size_t)N * OC);
    // the GPU sums the rounded dinp it stored (what a separate bias pass reads), so the reference
    // sums the rounded reference; the rounding of dinp itself is checked on dinp
    std::vector<float> dinp_rounded = round_to_floatx(dinp_ref);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < OC; c++) dbias_ref[c] += dinp_rounded[(size_t)i * OC + c];

    floatX *d_x = dev_upload_x(x), *d_dout = dev_upload_x(dout), *d_dinp = dev_alloc<floatX>(dinp_ref.size());
    float* d_dbias = dev_alloc<float>(OC);
    float* d_partial = dev_alloc<float>(std::max((size_t)gpu::num_partials(N) * OC, gpu::gelu_backward_bias_partial_floats(N, OC)));
    std::vector<float> half(OC, 0.5f);
    bool ok = true;
    for (int v = 1; v <= 2; v++) {
        printf(" backward version %d\n", v);
        poison(d_dinp, dinp_ref.size());
        cudaCheck(cudaMemcpy(d_dbias, half.data(), OC * sizeof(float), cudaMemcpyHostToDevice));
        backward_version(v, d_dinp, d_dbias, d_x, d_dout, d_partial, N, OC);
        cudaCheck(cudaDeviceSynchronize());
        ok &= validate_result(d_dinp, dinp_ref, "dinp");
        // dbias: a sum of N terms in fp32 in another order than the CPU's: ~sqrt(N) ulps of sum |terms|
        ok &= validate_result(d_dbias, dbias_ref, "dbias", 1e-3f, 1e-2f);
    }
    if (ok && !check_only) {
        for (int v = 1; v <= 2; v++) {
            double bytes = (v == 1 ? 4.0 : 3.0) * N * OC * sizeof(floatX);
            float ms = benchmark_kernel(20, [&] { backward_version(v, d_dinp, d_dbias, d_x, d_dout, d_partial, N, OC); });
            printf("  backward version %d: %.4f ms, %.0f GB/s\n", v, ms, bytes / ms / 1e6);
        }
    }
    for (void* p : {(void*)d_x, (void*)d_dout, (void*)d_dinp, (void*)d_dbias, (void*)d_partial}) cudaCheck(cudaFree(p));
    printf(ok ? "All results match.\n" : "MISMATCH\n");
    return ok ? 0 : 1;
}
