"""The pipeline at the scale researchers run it (FineWeb-Edu 100B, SlimPajama 627B, the Pile; a
tokenizer of more than 65,536 ids; documents of hundreds of MB), checked on small inputs with the
limits made small: each test names what broke, and each but the last failed before its fix."""

import json
import os
import time

import numpy as np
import pytest

from vp_data import DataError, pipeline, readers
from vp_data.pipeline import Job, Source, StreamSpec
from vp_data.readers import BadRecords, Doc
from vp_data.shards import read_header, read_shard
from vp_data.tokenizer import Tokenizer, TokenizerSpec
from vptest import all_files_digest


# ------------------------------------------------------------------ one huge document

@pytest.mark.parametrize("form", ["jsonl", "blank-line"])
def test_a_huge_document_is_read_in_linear_time(form, tmp_path, monkeypatch):
    """One JSON-lines record (or one blank-line section) of 4 MB read in 64-byte pieces: as many
    pieces as a 1 GB document has in the real 1 MB ones. The unfinished line used to be copied and
    searched again at every piece (quadratic: minutes here, hours for a 1 GB document); now each
    piece is searched once and the document joined once."""
    text = ("word " * 800_000)[:-1]
    if form == "jsonl":
        path = tmp_path / "big.jsonl"
        path.write_text(json.dumps({"text": text}) + "\n" + json.dumps({"text": "small"}) + "\n")
        read = lambda: readers.read_jsonl(str(path), BadRecords())  # noqa: E731
    else:
        path = tmp_path / "big.txt"
        path.write_text("first\n\n" + text + "\n\nlast")
        read = lambda: readers.read_text(str(path), BadRecords(), split="blank-line")  # noqa: E731
    monkeypatch.setattr(readers, "CHUNK", 64)
    t0 = time.perf_counter()
    docs = [d.text for d in read()]
    seconds = time.perf_counter() - t0
    want = [text, "small"] if form == "jsonl" else ["first\n\n", text + "\n\n", "last"]
    assert docs == want
    assert seconds < 10, f"{seconds:.1f} s for {os.path.getsize(path):,} bytes: not linear"


# ------------------------------------------------------------------ 32-bit and name limits

def test_a_val_head_over_int32_is_refused_before_reading(tmp_path, run_script):
    """--val-tokens 3e9 with the head split: the val shard would need a count over the header's
    int32. It used to tokenize the whole input into memory and then fail at the write with a hint
    to lower --shard-size, or, for an input smaller than that, write all of it as val."""
    inp = tmp_path / "a.txt"
    inp.write_text("a few words\n" * 100)
    for script, args in (("prepare_text", [inp, "--doc-split", "line"]), ("prepare_tinyshakespeare", ["--input", inp])):
        with pytest.raises(SystemExit) as e:  # argparse: a bad flag value
            run_script(script, *args, "--val-tokens", "3e9", "--out-dir", tmp_path / script)
        assert e.value.code == 2
        assert not (tmp_path / script).exists()
    run_script("prepare_text", inp, "--doc-split", "line", "--val-tokens", "2147483647", "--out-dir", tmp_path / "max")
    # the pipeline refuses it too, for a caller that skips the flags' checks
    with pytest.raises(DataError, match="at most 2,147,483,647 tokens"):
        pipeline.Stream(StreamSpec("main", "train", head_tokens=2**31), None)


class _ShardJob:
    prefix, shard_size = "big", 1000


def test_shard_numbers_stop_at_six_digits():
    """Shard 1,000,000 would be named big_train_1000000.bin, which sorts between _100000 and
    _100001: the trainer, which reads shards in name order, would read it out of place (and
    --overwrite, which matches six digits, would leave it). A budget that needs more shards than
    six digits number is refused before anything is read (SlimPajama's 627B tokens at
    --shard-size 1e5), and a run without one stops at that shard."""
    s = pipeline.Stream(StreamSpec("train", "train"), _ShardJob())
    assert s.filename(999_999) == "big_train_999999.bin"
    with pytest.raises(DataError, match="larger --shard-size"):
        s.filename(1_000_000)
    with pytest.raises(DataError, match="make more than 1,000,000 shards"):
        pipeline.Stream(StreamSpec("train", "train", quota={"*": 2 * 10**9}), _ShardJob())
    pipeline.Stream(StreamSpec("train", "train", quota={"c4": 5 * 10**8, "arxiv": 5 * 10**8}), _ShardJob())


