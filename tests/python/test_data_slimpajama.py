"""prepare_slimpajama.py on SlimPajama-format fixtures (jsonl.zst chunks, several domains)."""

import json
import os

import numpy as np
import pytest

from vp_data import cli
from vptest import all_files_digest, expected_stream, first_by_quota, read_tokens, write_jsonl_zst

DOMAINS = ["RedPajamaArXiv", "RedPajamaC4", "RedPajamaGithub", "RedPajamaStackExchange"]


@pytest.fixture(scope="module")
def sp_tree(tmp_path_factory, vp_cache):
    """train/chunk{1,2}/example_train_{0,1}.jsonl.zst + validation/chunk1/example_holdout_{0,1}.jsonl.zst.

    Texts are real (the RedPajama arXiv sample, cut into pieces, and C4); each record's
    domain is assigned round-robin so every file mixes domains, like SlimPajama's."""
    import gzip

    texts = []
    with open(os.path.join(vp_cache, "samples", "redpajama-arxiv", "arxiv.jsonl"), encoding="utf-8") as f:
        for line in f:
            t = json.loads(line)["text"]
            texts.extend(t[i : i + 1500] for i in range(0, min(len(t), 6000), 1500))
    with gzip.open(os.path.join(vp_cache, "samples", "c4", "c4-sample.01.json.gz")) as f:
        texts.extend(json.loads(line)["text"] for line in f)
    records = [{"text": t, "meta": {"redpajama_set_name": DOMAINS[i % len(DOMAINS)]}} for i, t in enumerate(texts)]
    root = tmp_path_factory.mktemp("slimpajama")
    layout = {}
    k = 0
    for split, chunks, files, per in (("validation", 1, 2, 12), ("train", 2, 2, 14)):
        for c in range(1, chunks + 1):
            d = root / split / f"chunk{c}"
            d.mkdir(parents=True)
            for n in range(files):
                name = f"example_{'holdout' if split == 'validation' else 'train'}_{n}.jsonl.zst"
                recs = records[k : k + per]
                k += per
                write_jsonl_zst(d / name, recs, frames=2)
                layout[f"{split}/chunk{c}/{name}"] = recs
    # SlimPajama's test split is ignored
    (root / "test" / "chunk1").mkdir(parents=True)
    write_jsonl_zst(root / "test" / "chunk1" / "example_holdout_0.jsonl.zst", records[:3])
    assert k <= len(records)
    return root, layout


def docs_of(layout, split):
    """Records of a split in the order the script reads them (chunk, then file number)."""
    keys = sorted((p for p in layout if p.startswith(split + "/")), key=cli_natural)
    return [r for p in keys for r in layout[p]]


def cli_natural(p):
    import re

    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p)]


def domain(record):
    return record["meta"]["redpajama_set_name"]


def short(set_name):
    return set_name.replace("RedPajama", "").lower()


def test_per_domain_val_and_train(tmp_path, sp_tree, run_script, ref_encode):
    root, layout = sp_tree
    out = tmp_path / "sp"
    r = run_script("prepare_slimpajama", "--input-dir", root, "--out-dir", out, "--shard-size", "5000",
                   "--val-tokens-per-domain", "0", "--workers", "2")
    val_docs, train_docs = docs_of(layout, "validation"), docs_of(layout, "train")
    for dom in DOMAINS:
        mine = [x["text"] for x in val_docs if x["meta"]["redpajama_set_name"] == dom]
        assert mine
        got = read_tokens(out, "slimpajama", f"val_{short(dom)}")
        # exactly this domain's validation documents, in order, and nothing else
        assert np.array_equal(got, expected_stream(ref_encode, "neox", mine)), dom
        assert f"--val-data {short(dom)}='{out}/slimpajama_val_{short(dom)}_*.bin'" in r.out
    assert np.array_equal(read_tokens(out, "slimpajama", "train"),
                          expected_stream(ref_encode, "neox", [x["text"] for x in train_docs]))
    assert f"documents {len(val_docs) + len(train_docs)}," in r.out
    m = json.loads((out / "slimpajama.manifest.json").read_text())
    assert m["tokenizer"] == {"name": "neox", "vocab_size": 50277, "delimiter": 0, "shard_version": 1,
                              "vptok": "neox.vptok"}


