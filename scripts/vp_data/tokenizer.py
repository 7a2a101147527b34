"""The three tokenizers the papers used, behind one interface, plus the vptok exporter.

  gpt2    GPT-2 BPE through tiktoken, built from the local encoder.json + vocab.bpe in the
          cache (never tiktoken's own network fetch). 50257 ids, <|endoftext|> = 50256.
  neox    GPT-NeoX-20B BPE (used by RedPajama-INCITE) through HF `tokenizers`, from
          tokenizer.json. 50277 ids, <|endoftext|> = 0.
  llama2  Llama-2 SentencePiece through `sentencepiece`, from tokenizer.model. 32000 ids.

Every document becomes `[delimiter] + encode(text)`: the delimiter goes *before* each
document, as in llm.c (`tokens = [eot]; tokens.extend(enc.encode_ordinary(doc))`). For
gpt2/neox it is <|endoftext|>; for llama2 it is <s> (id 1), which is how Llama/llama2.c
mark document starts.

Document text is always encoded as ordinary text: a literal "<|endoftext|>" inside a
document becomes ordinary BPE tokens, never the control id (tiktoken `encode_ordinary`,
`tokenizers` with `encode_special_tokens=True`; SentencePiece never matches control
symbols in text). So the only control tokens in a shard are the delimiters we insert.

vptok (compact tokenizer for the C++ trainer: decodes samples, encodes --sample-prompt):
  header 256 little-endian int32: [0]=20261122, [1]=2, [2]=vocab size N,
  [3]=document delimiter id (the "end-of-text" id; -1 if none), [4]=encoder kind
  (0 decode only, 1 byte-level BPE, 2 SentencePiece BPE), [5]=merges M (kind 1),
  [6]=added tokens A (kind 1), [7]=flags (kind 1: bit 0 NFC-normalize first; kind 2: bit 0
  add_dummy_prefix), [8]=unk id
  (kind 2; -1 if none), rest 0;
  then for id 0..N-1: uint32 byte length, then that many raw bytes;
  then kind 1: M int32 triples (left, right, merged) in merge order, then A int32 ids of the
  added tokens matched whole in text before BPE; kind 2: N (float32 score, int32 type) pairs.
  docs/formats.md has the details. Version 1 files (no encoder) are still read.

CLI:  PYTHONPATH=scripts python -m vp_data.tokenizer export --tokenizer gpt2 --out gpt2.vptok
      PYTHONPATH=scripts python -m vp_data.tokenizer encode --tokenizer neox "Hello world"
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
from dataclasses import dataclass

import numpy as np

from . import DataError
from . import cache
from .shards import write_atomic

VPTOK_MAGIC = 20261122
VPTOK_VERSION = 2
VPTOK_HEADER_INTS = 256
ENCODER_NONE, ENCODER_BYTE_BPE, ENCODER_SENTENCEPIECE = 0, 1, 2
# SentencePiece's piece types (sentencepiece_model.proto, ModelProto.SentencePiece.Type)
SP_NORMAL, SP_UNKNOWN, SP_CONTROL, SP_USER_DEFINED, SP_UNUSED, SP_BYTE = 1, 2, 3, 4, 5, 6

NAMES = ("gpt2", "neox", "llama2")
ALIASES = {
    "gpt2": "gpt2",
    "gpt-2": "gpt2",
    "neox": "neox",
    "gpt-neox": "neox",
    "gpt-neox-20b": "neox",
    "neox-20b": "neox",
    "llama2": "llama2",
    "llama-2": "llama2",
}

# GPT-2's pre-tokenizer regex. We take tiktoken's own definition (newer tiktoken uses an
# equivalent, faster spelling with possessive quantifiers) so we match tiktoken's "gpt2"
# encoding exactly; the fallback is the original openai/gpt-2 pattern.
try:
    from tiktoken_ext.openai_public import r50k_pat_str as GPT2_PAT
except ImportError:  # pragma: no cover
    GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT2_EOT = "<|endoftext|>"


def canonical_name(name: str) -> str:
    try:
        return ALIASES[name.lower()]
    except KeyError:
        raise DataError(f"unknown tokenizer {name!r}; choose one of {', '.join(NAMES)}") from None


@dataclass(frozen=True)
class TokenizerSpec:
    """A picklable description (name + local files) from which workers build the tokenizer."""

    name: str
    files: tuple

    def fingerprint(self) -> dict:
        return {"name": self.name, "files_sha256": [cache.sha256_file(f) for f in self.files]}


def resolve(name: str, path: str | None = None) -> TokenizerSpec:
    """Find the tokenizer's files: an explicit --tokenizer-path, else the cache (downloading
    into the cache when online). Raises DataError naming the missing file otherwise."""
    name = canonical_name(name)
    if name == "gpt2":
        if path:
            d = path if os.path.isdir(path) else os.path.dirname(path)
            files = (os.path.join(d, "encoder.json"), os.path.join(d, "vocab.bpe"))
        else:
            files = (cache.fetch("gpt2/encoder.json"), cache.fetch("gpt2/vocab.bpe"))
    elif name == "neox":
        if path:
            files = (os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path,)
        else:
            files = (cache.fetch("gpt-neox-20b/tokenizer.json"),)
    else:
        if path:
            files = (os.path.join(path, "tokenizer.model") if os.path.isdir(path) else path,)
        else:
            files = (cache.fetch("llama2/tokenizer.model"),)
    for f in files:
        if not os.path.isfile(f):
            raise DataError(f"tokenizer file not found: {f} (tokenizer {name})")
    return TokenizerSpec(name, tuple(os.path.abspath(f) for f in files))


def _bytes_to_unicode() -> dict:
    """GPT-2's reversible byte <-> printable-unicode map (as in openai/gpt-2 encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


