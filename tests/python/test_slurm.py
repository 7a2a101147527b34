"""The MPI CPU trainer under a real Slurm: srun's PMIx ranks, sbatch's time-limit and --signal
warnings, and a recipe resubmitted after its job ended (docs/distributed.md, "Slurm").

Opt-in: `make test-slurm` sets VP_TEST_SLURM=1 and, where SLURM_CONF is not set, starts a one-node
cluster on this machine first (dev/slurm_local.sh: slurmctld and slurmd by hand, root needed).
Without VP_TEST_SLURM these tests skip, so that `make test` never submits jobs to a cluster that
happens to be reachable. Each job asks for one node and 2 tasks; the signal tests wait for Slurm's
own timing (its time limits are whole minutes), about 6 minutes in all on the 2-core machine.
"""
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import PMIX_PSEC_SET_HERE
from test_distributed import losses, mpi_trainer, mpirun
from test_trainer_cli import REPO, TINY_GPT2, checkpoint_tensors, data, read_log  # noqa: F401

pytestmark = [
    pytest.mark.skipif(os.environ.get("VP_TEST_SLURM") != "1",
                       reason="the Slurm tests run with `make test-slurm` (a one-node cluster of its own: dev/slurm_local.sh)"),
]


@pytest.fixture(scope="module", autouse=True)
def cluster():
    """Fails (does not skip) when asked to run and no controller answers: `make test-slurm` started one."""
    for tool in ("sinfo", "srun", "sbatch", "scontrol"):
        assert shutil.which(tool), f"{tool} not found: apt-get install -y slurm-wlm munge"
    p = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "idle" in p.stdout.split(), \
        f"no idle Slurm node (SLURM_CONF={os.environ.get('SLURM_CONF')}): bash dev/slurm_local.sh start\n{p.stdout}{p.stderr}"
    assert mpi_trainer("vanilla").exists(), "build/vanilla-mpi/train_cpu is missing: make train_cpu USE_MPI=1"


def env():
    # one OpenMP thread per rank: two ranks share the two cores of the test machine; PMIx's security
    # plugin as Slurm's PMIx server chooses, not conftest.py's choice for mpirun on this machine
    e = {**os.environ, "OMP_NUM_THREADS": "1"}
    if PMIX_PSEC_SET_HERE:
        e.pop("PMIX_MCA_psec", None)
    return e


def srun(n, args, timeout=300):
    cmd = ["srun", "--mpi=pmix", "-N", "1", "-n", str(n), str(mpi_trainer("vanilla"))] + [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env())
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}"
    return p


def sbatch(options, script, cwd, timeout=400):
    """Submits a batch job and waits for its end (sbatch --wait); returns (its exit status, its output, its id)."""
    out = Path(cwd) / "job.out"
    if out.exists():
        out.unlink()
    p = subprocess.run(["sbatch", "--wait", "--parsable", "-N", "1", "-n", "2", "-o", str(out), *options, "--wrap", script],
                       capture_output=True, text=True, timeout=timeout, env=env(), cwd=cwd)
    job = p.stdout.strip().split(";")[0]
    return p.returncode, out.read_text() if out.exists() else "", job


def job_field(job, name):
    text = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True, timeout=30).stdout
    m = re.search(rf"\b{name}=(\S+)", text)
    assert m, f"no {name} in scontrol's record of job {job}: {text}"
    return m.group(1)


def quoted(args):
    return " ".join(f"'{a}'" for a in args)


# Steps of about 150 ms on the 2-core machine (500 micro-batches a rank), so a run that Slurm
# stops after 30 to 60 seconds has a few hundred of them; a constant lr, so that the stopped
# run's --max-steps of a million need not be reached (as test_trainer_cli's signal tests).
def slow_steps(data):
    return TINY_GPT2 + ["--train-data", data / "train_*.bin", "--val-data", data / "val_*.bin", "--batch-size", "2",
                        "--total-batch-tokens", str(2 * 8 * 500 * 2), "--lr", "3e-3", "--lr-schedule", "constant",
                        "--warmup-steps", "3", "--eval-every", "50", "--checkpoint-every", "100000"]


