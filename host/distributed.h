// host/distributed.h: the few collectives data-parallel training needs, over MPI (CPU build).
//
// Built with -DUSE_MPI (make train_cpu USE_MPI=1), a process is one rank of the MPI job that
// mpirun or srun started; without it every call is a no-op for a single process (rank 0 of 1),
// so the plain build needs no MPI at all.
//
// Every reduction is deterministic: its result does not depend on message arrival order, the
// number of ranks per node or the MPI library's algorithm choice. A float sum over ranks is done
// as reduce-scatter + all-gather by hand: rank r receives every rank's copy of its segment
// (MPI_Alltoallv moves bytes, it adds nothing), adds them in rank order 0 + 1 + ... + (world-1),
// then the segments are gathered back. So all ranks hold bit-identical sums, run after run.
//
// Segments: the flat array of n floats is cut into `world` contiguous slices, dist_shard(n, r);
// ZeRO-1 uses the same slices for the optimizer state.
//
// Sizes: MPI's counts and displacements are int. Where world x slot is below 2^31 floats, every
// count and displacement of the reduce-scatter and the all-gather fits one, and each is a single
// MPI_Alltoallv or MPI_Allgatherv. A larger vector (an 8e9-parameter model has displacements up
// to 8e9 even where each rank's count fits) moves in pieces: piece q of every rank's shard in one
// exchange, point to point, each part addressed by a pointer instead of an int displacement
// (dist_piece_floats, dist_piece_part). The sums add the same numbers in the same rank order, so
// the result does not depend on the pieces; VP_DIST_PIECE=k (floats; tests) forces pieces of k.
//
// Failure: the communicator returns errors (MPI_ERRORS_RETURN) and each one is turned into a
// runtime_error (exit 1). A rank that dies makes OpenMPI's mpirun end the job; a rank that hangs
// would block the others forever, so a watchdog thread ends a process whose collective has
// waited longer than VP_DIST_TIMEOUT seconds (default 600, 0 = off) with a clear message.
//
// The GPU build uses this file for the ranks, the watchdog and the host-side traffic (the loss,
// a checkpoint streamed to rank 0), and kernels/zero.cuh (NCCL) for the device buffers:
// gradients and parameters; see docs/distributed.md.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "host/utils.h"

#ifdef USE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only (no C++ bindings, no warnings)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <unistd.h>

#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

struct DistShard {
    size_t offset, count;
};

// The slot of the shard layout: ceil(n / world) elements.
inline size_t dist_slot(size_t n, int world) { return (n + world - 1) / world; }

// Rank r's contiguous slice of n elements: [r * slot, (r + 1) * slot) clipped to n, so every
// shard but the last is exactly one slot long and starts at r * slot. NCCL's all-gather moves
// equal counts from every rank, so with this layout the GPU build gathers the weights in place
// into a buffer padded to world * slot (kernels/zero.cuh); the last shard may be shorter, even
// empty when n < world.
inline DistShard dist_shard(size_t n, int r, int world) {
    size_t slot = dist_slot(n, world);
    DistShard s;
    s.offset = std::min(n, slot * r);
    s.count = std::min(n, slot * (r + 1)) - s.offset;
    return s;
}

// The parts of a slice [a, a + count) of a flat vector of n elements that each rank's
// dist_shard holds, in rank order: f(rank, offset of the part in the slice, its count). ZeRO-1
// sends each part of a gradient slice to its owner (kernels/zero.cuh).
template <typename F>
inline void dist_for_each_owner_part(size_t a, size_t count, size_t n, int world, F f) {
    if (count == 0) return;
    size_t slot = dist_slot(n, world);
    for (int r = (int)(a / slot); r < world; r++) {
        DistShard sh = dist_shard(n, r, world);
        size_t lo = std::max(a, sh.offset), hi = std::min(a + count, sh.offset + sh.count);
        if (lo >= a + count) break;
        if (lo < hi) f(r, lo - a, hi - lo);
    }
}

// MPI's counts and displacements are int: what one call can address, in elements.
constexpr size_t DIST_MAX_COUNT = 2147483647;

