"""The CPU trainer as a user runs it: flags, logs, checkpoints, resume, and every bad input.

Runs the binary that `make test` builds (build/vanilla/train_cpu, or $VP_TRAIN_CPU) on shards
written by the project's own shard writer (scripts/vp_data/shards.py), in temporary directories.
"""
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
from vp_data.shards import write_shard  # noqa: E402

TRAINER = Path(os.environ.get("VP_TRAIN_CPU", REPO / "build" / "vanilla" / "train_cpu"))
PATHS = ["vanilla", "resformer", "svformer", "sla", "depth"]


def trainer(path):
    """The binary of one value path (make test builds build/<path>/train_cpu for each)."""
    return TRAINER if path == "vanilla" else REPO / "build" / path / "train_cpu"


def path_flags(path, family):
    """Settings that make each path's cross-layer route active on the 2-layer test models."""
    heads = "1" if family is TINY_GPT2 else "2"  # SLA skip heads: one KV head (GQA group 2 for llama)
    return {"vanilla": [], "resformer": ["--resformer-lambda", "learn"], "svformer": [],
            "sla": ["--sla-layers", "1", "--sla-heads", heads], "depth": ["--depth-stride", "1"]}[path]
SHARED = Path(os.environ.get("VP_SHARED_DATA", REPO.parent / "shared" / "data"))

TINY_GPT2 = ["--arch", "gpt2", "--layers", "2", "--heads", "2", "--dim", "16", "--vocab", "64", "--max-seq", "16",
             "--seq-len", "8"]
TINY_LLAMA = ["--arch", "llama", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--qk-norm", "1", "--dim", "16",
              "--ffn-dim", "24", "--vocab", "64", "--max-seq", "16", "--seq-len", "8"]


def run(args, expect=None, timeout=300, path="vanilla", binary=None, env=None, preexec_fn=None):
    """Runs a trainer: the CPU one of `path`, or `binary` (the emulated GPU trainer's tests pass theirs);
    preexec_fn, if given, runs in the child before the trainer starts (a resource limit)."""
    binary = Path(binary) if binary else trainer(path)
    assert binary.exists(), f"{binary} is missing: run 'make test' (it builds every trainer the tests run first)"
    p = subprocess.run([str(binary)] + [str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "OMP_NUM_THREADS": "2", **(env or {})}, preexec_fn=preexec_fn)
    if expect is not None:
        assert p.returncode == expect, f"exit {p.returncode}, expected {expect}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}"
    return p


def pattern_tokens(n, vocab=64, seed=0):
    """A learnable stream: mostly a fixed successor function, with 10% noise."""
    rng = np.random.default_rng(seed)
    toks = np.zeros(n, dtype=np.int64)
    for i in range(1, n):
        toks[i] = (toks[i - 1] * 5 + 3) % vocab if rng.random() < 0.9 else rng.integers(vocab)
    return toks


@pytest.fixture()
def data(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    # three train shards of different sizes (shuffling crosses them), one val shard
    for i, n in enumerate([1500, 900, 1201]):
        write_shard(str(d / f"train_{i:03d}.bin"), pattern_tokens(n, seed=i), 1)
    write_shard(str(d / "val_000.bin"), pattern_tokens(700, seed=9), 1)
    return d


def read_log(out_dir):
    return [json.loads(line) for line in (Path(out_dir) / "log.jsonl").read_text().splitlines()]


def checkpoint_tensors(path):
    """The bytes after a checkpoint's header and run text: params, then m and v (host/checkpoint.h)."""
    raw = Path(path).read_bytes()
    header_bytes = struct.unpack_from("<i", raw, 8)[0]
    run_text_bytes = struct.unpack_from("<q", raw, 32)[0]
    tensors = raw[header_bytes + run_text_bytes:]
    assert len(tensors) > 0 and len(tensors) % 12 == 0  # params, m, v
    return tensors


def dir_digest(d):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(d).iterdir()) if p.is_file()}


# ---------------------------------------------------------------------------
# flags

def test_help_lists_every_flag_with_its_default():
    p = run(["--help"], expect=0)
    flags = re.findall(r'\{"(--[a-z0-9-]+)",', (REPO / "host" / "config.h").read_text())
    assert len(flags) > 30
    for flag in flags:
        m = re.search(re.escape(flag) + r" .*\[[^\]]*\]$", p.stdout, re.M)
        assert m, f"--help does not list {flag} with a default"


@pytest.mark.parametrize("args, needle", [
    (["--bogus", "1"], "unknown flag '--bogus'"),
    (["--layers", "two"], "--layers expects an integer"),
    (["--sla-layers", "3"], "VALUE_PATH"),
    (["--arch", "mamba"], "--arch must be gpt2 or llama"),
    (["--lr"], "--lr needs a value"),
    (["--arch", "gpt2", "--kv-heads", "3", "--heads", "6", "--dim", "12", "--train-data", "x"], "no GQA"),
    (["--max-steps", "5"], "--train-data is required"),
    (["--recompute", "3", "--train-data", "x"], "--recompute must be 0, 1 or 2"),
    (["--kv-heads", "-1", "--train-data", "x"], "--kv-heads must be >= 0"),
    (["--ffn-dim", "-1", "--train-data", "x"], "--ffn-dim must be >= 0"),
    # a finite double that is an infinite float: the flag is stored as a float
    (["--lr", "1e39", "--train-data", "x"], "--lr value '1e39' is out of range"),
    # strtod reads hexadecimal: "0x10" would have trained at a learning rate of 16
    (["--lr", "0x10", "--train-data", "x"], "--lr expects a decimal number (like 3e-4 or 0.1), got '0x10'"),
    (["--weight-decay", "inf", "--train-data", "x"], "--weight-decay expects a decimal number"),
    # an empty glob (an unset shell variable) is not "no evaluation"
    (["--val-data", "", "--train-data", "x"], "--val-data is empty"),
    (["--lr-schedule", "step", "--train-data", "x"], "--lr-schedule must be cosine, linear, wsd or constant"),
    (["--cooldown-frac", "0.3", "--train-data", "x"], "--cooldown-frac applies only to --lr-schedule wsd"),
    (["--sample-top-k", "-1", "--train-data", "x"], "--sample-top-k must be >= 0"),
    (["--skip-loss-z", "-1", "--train-data", "x"], "--skip-loss-z and --skip-norm-z must be >= 0"),
    (["--overfit-batch", "2", "--train-data", "x"], "--overfit-batch must be 0 or 1"),
    (["--keep-checkpoints-every", "5", "--train-data", "x"], "--keep-checkpoints-every applies only with --keep-checkpoints N"),
    (["--keep-checkpoints", "2", "--keep-checkpoints-every", "-5", "--train-data", "x"], "--keep-checkpoints-every must be >= 0"),
    (["--skip-norm-z", "3", "--skip-window", "1", "--train-data", "x"], "--skip-window must be >= 2"),
    (["--skip-window", "64", "--train-data", "x"], "--skip-window applies only when --skip-loss-z or --skip-norm-z is on"),
    (["--sample-prompt", "Hi", "--train-data", "x"], "--sample-prompt needs --tokenizer"),
    (["--sample-prompt", "Hi", "--tokenizer", "t.vptok", "--train-data", "x"], "--sample-prompt is only used by samples"),
    (["--arch", "gpt2", "--tie-embeddings", "1", "--train-data", "x"], "--tie-embeddings is a llama-family option"),
    (["--arch", "llama", "--tie-embeddings", "2", "--train-data", "x"], "--tie-embeddings must be 0 or 1"),
    (["--eval-mc", "", "--train-data", "x"], "--eval-mc is empty"),
    (["--eval-mc", "a b=x.vpmc", "--train-data", "x"], "--eval-mc name 'a b' may only use"),
    (["--val-data", "/tmp/a=b/val_*.bin", "--train-data", "x"], "HINT: a path with '=' in it needs a name first: NAME=PATH"),
    (["--eval-mc", "h=a.vpmc", "--eval-mc", "h=b.vpmc", "--train-data", "x"], "--eval-mc: the set name 'h' is used twice"),
    (["--eval-mc", "norm2=a.vpmc", "--train-data", "x"], "--eval-mc name 'norm2' starts like a metric"),
    (["--eval-mc", "tokavg_x=a.vpmc", "--train-data", "x"], "--eval-mc name 'tokavg_x' starts like a metric"),
    # an int flag beyond int32 would wrap (2^32 + 2 layers as 2)
    (["--layers", "4294967298", "--train-data", "x"], "--layers value 4294967298 is out of range"),
    # beta 1 makes AdamW's bias correction 1 - beta^t zero
    (["--beta1", "1", "--train-data", "x"], "--beta1 and --beta2 must be in [0, 1)"),
    (["--beta2", "1", "--train-data", "x"], "--beta1 and --beta2 must be in [0, 1)"),
    (["--eval-batches", "0", "--val-data", "v_*.bin", "--train-data", "x"], "--eval-batches >= 1"),
    # checkpoints store one flag per line
    (["--out-dir", "runs/a\nb", "--train-data", "x"], "--out-dir: a value with a line break is not supported"),
    (["--val-data", "v=a\rb", "--train-data", "x"], "--val-data: a value with a line break is not supported"),
    # more than a checkpoint's run text may hold (1 MiB; one argument may be at most 128 KiB)
    ([f"--val-data=v{i}=" + "x" * 120_000 for i in range(9)] + ["--train-data", "x"], "more than 1048576 bytes"),
    (["--lr-schedule", "wsd", "--cooldown-frac", "1.5", "--train-data", "x"], "--cooldown-frac must be in [0, 1]"),
    # flag combinations are usage errors before any checkpoint is looked for
    (["--resume", "1", "--train-data", "x"], "--resume 1 needs --out-dir"),
    (["--resume", "auto", "--train-data", "x"], "--resume auto needs --out-dir"),
    (["--resume", "yes", "--train-data", "x"], "--resume must be 0, 1 or auto, got 'yes'"),
    # sizes that would overflow what is derived from them
    (["--batch-size", "2000000000", "--seq-len", "8", "--train-data", "x"], "tokens per micro-batch; at most"),
    (["--dim", "1048576", "--heads", "1", "--train-data", "x"], "--dim must be at most 65536"),
    (["--vocab", "2000000000", "--train-data", "x"], "--vocab must be at most"),
    # a nonzero value that is a float 0 would turn off what 0 means off
    (["--grad-clip", "1e-46", "--train-data", "x"], "--grad-clip value '1e-46' is below the smallest float"),
    # flags that would change nothing are mistakes worth hearing of
    (["--sample-top-k", "5", "--train-data", "x"], "--sample-top-k is only used by samples"),
    (["--sample-temperature", "0.5", "--train-data", "x"], "--sample-temperature is only used by samples"),
    (["--sample-tokens", "9", "--train-data", "x"], "--sample-tokens is only used by samples"),
    (["--tokenizer", "t.vptok", "--train-data", "x"], "--tokenizer is only used by samples"),
    (["--eval-every", "5", "--train-data", "x"], "--eval-every 5: there is nothing to evaluate"),
    (["--eval-batches", "5", "--eval-mc", "a.vpmc", "--train-data", "x"], "--eval-batches sizes the val loss, and there is no --val-data"),
    (["--keep-checkpoints", "2", "--train-data", "x"], "--keep-checkpoints prunes the checkpoints of --out-dir"),
    (["--min-lr-frac", "0.5", "--lr-schedule", "constant", "--train-data", "x"], "--min-lr-frac has no effect with --lr-schedule constant"),
    # each shape flag's own check names the flag; model_config_problem behind them speaks of the
    # header's fields (n_layer, ...) and --heads 0 would divide by zero before reaching it
    (["--layers", "0", "--train-data", "x"], "--layers must be in [1, 1024], got 0"),
    (["--heads", "0", "--train-data", "x"], "--heads must be in [1, 1024], got 0"),
    (["--arch", "llama", "--head-dim", "-2", "--train-data", "x"], "--head-dim must be >= 0"),
    (["--dim", "10", "--heads", "4", "--train-data", "x"], "--dim 10 must be a positive multiple of --heads 4"),
    (["--arch", "llama", "--heads", "2", "--head-dim", "40000", "--train-data", "x"], "--head-dim 40000 times --heads 2 must be at most 65536"),
    (["--ffn-dim", "2000000000", "--train-data", "x"], "--ffn-dim must be at most"),
    (["--max-seq", "2000000000", "--train-data", "x"], "--max-seq must be at most"),
    (["--arch", "llama", "--heads", "4", "--kv-heads", "3", "--train-data", "x"], "--heads 4 must be a multiple of --kv-heads 3"),
    (["--vocab", "1", "--train-data", "x"], "--vocab must be >= 2, got 1"),
    (["--max-seq", "0", "--train-data", "x"], "--max-seq must be >= 1, got 0"),
    (["--arch", "llama", "--qk-norm", "2", "--train-data", "x"], "--qk-norm must be 0 or 1, got 2"),
    (["--arch", "gpt2", "--qk-norm", "1", "--train-data", "x"], "--qk-norm is a llama-family option"),
    # gpt2 has no RoPE: the flag would be ignored, a silent no-op
    (["--arch", "gpt2", "--rope-theta", "500000", "--train-data", "x"], "--rope-theta is a llama-family option"),
    (["--arch", "llama", "--rope-theta", "0", "--train-data", "x"], "--rope-theta must be > 0"),
    (["--seq-len", "32", "--max-seq", "16", "--train-data", "x"], "--seq-len 32 exceeds the model's max sequence length 16"),
    # run flags out of range: without their checks most train on silently (a negative lr, eps 0,
    # --zero 2 ...) and --batch-size 0 / --seq-len 0 divide by zero
    (["--batch-size", "0", "--train-data", "x"], "--batch-size must be >= 1"),
    (["--seq-len", "0", "--train-data", "x"], "--seq-len must be >= 1"),
    (["--batch-size", "2", "--seq-len", "8", "--total-batch-tokens", "24", "--train-data", "x"],
     "--total-batch-tokens 24 must be a multiple of --batch-size x --seq-len = 16"),
    (["--max-steps", "-1", "--train-data", "x"], "--max-steps must be >= 0"),
    (["--warmup-steps", "-1", "--train-data", "x"], "--warmup-steps must be >= 0"),
    (["--lr", "-1", "--train-data", "x"], "--lr must be >= 0"),
    (["--eps", "0", "--train-data", "x"], "--eps must be > 0"),
    (["--weight-decay", "-1", "--train-data", "x"], "--weight-decay must be >= 0"),
    (["--min-lr-frac", "2", "--train-data", "x"], "--min-lr-frac must be in [0, 1]"),
    (["--grad-clip", "-1", "--train-data", "x"], "--grad-clip must be >= 0 (0 = off)"),
    (["--sample-every", "-1", "--train-data", "x"], "--sample-every must be >= 0 and --sample-tokens >= 1"),
    (["--sample-every", "1", "--sample-tokens", "0", "--train-data", "x"], "--sample-every must be >= 0 and --sample-tokens >= 1"),
    (["--sample-every", "1", "--sample-temperature", "-1", "--train-data", "x"], "--sample-temperature must be >= 0"),
    (["--zero", "2", "--train-data", "x"], "--zero must be 0 (replicated optimizer) or 1"),
    (["--overlap-reduce", "2", "--train-data", "x"], "--overlap-reduce must be 0 or 1, got 2"),
    (["--resume", "1", "--out-dir", "r", "--init-from", "r/ckpt.bin", "--train-data", "x"], "--resume and --init-from cannot be combined"),
    (["--checkpoint-every", "5", "--train-data", "x"], "--checkpoint-every needs --out-dir"),
])
def test_usage_errors_exit_2_with_a_message(args, needle):
    p = run(args, expect=2)
    assert needle in p.stderr, p.stderr
    assert "HINT" in p.stderr


def test_no_train_data_hint_is_a_command_that_works():
    """The hint names the venv's Python: a bare `python` outside the venv has no numpy."""
    p = run(["--max-steps", "5"], expect=2)
    assert "HINT: prepare data with: .venv/bin/python scripts/prepare_tinyshakespeare.py (after make venv)" in p.stderr, p.stderr


ODD_VALUES = ["-1", "0", "-0", "2.5", "1e30", "nan", "inf", "abc", "", "99999999999999999999", "0x10", " 3", "3 "]


@pytest.mark.parametrize("path", PATHS)
def test_every_flag_with_odd_values_runs_or_stops_with_a_message(tmp_path, data, path):
    """Each flag of --help (the path's own flags too), given each odd value on a one-step run:
    the trainer either trains (exit 0) or stops with exit 1 or 2 and an error line that says what
    to do. Never a signal (a crash), another exit code, or a hang. A sweep, so a flag added later
    is covered too."""
    flags = [f for f in re.findall(r"^  (--[a-z0-9-]+)", run(["--help"], expect=0, path=path).stdout, re.M) if f != "--help"]
    assert len(flags) > 30
    base = TINY_GPT2 + ["--batch-size", "2", "--max-steps", "1", "--train-data", str(data / "train_*.bin")]
    bad = []
    for flag in flags:
        for value in ODD_VALUES:
            # inside tmp_path: --out-dir and --init-from values are relative paths
            p = subprocess.run([str(trainer(path))] + base + [flag, value], capture_output=True, text=True, timeout=60,
                               cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"})
            if p.returncode == 0:
                continue
            if p.returncode not in (1, 2) or "error" not in p.stderr or "HINT" not in p.stderr:
                bad.append(f"{flag} {value!r}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
    assert not bad, "\n".join(bad)


# ---------------------------------------------------------------------------
# bad data

def test_missing_data_is_a_runtime_error(tmp_path):
    p = run(TINY_GPT2 + ["--train-data", str(tmp_path / "nothing_*.bin"), "--max-steps", "1"], expect=1)
    assert "nothing_*.bin" in p.stderr and "prepare" in p.stderr


def test_truncated_shard(tmp_path, data):
    bad = data / "train_001.bin"
    bad.write_bytes(bad.read_bytes()[:-10])
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "1"], expect=1)
    assert "train_001.bin" in p.stderr


def test_wrong_magic(tmp_path, data):
    bad = data / "train_002.bin"
    raw = bytearray(bad.read_bytes())
    raw[0:4] = struct.pack("<i", 12345)
    bad.write_bytes(bytes(raw))
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "1"], expect=1)
    assert "train_002.bin" in p.stderr and "magic" in p.stderr


def test_token_id_beyond_vocab(tmp_path):
    toks = pattern_tokens(500)
    toks[123] = 64  # vocab is 64: ids 0..63
    write_shard(str(tmp_path / "bad.bin"), toks, 1)
    p = run(TINY_GPT2 + ["--train-data", str(tmp_path / "bad.bin"), "--max-steps", "1"], expect=1)
    assert "bad.bin" in p.stderr and "64" in p.stderr


# ---------------------------------------------------------------------------
# a run: logs and loss

@pytest.mark.parametrize("path", PATHS)
def test_every_path_trains(tmp_path, data, path):
    for family in (TINY_GPT2, TINY_LLAMA):
        out = tmp_path / ("g" if family is TINY_GPT2 else "l")
        run(family + path_flags(path, family) + ["--train-data", str(data / "train_*.bin"), "--batch-size", "4",
                                                 "--max-steps", "150", "--lr", "1e-2", "--out-dir", out], expect=0, path=path)
        log = read_log(out)
        assert log[0]["value_path"] == path
        steps = [r["train_loss"] for r in log if "train_loss" in r]
        assert steps[0] == pytest.approx(np.log(64), abs=0.15) and steps[-1] < 2.0, (path, steps[0], steps[-1])