@pytest.mark.parametrize("zero", [0, 1])
def test_srun_pmix_ranks_train_as_mpirun_ranks_bit_for_bit(tmp_path, data, zero):
    """srun --mpi=pmix starts the ranks through Slurm's PMIx server instead of mpirun's: the same
    world, the same shards of the batch, the same losses and checkpoint, bit for bit."""
    common = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--val-data", data / "val_*.bin", "--batch-size", "4",
                          "--max-steps", "6", "--lr", "1e-2", "--warmup-steps", "2", "--eval-every", "3", "--zero", zero]
    p = srun(2, common + ["--out-dir", tmp_path / "srun"])
    assert f"data parallel: 2 ranks, ZeRO-{zero}" in p.stdout and p.stdout.count("step ") >= 6  # rank 0 alone logs
    mpirun(2, common + ["--out-dir", tmp_path / "mpirun"])
    cfg = read_log(tmp_path / "srun")[0]
    assert cfg["world"] == 2 and cfg["zero"] == zero
    a, b = losses(tmp_path / "srun"), losses(tmp_path / "mpirun")
    assert len(a) == 6 and a == b
    val = lambda d: [(r["step"], r["val_loss"]) for r in read_log(d) if "val_loss" in r]
    assert val(tmp_path / "srun") == val(tmp_path / "mpirun") and [s for s, _ in val(tmp_path / "srun")] == [0, 3, 6]
    assert checkpoint_tensors(tmp_path / "srun" / "ckpt_00000006.bin") == checkpoint_tensors(tmp_path / "mpirun" / "ckpt_00000006.bin")


def stopped_step(out_dir, output, signame):
    """The step a stopped run saved, checked in its log.jsonl, checkpoint and console."""
    last = read_log(out_dir)[-1]
    assert last.get("event") == "stopped" and last["signal"] == signame, (last, output[-3000:])
    s = last["step"]
    assert (Path(out_dir) / f"ckpt_{s:08d}.bin").exists()
    assert f"stopped by {signame} after step {s} of" in output, output[-3000:]
    return s


def test_sbatch_signal_usr1_reaches_every_srun_rank_and_the_run_resumes_exactly(tmp_path, data):
    """`sbatch --signal=USR1@60` (without B:) signals the job's steps: both srun tasks get SIGUSR1
    between 60 and 90 seconds before the 2-minute limit, stop after the same step, save it and exit
    138, which srun and the job pass on (scontrol: ExitCode=138:0). Resumed with srun, the run
    gives the losses and weights of one that never stopped."""
    common = slow_steps(data)
    rc, output, job = sbatch(["--time=2", "--signal=USR1@60"],
                             f"srun --mpi=pmix {mpi_trainer('vanilla')} {quoted(common)} --max-steps 1000000 --out-dir stopped",
                             tmp_path)
    assert rc == 138 and job_field(job, "ExitCode") == "138:0", (rc, output[-3000:])
    assert job_field(job, "JobState") == "FAILED"  # stopped before its time limit: not TIMEOUT
    s = stopped_step(tmp_path / "stopped", output, "SIGUSR1")
    assert output.count("SIGUSR1: stopping after this step") >= 1 and "already stopping" not in output
    n = s + 4
    srun(2, common + ["--max-steps", n, "--out-dir", tmp_path / "straight"])
    p = srun(2, common + ["--max-steps", n, "--out-dir", tmp_path / "stopped", "--resume", "1"])
    assert f"(step {s})" in p.stdout
    after = lambda d: [(r["step"], r["train_loss"]) for r in read_log(d) if r.get("step", 0) > s and "train_loss" in r]
    assert after(tmp_path / "stopped") == after(tmp_path / "straight") and len(after(tmp_path / "straight")) == 4
    assert checkpoint_tensors(tmp_path / "stopped" / f"ckpt_{n:08d}.bin") == checkpoint_tensors(tmp_path / "straight" / f"ckpt_{n:08d}.bin")


def test_mpirun_in_a_batch_script_hears_signal_b_usr1_through_exec(tmp_path, data):
    """mpirun started by the batch script itself is no job step, so `--signal=USR1@T` reaches none
    of its ranks on one node; `--signal=B:USR1@T` signals the batch shell, and with `exec mpirun`
    that is mpirun, which forwards SIGUSR1 to every rank at once: they stop, save and exit 138."""
    common = slow_steps(data)
    script = f"exec mpirun --allow-run-as-root --bind-to none {mpi_trainer('vanilla')} {quoted(common)} --max-steps 1000000 --out-dir run"
    rc, output, job = sbatch(["--time=2", "--signal=B:USR1@60"], script, tmp_path)
    s = stopped_step(tmp_path / "run", output, "SIGUSR1")
    assert s > 3 and job_field(job, "JobState") == "FAILED", output[-3000:]


RECIPE = REPO / "scripts" / "recipes" / "gpt2_124m_owt.sh"


def recipe_job(tmp_path, steps, exec_recipe):
    """The batch script of a job that runs RECIPE (vanilla, 2 srun ranks, steps of about 150 ms) on
    tiny shards in tmp_path, with exec (the recipe is the batch shell) or without; and the run's
    directory."""
    from test_recipes import SMALL, TINY, shards
    d = shards(tmp_path / "owt", "openwebtext_train", ["openwebtext_val"])
    recipe_env = {**SMALL, "DATA": d, "OUT": tmp_path / "out", "STEPS": steps, "TOTAL": 2 * 8 * 2 * 500, "EVAL_EVERY": 100,
                  "CHECKPOINT_EVERY": 100000, "KEEP_EVERY": 0, "MODEL": "--arch gpt2 " + TINY, "NGPU": 2,
                  "LAUNCH": "srun --mpi=pmix", "TRAINER": str(REPO / "build" / "{path}-mpi" / "train_cpu")}
    assignments = " ".join(f"{k}='{v}'" for k, v in recipe_env.items())
    script = f"exec env {assignments} bash {RECIPE}" if exec_recipe else f"{assignments} bash {RECIPE}"
    return script, tmp_path / "out" / "vanilla"


