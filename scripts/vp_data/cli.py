"""Command-line pieces shared by every prepare_* script."""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import re
import sys

from . import DataError


def integer(s: str) -> int:
    """A whole number, also written 1e8 / 20e9 / 2.5e9 (token counts are given that way). inf, nan
    and fractions such as 1.5 are refused rather than truncated."""
    try:
        return int(s)  # exact, however large
    except ValueError:
        pass
    try:
        f = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number (e.g. 1000 or 1e9), got {s!r}") from None
    if not math.isfinite(f) or not f.is_integer():
        raise argparse.ArgumentTypeError(f"expected a whole number (e.g. 1000 or 1e9), got {s!r}")
    return int(f)


def positive_int(s: str) -> int:
    v = integer(s)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {s!r}")
    return v


def nonneg_int(s: str) -> int:
    v = integer(s)
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {s!r}")
    return v


def shard_size_arg(s: str) -> int:
    """Checked here, not at the first full shard: the header holds the token count as an int32,
    and the last shard of a split may grow by a folded tail (pipeline.FOLD_MAX). The least is
    pipeline.MIN_SHARD_SIZE: the trainer needs T+1 tokens in a shard (T = --seq-len, at least 1),
    so one-token shards could be trained on at no --seq-len, which `shards validate --seq-len`
    only says after the whole run."""
    from .pipeline import MAX_SHARD_SIZE, MIN_SHARD_SIZE

    v = integer(s)
    if v < MIN_SHARD_SIZE:
        raise argparse.ArgumentTypeError(f"at least {MIN_SHARD_SIZE} tokens (the trainer reads a sequence of "
                                         f"--seq-len T tokens and its target, T+1, from one shard), got {s!r}; "
                                         f"the default 1e8 is a good size")
    if v > MAX_SHARD_SIZE:
        raise argparse.ArgumentTypeError(f"at most {MAX_SHARD_SIZE:,} tokens (the shard header's count is an "
                                         f"int32), got {s!r}; the default 1e8 is a good size")
    return v


def head_tokens_arg(s: str) -> int:
    """--val-tokens of a head split (the first N tokens are val): one shard holds all of them, and
    its header's count is an int32. 0 is no val; 1 would be a val shard that no --seq-len can read
    (the trainer needs T+1 tokens, pipeline.MIN_SHARD_SIZE)."""
    from .pipeline import MAX_HEAD_TOKENS, MIN_SHARD_SIZE

    v = nonneg_int(s)
    if 0 < v < MIN_SHARD_SIZE:
        raise argparse.ArgumentTypeError(f"at least {MIN_SHARD_SIZE} tokens, or 0 for no val (the trainer reads a "
                                         f"sequence and its target, T+1 tokens, from one shard), got {s!r}")
    if v > MAX_HEAD_TOKENS:
        raise argparse.ArgumentTypeError(f"at most {MAX_HEAD_TOKENS:,} tokens (the val split is one shard, and its "
                                         f"header's count is an int32), got {s!r}")
    return v


