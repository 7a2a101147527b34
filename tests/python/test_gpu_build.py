"""What make test's GPU compile check built (build/check, gpu.mk), read without a GPU."""
import shutil
import subprocess

import pytest

from test_trainer_cli import REPO

GPU_BUILD = REPO / "build" / "check"
TRAINERS = ["vanilla/train_bf16", "vanilla/train_fp32", "vanilla-mpi/train_bf16"]


@pytest.mark.parametrize("trainer", TRAINERS)
def test_gpu_trainer_initializes_on_every_openmp_thread(trainer):
    # host/params.h's init draws the normals in a `#pragma omp parallel for`, which nvcc's host
    # compiler ignores without -fopenmp (gpu.mk NVCC_HOST_OMP): the trainer would then start on one
    # core, a minute for 1.5B parameters. Built with it, the binary calls libgomp's GOMP_parallel.
    binary = GPU_BUILD / trainer
    if not binary.exists():
        pytest.skip(f"{binary} is not built (make gpu-compile-check-fast needs nvcc; the MPI trainer needs MPI and NCCL)")
    if shutil.which("nm") is None:
        pytest.skip("no nm (binutils)")
    symbols = subprocess.run(["nm", "-D", "--undefined-only", str(binary)], capture_output=True, text=True, check=True).stdout
    assert "GOMP_parallel" in symbols, f"{trainer} has no OpenMP parallel region: its parameter init runs on one thread"
