"""Corrupt input: a clear error naming the file and line, or skipped and counted with
--skip-bad-records. Also --help for every script."""

import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import zstandard

from vptest import SCRIPTS, expected_stream, read_tokens

DOCS = [f"Document number {i}. " + "Some words here, and more words. " * (i + 3) for i in range(12)]


def zst_frames(path, groups):
    """Write each group of records as its own zstd frame; return the frames' byte offsets."""
    cctx = zstandard.ZstdCompressor(write_checksum=True)
    offsets, data = [], b""
    for g in groups:
        offsets.append(len(data))
        data += cctx.compress(b"".join(json.dumps(r).encode() + b"\n" for r in g))
    path.write_bytes(data)
    return offsets


def prep(run_script, inp, out, *extra, expect=0):
    return run_script("prepare_text", inp, "--name", "t", "--out-dir", out, "--val-split", "none", *extra,
                      expect=expect)


def test_broken_zstd_frame(tmp_path, run_script, ref_encode):
    p = tmp_path / "chunk.jsonl.zst"
    recs = [{"text": t} for t in DOCS]
    offsets = zst_frames(p, [recs[:5], recs[5:]])
    raw = bytearray(p.read_bytes())
    raw[offsets[1] : offsets[1] + 4] = b"\x00\x01\x02\x03"  # the second frame's magic number
    p.write_bytes(bytes(raw))
    r = prep(run_script, p, tmp_path / "a", expect=1)
    assert f"{p}:line 6: corrupt zstd frame" in r.err and "--skip-bad-records" in r.err
    assert "Traceback" not in r.err
    assert not [f for f in os.listdir(tmp_path / "a") if f.endswith(".bin")]

    r = prep(run_script, p, tmp_path / "b", "--skip-bad-records")
    assert "bad records skipped 1" in r.out and "documents 5," in r.out
    assert "skipped bad record" in r.err
    assert np.array_equal(read_tokens(tmp_path / "b", "t", "train"), expected_stream(ref_encode, "gpt2", DOCS[:5]))


def test_truncated_zstd(tmp_path, run_script):
    p = tmp_path / "cut.jsonl.zst"
    zst_frames(p, [[{"text": t} for t in DOCS]])
    p.write_bytes(p.read_bytes()[:-30])
    r = prep(run_script, p, tmp_path / "a", expect=1)
    assert str(p) in r.err and "truncated zstd frame" in r.err