def test_training_run_logs_and_loss_falls(tmp_path, data):
    out = tmp_path / "run"
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--val-data", str(data / "val_*.bin"),
                         "--batch-size", "4", "--max-steps", "150", "--lr", "1e-2", "--eval-every", "50",
                         "--out-dir", str(out)], expect=0)
    log = read_log(out)
    cfg = log[0]
    assert cfg["event"] == "config" and cfg["value_path"] == "vanilla" and cfg["arch"] == "gpt2"
    # num_params of this config, by hand: wte 128*16 + wpe 16*16 + per layer (ln 2*2*16, qkv 16*48+48,
    # attproj 16*16+16, fc 16*64+64, fcproj 64*16+16) + lnf 2*16
    per_layer = 4 * 16 + 16 * 48 + 48 + 16 * 16 + 16 + 16 * 64 + 64 + 64 * 16 + 16
    assert cfg["num_params"] == 128 * 16 + 16 * 16 + 2 * per_layer + 32
    steps = [r for r in log if "train_loss" in r]
    assert [r["step"] for r in steps] == list(range(1, 151))
    for r in steps:
        assert set(r) == {"step", "train_loss", "lr", "grad_norm", "ms", "tok_per_s"}
    vals = [r for r in log if "val_loss" in r]
    assert [r["step"] for r in vals] == [0, 50, 100, 150]
    assert steps[0]["train_loss"] == pytest.approx(np.log(64), abs=0.15)
    # the stream's entropy floor is about 0.75 nats; require most of the way down from ln(64) = 4.16
    assert steps[-1]["train_loss"] < 2.0
    assert vals[-1]["val_loss"] < 2.0
    # the console line per step
    assert re.search(r"step +150/150 \| loss [0-9.]+ \| lr [0-9.e+-]+ \| norm [0-9.]+ \| [0-9.]+ ms \| [0-9]+ tok/s", p.stdout)
    assert (out / "ckpt_00000150.bin").exists()


