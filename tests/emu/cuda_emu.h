// tests/emu/cuda_emu.h: a CUDA emulator that runs valuepath's kernels on the CPU.
//
// Why: most sessions that write GPU code have no GPU. The emulator runs the GPU trainer's real
// source -- every kernel in kernels/, the host code of train_gpt.cu, test_gpt.cu -- on the CPU, so
// that indexing, tiling, warp-fragment and value-path routing bugs show up as test failures here
// instead of in a short, scarce GPU session. It does NOT measure speed, and it cannot show bugs that
// only a real GPU has (true concurrency between streams, register spills, the hardware's own
// rounding inside tensor cores). A pass under the emulator is evidence, not a GPU result.
//
// How it runs a kernel: every CUDA thread is a fiber (its own stack, switched by a few lines of
// assembly in cuda_emu.cpp). The blocks of a grid run one after another; inside a block the fibers
// run in turn until each reaches a barrier (__syncthreads) or a warp collective (__shfl_xor_sync,
// __syncwarp, ldmatrix, mma), where the scheduler checks the CUDA rules and releases them:
//   * __syncthreads: every thread of the block must arrive; a thread that returned while others
//     wait is an error (CUDA leaves that undefined);
//   * warp collectives: every lane named in the mask must arrive at the same collective;
//   * a block where nothing can move is a deadlock: the emulator names the threads and stops.
// __shared__ variables become function statics (the blocks of a grid run one at a time, so the
// one copy is the block's shared memory); dynamic shared memory is a fresh buffer per block,
// filled with NaN bytes, as is every cudaMalloc, so reading what no one wrote shows up as NaN.
// VP_EMU_ORDER=reverse runs the threads between barriers in reverse order: a missing
// __syncthreads changes the result under one of the two orders. The _race builds go further: every
// load and store of the kernels is checked against CUDA's ordering rules (blocks only by a flag's
// release and acquire, kernels/common.cuh; threads of a block only by __syncthreads, lanes by
// __syncwarp), which finds races the thread orders hide, those between blocks above all
// (cuda_emu.cpp, "Race detector").
//
// Build: tests/emu/rewrite_cuda.py turns `k<<<grid, block, smem, stream>>>(args)` into a call of
// vp_emu::launch and `extern __shared__ T x[]` into a pointer to the block's buffer; g++ compiles
// the result with tests/emu/include first on the include path, so <cuda_runtime.h>, <cuda_bf16.h>,
// <cublasLt.h> and <cublas_v2.h> resolve to this file. cuBLASLt's matmul is a plain fp32 loop.
// NCCL's collectives run over MPI in the -mpi builds (nccl_emu.h). See docs/gpu.md, "Without a GPU".
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>

#define VP_CUDA_EMU 1

// ----------------------------------------------------------------------------
// qualifiers: host code

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

