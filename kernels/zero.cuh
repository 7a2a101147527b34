// kernels/zero.cuh: data parallel on the GPU: the NCCL communicator and the collectives that
// data-parallel training and the ZeRO-1 optimizer need, on device buffers.
//
//   nccl_init                 after dist_init (host/distributed.h, MPI): picks this rank's GPU,
//                             creates the NCCL communicator, checks it with one all-reduce
//   nccl_finalize             destroys it (before MPI_Finalize)
//   nccl_allreduce_sum_slices in place, a list of (pointer, count) slices summed over the ranks as
//                             one NCCL group: the gradients of a layer, while the backward goes on
//                             (ZeRO-0). PyTorch: DDP's bucketed dist.all_reduce of the gradients
//   nccl_reduce_sum_slices_to_owners   the same slices of a flat vector, each part summed onto
//                             the rank whose dist_shard holds it only (ZeRO-1: half the traffic of
//                             the all-reduce). PyTorch: dist.reduce(t, dst=owner) per part
//   nccl_all_gather           in place: every rank's own slot of a flat vector to every rank
//                             (ZeRO-1's weights after the update, bf16 in the BF16 build)
//                             PyTorch: dist.all_gather_into_tensor(out, out[slot of rank])
//   nccl_broadcast_from_owners   a range of a flat vector, from the ranks whose shards hold it,
//                             into a full copy on every rank (ResFormer's fp32 lambdas under ZeRO-1)
//   nccl_allreduce_sum        in place, whole buffer (the start-up check)   PyTorch: dist.all_reduce
//   nccl_wait                 waits for the collectives of a stream, watching for NCCL errors and
//                             for a peer that never arrives (VP_DIST_TIMEOUT)
//
// Process model: mpirun (or srun) starts one process per GPU; MPI gives the rank, the world and
// the node-local rank (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED): the ranks sharing this node's
// memory), which picks the GPU: cudaSetDevice(local rank). Where each rank sees exactly one GPU
// (Slurm --gpus-per-task=1, or a CUDA_VISIBLE_DEVICES per rank) it takes device 0. Two ranks on
// one GPU are refused before NCCL sees them (NCCL does not support it and may hang). Rank 0's
// ncclGetUniqueId travels to the others over MPI_Bcast; ncclCommInitRank then builds the
// communicator. MPI stays the launcher and carries the small host-side traffic (the loss, the
// optimizer-state gather of a checkpoint); NCCL carries the per-step device traffic.
//
// The shard layout: ZeRO-1 shards the flat parameter vector of n floats exactly as the CPU build
// does, dist_shard(n, r, W) (host/distributed.h): rank r owns [r * slot, (r + 1) * slot) clipped
// to n, slot = ceil(n / W). NCCL's all-gather takes one count for every rank, so the trainer pads
// its floatX weights to W * slot elements (at most W - 1 of padding, never read by a kernel) and
// gathers them in place: rank r's slot is its shard, no staging buffer and no unpacking.
//
// Determinism (what NCCL promises, as far as its maintainers have stated it; none of this has
// been measured here yet):
//   - All ranks receive the same bits: a sum is computed once and then forwarded unchanged
//     (NVIDIA/nccl#855, sjeaugey: "all ranks should get the same value, always").
//   - The order of the additions depends on the algorithm, protocol and channel count, which
//     NCCL's tuner picks from the message size, the number of nodes and GPUs per node and the
//     link bandwidths (NVIDIA/nccl#754), and on which rank starts each chunk (NVIDIA/nccl#157).
//     Our message sizes are fixed for a run (n never changes), so with the same world size,
//     node layout, rank-to-GPU mapping and NCCL version, every step and every rerun adds in the
//     same order: run-to-run deterministic. A different world size or topology gives a different
//     order, i.e. a result equal to fp32 round-off, not bit-equal (as on the CPU build with a
//     different world size).
//   - Pinning NCCL_ALGO / NCCL_PROTO is not needed for this: the order is already fixed for a
//     fixed configuration. NCCL's environment-variable page
//     (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html) lists both in its "Debugging"
//     section, whose variables "should not be used in production nor retained in scripts, or
//     only as workaround". We do not set them.
//   - NVLink SHARP (NVLS: in-switch reductions on NVSwitch systems such as 8x H100/H200 SXM) is
//     the exception: its reductions are "not deterministic between different calls"
//     (NVIDIA/nccl#1497, NCCL maintainers, 2024, who hope a future driver fixes it;
//     NCCL_NVLS_ENABLE=0 restored run-to-run equality there). nccl_init
//     therefore sets NCCL_NVLS_ENABLE=0 unless the environment already sets it:
//     NCCL_NVLS_ENABLE=1 trades bit-reproducibility for NVLS bandwidth.
//
// Failure. NCCL kernels spin until their peers' data arrives, so a dead or frozen peer would
// block cudaStreamSynchronize forever. nccl_wait therefore polls the stream instead, and between
// polls asks ncclCommGetAsyncError (a network error, or a peer's connection closing, shows up
// there); on such an error, or once the wait exceeds VP_DIST_TIMEOUT seconds (the same setting
// as the MPI watchdog of host/distributed.h, default 600, 0 = wait forever), it prints which
// collective failed, calls ncclCommAbort (which ends the spinning kernels and frees the
// communicator; blocking communicators suffice for this because we never block inside NCCL
// itself, only in our own polling loop) and exits 1, upon which mpirun ends the job. If
// ncclCommAbort itself hung, the MPI watchdog thread ends the process one timeout later.
// Communicator setup (ncclCommInitRank, which waits for every rank) runs under that watchdog.
// Limits: a peer that dies is noticed by mpirun anyway (it ends the job within about a second);
// the polling matters for hangs and for network failures. None of this has run on a GPU yet.
//
// Without USE_MPI (the plain GPU build) every call is the identity of a single rank, as in
// host/distributed.h.
//
// defines: nccl_init, nccl_finalize, nccl_allreduce_sum_slices, nccl_reduce_sum_slices_to_owners, nccl_all_gather,
//          nccl_broadcast_from_owners, nccl_allreduce_sum, nccl_wait
#pragma once