def expected_lr(shape, step, lr, warmup, max_steps, min_frac, cooldown_frac):
    """The schedules of --lr-schedule, written from their definitions (not from host/schedule.h)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    n, t, low = max_steps - warmup, step - warmup, lr * min_frac
    if shape == "constant":
        return lr
    if shape == "wsd":
        decay_from = n * (1 - cooldown_frac)
        return lr if t < decay_from else low + (lr - low) * (1 - min(1, (t - decay_from) / (n * cooldown_frac)))
    progress = min(1, t / n)
    if shape == "linear":
        return low + (lr - low) * (1 - progress)
    return low + (lr - low) * 0.5 * (1 + np.cos(np.pi * progress))


@pytest.mark.parametrize("shape", ["cosine", "linear", "wsd", "constant"])
def test_lr_schedules_log_the_lr_they_define(tmp_path, data, shape):
    """Each --lr-schedule, end to end: the lr logged at every step of a run (%.9g, every bit of the
    float the update used) equals the schedule's definition to float rounding (a relative 1e-6:
    a few float32 roundings of about 6e-8 each)."""
    out = tmp_path / "run"
    extra = ["--cooldown-frac", "0.4"] if shape == "wsd" else []
    extra += ["--min-lr-frac", "0.2"] if shape != "constant" else []
    run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--out-dir", out, "--max-steps", "12", "--warmup-steps", "2",
                     "--lr", "0.01", "--lr-schedule", shape] + extra, expect=0)
    log = read_log(out)
    assert log[0]["lr_schedule"] == shape and log[0]["cooldown_frac"] == pytest.approx(0.4 if shape == "wsd" else 0.2)
    lrs = [r["lr"] for r in log if "train_loss" in r]
    want = [expected_lr(shape, s, 0.01, 2, 12, 0.2, 0.4) for s in range(12)]
    assert lrs == pytest.approx(want, rel=1e-6, abs=0)
    if shape == "wsd":  # 10 steps after warmup, the last 4 decay: stable through step 8 (1-based)
        assert lrs[2:8] == [pytest.approx(0.01, rel=1e-7)] * 6 and lrs[8] < 0.01


def test_wsd_stable_checkpoint_extends_to_a_longer_run_exactly(tmp_path, data):
    """What wsd is for: a checkpoint from the stable phase, resumed with a larger --max-steps,
    continues exactly as a run planned that long from the start (the lr of the stable phase does
    not depend on --max-steps). A change of schedule on resume is allowed, and noted."""
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--lr", "3e-3", "--warmup-steps", "2",
                        "--lr-schedule", "wsd", "--cooldown-frac", "0.25"]
    # planned for 8 steps: at the peak from step index 2 through 6 (the cooldown, the last 0.25 of
    # the 6 steps after warmup, begins at index 6.5); a checkpoint after 4 steps; then extended to 16
    short, long_ = tmp_path / "short", tmp_path / "long"
    run(base + ["--max-steps", "8", "--checkpoint-every", "4", "--out-dir", short], expect=0)
    (short / "ckpt_00000008.bin").unlink()
    p = run(base + ["--max-steps", "16", "--out-dir", short, "--resume", "1"], expect=0)
    assert "(step 4)" in p.stdout and "changed flag: --max-steps=16" in p.stdout
    run(base + ["--max-steps", "16", "--out-dir", long_], expect=0)

    def steps(log, after):
        resumed = [i for i, r in enumerate(log) if "resumed_from" in r]
        start = resumed[-1] + 1 if resumed else 0
        return [(r["step"], r["train_loss"], r["lr"]) for r in log[start:] if r.get("step", 0) > after and "train_loss" in r]

    extended, planned = steps(read_log(short), 4), steps(read_log(long_), 4)
    assert len(planned) == 12 and extended == planned
    assert checkpoint_tensors(short / "ckpt_00000016.bin") == checkpoint_tensors(long_ / "ckpt_00000016.bin")
    # a cooldown of another shape from the same checkpoint: allowed, and the note names it
    p = run(base[:-4] + ["--lr-schedule", "linear", "--max-steps", "20", "--out-dir", long_, "--resume", "1"], expect=0)
    assert "note: resumed with a changed flag: --lr-schedule=linear" in p.stdout, p.stdout


def test_a_long_train_glob_is_logged_whole(tmp_path, data):
    """The config line of log.jsonl once held --train-data in a 2 KB buffer: a longer glob was cut
    and the line was no longer JSON."""
    deep = tmp_path.joinpath(*["d" * 200] * 12)
    deep.mkdir(parents=True)
    for f in data.glob("train_*.bin"):
        shutil.copy(f, deep / f.name)
    glob = str(deep / "train_*.bin")
    assert len(glob) > 2400
    out = tmp_path / "run"
    run(TINY_GPT2 + ["--train-data", glob, "--out-dir", out, "--max-steps", "1"], expect=0)
    assert read_log(out)[0]["train_data"] == glob


def test_named_val_sets(tmp_path, data):
    out = tmp_path / "run"
    run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--val-data", f"shakes={data}/val_*.bin",
                     "--val-data", f"other={data}/val_000.bin", "--max-steps", "2", "--out-dir", str(out)], expect=0)
    vals = [r for r in read_log(out) if "step" in r and "train_loss" not in r]
    assert vals and set(vals[-1]) == {"step", "val_loss_shakes", "val_loss_other"}


def test_val_loss_is_the_mean_over_the_sets_batches(tmp_path):
    """The val loss is the mean loss over the set's micro-batches, --eval-batches capped at those
    the set has. Checked against the training losses: one shard of 12 sequences (T = 8: 97 tokens,
    sequence s is tokens 8s..8s+8) is both the train data and a val set named train; at --lr 0 the
    weights never change, so the 3 steps of B = 4 are one epoch (each sequence once, in a shuffled
    order) and their mean loss is the mean over all 12 sequences, which is what the val set's 3
    batches (of 1000 asked for) must average to at every evaluation. A val loss summed over one
    batch too many, or divided by another count, is off by a third or more."""
    d = tmp_path / "data"
    d.mkdir()
    write_shard(str(d / "one_000.bin"), pattern_tokens(97, seed=5), 1)
    out = tmp_path / "run"
    run(TINY_GPT2 + ["--train-data", d / "one_000.bin", "--val-data", f"train={d}/one_000.bin", "--eval-batches", "1000",
                     "--batch-size", "4", "--lr", "0", "--max-steps", "3", "--eval-every", "3", "--out-dir", out], expect=0)
    log = read_log(out)
    train = [r["train_loss"] for r in log if "train_loss" in r]
    vals = [r["val_loss_train"] for r in log if "val_loss_train" in r]
    assert len(train) == 3 and len(set(train)) == 3  # three different batches
    assert len(vals) == 2 and vals[0] == vals[1]  # steps 0 and 3, the same weights
    # float32 losses, averaged in two orders: equal to a few float roundings
    assert vals[0] == pytest.approx(sum(train) / 3, rel=1e-6)
    # a set of fewer sequences than B (3 of 8 tokens, B = 4) is still one batch, not none: at lr 0
    # the untrained model's loss, about ln(64) (an average of nothing would be NaN, a divergence)
    write_shard(str(d / "small_000.bin"), pattern_tokens(25, seed=6), 1)
    small = tmp_path / "small"
    run(TINY_GPT2 + ["--train-data", d / "one_000.bin", "--val-data", d / "small_000.bin", "--batch-size", "4", "--lr", "0",
                     "--max-steps", "1", "--out-dir", small], expect=0)
    assert [r["val_loss"] for r in read_log(small) if "val_loss" in r] == [pytest.approx(np.log(64), abs=0.15)]


def test_a_val_set_that_shares_a_train_shard_is_refused_unless_named_train(tmp_path, data):
    """A val glob that also matches a train shard ('DIR/*.bin' beside train shards; a link to one
    under another name) would report the loss on training data as the val loss: a usage error
    naming the shard, before any step or file is written. A set named train is that loss on purpose."""
    (tmp_path / "link_000.bin").symlink_to(data / "train_002.bin")
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "2"]
    for val, shard in [(str(data / "*.bin"), "train_000.bin"), (f"other={data}/train_001.bin", "train_001.bin"),
                       (str(tmp_path / "link_*.bin"), "link_000.bin")]:
        out = tmp_path / "refused"
        p = run(base + ["--val-data", val, "--out-dir", out], expect=2)
        assert f"shard '{val.split('=')[-1].rsplit('/', 1)[0]}/{shard}' is also a --train-data" in p.stderr, p.stderr
        assert "--val-data train=GLOB" in p.stderr
        assert not out.exists()
    out = tmp_path / "run"
    run(base + ["--val-data", f"shakes={data}/val_*.bin", "--val-data", f"train={data}/train_001.bin", "--out-dir", out], expect=0)
    vals = [r for r in read_log(out) if "step" in r and "train_loss" not in r]
    assert vals and set(vals[-1]) == {"step", "val_loss_shakes", "val_loss_train"}


def successor_mc_examples(n, vocab=64, seed=0):
    """Multiple-choice examples on the rule of pattern_tokens (t -> 5t + 3 mod V): the context is
    a run of the rule, the right ending continues it, the others are random tokens. A model that
    learned the stream picks the right one; an untrained one is at chance."""
    from vp_data.mc import McExample

    rng = np.random.default_rng(seed)
    step = lambda t: (t * 5 + 3) % vocab  # noqa: E731
    examples = []
    for _ in range(n):
        ctx = [int(rng.integers(vocab))]
        for _ in range(int(rng.integers(2, 5))):
            ctx.append(step(ctx[-1]))
        right = [step(ctx[-1])]
        for _ in range(int(rng.integers(1, 3))):
            right.append(step(right[-1]))
        label = int(rng.integers(4))
        endings = []
        for j in range(4):
            wrong = [int(x) for x in rng.integers(vocab, size=len(right))]
            endings.append(right if j == label else (wrong if wrong != right else [(right[0] + 1) % vocab] + right[1:]))
        examples.append(McExample(ctx, endings, [3 * len(e) + j for j, e in enumerate(endings)], label))
    return examples


def write_mc(path, examples, vocab=64, name="test"):
    from vp_data import mc

    mc.write(str(path), examples, vocab, name)
    return path


def test_eval_mc_scores_a_trained_model_above_chance(tmp_path, data):
    """--eval-mc end to end: a model trained on the successor stream picks the ending that follows
    the rule (all three scores at least 0.9 after 150 steps), where the untrained one is near
    chance (0.25); named and unnamed sets are logged under their keys at every evaluation, and the
    console says how many examples were cut to fit --seq-len."""
    mcf = write_mc(tmp_path / "succ.vpmc", successor_mc_examples(40))
    out = tmp_path / "run"
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--batch-size", "4", "--max-steps", "150", "--lr", "1e-2",
                         "--eval-every", "75", "--eval-mc", f"succ={mcf}", "--eval-mc", str(mcf), "--out-dir", str(out)], expect=0)
    evals = [r for r in read_log(out) if "step" in r and "train_loss" not in r]
    assert [r["step"] for r in evals] == [0, 75, 150]
    keys = {f"mc_{m}{s}" for m in ("acc", "acc_norm", "acc_tokavg") for s in ("", "_succ")}
    assert all(set(r) == {"step"} | keys for r in evals), evals
    first, last = evals[0], evals[-1]
    for m in ("acc", "acc_norm", "acc_tokavg"):
        assert first[f"mc_{m}_succ"] < 0.5, first
        assert last[f"mc_{m}_succ"] >= 0.9, last
        assert last[f"mc_{m}"] == last[f"mc_{m}_succ"]  # the same file twice
    # the rows' own input positions; each batch of 4 is forwarded at T=8 (its longest row rounded
    # up to 16 positions, capped at T)
    examples = successor_mc_examples(40)
    in_rows = sum(min(len(e.context) + len(x), 9) - 1 for e in examples for x in e.endings)
    assert f"multiple choice succ: 40 examples (160 rows of {in_rows} positions, forwarded in 40 batches as 1280) in '{mcf}'" in p.stdout
    assert re.search(r"step +150 \| eval \| succ acc [0-9.]+ acc_norm [0-9.]+ acc_tokavg [0-9.]+ \| mc acc", p.stdout)
    # the examples of 8 tokens or fewer plus one fit T=8 whole; the console counts the others
    cut = sum(any(len(e.context) + len(x) > 9 for x in e.endings) for e in examples)
    assert (f"; {cut} cut to their last 9 tokens" in p.stdout) == (cut > 0)
    # a checkpoint evaluated with --max-steps 0 gives the run's last figures
    q = run(["--init-from", out / "ckpt_00000150.bin", "--max-steps", "0", "--seq-len", "8", "--batch-size", "4",
             "--eval-mc", f"succ={mcf}"], expect=0)
    assert f"succ acc {last['mc_acc_succ']:.4f} acc_norm {last['mc_acc_norm_succ']:.4f}" in q.stdout


def test_eval_mc_logs_each_score_under_its_own_key(tmp_path, data):
    """Three examples whose scores are decided by construction, so that acc, acc_norm and
    acc_tokavg come out 0, 1/3 and 2/3 and each must be logged under its own key, to every digit
    (%.9g). After training on the successor stream (t -> 5t + 3):
      twice: endings [x] and [x, 5x + 3] after a run of the rule, x off the rule, chars 1 and 1,
             label 1. The longer ending's sum is larger (a loss is > 0): acc and acc_norm pick 0.
             Per token it is lower: its second token follows the rule, far likelier than x,
             which breaks it: acc_tokavg picks 1, right.
      once:  two identical endings of 1 and 5 characters, label 1: equal sums, so acc and
             acc_tokavg tie (choice 0); acc_norm divides by the characters and picks 1, right."""
    from vp_data.mc import McExample

    step = lambda t: (t * 5 + 3) % 64  # noqa: E731
    ctx = [7, step(7), step(step(7))]
    x = (step(ctx[-1]) + 11) % 64
    examples = [McExample(ctx, [[x], [x, step(x)]], [1, 1], 1)] * 2 + [McExample(ctx, [[x, 9], [x, 9]], [1, 5], 1)]
    mcf = write_mc(tmp_path / "keys.vpmc", examples)
    out = tmp_path / "run"
    run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--batch-size", "4", "--max-steps", "150", "--lr", "1e-2",
                     "--eval-mc", f"k={mcf}", "--out-dir", out], expect=0)
    last = [r for r in read_log(out) if "mc_acc_k" in r][-1]
    assert last["mc_acc_k"] == 0
    assert last["mc_acc_norm_k"] == pytest.approx(1 / 3, rel=1e-8)
    assert last["mc_acc_tokavg_k"] == pytest.approx(2 / 3, rel=1e-8)


def test_eval_mc_forwards_short_rows_at_their_length(tmp_path, data):
    """At --seq-len 48 the successor rows (at most 8 tokens) are forwarded at 16 positions, not
    48; the activations are still sized for training first, so the first evaluation (before any
    training step, with no val set to forward at B x T) does not leave them too small for it."""
    mcf = write_mc(tmp_path / "succ.vpmc", successor_mc_examples(40))
    model = [{"--max-seq": "64", "--seq-len": "48"}.get(prev, a) for prev, a in zip([None] + TINY_GPT2, TINY_GPT2)]
    out = tmp_path / "run"
    p = run(model + ["--train-data", str(data / "train_*.bin"), "--batch-size", "4", "--max-steps", "2", "--eval-every", "1",
                     "--eval-mc", f"succ={mcf}", "--out-dir", str(out)], expect=0)
    in_rows = sum(len(e.context) + len(x) - 1 for e in successor_mc_examples(40) for x in e.endings)
    assert f"(160 rows of {in_rows} positions, forwarded in 40 batches as {160 * 16})" in p.stdout
    log = read_log(out)
    assert [r["step"] for r in log if "mc_acc_succ" in r] == [0, 1, 2]
    assert [r["step"] for r in log if "train_loss" in r] == [1, 2]


def test_depth_alpha_is_logged_at_each_eval(tmp_path, data):
    """Depth-Attention's mean weights per (layer, source) over each evaluation's val batches, as
    the paper's analysis takes them: one row per layer 1..L-1 with |S(l)| + 1 entries (anchors,
    then the own value), each a distribution; near uniform at init (the logits q.k/sqrt(D) of a
    fresh model are small), and printed per layer on the console. No val set (evaluations of a
    multiple-choice set only), no weights."""
    out = tmp_path / "run"
    # 4 layers; no QK-norm, which would scale q and k up to norm sqrt(D) and make the init's logits large
    model = [{"--layers": "4", "--qk-norm": "0"}.get(prev, a) for prev, a in zip([None] + TINY_LLAMA, TINY_LLAMA)]
    p = run(model + ["--train-data", str(data / "train_*.bin"), "--val-data", str(data / "val_*.bin"), "--batch-size", "4",
                     "--max-steps", "20", "--lr", "1e-2", "--eval-every", "10", "--depth-stride", "2", "--out-dir", str(out)],
            expect=0, path="depth")
    evals = [r for r in read_log(out) if "val_loss" in r]
    assert [r["step"] for r in evals] == [0, 10, 20]
    for r in evals:
        rows = r["depth_alpha"]
        assert [len(row) for row in rows] == [2, 2, 3]  # stride 2: layer 1 reads {0}, 2 reads {0}, 3 reads {0, 2}
        for row in rows:
            assert abs(sum(row) - 1) < 1e-5 and all(0 < a < 1 for a in row)
    for row in evals[0]["depth_alpha"]:
        assert all(abs(a - 1 / len(row)) < 0.05 for a in row), evals[0]
    own = re.findall(r"^step +20 \| depth alpha on the own value, layers 1\.\.3 \| ([0-9.]+) ([0-9.]+) ([0-9.]+)$", p.stdout, re.M)
    assert own and [float(x) for x in own[0]] == [round(row[-1], 3) for row in evals[-1]["depth_alpha"]]
    quiet = tmp_path / "quiet"
    write_mc(tmp_path / "mc.vpmc", successor_mc_examples(4))
    run(model + ["--train-data", str(data / "train_*.bin"), "--max-steps", "2", "--eval-every", "1", "--eval-mc", str(tmp_path / "mc.vpmc"),
                 "--out-dir", str(quiet)], expect=0, path="depth")
    evals = [r for r in read_log(quiet) if "mc_acc" in r]
    assert [r["step"] for r in evals] == [0, 1, 2] and not any("depth_alpha" in r for r in read_log(quiet))


def test_eval_mc_bad_files_stop_before_training(tmp_path, data):
    """A .vpmc of another vocabulary, or a damaged one, is a runtime error at startup that names
    the file; nothing is written to --out-dir."""
    other = write_mc(tmp_path / "other.vpmc", successor_mc_examples(5), vocab=50257, name="gpt2")
    out = tmp_path / "run"
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--eval-mc", str(other), "--out-dir", str(out)], expect=1)
    assert "other.vpmc' was tokenized with gpt2 (vocabulary 50257); the model's vocabulary is 64" in p.stderr
    assert "HINT" in p.stderr and not out.exists()
    good = write_mc(tmp_path / "good.vpmc", successor_mc_examples(5))
    raw = good.read_bytes()
    cut = tmp_path / "cut.vpmc"
    cut.write_bytes(raw[:-4])
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--eval-mc", str(cut)], expect=1)
    assert "cut.vpmc" in p.stderr and "truncated or damaged" in p.stderr


def test_many_long_val_sets_are_stored_whole(tmp_path, data):
    """The run text a checkpoint stores holds every flag whole: 12 named val sets with long paths
    (about 1.5 KB of --val-data; the run text once went through a 512-byte buffer, which the
    flag fuzzer overflowed: dev/fuzz/corpus/flags/val_data_run_text_overflow). A resume with the
    same val sets then notes no change in them."""
    deep = tmp_path / ("d" * 100) / ("e" * 100)
    deep.mkdir(parents=True)
    shutil.copy(data / "val_000.bin", deep / "val_000.bin")
    out = tmp_path / "run"
    vals = []
    for i in range(12):
        vals += ["--val-data", f"set{i:02d}={deep}/val_*.bin"]
    args = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--out-dir", str(out)] + vals
    run(args + ["--max-steps", "2"], expect=0)
    raw = (out / "ckpt_00000002.bin").read_bytes()
    header_bytes, run_text_bytes = checkpoint_regions(raw)
    text = raw[header_bytes:header_bytes + run_text_bytes].decode()
    line = [l for l in text.splitlines() if l.startswith("--val-data=")][0]
    assert line == "--val-data=" + "".join(f"set{i:02d}={deep}/val_*.bin;" for i in range(12)) and len(line) > 1500
    p = run(args + ["--max-steps", "3", "--resume", "1"], expect=0)
    assert "changed flag: --max-steps=3" in p.stdout and "--val-data" not in p.stdout, p.stdout
    assert len([r for r in read_log(out) if "step" in r and "train_loss" not in r][-1]) == 13  # step + 12 val losses


def test_uint32_shards(tmp_path):
    """Version-2 shards (uint32 tokens) for vocabularies over 65,536: ids over 65,535 train, and
    the reader takes 4 bytes a token: one id of 70,000 at position 123 is reported as that id at
    that position (read as uint16 it would be two ids in range, 4464 and 1, and no error)."""
    toks = pattern_tokens(600, vocab=70000, seed=3)
    toks[::7] = 69999
    write_shard(str(tmp_path / "big.bin"), toks, 2)
    args = ["--arch", "gpt2", "--layers", "1", "--heads", "1", "--dim", "8", "--vocab", "70000", "--max-seq", "8",
            "--seq-len", "8", "--batch-size", "2", "--train-data", str(tmp_path / "big.bin"), "--max-steps", "2"]
    p = run(args, expect=0)
    assert "train data: 600 tokens" in p.stdout, p.stdout[-2000:]
    toks[123] = 70000
    write_shard(str(tmp_path / "big.bin"), toks, 2)
    p = run(args, expect=1)
    assert "token id 70000 at position 123 is out of range for vocab size 70000" in p.stderr, p.stderr[-2000:]


def test_sample_decoded_with_gpt2_tokenizer(tmp_path, data):
    enc = SHARED / "tokenizers" / "gpt2" / "encoder.json"
    assert enc.exists(), f"shared data missing: {enc}"
    toks = pattern_tokens(800, vocab=50257, seed=4)
    write_shard(str(tmp_path / "t.bin"), toks, 1)
    p = run(["--arch", "gpt2", "--layers", "1", "--heads", "1", "--dim", "8", "--max-seq", "8", "--seq-len", "8",
             "--batch-size", "2", "--train-data", str(tmp_path / "t.bin"), "--max-steps", "1", "--sample-every", "1",
             "--sample-tokens", "12", "--tokenizer", str(enc)], expect=0)
    assert "---- sample at step 1 ----" in p.stdout


def test_sample_prompt(tmp_path, data, ref_gpt2):
    """--sample-prompt: encoded as tiktoken encodes it, printed, then continued; GPT-2's own
    encoder.json + vocab.bpe and the exported vptok give the same tokens, so the same samples."""
    toks = pattern_tokens(800, vocab=50257, seed=4)
    write_shard(str(tmp_path / "t.bin"), toks, 1)
    tokdir = tmp_path / "gpt2"
    tokdir.mkdir()
    for f in ("encoder.json", "vocab.bpe"):
        shutil.copy(SHARED / "tokenizers" / "gpt2" / f, tokdir / f)
    from vp_data import tokenizer

    tokenizer.export_vptok(tokenizer.load("gpt2"), str(tmp_path / "gpt2.vptok"))
    prompt = "ROMEO: Ça va, 日本?"  # 14 tokens: the delimiter and it fill 15 of T = 16
    base = ["--arch", "gpt2", "--layers", "1", "--heads", "1", "--dim", "8", "--max-seq", "16", "--seq-len", "16",
            "--batch-size", "2", "--train-data", str(tmp_path / "t.bin"), "--max-steps", "2", "--sample-every", "2",
            "--sample-tokens", "5", "--sample-prompt", prompt]
    outs = [run(base + ["--tokenizer", str(t)], expect=0).stdout for t in (tokdir / "encoder.json", tmp_path / "gpt2.vptok")]
    n = len(ref_gpt2.encode_ordinary(prompt))
    assert f"sample prompt: {n} tokens after the delimiter 50256\n" in outs[0]
    sample = lambda out: out.split("---- sample at step 2 ----\n")[1].split("\n----")[0]
    assert sample(outs[0]).startswith(prompt) and len(sample(outs[0])) > len(prompt)
    assert sample(outs[0]) == sample(outs[1])
    # the prompt must fit in T with the delimiter: at most 16 - 1 tokens
    long_prompt = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
    assert len(ref_gpt2.encode_ordinary(long_prompt)) == 16
    p = run(base[:-1] + [long_prompt, "--tokenizer", str(tmp_path / "gpt2.vptok")], expect=2)
    assert "--sample-prompt is 16 tokens; with the delimiter before it, it must fit in --seq-len 16" in p.stderr
    # encoder.json without its merges decodes, but cannot encode
    (tokdir / "vocab.bpe").unlink()
    p = run(base + ["--tokenizer", str(tokdir / "encoder.json")], expect=2)
    assert "there is no vocab.bpe (GPT-2's merges) beside this encoder.json" in p.stderr
    # not UTF-8 (the surrogate escape is the byte 0xFF on the command line)
    p = run(base[:-1] + ["bad \udcff", "--tokenizer", str(tmp_path / "gpt2.vptok")], expect=2)
    assert "--sample-prompt is not valid UTF-8" in p.stderr
    # a tokenizer bigger than the model: not the model's (the prompt's ids would not fit its vocabulary)
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "1", "--sample-every", "1",
                         "--sample-prompt", prompt, "--tokenizer", str(tmp_path / "gpt2.vptok")], expect=2)
    assert "has 50257 tokens, more than the model's vocabulary of 64" in p.stderr


def test_sample_top_k_end_to_end(tmp_path, data):
    """--sample-top-k reaches the sampler: top-1 at temperature 1 draws the argmax, as greedy does;
    k = V draws exactly what no limit draws (the same random numbers on the same weights)."""
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "30", "--lr", "1e-2",
                        "--sample-every", "30", "--sample-tokens", "24"]
    sample = lambda p: re.findall(r"---- sample at step 30 ----\n(.*)", p.stdout)
    greedy = sample(run(base + ["--sample-temperature", "0"], expect=0))
    top1 = sample(run(base + ["--sample-top-k", "1"], expect=0))
    assert len(greedy) == 1 and top1 == greedy
    unlimited, k_is_v = sample(run(base, expect=0)), sample(run(base + ["--sample-top-k", "64"], expect=0))
    assert k_is_v == unlimited and unlimited != greedy


def checkpoint_params(path):
    """The parameters of a checkpoint, as float32 (the first third of its tensors)."""
    t = np.frombuffer(checkpoint_tensors(path), dtype="<f4")
    return t[: len(t) // 3]


def test_resformer_lambdas_are_logged(tmp_path, data):
    """--resformer-lambda learn: every step line carries the L lambdas after that step's update,
    equal bit for bit to the weights the checkpoint of that step stores (vp_lambda, the last
    parameter tensor); layer 0's stays 1/2 (it mixes v^0 with itself); each eval prints layers
    1..L-1. The fixed-lambda build logs none."""
    out = tmp_path / "learn"
    model = [("3" if prev == "--layers" else a) for prev, a in zip([None] + TINY_GPT2, TINY_GPT2)]
    p = run(model + ["--train-data", str(data / "train_*.bin"), "--val-data", str(data / "val_*.bin"), "--eval-every", "5",
                     "--max-steps", "10", "--lr", "1e-2", "--checkpoint-every", "5", "--out-dir", out,
                     "--resformer-lambda", "learn", "--resformer-lambda-lr", "0.05"], expect=0, path="resformer")
    steps = [r for r in read_log(out) if "train_loss" in r]
    assert len(steps) == 10 and all(len(r["resformer_lambdas"]) == 3 for r in steps)
    assert all(r["resformer_lambdas"][0] == 0.5 for r in steps)
    for step in (5, 10):
        stored = checkpoint_params(out / f"ckpt_{step:08d}.bin")[-3:]
        assert np.array_equal(np.array(steps[step - 1]["resformer_lambdas"], dtype=np.float32), stored)
    assert all(abs(x - 0.5) > 1e-4 for x in steps[-1]["resformer_lambdas"][1:]), steps[-1]
    lines = re.findall(r"^step +(\d+) \| resformer lambda, layers 1\.\.2 \| ([0-9.]+) ([0-9.]+)$", p.stdout, re.M)
    assert [int(s) for s, _, _ in lines] == [0, 5, 10]
    assert [float(x) for x in lines[-1][1:]] == pytest.approx(steps[-1]["resformer_lambdas"][1:], abs=5e-5)
    run(model + ["--train-data", str(data / "train_*.bin"), "--max-steps", "2", "--out-dir", tmp_path / "fixed"], expect=0, path="resformer")
    assert not any("resformer_lambdas" in r for r in read_log(tmp_path / "fixed"))


# ---------------------------------------------------------------------------
# checkpoints and resume

@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("family", [TINY_GPT2, TINY_LLAMA], ids=["gpt2", "llama"])
def test_resume_is_bit_exact(tmp_path, data, family, path):
    """N steps straight == K steps, stop, resume, N-K steps: losses, samples and final weights."""
    common = family + path_flags(path, family) + ["--train-data", str(data / "train_*.bin"), "--val-data", str(data / "val_*.bin"),
                       "--total-batch-tokens", "64", "--max-steps", "12", "--lr", "3e-3", "--warmup-steps", "3",
                       "--eval-every", "4", "--sample-every", "3", "--sample-tokens", "6", "--checkpoint-every", "5"]
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    p1 = run(common + ["--out-dir", straight], expect=0, path=path)
    # the interrupted run: the same command, then everything after step 5 is lost
    run(common + ["--out-dir", broken], expect=0, path=path)
    for name in ["ckpt_00000010.bin", "ckpt_00000012.bin"]:
        (broken / name).unlink()
    p2 = run(common + ["--out-dir", broken, "--resume", "1"], expect=0, path=path)
    assert "resuming from" in p2.stdout and "(step 5)" in p2.stdout

    def after5(log):
        resumed = [i for i, r in enumerate(log) if r.get("event") == "config" and "resumed_from" in r]
        start = resumed[-1] + 1 if resumed else 0
        return [(r["step"], r.get("train_loss"), r.get("val_loss")) for r in log[start:] if r.get("step", 0) > 5]

    a, b = after5(read_log(straight)), after5(read_log(broken))
    assert len(a) == 7 + 2 and a == b  # steps 6..12 and the evals at 8 and 12, exactly equal
    assert read_log(broken)[-10]["event"] == "config" and read_log(broken)[-10]["resumed_from"] == 5
    samples = lambda out: re.findall(r"---- sample at step (\d+) ----\n(.*)", out)
    assert [s for s in samples(p1.stdout) if int(s[0]) > 5] == samples(p2.stdout) and [s[0] for s in samples(p2.stdout)] == ["6", "9", "12"]
    # the final weights and AdamW moments, byte for byte (the stored command lines differ: --out-dir, --resume)
    assert checkpoint_tensors(straight / "ckpt_00000012.bin") == checkpoint_tensors(broken / "ckpt_00000012.bin")


@pytest.mark.parametrize("family", [TINY_GPT2, TINY_LLAMA], ids=["gpt2", "llama"])
def test_the_trainer_at_O1_gives_the_O3_trainers_bits(tmp_path, data, family):
    """build/tests/train_cpu_O1 is the vanilla trainer built at -O1: with -ffp-contract=off (the
    Makefile's CXXFLAGS) nothing may depend on the optimization level, so the same run's losses
    and final weights and moments are the same bits. (GCC fuses a * b + c at -O2 and above only:
    with contraction on, these differed.)"""
    twin = REPO / "build" / "tests" / "train_cpu_O1"
    common = family + ["--train-data", str(data / "train_*.bin"), "--val-data", str(data / "val_*.bin"), "--total-batch-tokens", "64",
                       "--max-steps", "6", "--lr", "3e-3", "--warmup-steps", "2", "--eval-every", "3"]
    run(common + ["--out-dir", tmp_path / "O3"], expect=0)
    run(common + ["--out-dir", tmp_path / "O1"], expect=0, binary=twin)
    losses = lambda d: [(r["step"], r.get("train_loss"), r.get("val_loss")) for r in read_log(d) if "step" in r]
    assert losses(tmp_path / "O3") == losses(tmp_path / "O1") and len(losses(tmp_path / "O1")) >= 6
    assert checkpoint_tensors(tmp_path / "O3" / "ckpt_00000006.bin") == checkpoint_tensors(tmp_path / "O1" / "ckpt_00000006.bin")


def test_resume_auto_starts_a_run_and_then_continues_it(tmp_path, data):
    """--resume auto, for a job submitted again and again with one command line: in a directory
    without checkpoints it is a new run (the same losses as one without --resume), in one with
    them it is --resume 1 (bit-exact: the losses and weights of a run that never stopped)."""
    common = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--batch-size", "2", "--lr", "3e-3", "--lr-schedule", "constant",
                          "--warmup-steps", "2"]
    auto = tmp_path / "auto"
    p = run(common + ["--max-steps", "4", "--out-dir", auto, "--resume", "auto"], expect=0)
    assert f"--resume auto: no checkpoint in '{auto}': a new run" in p.stdout
    p = run(common + ["--max-steps", "8", "--out-dir", auto, "--resume", "auto"], expect=0)
    assert f"--resume auto: continuing from the newest checkpoint in '{auto}' (step 4)" in p.stdout and "(step 4)" in p.stdout
    run(common + ["--max-steps", "8", "--out-dir", tmp_path / "straight"], expect=0)
    trained = lambda d: [(r["step"], r["train_loss"]) for r in read_log(d) if "train_loss" in r]
    assert trained(auto) == trained(tmp_path / "straight") and [s for s, _ in trained(auto)] == list(range(1, 9))
    configs = [r for r in read_log(auto) if r.get("event") == "config"]
    assert "resumed_from" not in configs[0] and configs[1]["resumed_from"] == 4
    assert checkpoint_tensors(auto / "ckpt_00000008.bin") == checkpoint_tensors(tmp_path / "straight" / "ckpt_00000008.bin")
    # a finished run stays finished, as with --resume 1
    p = run(common + ["--max-steps", "8", "--out-dir", auto, "--resume", "auto"], expect=0)
    assert "(step 8)" in p.stdout and [s for s, _ in trained(auto)] == list(range(1, 9))


def logged_steps(out_dir):
    """How many step lines a run's log.jsonl holds so far (0 before it exists)."""
    log = Path(out_dir) / "log.jsonl"
    return log.read_text().count('"train_loss"') if log.exists() else 0


def start_trainer(args, binary=None):
    """Starts a trainer (one OpenMP thread) with its stdout and stderr piped; returns its Popen."""
    return subprocess.Popen([str(binary or TRAINER)] + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})


def start_and_wait_for_step(args, out_dir, step, binary=None):
    """Starts a trainer and returns its Popen once log.jsonl records `step` steps (it goes on)."""
    proc = start_trainer(args, binary)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if logged_steps(out_dir) >= step:
            return proc
        time.sleep(0.005)
    proc.kill()
    out, err = proc.communicate()
    raise AssertionError(f"the run did not reach step {step} (exit {proc.returncode})\nstdout:\n{out[-2000:]}\nstderr:\n{err[-2000:]}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGUSR1", "SIGHUP"])
