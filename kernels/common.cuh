// kernels/common.cuh: what every GPU kernel header of valuepath shares.
//
//   floatX            the activation/compute type, fixed at build time: PRECISION=BF16 (default)
//                     -> __nv_bfloat16, PRECISION=FP32 -> float (make passes -DENABLE_BF16 or
//                     -DENABLE_FP32). Master weights, gradients and optimizer moments are always
//                     float; only parameters-as-read-by-kernels and activations are floatX.
//   cudaCheck, cublasCheck    every CUDA/cuBLAS call goes through one of these: file, line, the
//                     expression and the error string, then runtime_error (exit 1, or a thrown
//                     VpError in test builds) -- the same failure path as the host code.
//   KERNEL_ASSERT     launchers assert the shapes their kernels assume, with the condition text.
//   cuda_malloc_check cudaMalloc that says how many bytes it needed and how many were free.
//   warp/block reductions with a FIXED order (determinism), vectorised 16-byte loads.
//   grid_ticket, flag_release, flag_wait_acquire: ordered signalling between a grid's blocks.
//
// Everything GPU-side lives in namespace gpu, so that test_gpt.cu can hold the GPU trainer and the
// CPU reference (train_gpt_cpu.cpp, global namespace, same op names) in one translation unit.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "host/utils.h"  // runtime_error, CEIL_DIV

#if defined(ENABLE_FP32) && defined(ENABLE_BF16)
#error "define only one of ENABLE_FP32 and ENABLE_BF16 (make PRECISION=FP32|BF16)"
#endif
#if !defined(ENABLE_FP32) && !defined(ENABLE_BF16)
#define ENABLE_BF16  // the default, as in the Makefile
#endif

