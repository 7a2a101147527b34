"""scripts/hf_convert.py: valuepath checkpoints <-> Hugging Face transformers models.

Without torch (CI): the safetensors reader and writer, the round trip checkpoint -> HF -> checkpoint
(every tensor back bit for bit, and the C++ trainer's val loss unchanged), the hub path through the
cache, and every refusal. With torch and transformers (the dev tree, requirements-reference.txt):
the exported model's logits in transformers against the independent PyTorch reference
(dev/reference/model.py) and its loss against the C++ trainer's; models built by transformers
imported and checked the same way; and the exported tokenizers against the pipeline's.
"""

import contextlib
import io
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import load_script
from vp_data import DataError, cli
from vp_data import hf
from vp_data import safetensors_io as st
from vp_data.checkpoint import make_config, num_params, read_checkpoint, write_checkpoint
from vp_data.shards import write_shard

REPO = Path(__file__).resolve().parents[2]
TRAINER = Path(os.environ.get("VP_TRAIN_CPU", REPO / "build" / "vanilla" / "train_cpu"))

# (arch, make_config kwargs): each HF class and each head arrangement
MODELS = {
    "gpt2": ("gpt2", {}),
    "llama_gqa": ("llama", {"Hkv": 2}),
    "qwen3_qknorm": ("llama", {"Hkv": 2, "qk_norm": 1, "rope_theta": 500000.0}),
    "llama_tied_mqa": ("llama", {"Hkv": 1, "tie_embeddings": 1}),
    # released Qwen3's shape: heads wider than hidden_size / heads (H*D = 64 in C = 32), tied
    "qwen3_wide_heads": ("llama", {"Hkv": 2, "qk_norm": 1, "head_dim": 16, "tie_embeddings": 1, "rope_theta": 1e6}),
}
V, T, B = 200, 16, 4  # V is not a multiple of 128, so the padded rows are exercised


# value-path settings that make each cross-layer route active in the 2-layer models (SLA: half the
# heads, whole KV groups, read layer 0; Depth-Attention: every layer an anchor)
PATH_SETTINGS = {"vanilla": {}, "resformer": {"resformer_lambda": "learn"}, "svformer": {},
                 "sla": {"sla_layers": 1, "sla_heads": 2}, "depth": {"depth_stride": 1}}


def small_config(name, path="vanilla"):
    arch, kw = MODELS[name]
    return make_config(arch, 2, 4, 32, V, T, path=path, **kw, **PATH_SETTINGS[path])


def random_params(cfg, seed):
    """Random weights of unit-scale activations (not the training init, so that every mapping
    mistake shows): matrices N(0, 1/fan_in), embeddings N(0, 1), norm gains N(1, 0.1^2), biases
    N(0, 0.1^2), ResFormer lambdas spread over 0.2..0.8."""
    from vp_data.checkpoint import param_offsets

    rng = np.random.default_rng(seed)
    parts = []
    for name, shape, _, n in param_offsets(cfg)[0]:
        r = rng.standard_normal(n)
        if name in ("wte", "wpe", "lm_head"):
            parts.append(r)
        elif name.endswith("_b"):
            parts.append(0.1 * r)
        elif name == "vp_lambda":
            parts.append(np.linspace(0.2, 0.8, n))
        elif name in ("ln1_w", "ln2_w", "lnf_w", "q_norm_w", "k_norm_w"):
            parts.append(1 + 0.1 * r)
        else:
            parts.append(r / np.sqrt(shape[-1]))
    return np.concatenate(parts).astype(np.float32)


def convert(*argv, expect=0):
    """Runs scripts/hf_convert.py in-process as a user would; returns (exit code, stdout, stderr)."""
    mod = load_script("hf_convert")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.run(mod.main, [str(a) for a in argv])
        except SystemExit as e:  # argparse usage errors
            code = e.code
    assert code == expect, (code, out.getvalue(), err.getvalue())
    return code, out.getvalue(), err.getvalue()


def cpp_val_loss(ckpt, tokens, tmp, tag):
    """The C++ trainer's val loss of a checkpoint on one batch (B sequences of T + 1 tokens), by
    the CPU build of the checkpoint's value path."""
    path = read_checkpoint(str(ckpt))[0].path
    trainer = TRAINER if path == "vanilla" else REPO / "build" / path / "train_cpu"
    assert trainer.exists(), f"{trainer} is missing: run 'make test'"
    shard = tmp / f"val_{tag}.bin"
    write_shard(str(shard), tokens, 1)
    out = tmp / f"eval_{tag}"
    p = subprocess.run([str(trainer), "--init-from", str(ckpt), "--max-steps", "0", "--val-data", str(shard),
                        "--batch-size", str(B), "--seq-len", str(T), "--eval-batches", "1", "--out-dir", str(out)],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [json.loads(line) for line in open(out / "log.jsonl")]
    return [r["val_loss"] for r in rows if "val_loss" in r][-1]


def val_tokens(seed):
    return np.random.default_rng(seed).integers(0, V, B * T + 1)


# ------------------------------------------------------------------------------ safetensors


def test_safetensors_round_trip_and_bf16(tmp_path):
    a = {"w": np.arange(12, dtype=np.float32).reshape(3, 4) / 7, "b": np.array([-1.5e-30, 3e38], np.float32),
         "scalar_like": np.zeros((0, 5), np.float32)}
    f = tmp_path / "m.safetensors"
    st.write_tensors(str(f), a, {"format": "pt"})
    header, start = st.read_header(str(f))
    assert start % 8 == 0 and set(header) == set(a)
    back = st.read_tensors(str(f))
    for k in a:
        assert back[k].dtype == np.float32 and np.array_equal(back[k], a[k])
    # bf16 and fp16 by hand: bf16 0x3F80 = 1.0, 0xC040 = -3.0, 0x7F7F = the largest finite bf16
    bf16 = np.array([0x3F80, 0xC040, 0x7F7F], "<u2").tobytes()
    fp16 = np.array([0.5, -2.0], "<f2").tobytes()
    hdr = json.dumps({"x": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},
                      "y": {"dtype": "F16", "shape": [2], "data_offsets": [6, 10]}}).encode()
    g = tmp_path / "h.safetensors"
    g.write_bytes(struct.pack("<Q", len(hdr)) + hdr + bf16 + fp16)
    got = st.read_tensors(str(g))
    assert got["x"].tolist() == [1.0, -3.0, float(np.float32(3.3895313892515355e38))]
    assert got["y"].tolist() == [0.5, -2.0]


