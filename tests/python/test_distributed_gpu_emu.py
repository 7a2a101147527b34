"""Data parallel on the GPU build (NCCL, ZeRO-1: kernels/zero.cuh, docs/distributed.md) with several
ranks, on a machine without GPUs: each MPI rank runs the GPU trainer on the CUDA emulator
(tests/emu/), and NCCL's collectives are carried over MPI (tests/emu/nccl_emu.cpp). `make test`
builds build/emu/{vanilla-mpi/train_fp32, depth-mpi/train_bf16, resformer-mpi/train_bf16} where
mpicxx and mpirun exist.

This runs the GPU side of data parallelism for real -- each layer's gradient all-reduce (ZeRO-1:
reduce to the shard's owner) on its own stream during the backward, the sharded master weights
and AdamW, the in-place all-gather of the bf16 weights, the broadcast of ResFormer's lambdas, the
gathered checkpoint -- with the same assertions as the CPU build's
tests/python/test_distributed.py. The overlapped all-reduce is also run with each of the two
streams held back in turn (VP_EMU_STREAMS, tests/emu/cuda_emu.h "Streams"): a missing event
between the backward and the all-reduce, or between the all-reduce and the optimizer, then changes
the numbers. It says nothing about NCCL itself (its transports, its summation order, its failure
modes), about real concurrency, or about several real GPUs: those still need a multi-GPU machine.
"""
import re
import shutil
import time

import numpy as np
import pytest

from test_distributed import MPIRUN, losses, run_with_a_bad_token, step_losses
from test_distributed import mpirun as mpirun_trainer
from test_gpu_trainer_emu import MODEL, REPO, emu_trainer, run
from test_trainer_cli import checkpoint_tensors, data, pattern_tokens, read_log, write_shard  # noqa: F401  (data is a fixture)

pytestmark = pytest.mark.skipif(MPIRUN is None, reason="no mpirun: apt-get install libopenmpi-dev openmpi-bin (CI has it)")


def mpirun(np_, args, path="vanilla", prec="fp32", env=None, expect=0, timeout=600):
    binary = REPO / "build" / "emu" / f"{path}-mpi" / f"train_{prec}"
    return mpirun_trainer(np_, args, expect=expect, timeout=timeout, env=env, binary=binary)


def single(args, prec="fp32"):
    return run(emu_trainer(prec), args, expect=0, env={"OMP_NUM_THREADS": "1"})


def common(data, steps):
    return MODEL + ["--train-data", data / "train_*.bin", "--batch-size", "2", "--max-steps", str(steps), "--lr", "1e-2",
                    "--warmup-steps", "2", "--grad-clip", "1.0"]


def test_two_emulated_gpus_equal_one_with_accumulation(tmp_path, data):
    """2 ranks x B=2 == 1 process x B=2 x 2 accumulation steps (fp32): the same losses to fp32
    round-off, the first one exactly; ZeRO-0 and ZeRO-1 bit-identical, losses and weights."""
    single(common(data, 4) + ["--total-batch-tokens", "64", "--out-dir", tmp_path / "one"])
    for zero in (0, 1):
        p = mpirun(2, common(data, 4) + ["--zero", zero, "--out-dir", tmp_path / f"two_z{zero}"])
        assert f"2 ranks, ZeRO-{zero}" in p.stdout and "nccl: 2 ranks" in p.stdout
    a, b0, b1 = (losses(tmp_path / d) for d in ["one", "two_z0", "two_z1"])
    assert len(a) == 4 and b0 == b1
    assert b0[0] == a[0]  # the same parameters see the same sequences: the first loss is exact
    # later steps: the two ranks' gradients are summed in another order than one process's
    # accumulation (fp32 round-off, ~1e-7 relative per step, amplified by 3 AdamW steps)
    np.testing.assert_allclose(b0, a, rtol=1e-5)
    t = {d: checkpoint_tensors(tmp_path / d / "ckpt_00000004.bin") for d in ["one", "two_z0", "two_z1"]}
    assert t["two_z0"] == t["two_z1"]  # sharding the optimizer changes no bit
    one, two = np.frombuffer(t["one"], np.float32), np.frombuffer(t["two_z0"], np.float32)
    n = len(one) // 3
    # The weights, norm-wise. Element-wise they are ill-conditioned after AdamW: an element whose
    # gradient is mostly cancellation carries a round-off of 1e-4 relative or more, and m / sqrt(v)
    # passes it on whole. Seen 2026-11-26 when the attention backward's delta pass changed its
    # summation order: m and v of one attention-projection weight differed by 2e-4 relative, its
    # weight (-0.00134) by 2.6e-6, while the norm-wise error of all 23776 weights was 5.4e-7.
    # A real fault (a rank's gradient lost or counted twice, a shard updated twice) changes the
    # AdamW steps themselves, up to lr = 1e-2 per element per step: far above this bound.
    rel = np.linalg.norm(two[:n].astype(np.float64) - one[:n]) / np.linalg.norm(one[:n].astype(np.float64))
    assert rel < 1e-5, f"weights: 2 ranks vs accumulation differ by {rel:.3e} norm-wise (fp32 round-off gives ~5e-7)"


