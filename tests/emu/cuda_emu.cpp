// tests/emu/cuda_emu.cpp: the CUDA emulator's runtime (see cuda_emu.h for what it is and is not):
// fibers and the block scheduler, the warp collectives, device memory bookkeeping and the
// cuBLASLt matmul.
#include "cuda_emu.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cublaslt_emu.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define VP_EMU_ASAN 1
#endif

// ----------------------------------------------------------------------------
// fiber switch (x86-64 System V): save the callee-saved registers on the current stack, store the
// stack pointer in *from, load `to`, restore that fiber's registers, return into it.

#if !defined(__x86_64__)
#error "the CUDA emulator's fiber switch is written for x86-64"
#endif
extern "C" void vp_emu_switch(void** from, void* to);
asm(R"(
.text
.globl vp_emu_switch
.type vp_emu_switch,@function
vp_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size vp_emu_switch,.-vp_emu_switch
.section .note.GNU-stack,"",@progbits
.text
)");

// ----------------------------------------------------------------------------
// streams and events (the policy is described at "Streams" in cuda_emu.h)

namespace vp_emu {
struct StreamItem {
    std::function<void()> work;          // empty: a cudaStreamWaitEvent
    uint64_t wait_stream = 0;            // the wait is over once the stream of this id has completed
    uint64_t wait_seq = 0;               // this many of its items (or is destroyed: it finished first)
    std::function<bool()> finished;      // set: work only starts the operation (an emulated NCCL
                                         // collective); it is in flight until this returns true
    bool started = false;
};
enum StreamMode { INLINE, HOLD_FIRST, HOLD_OTHERS };
}  // namespace vp_emu
struct CUstream_st {
    uint64_t id = 0;         // 1, 2, ... in creation order; never reused
    uint64_t issued = 0, done = 0;  // items issued to it, items completed (in order)
    std::deque<vp_emu::StreamItem> queue;
};
struct CUevent_st {
    uint64_t stream = 0;  // the id of the stream it was recorded on (0: nothing to wait for)
    uint64_t seq = 0;     // complete once that stream has done seq items, or is destroyed
    double t = 0;
};

namespace vp_emu {

// ----------------------------------------------------------------------------
// state

enum ThreadState { RUNNABLE, AT_BARRIER, AT_WARP, DONE };
struct AsyncCopy {
    unsigned char* dst;
    int size;                 // cp-size: 4, 8 or 16 bytes
    unsigned char bytes[16];  // the source as read at the issue, zero-filled past src_bytes
    const void* pc;           // the issuing instruction, for the race detector's report
};
struct WgmmaOp {
    float* d;              // the thread's accumulators (n/2 floats), read and written at the wait
    int n;                 // N of m64nNk16
    bool scale_d;
    bool a_in_regs;
    float a_rows[2][16];   // A(row, k) of the thread's rows g and g+8, gathered from the warp at the issue
    const uint32_t* a_regs;
    uint32_t a_issue[4];   // the A registers as issued: they must not change until the wait
    uint64_t desc_a, desc_b;
    int tnsp_b;
    std::vector<float> d_issue;  // the accumulators as issued: the same rule
    bool chained;                // another wgmma on the same accumulators was in flight at the issue
    const void* pc;
};
struct EmuThread {
    void* sp = nullptr;
    ThreadState state = RUNNABLE;
    uint3 idx{};
    unsigned warp_mask = 0;
    CollectiveKind kind = OP_SYNCWARP;
    unsigned ops = 0;  // warp collectives this lane has completed (its slot bank is ops % 2)
    // cp.async copies (see cp_async16): issued but not committed, and the committed groups, oldest
    // first. Their bytes were read at the issue; they land in shared memory only at the wait.
    // (vectors, not a deque: a thread is reset for every block, and an empty vector allocates nothing)
    std::vector<AsyncCopy> cp_open;
    std::vector<std::vector<AsyncCopy>> cp_groups;
    // wgmma (see "wgmma" below): issued but not committed, the committed groups oldest first, and
    // the two fences' state
    std::vector<WgmmaOp> wg_open;
    std::vector<std::vector<WgmmaOp>> wg_groups;
    bool wg_fenced = false;           // a wgmma.fence since this thread's last wgmma.wait_group
    bool cp_landed_unfenced = false;  // cp.async bytes landed since its last fence.proxy.async
};
struct WarpSlots {
    alignas(16) unsigned char bank[2][32][SLOT_BYTES];
};

// per CUDA thread. The kernels keep at most a few KiB of registers-as-locals; the stacks sit in huge
// pages (1024 separate 4 KiB pages would miss the TLB at every switch), so instead of guard pages
// each stack's lowest bytes hold a canary that is checked after every block.
constexpr size_t STACK_BYTES = 64 * 1024;
constexpr uint64_t STACK_CANARY = 0x5a17ca4a2dee7e11ull;
constexpr int CANARY_WORDS = 8;
constexpr int MAX_THREADS = 1024;

struct Emulator {
    // the launch in progress
    const char* name = nullptr;
    const std::function<void()>* body = nullptr;
    dim3 grid, block;
    std::vector<EmuThread> threads;
    std::vector<WarpSlots> warps;
    unsigned char* smem = nullptr;
    size_t smem_bytes = 0;
    int current = -1;
    int cp_unfenced_threads = 0;  // threads of the block with cp.async bytes landed and no fence.proxy.async since
    void* sched_sp = nullptr;
    bool reverse_order = false;
    unsigned char* stacks = nullptr;
#ifdef VP_EMU_ASAN
    const void* sched_stack_bottom = nullptr;
    size_t sched_stack_size = 0;
#endif
    // runtime
    cudaError_t last_error = cudaSuccess;
    std::map<uintptr_t, size_t> device_allocs;  // base -> bytes
    std::map<uintptr_t, size_t> host_allocs;    // cudaMallocHost
    size_t device_bytes = 0, device_limit = 0;
    std::map<const void*, int> max_dynamic_smem;
    StreamMode stream_mode = INLINE;
    std::map<uint64_t, CUstream_st*> streams;  // the live ones by id: in creation order
    uint64_t last_stream_id = 0;
    // VP_EMU_DRY_RUN=1: launches and matmuls are checked (configuration, shared memory, shapes,
    // alignment, operands inside device memory) but not computed, and allocations are not filled:
    // full-size shapes (GPT-2 124M at B=64, T=1024) go through every launcher in seconds, and the
    // allocation total is the model's device memory. Every number computed is garbage.
    bool dry_run = false;
#ifdef VP_EMU_RACE
    // the race detector's view of the block in progress (see "Race detector" below)
    uint32_t launch_epoch = 0;                 // one per grid: global-memory records older than it are void
    uint32_t block_epoch = 0;                  // one per block: shared-memory records older than it are void
    uint32_t barriers = 0;                     // __syncthreads the running block has passed
    std::vector<std::vector<unsigned>> syncwarps;  // per warp: the mask of each __syncwarp it has passed
    uint32_t block_linear = 0;                 // the running block's index in the grid
#endif
    Emulator() {
        const char* order = getenv("VP_EMU_ORDER");
#ifdef VP_EMU_REVERSE_DEFAULT  // the sanitizer build of emu.mk: the other order than the plain builds
        reverse_order = !order || strcmp(order, "reverse") == 0;
#else
        reverse_order = order && strcmp(order, "reverse") == 0;
#endif
        const char* dry = getenv("VP_EMU_DRY_RUN");
        dry_run = dry && strcmp(dry, "1") == 0;
        const char* mem = getenv("VP_EMU_MEM_BYTES");
        device_limit = mem ? (size_t)strtoull(mem, nullptr, 10) : (size_t)80 << 30;  // an H100's 80 GB
        const char* cc = getenv("VP_EMU_CC");
        if (cc && *cc) gpu = emulated_gpu(cc);
    }
    // VP_EMU_CC=8.9 (nvidia-smi's compute_cap): the emulator reports that GPU's compute capability,
    // SM count and the most shared memory a block may opt in to, and refuses a launch over it, as
    // such a GPU does. It still executes every instruction at any of them (wgmma too: the trainer
    // uses it only where attention_wgmma_available finds 9.0). For the launchers' choices on GPUs
    // other than an H100: the 99 KiB of compute capability 8.6, 8.9 and 12.0 (RTX 30xx, 40xx,
    // 50xx), an A100's 163 KiB, and the refusal of GPUs older than 8.0.
    struct Gpu {
        const char* cc;
        int major, minor, sms, smem_optin;
        const char* example;
    };
    Gpu gpu = {"9.0", 9, 0, 132, 232448, "an H100"};
    static Gpu emulated_gpu(const char* cc) {
        static const Gpu known[] = {{"7.0", 7, 0, 80, 98304, "a V100"},       {"7.5", 7, 5, 40, 65536, "a T4"},
                                    {"8.0", 8, 0, 108, 166912, "an A100"},    {"8.6", 8, 6, 82, 101376, "an RTX 3090"},
                                    {"8.9", 8, 9, 128, 101376, "an RTX 4090"}, {"9.0", 9, 0, 132, 232448, "an H100"},
                                    {"10.0", 10, 0, 148, 232448, "a B200"},   {"12.0", 12, 0, 170, 101376, "an RTX 5090"}};
        for (const Gpu& g : known)
            if (!strcmp(cc, g.cc)) return g;
        fprintf(stderr, "CUDA emulator: VP_EMU_CC=%s: use one of", cc);
        for (const Gpu& g : known) fprintf(stderr, " %s (%s)", g.cc, g.example);
        fprintf(stderr, "\n");
        exit(2);
    }
};
bool set_stream_policy(const char* name);
static Emulator& emu() {
    static Emulator e;
    static bool streams_set = false;
    if (!streams_set) {
        streams_set = true;
        const char* sm = getenv("VP_EMU_STREAMS");
        if (sm && !set_stream_policy(sm)) {
            fprintf(stderr, "CUDA emulator: VP_EMU_STREAMS=%s: use inline, hold-first or hold-others\n", sm);
            exit(2);
        }
    }
    return e;
}

// the allocation that holds [p, p + bytes), or nullptr
static const std::pair<const uintptr_t, size_t>* find_alloc(const std::map<uintptr_t, size_t>& m, const void* p, size_t bytes) {
    uintptr_t a = (uintptr_t)p;
    auto it = m.upper_bound(a);
    if (it == m.begin()) return nullptr;
    --it;
    if (a + bytes > it->first + it->second) return nullptr;
    return &*it;
}

static std::string launch_where() {
    Emulator& e = emu();
    char buf[256];
    if (e.current >= 0) {
        const EmuThread& t = e.threads[e.current];
        snprintf(buf, sizeof(buf), "%s, block (%u,%u,%u), thread (%u,%u,%u)", e.name, blockIdx.x, blockIdx.y, blockIdx.z, t.idx.x, t.idx.y, t.idx.z);
    } else {
        snprintf(buf, sizeof(buf), "%s, block (%u,%u,%u)", e.name ? e.name : "?", blockIdx.x, blockIdx.y, blockIdx.z);
    }
    return buf;
}

#ifdef VP_EMU_RACE
static bool race_in_fiber = false;  // the hooks below look only at what a CUDA thread does
#endif

void kernel_fault(const char* fmt, ...) {
#ifdef VP_EMU_RACE
    // The report itself runs on the faulting fiber, and the library code it calls (std::string's
    // constructor, say) may be the copy the linker took from an instrumented translation unit:
    // its writes to the heap would be reported as a kernel writing to a host pointer, fault after
    // fault, until the fiber's stack overflows. The checks end here.
    race_in_fiber = false;
#endif
    fflush(stdout);
    fprintf(stderr, "\nCUDA emulator: kernel fault in %s:\n  ", launch_where().c_str());
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    abort();
}

// ----------------------------------------------------------------------------
// fibers

static unsigned char* stack_of(int i) { return emu().stacks + (size_t)i * STACK_BYTES; }

// fiber -> scheduler
static void yield_to_scheduler(bool dying) {
    Emulator& e = emu();
    EmuThread& t = e.threads[e.current];
#ifdef VP_EMU_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(dying ? nullptr : &fake, e.sched_stack_bottom, e.sched_stack_size);
    vp_emu_switch(&t.sp, e.sched_sp);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
    (void)dying;
    vp_emu_switch(&t.sp, e.sched_sp);
#endif
}

static void fiber_main() {
    Emulator& e = emu();
#ifdef VP_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &e.sched_stack_bottom, &e.sched_stack_size);
#endif
    (*e.body)();
    const EmuThread& t = e.threads[e.current];
    size_t in_flight = t.cp_open.size();
    for (const std::vector<AsyncCopy>& g : t.cp_groups) in_flight += g.size();
    if (in_flight)  // the block's shared memory goes away with it: such a copy was never used
        kernel_fault("the thread returned with %zu cp.async copies it never waited for (cp.async.wait_group 0 before returning)", in_flight);
    if (!t.wg_open.empty() || !t.wg_groups.empty())
        kernel_fault("the thread returned with wgmma.mma_async operations it never waited for (wgmma.wait_group 0 before returning)");
    e.threads[e.current].state = DONE;
    yield_to_scheduler(true);
    abort();  // a finished fiber is never resumed
}

// a fresh fiber for thread i: its first switch "returns" into fiber_main with an ABI-aligned stack
static void fiber_init(int i) {
    // stack colouring: stacks are STACK_BYTES apart, so their tops would all fall in the same cache
    // sets; a per-thread offset of whole cache lines spreads them out (switching is ~3x cheaper)
    unsigned char* top = stack_of(i) + STACK_BYTES - (size_t)(i % 61) * 64;
#ifdef VP_EMU_ASAN
    __asan_unpoison_memory_region(stack_of(i), STACK_BYTES);  // frames of an earlier fiber
#endif
    uint64_t* canary = reinterpret_cast<uint64_t*>(stack_of(i));
    for (int w = 0; w < CANARY_WORDS; w++) canary[w] = STACK_CANARY;
    void** sp = reinterpret_cast<void**>(top - 16);
    sp[0] = reinterpret_cast<void*>(&fiber_main);  // where vp_emu_switch's ret lands (rsp % 16 == 8 after)
    sp[1] = nullptr;
    sp -= 6;  // rbp rbx r12 r13 r14 r15
    for (int r = 0; r < 6; r++) sp[r] = nullptr;
    emu().threads[i].sp = sp;
}

// scheduler -> fiber i, until it blocks or finishes
static void run_fiber(int i) {
    Emulator& e = emu();
    e.current = i;
    threadIdx = e.threads[i].idx;
#ifdef VP_EMU_RACE
    race_in_fiber = true;
#endif
#ifdef VP_EMU_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, stack_of(i), STACK_BYTES);
    vp_emu_switch(&e.sched_sp, e.threads[i].sp);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
    vp_emu_switch(&e.sched_sp, e.threads[i].sp);
#endif
#ifdef VP_EMU_RACE
    race_in_fiber = false;
#endif
    e.current = -1;
}

int lane_id() {
    Emulator& e = emu();
    if (e.current < 0) kernel_fault("a device function was called from host code");
    return e.current % 32;
}

void* dynamic_smem() {
    Emulator& e = emu();
    if (e.current < 0) kernel_fault("dynamic shared memory used outside a kernel");
    return e.smem;
}

void block_barrier() {
    Emulator& e = emu();
    if (e.current < 0) kernel_fault("__syncthreads outside a kernel");
    e.threads[e.current].state = AT_BARRIER;
    yield_to_scheduler(false);
}

const unsigned char* warp_collective(unsigned mask, CollectiveKind kind, const void* src, size_t bytes) {
    Emulator& e = emu();
    if (e.current < 0) kernel_fault("a warp collective outside a kernel");
    int lane = e.current % 32;
    if (!(mask >> lane & 1u)) kernel_fault("lane %d runs a warp collective whose mask 0x%08x does not name it", lane, mask);
    EmuThread& t = e.threads[e.current];
    WarpSlots& w = e.warps[e.current / 32];
    if (bytes) memcpy(w.bank[t.ops % 2][lane], src, bytes);
    t.warp_mask = mask;
    t.kind = kind;
    t.state = AT_WARP;
    yield_to_scheduler(false);
    return &w.bank[t.ops++ % 2][0][0];
}

#ifdef VP_EMU_RACE
}  // namespace vp_emu
// ----------------------------------------------------------------------------
// Race detector: the _race builds of emu.mk (-DVP_EMU_RACE here; the kernels' translation unit is
// compiled with -fsanitize=thread, and the hooks it calls for every load and store, __tsan_read4
// and the rest, are defined at the end of this file instead of by libtsan).
//
// The two thread orders find a missing __syncthreads when it changes a result; this finds every
// pair of accesses to one address, at least one of them a write, that CUDA leaves unordered:
//   * made by two blocks of one grid: nothing orders blocks (but a flag one releases and the other
//     acquires, kernels/common.cuh: race_released_to), yet the emulator runs them one after
//     another, so a race between blocks (two blocks adding into one gradient without atomics) gives
//     the right answer here and a wrong one, sometimes, on a GPU;
//   * made by two threads of one block with no __syncthreads between them (and, within a warp, no
//     __syncwarp whose mask names both). Shuffles, ldmatrix and mma exchange registers and order no
//     memory, as in the CUDA memory model.
// Checked: device memory (cudaMalloc, cudaMallocHost), dynamic shared memory and the static
// __shared__ arrays (tests/emu/rewrite_cuda.py registers each through shared_static), at 2-byte
// granularity (neighbouring bf16 written by neighbouring threads is no race). A kernel write
// anywhere else (not its own stack) is a fault: a host pointer reached the kernel. Global-memory
// records last one grid (launches on one stream are ordered; across streams, see the stream
// policies), shared-memory records one block. Each record keeps the last write and two reads
// that are not ordered before one another, so a write racing only with a third, older reader of
// one address can be missed (FastTrack keeps the full read set there; that costs a set per address).