def test_safetensors_against_the_reference_package(tmp_path):
    """Our writer read by the `safetensors` package and its writer read by ours (where installed)."""
    stnp = pytest.importorskip("safetensors.numpy")
    a = {"a": np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32), "b": np.ones(7, np.float32)}
    st.write_tensors(str(tmp_path / "ours.safetensors"), a)
    theirs = stnp.load_file(str(tmp_path / "ours.safetensors"))
    stnp.save_file(a, str(tmp_path / "theirs.safetensors"))
    ours = st.read_tensors(str(tmp_path / "theirs.safetensors"))
    for k in a:
        assert np.array_equal(theirs[k], a[k]) and np.array_equal(ours[k], a[k])


def test_safetensors_bad_files(tmp_path):
    good = tmp_path / "good.safetensors"
    st.write_tensors(str(good), {"w": np.ones((4, 4), np.float32)})
    raw = good.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])

    def header_with(entry):
        h = json.dumps({"w": entry}).encode()
        return struct.pack("<Q", len(h)) + h + raw[8 + n:]

    cases = {
        "short": (raw[:5], "too short"),
        "truncated": (raw[:-4], "claims bytes"),
        "huge_header": (struct.pack("<Q", 1 << 40) + raw[8:], "does not fit"),
        "not_json": (struct.pack("<Q", 4) + b"{{{{" + raw[8 + n:], "not valid JSON"),
        "dtype": (header_with({"dtype": "F8_E4M3", "shape": [4, 4], "data_offsets": [0, 16]}), "F8_E4M3"),
        "shape": (header_with({"dtype": "F32", "shape": [4, 5], "data_offsets": [0, 64]}), "claims bytes"),
        "offsets": (header_with({"dtype": "F32", "shape": [4, 4], "data_offsets": [8, 72]}), "claims bytes"),
        "entry": (header_with({"dtype": "F32"}), "malformed"),
    }
    for name, (data, words) in cases.items():
        f = tmp_path / f"{name}.safetensors"
        f.write_bytes(data)
        with pytest.raises(DataError) as e:
            st.read_tensors(str(f))
        assert str(f) in str(e.value) and words in str(e.value), (name, str(e.value))


def test_bf16_rounding_is_nearest_even(tmp_path):
    """float32 -> bfloat16 on the writer's side: nearest, ties to even (what torch does), checked on
    values whose rounding is known by hand; bf16 keeps 8 significant bits."""
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1); 1 + 3 * 2^-8 is
    # halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even); just above a tie rounds up
    x = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, -(1 + 2 ** -8), 2 ** -130], np.float32)
    want = [1.0, 1.0, 1 + 2 ** -6, 1 + 2 ** -7, -1.0, 2 ** -130]
    st.write_tensors(str(tmp_path / "b.safetensors"), {"x": x}, dtype="BF16")
    got = st.read_tensors(str(tmp_path / "b.safetensors"))["x"]
    assert got.tolist() == want


# ------------------------------------------------------------------------------ round trip


@pytest.mark.parametrize("name", list(MODELS))
def test_round_trip_is_exact_and_the_trainer_agrees(name, tmp_path):
    """checkpoint -> export -> import gives every tensor back bit for bit (the padded vocabulary
    rows, which no computation reads, come back as zeros) and the C++ trainer's val loss of the
    imported checkpoint equals that of the original, to the last bit."""
    cfg = small_config(name)
    p = random_params(cfg, 1)
    write_checkpoint(str(tmp_path / "a.bin"), cfg, p, step=12)
    _, out, _ = convert("export", tmp_path / "a.bin", tmp_path / "hf")
    want_class = {"gpt2": "GPT2LMHeadModel", "llama_gqa": "LlamaForCausalLM", "qwen3_qknorm": "Qwen3ForCausalLM",
                  "llama_tied_mqa": "LlamaForCausalLM", "qwen3_wide_heads": "Qwen3ForCausalLM"}[name]
    assert want_class in out
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == [want_class] and config["vocab_size"] == V
    assert cfg.arch == "gpt2" or config["head_dim"] == cfg.head_dim
    tensors = st.read_header(str(tmp_path / "hf" / "model.safetensors"))[0]
    assert ("lm_head.weight" in tensors) == (name in ("llama_gqa", "qwen3_qknorm"))
    convert("import", tmp_path / "hf", tmp_path / "b.bin")
    cfg2, p2, meta = read_checkpoint(str(tmp_path / "b.bin"))
    assert cfg2 == cfg and meta["has_optimizer"] == 0 and meta["step"] == 0
    A, Bv = hf._flat_view(cfg, p), hf._flat_view(cfg2, p2)
    for k in A:
        if k in ("wte", "lm_head"):
            assert np.array_equal(A[k][:V], Bv[k][:V]) and not Bv[k][V:].any(), k
        else:
            assert np.array_equal(A[k], Bv[k]), k
    toks = val_tokens(2)
    assert cpp_val_loss(tmp_path / "a.bin", toks, tmp_path, "a") == cpp_val_loss(tmp_path / "b.bin", toks, tmp_path, "b")


@pytest.mark.parametrize("path", ["resformer", "svformer", "sla", "depth"])
def test_value_path_checkpoints_export_as_remote_code_and_back(path, tmp_path):
    """Another value path exports as the trust_remote_code model (its code files beside it) and
    imports back bit for bit, padded rows included."""
    cfg = small_config("llama_gqa", path)
    p = random_params(cfg, 4)
    write_checkpoint(str(tmp_path / "a.bin"), cfg, p)
    _, out, _ = convert("export", tmp_path / "a.bin", tmp_path / "hf")
    assert "ValuepathForCausalLM" in out and "trust_remote_code=True" in out
    files = set(os.listdir(tmp_path / "hf"))
    assert {"configuration_valuepath.py", "modeling_valuepath.py", "valuepath_model.py",
            "valuepath_checkpoint.py", "config.json", "model.safetensors"} == files
    assert (tmp_path / "hf" / "valuepath_model.py").read_bytes() == (REPO / "dev" / "reference" / "model.py").read_bytes()
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["model_type"] == "valuepath" and config["valuepath"]["path"] == path
    convert("import", tmp_path / "hf", tmp_path / "b.bin")
    cfg2, p2, _ = read_checkpoint(str(tmp_path / "b.bin"))
    assert cfg2 == cfg and np.array_equal(p2, p)
    _, _, err = convert("import", tmp_path / "hf", tmp_path / "c.bin", "--max-seq", "8", expect=1)
    assert "drop --max-seq" in err


