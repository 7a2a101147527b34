"""scripts/recipes/*.sh with the CPU trainer on tiny data and a tiny MODEL: each runs every one of
its value paths with the settings it states, resumes when run again, stops on a batch that does
not divide or on missing data with the command to run, and prints full-size commands for NGPU."""
import os
import re
import signal
import subprocess
import time

import pytest

from test_trainer_cli import REPO, logged_steps, pattern_tokens, read_log, write_shard

RECIPES = REPO / "scripts" / "recipes"
TINY = "--layers 2 --heads 2 --dim 16 --vocab 64 --max-seq 16"


def recipe(name, env, expect=0):
    p = subprocess.run(["bash", str(RECIPES / name)], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OMP_NUM_THREADS": "2", "TRAINER": str(REPO / "build" / "{path}" / "train_cpu"),
                            **{k: str(v) for k, v in env.items()}})
    assert p.returncode == expect, f"exit {p.returncode}, expected {expect}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}"
    return p


def shards(d, train, vals):
    d.mkdir()
    write_shard(str(d / f"{train}_000001.bin"), pattern_tokens(3000, seed=1), 1)
    for i, v in enumerate(vals):
        write_shard(str(d / f"{v}_000000.bin"), pattern_tokens(600, seed=10 + i), 1)
    return d


def configs(out, path):
    """The config lines of one run's log.jsonl, oldest first."""
    return [r for r in read_log(out / path) if r.get("event") == "config"]


SMALL = {"B": 2, "T": 8, "TOTAL": 32, "STEPS": 4, "WARMUP": 1, "EVAL_EVERY": 2, "CHECKPOINT_EVERY": 2}


def test_gpt2_owt_runs_each_path_with_its_settings_and_resumes(tmp_path):
    data = shards(tmp_path / "owt", "openwebtext_train", ["openwebtext_val"])
    out = tmp_path / "out"
    env = {**SMALL, "DATA": data, "OUT": out, "PATHS": "vanilla depth", "MODEL": "--arch gpt2 " + TINY}
    p = recipe("gpt2_124m_owt.sh", env)
    assert "| vanilla |" in p.stdout and "| depth |" in p.stdout and "Δ val vs vanilla" in p.stdout
    assert (out / "plot.png").read_bytes()[:4] == b"\x89PNG"
    for path in ["vanilla", "depth"]:
        c = configs(out, path)[0]
        assert c["value_path"] == path and c["tokens_per_step"] == 32 and c["grad_accum"] == 2
        assert (c["lr"], c["min_lr_frac"], c["weight_decay"], c["beta2"], c["grad_clip"]) == (6e-4, 0.1, 0.1, 0.95, 1)
        assert [r["step"] for r in read_log(out / path) if "train_loss" in r] == [1, 2, 3, 4]
    # run again with more steps: every run resumes from its newest checkpoint (step 4)
    recipe("gpt2_124m_owt.sh", {**env, "STEPS": 6})
    for path in ["vanilla", "depth"]:
        assert configs(out, path)[-1]["resumed_from"] == 4
        assert [r["step"] for r in read_log(out / path) if "train_loss" in r] == [1, 2, 3, 4, 5, 6]


def checkpoint_steps(d):
    return sorted(int(f.name[5:-4]) for f in d.glob("ckpt_*.bin"))


def test_recipes_keep_the_newest_two_checkpoints_and_every_quarter_of_the_run(tmp_path):
    data = shards(tmp_path / "owt", "openwebtext_train", ["openwebtext_val"])
    env = {**SMALL, "STEPS": 8, "CHECKPOINT_EVERY": 1, "DATA": data, "MODEL": "--arch gpt2 " + TINY}
    # by default every checkpoint at a multiple of a quarter of the steps (8 / 4 = 2) is kept for good
    for keep_every, kept in [(None, [2, 4, 6, 7, 8]), (3, [3, 6, 7, 8]), (0, [7, 8])]:
        out = tmp_path / f"out{keep_every}"
        recipe("gpt2_124m_owt.sh", {**env, "OUT": out, **({} if keep_every is None else {"KEEP_EVERY": keep_every})})
        assert checkpoint_steps(out / "vanilla") == kept, keep_every
    # the default is rounded down to a multiple of CHECKPOINT_EVERY, and is at least one of them
    p = recipe("gpt2_124m_owt.sh", {"DRY_RUN": 1, "TRAINER": ""})  # 18000 steps, a checkpoint every 1000
    assert "--checkpoint-every 1000 --keep-checkpoints 2 --keep-checkpoints-every 4000" in p.stdout
    p = recipe("gpt2_124m_owt.sh", {"DRY_RUN": 1, "TRAINER": "", "STEPS": 100})
    assert "--keep-checkpoints 2 --keep-checkpoints-every 1000" in p.stdout