def test_three_emulated_gpus_uneven_shards(tmp_path, data):
    """3 ranks: the shards are slots of ceil(n/3) with a shorter last one, the bf16/fp32 weight
    buffer is padded past n, and gradient slices cross shard boundaries at other places than with
    2 ranks. 3 ranks x B=2 must equal 1 process x B=2 x 3 accumulation steps to fp32 round-off,
    under ZeRO-0 and ZeRO-1 alike. Not even the first loss is bit-exact: rank r reads sequences
    r, r+3, ..., the one process consecutive ones, so the per-batch means are other float sums.
    Nor are ZeRO-0 and ZeRO-1 asserted bit-identical: with 3 ranks MPI may add the reduce and the
    all-reduce in different orders."""
    single(common(data, 4) + ["--total-batch-tokens", "96", "--out-dir", tmp_path / "one"])
    for zero in (0, 1):
        p = mpirun(3, common(data, 4) + ["--zero", zero, "--out-dir", tmp_path / f"three_z{zero}"])
        assert f"3 ranks, ZeRO-{zero}" in p.stdout
    a, b0, b1 = (losses(tmp_path / d) for d in ["one", "three_z0", "three_z1"])
    assert len(a) == 4 and len(b0) == 4 and len(b1) == 4
    np.testing.assert_allclose(b0, a, rtol=1e-5)
    np.testing.assert_allclose(b1, a, rtol=1e-5)
    # Weights, m and v against the one process's, normwise: 3 AdamW steps divide each gradient by
    # sqrt(v), so an element with a tiny gradient turns the sum's round-off into a visible change
    # (up to 7e-6 absolute on a weight, 1e-2 relative on a tiny v, seen here), while the normwise
    # error stays at fp32 round-off (6.5e-7 for the weights when written). A shard left out of the
    # update or gathered to the wrong place would be off by about lr = 1e-2 relative.
    t = {d: np.frombuffer(checkpoint_tensors(tmp_path / d / "ckpt_00000004.bin"), np.float32).astype(np.float64)
         for d in ["one", "three_z0", "three_z1"]}
    n = len(t["one"]) // 3
    assert n % 3 != 0, "the test model must have a parameter count that 3 does not divide (padding, uneven shards)"
    rel = lambda x, y: np.linalg.norm(x - y) / np.linalg.norm(y)
    for d in ("three_z0", "three_z1"):
        for name, part in (("weights", slice(0, n)), ("m", slice(n, 2 * n)), ("v", slice(2 * n, 3 * n))):
            err = rel(t[d][part], t["one"][part])
            assert err < 1e-5, f"{d} {name}: normwise relative error {err:.2e} against one process (bound 1e-5)"


