"""valuepath checkpoints <-> Hugging Face transformers models (config.json + model.safetensors).

Export writes a vanilla-path checkpoint as the HF model of the same math, so it loads with
`AutoModelForCausalLM.from_pretrained(DIR)` for lm-evaluation-harness, generation or fine-tuning:

  valuepath                      HF class              notes
  gpt2                           GPT2LMHeadModel       tied head, gelu_new (the tanh GELU), biases
  llama                          LlamaForCausalLM      RMSNorm, RoPE (default type), SwiGLU, GQA
  llama --qk-norm 1              Qwen3ForCausalLM      per-head RMSNorm on q and k before RoPE
  (--tie-embeddings 1 writes tie_word_embeddings: true and no lm_head.weight)

Import reads those three HF model types back (a local directory, or a hub repository through the
cache, e.g. OpenAI's GPT-2 124M) into a checkpoint without optimizer state, for `--init-from`.
Anything the trainer's math does not have (another activation, attention biases in Llama, RoPE
scaling, sliding windows) is refused with the reason, never approximated. A head_dim other than
hidden_size / heads (every released Qwen3: 128) maps onto the llama family's --head-dim.

The layouts (host/params.h): valuepath stores nn.Linear weights as (out, in), like HF's Llama and
Qwen3; HF's GPT-2 uses Conv1D, which stores (in, out), so its matrices are transposed. valuepath's
qk_w rows are [q heads | k heads] and v_w separate; GPT-2's c_attn columns are [q | k | v] and
Llama's are three q/k/v projections. The fc rows of the Llama family are [gate | up]. The
vocabulary: valuepath pads its embedding rows to a multiple of 128 (V..Vp are never used); HF
gets the V real rows, and import fills the padded rows with zeros.

The other value paths have no transformers architecture. Their checkpoints (and any checkpoint with
--remote-code) export as a `trust_remote_code` model instead: model_type "valuepath", the tensors
under their valuepath names (`params.NAME`), the whole Config in config.json, and four Python files
copied beside them (scripts/hf_remote/*.py, and the PyTorch reference dev/reference/model.py with the
layout it reads, scripts/vp_data/checkpoint.py). `AutoModelForCausalLM.from_pretrained(DIR,
trust_remote_code=True)` then computes with the reference's own forward, which the repository's
tests check against the C++ trainers. Import reads this form back exactly.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil

import numpy as np

from . import DataError
from . import cache
from . import safetensors_io as st
from .checkpoint import Config, encode_checkpoint, f32, num_params, param_layout, param_offsets, read_checkpoint
from .shards import write_atomic

# Short names for the hub's GPT-2 checkpoints (llm.c's starting points).
HUB_ALIASES = {"gpt2": "openai-community/gpt2", "gpt2-medium": "openai-community/gpt2-medium",
               "gpt2-large": "openai-community/gpt2-large", "gpt2-xl": "openai-community/gpt2-xl"}
HUB_URL = "https://huggingface.co/{repo}/resolve/main/{file}"

# The trust_remote_code model's files: (source in this repository, name in the model directory).
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REMOTE_CODE_FILES = [
    (os.path.join(_REPO, "scripts", "hf_remote", "configuration_valuepath.py"), "configuration_valuepath.py"),
    (os.path.join(_REPO, "scripts", "hf_remote", "modeling_valuepath.py"), "modeling_valuepath.py"),
    (os.path.join(_REPO, "dev", "reference", "model.py"), "valuepath_model.py"),
    (os.path.join(_REPO, "scripts", "vp_data", "checkpoint.py"), "valuepath_checkpoint.py"),
]

# HF-side tokenizer files for the three tokenizers of the data pipeline: (vocab size, files to copy
# as (cache key, name in the model dir), tokenizer_config.json fields). The ids are those of
# vp_data/tokenizer.py: GPT-2 and NeoX delimit documents with <|endoftext|>, Llama-2 with <s>.
TOKENIZERS = {
    "gpt2": (50257, [("gpt2/encoder.json", "vocab.json"), ("gpt2/vocab.bpe", "merges.txt")],
             {"tokenizer_class": "GPT2Tokenizer", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
              "unk_token": "<|endoftext|>", "add_prefix_space": False}, 50256, 50256),
    "neox": (50277, [("gpt-neox-20b/tokenizer.json", "tokenizer.json")],
             {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|endoftext|>",
              "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}, 0, 0),
    "llama2": (32000, [("llama2/tokenizer.model", "tokenizer.model")],
               {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                "add_bos_token": True, "add_eos_token": False, "legacy": True}, 1, 2),
}


# Every file an export may write besides config.json and model.safetensors: with --force, those of
# an earlier export that this one does not write are removed, so that a model never sits beside
# another tokenizer's files (AutoTokenizer would load those) or the remote code of another export.
EXPORT_EXTRA_FILES = sorted({dest for _, files, *_ in TOKENIZERS.values() for _, dest in files}
                            | {"tokenizer_config.json"} | {dest for _, dest in REMOTE_CODE_FILES})


def tokenizer_files(tokenizer: str, vocab_size: int) -> tuple:
    """(canonical name, [(cached file, name in the model dir)], tokenizer_config fields, bos, eos) of
    `tokenizer` for a model of `vocab_size`; a DataError if the name is unknown, its vocabulary is
    another, or its files are not in the cache and cannot be fetched."""
    from .tokenizer import canonical_name
    name = canonical_name(tokenizer)
    n, files, tok_config, bos, eos = TOKENIZERS[name]
    if n != vocab_size:
        raise DataError(f"--tokenizer {name} has {n} ids but the model's vocabulary is {vocab_size}; "
                        f"pass the tokenizer the training shards were made with, or none")
    return name, [(cache.fetch(key), dest) for key, dest in files], tok_config, bos, eos


FINITE_CHUNK = 1 << 24  # weights checked per piece by all_finite (16 MB of bools)


def all_finite(a: np.ndarray) -> bool:
    """np.isfinite(a).all() a piece at a time: on the whole array at once it allocates a bool per
    weight, 8 GB beside an 8B model's 32 GB."""
    flat, n = a.reshape(-1), FINITE_CHUNK
    return all(np.isfinite(flat[i:i + n]).all() for i in range(0, flat.size, n))