def test_sla_recipe_uses_nine_skip_layers_and_heads(tmp_path):
    data = shards(tmp_path / "owt", "openwebtext_train", ["openwebtext_val"])
    out = tmp_path / "out"
    # SLA (9, 9) needs 12 layers and 12 heads: a 12-layer model of width 24
    model = "--arch gpt2 --layers 12 --heads 12 --dim 24 --vocab 64 --max-seq 16"
    recipe("sla_gpt2_owt.sh", {**SMALL, "STEPS": 2, "DATA": data, "OUT": out, "MODEL": model})
    sla = configs(out, "sla")[0]
    assert (sla["value_path"], sla["sla_layers"], sla["sla_heads"], sla["lr"], sla["warmup_steps"]) == ("sla", 9, 9, 1.5e-4, 1)
    assert configs(out, "vanilla")[0]["value_path"] == "vanilla"


def test_resformer_recipe_evaluates_every_domain(tmp_path):
    data = shards(tmp_path / "sp", "slimpajama_train", ["slimpajama_val_arxiv", "slimpajama_val_c4"])
    out = tmp_path / "out"
    model = "--arch llama --layers 2 --heads 2 --dim 16 --ffn-dim 24 --vocab 64 --max-seq 16"
    p = recipe("resformer_llama_slimpajama.sh", {**SMALL, "DATA": data, "OUT": out, "MODEL": model})
    for path in ["vanilla", "resformer", "svformer"]:
        log = read_log(out / path)
        assert log[0]["value_path"] == path and log[0]["arch"] == "llama"
        evals = [r for r in log if any(k.startswith("val_loss") for k in r)]
        assert evals and all(set(r) == {"step", "val_loss_arxiv", "val_loss_c4"} for r in evals)
    assert configs(out, "resformer")[0]["resformer_lambda"] == "fixed"
    assert "val arxiv" in p.stdout and "val c4" in p.stdout


def test_depth_recipe_runs_qwen3_style_models_with_the_pile_val(tmp_path):
    data = shards(tmp_path / "pile", "pile_train", ["pile_val"])
    out = tmp_path / "out"
    model = "--arch llama --layers 4 --heads 4 --kv-heads 2 --dim 32 --ffn-dim 48 --qk-norm 1 --vocab 64 --max-seq 16"
    p = recipe("depth_qwen3_pile.sh", {**SMALL, "DATA": data, "OUT": out, "MODEL": model})
    assert "| vanilla |" in p.stdout and "| depth |" in p.stdout
    for path in ["vanilla", "depth"]:
        log = read_log(out / path)
        c = log[0]
        assert (c["value_path"], c["arch"], c["qk_norm"], c["kv_heads"], c["lr"], c["warmup_steps"]) == (path, "llama", 1, 2, 3e-4, 1)
        assert any("val_loss" in r for r in log)
    assert configs(out, "depth")[0]["depth_stride"] == 2  # a MODEL of its own gets the trainer's L/2


def test_depth_recipe_full_size_uses_the_papers_shapes_and_strides():
    p = recipe("depth_qwen3_pile.sh", {"DRY_RUN": 1, "NGPU": 8, "SIZE": "1.5B", "B": 4, "TRAINER": ""})
    vanilla, depth = p.stdout.strip().splitlines()
    shape = "--arch llama --layers 48 --heads 24 --kv-heads 6 --dim 1536 --ffn-dim 4096 --qk-norm 1 --vocab 50277"
    for line in (vanilla, depth):
        assert shape in line and "--rope-theta 1000000 --max-seq 2048" in line
        assert "--batch-size 4 --seq-len 2048 --total-batch-tokens 2097152 --max-steps 15625 --lr 3e-4 --warmup-steps 313" in line
    assert "--depth-stride 24" in depth and "--depth-stride" not in vanilla
    p = recipe("depth_qwen3_pile.sh", {"DRY_RUN": 1, "SIZE": "360M", "PATHS": "depth", "TRAINER": ""})
    assert "--heads 15 --kv-heads 15 --dim 960 --ffn-dim 2544" in p.stdout and "--depth-stride 12" in p.stdout