extern "C" char __executable_start;  // GNU ld: where the executable is loaded (PIE), for addr2line

namespace vp_emu {

struct RaceAccess {
    uint32_t thread = 0;     // 1 + the thread's linear index in the grid; 0: no access
    uint16_t barriers = 0;   // __syncthreads its block had passed
    uint16_t syncwarps = 0;  // __syncwarp its warp had passed
    uint32_t pc = 0;         // the access's code address, from __executable_start
};
struct RaceRecord {  // one per 2 bytes of checked memory
    uint32_t epoch = 0;  // the grid's (global memory) or block's (shared) epoch; older: void
    RaceAccess write, read[2];
};
struct RaceRegion {
    uintptr_t base = 0;
    size_t bytes = 0;
    RaceRecord* rec = nullptr;  // (bytes + 1) / 2 records, zero pages until touched
    const char* what = "";
};

static std::map<uintptr_t, RaceRegion> race_device;  // by base: device allocations touched by a kernel
static std::vector<RaceRegion> race_static_shared;
static RaceRegion race_dynamic_shared;
static RaceRegion race_last;  // the last device region hit (kernels stream through a few buffers)
static uintptr_t race_stacks = 0;
static uint64_t race_checked = 0, race_grids = 0;  // for the summary at exit: evidence that it ran

static std::map<std::string, uint64_t> race_kernels;  // launch text -> grids checked

// one line at exit, so a log shows the detector looked (a clean run prints no race, and no race
// would also be what a detector that saw nothing prints); VP_EMU_RACE_KERNELS=1 lists the kernels
static void race_summary() {
    fprintf(stderr, "CUDA emulator race detector: %llu device and shared-memory accesses checked in %llu grids of %zu kernels, no race found\n",
            (unsigned long long)race_checked, (unsigned long long)race_grids, race_kernels.size());
    const char* list = getenv("VP_EMU_RACE_KERNELS");
    if (list && !strcmp(list, "1"))
        for (const auto& k : race_kernels) fprintf(stderr, "  %8llu grids  %s\n", (unsigned long long)k.second, k.first.c_str());
}

static RaceRecord* race_map(size_t bytes) {
    size_t len = ((bytes + 1) / 2) * sizeof(RaceRecord);
    void* m = mmap(nullptr, len ? len : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "CUDA emulator: the race detector cannot map %zu MiB of records\n", len >> 20);
        abort();
    }
    return static_cast<RaceRecord*>(m);
}
static void race_unmap(RaceRegion& r) {
    if (r.rec) munmap(r.rec, ((r.bytes + 1) / 2) * sizeof(RaceRecord));
    r = RaceRegion();
}

void shared_static(const void* p, size_t bytes) {
    for (const RaceRegion& r : race_static_shared)
        if (r.base == (uintptr_t)p) return;
    RaceRegion r;
    r.base = (uintptr_t)p;
    r.bytes = bytes;
    r.rec = race_map(bytes);
    r.what = "a static __shared__ array";
    race_static_shared.push_back(r);
}

void race_forget(const void* p) {
    auto it = race_device.find((uintptr_t)p);
    if (it == race_device.end()) return;
    if (race_last.base == it->first) race_last = RaceRegion();
    race_unmap(it->second);
    race_device.erase(it);
}

// Cross-block release/acquire (flag_release, flag_wait_acquire): block `to` acquired a flag that
// block `from` released after passing from_barriers __syncthreads, and itself had passed
// to_barriers when it acquired (race_released_to).
struct RaceEdge {
    uint32_t from, from_barriers, to_barriers;
};
static std::map<uintptr_t, std::pair<uint32_t, uint32_t>> race_releases;  // flag -> (block, its barriers), this grid
static std::map<uint32_t, std::vector<RaceEdge>> race_acquired;          // block -> what it acquired, this grid

static void race_grid_start() {
    Emulator& e = emu();
    if (race_grids++ == 0) atexit(race_summary);
    race_kernels[e.name]++;
    e.launch_epoch++;
    race_stacks = (uintptr_t)e.stacks;
    if ((uint64_t)e.grid.x * e.grid.y * e.grid.z * e.threads.size() >= 0xffffffffull)
        kernel_fault("the race detector numbers threads in 32 bits: this grid has too many");
    if (e.smem_bytes) {
        race_dynamic_shared.base = (uintptr_t)e.smem;
        race_dynamic_shared.bytes = e.smem_bytes;
        race_dynamic_shared.rec = race_map(e.smem_bytes);
        race_dynamic_shared.what = "dynamic shared memory";
    }
}
static void race_grid_end() {
    race_unmap(race_dynamic_shared);
    race_releases.clear();
    race_acquired.clear();
}

// the region holding address a, or nullptr; *shared says whether it is shared memory
static RaceRegion* race_region(uintptr_t a, bool* shared) {
    *shared = true;
    if (a - race_dynamic_shared.base < race_dynamic_shared.bytes) return &race_dynamic_shared;
    for (RaceRegion& r : race_static_shared)
        if (a - r.base < r.bytes) return &r;
    *shared = false;
    if (a - race_last.base < race_last.bytes) return &race_last;
    Emulator& e = emu();
    for (const std::map<uintptr_t, size_t>* allocs : {&e.device_allocs, &e.host_allocs}) {
        const std::pair<const uintptr_t, size_t>* hit = find_alloc(*allocs, (const void*)a, 1);
        if (!hit) continue;
        RaceRegion& r = race_device[hit->first];
        if (!r.rec) {
            r.base = hit->first;
            r.bytes = hit->second;
            r.rec = race_map(hit->second);
            r.what = allocs == &e.device_allocs ? "device memory (cudaMalloc)" : "pinned host memory (cudaMallocHost)";
        }
        race_last = r;
        return &race_last;
    }
    return nullptr;
}

