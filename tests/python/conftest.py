"""Shared fixtures for the data-pipeline tests.

The tests never touch the network: the download cache is a temporary directory filled
from ../shared/data (override with VALUEPATH_SHARED_DATA) by scripts/fill_cache_from_shared.sh,
every offline switch is set, and socket connections from this process are refused.
"""

import contextlib
import importlib.util
import io
import os
import socket
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(REPO, "scripts")
SHARED = os.path.abspath(os.environ.get("VALUEPATH_SHARED_DATA") or os.path.join(REPO, "..", "shared", "data"))

if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)

# Before anything imports datasets / huggingface_hub (they read these at import time).
OFFLINE_ENV = {
    "VALUEPATH_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
os.environ.update(OFFLINE_ENV)
# Open MPI's PMIx tries its munge security plugin first where munge is installed (a machine set up
# for Slurm: dev/slurm_local.sh) and, with munged not running, retries its socket for 2.3 s on every
# mpirun (50, 100, ... 450 ms apart; strace, 2026-11-30): 2.4 s instead of 0.14 s for `mpirun -np 2
# true`. The tests start every rank on this machine, where the native plugin (the socket's peer
# credentials) is enough. test_slurm.py takes it out again for its jobs, whose ranks authenticate
# as Slurm's PMIx server says.
PMIX_PSEC_SET_HERE = "PMIX_MCA_psec" not in os.environ
os.environ.setdefault("PMIX_MCA_psec", "native")


@pytest.fixture(scope="session")
def shared():
    if not os.path.isfile(os.path.join(SHARED, "MANIFEST.md")):
        pytest.fail(f"shared test data not found at {SHARED}; set VALUEPATH_SHARED_DATA to ../shared/data")
    return SHARED


@pytest.fixture(scope="session", autouse=True)
def vp_cache(tmp_path_factory, shared):
    """A cache in the documented layout, filled from the shared data; used by every test."""
    cache = tmp_path_factory.mktemp("vpcache")
    subprocess.run(
        ["bash", os.path.join(SCRIPTS, "fill_cache_from_shared.sh"), shared, str(cache)],
        check=True,
        capture_output=True,
    )
    old = {k: os.environ.get(k) for k in ("VALUEPATH_CACHE", "HF_HOME")}
    os.environ["VALUEPATH_CACHE"] = str(cache)
    os.environ["HF_HOME"] = str(cache / "hf")
    yield str(cache)
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(*a, **k):
        raise OSError("network access is not allowed in tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def load_script(name):
    path = os.path.join(SCRIPTS, f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"vp_script_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Result:
    def __init__(self, code, out, err):
        self.code, self.out, self.err = code, out, err

    def __repr__(self):
        return f"Result(code={self.code}, out={self.out!r}, err={self.err!r})"


@pytest.fixture
def run_script():
    """run_script('prepare_text', *argv) -> Result, in-process (fast; the pool still forks)."""
    from vp_data import cli

    def run(name, *argv, expect=0):
        mod = load_script(name)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.run(mod.main, [str(a) for a in argv] + ["--no-progress"])
        r = Result(code, out.getvalue(), err.getvalue())
        if expect is not None:
            assert code == expect, r
        return r

    return run


# ------------------------------------------------------------ reference tokenizers
# Built directly with tiktoken / tokenizers / sentencepiece, not through vp_data.


@pytest.fixture(scope="session")
def ref_gpt2(vp_cache):
    """tiktoken's own GPT-2 construction (tiktoken_ext.openai_public.gpt2), fed the local files."""
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext import openai_public

    old = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = ""  # "" disables tiktoken's file cache
    try:
        d = os.path.join(vp_cache, "tokenizers", "gpt2")
        ranks = data_gym_to_mergeable_bpe_ranks(
            vocab_bpe_file=os.path.join(d, "vocab.bpe"), encoder_json_file=os.path.join(d, "encoder.json")
        )
    finally:
        if old is None:
            os.environ.pop("TIKTOKEN_CACHE_DIR")
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = old
    return tiktoken.Encoding(
        name="gpt2",
        explicit_n_vocab=50257,
        pat_str=openai_public.r50k_pat_str,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": 50256},
    )


@pytest.fixture(scope="session")
def ref_neox(vp_cache):
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(os.path.join(vp_cache, "tokenizers", "gpt-neox-20b", "tokenizer.json"))
    tk.encode_special_tokens = True  # document text is text (see vp_data/tokenizer.py)
    return tk


@pytest.fixture(scope="session")
def ref_llama2(vp_cache):
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=os.path.join(vp_cache, "tokenizers", "llama2", "tokenizer.model"))


@pytest.fixture(scope="session")
def ref_encode(ref_gpt2, ref_neox, ref_llama2):
    """ref_encode(name, text) -> [delimiter] + the tokenizer's own ids."""

    def enc(name, text):
        if name == "gpt2":
            return [50256] + ref_gpt2.encode_ordinary(text)
        if name == "neox":
            return [0] + ref_neox.encode(text, add_special_tokens=False).ids
        if name == "llama2":
            return [ref_llama2.bos_id()] + ref_llama2.encode(text)
        raise ValueError(name)

    return enc