#include <algorithm>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "host/distributed.h"
#include "kernels/common.cuh"

#ifdef USE_MPI
#include <nccl.h>

#include <chrono>
#include <thread>
#endif

namespace gpu {

#ifdef USE_MPI
// ----------------------------------------------------------------------------
// NCCL (one communicator per process, over MPI_COMM_WORLD's ranks)

struct NcclState {
    ncclComm_t comm = nullptr;
    int device = 0;  // the GPU of this rank: its place among the node's ranks (dist_state().node_rank)
};
inline NcclState& nccl_state() {
    static NcclState s;
    return s;
}

constexpr const char* NCCL_HINT_PEER = "another rank has probably died, hangs, or lost its network; see its output above (NCCL_DEBUG=WARN says more). "
                                       "Resume from the last checkpoint";
constexpr const char* NCCL_HINT_SETUP = "check that every rank sees its GPU and that the nodes reach each other: NCCL_SOCKET_IFNAME, NCCL_IB_HCA; "
                                        "NCCL_DEBUG=INFO shows what NCCL found (docs/distributed.md)";

// Reports a failed collective and ends the process: the message first (so it is out even if
// the abort hangs), then ncclCommAbort (ends NCCL's spinning kernels), then exit 1. The MPI
// watchdog (DistBusy) ends the process one VP_DIST_TIMEOUT later should the abort hang.
[[noreturn]] inline void nccl_fail(const char* hint, const char* fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    NcclState& s = nccl_state();
    fprintf(stderr, "error: rank %d: %s\n", dist_rank(), msg);
    fflush(stderr);
    if (s.comm) {
        DistBusy busy("ncclCommAbort after a failed collective");
        ncclCommAbort(s.comm);
        s.comm = nullptr;
    }
    runtime_error(hint, "rank %d: NCCL failed (see above); the communicator was aborted", dist_rank());
}

inline void nccl_check_(ncclResult_t r, const char* expr, const char* file, int line) {
    if (r == ncclSuccess) return;
    const char* detail = ncclGetLastError(nccl_state().comm);
    nccl_fail(r == ncclRemoteError || r == ncclSystemError ? NCCL_HINT_PEER : NCCL_HINT_SETUP, "NCCL error at %s:%d: %s (%s)\n  in: %s", file, line,
              ncclGetErrorString(r), detail && detail[0] ? detail : "no detail", expr);
}
#define ncclCheck(r) (gpu::nccl_check_((r), #r, __FILE__, __LINE__))

inline ncclComm_t nccl_comm() {
    ncclComm_t c = nccl_state().comm;
    if (!c) runtime_error(nullptr, "internal: an NCCL collective before nccl_init");
    return c;
}

// Waits until `stream` has finished, without blocking inside CUDA: a collective whose peer
// never arrives would otherwise spin forever. `what` names the collective in the error.
inline void nccl_wait(cudaStream_t stream, const char* what) {
    double timeout_s = dist_state().timeout_s;
    long long t0 = dist_now_ms();
    for (int polls = 0;; polls++) {
        cudaError_t e = cudaStreamQuery(stream);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) cudaCheck(e);
        ncclResult_t async = ncclSuccess;
        ncclCheck(ncclCommGetAsyncError(nccl_comm(), &async));
        if (async != ncclSuccess && async != ncclInProgress) {
            const char* detail = ncclGetLastError(nccl_state().comm);
            nccl_fail(NCCL_HINT_PEER, "%s failed: %s (%s)", what, ncclGetErrorString(async), detail && detail[0] ? detail : "no detail");
        }
        long long waited = dist_now_ms() - t0;
        if (timeout_s > 0 && waited > (long long)(timeout_s * 1000))
            nccl_fail(NCCL_HINT_PEER, "%s has waited %.0f s for the other ranks: one of them died or hangs (VP_DIST_TIMEOUT=%g)", what, waited / 1000.0, timeout_s);
        // spin briefly (a collective of a small model takes well under a millisecond), then sleep
        if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
}

// In place: every (pointer, count) slice = its sum over the ranks. One NCCL group: the slices of
// a layer (up to 16 tensors, host/params.h param_slices) go out as one operation instead of 16
// small ones. Every rank must pass the same slices in the same order.
inline void nccl_allreduce_sum_slices(const std::vector<std::pair<float*, size_t>>& slices, cudaStream_t stream) {
    ncclCheck(ncclGroupStart());
    for (const auto& s : slices) ncclCheck(ncclAllReduce(s.first, s.first, s.second, ncclFloat32, ncclSum, nccl_comm(), stream));
    ncclCheck(ncclGroupEnd());
}

// Each (pointer, count) slice of the flat vector `base` of n floats: every part of it summed
// over the ranks onto the rank whose dist_shard holds that part (in place there; the other ranks'
// copies are left as they were, partial sums). One NCCL group, like the all-reduce above; a
// slice crossing a shard boundary becomes one ncclReduce per owner. With 2 ranks a reduce adds
// the same two numbers as the all-reduce (bit-identical); with more, NCCL may add them in
// another order than its all-reduce (fp32 round-off, still fixed run to run).
inline void nccl_reduce_sum_slices_to_owners(const std::vector<std::pair<float*, size_t>>& slices, float* base, size_t n, cudaStream_t stream) {
    ncclCheck(ncclGroupStart());
    for (const auto& s : slices)
        dist_for_each_owner_part((size_t)(s.first - base), s.second, n, dist_world(), [&](int owner, size_t at, size_t count) {
            ncclCheck(ncclReduce(s.first + at, s.first + at, count, ncclFloat32, ncclSum, owner, nccl_comm(), stream));
        });
    ncclCheck(ncclGroupEnd());
}

inline ncclDataType_t nccl_type_of(const float*) { return ncclFloat32; }
#ifdef ENABLE_BF16
inline ncclDataType_t nccl_type_of(const floatX*) { return ncclBfloat16; }
#endif

// In place: rank r's slot [r * slot, (r + 1) * slot) of buf (W * slot elements) to every rank.
template <typename T>
inline void nccl_all_gather(T* buf, size_t slot, cudaStream_t stream) {
    ncclCheck(ncclAllGather(buf + (size_t)dist_rank() * slot, buf, slot, nccl_type_of(buf), nccl_comm(), stream));
}

// dst[0, count) = the flat vector's [a, a + count) on every rank, where each rank holds only its
// own dist_shard of that vector (of n floats), at own_shard (its element a' at own_shard[a' -
// offset]). One broadcast per owner of a part, as one group.
inline void nccl_broadcast_from_owners(float* dst, const float* own_shard, size_t a, size_t count, size_t n, cudaStream_t stream) {
    int me = dist_rank();
    size_t my_offset = dist_shard(n, me, dist_world()).offset;
    ncclCheck(ncclGroupStart());
    dist_for_each_owner_part(a, count, n, dist_world(), [&](int owner, size_t at, size_t part) {
        const float* send = owner == me ? own_shard + (a + at - my_offset) : dst + at;  // NCCL reads send on the root only
        ncclCheck(ncclBroadcast(send, dst + at, part, ncclFloat32, owner, nccl_comm(), stream));
    });
    ncclCheck(ncclGroupEnd());
}

// In place: buf[i] = sum over ranks of buf[i].
inline void nccl_allreduce_sum(float* buf, size_t n, cudaStream_t stream) {
    ncclCheck(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, nccl_comm(), stream));
}