// An access of block a before the barrier that preceded a release happens before every access of
// block b after the barrier that followed its acquire of that flag (the protocol of
// kernels/common.cuh: every thread stores, __syncthreads, one thread releases; one thread
// acquires, __syncthreads, then all read).
static bool race_released_to(uint32_t block_a, uint32_t barriers_a, uint32_t block_b, uint32_t barriers_b) {
    auto it = race_acquired.find(block_b);
    if (it == race_acquired.end()) return false;
    for (const RaceEdge& edge : it->second)
        if (edge.from == block_a && barriers_a < edge.from_barriers && barriers_b > edge.to_barriers) return true;
    return false;
}

// whether `a`, which the emulator ran before `b`, happens before it in CUDA's memory model
static bool race_ordered(const RaceAccess& a, const RaceAccess& b) {
    if (a.thread == b.thread) return true;  // program order
    Emulator& e = emu();
    uint32_t n = (uint32_t)e.threads.size(), ta = a.thread - 1, tb = b.thread - 1;
    if (ta / n != tb / n) return race_released_to(ta / n, a.barriers, tb / n, b.barriers);  // two blocks: only a release/acquire orders them
    if (a.barriers != b.barriers) return true;  // a __syncthreads between them
    if (ta % n / 32 != tb % n / 32) return false;
    unsigned both = (1u << (ta % n % 32)) | (1u << (tb % n % 32));
    const std::vector<unsigned>& passed = e.syncwarps[ta % n / 32];
    for (size_t k = a.syncwarps; k < b.syncwarps && k < passed.size(); k++)
        if ((passed[k] & both) == both) return true;  // a __syncwarp naming both lanes
    return false;
}

// the code address of an access, as addr2line takes it (an offset into the executable)
static uint32_t race_pc(const void* pc) { return (uint32_t)((uintptr_t)pc - (uintptr_t)&__executable_start); }

// race_who and race_where build a fault's message: the checks end first (see kernel_fault)
static std::string race_who(uint32_t thread) {
    race_in_fiber = false;
    Emulator& e = emu();
    uint32_t n = (uint32_t)e.threads.size(), blk = (thread - 1) / n, t = (thread - 1) % n;
    char buf[128];
    snprintf(buf, sizeof(buf), "thread (%u,%u,%u) of block (%u,%u,%u)", t % e.block.x, t / e.block.x % e.block.y, t / (e.block.x * e.block.y),
             blk % e.grid.x, blk / e.grid.x % e.grid.y, blk / (e.grid.x * e.grid.y));
    return buf;
}
static std::string race_where(uint32_t pc) {
    race_in_fiber = false;
    char cmd[160], line[512];
    snprintf(cmd, sizeof(cmd), "addr2line -C -f -e /proc/%d/exe 0x%x 2>/dev/null", (int)getpid(), pc);
    std::string out;
    if (FILE* f = popen(cmd, "r")) {
        while (fgets(line, sizeof(line), f)) {
            line[strcspn(line, "\n")] = 0;
            out += out.empty() ? std::string(line) : " at " + std::string(line);
        }
        pclose(f);
    }
    char buf[32];
    snprintf(buf, sizeof(buf), "pc +0x%x", pc);
    return out.empty() ? std::string(buf) : out + " (" + buf + ")";
}

[[noreturn]] static void race_report(const RaceRegion& r, uintptr_t a, const RaceAccess& before, bool before_write, const RaceAccess& now,
                                     bool now_write) {
    Emulator& e = emu();
    uint32_t n = (uint32_t)e.threads.size();
    bool blocks = (before.thread - 1) / n != (now.thread - 1) / n;
    kernel_fault("data race on %s (%zu bytes at %p), byte offset %zu:\n    %s by %s\n      in %s\n    and an earlier %s by %s\n      in %s\n  %s",
                 r.what, r.bytes, (void*)r.base, (size_t)(a - r.base), now_write ? "a write" : "a read", race_who(now.thread).c_str(),
                 race_where(now.pc).c_str(), before_write ? "write" : "read", race_who(before.thread).c_str(), race_where(before.pc).c_str(),
                 blocks ? "Two blocks of one grid: nothing orders them on a GPU (the emulator ran them one after another)."
                        : "No __syncthreads (or, in one warp, __syncwarp naming both lanes) between them.");
}

