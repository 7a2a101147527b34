/*
Kernel lab: the fused classifier (softmax over V real tokens + cross-entropy loss + dlogits in
place over the logits), kernels/classifier.cuh.

Compile and run (bf16; build/dev/cuda/fp32/classifier is the lab's FP32 build):
  make build/dev/cuda/bf16/classifier         (all labs: make dev-cuda)
  ./build/dev/cuda/bf16/classifier            check every version, then time each
  ./build/dev/cuda/bf16/classifier --check    check only (dev/device_check.sh)

Shapes: B*T = 4096 rows of the GPT-2 vocabulary, V = 50257 padded to Vp = 50304. The reference is
the CPU trainer's crossentropy_softmax_forward/backward (with dloss = 1: the GPU leaves the mean's
1/(B*T) to the LM-head GEMM's alpha). Outputs: the per-row losses, and dlogits = softmax - onehot
(0 on the padded columns).

version 1: three passes per row (max, sum of exp, write), one block per row, block reductions
  through shared memory. Reads the row three times.
version 2: one online-softmax pass (running max and sum, merged across threads and warps in a
  fixed order: deterministic) for the loss, and one more pass that writes dlogits. Two reads and
  one write per element: 16-byte vectors.
version 3: version 2 with the running max taken per 16-byte vector and every exponential as one
  FFMA and exp2f (kernels/classifier.cuh says why). The trainer's kernel.
version 4: version 3 with the row kept in shared memory between the passes: one read and one
  write per element, 1024 threads per row, two rows per SM. Checked here also against version 3
  run with 1024 threads, bit for bit.
Napkin math: version 2 moves 3 x N x Vp x sizeof(floatX) bytes (1.2 GB at bf16 here); the second
read usually hits L2 (a 100 KB row per block).
*/
#include "dev/cuda/common.h"
#include "kernels/classifier.cuh"

// ----------------------------------------------------------------------------
// GPU kernels (versions 2, 3 and 4 are gpu::fused_classifier2/3/4)

__device__ float block_reduce_max(float v) {
    __shared__ float s[32];
    v = gpu::warp_max(v);
    __syncthreads();
    if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = v;
    __syncthreads();
    int lane = threadIdx.x % 32;  // every warp reduces the warps' maxima, so every thread gets the max
    v = lane < (int)blockDim.x / 32 ? s[lane] : -INFINITY;
    return gpu::warp_max(v);
}

__global__ void classifier_kernel1(floatX* logits, float* losses, const int* targets, int V, int Vp) {
    floatX* x = logits + (size_t)blockIdx.x * Vp;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, gpu::to_float(x[j]));
    m = block_reduce_max(m);
    float s = 0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(gpu::to_float(x[j]) - m);
    s = gpu::block_sum(s);
    int t = targets[blockIdx.x];
    if (threadIdx.x == 0) losses[blockIdx.x] = logf(s) + m - gpu::to_float(x[t]);
    __syncthreads();
    for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
        float p = j < V ? expf(gpu::to_float(x[j]) - m) / s : 0.0f;
        x[j] = gpu::from_float<floatX>(p - (j == t ? 1.0f : 0.0f));
    }
}

// ----------------------------------------------------------------------------
// launchers

static void classifier_version(int version, floatX* logits, float* losses, const int* targets, int N, int V, int Vp) {
    switch (version) {
        case 1: classifier_kernel1<<<N, 512>>>(logits, losses, targets, V, Vp); cudaCheck(cudaGetLastError()); break;
        case 2: gpu::fused_classifier2(logits, losses, targets, N, V, Vp, true, 0); break;
        case 3: gpu::fused_classifier3(logits, losses, targets, N, V, Vp, true, 0); break;
        case 4: gpu::fused_classifier4(logits, losses, targets, N, V, Vp, true, 0); break;
        default: runtime_error(nullptr, "no version %d", version);
    }
}

