"""valuepath's model config, flat parameter layout and checkpoint files, in plain Python.

The one Python copy of the interface the C++ builds define (host/config.h, host/value_path.h,
host/params.h, host/checkpoint.h). It needs only numpy, so user scripts (scripts/hf_convert.py)
and the torch-based reference (dev/reference/model.py, which imports it) read and write the same
files without two copies of the format.

Dimension legend (as in host/config.h): L layers, C model dim, H query heads, Hkv key/value
heads, G = H/Hkv, D head dim, F MLP hidden dim, V vocab, Vp = V padded to a multiple of 128.
"""

import math
import os
import struct
import zlib
from dataclasses import dataclass, fields

import numpy as np


def f32(x):
    """A Python float rounded to float32, as the C++ config stores it (norm_eps, rope_theta)."""
    return float(np.float32(x))


def lround(x):
    """C lround (halves away from zero); Python's round() would round 1.5 and 2.5 both to 2."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


PATHS = ["vanilla", "resformer", "svformer", "sla", "depth"]  # list index = VP_* id (host/value_path.h)
ARCHS = ["gpt2", "llama"]  # list index = Arch enum (host/config.h)


# ---------------------------------------------------------------------------------------------
# Configuration: the fields of ModelConfig + ValuePathConfig (host/config.h, host/value_path.h)


@dataclass
class Config:
    arch: str = "gpt2"          # "gpt2" | "llama"
    n_layer: int = 12           # L
    n_head: int = 12            # H
    n_kv_head: int = 12         # Hkv (gpt2: = H)
    n_embd: int = 768           # C
    head_dim: int = 64          # D: C / H, or free in llama (--head-dim; Qwen3: 128 at any C)
    ffn_dim: int = 3072         # F
    vocab_size: int = 50257     # V
    padded_vocab_size: int = 50304  # Vp
    max_seq_len: int = 1024     # gpt2: rows of wpe; llama: longest T
    rope_theta: float = 10000.0
    qk_norm: int = 0            # llama: per-head RMSNorm on q and k before RoPE
    norm_eps: float = f32(1e-5)
    # value path (ValuePathConfig)
    path: str = "vanilla"
    resformer_learn: int = 0    # 0: fixed lambda = 1/2; 1: one trainable lambda per layer
    resformer_lambda_lr: float = 0.0
    sla_layers: int = 0         # n_l: layer l >= n_l reads layer l - n_l on its skip heads
    sla_heads: int = 0          # n_h, counted in query heads (the last n_h; a multiple of G)
    sla_chain: int = 0          # 0 = ORIG, 1 = CHAIN (value_paths.md section 4a)
    depth_stride: int = 0       # s: anchors are layers 0, s, 2s, ...
    tie_embeddings: int = 0     # llama: 1 = the output head is wte (Qwen3's small models), no lm_head

    @property
    def tied_head(self):
        """The classifier reads wte: always in gpt2, in llama with tie_embeddings."""
        return self.arch == "gpt2" or bool(self.tie_embeddings)

    @property
    def G(self):
        return self.n_head // self.n_kv_head

    def validate(self):
        assert self.arch in ARCHS and self.path in PATHS
        assert self.head_dim >= 1 and self.n_head >= 1
        assert self.n_head % self.n_kv_head == 0, "H must be a multiple of Hkv"
        assert self.padded_vocab_size == -(-self.vocab_size // 128) * 128
        if self.arch == "gpt2":
            assert self.n_kv_head == self.n_head and not self.qk_norm and not self.tie_embeddings, \
                "gpt2 has no GQA and no QK-norm, and its head is always tied"
            assert self.n_embd == self.n_head * self.head_dim, "gpt2: C = H * D (only llama has --head-dim)"
        else:
            assert self.head_dim % 2 == 0, "RoPE needs an even head dim"
        if self.path == "sla":
            assert self.sla_layers >= 1 and 0 <= self.sla_heads <= self.n_head
            assert self.sla_heads % self.G == 0, "section 10: SLA skip heads are whole KV groups"
        if self.path == "depth":
            assert self.depth_stride >= 1
        return self


def make_config(arch, L, H, C, V, max_seq_len, Hkv=None, F=None, head_dim=None, rope_theta=10000.0, qk_norm=0, tie_embeddings=0,
                path="vanilla", resformer_lambda="fixed", resformer_lambda_lr=None,
                sla_layers=None, sla_heads=None, sla_chain=0, depth_stride=None):
    """A Config with the same derived defaults as the C++ command line (host/config.h,
    host/value_path.h): Vp, D, F, and the value-path defaults of value_paths.md section 10."""
    Hkv = Hkv or H
    if F is None:
        F = 4 * C if arch == "gpt2" else -(-(8 * C // 3) // 64) * 64
    cfg = Config(arch=arch, n_layer=L, n_head=H, n_kv_head=Hkv, n_embd=C, head_dim=head_dim or C // H, ffn_dim=F,
                 vocab_size=V, padded_vocab_size=-(-V // 128) * 128, max_seq_len=max_seq_len,
                 rope_theta=f32(rope_theta), qk_norm=qk_norm, path=path,
                 tie_embeddings=tie_embeddings)
    G = H // Hkv
    if path == "resformer":
        cfg.resformer_learn = {"fixed": 0, "learn": 1}[resformer_lambda]
        cfg.resformer_lambda_lr = f32(0.02 if resformer_lambda_lr is None else resformer_lambda_lr)
    elif path == "sla":
        cfg.sla_layers = lround(0.75 * L) if sla_layers is None else sla_layers   # round(3L/4)
        cfg.sla_heads = G * lround(0.75 * Hkv) if sla_heads is None else sla_heads  # counted on KV heads
        cfg.sla_chain = sla_chain
    elif path == "depth":
        cfg.depth_stride = max(1, L // 2) if depth_stride is None else depth_stride  # s = L/2, >= 1
    return cfg.validate()


# ---------------------------------------------------------------------------------------------
# The flat parameter layout (the interface with the C++ builds)

# Weight decay applies to the embeddings and every weight matrix; never to biases, norm gains
# or the ResFormer lambdas.
DECAY = {"wte", "wpe", "lm_head", "qk_w", "v_w", "attproj_w", "fc_w", "fcproj_w"}


def param_layout(cfg):
    """[(name, shape)] in storage order. A tensor this config does not use has a 0 in its shape
    (0 elements) and is skipped when the flat array is carved."""
    L, C, D, H, Hkv, F, Vp = cfg.n_layer, cfg.n_embd, cfg.head_dim, cfg.n_head, cfg.n_kv_head, cfg.ffn_dim, cfg.padded_vocab_size
    gpt2 = cfg.arch == "gpt2"
    qkn = cfg.arch == "llama" and bool(cfg.qk_norm)
    b = 1 if gpt2 else 0                                # biases exist only in gpt2
    FW = F if gpt2 else 2 * F                           # llama fc rows: [gate W1 | up W3]
    Lv = 1 if cfg.path == "svformer" else L             # section 3a: only layer 0 has v_proj
    learn = cfg.path == "resformer" and bool(cfg.resformer_learn)
    return [
        ("wte", (Vp, C)),
        ("wpe", (cfg.max_seq_len * b, C)),
        ("ln1_w", (L, C)),
        ("ln1_b", (L * b, C)),
        ("qk_w", (L, (H + Hkv) * D, C)),                # rows [q heads | k heads], D rows per head
        ("qk_b", (L * b, (H + Hkv) * D)),
        ("v_w", (Lv, Hkv * D, C)),
        ("v_b", (Lv * b, Hkv * D)),
        ("q_norm_w", (L * qkn, D)),
        ("k_norm_w", (L * qkn, D)),
        ("attproj_w", (L, C, H * D)),
        ("attproj_b", (L * b, C)),
        ("ln2_w", (L, C)),
        ("ln2_b", (L * b, C)),
        ("fc_w", (L, FW, C)),
        ("fc_b", (L * b, FW)),
        ("fcproj_w", (L, C, F)),
        ("fcproj_b", (L * b, C)),
        ("lnf_w", (C,)),
        ("lnf_b", (C * b,)),
        ("lm_head", (Vp * (1 - cfg.tied_head), C)),     # llama untied: its own output head
        ("vp_lambda", (L * learn,)),                    # ResFormer learn: one lambda per layer
    ]


def param_offsets(cfg):
    """[(name, shape, offset, count)] for the tensors with elements, and the total count."""
    out, off = [], 0
    for name, shape in param_layout(cfg):
        n = math.prod(shape)
        if n:
            out.append((name, shape, off, n))
            off += n
    return out, off


def num_params(cfg):
    return param_offsets(cfg)[1]


# ---------------------------------------------------------------------------------------------
# valuepath checkpoints (host/checkpoint.h): CheckpointHeader, run_text, params [, m, v]

CHECKPOINT_MAGIC = 20261101
CHECKPOINT_VERSION = 2          # 2 adds two CRC-32s (zlib.crc32) to the header; 1 is still read
CHECKPOINT_VERSION_NO_CRC = 1
# struct ModelConfig: 10 int32, float rope_theta, int32 qk_norm, float norm_eps, then
# ValuePathConfig: int32 path, resformer_learn, float resformer_lambda_lr, int32 sla_layers,
# sla_heads, sla_chain, depth_stride, reserved[8], then int32 tie_embeddings       (116 bytes)
_MODEL_FMT = "<10ifif" + "iifiiii9i"
# CheckpointHeader: int32 magic, version, header_bytes, has_optimizer; int64 step, num_params,
# run_text_bytes; ModelConfig (116); 4 bytes padding (Rng is 8-aligned); Rng {uint64 state};
# DataLoaderState (16 uint64, 128 bytes); uint32 header_crc, data_crc; UpdateGuardState (int64 seen,
# skipped; double loss_mean, loss_var, norm_mean, norm_var: the statistics of --skip-loss-z and
# --skip-norm-z, host/update_guard.h; all zero = none yet); int32 reserved[50] (552 bytes)
_HEADER_FMT = "<4i3q" + _MODEL_FMT[1:] + "4xQ16QII2q4d50i"
_NO_GUARD = [0, 0, 0.0, 0.0, 0.0, 0.0]
_CRC_OFFSET = struct.calcsize("<4i3q" + _MODEL_FMT[1:] + "4xQ16Q")  # header_crc, then data_crc
CHECKPOINT_HEADER_BYTES = struct.calcsize(_HEADER_FMT)
assert struct.calcsize(_MODEL_FMT) == 116 and CHECKPOINT_HEADER_BYTES == 552


def _config_to_fields(cfg):
    return [ARCHS.index(cfg.arch), cfg.n_layer, cfg.n_head, cfg.n_kv_head, cfg.n_embd, cfg.head_dim, cfg.ffn_dim,
            cfg.vocab_size, cfg.padded_vocab_size, cfg.max_seq_len, cfg.rope_theta, cfg.qk_norm, cfg.norm_eps,
            PATHS.index(cfg.path), cfg.resformer_learn, cfg.resformer_lambda_lr, cfg.sla_layers, cfg.sla_heads,
            cfg.sla_chain, cfg.depth_stride] + [0] * 8 + [cfg.tie_embeddings]


def _config_from_fields(v):
    names = [f.name for f in fields(Config)]  # the 20 fields before reserved[8], then tie_embeddings
    vals = list(v[:20]) + [v[28]]
    vals[0] = ARCHS[vals[0]]
    vals[13] = PATHS[vals[13]]
    return Config(**dict(zip(names, vals)))


def _header_crc(header, run_text):
    """CRC-32 of the header with both CRC fields zero, then the run text (host/checkpoint.h)."""
    h = bytearray(header)
    h[_CRC_OFFSET:_CRC_OFFSET + 8] = bytes(8)
    return zlib.crc32(bytes(run_text), zlib.crc32(bytes(h)))


def read_checkpoint(path):
    """Returns (cfg, params float32 numpy (num_params,), meta dict with step, has_optimizer, run_text).
    Every field is checked before it is trusted; a bad file is a ValueError that names it. The file
    is streamed (the CRC in 64 MB pieces), so a checkpoint with AdamW moments needs no second copy."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(CHECKPOINT_HEADER_BYTES)
        if len(raw) < CHECKPOINT_HEADER_BYTES:
            raise ValueError(f"{path}: {size} bytes, shorter than a checkpoint header ({CHECKPOINT_HEADER_BYTES})")
        h = struct.unpack_from(_HEADER_FMT, raw, 0)
        magic, version, header_bytes, has_opt, step, n, text_bytes = h[:7]
        if magic != CHECKPOINT_MAGIC:
            raise ValueError(f"{path}: not a valuepath checkpoint (magic {magic})")
        if version not in (CHECKPOINT_VERSION, CHECKPOINT_VERSION_NO_CRC) or header_bytes != CHECKPOINT_HEADER_BYTES:
            raise ValueError(f"{path}: checkpoint version {version} / header {header_bytes} bytes; this reader knows "
                             f"versions {CHECKPOINT_VERSION_NO_CRC} and {CHECKPOINT_VERSION} / {CHECKPOINT_HEADER_BYTES} bytes")
        if not (text_bytes >= 0 and n >= 0 and has_opt in (0, 1)):
            raise ValueError(f"{path}: corrupt header (run text {text_bytes} bytes, {n} params, has_optimizer {has_opt})")
        expect = header_bytes + text_bytes + 4 * n * (1 + 2 * has_opt)
        if size != expect:
            raise ValueError(f"{path}: {size} bytes, header says {expect} (truncated or not a checkpoint)")
        text = f.read(text_bytes)
        if version == CHECKPOINT_VERSION:
            header_crc, data_crc = struct.unpack_from("<II", raw, _CRC_OFFSET)
            if _header_crc(raw, text) != header_crc:
                raise ValueError(f"{path}: corrupt: the CRC-32 of its header does not match")
        try:
            cfg = _config_from_fields(h[7:7 + 29]).validate()
        except (AssertionError, IndexError, ZeroDivisionError) as e:
            raise ValueError(f"{path}: its model config makes no sense ({e or 'a shape rule fails'})") from None
        if n != num_params(cfg):
            raise ValueError(f"{path}: {n} params, but its config has {num_params(cfg)}")
        params = np.fromfile(f, dtype="<f4", count=n)
        if version == CHECKPOINT_VERSION:
            crc = zlib.crc32(params)  # the array's own buffer: no second copy of the weights
            # the AdamW moments, in pieces of at most 64 MB: a read asks for no more than is left,
            # since f.read(n) allocates n bytes first, even where the file has none left
            left = expect - f.tell()
            while left > 0:
                chunk = f.read(min(left, 64 << 20))
                if not chunk:
                    break
                crc = zlib.crc32(chunk, crc)
                left -= len(chunk)
            if crc != data_crc:
                raise ValueError(f"{path}: corrupt: the CRC-32 of its tensors does not match")
    return cfg, params.astype(np.float32, copy=False), {"step": step, "has_optimizer": has_opt, "run_text": text.decode()}