void race_access(const void* p, size_t bytes, bool write, const void* pc) {
    if (!race_in_fiber || bytes == 0) return;
    uintptr_t a = (uintptr_t)p;
    if (a - race_stacks < STACK_BYTES * MAX_THREADS) return;  // the threads' own locals
    bool shared;
    RaceRegion* r = race_region(a, &shared);
    if (!r) {
        if (write)
            kernel_fault("a %zu-byte write to %p, which is neither device memory (cudaMalloc, cudaMallocHost), shared memory nor the "
                         "thread's own stack: a host pointer reached the kernel (%s)",
                         bytes, p, race_where(race_pc(pc)).c_str());
        return;  // reads of host data: the kernel's parameters, the emulator's own state
    }
    if (a + bytes > r->base + r->bytes) kernel_fault("a %zu-byte access at %p runs past the end of %s (%zu bytes at %p)", bytes, p, r->what, r->bytes, (void*)r->base);
    Emulator& e = emu();
    RaceAccess now;
    now.thread = 1 + e.block_linear * (uint32_t)e.threads.size() + (uint32_t)e.current;
    now.barriers = (uint16_t)e.barriers;
    now.syncwarps = (uint16_t)e.syncwarps[e.current / 32].size();
    now.pc = race_pc(pc);
    uint32_t epoch = shared ? e.block_epoch : e.launch_epoch;
    race_checked++;
    for (size_t g = (a - r->base) / 2; g <= (a + bytes - 1 - r->base) / 2; g++) {
        RaceRecord& rec = r->rec[g];
        if (rec.epoch != epoch) {
            rec = RaceRecord();
            rec.epoch = epoch;
        }
        if (rec.write.thread && !race_ordered(rec.write, now)) race_report(*r, r->base + 2 * g, rec.write, true, now, write);
        if (write) {
            for (const RaceAccess& rd : rec.read)
                if (rd.thread && !race_ordered(rd, now)) race_report(*r, r->base + 2 * g, rd, false, now, true);
            rec.write = now;
            rec.read[0] = rec.read[1] = RaceAccess();
        } else if (!rec.read[0].thread || race_ordered(rec.read[0], now)) {
            rec.read[0] = now;  // a later write ordered after this read is ordered after that one too
        } else {
            rec.read[1] = now;
        }
    }
}

}  // namespace vp_emu
namespace vp_emu {
#endif

// ----------------------------------------------------------------------------
// cross-block signalling (kernels/common.cuh): in this translation unit, which the race detector
// does not instrument, so the counter and the flags are synchronisation, not data

int grid_ticket(int* counter, int total) {
    if (emu().current < 0) kernel_fault("grid_ticket outside a kernel");
    int ticket = (*counter)++;
    if (ticket == total - 1) *counter = 0;  // the launch's last ticket: ready for the next launch
    if (ticket < 0 || ticket >= total) kernel_fault("grid_ticket: ticket %d of a launch of %d blocks (was the counter zeroed?)", ticket, total);
    return ticket;
}

void flag_release(int* flag, int value) {
    Emulator& e = emu();
    if (e.current < 0) kernel_fault("flag_release outside a kernel");
#ifdef VP_EMU_RACE
    race_releases[(uintptr_t)flag] = {e.block_linear, (uint32_t)e.barriers};
#endif
    *flag = value;
}

void flag_wait_acquire(const int* flag, int value) {
    Emulator& e = emu();
    if (e.current < 0) kernel_fault("flag_wait_acquire outside a kernel");
    if (*flag != value)
        kernel_fault("flag_wait_acquire: the flag at %p holds %d, not %d, and the blocks that ran before this one did not set it: it would "
                     "wait forever here, and on a GPU it waits for a block that may not start until this one ends (a deadlock)",
                     (const void*)flag, *flag, value);
#ifdef VP_EMU_RACE
    auto it = race_releases.find((uintptr_t)flag);
    if (it != race_releases.end()) race_acquired[e.block_linear].push_back({it->second.first, it->second.second, (uint32_t)e.barriers});
#endif
}

// ----------------------------------------------------------------------------
// the block scheduler

static const char* state_name(ThreadState s) {
    switch (s) {
        case RUNNABLE: return "runnable";
        case AT_BARRIER: return "at __syncthreads";
        case AT_WARP: return "at a warp collective";
        default: return "returned";
    }
}

// every lane named by the collective's mask has arrived at it: release them (true), or not yet
static bool release_warp(int w, int nthreads) {
    Emulator& e = emu();
    int first = -1;
    for (int l = 0; l < 32 && w * 32 + l < nthreads; l++)
        if (e.threads[w * 32 + l].state == AT_WARP) {
            first = w * 32 + l;
            break;
        }
    if (first < 0) return false;
    const EmuThread& f = e.threads[first];
    for (int l = 0; l < 32; l++) {
        if (!(f.warp_mask >> l & 1u)) continue;
        int i = w * 32 + l;
        if (i >= nthreads) {
            e.current = first;
            kernel_fault("warp collective mask 0x%08x names lane %d, which this block (%d threads) does not have", f.warp_mask, l, nthreads);
        }
        const EmuThread& t = e.threads[i];
        if (t.state == DONE) {
            e.current = first;
            kernel_fault("warp collective with mask 0x%08x, but lane %d has already returned", f.warp_mask, l);
        }
        if (t.state != AT_WARP) return false;
        if (t.warp_mask != f.warp_mask || t.kind != f.kind || t.ops % 2 != f.ops % 2) {
            e.current = first;
            kernel_fault("lanes %d and %d of warp %d are at different warp collectives (kinds %d/%d, masks 0x%08x/0x%08x)", first % 32, l, w, f.kind,
                         t.kind, f.warp_mask, t.warp_mask);
        }
    }
    unsigned mask = f.warp_mask;
    for (int l = 0; l < 32; l++)
        if (mask >> l & 1u) e.threads[w * 32 + l].state = RUNNABLE;
#ifdef VP_EMU_RACE
    if (f.kind == OP_SYNCWARP) e.syncwarps[w].push_back(mask);  // orders memory between its lanes
#endif
    return true;
}

static void run_block(int nthreads) {
    Emulator& e = emu();
    for (int i = 0; i < nthreads; i++) {
        EmuThread& t = e.threads[i];
        t = EmuThread();
        t.idx = {i % e.block.x, (i / e.block.x) % e.block.y, i / (e.block.x * e.block.y)};
        fiber_init(i);
    }
    if (e.smem_bytes) memset(e.smem, 0xff, e.smem_bytes);  // NaN: what no thread wrote reads as NaN
    e.cp_unfenced_threads = 0;
#ifdef VP_EMU_RACE
    e.block_epoch++;
    e.barriers = 0;
    e.syncwarps.assign((nthreads + 31) / 32, std::vector<unsigned>());
    e.block_linear = (blockIdx.z * e.grid.y + blockIdx.y) * e.grid.x + blockIdx.x;
#endif
    for (;;) {
        for (int k = 0; k < nthreads; k++) {
            int i = e.reverse_order ? nthreads - 1 - k : k;
            if (e.threads[i].state == RUNNABLE) run_fiber(i);
        }
        int done = 0, at_barrier = 0;
        for (int i = 0; i < nthreads; i++) {
            done += e.threads[i].state == DONE;
            at_barrier += e.threads[i].state == AT_BARRIER;
        }
        if (done == nthreads) {
            for (int i = 0; i < nthreads; i++) {
                const uint64_t* canary = reinterpret_cast<const uint64_t*>(stack_of(i));
                for (int w = 0; w < CANARY_WORDS; w++)
                    if (canary[w] != STACK_CANARY) {
                        e.current = i;
                        kernel_fault("the thread overflowed its %zu KiB emulator stack (raise STACK_BYTES in tests/emu/cuda_emu.cpp)", STACK_BYTES >> 10);
                    }
            }
            return;
        }
        bool released = false;
        for (int w = 0; w * 32 < nthreads; w++) released |= release_warp(w, nthreads);
        if (released) continue;
        if (at_barrier + done == nthreads) {
            if (done > 0) {
                for (int i = 0; i < nthreads; i++)
                    if (e.threads[i].state == AT_BARRIER) e.current = i;
                kernel_fault("__syncthreads reached by %d threads while %d threads of the block had returned (undefined in CUDA)", at_barrier, done);
            }
            for (int i = 0; i < nthreads; i++) e.threads[i].state = RUNNABLE;
#ifdef VP_EMU_RACE
            e.barriers++;  // orders every access before it, global and shared, before every access after
#endif
            continue;
        }
        // nothing can move: name the first thread in each state
        std::string msg = "deadlock:";
        for (int s = RUNNABLE; s <= DONE; s++) {
            int count = 0, example = -1;
            for (int i = 0; i < nthreads; i++)
                if (e.threads[i].state == s) {
                    count++;
                    if (example < 0) example = i;
                }
            if (count) msg += " " + std::to_string(count) + " " + state_name((ThreadState)s) + " (e.g. thread " + std::to_string(example) + ");";
        }
        kernel_fault("%s", msg.c_str());
    }
}

cudaError_t set_max_dynamic_smem(const void* fn, int bytes) {
    if (bytes < 0 || bytes > emu().gpu.smem_optin) return cudaErrorInvalidValue;  // 227 KiB on an H100 (VP_EMU_CC)
    emu().max_dynamic_smem[fn] = bytes;
    return cudaSuccess;
}

// VP_EMU_PROFILE=1: at exit, each kernel's launch text with its grids, blocks, threads and the
// seconds the emulator spent running them, most first, on stderr. For choosing what to make
// cheaper when an emulated test is slow: the emulator's cost is per thread and per switch between
// fibers, not per flop, so a tiny model's step can be dominated by a kernel that launches a large
// fixed grid.
struct KernelProfile {
    uint64_t grids = 0, blocks = 0, threads = 0;
    double seconds = 0;
};
static std::map<std::string, KernelProfile> kernel_profile;
static void print_kernel_profile() {
    std::vector<std::pair<std::string, KernelProfile>> rows(kernel_profile.begin(), kernel_profile.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    double total = 0;
    for (const auto& r : rows) total += r.second.seconds;
    fprintf(stderr, "CUDA emulator profile: %.2f s in %zu kernels\n  seconds     grids      blocks       threads  kernel\n", total, rows.size());
    for (const auto& r : rows)
        fprintf(stderr, "  %7.2f %9llu %11llu %13llu  %s\n", r.second.seconds, (unsigned long long)r.second.grids, (unsigned long long)r.second.blocks,
                (unsigned long long)r.second.threads, r.first.c_str());
}
static bool profiling() {
    static const bool on = [] {
        const char* p = getenv("VP_EMU_PROFILE");
        bool yes = p && strcmp(p, "1") == 0;
        if (yes) atexit(print_kernel_profile);
        return yes;
    }();
    return on;
}

// Runs a grid now (the stream machinery below decides when).
static void run_grid(const char* name, dim3 g, dim3 b, size_t smem, const std::function<void()>& body) {
    Emulator& e = emu();
    const bool profile = profiling();
    const auto started = profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    size_t nthreads = (size_t)b.x * b.y * b.z;
    if (!e.stacks) {
        e.stacks = static_cast<unsigned char*>(
            mmap(nullptr, STACK_BYTES * MAX_THREADS, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
        if (e.stacks == MAP_FAILED) {
            fprintf(stderr, "CUDA emulator: cannot map %zu MiB of fiber stacks\n", STACK_BYTES * MAX_THREADS >> 20);
            abort();
        }
        madvise(e.stacks, STACK_BYTES * MAX_THREADS, MADV_HUGEPAGE);
    }
    e.name = name;
    e.body = &body;
    e.grid = g;
    e.block = b;
    e.threads.assign(nthreads, EmuThread());
    e.warps.assign((nthreads + 31) / 32, WarpSlots());
    e.smem_bytes = smem;
    e.smem = nullptr;
    if (smem && posix_memalign(reinterpret_cast<void**>(&e.smem), 128, smem) != 0) abort();
#ifdef VP_EMU_RACE
    race_grid_start();
#endif
    gridDim = g;
    blockDim = b;
    for (unsigned z = 0; z < g.z; z++)
        for (unsigned y = 0; y < g.y; y++)
            for (unsigned x = 0; x < g.x; x++) {
                blockIdx = {x, y, z};
                run_block((int)nthreads);
            }
#ifdef VP_EMU_RACE
    race_grid_end();
#endif
    free(e.smem);
    e.smem = nullptr;
    e.name = nullptr;
    e.body = nullptr;
    if (profile) {
        KernelProfile& k = kernel_profile[name];
        uint64_t blocks = (uint64_t)g.x * g.y * g.z;
        k.grids++;
        k.blocks += blocks;
        k.threads += blocks * nthreads;
        k.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    }
}

void launch_impl(const void* fn, const LaunchConfig& cfg, const char* name, std::function<void()> body) {
    Emulator& e = emu();
    if (e.current >= 0) kernel_fault("kernel %s launched from device code (dynamic parallelism is not used here)", name);
    const dim3 &g = cfg.grid, &b = cfg.block;
    size_t nthreads = (size_t)b.x * b.y * b.z;
    bool bad_config = g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535 || b.x == 0 || b.y == 0 || b.z == 0 ||
                      b.x > 1024 || b.y > 1024 || b.z > 64 || nthreads > (size_t)MAX_THREADS;
    auto it = e.max_dynamic_smem.find(fn);
    size_t smem_limit = it == e.max_dynamic_smem.end() ? 49152 : (size_t)std::max(it->second, 49152);
    if (bad_config || cfg.smem > smem_limit) {
        fprintf(stderr, "CUDA emulator: launch of %s refused: grid (%u,%u,%u), block (%u,%u,%u), %zu bytes of dynamic shared memory (limit %zu)\n", name,
                g.x, g.y, g.z, b.x, b.y, b.z, cfg.smem, smem_limit);
        e.last_error = cudaErrorInvalidConfiguration;
        return;
    }
    if (e.dry_run) return;
    size_t smem = cfg.smem;
    enqueue(cfg.stream, [name, g, b, smem, body = std::move(body)]() { run_grid(name, g, b, smem, body); });
}

// Held streams run only when something waits for them: under hold-first the oldest stream not yet
// destroyed, under hold-others every other one.
static bool is_held(const CUstream_st* s) {
    Emulator& e = emu();
    if (e.stream_mode == INLINE) return false;
    return (s == e.streams.begin()->second) == (e.stream_mode == HOLD_FIRST);
}
// The live stream of this id, or nullptr (destroyed: CUDA finished its work first).
CUstream_st* live_stream(uint64_t id) {
    auto it = emu().streams.find(id);
    return it == emu().streams.end() ? nullptr : it->second;
}
// Whether the stream of this id has done `seq` items.
bool wait_over(uint64_t id, uint64_t seq) {
    CUstream_st* w = live_stream(id);
    return !w || w->done >= seq;
}

// The host blocks until an operation in flight completes (cudaStreamSynchronize on a collective).
static void block_until(const std::function<bool()>& finished) {
    while (!finished()) usleep(50);
}

// Moves stream s on until it has completed `seq` items; false if it has to stop short. force: a
// wait for another stream makes that stream move on too (the host is waiting for s); otherwise
// the wait must already be over. block: an operation in flight is waited for (the host blocks, as
// cudaStreamSynchronize does on a collective whose peer never comes); otherwise it stops there.
// A wait names work issued before it (cudaStreamWaitEvent takes the event as it is at the call),
// so the recursion cannot come back to s.
static bool advance(CUstream_st* s, uint64_t seq, bool force, bool block) {
    while (s->done < seq) {
        StreamItem& f = s->queue.front();
        if (!f.work) {
            if (!wait_over(f.wait_stream, f.wait_seq) && (!force || !advance(live_stream(f.wait_stream), f.wait_seq, force, block))) return false;
        } else {
            if (!f.started) {
                f.started = true;
                f.work();
            }
            if (f.finished && !f.finished()) {
                if (!block) return false;
                block_until(f.finished);
            }
        }
        s->queue.pop_front();
        s->done++;
    }
    return true;
}

void drain(CUstream_st* s, uint64_t seq) { advance(s, seq, true, true); }
void drain_all() {
    for (auto& kv : emu().streams) drain(kv.second, kv.second->issued);
}
// Runs what the streams that are not held can run now, without waiting.
void pump() {
    for (bool progress = true; progress;) {
        progress = false;
        for (auto& kv : emu().streams) {
            CUstream_st* s = kv.second;
            if (s->queue.empty() || is_held(s)) continue;
            uint64_t before = s->done;
            advance(s, s->issued, false, false);
            progress = progress || s->done != before;
        }
    }
}
// cudaStreamQuery: moves s on as far as it can without blocking.
bool stream_idle(CUstream_st* s) {
    bool idle = advance(s, s->issued, true, false);
    pump();
    return idle;
}
bool set_stream_policy(const char* name) {
    Emulator& e = emu();
    StreamMode mode;
    if (!strcmp(name, "inline")) mode = INLINE;
    else if (!strcmp(name, "hold-first")) mode = HOLD_FIRST;
    else if (!strcmp(name, "hold-others")) mode = HOLD_OTHERS;
    else return false;
    drain_all();
    e.stream_mode = mode;
    return true;
}
void enqueue_async(cudaStream_t s, std::function<void()> start, std::function<bool()> finished) {
    if (!s) {  // the legacy default stream: after everything issued before, and before everything after
        drain_all();
        start();
        if (finished) block_until(finished);
        return;
    }
    s->queue.push_back(StreamItem{std::move(start), 0, 0, std::move(finished)});
    s->issued++;
    pump();  // inline (nothing held): runs now, unless it waits for an operation in flight
}
void enqueue(cudaStream_t s, std::function<void()> work) { enqueue_async(s, std::move(work), nullptr); }

// ----------------------------------------------------------------------------
// tensor-core instructions

void ldmatrix_x4(uint32_t (&r)[4], const void* row_addr, bool trans) {
    if ((uintptr_t)row_addr % 16) kernel_fault("ldmatrix row address %p is not 16-byte aligned", row_addr);
    unsigned char row[16];
#ifdef VP_EMU_RACE
    race_access(row_addr, 16, false, __builtin_return_address(0));
#endif
    memcpy(row, row_addr, 16);  // the lane's row, read as it arrives (the warp reads all rows at once)
    const unsigned char* slots = warp_collective(0xffffffffu, trans ? OP_LDMATRIX_TRANS : OP_LDMATRIX, row, 16);
    int t = lane_id();
    for (int i = 0; i < 4; i++) {
        uint16_t e[2];
        for (int j = 0; j < 2; j++) {
            int rr = trans ? 2 * (t % 4) + j : t / 4;  // row of matrix i
            int cc = trans ? t / 4 : 2 * (t % 4) + j;  // column of matrix i
            memcpy(&e[j], slots + (8 * i + rr) * SLOT_BYTES + 2 * cc, 2);
        }
        r[i] = (uint32_t)e[0] | ((uint32_t)e[1] << 16);
    }
}

// ----------------------------------------------------------------------------
// asynchronous copies (cp.async): the latest moment CUDA allows. The source is read at the issue
// and the bytes land in shared memory only when the issuing thread's cp.async.wait_group retires
// the group, so a read of the destination before the wait sees what was there before (the
// previous tile, or the NaN fill), and another thread's read needs a __syncthreads after the
// issuer's wait. For the race detector the write happens at both ends: at the issue (a reader of
// the buffer's previous contents not ordered before the issue races with it) and at the wait.

static EmuThread& cp_async_thread(const char* what) {
    Emulator& e = emu();
    if (e.current < 0) kernel_fault("%s outside a kernel", what);
    return e.threads[e.current];
}

static void cp_async_from(void* smem_dst, const void* gmem_src, int cp_size, int src_bytes, const void* pc) {
    EmuThread& t = cp_async_thread("cp.async");
    Emulator& e = emu();
    if (cp_size != 4 && cp_size != 8 && cp_size != 16) kernel_fault("cp.async of %d bytes (4, 8 or 16)", cp_size);
    if (src_bytes < 0 || src_bytes > cp_size) kernel_fault("cp.async of %d bytes with src-size %d (0..%d)", cp_size, src_bytes, cp_size);
    if ((uintptr_t)smem_dst % cp_size || (src_bytes && (uintptr_t)gmem_src % cp_size))
        kernel_fault("cp.async of %d bytes needs %d-byte aligned addresses: shared %p, global %p", cp_size, cp_size, smem_dst, gmem_src);
    if (find_alloc(e.device_allocs, smem_dst, 1) || find_alloc(e.host_allocs, smem_dst, 1))
        kernel_fault("cp.async destination %p is device memory, not shared memory (arguments swapped?)", smem_dst);
    if (src_bytes && !find_alloc(e.device_allocs, gmem_src, (size_t)src_bytes))
        kernel_fault("cp.async source %p (%d bytes) is not inside device memory (cudaMalloc)", gmem_src, src_bytes);
    AsyncCopy c;
    c.dst = static_cast<unsigned char*>(smem_dst);
    c.size = cp_size;
    memset(c.bytes, 0, sizeof(c.bytes));
    if (src_bytes) memcpy(c.bytes, gmem_src, (size_t)src_bytes);
    c.pc = pc;  // the kernel's instruction that issued it
#ifdef VP_EMU_RACE
    race_access(gmem_src, (size_t)src_bytes, false, c.pc);
    race_access(smem_dst, (size_t)cp_size, true, c.pc);
#endif
    t.cp_open.push_back(c);
}
void cp_async16(void* smem_dst, const void* gmem_src, int src_bytes) { cp_async_from(smem_dst, gmem_src, 16, src_bytes, __builtin_return_address(0)); }
void cp_async(void* smem_dst, const void* gmem_src, int cp_size, int src_bytes) {
    cp_async_from(smem_dst, gmem_src, cp_size, src_bytes, __builtin_return_address(0));
}

void cp_async_commit() {
    EmuThread& t = cp_async_thread("cp.async.commit_group");
    t.cp_groups.push_back(std::move(t.cp_open));  // an empty group is a group too, as in PTX
    t.cp_open.clear();
}

void cp_async_wait(int pending) {
    EmuThread& t = cp_async_thread("cp.async.wait_group");
    if (pending < 0) kernel_fault("cp.async.wait_group %d", pending);
#ifdef VP_EMU_RACE
    const void* pc = __builtin_return_address(0);
#endif
    while (t.cp_groups.size() > (size_t)pending) {
        for (const AsyncCopy& c : t.cp_groups.front()) {
#ifdef VP_EMU_RACE
            race_access(c.dst, (size_t)c.size, true, pc);
#endif
            memcpy(c.dst, c.bytes, (size_t)c.size);
            if (!t.cp_landed_unfenced) {
                t.cp_landed_unfenced = true;
                emu().cp_unfenced_threads++;
            }
        }
        t.cp_groups.erase(t.cp_groups.begin());  // at most a few groups are in flight
    }
}

static float bf16_half(uint32_t reg, int hi) { return bit_cast<float>(hi ? (reg & 0xffff0000u) : (reg << 16)); }

void mma_m16n8k16_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    uint32_t mine[6] = {a[0], a[1], a[2], a[3], b0, b1};
    const unsigned char* slots = warp_collective(0xffffffffu, OP_MMA, mine, sizeof(mine));
    auto reg = [&](int lane, int i) {
        uint32_t v;
        memcpy(&v, slots + lane * SLOT_BYTES + 4 * i, 4);
        return v;
    };
    // A(row, k): lane (row%8)*4 + (k%8)/2, register (row >= 8) + 2 (k >= 8), half k%2
    auto A = [&](int row, int k) { return bf16_half(reg((row % 8) * 4 + (k % 8) / 2, (row >= 8) + 2 * (k >= 8)), k % 2); };
    // B(k, n): lane n*4 + (k%8)/2, register 4 + (k >= 8), half k%2
    auto B = [&](int k, int n) { return bf16_half(reg(n * 4 + (k % 8) / 2, 4 + (k >= 8)), k % 2); };
    int lane = lane_id(), g = lane / 4, t = lane % 4;
    // this lane's two rows of A and two columns of B, decoded once (each value feeds two outputs)
    float rows[2][16], cols[2][16];
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 16; k++) rows[h][k] = A(g + 8 * h, k), cols[h][k] = B(k, 2 * t + h);
    for (int i = 0; i < 4; i++) {  // accumulator i: row g + 8 (i / 2), column 2t + i % 2
        float acc = c[i];
        for (int k = 0; k < 16; k++) acc += rows[i / 2][k] * cols[i % 2][k];
        c[i] = acc;
    }
}


// ----------------------------------------------------------------------------
// wgmma: Hopper's warpgroup MMA (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate")
//
// A warpgroup is 4 consecutive warps (the block's size a multiple of 128); warp w of it owns rows
// 16w..16w+15 of the 64-row A and D, so each warp's share is computed from its own lanes' A
// registers and shared memory: the emulator computes per warp. The D fragment: accumulator i of
// lane L (g = L/4, t = L%4) is row 16w + g + 8 (i%4 >= 2), column 8 (i/4) + 2t + i%2; register A
// is the m16n8k16 A fragment of the warp's rows. Shared-memory operands through a 64-bit matrix
// descriptor: start address >> 4 (bits 0-13), leading byte offset >> 4 (16-29), stride byte
// offset >> 4 (32-45), base offset (49-51), swizzle (62-63; 1 = 128 bytes). With the 128-byte
// swizzle, in CuTe notation over 16-byte units T (8 bf16):
//   K-major  ((8,m),(T,2k)):((8T,SBO),(1,T))       rows of 128 bytes, 8-row groups SBO apart
//   MN-major ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))  K rows of 128 bytes, 8-row groups SBO apart,
//                                                  64-element MN blocks LBO apart
// then bits 4-6 of the shared address XOR bits 7-9. Only that swizzle is emulated (others are a
// fault), and only with a start whose bits 7-9 are clear (base offset 0).
//
// Timing, the latest the PTX rules allow: the operation reads its shared memory and its
// accumulators, and writes them, at the wgmma.wait_group that retires its group, so a kernel that
// reads D before the wait, or refills the shared tile before it, sees wrong values here. Checked as
// faults: accumulators (checked by the first of a chain of wgmma on them, the k steps of one
// product) or A registers changed between the issue and that wait; a wgmma with no
// wgmma.fence since the thread's last wait (the kernels fence before each batch); a wgmma while a
// thread of the block has cp.async bytes landed without a fence.proxy.async after them (the
// tensor core reads shared memory through the async proxy); a thread returning with wgmma in
// flight. Not shown: plain st.shared stores before a wgmma without the proxy fence (stores are not
// seen), the speed, and the hardware's own accumulation order and rounding inside the tensor core
// (the emulator sums k in order in fp32, as for mma.sync, so wgmma and mma kernels that feed the
// same products in the same k order give the same bits here, not necessarily on a GPU).

uint32_t shared_window_address(const void* p) {
    Emulator& e = emu();
    if (e.current < 0) kernel_fault("cvta.to.shared outside a kernel");
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)e.smem;
    if (!e.smem || a < b || a >= b + e.smem_bytes)
        kernel_fault("shared window address of %p: not inside the block's dynamic shared memory (the emulator maps only that into the window)", p);
    return SHARED_WINDOW_DYNAMIC_BASE + (uint32_t)(a - b);
}

static EmuThread& wgmma_thread(const char* what) {
    Emulator& e = emu();
    if (e.current < 0) kernel_fault("%s outside a kernel", what);
    if ((e.block.x * e.block.y * e.block.z) % 128) kernel_fault("%s in a block of %u threads: warpgroups need a multiple of 128", what, e.block.x * e.block.y * e.block.z);
    return e.threads[e.current];
}

// One bf16 element of a descriptor's operand: row mn (M or N), column k (0..15).
static float wgmma_operand(uint64_t desc, bool mn_major, int mn, int k, const void* pc) {
    Emulator& e = emu();
    uint32_t start = (uint32_t)(desc & 0x3fff) << 4, lbo = (uint32_t)((desc >> 16) & 0x3fff) << 4, sbo = (uint32_t)((desc >> 32) & 0x3fff) << 4;
    unsigned base_offset = (unsigned)(desc >> 49) & 7u, swizzle = (unsigned)(desc >> 62);
    if (swizzle != 1) kernel_fault("wgmma descriptor 0x%016llx: swizzle mode %u; only the 128-byte swizzle (1) is emulated", (unsigned long long)desc, swizzle);
    if (base_offset || (start >> 7) & 7u)
        kernel_fault("wgmma descriptor 0x%016llx: start 0x%x is not on a 1024-byte swizzle atom row 0 (bits 7-9 set) or base offset %u: not emulated",
                     (unsigned long long)desc, start, base_offset);
    uint32_t addr = mn_major ? start + (uint32_t)(mn / 64) * lbo + (uint32_t)(mn % 64 / 8) * 16 + (uint32_t)(mn % 8) * 2 + (uint32_t)(k / 8) * sbo + (uint32_t)(k % 8) * 128
                             : start + (uint32_t)(mn / 8) * sbo + (uint32_t)(mn % 8) * 128 + (uint32_t)(k / 8) * 16 + (uint32_t)(k % 8) * 2;
    addr ^= ((addr >> 7) & 7u) << 4;
    if (addr < SHARED_WINDOW_DYNAMIC_BASE || addr + 2 > SHARED_WINDOW_DYNAMIC_BASE + e.smem_bytes)
        kernel_fault("wgmma operand element (%d, %d) of descriptor 0x%016llx at shared address 0x%x: outside the block's %zu bytes of dynamic shared memory",
                     mn, k, (unsigned long long)desc, addr, e.smem_bytes);
    const unsigned char* host = e.smem + (addr - SHARED_WINDOW_DYNAMIC_BASE);
#ifdef VP_EMU_RACE
    race_access(host, 2, false, pc);
#else
    (void)pc;
#endif
    uint16_t h;
    memcpy(&h, host, 2);
    return bit_cast<float>((uint32_t)h << 16);
}

void wgmma_bf16(float* d, int n, const uint32_t* a_regs, uint64_t desc_a, uint64_t desc_b, int tnsp_b, bool scale_d) {
    EmuThread& t = wgmma_thread("wgmma.mma_async");
    if (n < 8 || n > 256 || n % 8) kernel_fault("wgmma m64n%dk16: N must be a multiple of 8 in 8..256", n);
    if (!t.wg_fenced) kernel_fault("wgmma.mma_async without a wgmma.fence since this thread's last wgmma.wait_group (its registers may still be in use)");
    if (emu().cp_unfenced_threads)
        kernel_fault("wgmma.mma_async while %d threads of the block have cp.async bytes landed in shared memory without a fence.proxy.async after them",
                     emu().cp_unfenced_threads);
    WgmmaOp op;
    op.d = d;
    op.n = n;
    op.scale_d = scale_d;
    op.a_in_regs = a_regs != nullptr;
    op.a_regs = a_regs;
    op.desc_a = desc_a;
    op.desc_b = desc_b;
    op.tnsp_b = tnsp_b;
    op.pc = __builtin_return_address(0);
    uint32_t mine[4] = {0, 0, 0, 0};
    if (a_regs) memcpy(mine, a_regs, sizeof(mine));
    memcpy(op.a_issue, mine, sizeof(mine));
    // every lane of the warp issues it (.sync.aligned); register A is gathered from the warp now
    const unsigned char* slots = warp_collective(0xffffffffu, OP_WGMMA, mine, sizeof(mine));
    if (a_regs) {
        auto reg = [&](int lane, int i) {
            uint32_t v;
            memcpy(&v, slots + lane * SLOT_BYTES + 4 * i, 4);
            return v;
        };
        int g = lane_id() / 4;
        for (int r = 0; r < 2; r++)
            for (int k = 0; k < 16; k++) {
                int row = g + 8 * r;
                op.a_rows[r][k] = bf16_half(reg((row % 8) * 4 + (k % 8) / 2, (row >= 8) + 2 * (k >= 8)), k % 2);
            }
    }
    op.d_issue.assign(d, d + n / 2);
    // a chain of wgmma on one accumulator (the k steps of a product) is ordered by the hardware:
    // only the chain's first operation checks the registers against their value at its issue
    op.chained = false;
    for (const WgmmaOp& o : t.wg_open) op.chained |= o.d == d;
    for (const std::vector<WgmmaOp>& grp : t.wg_groups)
        for (const WgmmaOp& o : grp) op.chained |= o.d == d;
    t.wg_open.push_back(std::move(op));
}

void wgmma_fence() { wgmma_thread("wgmma.fence").wg_fenced = true; }

void wgmma_commit() {
    EmuThread& t = wgmma_thread("wgmma.commit_group");
    t.wg_groups.push_back(std::move(t.wg_open));
    t.wg_open.clear();
}

static void wgmma_retire(const WgmmaOp& op) {
    Emulator& e = emu();
    if (!op.chained && memcmp(op.d_issue.data(), op.d, op.d_issue.size() * sizeof(float)))
        kernel_fault("wgmma accumulators changed between the wgmma.mma_async and the wgmma.wait_group that retires it");
    if (op.a_in_regs && memcmp(op.a_issue, op.a_regs, sizeof(op.a_issue)))
        kernel_fault("wgmma A registers changed between the wgmma.mma_async and the wgmma.wait_group that retires it");
    int lane = lane_id(), g = lane / 4, tq = lane % 4, wq = (e.current / 32) % 4;
    float a[2][16];
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 16; k++) a[r][k] = op.a_in_regs ? op.a_rows[r][k] : wgmma_operand(op.desc_a, false, 16 * wq + g + 8 * r, k, op.pc);
    for (int j = 0; j < op.n / 8; j++)
        for (int c = 0; c < 2; c++) {
            int col = 8 * j + 2 * tq + c;
            float b[16];
            for (int k = 0; k < 16; k++) b[k] = wgmma_operand(op.desc_b, op.tnsp_b != 0, col, k, op.pc);
            for (int r = 0; r < 2; r++) {
                float& out = op.d[4 * j + 2 * r + c];
                float acc = op.scale_d ? out : 0.0f;
                for (int k = 0; k < 16; k++) acc += a[r][k] * b[k];
                out = acc;
            }
        }
}