def test_overlapped_all_reduce_is_the_same_whichever_stream_runs_late(tmp_path, data):
    """The per-layer all-reduces run on a second stream, ordered against the backward and the
    update by events only. Holding back the compute stream (the all-reduce would overtake the
    backward without its event) or the communication stream (the grad norm and AdamW would read
    unsummed gradients without the wait) must change no bit of the losses or the weights; nor must
    --overlap-reduce 0, which issues the same all-reduces after the backward."""
    args = common(data, 3) + ["--total-batch-tokens", "128"]  # 2 accumulation steps: only the last backward overlaps
    runs = {}
    for name, policy, overlap in (("inline", "inline", 1), ("hold-first", "hold-first", 1), ("hold-others", "hold-others", 1),
                                  ("after", "inline", 0)):
        mpirun(2, args + ["--overlap-reduce", overlap, "--out-dir", tmp_path / name], env={"VP_EMU_STREAMS": policy})
        runs[name] = (losses(tmp_path / name), checkpoint_tensors(tmp_path / name / "ckpt_00000003.bin"))
    assert len(runs["inline"][0]) == 3
    assert runs["hold-first"] == runs["inline"] and runs["hold-others"] == runs["inline"]
    assert runs["after"] == runs["inline"]  # --overlap-reduce 0: the same all-reduces after the backward


def test_resume_under_two_emulated_gpus_is_bit_exact(tmp_path, data):
    """ZeRO-1 resume, the second run saving and loading its checkpoints in pieces of 7 floats (each
    rank's master and moment shards streamed to and from the file, train_gpt.cu model_save and
    model_load): bit-exact against the run that was not interrupted."""
    args = common(data, 6) + ["--checkpoint-every", "3", "--zero", "1"]
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    small_pieces = {"VP_CHECKPOINT_CHUNK": "7"}
    mpirun(2, args + ["--out-dir", straight])
    mpirun(2, args + ["--out-dir", broken], env=small_pieces)
    assert checkpoint_tensors(straight / "ckpt_00000003.bin") == checkpoint_tensors(broken / "ckpt_00000003.bin")
    (broken / "ckpt_00000006.bin").unlink()
    p = mpirun(2, args + ["--out-dir", broken, "--resume", 1], env=small_pieces)
    assert "(step 3)" in p.stdout
    assert losses(straight)[3:] == losses(broken)[-3:]
    assert checkpoint_tensors(straight / "ckpt_00000006.bin") == checkpoint_tensors(broken / "ckpt_00000006.bin")


def test_bad_train_shard_found_by_one_emulated_gpu_saves_the_last_completed_step(tmp_path):
    """The GPU build's twin of test_distributed.py's bad-shard test (ZeRO-1): rank 1 alone loads a
    shard with a bad id mid-run and skips the step's forward and backward, so its gradient reduce
    issues every layer's all-reduce itself, matching those rank 0's backward overlapped; then both
    ranks save the last completed step (a sharded, collective save) and stop with an error. Both
    shards hold 4k+3 sequences of T=16 and a step reads 4 (B=2 x 2 ranks), so the boundary after
    the first shard is rank 1's last sequence of a step. After the fix, --resume gives the
    uninterrupted run's losses, bit for bit."""
    good, shards = tmp_path / "good", tmp_path / "shards"
    good.mkdir()
    for i, seqs in enumerate([11, 15]):
        write_shard(str(good / f"train_{i:03d}.bin"), pattern_tokens(seqs * 16 + 1, seed=i), 1)
    args = lambda d: MODEL + ["--train-data", shards / "train_*.bin", "--batch-size", "2", "--max-steps", "6", "--lr", "1e-2",
                              "--zero", "1", "--out-dir", d]
    shutil.copytree(good, shards)
    ref = step_losses(mpirun(2, args(tmp_path / "ref")).stdout)
    assert len(ref) == 6
    mid_run = 0
    for bad in ("train_000.bin", "train_001.bin"):  # one of them is loaded by step 1, before anything can be saved
        out = tmp_path / f"run_{bad}"
        p, n = run_with_a_bad_token(good, shards, bad, lambda: mpirun(2, args(out), expect=None))
        if n is None:
            continue
        mid_run += 1
        assert n in (2, 3) and "rank 0 stops: 1 other rank(s) could not read their training data" in p.stderr, p.stderr[-3000:]
        assert step_losses(p.stdout) == {s: l for s, l in ref.items() if int(s) <= n}
        shutil.copy(good / bad, shards / bad)  # the fix
        resumed = mpirun(2, args(out) + ["--resume", 1])
        assert step_losses(resumed.stdout) == {s: l for s, l in ref.items() if int(s) > n}
    assert mid_run == 1


