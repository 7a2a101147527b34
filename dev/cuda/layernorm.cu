/*
Kernel lab: LayerNorm forward and backward (GPT-2), kernels/layernorm.cuh.

Compile and run (bf16; build/dev/cuda/fp32/layernorm is the lab's FP32 build):
  make build/dev/cuda/bf16/layernorm         (all labs: make dev-cuda)
  ./build/dev/cuda/bf16/layernorm            check every version, then time each
  ./build/dev/cuda/bf16/layernorm --check    check only (dev/device_check.sh)

Shapes: C = 768 (GPT-2 124M); N = B*T = 65536 rows when timing (B=64, T=1024, the bench's
shape), 8192 + 40 with --check (the last fused row block ragged; the emulator runs --check). Reference: the CPU trainer's
layernorm_forward / layernorm_backward (fp32) on the same floatX-rounded inputs. The backward
ACCUMULATES into dinp (residual fan-in), so dinp starts from random values in both.

forward version 1: one thread per row, scalar loads (uncoalesced: neighbouring threads read
  rows C elements apart). Baseline.
forward version 2: one warp per row, 16-byte loads, fp32 statistics by warp shuffles; two passes
  over the row (mean, then variance of the centred values, as the CPU reference) hit L1.
  The trainer's kernel (layernorm_forward_kernel2).
backward version 1: one thread per row for dinp; dweight/dbias by one thread per column summing
  all rows (deterministic, slow: N sequential adds per thread).
backward version 2: one warp per row for dinp (16-byte loads); dweight/dbias by the fixed-order
  two-stage reduction (blocks of 256 rows x 32 columns write partial sums, one more kernel adds
  the partials in order): deterministic without atomics.
backward version 3: version 2's row pass also sums dout*norm and dout of each lane's columns
  into its warp's slice of shared memory; each block of 64 rows writes one partial row, and the
  same fixed-order stage 2 adds them. dout and inp are read once, one kernel fewer. The trainer's.
  It can also sum the updated dinp's columns (dinp_colsum): in the trainer that is the bias
  gradient of attproj/fcproj, whose output gradient the residual-stream dinp is.
Napkin math: forward moves N*C*(1 read + 1 write) floatX; backward version 2 reads dout, inp
  twice (dinp, then the parameter pass) and reads+writes dinp (6 N*C); version 3 reads dout, inp
  once and reads+writes dinp (4 N*C). The GB/s printed are of the bytes each version must move.
*/
#include "dev/cuda/common.h"
#include "kernels/layernorm.cuh"

// ----------------------------------------------------------------------------
// GPU kernels (forward version 2 is gpu::layernorm_forward, backward versions 2 and 3 are
// gpu::layernorm_backward's)

__global__ void layernorm_forward_kernel1(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w, const floatX* b, int N, int C, float eps) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const floatX* x = inp + (size_t)i * C;
    float m = 0;
    for (int c = 0; c < C; c++) m += gpu::to_float(x[c]);
    m /= C;
    float var = 0;
    for (int c = 0; c < C; c++) var += (gpu::to_float(x[c]) - m) * (gpu::to_float(x[c]) - m);
    float s = 1.0f / sqrtf(var / C + eps);
    for (int c = 0; c < C; c++) out[(size_t)i * C + c] = gpu::from_float<floatX>((gpu::to_float(x[c]) - m) * s * gpu::to_float(w[c]) + gpu::to_float(b[c]));
    mean[i] = m;
    rstd[i] = s;
}

__global__ void layernorm_backward_dinp_kernel1(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* w, const float* mean, const float* rstd, int N, int C) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const floatX* dy = dout + (size_t)i * C;
    const floatX* x = inp + (size_t)i * C;
    float a = 0, bsum = 0;
    for (int c = 0; c < C; c++) {
        float norm = (gpu::to_float(x[c]) - mean[i]) * rstd[i], dn = gpu::to_float(w[c]) * gpu::to_float(dy[c]);
        a += dn;
        bsum += dn * norm;
    }
    a /= C;
    bsum /= C;
    for (int c = 0; c < C; c++) {
        float norm = (gpu::to_float(x[c]) - mean[i]) * rstd[i], dn = gpu::to_float(w[c]) * gpu::to_float(dy[c]);
        floatX* d = dinp + (size_t)i * C + c;
        *d = gpu::from_float<floatX>(gpu::to_float(*d) + (dn - a - norm * bsum) * rstd[i]);
    }
}