void wgmma_wait(int pending) {
    EmuThread& t = wgmma_thread("wgmma.wait_group");
    if (pending < 0) kernel_fault("wgmma.wait_group %d", pending);
    warp_collective(0xffffffffu, OP_WGMMA_WAIT, nullptr, 0);  // .sync.aligned: the whole warp waits together
    while (t.wg_groups.size() > (size_t)pending) {
        for (const WgmmaOp& op : t.wg_groups.front()) wgmma_retire(op);
        t.wg_groups.erase(t.wg_groups.begin());
    }
    t.wg_fenced = false;
}

void fence_proxy_async_shared() {
    Emulator& e = emu();
    if (e.current < 0) kernel_fault("fence.proxy.async outside a kernel");
    EmuThread& t = e.threads[e.current];
    if (t.cp_landed_unfenced) {
        t.cp_landed_unfenced = false;
        e.cp_unfenced_threads--;
    }
}

}  // namespace vp_emu

// ----------------------------------------------------------------------------
// runtime API

using vp_emu::emu;
using vp_emu::find_alloc;

static cudaError_t set_error(cudaError_t err) {
    if (err != cudaSuccess) emu().last_error = err;
    return err;
}

const char* cudaGetErrorString(cudaError_t err) {
    switch (err) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorNotReady: return "device not ready";
        default: return "unspecified launch failure";
    }
}
const char* cudaGetErrorName(cudaError_t err) {
    switch (err) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorNotReady: return "cudaErrorNotReady";
        default: return "cudaErrorLaunchFailure";
    }
}
cudaError_t cudaGetLastError() {
    cudaError_t err = emu().last_error;
    emu().last_error = cudaSuccess;
    return err;
}
cudaError_t cudaPeekAtLastError() { return emu().last_error; }

