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


def test_bad_text_files(tmp_path, run_script, ref_encode):
    p = tmp_path / "bad.txt"
    p.write_bytes(b"fine text\nthen \xff\xfe bad bytes\n")
    r = prep(run_script, p, tmp_path / "a", expect=1)
    assert f"{p}: byte 15: invalid UTF-8" in r.err
    # the bad record is the document that holds the bad bytes, here the whole file: skipped, and only the good
    # file's text is written (it used to be kept with U+FFFD in place of the bytes)
    good = tmp_path / "good.txt"
    good.write_text("a good file\n")
    r = run_script("prepare_text", good, p, "--name", "t", "--out-dir", tmp_path / "b", "--val-split", "none",
                   "--skip-bad-records")
    assert "bad records skipped 1" in r.out and "documents 1," in r.out
    assert np.array_equal(read_tokens(tmp_path / "b", "t", "train"), expected_stream(ref_encode, "gpt2", ["a good file\n"]))

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


# ------------------------------------------------------------ found by the audit

PARQUET_TEXTS = [f"Document {i}: " + "some words here, and more words. " * (1 + i % 5) for i in range(3000)]


def parquet_with_damaged_row_group(path):
    """3,000 rows in row groups of 1,000, with 200 bytes XORed a third of the way into row group 1's
    column chunk (snappy pages without CRCs, as the hub's files are): pyarrow raises a plain
    OSError ("Corrupt snappy compressed data.") for it, which is not an ArrowException."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": PARQUET_TEXTS}), path, row_group_size=1000)
    col = pq.ParquetFile(path).metadata.row_group(1).column(0)
    at = (col.dictionary_page_offset or col.data_page_offset) + col.total_compressed_size // 3
    raw = bytearray(path.read_bytes())
    for i in range(at, at + 200):
        raw[i] ^= 0xFF
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("script", ["prepare_text", "prepare_openwebtext", "prepare_fineweb"])
def test_corrupt_parquet_page_is_a_bad_record(tmp_path, run_script, ref_encode, script):
    d = tmp_path / "in"
    d.mkdir()
    p = d / "000_00000.parquet"
    parquet_with_damaged_row_group(p)
    args = {"prepare_text": [p, "--name", "t", "--val-split", "none"],
            "prepare_openwebtext": ["--parquet", p, "--val-fraction", "0"],
            "prepare_fineweb": ["--input-dir", d, "--val-fraction", "0"]}[script]
    r = run_script(script, *args, "--out-dir", tmp_path / "a", expect=1)
    assert f"{p}: row 1000 (row group 1 of 3): corrupt Parquet data: Corrupt snappy compressed data." in r.err, r.err
    assert "--skip-bad-records" in r.err and "check the paths and free space" not in r.err and "Traceback" not in r.err
    assert not [f for f in os.listdir(tmp_path / "a") if f.endswith(".bin")]
    # skipped: the 1,000 rows of row group 1 that could not be read are counted, and row group 2 is read
    r = run_script(script, *args, "--out-dir", tmp_path / "b", "--skip-bad-records", "--tokenizer", "gpt2")
    assert "bad records skipped 1,000" in r.out and "documents 2,000," in r.out, r.out
    assert "rows 1000 to 1999 (the rest of the row group) could not be read" in r.err
    prefix = {"prepare_text": "t", "prepare_openwebtext": "openwebtext", "prepare_fineweb": "fineweb"}[script]
    want = PARQUET_TEXTS[:1000] + PARQUET_TEXTS[2000:]
    assert np.array_equal(read_tokens(tmp_path / "b", prefix, "train"), expected_stream(ref_encode, "gpt2", want))


def test_parquet_without_a_footer_and_bad_utf8_rows(tmp_path, run_script, ref_encode):
    import pyarrow as pa
    import pyarrow.parquet as pq

    # a truncated copy: no footer, so no row can be found; skippable as a broken compressed stream is
    cut = tmp_path / "a_cut.parquet"
    pq.write_table(pa.table({"text": DOCS}), cut)
    cut.write_bytes(cut.read_bytes()[:-20])
    r = prep(run_script, cut, tmp_path / "a", expect=1)
    assert f"{cut}: cannot read as Parquet:" in r.err and "Traceback" not in r.err
    # a string column holding bytes that are not UTF-8 (pyarrow checks only when converting, and
    # then failed the whole batch with a UnicodeDecodeError traceback): that row is the bad record
    bad = tmp_path / "b_utf8.parquet"
    texts = pa.array([DOCS[0].encode(), b"bad \xff\xfe bytes", DOCS[2].encode()], pa.binary()).view(pa.string())
    pq.write_table(pa.table({"text": texts}), bad)
    r = prep(run_script, bad, tmp_path / "b", expect=1)
    assert f"{bad}: row 1: invalid UTF-8" in r.err and "Traceback" not in r.err
    r = prep(run_script, tmp_path, tmp_path / "c", "--skip-bad-records")
    assert "bad records skipped 2" in r.out and "documents 2," in r.out
    assert np.array_equal(read_tokens(tmp_path / "c", "t", "train"), expected_stream(ref_encode, "gpt2", [DOCS[0], DOCS[2]]))


def test_zstd_long_window(tmp_path, run_script, ref_encode):
    # `zstd --long=31` writes frames with a 2 GB window, which zstandard refuses by default (over 128 MB:
    # "Frame requires too much memory for decoding"); streamed, so the header keeps the whole window
    p = tmp_path / "long.jsonl.zst"
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=31, enable_ldm=True)
    cobj = zstandard.ZstdCompressor(compression_params=params).compressobj()
    p.write_bytes(cobj.compress(b"".join(json.dumps({"text": t}).encode() + b"\n" for t in DOCS)) + cobj.flush())
    assert zstandard.get_frame_parameters(p.read_bytes()).window_size == 2**31
    prep(run_script, p, tmp_path / "a")
    assert np.array_equal(read_tokens(tmp_path / "a", "t", "train"), expected_stream(ref_encode, "gpt2", DOCS))


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl.zst", ".txt.gz", ".parquet"])
def test_zero_byte_compressed_file_is_a_bad_record(tmp_path, run_script, ref_encode, suffix):
    # an interrupted copy: no gzip, zstd or Parquet writer makes a 0-byte file, so it is not an empty corpus
    empty = tmp_path / f"a_empty{suffix}"
    empty.write_bytes(b"")
    r = prep(run_script, empty, tmp_path / "a", expect=1)
    assert str(empty) in r.err and ("0 bytes" in r.err or "size is 0 bytes" in r.err) and "--skip-bad-records" in r.err
    assert "no tokens to write" not in r.err and "Traceback" not in r.err
    good = tmp_path / "b_good.jsonl"
    good.write_text("".join(json.dumps({"text": t}) + "\n" for t in DOCS[:3]))
    r = run_script("prepare_text", empty, good, "--name", "t", "--out-dir", tmp_path / "b", "--val-split", "none",
                   "--skip-bad-records")
    assert "bad records skipped 1" in r.out and "documents 3," in r.out and f"skipped bad record: {empty}" in r.err
    assert np.array_equal(read_tokens(tmp_path / "b", "t", "train"), expected_stream(ref_encode, "gpt2", DOCS[:3]))


def test_skipped_text_documents_are_the_ones_with_bad_utf8(tmp_path, run_script, ref_encode):
    # the audit's case: one bad record was counted, yet 'bad \ufffd\ufffd here' and 'and \ufffd more' were written
    p = tmp_path / "t.txt"
    p.write_bytes(b"line one\nbad \xff\xfe here\nline three\nand \xc3 more\n")
    r = prep(run_script, p, tmp_path / "a", "--doc-split", "line", expect=1)
    assert f"{p}: byte 13: invalid UTF-8 (in document 1 of this file" in r.err
    r = prep(run_script, p, tmp_path / "b", "--doc-split", "line", "--skip-bad-records")
    assert "bad records skipped 2" in r.out and "documents 2," in r.out, r.out
    assert f"{p}: byte 13: invalid UTF-8" in r.err and f"{p}: byte 36: invalid UTF-8" in r.err
    assert np.array_equal(read_tokens(tmp_path / "b", "t", "train"),
                          expected_stream(ref_encode, "gpt2", ["line one", "line three"]))


@pytest.mark.parametrize("normalize", [False, True])
def test_bad_utf8_across_read_chunks(tmp_path, run_script, ref_encode, monkeypatch, normalize):
    """Read 3 bytes at a time, so that characters, runs of bad bytes and CRLFs are cut between reads:
    the documents written are exactly the lines that are UTF-8, and each other line is one bad record."""
    from vp_data import readers

    monkeypatch.setattr(readers, "CHUNK", 3)
    lines = [b"caf\xc3\xa9 ok", b"x\xff\xfe\xfd\xfcy", b"\xe2\x82\xac euro", b"cut \xe2\x82", b"\xed\xa0\x80 surrogate",
             b"plain\r", b"\xff", b"last \xf0\x9f\x98\x80"]
    p = tmp_path / "c.txt"
    p.write_bytes(b"\n".join(lines))
    flags = ["--doc-split", "line", "--skip-bad-records", "--workers", "1"] + (["--normalize-newlines"] if normalize else [])
    r = prep(run_script, p, tmp_path / "a", *flags)
    good = []
    for line in lines:
        try:
            good.append(line.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError:
            pass
    assert good == ["café ok", "€ euro", "plain", "last 😀"]
    assert f"bad records skipped {len(lines) - len(good)}\n" in r.out, r.out
    assert np.array_equal(read_tokens(tmp_path / "a", "t", "train"), expected_stream(ref_encode, "gpt2", good))
    # each bad line is reported at its first bad byte
    starts = [sum(len(x) + 1 for x in lines[:i]) for i in range(len(lines))]
    for i, line in enumerate(lines):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as e:
            assert f"{p}: byte {starts[i] + e.start}: invalid UTF-8" in r.err, (i, r.err)


DEEP = '{"text": "x", "meta": ' + "[" * 200000 + "]" * 200000 + "}"


def test_deeply_nested_json_is_a_bad_record(tmp_path, run_script, ref_encode):
    p = tmp_path / "deep.jsonl"
    p.write_text(json.dumps({"text": DOCS[0]}) + "\n" + DEEP + "\n" + json.dumps({"text": DOCS[1]}) + "\n")
    r = prep(run_script, p, tmp_path / "a", expect=1)
    assert f"{p}:line 2: JSON nested too deeply to read" in r.err and "Traceback" not in r.err
    r = prep(run_script, p, tmp_path / "b", "--skip-bad-records")
    assert "bad records skipped 1" in r.out and "documents 2," in r.out
    assert np.array_equal(read_tokens(tmp_path / "b", "t", "train"), expected_stream(ref_encode, "gpt2", DOCS[:2]))
    # a domain-tagged corpus reads its records the same way
    d = tmp_path / "sp" / "train" / "chunk1"
    d.mkdir(parents=True)
    recs = [json.dumps({"text": t, "meta": {"redpajama_set_name": "RedPajamaC4"}}) for t in DOCS[:2]]
    (d / "example_train_0.jsonl").write_text(recs[0] + "\n" + DEEP + "\n" + recs[1] + "\n")
    r = run_script("prepare_slimpajama", "--input-dir", tmp_path / "sp", "--out-dir", tmp_path / "o", "--val-by-domain",
                   "0", "--val-fraction", "0", "--skip-bad-records")
    assert "bad records skipped 1" in r.out and "documents 2," in r.out


def hellaswag_record(**change):
    return json.dumps({"ind": 4, "activity_label": "Rowing", "ctx_a": "A man sits in a boat.", "ctx_b": "he",
                       "ctx": "A man sits in a boat. he", "endings": ["rows.", "sleeps.", "sings.", "swims."],
                       "label": 2, **change})


@pytest.mark.parametrize("line, message", [
    (hellaswag_record(label=1.9), "label 1.9 is not an integer"),
    (hellaswag_record(label=True), "label true is not an integer"),
    (hellaswag_record(label="1.5"), 'label "1.5" is not an integer'),
    (DEEP, "JSON nested too deeply to read"),
])
def test_hellaswag_bad_records(tmp_path, run_script, line, message):
    p = tmp_path / "hs.jsonl"
    p.write_text(hellaswag_record() + "\n" + line + "\n")
    r = run_script("prepare_hellaswag", "--input", p, "--out-dir", tmp_path / "o", expect=1)
    assert f"{p}:2: {message}" in r.err and "Traceback" not in r.err, r.err
    assert not (tmp_path / "o" / "hellaswag_val_gpt2.vpmc").exists()


def test_hellaswag_whole_number_labels(tmp_path, run_script):
    from vp_data import mc

    p = tmp_path / "hs.jsonl"
    p.write_text("".join(hellaswag_record(label=x) + "\n" for x in (3, "1", 0.0)))
    run_script("prepare_hellaswag", "--input", p, "--out-dir", tmp_path / "o")
    assert [ex.label for ex in mc.read(str(tmp_path / "o" / "hellaswag_val_gpt2.vpmc"))[0]] == [3, 1, 0]


def test_download_cut_short(tmp_path, monkeypatch):
    """The server closes the connection before Content-Length bytes came: http.client.IncompleteRead,
    which is not an OSError. A DataError, and no .part file left, as for Ctrl-C in the middle."""
    import http.client
    import urllib.request

    from vp_data import DataError, cache

    for k in ("VALUEPATH_OFFLINE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(k, raising=False)

    class Response:
        def __init__(self, fail):
            self.reads, self.fail = 0, fail

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self, n):
            self.reads += 1
            if self.reads == 1:
                return b"x" * 1000
            raise self.fail

    dest = tmp_path / "c" / "hellaswag_val.jsonl"
    for fail in (http.client.IncompleteRead(b"", 4000), KeyboardInterrupt()):
        monkeypatch.setattr(urllib.request, "urlopen", lambda *a, fail=fail, **k: Response(fail))
        with pytest.raises(type(fail) if isinstance(fail, KeyboardInterrupt) else DataError) as e:
            cache.download("https://example.invalid/hellaswag_val.jsonl", str(dest))
        if not isinstance(fail, KeyboardInterrupt):
            assert "could not download https://example.invalid/hellaswag_val.jsonl" in str(e.value)
            assert "IncompleteRead(0 bytes read, 4000 more expected)" in str(e.value)
        assert os.listdir(tmp_path / "c") == []  # neither the file nor its .part


@pytest.mark.parametrize("script, flags, message", [
    ("prepare_text", ["x.txt", "--tokenizer", "foo"], "argument --tokenizer: unknown tokenizer 'foo'; choose one of gpt2, neox, llama2"),
    ("prepare_hellaswag", ["--tokenizer", "foo"], "argument --tokenizer: unknown tokenizer 'foo'; choose one of gpt2, neox, llama2"),
    ("prepare_slimpajama", ["--tokenizer", "gpt-3"], "argument --tokenizer: unknown tokenizer 'gpt-3'"),
    ("prepare_slimpajama", ["--domains", "c4,foo"], "argument --domains: unknown SlimPajama domain 'foo'; use one of commoncrawl, c4,"),
    ("prepare_slimpajama", ["--default-domain", "foo"], "argument --default-domain: unknown SlimPajama domain 'foo'; use one of"),
    ("prepare_pile", ["--domains", "c4"], "argument --domains: unknown Pile domain 'c4'; use one of pilecc, pubmedcentral,"),
    ("prepare_pile", ["--default-domain", "foo"], "argument --default-domain: unknown Pile domain 'foo'"),
])
def test_bad_names_are_usage_errors(tmp_path, capsys, script, flags, message):
    # they were data errors (exit 1) found after parsing; docs/data.md: a bad flag value exits 2
    from conftest import load_script

    with pytest.raises(SystemExit) as e:
        load_script(script).main([*flags, "--out-dir", str(tmp_path / "o")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "usage:" in err, err
    assert not (tmp_path / "o").exists()


def test_known_domain_names_pass_the_check(tmp_path, run_script):
    # the check accepts the short names and the records' own values, as domains.main does
    d = tmp_path / "sp" / "train" / "chunk1"
    d.mkdir(parents=True)
    (d / "example_train_0.jsonl").write_text("".join(
        json.dumps({"text": t, **({"meta": {"redpajama_set_name": "RedPajamaC4"}} if i % 2 else {})}) + "\n"
        for i, t in enumerate(DOCS)))
    r = run_script("prepare_slimpajama", "--input-dir", tmp_path / "sp", "--out-dir", tmp_path / "o", "--domains",
                   "c4,RedPajamaArXiv", "--default-domain", "arxiv", "--val-by-domain", "0", "--val-fraction", "0")
    assert "documents 12," in r.out
