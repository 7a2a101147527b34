// tests/emu/nccl_emu.h: the part of NCCL that kernels/zero.cuh uses, for the CUDA emulator
// (tests/emu/cuda_emu.h), carried over MPI: each rank is one emulated GPU in its own process
// (mpirun -np 2 build/emu/vanilla-mpi/train_fp32), device memory is host memory, so a collective
// is the nonblocking MPI collective of the same meaning on the same buffers, started when its
// stream gets to it (cuda_emu.h, "Streams") and in flight until its peers arrive. This lets the
// data-parallel GPU code -- the per-layer all-reduce (or ZeRO-1's reduce to the owners) on its own
// stream, the sharded AdamW and its bf16 all-gather, the lambdas' broadcast, the gathered
// checkpoint, the polling wait with its timeout -- run with several
// ranks on a machine without GPUs. VP_EMU_NCCL_FAULT (nccl_emu.cpp) injects a frozen rank or a
// closed connection. What it cannot show: NCCL's own behaviour (its summation order, transports,
// its real error paths).
#pragma once

#include <cstddef>

#include "cuda_emu.h"

enum ncclResult_t {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
};
enum ncclDataType_t { ncclFloat32 = 7, ncclFloat = 7, ncclBfloat16 = 9 };  // NCCL's own values
enum ncclRedOp_t { ncclSum = 0 };
struct ncclUniqueId {
    char internal[128];
};
struct VpEmuNcclComm;
typedef VpEmuNcclComm* ncclComm_t;

ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error);
ncclResult_t ncclGetVersion(int* version);
const char* ncclGetErrorString(ncclResult_t r);
const char* ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void* send, void* recv, size_t send_count, ncclDataType_t type, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t stream);
