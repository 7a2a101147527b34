"""prepare_tinyshakespeare.py from the shared-data cache: llm.c's split, byte for byte."""

import json
import os
import subprocess
import sys

import numpy as np

from vp_data import tokenizer
from vp_data.shards import read_header
from vptest import SCRIPTS, all_files_digest, read_tokens


def llmc_tokens(ref_gpt2, text):
    """llm.c dev/data/tinyshakespeare.py: EOT before the text and after every blank line,
    encoded with the special token allowed."""
    text = "<|endoftext|>" + text
    text = text.replace("\n\n", "\n\n<|endoftext|>")
    return ref_gpt2.encode(text, allowed_special={"<|endoftext|>"})


def test_tinyshakespeare_matches_llmc(tmp_path, run_script, ref_gpt2, vp_cache):
    out = tmp_path / "ts"
    r = run_script("prepare_tinyshakespeare", "--out-dir", out, "--workers", "2")
    assert "summary: tinyshakespeare: documents 7,222, tokens 338,028, shards 2" in r.out
    names = sorted(os.listdir(out))
    assert names == ["gpt2.vptok", "tinyshakespeare.manifest.json", "tinyshakespeare_train_000001.bin",
                     "tinyshakespeare_val_000000.bin"]
    with open(os.path.join(vp_cache, "tinyshakespeare", "input.txt"), encoding="utf-8") as f:
        ref = np.array(llmc_tokens(ref_gpt2, f.read()))
    val, train = read_tokens(out, "tinyshakespeare", "val"), read_tokens(out, "tinyshakespeare", "train")
    assert len(val) == 32768 and len(train) == 305_260  # llm.c: 32,768 val / 305,260 train
    assert np.array_equal(np.concatenate([val, train]), ref)
    assert read_header(str(out / "tinyshakespeare_val_000000.bin")).version == 1
    # The vptok file decodes the shards back to the text.
    pieces = tokenizer.read_vptok(str(out / "gpt2.vptok"))["pieces"]
    text = b"".join(pieces[t] for t in val[:200]).decode()
    assert text.startswith("<|endoftext|>First Citizen:\nBefore we proceed any further, hear me speak.\n\n<|endoftext|>")
    m = json.loads((out / "tinyshakespeare.manifest.json").read_text())
    assert m["complete"] and m["tokenizer"]["vptok"] == "gpt2.vptok" and m["tokenizer"]["shard_version"] == 1


def test_tinyshakespeare_rerun_and_workers(tmp_path, run_script):
    a, b = tmp_path / "a", tmp_path / "b"
    run_script("prepare_tinyshakespeare", "--out-dir", a, "--workers", "2")
    first = all_files_digest(a)
    r = run_script("prepare_tinyshakespeare", "--out-dir", a, "--workers", "2")
    assert "already complete" in r.out and "(2 reused)" in r.out
    assert all_files_digest(a) == first
    run_script("prepare_tinyshakespeare", "--out-dir", b, "--workers", "1")
    assert all_files_digest(b) == first  # the worker count never changes the bytes
    # a vptok from before version 2 (decode only) is rewritten by a rerun, the shards are not
    vptok = a / "gpt2.vptok"
    v2 = vptok.read_bytes()
    old_header = bytearray(v2[:1024])
    old_header[4:8] = (1).to_bytes(4, "little")
    old_header[16:1024] = bytes(1008)
    v1 = tokenizer.read_vptok(str(vptok))
    vptok.write_bytes(bytes(old_header) + b"".join(len(p).to_bytes(4, "little") + p for p in v1["pieces"]))
    assert tokenizer.vptok_version(str(vptok)) == 1
    r = run_script("prepare_tinyshakespeare", "--out-dir", a, "--workers", "2")
    assert "already complete" in r.out and vptok.read_bytes() == v2 and all_files_digest(a) == first