def check_finite(ckpt: str, cfg: Config, params: np.ndarray) -> None:
    if not all_finite(params):
        bad = [name for name, t in _flat_view(cfg, params).items() if not all_finite(t)]
        raise DataError(f"{ckpt}: NaN or Inf in {', '.join(bad)}; export a checkpoint from before the run diverged")


def _flat_view(cfg: Config, params: np.ndarray) -> dict:
    """{name: view of the flat parameters with its host/params.h shape}, for the tensors that exist."""
    return {name: params[off:off + n].reshape(shape) for name, shape, off, n in param_offsets(cfg)[0]}


def _short_f32(x: float) -> float:
    """A float32 config value (an epsilon, a RoPE base) as the shortest decimal that rounds back to it
    (1e-05, not 9.99999974738e-06), which is how HF configs write them."""
    return float(str(np.float32(x)))


# ---------------------------------------------------------------------------------------------
# export


def remote_state_and_config(cfg: Config, params: np.ndarray) -> tuple[dict, dict]:
    """The state dict and config.json of the trust_remote_code model (scripts/hf_remote/): every
    tensor under its valuepath name and shape, padded vocabulary rows included, and the whole
    Config, so any value path exports and imports back exactly."""
    sd = {f"params.{name}": t for name, t in _flat_view(cfg, params).items()}
    config = {"architectures": ["ValuepathForCausalLM"], "model_type": "valuepath",
              "auto_map": {"AutoConfig": "configuration_valuepath.ValuepathConfig",
                           "AutoModelForCausalLM": "modeling_valuepath.ValuepathForCausalLM"},
              "valuepath": dataclasses.asdict(cfg), "vocab_size": cfg.vocab_size,
              "max_position_embeddings": cfg.max_seq_len, "dtype": "float32", "bos_token_id": None,
              "eos_token_id": None}
    return sd, config


