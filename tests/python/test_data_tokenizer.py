"""The tokenizer module against the libraries themselves, and the vptok exporter."""

import gzip
import os
import struct

import numpy as np
import pytest

from vp_data import DataError, tokenizer

TEXTS = [
    "Hello world! It's a test, isn't it?  Numbers 12345 and 3.14159.\n\nNew paragraph\ttab.",
    "Unicode: café, naïve, 日本語, emoji 🙂, Ελληνικά, and a long   run    of     spaces.",
    "A literal <|endoftext|> inside a document is text, not a delimiter. </s> <s> <unk>",
    "\r\nWindows line\r\nendings\r\n",
    "",
]


@pytest.fixture(scope="module")
def gutenberg_text(vp_cache):
    with gzip.open(os.path.join(vp_cache, "corpus", "gutenberg-en-50mb", "corpus.txt.gz")) as f:
        return f.read(300_000).decode("utf-8", errors="ignore")


@pytest.mark.parametrize("name", ["gpt2", "neox", "llama2"])
def test_encode_matches_library(name, ref_encode, gutenberg_text):
    tok = tokenizer.load(name)
    for t in TEXTS + [gutenberg_text]:
        assert tok.encode_doc(t).tolist() == ref_encode(name, t)


def test_gpt2_matches_hf_tokenizer_json(vp_cache, gutenberg_text):
    """tiktoken built from encoder.json/vocab.bpe == the HF GPT-2 tokenizer.json."""
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(os.path.join(vp_cache, "tokenizers", "gpt2", "tokenizer.json"))
    tok = tokenizer.load("gpt2")
    for t in TEXTS[:2] + [TEXTS[3], gutenberg_text]:
        assert tok.encode(t) == hf.encode(t, add_special_tokens=False).ids


def test_vocab_facts():
    g, n, ll = tokenizer.load("gpt2"), tokenizer.load("gpt-neox-20b"), tokenizer.load("llama-2")
    assert (g.vocab_size, g.eot, g.dtype) == (50257, 50256, np.dtype("<u2"))
    assert (n.vocab_size, n.eot, n.dtype) == (50277, 0, np.dtype("<u2"))
    assert (ll.vocab_size, ll.eot, ll.dtype) == (32000, 1, np.dtype("<u2"))


def test_literal_special_text_is_not_a_delimiter():
    for name in ("gpt2", "neox", "llama2"):
        tok = tokenizer.load(name)
        ids = tok.encode("a <|endoftext|> b <s> c")
        assert tok.eot not in ids, name


def test_unknown_tokenizer():
    with pytest.raises(DataError, match="unknown tokenizer"):
        tokenizer.resolve("bert")


def test_missing_tokenizer_file_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("VALUEPATH_CACHE", str(tmp_path / "empty"))
    with pytest.raises(DataError) as e:
        tokenizer.resolve("gpt2")
    msg = str(e.value)
    assert os.path.join("tokenizers", "gpt2", "encoder.json") in msg and "offline" in msg
    assert "fill_cache_from_shared.sh ../shared/data" in msg and "does not hold" not in msg  # the shared data has it
    with pytest.raises(DataError, match="tokenizer file not found: .*nope.model"):
        tokenizer.resolve("llama2", str(tmp_path / "nope.model"))


def test_corrupt_cached_tokenizer(tmp_path, monkeypatch, vp_cache):
    d = tmp_path / "c" / "tokenizers" / "gpt2"
    d.mkdir(parents=True)
    (d / "encoder.json").write_text("{}")
    monkeypatch.setenv("VALUEPATH_CACHE", str(tmp_path / "c"))
    with pytest.raises(DataError, match="encoder.json has sha256 .* expected 1961396"):
        tokenizer.resolve("gpt2")


def _read_vptok_raw(path):
    raw = open(path, "rb").read()
    header = np.frombuffer(raw[:1024], dtype="<i4")
    pieces, off = [], 1024
    for _ in range(header[2]):
        (n,) = struct.unpack_from("<I", raw, off)
        pieces.append(raw[off + 4 : off + 4 + n])
        off += 4 + n
    # version 2: the encoder section fills the rest exactly (docs/formats.md)
    section = {1: 12 * int(header[5]) + 4 * int(header[6]), 2: 8 * int(header[2])}.get(int(header[4]), 0)
    assert off + section == len(raw)
    return header, pieces


@pytest.mark.parametrize("name", ["gpt2", "neox", "llama2"])
def test_vptok_export(name, tmp_path, gutenberg_text, ref_gpt2, ref_llama2):
    tok = tokenizer.load(name)
    path = tmp_path / f"{name}.vptok"
    tokenizer.export_vptok(tok, str(path))
    header, pieces = _read_vptok_raw(path)
    assert header[0] == 20261122 and header[1] == 2
    assert header[2] == tok.vocab_size and header[3] == tok.eot
    kind, merges, added = {"gpt2": (1, 50000, 0), "neox": (1, 50009, 23), "llama2": (2, 0, 0)}[name]
    assert list(header[4:7]) == [kind, merges, added]
    assert list(header[7:9]) == {"gpt2": [0, 0], "neox": [1, 0], "llama2": [1, ref_llama2.unk_id()]}[name]  # flags: NFC; dummy prefix
    assert not header[9:].any()
    assert tokenizer.read_vptok(str(path))["pieces"] == pieces
    text = gutenberg_text[:50_000] + TEXTS[1]
    decoded = b"".join(pieces[i] for i in tok.encode(text))
    if name == "gpt2":
        assert pieces[50256] == b"<|endoftext|>"
        assert all(pieces[i] == ref_gpt2.decode_single_token_bytes(i) for i in range(50257))
        assert decoded == text.encode()
    elif name == "neox":
        import unicodedata

        assert pieces[0] == b"<|endoftext|>" and pieces[50276] == b"  " and pieces[50254] == b" " * 24
        assert decoded == unicodedata.normalize("NFC", text).encode()  # NeoX normalizes to NFC
    else:
        assert pieces[1] == b"<s>" and pieces[2] == b"</s>"
        assert pieces[3] == b"\x00" and pieces[3 + 0xE6] == b"\xe6"  # <0xNN> byte pieces
        assert pieces[ref_llama2.piece_to_id("\u2581the")] == b" the"
        assert decoded == b" " + text.encode()  # SentencePiece's dummy prefix space


def test_tokenizer_cli(tmp_path, capsys):
    assert tokenizer.main(["export", "--tokenizer", "llama2", "--out", str(tmp_path / "l.vptok")]) == 0
    assert (tmp_path / "l.vptok").exists()
    assert tokenizer.main(["encode", "--tokenizer", "gpt2", "Hello world"]) == 0
    assert "[15496, 995]" in capsys.readouterr().out