def fraction(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction, got {s!r}") from None
    if not 0.0 <= v < 1.0:
        raise argparse.ArgumentTypeError(f"expected 0 <= fraction < 1, got {s!r}")
    return v


def tokenizer_name(s: str) -> str:
    """--tokenizer: an unknown name is a usage error (exit 2, with the valid names), found before
    anything is read, as for every other bad flag value; it was a data error (exit 1) found later."""
    from .tokenizer import canonical_name

    try:
        return canonical_name(s)
    except DataError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_common_args(ap: argparse.ArgumentParser, *, out_dir: str, tokenizer: str, shard_size: int) -> None:
    """`out_dir` is the default shown in --help; "data/<name>" means "derived from --name"."""
    g = ap.add_argument_group("output and running")
    g.add_argument("--out-dir", default=None if "<" in out_dir else out_dir,
                   help=f"where shards, the manifest and the .vptok file go (default {out_dir})")
    g.add_argument("--tokenizer", type=tokenizer_name, default=tokenizer,
                   help=f"gpt2 | neox | llama2 (default {tokenizer})")
    g.add_argument("--tokenizer-path", help="tokenizer file (tokenizer.json / tokenizer.model) or, for gpt2, the "
                   "directory with encoder.json + vocab.bpe; default: the cache ($VALUEPATH_CACHE/tokenizers/...)")
    g.add_argument("--shard-size", type=shard_size_arg, default=shard_size,
                   help=f"tokens per shard (default {shard_size:,}; the last shard of a split is smaller)")
    g.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                   help="tokenizer processes (default: number of CPUs; 1 = no pool); the output does not depend on it")
    g.add_argument("--skip-bad-records", action="store_true",
                   help="skip (and count) invalid JSON lines, records without the text field, bad UTF-8 and "
                   "corrupt compressed streams instead of stopping at the first one")
    g.add_argument("--overwrite", action="store_true",
                   help="replace existing shards of this name made with different inputs/flags (default: refuse)")
    g.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    g.add_argument("--stop-after-shards", type=positive_int, metavar="N",
                   help="stop (exit code 3) after writing N new shards, as if interrupted; for testing resume")


def job_kwargs(args) -> dict:
    return dict(
        shard_size=args.shard_size,
        workers=args.workers,
        progress=not args.no_progress,
        skip_bad_records=args.skip_bad_records,
        overwrite=args.overwrite,
        stop_after_shards=args.stop_after_shards,
    )


def file_identity(path: str, root: str | None = None) -> dict:
    """What the resume check compares for an input file: its name (relative to `root`, so
    moving the whole input tree or the cache is fine) and its size (not the mtime, which a
    copy changes)."""
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise DataError(f"cannot stat input {path}: {e}") from None
    name = os.path.relpath(path, root) if root else os.path.basename(path)
    return {"name": name, "size": size}


def files_identity(paths: list) -> list:
    root = os.path.commonpath([os.path.dirname(os.path.abspath(p)) for p in paths]) if paths else None
    return [file_identity(os.path.abspath(p), root) for p in paths]


def hash01(text: str, seed: int) -> float:
    """A document's place in [0, 1) from its content: the val/train split of a document
    never depends on its position, worker timing or the Python hash seed, and exact
    duplicates always land on the same side."""
    h = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8, key=str(seed).encode())
    return int.from_bytes(h.digest(), "little") / 2**64


def slug(s: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")
    return s or "data"


def run(main, argv=None) -> int:
    """Run a script's main(argv), turning DataError into a one-line message and exit 1."""
    try:
        return main(argv)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # an --out-dir that is a file, a full disk, a permission: say which path
        print(f"error: {e.strerror or e} ({e.filename or 'no file named'}); check the paths and free space, "
              f"or choose another --out-dir", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Ctrl-C outside Job.run's main loop (loading a tokenizer or a dataset, checking old shards):
        # nothing half-written is left (shards and the manifest are written atomically).
        print("\ninterrupted; finished shards are kept; re-run the same command to resume", file=sys.stderr)
        return 130


def warn_if_all_val(job, val_tokens: int, fix: str) -> None:
    """A head split that took every token: no train shard was written, which the trainer would only
    report as 'no token shards match'."""
    if not any(s == "train" for s in job.outputs()):
        print(f"warning: all {job.totals()['tokens']:,} tokens went to val (--val-tokens {val_tokens:,}); {fix}",
              file=sys.stderr)


def warn_if_no_val(job, fix: str) -> None:
    """A val split was asked for (a hash fraction > 0, a validation split) but no document went
    to it: training works, but without a val loss, which is easy to miss in a long run."""
    if not any(s.startswith("val") for s in job.outputs()):
        print(f"warning: no document went to val, so no val shard was written; {fix}", file=sys.stderr)
