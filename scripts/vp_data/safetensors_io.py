"""Reading and writing the safetensors format in numpy, without torch or the `safetensors` package.

The format (huggingface/safetensors, docs "The format"): an unsigned little-endian 64-bit header
length N, then N bytes of UTF-8 JSON {name: {"dtype", "shape", "data_offsets": [begin, end]},
"__metadata__": {str: str}} (padded with spaces), then the tensors' bytes, row-major, little-endian,
the offsets counted from the end of the header. HF checkpoints (model.safetensors) are this.

Everything read is checked against the file's size before it is used, and a bad file is a DataError
that names it: a truncated download must not become a model with garbage weights.
"""

from __future__ import annotations

import json
import math
import os
import struct

import numpy as np

from . import DataError
from .shards import write_atomic

# dtype names of the format -> numpy dtype as stored. BF16 has no numpy dtype: it is read as
# uint16 and widened to float32 (bf16 is the top half of an fp32 bit pattern), which is exact.
_STORED = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
           "I8": "i1", "U8": "u1", "BOOL": "?"}
_MAX_HEADER = 100 << 20  # the reference implementation refuses headers over 100 MB too


def read_header(path: str) -> tuple[dict, int]:
    """({name: entry}, offset of the data section). Entries are checked against the file size."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise DataError(f"{path}: {size} bytes, too short for a safetensors file (truncated download?)")
            (n,) = struct.unpack("<Q", head)
            if n > min(_MAX_HEADER, size - 8):
                raise DataError(f"{path}: header length {n} does not fit in the file's {size} bytes "
                                f"(truncated, or not a safetensors file)")
            raw = f.read(n)
    except OSError as e:
        raise DataError(f"cannot read {path}: {e}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: its header is not valid JSON ({e}); the file is corrupt") from None
    if not isinstance(header, dict):
        raise DataError(f"{path}: its header is not a JSON object; the file is corrupt")
    header.pop("__metadata__", None)
    data_start, data_bytes = 8 + n, size - 8 - n
    for name, e in header.items():
        try:
            dtype, shape, (begin, end) = e["dtype"], [int(d) for d in e["shape"]], e["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise DataError(f"{path}: tensor '{name}' has a malformed header entry {e!r}") from None
        if dtype not in _STORED:
            raise DataError(f"{path}: tensor '{name}' has dtype {dtype}, which this reader does not know "
                            f"(it reads {', '.join(_STORED)})")
        want = math.prod(shape) * np.dtype(_STORED[dtype]).itemsize
        if any(d < 0 for d in shape) or not (0 <= begin <= end <= data_bytes) or end - begin != want:
            raise DataError(f"{path}: tensor '{name}' ({dtype} {shape}) claims bytes [{begin}, {end}) of a "
                            f"{data_bytes}-byte data section ({want} needed); the file is corrupt or truncated")
    return header, data_start


def read_tensors(path: str, names=None, header_and_start=None) -> dict:
    """{name: float32 numpy array} for floating tensors (all, or `names`); integer tensors as stored.
    header_and_start: what read_header(path) returned, for a caller that has it already."""
    header, data_start = header_and_start or read_header(path)
    out = {}
    with open(path, "rb") as f:
        for name in header if names is None else names:
            if name not in header:
                raise DataError(f"{path}: no tensor '{name}'")
            e = header[name]
            begin, end = e["data_offsets"]
            f.seek(data_start + begin)
            # read straight into the array: through a bytes object, a tensor (an 8B Llama's 1-2 GB
            # embedding) would sit in memory twice, and once more for the float32 copy
            a = np.empty(e["shape"], dtype=_STORED[e["dtype"]])
            if f.readinto(a.reshape(-1).view(np.uint8)) != end - begin:
                raise DataError(f"{path}: tensor '{name}' ends past the end of the file (truncated while read?)")
            if e["dtype"] == "BF16":
                wide = a.astype(np.uint32)
                wide <<= 16  # in place: one float32-sized array, not two
                a = wide.view(np.float32)
            elif e["dtype"] in ("F16", "F64"):
                a = a.astype(np.float32)
            out[name] = a
    return out


def to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounded to nearest, ties to even, as
    torch.Tensor.to(torch.bfloat16) rounds. Inputs must be finite (the exporter checks)."""
    bits = np.ascontiguousarray(a, dtype="<f4").view(np.uint32)
    # (bits + 0x7FFF + lowest kept bit) >> 16, in one temporary: a tensor of an 8B model's size
    # (the 2 GB embedding) would otherwise need three
    r = bits >> 16
    r &= 1
    r += 0x7FFF
    r += bits
    r >>= 16
    return r.astype("<u2")


class Deferred:
    """A tensor that write_tensors computes only when it comes to write it (GPT-2's concatenated
    q|k|v matrix of one layer, say): a state dict of these and of views of the flat weights holds
    no copy of them, so that exporting an 8B model (32 GB of float32) needs no second 32 GB."""

    def __init__(self, shape, make):
        self.shape = tuple(int(d) for d in shape)
        self.make = make  # () -> the array, of that shape


def write_tensors(path: str, tensors: dict, metadata: dict | None = None, dtype: str = "F32") -> None:
    """Writes tensors (arrays of any layout, or Deferred) as float32 ("F32") or bfloat16 ("BF16")
    to `path` with shards.write_atomic, so a failed write (a full disk) leaves nothing under the
    final name. Tensors are stored in name order. The header comes from the shapes alone, and
    each tensor is made contiguous (and rounded to bfloat16) only as it is written: memory holds
    one tensor's conversion at a time, never the whole model's."""
    if dtype not in ("F32", "BF16"):
        raise ValueError(f"write_tensors writes F32 or BF16, not {dtype}")
    itemsize = 4 if dtype == "F32" else 2
    names = sorted(tensors)
    header, offset = {}, 0
    for name in names:
        shape = [int(d) for d in tensors[name].shape]
        nbytes = math.prod(shape) * itemsize
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data section starts 8-byte aligned, as the reference writer does

    def chunks():
        yield struct.pack("<Q", len(raw)) + raw
        for name in names:
            t = tensors[name]
            a = np.asarray(t.make() if isinstance(t, Deferred) else t, dtype="<f4", order="C")
            if list(a.shape) != header[name]["shape"]:
                raise ValueError(f"tensor '{name}' was made with shape {list(a.shape)}, "
                                 f"not the {header[name]['shape']} its header says")
            yield to_bf16_bits(a).reshape(a.shape) if dtype == "BF16" else a

    write_atomic(path, chunks(), 8 + len(raw) + offset)
