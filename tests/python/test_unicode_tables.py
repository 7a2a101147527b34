"""The C++ prompt encoder's Unicode (host/unicode.h): its generated tables are current, and its NFC
equals HF tokenizers' NFC (the normalizer of GPT-NeoX-20B's tokenizer.json, which made the shards)
for every code point alone, for every code point's NFD, for every pair Python's unicodedata
composes, and for random sequences built to hit the hard parts of the algorithm: combining marks
out of canonical order, blocked and unblocked compositions, composition exclusions, singletons,
two-starter compositions (Oriya, Kannada), Hangul syllables composed from jamo and decomposed
again, and marks of recent Unicode versions that tokenizers' older tables do not know."""

import random
import struct
import subprocess
import sys
import unicodedata
from pathlib import Path

from tokenizers import normalizers

REPO = Path(__file__).resolve().parents[2]
ENCODER = REPO / "build" / "tests" / "encode_text"

HF_NFC = normalizers.NFC().normalize_str
# combining marks of many classes (230 above, 220 below, 202 attached, 1 overlay, 240 ypogegrammeni,
# Hebrew and Tibetan fixed-position classes, 9 virama), musical-symbol marks from plane 1, the
# Dives Akuru letters and marks of Unicode 13 (U+11935 + U+11930 composes in unicodedata, not in
# tokenizers), and 40 marks drawn from all of unicodedata's
MARKS = [chr(c) for c in range(0x300, 0x370)] + [chr(c) for c in (0x0345, 0x05B0, 0x05BC, 0x0F71, 0x0F72, 0x0F74, 0x0F80,
                                                             0x094D, 0x093C, 0x302A, 0x1D165, 0x1D16E, 0x0344, 0x0340,
                                                             0x11930, 0x1193D, 0x1193E, 0x11943)]
MARKS += random.Random(5).sample([chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and unicodedata.combining(chr(c))], 40)
# starters: plain letters, precomposed letters (one and two levels deep), the second starter of
# Oriya/Kannada/Malayalam vowel signs, excluded composites (U+0958), singletons (U+212B Angstrom,
# U+2126 Ohm), Hangul L, V and T jamo and syllables with and without a T, Greek with iota marks
BASES = list("aeiouAEIOUnNcCsSzZ xy") + [chr(c) for c in (0x00DC, 0x01D5, 0x0B47, 0x0B3E, 0x0B56, 0x0B57, 0x0CBF, 0x0CC6, 0x0CD5,
                                                     0x0CC2, 0x0D46, 0x0D3E, 0x0915, 0x0958, 0x1100, 0x1112, 0x1161, 0x1175,
                                                     0x11A7, 0x11A8, 0x11C2, 0xAC00, 0xAC01, 0xD7A3, 0x212B, 0x2126, 0x1E9B,
                                                     0x0391, 0x03B9, 0x1FBF, 0x1F00, 0x0F40, 0x4E2D, 0x11935, 0x11938)]


def nfc_cpp(docs):
    """Each doc's NFC by build/tests/encode_text --nfc, as a string."""
    assert ENCODER.exists(), f"{ENCODER} is missing: make test builds it (make build/tests/encode_text)"
    data = b"".join(struct.pack("<I", len(d.encode())) + d.encode() for d in docs)
    p = subprocess.run([str(ENCODER), "--nfc"], input=data, capture_output=True, timeout=300, check=True)
    lines = p.stdout.decode().split("\n")[:-1]
    assert len(lines) == len(docs)
    return ["".join(chr(int(h, 16)) for h in line.split()) for line in lines]


def test_unicode_headers_are_current():
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_unicode_tables.py"), "--check"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def assert_as_tokenizers(docs):
    got = nfc_cpp(docs)
    bad = [(d, g) for d, g in zip(docs, got) if g != HF_NFC(d)]
    assert not bad, (f"{len(bad)} of {len(docs)} differ from tokenizers' NFC, first {[hex(ord(c)) for c in bad[0][0]]}: "
                     f"C++ {[hex(ord(c)) for c in bad[0][1]]}, tokenizers {[hex(ord(c)) for c in HF_NFC(bad[0][0])]}")
    return got


def test_nfc_of_every_code_point_and_its_nfd():
    singles = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    got = assert_as_tokenizers(singles)
    assert sum(g != d for d, g in zip(singles, got)) > 1000  # it did change the ones that change
    assert_as_tokenizers([d for d in (unicodedata.normalize("NFD", c) for c in singles) if len(d) > 1])


def test_nfc_of_every_pair_unicodedata_composes():
    pairs = []
    for c in range(0x110000):
        one_level = unicodedata.decomposition(chr(c)) if not 0xD800 <= c <= 0xDFFF else ""
        if one_level and not one_level.startswith("<") and len(one_level.split()) == 2:
            pairs.append("".join(chr(int(x, 16)) for x in one_level.split()))
    assert len(pairs) > 900
    assert_as_tokenizers(pairs)


def test_nfc_of_random_sequences():
    r = random.Random(7)
    docs = []
    for _ in range(20000):
        s = "".join(r.choice(MARKS if r.random() < 0.5 else BASES) for _ in range(r.randint(0, 14)))
        docs += [s, unicodedata.normalize("NFD", s)]
    assert_as_tokenizers(docs)