def encode_checkpoint(cfg, params, step=0, run_text=""):
    """The file's bytes as [header, run text, params]: a checkpoint without optimizer state
    (has_optimizer = 0; Rng, DataLoaderState and UpdateGuardState zeroed), which the trainers accept with --init-from.
    The params chunk is a memoryview of the float32 array itself, not bytes: a copy would double the
    memory an import of an 8B model needs (32 GB more)."""
    cfg.validate()
    params = np.ascontiguousarray(params, dtype="<f4").reshape(-1)
    if params.size != num_params(cfg):
        raise ValueError(f"{params.size} params, config needs {num_params(cfg)}")
    text = run_text.encode()
    data = memoryview(params).cast("B")
    fields_before_crc = [CHECKPOINT_MAGIC, CHECKPOINT_VERSION, CHECKPOINT_HEADER_BYTES, 0, step, params.size, len(text),
                         *_config_to_fields(cfg), 0, *([0] * 16)]
    hdr = struct.pack(_HEADER_FMT, *fields_before_crc, 0, 0, *_NO_GUARD, *([0] * 50))
    hdr = struct.pack(_HEADER_FMT, *fields_before_crc, _header_crc(hdr, text), zlib.crc32(data), *_NO_GUARD, *([0] * 50))
    return [hdr, text, data]


def write_checkpoint(path, cfg, params, step=0, run_text=""):
    """Writes encode_checkpoint's bytes to `path` (tests and the reference; scripts/vp_data/hf.py
    writes them atomically with shards.write_atomic)."""
    with open(path, "wb") as f:
        for chunk in encode_checkpoint(cfg, params, step, run_text):
            f.write(chunk)


__all__ = ["f32", "lround", "PATHS", "ARCHS", "Config", "make_config", "DECAY", "param_layout", "param_offsets",
           "num_params", "read_checkpoint", "encode_checkpoint", "write_checkpoint", "CHECKPOINT_MAGIC", "CHECKPOINT_VERSION",
           "CHECKPOINT_HEADER_BYTES"]
