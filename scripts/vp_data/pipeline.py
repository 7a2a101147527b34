"""The driver every prepare_* script uses: read documents, tokenize them in parallel,
append them to shard streams, write shards atomically, and resume after interruption.

Vocabulary
  source   an ordered document iterator (one input split: "the train chunks", "the Gutenberg
           file", ...). Sources run one after the other.
  stream   one output sequence of shards: "main" (val head + train), "train", "val_arxiv",
           ... A router function sends each document to a stream (or drops it) before it
           is tokenized, so routing never depends on worker timing.
  position (source number, document number): a document's place in the input, which is
           the same on every run over the same inputs.

Determinism. Documents are batched in input order, batches are tokenized by a pool and the
results are consumed strictly in submission order (a window of AsyncResults), so the
output is identical for any --workers value. Tokenizing one document does not depend on
any other, so the batching cannot change the tokens either.

Resuming. After every finished shard the manifest (`<prefix>.manifest.json`) records, per
stream, its shards and the position + token offset where the next shard starts (plus the
per-domain token counts used for budgets). A re-run with the same inputs and flags
checks the finished shards, skips every document before each stream's resume position
without tokenizing it, and drops the first `offset` tokens of the document at it. The
result is byte-identical to an uninterrupted run. Shards are written to `<name>.tmp` and
renamed, so an interrupted write never leaves a complete-looking shard. The fingerprint has
the inputs' names and sizes only, so the document at each resume point is checked against a
digest in the manifest (doc_digest): an input replaced by other content of the same size (a
reshuffled export) is refused, not mixed in; an edit before the resume point alone is not seen.
Every stream's resume point is checked before the run writes its first shard (see
Job._before_write), so a refused resume has written nothing and the earlier inputs still resume;
the exception is a change between two streams' resume points that moves a token budget's stop
before the later one, found only when the stop is reached (the message then says --overwrite).
"""

from __future__ import annotations

import collections
import hashlib
import json
import multiprocessing
import os
import re
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from . import DataError
from .cache import sha256_file
from .readers import BadRecords, Doc, normalize_newlines, strip_gutenberg
from .shards import HEADER_BYTES, make_header, read_header, read_shard, version_for_vocab, write_atomic
from .tokenizer import VPTOK_VERSION, TokenizerSpec, build, export_vptok, vptok_version

MANIFEST_FORMAT = "valuepath-shards-manifest"
MANIFEST_VERSION = 1
DEFAULT_SHARD_SIZE = 100_000_000  # tokens per shard, as llm.c's fineweb.py
BATCH_DOCS = 256  # documents per task sent to a worker
BATCH_CHARS = 4_000_000  # ... or this many characters, whichever comes first
# A split's last shard is whatever is left over: with a budget that is a multiple of --shard-size,
# only the last document's overshoot. The trainer refuses a shard with fewer than T+1 tokens and
# T can be up to 2^20 (MAX_SEQ in host/config.h), so a tail below fold_limit() is appended to the
# previous shard of the same split instead: 2^20 tokens is about 1% of the default shard, and half
# a shard bounds the growth for the small --shard-size values tests use.
FOLD_MAX = 2**20
# The header's token count is an int32, and a shard can grow by up to FOLD_MAX tokens.
MAX_SHARD_SIZE = 2**31 - 1 - FOLD_MAX
# The trainer reads T+1 tokens (a sequence and its target) from one shard, and T is at least 1.
MIN_SHARD_SIZE = 2
# The val head shard (StreamSpec.head_tokens) is never folded into, so it may hold a full int32.
MAX_HEAD_TOKENS = 2**31 - 1
# Shard numbers have six digits (000000 to 999999): a seventh would sort shard 1,000,000's name
# between _100000 and _100001, and the trainer reads a data set's shards in name (byte) order.
MAX_SHARDS = 1_000_000
# The longest file name (bytes) of ext4, XFS, btrfs, tmpfs and most other file systems.
NAME_MAX = 255


