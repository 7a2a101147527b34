/*
Kernel lab: RMSNorm forward and backward (Llama), kernels/rmsnorm.cuh.

Compile and run (bf16; build/dev/cuda/fp32/rmsnorm is the lab's FP32 build):
  make build/dev/cuda/bf16/rmsnorm         (all labs: make dev-cuda)
  ./build/dev/cuda/bf16/rmsnorm            check every version, then time each
  ./build/dev/cuda/bf16/rmsnorm --check    check only (dev/device_check.sh)

Shapes: C = 2048 (a Llama-1B-ish width; version 3's warp slices then need 64 KB of shared memory,
past the 48 KB default); N = 32768 rows when timing, 8192 + 40 with --check (the last fused row
block ragged; the emulator runs --check). Reference: the CPU trainer's
rmsnorm_forward / rmsnorm_backward (fp32) on the same floatX-rounded inputs; the backward
accumulates into dinp and dweight, which start from non-zero values.

forward version 1: one thread per row, scalar loads. Baseline.
forward version 2: one warp per row, 16-byte loads, fp32 sum of squares by warp shuffles.
  The trainer's kernel (rmsnorm_forward_kernel2).
backward version 1: one thread per row for dinp; dweight by one thread per column over all rows.
backward version 2: one warp per row for dinp; dweight by the fixed-order two-stage reduction
  (kernels/reduce.cuh): a second pass reads dout and inp again.
backward version 3: version 2's row pass also sums dout*x*rstd of each lane's columns into its
  warp's slice of shared memory, one partial row per block of 64 rows, then the same stage 2.
  The trainer's. Moves 4 N*C floatX (dout, inp, dinp read+write) against version 2's 6.
*/
#include "dev/cuda/common.h"
#include "kernels/rmsnorm.cuh"

// ----------------------------------------------------------------------------
// GPU kernels (forward version 2 is gpu::rmsnorm_forward, backward versions 2 and 3 are
// gpu::rmsnorm_backward's)

__global__ void rmsnorm_forward_kernel1(floatX* out, float* rstd, const floatX* inp, const floatX* w, int N, int C, float eps) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const floatX* x = inp + (size_t)i * C;
    float ss = 0;
    for (int c = 0; c < C; c++) ss += gpu::to_float(x[c]) * gpu::to_float(x[c]);
    float s = 1.0f / sqrtf(ss / C + eps);
    for (int c = 0; c < C; c++) out[(size_t)i * C + c] = gpu::from_float<floatX>(gpu::to_float(x[c]) * s * gpu::to_float(w[c]));
    rstd[i] = s;
}

__global__ void rmsnorm_backward_dinp_kernel1(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* w, const float* rstd, int N, int C) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const floatX* dy = dout + (size_t)i * C;
    const floatX* x = inp + (size_t)i * C;
    float s = rstd[i], dot = 0;
    for (int c = 0; c < C; c++) dot += gpu::to_float(w[c]) * gpu::to_float(dy[c]) * gpu::to_float(x[c]);
    float k = s * s * s * dot / C;
    for (int c = 0; c < C; c++) {
        floatX* d = dinp + (size_t)i * C + c;
        *d = gpu::from_float<floatX>(gpu::to_float(*d) + s * gpu::to_float(w[c]) * gpu::to_float(dy[c]) - k * gpu::to_float(x[c]));
    }
}

__global__ void rmsnorm_backward_params_kernel1(float* dw, const floatX* dout, const floatX* inp, const float* rstd, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0;
    for (int i = 0; i < N; i++) acc += gpu::to_float(dout[(size_t)i * C + c]) * gpu::to_float(inp[(size_t)i * C + c]) * rstd[i];
    dw[c] += acc;
}

// ----------------------------------------------------------------------------
// launchers

static void forward_version(int v, floatX* out, float* rstd, const floatX* inp, const floatX* w, int N, int C) {
    if (v == 1) {
        rmsnorm_forward_kernel1<<<CEIL_DIV(N, 256), 256>>>(out, rstd, inp, w, N, C, 1e-5f);
        cudaCheck(cudaGetLastError());
    } else {
        gpu::rmsnorm_forward(out, rstd, inp, w, N, C, 1e-5f, 0);
    }
}