static bool is_device(const void* p, size_t bytes) { return find_alloc(emu().device_allocs, p, bytes) != nullptr; }
static bool overlaps_device(const void* p) { return find_alloc(emu().device_allocs, p, 1) != nullptr; }

cudaError_t cudaMalloc(void** p, size_t bytes) {
    vp_emu::Emulator& e = emu();
    *p = nullptr;
    if (e.device_bytes + bytes > e.device_limit) return set_error(cudaErrorMemoryAllocation);
    if (e.dry_run) {  // reserve address space only: full-size models exceed the host's memory
        void* m = mmap(nullptr, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) return set_error(cudaErrorMemoryAllocation);
        *p = m;
    } else {
        if (posix_memalign(p, 256, bytes ? bytes : 1) != 0) return set_error(cudaErrorMemoryAllocation);
        memset(*p, 0xff, bytes);  // NaN in fp32 and bf16: reading memory no kernel wrote shows up
    }
    e.device_allocs[(uintptr_t)*p] = bytes;
    e.device_bytes += bytes;
    return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    vp_emu::drain_all();  // cudaFree waits for the device, as on a GPU
    vp_emu::Emulator& e = emu();
    auto it = e.device_allocs.find((uintptr_t)p);
    if (it == e.device_allocs.end()) {
        fprintf(stderr, "CUDA emulator: cudaFree(%p) of a pointer cudaMalloc did not return\n", p);
        return set_error(cudaErrorInvalidValue);
    }
    e.device_bytes -= it->second;
#ifdef VP_EMU_RACE
    vp_emu::race_forget(p);
#endif
    if (e.dry_run) munmap(p, it->second ? it->second : 1);
    else free(p);
    e.device_allocs.erase(it);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
    if (posix_memalign(p, 256, bytes ? bytes : 1) != 0) return set_error(cudaErrorMemoryAllocation);
    emu().host_allocs[(uintptr_t)*p] = bytes;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
    if (!p) return cudaSuccess;
    vp_emu::drain_all();
    if (!emu().host_allocs.erase((uintptr_t)p)) return set_error(cudaErrorInvalidValue);
#ifdef VP_EMU_RACE
    vp_emu::race_forget(p);
#endif
    free(p);
    return cudaSuccess;
}

// the direction the caller named must match where the pointers live: a host pointer handed to a
// kernel path is the bug a shared address space would otherwise hide. dst_span and src_span are the
// bytes each side covers (equal for a plain copy; rows times pitch for a 2D one).
static cudaError_t check_copy(void* dst, size_t dst_span, const void* src, size_t src_span, cudaMemcpyKind kind) {
    if (dst_span == 0 || kind == cudaMemcpyDefault) return cudaSuccess;
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    const char* problem = nullptr;
    if (dst_dev && !is_device(dst, dst_span)) problem = "the destination is not (wholly) inside one cudaMalloc allocation";
    else if (src_dev && !is_device(src, src_span)) problem = "the source is not (wholly) inside one cudaMalloc allocation";
    else if (!dst_dev && overlaps_device(dst)) problem = "the destination is device memory but the copy kind says host";
    else if (!src_dev && overlaps_device(src)) problem = "the source is device memory but the copy kind says host";
    if (problem) {
        fprintf(stderr, "CUDA emulator: cudaMemcpy(dst %p, src %p, %zu bytes, kind %d): %s\n", dst, src, dst_span, (int)kind, problem);
        return set_error(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}
// The host side of an async copy is read or written when the stream runs it, as with pinned memory
// on a GPU: the host must not touch it before it has waited for the stream.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
    cudaError_t err = check_copy(dst, bytes, src, bytes, kind);
    if (err != cudaSuccess) return err;
    if (bytes && !(emu().dry_run && kind == cudaMemcpyDeviceToDevice)) vp_emu::enqueue(stream, [=]() { memmove(dst, src, bytes); });
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) { return cudaMemcpyAsync(dst, src, bytes, kind, nullptr); }
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height, cudaMemcpyKind kind) {
    if (height == 0 || width == 0) return cudaSuccess;
    if (width > dpitch || width > spitch) return set_error(cudaErrorInvalidValue);
    cudaError_t err = check_copy(dst, (height - 1) * dpitch + width, src, (height - 1) * spitch + width, kind);
    if (err != cudaSuccess) return err;
    vp_emu::enqueue(nullptr, [=]() {
        for (size_t r = 0; r < height; r++) memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
    });
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return cudaSuccess;
    if (!is_device(p, bytes)) {
        fprintf(stderr, "CUDA emulator: cudaMemset(%p, %zu bytes) outside any cudaMalloc allocation\n", p, bytes);
        return set_error(cudaErrorInvalidValue);
    }
    if (!emu().dry_run) vp_emu::enqueue(stream, [=]() { memset(p, value, bytes); });  // a dry run touches no more memory than it must
    return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) { return cudaMemsetAsync(p, value, bytes, nullptr); }
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    *total_bytes = emu().device_limit;
    *free_bytes = emu().device_limit - emu().device_bytes;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int* n) {
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* dev) {
    *dev = 0;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev) { return dev == 0 ? cudaSuccess : set_error(cudaErrorInvalidDevice); }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int dev) {
    if (dev != 0) return set_error(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof(*prop));
    const vp_emu::Emulator::Gpu& gpu = emu().gpu;
    // (no GPU's name in it: the trainer's MFU reads the peak off names such as "H100")
    snprintf(prop->name, sizeof(prop->name), "CUDA emulator on the CPU (tests/emu; the limits of a compute capability %s GPU)", gpu.cc);
    prop->totalGlobalMem = emu().device_limit;
    prop->sharedMemPerBlock = 49152;
    prop->sharedMemPerBlockOptin = gpu.smem_optin;
    prop->multiProcessorCount = gpu.sms;
    prop->major = gpu.major;
    prop->minor = gpu.minor;
    prop->maxThreadsPerBlock = 1024;
    prop->warpSize = 32;
    prop->l2CacheSize = 50 << 20;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int dev) {
    if (dev != 0) return set_error(cudaErrorInvalidDevice);
    switch (attr) {
        case cudaDevAttrMultiProcessorCount: *value = emu().gpu.sms; return cudaSuccess;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = emu().gpu.smem_optin; return cudaSuccess;
        case cudaDevAttrComputeCapabilityMajor: *value = emu().gpu.major; return cudaSuccess;
        case cudaDevAttrComputeCapabilityMinor: *value = emu().gpu.minor; return cudaSuccess;
    }
    return set_error(cudaErrorInvalidValue);
}
cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int dev) {
    if (dev != 0) return set_error(cudaErrorInvalidDevice);
    snprintf(bus_id, len, "emu:%08x", (unsigned)getpid());  // each process is its own GPU (NCCL emulator ranks)
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
    vp_emu::drain_all();
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) {
    vp_emu::Emulator& e = emu();
    CUstream_st* st = new CUstream_st();
    st->id = ++e.last_stream_id;
    e.streams[st->id] = st;
    *s = st;
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int priority) {
    (void)priority;  // CUDA clamps it to the range; there is nothing to order here
    if (flags != cudaStreamDefault) return set_error(cudaErrorInvalidValue);  // non-blocking streams: not emulated
    return cudaStreamCreate(s);
}
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s || !vp_emu::live_stream(s->id)) return set_error(cudaErrorInvalidValue);
    vp_emu::drain(s, s->issued);  // CUDA finishes the queued work first
    vp_emu::pump();
    emu().streams.erase(s->id);  // waits and events that name it count as over
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (s) vp_emu::drain(s, s->issued);
    else vp_emu::drain_all();
    vp_emu::pump();
    return cudaSuccess;
}
// The emulated device finishes whatever the host asks about, so a polling loop ends.
cudaError_t cudaStreamQuery(cudaStream_t s) {
    if (!s) {
        vp_emu::drain_all();
        return cudaSuccess;
    }
    return vp_emu::stream_idle(s) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventCreate(cudaEvent_t* ev) {
    *ev = new CUevent_st();
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* ev, unsigned) { return cudaEventCreate(ev); }
cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    delete ev;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
    if (!s) vp_emu::drain_all();  // the legacy stream: everything issued so far
    ev->stream = s ? s->id : 0;
    ev->seq = s ? s->issued : 0;
    ev->t = 0;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
    if (CUstream_st* w = vp_emu::live_stream(ev->stream)) vp_emu::drain(w, ev->seq);
    vp_emu::pump();
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    *ms = (float)(b->t - a->t);
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned) {
    if (vp_emu::wait_over(ev->stream, ev->seq) || (s && ev->stream == s->id)) return cudaSuccess;  // nothing to wait for
    if (!s) {  // the legacy stream waits on the host's behalf
        vp_emu::drain(vp_emu::live_stream(ev->stream), ev->seq);
        vp_emu::pump();
        return cudaSuccess;
    }
    s->queue.push_back(vp_emu::StreamItem{nullptr, ev->stream, ev->seq, nullptr});
    s->issued++;
    vp_emu::pump();
    return cudaSuccess;
}