__global__ void layernorm_backward_params_kernel1(float* dw, float* db, const floatX* dout, const floatX* inp, const float* mean, const float* rstd, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0, sb = 0;
    for (int i = 0; i < N; i++) {
        float dy = gpu::to_float(dout[(size_t)i * C + c]);
        sw += dy * (gpu::to_float(inp[(size_t)i * C + c]) - mean[i]) * rstd[i];
        sb += dy;
    }
    dw[c] += sw;
    db[c] += sb;
}

// ----------------------------------------------------------------------------
// launchers

static void forward_version(int v, floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w, const floatX* b, int N, int C) {
    if (v == 1) {
        layernorm_forward_kernel1<<<CEIL_DIV(N, 256), 256>>>(out, mean, rstd, inp, w, b, N, C, 1e-5f);
        cudaCheck(cudaGetLastError());
    } else {
        gpu::layernorm_forward(out, mean, rstd, inp, w, b, N, C, 1e-5f, 0);
    }
}

static void backward_version(int v, floatX* dinp, float* dw, float* db, const floatX* dout, const floatX* inp, const floatX* w, const float* mean, const float* rstd,
                             float* partial, int N, int C) {
    if (v == 1) {
        layernorm_backward_dinp_kernel1<<<CEIL_DIV(N, 256), 256>>>(dinp, dout, inp, w, mean, rstd, N, C);
        cudaCheck(cudaGetLastError());
        layernorm_backward_params_kernel1<<<CEIL_DIV(C, 256), 256>>>(dw, db, dout, inp, mean, rstd, N, C);
        cudaCheck(cudaGetLastError());
    } else {
        gpu::layernorm_backward(dinp, dw, db, nullptr, dout, inp, w, mean, rstd, partial, N, C, 0, v);
    }
}

