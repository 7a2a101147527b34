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

vptok (compact tokenizer for decoding samples in C++):
  header 256 little-endian int32: [0]=20261122, [1]=1, [2]=vocab size N,
  [3]=document delimiter id (the "end-of-text" id; -1 if none), rest 0;
  then for id 0..N-1: uint32 byte length, then that many raw bytes.

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
VPTOK_VERSION = 1

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
        for i, m in enumerate(merge_lines):
            a, b = m.split(" ")
            tok = _byte_level_to_bytes(a, vocab_bpe) + _byte_level_to_bytes(b, vocab_bpe)
            if ranks.get(tok) != 256 + i:
                raise DataError(f"{vocab_bpe}: merge {i} ({m!r}) does not match {encoder_json}; mismatched files")
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
        return self.tk.encode(text, add_special_tokens=False).ids

    def decode(self, ids):
        return self.tk.decode(list(ids), skip_special_tokens=False)

    def token_bytes(self, i):
        if i in self._added:
            return self._added[i].encode("utf-8")
        tok = self.tk.id_to_token(i)
        if tok is None:
            raise DataError(f"{self._path}: no token with id {i}")
        return _byte_level_to_bytes(tok, self._path)


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
        return self.sp.encode(text)

    def decode(self, ids):
        return self.sp.decode(list(int(i) for i in ids))

    def token_bytes(self, i):
        piece = self.sp.id_to_piece(i)
        if self.sp.is_byte(i):  # "<0xNN>" byte-fallback pieces stand for one raw byte
            return bytes([int(piece[3:5], 16)])
        return piece.replace("\u2581", " ").encode("utf-8")


_BUILT: dict = {}


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
        _BUILT[key] = tok
    return tok


def load(name: str, path: str | None = None) -> Tokenizer:
    return build(resolve(name, path))


def export_vptok(tok: Tokenizer, path: str) -> None:
    header = np.zeros(256, dtype="<i4")
    header[0] = VPTOK_MAGIC
    header[1] = VPTOK_VERSION
    header[2] = tok.vocab_size
    header[3] = tok.eot if tok.eot is not None else -1
    chunks = [header.tobytes()]
    for i in range(tok.vocab_size):
        b = tok.token_bytes(i)
        chunks.append(struct.pack("<I", len(b)))
        chunks.append(b)
    write_atomic(path, chunks, sum(len(c) for c in chunks))


def read_vptok(path: str) -> dict:
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 1024:
        raise DataError(f"{path}: too short for a vptok header")
    header = np.frombuffer(data[:1024], dtype="<i4")
    if header[0] != VPTOK_MAGIC or header[1] != VPTOK_VERSION:
        raise DataError(f"{path}: bad vptok magic/version {int(header[0])}/{int(header[1])}")
    n = int(header[2])
    pieces = []
    off = 1024
    for i in range(n):
        if off + 4 > len(data):
            raise DataError(f"{path}: truncated at token {i}")
        (ln,) = struct.unpack_from("<I", data, off)
        off += 4
        pieces.append(data[off : off + ln])
        off += ln
    if off != len(data):
        raise DataError(f"{path}: {len(data) - off} trailing bytes after {n} tokens")
    return {"vocab_size": n, "eot": int(header[3]), "pieces": pieces}


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
    return 0


if __name__ == "__main__":
    sys.exit(main())
