"""The token shard format the C++ trainer reads, plus a pure-Python reader/validator.

Format (llm.c-compatible):
  header: 256 little-endian int32
      [0] = 20240520 (magic)
      [1] = version: 1 -> tokens are uint16 (llm.c), 2 -> tokens are uint32 (valuepath,
            for vocabularies larger than 65,536)
      [2] = number of tokens
      [3..255] = 0
  body:   the tokens, little-endian, nothing after them.

CLI (from the repo root):
  PYTHONPATH=scripts python -m vp_data.shards inspect data/tinyshakespeare/*.bin
  PYTHONPATH=scripts python -m vp_data.shards validate 'data/slimpajama/*.bin' --vocab-size 50277
  (or: python scripts/inspect_shard.py FILE ...)
"""

from __future__ import annotations

import argparse
import errno
import glob
import json
import os
import shutil
import sys
from dataclasses import dataclass

import numpy as np

from . import DataError
from .cache import sha256_file

MAGIC = 20240520
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
VERSION_U16 = 1
VERSION_U32 = 2
_DTYPES = {VERSION_U16: np.dtype("<u2"), VERSION_U32: np.dtype("<u4")}


def version_for_vocab(vocab_size: int) -> int:
    """uint16 whenever every id fits (GPT-2 50257, NeoX 50277, Llama-2 32000 all do)."""
    return VERSION_U16 if vocab_size <= 65536 else VERSION_U32


def dtype_for_version(version: int) -> np.dtype:
    try:
        return _DTYPES[version]
    except KeyError:
        raise DataError(f"unknown shard version {version} (expected 1 or 2)") from None


def make_header(num_tokens: int, version: int) -> bytes:
    if num_tokens >= 2**31:
        # The count is an int32 in the header; llm.c has the same limit.
        raise DataError(f"a shard cannot hold {num_tokens} tokens (max {2**31 - 1}); lower --shard-size")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0] = MAGIC
    header[1] = version
    header[2] = num_tokens
    return header.tobytes()


# Indirection so a test can simulate a full disk without filling one.
def _write_chunk(f, data) -> None:
    f.write(data)


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def tmp_name(path: str) -> str:
    # Ends in ".tmp", so a glob for "*.bin" never picks up a half-written shard.
    return path + ".tmp"