def test_many_shards_past_the_limit_stop_with_the_shards_kept(tmp_path, run_script, monkeypatch):
    """The same refusal in a run, with the limit made 20 shards: a run of 32-token shards stops
    with exit 1 when it needs a 21st, the 20 it wrote complete; a budget that needs more is
    refused at the start; a larger --shard-size then works."""
    monkeypatch.setattr(pipeline, "MAX_SHARDS", 20)
    inp = tmp_path / "a.txt"
    inp.write_text("".join(f"line {i} of a small test corpus\n" for i in range(400)))
    args = [inp, "--doc-split", "line", "--val-split", "none", "--workers", "1", "--out-dir", tmp_path / "o"]
    r = run_script("prepare_text", *args, "--shard-size", "32", expect=1)
    assert "needs more than 20 shards at --shard-size 32" in r.err
    assert sorted(os.listdir(tmp_path / "o"))[-2:] == ["a_train_000019.bin", "gpt2.vptok"]
    r = run_script("prepare_text", *args, "--shard-size", "32", "--max-tokens", "1e5", "--overwrite", expect=1)
    assert "100,000 tokens at --shard-size 32 make more than 20 shards" in r.err
    run_script("prepare_text", *args, "--shard-size", "1000", "--overwrite")


# ------------------------------------------------------------------ vocabularies over 65,536 ids

class _WideTokenizer(Tokenizer):
    """More ids than uint16 holds (as Llama-3's 128,256): a character's id is 65,536 + its code
    point modulo 4,000, so every id but the delimiter's needs uint32; the delimiter is the last id."""

    name, vocab_size, eot, eot_text = "wide", 70_000, 69_999, "<|end_of_text|>"

    def encode(self, text):
        return [65_536 + ord(c) % 4_000 for c in text]

    def token_bytes(self, i):
        return b"<%d>" % i


def _wide_job(tmp_path, out, **kw):
    spec_file = tmp_path / "wide.tok"
    spec_file.write_text("a synthetic tokenizer")
    return Job(out_dir=str(out), prefix="w", tokenizer=TokenizerSpec("wide", (str(spec_file),)), config={},
               stream_factory=lambda name: StreamSpec(name, "train", head_tokens=100, head_split="val"),
               shard_size=64, workers=1, progress=False, **kw)


def test_vocabulary_over_65536_writes_uint32_shards_and_resumes(tmp_path, monkeypatch, capsys):
    """A tokenizer of more than 65,536 ids (Llama-3's 128,256) writes version-2 (uint32) shards:
    every id whole, across shard boundaries, a folded last shard and a resumed run (byte-identical
    to an uninterrupted one). Passed before this audit; kept so that the uint32 path, which none of
    the three built-in tokenizers takes, stays tested."""
    tok = _WideTokenizer()
    monkeypatch.setattr(pipeline, "build", lambda spec: tok)
    texts = [f"document {i}: " + "ü€😀" * (i % 7) + "x" * (i % 50) for i in range(60)]
    source = Source(name="s", open=lambda bad: (Doc(t, f"doc {i}") for i, t in enumerate(texts)),
                    route=lambda doc: "main")
    assert _wide_job(tmp_path, tmp_path / "a").run([source]) == 0
    want = np.concatenate([[tok.eot] + tok.encode(t) for t in texts])
    files = sorted((f for f in os.listdir(tmp_path / "a") if f.endswith(".bin")), key=lambda f: f[-10:])
    assert files[0] == "w_val_000000.bin" and len(files) > 20
    got = np.concatenate([np.asarray(read_shard(str(tmp_path / "a" / f), vocab_size=tok.vocab_size)) for f in files])
    assert got.tolist() == want.tolist() and got.max() == tok.eot and got[got != tok.eot].min() >= 65_536
    assert {read_header(str(tmp_path / "a" / f)).version for f in files} == {2}
    assert read_header(str(tmp_path / "a" / files[0])).num_tokens == 100
    # interrupted every 7 shards and resumed: the same bytes
    for _ in range(20):
        if _wide_job(tmp_path, tmp_path / "b", stop_after_shards=7).run([source]) == 0:
            break
    assert all_files_digest(tmp_path / "b") == all_files_digest(tmp_path / "a")
    capsys.readouterr()