def test_a_recipe_stopped_at_its_time_limit_resumes_when_the_job_is_submitted_again(tmp_path):
    """A recipe in a batch job with LAUNCH='srun --mpi=pmix' and no --signal: at the 1-minute
    limit slurmctld sends SIGTERM to the job's steps, the ranks save the step and exit 143, and the
    recipe stops saying so. The same job submitted again resumes the run from that checkpoint (its
    config line says resumed_from) and goes on, step after step, until its own time limit."""
    script, out = recipe_job(tmp_path, 1000000, exec_recipe=False)
    steps = []
    for attempt in range(2):
        rc, output, job = sbatch(["--time=1"], script, tmp_path)
        assert rc != 0 and job_field(job, "JobState") == "TIMEOUT", (rc, output[-3000:])
        steps.append(stopped_step(out, (tmp_path / "out" / "vanilla.out").read_text(), "SIGTERM"))
        assert "error: the vanilla run stopped on signal 15" in output, output[-3000:]
    configs = [r for r in read_log(out) if r.get("event") == "config"]
    assert len(configs) == 2 and "resumed_from" not in configs[0] and configs[1]["resumed_from"] == steps[0]
    assert steps[1] > steps[0] > 3
    logged = [r["step"] for r in read_log(out) if "train_loss" in r]
    assert logged == list(range(1, steps[1] + 1))  # no step lost or repeated across the two jobs


def test_a_recipe_as_the_batch_shell_passes_signal_b_usr1_on(tmp_path):
    """`--signal=B:USR1@T` signals the batch shell alone; with `exec bash <recipe>` that is the
    recipe, which passes SIGUSR1 on to its run (here srun, which passes it to both ranks): the run
    stops after a step with its checkpoint, and the recipe and the job with 138, before the limit."""
    script, out = recipe_job(tmp_path, 1000000, exec_recipe=True)
    rc, output, job = sbatch(["--time=2", "--signal=B:USR1@60"], script, tmp_path)
    assert rc == 138 and job_field(job, "JobState") == "FAILED", (rc, output[-3000:])  # stopped before its limit
    s = stopped_step(out, (tmp_path / "out" / "vanilla.out").read_text(), "SIGUSR1")
    assert s > 3 and "error: the vanilla run stopped on signal 10" in output, output[-3000:]


def test_a_requeued_recipe_job_resumes_its_run_and_finishes_it(tmp_path):
    """`scontrol requeue` (what a preemption with PreemptMode=REQUEUE or a failed node does to a
    --requeue job): the running ranks get SIGTERM, save their step and exit 143; Slurm starts the
    batch script again (two to three minutes later on the local cluster: Slurm holds a requeued
    job back), the recipe resumes from that checkpoint and the run finishes, every step logged once."""
    from test_trainer_cli import logged_steps
    steps = 60
    script, out = recipe_job(tmp_path, steps, exec_recipe=True)
    p = subprocess.run(["sbatch", "--parsable", "--requeue", "--open-mode=append", "-N", "1", "-n", "2", "-o", str(tmp_path / "job.out"),
                        "--time=5", "--wrap", script], capture_output=True, text=True, timeout=60, env=env(), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip().split(";")[0]
    deadline = time.time() + 120
    while logged_steps(out) < 10 and time.time() < deadline:
        time.sleep(0.2)
    assert 10 <= logged_steps(out) < steps, (tmp_path / "job.out").read_text()[-3000:] if (tmp_path / "job.out").exists() else "no output"
    subprocess.run(["scontrol", "requeue", job], check=True, timeout=30, env=env())
    deadline = time.time() + 480
    while job_field(job, "JobState") not in ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED") and time.time() < deadline:
        time.sleep(1)
    output = (tmp_path / "job.out").read_text()
    assert job_field(job, "JobState") == "COMPLETED" and job_field(job, "Restarts") == "1", output[-3000:]
    events = [r for r in read_log(out) if r.get("event") in ("config", "stopped")]
    s = events[1]["step"]
    assert [(r["event"], r.get("signal")) for r in events] == [("config", None), ("stopped", "SIGTERM"), ("config", None)], events
    assert "resumed_from" not in events[0] and events[2]["resumed_from"] == s and 10 <= s < steps
    assert "error: the vanilla run stopped on signal 15" in output, output[-3000:]
    assert [r["step"] for r in read_log(out) if "train_loss" in r] == list(range(1, steps + 1))
    assert (out / f"ckpt_{steps:08d}.bin").exists()