def test_bfloat16_export_halves_the_file_and_imports_back_rounded(tmp_path):
    cfg = small_config("llama_gqa")
    p = random_params(cfg, 8)
    write_checkpoint(str(tmp_path / "a.bin"), cfg, p)
    convert("export", tmp_path / "a.bin", tmp_path / "f32")
    convert("export", tmp_path / "a.bin", tmp_path / "b16", "--dtype", "bfloat16")
    header = st.read_header(str(tmp_path / "b16" / "model.safetensors"))[0]
    assert {e["dtype"] for e in header.values()} == {"BF16"}
    assert json.loads((tmp_path / "b16" / "config.json").read_text())["dtype"] == "bfloat16"
    size = lambda d: (tmp_path / d / "model.safetensors").stat().st_size  # noqa: E731
    assert 0.49 < size("b16") / size("f32") < 0.51
    convert("import", tmp_path / "b16", tmp_path / "b.bin")
    _, p2, _ = read_checkpoint(str(tmp_path / "b.bin"))
    A, Bv = hf._flat_view(cfg, p), hf._flat_view(cfg, p2)
    for k in A:
        a, b = (A[k][:V], Bv[k][:V]) if k in ("wte", "lm_head") else (A[k], Bv[k])
        assert (b.view(np.uint32) & 0xFFFF == 0).all() and np.all(np.abs(b - a) <= 2 ** -8 * np.abs(a)), k
    p[5] = np.nan
    write_checkpoint(str(tmp_path / "nan.bin"), cfg, p)
    _, _, err = convert("export", tmp_path / "nan.bin", tmp_path / "n", expect=1)
    assert "NaN or Inf in wte" in err and not (tmp_path / "n").exists()


def test_import_from_the_hub_cache_with_gpt2_hub_names(tmp_path, vp_cache):
    """`import gpt2` reads $VALUEPATH_CACHE/hf-models/openai-community/gpt2/ offline. The file uses
    the hub GPT-2's own names (no "transformer." prefix, the causal-mask buffers h.N.attn.bias
    beside the real c_attn.bias), as openai-community/gpt2's model.safetensors does."""
    cfg = small_config("gpt2")
    p = random_params(cfg, 3)
    write_checkpoint(str(tmp_path / "a.bin"), cfg, p)
    convert("export", tmp_path / "a.bin", tmp_path / "hf")
    sd = st.read_tensors(str(tmp_path / "hf" / "model.safetensors"))
    hub = {k[len("transformer."):]: v for k, v in sd.items()}
    for l in range(cfg.n_layer):
        hub[f"h.{l}.attn.bias"] = np.tril(np.ones((1, 1, T, T), np.float32))
    d = Path(vp_cache) / "hf-models" / "openai-community" / "gpt2"
    d.mkdir(parents=True)
    try:
        st.write_tensors(str(d / "model.safetensors"), hub)
        shutil.copy(tmp_path / "hf" / "config.json", d / "config.json")
        convert("import", "gpt2", tmp_path / "b.bin")
        cfg2, p2, _ = read_checkpoint(str(tmp_path / "b.bin"))
        assert cfg2 == cfg and np.array_equal(hf._flat_view(cfg2, p2)["qk_b"], hf._flat_view(cfg, p)["qk_b"])
        # another hub model is not in the cache: offline, that is a clear error, not a network call
        _, _, err = convert("import", "hub:someone/nothing", tmp_path / "c.bin", expect=1)
        assert "offline" in err and "hf-models" in err and not (tmp_path / "c.bin").exists()
    finally:
        shutil.rmtree(Path(vp_cache) / "hf-models")


# ------------------------------------------------------------------------------ refusals


def test_export_refusals_keep_what_is_there(tmp_path):
    cfg = small_config("gpt2")
    write_checkpoint(str(tmp_path / "a.bin"), cfg, random_params(cfg, 0))
    _, _, err = convert("export", tmp_path / "a.bin", tmp_path / "x", "--tokenizer", "gpt2", expect=1)
    assert "50257 ids" in err and f"vocabulary is {V}" in err and not (tmp_path / "x").exists()

    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "config.json").write_text("mine")
    _, _, err = convert("export", tmp_path / "a.bin", tmp_path / "x", expect=1)
    assert "--force" in err and (tmp_path / "x" / "config.json").read_text() == "mine"
    assert not (tmp_path / "x" / "model.safetensors").exists()
    convert("export", tmp_path / "a.bin", tmp_path / "x", "--force")
    assert json.loads((tmp_path / "x" / "config.json").read_text())["model_type"] == "gpt2"

    raw = bytearray((tmp_path / "a.bin").read_bytes())
    raw[-3] ^= 0x40  # one bit in the last weight
    (tmp_path / "bad.bin").write_bytes(bytes(raw))
    _, _, err = convert("export", tmp_path / "bad.bin", tmp_path / "y", expect=1)
    assert "CRC-32 of its tensors" in err and not (tmp_path / "y").exists()
    (tmp_path / "short.bin").write_bytes(bytes(raw[:1000]))
    _, _, err = convert("export", tmp_path / "short.bin", tmp_path / "y", expect=1)
    assert "header says" in err
    _, _, err = convert("export", tmp_path / "none.bin", tmp_path / "y", expect=1)
    assert "none.bin" in err
    convert("frobnicate", expect=2)


def hf_dir(tmp_path, name="llama_gqa"):
    cfg = small_config(name)
    write_checkpoint(str(tmp_path / f"{name}.bin"), cfg, random_params(cfg, 5))
    d = tmp_path / f"hf_{name}"
    convert("export", tmp_path / f"{name}.bin", d)
    return d