@pytest.mark.parametrize("zero", [0, 1])
def test_forced_data_parallel_path_with_one_rank_is_bit_identical(tmp_path, data, zero):
    """VP_DIST_FORCE=1 with one rank (what dev/device_check.sh runs on one real GPU): the plain
    emulated build's losses and checkpoint, bit for bit."""
    single(common(data, 3) + ["--out-dir", tmp_path / "plain"])
    p = mpirun(1, common(data, 3) + ["--zero", zero, "--out-dir", tmp_path / "forced"], env={"VP_DIST_FORCE": "1"})
    assert f"1 ranks, ZeRO-{zero}" in p.stdout
    assert len(losses(tmp_path / "plain")) == 3 and losses(tmp_path / "forced") == losses(tmp_path / "plain")
    assert checkpoint_tensors(tmp_path / "forced" / "ckpt_00000003.bin") == checkpoint_tensors(tmp_path / "plain" / "ckpt_00000003.bin")


def test_depth_bf16_two_emulated_gpus_zero1_equal_zero0(tmp_path, data):
    """A cross-layer path in bf16 (Depth's accumulators, fp32 master weights under bf16 params):
    ZeRO-1's sharded update changes no bit against ZeRO-0."""
    args = common(data, 3) + ["--depth-stride", "1"]
    for zero in (0, 1):
        mpirun(2, args + ["--zero", zero, "--out-dir", tmp_path / f"z{zero}"], path="depth", prec="bf16")
    assert losses(tmp_path / "z0") == losses(tmp_path / "z1") and len(losses(tmp_path / "z0")) == 3
    assert checkpoint_tensors(tmp_path / "z0" / "ckpt_00000003.bin") == checkpoint_tensors(tmp_path / "z1" / "ckpt_00000003.bin")


def test_resformer_bf16_learnable_lambda_zero1_equal_zero0(tmp_path, data):
    """ResFormer with learnable lambdas in bf16: under ZeRO-1 the lambdas live in one rank's master
    shard, yet every rank's attention reads them in fp32 (broadcast after each update). If that
    broadcast were missing, the other rank would keep the initial lambdas and the weights would
    part from ZeRO-0's."""
    args = common(data, 3) + ["--resformer-lambda", "learn", "--checkpoint-every", "2"]
    for zero in (0, 1):
        mpirun(2, args + ["--zero", zero, "--out-dir", tmp_path / f"z{zero}"], path="resformer", prec="bf16")
    assert losses(tmp_path / "z0") == losses(tmp_path / "z1") and len(losses(tmp_path / "z0")) == 3
    assert checkpoint_tensors(tmp_path / "z0" / "ckpt_00000003.bin") == checkpoint_tensors(tmp_path / "z1" / "ckpt_00000003.bin")
    # rank 0 logs the lambdas from its fp32 copy: under ZeRO-1 that is the broadcast one
    lambdas = lambda d: [r["resformer_lambdas"] for r in read_log(d) if "train_loss" in r]
    assert lambdas(tmp_path / "z1") == lambdas(tmp_path / "z0") and lambdas(tmp_path / "z0")[-1][1] != 0.5
    # resumed under ZeRO-1 from step 2 through 7-float pieces: the bf16 weights are rounded from the
    # staged fp32 ones, the lambdas' fp32 copy comes from the staging buffer, each rank keeps its
    # shard of the master weights and moments; bit-exact
    (tmp_path / "z1" / "ckpt_00000003.bin").unlink()
    mpirun(2, args + ["--zero", 1, "--out-dir", tmp_path / "z1", "--resume", 1], path="resformer", prec="bf16", env={"VP_CHECKPOINT_CHUNK": "7"})
    assert checkpoint_tensors(tmp_path / "z0" / "ckpt_00000003.bin") == checkpoint_tensors(tmp_path / "z1" / "ckpt_00000003.bin")