def test_a_signal_stops_after_the_step_with_a_checkpoint_that_resumes_exactly(tmp_path, data, sig):
    """Ctrl-C, a scheduler's SIGTERM, Slurm's --signal=USR1 or a closed terminal's SIGHUP mid-run: the step in progress ends,
    its checkpoint is saved, the run exits 128 + the signal's number and log.jsonl says so; resumed
    from there it gives the losses, evals, samples and weights of a run that never stopped (a
    constant lr, so that the stopped run's --max-steps of a million need not be reached)."""
    common = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--val-data", data / "val_*.bin", "--batch-size", "2", "--lr", "3e-3",
                          "--lr-schedule", "constant", "--warmup-steps", "3", "--eval-every", "7", "--sample-every", "5",
                          "--sample-tokens", "4", "--checkpoint-every", "1000"]
    stopped = tmp_path / "stopped"
    proc = start_and_wait_for_step(common + ["--max-steps", "1000000", "--out-dir", stopped], stopped, 3)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, f"exit {proc.returncode}\n{out[-2000:]}\n{err[-2000:]}"
    name = signal.Signals(sig).name
    assert f"{name}: stopping after this step" in err, err[-2000:]
    m = re.search(rf"stopped by {name} after step (\d+) of 1000000: saved (\S+); to go on, run the same command with --resume 1", out)
    assert m, out[-2000:]
    s = int(m.group(1))
    assert s >= 3 and Path(m.group(2)) == stopped / f"ckpt_{s:08d}.bin" and m.group(2) and Path(m.group(2)).exists()
    assert read_log(stopped)[-1] == {"event": "stopped", "step": s, "signal": name}
    n = s + 12  # past an eval and two samples
    straight = tmp_path / "straight"
    p1 = run(common + ["--max-steps", n, "--out-dir", straight], expect=0)
    p2 = run(common + ["--max-steps", n, "--out-dir", stopped, "--resume", "1"], expect=0)
    assert f"(step {s})" in p2.stdout

    def after(log, k):
        return [(r["step"], r.get("train_loss"), r.get("val_loss")) for r in log if r.get("step", 0) > k and "event" not in r]

    assert after(read_log(straight), s) == after(read_log(stopped), s) and len(after(read_log(straight), s)) >= 12
    samples = lambda text: re.findall(r"---- sample at step (\d+) ----\n(.*)", text)
    assert [x for x in samples(p1.stdout) if int(x[0]) > s] == samples(p2.stdout) and samples(p2.stdout)
    assert checkpoint_tensors(straight / f"ckpt_{n:08d}.bin") == checkpoint_tensors(stopped / f"ckpt_{n:08d}.bin")


def test_a_signal_during_the_last_step_changes_nothing(tmp_path, data):
    """A signal that comes during the last step (or its evaluation) finds the run complete: the
    evaluation at the end still runs, whole, and is logged, the last checkpoint is saved, and the
    run exits 0 with no "stopped" line. Each step here is 5000 micro-batches (about a second), so
    a signal sent once step 1 is logged lands in step 2 of 2, or in its evaluation."""
    out = tmp_path / "run"
    args = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--val-data", data / "val_*.bin", "--batch-size", "4",
                        "--total-batch-tokens", str(4 * 8 * 5000), "--max-steps", "2", "--out-dir", out]
    proc = start_and_wait_for_step(args, out, 1)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert "SIGTERM: stopping after this step" in stderr, stderr[-2000:]  # it came while the run was on
    assert proc.returncode == 0, f"exit {proc.returncode}\n{stdout[-2000:]}\n{stderr[-2000:]}"
    log = read_log(out)
    assert [r["step"] for r in log if "val_loss" in r] == [2] and not [r for r in log if r.get("event") == "stopped"]
    assert "stopped by" not in stdout and (out / "ckpt_00000002.bin").exists()


def slow_step_run(data, out_dir):
    """A run whose steps take a second or more on one thread (a 4-layer, 256-wide model, 2048
    tokens a step), so that signals sent one after another, each once the handler has taken the
    one before (milliseconds), land in the same step."""
    return ["--arch", "gpt2", "--layers", "4", "--heads", "4", "--dim", "256", "--vocab", "64", "--max-seq", "128", "--seq-len", "128",
            "--batch-size", "16", "--train-data", data / "train_*.bin", "--max-steps", "1000000", "--out-dir", out_dir]


def signal_and_wait_for_handler(proc, sig, said="stopping after this step"):
    """Sends `sig` and reads stderr until the handler has said `said` (two pending signals of one
    kind would merge into one, so the next must not be sent before)."""
    proc.send_signal(sig)
    line = ""
    while said not in line and proc.poll() is None:
        line = proc.stderr.readline()
    assert said in line, f"the handler did not say '{said}' (exit {proc.returncode})"


def test_a_signal_without_out_dir_stops_and_a_second_ctrl_c_at_once(tmp_path, data):
    """Without --out-dir the run still stops after the step, saying nothing was saved. A second
    SIGINT (Ctrl-C twice), sent once the handler has taken the first and before the step ends,
    takes the default action: the process ends at once, by the signal, saving nothing."""
    args = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--max-steps", "1000000"]
    proc = start_trainer(args)
    first = ""
    while not first.startswith("step") and proc.poll() is None:  # the console line of a step: the loop has begun
        first = proc.stdout.readline()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and re.search(r"stopped by SIGTERM after step \d+ of 1000000 \(nothing saved: no --out-dir\)", out), out[-2000:]
    proc = start_and_wait_for_step(slow_step_run(data, tmp_path / "b"), tmp_path / "b", 1)
    signal_and_wait_for_handler(proc, signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGINT and "stopped by" not in out, (proc.returncode, out[-2000:], err[-2000:])


def test_repeated_sigterm_and_sigusr1_do_not_cut_the_save_short(tmp_path, data):
    """Schedulers deliver SIGTERM more than once: at a Slurm job's time limit slurmstepd signals
    every task and srun, or mpirun, relays its own SIGTERM to the ranks (measured:
    tests/python/test_slurm.py, docs/distributed.md "Slurm"). A repeated SIGTERM or SIGUSR1
    changes nothing: the handler says so, and the run still finishes its step, saves it and
    exits by its first signal; a first Ctrl-C after them does not end it either."""
    out = tmp_path / "run"
    proc = start_and_wait_for_step(slow_step_run(data, out), out, 1)
    signal_and_wait_for_handler(proc, signal.SIGTERM)
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
        signal_and_wait_for_handler(proc, sig, "already stopping after this step")
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, stdout[-2000:], stderr[-2000:])
    s = read_log(out)[-1]
    assert s["event"] == "stopped" and s["signal"] == "SIGTERM" and (out / f"ckpt_{s['step']:08d}.bin").exists()
    assert f"stopped by SIGTERM after step {s['step']} of 1000000: saved" in stdout


