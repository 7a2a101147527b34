// tests/emu/nccl_emu.cpp: NCCL's collectives over MPI for the CUDA emulator (see nccl_emu.h).
#include "nccl_emu.h"

#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <vector>

struct VpEmuNcclComm {
    MPI_Comm comm;
    int rank, nranks;
};

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
    *async_error = ncclSuccess;  // every collective here completes (or fails) before it returns
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
const char* ncclGetLastError(ncclComm_t) { return ""; }

static ncclResult_t check_args(ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm) {
    if (!comm || type != ncclFloat32 || op != ncclSum) {
        fprintf(stderr, "NCCL emulator: only float32 sums on an initialised communicator are emulated\n");
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
    if (ncclResult_t r = check_args(type, op, comm)) return r;
    return mpi_result(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, MPI_FLOAT, MPI_SUM, comm->comm), "MPI_Allreduce");
}

// NCCL's in-place form: recv == send + rank * recv_count
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recv_count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
    if (ncclResult_t r = check_args(type, op, comm)) return r;
    std::vector<float> mine(recv_count);
    ncclResult_t r = mpi_result(MPI_Reduce_scatter_block(send, mine.data(), (int)recv_count, MPI_FLOAT, MPI_SUM, comm->comm), "MPI_Reduce_scatter_block");
    if (r == ncclSuccess) memcpy(recv, mine.data(), recv_count * sizeof(float));
    return r;
}

// NCCL's in-place form: send == recv + rank * send_count
ncclResult_t ncclAllGather(const void* send, void* recv, size_t send_count, ncclDataType_t type, ncclComm_t comm, cudaStream_t) {
    if (ncclResult_t r = check_args(type, ncclSum, comm)) return r;
    const void* in_place = static_cast<const char*>(recv) + (size_t)comm->rank * send_count * sizeof(float);
    return mpi_result(MPI_Allgather(send == in_place ? MPI_IN_PLACE : send, (int)send_count, MPI_FLOAT, recv, (int)send_count, MPI_FLOAT, comm->comm),
                      "MPI_Allgather");
}