def test_depth_recipe_takes_per_domain_pile_val_sets(tmp_path):
    data = shards(tmp_path / "pile", "pile_train", ["pile_val_arxiv", "pile_val_github"])
    p = recipe("depth_qwen3_pile.sh", {"DRY_RUN": 1, "DATA": data, "PATHS": "depth", "TRAINER": ""})
    # printf %q escapes the glob's star
    assert f"--val-data arxiv={data}/pile_val_arxiv_\\*.bin --val-data github={data}/pile_val_github_\\*.bin" in p.stdout


def test_full_size_commands_for_eight_gpus():
    p = recipe("resformer_llama_slimpajama.sh", {"DRY_RUN": 1, "NGPU": 8, "SIZE": "468M", "B": 16, "TRAINER": ""})
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 3
    for line, path in zip(lines, ["vanilla", "resformer", "svformer"]):
        # Open MPI's 1 s between a Ctrl-C or SIGTERM and the ranks' SIGTERM, and again to their
        # SIGKILL, is too short for a checkpoint's save: the recipes give it 30 s (MPI_KILL_WAIT)
        assert line.startswith(f"env OMPI_MCA_odls_base_sigkill_timeout=30 mpirun -np 8 build/{path}-mpi/train_")
        assert "--layers 24 --heads 16 --dim 1024 --ffn-dim 3584 --vocab 50277" in line
        assert "--batch-size 16 --seq-len 2048 --total-batch-tokens 2097152" in line  # 8 x 16 x 2048 x 8 accumulation
    p = recipe("gpt2_124m_owt.sh", {"DRY_RUN": 1, "NGPU": 8, "MPI_KILL_WAIT": 120, "TRAINER": ""})
    assert p.stdout.startswith("env OMPI_MCA_odls_base_sigkill_timeout=120 mpirun -np 8 build/vanilla-mpi/train_")
    p = recipe("gpt2_124m_owt.sh", {"DRY_RUN": 1, "LAUNCH": "srun --mpi=pmix", "NGPU": 16, "B": 32, "TRAINER": ""})
    assert p.stdout.startswith("srun --mpi=pmix build/vanilla-mpi/train_")


@pytest.mark.parametrize("name, env, needle", [
    ("gpt2_124m_owt.sh", {"NGPU": 3}, "is not a whole number of micro-batches of B=64 x T=1024 on 3 rank(s)"),
    ("gpt2_124m_owt.sh", {"NGPU": "two"}, "must be positive integers, got 'two'"),
    ("gpt2_124m_owt.sh", {"NGPU": 8, "MPI_KILL_WAIT": "1m"}, "MPI_KILL_WAIT must be a positive number of seconds, got '1m'"),
    ("resformer_llama_slimpajama.sh", {"SIZE": "1B"}, "SIZE must be 82M, 180M or 468M"),
    ("sla_gpt2_owt.sh", {"DATA": "/nonexistent"}, "prepare them first: .venv/bin/python scripts/prepare_openwebtext.py"),
    ("resformer_llama_slimpajama.sh", {"DATA": "/nonexistent"}, "prepare_slimpajama.py --budget 20e9 --mix resformer"),
    ("depth_qwen3_pile.sh", {"SIZE": "7B"}, "SIZE must be 360M, 500M, 710M, 1.5B or 3B"),
    ("depth_qwen3_pile.sh", {"DATA": "/nonexistent"}, "prepare them first: .venv/bin/python scripts/prepare_pile.py --budget 32e9"),
    ("gpt2_124m_owt.sh", {"KEEP_EVERY": 1500}, "KEEP_EVERY=1500 is not a multiple of CHECKPOINT_EVERY=1000"),
    ("sla_gpt2_owt.sh", {"KEEP_EVERY": "-1"}, "KEEP_EVERY must be a non-negative integer, got '-1'"),
    ("depth_qwen3_pile.sh", {"CHECKPOINT_EVERY": 0}, "CHECKPOINT_EVERY must be a positive integer, got '0'"),
    # bash's arithmetic cannot read 1e5: the recipe went on without its checkpoint flags
    ("gpt2_124m_owt.sh", {"STEPS": "1e5"}, "STEPS must be a whole number above 0 in digits, got '1e5'"),
    ("sla_gpt2_owt.sh", {"STEPS": "abc"}, "STEPS must be a whole number above 0 in digits, got 'abc'"),
    ("resformer_llama_slimpajama.sh", {"STEPS": "0"}, "STEPS must be a whole number above 0 in digits, got '0'"),
    ("depth_qwen3_pile.sh", {"EVAL_EVERY": "1e3"}, "EVAL_EVERY must be a whole number above 0 in digits, got '1e3'"),
])
def test_bad_settings_stop_before_anything_runs(tmp_path, name, env, needle):
    p = recipe(name, {"OUT": tmp_path / "out", **env}, expect=2)
    assert needle in p.stderr and "HINT" in p.stderr
    assert not (tmp_path / "out").exists()