def test_a_signal_still_saves_when_the_console_pipe_is_gone(tmp_path, data):
    """`./train ... | tee run.txt` and Ctrl-C: the signal reaches tee too, which dies, and the
    trainer's next console line would end it by SIGPIPE before its save. After a stop signal a
    console that is gone makes writes fail instead: the checkpoint is saved and the exit is 143."""
    out = tmp_path / "run"
    proc = start_and_wait_for_step(TINY_GPT2 + ["--train-data", data / "train_*.bin", "--max-steps", "1000000", "--lr-schedule", "constant",
                                                "--out-dir", out], out, 2)
    proc.send_signal(signal.SIGTERM)
    said = ""
    while "stopping after this step" not in said and proc.poll() is None:
        said = proc.stderr.readline()
    proc.stdout.close()  # the reader of the console is gone
    proc.wait(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, proc.returncode
    stop = read_log(out)[-1]
    assert stop["event"] == "stopped" and (out / f"ckpt_{stop['step']:08d}.bin").exists(), stop


def test_sighup_changes_nothing_under_nohup(tmp_path, data):
    """A run started with SIGHUP ignored (nohup, or a shell that ignores it) keeps it ignored: the
    hangup of the terminal it was started from must not stop it. A SIGTERM still does."""
    out = tmp_path / "run"
    args = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--max-steps", "1000000", "--lr-schedule", "constant", "--out-dir", out]
    proc = subprocess.Popen([str(TRAINER)] + [str(a) for a in args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        deadline = time.time() + 60
        while logged_steps(out) < 2 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.005)
        proc.send_signal(signal.SIGHUP)
        steps = logged_steps(out)
        while logged_steps(out) < steps + 20 and proc.poll() is None and time.time() < deadline:  # it trains on
            time.sleep(0.005)
        assert proc.poll() is None, f"exit {proc.returncode}: {proc.stderr.read()[-2000:]}"
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM and "SIGHUP" not in err, (proc.returncode, err[-2000:])
    assert read_log(out)[-1]["signal"] == "SIGTERM"


def test_a_second_run_in_a_busy_out_dir_is_refused(tmp_path, data):
    """The same job submitted twice (with --resume auto, as the recipes run, both would continue
    from one checkpoint and write over each other's files): the second run finds DIR/.lock held
    and stops, naming the first run's pid, before it reads or writes anything there. The lock goes
    with the process: once the first run has stopped, the same command resumes."""
    out = tmp_path / "run"
    common = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--lr-schedule", "constant", "--checkpoint-every", "2", "--out-dir", out]
    first = start_and_wait_for_step(common + ["--max-steps", "1000000", "--resume", "auto"], out, 3)
    try:
        log_before = (out / "log.jsonl").read_text()
        for resume in ("auto", "1", "0"):
            p = run(common + ["--max-steps", "1000000", "--resume", resume], expect=1)
            assert f"--out-dir '{out}' is in use by another run (pid {first.pid})" in p.stderr, p.stderr[-2000:]
            assert "HINT: wait for that run to end (or stop it), or choose another --out-dir" in p.stderr and "resuming" not in p.stdout
        log_now = (out / "log.jsonl").read_text()
        assert log_now.startswith(log_before) and log_now.count('"event":"config"') == 1  # nothing of the second run's
        assert not list(out.glob("log.jsonl.*"))  # (the first run's log was not moved aside)
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 128 + signal.SIGTERM
    stopped = read_log(out)[-1]["step"]
    p = run(common + ["--max-steps", stopped + 2, "--resume", "auto"], expect=0)
    assert f"(step {stopped})" in p.stdout and read_log(out)[-1]["step"] == stopped + 2


def file_size_limit(limit):
    """preexec_fn: the child's files may not grow past `limit` bytes (ulimit -f)."""
    import resource
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_log_that_cannot_be_written_stops_the_run_and_its_cut_line_is_dropped_on_resume(tmp_path, data):
    """A log line that does not reach the file (a full disk; here a file-size limit, which also
    checks that SIGXFSZ does not kill the trainer) stops the run with exit 1 and a message, rather
    than training on with steps missing from the log. Resumed, the run cuts the partial line off
    (and prints it), so the log stays one JSON object a line; a whole record that lost only its
    newline is kept."""
    out = tmp_path / "run"
    common = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--lr-schedule", "constant", "--out-dir", out]
    run(common + ["--max-steps", "2"], expect=0)
    limit = (out / "log.jsonl").stat().st_size + 3000  # some 25 step lines more
    p = run(common + ["--max-steps", "1000", "--resume", "1"], expect=1, preexec_fn=file_size_limit(limit))
    assert f"error: cannot write to '{out}/log.jsonl': File too large" in p.stderr, p.stderr[-2000:]
    assert "HINT: free space on the disk of --out-dir (or raise the file-size limit), then run the same command with --resume 1" in p.stderr
    raw = (out / "log.jsonl").read_bytes()
    assert len(raw) == limit and not (out / "ckpt_00001000.bin").exists()
    cut = raw[raw.rfind(b"\n") + 1:]
    p = run(common + ["--max-steps", "4", "--resume", "1"], expect=0)
    if cut:  # the line that crossed the limit was written up to it
        assert f"ended in a cut line" in p.stdout and f"dropped its {len(cut)} bytes: {cut.decode()[:200]}" in p.stdout, p.stdout[-2000:]
    log = read_log(out)  # every line is JSON
    assert [r["step"] for r in log if "train_loss" in r][-2:] == [3, 4]
    # a record whole but for its newline is kept, and the next run's lines start on a line of their own
    with open(out / "log.jsonl", "a") as f:
        f.write('{"step":4,"note":"no newline","list":[1,{"a":"}"}]}')
    p = run(common + ["--max-steps", "5", "--resume", "1"], expect=0)
    assert "cut line" not in p.stdout
    log = read_log(out)
    assert {"step": 4, "note": "no newline", "list": [1, {"a": "}"}]} in log and log[-1]["step"] == 5


def test_a_checkpoint_over_a_file_size_limit_is_an_error_not_a_signal(tmp_path, data):
    """ulimit -f below a checkpoint's size: the write fails with EFBIG (the trainer ignores
    SIGXFSZ, which would end it silently with a partial file left), the run stops with exit 1 and
    the hint names the limit, the partial file is removed and the earlier checkpoint is intact."""
    out = tmp_path / "run"
    common = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--lr-schedule", "constant", "--out-dir", out]
    run(common + ["--max-steps", "2"], expect=0)
    before = (out / "ckpt_00000002.bin").read_bytes()
    p = run(common + ["--max-steps", "4", "--resume", "1"], expect=1, preexec_fn=file_size_limit(len(before) // 2))
    assert f"writing checkpoint '{out}/ckpt_00000004.bin' failed" in p.stderr and "File too large" in p.stderr, p.stderr[-2000:]
    assert "raise a file-size limit, ulimit -f" in p.stderr
    assert (out / "ckpt_00000002.bin").read_bytes() == before and not list(out.glob(".ckpt_*")) and not (out / "ckpt_00000004.bin").exists()


def test_console_output_lost_to_a_full_disk_is_an_error(tmp_path, data):
    """An evaluation-only run's val loss is on the console alone: written to a full disk
    (/dev/full), the run does not end as a success."""
    args = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--val-data", data / "val_*.bin", "--max-steps", "0"]
    with open("/dev/full", "w") as full:
        p = subprocess.run([str(TRAINER)] + [str(a) for a in args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=300,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 1 and "error: writing the console output (standard output) failed (a full disk?): what it printed is incomplete" in p.stderr, p.stderr[-2000:]
    run(args, expect=0)  # the same run to a console that takes it


def long_eval_flags(tmp_path, data, kind):
    """An evaluation that takes seconds at TINY_GPT2 (a scheduler's grace period may not outlast a
    real one: HellaSwag is 40k rows): a val set of 2M tokens read whole, or 20k multiple-choice
    examples (80k rows)."""
    if kind == "val":
        write_shard(str(data / "big_000.bin"), np.random.default_rng(5).integers(64, size=2_000_000), 1)
        return ["--val-data", data / "big_*.bin", "--eval-batches", "1000000"]
    return ["--eval-mc", write_mc(tmp_path / "big.vpmc", successor_mc_examples(20_000))]


@pytest.mark.parametrize("kind", ["val", "mc"])
def test_a_signal_cuts_a_long_evaluation_short_and_saves_the_step(tmp_path, data, kind):
    """A stop signal that comes during a step skips that step's evaluation; one that comes during
    the evaluation cuts it short. Either way none of it is logged, the step's checkpoint is saved
    and the run exits 143, without waiting for the evaluation to end (before, it logged the
    evaluation whole, then saved). The run is resumed from step 1 so that no evaluation at step 0
    comes first; the signal is sent once step 2 is logged, so it reaches step 3 or its
    evaluation, which is due (--eval-every 3)."""
    out = tmp_path / "run"
    common = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--lr-schedule", "constant", "--out-dir", out]
    run(common + ["--max-steps", "1"], expect=0)
    proc = start_and_wait_for_step(common + ["--max-steps", "1000000", "--resume", "1", "--eval-every", "3"] + long_eval_flags(tmp_path, data, kind), out, 2)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, f"exit {proc.returncode}\n{stdout[-2000:]}\n{stderr[-2000:]}"
    assert re.search(r"the evaluation at step 3 (was cut short by SIGTERM: not logged|is skipped: stopping \(SIGTERM\))", stdout), stdout[-2000:]
    assert f"stopped by SIGTERM after step 3 of 1000000: saved {out / 'ckpt_00000003.bin'}" in stdout, stdout[-2000:]
    log = read_log(out)
    assert not [r for r in log if "val_loss" in r or any(k.startswith("mc_") for k in r)], log
    assert log[-1] == {"event": "stopped", "step": 3, "signal": "SIGTERM"} and (out / "ckpt_00000003.bin").exists()
    # the checkpoint goes on (the evaluation left out is not made up)
    p = run(common + ["--max-steps", "4", "--resume", "1"], expect=0)
    assert "(step 3)" in p.stdout and [r["step"] for r in read_log(out) if "train_loss" in r][-1] == 4


def wait_for_handler(proc, sig):
    """Waits until a process catches `sig` (Linux's /proc/PID/status SigCgt mask has its bit)."""
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        status = Path(f"/proc/{proc.pid}/status").read_text()
        caught = int(re.search(r"^SigCgt:\s*([0-9a-f]+)", status, re.M).group(1), 16)
        if caught >> (sig - 1) & 1:
            return
        time.sleep(0.005)
    raise AssertionError(f"the process never caught signal {sig} (exit {proc.poll()})")


def sigterm_once_handled(args):
    """Starts a trainer, sends it SIGTERM once its stop handler is in place (so the signal cannot
    miss it), and returns its stdout after checking that it exited 143."""
    proc = start_trainer(args)
    wait_for_handler(proc, signal.SIGTERM)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, f"exit {proc.returncode}\n{stdout[-2000:]}\n{stderr[-2000:]}"
    return stdout


@pytest.mark.parametrize("kind", ["val", "mc"])
def test_a_signal_cuts_an_evaluation_only_run_short(tmp_path, data, kind):
    """--max-steps 0 evaluates a checkpoint: a stop signal during that evaluation ends the run with
    143, logging no partial result, and drawing no sample and saving no checkpoint after it."""
    model = tmp_path / "model"
    run(TINY_GPT2 + ["--train-data", data / "train_*.bin", "--max-steps", "1", "--out-dir", model], expect=0)
    out = tmp_path / "eval"
    args = TINY_GPT2 + ["--init-from", model / "ckpt_00000001.bin", "--max-steps", "0", "--out-dir", out, "--sample-every", "1"] + long_eval_flags(tmp_path, data, kind)
    stdout = sigterm_once_handled(args)
    assert "the evaluation at step 0 was cut short by SIGTERM: not logged" in stdout and "stopped by SIGTERM: nothing sampled or saved" in stdout, stdout[-2000:]
    assert "---- sample" not in stdout and not list(out.glob("ckpt_*"))
    assert read_log(out)[1:] == [{"event": "stopped", "step": 0, "signal": "SIGTERM"}]


def read_until_line(proc, wanted):
    """Reads a running trainer's stdout up to and including the line `wanted` (it goes on)."""
    line = ""
    while line != wanted + "\n":
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the run ended (exit {proc.returncode}) before printing {wanted!r}\n{out[-2000:]}\n{err[-2000:]}")


# tokens: a sample of seconds at TINY_GPT2 (one of minutes at a real model's size is common), so
# that a signal sent once its header is read lands in it even on a loaded machine (5000 tokens,
# under a second, did not: at a load of 7 on 2 cores the sample ended first)
LONG_SAMPLE = 20_000


def start_trainer_on_a_small_pipe(args):
    """Starts a trainer (one OpenMP thread) whose stdout is a pipe of one page (4 KiB, the least
    Linux allows; 64 KiB by default), read with read_through and read_to_end: once its reader
    stops, the trainer blocks in a write within a page of output. Returns (Popen, the pipe's read
    end, a file of its stderr)."""
    r, w = os.pipe()
    fcntl.fcntl(r, fcntl.F_SETPIPE_SZ, 4096)
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen([str(TRAINER)] + [str(a) for a in args], stdout=w, stderr=err, env={**os.environ, "OMP_NUM_THREADS": "1"})
    os.close(w)
    return proc, r, err


def read_through(fd, wanted, proc):
    """The bytes of fd up to and including `wanted`, read a byte at a time: nothing after it is taken
    from the pipe (a buffered reader would take what follows, and block nothing)."""
    got = b""
    while not got.endswith(wanted):
        b = os.read(fd, 1)
        if not b:
            raise AssertionError(f"the output ended (exit {proc.wait()}) before {wanted!r}\n{got[-2000:]!r}")
        got += b
    return got


def read_to_end(fd):
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


@pytest.mark.parametrize("when", ["step", "sample"])
def test_a_signal_cuts_a_long_sample_short_and_later_samples_are_an_unstopped_runs(tmp_path, data, when):
    """A stop signal that comes during a sample cuts it short: the tokens drawn so far are printed
    and said to be cut, the step's checkpoint is saved and the run exits 143 (before, the sample ran
    whole first). One that comes during the step skips the sample due after it. Either way the
    sample RNG skips the draws of the tokens not drawn, so the run resumed from there draws the
    samples of a run that never stopped. "step": steps of 500 micro-batches, and the signal sent once
    step 1 is logged, so that it lands in step 2, whose sample (short: its length does not matter
    there) is due. "sample": the trainer prints each token as it draws it, into a pipe of 4 KiB that
    the test stops reading at the sample's header, so the trainer blocks within its first 2,048
    tokens (2 bytes or more each: "7 ") of the 5,000 and the signal lands in the sample however slow
    the machine (until 2026-11-30 the sample was printed whole at its end, the signal raced it, and
    this case ran only by hand, VP_TIMING_TESTS=1)."""
    n = 5000 if when == "sample" else 50
    common = TINY_GPT2 + ["--train-data", data / "train_*.bin", "--lr-schedule", "constant", "--sample-every", "2", "--sample-tokens", n]
    if when == "step":
        common += ["--batch-size", "4", "--total-batch-tokens", str(4 * 8 * 500)]
    stopped = tmp_path / "stopped"
    args = common + ["--max-steps", "1000000", "--out-dir", stopped]
    if when == "sample":
        proc, pipe, errf = start_trainer_on_a_small_pipe(args)
        deadline = threading.Timer(120, proc.kill)  # a trainer that never stops would keep the reads below going
        deadline.start()
        try:
            read_through(pipe, b"---- sample at step 2 ----\n", proc)
            first = read_through(pipe, b" ", proc)  # the first token and the space before the second: two drawn
            proc.send_signal(signal.SIGTERM)
            out = (first + read_to_end(pipe)).decode()
            proc.wait(timeout=120)
        finally:
            deadline.cancel()
        errf.seek(0)
        err = errf.read().decode()
    else:
        proc = start_and_wait_for_step(args, stopped, 1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, f"exit {proc.returncode}\n{out[-2000:]}\n{err[-2000:]}"
    assert f"stopped by SIGTERM after step 2 of 1000000: saved {stopped / 'ckpt_00000002.bin'}" in out, out[-2000:]
    straight = run(common + ["--max-steps", "4", "--out-dir", tmp_path / "straight"], expect=0)
    samples = lambda text: dict(re.findall(r"---- sample at step (\d+) ----\n(.*)", text))
    whole = samples(straight.stdout)
    assert sorted(whole) == ["2", "4"] and all(len(t.split()) == n for t in whole.values())
    if when == "sample":
        # (the header was read before the signal: the rest of the console starts with the tokens)
        m = re.match(rf"(.*)\n*\(cut short by SIGTERM after (\d+) of {n} tokens\)\n---", out)
        assert m, out[-2000:]
        drawn = m.group(1).split()
        assert 2 <= len(drawn) == int(m.group(2)) < n and drawn == whole["2"].split()[:len(drawn)]
    else:
        assert "the sample at step 2 is skipped: stopping (SIGTERM)" in out and "---- sample" not in out, out[-2000:]
    resumed = run(common + ["--max-steps", "4", "--out-dir", stopped, "--resume", "1"], expect=0)
    assert "(step 2)" in resumed.stdout and samples(resumed.stdout) == {"4": whole["4"]}


def test_a_signal_cuts_a_sample_only_run_short(tmp_path, data):
    """--max-steps 0 with --sample-every: the sample is the job. A stop signal during it prints
    the tokens drawn, says it was cut, saves nothing and exits 143. The signal is sent once the
    handler is in place (there is no evaluation here), so it lands before the sample ends however
    slow the machine: before its first token, the cut leaves none."""
    out = tmp_path / "run"
    args = TINY_GPT2 + ["--max-steps", "0", "--out-dir", out, "--sample-every", "1", "--sample-tokens", LONG_SAMPLE]
    stdout = sigterm_once_handled(args)
    assert re.search(rf"\(cut short by SIGTERM after \d+ of {LONG_SAMPLE} tokens\)", stdout), stdout[-2000:]
    assert "stopped by SIGTERM: the sample is cut short, nothing saved" in stdout and not list(out.glob("ckpt_*"))
    assert read_log(out)[1:] == [{"event": "stopped", "step": 0, "signal": "SIGTERM"}]


def test_keep_checkpoints_prunes_all_but_the_newest_and_the_kept_multiples(tmp_path, data):
    """--keep-checkpoints N leaves the newest N; --keep-checkpoints-every M also every multiple of
    M, for good. A run resumed from such a directory continues from its newest and prunes the same
    way; nothing else in the directory is touched."""
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--checkpoint-every", "1", "--keep-checkpoints", "2"]
    names = lambda d: sorted(p.name for p in Path(d).glob("ckpt_*.bin"))
    run(base + ["--max-steps", "12", "--out-dir", tmp_path / "newest"], expect=0)
    assert names(tmp_path / "newest") == ["ckpt_00000011.bin", "ckpt_00000012.bin"]
    out = tmp_path / "kept"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    run(base + ["--max-steps", "12", "--keep-checkpoints-every", "5", "--out-dir", out], expect=0)
    assert names(out) == ["ckpt_00000005.bin", "ckpt_00000010.bin", "ckpt_00000011.bin", "ckpt_00000012.bin"]
    p = run(base + ["--max-steps", "16", "--keep-checkpoints-every", "5", "--out-dir", out, "--resume", "1"], expect=0)
    assert "(step 12)" in p.stdout
    assert names(out) == ["ckpt_00000005.bin", "ckpt_00000010.bin", "ckpt_00000015.bin", "ckpt_00000016.bin"]
    assert (out / "notes.txt").read_text() == "mine"


def test_a_diverged_run_keeps_good_checkpoints_to_resume_from(tmp_path, data):
    """At lr 30 the loss grows until a step's (or its gradient norm) is NaN. The weights that give it are those of the
    checkpoint written just before: resumed, it would give the same NaN at once. So that checkpoint
    is moved aside (not deleted), and --keep-checkpoints 1 has kept the one before it (a checkpoint
    counts among the kept only once the next step's loss is finite), from which --resume 1
    continues: to the step moved aside, it writes the same weights and moments again."""
    # a constant lr: the same at each step whatever --max-steps, which the resumed run changes
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--checkpoint-every", "1", "--keep-checkpoints", "1",
                        "--lr-schedule", "constant", "--out-dir", tmp_path / "run", "--max-steps", "40"]
    p = run(base + ["--lr", "30"], expect=1)
    m = re.search(r"error: step (\d+): the loss \(.*\) or gradient norm \(.*\) is not finite", p.stderr)
    assert m, p.stderr
    bad = int(m.group(1)) - 1  # the step whose checkpoint holds the weights that gave it
    assert bad >= 2
    names = sorted(f.name for f in (tmp_path / "run").glob("ckpt_*"))
    assert names == [f"ckpt_{bad - 1:08d}.bin", f"ckpt_{bad:08d}.bin.diverged"]
    assert f"--resume 1 continues from the newest checkpoint (step {bad - 1})" in p.stderr
    p = run(base[:-2] + ["--max-steps", bad, "--lr", "30", "--resume", "1"], expect=0)
    assert f"(step {bad - 1})" in p.stdout
    assert sorted(f.name for f in (tmp_path / "run").glob("ckpt_*")) == [f"ckpt_{bad:08d}.bin", f"ckpt_{bad:08d}.bin.diverged"]
    assert checkpoint_tensors(tmp_path / "run" / f"ckpt_{bad:08d}.bin") == checkpoint_tensors(tmp_path / "run" / f"ckpt_{bad:08d}.bin.diverged")


def test_a_checkpoint_confirmed_by_the_next_step_leaves_the_keep_count(tmp_path, data):
    """--keep-checkpoints N keeps N + 1 only while the newest checkpoint is unconfirmed: once the
    step after it has a finite loss, the one before it goes (host/train_loop.h prune_checkpoints).
    A run that saves every 2 steps and diverges at an even step s >= 6 (the weights after step
    s - 1 give a NaN) shows it: checkpoint s - 2 was confirmed by step s - 1's finite loss, so with
    N = 1 it alone is left, and s - 4 is gone, not kept as a spare until a next save that never
    comes. Which step a huge lr diverges at depends on the machine's rounding, so the lr is
    stepped until the run diverges at such a step."""
    for lr in ["25", "20", "30", "15", "40", "12", "50", "35"]:
        out = tmp_path / f"run_lr{lr}"
        p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--checkpoint-every", "2", "--keep-checkpoints", "1",
                             "--lr-schedule", "constant", "--lr", lr, "--max-steps", "60", "--out-dir", out], expect=1)
        m = re.search(r"error: step (\d+): the loss \(.*\) or gradient norm \(.*\) is not finite", p.stderr)
        assert m, p.stderr
        s = int(m.group(1))
        if s % 2 == 0 and s >= 6:
            break
    else:
        pytest.fail("no lr tried made the run diverge at an even step >= 6")
    assert sorted(f.name for f in out.glob("ckpt_*")) == [f"ckpt_{s - 2:08d}.bin"], (lr, s)


def test_nan_weights_are_never_evaluated_sampled_or_saved(tmp_path, data):
    """An update to NaN or inf weights at the last step (no next step's loss to see it) stops the run
    before its evaluation, its sample and its checkpoint use them; a checkpoint of such weights
    (other software may write one) is refused, and so is one whose weights are finite but give a
    non-finite loss: at the val loss, the multiple-choice scores and the sample alike."""
    common = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "1"]
    for i, extra in enumerate([["--val-data", str(data / "val_*.bin")], ["--sample-every", "1"], []]):
        out = tmp_path / f"out{i}"
        # lr and decay near the largest float: the weights overflow to inf and NaN in one update
        p = run(common + extra + ["--lr", "3e38", "--weight-decay", "3e38", "--out-dir", out], expect=1)
        assert "the weights after step 1 are NaN or inf" in p.stderr, p.stderr
        assert "---- sample" not in p.stdout and "val_loss" not in p.stdout
        assert not list(out.glob("ckpt_*")), "a checkpoint of NaN weights was written"
        assert all(json.loads(line) for line in (out / "log.jsonl").read_text().splitlines())

    sys.path.insert(0, str(REPO / "scripts"))
    from vp_data.checkpoint import read_checkpoint, write_checkpoint
    run(common + ["--out-dir", tmp_path / "good"], expect=0)
    cfg, params, _ = read_checkpoint(tmp_path / "good" / "ckpt_00000001.bin")
    nan_ckpt, huge_ckpt = tmp_path / "nan.bin", tmp_path / "huge.bin"
    write_checkpoint(nan_ckpt, cfg, np.where(np.arange(params.size) == 100, np.nan, params))
    write_checkpoint(huge_ckpt, cfg, np.full_like(params, 3e38))  # finite, but every forward overflows
    init = ["--max-steps", "0", "--seq-len", "8"]
    p = run(init + ["--init-from", nan_ckpt, "--val-data", str(data / "val_*.bin")], expect=1)
    assert f"the weights of checkpoint '{nan_ckpt}' are NaN or inf" in p.stderr
    p = run(init + ["--init-from", huge_ckpt, "--val-data", str(data / "val_*.bin")], expect=1)
    assert "the val loss is nan: the weights give a non-finite loss" in p.stderr.replace("-nan", "nan"), p.stderr
    mc = tmp_path / "mc.vpmc"
    write_mc(mc, successor_mc_examples(8))
    p = run(init + ["--init-from", huge_ckpt, "--eval-mc", mc], expect=1)
    assert "an ending's log-likelihood is" in p.stderr and "the weights give a non-finite loss" in p.stderr, p.stderr
    p = run(init + ["--init-from", huge_ckpt, "--sample-every", "1"], expect=1)
    # the header comes before the tokens are drawn: nothing may follow it
    assert "a sample's logit for token" in p.stderr and p.stdout.rstrip().endswith("---- sample at step 0 ----"), p.stderr
    # resumed (a training checkpoint, with AdamW's moments: one weight made NaN, its CRC made
    # right again), the message says what to do with it
    raw = bytearray((tmp_path / "good" / "ckpt_00000001.bin").read_bytes())
    hb, tb = checkpoint_regions(raw)
    struct.pack_into("<f", raw, hb + tb + 4 * 100, float("nan"))
    (tmp_path / "good" / "ckpt_00000001.bin").write_bytes(with_crcs_recomputed(raw))
    p = run(common[:-2] + ["--max-steps", "3", "--out-dir", tmp_path / "good", "--resume", "1"], expect=1)
    assert "are NaN or inf" in p.stderr and "move it aside (then --resume 1 takes the one before it)" in p.stderr


def test_shape_flags_against_a_checkpoint_take_0_as_the_default(tmp_path, data):
    """0 asks for the derived --kv-heads, --ffn-dim and --head-dim: a checkpoint of those shapes is
    taken, one of others refused; llama-family flags are refused against a gpt2 checkpoint, as they
    are for a new gpt2 model."""
    run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "1", "--out-dir", tmp_path / "g"], expect=0)
    run(TINY_LLAMA + ["--train-data", str(data / "train_*.bin"), "--max-steps", "1", "--out-dir", tmp_path / "l"], expect=0)
    init = ["--max-steps", "0", "--seq-len", "8", "--val-data", str(data / "val_*.bin")]
    g, l = tmp_path / "g" / "ckpt_00000001.bin", tmp_path / "l" / "ckpt_00000001.bin"
    for flag in ["--kv-heads", "--ffn-dim", "--head-dim"]:
        run(init + ["--init-from", g, flag, "0"], expect=0)
    run(init + ["--init-from", l, "--ffn-dim", "0"], expect=1)  # TINY_LLAMA's 24 is not 16's default (64)
    p = run(init + ["--init-from", l, "--kv-heads", "0"], expect=1)
    assert "--kv-heads 0 (the default, 4 here) does not match" in p.stderr and "which has 2" in p.stderr
    for flag, value in [("--rope-theta", "10000"), ("--tie-embeddings", "0"), ("--qk-norm", "0")]:
        p = run(init + ["--init-from", g, flag, value], expect=1)
        assert f"{flag} is a llama-family option, and {g} is a gpt2 model" in p.stderr


def test_a_tokenizer_larger_than_the_vocabulary_is_refused(tmp_path, data):
    """GPT-2's tokenizer (50,257 tokens) cannot be a 64-token model's: its samples would be another
    tokenizer's text. A guard that can judge no step in the run says so."""
    enc = SHARED / "tokenizers" / "gpt2" / "encoder.json"
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "1", "--sample-every", "1",
                         "--tokenizer", enc], expect=2)
    assert "has 50257 tokens, more than the model's vocabulary of 64" in p.stderr
    # fewer tokens than the vocabulary: padding (llm.c's 50304) is fine, thousands fewer is another
    # tokenizer (Llama-2's 32000 for a GPT-2 model); the margin is 1024
    with_vocab = lambda v: [str(v) if a == "64" and TINY_GPT2[i - 1] == "--vocab" else a for i, a in enumerate(TINY_GPT2)]
    for vocab, expect in [(50304, 0), (50257 + 1024, 0), (50257 + 1025, 2)]:
        p = run(with_vocab(vocab) + ["--train-data", str(data / "train_*.bin"), "--max-steps", "0", "--sample-every", "1",
                                     "--sample-tokens", "2", "--tokenizer", enc], expect=expect)
    assert f"has 50257 tokens, over 1024 fewer than (more than padding) the model's vocabulary of {50257 + 1025}" in p.stderr
    assert "or none (samples are then printed as token ids)" in p.stderr
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "5", "--skip-loss-z", "3", "--skip-window", "5"], expect=0)
    assert "judge no step of this run" in p.stdout
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "6", "--skip-loss-z", "3", "--skip-window", "5"], expect=0)
    assert "judge no step" not in p.stdout


def test_new_run_refuses_a_directory_with_checkpoints(tmp_path, data):
    out = tmp_path / "run"
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "2", "--out-dir", str(out)]
    run(base, expect=0)
    before = dir_digest(out)
    p = run(base, expect=2)
    assert "--resume 1" in p.stderr
    assert dir_digest(out) == before


def test_bad_checkpoints_are_refused_and_nothing_is_overwritten(tmp_path, data):
    out = tmp_path / "run"
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--out-dir", str(out)]
    run(base + ["--max-steps", "4", "--checkpoint-every", "2"], expect=0)
    ckpt = out / "ckpt_00000004.bin"

    # another shape through --init-from
    other_shape = [a if a != "2" or TINY_GPT2[i - 1] != "--layers" else "3" for i, a in enumerate(TINY_GPT2)]
    p = run(other_shape + ["--init-from", ckpt, "--train-data", str(data / "train_*.bin"),
                         "--max-steps", "1"], expect=1)
    assert "--layers 3" in p.stderr and "ckpt_00000004.bin" in p.stderr
    # not a checkpoint at all
    p = run(TINY_GPT2 + ["--init-from", data / "val_000.bin", "--train-data", str(data / "train_*.bin"),
                         "--max-steps", "1"], expect=1)
    assert "not a valuepath checkpoint" in p.stderr
    # cut short inside the 552-byte header, right after its magic and version (8 bytes: the header
    # size reads as 0), a little later (10) or later still (300): truncated, not "another version"
    # or "corrupt"
    for cut in (8, 10, 300):
        short = tmp_path / f"short{cut}.bin"
        short.write_bytes(ckpt.read_bytes()[:cut])
        p = run(TINY_GPT2 + ["--init-from", short, "--train-data", str(data / "train_*.bin"), "--max-steps", "1"], expect=1)
        assert f"'{short}' is cut short inside its header ({cut} of 552 bytes)" in p.stderr, p.stderr
    # resume with more steps from a truncated newest checkpoint: refused, every file left as it was
    raw = ckpt.read_bytes()
    ckpt.write_bytes(raw[: len(raw) - 100])
    before = dir_digest(out)
    p = run(base + ["--max-steps", "8", "--resume", "1"], expect=1)
    assert "ckpt_00000004.bin" in p.stderr and "truncated" in p.stderr
    assert dir_digest(out) == before
    # resume from an empty directory
    empty = tmp_path / "empty"
    empty.mkdir()
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--out-dir", empty, "--resume", "1",
                         "--max-steps", "2"], expect=1)
    assert "no checkpoint" in p.stderr


def test_half_written_checkpoint_is_ignored(tmp_path, data):
    """A kill during a write leaves only a .tmp file, which resume never picks."""
    out = tmp_path / "run"
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--out-dir", str(out), "--checkpoint-every", "2"]
    run(base + ["--max-steps", "2"], expect=0)
    (out / ".ckpt_00000004.bin.tmp").write_bytes(b"\0" * 1000)
    p = run(base + ["--max-steps", "4", "--resume", "1"], expect=0)
    assert "(step 2)" in p.stdout


