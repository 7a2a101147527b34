"""The shard format (llm.c-compatible header), atomic writes and the pure-Python reader."""

import errno
import os
import subprocess
import sys

import numpy as np
import pytest

from vp_data import DataError
from vp_data import shards
from vptest import SCRIPTS, all_files_digest


def test_header_layout_v1(tmp_path):
    p = tmp_path / "a.bin"
    toks = np.array([50256, 1, 2, 65535, 0], dtype=np.int64)
    shards.write_shard(str(p), toks, shards.VERSION_U16)
    raw = p.read_bytes()
    header = np.frombuffer(raw[:1024], dtype="<i4")
    assert header[0] == 20240520 and header[1] == 1 and header[2] == 5
    assert not header[3:].any()
    assert len(raw) == 1024 + 5 * 2
    assert np.frombuffer(raw[1024:], dtype="<u2").tolist() == toks.tolist()
    assert shards.read_shard(str(p)).tolist() == toks.tolist()


def test_header_layout_v2(tmp_path):
    p = tmp_path / "b.bin"
    toks = np.array([0, 70000, 2**32 - 1], dtype=np.int64)
    shards.write_shard(str(p), toks, shards.VERSION_U32)
    raw = p.read_bytes()
    assert np.frombuffer(raw[:12], dtype="<i4").tolist() == [20240520, 2, 3]
    assert len(raw) == 1024 + 3 * 4
    assert shards.read_shard(str(p)).tolist() == toks.tolist()


def test_version_for_vocab():
    # GPT-2, NeoX and Llama-2 all fit uint16 -> version 1 (llm.c's format)
    for v in (50257, 50277, 32000, 65536):
        assert shards.version_for_vocab(v) == 1
    assert shards.version_for_vocab(65537) == 2
    assert shards.version_for_vocab(151_936) == 2


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda raw: raw[:500], "shorter than"),
        (lambda raw: b"\x00\x00\x00\x00" + raw[4:], "bad magic"),
        (lambda raw: raw[:4] + np.int32(7).tobytes() + raw[8:], "unsupported version"),
        (lambda raw: raw[:-2], "header says 4 tokens"),
        (lambda raw: raw + b"\x00\x00", "header says 4 tokens"),
        (lambda raw: raw[:12] + np.int32(1).tobytes() + raw[16:], "must be zero"),
    ],
)
def test_reader_rejects_damaged_shards(tmp_path, damage, message):
    p = tmp_path / "x.bin"
    shards.write_shard(str(p), np.arange(4), 1)
    p.write_bytes(damage(p.read_bytes()))
    with pytest.raises(DataError, match=message):
        shards.read_shard(str(p))
    assert not shards.is_valid_shard(str(p))


def test_writer_refuses_ids_that_do_not_fit(tmp_path):
    with pytest.raises(DataError, match="do not fit version 1"):
        shards.write_shard(str(tmp_path / "x.bin"), np.array([1, 70000]), 1)
    with pytest.raises(DataError, match="do not fit"):
        shards.write_shard(str(tmp_path / "y.bin"), np.array([-1]), 2)
    assert os.listdir(tmp_path) == []


def test_writer_limits_are_exact_at_the_boundaries(tmp_path):
    """The largest id a version-1 shard holds is 65535 (uint16); 65536 would wrap to 0 in the cast, so
    it is refused. The header counts tokens in an int32: 2^31 - 1 is the most, 2^31 is refused with
    the remedy (docs/formats.md), not an OverflowError from numpy."""
    p = tmp_path / "x.bin"
    shards.write_shard(str(p), np.array([65535, 0]), 1)
    assert np.frombuffer(p.read_bytes()[1024:], "<u2").tolist() == [65535, 0]
    with pytest.raises(DataError, match="do not fit version 1"):
        shards.write_shard(str(tmp_path / "y.bin"), np.array([3, 65536]), 1)
    assert not (tmp_path / "y.bin").exists()
    assert np.frombuffer(shards.make_header(2**31 - 1, 2)[:12], "<i4").tolist() == [20240520, 2, 2**31 - 1]
    with pytest.raises(DataError, match="--shard-size"):
        shards.make_header(2**31, 1)


def test_reader_checks_vocab_range(tmp_path):
    p = tmp_path / "x.bin"
    shards.write_shard(str(p), np.array([1, 2, 50257]), 1)
    with pytest.raises(DataError, match="out of range"):
        shards.read_shard(str(p), vocab_size=50257)


