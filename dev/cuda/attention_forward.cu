/*
Kernel lab: causal self-attention forward (flash style, GQA), the kernels of kernels/attention.cuh.

Compile and run (bf16; build/dev/cuda/fp32/attention_forward is the lab's FP32 build):
  make build/dev/cuda/bf16/attention_forward         (all labs: make dev-cuda)
  ./build/dev/cuda/bf16/attention_forward            check every version, then time each
  ./build/dev/cuda/bf16/attention_forward --check    check only (dev/device_check.sh)

Shapes: GPT-2 124M attention, B=8, T=1024, H=12, Hkv=12, D=64; then GQA H=12, Hkv=4 (G=3) at
T=1000 (a ragged last tile). Inputs are laid out as in the trainer: one (B,T,W) qkv buffer,
W = (H+2Hkv)D, so q, k, v are strided views.

Correctness: the reference is the CPU trainer's attention_forward (fp32) on the same inputs, the
inputs first rounded to floatX so both see the same numbers. Besides per-element tolerances we
apply FlashAttention's rule: a version's normwise error against the fp32 reference must be at most
2x the error of the same math done naively in bf16 (S, P and O each rounded to bf16; emulated on
the CPU below), plus a floor of 1e-6 (for the FP32 build, where the naive error is ~0).
First, the launchers' shape limit: B x heads past CUDA's 65535 blocks in grid y is refused by
name before any launch (check_grid_limit).

version 1: SIMT. One thread per query row, K/V tiles in shared memory as fp32, online softmax
  per key. The FP32 build's kernel (tensor cores would mean TF32). Readable, slow: every thread
  holds q and o (2D floats) in registers; D=128 spills.
version 2: tensor cores. FlashAttention-2 tiling: a block of 4 warps owns 64 query rows, each warp
  16 rows; K/V tiles of 64 keys through shared memory (rows padded by 16 bytes so ldmatrix is
  conflict-free); S = QK^T and O += PV with mma.sync.m16n8k16 bf16->fp32; P never leaves registers
  (the C fragments of S are the A fragments of PV); exp2 with log2(e)/sqrt(D) folded into one
  multiply; heaviest query tiles scheduled first. No spills (dev/ptxas_report.sh).
(There is no forward version 3: version 3 is the backward's; the numbers follow kernels/attention.cuh.)
version 4: version 2 with two K/V buffers: the next tile's K and V are started as cp.async copies
  (sm_80+, global -> shared without passing through registers) before the current tile's math, so
  the block no longer waits on its loads, and one __syncthreads per tile instead of two. 45 KiB of
  shared memory at D=64 (4 blocks per SM fit), 85 KiB at D=128. Bit-identical to version 2
  (checked below). The trainer's.
version 5: version 4 with 32 query rows per warp (two m-tiles of 16; 128 rows per block, warp w
  owning rows 16w.. and 64 + 16w..), so each K and V fragment loaded from shared memory by
  ldmatrix feeds two mma instead of one; at D = 128 it runs version 4 (the two m-tiles' registers
  would spill). Bit-identical to version 2 (checked below). Not faster on an H200 (2026-11-27):
  0.130 against version 4's 0.120 ms at B=8 here, and 0.995x, 1.003x a whole step; its 229
  registers at D = 64 leave 2 blocks per SM (version 4: 127, 4 blocks).
version 6: Hopper's warpgroup MMA (wgmma, sm_90a; kernels/wgmma.cuh), D = 64 only: blocks of two
  warpgroups (128 query rows), S = QK^T with Q and K read by the tensor core from 128-byte-
  swizzled shared tiles (no ldmatrix), O += PV with P from registers and V read MN-major; cp.async
  double buffering and the softmax code of version 4. Checked here against the CPU like the others;
  under the CUDA emulator also bit-identical to version 2 (the emulator sums each k16 step in order
  for mma and wgmma alike); on a GPU the tensor core's own k16 sums may round differently, so
  there the comparison is printed, not required. Runs where attention_wgmma_supported (an
  H100/H200 and a build for sm_90a). The trainer's default there since 2026-11-28: on an H200 a
  whole step with it took 0.985x the time of one with version 4's forward.
  Not yet done: one block per GQA group sharing K/V loads, TMA, warp specialisation.
version 7: version 6 with each warp's 16 query rows read once from the Q tile into registers as
  wgmma A fragments (sw128_a_fragments), so S = QK^T reads only K from shared memory. Why: a
  wgmma.m64n64k16 with both operands in shared memory reads 4 KiB per 32 tensor-core cycles,
  128 B/clk, all of an SM's shared-memory bandwidth, with the K/V copies still to land; with A in
  registers, 2 KiB. The same products in the same order as version 6 (bit-identical under the
  emulator; on a GPU printed). 122 registers, no spill (ptxas; 2 blocks of 256 threads per SM):
  the K/V source's pointers and strides are read from shared memory as each tile starts. Not yet
  timed on a GPU.
*/
#include "dev/cuda/common.h"
#include "kernels/attention.cuh"