CRC_OFFSET = 296  # host/checkpoint.h: header_crc, data_crc (uint32) follow DataLoaderState


def checkpoint_regions(raw):
    """(header_bytes, run_text_bytes) of a checkpoint's bytes."""
    return struct.unpack_from("<i", raw, 8)[0], struct.unpack_from("<q", raw, 32)[0]


def with_crcs_recomputed(raw):
    """A checkpoint's bytes with both CRC-32s made right again (zlib's, as the trainers write them,
    test_checkpoint_crcs_are_zlibs): a file that is valid but for what a test put into it."""
    import zlib
    hb, tb = checkpoint_regions(raw)
    out = bytearray(raw)
    struct.pack_into("<II", out, CRC_OFFSET, 0, 0)
    header_crc = zlib.crc32(out[hb:hb + tb], zlib.crc32(bytes(out[:hb])))
    struct.pack_into("<II", out, CRC_OFFSET, header_crc, zlib.crc32(out[hb + tb:]))
    return bytes(out)


def test_checkpoint_crcs_are_zlibs(tmp_path, data):
    """The two CRC-32s in a checkpoint's header equal Python's zlib.crc32 (an independent
    implementation) of the header with both fields zero plus the run text, and of the tensors."""
    import zlib
    out = tmp_path / "run"
    run(TINY_LLAMA + ["--train-data", str(data / "train_*.bin"), "--out-dir", out, "--max-steps", "2"], expect=0)
    raw = (out / "ckpt_00000002.bin").read_bytes()
    hb, tb = checkpoint_regions(raw)
    version = struct.unpack_from("<i", raw, 4)[0]
    header_crc, data_crc = struct.unpack_from("<II", raw, CRC_OFFSET)
    zeroed = bytearray(raw[:hb])
    zeroed[CRC_OFFSET:CRC_OFFSET + 8] = bytes(8)
    assert version == 2
    assert header_crc == zlib.crc32(raw[hb:hb + tb], zlib.crc32(bytes(zeroed)))
    assert data_crc == zlib.crc32(raw[hb + tb:])


def test_invalid_optimizer_state_is_refused_on_resume_and_the_weights_still_init(tmp_path, data):
    """A checkpoint whose CRCs match but whose AdamW moments are not valid (m NaN, v negative: other
    software, or moments that overflowed) is refused by --resume with what is wrong and where,
    before anything is written; --init-from, which starts the optimizer afresh, still takes it."""
    out = tmp_path / "run"
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--out-dir", str(out)]
    run(base + ["--max-steps", "2"], expect=0)
    ckpt = out / "ckpt_00000002.bin"
    raw = bytearray(ckpt.read_bytes())
    hb, tb = checkpoint_regions(raw)
    start = hb + tb
    n = (len(raw) - start) // 12  # params, m, v: n floats each
    assert n * 12 == len(raw) - start
    struct.pack_into("<f", raw, start + 4 * (n + 7), float("nan"))     # m[7]
    struct.pack_into("<f", raw, start + 4 * (2 * n + 3), -1.0)         # v[3]
    struct.pack_into("<f", raw, start + 4 * (2 * n + 9), float("inf"))  # v[9]
    ckpt.write_bytes(with_crcs_recomputed(raw))  # a valid file otherwise
    before = dir_digest(out)
    p = run(base + ["--max-steps", "4", "--resume", "1"], expect=1)
    assert "ckpt_00000002.bin" in p.stderr and "optimizer state is not valid" in p.stderr, p.stderr
    assert "1 value of m (AdamW's first moment) NaN or inf, the first at element 7" in p.stderr, p.stderr
    assert "2 values of v (AdamW's second moment) NaN, inf or negative, the first at element 3" in p.stderr, p.stderr
    assert "--init-from" in p.stderr
    assert dir_digest(out) == before
    # read in pieces of 4 floats, the place is still counted from the tensor's start (m[7] is in its second piece)
    p = run(base + ["--max-steps", "4", "--resume", "1"], expect=1, env={"VP_CHECKPOINT_CHUNK": "4"})
    assert "1 value of m (AdamW's first moment) NaN or inf, the first at element 7" in p.stderr, p.stderr
    assert "2 values of v (AdamW's second moment) NaN, inf or negative, the first at element 3" in p.stderr, p.stderr
    assert dir_digest(out) == before
    run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--init-from", ckpt, "--max-steps", "1"], expect=0)


def test_weights_only_checkpoint_past_step_0_is_refused_on_resume(tmp_path, data):
    """A checkpoint of the weights alone (has_optimizer 0, CRCs valid: other software writes such
    files) at step 2 is refused by --resume, naming it and --init-from, before anything is written:
    resumed, AdamW's moments would restart from zero at step 3 and the run would silently not be
    the one that wrote it. (Step 0 is the exception: test_a_step_0_checkpoint_resumes_as_a_fresh_run.)
    --init-from, which starts the optimizer afresh anyway, takes it."""
    out = tmp_path / "run"
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--out-dir", str(out)]
    run(base + ["--max-steps", "2"], expect=0)
    ckpt = out / "ckpt_00000002.bin"
    raw = ckpt.read_bytes()
    hb, tb = checkpoint_regions(raw)
    n = (len(raw) - hb - tb) // 12
    weights_only = bytearray(raw[:hb + tb + 4 * n])  # params; m and v dropped
    struct.pack_into("<i", weights_only, 12, 0)  # has_optimizer
    ckpt.write_bytes(with_crcs_recomputed(weights_only))
    before = dir_digest(out)
    p = run(base + ["--max-steps", "4", "--resume", "1"], expect=1)
    assert f"checkpoint '{ckpt}' has no optimizer state" in p.stderr and "--init-from" in p.stderr, p.stderr
    assert dir_digest(out) == before
    run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--init-from", ckpt, "--max-steps", "1"], expect=0)


def limited_file_size(limit):
    """A preexec_fn: files the child writes may not grow past `limit` bytes (a disk that fills up).
    SIGXFSZ is ignored, so the write fails with EFBIG instead of killing the process."""
    import resource
    import signal

    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_failed_checkpoint_write_is_clear_and_loses_nothing(tmp_path, data):
    """The disk fills up while a checkpoint streams to it: exit 1 with the file, the reason and what
    to do; the temporary file is gone and the earlier checkpoint is untouched and still resumes."""
    out = tmp_path / "run"
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--out-dir", str(out), "--checkpoint-every", "2"]
    run(base + ["--max-steps", "2"], expect=0)
    size = (out / "ckpt_00000002.bin").stat().st_size
    before = (out / "ckpt_00000002.bin").read_bytes()
    # pieces of 100 floats: the failure comes after some pieces went through, mid-stream
    p = subprocess.run([str(TRAINER)] + [str(a) for a in base + ["--max-steps", "4", "--resume", "1"]], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "OMP_NUM_THREADS": "2", "VP_CHECKPOINT_CHUNK": "100"},
                       preexec_fn=limited_file_size(size - 1000))
    assert p.returncode == 1, p.stderr
    assert "writing checkpoint" in p.stderr and "ckpt_00000004.bin" in p.stderr and "File too large" in p.stderr, p.stderr
    assert "free disk space" in p.stderr and "earlier checkpoints are intact" in p.stderr
    assert sorted(f.name for f in out.iterdir() if "ckpt" in f.name) == ["ckpt_00000002.bin"]
    assert (out / "ckpt_00000002.bin").read_bytes() == before
    p = run(base + ["--max-steps", "4", "--resume", "1"], expect=0)
    assert "(step 2)" in p.stdout and (out / "ckpt_00000004.bin").exists()


def test_damaged_checkpoint_is_refused_and_nothing_is_overwritten(tmp_path, data):
    """One flipped bit anywhere in a checkpoint of the right length (a header field, the run text,
    the weights, m, v): --resume and --init-from both refuse it with exit 1 and say it is corrupt,
    and the run directory is left as it was. Restored, the same file resumes."""
    out = tmp_path / "run"
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--out-dir", str(out)]
    run(base + ["--max-steps", "2"], expect=0)
    ckpt = out / "ckpt_00000002.bin"
    good = ckpt.read_bytes()
    hb, tb = checkpoint_regions(good)
    n = (len(good) - hb - tb) // 12
    places = {"num_params": 24, "model config": 60, "data loader state": 200, "run text": hb + tb // 2,
              "weights": hb + tb + 4 * (n // 2) + 1, "m": hb + tb + 4 * n + 4 * (n // 3) + 2, "v": len(good) - 1}
    for where, offset in places.items():
        bad = bytearray(good)
        bad[offset] ^= 0x04
        ckpt.write_bytes(bytes(bad))
        before = dir_digest(out)
        p = run(base + ["--max-steps", "4", "--resume", "1"], expect=1)
        assert "is corrupt: the CRC-32" in p.stderr and "ckpt_00000002.bin" in p.stderr, (where, p.stderr)
        assert dir_digest(out) == before, where
        p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--init-from", ckpt, "--max-steps", "1"], expect=1)
        assert "is corrupt: the CRC-32" in p.stderr, (where, p.stderr)
    ckpt.write_bytes(good)
    run(base + ["--max-steps", "4", "--resume", "1"], expect=0)


def test_checkpoint_of_version_1_is_still_read(tmp_path, data):
    """Files written before the CRCs (version 1: the two fields were reserved zeros) resume, and
    give the same training as the version-2 file they were made from."""
    out = tmp_path / "run"
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--out-dir", str(out)]
    run(base + ["--max-steps", "2"], expect=0)
    ckpt = out / "ckpt_00000002.bin"
    v1 = bytearray(ckpt.read_bytes())
    struct.pack_into("<i", v1, 4, 1)
    struct.pack_into("<II", v1, CRC_OFFSET, 0, 0)
    ref = run(base + ["--max-steps", "4", "--resume", "1"], expect=0)
    for f in out.glob("ckpt_0000000[34].bin"):
        f.unlink()
    ckpt.write_bytes(bytes(v1))
    p = run(base + ["--max-steps", "4", "--resume", "1"], expect=0)
    losses = lambda text: re.findall(r"step +\d+/\d+ \| loss (\S+)", text)
    assert losses(p.stdout) == losses(ref.stdout) and len(losses(p.stdout)) == 2


def test_init_from_starts_a_new_run(tmp_path, data):
    out = tmp_path / "run"
    run(TINY_LLAMA + ["--train-data", str(data / "train_*.bin"), "--out-dir", out, "--max-steps", "20", "--lr", "1e-2"],
        expect=0)
    trained_loss = read_log(out)[-1]["train_loss"]
    out2 = tmp_path / "run2"
    p = run(TINY_LLAMA + ["--train-data", str(data / "train_*.bin"), "--out-dir", out2, "--max-steps", "1",
                          "--init-from", out / "ckpt_00000020.bin"], expect=0)
    assert "initialised from" in p.stdout
    first = [r for r in read_log(out2) if "train_loss" in r][0]
    assert first["step"] == 1 and first["train_loss"] < np.log(64) - 0.5 and abs(first["train_loss"] - trained_loss) < 0.5


def trains_resumes_and_keeps_its_shape(tmp_path, data, model, flag, other_value, value):
    """A model of these shape flags trains 6 steps with falling loss into tmp_path/straight, its
    checkpoint holds the logged parameter count, a run killed after step 3 resumes bit for bit,
    and the checkpoint fixes the shape: --init-from takes it without the flags, and refuses
    `flag other_value` (the checkpoint has `value`). Returns the run's config line."""
    common = model + ["--train-data", str(data / "train_*.bin"), "--max-steps", "6", "--lr", "3e-3", "--checkpoint-every", "3"]
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    run(common + ["--out-dir", straight], expect=0)
    cfg = read_log(straight)[0]
    assert len(checkpoint_params(straight / "ckpt_00000006.bin")) == cfg["num_params"]
    losses = [r["train_loss"] for r in read_log(straight) if "train_loss" in r]
    assert len(losses) == 6 and losses[-1] < losses[0]
    run(common + ["--out-dir", broken], expect=0)
    (broken / "ckpt_00000006.bin").unlink()
    run(common + ["--out-dir", broken, "--resume", "1"], expect=0)
    assert checkpoint_tensors(straight / "ckpt_00000006.bin") == checkpoint_tensors(broken / "ckpt_00000006.bin")
    init = ["--init-from", straight / "ckpt_00000006.bin", "--max-steps", "0", "--seq-len", "8"]
    p = run(init + [flag, str(other_value)], expect=1)
    assert f"{flag} {other_value} does not match" in p.stderr and f"which has {value}" in p.stderr
    p = run(init + ["--val-data", str(data / "val_*.bin")], expect=0)
    assert "initialised from" in p.stdout
    return cfg


def test_tied_llama_trains_resumes_and_keeps_its_shape(tmp_path, data):
    """--tie-embeddings 1: a llama without lm_head (V_p x C fewer parameters, logged in the config
    line) trains, resumes bit for bit, and its checkpoint fixes the setting."""
    cfg = trains_resumes_and_keeps_its_shape(tmp_path, data, TINY_LLAMA + ["--tie-embeddings", "1"], "--tie-embeddings", 0, 1)
    run(TINY_LLAMA + ["--train-data", str(data / "train_*.bin"), "--max-steps", "1", "--out-dir", tmp_path / "untied"], expect=0)
    untied_cfg = read_log(tmp_path / "untied")[0]
    assert cfg["tie_embeddings"] == 1 and untied_cfg["tie_embeddings"] == 0
    assert cfg["num_params"] == untied_cfg["num_params"] - 128 * 16  # no (V_p, C) lm_head


def test_wide_head_llama_trains_resumes_and_keeps_its_shape(tmp_path, data):
    """--head-dim (Qwen3's heads, wider than --dim / --heads): the config line logs it, the
    parameter count is the formula's with H*D-wide attention, the run resumes bit for bit, the
    checkpoint fixes D (a conflicting --head-dim is refused), and gpt2 refuses the flag."""
    wide = ["--arch", "llama", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--qk-norm", "1", "--dim", "12",
            "--ffn-dim", "24", "--vocab", "64", "--max-seq", "16", "--seq-len", "8",
            "--head-dim", "6"]  # C = 12, H = 4, D = 6: H*D = 24 = 2C, where C / H = 3 would be odd
    cfg = trains_resumes_and_keeps_its_shape(tmp_path, data, wide, "--head-dim", 4, 6)
    assert (cfg["dim"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"]) == (12, 4, 2, 6)
    L, C, H, Hkv, D, F, Vp = 2, 12, 4, 2, 6, 24, 128
    per_layer = 2 * C + (H + 2 * Hkv) * D * C + C * H * D + 3 * C * F + 2 * D  # norms, q|k|v, attproj, SwiGLU, QK-norm
    assert cfg["num_params"] == 2 * Vp * C + C + L * per_layer
    p = run(wide[:-2] + ["--train-data", str(data / "train_*.bin")], expect=2)  # C / H = 3: odd under RoPE
    assert "RoPE needs an even head dim; --dim/--heads = 3" in p.stderr
    p = run(["--arch", "gpt2", "--layers", "1", "--heads", "2", "--dim", "16", "--head-dim", "16", "--train-data",
             str(data / "train_*.bin")], expect=2)
    assert "--head-dim 16 is a llama-family option" in p.stderr and "use --arch llama" in p.stderr


def test_trainer_reads_prepared_tinyshakespeare(tmp_path):
    """The data pipeline's real output feeds the trainer: shards, val split and vptok decoding."""
    out = tmp_path / "shakes"
    prep = subprocess.run([sys.executable, str(REPO / "scripts" / "prepare_tinyshakespeare.py"), "--out-dir", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert prep.returncode == 0, prep.stderr
    p = run(["--arch", "gpt2", "--layers", "1", "--heads", "2", "--dim", "16", "--max-seq", "32", "--seq-len", "32",
             "--batch-size", "2", "--train-data", str(out / "tinyshakespeare_train_*.bin"),
             "--val-data", f"shakes={out}/tinyshakespeare_val_*.bin", "--eval-every", "2", "--max-steps", "2",
             "--sample-every", "2", "--sample-tokens", "16", "--tokenizer", str(out / "gpt2.vptok"),
             "--out-dir", str(tmp_path / "run")], expect=0)
    assert "train data: 305260 tokens" in p.stdout  # llm.c's train split of TinyShakespeare
    vals = [r for r in read_log(tmp_path / "run") if "val_loss_shakes" in r]
    assert [r["step"] for r in vals] == [0, 2] and abs(vals[0]["val_loss_shakes"] - np.log(50257)) < 0.1
    sample = p.stdout.split("---- sample at step 2 ----\n")[1].split("\n----")[0]
    assert not re.fullmatch(r"[0-9 \n]+", sample)  # decoded text, not ids


# ---------------------------------------------------------------------------
# value paths: flags and checkpoints belong to one path

@pytest.mark.parametrize("path", PATHS)
def test_flags_of_other_paths_are_usage_errors(path):
    other_flags = {"resformer": "--resformer-lambda", "sla": "--sla-layers", "depth": "--depth-stride"}
    for owner, flag in other_flags.items():
        p = run([flag, "1"], path=path)
        if owner == path:
            assert "belongs to another value path" not in p.stderr
        else:
            assert p.returncode == 2 and f"VALUE_PATH={path}" in p.stderr, p.stderr
    help_text = run(["--help"], expect=0, path=path).stdout
    for owner, flag in other_flags.items():
        assert (flag in help_text) == (owner == path)


@pytest.mark.parametrize("path, args, needle", [
    # without these the last value wins, or an empty one means the default: silently
    ("sla", ["--sla-layers", "1", "--sla-layers", "1"], "--sla-layers is given twice"),
    ("sla", ["--sla-layers="], "--sla-layers needs a non-empty value"),
    ("resformer", ["--resformer-lambda", "sometimes"], "--resformer-lambda must be 'fixed' or 'learn', got 'sometimes'"),
    ("resformer", ["--resformer-lambda", "learn", "--resformer-lambda-lr", "-1"], "--resformer-lambda-lr expects a number >= 0"),
    ("resformer", ["--resformer-lambda", "learn", "--resformer-lambda-lr", "1e-46"], "--resformer-lambda-lr 1e-46 is below the smallest float"),
    ("resformer", ["--resformer-lambda-lr", "0.1"], "--resformer-lambda-lr only applies with --resformer-lambda learn"),
    # each names its flag; value_path_config_problem behind them only says "the SLA settings"
    ("sla", ["--sla-layers", "0"], "--sla-layers must be >= 1"),
    ("sla", ["--heads", "2", "--dim", "16", "--sla-heads", "3"], "--sla-heads 3 exceeds the 2 query heads"),
    ("sla", ["--arch", "llama", "--heads", "4", "--kv-heads", "2", "--dim", "16", "--sla-heads", "1"],
     "--sla-heads 1 must be a multiple of the GQA group size 2"),
    ("sla", ["--sla-chain", "2"], "--sla-chain must be 0 or 1"),
    ("depth", ["--depth-stride", "0"], "--depth-stride must be >= 1"),
])
def test_value_path_flags_out_of_range_are_usage_errors(path, args, needle):
    p = run(args + ["--train-data", "x"], expect=2, path=path)
    assert needle in p.stderr and "HINT" in p.stderr, p.stderr


@pytest.mark.parametrize("path,flag,key", [("sla", "--sla-layers", "sla_layers"), ("sla", "--sla-chain", "sla_chain"),
                                           ("depth", "--depth-stride", "depth_stride")])
def test_value_path_integers_are_spelled_as_every_integer_flag(tmp_path, data, path, flag, key):
    """A value path's integer flag takes what --layers takes ("1e0" is 1) and refuses what it
    refuses (hexadecimal, a leading blank, a fraction); it had a parser of its own that refused
    "1e0" and let through what strtol reads."""
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "1"]
    p = run(base + ["--out-dir", tmp_path / "exp", flag, "1e0"], expect=0, path=path)
    config = read_log(tmp_path / "exp")[0]
    assert config[key] == 1, config
    for value in ["0x1", " 1", "1.5", "1abc", "-1"]:
        p = run(base + [flag, value], expect=2, path=path)
        assert f"{flag} expects a non-negative integer, got '{value}'" in p.stderr, p.stderr
        # the same spellings as --layers: what it refuses, this refuses (but "-1", a range error there)
        if value != "-1":
            assert run(base + ["--layers", value], path=path).returncode == 2


def test_checkpoint_of_another_path_is_refused(tmp_path, data):
    out = tmp_path / "sla"
    run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "1", "--out-dir", out], expect=0,
        path="sla")
    for path in ["vanilla", "depth"]:
        p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "1", "--init-from",
                             out / "ckpt_00000001.bin"], expect=1, path=path)
        assert "VALUE_PATH=sla" in p.stderr and f"VALUE_PATH={path}" in p.stderr
    # resuming an sla run with another sla setting is refused too
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "2", "--out-dir", out, "--resume",
                         "1", "--sla-chain", "1"], expect=1, path="sla")
    assert "--sla-chain" in p.stderr