def test_checksum_mismatch_zstd(tmp_path, run_script):
    p = tmp_path / "flip.jsonl.zst"
    zst_frames(p, [[{"text": t} for t in DOCS]])
    raw = bytearray(p.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    p.write_bytes(bytes(raw))
    r = prep(run_script, p, tmp_path / "a", expect=1)
    assert str(p) in r.err and ("corrupt zstd frame" in r.err or "invalid JSON" in r.err)


@pytest.mark.parametrize(
    "line, message",
    [
        (b'{"text": "unterminated', "invalid JSON"),
        (b'{"content": "no text field"}', "record has no text field 'text'"),
        (b'{"text": 42}', "field 'text' is int, not a string"),
        (b'["a", "list"]', "expected a JSON object"),
        (b'{"text": "bad utf-8 \xff\xfe"}', "invalid JSON"),
    ],
)
def test_bad_json_line(tmp_path, run_script, ref_encode, line, message):
    p = tmp_path / "recs.jsonl.gz"
    lines = [json.dumps({"text": t}).encode() for t in DOCS[:6]]
    lines.insert(3, line)  # line 4
    with gzip.open(p, "wb") as f:
        f.write(b"\n".join(lines) + b"\n")
    r = prep(run_script, p, tmp_path / "a", expect=1)
    assert f"{p}:line 4: {message}" in r.err, r.err
    r = prep(run_script, p, tmp_path / "b", "--skip-bad-records")
    assert "bad records skipped 1" in r.out and "documents 6," in r.out
    assert np.array_equal(read_tokens(tmp_path / "b", "t", "train"), expected_stream(ref_encode, "gpt2", DOCS[:6]))


def test_truncated_gzip(tmp_path, run_script):
    p = tmp_path / "cut.jsonl.gz"
    with gzip.open(p, "wb") as f:
        for t in DOCS * 20:
            f.write(json.dumps({"text": t}).encode() + b"\n")
    p.write_bytes(p.read_bytes()[:-50])
    r = prep(run_script, p, tmp_path / "a", expect=1)
    assert str(p) in r.err and "corrupt gzip stream" in r.err


def test_bad_text_files(tmp_path, run_script):
    p = tmp_path / "bad.txt"
    p.write_bytes(b"fine text\nthen \xff\xfe bad bytes\n")
    r = prep(run_script, p, tmp_path / "a", expect=1)
    assert f"{p}: byte 15: invalid UTF-8" in r.err
    r = prep(run_script, p, tmp_path / "b", "--skip-bad-records")
    assert "bad records skipped 1" in r.out

    missing = tmp_path / "nope.jsonl"
    r = prep(run_script, missing, tmp_path / "c", expect=1)
    assert f"input not found: {missing}" in r.err


def test_parquet_without_text_column(tmp_path, run_script):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "x.parquet"
    pq.write_table(pa.table({"content": ["a", "b"]}), p)
    r = prep(run_script, p, tmp_path / "a", expect=1)
    assert f"{p}: no column 'text'" in r.err and "content" in r.err
    pq.write_table(pa.table({"text": ["a", None, "c"]}), p)
    r = prep(run_script, p, tmp_path / "b", expect=1)
    assert f"{p}: row 1: field 'text' is NoneType" in r.err


def test_sources_range_past_end(tmp_path, run_script):
    (tmp_path / "c.txt").write_text("short file")
    (tmp_path / "s.jsonl").write_text(json.dumps({"offset": 0, "length": 5}) + "\n" +
                                      json.dumps({"offset": 5, "length": 100, "path": "b"}) + "\n")
    r = run_script("prepare_text", tmp_path / "c.txt", "--sources", tmp_path / "s.jsonl", "--out-dir", tmp_path / "o",
                   expect=1)
    assert "byte range 5..105 of 'b' is past the end" in r.err


def test_slimpajama_broken_chunk_names_file(tmp_path, run_script):
    d = tmp_path / "sp" / "train" / "chunk1"
    d.mkdir(parents=True)
    recs = [{"text": t, "meta": {"redpajama_set_name": "RedPajamaC4"}} for t in DOCS]
    offsets = zst_frames(d / "example_train_0.jsonl.zst", [recs[:4], recs[4:8], recs[8:]])
    p = d / "example_train_0.jsonl.zst"
    raw = bytearray(p.read_bytes())
    raw[offsets[2] : offsets[2] + 4] = b"\x00" * 4
    p.write_bytes(bytes(raw))
    r = run_script("prepare_slimpajama", "--input-dir", tmp_path / "sp", "--out-dir", tmp_path / "o", expect=1)
    assert f"{p}:line 9: corrupt zstd frame" in r.err
    r = run_script("prepare_slimpajama", "--input-dir", tmp_path / "sp", "--out-dir", tmp_path / "o2",
                   "--skip-bad-records")
    assert "bad records skipped 1" in r.out and "documents 8," in r.out


# the flags --help must list: every script that writes token shards takes the shard ones;
# prepare_hellaswag writes one .vpmc file (no shards, no worker pool), inspect_shard reads shards
SHARD_FLAGS = ("--out-dir", "--tokenizer", "--shard-size", "--workers", "--skip-bad-records", "--no-progress")
HELP_FLAGS = {"prepare_hellaswag": ("--out-dir", "--tokenizer", "--tokenizer-path", "--split", "--input", "--no-progress"),
              "inspect_shard": ()}


@pytest.mark.parametrize("script", ["prepare_tinyshakespeare", "prepare_text", "prepare_openwebtext",
                                    "prepare_slimpajama", "prepare_pile", "prepare_fineweb", "prepare_hellaswag",
                                    "inspect_shard"])
def test_help(script):
    r = subprocess.run([sys.executable, os.path.join(SCRIPTS, f"{script}.py"), "--help"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "usage:" in r.stdout
    for flag in HELP_FLAGS.get(script, SHARD_FLAGS):
        assert flag in r.stdout, (script, flag)