struct AttnProblem {
    int B, T, H, Hkv, D;
    int W() const { return (H + 2 * Hkv) * D; }
};

// FlashAttention's baseline: the same math in bf16, naively (scores, probabilities, output each
// rounded to bf16; sums in fp32, as a bf16 GEMM would accumulate)
static float bf16r(float x) { return (float)(__nv_bfloat16)x; }

static std::vector<float> attention_naive_bf16(const std::vector<float>& qkv, const AttnProblem& p) {
    int B = p.B, T = p.T, H = p.H, Hkv = p.Hkv, D = p.D, W = p.W(), G = H / Hkv;
    std::vector<float> out((size_t)B * T * H * D);
    float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            std::vector<float> s(T);
            for (int i = 0; i < T; i++) {
                const float* q = qkv.data() + ((size_t)b * T + i) * W + h * D;
                float m = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    const float* k = qkv.data() + ((size_t)b * T + j) * W + H * D + (h / G) * D;
                    float acc = 0;
                    for (int d = 0; d < D; d++) acc += q[d] * k[d];
                    s[j] = bf16r(acc * scale);
                    m = std::max(m, s[j]);
                }
                float l = 0;
                for (int j = 0; j <= i; j++) l += (s[j] = bf16r(expf(s[j] - m)));
                for (int d = 0; d < D; d++) {
                    float acc = 0;
                    for (int j = 0; j <= i; j++) acc += s[j] * qkv[((size_t)b * T + j) * W + (H + Hkv) * D + (h / G) * D + d];
                    out[((size_t)b * T + i) * H * D + h * D + d] = bf16r(acc / l);
                }
            }
        }
    return out;
}

static void attention_forward_version(int version, const gpu::AttentionArgs& a) {
    switch (version) {
        case 1: gpu::attention_forward1(a, 0); break;
#ifdef ENABLE_BF16
        case 2: gpu::attention_forward2(a, 0); break;
        case 4: gpu::attention_forward4(a, 0); break;
        case 5: gpu::attention_forward5(a, 0); break;
        case 6: gpu::attention_forward6(a, 0); break;
        case 7: gpu::attention_forward7(a, 0); break;
#endif
        default: runtime_error(nullptr, "no version %d in this build", version);
    }
}