def test_max_steps_0_evaluates_and_samples_a_checkpoint(tmp_path, data):
    """--init-from CKPT --max-steps 0: the val loss of the trained weights (equal to what the
    training run measured on them at its end) and a sample, without training or an --out-dir."""
    trained = tmp_path / "trained"
    val = ["--val-data", str(data / "val_*.bin"), "--eval-batches", "3"]
    run(TINY_GPT2 + val + ["--train-data", str(data / "train_*.bin"), "--max-steps", "3", "--lr", "3e-3",
                           "--out-dir", trained], expect=0)
    final_val = [r for r in read_log(trained) if "val_loss" in r][-1]
    assert final_val["step"] == 3
    p = run(val + ["--init-from", trained / "ckpt_00000003.bin", "--seq-len", "8", "--max-steps", "0", "--sample-every", "1",
                   "--sample-tokens", "6"], expect=0)
    assert re.findall(r"^step +0 \| val \| val_loss ([0-9.]+)$", p.stdout, re.M) == [f"{final_val['val_loss']:.6f}"]
    assert len(re.findall(r"---- sample at step 0 ----\n(\d+( \d+){5})\n", p.stdout)) == 1
    # with --eval-every as well, step 0 is evaluated once, not twice
    out = tmp_path / "once"
    run(TINY_GPT2 + val + ["--max-steps", "0", "--eval-every", "2", "--out-dir", out], expect=0)
    assert [r["step"] for r in read_log(out) if "val_loss" in r] == [0]


def test_value_path_settings_in_the_config_line(tmp_path, data):
    """Defaults from value_paths.md section 10 on a 12-layer, 12-head model, and GQA counting."""
    shape = ["--layers", "12", "--heads", "12", "--dim", "24", "--vocab", "64", "--max-seq", "8", "--seq-len", "8",
             "--batch-size", "1", "--train-data", str(data / "train_*.bin"), "--max-steps", "0"]
    cfg = lambda out: read_log(out)[0]
    run(shape + ["--out-dir", tmp_path / "sla"], expect=0, path="sla")
    assert (cfg(tmp_path / "sla")["sla_layers"], cfg(tmp_path / "sla")["sla_heads"], cfg(tmp_path / "sla")["sla_chain"]) == (9, 9, 0)
    run(shape + ["--out-dir", tmp_path / "depth"], expect=0, path="depth")
    assert cfg(tmp_path / "depth")["depth_stride"] == 6
    # where the rules round (docs/value_paths.md, notes on the spec): 3L/4 and 3H/4 at a half
    # round up, 4.5 -> 5 (Python's round would give 4); L/2 rounds down, and is at least 1
    odd = lambda L, H: ["--layers", str(L), "--heads", str(H)] + shape[4:]  # noqa: E731
    run(odd(6, 6) + ["--out-dir", tmp_path / "sla6"], expect=0, path="sla")
    assert (cfg(tmp_path / "sla6")["sla_layers"], cfg(tmp_path / "sla6")["sla_heads"]) == (5, 5)
    for L, stride in [(5, 2), (3, 1), (1, 1)]:
        run(odd(L, 12) + ["--out-dir", tmp_path / f"depth{L}"], expect=0, path="depth")
        assert cfg(tmp_path / f"depth{L}")["depth_stride"] == stride, L
    run(shape + ["--out-dir", tmp_path / "res"], expect=0, path="resformer")
    assert cfg(tmp_path / "res")["resformer_lambda"] == "fixed"
    # GQA: skip heads are whole KV groups; 12 heads over 4 KV heads -> default 3 groups of 3 = 9
    run(shape + ["--arch", "llama", "--kv-heads", "4", "--out-dir", tmp_path / "sla_gqa"], expect=0, path="sla")
    assert cfg(tmp_path / "sla_gqa")["sla_heads"] == 9
    p = run(shape + ["--arch", "llama", "--kv-heads", "4", "--sla-heads", "4"], expect=2, path="sla")
    assert "multiple of the GQA group size 3" in p.stderr
    # SVFormer's logged parameter count drops by (L-1)(C*Hkv*D + Hkv*D)
    run(shape + ["--out-dir", tmp_path / "van"], expect=0)
    run(shape + ["--out-dir", tmp_path / "sv"], expect=0, path="svformer")
    assert cfg(tmp_path / "van")["num_params"] - cfg(tmp_path / "sv")["num_params"] == 11 * (24 * 24 + 24)


# ---------------------------------------------------------------------------
# bad inputs from a review of the CLI (2026-11-24): each stops with a message, and loses nothing

MODEL_CONFIG_OFFSET = 40  # host/checkpoint.h: ModelConfig follows magic, version, header_bytes, has_optimizer, step, num_params, run_text_bytes
STEP_OFFSET = 16


def test_bad_val_shard_stops_the_run_at_startup(tmp_path, data):
    """Val shards are checked whole at startup: a bad id must not end a finished run at its final
    evaluation, before its final checkpoint."""
    bad = tmp_path / "bad_val.bin"
    toks = pattern_tokens(300, seed=3)
    toks[250] = 100  # beyond --vocab 64
    write_shard(str(bad), toks, 1)
    out = tmp_path / "run"
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--val-data", bad, "--max-steps", "20", "--out-dir", out], expect=1)
    assert "token id 100 at position 250" in p.stderr and "bad_val.bin" in p.stderr
    assert "step " not in p.stdout  # no step trained


def test_reserved_shard_header_ints_must_be_zero(tmp_path, data):
    raw = bytearray((data / "val_000.bin").read_bytes())
    struct.pack_into("<i", raw, 4 * 5, 7)
    (tmp_path / "val_000.bin").write_bytes(bytes(raw))
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--val-data", tmp_path / "val_000.bin", "--max-steps", "1"], expect=1)
    assert "reserved header int 5 is 7" in p.stderr


def test_total_batch_tokens_beyond_int_accumulation_is_a_usage_error(data):
    # 8 tokens per micro-batch x 2^31 micro-batches: the accumulation count does not fit an int
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--batch-size", "1", "--max-steps", "1",
                         "--total-batch-tokens", str(8 * 2**31)], expect=2)
    assert "micro-batches" in p.stderr and "at most 2147483647" in p.stderr


def test_tokens_per_step_beyond_2_31_are_counted_in_64_bits(tmp_path, data):
    """--total-batch-tokens 2^32 (2^27 micro-batches of 4 x 8): the console line and the config line
    of the log give the tokens per step as a 64-bit count (--max-steps 0: no step is run)."""
    out = tmp_path / "run"
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--batch-size", "4", "--total-batch-tokens", str(2**32),
                         "--max-steps", "0", "--out-dir", out], expect=0)
    assert "x 134217728 accumulation x 1 ranks = 4294967296 tokens per step" in p.stdout, p.stdout
    cfg = read_log(out)[0]
    assert cfg["tokens_per_step"] == 2**32 and cfg["grad_accum"] == 2**27


def test_a_shard_too_big_for_memory_says_to_write_smaller_shards(tmp_path):
    """Every rank holds one whole training shard in memory. A version-2 shard of the format's
    largest count, 2^31-1 tokens (8 GiB; a sparse file here, which takes no disk), under a 4 GiB
    address-space limit: the error names the shard and its size, and says to write smaller shards
    (not to lower the batch size, which has nothing to do with it)."""
    import resource
    shard = tmp_path / "big_000.bin"
    n = 2**31 - 1
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 2, n]
    with open(shard, "wb") as f:
        f.write(header.tobytes())
        f.truncate(1024 + 4 * n)

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    p = subprocess.run([str(TRAINER)] + [str(a) for a in TINY_GPT2 + ["--train-data", shard, "--max-steps", "1"]], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "2"}, preexec_fn=limit_memory)
    assert p.returncode == 1, p.stderr
    assert f"out of memory allocating 8.000 GiB for shard '{shard}' (2147483647 tokens of 4 bytes)" in p.stderr, p.stderr
    assert "write smaller shards (the prepare scripts' --shard-size)" in p.stderr and "--batch-size" not in p.stderr, p.stderr


def test_tokenizer_must_be_a_regular_file(tmp_path, data):
    for bad in (tmp_path, ):  # a directory (fopen would succeed, ftell would say LONG_MAX)
        p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "1", "--sample-every", "1", "--tokenizer", bad], expect=1)
        assert "is not a regular file (a directory)" in p.stderr
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # would block fopen forever
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "1", "--sample-every", "1", "--tokenizer", fifo], expect=1, timeout=30)
    assert "is not a regular file (a pipe or device)" in p.stderr


def test_checkpoint_with_an_invalid_header_is_refused(tmp_path, data):
    """A version-1 file has no CRC: its model config and step are checked for sense instead, so a
    wrong vocab cannot size the embedding wrongly (heap corruption) and a negative step, or one past
    the int a run counts steps in, cannot start."""
    out = tmp_path / "run"
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--out-dir", str(out)]
    run(base + ["--max-steps", "2"], expect=0)
    good = (out / "ckpt_00000002.bin").read_bytes()
    v1 = bytearray(good)
    struct.pack_into("<i", v1, 4, 1)
    struct.pack_into("<II", v1, CRC_OFFSET, 0, 0)
    cases = {"vocab": (MODEL_CONFIG_OFFSET + 28, "<i", 60000, "padded_vocab_size 128 is not vocab_size rounded up to 128 (60032)"),
             "head_dim": (MODEL_CONFIG_OFFSET + 20, "<i", 5, "head_dim 5 is not n_embd / n_head"),
             "arch": (MODEL_CONFIG_OFFSET + 0, "<i", 7, "unknown architecture 7"),
             # the value path's settings (ValuePathConfig at byte 52 of the model block)
             "vp": (MODEL_CONFIG_OFFSET + 56, "<i", 2, "resformer_learn is not 0 or 1"),
             "step": (STEP_OFFSET, "<q", -5, "a negative step -5"),
             # the run counts steps in an int: --resume would have gone on from step 2
             "step_2g": (STEP_OFFSET, "<q", 2**32 + 2, "a step 4294967298 beyond the 2^31-1 steps a run can have")}
    for name, (off, fmt, value, needle) in cases.items():
        bad = bytearray(v1)
        struct.pack_into(fmt, bad, off, value)
        path = tmp_path / f"bad_{name}.bin"
        path.write_bytes(bytes(bad))
        p = run(TINY_GPT2 + ["--init-from", path, "--val-data", str(data / "val_*.bin"), "--max-steps", "0"], expect=1)
        assert "has an invalid header" in p.stderr and needle in p.stderr, (name, p.stderr)
    # the statistics of --skip-loss-z/--skip-norm-z, after the CRCs: a negative loss variance, and
    # more updates skipped than steps seen
    for name, fmt, off, value in [("guard_var", "<d", 24, -1.0), ("guard_count", "<q", 8, 3)]:
        bad = bytearray(v1)
        struct.pack_into(fmt, bad, CRC_OFFSET + 8 + off, value)
        (tmp_path / f"bad_{name}.bin").write_bytes(bytes(bad))
        p = run(TINY_GPT2 + ["--init-from", tmp_path / f"bad_{name}.bin", "--max-steps", "0"], expect=1)
        assert "has a corrupt header" in p.stderr, (name, p.stderr)
    # a config that holds together but makes another parameter count (ffn_dim)
    bad = bytearray(v1)
    struct.pack_into("<i", bad, MODEL_CONFIG_OFFSET + 24, 48)
    (tmp_path / "bad_ffn.bin").write_bytes(bytes(bad))
    p = run(TINY_GPT2 + ["--init-from", tmp_path / "bad_ffn.bin", "--max-steps", "0"], expect=1)
    assert "parameters, its header says" in p.stderr
    # a directory named like a checkpoint, given to --init-from
    (tmp_path / "ckpt_00000009.bin").mkdir()
    p = run(TINY_GPT2 + ["--init-from", tmp_path / "ckpt_00000009.bin", "--max-steps", "0"], expect=1)
    assert "is not a regular file (a directory)" in p.stderr
    assert (out / "ckpt_00000002.bin").read_bytes() == good


