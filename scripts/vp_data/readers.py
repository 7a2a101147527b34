"""Readers for every input format; each yields `Doc`s in a fixed, deterministic order.

Formats: plain text `.txt` (optionally `.gz`/`.zst`), JSON lines `.jsonl`/`.json`
(optionally `.gz`/`.zst`; C4's `*.json.gz` files are JSON lines too), Parquet, and an HF
`datasets` Dataset. Compression is detected from the file name.

Bad input is reported through a `BadRecords` policy: by default the first bad record
raises a DataError naming the file and line (or row); with --skip-bad-records it is
skipped and counted. A corrupt compressed stream (broken zstd frame, truncated gzip, a 0-byte
.gz/.zst) ends that file: we cannot find the next record boundary inside a broken frame. A
damaged Parquet page costs the rest of its row group (each row counted), and text with bytes
that are not UTF-8 the document that holds them.
"""

from __future__ import annotations

import codecs
import collections
import gzip
import json
import os
import re
import sys
import zlib
from dataclasses import dataclass
from typing import Iterator

from . import DataError

CHUNK = 1 << 20


@dataclass
class Doc:
    text: str
    where: str  # "file:line N" / "file: row N" for messages
    key: str | None = None  # domain, e.g. SlimPajama's meta.redpajama_set_name


class BadRecords:
    """What to do with a bad record: raise (default) or skip and count."""

    def __init__(self, skip: bool = False, max_warnings: int = 10):
        self.skip = skip
        self.count = 0  # records skipped
        self.warned = 0  # messages: one may stand for many records
        self.max_warnings = max_warnings

    def __call__(self, where: str, msg: str, records: int = 1) -> None:
        """`records`: how many records this skips, where that is known (the rest of a Parquet row
        group); the summary's count is what was skipped, not how many messages were printed."""
        if not self.skip:
            raise DataError(f"{where}: {msg} (pass --skip-bad-records to skip and count such records)")
        self.count += records
        self.warned += 1
        if self.warned <= self.max_warnings:
            print(f"warning: skipped bad record: {where}: {msg}", file=sys.stderr)
            if self.warned == self.max_warnings:
                print("warning: (further bad-record warnings suppressed; see the summary count)", file=sys.stderr)


class _Corrupt(Exception):
    """Raised by the decompressors; turned into a bad record by the callers."""


def compression_of(path: str) -> str | None:
    p = path.lower()
    if p.endswith(".gz"):
        return "gzip"
    if p.endswith(".zst") or p.endswith(".zstd"):
        return "zstd"
    return None


def base_name(path: str) -> str:
    """File name without the compression suffix: a.jsonl.zst -> a.jsonl."""
    p = os.path.basename(path)
    for suf in (".gz", ".zst", ".zstd"):
        if p.lower().endswith(suf):
            return p[: -len(suf)]
    return p


def _zstd_chunks(f) -> Iterator[bytes]:
    # Frame by frame with decompressobj instead of zstandard's stream_reader: the stream
    # reader silently stops at a truncated frame, which would hide a broken download.
    import zstandard

    # zstd refuses by default a frame whose window is over 128 MB (window log 27), but `zstd --long=31`
    # (and the library's window_log=31) writes valid frames with a window up to 2 GB; its own CLI reads
    # them with --long=31 (= --memory=2GB). Only a frame that needs it gets the memory.
    dctx = zstandard.ZstdDecompressor(max_window_size=2**31)
    dobj = None
    while True:
        buf = f.read(CHUNK)
        if not buf:
            break
        while buf:
            if dobj is None:
                dobj = dctx.decompressobj()
            try:
                out = dobj.decompress(buf)
            except zstandard.ZstdError as e:
                raise _Corrupt(f"corrupt zstd frame: {e}") from None
            if out:
                yield out
            if dobj.eof:  # frame done; the rest of buf starts the next frame
                buf = dobj.unused_data
                dobj = None
            else:
                buf = b""
    if dobj is not None:
        raise _Corrupt("truncated zstd frame (the file ends in the middle of a frame)")