int main(int argc, char** argv) {
    if (!lab_has_device()) return 0;
    bool check_only = lab_flag(argc, argv, "--check");
    const int N = check_only ? 8192 + 40 : 65536, C = 768;
    printf("layernorm: N=%d C=%d (%s)\n", N, C, PRECISION_NAME);
    std::vector<float> x = round_to_floatx(random_normal((size_t)N * C, 1, 3.0f));
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) x[(size_t)i * C + c] += (float)(i % 7);  // a per-row offset: the mean matters
    x = round_to_floatx(x);
    std::vector<float> w = round_to_floatx(random_normal(C, 2)), b = round_to_floatx(random_normal(C, 3));
    std::vector<float> dout = round_to_floatx(random_normal((size_t)N * C, 4)), dinp0 = round_to_floatx(random_normal((size_t)N * C, 5));
    std::vector<float> out_ref((size_t)N * C), mean_ref(N), rstd_ref(N);
    ::layernorm_forward(out_ref.data(), mean_ref.data(), rstd_ref.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
    std::vector<float> dinp_ref = dinp0, dw_ref(C, 0.5f), db_ref(C, -0.5f);  // accumulate into non-zero gradients
    ::layernorm_backward(dinp_ref.data(), dw_ref.data(), db_ref.data(), dout.data(), x.data(), w.data(), mean_ref.data(), rstd_ref.data(), N, C);

    floatX *d_x = dev_upload_x(x), *d_w = dev_upload_x(w), *d_b = dev_upload_x(b), *d_dout = dev_upload_x(dout), *d_out = dev_alloc<floatX>(out_ref.size());
    floatX* d_dinp = dev_alloc<floatX>(dinp0.size());
    float *d_mean = dev_alloc<float>(N), *d_rstd = dev_alloc<float>(N), *d_dw = dev_alloc<float>(C), *d_db = dev_alloc<float>(C);
    float* d_partial = dev_alloc<float>(gpu::layernorm_backward_partial_floats(N, C));
    bool ok = true;
    for (int v = 1; v <= 2; v++) {
        printf(" forward version %d\n", v);
        poison(d_out, out_ref.size());
        forward_version(v, d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C);
        cudaCheck(cudaDeviceSynchronize());
        ok &= validate_result(d_out, out_ref, "out");
        ok &= validate_result(d_mean, mean_ref, "mean", 1e-5f, 1e-5f);
        ok &= validate_result(d_rstd, rstd_ref, "rstd", 1e-5f, 1e-5f);
    }
    // the backward reads the reference statistics
    cudaCheck(cudaMemcpy(d_mean, mean_ref.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_rstd, rstd_ref.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    std::vector<float> half(C, 0.5f), mhalf(C, -0.5f);
    for (int v = 1; v <= 3; v++) {
        printf(" backward version %d\n", v);
        floatX* fresh = dev_upload_x(dinp0);
        cudaCheck(cudaMemcpy(d_dinp, fresh, dinp0.size() * sizeof(floatX), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaFree(fresh));
        cudaCheck(cudaMemcpy(d_dw, half.data(), C * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_db, mhalf.data(), C * sizeof(float), cudaMemcpyHostToDevice));
        backward_version(v, d_dinp, d_dw, d_db, d_dout, d_x, d_w, d_mean, d_rstd, d_partial, N, C);
        cudaCheck(cudaDeviceSynchronize());
        ok &= validate_result(d_dinp, dinp_ref, "dinp");
        // dw, db: sums of N terms in fp32 in a different order than the CPU: ~sqrt(N) ulps of the sum of |terms|
        ok &= validate_result(d_dw, dw_ref, "dweight", 1e-3f, 1e-2f);
        ok &= validate_result(d_db, db_ref, "dbias", 1e-3f, 1e-2f);
    }
    {
        // version 3 with dinp_colsum (the trainer's attproj/fcproj bias gradient): the column sums
        // of the dinp it stored, added to 0.25, against the same sums taken here in double
        printf(" backward version 3 with the dinp column sums\n");
        floatX* fresh = dev_upload_x(dinp0);
        cudaCheck(cudaMemcpy(d_dinp, fresh, dinp0.size() * sizeof(floatX), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaFree(fresh));
        std::vector<float> quarter(C, 0.25f);
        float* d_colsum = dev_alloc<float>(C);
        cudaCheck(cudaMemcpy(d_colsum, quarter.data(), C * sizeof(float), cudaMemcpyHostToDevice));
        gpu::layernorm_backward(d_dinp, d_dw, d_db, d_colsum, d_dout, d_x, d_w, d_mean, d_rstd, d_partial, N, C, 0, 3);
        cudaCheck(cudaDeviceSynchronize());
        ok &= validate_result(d_dinp, dinp_ref, "dinp");
        std::vector<float> stored = dev_download(d_dinp, dinp0.size()), colsum_ref(C);
        for (int c = 0; c < C; c++) {
            double t = 0.25;
            for (int i = 0; i < N; i++) t += stored[(size_t)i * C + c];
            colsum_ref[c] = (float)t;
        }
        ok &= validate_result(d_colsum, colsum_ref, "dinp colsum", 1e-3f, 1e-2f);
        cudaCheck(cudaFree(d_colsum));
    }
    if (ok && !check_only) {
        double fwd_bytes = 2.0 * N * C * sizeof(floatX);
        for (int v = 1; v <= 2; v++) {
            float ms = benchmark_kernel(50, [&] { forward_version(v, d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C); });
            printf("  forward version %d: %.4f ms, %.0f GB/s\n", v, ms, fwd_bytes / ms / 1e6);
        }
        for (int v = 1; v <= 3; v++) {
            double bwd_bytes = (v == 3 ? 4.0 : 6.0) * N * C * sizeof(floatX);
            float ms = benchmark_kernel(20, [&] { backward_version(v, d_dinp, d_dw, d_db, d_dout, d_x, d_w, d_mean, d_rstd, d_partial, N, C); });
            printf("  backward version %d: %.4f ms, %.0f GB/s\n", v, ms, bwd_bytes / ms / 1e6);
        }
    }
    for (void* p : {(void*)d_x, (void*)d_w, (void*)d_b, (void*)d_dout, (void*)d_out, (void*)d_dinp, (void*)d_mean, (void*)d_rstd, (void*)d_dw, (void*)d_db, (void*)d_partial})
        cudaCheck(cudaFree(p));
    printf(ok ? "All results match.\n" : "MISMATCH\n");
    return ok ? 0 : 1;
}