@pytest.mark.parametrize("change,words", [
    ({"hidden_act": "gelu"}, "hidden_act=gelu"),
    ({"attention_bias": True}, "attention biases"),
    ({"mlp_bias": True}, "MLP biases"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}}, "RoPE scaling"),
    ({"rope_parameters": None, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "RoPE scaling"),
    ({"head_dim": 16}, "has shape"),  # a head_dim the tensors do not have
    ({"use_sliding_window": True}, "sliding-window"),
    ({"model_type": "mistral"}, "model_type 'mistral'"),
    ({"num_key_value_heads": 3}, "does not make a valuepath model"),
    ({"intermediate_size": 48}, "has shape"),
    ({"vocab_size": None}, "has no 'vocab_size'"),
    # a damaged or hand-edited config.json: a clear refusal, not a traceback or a wrong model
    ({"num_hidden_layers": "2"}, "'num_hidden_layers' is \"2\"; it must be a whole number above 0"),
    ({"hidden_size": 1.5}, "'hidden_size' is 1.5; it must be a whole number above 0"),
    ({"num_attention_heads": 0}, "'num_attention_heads' is 0; it must be a whole number above 0"),
    ({"num_key_value_heads": True}, "'num_key_value_heads' is true"),
    ({"vocab_size": 1e12}, "'vocab_size' is 1000000000000.0"),
    ({"vocab_size": 10 ** 13}, "more than this machine can hold"),
    ({"rms_norm_eps": -1}, "'rms_norm_eps' is -1; it must be a finite number above 0"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": "big"}}, "'rope_theta' is \"big\""),
    ({"rope_scaling": "linear"}, "'rope_scaling' is \"linear\"; it must be an object of settings"),
])
def test_import_refuses_what_does_not_map(tmp_path, change, words):
    d = hf_dir(tmp_path)
    config = json.loads((d / "config.json").read_text())
    config.update(change)
    (d / "config.json").write_text(json.dumps(config))
    _, _, err = convert("import", d, tmp_path / "out.bin", expect=1)
    assert words in err and not (tmp_path / "out.bin").exists(), err


@pytest.mark.parametrize("change,words", [
    ({"activation_function": "relu"}, "activation_function=relu"),
    ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
    ({"tie_word_embeddings": False}, "untied output head"),
    ({"n_inner": 96}, "has shape"),
    ({"n_embd": True}, "'n_embd' is true; it must be a whole number above 0"),
    ({"n_head": 0}, "'n_head' is 0"),
    ({"layer_norm_epsilon": float("nan")}, "'layer_norm_epsilon' is NaN; it must be a finite number above 0"),
])
def test_import_refuses_gpt2_variants(tmp_path, change, words):
    d = hf_dir(tmp_path, "gpt2")
    config = json.loads((d / "config.json").read_text())
    config.update(change)
    (d / "config.json").write_text(json.dumps(config))
    _, _, err = convert("import", d, tmp_path / "out.bin", expect=1)
    assert words in err and not (tmp_path / "out.bin").exists(), err


def test_import_refuses_a_config_that_is_not_an_object_and_an_output_that_is_not_a_file(tmp_path):
    """config.json holding a list is not a model's settings; --force replaces a checkpoint file (or
    a link to one, as mv would: the target is left as it was), not a directory, a pipe or a link to
    a device."""
    d = hf_dir(tmp_path)
    good = (d / "config.json").read_text()
    (d / "config.json").write_text("[1, 2]")
    _, _, err = convert("import", d, tmp_path / "out.bin", expect=1)
    assert "config.json holds a JSON list, not an object of settings" in err and not (tmp_path / "out.bin").exists(), err
    (d / "config.json").write_text(good)
    target = tmp_path / "target.bin"
    target.write_bytes(b"kept")
    (tmp_path / "link.bin").symlink_to(target)
    (tmp_path / "devlink.bin").symlink_to("/dev/null")
    (tmp_path / "dir.bin").mkdir()
    os.mkfifo(tmp_path / "fifo.bin")
    for name in ("devlink.bin", "dir.bin", "fifo.bin"):
        _, _, err = convert("import", d, tmp_path / name, "--force", expect=1)
        assert f"{tmp_path / name} exists and is not a regular file" in err, err
    assert (tmp_path / "devlink.bin").is_symlink() and (tmp_path / "dir.bin").is_dir()
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo.bin").st_mode)
    _, _, err = convert("import", d, tmp_path / "link.bin", expect=1)  # a link to a file: "exists", as a file
    assert "exists; choose another name or pass --force" in err, err
    convert("import", d, tmp_path / "link.bin", "--force")  # replaced by the checkpoint; the target kept
    assert not (tmp_path / "link.bin").is_symlink() and target.read_bytes() == b"kept"
    convert("import", d, target, "--force")  # a regular file is replaced
    assert target.read_bytes() != b"kept"


def test_import_refuses_bad_weights(tmp_path):
    d = hf_dir(tmp_path)
    sd = st.read_tensors(str(d / "model.safetensors"))
    cases = {
        "missing": ({k: v for k, v in sd.items() if k != "model.layers.1.mlp.up_proj.weight"},
                    "'model.layers.1.mlp.up_proj.weight' is missing"),
        "extra": ({**sd, "model.layers.0.self_attn.q_proj.bias": np.zeros(32, np.float32)},
                  "no place in a valuepath llama model"),
        "nan": ({**sd, "model.norm.weight": np.full(32, np.nan, np.float32)}, "NaN"),
        "transposed": ({**sd, "model.layers.0.mlp.down_proj.weight": sd["model.layers.0.mlp.down_proj.weight"].T},
                       "has shape"),
    }
    for name, (tensors, words) in cases.items():
        st.write_tensors(str(d / "model.safetensors"), tensors)
        _, _, err = convert("import", d, tmp_path / f"{name}.bin", expect=1)
        assert words in err and not (tmp_path / f"{name}.bin").exists(), (name, err)
    (d / "model.safetensors").unlink()
    _, _, err = convert("import", d, tmp_path / "x.bin", expect=1)
    assert "no model.safetensors" in err
    _, _, err = convert("import", tmp_path / "nowhere", tmp_path / "x.bin", expect=1)
    assert "neither a directory nor a hub model" in err
    (tmp_path / "exists.bin").write_text("keep")
    d2 = hf_dir(tmp_path, "gpt2")
    _, _, err = convert("import", d2, tmp_path / "exists.bin", expect=1)
    assert "--force" in err and (tmp_path / "exists.bin").read_text() == "keep"
    _, _, err = convert("import", d2, tmp_path / "long.bin", "--max-seq", str(T + 1), expect=1)
    assert f"only {T} learned positions" in err