def hf_state_and_config(cfg: Config, params: np.ndarray) -> tuple[dict, dict]:
    """The HF state dict and config.json dict of a vanilla checkpoint, for transformers' own classes.
    The state dict's tensors are views of `params` (transposed ones too: write_tensors makes each
    contiguous as it writes it) or, for GPT-2's c_attn, Deferred concatenations: it holds no copy."""
    assert cfg.path == "vanilla", "only vanilla maps onto transformers' own classes"
    P = _flat_view(cfg, params)
    L, C, H, Hkv, D, F, V = cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.n_kv_head, cfg.head_dim, cfg.ffn_dim, cfg.vocab_size
    sd = {}
    if cfg.arch == "gpt2":
        sd["transformer.wte.weight"] = P["wte"][:V]
        sd["transformer.wpe.weight"] = P["wpe"]
        for l in range(L):
            h = f"transformer.h.{l}."
            sd[h + "ln_1.weight"], sd[h + "ln_1.bias"] = P["ln1_w"][l], P["ln1_b"][l]
            # Conv1D (in, out), columns [q | k | v]; qk_w and v_w are apart in the flat array, so
            # the join is a copy, made (one layer at a time) only when the file is written
            sd[h + "attn.c_attn.weight"] = st.Deferred(
                (C, 3 * C), lambda l=l: np.concatenate([P["qk_w"][l], P["v_w"][l]], axis=0).T)
            sd[h + "attn.c_attn.bias"] = st.Deferred((3 * C,), lambda l=l: np.concatenate([P["qk_b"][l], P["v_b"][l]]))
            sd[h + "attn.c_proj.weight"], sd[h + "attn.c_proj.bias"] = P["attproj_w"][l].T, P["attproj_b"][l]
            sd[h + "ln_2.weight"], sd[h + "ln_2.bias"] = P["ln2_w"][l], P["ln2_b"][l]
            sd[h + "mlp.c_fc.weight"], sd[h + "mlp.c_fc.bias"] = P["fc_w"][l].T, P["fc_b"][l]
            sd[h + "mlp.c_proj.weight"], sd[h + "mlp.c_proj.bias"] = P["fcproj_w"][l].T, P["fcproj_b"][l]
        sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"] = P["lnf_w"], P["lnf_b"]
        config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V,
                  "n_positions": cfg.max_seq_len, "n_ctx": cfg.max_seq_len, "n_embd": C, "n_layer": L, "n_head": H,
                  "n_inner": None if F == 4 * C else F, "activation_function": "gelu_new",
                  "layer_norm_epsilon": _short_f32(cfg.norm_eps), "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
                  "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
                  "reorder_and_upcast_attn": False, "tie_word_embeddings": True}
    else:
        sd["model.embed_tokens.weight"] = P["wte"][:V]
        for l in range(L):
            h = f"model.layers.{l}."
            sd[h + "input_layernorm.weight"] = P["ln1_w"][l]
            sd[h + "self_attn.q_proj.weight"] = P["qk_w"][l][:H * D]
            sd[h + "self_attn.k_proj.weight"] = P["qk_w"][l][H * D:]
            sd[h + "self_attn.v_proj.weight"] = P["v_w"][l]
            sd[h + "self_attn.o_proj.weight"] = P["attproj_w"][l]
            if cfg.qk_norm:
                sd[h + "self_attn.q_norm.weight"], sd[h + "self_attn.k_norm.weight"] = P["q_norm_w"][l], P["k_norm_w"][l]
            sd[h + "post_attention_layernorm.weight"] = P["ln2_w"][l]
            sd[h + "mlp.gate_proj.weight"] = P["fc_w"][l][:F]
            sd[h + "mlp.up_proj.weight"] = P["fc_w"][l][F:]
            sd[h + "mlp.down_proj.weight"] = P["fcproj_w"][l]
        sd["model.norm.weight"] = P["lnf_w"]
        if not cfg.tied_head:
            sd["lm_head.weight"] = P["lm_head"][:V]
        qwen3 = bool(cfg.qk_norm)
        theta = _short_f32(cfg.rope_theta)
        config = {"architectures": ["Qwen3ForCausalLM" if qwen3 else "LlamaForCausalLM"],
                  "model_type": "qwen3" if qwen3 else "llama", "vocab_size": V, "hidden_size": C,
                  "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": Hkv,
                  "head_dim": D, "hidden_act": "silu", "max_position_embeddings": cfg.max_seq_len,
                  "rms_norm_eps": _short_f32(cfg.norm_eps), "rope_theta": theta,
                  "rope_parameters": {"rope_type": "default", "rope_theta": theta},
                  "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": bool(cfg.tie_embeddings)}
        if qwen3:
            config.update({"use_sliding_window": False, "sliding_window": None, "max_window_layers": L})
        else:
            config.update({"mlp_bias": False, "pretraining_tp": 1})
    config.update({"dtype": "float32", "bos_token_id": None, "eos_token_id": None})
    return sd, config