static void backward_version(int v, floatX* dinp, float* dw, const floatX* dout, const floatX* inp, const floatX* w, const float* rstd, float* partial, int N, int C) {
    if (v == 1) {
        rmsnorm_backward_dinp_kernel1<<<CEIL_DIV(N, 256), 256>>>(dinp, dout, inp, w, rstd, N, C);
        cudaCheck(cudaGetLastError());
        rmsnorm_backward_params_kernel1<<<CEIL_DIV(C, 256), 256>>>(dw, dout, inp, rstd, N, C);
        cudaCheck(cudaGetLastError());
    } else {
        gpu::rmsnorm_backward(dinp, dw, dout, inp, w, rstd, partial, N, C, 0, v);
    }
}

int main(int argc, char** argv) {
    if (!lab_has_device()) return 0;
    bool check_only = lab_flag(argc, argv, "--check");
    const int N = check_only ? 8192 + 40 : 32768, C = 2048;
    printf("rmsnorm: N=%d C=%d (%s)\n", N, C, PRECISION_NAME);
    std::vector<float> x = round_to_floatx(random_normal((size_t)N * C, 1, 3.0f)), w = round_to_floatx(random_normal(C, 2));
    std::vector<float> dout = round_to_floatx(random_normal((size_t)N * C, 4)), dinp0 = round_to_floatx(random_normal((size_t)N * C, 5));
    std::vector<float> out_ref((size_t)N * C), rstd_ref(N);
    ::rmsnorm_forward(out_ref.data(), rstd_ref.data(), x.data(), w.data(), N, C, 1e-5f);
    std::vector<float> dinp_ref = dinp0, dw_ref(C, 0.25f);
    ::rmsnorm_backward(dinp_ref.data(), dw_ref.data(), dout.data(), x.data(), w.data(), rstd_ref.data(), N, C);

    floatX *d_x = dev_upload_x(x), *d_w = dev_upload_x(w), *d_dout = dev_upload_x(dout), *d_out = dev_alloc<floatX>(out_ref.size()), *d_dinp = dev_alloc<floatX>(dinp0.size());
    float *d_rstd = dev_alloc<float>(N), *d_dw = dev_alloc<float>(C), *d_partial = dev_alloc<float>(gpu::rmsnorm_backward_partial_floats(N, C));
    bool ok = true;
    for (int v = 1; v <= 2; v++) {
        printf(" forward version %d\n", v);
        poison(d_out, out_ref.size());
        forward_version(v, d_out, d_rstd, d_x, d_w, N, C);
        cudaCheck(cudaDeviceSynchronize());
        ok &= validate_result(d_out, out_ref, "out");
        ok &= validate_result(d_rstd, rstd_ref, "rstd", 1e-5f, 1e-6f);
    }
    cudaCheck(cudaMemcpy(d_rstd, rstd_ref.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    std::vector<float> quarter(C, 0.25f);
    for (int v = 1; v <= 3; v++) {
        printf(" backward version %d\n", v);
        floatX* fresh = dev_upload_x(dinp0);
        cudaCheck(cudaMemcpy(d_dinp, fresh, dinp0.size() * sizeof(floatX), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaFree(fresh));
        cudaCheck(cudaMemcpy(d_dw, quarter.data(), C * sizeof(float), cudaMemcpyHostToDevice));
        backward_version(v, d_dinp, d_dw, d_dout, d_x, d_w, d_rstd, d_partial, N, C);
        cudaCheck(cudaDeviceSynchronize());
        ok &= validate_result(d_dinp, dinp_ref, "dinp");
        ok &= validate_result(d_dw, dw_ref, "dweight", 1e-3f, 1e-2f);
    }
    if (ok && !check_only) {
        double fwd_bytes = 2.0 * N * C * sizeof(floatX);
        for (int v = 1; v <= 2; v++) {
            float ms = benchmark_kernel(50, [&] { forward_version(v, d_out, d_rstd, d_x, d_w, N, C); });
            printf("  forward version %d: %.4f ms, %.0f GB/s\n", v, ms, fwd_bytes / ms / 1e6);
        }
        for (int v = 1; v <= 3; v++) {
            double bwd_bytes = (v == 3 ? 4.0 : 6.0) * N * C * sizeof(floatX);
            float ms = benchmark_kernel(20, [&] { backward_version(v, d_dinp, d_dw, d_dout, d_x, d_w, d_rstd, d_partial, N, C); });
            printf("  backward version %d: %.4f ms, %.0f GB/s\n", v, ms, bwd_bytes / ms / 1e6);
        }
    }
    for (void* p : {(void*)d_x, (void*)d_w, (void*)d_dout, (void*)d_out, (void*)d_dinp, (void*)d_rstd, (void*)d_dw, (void*)d_partial}) cudaCheck(cudaFree(p));
    printf(ok ? "All results match.\n" : "MISMATCH\n");
    return ok ? 0 : 1;
}