def write_atomic(path: str, chunks, nbytes: int) -> None:
    """Write `chunks` to `path` so that `path` either does not exist or is complete.

    We write `path.tmp`, fsync it, then rename it over `path`: a crash or a full disk
    leaves at most a `.tmp` file, never a shard with a valid-looking header and missing
    tokens.
    """
    directory = os.path.dirname(os.path.abspath(path))
    free = shutil.disk_usage(directory).free
    if free < nbytes:
        raise DataError(
            f"disk full: writing {path} needs {nbytes:,} bytes but only {free:,} are free in {directory}; "
            f"free some space and re-run the same command (finished shards are kept)"
        )
    tmp = tmp_name(path)
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                _write_chunk(f, chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:  # also Ctrl-C: never leave the .tmp behind
        try:
            os.remove(tmp)
        except OSError:
            pass
        if not isinstance(e, OSError):
            raise
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DataError(
                f"disk full while writing {path} ({nbytes:,} bytes): {e.strerror}; the partial file was removed; "
                f"free some space and re-run the same command (finished shards are kept)"
            ) from None
        raise DataError(f"cannot write {path}: {e}") from None
    _fsync_dir(directory)


def write_shard(path: str, tokens, version: int) -> None:
    """Write one shard atomically. `tokens`: any integer array-like; ids that do not fit the
    version's dtype are an error (numpy's cast would silently wrap them)."""
    dtype = dtype_for_version(version)
    arr = np.asarray(tokens)
    if arr.dtype != dtype and arr.size:
        if not np.issubdtype(arr.dtype, np.integer):
            raise DataError(f"{path}: tokens must be integers, got {arr.dtype}")
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi > np.iinfo(dtype).max:
            raise DataError(f"{path}: token ids {lo}..{hi} do not fit version {version} ({dtype.name}); "
                            f"use version 2 for vocabularies over 65,536")
    tokens = np.ascontiguousarray(arr, dtype=dtype)
    header = make_header(len(tokens), version)
    write_atomic(path, [header, memoryview(tokens).cast("B")], HEADER_BYTES + tokens.nbytes)


@dataclass
class ShardInfo:
    path: str
    version: int
    num_tokens: int
    dtype: np.dtype


def read_header(path: str) -> ShardInfo:
    """Validate the header and the file size; raise DataError naming what is wrong."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            raw = f.read(HEADER_BYTES)
    except OSError as e:
        raise DataError(f"cannot read shard {path}: {e}") from None
    if len(raw) < HEADER_BYTES:
        raise DataError(f"{path}: file is {size} bytes, shorter than the {HEADER_BYTES}-byte header")
    header = np.frombuffer(raw, dtype="<i4")
    if header[0] != MAGIC:
        raise DataError(f"{path}: bad magic {int(header[0])} (expected {MAGIC}); not a token shard")
    version = int(header[1])
    if version not in _DTYPES:
        raise DataError(f"{path}: unsupported version {version} (expected 1=uint16 or 2=uint32)")
    n = int(header[2])
    if n < 0:
        raise DataError(f"{path}: negative token count {n}")
    if np.any(header[3:] != 0):
        raise DataError(f"{path}: header words 3..255 must be zero")
    dtype = _DTYPES[version]
    expected = HEADER_BYTES + n * dtype.itemsize
    if size != expected:
        raise DataError(
            f"{path}: header says {n} tokens ({expected} bytes in all) but the file is {size} bytes"
        )
    return ShardInfo(path, version, n, dtype)


def read_shard(path: str, vocab_size: int | None = None) -> np.ndarray:
    """Return the tokens of a validated shard (memory-mapped, read-only)."""
    info = read_header(path)
    tokens = np.memmap(path, dtype=info.dtype, mode="r", offset=HEADER_BYTES, shape=(info.num_tokens,))
    if vocab_size is not None and info.num_tokens:
        top = int(tokens.max())
        if top >= vocab_size:
            raise DataError(f"{path}: token id {top} is out of range for vocab size {vocab_size}")
    return tokens


def is_valid_shard(path: str) -> bool:
    try:
        read_header(path)
        return True
    except DataError:
        return False


def _expand(patterns):
    out = []
    for p in patterns:
        hits = sorted(glob.glob(p))
        if not hits:
            raise DataError(f"no file matches {p}")
        out.extend(hits)
    return out


def _manifest_hashes(files) -> dict:
    """{absolute shard path: sha256} from the pipeline's manifests (*.manifest.json) in the shards'
    directories; shards no manifest lists (llm.c's, hand-made) are simply not in it.

    A manifest that lists one of `files` also says whether its set is whole: a run that was
    interrupted (not "complete"), or a split of which a listed shard is missing, would otherwise
    pass as valid and train on part of the data."""
    hashes = {}
    given = {os.path.abspath(f) for f in files}
    for d in sorted({os.path.dirname(os.path.abspath(f)) for f in files}):
        for m in sorted(glob.glob(os.path.join(d, "*.manifest.json"))):
            try:
                with open(m) as f:
                    man = json.load(f)
                listed = [e for st in man.get("streams", {}).values() for e in st.get("shards", [])]
                entries = [(os.path.join(d, e["file"]), e.get("split"), e.get("sha256")) for e in listed]
            except (OSError, ValueError, AttributeError, KeyError, TypeError, RecursionError) as e:
                raise DataError(f"{m}: unreadable manifest ({e}); move it away to validate without it") from None
            ours = {split for path, split, _ in entries if path in given}
            if not ours:
                continue  # another data set's manifest
            if not man.get("complete"):
                raise DataError(f"{m}: the run that writes these shards did not finish (the manifest says it is "
                                f"incomplete); re-run the same prepare command, which resumes it")
            for path, split, sha in entries:
                if split in ours and path not in given:
                    raise DataError(f"{path}: listed in {m} but not among the shards given"
                                    f"{' (it is missing)' if not os.path.exists(path) else ''}; re-run the "
                                    f"prepare command that wrote it, which re-creates it, or validate the whole "
                                    f"split")
                if sha:
                    hashes[path] = sha
    return hashes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m vp_data.shards",
        description="Inspect or validate valuepath/llm.c token shards (.bin).",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    ins = sub.add_parser("inspect", help="print each shard's header and first tokens")
    ins.add_argument("files", nargs="+", help="shard files or globs")
    ins.add_argument("-n", "--num", type=int, default=16, help="how many leading tokens to print (default 16)")
    ins.add_argument("--vptok", help="a .vptok file: also print the first tokens decoded as text")
    val = sub.add_parser("validate", help="check headers, sizes, (optionally) token range, and each shard's "
                         "sha256 where a PREFIX.manifest.json beside it records one")
    val.add_argument("files", nargs="+", help="shard files or globs")
    val.add_argument("--vocab-size", type=int, help="fail if a token id is >= this")
    val.add_argument("--seq-len", type=int, default=1,
                     help="fail if a shard holds fewer than this + 1 tokens, which the trainer refuses for "
                          "--seq-len T (default 1: a shard with no sequence at any T, 0 or 1 tokens, fails)")
    args = ap.parse_args(argv)
    if args.cmd == "validate" and args.seq_len < 1:
        ap.error(f"--seq-len {args.seq_len}: give the trainer's --seq-len, 1 or more")
    try:
        files = _expand(args.files)
        if args.cmd == "inspect":
            pieces = None
            if args.vptok:
                from .tokenizer import read_vptok

                pieces = read_vptok(args.vptok)["pieces"]
            for path in files:
                info = read_header(path)
                toks = read_shard(path)
                head = [int(t) for t in toks[: args.num]]
                print(
                    f"{path}: magic={MAGIC} version={info.version} ({info.dtype.name}) "
                    f"tokens={info.num_tokens:,} bytes={os.path.getsize(path):,}"
                )
                print(f"  first {len(head)} tokens: {head}")
                if pieces is not None:
                    top = max(head, default=-1)
                    if top >= len(pieces):
                        raise DataError(f"{path}: token id {top} is not in {args.vptok} ({len(pieces):,} tokens); "
                                        f"pass the .vptok written beside these shards by the prepare script")
                    text = b"".join(pieces[t] for t in head).decode("utf-8", errors="replace")
                    print(f"  decoded: {text!r}")
        else:
            total, hashed = 0, 0
            recorded = _manifest_hashes(files)
            for path in files:
                toks = read_shard(path, vocab_size=args.vocab_size)
                if len(toks) < args.seq_len + 1:
                    raise DataError(f"{path}: {len(toks):,} tokens, fewer than the {args.seq_len + 1:,} of one sequence "
                                    f"of --seq-len {args.seq_len} with its target: the trainer refuses the shard; "
                                    f"remove it, or re-run the prepare script with a larger --shard-size")
                total += len(toks)
                want = recorded.get(os.path.abspath(path))
                if want is not None:
                    if sha256_file(path) != want:
                        raise DataError(f"{path}: its sha256 does not match the manifest's (damaged since it was "
                                        f"written); re-run the prepare script that wrote it, which re-creates it")
                    hashed += 1
                print(f"ok {path}: {len(toks):,} tokens" + (", sha256 as in the manifest" if want else ""))
            print(f"{len(files)} shard(s), {total:,} tokens, all valid ({hashed} checked against a manifest's sha256)")
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
