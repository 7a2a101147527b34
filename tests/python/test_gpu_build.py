"""What make test's GPU compile check built (build/check, gpu.mk), read without a GPU."""
import os
import re
import shutil
import subprocess

import pytest

from test_ptx_fusion import nvcc
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


# ---------------------------------------------------------------------------
# How gpu.mk picks the GPU architecture: `make` with a stand-in nvidia-smi first on the PATH, in
# dry runs (-n, -q) against a GPU_BUILD of the test's own, so that nothing is compiled.

needs_nvcc = pytest.mark.skipif(nvcc() is None, reason="no nvcc: gpu.mk's GPU targets are defined only where the CUDA toolkit is")


def fake_nvidia_smi(tmp_path, compute_cap, name="NVIDIA Test GPU", fails=False):
    """An nvidia-smi that answers gpu.mk's two questions as a machine with this GPU would (or, with
    fails, as a machine whose driver is broken: a message on stdout and exit 9)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nvidia-smi"
    if fails:
        body = 'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."; exit 9'
    else:
        body = f'case "$*" in *compute_cap*) echo "{compute_cap}";; *-L*) echo "GPU 0: {name} (UUID: GPU-0)";; *) exit 2;; esac'
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return bin_dir


def make(args, bin_dir, gpu_build):
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("GPU_ARCH", None)
    return subprocess.run(["make", "--no-print-directory", f"GPU_BUILD={gpu_build}", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)


@needs_nvcc
@pytest.mark.parametrize("compute_cap, arch", [("8.6", "sm_86"), ("8.0", "sm_80"), ("9.0", "sm_90a"), ("12.0", "sm_120")])
def test_make_train_compiles_for_the_gpu_that_nvidia_smi_names(tmp_path, compute_cap, arch):
    p = make(["-n", f"{tmp_path}/gb/vanilla/train_bf16"], fake_nvidia_smi(tmp_path, compute_cap), tmp_path / "gb")
    assert p.returncode == 0, p.stderr
    assert f"-gencode=arch=compute_{arch[3:]},code={arch}" in p.stdout, p.stdout[-2000:]


@needs_nvcc
def test_gpu_arch_may_list_several_architectures(tmp_path):
    """One binary for a cluster's A100 and H100 nodes: a -gencode per architecture, and the stamp
    holds the list (the same list again rebuilds nothing)."""
    bin_dir = fake_nvidia_smi(tmp_path, None, fails=True)
    gb = tmp_path / "gb"
    p = make(["-n", f"{gb}/vanilla/train_bf16", "GPU_ARCH=sm_80 sm_90a"], bin_dir, gb)
    assert p.returncode == 0, p.stderr
    assert "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a" in p.stdout, p.stdout[-2000:]
    assert (gb / "gpu_arch").read_text().strip() == "sm_80 sm_90a"
    q = make(["-n", f"{gb}/vanilla/train_bf16", "GPU_ARCH=sm_80  sm_90a"], bin_dir, gb)
    assert "GPU_ARCH is" not in q.stderr, q.stderr


@needs_nvcc
def test_a_broken_driver_reads_as_no_gpu_not_as_an_architecture(tmp_path):
    p = make(["-n", f"{tmp_path}/gb/vanilla/train_bf16"], fake_nvidia_smi(tmp_path, None, fails=True), tmp_path / "gb")
    assert p.returncode == 0, p.stderr
    assert "-gencode=arch=compute_90a,code=sm_90a" in p.stdout and "NVIDIA-SMI" not in p.stdout, p.stdout[-2000:]


@needs_nvcc
def test_a_gpu_older_than_8_0_gets_the_cpu_trainer_and_a_clear_no_from_make_train(tmp_path):
    """A T4 (7.5): make train stops before compiling anything and says what to do; make quickstart
    trains on the CPU; GPU_ARCH given by hand (a build for another machine) still compiles."""
    bin_dir = fake_nvidia_smi(tmp_path, "7.5", "Tesla T4")
    p = make(["train"], bin_dir, tmp_path / "gb")
    assert p.returncode != 0
    assert "this machine's GPU has compute capability 7.5" in p.stdout and "make train_cpu" in p.stdout, p.stdout + p.stderr
    assert "nvcc" not in p.stdout, p.stdout  # nothing was compiled
    q = make(["-n", "quickstart"], bin_dir, tmp_path / "gb")
    assert q.returncode == 0, q.stderr
    assert "./train_cpu --train-data" in q.stdout and "./train --train-data" not in q.stdout, q.stdout[-2000:]
    r = make(["-n", f"{tmp_path}/gb/vanilla/train_bf16", "GPU_ARCH=sm_80"], bin_dir, tmp_path / "gb")
    assert r.returncode == 0 and "-gencode=arch=compute_80,code=sm_80" in r.stdout, r.stdout[-2000:] + r.stderr


@needs_nvcc
def test_a_binary_built_for_another_gpu_architecture_is_built_again(tmp_path):
    """build/gpu_arch holds the architecture the GPU binaries were compiled for: a binary is up to
    date for the same GPU_ARCH, out of date once GPU_ARCH changes (a login node's sm_90a build,
    then make on an A100 node), and a stamp that did not exist yet leaves existing binaries alone."""
    gb = tmp_path / "gb"
    binary = gb / "vanilla" / "train_bf16"
    binary.parent.mkdir(parents=True)
    binary.write_text("a binary compiled before the stamp existed\n")
    bin_dir = fake_nvidia_smi(tmp_path, "9.0", "NVIDIA H100")
    q = make(["-q", str(binary)], bin_dir, gb)
    assert q.returncode == 0, f"a new stamp made an existing binary out of date\n{q.stdout}{q.stderr}"
    assert (gb / "gpu_arch").read_text().strip() == "sm_90a" and (gb / "gpu_arch").stat().st_mtime == 0
    a100 = fake_nvidia_smi(tmp_path, "8.0", "NVIDIA A100")
    q = make(["-q", str(binary)], a100, gb)
    assert q.returncode == 1 and "GPU_ARCH is sm_80, was sm_90a" in q.stderr, q.stdout + q.stderr
    assert (gb / "gpu_arch").read_text().strip() == "sm_80"
    q = make(["-q", str(binary)], a100, gb)
    assert q.returncode == 1 and "GPU_ARCH is" not in q.stderr  # still to build, said once
    binary.write_text("built again\n")
    q = make(["-q", str(binary)], a100, gb)
    assert q.returncode == 0, q.stdout + q.stderr


def test_the_gpu_trainer_without_a_gpu_says_why_in_cudas_words(tmp_path):
    """The compile check's trainer (the real CUDA runtime) on this machine, which has no GPU: exit 1
    before anything is written, CUDA's reason in the message (no device, no driver, or one older
    than the toolkit) and what to do."""
    binary = GPU_BUILD / "vanilla" / "train_bf16"
    if not binary.exists():
        pytest.skip(f"{binary} is not built (make gpu-compile-check-fast needs nvcc)")
    if subprocess.run(["sh", "-c", "nvidia-smi -L"], capture_output=True).returncode == 0:
        pytest.skip("a GPU is present")
    from vp_data.shards import write_shard
    import numpy as np
    write_shard(str(tmp_path / "train_000.bin"), np.arange(64, dtype=np.uint16).repeat(4), 1)
    out = tmp_path / "run"
    p = subprocess.run([str(binary), "--arch", "llama", "--layers", "2", "--heads", "2", "--dim", "32", "--vocab", "64", "--max-seq", "16",
                        "--seq-len", "16", "--max-steps", "1", "--train-data", str(tmp_path / "train_*.bin"), "--out-dir", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    assert re.search(r"error: no CUDA device found \((?!no GPU is visible)[^)]+\)", p.stderr), p.stderr
    assert "nvidia-smi lists the GPU" in p.stderr and "./train_cpu" in p.stderr and not out.exists(), p.stderr