def test_import_sharded_and_max_seq(tmp_path):
    """A model saved in several safetensors shards with an index (as the hub stores larger models)
    imports as one; --max-seq keeps the first rows of GPT-2's position table."""
    d = hf_dir(tmp_path, "gpt2")
    sd = st.read_tensors(str(d / "model.safetensors"))
    names = sorted(sd)
    half = len(names) // 2
    st.write_tensors(str(d / "model-00001-of-00002.safetensors"), {k: sd[k] for k in names[:half]})
    st.write_tensors(str(d / "model-00002-of-00002.safetensors"), {k: sd[k] for k in names[half:]})
    weight_map = {k: f"model-0000{1 + (i >= half)}-of-00002.safetensors" for i, k in enumerate(names)}
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (d / "model.safetensors").rename(tmp_path / "single.safetensors")
    convert("import", d, tmp_path / "b.bin", "--max-seq", "8")
    cfg, p, _ = read_checkpoint(str(tmp_path / "b.bin"))
    assert cfg.max_seq_len == 8
    assert np.array_equal(hf._flat_view(cfg, p)["wpe"], sd["transformer.wpe.weight"][:8])
    assert np.array_equal(hf._flat_view(cfg, p)["fcproj_w"][1], sd["transformer.h.1.mlp.c_proj.weight"].T)


@pytest.mark.parametrize("arch,kw,dtype", [("gpt2", {}, "float32"), ("gpt2", {}, "bfloat16"),
                                           ("llama", {"Hkv": 2}, "float32"), ("llama", {"Hkv": 2}, "bfloat16")])
def test_conversion_holds_one_copy_of_the_weights(arch, kw, dtype, tmp_path, monkeypatch):
    """An 8B Llama is 32 GB of float32 weights: export and import must fit a 64 GB machine, so
    neither may hold a second copy of them. Peak Python + numpy memory (tracemalloc), relative to
    the weights' size, of a model with 8 layers (its largest tensor is 4% of it): the weights once
    plus one tensor's conversion. Export used to hold every converted tensor before writing
    (GPT-2's transposed copies: 2.2x; bfloat16: 1.5x), import a bytes copy of all weights (2x),
    both a bool per weight for the NaN check (+0.25x), and reading a checkpoint allocated 64 MB
    past its end (11x of this small model)."""
    import tracemalloc

    monkeypatch.setattr(hf, "FINITE_CHUNK", 1 << 12)  # its 16 MB pieces are more than this whole model
    cfg = make_config(arch, 8, 4, 128, 256, 16, **kw)
    p = random_params(cfg, 6)
    write_checkpoint(str(tmp_path / "a.bin"), cfg, p)
    weights = p.nbytes
    del p
    peaks = {}
    tracemalloc.start()
    try:
        hf.export(str(tmp_path / "a.bin"), str(tmp_path / "hf"), dtype=dtype)
        peaks["export"] = tracemalloc.get_traced_memory()[1] / weights
        tracemalloc.reset_peak()
        hf.import_model(str(tmp_path / "hf"), str(tmp_path / "b.bin"))
        peaks["import"] = tracemalloc.get_traced_memory()[1] / weights
    finally:
        tracemalloc.stop()
    assert max(peaks.values()) < 1.2, peaks
    cfg2, p2, _ = read_checkpoint(str(tmp_path / "b.bin"))  # and still the same model
    assert cfg2 == cfg
    if dtype == "float32":
        p = random_params(cfg, 6)
        assert np.array_equal(hf._flat_view(cfg, p2)["qk_w"], hf._flat_view(cfg, p)["qk_w"])


# ------------------------------------------------------------------------------ with transformers


def _transformers():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    return torch, transformers


def _reference():
    sys.path.insert(0, str(REPO / "dev" / "reference"))
    import model as M

    return M


def _hf_logits_and_loss(torch, model, tokens):
    """HF logits (B, T, V) and mean cross-entropy on B sequences of T + 1 tokens, as the trainer
    cuts its val batch (sequence b = tokens[b*T : b*T + T + 1])."""
    x = torch.as_tensor(np.stack([tokens[b * T:b * T + T] for b in range(B)])).long()
    y = torch.as_tensor(np.stack([tokens[b * T + 1:b * T + T + 1] for b in range(B)])).long()
    with torch.no_grad():
        logits = model(x).logits
    loss = torch.nn.functional.cross_entropy(logits.double().reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
    return x, logits, loss


# Bounds, stated where set:
# * logits: transformers runs in float32 (Llama's RMSNorm and RoPE tables are float32 whatever the
#   model dtype) against the reference in float64. Measured at about 1e-6 of the largest logit for
#   these 2-layer models; the bound is 1e-5 of it, while any mapping mistake (a transposed matrix,
#   swapped gate/up, a missing norm) moves logits by O(1).
# * loss: the C++ trainer's float32 val loss against float64 math on the same weights: 2e-6
#   relative (a few float32 ulps over the B*T-term mean; measured below 5e-7).
LOGIT_REL, LOSS_REL = 1e-5, 2e-6


def check_model(torch, model, cfg, p, ckpt, tmp_path, seed):
    """An HF model against the weights it should hold: its float32 logits against the reference
    in float64 (LOGIT_REL of their scale), then, in float64, its loss against the C++ trainer's
    val loss of `ckpt` (LOSS_REL). Leaves the model in float64; returns the inputs (B, T)."""
    M = _reference()
    toks = val_tokens(seed)
    x, logits, _ = _hf_logits_and_loss(torch, model, toks)
    ref, _ = M.forward(cfg, torch.as_tensor(p).double(), x)
    assert (logits.double() - ref).abs().max().item() <= LOGIT_REL * ref.abs().max().item()
    _, _, loss64 = _hf_logits_and_loss(torch, model.double(), toks)
    cpp = cpp_val_loss(ckpt, toks, tmp_path, f"s{seed}")
    assert abs(cpp - loss64) <= LOSS_REL * loss64, (cpp, loss64)
    return x


@pytest.mark.parametrize("name", list(MODELS))
def test_exported_model_in_transformers_matches_reference_and_trainer(name, tmp_path):
    torch, transformers = _transformers()
    cfg = small_config(name)
    p = random_params(cfg, 7)
    write_checkpoint(str(tmp_path / "a.bin"), cfg, p)
    convert("export", tmp_path / "a.bin", tmp_path / "hf")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf"), dtype=torch.float32).eval()
    check_model(torch, model, cfg, p, tmp_path / "a.bin", tmp_path, 8)


@pytest.mark.parametrize("family", ["gpt2", "qwen3_wide_heads"])
@pytest.mark.parametrize("path", ["vanilla", "resformer", "svformer", "sla", "depth"])
def test_value_path_model_in_transformers_matches_trainer(family, path, tmp_path):
    """The trust_remote_code model of every path (vanilla through --remote-code): its logits in
    transformers against the reference in float64, its loss against the C++ build of that path;
    generate() runs; left padding is refused."""
    torch, transformers = _transformers()
    M = _reference()
    cfg = small_config(family, path)
    p = random_params(cfg, 12)
    write_checkpoint(str(tmp_path / "a.bin"), cfg, p)
    convert("export", tmp_path / "a.bin", tmp_path / "hf", "--remote-code")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf"), trust_remote_code=True).eval()
    assert type(model).__name__ == "ValuepathForCausalLM"
    x = check_model(torch, model, cfg, p, tmp_path / "a.bin", tmp_path, 13)
    with torch.no_grad():
        labels_loss = model(x, labels=x).loss.item()  # HF convention: labels = inputs, shifted inside
        _, want = M.forward(cfg, torch.as_tensor(p).double(), x[:, :-1], x[:, 1:])
        assert abs(labels_loss - want.item()) <= 1e-9 * want.item()
        out = model.generate(x[:1, :4], max_new_tokens=4, do_sample=False)
        assert out.shape == (1, 8) and torch.equal(out[0, :4], x[0, :4])
        with pytest.raises(ValueError, match="right padding only"):
            model(x[:2, :6], attention_mask=torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1]]))
        right = model(x[:2, :6], attention_mask=torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]])).logits
        alone = model(x[1:2, :4]).logits[0]
        assert (right[1, :4] - alone).abs().max().item() <= 1e-12 * alone.abs().max().item()