def test_tinyshakespeare_other_tokenizer_and_split(tmp_path, run_script, ref_encode, vp_cache):
    out = tmp_path / "ll"
    run_script("prepare_tinyshakespeare", "--out-dir", out, "--tokenizer", "llama2", "--val-tokens", "1000")
    with open(os.path.join(vp_cache, "tinyshakespeare", "input.txt"), encoding="utf-8") as f:
        parts = f.read().split("\n\n")
    docs = [p + "\n\n" for p in parts[:-1]] + [parts[-1]]
    ref = []
    for d in docs:
        ref.extend(ref_encode("llama2", d))
    val, train = read_tokens(out, "tinyshakespeare", "val"), read_tokens(out, "tinyshakespeare", "train")
    assert len(val) == 1000
    assert np.array_equal(np.concatenate([val, train]), np.array(ref))
    assert (out / "llama2.vptok").exists()


def test_tinyshakespeare_subprocess_offline(tmp_path, vp_cache):
    """The documented command line, as CI runs it: cache from shared data, offline."""
    env = {**os.environ, "VALUEPATH_CACHE": vp_cache, "VALUEPATH_OFFLINE": "1"}
    r = subprocess.run([sys.executable, os.path.join(SCRIPTS, "prepare_tinyshakespeare.py"), "--out-dir",
                        str(tmp_path / "o"), "--no-progress"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "tokens 338,028" in r.stdout
    # An empty cache offline: a clear error naming the missing file, exit 1.
    env["VALUEPATH_CACHE"] = str(tmp_path / "empty")
    r = subprocess.run([sys.executable, os.path.join(SCRIPTS, "prepare_tinyshakespeare.py"), "--out-dir",
                        str(tmp_path / "o2"), "--no-progress"], capture_output=True, text=True, env=env)
    assert r.returncode == 1
    assert "error:" in r.stderr and "tinyshakespeare/input.txt" in r.stderr and "offline" in r.stderr
    assert "Traceback" not in r.stderr


def test_tinyshakespeare_rerun_repairs_a_damaged_shard(tmp_path, run_script):
    """A bit flipped inside the tokens keeps the header and size: the manifest's sha256 catches it,
    `validate` says so, and re-running the script (what the trainer's hint says) re-creates the shard."""
    out = tmp_path / "ts"
    run_script("prepare_tinyshakespeare", "--out-dir", out)
    good = all_files_digest(out)
    shard = out / "tinyshakespeare_val_000000.bin"
    raw = bytearray(shard.read_bytes())
    toks = np.frombuffer(bytes(raw[1024:]), dtype="<u2")
    i = int(np.nonzero(toks[500:] < 1000)[0][0]) + 500
    raw[1024 + 2 * i] ^= 0x01  # token i changes by one, still within the vocabulary
    shard.write_bytes(bytes(raw))
    env = {**os.environ, "PYTHONPATH": SCRIPTS}
    v = subprocess.run([sys.executable, "-m", "vp_data.shards", "validate", str(out / "*.bin"), "--vocab-size", "50257"],
                       capture_output=True, text=True, env=env)
    assert v.returncode == 1 and "sha256 does not match the manifest" in v.stderr
    r = run_script("prepare_tinyshakespeare", "--out-dir", out)
    assert "does not match the sha256 in the manifest" in r.err
    assert all_files_digest(out) == good
    v = subprocess.run([sys.executable, "-m", "vp_data.shards", "validate", str(out / "*.bin")], capture_output=True,
                       text=True, env=env, check=True)
    assert "(2 checked against a manifest's sha256)" in v.stdout


def test_tinyshakespeare_all_val_warns_and_out_dir_errors_are_messages(tmp_path, run_script):
    r = run_script("prepare_tinyshakespeare", "--out-dir", tmp_path / "all_val", "--val-tokens", "100000000")
    assert "warning: all 338,028 tokens went to val" in r.err
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    r = run_script("prepare_tinyshakespeare", "--out-dir", a_file, expect=1)
    assert r.err.startswith("error: ") and "choose another --out-dir" in r.err and "Traceback" not in r.err
