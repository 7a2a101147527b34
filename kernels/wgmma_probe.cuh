// kernels/wgmma_probe.cuh: one warpgroup's D = A B through Hopper's wgmma (kernels/wgmma.cuh), in
// each shape and operand layout that the version-6 attention kernels use, on 64 x 64 bf16 inputs
// given row-major in global memory. A probe, not a trainer op: dev/cuda/wgmma.cu runs it on a GPU
// against a CPU matmul, so that a device call tells which layout the hardware reads as the
// descriptors say (if attention version 6 fails there, this names the piece); tests/emu/test_emu.cu
// runs it under the emulator with faults injected. PyTorch: D = A @ B (fp32 accumulation).
//
// Modes (WgmmaProbeMode):
//   SS_KMAJOR   m64n64k16, A and B^T both K-major from 128-byte-swizzled shared tiles (S = Q K^T)
//   RS_MNMAJOR  m64n64k16, A from registers (the PTX A-fragment formula), B MN-major from a shared
//               tile (O = P V, dQ += dS K, dV += P^T dO)
//   SS_N32      m64n32k16, as SS_KMAJOR for the first 32 columns of B (the dK/dV kernel's S^T = K Q^T)
//   RS_KMAJOR   m64n64k16, A from registers, B^T K-major from a shared tile (version 7's S = Q K^T
//               and dP = dO V^T, Q and dO held as A fragments)
//   RS_N32      m64n32k16, A from registers, B^T K-major, the first 32 columns of B (version 7's
//               dK/dV S^T = K Q^T, K held as A fragments)
// The RS modes' A fragments come from the shared tile (sw128_a_fragments, as version 7 reads
// them); RS_MNMAJOR's from global memory by the PTX A-fragment formula.
// out: D, 64 x 64 fp32 row-major (the N32 modes: columns 32..63 are 0).
// broken (the emulator's tests only): 1 leaves out the wgmma.fence, 2 the fence.proxy.async after
// the cp.async copies, 3 reads the accumulators before the wgmma.wait_group (emulator builds only).
//
// BF16 build only (the cp.async helpers and attention_wgmma_available are the tensor-core
// attention's, kernels/attention.cuh).
//
// defines: WgmmaProbeMode, wgmma_probe, WgmmaProbeResult, wgmma_probe_check
#pragma once

#include "kernels/attention.cuh"
#include "kernels/wgmma.cuh"

#include <vector>

#ifdef ENABLE_BF16
namespace gpu {

enum WgmmaProbeMode { WGMMA_PROBE_SS_KMAJOR = 0, WGMMA_PROBE_RS_MNMAJOR = 1, WGMMA_PROBE_SS_N32 = 2, WGMMA_PROBE_RS_KMAJOR = 3, WGMMA_PROBE_RS_N32 = 4 };
__host__ __device__ inline bool wgmma_probe_n32(int mode) { return mode == WGMMA_PROBE_SS_N32 || mode == WGMMA_PROBE_RS_N32; }

// D fragment (N/8 blocks of 8 columns) -> out rows of 64
template <int NB>
__device__ __forceinline__ void wgmma_probe_store(const float (&d)[NB][4], float* out, int warp, int g, int t) {
    for (int i = 0; i < 4 * NB; i++) out[(16 * warp + g + 8 * ((i % 4) / 2)) * 64 + 8 * (i / 4) + 2 * t + i % 2] = d[i / 4][i % 4];
}

static __global__ void wgmma_probe_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, int mode, int broken, float* out) {
    extern __shared__ __align__(16) unsigned char wg_smem[];
    unsigned char* As = sw128_align(wg_smem);
    unsigned char* Bs = As + 64 * 128;
    int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    bool kmajor_b = mode != WGMMA_PROBE_RS_MNMAJOR;
    // B in the layout of its mode: rows n of k (B^T, K-major) or rows k of n (MN-major)
    for (int c = tid; c < 64 * 8; c += 128) {
        int r = c / 8, cc = c % 8;
        cp_async16(As + sw128_offset(r, cc), a + r * 64 + cc * 8, 16);
        if (kmajor_b) {  // B^T row n = column n of B: gathered by plain stores
            __nv_bfloat16* dst = reinterpret_cast<__nv_bfloat16*>(Bs + sw128_offset(r, cc));
            for (int e = 0; e < 8; e++) dst[e] = b[(cc * 8 + e) * 64 + r];
        } else {
            cp_async16(Bs + sw128_offset(r, cc), b + r * 64 + cc * 8, 16);
        }
    }
    cp_async_commit();
    cp_async_wait<0>();
    if (broken != 2) fence_proxy_async_shared();
    __syncthreads();
    uint32_t a_addr = smem_window_address(As), b_addr = smem_window_address(Bs);
    float d[8][4], d32[4][4];
    for (int i = 0; i < 32; i++) d[i / 4][i % 4] = 0.0f;
    for (int i = 0; i < 16; i++) d32[i / 4][i % 4] = 0.0f;
    uint32_t af[4][4];  // RS_MNMAJOR: A fragments of warp rows 16 warp + (g, g + 8), per k step
    if (mode == WGMMA_PROBE_RS_KMAJOR || mode == WGMMA_PROBE_RS_N32) {
        sw128_a_fragments(af, As, warp, g, t);
    } else {
        for (int ks = 0; ks < 4; ks++)
            for (int i = 0; i < 4; i++) {
                int row = 16 * warp + g + 8 * (i % 2), col = 16 * ks + 2 * t + 8 * (i / 2);
                __nv_bfloat16 lo = a[row * 64 + col], hi = a[row * 64 + col + 1];
                af[ks][i] = (uint32_t)*reinterpret_cast<const uint16_t*>(&lo) | ((uint32_t)*reinterpret_cast<const uint16_t*>(&hi) << 16);
            }
    }
    if (broken != 1) wgmma_fence();
    for (int ks = 0; ks < 4; ks++) {
        uint64_t desc_a = wgmma_desc_sw128(a_addr + 32 * ks, 16, 1024), desc_bk = wgmma_desc_sw128(b_addr + 32 * ks, 16, 1024);
        if (mode == WGMMA_PROBE_SS_KMAJOR) wgmma_m64n64k16_ss(d, desc_a, desc_bk, ks > 0);
        else if (mode == WGMMA_PROBE_SS_N32) wgmma_m64n32k16_ss(d32, desc_a, desc_bk, ks > 0);
        else if (mode == WGMMA_PROBE_RS_KMAJOR) wgmma_m64n64k16_rs(d, af[ks], desc_bk, ks > 0);
        else if (mode == WGMMA_PROBE_RS_N32) wgmma_m64n32k16_rs(d32, af[ks], desc_bk, ks > 0);
        else wgmma_m64n64k16_rs_mn(d, af[ks], wgmma_desc_sw128(b_addr + 2048 * ks, 16, 1024), ks > 0);
    }
    wgmma_commit();
#ifdef VP_CUDA_EMU
    // broken == 3: the accumulators read before the wait, which under the emulator see what was
    // there before the product (test_emu's wgmma_against_matmul). On a GPU such a read is
    // undefined behaviour (PTX ISA, wgmma.mma_async), so it is compiled for the emulator only.
    float early = 0.0f;
    if (broken == 3) early = wgmma_probe_n32(mode) ? d32[0][0] : d[0][0];
#endif
    wgmma_wait<0>();
#ifdef VP_CUDA_EMU
    if (broken == 3) d[0][0] = d32[0][0] = early;
#endif
    if (wgmma_probe_n32(mode)) wgmma_probe_store(d32, out, warp, g, t);
    else wgmma_probe_store(d, out, warp, g, t);
}