def export(ckpt: str, out_dir: str, tokenizer: str | None = None, force: bool = False,
           remote_code: bool = False, dtype: str = "float32") -> dict:
    """Writes out_dir/config.json, model.safetensors (float32: the master weights as trained; or
    bfloat16, rounded to nearest even, half the size) and, with `tokenizer`, its HF files. A value
    path other than vanilla (or remote_code) writes the trust_remote_code model with its four
    Python files. Returns the config written."""
    if dtype not in ("float32", "bfloat16"):
        raise DataError(f"--dtype {dtype}: choose float32 or bfloat16")
    try:
        cfg, params, meta = read_checkpoint(ckpt)
    except (OSError, ValueError) as e:
        raise DataError(f"cannot export: {e}") from None
    check_finite(ckpt, cfg, params)
    remote_code = remote_code or cfg.path != "vanilla"
    sd, config = (remote_state_and_config if remote_code else hf_state_and_config)(cfg, params)
    code_files = REMOTE_CODE_FILES if remote_code else []
    tok_files = []
    if tokenizer is not None:
        _, tok_files, tok_config, bos, eos = tokenizer_files(tokenizer, cfg.vocab_size)
        config.update({"bos_token_id": bos, "eos_token_id": eos})
    targets = (["config.json", "model.safetensors"] + [d for _, d in tok_files + code_files]
               + (["tokenizer_config.json"] if tok_files else []))
    if os.path.isdir(out_dir) and not force:
        clash = [t for t in targets if os.path.exists(os.path.join(out_dir, t))]
        if clash:
            raise DataError(f"{out_dir} already holds {', '.join(clash)}; choose another directory or pass --force "
                            f"to replace them")
    os.makedirs(out_dir, exist_ok=True)
    config["dtype"] = dtype
    st.write_tensors(os.path.join(out_dir, "model.safetensors"), sd,
                     {"format": "pt", "valuepath_checkpoint": os.path.basename(ckpt), "valuepath_step": meta["step"]},
                     dtype={"float32": "F32", "bfloat16": "BF16"}[dtype])
    for src, dest in code_files:
        shutil.copyfile(src, os.path.join(out_dir, dest))
    _write_json(os.path.join(out_dir, "config.json"), config)
    if tok_files:
        for src, dest in tok_files:
            shutil.copyfile(src, os.path.join(out_dir, dest))
        _write_json(os.path.join(out_dir, "tokenizer_config.json"), {**tok_config, "model_max_length": cfg.max_seq_len})
    # only now, the new model complete: an earlier export's files this one did not write (another
    # tokenizer's, none at all asked for, remote code for a now-native model) would be read with it
    for stale in EXPORT_EXTRA_FILES:
        if stale not in targets and os.path.exists(os.path.join(out_dir, stale)):
            os.remove(os.path.join(out_dir, stale))
    return config