// The piece length (floats per rank and message) of the reduce-scatter and all-gather of n floats
// over `world` ranks: 0 when one MPI call carries them (world * slot bounds every count and
// displacement, and the reduce-scatter's receive buffer, of world copies of one shard), else a
// length that keeps each message's count within an int and the receive buffer of the
// reduce-scatter (world pieces) at 2^28 floats (1 GiB). forced > 0 (VP_DIST_PIECE) is taken
// whatever n is, so that tests run the pieces on small models.
inline size_t dist_piece_floats(size_t n, int world, size_t forced = 0) {
    if (forced) return std::min(forced, DIST_MAX_COUNT);
    if ((size_t)world * dist_slot(n, world) <= DIST_MAX_COUNT) return 0;
    return std::max<size_t>(1, ((size_t)1 << 28) / (size_t)world);
}

// Rank r's part of piece q (q = 0, piece, 2 piece, ... below the slot): the elements
// [q, q + piece) of its dist_shard, clipped to the shard (count 0 where the shard is shorter).
// One exchange moves piece q of every shard, so no message counts more than `piece` elements and
// every part is addressed by its 64-bit offset.
inline DistShard dist_piece_part(size_t n, int r, int world, size_t q, size_t piece) {
    DistShard s = dist_shard(n, r, world);
    if (q >= s.count) return {s.offset + s.count, 0};
    return {s.offset + q, std::min(piece, s.count - q)};
}

// Element counts and offsets of every rank's shard of n elements, as MPI's *v collectives take
// them: only for a layout that fits an int (dist_piece_floats(n, W) == 0); an offset cast past
// 2^31 would address another element, so any other is refused.
inline void dist_shard_layout(size_t n, int W, std::vector<int>* count, std::vector<int>* displ) {
    if (dist_piece_floats(n, W) != 0)
        runtime_error(nullptr, "internal: the shard layout of %zu elements over %d ranks does not fit MPI's int counts; it moves in pieces", n, W);
    count->resize(W);
    displ->resize(W);
    for (int j = 0; j < W; j++) {
        DistShard s = dist_shard(n, j, W);
        (*count)[j] = (int)s.count;
        (*displ)[j] = (int)s.offset;
    }
}

// A CPU mask as the kernel's sched_getaffinity writes it and glibc's CPU_*_S macros read it: CPU c
// is bit c % W of word c / W, W the bits of an unsigned long. A vector of words instead of
// cpu_set_t, whose 1024 CPUs a kernel built for more refuses (EINVAL).
using CpuMask = std::vector<unsigned long>;
constexpr size_t CPU_MASK_WORD_BITS = 8 * sizeof(unsigned long);
inline bool cpu_mask_has(const unsigned long* mask, size_t words, size_t cpu) {
    return cpu / CPU_MASK_WORD_BITS < words && (mask[cpu / CPU_MASK_WORD_BITS] >> (cpu % CPU_MASK_WORD_BITS)) & 1;
}

// The OpenMP threads that are a rank's fair share of its CPUs: the sum over the CPUs of its own
// mask `mine` of 1 / (how many of the node's masks hold that CPU), rounded down, at least 1.
// `all` is the node's n_masks masks one after another, `words` long each, this rank's among them
// (so every count is at least 1). 4 CPUs held by 2 ranks, and 1 held by this rank alone: 3.
inline int dist_cpu_share(const unsigned long* mine, const unsigned long* all, int n_masks, size_t words) {
    double share = 0;
    for (size_t cpu = 0; cpu < words * CPU_MASK_WORD_BITS; cpu++) {
        if (!cpu_mask_has(mine, words, cpu)) continue;
        int holders = 0;
        for (int r = 0; r < n_masks; r++) holders += cpu_mask_has(all + r * words, words, cpu) ? 1 : 0;
        share += 1.0 / std::max(holders, 1);
    }
    return std::max(1, (int)(share + 1e-9));
}

#ifdef USE_MPI

