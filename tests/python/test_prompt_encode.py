"""The C++ prompt encoder (host/tokenizer.h, run through build/tests/encode_text) against the
tokenizer libraries themselves (conftest's ref_* fixtures: tiktoken, HF tokenizers, sentencepiece),
on real text from ../shared/data and on seeded random strings built to hit the edges of GPT-2's
pre-tokenizer regex and of SentencePiece's byte fallback."""

import gzip
import json
import os
import random
import shutil
import struct
import subprocess
import unicodedata
from pathlib import Path

import pytest

from vp_data import tokenizer

REPO = Path(__file__).resolve().parents[2]
ENCODER = REPO / "build" / "tests" / "encode_text"

# characters chosen for the regex's classes and their borders: ASCII letters and digits, the
# contraction letters, apostrophes, every kind of white space (\s is Unicode White_Space: NBSP,
# U+0085, U+1680, U+2000, U+2028, U+202F, U+3000), control characters that are *not* \s (U+001C,
# U+001F), letters and numbers of other scripts (Arabic-Indic digits, Roman numerals, CJK, Hebrew,
# Devanagari with a combining sign), combining marks, emoji with a skin-tone modifier and ZWJ,
# SentencePiece's U+2581, NUL, a private-use and the last code point; for NFC (NeoX): a
# second mark of another class, Hangul jamo and a syllable, the Angstrom sign (a singleton)
ALPHABET = list("aZ09 '  \t\n\r.,!?-_\"sStTlLvVeErRmMdD") + ["'s", "'ll", "'ve", "'re", "  ", "   ", "\n\n"] + [
    chr(c)
    for c in (0xA0, 0x85, 0x1680, 0x2000, 0x2028, 0x202F, 0x3000, 0x2581, 0xE9, 0x301, 0x660, 0xBD, 0xB2, 0x4E2D,
              0x1F600, 0x1F3FD, 0x200D, 0xFEFF, 0x0, 0x1C, 0x1F, 0x7F, 0x10FFFF, 0xE000, 0x5D0, 0x627, 0x915, 0x94D,
              0x2160, 0x1D7CE, 0x323, 0x1100, 0x1161, 0x11A8, 0xAC00, 0x212B)
]


def random_texts(n, seed=1):
    r = random.Random(seed)
    return ["".join(r.choice(ALPHABET) for _ in range(r.randint(0, 40))) for _ in range(n)]


def real_texts(shared_dir):
    texts = [(Path(shared_dir) / "tinyshakespeare" / "input.txt").read_text()[:200_000]]
    for f in ("samples/c4/c4-sample.01.json.gz", "samples/c4/c4-sample.02.json.gz", "samples/dolma-cc/cc_en_head-0091.jsonl.gz"):
        with gzip.open(Path(shared_dir) / f, "rt", encoding="utf-8") as lines:
            texts += [json.loads(line)["text"] for line in lines]
    with open(Path(shared_dir) / "samples" / "redpajama-arxiv" / "arxiv.jsonl", encoding="utf-8") as lines:
        texts += [json.loads(line)["text"] for _, line in zip(range(30), lines)]
    texts.append((Path(shared_dir) / "samples" / "enwik8" / "enwik8_first100.txt").read_text())
    return texts


EDGES = ["", " ", "  ", "a  b", "a   b\n\n\n c", "trail   ", "   lead", "\n\n", "I'm we'll they've 'S 'LL",
         "<|endoftext|> is text", "<s> </s> <unk>", "\u2581leading \u2581", "x" * 3000, " " * 100 + "y", "3.14159 1,000,000"]