def test_budget_by_domain_mix(tmp_path, sp_tree, run_script, ref_encode):
    root, layout = sp_tree
    out = tmp_path / "b"
    budget = 12000
    r = run_script("prepare_slimpajama", "--input-dir", root, "--out-dir", out, "--budget", budget,
                   "--mix", "arxiv=0.5,c4=0.25,github=0.25", "--val-tokens-per-domain", "700")
    quota = {"RedPajamaArXiv": 6000, "RedPajamaC4": 3000, "RedPajamaGithub": 3000}
    take = first_by_quota(ref_encode, "neox", docs_of(layout, "train"), quota, domain)
    assert np.array_equal(read_tokens(out, "slimpajama", "train"), expected_stream(ref_encode, "neox", take))
    assert "train tokens per domain (got/budget): arxiv" in r.out
    # val: only the mixed domains, each its first >= 700 tokens of whole documents
    assert not any("stackexchange" in f for f in os.listdir(out))
    for dom in quota:
        mine = first_by_quota(ref_encode, "neox", docs_of(layout, "validation"), {dom: 700}, domain)
        assert np.array_equal(read_tokens(out, "slimpajama", f"val_{short(dom)}"),
                              expected_stream(ref_encode, "neox", mine))


def test_resformer_mix_names_and_resume(tmp_path, sp_tree, run_script):
    root, _ = sp_tree
    args = ["--input-dir", root, "--budget", "40000", "--mix", "resformer", "--shard-size", "1500",
            "--val-tokens-per-domain", "1000"]
    run_script("prepare_slimpajama", *args, "--out-dir", tmp_path / "full")
    run_script("prepare_slimpajama", *args, "--out-dir", tmp_path / "part", "--stop-after-shards", "4", expect=3)
    run_script("prepare_slimpajama", *args, "--out-dir", tmp_path / "part", "--stop-after-shards", "2", expect=3)
    r = run_script("prepare_slimpajama", *args, "--out-dir", tmp_path / "part")
    assert "(6 reused)" in r.out
    assert all_files_digest(tmp_path / "full") == all_files_digest(tmp_path / "part")


def test_no_validation_split_uses_hash(tmp_path, sp_tree, run_script, ref_encode):
    root, layout = sp_tree
    out = tmp_path / "h"
    run_script("prepare_slimpajama", "--input-dir", root / "train", "--out-dir", out, "--val-fraction", "0.3",
               "--val-tokens-per-domain", "0", "--tokenizer", "gpt2")
    docs = docs_of(layout, "train")
    val = [x for x in docs if cli.hash01(x["text"], 2357) < 0.3]
    assert val
    for dom in {x["meta"]["redpajama_set_name"] for x in val}:
        mine = [x["text"] for x in val if x["meta"]["redpajama_set_name"] == dom]
        assert np.array_equal(read_tokens(out, "slimpajama", f"val_{short(dom)}"),
                              expected_stream(ref_encode, "gpt2", mine))
    assert np.array_equal(read_tokens(out, "slimpajama", "train"),
                          expected_stream(ref_encode, "gpt2", [x["text"] for x in docs if x not in val]))


def test_redpajama_arxiv_sample_with_default_domain(tmp_path, vp_cache, run_script, ref_encode):
    """The real RedPajama-1T arXiv lines have no redpajama_set_name: a bad record unless a
    default domain is given."""
    d = tmp_path / "rp" / "train"
    d.mkdir(parents=True)
    src = os.path.join(vp_cache, "samples", "redpajama-arxiv", "arxiv.jsonl")
    with open(src, encoding="utf-8") as f:
        recs = [json.loads(line) for line in f]
    write_jsonl_zst(d / "arxiv_0.jsonl.zst", recs)
    r = run_script("prepare_slimpajama", "--input-dir", tmp_path / "rp", "--out-dir", tmp_path / "o", expect=1)
    assert "arxiv_0.jsonl.zst:line 1: record has no field 'meta.redpajama_set_name'" in r.err
    out = tmp_path / "o2"
    run_script("prepare_slimpajama", "--input-dir", tmp_path / "rp", "--out-dir", out, "--default-domain", "arxiv",
               "--val-fraction", "0.2", "--val-tokens-per-domain", "0")
    texts = [x["text"] for x in recs]
    val = [t for t in texts if cli.hash01(t, 2357) < 0.2]
    assert np.array_equal(read_tokens(out, "slimpajama", "val_arxiv"), expected_stream(ref_encode, "neox", val))


