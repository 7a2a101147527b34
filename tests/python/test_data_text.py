"""prepare_text.py: every native format, the real samples, the Gutenberg corpus, val splits."""

import gzip
import json
import os

import numpy as np
import pytest

from vp_data import cli
from vp_data.readers import normalize_newlines, strip_gutenberg
from vp_data.shards import read_header
from vptest import all_files_digest, expected_stream, read_tokens, write_jsonl_gz, write_jsonl_zst


def c4_docs(vp_cache):
    docs = []
    for i in (1, 2, 3):
        with gzip.open(os.path.join(vp_cache, "samples", "c4", f"c4-sample.0{i}.json.gz")) as f:
            docs.extend(json.loads(line)["text"] for line in f)
    return docs


def run_all(out, prefix):
    """val + train tokens in stream order (head split: val first)."""
    parts = []
    for split in ("val", "train"):
        try:
            parts.append(read_tokens(out, prefix, split))
        except AssertionError:
            pass
    return np.concatenate(parts)


@pytest.mark.parametrize("name", ["gpt2", "neox", "llama2"])
def test_jsonl_formats_all_tokenizers(name, tmp_path, vp_cache, run_script, ref_encode):
    docs = c4_docs(vp_cache)
    d = tmp_path / "in"
    d.mkdir()
    write_jsonl_gz(d / "a.jsonl.gz", [{"text": t, "url": "x"} for t in docs[:10]])
    write_jsonl_zst(d / "b.jsonl.zst", [{"text": t} for t in docs[10:20]], frames=3)
    with open(d / "c.jsonl", "w") as f:
        for t in docs[20:]:
            f.write(json.dumps({"text": t}) + "\n")
        f.write("\n")  # a trailing blank line is not a record
    out = tmp_path / "out"
    r = run_script("prepare_text", d, "--name", "mix", "--out-dir", out, "--tokenizer", name,
                   "--val-tokens", "2000", "--shard-size", "3000")
    assert "documents 30," in r.out
    got = run_all(out, "mix")
    ref = expected_stream(ref_encode, name, docs)
    assert np.array_equal(got, ref)
    assert len(read_tokens(out, "mix", "val")) == 2000
    # shard sizes: val 2000, then train shards of 3000 except the last, which is at least half a
    # shard (a smaller tail is appended to the shard before it)
    files = sorted(f for f in os.listdir(out) if f.endswith(".bin"))
    sizes = [read_header(str(out / f)).num_tokens for f in files if "_train_" in f]
    assert len(sizes) >= 2 and all(s == 3000 for s in sizes[:-1]) and 1500 <= sizes[-1] < 4500
    assert files[0] == "mix_train_000001.bin" and files[-1] == "mix_val_000000.bin"


def test_parquet_and_nested_field(tmp_path, vp_cache, run_script, ref_encode):
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = c4_docs(vp_cache)
    pq.write_table(pa.table({"body": docs[:17], "n": list(range(17))}), tmp_path / "p1.parquet", row_group_size=5)
    pq.write_table(pa.table({"body": docs[17:]}), tmp_path / "p2.parquet")
    out = tmp_path / "out"
    run_script("prepare_text", tmp_path / "p1.parquet", tmp_path / "p2.parquet", "--text-field", "body",
               "--name", "pq", "--out-dir", out, "--val-split", "none")
    assert np.array_equal(read_tokens(out, "pq", "train"), expected_stream(ref_encode, "gpt2", docs))

    write_jsonl_gz(tmp_path / "n.jsonl.gz", [{"content": {"body": t}} for t in docs[:5]])
    out2 = tmp_path / "out2"
    run_script("prepare_text", tmp_path / "n.jsonl.gz", "--text-field", "content.body", "--name", "n",
               "--out-dir", out2, "--val-split", "none")
    assert np.array_equal(read_tokens(out2, "n", "train"), expected_stream(ref_encode, "gpt2", docs[:5]))