BYTE_DECODER = {u: b for b, u in _bytes_to_unicode().items()}


def _byte_level_to_bytes(token: str, where: str) -> bytes:
    try:
        return bytes(BYTE_DECODER[c] for c in token)
    except KeyError as e:
        raise DataError(f"{where}: token {token!r} is not byte-level BPE (char {e.args[0]!r})") from None


def replace_surrogates(text: str) -> str:
    """Each lone surrogate (U+D800..U+DFFF, which JSON's \\ud800 escapes can produce, but UTF-8 cannot
    encode) becomes U+FFFD. This is what tiktoken, and so our GPT-2 tokenizer, does, by the same
    round trip through UTF-16 (a surrogate pair left as two code points becomes its character);
    HF tokenizers and SentencePiece raise instead, so NeoX and Llama-2 call this first and every
    tokenizer sees the same text."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class Tokenizer:
    name: str
    vocab_size: int
    eot: int  # the document delimiter put before every document
    eot_text: str

    def encode(self, text: str) -> list:
        raise NotImplementedError

    def decode(self, ids) -> str:
        raise NotImplementedError

    def token_bytes(self, i: int) -> bytes:
        raise NotImplementedError

    def encoder_spec(self) -> dict:
        """What the C++ encoder needs to reproduce encode(): {"kind": ENCODER_BYTE_BPE,
        "merges": [(left, right, merged)...], "added": [ids], "nfc": bool}, {"kind": ENCODER_SENTENCEPIECE,
        "scores", "types", "add_dummy_prefix", "unk"}, or {"kind": ENCODER_NONE, "why": ...}."""
        return {"kind": ENCODER_NONE, "why": f"{self.name}: no C++ encoder"}

    @property
    def dtype(self) -> np.dtype:
        from .shards import dtype_for_version, version_for_vocab

        return dtype_for_version(version_for_vocab(self.vocab_size))

    def encode_doc(self, text: str) -> np.ndarray:
        ids = self.encode(text)
        out = np.empty(len(ids) + 1, dtype=self.dtype)
        out[0] = self.eot
        out[1:] = ids
        return out


class GPT2Tokenizer(Tokenizer):
    def __init__(self, encoder_json: str, vocab_bpe: str):
        import tiktoken

        self.name = "gpt2"
        try:
            with open(encoder_json, "rb") as f:
                encoder = json.loads(f.read())
            with open(vocab_bpe, "r", encoding="utf-8") as f:
                merges = f.read().split("\n")
        except (OSError, ValueError) as e:
            raise DataError(f"cannot read GPT-2 tokenizer files {encoder_json}, {vocab_bpe}: {e}") from None
        if GPT2_EOT not in encoder:
            raise DataError(f"{encoder_json}: no {GPT2_EOT} entry; not a GPT-2 encoder.json")
        eot = encoder.pop(GPT2_EOT)
        ranks = {_byte_level_to_bytes(k, encoder_json): v for k, v in encoder.items()}
        # Same consistency check tiktoken does: token 256+i must be merge i of vocab.bpe,
        # because tiktoken applies merges in rank order.
        merge_lines = [m for m in merges[1:] if m]
        self._merges = []  # (left id, right id, merged id) in merge order
        for i, m in enumerate(merge_lines):
            a, b = (_byte_level_to_bytes(x, vocab_bpe) for x in m.split(" "))
            if ranks.get(a + b) != 256 + i or a not in ranks or b not in ranks:
                raise DataError(f"{vocab_bpe}: merge {i} ({m!r}) does not match {encoder_json}; mismatched files")
            self._merges.append((ranks[a], ranks[b], 256 + i))
        self.enc = tiktoken.Encoding(
            name="gpt2-local",
            pat_str=GPT2_PAT,
            mergeable_ranks=ranks,
            special_tokens={GPT2_EOT: eot},
            explicit_n_vocab=len(ranks) + 1,
        )
        self.vocab_size = self.enc.n_vocab
        self.eot = eot
        self.eot_text = GPT2_EOT

    def encode(self, text):
        return self.enc.encode_ordinary(text)

    def decode(self, ids):
        return self.enc.decode(list(ids))

    def token_bytes(self, i):
        return self.enc.decode_single_token_bytes(i)

    def encoder_spec(self):
        return {"kind": ENCODER_BYTE_BPE, "merges": self._merges, "added": [], "nfc": False}


class NeoXTokenizer(Tokenizer):
    def __init__(self, path: str):
        from tokenizers import Tokenizer as HFTokenizer

        self.name = "neox"
        try:
            self.tk = HFTokenizer.from_file(path)
        except Exception as e:  # tokenizers raises a plain Exception on bad JSON
            raise DataError(f"cannot load {path} as an HF tokenizers tokenizer.json: {e}") from None
        # Document text is data: a literal "<|endoftext|>" in it must not become id 0.
        self.tk.encode_special_tokens = True
        self.vocab_size = self.tk.get_vocab_size(with_added_tokens=True)
        eot = self.tk.token_to_id("<|endoftext|>")
        if eot is None:
            raise DataError(f"{path}: no <|endoftext|> token; not a GPT-NeoX tokenizer.json")
        self.eot = eot
        self.eot_text = "<|endoftext|>"
        self._added = {i: t.content for i, t in self.tk.get_added_tokens_decoder().items()}
        self._path = path

    def encode(self, text):
        return self.tk.encode(replace_surrogates(text), add_special_tokens=False).ids

    def decode(self, ids):
        return self.tk.decode(list(ids), skip_special_tokens=False)

    def token_bytes(self, i):
        if i in self._added:
            return self._added[i].encode("utf-8")
        tok = self.tk.id_to_token(i)
        if tok is None:
            raise DataError(f"{self._path}: no token with id {i}")
        return _byte_level_to_bytes(tok, self._path)

    def encoder_spec(self):
        """The BPE merges, the non-special added tokens and the normalizer of tokenizer.json. HF
        `tokenizers` matches those added tokens (NeoX's runs of 2..24 spaces) whole in the text,
        longest first, before BPE; special ones (<|endoftext|>) never match document text. The
        C++ encoder does NFC (NeoX's normalizer) or nothing; another normalizer is not exported."""
        with open(self._path, "rb") as f:
            doc = json.loads(f.read())
        model, pre = doc.get("model") or {}, doc.get("pre_tokenizer") or {}
        plain_bpe = (
            model.get("type") == "BPE"
            and not model.get("dropout")
            and not model.get("continuing_subword_prefix")
            and not model.get("end_of_word_suffix")
            and not model.get("byte_fallback")
            and not model.get("ignore_merges")
        )
        gpt2_split = pre.get("type") == "ByteLevel" and pre.get("use_regex", True) and not pre.get("add_prefix_space")
        if not (plain_bpe and gpt2_split):
            return {"kind": ENCODER_NONE, "why": f"{self._path}: not a plain byte-level BPE with GPT-2's pre-tokenizer"}
        norm = doc.get("normalizer")
        steps = norm.get("normalizers", []) if norm and norm.get("type") == "Sequence" else [norm] if norm else []
        if any(step.get("type") != "NFC" for step in steps):
            return {"kind": ENCODER_NONE, "why": f"{self._path}: normalizer {norm} (the C++ encoder does NFC or none)"}
        vocab = model["vocab"]
        merges = []
        for i, m in enumerate(model["merges"]):
            a, b = m.split(" ") if isinstance(m, str) else m
            if a not in vocab or b not in vocab or a + b not in vocab:
                raise DataError(f"{self._path}: merge {i} ({a!r}, {b!r}) names a token not in the vocabulary")
            merges.append((vocab[a], vocab[b], vocab[a + b]))
        added = sorted(t.get("id") for t in doc.get("added_tokens", []) if not t.get("special"))
        return {"kind": ENCODER_BYTE_BPE, "merges": merges, "added": added, "nfc": bool(steps)}


def _proto_fields(buf: bytes):
    """(field number, wire type, value) of a serialized protobuf message: just enough of the
    wire format to read a SentencePiece model (varints, 32-bit floats, length-delimited)."""
    pos = 0

    def varint():
        nonlocal pos
        shift = value = 0
        while True:
            if pos >= len(buf):
                raise DataError("truncated protobuf varint")
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while pos < len(buf):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            yield field, wire, varint()
        elif wire == 1:
            yield field, wire, buf[pos : pos + 8]
            pos += 8
        elif wire == 2:
            n = varint()
            yield field, wire, buf[pos : pos + n]
            pos += n
        elif wire == 5:
            yield field, wire, buf[pos : pos + 4]
            pos += 4
        else:
            raise DataError(f"unsupported protobuf wire type {wire}")


class Llama2Tokenizer(Tokenizer):
    def __init__(self, path: str):
        import sentencepiece as spm

        self.name = "llama2"
        try:
            self.sp = spm.SentencePieceProcessor(model_file=path)
        except Exception as e:
            raise DataError(f"cannot load {path} as a SentencePiece model: {e}") from None
        self.vocab_size = self.sp.vocab_size()
        # Llama marks the start of every document with <s>; that is our delimiter.
        self.eot = self.sp.bos_id()
        if self.eot < 0:
            raise DataError(f"{path}: the SentencePiece model has no <s> (bos) piece")
        self.eot_text = self.sp.id_to_piece(self.eot)

    def encode(self, text):
        return self.sp.encode(replace_surrogates(text))

    def decode(self, ids):
        return self.sp.decode(list(int(i) for i in ids))

    def token_bytes(self, i):
        piece = self.sp.id_to_piece(i)
        if self.sp.is_byte(i):  # "<0xNN>" byte-fallback pieces stand for one raw byte
            return bytes([int(piece[3:5], 16)])
        return piece.replace("\u2581", " ").encode("utf-8")

    def encoder_spec(self):
        """Scores and piece types for SentencePiece's BPE, if the model is one the C++ encoder
        reproduces: model_type BPE, the identity normalizer with spaces escaped to U+2581 and not
        collapsed, no user-defined pieces (llama2's tokenizer.model is)."""
        proto = self.sp.serialized_model_proto()
        model_type, norm, user_defined = 1, {}, 0  # TrainerSpec.model_type defaults to UNIGRAM
        for field, _, value in _proto_fields(proto):
            if field == 1:  # a SentencePiece: its field 3 is the piece type
                user_defined += any(f == 3 and v == SP_USER_DEFINED for f, _, v in _proto_fields(value))
            elif field == 2:  # TrainerSpec
                for f, _, v in _proto_fields(value):
                    if f == 3:
                        model_type = v
            elif field == 3:  # NormalizerSpec
                for f, _, v in _proto_fields(value):
                    norm[f] = v
        name = norm.get(1, b"").decode("utf-8", "replace")
        add_dummy_prefix = norm.get(3, 1) != 0
        remove_extra_ws = norm.get(4, 1) != 0
        escape_ws = norm.get(5, 1) != 0
        types = []
        for i in range(self.vocab_size):
            types.append(
                SP_BYTE if self.sp.is_byte(i) else SP_CONTROL if self.sp.is_control(i)
                else SP_UNKNOWN if self.sp.is_unknown(i) else SP_UNUSED if self.sp.is_unused(i) else SP_NORMAL
            )
        why = None
        if model_type != 2:
            why = f"model_type {model_type} is not BPE (2)"
        elif name != "identity" or not escape_ws or remove_extra_ws:
            why = f"normalizer {name!r} (escape_whitespaces {escape_ws}, remove_extra_whitespaces {remove_extra_ws}) is not the identity"
        elif user_defined:
            why = f"{user_defined} user-defined pieces"
        if why:
            return {"kind": ENCODER_NONE, "why": f"{self.name}: {why}"}
        return {
            "kind": ENCODER_SENTENCEPIECE,
            "scores": [self.sp.get_score(i) for i in range(self.vocab_size)],
            "types": types,
            "add_dummy_prefix": add_dummy_prefix,
            "unk": self.sp.unk_id(),
        }


_BUILT: dict = {}


# (vocabulary size, delimiter id) of each named tokenizer. The NeoX file in the cache has no
# pinned hash (cache.py), and any --tokenizer-path can be the wrong file: a different vocabulary
# would make shards that a model of this tokenizer reads as garbage, so build() checks these.
VOCAB_FACTS = {"gpt2": (50257, 50256), "neox": (50277, 0), "llama2": (32000, 1)}


def build(spec: TokenizerSpec) -> Tokenizer:
    """Build (once per process: tokenizers are read-only after construction) the
    tokenizer described by `spec`."""
    key = (spec, tuple(os.stat(f).st_mtime_ns for f in spec.files))
    tok = _BUILT.get(key)
    if tok is None:
        if spec.name == "gpt2":
            tok = GPT2Tokenizer(*spec.files)
        elif spec.name == "neox":
            tok = NeoXTokenizer(spec.files[0])
        else:
            tok = Llama2Tokenizer(spec.files[0])
        want = VOCAB_FACTS[spec.name]
        if (tok.vocab_size, tok.eot) != want:
            raise DataError(f"{spec.files[0]}: vocabulary of {tok.vocab_size:,} with delimiter id {tok.eot}, but the "
                            f"{spec.name} tokenizer has {want[0]:,} with delimiter id {want[1]}: the wrong file; "
                            f"replace it (in the cache: delete it and re-run, or refill the cache) or fix "
                            f"--tokenizer-path")
        _BUILT[key] = tok
    return tok


def load(name: str, path: str | None = None) -> Tokenizer:
    return build(resolve(name, path))


def export_vptok(tok: Tokenizer, path: str) -> None:
    """Writes the tokenizer's bytes per id and, where the C++ encoder can reproduce tok.encode,
    what it needs (version 2; docs/formats.md)."""
    spec = tok.encoder_spec()
    header = np.zeros(VPTOK_HEADER_INTS, dtype="<i4")
    header[0] = VPTOK_MAGIC
    header[1] = VPTOK_VERSION
    header[2] = tok.vocab_size
    header[3] = tok.eot if tok.eot is not None else -1
    header[4] = spec["kind"]
    if spec["kind"] == ENCODER_NONE:
        print(f"note: {path} decodes only (no --sample-prompt): {spec['why']}", file=sys.stderr)
    chunks = [None]
    for i in range(tok.vocab_size):
        b = tok.token_bytes(i)
        chunks.append(struct.pack("<I", len(b)))
        chunks.append(b)
    if spec["kind"] == ENCODER_BYTE_BPE:
        header[5] = len(spec["merges"])
        header[6] = len(spec["added"])
        header[7] = 1 if spec["nfc"] else 0
        chunks.append(np.asarray(spec["merges"], dtype="<i4").reshape(-1, 3).tobytes())
        chunks.append(np.asarray(spec["added"], dtype="<i4").tobytes())
    elif spec["kind"] == ENCODER_SENTENCEPIECE:
        header[7] = 1 if spec["add_dummy_prefix"] else 0
        header[8] = spec["unk"]
        pairs = np.zeros(tok.vocab_size, dtype=[("score", "<f4"), ("type", "<i4")])
        pairs["score"] = spec["scores"]
        pairs["type"] = spec["types"]
        chunks.append(pairs.tobytes())
    chunks[0] = header.tobytes()
    write_atomic(path, chunks, sum(len(c) for c in chunks))


def vptok_version(path: str) -> int:
    """The version slot of a vptok file (0 if it is not one)."""
    with open(path, "rb") as f:
        head = f.read(8)
    if len(head) < 8 or struct.unpack("<i", head[:4])[0] != VPTOK_MAGIC:
        return 0
    return struct.unpack("<i", head[4:8])[0]


def read_vptok(path: str) -> dict:
    """A vptok file (version 1 or 2) as {"vocab_size", "eot", "pieces", "kind"} plus, for an
    encoder, "merges"/"added"/"nfc" (kind 1) or "scores"/"types"/"add_dummy_prefix"/"unk" (kind 2)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise DataError(f"cannot read vptok file {path}: {e.strerror}") from None
    if len(data) < VPTOK_HEADER_INTS * 4:
        raise DataError(f"{path}: too short for a vptok header")
    header = np.frombuffer(data[: VPTOK_HEADER_INTS * 4], dtype="<i4")
    if header[0] != VPTOK_MAGIC or header[1] not in (1, VPTOK_VERSION):
        raise DataError(f"{path}: bad vptok magic/version {int(header[0])}/{int(header[1])}")
    n = int(header[2])
    kind = int(header[4]) if header[1] >= 2 else ENCODER_NONE
    pieces = []
    off = VPTOK_HEADER_INTS * 4
    for i in range(n):
        if off + 4 > len(data):
            raise DataError(f"{path}: truncated at token {i}")
        (ln,) = struct.unpack_from("<I", data, off)
        off += 4
        pieces.append(data[off : off + ln])
        off += ln
    out = {"vocab_size": n, "eot": int(header[3]), "pieces": pieces, "kind": kind}
    if kind == ENCODER_BYTE_BPE:
        m, a = int(header[5]), int(header[6])
        if off + 12 * m + 4 * a > len(data):
            raise DataError(f"{path}: truncated in the encoder section")
        out["merges"] = [tuple(t) for t in np.frombuffer(data, "<i4", 3 * m, off).reshape(-1, 3).tolist()]
        off += 12 * m
        out["added"] = np.frombuffer(data, "<i4", a, off).tolist()
        out["nfc"] = bool(header[7] & 1)
        off += 4 * a
    elif kind == ENCODER_SENTENCEPIECE:
        if off + 8 * n > len(data):
            raise DataError(f"{path}: truncated in the encoder section")
        pairs = np.frombuffer(data, [("score", "<f4"), ("type", "<i4")], n, off)
        out.update(scores=pairs["score"].tolist(), types=pairs["type"].tolist(),
                   add_dummy_prefix=bool(header[7] & 1), unk=int(header[8]))
        off += 8 * n
    if off != len(data):
        raise DataError(f"{path}: {len(data) - off} trailing bytes after {n} tokens")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m vp_data.tokenizer", description="Tokenizer utilities.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for cmd in ("export", "encode", "info"):
        p = sub.add_parser(cmd)
        p.add_argument("--tokenizer", default="gpt2", help="gpt2 | neox | llama2")
        p.add_argument("--tokenizer-path", help="explicit tokenizer file/dir instead of the cache")
        if cmd == "export":
            p.add_argument("--out", required=True, help="output .vptok file")
        if cmd == "encode":
            p.add_argument("text")
    args = ap.parse_args(argv)
    try:
        tok = load(args.tokenizer, args.tokenizer_path)
        if args.cmd == "export":
            export_vptok(tok, args.out)
            print(f"wrote {args.out}: vocab {tok.vocab_size}, delimiter {tok.eot} {tok.eot_text!r}")
        elif args.cmd == "encode":
            print(tok.encode(args.text))
        else:
            print(f"{tok.name}: vocab {tok.vocab_size}, delimiter {tok.eot} {tok.eot_text!r}, dtype {tok.dtype.name}")
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # e.g. --out in a directory that does not exist
        print(f"error: {e.strerror} ({e.filename}); check the path", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