@pytest.mark.parametrize("prec", ["fp32", "bf16"])
def test_zero1_device_memory_is_sharded(tmp_path, data, prec):
    """ZeRO-1 keeps the fp32 master weights and AdamW m, v of its own shard only: rank 0's
    figure must be exactly the layout of kernels/zero.cuh and host/distributed.h -- weights padded to
    2 slots of ceil(n/2) (floatX), the full fp32 gradients, and per shard element m, v (and in
    bf16 the master weight) -- i.e. 6 + 12/W bytes per parameter in bf16, 8 + 8/W in fp32, instead
    of 18 and 16."""
    path = "depth" if prec == "bf16" else "vanilla"
    args = common(data, 1) + (["--depth-stride", "1"] if path == "depth" else [])
    p = mpirun(2, args + ["--zero", 1, "--out-dir", tmp_path / "z1"], path=path, prec=prec)
    n = int(re.search(r"\| (\d+) parameters", p.stdout).group(1))
    m = re.search(r"ZeRO-1: master weights and AdamW state of (\d+) of (\d+) parameters on this rank; .*: (\d+) bytes", p.stdout)
    assert m, p.stdout[-2000:]
    slot = (n + 1) // 2
    x, per_shard = (4, 2) if prec == "fp32" else (2, 3)  # floatX bytes; fp32 arrays per shard element
    assert int(m.group(1)) == slot and int(m.group(2)) == n
    assert int(m.group(3)) == 2 * slot * x + 4 * n + 4 * per_shard * slot
    p0 = mpirun(2, args + ["--zero", 0, "--out-dir", tmp_path / "z0"], path=path, prec=prec)
    assert "ZeRO-1:" not in p0.stdout


def run_with_fault(tmp_path, data, fault, timeout_s):
    """A long 2-rank run with VP_EMU_NCCL_FAULT=fault (tests/emu/nccl_emu.cpp): it must fail, and
    within 60 s. Returns the finished process."""
    t0 = time.time()
    p = mpirun(2, common(data, 50) + ["--out-dir", tmp_path / "run"], expect=None, timeout=120,
               env={"VP_EMU_NCCL_FAULT": fault, "VP_DIST_TIMEOUT": timeout_s})
    assert p.returncode != 0 and time.time() - t0 < 60
    return p


def test_a_frozen_rank_is_reported_by_the_gradient_wait(tmp_path, data):
    """Rank 1 freezes (SIGSTOP, injected by the emulated NCCL at its 5th collective: inside step 1's
    overlapped all-reduce): rank 0's collectives never complete, and its polling wait (nccl_wait,
    VP_DIST_TIMEOUT=3) must report it, abort the communicator and exit 1, which ends the job."""
    p = run_with_fault(tmp_path, data, "hang:1:5", "3")
    assert "rank 1 stops itself at collective 5" in p.stderr
    assert "rank 0: the gradient all-reduce has waited" in p.stderr and "died or hangs" in p.stderr, p.stderr[-3000:]
    assert "rank 0: NCCL failed (see above); the communicator was aborted" in p.stderr


def test_a_closed_connection_is_reported_by_the_rank_that_sees_it(tmp_path, data):
    """ncclCommGetAsyncError reports a closed peer connection on rank 1 (injected at its 5th
    collective): rank 1 names the failed collective, aborts and exits 1, and the job ends."""
    p = run_with_fault(tmp_path, data, "error:1:5", "30")
    assert "rank 1: the gradient all-reduce failed" in p.stderr and "a peer closed its connection" in p.stderr, p.stderr[-3000:]
