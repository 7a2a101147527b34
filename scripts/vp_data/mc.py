"""Multiple-choice evaluation files (.vpmc), read by the trainer's --eval-mc (host/mc_eval.h).

Format (all little-endian int32; docs/formats.md):
  header: 256 ints
      [0] = 20241125 (magic)   [1] = 1 (version)   [2] = number of examples
      [3] = vocabulary size of the tokenizer       [4] = number of ints after the header
      [8..15] = the tokenizer's name, ASCII, zero-padded (32 bytes)
  body, per example:
      n_choices, label, context_len,
      then per choice: ending_len, ending_chars (the ending's text length in characters, for acc_norm),
      then the context's token ids, then each ending's token ids in choice order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import DataError
from .shards import write_atomic

MAGIC = 20241125
VERSION = 1
HEADER_INTS = 256
MAX_CHOICES = 64


@dataclass
class McExample:
    context: list  # token ids, >= 1
    endings: list  # list of token-id lists, >= 2, each >= 1
    ending_chars: list  # length of each ending's text in characters, >= 1
    label: int


def encode(examples, vocab_size: int, tokenizer_name: str) -> bytes:
    body = []
    for i, ex in enumerate(examples):
        n = len(ex.endings)
        if not 2 <= n <= MAX_CHOICES:
            raise DataError(f"example {i} has {n} endings (expected 2 to {MAX_CHOICES})")
        if not 0 <= ex.label < n:
            raise DataError(f"example {i} has label {ex.label}, not one of its {n} endings")
        if not ex.context or any(not e for e in ex.endings) or any(b < 1 for b in ex.ending_chars):
            raise DataError(f"example {i} has an empty context or ending")
        body += [n, ex.label, len(ex.context)]
        for e, b in zip(ex.endings, ex.ending_chars):
            body += [len(e), b]
        body += ex.context
        for e in ex.endings:
            body += e
    arr = np.asarray(body, dtype=np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= 2**31):
        raise DataError("a value does not fit an int32")
    name = tokenizer_name.encode("ascii")
    if len(name) > 32:
        raise DataError(f"tokenizer name {tokenizer_name!r} is longer than 32 bytes")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0] = MAGIC
    header[1] = VERSION
    header[2] = len(examples)
    header[3] = vocab_size
    header[4] = arr.size
    header_bytes = bytearray(header.tobytes())
    header_bytes[32:32 + len(name)] = name
    return bytes(header_bytes) + arr.astype("<i4").tobytes()


def write(path: str, examples, vocab_size: int, tokenizer_name: str) -> None:
    """Writes the file atomically (a temporary name, fsync, rename)."""
    data = encode(examples, vocab_size, tokenizer_name)
    write_atomic(path, [data], len(data))


def read(path: str):
    """(examples, vocab_size, tokenizer_name); a plain reader for tests and inspection."""
    raw = np.fromfile(path, dtype="<i4")
    if raw.size < HEADER_INTS or raw[0] != MAGIC or raw[1] != VERSION:
        raise DataError(f"{path}: not a version-{VERSION} .vpmc file")
    n, vocab, body_ints = int(raw[2]), int(raw[3]), int(raw[4])
    name = raw[8:16].tobytes().rstrip(b"\0").decode("ascii")
    body = raw[HEADER_INTS:]
    if body.size != body_ints:
        raise DataError(f"{path}: {body.size} body ints, the header says {body_ints}")
    at = 0
    examples = []
    for _ in range(n):
        k, label, ctx_len = (int(x) for x in body[at:at + 3])
        at += 3
        lens = [int(x) for x in body[at:at + 2 * k:2]]
        nbytes = [int(x) for x in body[at + 1:at + 2 * k:2]]
        at += 2 * k
        ctx = body[at:at + ctx_len].tolist()
        at += ctx_len
        endings = []
        for ln in lens:
            endings.append(body[at:at + ln].tolist())
            at += ln
        examples.append(McExample(ctx, endings, nbytes, label))
    if at != body.size:
        raise DataError(f"{path}: {body.size - at} ints after the last example")
    return examples, vocab, name