def fold_limit(shard_size: int) -> int:
    """A last shard with fewer tokens than this goes into the previous one. Never less than
    MIN_SHARD_SIZE: at --shard-size 2 or 3 half a shard is 1, and a one-token tail would be a shard
    that no --seq-len can read."""
    return max(MIN_SHARD_SIZE, min(FOLD_MAX + 1, shard_size // 2))


def doc_digest(toks: np.ndarray) -> str:
    """What a shard's resume point records of the document it falls in: BLAKE2b-128 of the
    document's token ids as little-endian uint32 (delimiter included). The manifest's fingerprint
    has only the inputs' names and sizes (hashing many GB of inputs on every run is too slow), so a
    file replaced by other content of the same size (a reshuffled export) passes it; the document
    at the resume point then differs, and a resume that would mix the two contents is refused.
    One small hash per shard, of tokens the run has anyway."""
    return hashlib.blake2b(np.ascontiguousarray(toks, dtype="<u4").tobytes(), digest_size=16).hexdigest()


def split_name_problem(prefix: str, split: str) -> str | None:
    """Why `split` cannot be the split part of a shard's file name (PREFIX_SPLIT_NNNNNN.bin), or None.
    Asked when a stream is first made, before any tokenizing: a val set named after a domain value
    (a --domain-field that holds the text) used to fail only when its first shard was written."""
    if not split or "/" in split or "\0" in split:
        return "a file name part cannot be empty or hold '/' or NUL"
    longest = f"{prefix}_{split}_{MAX_SHARDS - 1:06d}.bin.tmp"
    n = len(longest.encode("utf-8", "surrogatepass"))
    if n > NAME_MAX:
        return f"its shard files would have names of {n:,} bytes, and a file system allows {NAME_MAX}"
    return None


class InputsChanged(DataError):
    """A resume found other documents than the earlier run had at its resume point."""


class StopRequested(Exception):
    """--stop-after-shards reached (used by tests to simulate an interrupted run)."""


# ---------------------------------------------------------------- streams

@dataclass
class StreamSpec:
    name: str  # stream id used in the manifest: "main", "train", "val_arxiv", ...
    split: str  # the split part of regular shard file names: "train", "val_arxiv", ...
    head_tokens: int = 0  # >0: the first shard holds exactly this many tokens (llm.c: val first)
    head_split: str = "val"
    quota: dict | None = None  # key -> max tokens ("*" = any key); None = unlimited


class Stream:
    def __init__(self, spec: StreamSpec, job: "Job"):
        if spec.head_tokens > MAX_HEAD_TOKENS:
            # found at the first document, not after tokenizing 2^31 tokens into memory
            raise DataError(f"--val-tokens {spec.head_tokens:,}: the val split is one shard, whose header counts at "
                            f"most {MAX_HEAD_TOKENS:,} tokens (an int32); ask for fewer, or use --val-split hash")
        budget = sum(spec.quota.values()) if spec.quota else 0
        if budget // job.shard_size > MAX_SHARDS:
            # a budget says so before anything is read (without one, Stream.filename says it at that shard)
            raise DataError(f"{budget:,} tokens at --shard-size {job.shard_size:,} make more than {MAX_SHARDS:,} "
                            f"shards, but shard names have six digits (a longer one would sort among the others, "
                            f"out of order); use a larger --shard-size")
        self.spec = spec
        self.job = job
        self.shards: list[dict] = []
        self.finished = False
        self.resume_pos: tuple | None = None  # skip documents before this position
        self.resume_off = 0  # ... and this many tokens of the document at it
        self.resume_doc: str | None = None  # ... whose doc_digest this must be (None: not recorded)
        self.counts: dict[str, int] = {}  # tokens accepted per quota key
        self.docs = 0  # documents accepted (the one a shard ends in included)
        self.parts: list[np.ndarray] = []
        self.fill = 0

    # -- naming / sizes
    def _index(self) -> int:
        return len(self.shards)

    def capacity(self) -> int:
        if self.spec.head_tokens and self._index() == 0:
            return self.spec.head_tokens
        return self.job.shard_size

    def split_name(self, i: int) -> str:
        if self.spec.head_tokens and i == 0:
            return self.spec.head_split
        return self.spec.split

    def filename(self, i: int) -> str:
        if i >= MAX_SHARDS:
            raise DataError(f"'{self.job.prefix}' needs more than {MAX_SHARDS:,} shards at --shard-size "
                            f"{self.job.shard_size:,}, but shard names have six digits (a longer one would sort "
                            f"among the others, out of order); re-run with a larger --shard-size and --overwrite")
        return f"{self.job.prefix}_{self.split_name(i)}_{i:06d}.bin"

    # -- quotas
    def _qkey(self, key):
        q = self.spec.quota
        return "*" if "*" in q else key

    def key_full(self, key) -> bool:
        q = self.spec.quota
        if q is None:
            return False
        k = self._qkey(key)
        return k not in q or self.counts.get(k, 0) >= q[k]

    def full(self) -> bool:
        if self.finished:
            return True
        if self.resume_pos is not None:
            # Resuming: the document the last shard ended in still has tokens to append,
            # even if the budget was already reached when it was accepted.
            return False
        q = self.spec.quota
        return q is not None and all(self.counts.get(k, 0) >= v for k, v in q.items())

    def accept(self, key, ntok: int) -> bool:
        """Take the whole document if its quota key still has room (a budget may be
        overshot by at most one document per key)."""
        if self.spec.quota is not None:
            if self.key_full(key):
                return False
            k = self._qkey(key)
            self.counts[k] = self.counts.get(k, 0) + ntok
        self.docs += 1
        return True

    # -- writing
    def append(self, toks: np.ndarray, pos: tuple, start_off: int) -> None:
        """Append the document's tokens from `start_off` on (the whole document is passed so that a
        shard ending inside it can record its digest: see doc_digest)."""
        i, n = start_off, len(toks)
        digest = None  # made once, at the first shard that ends in this document: one long
        while i < n:   # document (--doc-split file) may hold hundreds of shard ends
            take = min(self.capacity() - self.fill, n - i)
            self.parts.append(toks[i : i + take])
            self.fill += take
            i += take
            if self.fill == self.capacity():
                digest = digest or doc_digest(toks)
                self._flush([pos[0], pos[1], i], digest)

    def _flush(self, resume, resume_doc: str | None = None) -> None:
        self.job._before_write()
        i = self._index()
        path = os.path.join(self.job.out_dir, self.filename(i))
        version = self.job.shard_version
        dtype = self.job.dtype
        header = make_header(self.fill, version)
        # the parts themselves (views of the tokenized documents; ascontiguousarray copies none of
        # them), not bytes copies of them: a shard of 2^31 uint32 tokens would need 8 GB twice
        chunks = [header] + [memoryview(np.ascontiguousarray(p, dtype=dtype)).cast("B") for p in self.parts]
        h = hashlib.sha256()
        for c in chunks:
            h.update(c)
        write_atomic(path, chunks, HEADER_BYTES + self.fill * dtype.itemsize)
        entry = {
            "file": os.path.basename(path),
            "split": self.split_name(i),
            "tokens": self.fill,
            "sha256": h.hexdigest(),
            "resume": resume,  # None: the stream's last shard
            "docs": self.docs,
            "counts": dict(self.counts),
        }
        if resume is not None:
            entry["resume_doc"] = resume_doc
        self.shards.append(entry)
        self.parts = []
        self.fill = 0
        self.job.on_shard_written(self)

    def finish(self) -> None:
        if self.finished:
            return
        if self.fill:
            prev = self.shards[-1] if self.shards else None
            if (prev is not None and prev["split"] == self.split_name(self._index())
                    and self.fill < fold_limit(self.job.shard_size)):
                self._fold_into(prev)
            self._flush(None)
        self.finished = True
        self.job.save_manifest()

    def _fold_into(self, prev: dict) -> None:
        """Put the previous shard's tokens back in front of the tail, so that the next _flush
        rewrites that shard (atomically, under the same name) with the tail appended. An
        interruption in between leaves a shard that disagrees with the manifest, which the
        next run redoes from the shard before it: the result is the same bytes."""
        toks = np.array(read_shard(os.path.join(self.job.out_dir, prev["file"])))
        self.shards.pop()
        self.parts.insert(0, toks)
        self.fill += len(toks)

    # -- manifest
    def to_json(self) -> dict:
        return {"split": self.spec.split, "shards": self.shards, "finished": self.finished}

    def restore(self, st: dict, out_dir: str) -> int:
        """Keep the longest prefix of intact shards; returns how many were kept."""
        kept = []
        for e in st.get("shards", []):
            path = os.path.join(out_dir, e["file"])
            try:
                info = read_header(path)
            except DataError:
                break
            if info.num_tokens != e["tokens"] or info.version != self.job.shard_version:
                break
            # a bit flipped inside the tokens leaves the header and size intact: the manifest's
            # hash is what tells (one read of each kept shard, only when a run is resumed)
            if e.get("sha256") and sha256_file(path) != e["sha256"]:
                print(f"note: {e['file']} does not match the sha256 in the manifest (damaged since it was written); "
                      f"writing it and the shards after it again", file=sys.stderr)
                break
            kept.append(e)
            if e["resume"] is None:
                break
        self.shards = kept
        self.finished = bool(st.get("finished")) and len(kept) == len(st.get("shards", []))
        if kept:
            last = kept[-1]
            self.docs = last["docs"]
            self.counts = dict(last["counts"])
            if last["resume"] is None:
                self.finished = True
            else:
                self.resume_pos = (last["resume"][0], last["resume"][1])
                self.resume_off = last["resume"][2]
                # manifests written before the digest was recorded resume unchecked
                self.resume_doc = last.get("resume_doc")
        return len(kept)


# ---------------------------------------------------------------- manifest structure

class ManifestDamaged(ValueError):
    """A manifest that is valid JSON of our format but not of the structure this code writes."""


def check_manifest(m: dict) -> None:
    """Check every field a resume reads, in one place, before anything uses it. Without this a hand
    edit (a shard's "split" null, "docs" a list, a count a string) passed the reading and failed
    later in arithmetic or sorting, with a traceback, or resumed on garbage."""

    def fail(where, what):
        raise ManifestDamaged(f"{where}: {what}")

    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    def is_name(v):  # of a stream or split: part of shard file names
        return isinstance(v, str) and len(v) <= NAME_MAX and re.fullmatch(r"[a-z0-9_]+", v) is not None

    def get(d, key, where, kinds, need=True, what=None):
        """d[key] if it is one of `kinds` (a missing key is None, allowed unless `need`)."""
        if key not in d:
            if need:
                fail(where, f"no {key!r}")
            return None
        v = d[key]
        if not kinds(v):
            fail(f"{where}.{key}", f"{v!r:.60} is not {what}")
        return v

    if "complete" in m and not isinstance(m["complete"], bool):
        fail("complete", f"{m['complete']!r:.60} is not true or false")
    streams = m.get("streams", {})
    if not isinstance(streams, dict):
        fail("streams", "not an object")
    for name, st in streams.items():
        where = f"streams.{name}"
        # a stream's name becomes part of its shard file names
        if not is_name(name):
            fail(where, "not a stream name (lowercase letters, digits and '_')")
        if not isinstance(st, dict):
            fail(where, "not an object")
        get(st, "finished", where, lambda v: isinstance(v, bool), need=False, what="true or false")
        shards = get(st, "shards", where, lambda v: isinstance(v, list), need=False, what="a list")
        for i, e in enumerate(shards or []):
            w = f"{where}.shards[{i}]"
            if not isinstance(e, dict):
                fail(w, "not an object")
            get(e, "file", w, lambda v: isinstance(v, str) and v not in ("", ".", "..") and "/" not in v
                and "\0" not in v, what="a file name")
            get(e, "split", w, is_name, what="a split name")
            get(e, "tokens", w, is_int, what="a count")
            get(e, "docs", w, is_int, what="a count")
            get(e, "sha256", w, lambda v: v is None or isinstance(v, str), need=False, what="a hash")
            get(e, "resume_doc", w, lambda v: v is None or isinstance(v, str), need=False, what="a hash")
            get(e, "resume", w, lambda v: v is None or (isinstance(v, list) and len(v) == 3 and all(map(is_int, v))),
                what="null or [source, document, offset]")
            get(e, "counts", w, lambda v: isinstance(v, dict) and all(map(is_int, v.values())),
                what="an object of counts")
    sources = m.get("sources") or {}
    if not isinstance(sources, dict):
        fail("sources", "not an object")
    for k, d in sources.items():
        where = f"sources.{k}"
        if not k.isdigit():
            fail(where, "not a source number")
        if not isinstance(d, dict):
            fail(where, "not an object")
        get(d, "stop", where, lambda v: v is None or (isinstance(v, list) and len(v) == 2 and all(map(is_int, v))),
            need=False, what="null or [source, document]")
        get(d, "done", where, lambda v: isinstance(v, bool), need=False, what="true or false")
        get(d, "fed", where, lambda v: isinstance(v, list) and all(map(is_name, v)), need=False,
            what="a list of stream names")


# ---------------------------------------------------------------- sources

@dataclass
class Source:
    name: str
    open: Callable[[BadRecords], Iterator[Doc]]  # called lazily: a skipped source costs nothing
    # stream name, or None to drop the document. A function of the document alone (its text, key),
    # never of what came before it: a resume skips documents, and the resume check
    # (Job._check_resume_points) calls it again for the documents at the resume points.
    route: Callable[[Doc], str | None]
    # Budgeted streams: once all are full the source stops early, for every stream it feeds
    # (see Job._consume). They only decide where it stops; which streams a source feeds is
    # whatever its route returns, recorded as it reads (SourceState.fed).
    targets: list | None = None


@dataclass
class SourceState:
    """What the manifest remembers about one source between runs."""

    # The position of the document after which every target was full: later documents of the
    # source go to no stream. Fixed in consumption order, so it does not depend on --workers,
    # and kept so that a resumed run stops at the same place.
    stop: tuple | None = None
    done: bool = False  # read to its end (or to `stop`) in some run
    fed: set = field(default_factory=set)  # every stream a document was routed to

    def to_json(self) -> dict:
        return {"stop": list(self.stop) if self.stop else None, "done": self.done, "fed": sorted(self.fed)}

    @classmethod
    def from_json(cls, d) -> "SourceState":
        if not isinstance(d, dict):
            return cls()
        stop = d.get("stop")
        return cls(stop=tuple(stop) if stop else None, done=bool(d.get("done")), fed=set(d.get("fed") or ()))


# ---------------------------------------------------------------- workers

_WORKER: dict = {}


def transform_text(text: str, tf: tuple) -> str:
    strip_pg, norm_nl = tf
    if norm_nl:
        text = normalize_newlines(text)
    if strip_pg:
        text = strip_gutenberg(text)
    return text


def _init_worker(spec: TokenizerSpec, tf: tuple) -> None:
    # The parent handles Ctrl-C and terminates the pool; workers must not die mid-task
    # with a KeyboardInterrupt traceback each.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one process per core already
    if _WORKER.get("spec") != spec:  # with fork the parent's tokenizer is inherited
        _WORKER["tok"] = build(spec)
        _WORKER["spec"] = spec
    _WORKER["tf"] = tf


def _encode_batch(texts: list) -> list:
    tok, tf = _WORKER["tok"], _WORKER["tf"]
    out = []
    for t in texts:
        t = transform_text(t, tf)
        out.append(tok.encode_doc(t) if t else None)
    return out


class _Done:
    """Stands in for an AsyncResult when tokenizing in-process (--workers 1)."""

    def __init__(self, value):
        self.value = value

    def ready(self):
        return True

    def get(self):
        return self.value


# ---------------------------------------------------------------- the job

@dataclass
class Stats:
    read: int = 0
    dropped: int = 0
    empty: int = 0
    rejected: int = 0
    tokens_this_run: int = 0
    shards_this_run: int = 0


def check_dataset_name(prefix: str) -> None:
    """Shards are <prefix>_train_NNNNNN.bin, <prefix>_val_NNNNNN.bin and <prefix>_val_<domain>_...,
    and the trainer reads them by glob. A prefix with a _train or _val part makes two datasets' names
    overlap: 'web_val' writes web_val_train_000000.bin, which the glob of 'web''s val set
    ('web_val_*.bin') takes as val data (and 'web --overwrite' would delete as its own)."""
    clash = re.search(r"_(train|val)(_|$)", prefix)
    if clash:
        owner = prefix[:clash.start()]
        raise DataError(f"the dataset name '{prefix}' has a '_{clash.group(1)}' part: its shards would match the globs "
                        f"of dataset '{owner}' ('{owner}_{clash.group(1)}_*.bin'); pass "
                        f"--name without it (for example '{prefix.replace('_', '-')}')")


class Job:
    def __init__(
        self,
        *,
        out_dir: str,
        prefix: str,
        tokenizer: TokenizerSpec,
        config: dict,
        stream_factory: Callable[[str], StreamSpec],
        shard_size: int = DEFAULT_SHARD_SIZE,
        workers: int = 1,
        progress: bool = True,
        skip_bad_records: bool = False,
        overwrite: bool = False,
        stop_after_shards: int | None = None,
        strip_gutenberg: bool = False,
        normalize_newlines: bool = False,
        progress_total: int | None = None,
    ):
        if shard_size < MIN_SHARD_SIZE:  # the flag refuses it (cli.shard_size_arg); this is for other callers
            raise DataError(f"--shard-size must be at least {MIN_SHARD_SIZE} (the trainer needs T+1 tokens in a "
                            f"shard), got {shard_size}")
        check_dataset_name(prefix)
        self.out_dir = out_dir
        self.prefix = prefix
        self.spec = tokenizer
        self.stream_factory = stream_factory
        self.shard_size = shard_size
        self.workers = max(1, workers)
        self.progress = progress
        self.bad = BadRecords(skip_bad_records)
        self.overwrite = overwrite
        self.stop_after_shards = stop_after_shards
        self.tf = (bool(strip_gutenberg), bool(normalize_newlines))
        self.progress_total = progress_total
        self.streams: dict[str, Stream] = {}
        self.sources: dict[int, SourceState] = {}
        self.stats = Stats()
        self.reused = 0
        self.bar = None
        self.tok = None
        # Everything that changes the bytes written; not --workers/--no-progress.
        self.config = dict(config)
        self.config["tokenizer"] = tokenizer.fingerprint()
        self.config["shard_size"] = shard_size
        self.config["transform"] = {"strip_gutenberg": self.tf[0], "normalize_newlines": self.tf[1]}
        self.fingerprint = hashlib.sha256(json.dumps(self.config, sort_keys=True).encode()).hexdigest()
        self.manifest_path = os.path.join(out_dir, f"{prefix}.manifest.json")
        self.complete = False
        self.vptok_name = f"{tokenizer.name}.vptok"
        self._closed: list = []
        self._workers: list = []  # the pool's processes, watched for one that dies (see _check_workers)
        self._source_names: list = []
        self._sources: list = []
        self._resume_checked = False  # every resume point this run has to pass is known good

    # -- streams
    def stream(self, name: str) -> Stream:
        s = self.streams.get(name)
        if s is None:
            spec = self.stream_factory(name)
            for split in (spec.split, spec.head_split) if spec.head_tokens else (spec.split,):
                problem = split_name_problem(self.prefix, split)
                if problem:  # a script checks its own names first, with a hint that fits (domains.py)
                    raise DataError(f"cannot name the shards of stream '{name[:60]}'"
                                    f"{'...' if len(name) > 60 else ''}: {problem}")
            s = self.streams[name] = Stream(spec, self)
        return s

    @property
    def dtype(self):
        return self._dtype

    # -- manifest
    def _own_files(self) -> list:
        """This dataset's shards (and debris of interrupted writes): exactly the names Stream.filename
        makes. A bare prefix match would take another dataset's files whose name starts with ours
        (dataset `web` and `web_c4_train_000000.bin`), and --overwrite would delete them."""
        if not os.path.isdir(self.out_dir):
            return []
        own = re.compile(rf"{re.escape(self.prefix)}_(?:train|val|val_[a-z0-9]+)_\d{{6}}\.bin(?:\.tmp)?")
        return sorted(f for f in os.listdir(self.out_dir) if own.fullmatch(f))

    def _load_manifest(self) -> None:
        os.makedirs(self.out_dir, exist_ok=True)
        # Leftovers of an interrupted write; never valid.
        for f in self._own_files():
            if f.endswith(".tmp"):
                os.remove(os.path.join(self.out_dir, f))
        m, unreadable = None, None
        if os.path.exists(self.manifest_path):
            try:
                with open(self.manifest_path) as f:
                    m = json.load(f)
                if not isinstance(m, dict) or m.get("format") != MANIFEST_FORMAT:
                    raise ValueError("not a valuepath manifest")
            except (OSError, ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError too; RecursionError: nested JSON
                m, unreadable = None, str(e)
        if unreadable is not None and not self.overwrite:
            raise DataError(f"{self.manifest_path}: unreadable ({unreadable}); pass --overwrite to start over "
                            f"(it replaces the '{self.prefix}' shards beside it)")
        stale = unreadable is not None or (m is not None and m.get("fingerprint") != self.fingerprint)
        if stale and not self.overwrite:
            raise DataError(
                f"{self.out_dir} already holds '{self.prefix}' shards made from different inputs or flags "
                f"(see {self.manifest_path}); pass --overwrite to replace them, or use another --out-dir/--name"
            )
        own = [f for f in self._own_files() if f.endswith(".bin")]
        if m is None and own and not self.overwrite:
            listed = ", ".join(own[:3]) + (f" and {len(own) - 3} more" if len(own) > 3 else "")
            raise DataError(
                f"{self.out_dir} holds shards of '{self.prefix}' ({listed}) but no manifest to resume from; "
                f"pass --overwrite to replace them"
            )
        if self.overwrite and (m is None or stale):
            self._remove_own()
            m = None
        if m is None:
            return
        try:
            check_manifest(m)
            all_kept = self._restore(m)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            # valid JSON of the right format, but not the structure this code writes (edited by hand)
            if not self.overwrite:
                what = str(e) if isinstance(e, ManifestDamaged) else f"{type(e).__name__}: {e}"
                raise DataError(f"{self.manifest_path}: damaged ({what}); pass --overwrite to "
                                f"start over (it replaces the '{self.prefix}' shards beside it)") from None
            self.streams, self.sources, self.reused = {}, {}, 0
            self._remove_own()
            return
        self.complete = bool(m.get("complete")) and all_kept
        if not all_kept:
            print(f"note: some shards listed in {self.manifest_path} are missing or damaged; redoing them",
                  file=sys.stderr)

    def _remove_own(self) -> None:
        for f in self._own_files():
            os.remove(os.path.join(self.out_dir, f))
        if os.path.exists(self.manifest_path):
            os.remove(self.manifest_path)

    def _restore(self, m: dict) -> bool:
        """Streams and sources from a manifest; True when every shard it lists was kept."""
        all_kept = True
        self.sources = {int(k): SourceState.from_json(v) for k, v in (m.get("sources") or {}).items()}
        for name, st in m.get("streams", {}).items():
            s = self.stream(name)
            kept = s.restore(st, self.out_dir)
            self.reused += kept
            all_kept &= kept == len(st.get("shards", []))
        return all_kept

    def save_manifest(self, stats: dict | None = None) -> None:
        m = {
            "format": MANIFEST_FORMAT,
            "version": MANIFEST_VERSION,
            "fingerprint": self.fingerprint,
            "complete": self.complete,
            "prefix": self.prefix,
            "tokenizer": {
                "name": self.spec.name,
                "vocab_size": self.tok.vocab_size if self.tok else None,
                "delimiter": self.tok.eot if self.tok else None,
                "shard_version": self.shard_version,
                "vptok": self.vptok_name,
            },
            "config": self.config,
            "streams": {n: s.to_json() for n, s in sorted(self.streams.items())},
            "sources": {str(k): v.to_json() for k, v in sorted(self.sources.items())},
        }
        if stats is not None:
            m["stats"] = stats
        data = (json.dumps(m, indent=1, sort_keys=True) + "\n").encode()
        write_atomic(self.manifest_path, [data], len(data))

    def on_shard_written(self, stream: Stream) -> None:
        self.stats.shards_this_run += 1
        self.save_manifest()
        if self.stop_after_shards is not None and self.stats.shards_this_run >= self.stop_after_shards:
            raise StopRequested()

    # -- totals
    def totals(self) -> dict:
        docs = sum(s.docs for s in self.streams.values())
        tokens = sum(e["tokens"] for s in self.streams.values() for e in s.shards)
        shards = sum(len(s.shards) for s in self.streams.values())
        return {"documents": docs, "tokens": tokens, "shards": shards}

    def outputs(self) -> dict:
        """split name -> (number of shards, tokens), for the summary."""
        out: dict = {}
        for s in self.streams.values():
            for e in s.shards:
                n, t = out.get(e["split"], (0, 0))
                out[e["split"]] = (n + 1, t + e["tokens"])
        return dict(sorted(out.items()))

    # -- running
    def run(self, sources: list) -> int:
        try:
            return self._run(sources)
        except InputsChanged:
            if not self.overwrite:
                raise
        # Found while resuming (the names and sizes of the inputs match, so the manifest was taken
        # for ours): --overwrite means start again, as it does for a manifest of other inputs.
        print("note: the inputs changed since the earlier run; --overwrite: starting again", file=sys.stderr)
        self._remove_own()
        self.streams, self.sources, self.reused, self.complete = {}, {}, 0, False
        self.stats = Stats()
        self.bad = BadRecords(self.bad.skip, self.bad.max_warnings)
        return self._run(sources)  # nothing to resume now, so this cannot come back here

    def _run(self, sources: list) -> int:
        t0 = time.time()
        self.tok = build(self.spec)
        # uint16 shards whenever the vocabulary fits (all three supported tokenizers do).
        self.shard_version = version_for_vocab(self.tok.vocab_size)
        self._dtype = self.tok.dtype
        self._load_manifest()
        if self.complete:
            vptok = os.path.join(self.out_dir, self.vptok_name)
            # a file from before vptok version 2 decodes but cannot encode --sample-prompt
            if not os.path.exists(vptok) or vptok_version(vptok) != VPTOK_VERSION:
                export_vptok(self.tok, vptok)
            self._summary(t0, note="already complete, nothing to do")
            return 0
        _WORKER.update(tok=self.tok, spec=self.spec, tf=self.tf)
        self._source_names = [src.name for src in sources]
        self._sources = list(sources)
        self._resume_checked = False
        self._workers = []
        pool = None
        if self.workers > 1:
            # Fork before tqdm starts its monitor thread and before the parent encodes
            # anything (HF tokenizers starts a thread pool on first use): forking a
            # process with running threads is unsafe. Loading a tokenizer starts none.
            method = "fork" if sys.platform.startswith("linux") else "spawn"
            ctx = multiprocessing.get_context(method)
            before = {p.pid for p in ctx.active_children()}
            pool = ctx.Pool(self.workers, initializer=_init_worker, initargs=(self.spec, self.tf))
            # multiprocessing.Pool quietly replaces a worker that dies (the OOM killer, a kill -9), but
            # the batch it held is lost and its result never comes: the run would wait forever. The
            # pool's processes are this process's new children (Pool keeps them in a private list).
            self._workers = [p for p in ctx.active_children() if p.pid not in before]
        ok = False
        try:
            export_vptok(self.tok, os.path.join(self.out_dir, self.vptok_name))
            self._open_bar()
            for sno, src in enumerate(sources):
                st = self.sources.setdefault(sno, SourceState())
                # Skip a source only when every stream it fed is finished: a source whose budgeted
                # streams are full may still owe documents to another (a val split read in the
                # same pass), which an interruption between two streams' last shards loses.
                if st.done and all(self.stream(n).finished for n in st.fed):
                    continue
                self._run_source(sno, src, pool)
                st.done = True
            for s in self.streams.values():
                # A resume point in a source this run did not read (one more input in the manifest than
                # now): finishing the stream would mark it complete without the rest of its documents.
                if not s.finished and s.resume_pos is not None:
                    raise self._inputs_changed(f"{self._source_name(s.resume_pos[0])}, where stream "
                                               f"{s.spec.name} resumes, was not read")
            for s in list(self.streams.values()):
                s.finish()
            if not self.totals()["tokens"]:
                # Not a success: a trainer pointed at this directory would only say "no shards match".
                st = self.stats
                raise DataError(
                    f"no tokens to write: {st.read:,} document(s) read, {self.bad.count:,} bad record(s) skipped, "
                    f"{st.empty:,} empty, {st.dropped:,} left out by the split or domain filter; check the inputs "
                    f"and the flags that pick the text (--text-field, --format, --doc-split, --domains)"
                )
            self.complete = True
            seconds = time.time() - t0
            self.save_manifest(stats={**self.totals(), "seconds": round(seconds, 3)})
            self._warn_unreadable_shards()
            ok = True
        except StopRequested:
            self._close(pool, terminate=True)
            print(f"stopped after {self.stats.shards_this_run} shard(s) as asked (--stop-after-shards); "
                  f"re-run without it to resume", file=sys.stderr)
            self._summary(t0)
            return 3
        except KeyboardInterrupt:
            self._close(pool, terminate=True)
            print(f"\ninterrupted; {self.totals()['shards']} finished shard(s) are kept in {self.out_dir}; "
                  f"re-run the same command to resume", file=sys.stderr)
            return 130
        finally:
            # On any error (bad record, full disk, ...) stop the workers at once; finished
            # shards and the manifest on disk stay valid for a re-run.
            self._close(pool, terminate=not ok)
        self._summary(t0)
        return 0

    def _open_bar(self) -> None:
        if not self.progress:
            return
        from tqdm import tqdm

        tty = sys.stderr.isatty()
        self.bar = tqdm(
            total=self.progress_total,
            unit="tok",
            unit_scale=True,
            desc=self.prefix,
            file=sys.stderr,
            mininterval=0.5 if tty else 15.0,
            dynamic_ncols=tty,
        )

    def _close(self, pool, terminate: bool) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if pool is not None and pool not in self._closed:
            self._closed.append(pool)
            if terminate:
                pool.terminate()
            else:
                pool.close()
            pool.join()

    def _batches(self, sno: int, src: Source):
        meta, texts, chars = [], [], 0
        st = self.sources[sno]
        for dno, doc in enumerate(src.open(self.bad)):
            pos = (sno, dno)
            # The stop is found while consuming, which lags reading by a few batches; what was
            # read past it is dropped in _consume.
            if st.stop is not None and pos > st.stop:
                break
            self.stats.read += 1
            name = src.route(doc)
            if name is None:
                self.stats.dropped += 1
                continue
            s = self.stream(name)
            st.fed.add(name)
            if s.finished:
                continue
            if s.resume_pos is not None:
                if pos < s.resume_pos:
                    continue  # already in a finished shard: not even tokenized
            elif s.key_full(doc.key):
                continue  # its budget is spent (budgets only fill up, so this is safe)
            meta.append((pos, s, doc.key))
            texts.append(doc.text)
            chars += len(doc.text)
            if len(texts) >= BATCH_DOCS or chars >= BATCH_CHARS:
                yield meta, texts
                meta, texts, chars = [], [], 0
        if texts:
            yield meta, texts

    def _run_source(self, sno: int, src: Source, pool) -> None:
        st = self.sources[sno]
        targets = [self.stream(t) for t in src.targets] if src.targets else None
        pending = collections.deque()
        window = 2 * self.workers + 2
        for meta, texts in self._batches(sno, src):
            if pool is not None:
                pending.append((meta, pool.apply_async(_encode_batch, (texts,))))
            else:
                pending.append((meta, _Done(_encode_batch(texts))))
            # Consume strictly in order: output order never depends on worker timing.
            while pending and (len(pending) > window or pending[0][1].ready()):
                self._consume(st, targets, *pending.popleft())
        while pending:
            self._consume(st, targets, *pending.popleft())
        for s in self.streams.values():
            # The source ended before a stream's resume point (a shorter input): finishing that stream
            # now would leave the rest of the earlier input out without a word.
            if not s.finished and s.resume_pos is not None and s.resume_pos[0] == sno:
                if st.stop is not None and st.stop < s.resume_pos:
                    # with the same inputs the budget is met where it was, after every resume point
                    raise self._inputs_changed(f"the token budget was met at document {st.stop[1]:,} of "
                                               f"{self._source_name(sno)}, before document {s.resume_pos[1]:,}, "
                                               f"where stream {s.spec.name} resumes")
                raise self._ends_before(sno, s.resume_pos[1], s)

    def _warn_unreadable_shards(self) -> None:
        """A split whose tail could not be folded (the first train shard after a val head of
        --val-tokens, where the input left only one token for train) can end in a shard shorter
        than MIN_SHARD_SIZE, which no --seq-len can read: said here, not at the trainer's start."""
        for s in self.streams.values():
            for e in s.shards:
                if e["tokens"] < MIN_SHARD_SIZE:
                    print(f"warning: {e['file']} holds {e['tokens']} token(s), fewer than the {MIN_SHARD_SIZE} that "
                          f"one sequence of --seq-len 1 and its target need: the trainer will refuse it; give the "
                          f"{e['split']} split more text (after a val head: a smaller --val-tokens)",
                          file=sys.stderr)

    def _source_name(self, sno: int) -> str:
        name = self._source_names[sno] if sno < len(self._source_names) else ""
        return f"input '{name}'" if name else f"input {sno}"

    def _inputs_changed(self, what: str) -> DataError:
        # Every resume point is checked before the first shard of a run is written (_before_write),
        # so a change found there leaves the out dir as the earlier run left it, and restoring its
        # inputs resumes it. A change between two resume points is only seen later, when it moves a
        # budget's stop before the later one (the documents themselves carry no digest): shards of
        # the changed input may have been written by then, and only --overwrite repairs that.
        fix = ("restore the inputs of that run to resume it, or pass --overwrite to start again on these inputs"
               if not self.stats.shards_this_run else
               f"this run wrote {self.stats.shards_this_run} shard(s) from them before it could tell, so pass "
               f"--overwrite to start again")
        return InputsChanged(f"cannot resume '{self.prefix}': the inputs changed since the earlier run ({what}), "
                             f"so the shards in {self.out_dir} hold other documents; {fix}")

    def _before_write(self) -> None:
        """Called before every shard is written. While a stream has not reached its resume point, its
        document there is unchecked, and a stream that resumed earlier in the same input (or has no
        shard yet) may already be taking documents of a changed input: writing a shard from them
        leaves a mix that restoring the earlier inputs cannot undo. So the first write of a run waits
        until every resume point is known good.

        Ordinarily that costs nothing: at the interruption, every stream held less than a shard
        taken after its own resume point, so with the same inputs no stream fills a shard before the
        last resume point has been passed (and checked, in _consume). A stream that does (its shard
        redone after damage, or a changed input) is the exception, and only then are the inputs read
        ahead to the remaining resume points, without tokenizing the documents before them."""
        if self._resume_checked:
            return
        if any(not s.finished and s.resume_pos is not None for s in self.streams.values()):
            self._check_resume_points()
        self._resume_checked = True

    def _check_resume_points(self) -> None:
        """Read each source to the last resume point in it that is still ahead, and check the document
        at every one as _consume does: routed to its stream, not empty, its digest (where recorded)
        and at least `offset` tokens long. Raises InputsChanged, before anything is written."""
        ahead: dict[int, dict[int, Stream]] = {}
        for s in self.streams.values():
            if not s.finished and s.resume_pos is not None:
                ahead.setdefault(s.resume_pos[0], {})[s.resume_pos[1]] = s
        # Bad records are counted and reported by the run's own reading; an unskipped one raises here
        # as it would there.
        quiet = BadRecords(self.bad.skip, max_warnings=0)
        for sno, points in sorted(ahead.items()):
            if sno >= len(self._sources):
                s = points[min(points)]
                raise self._inputs_changed(f"{self._source_name(sno)}, where stream {s.spec.name} resumes, "
                                           f"is not among the inputs")
            src = self._sources[sno]
            left = dict(points)
            docs = src.open(quiet)
            try:
                for dno, doc in enumerate(docs):
                    s = left.pop(dno, None)
                    if s is not None:
                        self._check_resume_doc(s, (sno, dno), doc, src)
                        if not left:
                            break
            finally:
                close = getattr(docs, "close", None)  # a generator: its files are closed now, not at GC
                if close is not None:
                    close()
            if left:
                dno = min(left)
                raise self._ends_before(sno, dno, left[dno])

    def _check_resume_doc(self, s: Stream, pos: tuple, doc: Doc, src: Source) -> None:
        toks = None
        # a document now routed to another stream (or dropped) is one this stream would never see
        if src.route(doc) == s.spec.name:
            text = transform_text(doc.text, self.tf)
            toks = self.tok.encode_doc(text) if text else None
        self._check_resume_tokens(s, pos, toks)

    def _check_resume_tokens(self, s: Stream, pos: tuple, toks) -> None:
        """The tokens of the document at stream s's resume point pos (None: it is empty now, or no
        longer routed to s) must be those the earlier run stopped in: its digest (where the manifest
        has one), and at least the offset it had taken."""
        if (toks is None or (s.resume_doc is not None and doc_digest(toks) != s.resume_doc)
                or s.resume_off > len(toks)):
            raise self._inputs_changed(f"document {pos[1]:,} of {self._source_name(pos[0])}, where stream "
                                       f"{s.spec.name} resumes, is not the one it was")

    def _ends_before(self, sno: int, dno: int, s: Stream) -> DataError:
        return self._inputs_changed(f"{self._source_name(sno)} ends before document {dno:,}, where stream "
                                    f"{s.spec.name} resumes")

    def _check_workers(self) -> None:
        """A dead worker is an error whenever it is noticed (before each batch is used, and while
        waiting for one): whether it held a batch cannot be told, and one that did never answers."""
        for p in self._workers:
            code = p.exitcode  # polls (waitpid WNOHANG); None while it runs
            if code is None:
                continue
            if code < 0:
                try:
                    sig = signal.Signals(-code).name
                except ValueError:
                    sig = f"signal {-code}"
                how = f"killed by {sig}" + (": out of memory?" if -code == signal.SIGKILL else "")
            else:
                how = f"exited with code {code}"
            raise DataError(f"a tokenizer worker died ({how}); the {self.totals()['shards']} finished shard(s) in "
                            f"{self.out_dir} are kept; re-run the same command to resume (with fewer --workers if "
                            f"memory is short)")

    def _result(self, result) -> list:
        if not self._workers:
            return result.get()
        self._check_workers()
        # get() would wait forever for the batch of a worker that died: wait in short steps, looking
        # at the workers in between (a ready result returns at once, so this costs no throughput).
        while not result.ready():
            result.wait(0.1)
            self._check_workers()
        return result.get()

    def _consume(self, st: SourceState, targets, meta, result) -> None:
        arrays = self._result(result)
        ntok = 0
        for (pos, s, key), toks in zip(meta, arrays):
            if st.stop is not None and pos > st.stop:
                break  # read ahead of the stop (positions only grow within a source)
            if toks is None:
                self.stats.empty += 1
                continue
            if s.resume_pos is not None:
                if pos == s.resume_pos:
                    self._check_resume_tokens(s, pos, toks)
                    off = s.resume_off
                    s.resume_pos = None
                    s.append(toks, pos, off)  # accepted and counted before the interruption
                    ntok += len(toks) - off
                    self._check_stop(st, targets, s, pos)
                    continue
                if pos > s.resume_pos:
                    # the document at the resume point is empty now (skipped above) or the input shorter
                    raise self._inputs_changed(f"document {s.resume_pos[1]:,} of {self._source_name(pos[0])}, "
                                               f"where stream {s.spec.name} resumes, is gone")
                continue
            if not s.accept(key, len(toks)):
                self.stats.rejected += 1
                continue
            s.append(toks, pos, 0)
            ntok += len(toks)
            self._check_stop(st, targets, s, pos)
        self.stats.tokens_this_run += ntok
        if self.bar is not None:
            self.bar.update(ntok)
            self.bar.set_postfix_str(f"docs read {self.stats.read:,}", refresh=False)

    @staticmethod
    def _check_stop(st: SourceState, targets, s: Stream, pos: tuple) -> None:
        """After document `pos` went to stream `s`: if that filled the last budgeted stream, it is
        where the source stops. Decided here, in input order, never from how far reading got."""
        if st.stop is None and targets and s in targets and all(t.full() for t in targets):
            st.stop = pos

    def _summary(self, t0: float, note: str | None = None) -> None:
        seconds = time.time() - t0
        tot = self.totals()
        tps = self.stats.tokens_this_run / seconds if seconds > 0 else 0.0
        extra = ""
        if self.reused:
            extra += f" ({self.reused} reused)"
        parts = [
            f"documents {tot['documents']:,}",
            f"tokens {tot['tokens']:,}",
            f"shards {tot['shards']}{extra}",
            f"seconds {seconds:.1f}",
            f"{tps:,.0f} tokens/s",
        ]
        if self.bad.count:
            parts.append(f"bad records skipped {self.bad.count:,}")
        if self.stats.empty:
            parts.append(f"empty documents skipped {self.stats.empty:,}")
        print(f"summary: {self.prefix}: " + ", ".join(parts) + (f" [{note}]" if note else ""))
        for split, (n, t) in self.outputs().items():
            print(f"  {split}: {n} shard(s), {t:,} tokens -> {os.path.join(self.out_dir, f'{self.prefix}_{split}_*.bin')}")
        if not self.complete:
            return
        print(f"  tokenizer for decoding: {os.path.join(self.out_dir, self.vptok_name)}")