def test_each_kind_of_checkpoint_damage_gets_its_own_message(tmp_path, data):
    """Every check of checkpoint_open (host/checkpoint.h) names what is wrong with the file: a later
    check would often refuse it too, but with a message that sends the user the wrong way (a
    file from "another version" that is only cut short, "truncated" for a count that cannot be
    true), or a damaged field would crash the trainer, or a file with bytes past its tensors
    would load silently. Each is refused with exit 1, and the run's checkpoint is left as it was."""
    out = tmp_path / "run"
    run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--out-dir", str(out), "--max-steps", "2"], expect=0)
    good = (out / "ckpt_00000002.bin").read_bytes()
    run_text_bytes = struct.unpack_from("<q", good, 32)[0]
    assert run_text_bytes > 10
    # version 1 (no CRCs), for the fields that are checked after the header CRC
    v1 = bytearray(good)
    struct.pack_into("<i", v1, 4, 1)
    struct.pack_into("<II", v1, CRC_OFFSET, 0, 0)

    def patched(src, fmt, off, value):
        b = bytearray(src)
        struct.pack_into(fmt, b, off, value)
        return bytes(b)

    cases = {
        "version": (patched(good, "<i", 4, 3), "has version 3 (header 552 bytes)"),
        "header_bytes": (patched(good, "<i", 8, 600), "has version 2 (header 600 bytes)"),
        "run_text_negative": (patched(good, "<q", 32, -1), "has a corrupt header"),
        "run_text_huge": (patched(good, "<q", 32, (1 << 20) + 1), "has a corrupt header"),
        "run_text_cut": (good[: 552 + run_text_bytes // 2], "is cut short inside its header"),
        "no_params": (patched(v1, "<q", 24, 0), "has a corrupt header"),
        "has_optimizer_2": (patched(v1, "<i", 12, 2), "has a corrupt header"),
        "params_2_40": (patched(v1, "<q", 24, 1 << 40), "too small for the 1099511627776 parameters its header gives"),
        "trailing": (good + b"\0" * 4, f"is {len(good) + 4} bytes but its header says {len(good)}"),
    }
    for name, (content, needle) in cases.items():
        path = tmp_path / f"damaged_{name}.bin"
        path.write_bytes(content)
        p = run(TINY_GPT2 + ["--init-from", path, "--max-steps", "0"], expect=1)
        assert f"'{path}'" in p.stderr and needle in p.stderr, (name, p.stderr)
    assert (out / "ckpt_00000002.bin").read_bytes() == good


def test_checkpoint_listing_takes_only_files_and_long_step_numbers(tmp_path, data):
    out = tmp_path / "run"
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--out-dir", str(out)]
    run(base + ["--max-steps", "2"], expect=0)
    (out / "ckpt_00000009.bin").mkdir()  # not a checkpoint: resume takes step 2
    p = run(base + ["--max-steps", "3", "--resume", "1"], expect=0)
    assert "ckpt_00000002.bin (step 2)" in p.stdout
    # past step 99,999,999 the name has 9 digits; a new run must still see it and refuse the directory
    other = tmp_path / "long"
    other.mkdir()
    shutil.copy(out / "ckpt_00000002.bin", other / "ckpt_100000002.bin")
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--out-dir", other, "--max-steps", "1"], expect=2)
    assert "already holds checkpoints" in p.stderr


def test_new_run_keeps_an_earlier_log(tmp_path, data):
    """A run that stopped before its first checkpoint leaves only log.jsonl; the next run into that
    directory keeps it as log.jsonl.1 instead of truncating it."""
    out = tmp_path / "run"
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--out-dir", str(out)]
    run(base + ["--max-steps", "3"], expect=0)
    for f in out.glob("ckpt_*.bin"):
        f.unlink()
    first = (out / "log.jsonl").read_text()
    p = run(base + ["--max-steps", "1"], expect=0)
    assert "kept as" in p.stdout
    assert (out / "log.jsonl.1").read_text() == first
    assert len(read_log(out)) == 2  # the new run's config line and its one step
    for f in out.glob("ckpt_*.bin"):
        f.unlink()
    run(base + ["--max-steps", "1"], expect=0)
    assert (out / "log.jsonl.1").read_text() == first and (out / "log.jsonl.2").exists()


def test_value_path_mismatch_names_the_flag_that_differs(tmp_path, data):
    out = tmp_path / "run"
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--out-dir", str(out), "--sla-layers", "1"]
    run(base + ["--max-steps", "2", "--sla-heads", "1"], expect=0, path="sla")
    p = run(base + ["--max-steps", "3", "--resume", "1", "--sla-heads", "2"], expect=1, path="sla")
    assert "--sla-heads 2 does not match" in p.stderr and "which has --sla-heads 1" in p.stderr
    assert "--sla-layers 1 does not match" not in p.stderr
    run(base + ["--max-steps", "3", "--resume", "1", "--sla-heads", "1"], expect=0, path="sla")


def test_resume_notes_only_the_flags_that_changed(tmp_path, data):
    """The shape comes from the checkpoint on resume; only flags the user changed are noted."""
    out = tmp_path / "run"
    run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--out-dir", out, "--max-steps", "2"], expect=0)
    p = run(["--train-data", str(data / "train_*.bin"), "--seq-len", "8", "--out-dir", out, "--max-steps", "3", "--resume", "1"], expect=0)
    notes = re.findall(r"note: resumed with a changed flag: (--[a-z-]+)=", p.stdout)
    assert notes == ["--max-steps"], p.stdout
    # at --max-steps already: nothing to train, and it says so
    p = run(["--train-data", str(data / "train_*.bin"), "--seq-len", "8", "--out-dir", out, "--max-steps", "3", "--resume", "1"], expect=0)
    assert "nothing to train" in p.stdout



# ---------------------------------------------------------------------------
# --skip-loss-z / --skip-norm-z (host/update_guard.h)

SKIP_W = 16  # --skip-window of the tests: short, so that spikes come after the window filled


@pytest.fixture()
def spiky_data(tmp_path):
    """A stream the tiny model learns within ~100 steps (a fixed successor function, no noise),
    with every 13th sequence of T = 8 replaced by random tokens: once the pattern is learned, a
    batch holding one of them has a loss and gradient norm far above the rest."""
    d = tmp_path / "spiky"
    d.mkdir()
    rng = np.random.default_rng(5)
    T, nseq = 8, 400
    toks = np.zeros(nseq * T + 1, dtype=np.int64)
    for i in range(1, len(toks)):
        toks[i] = (toks[i - 1] * 5 + 3) % 64
    for s in range(nseq):
        if s % 13 == 7:
            toks[s * T:(s + 1) * T + 1] = rng.integers(64, size=T + 1)
    write_shard(str(d / "train_000.bin"), toks, 1)
    return d


def replay_update_guard(log, window):
    """The z of each step's loss and norm that the guard judges, redone from log.jsonl alone with
    the statistics docs/formats.md and host/update_guard.h define (weight 1/min(n, W), judged once
    W values were seen): per step (step, loss z, norm z), against the steps before it; None before."""
    out, n = [], 0
    stats = {"loss": [0.0, 0.0], "norm": [0.0, 0.0]}
    for r in log:
        if "train_loss" not in r:
            continue
        x = {"loss": r["train_loss"], "norm": r["grad_norm"]}
        z = {}
        for k in x:
            mean, var = stats[k]
            z[k] = (x[k] - mean) / var ** 0.5 if n >= window and var > 0 else None
        out.append((r["step"], z["loss"], z["norm"]))
        n += 1
        a = 1.0 / min(n, window)
        for k in x:
            mean, var = stats[k]
            d = x[k] - mean
            stats[k] = [mean + a * d, (1 - a) * (var + a * d * d)]
    return out



def check_update_guard_run(out, z, window, max_steps):
    """For a run of --skip-loss-z z --skip-norm-z z --skip-window window --checkpoint-every 1 in
    `out`: some steps were skipped, exactly those the log's own values put over z, and each left
    the checkpoint's tensors as they were while every other step changed them. Returns them."""
    log = read_log(out)
    skipped = {r["step"] for r in log if r.get("skipped") == 1}
    over = {step for step, zl, zn in replay_update_guard(log, window) if (zl or 0) > z or (zn or 0) > z}
    assert skipped and skipped == over, f"skipped {skipped}, replayed {over}"
    before = checkpoint_tensors(out / "ckpt_00000001.bin")
    for s in range(2, max_steps + 1):
        after = checkpoint_tensors(out / f"ckpt_{s:08d}.bin")
        assert (after == before) == (s in skipped), f"step {s}: skipped {s in skipped}"
        before = after
    return skipped

def test_outlier_steps_skip_their_update(tmp_path, spiky_data):
    """The steps marked skipped are exactly those whose loss or norm z (replayed from the log) is
    over its threshold; a skipped step leaves the weights and AdamW moments byte for byte as they
    were, every other step changes them; and --resume continues the guard's statistics: a run
    stopped 3 steps before a skip (inside the window) skips it again."""
    out = tmp_path / "straight"
    z = 3.0  # both tests' threshold
    common = TINY_GPT2 + ["--batch-size", "4", "--lr", "1e-2", "--lr-schedule", "constant", "--max-steps", "200",
                          "--train-data", str(spiky_data / "train_*.bin"), "--skip-loss-z", str(z), "--skip-norm-z", str(z),
                          "--skip-window", str(SKIP_W), "--checkpoint-every", "1"]
    p = run(common + ["--out-dir", out], expect=0)
    log = read_log(out)
    steps = [r for r in log if "train_loss" in r]
    assert [r["step"] for r in steps] == list(range(1, 201))
    # the replay and the weights, as in every build's test; then which test fired where
    skipped = check_update_guard_run(out, z, SKIP_W, 200)
    replay = replay_update_guard(log, SKIP_W)
    by_loss = {step for step, zl, zn in replay if (zl or 0) > z}
    by_norm = {step for step, zl, zn in replay if (zn or 0) > z}
    assert by_loss - by_norm and by_norm - by_loss, f"the data should spike each test alone: loss {by_loss}, norm {by_norm}"
    assert len(skipped) < 20, skipped  # spikes, not the run
    assert re.search(rf"updates skipped by --skip-loss-z/--skip-norm-z: {len(skipped)} of the run's 200 steps", p.stdout)
    for step in sorted(skipped)[:3]:
        assert re.search(rf"step +{step}: update skipped: .*sd above the recent mean", p.stdout)
    # resume 3 steps before a skip past the first window: the restored statistics judge it at once
    k = min(s for s in skipped if s > SKIP_W + 5)
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    for s in range(k - 2, 201):
        (broken / f"ckpt_{s:08d}.bin").unlink()
    p2 = run(common + ["--out-dir", broken, "--resume", "1"], expect=0)
    assert f"(step {k - 3})" in p2.stdout
    log2 = read_log(broken)
    start = max(i for i, r in enumerate(log2) if r.get("event") == "config" and r.get("resumed_from") == k - 3) + 1
    after = lambda rows: [(r["step"], r["train_loss"], r["grad_norm"], r.get("skipped")) for r in rows if "train_loss" in r and r["step"] > k - 3]
    assert after(log2[start:]) == after(log)
    assert checkpoint_tensors(broken / "ckpt_00000200.bin") == checkpoint_tensors(out / "ckpt_00000200.bin")
    # off (the default): nothing is skipped, and up to the first skip (included: it is the update
    # that differs, not the step) the losses are the guarded run's, bit for bit
    plain = tmp_path / "plain"
    run(TINY_GPT2 + ["--batch-size", "4", "--lr", "1e-2", "--lr-schedule", "constant", "--max-steps", "200",
                     "--train-data", str(spiky_data / "train_*.bin"), "--out-dir", plain], expect=0)
    plain_steps = [r for r in read_log(plain) if "train_loss" in r]
    first = min(skipped)
    assert not any("skipped" in r for r in plain_steps)
    assert [(r["train_loss"], r["grad_norm"]) for r in plain_steps[:first]] == [(r["train_loss"], r["grad_norm"]) for r in steps[:first]]
    assert plain_steps[first]["train_loss"] != steps[first]["train_loss"]


def test_overfit_batch_trains_every_step_on_the_first_batch(tmp_path, data):
    """--overfit-batch 1: at lr 0 every step's loss and norm are the first step's (the same
    micro-batches, both of them under accumulation), where the normal stream's differ; at a real lr
    the loss falls towards 0, far below what the stream allows; and a resumed run overfits the same
    batch, bit for bit."""
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--batch-size", "4", "--total-batch-tokens", "64"]
    flat = lambda out: [(r["train_loss"], r["grad_norm"]) for r in read_log(out) if "train_loss" in r]
    run(base + ["--lr", "0", "--max-steps", "6", "--overfit-batch", "1", "--out-dir", tmp_path / "lr0"], expect=0)
    run(base + ["--lr", "0", "--max-steps", "6", "--out-dir", tmp_path / "lr0_stream"], expect=0)
    same, stream = flat(tmp_path / "lr0"), flat(tmp_path / "lr0_stream")
    assert len(same) == 6 and len(set(same)) == 1 and same[0] == stream[0]
    assert len(set(stream)) == 6
    assert read_log(tmp_path / "lr0")[0]["overfit_batch"] == 1 and "overfit_batch" not in read_log(tmp_path / "lr0_stream")[0]
    p = run(base + ["--lr", "1e-2", "--max-steps", "150", "--overfit-batch", "1", "--out-dir", tmp_path / "fit"], expect=0)
    assert "note: --overfit-batch 1: every step trains on the same 64 tokens" in p.stdout
    run(base + ["--lr", "1e-2", "--max-steps", "150", "--out-dir", tmp_path / "fit_stream"], expect=0)
    fit, fit_stream = flat(tmp_path / "fit"), flat(tmp_path / "fit_stream")
    assert fit[-1][0] < 0.05 * fit[0][0] and fit[-1][0] < 0.2 * fit_stream[-1][0], (fit[-1], fit_stream[-1])
    # resume: 12 straight against 5, stop, 7 more
    common = base + ["--lr", "1e-2", "--max-steps", "12", "--overfit-batch", "1", "--checkpoint-every", "5"]
    run(common + ["--out-dir", tmp_path / "straight"], expect=0)
    run(common + ["--out-dir", tmp_path / "broken"], expect=0)
    for name in ["ckpt_00000010.bin", "ckpt_00000012.bin"]:
        (tmp_path / "broken" / name).unlink()
    run(common + ["--out-dir", tmp_path / "broken", "--resume", "1"], expect=0)
    straight, broken = flat(tmp_path / "straight"), flat(tmp_path / "broken")
    assert broken[-7:] == straight[-7:]
    assert checkpoint_tensors(tmp_path / "straight" / "ckpt_00000012.bin") == checkpoint_tensors(tmp_path / "broken" / "ckpt_00000012.bin")

def test_gradient_accumulation_equals_one_larger_batch(tmp_path, data):
    """Two micro-batches of 4 sequences per step (--total-batch-tokens 64 at B = 4, T = 8) are one
    batch of 8 split in two: the loader hands out the same 8 sequences in the same order either
    way, and the step's loss (the mean of the two equal-sized micro-batch means) and gradient (the
    sum of the halves, each scaled by 1/2) are those of B = 8. So the logged loss and gradient norm
    must match the B = 8 run's at every step, to float rounding (summed in another order). A loss
    not divided by the micro-batches, or gradients not scaled by 1/2, is off by a factor 2."""
    common = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "4", "--lr", "1e-3", "--warmup-steps", "1"]
    run(common + ["--batch-size", "4", "--total-batch-tokens", "64", "--out-dir", tmp_path / "accum"], expect=0)
    run(common + ["--batch-size", "8", "--out-dir", tmp_path / "big"], expect=0)
    accum, big = read_log(tmp_path / "accum"), read_log(tmp_path / "big")
    assert accum[0]["grad_accum"] == 2 and big[0]["grad_accum"] == 1
    a = [(r["train_loss"], r["grad_norm"]) for r in accum if "train_loss" in r]
    b = [(r["train_loss"], r["grad_norm"]) for r in big if "train_loss" in r]
    assert len(a) == len(b) == 4
    for (la, na), (lb, nb) in zip(a, b):
        assert la == pytest.approx(lb, rel=1e-5) and na == pytest.approx(nb, rel=1e-4), (a, b)


def test_the_first_adamw_step_moves_every_trained_weight_by_the_lr(tmp_path, data):
    """The optimizer's step count, as the step loop passes it, is 1-based: at t = 1 AdamW's bias
    corrections give m_hat = g and v_hat = g^2, so (with no weight decay) every weight with a
    gradient well above eps moves by lr * |g| / (|g| + eps) = lr, whatever its gradient (Kingma &
    Ba, section 2.1: the effective step is bounded by lr and equals it for the first step). Taken
    as t = 2, the step would be lr * sqrt(1 + beta2) / (1 + beta1) = 0.744 lr. The weights before
    come from the step-0 checkpoint of the same seed (--max-steps 0)."""
    common = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--lr", "1e-3", "--warmup-steps", "0", "--weight-decay", "0"]
    run(common + ["--max-steps", "0", "--out-dir", tmp_path / "init"], expect=0)
    run(common + ["--max-steps", "1", "--out-dir", tmp_path / "one"], expect=0)
    after = np.frombuffer(checkpoint_tensors(tmp_path / "one" / "ckpt_00000001.bin"), np.float32)
    n = len(after) // 3  # params, then m and v
    raw = (tmp_path / "init" / "ckpt_00000000.bin").read_bytes()  # weights only (no optimizer state at step 0)
    before = np.frombuffer(raw[struct.unpack_from("<i", raw, 8)[0] + struct.unpack_from("<q", raw, 32)[0]:], np.float32)
    assert len(before) == n
    step = np.abs(after[:n].astype(np.float64) - before[:n])
    moved = step[step > 0]
    assert len(moved) > n // 2  # most weights have a gradient (not the unseen tokens' embeddings)
    assert np.max(step) <= 1e-3 * (1 + 1e-4)
    assert np.median(moved) == pytest.approx(1e-3, rel=1e-3)
    # --weight-decay 0.5, decoupled (Loshchilov & Hutter; PyTorch's AdamW): each matrix weight also
    # shrinks by lr * wd * w, the same gradient step added; biases and gains do not decay
    run(common[:-1] + ["0.5", "--max-steps", "1", "--out-dir", tmp_path / "decay"], expect=0)
    decayed = np.frombuffer(checkpoint_tensors(tmp_path / "decay" / "ckpt_00000001.bin"), np.float32)[:n].astype(np.float64)
    diff = decayed - after[:n]
    shrunk = diff != 0
    assert shrunk.sum() > n // 2  # the matrices are most of the weights
    np.testing.assert_allclose(diff[shrunk], -1e-3 * 0.5 * before[shrunk], rtol=1e-2, atol=1e-9)


def test_grad_clip_scales_the_gradient_to_the_clip_norm(tmp_path, data):
    """--grad-clip c: a gradient of global norm > c is scaled by c / norm before the update
    (torch.nn.utils.clip_grad_norm_). Adam hides a gradient's scale, except through eps: with
    eps = 1000, far above every |g|, the first update is lr * g / (|g| + eps), nearly lr * g / eps,
    linear in g. So each weight's first step with --grad-clip 0.1 must be c / norm times its step
    without clipping, norm being the (unclipped) gradient norm the log records, to |g| / eps."""
    common = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--lr", "1000", "--eps", "1000", "--warmup-steps", "0",
                          "--weight-decay", "0", "--max-steps", "1"]
    run(common + ["--grad-clip", "0", "--out-dir", tmp_path / "free"], expect=0)
    run(common + ["--grad-clip", "0.1", "--out-dir", tmp_path / "clip"], expect=0)
    run(common[:-1] + ["0", "--out-dir", tmp_path / "init"], expect=0)  # the weights before: step 0, same seed
    raw = (tmp_path / "init" / "ckpt_00000000.bin").read_bytes()
    w0 = np.frombuffer(raw[struct.unpack_from("<i", raw, 8)[0] + struct.unpack_from("<q", raw, 32)[0]:], np.float32).astype(np.float64)
    n = len(w0)
    free = np.frombuffer(checkpoint_tensors(tmp_path / "free" / "ckpt_00000001.bin"), np.float32)[:n] - w0
    clip = np.frombuffer(checkpoint_tensors(tmp_path / "clip" / "ckpt_00000001.bin"), np.float32)[:n] - w0
    norm = [r["grad_norm"] for r in read_log(tmp_path / "clip") if "grad_norm" in r][0]
    assert norm > 0.1 * 2  # the clip acts, by a good margin
    big = np.abs(free) > 1e-4
    assert big.sum() > 100
    np.testing.assert_allclose(clip[big] / free[big], 0.1 / norm, rtol=1e-2)


def test_samples_come_every_n_steps_and_at_the_end(tmp_path, data):
    """--sample-every N: a sample every N steps and at the end (its help text), so a run of 7
    steps at N = 3 prints samples at steps 3, 6 and 7."""
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "7", "--sample-every", "3",
                         "--sample-tokens", "4"], expect=0)
    assert re.findall(r"---- sample at step (\d+) ----", p.stdout) == ["3", "6", "7"]


def test_zero_1_in_one_process_says_it_does_nothing(data):
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "1", "--zero", "1"], expect=0)
    assert "note: --zero 1 has no effect in one process" in p.stdout
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "1", "--overlap-reduce", "0"], expect=0)
    assert "note: --overlap-reduce has no effect in one process" in p.stdout
    p = run(TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "1"], expect=0)
    assert "no effect" not in p.stdout


def test_bad_train_shard_mid_run_saves_the_last_completed_step(tmp_path, data):
    """A training shard is checked when first loaded: a bad id found mid-run stops the run, but
    only after saving the last completed step. After the shard is fixed, --resume continues
    exactly as a run on good data would have (the same losses, bit for bit)."""
    shards = tmp_path / "shards"
    base = lambda d: TINY_GPT2 + ["--train-data", str(shards / "train_*.bin"), "--out-dir", d, "--max-steps", "150"]
    n = None
    for bad in ("train_000.bin", "train_001.bin", "train_002.bin"):  # whichever the shuffle loads after the first
        shutil.rmtree(shards, ignore_errors=True)
        shutil.copytree(data, shards)
        toks = np.fromfile(shards / bad, dtype="<u2", offset=1024).astype(np.int64)
        toks[20] = 100  # beyond --vocab 64
        write_shard(str(shards / bad), toks, 1)
        out = tmp_path / f"run_{bad}"
        p = run(base(out), expect=1)
        assert bad in p.stderr and "out of range" in p.stderr
        m = re.search(r"saved the last completed step \((\d+)\)", p.stdout)
        if m:
            n = int(m[1])
            break
    assert n is not None and 0 < n < 150, "no shard was loaded after the first step"
    assert (out / f"ckpt_{n:08d}.bin").exists()
    shutil.copy(data / bad, shards / bad)  # the fix
    resumed = run(base(out) + ["--resume", "1"], expect=0)
    ref = run(base(tmp_path / "ref"), expect=0)
    losses = lambda text: dict(re.findall(r"step +(\d+)/\d+ \| loss (\S+)", text))
    after = {s: l for s, l in losses(ref.stdout).items() if int(s) > n}
    assert losses(resumed.stdout) == after and len(after) == 150 - n


def test_sla_that_skips_nothing_says_so(tmp_path, data):
    """SLA's default n_l = round(3L/4) is L at L = 2: every layer its own, vanilla's computation
    exactly. Allowed (value_paths.md section 10), but said, so that a comparison is not misread."""
    base = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--max-steps", "1"]
    p = run(base, expect=0, path="sla")
    assert "note: SLA with n_l = 2 of 2 layers and 2 skip heads skips nothing" in p.stdout, p.stdout
    p = run(base + ["--sla-layers", "1"], expect=0, path="sla")
    assert "skips nothing" not in p.stdout


def test_a_step_0_checkpoint_resumes_as_a_fresh_run(tmp_path, data):
    """--max-steps 0 --out-dir D saves the initial weights without AdamW's moments (zero at step 0
    by definition). --resume 1 from it trains as a run started afresh does, bit for bit; before,
    it was refused (no optimizer state) while a new run refused the directory (it holds a checkpoint)."""
    common = TINY_GPT2 + ["--train-data", str(data / "train_*.bin"), "--lr", "3e-3"]
    run(common + ["--max-steps", "0", "--out-dir", tmp_path / "d"], expect=0)
    p = run(common + ["--max-steps", "3", "--out-dir", tmp_path / "d", "--resume", "1"], expect=0)
    assert "(step 0)" in p.stdout
    run(common + ["--max-steps", "3", "--out-dir", tmp_path / "fresh"], expect=0)
    steps = lambda d: [(r["step"], r["train_loss"], r["grad_norm"]) for r in read_log(d) if "train_loss" in r]
    assert steps(tmp_path / "d") == steps(tmp_path / "fresh") and len(steps(tmp_path / "fresh")) == 3
    assert checkpoint_tensors(tmp_path / "d" / "ckpt_00000003.bin") == checkpoint_tensors(tmp_path / "fresh" / "ckpt_00000003.bin")