struct DistState {
    int rank = 0, world = 1;
    // The ranks on this node (MPI_COMM_TYPE_SHARED: those that share its memory) and this rank's
    // place among them: dist_share_cores shares out their CPUs, kernels/zero.cuh gives each a GPU.
    MPI_Comm node = MPI_COMM_NULL;
    int node_rank = 0, node_ranks = 1;
    // dist_share_cores: the OpenMP threads this rank uses where it lowered them, and OpenMP's
    // default before (0: not lowered; one process, no OpenMP, no CPU shared, or OMP_NUM_THREADS
    // set, which is the user's choice)
    int threads_split = 0, threads_default = 0;
    bool forced = false;  // VP_DIST_FORCE=1: the data-parallel code path even with one rank (tests)
    double timeout_s = 600;
    size_t piece = 0;  // VP_DIST_PIECE: the forced piece length of dist_piece_floats (0: by size)
    std::atomic<long long> busy_since_ms{0};  // 0: not in a collective
    const char* busy_what = "";
};
inline DistState& dist_state() {
    static DistState s;
    return s;
}
inline long long dist_now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Marks a collective in progress for the watchdog.
struct DistBusy {
    explicit DistBusy(const char* what) {
        dist_state().busy_what = what;
        dist_state().busy_since_ms = dist_now_ms();
    }
    ~DistBusy() { dist_state().busy_since_ms = 0; }
};

inline void dist_check(int err, const char* what) {
    if (err == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    runtime_error("another rank has probably died; see its output above. Resume from the last checkpoint",
                  "rank %d: %s failed: %s", dist_state().rank, what, msg);
}

// This process's CPU mask, sized for the kernel's CPUs (a cpu_set_t holds 1024; a kernel built for
// more refuses it): from the CPUs configured, doubled until sched_getaffinity takes it. Empty
// where it fails otherwise (then nothing is split).
inline CpuMask cpu_mask_of_this_process() {
    long configured = sysconf(_SC_NPROCESSORS_CONF);
    size_t cpus = std::max<size_t>(CPU_SETSIZE, configured > 0 ? (size_t)configured : 0);
    for (; cpus <= ((size_t)1 << 24); cpus *= 2) {
        CpuMask mask(CEIL_DIV(cpus, CPU_MASK_WORD_BITS), 0);
        if (sched_getaffinity(0, mask.size() * sizeof(unsigned long), reinterpret_cast<cpu_set_t*>(mask.data())) == 0) return mask;
        if (errno != EINVAL) break;
    }
    return {};
}

// Ranks that share CPUs share them out. OpenMP (libgomp) starts one thread per CPU of the process's
// affinity mask, so ranks whose masks overlap (mpirun --bind-to none, srun --cpu-bind=none, or
// several ranks bound to one socket: Open MPI's default binding above 2 ranks) each start a thread
// per shared CPU: 2 ranks on a 2-core machine ran 4 threads, and a step of the CPU trainer took
// 1.34 to 1.49 times as long as with 1 thread each (dev/results/2026-11-30-omp-share.md). Where
// OMP_NUM_THREADS is not set, each rank takes its fair share of its CPUs: the sum over them of
// 1 / (the number of ranks on the node whose mask holds that CPU), rounded down, at least 1.
// Ranks with disjoint masks (mpirun's binding to cores, srun --cpus-per-task) keep a thread per
// CPU. The results do not depend on the thread count (every reduction has a fixed order), only the
// speed. Collective over the node's ranks (s.node).
inline void dist_share_cores() {
    DistState& s = dist_state();
    CpuMask mine = cpu_mask_of_this_process();
    bool known = !mine.empty();
    // every rank's mask at the longest length among them (one exchange of equal counts)
    int words = (int)mine.size(), max_words = 0;
    std::vector<unsigned long> all;
    {
        DistBusy busy("the exchange of CPU masks");
        dist_check(MPI_Allreduce(&words, &max_words, 1, MPI_INT, MPI_MAX, s.node), "MPI_Allreduce of the CPU mask lengths");
        mine.resize(std::max(max_words, 1), 0);
        all.resize(mine.size() * s.node_ranks);
        dist_check(MPI_Allgather(mine.data(), (int)mine.size(), MPI_UNSIGNED_LONG, all.data(), (int)mine.size(), MPI_UNSIGNED_LONG, s.node),
                   "MPI_Allgather of the CPU masks");
    }
    if (!known) return;
#ifdef _OPENMP
    const char* set = getenv("OMP_NUM_THREADS");
    if (set && *set) return;
    int threads = dist_cpu_share(mine.data(), all.data(), s.node_ranks, mine.size());
    if (threads < omp_get_max_threads()) {
        s.threads_default = omp_get_max_threads();
        omp_set_num_threads(threads);
        s.threads_split = threads;
    }
#endif
}

inline void dist_init(int* argc, char*** argv) {
    DistState& s = dist_state();
    dist_check(MPI_Init(argc, argv), "MPI_Init");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &s.world);
    s.timeout_s = env_number("VP_DIST_TIMEOUT", s.timeout_s, 0, 1e7);
    s.forced = env_number("VP_DIST_FORCE", 0, 0, 1) == 1;
    s.piece = (size_t)env_number("VP_DIST_PIECE", 0, 1, 1 << 30);
    dist_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, s.rank, MPI_INFO_NULL, &s.node), "MPI_Comm_split_type");
    MPI_Comm_set_errhandler(s.node, MPI_ERRORS_RETURN);
    MPI_Comm_rank(s.node, &s.node_rank);
    MPI_Comm_size(s.node, &s.node_ranks);
    if (s.world > 1 && s.timeout_s > 0) {
        std::thread([] {
            DistState& st = dist_state();
            for (;;) {
                std::this_thread::sleep_for(std::chrono::milliseconds(200));
                long long since = st.busy_since_ms;
                if (since && dist_now_ms() - since > (long long)(st.timeout_s * 1000)) {
                    fprintf(stderr,
                            "error: rank %d: %s has waited %.0f s for the other ranks: one of them died or hangs (VP_DIST_TIMEOUT=%g)\n"
                            "  hint: see the other ranks' output; resume from the last checkpoint\n",
                            st.rank, st.busy_what, (dist_now_ms() - since) / 1000.0, st.timeout_s);
                    fflush(stderr);
                    _exit(VP_EXIT_RUNTIME);  // mpirun sees a failed rank and ends the job
                }
            }
        }).detach();
    }
    if (s.world > 1) dist_share_cores();  // after the watchdog: a rank that never comes is reported
    if (s.rank != 0 && !freopen("/dev/null", "w", stdout)) {}  // only rank 0 prints; errors still reach stderr
}
inline void dist_finalize() { MPI_Finalize(); }  // frees dist_state().node with the rest
inline int dist_rank() { return dist_state().rank; }
inline int dist_world() { return dist_state().world; }
inline int dist_node_ranks() { return dist_state().node_ranks; }
inline int dist_threads_split() { return dist_state().threads_split; }
inline int dist_threads_default() { return dist_state().threads_default; }
inline bool dist_forced() { return dist_state().forced; }
// The data-parallel code path runs: several ranks, or VP_DIST_FORCE=1 with one (tests).
inline bool dist_active() { return dist_world() > 1 || dist_forced(); }