static bool run_problem(const AttnProblem& p, bool check_only) {
    int B = p.B, T = p.T, H = p.H, Hkv = p.Hkv, D = p.D, W = p.W();
    printf("attention forward: B=%d T=%d H=%d Hkv=%d D=%d (%s)\n", B, T, H, Hkv, D, PRECISION_NAME);
    std::vector<float> qkv = round_to_floatx(random_normal((size_t)B * T * W, 1));
    std::vector<float> out_ref((size_t)B * T * H * D), lse_ref((size_t)B * H * T);
    ::attention_forward(out_ref.data(), lse_ref.data(), qkv.data(), qkv.data() + H * D, qkv.data() + (H + Hkv) * D, B, T, H, Hkv, D, (long)W, (long)W, (long)W);
    std::vector<float> naive = attention_naive_bf16(qkv, p);
    double naive_err = normwise_error(naive, out_ref), naive_max = max_abs_error(naive, out_ref);
    printf("  naive bf16 math: normwise error %.3e, max abs error %.3e (FlashAttention's rule: a version may have 2x that)\n", naive_err, naive_max);
    // Elementwise, the same rule in the max norm: no output may be off by more than twice the
    // largest error of the naive bf16 math (bf16 P makes the error absolute, about u * |v|, not
    // relative to the output, so a fixed 1e-3 failed the correct tensor-core version on outputs
    // near zero: seen under the CUDA emulator, tests/emu). LAB_TOL_ABS stays the floor.
    float out_tol_abs = gpu::FLOATX_IS_FLOAT ? LAB_TOL_ABS : std::max(LAB_TOL_ABS, (float)(2 * naive_max));  // fp32 build: unchanged

    floatX* d_qkv = dev_upload_x(qkv);
    floatX* d_out = dev_alloc<floatX>(out_ref.size());
    float* d_lse = dev_alloc<float>(lse_ref.size());
    gpu::AttentionArgs a;
    a.B = B, a.T = T, a.H = H, a.Hkv = Hkv, a.D = D;
    a.q = d_qkv, a.k = d_qkv + H * D, a.v = d_qkv + (H + Hkv) * D;
    a.q_rs = a.k_rs = a.v_rs = W;
    a.out = d_out, a.lse = d_lse;

    std::vector<int> versions = {1};
#ifdef ENABLE_BF16
    versions.push_back(2);
    versions.push_back(4);
    versions.push_back(5);
    if (gpu::attention_wgmma_supported(a)) versions.insert(versions.end(), {6, 7});
    else printf(" versions 6, 7: not run (head dim %d, not a compute capability 9.0 GPU, or a build without sm_90a)\n", D);
#endif
    bool ok = true;
    std::vector<std::vector<float>> results[8];  // per version: out, lse as computed
    for (int v : versions) {
        printf(" version %d\n", v);
        poison(d_out, out_ref.size());
        poison(d_lse, lse_ref.size());
        attention_forward_version(v, a);
        cudaCheck(cudaDeviceSynchronize());
        ok &= validate_result(d_out, out_ref, "out", LAB_TOL_REL, out_tol_abs);
        ok &= validate_result(d_lse, lse_ref, "lse", LAB_TOL_REL, 1e-3f);
        double err = normwise_error(dev_download(d_out, out_ref.size()), out_ref);
        bool fa_rule = err <= 2 * naive_err + 1e-6;
        printf("  FA rule: %.3e <= 2 x %.3e: %s\n", err, naive_err, fa_rule ? "ok" : "FAILED");
        ok &= fa_rule;
        results[v].push_back(dev_download(d_out, out_ref.size()));
        results[v].push_back(dev_download(d_lse, lse_ref.size()));
    }
    // versions 4 and 5 change only how K and V reach shared memory and how rows are shared out
    // among warps: the same math per row, the same bits
    for (int v : {4, 5})
        if (!results[v].empty()) {
            bool same = results[2] == results[v];
            printf(" versions 2 and %d bit-identical (out, lse): %s\n", v, same ? "ok" : "FAILED");
            ok &= same;
        }
    if (!results[6].empty())
        ok &= lab_same_bits_emulated("versions 2 and 6 (out, lse)", results[2] == results[6], "the tensor core's own k16 sums");
    if (!results[7].empty())  // version 6's products with A from registers
        ok &= lab_same_bits_emulated("versions 6 and 7 (out, lse)", results[6] == results[7], "A from registers or shared memory");
    if (ok && !check_only) {
        // causal attention FLOPs: 2 GEMMs of 2*T*T*D per (b, h), halved by the mask
        double flops = 2.0 * 2.0 * B * H * (double)T * T * D / 2;
        for (int v : versions) {
            float ms = benchmark_kernel(20, [&] { attention_forward_version(v, a); });
            printf("  version %d: %.3f ms, %.1f TFLOP/s\n", v, ms, flops / ms / 1e9);
        }
    }
    cudaCheck(cudaFree(d_qkv));
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_lse));
    return ok;
}