// Node-local rank -> GPU, then the communicator. Call after dist_init, before any other CUDA call
// (the model's allocations must land on this rank's GPU). Collective over all ranks.
inline void nccl_init() {
    NcclState& s = nccl_state();
    if (s.comm) return;
    int rank = dist_rank(), world = dist_world();

    // the ranks on this node and this rank's place among them (dist_init)
    MPI_Comm node = dist_state().node;
    const int local_rank = dist_state().node_rank, local_size = dist_state().node_ranks;
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0)
        runtime_error("run each rank on a machine with an NVIDIA GPU, or use the CPU build (make train_cpu USE_MPI=1)", "rank %d: no CUDA device visible (%s)", rank,
                      e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    s.device = ndev == 1 ? 0 : local_rank;  // one visible GPU per rank (Slurm --gpus-per-task=1): device 0
    if (s.device >= ndev)
        usage_error("start at most one rank per GPU on each node (mpirun -np <GPUs>, or srun --ntasks-per-node=<GPUs>)",
                    "rank %d is rank %d of %d on its node, which has only %d GPUs visible", rank, local_rank, local_size, ndev);
    cudaCheck(cudaSetDevice(s.device));

    // two ranks on one GPU (e.g. CUDA_VISIBLE_DEVICES=0 for all of them): refuse it here, clearly
    char bus[32] = {0};
    cudaCheck(cudaDeviceGetPCIBusId(bus, sizeof(bus), s.device));
    std::vector<char> buses(sizeof(bus) * local_size);
    {
        DistBusy busy("the GPU assignment check");
        dist_check(MPI_Allgather(bus, sizeof(bus), MPI_CHAR, buses.data(), sizeof(bus), MPI_CHAR, node), "MPI_Allgather");
    }
    for (int j = 0; j < local_size; j++)
        if (j != local_rank && strncmp(bus, buses.data() + j * sizeof(bus), sizeof(bus)) == 0)
            usage_error("give every rank its own GPU (unset CUDA_VISIBLE_DEVICES, or one device per rank)",
                        "rank %d and local rank %d of its node both use the GPU at PCI %s; NCCL needs one GPU per rank", rank, j, bus);

    // NVLS reductions are not run-to-run deterministic (see the top of the file)
    bool nvls_off = !getenv("NCCL_NVLS_ENABLE");
    if (nvls_off) setenv("NCCL_NVLS_ENABLE", "0", 0);

    ncclUniqueId id;
    if (rank == 0) ncclCheck(ncclGetUniqueId(&id));
    {
        DistBusy busy("the NCCL id broadcast");
        dist_check(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
    }
    {
        DistBusy busy("NCCL communicator setup (ncclCommInitRank)");
        ncclResult_t r = ncclCommInitRank(&s.comm, world, id, rank);
        if (r != ncclSuccess) {
            s.comm = nullptr;
            nccl_fail(NCCL_HINT_SETUP, "ncclCommInitRank (%d ranks) failed: %s (%s)", world, ncclGetErrorString(r), ncclGetLastError(nullptr));
        }
    }

    // a first all-reduce now, not at the end of the first step: NCCL connects its transports
    // lazily, so a wrong network interface or a broken peer shows up here, with this message
    cudaStream_t st;
    cudaCheck(cudaStreamCreate(&st));
    float* d = (float*)cuda_malloc_check(sizeof(float), "the NCCL start-up check");
    float one = 1.0f, sum = 0.0f;
    cudaCheck(cudaMemcpyAsync(d, &one, sizeof(float), cudaMemcpyHostToDevice, st));
    nccl_allreduce_sum(d, 1, st);
    // wait (with nccl_wait's watch for a dead peer) before copying back: a copy into pageable
    // memory blocks the host until the all-reduce is done, which could be forever
    nccl_wait(st, "the NCCL start-up all-reduce");
    cudaCheck(cudaMemcpy(&sum, d, sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaFree(d));
    cudaCheck(cudaStreamDestroy(st));
    if (sum != (float)world)
        runtime_error(NCCL_HINT_SETUP, "rank %d: the NCCL start-up all-reduce of 1 over %d ranks gave %g", rank, world, sum);

    int version = 0;
    ncclCheck(ncclGetVersion(&version));
    printf("nccl: %d ranks, NCCL %d.%d.%d (rank 0 on GPU %d, %d ranks on its node)%s\n", world, version / 10000, version / 100 % 100, version % 100,
           s.device, dist_state().node_ranks,
           nvls_off ? ", NCCL_NVLS_ENABLE=0 (deterministic sums; set NCCL_NVLS_ENABLE=1 for NVLink SHARP)" : "");
}

inline void nccl_finalize() {
    NcclState& s = nccl_state();
    if (s.comm) ncclCheck(ncclCommDestroy(s.comm));  // every operation has completed (nccl_wait)
    s.comm = nullptr;
}

#else  // a single process: every collective is the identity

inline void nccl_init() {}
inline void nccl_finalize() {}
inline void nccl_allreduce_sum_slices(const std::vector<std::pair<float*, size_t>>&, cudaStream_t) {}
inline void nccl_reduce_sum_slices_to_owners(const std::vector<std::pair<float*, size_t>>&, float*, size_t, cudaStream_t) {}
template <typename T>
inline void nccl_all_gather(T*, size_t, cudaStream_t) {}
// one rank owns everything: its shard is the vector
inline void nccl_broadcast_from_owners(float* dst, const float* own_shard, size_t a, size_t count, size_t, cudaStream_t stream) {
    cudaCheck(cudaMemcpyAsync(dst, own_shard + a, count * sizeof(float), cudaMemcpyDeviceToDevice, stream));
}
inline void nccl_allreduce_sum(float*, size_t, cudaStream_t) {}
inline void nccl_wait(cudaStream_t stream, const char*) { cudaCheck(cudaStreamSynchronize(stream)); }

#endif

}  // namespace gpu