inline void dist_barrier() {
    DistBusy busy("a barrier");
    dist_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

// Message tags of the exchanges in pieces (the collectives need none).
#define DIST_TAG_REDUCE 1
#define DIST_TAG_GATHER 2

// One exchange between this rank and every other rank j: send(j) goes to j and recv(j) is filled
// from it, each a DistPart (a pointer and a count within an int; a count of 0 sends or receives
// nothing), all in flight at once and waited for together (under the watchdog, as `what`).
struct DistPart {
    float* ptr;
    size_t count;
};
template <class Send, class Recv>
void dist_exchange(int tag, const char* what, Send send, Recv recv, std::vector<MPI_Request>* req) {
    int W = dist_world(), r = dist_rank();
    req->clear();
    DistBusy busy(what);
    for (int j = 0; j < W; j++) {
        if (j == r) continue;
        DistPart out = send(j), in = recv(j);
        if (out.count) {
            req->emplace_back();
            dist_check(MPI_Isend(out.ptr, (int)out.count, MPI_FLOAT, j, tag, MPI_COMM_WORLD, &req->back()), "MPI_Isend");
        }
        if (in.count) {
            req->emplace_back();
            dist_check(MPI_Irecv(in.ptr, (int)in.count, MPI_FLOAT, j, tag, MPI_COMM_WORLD, &req->back()), "MPI_Irecv");
        }
    }
    dist_check(MPI_Waitall((int)req->size(), req->data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
}

// Adds the W copies of a part, laid out in recv as W rows of `stride` floats (rank j's copy in row
// j), in rank order 0 + 1 + ... + (W-1), into out: the same float additions whatever the pieces.
inline void dist_sum_copies(float* out, const float* recv, size_t count, size_t stride, int W) {
    for (size_t i = 0; i < count; i++) {
        float sum = recv[i];
        for (int j = 1; j < W; j++) sum += recv[stride * j + i];
        out[i] = sum;
    }
}

// x[shard r] = sum over ranks of x[shard r], added in rank order, on rank r only; the rest of x
// is left as it was.
inline void dist_reduce_scatter_sum(float* x, size_t n) {
    int W = dist_world(), r = dist_rank();
    if (W == 1) return;
    size_t piece = dist_piece_floats(n, W, dist_state().piece);
    if (piece == 0) {  // one MPI_Alltoallv: every count and displacement fits an int
        DistShard mine = dist_shard(n, r, W);
        std::vector<float> recv(mine.count * W);
        std::vector<int> scount(W), sdispl(W), rcount(W), rdispl(W);
        for (int j = 0; j < W; j++) {
            DistShard s = dist_shard(n, j, W);
            scount[j] = (int)s.count;
            sdispl[j] = (int)s.offset;
            rcount[j] = (int)mine.count;
            rdispl[j] = (int)(mine.count * j);
        }
        {
            DistBusy busy("the gradient reduce-scatter");
            dist_check(MPI_Alltoallv(x, scount.data(), sdispl.data(), MPI_FLOAT, recv.data(), rcount.data(), rdispl.data(), MPI_FLOAT, MPI_COMM_WORLD),
                       "MPI_Alltoallv");
        }
        dist_sum_copies(x + mine.offset, recv.data(), mine.count, mine.count, W);
        return;
    }
    // in pieces: in exchange q, every rank sends its copy of piece q of rank j's shard to rank j
    // and receives the W-1 other copies of piece q of its own
    size_t slot = dist_slot(n, W);
    piece = std::min(piece, slot);
    std::vector<float> recv(piece * W);
    std::vector<MPI_Request> req;
    for (size_t q = 0; q < slot; q += piece) {
        DistShard mine = dist_piece_part(n, r, W, q, piece);
        dist_exchange(
            DIST_TAG_REDUCE, "the gradient reduce-scatter",
            [&](int j) {
                DistShard theirs = dist_piece_part(n, j, W, q, piece);
                return DistPart{x + theirs.offset, theirs.count};
            },
            [&](int j) { return DistPart{recv.data() + piece * j, mine.count}; }, &req);
        if (!mine.count) continue;
        memcpy(recv.data() + piece * r, x + mine.offset, mine.count * sizeof(float));  // this rank's own copy, in its row
        dist_sum_copies(x + mine.offset, recv.data(), mine.count, piece, W);
    }
}

// Every rank's shard of x (dist_shard(n, rank)) to every rank.
inline void dist_allgather(float* x, size_t n) {
    int W = dist_world(), r = dist_rank();
    if (W == 1) return;
    size_t piece = dist_piece_floats(n, W, dist_state().piece);
    if (piece == 0) {  // one MPI_Allgatherv, in place
        std::vector<int> count, displ;
        dist_shard_layout(n, W, &count, &displ);
        DistBusy busy("the all-gather");
        dist_check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, count.data(), displ.data(), MPI_FLOAT, MPI_COMM_WORLD), "MPI_Allgatherv");
        return;
    }
    // in pieces: in exchange q, every rank sends piece q of its shard to every other rank and
    // receives theirs in place
    size_t slot = dist_slot(n, W);
    piece = std::min(piece, slot);
    std::vector<MPI_Request> req;
    for (size_t q = 0; q < slot; q += piece) {
        DistShard mine = dist_piece_part(n, r, W, q, piece);
        dist_exchange(
            DIST_TAG_GATHER, "the all-gather", [&](int) { return DistPart{x + mine.offset, mine.count}; },
            [&](int j) {
                DistShard theirs = dist_piece_part(n, j, W, q, piece);
                return DistPart{x + theirs.offset, theirs.count};
            },
            &req);
    }
}

// Rank r's part of a piece, count[r] floats, into recv + displ[r] on rank 0 (recv is used on
// rank 0 only; there its own part is already in place). Ranks without a part send 0 floats.
inline void dist_gather_parts_to_root(float* recv, const float* send, const std::vector<int>& count, const std::vector<int>& displ) {
    int r = dist_rank();
    DistBusy busy("the checkpoint gather");
    if (r == 0)
        dist_check(MPI_Gatherv(MPI_IN_PLACE, 0, MPI_FLOAT, recv, count.data(), displ.data(), MPI_FLOAT, 0, MPI_COMM_WORLD), "MPI_Gatherv");
    else
        dist_check(MPI_Gatherv(send, count[r], MPI_FLOAT, nullptr, nullptr, nullptr, MPI_FLOAT, 0, MPI_COMM_WORLD), "MPI_Gatherv");
}

// x = sum over ranks of x on every rank, in rank order (bit-identical everywhere).
inline void dist_allreduce_sum(float* x, size_t n) {
    dist_reduce_scatter_sum(x, n);
    dist_allgather(x, n);
}

// Small host values (losses, counters): gathered whole, added in rank order.
inline void dist_allreduce_sum(double* x, int n) {
    int W = dist_world();
    if (W == 1) return;
    std::vector<double> all((size_t)n * W);
    {
        DistBusy busy("a scalar all-reduce");
        dist_check(MPI_Allgather(x, n, MPI_DOUBLE, all.data(), n, MPI_DOUBLE, MPI_COMM_WORLD), "MPI_Allgather");
    }
    for (int i = 0; i < n; i++) {
        double s = all[i];
        for (int j = 1; j < W; j++) s += all[(size_t)j * n + i];
        x[i] = s;
    }
}

#else  // a single process: every collective is the identity

inline void dist_init(int*, char***) {}
inline void dist_finalize() {}
inline int dist_rank() { return 0; }
inline int dist_world() { return 1; }
inline int dist_node_ranks() { return 1; }
inline int dist_threads_split() { return 0; }
inline int dist_threads_default() { return 0; }
inline bool dist_forced() { return false; }
inline bool dist_active() { return false; }
inline void dist_barrier() {}
inline void dist_reduce_scatter_sum(float*, size_t) {}
inline void dist_allgather(float*, size_t) {}
inline void dist_gather_parts_to_root(float*, const float*, const std::vector<int>&, const std::vector<int>&) {}
inline void dist_allreduce_sum(float*, size_t) {}
inline void dist_allreduce_sum(double*, int) {}

#endif

// A flat n-float array handed to rank 0 in pieces of at most `chunk` floats, in order, for a
// checkpoint written as it streams (host/checkpoint.h CheckpointWriter): rank 0 never holds more
// than one piece beyond the model, whatever the model's size. For each piece [off, off + count):
// fill(off, count, dst) writes elements [off, off + count) of the array at dst (a rank is only
// asked for elements it holds), and rank 0 calls consume(piece, count).
//   sharded (ZeRO-1 state: rank r holds dist_shard(n, r)): collective, every rank must call it;
//     each rank fills its part of each piece (dist_for_each_owner_part) and rank 0 gathers them;
//   not sharded (state every rank holds whole): rank 0 alone fills every piece, no communication.
template <class Fill, class Consume>
void dist_stream_to_root(size_t n, bool sharded, size_t chunk, Fill fill, Consume consume) {
    int W = dist_world(), r = dist_rank();
    if (!sharded && r != 0) return;
    chunk = std::max<size_t>(1, std::min(chunk, DIST_MAX_COUNT));  // a part's count and offset in the piece are MPI ints
    std::vector<float> piece(r == 0 ? std::min(n, chunk) : 0), mine;
    std::vector<int> count(W), displ(W);
    for (size_t off = 0; off < n; off += chunk) {
        size_t c = std::min(chunk, n - off);
        if (!sharded || W == 1) {
            fill(off, c, piece.data());
        } else {
            std::fill(count.begin(), count.end(), 0);
            std::fill(displ.begin(), displ.end(), 0);
            dist_for_each_owner_part(off, c, n, W, [&](int owner, size_t at, size_t k) {
                count[owner] = (int)k;
                displ[owner] = (int)at;
            });
            if (r == 0) {
                if (count[0]) fill(off + displ[0], (size_t)count[0], piece.data() + displ[0]);
            } else if (count[r]) {
                mine.resize(count[r]);
                fill(off + displ[r], (size_t)count[r], mine.data());
            }
            dist_gather_parts_to_root(piece.data(), mine.data(), count, displ);
        }
        if (r == 0) consume(piece.data(), c);
    }
}