// ----------------------------------------------------------------------------
// cuBLASLt

struct VpEmuLtHandle {
    int unused;
};

const char* cublasGetStatusString(cublasStatus_t st) {
    switch (st) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        default: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
}
static cublasStatus_t lt_fail(const char* fmt, ...) {
    fprintf(stderr, "CUDA emulator: cuBLASLt: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
    *h = new VpEmuLtHandle();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
    *d = new VpEmuLtMatmulDesc();
    (*d)->compute = compute;
    (*d)->scale = scale;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
template <typename T>
static cublasStatus_t read_attr(T* dst, const void* buf, size_t bytes) {
    if (bytes != sizeof(T)) return lt_fail("attribute of %zu bytes where %zu were expected", bytes, sizeof(T));
    memcpy(dst, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t bytes) {
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_TRANSA: return read_attr(&d->trans_a, buf, bytes);
        case CUBLASLT_MATMUL_DESC_TRANSB: return read_attr(&d->trans_b, buf, bytes);
        case CUBLASLT_MATMUL_DESC_EPILOGUE: return read_attr(&d->epilogue, buf, bytes);
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return read_attr(&d->bias, buf, bytes);
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return read_attr(&d->bias_type, buf, bytes);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return read_attr(&d->aux, buf, bytes);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return read_attr(&d->aux_ld, buf, bytes);
    }
    return lt_fail("matmul descriptor attribute %d is not emulated", (int)attr);
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld) {
    if (ld < (int64_t)rows) return lt_fail("layout %llu x %llu with leading dimension %lld < rows", (unsigned long long)rows, (unsigned long long)cols, (long long)ld);
    *l = new VpEmuLtLayout{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
    *p = new VpEmuLtPreference();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const void* buf, size_t bytes) {
    switch (attr) {
        case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return read_attr(&p->max_workspace, buf, bytes);
        case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
            if (bytes == sizeof(uint32_t) && *static_cast<const uint32_t*>(buf) > CUBLASLT_REDUCTION_SCHEME_MASK)
                return lt_fail("reduction scheme mask %u has bits beyond CUBLASLT_REDUCTION_SCHEME_MASK", *static_cast<const uint32_t*>(buf));
            return read_attr(&p->reduction_mask, buf, bytes);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return read_attr(&p->min_align[0], buf, bytes);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return read_attr(&p->min_align[1], buf, bytes);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return read_attr(&p->min_align[2], buf, bytes);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return read_attr(&p->min_align[3], buf, bytes);
    }
    return lt_fail("preference attribute %d is not emulated", (int)attr);
}
// The rows of cuBLASLt's table of supported types (cublasLtMatmul, COMPUTE_32F with an fp32 scale)
// that the trainer may use: bf16 A/B with bf16 or fp32 C/D, fp32 A/B with fp32 C/D; a bias is of
// D's type (the documented default of CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE). Anything else the real
// library answers with NOT_SUPPORTED, already when the heuristic is asked.
static cublasStatus_t lt_types_supported(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                                         cublasLtMatrixLayout_t ld) {
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F) {
        lt_fail("only CUBLAS_COMPUTE_32F with fp32 scale is emulated");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    bool ab_bf16 = la->type == CUDA_R_16BF && lb->type == CUDA_R_16BF, ab_f32 = la->type == CUDA_R_32F && lb->type == CUDA_R_32F;
    bool cd_ok = lc->type == ld->type && (ld->type == CUDA_R_32F || (ab_bf16 && ld->type == CUDA_R_16BF));
    if (!(ab_bf16 || ab_f32) || !cd_ok) {
        lt_fail("A/B types %d/%d with C/D types %d/%d is not a combination cuBLASLt supports", (int)la->type, (int)lb->type, (int)lc->type, (int)ld->type);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    bool with_bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || d->epilogue == CUBLASLT_EPILOGUE_BGRADB;
    if (with_bias && d->bias_type != ld->type) {
        lt_fail("bias type %d differs from D's type %d", (int)d->bias_type, (int)ld->type);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                                              cublasLtMatrixLayout_t lc, cublasLtMatrixLayout_t ld, cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* found) {
    if (!h || !d || !p || requested < 1) return lt_fail("heuristic query without handle, descriptor or preference");
    *found = 0;
    if (cublasStatus_t st = lt_types_supported(d, la, lb, lc, ld)) return st;
    // a library without a BGRADB kernel for the call, on request (tests the trainer's fallback)
    const char* no_bgradb = getenv("VP_EMU_LT_NO_BGRADB");
    if (d->epilogue == CUBLASLT_EPILOGUE_BGRADB && no_bgradb && !strcmp(no_bgradb, "1")) return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(&results[0], 0, sizeof(results[0]));
    for (int i = 0; i < 4; i++) results[0].algo.data[i] = p->min_align[i];
    // The real heuristic may pick a split-K algorithm for some shapes, and with it any reduction
    // the preference allows. The emulator picks the worst one allowed for a bf16 D whenever K can
    // be split: partial products added in D's type (INPLACE or OUTPUT_TYPE), so that a caller that
    // promises one rounding from fp32 must have said so in the preference (lt_compute).
    uint64_t k = d->trans_a == CUBLAS_OP_T ? la->rows : la->cols;
    results[0].algo.data[4] = ld->type == CUDA_R_16BF && k >= 2 && (p->reduction_mask & (CUBLASLT_REDUCTION_SCHEME_INPLACE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE));
    results[0].state = CUBLAS_STATUS_SUCCESS;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

static float lt_load(const void* p, cudaDataType_t t, size_t i) {
    return t == CUDA_R_32F ? static_cast<const float*>(p)[i] : __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
static size_t lt_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }
static size_t lt_span(const VpEmuLtLayout* l) { return ((size_t)(l->cols - 1) * l->ld + l->rows) * lt_size(l->type); }

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) and its derivative, in fp32 as kernels/gelu.cuh computes them
static float lt_gelu(float x) { return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))); }
static float lt_gelu_grad(float x) {
    const float s = 0.7978845608028654f;
    float th = tanhf(s * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * s * (1.0f + 3.0f * 0.044715f * x * x);
}

// D = alpha op(A) op(B) + beta C (+ bias per row), times gelu'(aux) with DGELU, in fp32, on copies
// of the layouts; bias_grad (BGRADB, fp32 D only): the sum over k of each column of op(B).
// split_in_d_type (a bf16 D, the heuristic's split-K choice): K in two halves whose products are
// added in D's type, as an in-place reduction does: the first half (with beta C) rounded to D's
// type, the second added to it and rounded again, then the epilogue and the final rounding.
//
// Each output is one fp32 sum over l = 0, 1, ..., k-1 in that order, each product fused into it
// (FMA, as a GPU's FFMA), however the loops are blocked. The emulator spent a quarter of its time
// here: a dot product summed in order cannot be vectorised (no reassociation without
// -ffast-math), so the outputs of a block of LT_ROWS rows and LT_COLS columns are summed side by
// side instead, op(A) copied transposed so that one l gives LT_ROWS contiguous values. (Until
// 2026-11-28 each output was one dot product, its products rounded before the sum: the same bits
// for bf16 operands, whose products are exact in fp32; fp32 ones differ in the last bits.)
static constexpr uint64_t LT_ROWS = 256;
static constexpr uint64_t LT_COLS = 4;
static void lt_compute(const void* a, VpEmuLtLayout A, bool ta, const void* b, VpEmuLtLayout B, bool tb, const void* c, VpEmuLtLayout Cl, void* dd,
                       VpEmuLtLayout Dl, uint64_t m, uint64_t n, uint64_t k, float alpha, float beta, const void* bias, cudaDataType_t bias_type,
                       const void* aux, int64_t aux_ld, bool gelu_forward, float* bias_grad, bool split_in_d_type) {
    // dense fp32 copies: op(A) as k rows of m (at[l m + i]), op(B) as n rows of k (bt[j k + l])
    std::vector<float> at(k * m), bt(n * k);
    for (uint64_t l = 0; l < k; l++)
        for (uint64_t i = 0; i < m; i++) at[l * m + i] = lt_load(a, A.type, ta ? l + i * A.ld : i + l * A.ld);
    for (uint64_t j = 0; j < n; j++)
        for (uint64_t l = 0; l < k; l++) bt[j * k + l] = lt_load(b, B.type, tb ? j + l * B.ld : l + j * B.ld);
    const uint64_t k_first = split_in_d_type ? k / 2 : k;
#pragma omp parallel for schedule(static)
    for (uint64_t j0 = 0; j0 < n; j0 += LT_COLS) {
        const uint64_t cols = std::min(LT_COLS, n - j0);
        if (bias_grad)
            for (uint64_t jj = 0; jj < cols; jj++) {
                float col = 0.0f;
                for (uint64_t l = 0; l < k; l++) col += bt[(j0 + jj) * k + l];
                bias_grad[j0 + jj] = col;
            }
        for (uint64_t i0 = 0; i0 < m; i0 += LT_ROWS) {
            const uint64_t rows = std::min(LT_ROWS, m - i0);
            // first: the sums over l < k_first; rest: over the second half of a split K
            float first[LT_COLS][LT_ROWS] = {}, rest[LT_COLS][LT_ROWS] = {};
            auto sum_rows = [&](float (&acc)[LT_COLS][LT_ROWS], uint64_t l0, uint64_t l1) {
                for (uint64_t l = l0; l < l1; l++) {
                    const float* al = &at[l * m + i0];
                    for (uint64_t jj = 0; jj < cols; jj++) {
                        const float bl = bt[(j0 + jj) * k + l];
                        float* out = acc[jj];
                        for (uint64_t ii = 0; ii < rows; ii++) out[ii] += al[ii] * bl;
                    }
                }
            };
            sum_rows(first, 0, k_first);
            if (split_in_d_type) sum_rows(rest, k_first, k);
            for (uint64_t jj = 0; jj < cols; jj++)
                for (uint64_t ii = 0; ii < rows; ii++) {
                    const uint64_t i = i0 + ii, j = j0 + jj;
                    float v = alpha * first[jj][ii];
                    if (beta != 0.0f) v += beta * lt_load(c, Cl.type, i + j * Cl.ld);  // C is not read when beta == 0, as in cuBLAS
                    if (split_in_d_type) v = __bfloat162float(__float2bfloat16_rn(__bfloat162float(__float2bfloat16_rn(v)) + alpha * rest[jj][ii]));
                    if (bias) v += lt_load(bias, bias_type, i);
                    if (aux && !gelu_forward) v *= lt_gelu_grad(lt_load(aux, Dl.type, i + j * aux_ld));
                    if (gelu_forward) {  // aux gets the GELU's input, D its output, each rounded once from fp32
                        size_t ax = i + j * aux_ld;
                        if (Dl.type == CUDA_R_32F) static_cast<float*>(const_cast<void*>(aux))[ax] = v;
                        else static_cast<__nv_bfloat16*>(const_cast<void*>(aux))[ax] = __float2bfloat16_rn(v);
                        v = lt_gelu(v);
                    }
                    size_t at_d = i + j * Dl.ld;
                    if (Dl.type == CUDA_R_32F) static_cast<float*>(dd)[at_d] = v;
                    else static_cast<__nv_bfloat16*>(dd)[at_d] = __float2bfloat16_rn(v);
                }
        }
    }
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha_p, const void* a, cublasLtMatrixLayout_t la, const void* b,
                              cublasLtMatrixLayout_t lb, const void* beta_p, const void* c, cublasLtMatrixLayout_t lc, void* dd, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t* algo, void*, size_t, cudaStream_t stream) {
    if (!h) return lt_fail("matmul without a handle");
    bool ta = d->trans_a == CUBLAS_OP_T, tb = d->trans_b == CUBLAS_OP_T;
    uint64_t m = ld->rows, n = ld->cols, k = ta ? la->rows : la->cols;
    if ((ta ? la->cols : la->rows) != m || (tb ? lb->cols : lb->rows) != k || (tb ? lb->rows : lb->cols) != n || lc->rows != m || lc->cols != n)
        return lt_fail("shapes do not chain: op(A) %llux%llu, op(B) %llux%llu, C %llux%llu, D %llux%llu", (unsigned long long)(ta ? la->cols : la->rows),
                       (unsigned long long)k, (unsigned long long)(tb ? lb->cols : lb->rows), (unsigned long long)(tb ? lb->rows : lb->cols),
                       (unsigned long long)lc->rows, (unsigned long long)lc->cols, (unsigned long long)m, (unsigned long long)n);
    if (cublasStatus_t st = lt_types_supported(d, la, lb, lc, ld)) return st;
    const void* ptrs[4] = {a, b, c, dd};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)ptrs[i] % algo->data[i])
            return lt_fail("operand %c at %p is less aligned than the %llu bytes the preference promised", "ABCD"[i], ptrs[i], (unsigned long long)algo->data[i]);
    // every operand must lie inside device memory (a host pointer here is a bug)
    const VpEmuLtLayout* layouts[4] = {la, lb, lc, ld};
    for (int i = 0; i < 4; i++)
        if (!is_device(ptrs[i], lt_span(layouts[i]))) return lt_fail("operand %c (%p) is not inside one cudaMalloc allocation", "ABCD"[i], ptrs[i]);
    uintptr_t d0 = (uintptr_t)dd, d1 = d0 + lt_span(ld);
    for (int i = 0; i < 2; i++) {
        uintptr_t p0 = (uintptr_t)ptrs[i], p1 = p0 + lt_span(layouts[i]);
        if (p0 < d1 && d0 < p1) return lt_fail("D overlaps operand %c", "AB"[i]);
    }
    bool dgelu = d->epilogue == CUBLASLT_EPILOGUE_DGELU;
    bool gelu_fwd = d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    bool bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    bool bgrad = d->epilogue == CUBLASLT_EPILOGUE_BGRADB;
    if ((bias || bgrad) && !d->bias) return lt_fail("epilogue %d (with a bias) without a bias pointer", (int)d->epilogue);
    if (d->epilogue != CUBLASLT_EPILOGUE_BIAS && d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && !dgelu && !gelu_fwd && !bgrad)
        return lt_fail("epilogue %d is not emulated", (int)d->epilogue);
    // a library whose heuristic offers a BGRADB algorithm that the call then refuses, on request
    const char* no_bgradb = getenv("VP_EMU_LT_NO_BGRADB");
    if (bgrad && no_bgradb && !strcmp(no_bgradb, "2")) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (bgrad) {
        // the bias gradient: n fp32 values inside device memory, apart from D; alpha's effect on
        // it is not emulated (the trainer asks with alpha = 1 only)
        if (ld->type != CUDA_R_32F || *static_cast<const float*>(alpha_p) != 1.0f) return lt_fail("BGRADB is emulated only with fp32 D and alpha = 1");
        if (!is_device(d->bias, n * sizeof(float))) return lt_fail("BGRADB's bias gradient (%p) is not inside one cudaMalloc allocation", d->bias);
        uintptr_t g0 = (uintptr_t)d->bias, g1 = g0 + n * sizeof(float);
        if (g0 < d1 && d0 < g1) return lt_fail("D overlaps BGRADB's bias gradient");
    }
    if (dgelu || gelu_fwd) {
        // the documented constraints on the GELU input matrix: leading dimension >= rows and a multiple of 8
        if (!d->aux || d->aux_ld < (int64_t)m || d->aux_ld % 8)
            return lt_fail("epilogue %d with aux %p, leading dimension %lld", (int)d->epilogue, d->aux, (long long)d->aux_ld);
        VpEmuLtLayout aux_layout{ld->type, m, n, d->aux_ld};
        if (!is_device(d->aux, lt_span(&aux_layout))) return lt_fail("the GELU epilogue's aux matrix (%p) is not inside one cudaMalloc allocation", d->aux);
        uintptr_t x0 = (uintptr_t)d->aux, x1 = x0 + lt_span(&aux_layout);
        if (x0 < d1 && d0 < x1) return lt_fail("D overlaps the GELU epilogue's aux matrix");
    }
    if (emu().dry_run) return CUBLAS_STATUS_SUCCESS;
    // alpha and beta are read now (host pointer mode), the descriptor and layouts copied: the caller
    // may change or destroy them once this returns; the product runs when the stream gets to it
    float alpha = *static_cast<const float*>(alpha_p), beta = *static_cast<const float*>(beta_p);
    VpEmuLtLayout A = *la, B = *lb, Cl = *lc, Dl = *ld;
    const void* bias_ptr = d->bias;
    float* bias_grad = bgrad ? static_cast<float*>(const_cast<void*>(d->bias)) : nullptr;
    cudaDataType_t bias_type = d->bias_type;
    const void* aux = dgelu || gelu_fwd ? d->aux : nullptr;
    int64_t aux_ld = d->aux_ld;
    bool split = algo->data[4] != 0;
    vp_emu::enqueue(stream, [=]() {
        lt_compute(a, A, ta, b, B, tb, c, Cl, dd, Dl, m, n, k, alpha, beta, bias ? bias_ptr : nullptr, bias_type, aux, aux_ld, gelu_fwd, bias_grad, split);
    });
    return CUBLAS_STATUS_SUCCESS;
}

#ifdef VP_EMU_RACE
// ----------------------------------------------------------------------------
// the hooks -fsanitize=thread puts before every load and store of the kernels' translation unit
// (GCC, with --param tsan-instrument-func-entry-exit=0); outside a CUDA thread they return at once

#define VP_RACE_HOOKS(n)                                                                                                  \
    extern "C" void __tsan_read##n(void* p) { vp_emu::race_access(p, n, false, __builtin_return_address(0)); }             \
    extern "C" void __tsan_write##n(void* p) { vp_emu::race_access(p, n, true, __builtin_return_address(0)); }             \
    extern "C" void __tsan_unaligned_read##n(void* p) { vp_emu::race_access(p, n, false, __builtin_return_address(0)); }   \
    extern "C" void __tsan_unaligned_write##n(void* p) { vp_emu::race_access(p, n, true, __builtin_return_address(0)); }
VP_RACE_HOOKS(1)
VP_RACE_HOOKS(2)
VP_RACE_HOOKS(4)
VP_RACE_HOOKS(8)
VP_RACE_HOOKS(16)
#undef VP_RACE_HOOKS
extern "C" void __tsan_read_range(void* p, unsigned long n) { vp_emu::race_access(p, n, false, __builtin_return_address(0)); }
extern "C" void __tsan_write_range(void* p, unsigned long n) { vp_emu::race_access(p, n, true, __builtin_return_address(0)); }
// host code's atomics (shared_ptr's count, function-local statics' guards), passed through: no
// kernel uses atomics, and the host runs no fibers in parallel
#define VP_RACE_ATOMICS(bits, T)                                                                                                       \
    extern "C" T __tsan_atomic##bits##_load(const volatile T* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); }                  \
    extern "C" void __tsan_atomic##bits##_store(volatile T* a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); }                 \
    extern "C" T __tsan_atomic##bits##_exchange(volatile T* a, T v, int) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }       \
    extern "C" T __tsan_atomic##bits##_fetch_add(volatile T* a, T v, int) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }       \
    extern "C" T __tsan_atomic##bits##_fetch_sub(volatile T* a, T v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }       \
    extern "C" int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* expected, T v, int, int) {                          \
        return __atomic_compare_exchange_n(a, expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                                 \
    }                                                                                                                                  \
    extern "C" int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* expected, T v, int, int) {                            \
        return __atomic_compare_exchange_n(a, expected, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                                  \
    }
VP_RACE_ATOMICS(8, char)
VP_RACE_ATOMICS(16, short)
VP_RACE_ATOMICS(32, int)
VP_RACE_ATOMICS(64, long)
#undef VP_RACE_ATOMICS
extern "C" void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
extern "C" void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
extern "C" void __tsan_init() {}
extern "C" void __tsan_func_entry(void*) {}
extern "C" void __tsan_func_exit() {}
extern "C" void __tsan_vptr_update(void**, void*) {}
extern "C" void __tsan_vptr_read(void**) {}
#endif
