"""Helpers shared by the data-pipeline tests (fixtures live in conftest.py)."""

import gzip
import hashlib
import json
import os

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(REPO, "scripts")


def expected_stream(ref_encode, name, docs):
    out = []
    for d in docs:
        out.extend(ref_encode(name, d))
    return np.array(out, dtype=np.int64)


def first_by_quota(ref_encode, name, records, quota, key=lambda r: "*"):
    """Texts of the records a token budget takes, in order: a record whose key(record) has a
    quota is taken while that key's token count is below it, so each key overshoots by at most
    one document (the scripts' --budget and --val-tokens rule)."""
    counts, take = {}, []
    for r in records:
        k = key(r)
        if k in quota and counts.get(k, 0) < quota[k]:
            counts[k] = counts.get(k, 0) + len(ref_encode(name, r["text"]))
            take.append(r["text"])
    return take


def shard_files(out_dir, prefix, split):
    return sorted(
        os.path.join(out_dir, f)
        for f in os.listdir(out_dir)
        if f.startswith(f"{prefix}_{split}_") and f.endswith(".bin")
    )


def read_tokens(out_dir, prefix, split):
    """All tokens of one split, in shard order, validated by the pure-Python reader."""
    from vp_data.shards import read_shard

    files = shard_files(out_dir, prefix, split)
    assert files, f"no {prefix}_{split}_*.bin in {out_dir}: {os.listdir(out_dir)}"
    return np.concatenate([np.asarray(read_shard(f), dtype=np.int64) for f in files])


def all_files_digest(out_dir):
    out = {}
    for f in sorted(os.listdir(out_dir)):
        if f.endswith(".bin") or f.endswith(".vptok"):
            with open(os.path.join(out_dir, f), "rb") as fh:
                out[f] = hashlib.sha256(fh.read()).hexdigest()
    return out


def write_jsonl_gz(path, records):
    with gzip.open(path, "wb") as f:
        for r in records:
            f.write(json.dumps(r).encode() + b"\n")


def write_jsonl_zst(path, records, frames=1):
    """SlimPajama-style chunk; `frames` > 1 splits it into several zstd frames."""
    import zstandard

    lines = [json.dumps(r).encode() + b"\n" for r in records]
    cctx = zstandard.ZstdCompressor(level=3, write_checksum=True)
    per = max(1, -(-len(lines) // frames))
    with open(path, "wb") as f:
        for i in range(0, len(lines), per):
            f.write(cctx.compress(b"".join(lines[i : i + per])))
