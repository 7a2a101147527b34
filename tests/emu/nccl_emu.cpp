// tests/emu/nccl_emu.cpp: NCCL's collectives over MPI for the CUDA emulator (see nccl_emu.h).
#include "nccl_emu.h"

#include <mpi.h>

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

struct VpEmuNcclComm {
    MPI_Comm comm;
    int rank, nranks;
    long collectives = 0;           // started so far on this rank
    bool async_error = false;       // an injected fault has "closed a peer connection"
};

// Fault injection for the tests of the trainer's failure handling (nccl_wait in kernels/zero.cuh):
// VP_EMU_NCCL_FAULT=hang:R:N stops rank R (SIGSTOP) as it starts its N-th collective, so its
// peers' collectives never complete, as with a frozen node; error:R:N makes rank R's
// ncclCommGetAsyncError report ncclRemoteError from its N-th collective on, as when NCCL sees a
// peer's connection close. Collectives count from 1 after ncclCommInitRank, the start-up check
// included.
struct Fault {
    char kind = 0;  // 'h', 'e' or 0
    int rank = -1;
    long at = 0;
};
static Fault fault() {
    static Fault f = [] {
        Fault x;
        const char* v = getenv("VP_EMU_NCCL_FAULT");
        char kind[16] = {0};
        if (v && (sscanf(v, "%15[a-z]:%d:%ld", kind, &x.rank, &x.at) != 3 || (strcmp(kind, "hang") && strcmp(kind, "error")))) {
            fprintf(stderr, "NCCL emulator: VP_EMU_NCCL_FAULT=%s: use hang:RANK:N or error:RANK:N\n", v);
            exit(2);
        }
        if (v) x.kind = kind[0];
        return x;
    }();
    return f;
}
static void count_collective(ncclComm_t comm) {
    long n = ++comm->collectives;
    Fault f = fault();
    if (comm->rank != f.rank || n != f.at) return;
    if (f.kind == 'e') comm->async_error = true;
    if (f.kind == 'h') {
        fprintf(stderr, "NCCL emulator: rank %d stops itself at collective %ld (VP_EMU_NCCL_FAULT)\n", comm->rank, n);
        raise(SIGSTOP);
    }
}

static ncclResult_t mpi_result(int err, const char* what) {
    if (err == MPI_SUCCESS) return ncclSuccess;
    fprintf(stderr, "NCCL emulator: %s failed (MPI error %d)\n", what, err);
    return ncclSystemError;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    memset(id, 0, sizeof(*id));
    snprintf(id->internal, sizeof(id->internal), "vp-emu-nccl");
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    int world_rank = 0, world_size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (strcmp(id.internal, "vp-emu-nccl") != 0 || nranks != world_size || rank != world_rank) {
        fprintf(stderr, "NCCL emulator: ncclCommInitRank(%d ranks, rank %d) on an MPI world of %d with rank %d, or a foreign id\n", nranks, rank, world_size,
                world_rank);
        return ncclInvalidArgument;
    }
    VpEmuNcclComm* c = new VpEmuNcclComm{MPI_COMM_NULL, rank, nranks};
    ncclResult_t r = mpi_result(MPI_Comm_dup(MPI_COMM_WORLD, &c->comm), "MPI_Comm_dup");
    if (r != ncclSuccess) {
        delete c;
        return r;
    }
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
    MPI_Comm_free(&comm->comm);
    delete comm;
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    delete comm;  // the MPI communicator is left to MPI_Abort / the job's end
    return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
    if (!comm) return ncclInvalidArgument;
    *async_error = comm->async_error ? ncclRemoteError : ncclSuccess;
    return ncclSuccess;
}
ncclResult_t ncclGetVersion(int* version) {
    *version = 0;  // printed as "NCCL 0.0.0": the emulator, not a real NCCL
    return ncclSuccess;
}
const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
        case ncclSuccess: return "no error";
        case ncclSystemError: return "unhandled system error (emulated over MPI)";
        case ncclInvalidArgument: return "invalid argument";
        case ncclRemoteError: return "remote process exited or there was a network error";
        default: return "NCCL emulator error";
    }
}
const char* ncclGetLastError(ncclComm_t comm) {
    return comm && comm->async_error ? "a peer closed its connection (injected by VP_EMU_NCCL_FAULT)" : "";
}