namespace gpu {

#ifdef ENABLE_FP32
typedef float floatX;
#define PRECISION_NAME "fp32"
#else
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "bf16"
#endif
constexpr bool FLOATX_IS_FLOAT = sizeof(floatX) == sizeof(float);

// ----------------------------------------------------------------------------
// error checking

inline void cuda_check_(cudaError_t err, const char* expr, const char* file, int line) {
    if (err == cudaSuccess) return;
    runtime_error(err == cudaErrorMemoryAllocation ? "use a smaller --batch-size or --seq-len, or --recompute 2" : nullptr,
                  "CUDA error at %s:%d: %s\n  in: %s", file, line, cudaGetErrorString(err), expr);
}
#define cudaCheck(err) (gpu::cuda_check_((err), #err, __FILE__, __LINE__))

inline void cublas_check_(cublasStatus_t st, const char* expr, const char* file, int line) {
    if (st == CUBLAS_STATUS_SUCCESS) return;
    runtime_error(nullptr, "cuBLAS error %d (%s) at %s:%d\n  in: %s", (int)st, cublasGetStatusString(st), file, line, expr);
}
#define cublasCheck(st) (gpu::cublas_check_((st), #st, __FILE__, __LINE__))

// Launcher shape checks: always on (not assert(), which NDEBUG would remove). A failed one is a
// bug in the caller, not a user error, so it says "internal".
#define KERNEL_ASSERT(cond)                                                                                   \
    do {                                                                                                      \
        if (!(cond)) runtime_error(nullptr, "internal: kernel launcher check failed at %s:%d: %s", __FILE__, __LINE__, #cond); \
    } while (0)

// The per-head kernels (attention, Depth's) are compiled for head dims 16, 32, 64 and 128; a
// launcher hands its run-time D to f as a compile-time one: f(std::integral_constant<int, D>()),
// so that in f, decltype(d)::value is D. One switch for every launcher; the launchers' argument
// checks have already refused any other D, so another one here is a bug.
template <typename F>
inline void with_head_dim(int D, F&& f) {
    switch (D) {
        case 16: f(std::integral_constant<int, 16>()); break;
        case 32: f(std::integral_constant<int, 32>()); break;
        case 64: f(std::integral_constant<int, 64>()); break;
        case 128: f(std::integral_constant<int, 128>()); break;
        default: KERNEL_ASSERT(D == 16 || D == 32 || D == 64 || D == 128);
    }
}

// cudaMalloc with a message that names what was being allocated and the bytes needed/free.
inline void* cuda_malloc_check(size_t bytes, const char* what) {
    void* p = nullptr;
    if (bytes == 0) return nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky-free error state of a failed allocation
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        runtime_error("free the GPU (nvidia-smi lists other processes), or use a smaller model, --batch-size or --seq-len, or --recompute 2",
                      "out of GPU memory allocating %s: needed %s, %s free of %s (%s)", what, human_bytes(bytes).c_str(), human_bytes(free_b).c_str(),
                      human_bytes(total_b).c_str(), cudaGetErrorString(err));
    }
    return p;
}

// ----------------------------------------------------------------------------
// conversions and vectorised access

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// The bits of `from` as a To of the same size (C++20's std::bit_cast; register moves once compiled).
// Reading a register value through a pointer of another type -- a uint4 through a floatX* -- is
// undefined behaviour that type-based alias analysis may act on: built -O2 (GCC's
// -fstrict-aliasing), the emulated bf16 bias gradient kernel read its uint4 as zeros. memcpy is the
// defined way, and NVVM's TBAA gets nothing to act on either.
template <typename To, typename From>
__device__ __forceinline__ To bits_as(const From& from) {
    static_assert(sizeof(To) == sizeof(From), "bits_as: the two types differ in size");
    To to;
    memcpy(&to, &from, sizeof(To));
    return to;
}

// a * b rounded to fp32, never fused with an add that reads it into one FMA (nvcc's __fmul_rn).
// nvcc fuses a product and a following add wherever it decides, per kernel: code that two kernel
// versions share, and whose results are compared bit for bit, says which products stay unfused
// (tests/ptx_fusion.py checks the attention kernels' PTX for any left to nvcc). The emulator's
// __fmul_rn keeps it unfused on the host as well; a CUDA build's host code (tests/test_gpu_routes.cu)
// goes through a volatile, which the host compiler cannot fuse across.
__host__ __device__ __forceinline__ float mul_unfused(float a, float b) {
#if defined(__CUDA_ARCH__) || defined(VP_CUDA_EMU)
    return __fmul_rn(a, b);
#else
    volatile float r = a * b;
    return r;
#endif
}

// 16 bytes of T held in registers: 8 bf16 or 4 float. Loads and stores of whole 16-byte words are
// what makes memory-bound kernels run at bandwidth; the pointer must be 16-byte aligned.
template <typename T>
struct alignas(16) Packed128 {
    static constexpr int size = 16 / sizeof(T);
    T v[size];
    __device__ __forceinline__ T& operator[](int i) { return v[i]; }
    __device__ __forceinline__ const T& operator[](int i) const { return v[i]; }
};
template <typename T>
__device__ __forceinline__ Packed128<T> load128(const T* p) { return *reinterpret_cast<const Packed128<T>*>(p); }
// host: p may be read or written as whole 16-byte words (load128 / store128 / uint4)
inline bool aligned16(const void* p) { return ((uintptr_t)p % 16) == 0; }
template <typename T>
__device__ __forceinline__ void store128(T* p, const Packed128<T>& x) { *reinterpret_cast<Packed128<T>*>(p) = x; }
typedef Packed128<floatX> x128;

// N fp32 values at p (16-byte aligned, N a multiple of 4) as float4 loads and stores: fp32
// accumulators read and written alongside x128 words of floatX (N = x128::size).
template <int N>
__device__ __forceinline__ void load_float4s(float (&x)[N], const float* p) {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
        float4 f = *reinterpret_cast<const float4*>(p + i);
        x[i] = f.x, x[i + 1] = f.y, x[i + 2] = f.z, x[i + 3] = f.w;
    }
}
template <int N>
__device__ __forceinline__ void store_float4s(float* p, const float (&x)[N]) {
#pragma unroll
    for (int i = 0; i < N; i += 4) *reinterpret_cast<float4*>(p + i) = make_float4(x[i], x[i + 1], x[i + 2], x[i + 3]);
}