int main(int argc, char** argv) {
    if (!lab_has_device()) return 0;
    bool check_only = lab_flag(argc, argv, "--check");
    const int N = 4096, V = 50257, Vp = 50304;
    printf("fused classifier: N=%d V=%d Vp=%d (%s)\n", N, V, Vp, PRECISION_NAME);
    std::vector<float> logits = round_to_floatx(random_normal((size_t)N * Vp, 1, 2.0f));
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) logits[(size_t)i * Vp + j] = 0;  // the padded columns: the lm head's rows there are zero
    std::vector<int> targets(N);
    Rng r = rng_stream(2, 2);
    for (int& t : targets) t = (int)(rng_next_u64(&r) % V);
    std::vector<float> losses_ref(N), dlogits_ref = logits;
    ::crossentropy_softmax_forward(losses_ref.data(), dlogits_ref.data(), targets.data(), N, V, Vp);
    ::crossentropy_softmax_backward(dlogits_ref.data(), targets.data(), 1.0f, N, Vp);

    floatX* d_logits = dev_alloc<floatX>(logits.size());
    floatX* d_src = dev_upload_x(logits);
    float* d_losses = dev_alloc<float>(N);
    int* d_targets = dev_upload(targets);
    bool ok = true;
    const int versions = 4;
    for (int v = 1; v <= versions; v++) {
        printf(" version %d\n", v);
        cudaCheck(cudaMemcpy(d_logits, d_src, logits.size() * sizeof(floatX), cudaMemcpyDeviceToDevice));
        poison(d_losses, N);
        classifier_version(v, d_logits, d_losses, d_targets, N, V, Vp);
        cudaCheck(cudaDeviceSynchronize());
        ok &= validate_result(d_losses, losses_ref, "losses", 1e-5f, 1e-4f);
        // dlogits: probabilities ~1/V, stored in floatX: relative tolerance, absolute floor of a few bf16 ulps of 1/V
        ok &= validate_result(d_logits, dlogits_ref, "dlogits", LAB_TOL_REL, 1e-6f);
    }
    // version 4 against version 3's kernel with as many threads per row: the same bits (where
    // version 4 runs at all: a bf16 row of Vp fits its shared memory; FP32 falls back to version 3)
    if ((size_t)Vp * sizeof(floatX) <= gpu::CLASSIFIER4_MAX_ROW_BYTES) {
        std::vector<float> got[2], lost[2];
        for (int w = 0; w < 2; w++) {
            cudaCheck(cudaMemcpy(d_logits, d_src, logits.size() * sizeof(floatX), cudaMemcpyDeviceToDevice));
            if (w == 0) gpu::fused_classifier_kernel3<<<N, gpu::CLASSIFIER4_THREADS>>>(d_logits, d_losses, d_targets, V, Vp, true);
            else gpu::fused_classifier4(d_logits, d_losses, d_targets, N, V, Vp, true, 0);
            cudaCheck(cudaGetLastError());
            cudaCheck(cudaDeviceSynchronize());
            got[w] = dev_download(d_logits, logits.size());
            lost[w] = dev_download(d_losses, N);
        }
        bool same = got[0] == got[1] && lost[0] == lost[1];
        printf(" versions 3 (%d threads) and 4 bit-identical (losses, dlogits): %s\n", gpu::CLASSIFIER4_THREADS, same ? "ok" : "NO");
        ok &= same;
    }
    if (ok && !check_only) {
        double bytes = 3.0 * N * Vp * sizeof(floatX);
        for (int v = 1; v <= versions; v++) {
            // repeated runs see the previous run's dlogits as logits: the same work, data-independent
            float ms = benchmark_kernel(20, [&] { classifier_version(v, d_logits, d_losses, d_targets, N, V, Vp); });
            printf("  version %d: %.3f ms, %.0f GB/s (counting 2 reads + 1 write per element)\n", v, ms, bytes / ms / 1e6);
        }
    }
    cudaCheck(cudaFree(d_logits));
    cudaCheck(cudaFree(d_src));
    cudaCheck(cudaFree(d_losses));
    cudaCheck(cudaFree(d_targets));
    printf(ok ? "All results match.\n" : "MISMATCH\n");
    return ok ? 0 : 1;
}