def _hf_random_model(transformers, torch, name):
    """A model built by transformers itself from a config (no download), with random weights."""
    torch.manual_seed(11)
    common = dict(vocab_size=V, num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=48,
                  max_position_embeddings=T, rms_norm_eps=1e-5)
    if name == "gpt2":
        config = transformers.GPT2Config(vocab_size=V, n_positions=T, n_embd=32, n_layer=2, n_head=4, n_inner=80)
    elif name == "llama_gqa":
        config = transformers.LlamaConfig(num_key_value_heads=2, rope_theta=25000.0, **common)
    elif name == "qwen3_qknorm":
        config = transformers.Qwen3Config(num_key_value_heads=2, head_dim=8, **common)
    elif name == "qwen3_wide_heads":
        config = transformers.Qwen3Config(num_key_value_heads=2, head_dim=16, tie_word_embeddings=True,
                                          rope_theta=1e6, **common)
    else:
        config = transformers.LlamaConfig(num_key_value_heads=1, tie_word_embeddings=True, **common)
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    with torch.no_grad():  # far from HF's small init, so that every nonlinearity matters
        for n, t in model.named_parameters():
            if t.dim() == 2:  # embeddings N(0, 1); matrices N(0, 1/32) (fan-in 32 or more)
                t.copy_(torch.randn_like(t) / (1.0 if "wte" in n or "wpe" in n or "embed" in n else 32 ** 0.5))
            elif n.endswith("weight"):  # norm gains
                t.copy_(1 + 0.1 * torch.randn_like(t))
            else:  # GPT-2's biases
                t.copy_(0.1 * torch.randn_like(t))
    return model


@pytest.mark.parametrize("name", list(MODELS))
def test_model_from_transformers_imports_exactly(name, tmp_path):
    torch, transformers = _transformers()
    model = _hf_random_model(transformers, torch, name)
    model.save_pretrained(str(tmp_path / "hf"))
    convert("import", tmp_path / "hf", tmp_path / "b.bin")
    cfg, p, _ = read_checkpoint(str(tmp_path / "b.bin"))
    assert cfg.arch == MODELS[name][0] and cfg.qk_norm == name.startswith("qwen3")
    assert cfg.tied_head == (name in ("gpt2", "llama_tied_mqa", "qwen3_wide_heads"))
    assert cfg.head_dim == (16 if name == "qwen3_wide_heads" else cfg.n_embd // cfg.n_head)
    check_model(torch, model, cfg, p, tmp_path / "b.bin", tmp_path, 9)


def test_bf16_model_imports_exactly(tmp_path):
    """Hub Llama and Qwen3 models are stored in bfloat16: the import widens each weight exactly
    (a bf16 value is an fp32 one), so the checkpoint holds the bf16 model's own numbers."""
    torch, transformers = _transformers()
    model = _hf_random_model(transformers, torch, "qwen3_qknorm").to(torch.bfloat16)
    model.save_pretrained(str(tmp_path / "hf"))
    assert st.read_header(str(tmp_path / "hf" / "model.safetensors"))[0]["lm_head.weight"]["dtype"] == "BF16"
    convert("import", tmp_path / "hf", tmp_path / "b.bin")
    cfg, p, _ = read_checkpoint(str(tmp_path / "b.bin"))
    P = hf._flat_view(cfg, p)
    sd = {k: v.float().numpy() for k, v in model.state_dict().items()}
    assert np.array_equal(P["fc_w"][1][cfg.ffn_dim:], sd["model.layers.1.mlp.up_proj.weight"])
    assert np.array_equal(P["k_norm_w"][0], sd["model.layers.0.self_attn.k_norm.weight"])
    assert np.array_equal(P["lm_head"][:V], sd["lm_head.weight"])
    # the exporter's bf16 rounding is torch's, bit for bit, on a million random floats of all scales
    r = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32) * np.float32(10.0) ** \
        np.random.default_rng(1).integers(-30, 30, 1 << 20).astype(np.float32)
    want = torch.from_numpy(r).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(st.to_bf16_bits(r), want)
    # loaded afresh in float32 (model.float() would keep its RoPE table rounded to bf16)
    model32 = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf"), dtype=torch.float32).eval()
    check_model(torch, model32, cfg, p, tmp_path / "b.bin", tmp_path, 10)


