"""The download cache: every downloaded file lives under $VALUEPATH_CACHE.

Layout (the same layout as ../shared/data, so `scripts/fill_cache_from_shared.sh` can
just link that tree in):

  $VALUEPATH_CACHE/                      default ~/.cache/valuepath
    tokenizers/gpt2/encoder.json         OpenAI GPT-2 BPE (tiktoken is built from these)
    tokenizers/gpt2/vocab.bpe
    tokenizers/gpt-neox-20b/tokenizer.json
    tokenizers/llama2/tokenizer.model
    tinyshakespeare/input.txt
    hellaswag/hellaswag_{val,train}.jsonl   (scripts/prepare_hellaswag.py)
    corpus/gutenberg-en-50mb/{corpus.txt.gz,sources.jsonl}   (only from shared data)
    samples/...                                              (only from shared data)
    hf/                                  HF `datasets` / hub cache (OpenWebText)
    slimpajama/<owner>/<repo>/<path>     SlimPajama chunks, e.g. train/chunk1/example_train_0.jsonl.zst

We always look in the cache first. Offline (VALUEPATH_OFFLINE=1, or HF_HUB_OFFLINE=1 /
HF_DATASETS_OFFLINE=1) a missing file is an error that says where it was expected and how
to fill the cache; we never silently reach for the network.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass

from . import DataError

_TRUE = {"1", "true", "yes", "on"}


def cache_dir() -> str:
    d = os.environ.get("VALUEPATH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "valuepath")
    return os.path.abspath(d)


def offline() -> bool:
    return any(
        os.environ.get(k, "").strip().lower() in _TRUE
        for k in ("VALUEPATH_OFFLINE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def cache_path(*parts: str) -> str:
    return os.path.join(cache_dir(), *parts)


@dataclass(frozen=True)
class Resource:
    """A file we know how to download; `rel` is its path inside the cache."""

    rel: str
    url: str
    sha256: str | None  # pinned where the upstream file is fixed


# URLs are the ones tiktoken / llm.c / char-rnn use; the hashes are the ones tiktoken pins
# for OpenAI's files and the ones recorded in ../shared/data/MANIFEST.md.
RESOURCES = {
    "gpt2/encoder.json": Resource(
        "tokenizers/gpt2/encoder.json",
        "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json",
        "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    ),
    "gpt2/vocab.bpe": Resource(
        "tokenizers/gpt2/vocab.bpe",
        "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
        "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    ),
    # The hub file is a different serialization from the shared copy (same content), so
    # no hash is pinned; tokenizer.py checks the vocabulary size instead.
    "gpt-neox-20b/tokenizer.json": Resource(
        "tokenizers/gpt-neox-20b/tokenizer.json",
        "https://huggingface.co/EleutherAI/gpt-neox-20b/resolve/main/tokenizer.json",
        None,
    ),
    # Meta's Llama 2 tokenizer (Llama 2 Community License) as vendored by llama2.c.
    "llama2/tokenizer.model": Resource(
        "tokenizers/llama2/tokenizer.model",
        "https://raw.githubusercontent.com/karpathy/llama2.c/master/tokenizer.model",
        "9e556afd44213b6bd1be2b850ebbbd98f5481437a8021afaf58ee7fb1818d347",
    ),
    "tinyshakespeare/input.txt": Resource(
        "tinyshakespeare/input.txt",
        "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    ),
    # HellaSwag (Zellers et al. 2019, MIT) from its authors' repository, as llm.c fetches it. No
    # hash is pinned: the file could not be fetched here to record one (prepare_hellaswag.py
    # checks every record instead).
    "hellaswag/hellaswag_val.jsonl": Resource(
        "hellaswag/hellaswag_val.jsonl",
        "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl",
        None,
    ),
    "hellaswag/hellaswag_train.jsonl": Resource(
        "hellaswag/hellaswag_train.jsonl",
        "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_train.jsonl",
        None,
    ),
}

# Said wherever a file is missing offline. Only the small test and demo files are in the
# project's shared data (../shared/data/MANIFEST.md: the tokenizers, TinyShakespeare, the Gutenberg
# corpus and the samples, under these folders of the cache); OpenWebText, SlimPajama, the Pile,
# FineWeb, HellaSwag and GPT-2's weights are not, and for those fill_cache_from_shared.sh is no way in.
SHARED_PREFIXES = ("tokenizers/", "tinyshakespeare/", "corpus/", "samples/")
FILL_HINT = (
    "run once with network access, or copy the file (or a whole $VALUEPATH_CACHE, e.g. with rsync) "
    "there from a machine that has it; the project's ../shared/data (test and demo files only) is "
    "linked in with `scripts/fill_cache_from_shared.sh ../shared/data \"$VALUEPATH_CACHE\"`"
)
NOT_SHARED_HINT = (
    "run once with network access, or copy the files (or a whole $VALUEPATH_CACHE, e.g. with rsync) "
    "there from a machine that has them; the project's ../shared/data does not hold this data, so "
    "scripts/fill_cache_from_shared.sh cannot fill it"
)


def fill_hint(dest: str, url: str | None = None) -> str:
    """How to get `dest` (a path in the cache) without the network: the shared data's script only
    for a file it holds; for any other, the file to place there and where it comes from."""
    rel = os.path.relpath(os.path.abspath(dest), cache_dir()).replace(os.sep, "/")
    if rel.startswith(SHARED_PREFIXES):
        return FILL_HINT
    source = f"download {url} to {dest}" if url else f"put that file at {dest}"
    return (f"run once with network access, or {source} yourself (or copy a whole $VALUEPATH_CACHE from a "
            f"machine that has it); the project's ../shared/data does not hold it, so "
            f"scripts/fill_cache_from_shared.sh cannot fill it")


def sha256_file(path: str, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def download(url: str, dest: str, sha256: str | None = None, timeout: float = 60.0) -> str:
    """Download `url` to `dest` through a temporary name, verifying the hash if given."""
    if offline():
        raise DataError(f"{dest} is not in the cache and we are offline (VALUEPATH_OFFLINE/HF_*_OFFLINE); {fill_hint(dest, url)}")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    tmp = dest + ".part"
    print(f"downloading {url} -> {dest}", file=sys.stderr)
    h = hashlib.sha256()
    try:
        req = urllib.request.Request(url, headers={"User-Agent": "valuepath-data/1"})
        with urllib.request.urlopen(req, timeout=timeout) as r, open(tmp, "wb") as f:
            while True:
                b = r.read(1 << 20)
                if not b:
                    break
                h.update(b)
                f.write(b)
    except BaseException as e:
        # Whatever stopped it (a connection cut short, Ctrl-C), the .part file is not the file:
        # never leave it behind.
        try:
            os.remove(tmp)
        except OSError:
            pass
        # http.client.HTTPException is not an OSError: IncompleteRead (the server closed the
        # connection before Content-Length bytes came), BadStatusLine, ...
        if isinstance(e, (urllib.error.URLError, OSError, TimeoutError, http.client.HTTPException)):
            why = str(e)
            if isinstance(e, http.client.HTTPException) and type(e).__name__ not in why:
                why = f"{type(e).__name__}: {why}"  # BadStatusLine's text alone is only the line it got
            raise DataError(f"could not download {url} to {dest}: {why}; {fill_hint(dest, url)}") from None
        raise
    if sha256 is not None and h.hexdigest() != sha256:
        os.remove(tmp)
        raise DataError(f"download of {url} has sha256 {h.hexdigest()}, expected {sha256}; not kept")
    os.replace(tmp, dest)
    return dest


def fetch(key: str) -> str:
    """Return the cached path of a known resource, downloading it if it is missing."""
    res = RESOURCES[key]
    path = cache_path(res.rel)
    if os.path.exists(path):
        if res.sha256 is not None:
            got = sha256_file(path)
            if got != res.sha256:
                raise DataError(
                    f"{path} has sha256 {got}, expected {res.sha256} (corrupt or a different file); "
                    f"delete it and re-run to download it again"
                )
        return path
    return download(res.url, path, res.sha256)