// ----------------------------------------------------------------------------
// reductions in a fixed order: every lane ends with the same value, computed by the same tree in
// every run, so results never depend on timing.

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024). Uses 32 words of shared
// memory; every thread returns the total. Two calls in a row need a __syncthreads between them,
// which this function does at its start.
template <typename T>
__device__ T block_sum(T v) {
    __shared__ T partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < nwarps ? partial[lane] : (T)0;
    return warp_sum(v);
}

// Cross-block signalling inside one grid (Depth-Attention's fused forward,
// kernels/depth_attention.cuh). CUDA does not order a grid's blocks, nor promise that a block
// that waits lets another one start, so a block may wait only for blocks that have started:
//   grid_ticket   numbers the launch's blocks in the order they start (an atomicAdd on a counter in
//                 device memory, zero before the launch; the last of the `total` tickets resets it
//                 for the next launch). A block that waits only on smaller tickets waits on blocks
//                 that are resident or done, whatever the hardware's block order.
//   flag_release  one thread, after every thread of the block made its stores, __threadfence()
//                 and __syncthreads(): stores `value` with release semantics at GPU scope.
//   flag_wait_acquire  one thread spins until the flag holds `value` (acquire at GPU scope), then
//                 __syncthreads() before any thread of the block reads what the releaser wrote;
//                 a wait past VP_FLAG_WAIT_TIMEOUT_MS gives up and flags an error word (below).
// The emulator has its own (tests/emu: a wait no earlier block satisfied is a fault there, and the
// race detector orders the releaser's stores before the acquirer's reads).
__device__ __forceinline__ int grid_ticket(int* counter, int total) {
#ifdef VP_CUDA_EMU
    return vp_emu::grid_ticket(counter, total);
#else
    int ticket = atomicAdd(counter, 1);
    if (ticket == total - 1) atomicExch(counter, 0);
    return ticket;
#endif
}
__device__ __forceinline__ void flag_release(int* flag, int value) {
#ifdef VP_CUDA_EMU
    vp_emu::flag_release(flag, value);
#else
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(flag), "r"(value) : "memory");
#endif
}
// No correct launch waits long on a flag (it waits on blocks that have started, and they make
// their part without waiting on anything), so a wait over VP_FLAG_WAIT_TIMEOUT_MS (2 s; 0: no
// limit, for a debugger that stops blocks or compute-sanitizer, which can slow a block past 2 s)
// means the protocol broke. The waiting thread then sets *error and returns false, and so does
// every wait of the launch that sees *error set, so the launch ends (its results garbage) instead
// of hanging; the host reads *error after the launch and stops with a message. Not __trap(): it took the fused forward from 128 registers to 167 at D = 64
// (ptxas), where returning costs none. The clock (%globaltimer, ns) and *error are read once every
// 1024 spins.
#ifndef VP_FLAG_WAIT_TIMEOUT_MS
#define VP_FLAG_WAIT_TIMEOUT_MS 2000
#endif
__device__ __forceinline__ bool flag_wait_acquire(const int* flag, int value, int* error) {
#ifdef VP_CUDA_EMU
    (void)error;
    vp_emu::flag_wait_acquire(flag, value);
    return true;
#else
    unsigned long long start = 0;
    for (unsigned spin = 1;; spin++) {
        int seen;
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(flag) : "memory");
        if (seen == value) return true;
        if (VP_FLAG_WAIT_TIMEOUT_MS > 0 && spin % 1024 == 0) {
            unsigned long long now;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
            if (start == 0) start = now;
            if (*(volatile int*)error || now - start > (unsigned long long)VP_FLAG_WAIT_TIMEOUT_MS * 1000000ull) {
                *(volatile int*)error = 1;
                return false;
            }
        }
    }
