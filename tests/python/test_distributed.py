"""Data-parallel training on the CPU build over MPI (host/distributed.h, docs/distributed.md).

Runs `mpirun -np 2` on build/<path>-mpi/train_cpu, which `make test` builds where mpicxx and mpirun
exist (CI installs OpenMPI: .ci/run). Without mpirun the tests skip, saying so.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from test_trainer_cli import (LONG_SAMPLE, PATHS, REPO, TINY_GPT2, TINY_LLAMA, checkpoint_tensors, data, logged_steps, long_eval_flags,  # noqa: F401
                              path_flags, pattern_tokens, read_log, read_until_line, check_update_guard_run, spiky_data, trainer, write_shard)

MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="no mpirun: apt-get install libopenmpi-dev openmpi-bin (CI has it)")


def mpi_trainer(path):
    return REPO / "build" / f"{path}-mpi" / "train_cpu"


def mpirun_cmd(np_, args, path="vanilla", env=None, binary=None):
    """mpirun of the CPU MPI trainer of `path`, or of `binary` (the emulated GPU one's tests pass theirs)."""
    binary = binary or mpi_trainer(path)
    assert binary.exists(), f"{binary} is missing: run 'make test' (it builds every MPI trainer where mpicxx exists)"
    xs = []
    for k in ["OMP_NUM_THREADS"] + list(env or {}):
        xs += ["-x", k]
    # --oversubscribe: the CI machines may have fewer cores than ranks; as root mpirun needs the flag
    return [MPIRUN, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(np_)] + xs + [str(binary)] + [str(a) for a in args]


def mpirun(np_, args, expect=0, path="vanilla", timeout=120, env=None, binary=None):
    e = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    p = subprocess.run(mpirun_cmd(np_, args, path, env, binary), capture_output=True, text=True, timeout=timeout, env=e)
    if expect is not None:
        assert p.returncode == expect, f"exit {p.returncode}, expected {expect}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}"
    return p


def single(args, path="vanilla"):
    p = subprocess.run([str(trainer(path))] + [str(a) for a in args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def losses(out_dir):
    return [r["train_loss"] for r in read_log(out_dir) if "train_loss" in r]


def floats(b):
    return np.frombuffer(b, dtype=np.float32)


FAMILY = {"vanilla": TINY_GPT2, "resformer": TINY_LLAMA, "svformer": TINY_GPT2, "sla": TINY_LLAMA, "depth": TINY_LLAMA}


@pytest.mark.parametrize("path", PATHS)
def test_two_ranks_equal_one_rank_with_accumulation(tmp_path, data, path):
    """2 ranks x B=4 == 1 process x B=4 x 2 accumulation steps, ZeRO-0 and ZeRO-1, every value path:
    the same losses to fp32 round-off and the same weights; ZeRO-0 and ZeRO-1 bit-identical."""
    family = FAMILY[path]
    common = family + path_flags(path, family) + ["--train-data", data / "train_*.bin", "--batch-size", "4", "--max-steps", "6",
                                                  "--lr", "1e-2", "--warmup-steps", "2", "--grad-clip", "1.0"]
    single(common + ["--total-batch-tokens", "64", "--out-dir", tmp_path / "one"], path=path)
    for zero in (0, 1):
        p = mpirun(2, common + ["--zero", zero, "--out-dir", tmp_path / f"two_z{zero}"], path=path)
        assert f"2 ranks, ZeRO-{zero}" in p.stdout and p.stdout.count("step ") >= 6  # rank 0 logs once
    a, b0, b1 = (losses(tmp_path / d) for d in ["one", "two_z0", "two_z1"])
    assert len(a) == 6 and b0 == b1
    np.testing.assert_allclose(b0, a, rtol=2e-6)
    assert b0[0] == a[0]  # the same parameters see the same sequences: the first loss is exact
    t = {d: checkpoint_tensors(tmp_path / d / "ckpt_00000006.bin") for d in ["one", "two_z0", "two_z1"]}
    assert t["two_z0"] == t["two_z1"]  # sharding the optimizer changes no bit
    n = len(t["one"]) // 12
    np.testing.assert_allclose(floats(t["two_z0"])[:n], floats(t["one"])[:n], rtol=0, atol=2e-5)
    cfg = read_log(tmp_path / "two_z1")[0]
    assert cfg["world"] == 2 and cfg["zero"] == 1 and cfg["tokens_per_step"] == 64



def test_ranks_that_share_cpus_share_them_out(tmp_path, data):
    """OpenMP starts a thread per CPU of a process's affinity mask, so ranks started with --bind-to
    none (every CPU in each mask) would each run that many: on the 2-core CI machine 4 threads for
    2 ranks, and a step 1.34-1.49x as long as with 1 thread each (dev/results/2026-11-30-omp-share.md).
    Without OMP_NUM_THREADS each rank takes its share, n // 2 of n CPUs, and rank 0 says so;
    OMP_NUM_THREADS, when set, is kept; ranks bound to cores of their own keep a thread per core.
    The losses do not change."""
    n = len(os.sched_getaffinity(0))
    if n < 2:
        pytest.skip("one CPU here: there is nothing to share out")
    common = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--batch-size", "4", "--max-steps", "3", "--total-batch-tokens", "64"]
    unset = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}

    def launch(mpirun_flags, out, env):
        cmd = [MPIRUN, "--allow-run-as-root", "-np", "2"] + mpirun_flags + [str(mpi_trainer("vanilla"))]
        p = subprocess.run(cmd + [str(a) for a in common + ["--out-dir", tmp_path / out]], capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
        return p.stdout

    shared = launch(["--bind-to", "none"], "shared", unset)
    share = n // 2
    assert f"OpenMP: {share} thread{'' if share == 1 else 's'} on rank 0, not {n}: the 2 ranks on this node share its CPUs" in shared, shared
    assert "OpenMP:" not in launch(["--bind-to", "none", "-x", "OMP_NUM_THREADS"], "set", {**unset, "OMP_NUM_THREADS": str(n)})
    assert "OpenMP:" not in launch(["--bind-to", "core"], "bound", unset)
    assert losses(tmp_path / "shared") == losses(tmp_path / "set") == losses(tmp_path / "bound")
    assert len(losses(tmp_path / "shared")) == 3


def test_update_guard_under_two_ranks_with_zero_1(tmp_path, spiky_data):
    """--skip-loss-z/--skip-norm-z judge the all-reduced loss and norm, so every rank skips the same
    steps: under ZeRO-1 each rank updates its own shard of the AdamW state, and a rank that updated
    where rank 0 skipped would change the gathered checkpoint or wait alone in the update's
    all-gather (the job then times out). The skipped steps replay from the log; each leaves the
    checkpoint's tensors as they were."""
    out = tmp_path / "two"
    mpirun(2, TINY_GPT2 + ["--train-data", spiky_data / "train_*.bin", "--batch-size", "2", "--lr", "1e-2", "--lr-schedule",
                           "constant", "--max-steps", "40", "--skip-loss-z", "1.5", "--skip-norm-z", "1.5", "--skip-window", "8",
                           "--zero", "1", "--checkpoint-every", "1", "--out-dir", out])
    check_update_guard_run(out, 1.5, 8, 40)

def test_three_ranks_uneven_shards(tmp_path, data):
    """3 ranks: the parameter count is not a multiple of 3, so the last shard is shorter than the
    others (host/distributed.h dist_shard) and the reduce-scatter, the sharded norm and the
    all-gather run on uneven counts. 3 ranks x B=4 == 1 process x B=4 x 3 accumulation steps to
    fp32 round-off; ZeRO-0 and ZeRO-1 bit-identical (the CPU build's sums are made by hand, in rank
    order, whatever the world size)."""
    common = TINY_LLAMA + ["--train-data", data / "train_*.bin", "--batch-size", "4", "--max-steps", "4", "--lr", "1e-2",
                           "--warmup-steps", "2", "--grad-clip", "1.0"]
    single(common + ["--total-batch-tokens", "96", "--out-dir", tmp_path / "one"])
    for zero in (0, 1):
        p = mpirun(3, common + ["--zero", zero, "--out-dir", tmp_path / f"three_z{zero}"])
        assert f"3 ranks, ZeRO-{zero}" in p.stdout
    a, b0, b1 = (losses(tmp_path / d) for d in ["one", "three_z0", "three_z1"])
    # not even the first loss is exact here: rank r reads sequences r, r+3, ... while the one
    # process's micro-batches are consecutive, so the per-batch means are other float sums
    assert len(a) == 4 and b0 == b1
    np.testing.assert_allclose(b0, a, rtol=2e-6)
    t = {d: checkpoint_tensors(tmp_path / d / "ckpt_00000004.bin") for d in ["one", "three_z0", "three_z1"]}
    assert t["three_z0"] == t["three_z1"]
    n = len(t["one"]) // 12
    assert n % 3 != 0, "the test model must have a parameter count that 3 does not divide"
    one, three = floats(t["one"])[:n].astype(np.float64), floats(t["three_z0"])[:n].astype(np.float64)
    assert np.linalg.norm(three - one) / np.linalg.norm(one) < 1e-5  # the weights, normwise (see the GPU emulator's twin)


def test_three_ranks_where_the_short_last_shard_has_gradients(tmp_path, data):
    """The tail of the flat parameters, where the last, shorter shard ends, must be owned, summed
    and updated like any other element. test_three_ranks_uneven_shards cannot see it: TINY_LLAMA's
    last tensor is lm_head (Vp = 128 rows for a vocabulary of 64), whose last elements are padding
    rows that never get a gradient, so a shard layout that dropped the last n mod 3 elements (a
    floor instead of a ceiling in dist_slot, a count one short) changes no bit there. TINY_GPT2
    ties its head: the flat vector ends with lnf_b (C = 16), every element of which has a gradient,
    and 8896 = 3 x 2965 + 1 parameters leave exactly one element past 3 floor slots. 3 ranks x B=4
    == 1 process x B=4 x 3 accumulation steps (PyTorch: DDP against no_sync() accumulation, with
    ZeroRedundancyOptimizer for ZeRO-1), and the final layer norm's bias ends where the one
    process puts it, element by element."""
    common = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--batch-size", "4", "--max-steps", "4", "--lr", "1e-2",
                          "--warmup-steps", "2", "--grad-clip", "1.0"]
    single(common + ["--total-batch-tokens", "96", "--out-dir", tmp_path / "one"])
    for zero in (0, 1):
        mpirun(3, common + ["--zero", zero, "--out-dir", tmp_path / f"three_z{zero}"])
    a, b0, b1 = (losses(tmp_path / d) for d in ["one", "three_z0", "three_z1"])
    assert len(a) == 4 and b0 == b1
    np.testing.assert_allclose(b0, a, rtol=2e-6)
    t = {d: checkpoint_tensors(tmp_path / d / "ckpt_00000004.bin") for d in ["one", "three_z0", "three_z1"]}
    assert t["three_z0"] == t["three_z1"]  # a rank updating an element no shard owns would differ here
    n = len(t["one"]) // 12
    assert n % 3 == 1, f"the test model should leave one element past 3 floor slots, has {n}"
    one, three = floats(t["one"])[:n].astype(np.float64), floats(t["three_z1"])[:n].astype(np.float64)
    lnf_b = slice(n - 16, n)  # the last tensor (init 0, params.h): it must have moved, or it tests nothing
    assert np.all(np.abs(one[lnf_b]) > 1e-4), one[lnf_b]
    np.testing.assert_allclose(three[lnf_b], one[lnf_b], rtol=1e-4, atol=1e-6)
    assert np.linalg.norm(three - one) / np.linalg.norm(one) < 1e-5


def test_zero1_keeps_only_this_ranks_share_of_the_optimizer_state(tmp_path, data):
    """ZeRO-1's point is memory: each rank allocates and touches AdamW m, v for its own shard only
    (gpt_update_range, model_dist_shard_optimizer). Every other test compares its numbers with
    ZeRO-0's, which are the same bits, so a ZeRO-1 that kept the whole state on every rank would
    pass them all. Here the peak resident memory of each rank (getrusage, the trainer run under a
    wrapper) of a 7M-parameter model: under 2 ranks ZeRO-1 must save at least 3/4 of the expected
    2 x 4 bytes x n / 2 per rank against ZeRO-0 (m and v, fp32, half each). PyTorch: the per-rank
    memory of ZeroRedundancyOptimizer against a plain AdamW."""
    model = ["--arch", "gpt2", "--layers", "4", "--heads", "6", "--dim", "384", "--vocab", "64", "--max-seq", "16", "--seq-len", "8"]
    wrapper = tmp_path / "measure"
    wrapper.write_text(f"#!{sys.executable}\n"
                       "import os, resource, subprocess, sys\n"
                       f"rc = subprocess.call([{str(mpi_trainer('vanilla'))!r}] + sys.argv[1:])\n"
                       "open(sys.argv[sys.argv.index('--out-dir') + 1] + '/rss.' + os.environ['OMPI_COMM_WORLD_RANK'], 'w')"
                       ".write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024))\n"
                       "sys.exit(rc)\n")
    wrapper.chmod(0o755)
    rss, n = {}, None
    for zero in (0, 1):
        out = tmp_path / f"z{zero}"
        p = mpirun(2, model + ["--train-data", data / "train_*.bin", "--batch-size", "1", "--max-steps", "2", "--lr", "1e-3",
                               "--zero", zero, "--checkpoint-every", "0", "--out-dir", out], binary=wrapper)
        n = int(re.search(r"(\d+) parameters", p.stdout).group(1))
        rss[zero] = [int((out / f"rss.{r}").read_text()) for r in range(2)]
    assert n > 5_000_000, n  # m and v are then 40+ MB: well above the noise of the allocator and MPI
    for r in range(2):
        saved = rss[0][r] - rss[1][r]
        assert saved > 0.75 * (2 * 4 * n / 2), f"rank {r}: ZeRO-1 saved {saved} bytes of {rss[0][r]}, expected about {4 * n}"


@pytest.mark.parametrize("zero", [0, 1])
def test_resume_under_two_ranks_is_bit_exact(tmp_path, data, zero):
    common = TINY_LLAMA + ["--train-data", data / "train_*.bin", "--val-data", data / "val_*.bin", "--batch-size", "2",
                           "--total-batch-tokens", "64", "--max-steps", "8", "--lr", "3e-3", "--eval-every", "4",
                           "--checkpoint-every", "3", "--zero", zero]
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    mpirun(2, common + ["--out-dir", straight])
    mpirun(2, common + ["--out-dir", broken])
    for name in ["ckpt_00000006.bin", "ckpt_00000008.bin"]:
        (broken / name).unlink()
    p = mpirun(2, common + ["--out-dir", broken, "--resume", 1])
    assert "(step 3)" in p.stdout
    after = lambda log: [(r["step"], r.get("train_loss"), r.get("val_loss")) for r in log if r.get("step", 0) > 3]
    a = after(read_log(straight))
    assert len(a) == 5 + 2 and a == after(read_log(broken)[[i for i, r in enumerate(read_log(broken)) if "resumed_from" in r][-1]:])
    assert checkpoint_tensors(straight / "ckpt_00000008.bin") == checkpoint_tensors(broken / "ckpt_00000008.bin")
    # the checkpoint holds the whole optimizer state, so another world size resumes it (to round-off)
    shutil.rmtree(broken)
    broken.mkdir()
    shutil.copy(straight / "ckpt_00000003.bin", broken)
    single(common[:-2] + ["--out-dir", broken, "--resume", 1])
    np.testing.assert_allclose(losses(broken)[-5:], losses(straight)[-5:], rtol=1e-5)


@pytest.mark.parametrize("zero", [0, 1])
def test_forced_data_parallel_path_with_one_rank_is_bit_identical(tmp_path, data, zero):
    """VP_DIST_FORCE=1 runs the data-parallel code with one rank (all a one-GPU machine can run of the
    NCCL build, dev/device_check.sh): its losses and checkpoint equal the plain build's, bit for bit."""
    common = TINY_LLAMA + ["--train-data", data / "train_*.bin", "--batch-size", "4", "--max-steps", "4", "--lr", "1e-2",
                           "--warmup-steps", "2", "--grad-clip", "1.0"]
    single(common + ["--out-dir", tmp_path / "plain"])
    p = mpirun(1, common + ["--zero", zero, "--out-dir", tmp_path / "forced"], env={"VP_DIST_FORCE": "1"})
    assert f"1 ranks, ZeRO-{zero}" in p.stdout
    assert len(losses(tmp_path / "plain")) == 4 and losses(tmp_path / "forced") == losses(tmp_path / "plain")
    assert checkpoint_tensors(tmp_path / "forced" / "ckpt_00000004.bin") == checkpoint_tensors(tmp_path / "plain" / "ckpt_00000004.bin")


def test_streamed_checkpoint_is_the_same_for_any_chunk_and_sharding(tmp_path, data):
    """Checkpoints stream in pieces (host/distributed.h dist_stream_to_root on save, host/checkpoint.h
    checkpoint_read_stream on load). 3 ranks under ZeRO-1 (uneven shards) with pieces of 7 floats,
    which cut across every shard boundary, save the same tensors and data CRC as ZeRO-0 with the
    default piece size, the CRC is zlib's of the tensors, and resuming through 7-float pieces (each
    rank keeping its own slice of m and v) is bit-exact."""
    import zlib
    from test_trainer_cli import CRC_OFFSET
    common = TINY_LLAMA + ["--train-data", data / "train_*.bin", "--batch-size", "2", "--max-steps", "4", "--lr", "1e-2",
                           "--checkpoint-every", "3"]
    small_pieces = {"VP_CHECKPOINT_CHUNK": "7"}
    mpirun(3, common + ["--zero", 0, "--out-dir", tmp_path / "z0"])
    mpirun(3, common + ["--zero", 1, "--out-dir", tmp_path / "z1"], env=small_pieces)
    for name in ["ckpt_00000003.bin", "ckpt_00000004.bin"]:
        t = {d: checkpoint_tensors(tmp_path / d / name) for d in ["z0", "z1"]}
        assert t["z0"] == t["z1"] and (len(t["z1"]) // 12) % 3 != 0  # uneven shards
        for d in t:
            raw = (tmp_path / d / name).read_bytes()
            assert raw[CRC_OFFSET + 4:CRC_OFFSET + 8] == zlib.crc32(t[d]).to_bytes(4, "little"), (d, name)
    (tmp_path / "z1" / "ckpt_00000004.bin").unlink()
    p = mpirun(3, common + ["--zero", 1, "--out-dir", tmp_path / "z1", "--resume", 1], env=small_pieces)
    assert "(step 3)" in p.stdout
    assert checkpoint_tensors(tmp_path / "z1" / "ckpt_00000004.bin") == checkpoint_tensors(tmp_path / "z0" / "ckpt_00000004.bin")


def test_reduce_and_gather_in_pieces_are_bit_identical(tmp_path, data):
    """A gradient vector too long for one MPI call (MPI's counts and displacements are int: an
    8e9-parameter model's displacements pass 2^31 even where each rank's count fits) is summed
    and gathered in pieces, point to point (host/distributed.h dist_piece_floats). VP_DIST_PIECE=7
    forces pieces of 7 floats on the tiny model: 3 ranks (uneven shards, so the pieces end inside
    every part), ZeRO-0 and ZeRO-1, give the losses and checkpoints of the single-call runs bit
    for bit. A value that is not a piece length is a usage error, not a silent default."""
    common = TINY_LLAMA + ["--train-data", data / "train_*.bin", "--batch-size", "2", "--max-steps", "3", "--lr", "1e-2",
                           "--grad-clip", "1.0"]
    for zero in (0, 1):
        mpirun(3, common + ["--zero", zero, "--out-dir", tmp_path / f"whole_z{zero}"])
        mpirun(3, common + ["--zero", zero, "--out-dir", tmp_path / f"pieces_z{zero}"], env={"VP_DIST_PIECE": "7"})
        whole, pieces = losses(tmp_path / f"whole_z{zero}"), losses(tmp_path / f"pieces_z{zero}")
        assert len(whole) == 3 and pieces == whole, (zero, whole, pieces)
        t = {d: checkpoint_tensors(tmp_path / f"{d}_z{zero}" / "ckpt_00000003.bin") for d in ("whole", "pieces")}
        assert t["pieces"] == t["whole"] and (len(t["whole"]) // 12) % 3 != 0, zero
    p = mpirun(2, common, expect=None, env={"VP_DIST_PIECE": "0"})
    assert p.returncode != 0 and "VP_DIST_PIECE='0' is not a number from 1 to" in p.stderr, p.stderr[-3000:]


def test_zero1_checkpoint_resumes_under_another_world_size(tmp_path, data):
    """A ZeRO-1 checkpoint of 3 ranks resumed by 2 ranks under ZeRO-1: each new rank takes its own,
    differently cut, slice of m and v from the pieces it reads (pieces of 5 floats: every slice
    boundary falls inside a piece). The steps after the break see the same sequences (the same
    12 per step, grouped 2 x 2 x 3 instead of 3 x 2 x 2), so the losses follow the uninterrupted
    3-rank run to fp32 round-off; a slice taken from the wrong place would move them far more."""
    common = TINY_LLAMA + ["--train-data", data / "train_*.bin", "--batch-size", "2", "--total-batch-tokens", "96", "--max-steps", "6",
                           "--lr", "1e-2", "--checkpoint-every", "3", "--zero", "1"]
    mpirun(3, common + ["--out-dir", tmp_path / "three"])
    (tmp_path / "two").mkdir()
    shutil.copy(tmp_path / "three" / "ckpt_00000003.bin", tmp_path / "two")
    p = mpirun(2, common + ["--out-dir", tmp_path / "two", "--resume", 1], env={"VP_CHECKPOINT_CHUNK": "5"})
    assert "(step 3)" in p.stdout and "2 ranks, ZeRO-1" in p.stdout
    three, two = losses(tmp_path / "three"), losses(tmp_path / "two")
    assert len(three) == 6 and len(two) == 3
    np.testing.assert_allclose(two, three[3:], rtol=1e-5)
    # the resumed run's moments are the 3-rank run's to round-off too (so they were not dropped)
    a, b = (floats(checkpoint_tensors(tmp_path / d / "ckpt_00000006.bin")).astype(np.float64) for d in ["three", "two"])
    n = len(a) // 3
    for part, (lo, hi) in {"weights": (0, n), "m": (n, 2 * n), "v": (2 * n, 3 * n)}.items():
        assert np.linalg.norm(b[lo:hi] - a[lo:hi]) / np.linalg.norm(a[lo:hi]) < 1e-4, part


def test_rank_0_failing_to_write_a_checkpoint_stops_every_rank(tmp_path, data):
    """Rank 0's disk fills up in the middle of a streamed ZeRO-1 checkpoint: rank 0 says why, the
    other rank says that rank 0 failed (instead of waiting in the next collective for the
    watchdog), the job exits nonzero at once, and no file is left under a checkpoint name."""
    out = tmp_path / "run"
    common = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--max-steps", "2", "--zero", 1]
    mpirun(2, common + ["--out-dir", tmp_path / "probe"])
    size = (tmp_path / "probe" / "ckpt_00000002.bin").stat().st_size
    # the limit applies to the trainer processes, not to mpirun (whose PMIx session files need room)
    wrapper = tmp_path / "limited.sh"
    wrapper.write_text(f"#!/bin/bash\ntrap '' XFSZ\nulimit -f {(size - 1000) // 1024}\nexec {mpi_trainer('vanilla')} \"$@\"\n")
    wrapper.chmod(0o755)
    t0 = time.time()
    p = mpirun(2, common + ["--out-dir", out], expect=None, binary=wrapper, env={"VP_CHECKPOINT_CHUNK": "100", "VP_DIST_TIMEOUT": "60"})
    assert p.returncode != 0 and time.time() - t0 < 45
    assert "writing checkpoint" in p.stderr and "File too large" in p.stderr, p.stderr[-3000:]
    assert "rank 1: rank 0 could not write the checkpoint" in p.stderr, p.stderr[-3000:]
    assert not [f for f in out.iterdir() if "ckpt" in f.name]


def step_losses(text):
    """{step: loss as printed} from a trainer's console lines."""
    return dict(re.findall(r"step +(\d+)/\d+ \| loss (\S+)", text))


def run_with_a_bad_token(good, shards, bad, launch):
    """Copies the shards in `good` to `shards`, with token 20 of `bad` out of range (--vocab 64),
    runs launch() (a failing run), checks that its error names the shard, and returns the run and
    the step it saved before stopping (None if it saved nothing)."""
    shutil.rmtree(shards, ignore_errors=True)
    shutil.copytree(good, shards)
    toks = np.fromfile(shards / bad, dtype="<u2", offset=1024).astype(np.int64)
    toks[20] = 100
    write_shard(str(shards / bad), toks, 1)
    p = launch()
    assert p.returncode != 0 and bad in p.stderr and "out of range" in p.stderr, p.stderr[-3000:]
    m = re.search(r"saved the last completed step \((\d+)\)", p.stdout)
    return p, int(m[1]) if m else None


@pytest.mark.parametrize("zero", [0, 1])
def test_bad_train_shard_mid_run_under_two_ranks_saves_the_last_completed_step(tmp_path, zero):
    """A token id out of range in a training shard loaded mid-run, under 2 ranks: the ranks save
    the last completed step together, then every rank stops with an error (the one whose data
    failed names the shard, the other says why it stops). After the fix, a 2-rank --resume gives
    the losses of an uninterrupted 2-rank run on good data, bit for bit.

    Every shard holds 8k+7 sequences of T=8 and a step reads 8 (B=4 x 2 ranks, rank r the global
    sequences r, r+2, ...), so the first shard boundary falls on rank 1's last sequence of a step:
    rank 1 loads the second shard one step before rank 0 does. A bad second shard is therefore
    found by rank 1 alone; a bad third shard (its boundary at 8m+6) by both ranks in one step."""
    good = tmp_path / "good"
    good.mkdir()
    for i, seqs in enumerate([87, 111, 63]):
        write_shard(str(good / f"train_{i:03d}.bin"), pattern_tokens(seqs * 8 + 1, seed=i), 1)
    shards = tmp_path / "shards"
    common = lambda d: TINY_GPT2 + ["--train-data", shards / "train_*.bin", "--max-steps", "40", "--zero", zero, "--out-dir", d]
    shutil.copytree(good, shards)
    ref = step_losses(mpirun(2, common(tmp_path / "ref")).stdout)
    assert len(ref) == 40
    seen = set()
    for bad in ("train_000.bin", "train_001.bin", "train_002.bin"):
        out = tmp_path / f"run_{bad}"
        p, n = run_with_a_bad_token(good, shards, bad, lambda: mpirun(2, common(out), expect=None))
        if n is None:  # the first shard, loaded by step 1: nothing to save
            assert "step " not in p.stdout and not list(out.glob("ckpt_*"))
            seen.add("startup")
            continue
        assert 0 < n < 40 and sorted(f.name for f in out.glob("ckpt_*")) == [f"ckpt_{n:08d}.bin"]
        one_rank = "rank 0 stops: 1 other rank(s) could not read their training data" in p.stderr
        assert one_rank or p.stderr.count(bad) == 2, p.stderr[-3000:]  # else both ranks name the shard
        seen.add("one rank" if one_rank else "both ranks")
        assert step_losses(p.stdout) == {s: l for s, l in ref.items() if int(s) <= n}
        shutil.copy(good / bad, shards / bad)  # the fix
        resumed = mpirun(2, common(out) + ["--resume", 1])
        assert f"(step {n})" in resumed.stdout
        assert step_losses(resumed.stdout) == {s: l for s, l in ref.items() if int(s) > n}
    assert seen == {"startup", "one rank", "both ranks"}


def test_total_batch_tokens_must_divide_by_ranks(tmp_path, data):
    p = mpirun(2, TINY_GPT2 + ["--train-data", data / "train_*.bin", "--batch-size", "4", "--total-batch-tokens", "96",
                               "--max-steps", "1"], expect=None)
    assert p.returncode != 0 and "not a multiple of 4 x 8 x 2 ranks" in p.stderr


def test_ranks_started_with_other_flags_stop_at_once(tmp_path, data):
    """mpirun's MPMD form can start ranks with other flags. Another --lr or --seed trained another
    model in lockstep with exit 0, another --layers or --zero hung in a collective: each is now a
    usage error on every rank before anything is built, naming the rank."""
    common = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--max-steps", "2"]
    for a, b in [(["--lr", "1e-3"], ["--lr", "1e-1"]), (["--seed", "1"], ["--seed", "2"]), (["--layers", "2"], ["--layers", "3"]),
                 (["--zero", "1"], ["--zero", "0"])]:
        a_args = [str(x) for x in common[:common.index("--layers")] + common[common.index("--layers") + 2:]] if "--layers" in a else [str(x) for x in common]
        cmd = mpirun_cmd(1, a_args + a)
        cmd += [":", "-np", "1", str(mpi_trainer("vanilla"))] + a_args + b
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert p.returncode != 0, (a, b)
        assert "usage error: rank 1 was started with other flags than rank 0" in p.stderr, (a, b, p.stderr[-2000:])
    mpirun(2, common, expect=0)  # the same flags: no complaint


def test_resume_auto_under_two_ranks(tmp_path, data):
    """--resume auto decides once for all ranks: a new run, then, submitted again, the resumed run
    with the losses of one that never stopped. Ranks that see different directories (here the MPMD
    form gives them another --out-dir; in practice an --out-dir that is not on a shared file
    system) would start different runs: every rank stops with the error, none hangs."""
    common = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--batch-size", "2", "--lr", "3e-3", "--lr-schedule", "constant",
                          "--zero", "1"]
    auto = tmp_path / "auto"
    p = mpirun(2, common + ["--max-steps", "3", "--out-dir", auto, "--resume", "auto"])
    assert p.stdout.count("--resume auto: no checkpoint") == 1  # rank 0 alone says it
    p = mpirun(2, common + ["--max-steps", "6", "--out-dir", auto, "--resume", "auto"])
    assert "--resume auto: continuing from the newest checkpoint" in p.stdout and "(step 3)" in p.stdout
    mpirun(2, common + ["--max-steps", "6", "--out-dir", tmp_path / "straight"])
    assert losses(auto) == losses(tmp_path / "straight") and len(losses(auto)) == 6
    args = [str(x) for x in common + ["--max-steps", "6", "--resume", "auto", "--out-dir"]]
    cmd = mpirun_cmd(1, args + [str(auto)]) + [":", "-np", "1", str(mpi_trainer("vanilla"))] + args + [str(tmp_path / "elsewhere")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode != 0 and "--resume auto: 1 of 2 ranks find a checkpoint" in p.stderr, p.stderr[-2000:]


def rank_pids(tag):
    """pid of each rank of the job whose processes carry VP_TEST_TAG=tag."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = dict(kv.split("=", 1) for kv in (d / "environ").read_text(errors="replace").split("\0") if "=" in kv)
        except OSError:
            continue
        if env.get("VP_TEST_TAG") == tag and "OMPI_COMM_WORLD_RANK" in env and (d / "exe").resolve().name == "train_cpu":
            out[int(env["OMPI_COMM_WORLD_RANK"])] = int(d.name)
    return out


def start_two_ranks(args, env=None):
    """Starts a 2-rank job (one OpenMP thread a rank), its ranks tagged for rank_pids; returns
    (Popen of mpirun, tag)."""
    tag = uuid.uuid4().hex
    env = {"VP_TEST_TAG": tag, **(env or {})}
    proc = subprocess.Popen(mpirun_cmd(2, args, env=env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", **env})
    return proc, tag


def end_job(proc, pids, even_if_ended=False):
    """Kills what is left of a job that a test stops following: its ranks (`pids`, rank_pids'; a
    rank left waiting in a collective would spin on a core until its watchdog), while mpirun still
    runs or if even_if_ended, then mpirun."""
    if proc.poll() is None or even_if_ended:
        for pid in pids.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


@pytest.mark.parametrize("how", ["killed", "hung"])
def test_a_dead_or_hung_rank_ends_the_job(tmp_path, data, how):
    """Rank 1 is killed (SIGKILL) or frozen (SIGSTOP) mid-run: the job ends nonzero within a bounded time."""
    args = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--max-steps", "100000000", "--out-dir", tmp_path / "run"]
    proc, tag = start_two_ranks(args, {"VP_DIST_TIMEOUT": "3"})
    pids = {}
    try:
        deadline = time.time() + 30
        while len(pids) < 2 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
            pids = rank_pids(tag)
        assert len(pids) == 2, f"did not find both ranks: {pids}"
        time.sleep(1.0)  # well into training
        assert proc.poll() is None
        os.kill(pids[1], signal.SIGKILL if how == "killed" else signal.SIGSTOP)
        t0 = time.time()
        out, err = proc.communicate(timeout=60)
        assert proc.returncode != 0
        assert time.time() - t0 < 30
        if how == "hung":
            assert "rank 0" in err and "died or hangs" in err, err[-2000:]
        else:
            assert "signal 9" in err or "Killed" in err, err[-2000:]
    finally:
        end_job(proc, pids, even_if_ended=True)  # a rank frozen by SIGSTOP outlives mpirun


def test_a_second_job_in_a_busy_out_dir_stops_at_once(tmp_path, data):
    """The same 2-rank job started twice (--resume auto, as a resubmitted batch job): the second
    job's rank 0 finds the first's rank 0 holding --out-dir's lock and stops with its pid; mpirun
    ends the second job's other rank, which waits in the first collective. The first job trains
    on and stops by SIGUSR1 as usual."""
    out = tmp_path / "run"
    args = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--max-steps", "100000000", "--lr-schedule", "constant",
                        "--out-dir", out, "--resume", "auto"]
    proc, tag = start_two_ranks(args)
    pids = {}
    try:
        deadline = time.time() + 60
        while (len(pids) < 2 or logged_steps(out) < 2) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
            pids = pids if len(pids) == 2 else rank_pids(tag)
        assert len(pids) == 2 and logged_steps(out) >= 2, f"the first job did not start training: {pids}"
        t0 = time.time()
        second = mpirun(2, args, expect=None, timeout=60)
        assert second.returncode != 0 and time.time() - t0 < 30, (second.returncode, second.stderr[-2000:])
        assert f"is in use by another run (pid {pids[0]})" in second.stderr, second.stderr[-2000:]
        # (the text, not read_log: the first job may be writing its last line just now)
        assert proc.poll() is None and (out / "log.jsonl").read_text().count('"event":"config"') == 1
        os.kill(pids[0], signal.SIGUSR1)
        proc.communicate(timeout=120)
    finally:
        end_job(proc, pids)
    assert proc.returncode == 128 + signal.SIGUSR1 and read_log(out)[-1]["event"] == "stopped"


def signal_rank_1_at_step(args, out_dir, step, sig):
    """Starts a 2-rank job, sends `sig` to rank 1 alone once log.jsonl records `step` steps, and
    returns (Popen, stdout, stderr) when the job has ended; ranks left running are killed."""
    proc, tag = start_two_ranks(args)
    pids = {}
    try:
        deadline = time.time() + 60
        while time.time() < deadline and proc.poll() is None:
            pids = pids if len(pids) == 2 else rank_pids(tag)
            if len(pids) == 2 and logged_steps(out_dir) >= step:
                break
            time.sleep(0.01)
        assert len(pids) == 2 and proc.poll() is None, f"the job did not reach step {step} with both ranks: {pids}"
        os.kill(pids[1], sig)
        out, err = proc.communicate(timeout=120)
    finally:
        end_job(proc, pids)
    return proc, out, err


def test_a_signal_to_one_rank_stops_every_rank_after_the_same_step(tmp_path, data):
    """SIGUSR1 (what mpirun forwards, and Slurm's --signal=USR1 sends) to rank 1 alone: the ranks
    agree at the step's all-reduce, all stop after the same step, rank 0 saves that step's
    checkpoint, and the job exits 128 + 10. Resumed under 2 ranks, it continues exactly as a run
    that never stopped (constant lr: the stopped run's --max-steps need not be reached)."""
    common = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--batch-size", "2", "--lr", "3e-3", "--lr-schedule", "constant",
                          "--zero", "1"]
    stopped = tmp_path / "stopped"
    proc, out, err = signal_rank_1_at_step(common + ["--max-steps", "100000000", "--out-dir", stopped], stopped, 3, signal.SIGUSR1)
    assert proc.returncode == 128 + signal.SIGUSR1, f"exit {proc.returncode}\n{out[-2000:]}\n{err[-2000:]}"
    assert "SIGUSR1: stopping after this step" in err, err[-2000:]
    m = re.search(r"stopped by SIGUSR1 after step (\d+) of 100000000: saved (\S+);", out)
    assert m and Path(m.group(2)).exists(), out[-2000:]
    s = int(m.group(1))
    assert read_log(stopped)[-1] == {"event": "stopped", "step": s, "signal": "SIGUSR1"}
    n = s + 4
    mpirun(2, common + ["--max-steps", n, "--out-dir", tmp_path / "straight"])
    mpirun(2, common + ["--max-steps", n, "--out-dir", stopped, "--resume", "1"])
    tail = lambda d: [(r["step"], r["train_loss"]) for r in read_log(d) if "train_loss" in r and r["step"] > s]
    assert tail(tmp_path / "straight") == tail(stopped) and len(tail(stopped)) == 4
    name = f"ckpt_{n:08d}.bin"
    assert checkpoint_tensors(tmp_path / "straight" / name) == checkpoint_tensors(stopped / name)


def test_a_signal_to_one_rank_during_an_evaluation_stops_every_rank_unlogged(tmp_path, data):
    """SIGUSR1 to rank 1 alone once step 2 is logged, with a long evaluation due at step 3: rank 1
    skips it (the signal came in the step: the ranks agreed at its all-reduce) or cuts its share
    short (rank 0 runs its own to the end); either way the ranks agree after it, log none of it,
    and all stop after step 3 with its checkpoint. A 2M-token val set, resumed from step 1 so that
    no evaluation at step 0 comes first."""
    out = tmp_path / "run"
    common = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--batch-size", "2", "--lr-schedule", "constant", "--out-dir", out]
    mpirun(2, common + ["--max-steps", "1"])
    long_eval = long_eval_flags(tmp_path, data, "val") + ["--eval-every", "3"]
    proc, stdout, stderr = signal_rank_1_at_step(common + ["--max-steps", "100000000", "--resume", "1"] + long_eval, out, 2, signal.SIGUSR1)
    assert proc.returncode == 128 + signal.SIGUSR1, f"exit {proc.returncode}\n{stdout[-2000:]}\n{stderr[-2000:]}"
    assert re.search(r"the evaluation at step 3 (was cut short by SIGUSR1: not logged|is skipped: stopping \(SIGUSR1\))", stdout), stdout[-2000:]
    assert f"stopped by SIGUSR1 after step 3 of 100000000: saved {out / 'ckpt_00000003.bin'}" in stdout, stdout[-2000:]
    log = read_log(out)
    assert not [r for r in log if "val_loss" in r] and log[-1] == {"event": "stopped", "step": 3, "signal": "SIGUSR1"}


def test_a_signal_to_rank_0_during_its_sample_stops_every_rank(tmp_path, data):
    """Rank 0 draws the samples while the others wait. SIGUSR1 to rank 0 alone during its sample at
    step 2 cuts the sample short; the ranks agree after it (rank 1 saw no signal), and all stop
    after step 2 with its checkpoint and exit 138."""
    out = tmp_path / "run"
    args = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--batch-size", "2", "--lr-schedule", "constant", "--out-dir", out,
                        "--max-steps", "100000000", "--sample-every", "2", "--sample-tokens", LONG_SAMPLE]
    proc, tag = start_two_ranks(args)
    pids = {}
    try:
        read_until_line(proc, "---- sample at step 2 ----")
        pids = rank_pids(tag)
        assert len(pids) == 2, pids
        os.kill(pids[0], signal.SIGUSR1)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        end_job(proc, pids)
    assert proc.returncode == 128 + signal.SIGUSR1, f"exit {proc.returncode}\n{stdout[-2000:]}\n{stderr[-2000:]}"
    assert re.search(rf"\(cut short by SIGUSR1 after \d+ of {LONG_SAMPLE} tokens\)", stdout), stdout[-2000:]
    assert f"stopped by SIGUSR1 after step 2 of 100000000: saved {out / 'ckpt_00000002.bin'}" in stdout, stdout[-2000:]
    assert read_log(out)[-1] == {"event": "stopped", "step": 2, "signal": "SIGUSR1"}


def test_eval_mc_under_ranks_equals_one_process(tmp_path, data):
    """--eval-mc under 2 and 3 ranks: each rank forwards every W-th batch of rows and the row sums
    are added over the ranks, so the accuracies equal one process's exactly (160 rows in 54
    batches of 3: the last batch is short, and 3 ranks get 18 batches each, 2 ranks 27)."""
    from test_trainer_cli import successor_mc_examples, write_mc

    mcf = write_mc(tmp_path / "succ.vpmc", successor_mc_examples(40, seed=3))
    common = TINY_LLAMA + ["--train-data", data / "train_*.bin", "--batch-size", "3", "--max-steps", "3", "--lr", "1e-2",
                           "--eval-every", "3", "--eval-mc", f"s={mcf}"]
    single(common + ["--total-batch-tokens", "144", "--out-dir", tmp_path / "one"])  # 6 micro-batches of 3 x 8: any of 1, 2, 3 ranks
    evals = {}
    for world in (1, 2, 3):
        out = tmp_path / f"w{world}"
        if world == 1:
            out = tmp_path / "one"
        else:
            mpirun(world, common + ["--total-batch-tokens", "144", "--out-dir", out])
        evals[world] = [r for r in read_log(out) if "mc_acc_s" in r]
    assert [r["step"] for r in evals[1]] == [0, 3]
    # step 0: the same weights, so the same figures bit for bit; step 3: the weights agree to fp32
    # round-off only, but the accuracies are counts over 40 examples
    assert evals[2][0] == evals[1][0] and evals[3][0] == evals[1][0]
    for world in (2, 3):
        for k in ("mc_acc_s", "mc_acc_norm_s", "mc_acc_tokavg_s"):
            assert abs(evals[world][1][k] - evals[1][1][k]) <= 1 / 40 + 1e-12, (world, k, evals)


def test_depth_alpha_under_two_ranks_equals_one_process(tmp_path, data):
    """Depth-Attention's logged weights: each rank sums its own val batches and the sums are added
    over the ranks (3 val batches over 2 ranks: one rank has 2, the other 1)."""
    common = TINY_LLAMA + ["--train-data", data / "train_*.bin", "--val-data", data / "val_*.bin", "--eval-batches", "3",
                           "--batch-size", "4", "--max-steps", "2", "--lr", "1e-2", "--eval-every", "2", "--depth-stride", "1",
                           "--total-batch-tokens", "64"]
    single(common + ["--out-dir", tmp_path / "one"], path="depth")
    mpirun(2, common + ["--out-dir", tmp_path / "two"], path="depth")
    a, b = ([r["depth_alpha"] for r in read_log(tmp_path / d) if "depth_alpha" in r] for d in ("one", "two"))
    assert len(a) == len(b) == 2 and [len(row) for row in a[0]] == [2]  # 2 layers, stride 1: layer 1 reads {0}
    for x, y in zip(a, b):
        np.testing.assert_allclose(np.concatenate(y), np.concatenate(x), rtol=1e-5)