def test_txt_gz_split_modes(tmp_path, vp_cache, run_script, ref_encode):
    docs = c4_docs(vp_cache)[:6]
    # one document per file, gzip, with a non-ASCII name-independent sort order
    for i, t in enumerate(docs):
        with gzip.open(tmp_path / f"doc{i:02d}.txt.gz", "wt", encoding="utf-8") as f:
            f.write(t)
    out = tmp_path / "files"
    run_script("prepare_text", str(tmp_path / "doc*.txt.gz"), "--name", "f", "--out-dir", out, "--val-split", "none")
    assert np.array_equal(read_tokens(out, "f", "train"), expected_stream(ref_encode, "gpt2", docs))

    # blank-line sections of one file (llm.c's TinyShakespeare convention), CRLF normalised
    text = "First part.\r\nstill first.\r\n\r\nSecond part.\r\n\r\n\r\nThird, after three newlines.\r\n"
    with gzip.open(tmp_path / "one.txt.gz", "wb") as f:
        f.write(text.encode())
    out = tmp_path / "blank"
    run_script("prepare_text", tmp_path / "one.txt.gz", "--doc-split", "blank-line", "--normalize-newlines",
               "--name", "b", "--out-dir", out, "--val-split", "none")
    parts = normalize_newlines(text).split("\n\n")
    ref_docs = [p + "\n\n" for p in parts[:-1]] + [parts[-1]]
    assert np.array_equal(read_tokens(out, "b", "train"), expected_stream(ref_encode, "gpt2", ref_docs))

    # one document per line
    out = tmp_path / "lines"
    run_script("prepare_text", tmp_path / "one.txt.gz", "--doc-split", "line", "--normalize-newlines",
               "--name", "l", "--out-dir", out, "--val-split", "none")
    lines = [x for x in normalize_newlines(text).split("\n") if x]
    assert np.array_equal(read_tokens(out, "l", "train"), expected_stream(ref_encode, "gpt2", lines))


def test_real_samples(tmp_path, vp_cache, run_script, ref_encode):
    s = os.path.join(vp_cache, "samples")
    # TinyStories: stories separated by <|endoftext|>
    with open(os.path.join(s, "tinystories", "tinystories_sample.txt"), encoding="utf-8") as f:
        stories = [x.strip() for x in f.read().split("<|endoftext|>") if x.strip()]
    out = tmp_path / "ts"
    r = run_script("prepare_text", os.path.join(s, "tinystories", "tinystories_sample.txt"), "--doc-split", "eot",
                   "--name", "tinystories", "--out-dir", out, "--tokenizer", "llama2", "--val-split", "none")
    assert f"documents {len(stories)}," in r.out
    assert np.array_equal(read_tokens(out, "tinystories", "train"), expected_stream(ref_encode, "llama2", stories))

    # Dolma CC (jsonl.gz) with the NeoX tokenizer, hash val split
    with gzip.open(os.path.join(s, "dolma-cc", "cc_en_head-0091.jsonl.gz")) as f:
        dolma = [json.loads(line)["text"] for line in f]
    out = tmp_path / "dolma"
    run_script("prepare_text", os.path.join(s, "dolma-cc"), "--name", "dolma", "--out-dir", out, "--tokenizer", "neox",
               "--val-split", "hash", "--val-fraction", "0.3", "--seed", "7")
    is_val = [cli.hash01(t, 7) < 0.3 for t in dolma]
    assert any(is_val) and not all(is_val)
    assert np.array_equal(read_tokens(out, "dolma", "val"),
                          expected_stream(ref_encode, "neox", [t for t, v in zip(dolma, is_val) if v]))
    assert np.array_equal(read_tokens(out, "dolma", "train"),
                          expected_stream(ref_encode, "neox", [t for t, v in zip(dolma, is_val) if not v]))

    # enwik8 head (one plain-text file = one document) and RedPajama arXiv JSON lines
    out = tmp_path / "misc"
    with open(os.path.join(s, "enwik8", "enwik8_first100.txt"), encoding="utf-8", newline="") as f:
        enwik = f.read()
    with open(os.path.join(s, "redpajama-arxiv", "arxiv.jsonl"), encoding="utf-8") as f:
        arxiv = [json.loads(line)["text"] for line in f]
    run_script("prepare_text", os.path.join(s, "enwik8", "enwik8_first100.txt"),
               os.path.join(s, "redpajama-arxiv", "arxiv.jsonl"), "--name", "misc", "--out-dir", out,
               "--val-split", "none", "--shard-size", "50000")
    assert np.array_equal(read_tokens(out, "misc", "train"), expected_stream(ref_encode, "gpt2", [enwik] + arxiv))


