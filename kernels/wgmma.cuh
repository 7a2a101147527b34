// kernels/wgmma.cuh: Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) for the attention kernels,
// with the shared-memory layout and matrix descriptors it reads. No PyTorch equivalent: this is
// what FlashAttention-3 and cuBLAS use on an H100 instead of mma.sync.
//
// A warpgroup is 4 consecutive warps (128 threads, aligned). One wgmma.m64nNk16 computes
// D (64 x N, fp32) (+)= A (64 x 16, bf16) B (16 x N, bf16) for the whole warpgroup:
//   - D: thread lane L of warp w (g = L/4, t = L%4) holds N/2 floats, d[j][2r + c] at row
//     16w + g + 8r, column 8j + 2t + c: per 8-column block j, the mma.m16n8k16 C fragment;
//   - A from registers: warp w's rows 16w..16w+15 as an mma.m16n8k16 A fragment (so a score
//     block's accumulators, packed to bf16, are the A operand of the next product, as in the
//     mma.sync kernels), or from shared memory through a descriptor;
//   - B from shared memory through a descriptor, K-major (rows n of 16 k: K of S = Q K^T) or
//     MN-major (rows k of N: V of O = P V).
// It runs asynchronously: wgmma_fence() before a batch (orders the registers' earlier writes),
// the batch, wgmma_commit(), then wgmma_wait<n>() before anything reads D or refills the shared
// tiles; wgmma_fence_operand keeps the compiler from moving register reads and writes across
// those. Shared memory written by cp.async or st.shared must be followed by
// fence_proxy_async_shared() (by the writers, before the __syncthreads) before a wgmma reads it:
// the tensor core reads through the async proxy.
//
// Tile layout: rows of 64 bf16 (128 bytes), the 16-byte chunks of row r XOR-swizzled by r % 8
// (chunk c at (c ^ (r % 8)) * 16), tiles starting on 1024-byte boundaries of the shared window.
// One tile serves both majors: K-major descriptors step 32 bytes per k16 (the hardware applies the
// swizzle to the address bits), MN-major ones 16 rows (2048 bytes) per k16; 8-row groups are
// 1024 bytes apart (the stride byte offset). The swizzle spreads a column of 16-byte chunks over
// all banks, for the copies that fill it and for the tensor core that reads it.
//
// Built only for sm_90a (-arch=sm_90a; GPU_ARCH's default for Hopper): elsewhere the wrappers
// trap, and the launchers (attention_forward6) are not called (attention_wgmma_available). Under
// the CUDA emulator (VP_CUDA_EMU) they run as tests/emu/cuda_emu.cpp's "wgmma".
//
// defines: sw128_offset, smem_window_address, sw128_align, SW128_ALIGN_SLACK, wgmma_desc_sw128, wgmma_fence, wgmma_commit,
//          wgmma_wait, wgmma_fence_operand, fence_proxy_async_shared, wgmma_m64n64k16_ss,
//          wgmma_m64n32k16_ss, wgmma_m64n64k16_rs_t, wgmma_m64n64k16_rs_mn, wgmma_m64n64k16_rs,
//          wgmma_m64n32k16_rs, sw128_a_fragments
#pragma once

#include "kernels/common.cuh"

namespace gpu {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define VP_WGMMA_PTX 1  // this device pass emits the instructions
#endif

// Byte offset of 16-byte chunk c (0..7: bf16 columns 8c..8c+7) of row r in a 128-byte-swizzled tile.
__host__ __device__ __forceinline__ int sw128_offset(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

// The address of p (dynamic shared memory) in the block's shared window: what descriptors hold.
__device__ __forceinline__ uint32_t smem_window_address(const void* p) {
#ifdef VP_CUDA_EMU
    return vp_emu::shared_window_address(p);
#else
    return (uint32_t)__cvta_generic_to_shared(p);
#endif
}

// Swizzled tiles start on a 1024-byte boundary of the shared window (a swizzle atom: 8 rows of 128
// bytes). sw128_align gives the first such boundary at or after p (dynamic shared memory, whose
// start the CUDA runtime does not promise to align so; the emulator places it off the boundary on
// purpose), and a kernel's launcher asks for SW128_ALIGN_SLACK bytes more than its tiles.
constexpr size_t SW128_ALIGN_SLACK = 1024;
__device__ __forceinline__ unsigned char* sw128_align(unsigned char* p) { return p + ((1024u - (smem_window_address(p) & 1023u)) & 1023u); }

// Matrix descriptor of a 128-byte-swizzled operand at window address addr (bits 7-9 clear: the
// start of a swizzle atom's row 0, plus 32-byte k steps): start, leading and stride byte offsets
// in 16-byte units, swizzle mode 1 (128 bytes) in bits 62-63, base offset 0.
// The leading byte offset: for K-major operands unused under this swizzle (the kernels pass 16,
// "1" encoded); for MN-major ones the distance between 64-element blocks of N (one 128-byte
// swizzle row each), unused while N <= 64, as in every call here (wgmma_m64n64k16_rs_mn). An
// MN-major operand with N > 64 (a D = 128 version) must pass that distance, not 16.
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo_bytes & 0x3FFFF) >> 4) << 16) | ((uint64_t)((sbo_bytes & 0x3FFFF) >> 4) << 32) |
           (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() {
#ifdef VP_CUDA_EMU
    vp_emu::wgmma_fence();
#elif defined(VP_WGMMA_PTX)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
    __trap();
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#ifdef VP_CUDA_EMU
    vp_emu::wgmma_commit();
#elif defined(VP_WGMMA_PTX)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
    __trap();
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#ifdef VP_CUDA_EMU
    vp_emu::wgmma_wait(N);
#elif defined(VP_WGMMA_PTX)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#else
    __trap();
#endif
}
__device__ __forceinline__ void fence_proxy_async_shared() {
#ifdef VP_CUDA_EMU
    vp_emu::fence_proxy_async_shared();
#elif defined(VP_WGMMA_PTX)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
    __trap();
#endif
}
// Pins registers in place around the asynchronous MMA: an empty asm that "reads and writes" each,
// so the compiler cannot move their uses across a wgmma_wait or their writes across a wgmma.
template <int N>
__device__ __forceinline__ void wgmma_fence_operand(float (&r)[N][4]) {
#ifndef VP_CUDA_EMU
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(r[i][e])::"memory");
#endif
}