def _write_json(path: str, obj) -> None:
    data = (json.dumps(obj, indent=2) + "\n").encode()
    write_atomic(path, [data], len(data))


# ---------------------------------------------------------------------------------------------
# import


def _hub_file(repo: str, file: str) -> str:
    """A file of a hub model repository, from the cache ($VALUEPATH_CACHE/hf-models/REPO/FILE) or
    downloaded into it."""
    path = cache.cache_path("hf-models", *repo.split("/"), file)
    return path if os.path.exists(path) else cache.download(HUB_URL.format(repo=repo, file=file), path)


def resolve_source(src: str) -> tuple[str, list]:
    """(config.json path, [safetensors paths]) of a local HF model directory or a hub repository
    (`hub:OWNER/NAME`, or a short name such as gpt2)."""
    if os.path.isdir(src):
        cfg_path = os.path.join(src, "config.json")
        index = os.path.join(src, "model.safetensors.index.json")
        single = os.path.join(src, "model.safetensors")
        if not os.path.isfile(cfg_path):
            raise DataError(f"{src} has no config.json; pass a directory written by save_pretrained")
        if os.path.isfile(single):
            return cfg_path, [single]
        if os.path.isfile(index):
            return cfg_path, [os.path.join(src, f) for f in _index_shards(index)]
        raise DataError(f"{src} has no model.safetensors (or .index.json); convert PyTorch .bin weights with "
                        f"save_pretrained(..., safe_serialization=True) first")
    repo = HUB_ALIASES.get(src, src[4:] if src.startswith("hub:") else None)
    if repo is None:
        raise DataError(f"{src} is neither a directory nor a hub model (hub:OWNER/NAME, or one of "
                        f"{', '.join(HUB_ALIASES)})")
    cfg_path = _hub_file(repo, "config.json")
    try:
        return cfg_path, [_hub_file(repo, "model.safetensors")]
    except DataError as single_error:
        try:
            index = _hub_file(repo, "model.safetensors.index.json")
        except DataError:
            raise single_error from None
        return cfg_path, [_hub_file(repo, f) for f in _index_shards(index)]


def _index_shards(index: str) -> list:
    try:
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        return sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        raise DataError(f"{index}: not a safetensors index ({e})") from None