@pytest.fixture(scope="module")
def gutenberg_slice(tmp_path_factory, vp_cache):
    """The first four books of the Gutenberg corpus (~1.4 MB) with their sources.jsonl lines."""
    g = os.path.join(vp_cache, "corpus", "gutenberg-en-50mb")
    with open(os.path.join(g, "sources.jsonl")) as f:
        src = [json.loads(line) for line in f][:4]
    end = src[-1]["offset"] + src[-1]["length"]
    with gzip.open(os.path.join(g, "corpus.txt.gz")) as f:
        data = f.read(end)
    d = tmp_path_factory.mktemp("gut")
    with gzip.open(d / "corpus.txt.gz", "wb") as f:
        f.write(data)
    with open(d / "sources.jsonl", "w") as f:
        for r in src:
            f.write(json.dumps(r) + "\n")
    books = [data[r["offset"] : r["offset"] + r["length"]].decode("utf-8") for r in src]
    return d, books


def test_gutenberg_books(tmp_path, run_script, ref_encode, gutenberg_slice):
    d, books = gutenberg_slice
    out = tmp_path / "g"
    r = run_script("prepare_text", d / "corpus.txt.gz", "--sources", d / "sources.jsonl", "--strip-gutenberg",
                   "--normalize-newlines", "--name", "gutenberg", "--out-dir", out, "--val-tokens", "50000",
                   "--shard-size", "200000", "--workers", "2")
    assert "documents 4," in r.out
    clean = [strip_gutenberg(normalize_newlines(b)) for b in books]
    for c, raw in zip(clean, books):
        assert "\r" not in c
        for boiler in ("*** START OF", "*** END OF", "End of the Project Gutenberg EBook", "FULL LICENSE",
                       "gutenberg.org/license", "This eBook is for the use of anyone anywhere"):
            assert boiler.lower() not in c.lower(), boiler
        assert len(c) > 0.8 * len(raw) - 40_000  # only the boilerplate went
    assert clean[0].startswith("Produced by An Anonymous Volunteer\n\n\n\n\n\nEMMA")
    assert clean[0].endswith("FINIS\n")
    got = run_all(out, "gutenberg")
    assert np.array_equal(got, expected_stream(ref_encode, "gpt2", clean))
    assert len(read_tokens(out, "gutenberg", "val")) == 50000

    # Without the options the documents are the raw byte ranges.
    out2 = tmp_path / "raw"
    run_script("prepare_text", d / "corpus.txt.gz", "--sources", d / "sources.jsonl", "--name", "gutenberg",
               "--out-dir", out2, "--val-split", "none")
    assert np.array_equal(read_tokens(out2, "gutenberg", "train"), expected_stream(ref_encode, "gpt2", books))


def test_deterministic_and_resumable(tmp_path, run_script, gutenberg_slice):
    d, _ = gutenberg_slice
    args = [d / "corpus.txt.gz", "--sources", d / "sources.jsonl", "--strip-gutenberg", "--normalize-newlines",
            "--name", "g", "--val-tokens", "30000", "--shard-size", "60000"]
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    run_script("prepare_text", *args, "--out-dir", a, "--workers", "2")
    run_script("prepare_text", *args, "--out-dir", b, "--workers", "1")
    assert all_files_digest(a) == all_files_digest(b)
    assert len([f for f in os.listdir(a) if f.endswith(".bin")]) >= 6

    # interrupted twice (after 2, then 1 more shard), then finished: same bytes
    r = run_script("prepare_text", *args, "--out-dir", c, "--stop-after-shards", "2", expect=3)
    assert "stopped after 2 shard(s)" in r.err
    assert sorted(f for f in os.listdir(c) if f.endswith(".bin")) == ["g_train_000001.bin", "g_val_000000.bin"]
    r = run_script("prepare_text", *args, "--out-dir", c, "--stop-after-shards", "1", expect=3)
    assert "(2 reused)" in r.out
    (c / "g_train_000003.bin.tmp").write_bytes(b"half a shard")  # debris of a killed write
    r = run_script("prepare_text", *args, "--out-dir", c)
    assert "(3 reused)" in r.out
    assert all_files_digest(c) == all_files_digest(a)
    assert not [f for f in os.listdir(c) if f.endswith(".tmp")]

    # a damaged shard is detected and redone; nothing else is rewritten
    victim = c / "g_train_000002.bin"
    victim.write_bytes(victim.read_bytes()[:-10])
    r = run_script("prepare_text", *args, "--out-dir", c)
    assert "missing or damaged" in r.err and "(2 reused)" in r.out
    assert all_files_digest(c) == all_files_digest(a)