// out (64 x 64 fp32, device) = a (64 x 64 bf16, device) @ b (64 x 64 bf16, device), one block of
// one warpgroup; needs wgmma (an H100/H200 and a build for sm_90a, or the emulator)
inline void wgmma_probe(int mode, int broken, const __nv_bfloat16* a, const __nv_bfloat16* b, float* out, cudaStream_t stream) {
    KERNEL_ASSERT(mode >= WGMMA_PROBE_SS_KMAJOR && mode <= WGMMA_PROBE_RS_N32 && a && b && out);
    cudaCheck(cudaMemsetAsync(out, 0, 64 * 64 * sizeof(float), stream));
    size_t smem = 2 * 64 * 128 + SW128_ALIGN_SLACK;
    cudaCheck(cudaFuncSetAttribute(wgmma_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    wgmma_probe_kernel<<<1, 128, smem, stream>>>(a, b, mode, broken, out);
    cudaCheck(cudaGetLastError());
}

// The probe against a CPU matmul: A and B 64 x 64 integers in [-4, 4] from seed, exact in bf16 and
// their products' fp32 sums, so the comparison is equality. bad: the elements of D that differ
// (first_bad the first, row-major, or -1); out: D as the probe computed it.
struct WgmmaProbeResult {
    int bad = 0, first_bad = -1;
    std::vector<float> out;
};
inline WgmmaProbeResult wgmma_probe_check(int mode, int broken, uint64_t seed) {
    std::vector<__nv_bfloat16> a(4096), b(4096);
    std::vector<float> af(4096), bf(4096);
    auto small_int = [&] {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        return (float)((int)(seed >> 60) % 9 - 4);
    };
    for (int i = 0; i < 4096; i++) {
        af[i] = small_int();
        bf[i] = small_int();
        a[i] = __float2bfloat16_rn(af[i]);
        b[i] = __float2bfloat16_rn(bf[i]);
    }
    __nv_bfloat16 *da, *db;
    float* dd;
    cudaCheck(cudaMalloc(&da, 4096 * sizeof(__nv_bfloat16)));
    cudaCheck(cudaMalloc(&db, 4096 * sizeof(__nv_bfloat16)));
    cudaCheck(cudaMalloc(&dd, 4096 * sizeof(float)));
    cudaCheck(cudaMemcpy(da, a.data(), 4096 * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(db, b.data(), 4096 * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
    wgmma_probe(mode, broken, da, db, dd, 0);
    WgmmaProbeResult r;
    r.out.resize(4096);
    cudaCheck(cudaMemcpy(r.out.data(), dd, 4096 * sizeof(float), cudaMemcpyDeviceToHost));
    int ncols = wgmma_probe_n32(mode) ? 32 : 64;
    for (int m = 0; m < 64; m++)
        for (int n = 0; n < 64; n++) {
            float want = 0;
            for (int k = 0; k < 64 && n < ncols; k++) want += af[m * 64 + k] * bf[k * 64 + n];
            if (r.out[m * 64 + n] != want && r.bad++ == 0) r.first_bad = m * 64 + n;
        }
    for (void* p : {(void*)da, (void*)db, (void*)dd}) cudaCheck(cudaFree(p));
    return r;
}

}  // namespace gpu
#endif  // ENABLE_BF16