// ----------------------------------------------------------------------------
// vector types and the thread coordinates

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) int4 {
    int x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

// set by the scheduler each time it switches to a thread (all fibers share one OS thread)
inline uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
constexpr int warpSize = 32;

// ----------------------------------------------------------------------------
// device math that host libm lacks, and CUDA's min/max overloads

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
// IEEE round-to-nearest arithmetic that the compiler never fuses into an FMA with a neighbour, as
// nvcc treats these intrinsics. GCC fuses a * b + c on an FMA-capable host even at -std=c++17
// (its -ffp-contract=fast default), so the rounded result goes through an empty asm that GCC must
// take as it is.
inline float vp_emu_unfused(float r) {
#if defined(__x86_64__)
    asm("" : "+x"(r));
#elif defined(__aarch64__)
    asm("" : "+w"(r));
#else
    volatile float v = r;
    r = v;
#endif
    return r;
}
inline float __fmul_rn(float a, float b) { return vp_emu_unfused(a * b); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
namespace vp_emu {
template <typename To, typename From>
inline To bit_cast(From x) {  // std::bit_cast is C++20
    static_assert(sizeof(To) == sizeof(From), "bit_cast between types of one size");
    To y;
    memcpy(&y, &x, sizeof(To));
    return y;
}
}  // namespace vp_emu
inline float __int_as_float(int i) { return vp_emu::bit_cast<float>(i); }
inline int __float_as_int(float f) { return vp_emu::bit_cast<int>(f); }
inline unsigned __float_as_uint(float f) { return vp_emu::bit_cast<unsigned>(f); }
#define VP_EMU_MINMAX(T)                             \
    inline T min(T a, T b) { return a < b ? a : b; } \
    inline T max(T a, T b) { return a < b ? b : a; }
VP_EMU_MINMAX(int)
VP_EMU_MINMAX(unsigned)
VP_EMU_MINMAX(long)
VP_EMU_MINMAX(unsigned long)
VP_EMU_MINMAX(long long)
VP_EMU_MINMAX(unsigned long long)
VP_EMU_MINMAX(float)
VP_EMU_MINMAX(double)
#undef VP_EMU_MINMAX
// the mixed int/long forms CUDA's headers provide (the wider type wins)
inline long min(int a, long b) { return min((long)a, b); }
inline long min(long a, int b) { return min(a, (long)b); }
inline long max(int a, long b) { return max((long)a, b); }
inline long max(long a, int b) { return max(a, (long)b); }

// ----------------------------------------------------------------------------
// bf16 (cuda_bf16.h): storage, round-to-nearest-even conversion, as the GPU does it

struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f);  // NOLINT: implicit, as in cuda_bf16.h
    operator float() const;  // NOLINT
};
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
inline float __bfloat162float(__nv_bfloat16 h) { return vp_emu::bit_cast<float>((uint32_t)h.__x << 16); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u = vp_emu::bit_cast<uint32_t>(f);
    __nv_bfloat16 h;
    if (std::isnan(f)) {
        h.__x = 0x7fff;  // the canonical NaN the GPU's cvt.rn.bf16.f32 returns
    } else {
        u += 0x7fffu + ((u >> 16) & 1u);  // round half to even (overflow rounds to inf, as on the GPU)
        h.__x = (unsigned short)(u >> 16);
    }
    return h;
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline __nv_bfloat16::__nv_bfloat16(float f) : __x(__float2bfloat16_rn(f).__x) {}
inline __nv_bfloat16::operator float() const { return __bfloat162float(*this); }
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) { return {__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 v) { return {__bfloat162float(v.x), __bfloat162float(v.y)}; }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 lo, __nv_bfloat16 hi) { return {lo, hi}; }

// ----------------------------------------------------------------------------
// the runtime API (cuda_runtime.h): device memory is host memory; every call is synchronous

enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInsufficientDriver = 35,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoDevice = 100,
    cudaErrorNotReady = 600,
    cudaErrorLaunchFailure = 719,
};
typedef cudaError_t cudaError;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};
enum cudaDeviceAttr {
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
struct CUstream_st;
typedef CUstream_st* cudaStream_t;
struct CUevent_st;
typedef CUevent_st* cudaEvent_t;
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    size_t sharedMemPerBlockOptin;
    int multiProcessorCount;
    int major, minor;
    int maxThreadsPerBlock;
    int warpSize;
    int l2CacheSize;
};

const char* cudaGetErrorString(cudaError_t err);
const char* cudaGetErrorName(cudaError_t err);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
cudaError_t cudaMalloc(void** p, size_t bytes);
template <typename T>
inline cudaError_t cudaMalloc(T** p, size_t bytes) {
    return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t bytes);
template <typename T>
inline cudaError_t cudaMallocHost(T** p, size_t bytes) {
    return cudaMallocHost(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height, cudaMemcpyKind kind);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDevice(int* dev);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int dev);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int dev);
cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int dev);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamCreate(cudaStream_t* s);
// priorities are accepted and ignored: the emulator runs one block at a time, so there is no
// block scheduler to order; the range is the one an H100 reports (0 least, -5 greatest)
#define cudaStreamDefault 0x00
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int priority);
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaEventCreate(cudaEvent_t* e);
#define cudaEventDisableTiming 0x02
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);

namespace vp_emu {
// the attribute store behind cudaFuncSetAttribute, keyed by the kernel's address
cudaError_t set_max_dynamic_smem(const void* fn, int bytes);
}  // namespace vp_emu
template <typename F>
inline cudaError_t cudaFuncSetAttribute(F* fn, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
    return vp_emu::set_max_dynamic_smem(reinterpret_cast<const void*>(fn), value);
}

// ----------------------------------------------------------------------------
// kernel launch, barriers and warp collectives