def test_refuses_to_mix_configurations(tmp_path, run_script, vp_cache):
    inp = os.path.join(vp_cache, "samples", "tinystories", "tinystories_sample.txt")
    out = tmp_path / "o"
    run_script("prepare_text", inp, "--doc-split", "eot", "--name", "t", "--out-dir", out, "--val-split", "none")
    r = run_script("prepare_text", inp, "--doc-split", "eot", "--name", "t", "--out-dir", out,
                   "--val-split", "none", "--tokenizer", "neox", expect=1)
    assert "different inputs or flags" in r.err and "--overwrite" in r.err
    run_script("prepare_text", inp, "--doc-split", "eot", "--name", "t", "--out-dir", out, "--val-split", "none",
               "--tokenizer", "neox", "--overwrite")
    assert sorted(os.listdir(out)) == ["neox.vptok", "t.manifest.json", "t_train_000000.bin"] or \
        sorted(os.listdir(out)) == ["gpt2.vptok", "neox.vptok", "t.manifest.json", "t_train_000000.bin"]


@pytest.mark.parametrize("name, owner", [("web_val", "web"), ("web_train", "web"), ("a_val_c4", "a")])
def test_refuses_a_name_whose_shards_another_datasets_globs_match(name, owner, tmp_path, run_script, vp_cache):
    """A --name with a _train or _val part would write shards that another dataset's globs take
    (web_val_train_000000.bin is in 'web_val_*.bin', web's val set): refused before anything is
    written, with a name to use instead; the same name with hyphens is accepted."""
    inp = os.path.join(vp_cache, "samples", "tinystories", "tinystories_sample.txt")
    out = tmp_path / "o"
    r = run_script("prepare_text", inp, "--doc-split", "eot", "--name", name, "--out-dir", out, "--val-split", "none", expect=1)
    assert f"'{name}'" in r.err and f"'{owner}_" in r.err and name.replace("_", "-") in r.err, r.err
    assert not out.exists() or not os.listdir(out)
    run_script("prepare_text", inp, "--doc-split", "eot", "--name", name.replace("_", "-"), "--out-dir", out, "--val-split", "none")
    assert os.path.exists(out / f"{name.replace('_', '-')}_train_000000.bin")


def test_max_tokens(tmp_path, vp_cache, run_script, ref_encode):
    docs = c4_docs(vp_cache)
    write_jsonl_gz(tmp_path / "a.jsonl.gz", [{"text": t} for t in docs])
    out = tmp_path / "o"
    run_script("prepare_text", tmp_path / "a.jsonl.gz", "--name", "m", "--out-dir", out, "--val-split", "none",
               "--max-tokens", "3000")
    got = read_tokens(out, "m", "train")
    # whole documents until the budget is reached (the last one may overshoot it)
    n, k = 0, 0
    while n < 3000:
        n += len(ref_encode("gpt2", docs[k]))
        k += 1
    assert np.array_equal(got, expected_stream(ref_encode, "gpt2", docs[:k]))