def test_compare_paths_keeps_the_earlier_results_when_a_run_fails(tmp_path):
    """scripts/compare_paths.sh starts its runs afresh, but the earlier comparison's run and console
    log are only set aside until the new run has finished: a run that fails (here a bad EXTRA
    flag) puts them back, and says so. A bad STEPS stops the script before anything is touched."""
    from test_plot_runs import compare_paths
    p, out = compare_paths(tmp_path, PATHS="vanilla")
    assert p.returncode == 0, p.stdout + p.stderr
    before = {f.name: f.read_bytes() for f in (out / "vanilla").iterdir()}
    console = (tmp_path / "cmp.vanilla.log").read_text()
    assert "log.jsonl" in before and console
    p, out = compare_paths(tmp_path, PATHS="vanilla", EXTRA="--bogus 1")
    assert p.returncode == 1 and f"the earlier comparison's vanilla run is back in {out / 'vanilla'}" in p.stderr, p.stderr[-2000:]
    assert {f.name: f.read_bytes() for f in (out / "vanilla").iterdir()} == before
    assert (tmp_path / "cmp.vanilla.log").read_text() == console
    assert "unknown flag '--bogus'" in (tmp_path / "cmp.vanilla.failed.log").read_text()
    assert not (tmp_path / "cmp.earlier").exists() and not (tmp_path / "cmp.failed").exists()  # (the bad flag: no directory made)
    assert sorted(f.name for f in out.iterdir()) == ["vanilla"]  # nothing beside the runs that plot_runs.py cmp/* would take
    p, out = compare_paths(tmp_path, PATHS="vanilla", STEPS="2e2")
    assert p.returncode == 2 and "STEPS is '2e2'; give a whole number of steps in digits" in p.stderr, p.stderr[-2000:]
    assert {f.name: f.read_bytes() for f in (out / "vanilla").iterdir()} == before
    p, out = compare_paths(tmp_path, PATHS="vanilla")  # a new comparison replaces the earlier one
    assert p.returncode == 0 and not (tmp_path / "cmp.earlier").exists() and not (tmp_path / "cmp.vanilla.earlier.log").exists()


def test_a_failed_run_fails_the_recipe(tmp_path):
    data = shards(tmp_path / "owt", "openwebtext_train", ["openwebtext_val"])
    out = tmp_path / "out"
    p = recipe("gpt2_124m_owt.sh", {**SMALL, "DATA": data, "OUT": out, "MODEL": "--arch gpt2 " + TINY,
                                    "EXTRA": "--bogus 1"}, expect=1)
    assert "the vanilla run failed" in p.stderr and "unknown flag '--bogus'" in (out / "vanilla.out").read_text()