#endif
}

// CUDA's limit on gridDim.y (and z): a launch past it fails with "invalid configuration argument",
// which names neither kernel nor shape, so launchers and the trainer's startup check test it first.
constexpr long CUDA_MAX_GRID_Y = 65535;

// One device attribute of the current device, read once per process and cached: the launchers ask
// for it on every call, and cudaDeviceGetAttribute is a driver call. (The trainer uses one device
// per process, so the cache is never stale.)
template <cudaDeviceAttr attribute>
inline int cuda_device_attribute() {
    static int n = 0;
    if (!n) {
        int dev = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&n, attribute, dev));
    }
    return n;
}

// The most shared memory a block may opt in to (cudaFuncAttributeMaxDynamicSharedMemorySize):
// 227 KiB on an H100 or H200, 163 KiB on an A100.
inline int cuda_max_smem_optin() { return cuda_device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(); }

inline int cuda_num_sms() { return cuda_device_attribute<cudaDevAttrMultiProcessorCount>(); }

// A kernel that does nothing: whether the loaded binary holds it for this GPU says whether the
// binary holds code for this GPU at all (check_device_runs_this_build).
static __global__ void device_code_probe_kernel() {}

// The GPU build's first check of its device, before any allocation or launch, so that a mismatch
// is one clear error instead of "no kernel image is available" at some later launch:
//   - compute capability 8.0 or newer: the kernels use bf16 tensor cores (mma.sync m16n8k16 bf16)
//     and cp.async, which older GPUs (V100 7.0, T4 7.5) lack;
//   - this binary has machine code for the GPU: a build for sm_90a (the default where no GPU
//     answers, e.g. a cluster's login node) has none for an A100 (8.0) or a B200 (10.0), and one
//     for sm_80 none for an H100 (machine code runs only within its major version; the builds
//     embed no PTX to compile at load time).
inline void check_device_runs_this_build() {
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    int cc = 10 * prop.major + prop.minor;
    if (cc < 80)
        runtime_error("train on the CPU (make train_cpu: ./train_cpu takes the same flags, data and checkpoints), or on a GPU of compute capability 8.0 "
                      "or newer (A100, A10, L4, L40, RTX 30xx to 50xx, H100, H200, B200)",
                      "the GPU trainer's kernels need compute capability 8.0 or newer (bf16 tensor cores, cp.async); GPU %d, %s, is %d.%d", dev, prop.name,
                      prop.major, prop.minor);
#ifndef VP_CUDA_EMU
    cudaFuncAttributes attributes;
    cudaError_t err = cudaFuncGetAttributes(&attributes, device_code_probe_kernel);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();  // the error is reported here, not left for the next call
        char built[128] = "";
#ifdef __CUDA_ARCH_LIST__
        const int archs[] = {__CUDA_ARCH_LIST__};  // the compute capabilities compiled for, as 800, 900
        for (int arch : archs)
            snprintf(built + strlen(built), sizeof(built) - strlen(built), "%s%d.%d", built[0] ? ", " : "", arch / 100, arch / 10 % 10);
#endif
        char arch[16], hint[256];
        if (cc == 90) snprintf(arch, sizeof(arch), "sm_90a");  // wgmma's attention kernels (gpu.mk's GPU_ARCH)
        else snprintf(arch, sizeof(arch), "sm_%d", cc);
        snprintf(hint, sizeof(hint),
                 "build it for this GPU: make train on a machine with this GPU reads its architecture from nvidia-smi; elsewhere, make train GPU_ARCH=%s",
                 arch);
        runtime_error(hint, "this binary has no code for GPU %d, %s (compute capability %d.%d): it was built for compute capability %s (%s)", dev,
                      prop.name, prop.major, prop.minor, built[0] ? built : "unknown", cudaGetErrorString(err));
    }
#endif
}

}  // namespace gpu