def config_from_hf(hf: dict, max_seq: int | None = None) -> Config:
    """The valuepath Config of an HF config.json, or a DataError naming what does not map."""
    if not isinstance(hf, dict):
        raise DataError(f"config.json holds a JSON {type(hf).__name__}, not an object of settings: not an HF model's config")
    mt = hf.get("model_type")

    def need(key, default=None):
        v = hf.get(key, default)
        if v is None:
            raise DataError(f"config.json ({mt}) has no '{key}'")
        return v

    # A hand-edited or damaged config.json: a size must be a whole number above 0 (not "12", 1.5 or
    # true), an epsilon or RoPE base a finite number above 0, or the model built from it is wrong
    def size(key, default=None):
        v = need(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise DataError(f"config.json ({mt}): '{key}' is {json.dumps(v)}; it must be a whole number above 0")
        return v

    def optional_size(key):
        return None if hf.get(key) is None else size(key)

    def finite_above_0(v, what):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise DataError(f"config.json ({mt}): {what} is {json.dumps(v)}; it must be a finite number above 0")
        return v

    def positive(key, default):
        v = hf.get(key)
        return finite_above_0(default if v is None else v, f"'{key}'")

    def settings(key):
        v = hf.get(key)
        if v is not None and not isinstance(v, dict):
            raise DataError(f"config.json ({mt}): '{key}' is {json.dumps(v)}; it must be an object of settings")
        return v

    def refuse_if(cond, what):
        if cond:
            raise DataError(f"this {mt} model uses {what}, which valuepath's model does not implement; it cannot be "
                            f"imported without changing its outputs")

    if mt == "gpt2":
        C, H, L = size("n_embd"), size("n_head"), size("n_layer")
        refuse_if(hf.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"),
                  f"activation_function={hf.get('activation_function')} (valuepath's GPT-2 has the tanh GELU)")
        refuse_if(not hf.get("scale_attn_weights", True), "unscaled attention (scale_attn_weights=false)")
        refuse_if(hf.get("scale_attn_by_inverse_layer_idx", False), "scale_attn_by_inverse_layer_idx")
        refuse_if(not hf.get("tie_word_embeddings", True), "an untied output head (valuepath's GPT-2 is always tied)")
        cfg = Config(arch="gpt2", n_layer=L, n_head=H, n_kv_head=H, n_embd=C, head_dim=C // H,
                     ffn_dim=optional_size("n_inner") or 4 * C, vocab_size=size("vocab_size"),
                     max_seq_len=size("n_positions"), norm_eps=f32(positive("layer_norm_epsilon", 1e-5)))
    elif mt in ("llama", "qwen3"):
        C, H, L = size("hidden_size"), size("num_attention_heads"), size("num_hidden_layers")
        Hkv = optional_size("num_key_value_heads") or H
        D = optional_size("head_dim") or C // H  # Qwen3: 128 whatever the width (--head-dim)
        refuse_if(hf.get("hidden_act", "silu") != "silu", f"hidden_act={hf.get('hidden_act')} (SwiGLU needs silu)")
        refuse_if(hf.get("attention_bias", False), "attention biases")
        refuse_if(hf.get("mlp_bias", False), "MLP biases")
        refuse_if(hf.get("pretraining_tp", 1) != 1, "pretraining_tp != 1")
        refuse_if(hf.get("use_sliding_window", False), "sliding-window attention")
        rp = settings("rope_parameters") or {}
        scaling = settings("rope_scaling")
        rope_type = rp.get("rope_type", rp.get("type", "default"))
        refuse_if(rope_type != "default" or (scaling and scaling.get("rope_type", scaling.get("type")) != "default"),
                  f"RoPE scaling ({rope_type if rope_type != 'default' else scaling})")
        theta = (finite_above_0(rp["rope_theta"], "rope_parameters' 'rope_theta'") if "rope_theta" in rp
                 else positive("rope_theta", 10000.0))
        cfg = Config(arch="llama", n_layer=L, n_head=H, n_kv_head=Hkv, n_embd=C, head_dim=D,
                     ffn_dim=size("intermediate_size"), vocab_size=size("vocab_size"),
                     max_seq_len=size("max_position_embeddings"), rope_theta=f32(theta),
                     qk_norm=1 if mt == "qwen3" else 0, norm_eps=f32(positive("rms_norm_eps", 1e-6)),
                     tie_embeddings=1 if hf.get("tie_word_embeddings", False) else 0)
    elif mt == "valuepath":  # written by export with remote code: the Config itself
        try:
            cfg = Config(**settings("valuepath") or need("valuepath"))
        except TypeError as e:
            raise DataError(f"config.json's 'valuepath' block does not match this version's Config: {e}") from None
        if max_seq is not None and max_seq != cfg.max_seq_len:
            # not refuse_if: nothing here is beyond valuepath's math; the exported Config fixes the length
            raise DataError(f"--max-seq {max_seq}: this model was exported from a valuepath checkpoint with max_seq_len "
                            f"{cfg.max_seq_len}, which import keeps as it was; drop --max-seq")
    else:
        raise DataError(f"model_type '{mt}' cannot be imported; valuepath's families map to gpt2, llama and qwen3 "
                        f"(and valuepath, which export writes for the other value paths)")
    if max_seq is not None and mt != "valuepath":
        if cfg.arch == "gpt2" and max_seq > cfg.max_seq_len:
            raise DataError(f"--max-seq {max_seq}: this GPT-2 model has only {cfg.max_seq_len} learned positions; "
                            f"give --max-seq {cfg.max_seq_len} or less")
        cfg.max_seq_len = max_seq
    cfg.padded_vocab_size = -(-cfg.vocab_size // 128) * 128
    try:
        return cfg.validate()
    except AssertionError as e:
        raise DataError(f"the {mt} config does not make a valuepath model: {e or 'a shape rule fails'}") from None


# Buffers some HF checkpoints carry that are not parameters: GPT-2's causal masks, RoPE tables.
def _is_buffer(name: str) -> bool:
    return name.endswith((".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq"))


def import_model(src: str, out_ckpt: str, max_seq: int | None = None, force: bool = False) -> Config:
    """Converts an HF gpt2 / llama / qwen3 model to a valuepath checkpoint without optimizer state."""
    # --force replaces a checkpoint file, not a directory, device or pipe of that name (the atomic
    # rename would put a regular file in its place: as root, over /dev/full). A link to a regular
    # file is replaced by the new file (the link's target is left as it was), as `mv` would.
    if os.path.lexists(out_ckpt) and not os.path.isfile(out_ckpt):
        raise DataError(f"{out_ckpt} exists and is not a regular file (a directory, device or pipe, or a link to one); "
                        f"give the path of the checkpoint file to write")
    if os.path.exists(out_ckpt) and not force:
        raise DataError(f"{out_ckpt} exists; choose another name or pass --force to replace it")
    cfg_path, files = resolve_source(src)
    try:
        with open(cfg_path) as f:
            hf = json.load(f)
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: JSON nested past the stack
        raise DataError(f"cannot read {cfg_path}: {e}") from None
    cfg = config_from_hf(hf, max_seq)
    where = {}  # tensor name (without GPT-2's optional "transformer." prefix) -> (file, name in file)
    headers = {}  # file -> read_header(file), read once
    for path in files:
        headers[path] = st.read_header(path)
        for name in headers[path][0]:
            short = name[len("transformer."):] if cfg.arch == "gpt2" and name.startswith("transformer.") else name
            where[short] = (path, name)
    used = set()

    def get(name, shape):
        if name not in where:
            raise DataError(f"{src}: tensor '{name}' is missing (from {', '.join(map(os.path.basename, files))})")
        path, stored = where[name]
        a = st.read_tensors(path, [stored], headers[path])[stored]
        if tuple(a.shape) != tuple(shape):
            raise DataError(f"{src}: tensor '{name}' has shape {list(a.shape)}, its config.json implies {list(shape)}")
        used.add(name)
        return a

    n = num_params(cfg)
    try:
        params = np.zeros(n, dtype=np.float32)
    except (MemoryError, ValueError):
        raise DataError(f"{src}: its config.json makes a model of {n:,} parameters ({4 * n / 1e9:.1f} GB), more than this "
                        f"machine can hold; check the sizes in config.json against the weights") from None
    P = _flat_view(cfg, params)
    if hf.get("model_type") == "valuepath":
        for name, shape in param_layout(cfg):
            if name in P:
                P[name][...] = get(f"params.{name}", shape)
    L, C, H, Hkv, D, F, V, T = (cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.n_kv_head, cfg.head_dim, cfg.ffn_dim,
                                cfg.vocab_size, cfg.max_seq_len)
    if hf.get("model_type") == "valuepath":
        pass
    elif cfg.arch == "gpt2":
        P["wte"][:V] = get("wte.weight", (V, C))
        P["wpe"][:] = get("wpe.weight", (hf["n_positions"], C))[:T]
        for l in range(L):
            h = f"h.{l}."
            P["ln1_w"][l], P["ln1_b"][l] = get(h + "ln_1.weight", (C,)), get(h + "ln_1.bias", (C,))
            w, b = get(h + "attn.c_attn.weight", (C, 3 * C)).T, get(h + "attn.c_attn.bias", (3 * C,))
            P["qk_w"][l], P["v_w"][l], P["qk_b"][l], P["v_b"][l] = w[:2 * C], w[2 * C:], b[:2 * C], b[2 * C:]
            P["attproj_w"][l], P["attproj_b"][l] = get(h + "attn.c_proj.weight", (C, C)).T, get(h + "attn.c_proj.bias", (C,))
            P["ln2_w"][l], P["ln2_b"][l] = get(h + "ln_2.weight", (C,)), get(h + "ln_2.bias", (C,))
            P["fc_w"][l], P["fc_b"][l] = get(h + "mlp.c_fc.weight", (C, F)).T, get(h + "mlp.c_fc.bias", (F,))
            P["fcproj_w"][l], P["fcproj_b"][l] = get(h + "mlp.c_proj.weight", (F, C)).T, get(h + "mlp.c_proj.bias", (C,))
        P["lnf_w"][:], P["lnf_b"][:] = get("ln_f.weight", (C,)), get("ln_f.bias", (C,))
        if "lm_head.weight" in where and not np.array_equal(get("lm_head.weight", (V, C)), P["wte"][:V]):
            raise DataError(f"{src}: lm_head.weight differs from the token embedding, but valuepath's GPT-2 ties them")
    else:
        P["wte"][:V] = get("model.embed_tokens.weight", (V, C))
        for l in range(L):
            h = f"model.layers.{l}."
            P["ln1_w"][l] = get(h + "input_layernorm.weight", (C,))
            P["qk_w"][l][:H * D] = get(h + "self_attn.q_proj.weight", (H * D, C))
            P["qk_w"][l][H * D:] = get(h + "self_attn.k_proj.weight", (Hkv * D, C))
            P["v_w"][l] = get(h + "self_attn.v_proj.weight", (Hkv * D, C))
            P["attproj_w"][l] = get(h + "self_attn.o_proj.weight", (C, H * D))
            if cfg.qk_norm:
                P["q_norm_w"][l] = get(h + "self_attn.q_norm.weight", (D,))
                P["k_norm_w"][l] = get(h + "self_attn.k_norm.weight", (D,))
            P["ln2_w"][l] = get(h + "post_attention_layernorm.weight", (C,))
            P["fc_w"][l][:F] = get(h + "mlp.gate_proj.weight", (F, C))
            P["fc_w"][l][F:] = get(h + "mlp.up_proj.weight", (F, C))
            P["fcproj_w"][l] = get(h + "mlp.down_proj.weight", (C, F))
        P["lnf_w"][:] = get("model.norm.weight", (C,))
        if cfg.tie_embeddings:
            if "lm_head.weight" in where and not np.array_equal(get("lm_head.weight", (V, C)), P["wte"][:V]):
                raise DataError(f"{src}: tie_word_embeddings is true but lm_head.weight differs from the embedding")
        else:
            P["lm_head"][:V] = get("lm_head.weight", (V, C))
    left = sorted(n for n in where if n not in used and not _is_buffer(n) and n != "lm_head.weight")
    if left:
        raise DataError(f"{src}: {len(left)} tensors have no place in a valuepath {cfg.arch} model "
                        f"(first: {', '.join(left[:3])}); the import would drop them")
    if not all_finite(params):
        raise DataError(f"{src}: the weights hold NaN or Inf")
    chunks = encode_checkpoint(cfg, params, step=0)  # the weights as they are, not a copy of them
    write_atomic(out_ckpt, chunks, sum(len(c) for c in chunks))
    return cfg