def encode_cpp(tokenizer_file, docs):
    """The C++ encoder's ids for each doc (bytes), or None where it refused the doc as not UTF-8."""
    assert ENCODER.exists(), f"{ENCODER} is missing: make test builds it (make build/tests/encode_text)"
    data = b"".join(struct.pack("<I", len(d)) + d for d in docs)
    p = subprocess.run([str(ENCODER), str(tokenizer_file)], input=data, capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    lines = p.stdout.decode().split("\n")[:-1]
    assert len(lines) == len(docs)
    return [None if line == "invalid-utf8" else [int(x) for x in line.split()] for line in lines]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("vptok")
    for name in ("gpt2", "neox", "llama2"):
        tokenizer.export_vptok(tokenizer.load(name), str(d / f"{name}.vptok"))
    return d


@pytest.fixture(scope="module")
def corpus(shared):
    real = real_texts(shared)
    # the real text decomposed (NFD): what a macOS file name or some PDFs hold; NeoX composes it
    # back before BPE, GPT-2 and Llama-2 encode it as it is
    decomposed = [d for d in (unicodedata.normalize("NFD", t) for t in real) if d not in real]
    return real + decomposed + EDGES + random_texts(2000)


def reference(name, ref_gpt2, ref_neox, ref_llama2):
    return {
        "gpt2": ref_gpt2.encode_ordinary,
        "neox": lambda t: ref_neox.encode(t, add_special_tokens=False).ids,
        "llama2": ref_llama2.encode,
    }[name]


@pytest.mark.parametrize("name", ["gpt2", "neox", "llama2"])
def test_vptok_encodes_as_the_library(name, exported, corpus, ref_gpt2, ref_neox, ref_llama2):
    texts = corpus
    not_nfc = sum(unicodedata.normalize("NFC", t) != t for t in texts)
    assert not_nfc > 300, f"only {not_nfc} texts that NFC changes"  # NeoX's normalizer is exercised
    ref = reference(name, ref_gpt2, ref_neox, ref_llama2)
    got = encode_cpp(exported / f"{name}.vptok", [t.encode("utf-8") for t in texts])
    tokens = 0
    for t, ids in zip(texts, got):
        want = ref(t)
        tokens += len(want)
        if ids != want:
            k = next((i for i, (a, b) in enumerate(zip(ids, want)) if a != b), min(len(ids), len(want)))
            pytest.fail(f"{name}: {t[:60]!r}... differs at token {k}: C++ {ids[k:k + 6]}, library {want[k:k + 6]}")
    assert tokens > 400_000  # the real text is in it


def test_encoder_json_with_vocab_bpe_beside_it(tmp_path, vp_cache, corpus, ref_gpt2):
    """GPT-2's own files: encoder.json encodes when vocab.bpe lies beside it, as the vptok does."""
    src = Path(vp_cache) / "tokenizers" / "gpt2"
    shutil.copy(src / "encoder.json", tmp_path / "encoder.json")
    shutil.copy(src / "vocab.bpe", tmp_path / "vocab.bpe")
    texts = corpus[1:]  # all but Shakespeare: the vptok test has it
    got = encode_cpp(tmp_path / "encoder.json", [t.encode("utf-8") for t in texts])
    assert got == [ref_gpt2.encode_ordinary(t) for t in texts]
    # without vocab.bpe it still decodes, and says why it cannot encode
    (tmp_path / "vocab.bpe").unlink()
    p = subprocess.run([str(ENCODER), str(tmp_path / "encoder.json")], input=b"", capture_output=True)
    assert p.returncode == 1 and b"no vocab.bpe (GPT-2's merges) beside this encoder.json" in p.stderr


def test_malformed_utf8_is_refused(exported):
    docs = [b"\xff", b"ok \xc0\x80", b"\xed\xa0\x80", b"cut \xe2\x96", b"\xf4\x90\x80\x80", b"fine \xe2\x96\x81"]
    for name in ("gpt2", "neox", "llama2"):
        got = encode_cpp(exported / f"{name}.vptok", docs)
        assert got[:5] == [None] * 5 and got[5] is not None, name


def test_vptok_v2_sections_round_trip(exported, ref_llama2):
    gpt2, neox, llama = (tokenizer.read_vptok(str(exported / f"{n}.vptok")) for n in ("gpt2", "neox", "llama2"))
    assert gpt2["kind"] == 1 and len(gpt2["merges"]) == 50000 and gpt2["added"] == []
    assert all(gpt2["pieces"][m] == gpt2["pieces"][a] + gpt2["pieces"][b] for a, b, m in gpt2["merges"])
    assert neox["kind"] == 1 and neox["added"] == list(range(50254, 50277))  # the 23 runs of spaces
    assert neox["nfc"] and not gpt2["nfc"]  # tokenizer.json's normalizer is NFC; GPT-2 has none
    assert llama["kind"] == 2 and llama["add_dummy_prefix"] and llama["unk"] == ref_llama2.unk_id()
    assert llama["types"][:3] == [tokenizer.SP_UNKNOWN, tokenizer.SP_CONTROL, tokenizer.SP_CONTROL]
    assert sum(t == tokenizer.SP_BYTE for t in llama["types"]) == 256
    assert all(llama["scores"][i] == pytest.approx(ref_llama2.get_score(i)) for i in range(0, 32000, 997))


def test_version_1_file_decodes_but_cannot_encode(tmp_path, exported):
    """A vptok from before version 2: read for decoding; encoding says to re-export."""
    v2 = tokenizer.read_vptok(str(exported / "gpt2.vptok"))
    header = bytearray(1024)
    struct.pack_into("<4i", header, 0, tokenizer.VPTOK_MAGIC, 1, v2["vocab_size"], v2["eot"])
    body = b"".join(struct.pack("<I", len(p)) + p for p in v2["pieces"])
    (tmp_path / "old.vptok").write_bytes(bytes(header) + body)
    assert tokenizer.read_vptok(str(tmp_path / "old.vptok"))["pieces"] == v2["pieces"]
    p = subprocess.run([str(ENCODER), str(tmp_path / "old.vptok")], input=b"", capture_output=True)
    assert p.returncode == 1 and b"version 1 vptok file, which holds no merges (re-export it" in p.stderr


def test_neox_normalizer_decides_the_export(tmp_path, vp_cache):
    """The exporter writes NFC for tokenizer.json's NFC normalizer (alone or in a Sequence) and no
    encoder at all for a normalizer the C++ side does not do (here Lowercase), rather than a file
    whose prompts encode otherwise than the shards."""
    doc = json.loads((Path(vp_cache) / "tokenizers" / "gpt-neox-20b" / "tokenizer.json").read_text())
    for normalizer, kind, nfc in (({"type": "NFC"}, 1, True), ({"type": "Sequence", "normalizers": [{"type": "NFC"}]}, 1, True),
                                  (None, 1, False), ({"type": "Lowercase"}, 0, None),
                                  ({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]}, 0, None)):
        path = tmp_path / "tokenizer.json"
        path.write_text(json.dumps(dict(doc, normalizer=normalizer)))
        spec = tokenizer.NeoXTokenizer(str(path)).encoder_spec()
        assert spec["kind"] == kind and spec.get("nfc") == nfc, normalizer
        if kind == 0:
            assert "normalizer" in spec["why"]