def byte_chunks(path: str) -> Iterator[bytes]:
    """Decompressed bytes of `path`, in chunks. Raises _Corrupt on a broken stream."""
    comp = compression_of(path)
    try:
        with open(path, "rb") as f:
            if comp is not None and os.fstat(f.fileno()).st_size == 0:
                # gzip and zstd readers take an empty file for an empty stream, but no compressor
                # writes 0 bytes (an empty input still gets a header): this is an interrupted copy
                # or download, not an empty corpus
                raise _Corrupt(f"the file is empty (0 bytes), which is not a valid {comp} stream (an interrupted copy "
                               f"or download?)")
            if comp == "zstd":
                yield from _zstd_chunks(f)
            elif comp == "gzip":
                g = gzip.GzipFile(fileobj=f)
                while True:
                    try:
                        b = g.read(CHUNK)
                    except (EOFError, OSError, zlib.error) as e:
                        raise _Corrupt(f"corrupt gzip stream: {e}") from None
                    if not b:
                        break
                    yield b
            else:
                while True:
                    b = f.read(CHUNK)
                    if not b:
                        break
                    yield b
    except FileNotFoundError:
        raise DataError(f"input file not found: {path}") from None
    except IsADirectoryError:
        raise DataError(f"{path} is a directory, expected a file") from None
    except PermissionError as e:
        raise DataError(f"cannot read {path}: {e}") from None


def iter_lines(path: str, bad: BadRecords) -> Iterator[tuple[int, bytes]]:
    """(line number starting at 1, line bytes without the newline)."""
    lineno = 0
    # The unfinished line, as the chunks that hold it: a line of hundreds of MB (one huge record)
    # is joined once, not copied and rescanned at every chunk, which was quadratic in its length.
    held = []
    try:
        for chunk in byte_chunks(path):
            held.append(chunk)
            if b"\n" not in chunk:
                continue
            lines = b"".join(held).split(b"\n")
            rest = lines.pop()
            held = [rest] if rest else []
            for line in lines:
                lineno += 1
                yield lineno, line
    except _Corrupt as e:
        lost = (f"records after line {lineno} of this file could not be read" if lineno
                else "no record of this file could be read")
        bad(f"{path}:line {lineno + 1}", f"{e}; {lost}")
        return
    rest = b"".join(held)
    if rest:
        lineno += 1
        yield lineno, rest


def _get_field(obj, dotted: str):
    """obj['a']['b'] for 'a.b'; raises KeyError if absent."""
    for part in dotted.split("."):
        if isinstance(obj, str) and part != dotted:
            # Some dumps store `meta` as a JSON string rather than an object.
            try:
                obj = json.loads(obj)
            except (ValueError, RecursionError):  # RecursionError: nested deeper than Python's stack
                raise KeyError(part) from None
        if not isinstance(obj, dict) or part not in obj:
            raise KeyError(part)
        obj = obj[part]
    return obj


def _text_and_key(rec, where, text_field, key_field, key_required, bad):
    if not isinstance(rec, dict):
        bad(where, f"expected a JSON object, got {type(rec).__name__}")
        return None
    try:
        text = _get_field(rec, text_field)
    except KeyError:
        bad(where, f"record has no text field {text_field!r} (keys: {', '.join(sorted(rec))[:200]})")
        return None
    if not isinstance(text, str):
        bad(where, f"field {text_field!r} is {type(text).__name__}, not a string")
        return None
    key = None
    if key_field:
        try:
            key = _get_field(rec, key_field)
        except KeyError:
            if key_required:
                # only domain-tagged corpora ask for a key (domains.py): say how to do without it
                bad(where, f"record has no field {key_field!r} (pass --default-domain NAME to use NAME for "
                           f"such records, or --domain-field to name the field)")
                return None
            key = None
        if key is not None and not isinstance(key, str):
            bad(where, f"field {key_field!r} is {type(key).__name__}, not a string")
            return None
    return text, key