def stop_a_recipe_mid_run(tmp_path, send, paths="vanilla"):
    """Starts gpt2_124m_owt.sh on a run too long to finish, waits for two logged steps, signals it with
    send(proc), and returns (proc, stdout, stderr, out, env) once it has ended."""
    data = shards(tmp_path / "owt", "openwebtext_train", ["openwebtext_val"])
    out = tmp_path / "out"
    env = {**SMALL, "STEPS": 1000000, "CHECKPOINT_EVERY": 1000000, "EVAL_EVERY": 1000000, "DATA": data, "OUT": out,
           "PATHS": paths, "MODEL": "--arch gpt2 " + TINY}
    proc = subprocess.Popen(["bash", str(RECIPES / "gpt2_124m_owt.sh")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,  # its own process group, as a terminal's foreground job
                            env={**os.environ, "OMP_NUM_THREADS": "1", "TRAINER": str(REPO / "build" / "{path}" / "train_cpu"),
                                 **{k: str(v) for k, v in env.items()}})
    first = paths.split()[0]
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None and logged_steps(out / first) < 2:
        time.sleep(0.01)
    assert proc.poll() is None, proc.communicate()
    send(proc)
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        kill_session(proc.pid)  # the recipe and its run (in a process group of its own) share its session
        stdout, stderr = proc.communicate()
        raise AssertionError(f"the recipe did not stop within 120 s of the signal\n{stdout[-2000:]}\n{stderr[-2000:]}")
    return proc, stdout, stderr, out, env


def session_processes(sid):
    """The pids of the processes still alive in session sid (zombies left out)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid and " Z " not in open(f"/proc/{entry}/stat").read():
                    pids.append(int(entry))
            except (ProcessLookupError, PermissionError, FileNotFoundError):
                pass
    return pids


def kill_session(sid):
    for pid in session_processes(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_ctrl_c_stops_the_recipe_with_a_checkpoint_and_the_next_run_resumes(tmp_path):
    """Ctrl-C reaches the terminal's foreground group (bash and the console's tee; the trainer runs in
    a group of its own), and the recipe passes it on: the trainer finishes its step and saves it (its
    console line saying so reaches OUT/path.out), the recipe stops with the trainer's status (130),
    and running it again resumes from that step."""
    proc, stdout, stderr, out, env = stop_a_recipe_mid_run(tmp_path, lambda p: os.killpg(p.pid, signal.SIGINT))
    assert proc.returncode == 128 + signal.SIGINT, f"exit {proc.returncode}\n{stdout[-2000:]}\n{stderr[-2000:]}"
    assert "the vanilla run stopped on signal 2" in stderr, stderr[-2000:]
    console = (out / "vanilla.out").read_text()
    s = int(re.search(r"stopped by SIGINT after step (\d+) of 1000000: saved", console).group(1))
    assert checkpoint_steps(out / "vanilla") == [s]
    recipe("gpt2_124m_owt.sh", {**env, "STEPS": s + 2})
    assert configs(out, "vanilla")[-1]["resumed_from"] == s
    assert [r["step"] for r in read_log(out / "vanilla") if "train_loss" in r][-2:] == [s + 1, s + 2]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_a_signal_to_the_recipe_alone_stops_its_run_with_a_checkpoint(tmp_path, sig):
    """`kill <recipe>`, or Slurm's --signal=B:USR1@T (the batch shell alone): the recipe passes the
    signal on to the run in progress, which saves its step; the recipe stops with its status and
    starts no further run (until 2026-11-30 it ignored the signal and went on to the next path)."""
    proc, stdout, stderr, out, _ = stop_a_recipe_mid_run(tmp_path, lambda p: p.send_signal(sig), paths="vanilla resformer")
    assert proc.returncode == 128 + sig, f"exit {proc.returncode}\n{stdout[-2000:]}\n{stderr[-2000:]}"
    assert f"the vanilla run stopped on signal {int(sig)}" in stderr, stderr[-2000:]
    name = signal.Signals(sig).name
    s = int(re.search(rf"stopped by {name} after step (\d+) of 1000000: saved", (out / "vanilla.out").read_text()).group(1))
    assert checkpoint_steps(out / "vanilla") == [s]
    assert not (out / "resformer").exists() and "== resformer" not in stderr


@pytest.mark.parametrize("name", sorted(p.name for p in RECIPES.glob("*.sh") if p.name != "common.sh"))
def test_a_recipe_copied_away_from_common_sh_says_how_to_run_it(tmp_path, name):
    """`sbatch recipe.sh` runs a copy of the recipe from Slurm's spool directory (seen on the local
    cluster: "slurm_script: line 16: .../common.sh: No such file or directory", then one "command
    not found" per recipe step). The recipe stops at once with exit 2 and says to run it from a
    batch script with exec bash."""
    copy = tmp_path / "slurm_script"
    copy.write_text((RECIPES / name).read_text())
    p = subprocess.run(["bash", str(copy)], capture_output=True, text=True, timeout=60, cwd=tmp_path, env={**os.environ, "DRY_RUN": "1"})
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout, p.stderr)
    assert f"error: {copy} has no common.sh beside it" in p.stderr and "exec bash /path/to/valuepath/scripts/recipes/<recipe>.sh" in p.stderr, p.stderr