@pytest.mark.parametrize("tok,vocab", [("gpt2", 50257), ("neox", 50277), ("llama2", 32000)])
def test_exported_tokenizer_encodes_as_the_pipeline(tok, vocab, tmp_path, vp_cache):
    """AutoTokenizer on the exported directory gives the ids the shards hold for the same text:
    TinyShakespeare's documents and an edge-case line. One known divergence, in transformers'
    own Llama tokenizer (5.24), not in the files: it splits a run of spaces before a word as
    ['▁▁', 'It'] where sentencepiece (and so the shards) has ['▁', '▁It']. The test pins that
    this is the only difference, so a change on either side shows."""
    torch, transformers = _transformers()
    from vp_data import tokenizer

    cfg = make_config("gpt2", 1, 1, 8, vocab, 8)
    write_checkpoint(str(tmp_path / "a.bin"), cfg, np.zeros(num_params(cfg), np.float32))
    convert("export", tmp_path / "a.bin", tmp_path / "hf", "--tokenizer", tok)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["bos_token_id"] == tokenizer.load(tok).encode_doc("")[0]
    ours = tokenizer.load(tok)
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    text = Path(vp_cache, "tinyshakespeare", "input.txt").read_text()[:100_000]
    docs = text.split("\n\n") + ["ROMEO:\nBut, soft! what light through yonder window breaks?  café 12345 \u00e9t\u00e9 \t x"]
    differ = [d for d in docs if theirs.encode(d, add_special_tokens=False) != ours.encode(d)]
    if tok == "llama2":
        assert differ and all("  " in d for d in differ), differ[:3]
    else:
        assert differ == []


def test_export_force_leaves_no_file_of_an_earlier_export(tmp_path):
    """--force over an earlier export: its tokenizer and remote-code files that this export does
    not write are removed (AutoTokenizer would load them beside the new model), files of the
    user's own are kept, and without --force nothing is touched."""
    cfg = make_config("gpt2", 1, 1, 8, 50257, 8)
    write_checkpoint(str(tmp_path / "a.bin"), cfg, random_params(cfg, 0))
    d = tmp_path / "hf"
    convert("export", tmp_path / "a.bin", d, "--tokenizer", "gpt2", "--remote-code")
    assert {"vocab.json", "merges.txt", "tokenizer_config.json", "modeling_valuepath.py"} <= set(os.listdir(d))
    (d / "README.md").write_text("mine")
    convert("export", tmp_path / "a.bin", d, expect=1)  # no --force: refused, the earlier export intact
    assert "vocab.json" in os.listdir(d)
    convert("export", tmp_path / "a.bin", d, "--force")
    assert sorted(os.listdir(d)) == ["README.md", "config.json", "model.safetensors"]
    assert json.loads((d / "config.json").read_text())["model_type"] == "gpt2"


def test_flag_errors_are_usage_errors_with_plain_messages(tmp_path):
    """An unknown --tokenizer is a bad flag (exit 2), and --max-seq on a model whose length is fixed
    says so in plain words, not as a feature valuepath's model lacks."""
    cfg = small_config("gpt2")
    write_checkpoint(str(tmp_path / "a.bin"), cfg, random_params(cfg, 0))
    _, _, err = convert("export", tmp_path / "a.bin", tmp_path / "x", "--tokenizer", "foo", expect=2)
    assert "unknown tokenizer 'foo'" in err and not (tmp_path / "x").exists()
    convert("export", tmp_path / "a.bin", tmp_path / "rc", "--remote-code")
    _, _, err = convert("import", tmp_path / "rc", tmp_path / "b.bin", "--max-seq", "8", expect=1)
    assert "import keeps as it was; drop --max-seq" in err and "does not implement" not in err
    convert("export", tmp_path / "a.bin", tmp_path / "hf")
    _, _, err = convert("import", tmp_path / "hf", tmp_path / "c.bin", "--max-seq", str(T + 1), expect=1)
    assert f"has only {T} learned positions; give --max-seq {T} or less" in err and "does not implement" not in err


# ------------------------------------------------------------------------------ mutation-test gaps


def test_safetensors_integer_and_f64_dtypes_by_hand(tmp_path):
    """Every dtype the reader lists, from bytes written by hand: integers come back as stored
    (signed ones keep their sign), F64 is narrowed to float32 like F16 and BF16; a header length
    one byte past the end of the file is refused as such."""
    parts = [("i16", "I16", [2], np.array([-2, 3], "<i2")), ("i8", "I8", [1], np.array([-1], "i1")),
             ("u8", "U8", [2], np.array([255, 1], "u1")), ("i32", "I32", [1], np.array([-70000], "<i4")),
             ("i64", "I64", [1], np.array([-2 ** 40], "<i8")), ("f64", "F64", [2], np.array([0.25, -3.0], "<f8"))]
    header, data = {}, b""
    for name, dt, shape, a in parts:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + a.nbytes]}
        data += a.tobytes()
    h = json.dumps(header).encode()
    f = tmp_path / "ints.safetensors"
    f.write_bytes(struct.pack("<Q", len(h)) + h + data)
    got = st.read_tensors(str(f))
    assert got["i16"].tolist() == [-2, 3] and got["i8"].tolist() == [-1] and got["u8"].tolist() == [255, 1]
    assert got["i32"].tolist() == [-70000] and got["i64"].tolist() == [-2 ** 40]
    assert got["f64"].dtype == np.float32 and got["f64"].tolist() == [0.25, -3.0]
    g = tmp_path / "long_header.safetensors"
    g.write_bytes(struct.pack("<Q", len(h) + len(data) + 1) + h + data)
    with pytest.raises(DataError, match="does not fit in the file"):
        st.read_header(str(g))


def test_checkpoint_data_crc_covers_the_adamw_moments(tmp_path):
    """docs/formats.md: data_crc is the CRC-32 of params, then m, then v. A checkpoint with optimizer
    state is built by hand from one without (has_optimizer = 1 at byte 12, the moments appended, both
    CRCs recomputed with zlib as the trainers write them); read_checkpoint takes it, and refuses it
    once one bit of v is flipped with data_crc left as it was."""
    import zlib

    from vp_data.checkpoint import encode_checkpoint

    cfg = small_config("gpt2")
    p = random_params(cfg, 5)
    hdr, text, data = encode_checkpoint(cfg, p, step=3, run_text="lr=1\n")
    m = np.full(p.size, 0.5, "<f4").tobytes()
    v = np.full(p.size, 0.25, "<f4").tobytes()
    h = bytearray(hdr)
    struct.pack_into("<i", h, 12, 1)
    struct.pack_into("<II", h, 296, 0, 0)
    tensors = bytes(data) + m + v
    struct.pack_into("<II", h, 296, zlib.crc32(text, zlib.crc32(bytes(h))), zlib.crc32(tensors))
    good = bytes(h) + text + tensors
    (tmp_path / "opt.bin").write_bytes(good)
    cfg2, p2, meta = read_checkpoint(str(tmp_path / "opt.bin"))
    assert cfg2 == cfg and np.array_equal(p2, p) and meta["has_optimizer"] == 1 and meta["step"] == 3
    bad = bytearray(good)
    bad[-3] ^= 0x10  # inside v
    (tmp_path / "bad.bin").write_bytes(bytes(bad))
    with pytest.raises(ValueError, match="CRC-32 of its tensors"):
        read_checkpoint(str(tmp_path / "bad.bin"))