// d (64 x 64 fp32: 8 blocks of 8 columns) = (scale_d ? d : 0) + A B, A (64 x 16) and B (16 x 64,
// K-major) from shared memory.
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[8][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#ifdef VP_CUDA_EMU
    vp_emu::wgmma_bf16(&d[0][0], 64, nullptr, desc_a, desc_b, 0, scale_d != 0);
#elif defined(VP_WGMMA_PTX)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#else
    __trap();
#endif
}
// d (64 x 32 fp32: 4 blocks of 8 columns) = (scale_d ? d : 0) + A B, A (64 x 16) and B (16 x 32,
// K-major) from shared memory: the dK/dV kernel's score products, 32 queries at a time.
__device__ __forceinline__ void wgmma_m64n32k16_ss(float (&d)[4][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#ifdef VP_CUDA_EMU
    vp_emu::wgmma_bf16(&d[0][0], 32, nullptr, desc_a, desc_b, 0, scale_d != 0);
#elif defined(VP_WGMMA_PTX)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#else
    __trap();
#endif
}
// d (64 x 64 fp32) = (scale_d ? d : 0) + A B, A (64 x 16) from registers (this warp's m16n8k16 A
// fragment), B (16 x 64) from shared memory: TRANS_B 1, MN-major (rows k of 64 columns: O = P V,
// dQ += dS K, the dK/dV products), or 0, K-major (B^T's rows of 16 k, as wgmma_m64n64k16_ss reads
// it: version 7's S = Q K^T and dP = dO V^T with Q and dO held as A fragments). imm-trans-b.
template <int TRANS_B>
__device__ __forceinline__ void wgmma_m64n64k16_rs_t(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    static_assert(TRANS_B == 0 || TRANS_B == 1, "imm-trans-b is 0 or 1");
#ifdef VP_CUDA_EMU
    vp_emu::wgmma_bf16(&d[0][0], 64, a, 0, desc_b, TRANS_B, scale_d != 0);
#elif defined(VP_WGMMA_PTX)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TRANS_B));
#else
    __trap();
#endif
}
__device__ __forceinline__ void wgmma_m64n64k16_rs_mn(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    wgmma_m64n64k16_rs_t<1>(d, a, desc_b, scale_d);
}
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    wgmma_m64n64k16_rs_t<0>(d, a, desc_b, scale_d);
}
// d (64 x 32 fp32) = (scale_d ? d : 0) + A B, A (64 x 16) from registers, B (16 x 32) K-major from
// shared memory: version 7's dK/dV score products S^T = K Q^T and dP^T = V dO^T with K and V held
// as A fragments.
__device__ __forceinline__ void wgmma_m64n32k16_rs(float (&d)[4][4], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
#ifdef VP_CUDA_EMU
    vp_emu::wgmma_bf16(&d[0][0], 32, a, 0, desc_b, 0, scale_d != 0);
#elif defined(VP_WGMMA_PTX)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
#else
    __trap();
#endif
}
// Warp w's A fragments (kernels/wgmma.cuh's register A operand: the mma.m16n8k16 A fragment) of
// rows 16w..16w+15 of a 64-column 128-byte-swizzled tile in shared memory, for the 4 k16 steps
// over its columns: f[ks][r + 2 hi] = the bf16 pair at row 16w + g + 8r, columns 16ks + 8hi + 2t
// (+1). Read once by a kernel that multiplies the same rows by many tiles (version 7). The tile
// must have landed and be visible to the block (cp.async waited for, then a __syncthreads).
__device__ __forceinline__ void sw128_a_fragments(uint32_t (&f)[4][4], const unsigned char* tile, int warp, int g, int t) {
#pragma unroll
    for (int ks = 0; ks < 4; ks++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            f[ks][i] = *reinterpret_cast<const uint32_t*>(tile + sw128_offset(16 * warp + g + 8 * (i % 2), 2 * ks + i / 2) + 4 * t);
}

}  // namespace gpu