def test_resume_after_every_shard_with_budget(tmp_path, sp_tree, run_script):
    """Interrupt after each possible number of shards: the resumed output is always
    byte-identical, including when a budget was already spent at the interruption."""
    root, _ = sp_tree
    # Shards much smaller than documents, so interruptions fall inside documents, also
    # inside the one that spends the budget.
    args = ["--input-dir", root, "--budget", "2000", "--mix", "arxiv=0.5,c4=0.5", "--shard-size", "230",
            "--val-tokens-per-domain", "500", "--workers", "1"]
    run_script("prepare_slimpajama", *args, "--out-dir", tmp_path / "full")
    want = all_files_digest(tmp_path / "full")
    n = len([f for f in want if f.endswith(".bin")])
    assert n >= 8
    for k in range(1, n):
        out = tmp_path / f"k{k}"
        run_script("prepare_slimpajama", *args, "--out-dir", out, "--stop-after-shards", k, expect=3)
        run_script("prepare_slimpajama", *args, "--out-dir", out)
        assert all_files_digest(out) == want, k


def test_hub_download_mode_uses_cache_offline(tmp_path, sp_tree, run_script, vp_cache):
    """Without --input-dir the script reads $VALUEPATH_CACHE/slimpajama/<repo>/...; offline it
    uses the files already there and never lists or downloads."""
    import shutil

    root, _ = sp_tree
    cached = os.path.join(vp_cache, "slimpajama", "test-owner", "SlimPajama-fixture")
    shutil.copytree(root, cached, dirs_exist_ok=True)
    a, b = tmp_path / "hub", tmp_path / "dir"
    run_script("prepare_slimpajama", "--repo", "test-owner/SlimPajama-fixture", "--out-dir", a,
               "--max-train-files", "3", "--max-val-files", "1")
    run_script("prepare_slimpajama", "--input-dir", root, "--out-dir", b, "--max-train-files", "3",
               "--max-val-files", "1")
    assert {k: v for k, v in all_files_digest(a).items()} == all_files_digest(b)
    r = run_script("prepare_slimpajama", "--repo", "nobody/not-cached", "--out-dir", tmp_path / "x", expect=1)
    assert "offline and nothing of nobody/not-cached is cached" in r.err


def test_parquet_subset_layout(tmp_path, sp_tree, run_script):
    """A Parquet conversion (data/train-*.parquet, data/validation-*.parquet with a `meta`
    struct column) gives the same shards as the jsonl.zst chunks it was made from."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root, layout = sp_tree
    d = tmp_path / "pq" / "data"
    d.mkdir(parents=True)
    for split, name in (("train", "train"), ("validation", "validation")):
        recs = docs_of(layout, split)
        half = len(recs) // 2
        for i, part in enumerate((recs[:half], recs[half:])):
            table = pa.table({"text": [r["text"] for r in part], "meta": [r["meta"] for r in part]})
            pq.write_table(table, d / f"{name}-{i:05d}-of-00002.parquet")
    a, b = tmp_path / "a", tmp_path / "b"
    run_script("prepare_slimpajama", "--input-dir", tmp_path / "pq", "--out-dir", a, "--val-tokens-per-domain", "0")
    run_script("prepare_slimpajama", "--input-dir", root, "--out-dir", b, "--val-tokens-per-domain", "0")
    assert all_files_digest(a) == all_files_digest(b)