namespace vp_emu {

struct LaunchConfig {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    LaunchConfig(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = nullptr) : grid(g), block(b), smem(s), stream(st) {}
};

template <typename F>
inline const void* fn_id(F* fn) {
    return reinterpret_cast<const void*>(fn);
}

// Queues body() to run once per thread of the grid (each on its own fiber), block after block,
// when cfg.stream gets to it (see "Streams" below). `name` is the launch's source text, for
// messages. Configuration errors set the sticky error that cudaGetLastError returns, as a real
// launch does; a kernel that breaks a CUDA rule stops the program with a message.
void launch_impl(const void* fn, const LaunchConfig& cfg, const char* name, std::function<void()> body);
// kernel<<<cfg>>>(args) as tests/emu/rewrite_cuda.py writes it: the arguments are converted to the
// kernel's parameter types and copied now, at the launch, as CUDA copies them into the launch's
// parameter buffer; every thread then gets its own copy of them (parameters are per thread).
template <typename... P, typename... A>
inline void launch(const void* fn, const LaunchConfig& cfg, const char* name, void (*kernel)(P...), A&&... args) {
    auto bound = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(args)...);
    launch_impl(fn, cfg, name, [kernel, bound]() {
        std::tuple<std::decay_t<P>...> mine = *bound;
        std::apply(kernel, mine);
    });
}

// Streams. By default (VP_EMU_STREAMS=inline) every operation runs the moment it is issued (or, if
// its stream has an operation in flight, the moment that completes), which hides a missing
// dependency between two streams. VP_EMU_STREAMS=hold-first queues the work of the
// oldest stream cudaStreamCreate made (and that is not destroyed yet); hold-others queues the work
// of every other stream. Queued work runs only when the host waits for it (cudaStreamSynchronize,
// cudaStreamQuery, cudaEventSynchronize, cudaDeviceSynchronize, a blocking copy, cudaFree) or when
// another stream's cudaStreamWaitEvent needs it; the streams that are not held run as soon as what
// they wait for is done. Between them, the two settings make each stream in turn the slow one, as a
// real GPU may on any run: work that reads what another stream writes, without an event between
// them, reads stale data, and the tests that compare results fail. The host reads a device-to-host
// cudaMemcpyAsync's destination only after waiting, or it too sees stale data. The legacy default
// stream (0) waits for every stream and every stream for it.
void enqueue(cudaStream_t stream, std::function<void()> work);
// An operation that stays in flight after start() until finished() returns true (the emulated
// NCCL collectives: their peers may not have arrived). Later work on the stream waits for it;
// cudaStreamQuery says cudaErrorNotReady meanwhile, and cudaStreamSynchronize blocks, as on a GPU.
void enqueue_async(cudaStream_t stream, std::function<void()> start, std::function<bool()> finished);
// The same setting from a test ("inline", "hold-first", "hold-others"; false for another name).
// The oldest stream not destroyed counts as the first. Finishes the queued work before it switches.
bool set_stream_policy(const char* name);

void* dynamic_smem();  // the running block's dynamic shared memory
// A static __shared__ array, registered by the line tests/emu/rewrite_cuda.py adds after its
// declaration, so that the race detector (the _race builds) checks it; nothing in other builds.
#ifdef VP_EMU_RACE
void shared_static(const void* p, size_t bytes);
void race_access(const void* p, size_t bytes, bool write, const void* pc);
void race_forget(const void* device_ptr);
#else
inline void shared_static(const void*, size_t) {}
#endif
int lane_id();         // the running thread's lane (linear thread index % 32)

enum CollectiveKind { OP_SYNCWARP = 1, OP_SHFL_XOR, OP_LDMATRIX, OP_LDMATRIX_TRANS, OP_MMA, OP_WGMMA, OP_WGMMA_WAIT };
constexpr int SLOT_BYTES = 64;
// Deposits `bytes` (<= SLOT_BYTES) from src in this lane's slot, waits until every lane in `mask`
// has reached a collective of the same kind, and returns the warp's 32 slots (lane i's at
// i * SLOT_BYTES). The slots stay valid until this lane's next collective.
const unsigned char* warp_collective(unsigned mask, CollectiveKind kind, const void* src, size_t bytes);
void block_barrier();
[[noreturn]] void kernel_fault(const char* fmt, ...);

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lanes 8i..8i+7 give the row addresses of 8x8
// matrix i (8 contiguous b16 each, 16-byte aligned); register i of lane t gets matrix i's elements
// (t/4, 2(t%4)) and (t/4, 2(t%4)+1), low half first -- or, with .trans, (2(t%4), t/4) and
// (2(t%4)+1, t/4). Each lane's 16-byte row is read when the lane arrives.
void ldmatrix_x4(uint32_t (&r)[4], const void* row_addr, bool trans);
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, c += a @ b, per the PTX fragment layout
// (g = lane/4, t = lane%4): a[i] holds A(g + 8(i%2), 2t + 8(i/2) + {0,1}); b[j] holds
// B(2t + 8j + {0,1}, g); c[i] is C(g + 8(i/2), 2t + i%2). Products of bf16 are exact in fp32; the
// sum runs over k in order in fp32.
void mma_m16n8k16_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
// cp.async.cg.shared.global [dst], [src], 16, src_bytes: 16 bytes global -> shared, the bytes past
// src_bytes zero; cp.async.commit_group closes the thread's open copies into a group;
// cp.async.wait_group n waits until at most the n newest groups are pending. The emulator reads
// the source at the issue and writes shared memory at the wait (the latest CUDA allows), and a
// thread that returns with copies it never waited for is a fault. Both addresses 16-byte aligned.
// cp_async is the same for a cp-size of 4, 8 or 16 bytes (cp.async.ca for 4 and 8), aligned to it.
void cp_async16(void* smem_dst, const void* gmem_src, int src_bytes);
void cp_async(void* smem_dst, const void* gmem_src, int cp_size, int src_bytes);
void cp_async_commit();
void cp_async_wait(int pending);