def read_jsonl(path: str, bad: BadRecords, text_field: str = "text", key_field: str | None = None,
               key_required: bool = False) -> Iterator[Doc]:
    for lineno, line in iter_lines(path, bad):
        if not line.strip():
            continue  # blank lines (e.g. a trailing newline) are not records
        where = f"{path}:line {lineno}"
        try:
            rec = json.loads(line)
        except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
            bad(where, f"invalid JSON: {e}")
            continue
        except RecursionError:
            # valid JSON nested deeper than the parser's recursion limit ('[' * 200000): no text
            # corpus writes that, and it cannot be read without a stack that deep
            bad(where, "JSON nested too deeply to read (thousands of levels of [ or {)")
            continue
        r = _text_and_key(rec, where, text_field, key_field, key_required, bad)
        if r is not None:
            yield Doc(r[0], where, r[1])


def read_parquet(path: str, bad: BadRecords, text_field: str = "text", key_field: str | None = None,
                 key_required: bool = False, batch_size: int = 1024) -> Iterator[Doc]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        open(path, "rb").close()  # a missing file, a directory, no permission: the user's to fix, not skippable
    except FileNotFoundError:
        raise DataError(f"input file not found: {path}") from None
    except IsADirectoryError:
        raise DataError(f"{path} is a directory, expected a file") from None
    except OSError as e:
        raise DataError(f"cannot read {path}: {e}") from None
    try:
        # Checks each page's CRC where the writer stored one (pyarrow's write_page_checksum): a damaged
        # page is then an error instead of garbage text. Pages written without a CRC are not checked;
        # a flipped byte inside one can still decode as other text, which nothing here can tell.
        pf = pq.ParquetFile(path, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as e:
        # no readable footer (a truncated copy, a 0-byte file, not Parquet at all): like a broken
        # compressed stream, no row of the file can be found
        bad(path, f"cannot read as Parquet: {e}; no row of this file could be read")
        return
    names = pf.schema_arrow.names
    tcol = text_field.split(".")[0]
    if tcol not in names:
        raise DataError(f"{path}: no column {tcol!r} for the text field (columns: {', '.join(names)}); use --text-field")
    cols = [tcol]
    kcol = key_field.split(".")[0] if key_field else None
    if kcol and kcol in names and kcol != tcol:
        cols.append(kcol)
    meta = pf.metadata
    row = 0
    # Row group by row group: the footer holds where each one starts, so a damaged page costs only
    # the rest of its row group, and the message can say which one.
    for g in range(meta.num_row_groups):
        end = row + meta.row_group(g).num_rows
        try:
            for batch in pf.iter_batches(batch_size=batch_size, columns=cols, row_groups=[g]):
                for rec in _batch_rows(batch):
                    where = f"{path}: row {row}"
                    row += 1
                    if isinstance(rec, UnicodeDecodeError):
                        bad(where, f"invalid UTF-8 in a string column: {rec}")
                        continue
                    r = _text_and_key(rec, where, text_field, key_field, key_required, bad)
                    if r is not None:
                        yield Doc(r[0], where, r[1])
        except (pa.ArrowException, OSError) as e:
            # A damaged page: pyarrow raises a plain OSError for most ("Corrupt snappy compressed
            # data.", a page header that does not parse, a CRC mismatch), ArrowInvalid for others.
            # The rows of this row group not yet read are lost, and counted as such.
            lost = max(end - row, 1)
            bad(f"{path}: row {row} (row group {g} of {meta.num_row_groups})",
                f"corrupt Parquet data: {e}; rows {row} to {row + lost - 1} (the rest of the row group) could "
                f"not be read",
                records=lost)
            row = max(end, row + 1)


def _batch_rows(batch) -> list:
    """A record batch as dicts. pyarrow does not check that a string column is UTF-8 when it reads
    one, only when it converts it, and then fails the whole batch: the rows are converted one by
    one, so that each bad row (its UnicodeDecodeError in its place) is a bad record of its own."""
    try:
        return batch.to_pylist()
    except UnicodeDecodeError:
        rows = []
        for i in range(batch.num_rows):
            try:
                rows.append(batch.slice(i, 1).to_pylist()[0])
            except UnicodeDecodeError as e:
                rows.append(e)
        return rows


def read_hf_dataset(ds, name: str, bad: BadRecords, text_field: str = "text", batch_size: int = 1000) -> Iterator[Doc]:
    """Rows of an HF `datasets.Dataset` in their stored order."""
    if text_field not in ds.column_names:
        raise DataError(f"dataset {name}: no column {text_field!r} (columns: {', '.join(ds.column_names)})")
    row = 0
    for batch in ds.select_columns([text_field]).iter(batch_size=batch_size):
        for text in batch[text_field]:
            where = f"{name}: row {row}"
            row += 1
            if not isinstance(text, str):
                bad(where, f"field {text_field!r} is {type(text).__name__}, not a string")
                continue
            yield Doc(text, where)


# ---------------------------------------------------------------- plain text

SPLIT_MODES = ("file", "blank-line", "line", "eot")
EOT_MARK = "<|endoftext|>"


# What the "surrogateescape" error handler makes of bytes that are not UTF-8: one lone surrogate
# per byte, which no valid UTF-8 decodes to (strict UTF-8 refuses encoded surrogates too). A run of
# them is one entry of `bad_at` below.
_ESCAPED = re.compile("[\udc80-\udcff]+")


def _decoded(path: str, bad: BadRecords, normalize_newlines: bool, bad_at: collections.deque) -> Iterator[str]:
    """UTF-8 text of a file in chunks; CRLF/CR -> LF when asked (before any splitting).

    A byte that is not UTF-8 stays in the text as a lone surrogate (surrogateescape), and the file
    offset of each run of them is appended to `bad_at`, in order: the document it ends up in is the
    bad record (read_text), where replacing it and going on would keep a damaged document and
    count only the first bad byte of the file."""
    dec = codecs.getincrementaldecoder("utf-8")("surrogateescape")
    offset = 0  # bytes read
    done = 0  # bytes decoded into text (the decoder holds back an incomplete character)
    hold_cr = False
    run_open = False  # the text so far ends in a bad byte: a run at the start of the next piece continues it

    def note_bad(s: str) -> None:
        nonlocal run_open
        if not s:
            return
        # The common case, text with no bad byte, at C speed: ASCII, or text that strict UTF-8 can
        # encode (a lone surrogate cannot be). The regex below runs at about a tenth of a strict
        # decode's speed and, in the main process, would bound many --workers.
        if s.isascii():
            run_open = False
            return
        try:
            s.encode("utf-8")
            run_open = False
            return
        except UnicodeEncodeError:
            pass
        at, pos = done, 0
        for m in _ESCAPED.finditer(s):
            at += len(s[pos : m.start()].encode("utf-8", "surrogateescape"))  # bytes up to the run
            pos = m.start()
            if not (m.start() == 0 and run_open):
                bad_at.append(at)
        run_open = bool(_ESCAPED.match(s[-1]))

    try:
        for chunk in byte_chunks(path):
            s = dec.decode(chunk)
            offset += len(chunk)
            note_bad(s)
            done = offset - len(dec.getstate()[0])
            if normalize_newlines:
                if hold_cr:
                    s = "\r" + s
                hold_cr = s.endswith("\r")
                if hold_cr:  # might be the first half of a CRLF split across chunks
                    s = s[:-1]
                s = s.replace("\r\n", "\n").replace("\r", "\n")
            if s:
                yield s
    except _Corrupt as e:
        lost = "the rest of this file could not be read" if offset else "nothing of this file could be read"
        bad(f"{path}: byte {offset}", f"{e}; {lost}")
    tail = dec.decode(b"", final=True)  # an incomplete character at the end: escaped, so bad
    note_bad(tail)
    if hold_cr:
        tail = "\r" + tail
    if normalize_newlines:
        tail = tail.replace("\r\n", "\n").replace("\r", "\n")
    if tail:
        yield tail


def split_stream(chunks: Iterator[str], delim: str, keep: bool) -> Iterator[str]:
    """Split a chunked string at `delim` exactly like "".join(chunks).split(delim).

    Left-to-right, non-overlapping, like str.split; with keep=True the delimiter stays
    at the end of each piece (llm.c's TinyShakespeare convention for "\\n\\n").
    """
    # The text since the last delimiter, as the chunks that hold it. It contains no delimiter, so
    # a new one ends in the next chunk and starts at most len(delim) - 1 characters before it (in
    # `edge`): each chunk is searched once, where searching all that is held at every chunk was
    # quadratic in a piece's length (a document of hundreds of MB).
    held, edge, k = [], "", len(delim) - 1
    for chunk in chunks:
        held.append(chunk)
        if delim not in edge + chunk:
            edge = (edge + chunk)[-k:] if k else ""
            continue
        parts = "".join(held).split(delim)
        rest = parts.pop()
        held, edge = [rest], rest[-k:] if k else ""
        for p in parts:
            yield p + delim if keep else p
    yield "".join(held)


def read_text(path: str, bad: BadRecords, split: str = "file", normalize_newlines: bool = False) -> Iterator[Doc]:
    """A text file as documents: the whole file, blank-line sections, lines, or
    `<|endoftext|>`-separated stories (TinyStories' format)."""
    bad_at = collections.deque()  # file offsets of the bytes that are not UTF-8, not yet reported
    chunks = _decoded(path, bad, normalize_newlines, bad_at)
    if split == "file":
        text = "".join(chunks)
        if not bad_at:
            yield Doc(text, f"{path}")
        else:
            bad(f"{path}: byte {bad_at[0]}", "invalid UTF-8")
        return
    if split == "blank-line":
        pieces = split_stream(chunks, "\n\n", keep=True)
    elif split == "line":
        pieces = (p[:-1] if p.endswith("\r") else p for p in split_stream(chunks, "\n", keep=False))
    elif split == "eot":
        pieces = (p.strip() for p in split_stream(chunks, EOT_MARK, keep=False))
    else:
        raise DataError(f"unknown --doc-split {split!r}; choose one of {', '.join(SPLIT_MODES)}")
    for i, p in enumerate(pieces):
        # bad_at is non-empty only while a bad byte read so far has not been reported: it is the
        # next document's, or a later one's (reading runs ahead of splitting), so only then search
        n = len(_ESCAPED.findall(p)) if bad_at else 0
        if n:
            at = bad_at[0]
            for _ in range(min(n, len(bad_at))):
                bad_at.popleft()
            bad(f"{path}: byte {at}", f"invalid UTF-8 (in document {i} of this file, counting from 0)")
            continue
        yield Doc(p, f"{path}: document {i}")


def load_sources(path: str) -> list[dict]:
    """A byte-range index (one JSON object per line with `offset` and `length`, like
    gutenberg-en-50mb/sources.jsonl), sorted by offset and checked for overlaps."""
    ranges = []
    try:
        with open(path, "rb") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    off, ln = int(rec["offset"]), int(rec["length"])
                except (ValueError, KeyError, TypeError, RecursionError) as e:
                    raise DataError(f"{path}:line {lineno}: expected an object with integer offset and length ({e})") from None
                if off < 0 or ln < 0:
                    raise DataError(f"{path}:line {lineno}: negative offset/length")
                ranges.append({"offset": off, "length": ln, "name": str(rec.get("path", f"range {lineno}"))})
    except OSError as e:
        raise DataError(f"cannot read --sources {path}: {e}") from None
    ranges.sort(key=lambda r: r["offset"])
    for a, b in zip(ranges, ranges[1:]):
        if a["offset"] + a["length"] > b["offset"]:
            raise DataError(f"{path}: byte ranges of {a['name']!r} and {b['name']!r} overlap")
    return ranges


def read_ranges(path: str, ranges: list[dict], bad: BadRecords) -> Iterator[Doc]:
    """One document per byte range of the (decompressed) file."""
    pos = 0
    buf = bytearray()
    it = byte_chunks(path)
    done = False
    try:
        for r in ranges:
            start, end = r["offset"], r["offset"] + r["length"]
            while pos + len(buf) < end and not done:
                try:
                    buf += next(it)
                except StopIteration:
                    done = True
            if pos + len(buf) < end:
                raise DataError(f"{path}: byte range {start}..{end} of {r['name']!r} is past the end of the file ({pos + len(buf)} bytes)")
            data = bytes(buf[start - pos : end - pos])
            del buf[: end - pos]
            pos = end
            where = f"{path}: bytes {start}..{end} ({r['name']})"
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as e:
                bad(where, f"invalid UTF-8 at byte {start + e.start}")
                continue
            yield Doc(text, where, None)
    except _Corrupt as e:
        bad(f"{path}: byte {pos + len(buf)}", f"{e}; the remaining ranges could not be read")


# ---------------------------------------------------------------- transforms

_PG_START = re.compile(r"^\*{3}\s*START OF (?:THE|THIS) PROJECT GUTENBERG[^\n]*", re.M | re.I)
_PG_END = re.compile(r"^\*{3}\s*END OF (?:THE|THIS) PROJECT GUTENBERG", re.M | re.I)
# The closing "End of the Project Gutenberg EBook of <title>" paragraph (it may wrap onto
# several lines, but never spans a blank line).
_PG_END_LINE = re.compile(r"(?:^|\n)[ \t]*End of (?:the |this )?Project Gutenberg(?:(?!\n[ \t\r]*\n).)*\Z",
                          re.I | re.S)


def strip_gutenberg(text: str) -> str:
    """Drop the Project Gutenberg header (through the '*** START OF ...' line) and footer
    (from the '*** END OF ...' line, plus the 'End of the Project Gutenberg EBook of ...'
    line just before it). Text without the markers is returned unchanged."""
    m = _PG_START.search(text)
    if not m:
        return text
    text = text[m.end():]
    m = _PG_END.search(text)
    if m:
        text = text[: m.start()].rstrip()
        # The "End of the Project Gutenberg EBook of ..." line sits just above the marker;
        # only search the tail (a whole-book regex scan is slow).
        tail = text[-1000:]
        text = text[: len(text) - len(tail)] + _PG_END_LINE.sub("", tail)
    return text.strip() + "\n"


def normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


# ---------------------------------------------------------------- file lists

def detect_format(path: str) -> str:
    b = base_name(path).lower()
    if b.endswith(".parquet"):
        return "parquet"
    if b.endswith(".jsonl") or b.endswith(".json") or b.endswith(".ndjson"):
        return "jsonl"
    return "txt"


INPUT_SUFFIXES = (".txt", ".text", ".md", ".jsonl", ".json", ".ndjson", ".parquet")


def expand_inputs(inputs: list[str]) -> list[str]:
    """Files, directories (searched recursively for known suffixes) and globs, in a
    deterministic order: the order given, each directory/glob sorted by path. A directory a glob
    matches is searched like a directory given by name."""
    import glob as globmod

    def walk(d):
        found = []
        for root, dirs, files in os.walk(d):
            dirs.sort()
            for f in files:
                if base_name(f).lower().endswith(INPUT_SUFFIXES):
                    found.append(os.path.join(root, f))
        return sorted(found)

    out = []
    for inp in inputs:
        if os.path.isdir(inp):
            found = walk(inp)
            if not found:
                raise DataError(f"no input files ({', '.join(INPUT_SUFFIXES)}, optionally .gz/.zst) under {inp}")
            out.extend(found)
        elif os.path.exists(inp):
            out.append(inp)
        else:
            hits = sorted(globmod.glob(inp, recursive=True))
            if not hits:
                raise DataError(f"input not found: {inp}")
            for h in hits:
                if os.path.isdir(h):
                    out.extend(walk(h))
                elif os.path.isfile(h):
                    out.append(h)
    if not out:
        raise DataError(f"no input files ({', '.join(INPUT_SUFFIXES)}, optionally .gz/.zst) in "
                        f"{' '.join(inputs)}")
    # 'corpus/**' matches a directory and the files in it: read each file once
    seen = set()
    return [f for f in out if not (os.path.abspath(f) in seen or seen.add(os.path.abspath(f)))]