def test_ctrl_c_then_resume(tmp_path, gutenberg_slice, vp_cache):
    """A real SIGINT in the middle of a run (exit 130, finished shards kept), then the same
    command finishes it with the same bytes as an uninterrupted run."""
    import signal
    import subprocess
    import sys
    import time

    from vptest import SCRIPTS

    d, _ = gutenberg_slice
    cmd = [sys.executable, os.path.join(SCRIPTS, "prepare_text.py"), str(d / "corpus.txt.gz"), "--sources",
           str(d / "sources.jsonl"), "--name", "g", "--val-tokens", "5000", "--shard-size", "20000",
           "--workers", "2", "--no-progress"]
    env = {**os.environ, "VALUEPATH_CACHE": vp_cache}
    ref = tmp_path / "ref"
    subprocess.run(cmd + ["--out-dir", str(ref)], check=True, capture_output=True, env=env)
    out = tmp_path / "int"
    p = subprocess.Popen(cmd + ["--out-dir", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None:
        if os.path.isdir(out) and len([f for f in os.listdir(out) if f.endswith(".bin")]) >= 2:
            p.send_signal(signal.SIGINT)
            break
        time.sleep(0.005)
    _, err = p.communicate(timeout=60)
    assert p.returncode in (0, 130), err  # 0 only if it finished before the signal landed
    if p.returncode == 130:
        assert "interrupted;" in err and "re-run the same command to resume" in err
        assert "Traceback" not in err
    r = subprocess.run(cmd + ["--out-dir", str(out)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert all_files_digest(out) == all_files_digest(ref)


def test_line_split_of_a_crlf_file_without_normalizing(tmp_path, run_script, ref_encode):
    """--doc-split line on a CRLF file without --normalize-newlines: a document is the line without its
    line ending ("\\r\\n" whole), as str.splitlines gives it; a lone "\\r" inside a line stays."""
    text = "alpha one\r\nbeta\rtwo\r\n\r\ngamma\r\n"
    (tmp_path / "crlf.txt").write_bytes(text.encode())
    run_script("prepare_text", tmp_path / "crlf.txt", "--doc-split", "line", "--name", "c", "--out-dir",
               tmp_path / "out", "--val-split", "none", "--workers", "1")
    docs = ["alpha one", "beta\rtwo", "gamma"]  # by hand; the empty line is no document
    assert np.array_equal(read_tokens(tmp_path / "out", "c", "train"), expected_stream(ref_encode, "gpt2", docs))


def test_newline_normalizing_across_read_chunks(tmp_path, monkeypatch):
    """A CRLF whose "\\r" ends one read chunk and whose "\\n" starts the next is one newline, not two
    (the reader works in 1 MB chunks; here in 3-byte ones, so every split point occurs). The
    expected text is str.replace on the whole file."""
    from vp_data import readers

    text = "a\r\nbc\r\n\r\nd\re\r\r\nf\r\n"
    p = tmp_path / "t.txt"
    p.write_bytes(text.encode())
    want = text.replace("\r\n", "\n").replace("\r", "\n")
    for chunk in (1, 2, 3, 4, 5):
        monkeypatch.setattr(readers, "CHUNK", chunk)
        (doc,) = readers.read_text(str(p), readers.BadRecords(), split="file", normalize_newlines=True)
        assert doc.text == want, chunk


def test_sources_that_overlap_by_one_byte_are_refused(tmp_path):
    """Byte ranges must not overlap: [0, 10) and [9, 20) share byte 9 (read_ranges would then slice
    with a negative start and emit garbage); [0, 10) and [10, 20) only touch and are fine."""
    from vp_data import DataError
    from vp_data.readers import load_sources

    p = tmp_path / "s.jsonl"
    p.write_text('{"offset": 0, "length": 10}\n{"offset": 10, "length": 10}\n')
    assert [(r["offset"], r["length"]) for r in load_sources(str(p))] == [(0, 10), (10, 10)]
    p.write_text('{"offset": 9, "length": 11, "path": "b"}\n{"offset": 0, "length": 10, "path": "a"}\n')
    with pytest.raises(DataError, match="overlap"):
        load_sources(str(p))


def test_val_hash_is_the_documented_keyed_blake2b():
    """The hash split's rule (docs/data.md): BLAKE2b of the document's UTF-8 text with an 8-byte
    digest, keyed by the decimal --seed, read as a little-endian integer over 2^64. A change of it
    would move documents between train and val silently, and the manifest's fingerprint holds
    only the seed and fraction. The digests are OpenSSL's, not Python's hashlib:
    printf '%s' TEXT | openssl mac -macopt key:SEED -macopt size:8 BLAKE2BMAC"""
    openssl = [("hello", 2357, "9A264332E56C236E"), ("The quick brown fox.", 2357, "5821A4096E6EFCD8"),
               ("café", 2357, "BE8C3BE738347AE0"), ("hello", 0, "263C97C571CBEF7C")]
    for text, seed, digest in openssl:
        assert cli.hash01(text, seed) == int.from_bytes(bytes.fromhex(digest), "little") / 2**64, (text, seed)
    # so, at --val-fraction 0.45: "hello" is val at seed 2357 (0x6E23... / 2^64 = 0.430: its last
    # digest byte is the most significant) and train at seed 0 (0x7CEF... / 2^64 = 0.488)
    assert cli.hash01("hello", 2357) < 0.45 <= cli.hash01("hello", 0)