def test_full_disk_leaves_no_shard(tmp_path, monkeypatch):
    """ENOSPC in the middle of a write: clear error, no .bin and no .tmp left behind."""
    calls = []

    def failing_write(f, data):
        calls.append(len(data))
        if len(calls) == 2:  # header written, tokens fail
            raise OSError(errno.ENOSPC, "No space left on device")
        f.write(data)

    monkeypatch.setattr(shards, "_write_chunk", failing_write)
    p = tmp_path / "full.bin"
    with pytest.raises(DataError, match=r"disk full while writing .*full\.bin"):
        shards.write_shard(str(p), np.arange(1000), 1)
    assert os.listdir(tmp_path) == []


def test_free_space_checked_before_writing(tmp_path, monkeypatch):
    class Usage:
        total = used = 0
        free = 100

    monkeypatch.setattr(shards.shutil, "disk_usage", lambda d: Usage())
    with pytest.raises(DataError, match="disk full"):
        shards.write_shard(str(tmp_path / "big.bin"), np.arange(1000), 1)
    assert os.listdir(tmp_path) == []


def test_full_disk_during_a_run(tmp_path, monkeypatch, run_script, vp_cache):
    """A prepare script hitting a full disk: exit 1 with a clear message, only complete shards."""
    real = shards._write_chunk
    seen = []

    def flaky(f, data):
        if f.name.endswith(".bin.tmp"):
            if f.name not in seen:
                seen.append(f.name)
            if len(seen) == 3:  # the third shard fails part-way
                raise OSError(errno.ENOSPC, "No space left on device")
        real(f, data)

    monkeypatch.setattr(shards, "_write_chunk", flaky)
    out = tmp_path / "out"
    inp = os.path.join(vp_cache, "samples", "tinystories", "tinystories_sample.txt")
    r = run_script("prepare_text", inp, "--doc-split", "eot", "--out-dir", out, "--name", "ts",
                   "--val-split", "none", "--shard-size", "100", "--workers", "1", expect=1)
    assert "disk full while writing" in r.err and "_000002.bin" in r.err and "re-run the same command" in r.err
    for f in os.listdir(out):
        assert not f.endswith(".tmp")
        if f.endswith(".bin"):
            shards.read_shard(str(out / f))  # every .bin present is complete
    # Space is back: the same command resumes and matches a clean run.
    monkeypatch.setattr(shards, "_write_chunk", real)
    run_script("prepare_text", inp, "--doc-split", "eot", "--out-dir", out, "--name", "ts",
               "--val-split", "none", "--shard-size", "100", "--workers", "1")
    clean = tmp_path / "clean"
    run_script("prepare_text", inp, "--doc-split", "eot", "--out-dir", clean, "--name", "ts",
               "--val-split", "none", "--shard-size", "100", "--workers", "1")
    assert all_files_digest(out) == all_files_digest(clean)


def test_inspect_cli(tmp_path):
    p = tmp_path / "s.bin"
    shards.write_shard(str(p), np.array([50256, 15496, 995]), 1)
    env = {**os.environ, "PYTHONPATH": SCRIPTS}
    r = subprocess.run([sys.executable, "-m", "vp_data.shards", "inspect", str(p)], capture_output=True, text=True,
                       env=env, check=True)
    assert "magic=20240520 version=1 (uint16) tokens=3" in r.stdout
    assert "[50256, 15496, 995]" in r.stdout
    r = subprocess.run([sys.executable, os.path.join(SCRIPTS, "inspect_shard.py"), "validate", str(p),
                        "--vocab-size", "50257"], capture_output=True, text=True, check=True)
    assert "all valid" in r.stdout
    (tmp_path / "bad.bin").write_bytes(b"nope")
    r = subprocess.run([sys.executable, "-m", "vp_data.shards", "validate", str(tmp_path / "bad.bin")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 1 and "shorter than the 1024-byte header" in r.stderr
    # a shard too short for one sequence: the trainer refuses it, so validate does too (no sequence
    # at all by default; with --seq-len T, fewer than T + 1 tokens)
    shards.write_shard(str(tmp_path / "empty.bin"), np.array([], dtype=np.int64), 1)
    r = subprocess.run([sys.executable, "-m", "vp_data.shards", "validate", str(tmp_path / "empty.bin")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 1 and "0 tokens, fewer than the 2 of one sequence of --seq-len 1" in r.stderr, r.stderr
    for seq_len, code in [("2", 0), ("3", 1)]:
        r = subprocess.run([sys.executable, "-m", "vp_data.shards", "validate", str(p), "--seq-len", seq_len],
                           capture_output=True, text=True, env=env)
        assert r.returncode == code, (seq_len, r.stdout, r.stderr)
    assert "3 tokens, fewer than the 4 of one sequence of --seq-len 3 with its target: the trainer refuses the shard" in r.stderr