// The launchers' one shape limit besides memory (kernels/attention.cuh, CUDA_MAX_GRID_Y): B x the
// call's heads blocks in grid y, at most 65535. A call past it must be refused by name before any
// launch (on a GPU the launch itself would fail with "invalid configuration argument"), one at it
// accepted. At the limit only the argument check runs: 65535 blocks would take minutes under the
// CUDA emulator. H = 15 (65535 = 15 x 4369) so that the limit is reached exactly; GQA G = 3 and a
// head range of 3 heads (B = 21845) check that the call's heads count, not all H.
static bool check_grid_limit() {
    const int H = 15, Hkv = 5, D = 64;
    floatX* x = dev_alloc<floatX>(64);
    float* f = dev_alloc<float>(64);
    gpu::AttentionArgs a;
    a.T = 1, a.H = H, a.Hkv = Hkv, a.D = D, a.h0 = 0, a.h1 = H;
    a.q = a.k = a.v = a.dout = x;
    a.out = a.dq = a.dk = a.dv = x;
    a.lse = a.delta = f;
    a.q_rs = a.dq_rs = (long)H * D;
    a.k_rs = a.v_rs = a.dk_rs = a.dv_rs = (long)Hkv * D;
    // whether fn was refused with the grid limit's message (any other error, or none: false)
    auto refused = [](auto&& fn) {
        try {
            ErrorCapture capture;
            fn();
        } catch (const CapturedError& e) {
            return e.message.find("blocks in grid y") != std::string::npos;
        }
        return false;
    };
    bool ok = true;
    auto expect = [&](const char* what, bool good) {
        printf("  %s: %s\n", what, good ? "ok" : "FAILED");
        ok &= good;
    };
    printf("attention launch limit: B x heads <= %ld (%s)\n", gpu::CUDA_MAX_GRID_Y, PRECISION_NAME);
    for (bool backward : {false, true}) {
        a.B = (int)(gpu::CUDA_MAX_GRID_Y / H);
        expect(backward ? "backward, B x H = 65535 accepted" : "forward, B x H = 65535 accepted",
               !refused([&] { gpu::attention_check_args(a, backward, 2); }) && !refused([&] { gpu::attention_check_args(a, backward, 1); }));
        a.B++;
        expect(backward ? "backward, B x H = 65550 refused" : "forward, B x H = 65550 refused",
               refused([&] { gpu::attention_check_args(a, backward, 2); }) && refused([&] { gpu::attention_check_args(a, backward, 1); }));
    }
    expect("the trainer's forward entry point refuses it before launching", refused([&] { gpu::attention_forward(a, 0); }));
    a.h0 = 6, a.h1 = 9, a.B = (int)(gpu::CUDA_MAX_GRID_Y / 3);
    expect("heads [6, 9), B x 3 = 65535 accepted", !refused([&] { gpu::attention_check_args(a, true, 2); }));
    a.B++;
    expect("heads [6, 9), B x 3 = 65538 refused", refused([&] { gpu::attention_check_args(a, true, 2); }));
    expect("attention_grid_fits(4369, 15), not (4370, 15)", gpu::attention_grid_fits(4369, 15) && !gpu::attention_grid_fits(4370, 15));
    cudaCheck(cudaFree(x));
    cudaCheck(cudaFree(f));
    return ok;
}

int main(int argc, char** argv) {
    if (!lab_has_device()) return 0;
    bool check_only = lab_flag(argc, argv, "--check");
    bool ok = check_grid_limit();
    ok &= run_problem({8, 1024, 12, 12, 64}, check_only);
    ok &= run_problem({2, 1000, 12, 4, 64}, check_only);
    ok &= run_problem({2, 200, 4, 2, 128}, check_only);
    ok &= run_problem({2, 100, 8, 8, 32}, check_only);
    printf(ok ? "All results match.\n" : "MISMATCH\n");
    return ok ? 0 : 1;
}