// Reductions: float32 sums. Moves (all-gather, broadcast): float32 or bf16, carried as 16-bit
// words (MPI has no bf16; nothing is added). Returns the MPI type and the element size in bytes.
static ncclResult_t check_args(ncclDataType_t type, bool reduction, ncclRedOp_t op, ncclComm_t comm, MPI_Datatype* mpi_type, size_t* bytes) {
    bool ok = comm && (type == ncclFloat32 || (type == ncclBfloat16 && !reduction)) && op == ncclSum;
    if (!ok) {
        fprintf(stderr, "NCCL emulator: only float32 sums, and float32 or bf16 gathers and broadcasts, on an initialised communicator are emulated\n");
        return ncclInvalidArgument;
    }
    *mpi_type = type == ncclFloat32 ? MPI_FLOAT : MPI_UINT16_T;
    *bytes = type == ncclFloat32 ? 4 : 2;
    return ncclSuccess;
}
static ncclResult_t check_root(int root, ncclComm_t comm) {
    if (root < 0 || root >= comm->nranks) {
        fprintf(stderr, "NCCL emulator: root %d outside the %d ranks\n", root, comm->nranks);
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

// A collective starts when its stream gets to it (cuda_emu.h, "Streams") as a nonblocking MPI
// collective, and stays in flight until MPI_Test says it is complete: like NCCL's kernels, it
// waits for its peers without blocking the host, so the trainer's own polling (nccl_wait) and
// its timeout run as they would on a GPU. An MPI failure then has no caller to return to, so it
// ends the process, as MPI's default error handler would.
static void run_mpi(int err, const char* what) {
    if (mpi_result(err, what) != ncclSuccess) abort();
}
template <typename Start>
static void enqueue_collective(ncclComm_t comm, cudaStream_t stream, const char* what, Start start) {
    auto req = std::make_shared<MPI_Request>(MPI_REQUEST_NULL);
    vp_emu::enqueue_async(
        stream,
        [=]() {
            count_collective(comm);
            run_mpi(start(req.get()), what);
        },
        [=]() {
            int done = 0;
            run_mpi(MPI_Test(req.get(), &done, MPI_STATUS_IGNORE), what);
            return done != 0;
        });
}

// Groups only batch launches in NCCL; the emulated collectives are queued in issue order anyway.
ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    MPI_Datatype mt;
    size_t bytes;
    if (ncclResult_t r = check_args(type, true, op, comm, &mt, &bytes)) return r;
    MPI_Comm mc = comm->comm;
    enqueue_collective(comm, stream, "MPI_Iallreduce", [=](MPI_Request* req) {
        return MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, mt, MPI_SUM, mc, req);
    });
    return ncclSuccess;
}

// NCCL's in-place form: send == recv + rank * send_count
ncclResult_t ncclAllGather(const void* send, void* recv, size_t send_count, ncclDataType_t type, ncclComm_t comm, cudaStream_t stream) {
    MPI_Datatype mt;
    size_t bytes;
    if (ncclResult_t r = check_args(type, false, ncclSum, comm, &mt, &bytes)) return r;
    const void* in_place = static_cast<const char*>(recv) + (size_t)comm->rank * send_count * bytes;
    MPI_Comm mc = comm->comm;
    enqueue_collective(comm, stream, "MPI_Iallgather", [=](MPI_Request* req) {
        return MPI_Iallgather(send == in_place ? MPI_IN_PLACE : send, (int)send_count, mt, recv, (int)send_count, mt, mc, req);
    });
    return ncclSuccess;
}

// recv (on root only) = the sum of every rank's send; in place on root when send == recv.
ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
    MPI_Datatype mt;
    size_t bytes;
    if (ncclResult_t r = check_args(type, true, op, comm, &mt, &bytes)) return r;
    if (ncclResult_t r = check_root(root, comm)) return r;
    bool in_place = comm->rank == root && send == recv;
    MPI_Comm mc = comm->comm;
    enqueue_collective(comm, stream, "MPI_Ireduce", [=](MPI_Request* req) {
        return MPI_Ireduce(in_place ? MPI_IN_PLACE : send, recv, (int)count, mt, MPI_SUM, root, mc, req);
    });
    return ncclSuccess;
}

// recv on every rank = root's send (NCCL reads send on root only).
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t stream) {
    MPI_Datatype mt;
    size_t bytes;
    if (ncclResult_t r = check_args(type, false, ncclSum, comm, &mt, &bytes)) return r;
    if (ncclResult_t r = check_root(root, comm)) return r;
    bool copy_first = comm->rank == root && send != recv;
    MPI_Comm mc = comm->comm;
    enqueue_collective(comm, stream, "MPI_Ibcast", [=](MPI_Request* req) {
        if (copy_first) memmove(recv, send, count * bytes);  // MPI broadcasts one buffer in place
        return MPI_Ibcast(recv, (int)count, mt, root, mc, req);
    });
    return ncclSuccess;
}