def test_gpt2_export_writes_n_inner_when_the_mlp_is_not_4c(tmp_path):
    """A GPT-2 with F = 3C: config.json has n_inner = 96 (docs/formats.md: `n_inner` when F != 4C;
    without it transformers builds a 4C MLP), and the import gives the model back exactly."""
    cfg = make_config("gpt2", 2, 4, 32, V, T, F=96)
    p = random_params(cfg, 6)
    write_checkpoint(str(tmp_path / "a.bin"), cfg, p)
    convert("export", tmp_path / "a.bin", tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["n_inner"] == 96 and config["n_embd"] == 32
    assert st.read_header(str(tmp_path / "hf" / "model.safetensors"))[0]["transformer.h.0.mlp.c_fc.weight"]["shape"] == [32, 96]
    convert("import", tmp_path / "hf", tmp_path / "b.bin")
    cfg2, p2, _ = read_checkpoint(str(tmp_path / "b.bin"))
    assert cfg2.ffn_dim == 96 and cfg2 == cfg and np.array_equal(hf._flat_view(cfg, p)["fc_w"], hf._flat_view(cfg2, p2)["fc_w"])


@pytest.mark.parametrize("tok,vocab,bos,eos", [("gpt2", 50257, 50256, 50256), ("neox", 50277, 0, 0), ("llama2", 32000, 1, 2)])
def test_exported_tokenizer_ids_in_config(tok, vocab, bos, eos, tmp_path):
    """The ids docs/formats.md gives (and the tokenizers' own files: GPT-2's <|endoftext|> 50256,
    NeoX's 0, Llama-2's <s> 1 and </s> 2), checked without transformers, which the test that loads
    the tokenizer needs."""
    cfg = make_config("gpt2", 1, 1, 8, vocab, 8)
    write_checkpoint(str(tmp_path / "a.bin"), cfg, np.zeros(num_params(cfg), np.float32))
    convert("export", tmp_path / "a.bin", tmp_path / "hf", "--tokenizer", tok)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"]) == (bos, eos)


def test_llama_import_without_rms_norm_eps_takes_transformers_default(tmp_path):
    """A Llama config.json without rms_norm_eps means transformers' default, 1e-6 (LlamaConfig and
    Qwen3Config), not valuepath's 1e-5."""
    from vp_data.checkpoint import f32

    cfg = small_config("llama_gqa")
    write_checkpoint(str(tmp_path / "a.bin"), cfg, random_params(cfg, 7))
    convert("export", tmp_path / "a.bin", tmp_path / "hf")
    path = tmp_path / "hf" / "config.json"
    config = json.loads(path.read_text())
    del config["rms_norm_eps"]
    path.write_text(json.dumps(config))
    convert("import", tmp_path / "hf", tmp_path / "b.bin")
    assert read_checkpoint(str(tmp_path / "b.bin"))[0].norm_eps == f32(1e-6)


def test_usage_errors_exit_2_and_write_nothing(tmp_path):
    """The docstring's exit code 2 (usage) for: no command, an import --max-seq that is not a
    positive number (0 would write a checkpoint that can hold no token), and a --dtype other than
    float32 or bfloat16. Each is refused by the flags, before anything is read or written."""
    d = hf_dir(tmp_path)
    convert(expect=2)
    for bad in ("0", "-8"):
        _, _, err = convert("import", d, tmp_path / "b.bin", "--max-seq", bad, expect=2)
        assert "expected a positive number" in err and not (tmp_path / "b.bin").exists()
    _, _, err = convert("export", tmp_path / "llama_gqa.bin", tmp_path / "f16", "--dtype", "float16", expect=2)
    assert "invalid choice: 'float16'" in err and not (tmp_path / "f16").exists()


def test_summary_lines_say_what_was_written(tmp_path):
    """The one line each command prints, against the shapes the test gave make_config: export names
    the HF class (gpt2 -> GPT2LMHeadModel, the docstring) and the vocabulary, with no
    trust_remote_code note for a native class; import gives layers, heads (kv heads), dim, ffn,
    vocab and max seq, and says "tied head" only for a tied model."""
    cfg = small_config("gpt2")
    write_checkpoint(str(tmp_path / "g.bin"), cfg, random_params(cfg, 0))
    _, out, _ = convert("export", tmp_path / "g.bin", tmp_path / "g")
    assert out == f"wrote {tmp_path / 'g'}: GPT2LMHeadModel, vocab {V}\n"
    for name, kv, tied in (("llama_gqa", 2, ""), ("llama_tied_mqa", 1, ", tied head")):
        d = hf_dir(tmp_path, name)
        _, out, _ = convert("import", d, tmp_path / f"{name}.ckpt")
        ffn = small_config(name).ffn_dim
        assert out == (f"wrote {tmp_path / f'{name}.ckpt'}: llama, 2 layers, 4 heads ({kv} kv), dim 32, ffn {ffn}, "
                       f"vocab {V}, max seq {T}{tied}\n"), out
    # another value path's checkpoint loads only in that path's build: the line names it
    cfg = small_config("llama_gqa", "resformer")
    write_checkpoint(str(tmp_path / "r.bin"), cfg, random_params(cfg, 0))
    convert("export", tmp_path / "r.bin", tmp_path / "r")
    _, out, _ = convert("import", tmp_path / "r", tmp_path / "r.ckpt")
    assert out.endswith("; value path resformer: load it with a VALUE_PATH=resformer build "
                        "(make train_cpu VALUE_PATH=resformer, or make train VALUE_PATH=resformer)\n"), out