// Hopper's warpgroup MMA (sm_90a), as kernels/wgmma.cuh uses it; cuda_emu.cpp, "wgmma", has the
// rules it checks and what it cannot show.
// shared_window_address: cvta.to.shared of a pointer into the block's dynamic shared memory, whose
// first byte the emulator puts at window address SHARED_WINDOW_DYNAMIC_BASE: 16-byte aligned but
// not 1024-byte aligned, so a kernel that assumes its buffer starts on a swizzle atom fails here.
constexpr uint32_t SHARED_WINDOW_DYNAMIC_BASE = 1040;
uint32_t shared_window_address(const void* p);
// wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16: d (64 x n fp32, this thread's n/2
// accumulators in the PTX D-fragment layout) = (scale_d ? d : 0) + A (64 x 16) B (16 x n), with A
// from registers (a_regs: the m16n8k16 A fragment of the warp's 16 rows, 16w..16w+15 of the
// warpgroup's 64) or, when a_regs is NULL, from shared memory through desc_a (K-major); B through
// desc_b, K-major (tnsp_b = 0) or MN-major (1). Computed at the wgmma.wait_group that retires it.
void wgmma_bf16(float* d, int n, const uint32_t* a_regs, uint64_t desc_a, uint64_t desc_b, int tnsp_b, bool scale_d);
void wgmma_fence();              // wgmma.fence.sync.aligned
void wgmma_commit();             // wgmma.commit_group.sync.aligned
void wgmma_wait(int pending);    // wgmma.wait_group.sync.aligned pending
void fence_proxy_async_shared(); // fence.proxy.async.shared::cta

}  // namespace vp_emu

namespace vp_emu {
// kernels/common.cuh's cross-block signalling (cuda_emu.cpp): a ticket counter and release/acquire
// flags. Blocks run one after another here, so a wait on a flag that is not yet set would never
// end: it is a fault (on a GPU, a block waiting for one that started after it can deadlock).
int grid_ticket(int* counter, int total);
void flag_release(int* flag, int value);
void flag_wait_acquire(const int* flag, int value);
}  // namespace vp_emu
inline void __threadfence() {}  // one block runs at a time: every store is visible to the next
inline void __syncthreads() { vp_emu::block_barrier(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { vp_emu::warp_collective(mask, vp_emu::OP_SYNCWARP, nullptr, 0); }
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    static_assert(sizeof(T) <= vp_emu::SLOT_BYTES && std::is_trivially_copyable<T>::value, "shuffled type");
    const unsigned char* slots = vp_emu::warp_collective(mask, vp_emu::OP_SHFL_XOR, &v, sizeof(T));
    int lane = vp_emu::lane_id(), src = lane ^ lane_mask;
    if (src / width != lane / width) src = lane;  // outside the lane's width segment: its own value
    if (!(mask >> src & 1u)) vp_emu::kernel_fault("__shfl_xor_sync: lane %d reads lane %d, which is not in mask 0x%08x", lane, src, mask);
    T out;
    memcpy(&out, slots + src * vp_emu::SLOT_BYTES, sizeof(T));
    return out;
}
template <typename T>
inline T atomicAdd(T* p, T v) {  // fibers never preempt one another: a plain add is atomic
    T old = *p;
    *p = old + v;
    return old;
}
inline size_t __cvta_generic_to_shared(const void* p) { return (size_t)p; }
