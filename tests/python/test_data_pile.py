"""prepare_pile.py on a Pile-format fixture: train/NN.jsonl.zst, val.jsonl.zst, test.jsonl.zst,
records tagged with meta.pile_set_name (names with spaces and parentheses among them)."""

import gzip
import json
import os
import shutil

import numpy as np
import pytest

from vptest import all_files_digest, expected_stream, first_by_quota, read_tokens, write_jsonl_zst

# (value of meta.pile_set_name, the script's short name for it)
DOMAINS = [("Pile-CC", "pilecc"), ("Gutenberg (PG-19)", "gutenberg"), ("Wikipedia (en)", "wikipedia"),
           ("ArXiv", "arxiv")]


@pytest.fixture(scope="module")
def pile_tree(tmp_path_factory, vp_cache):
    """Real texts (C4 and Dolma CC web pages, pieces of RedPajama arXiv papers), each record's
    domain assigned round-robin so that every file mixes domains, as the Pile's do."""
    texts = []
    for name in ("c4-sample.01.json.gz", "c4-sample.02.json.gz"):
        with gzip.open(os.path.join(vp_cache, "samples", "c4", name)) as f:
            texts.extend(json.loads(line)["text"] for line in f)
    with gzip.open(os.path.join(vp_cache, "samples", "dolma-cc", "cc_en_head-0091.jsonl.gz")) as f:
        texts.extend(json.loads(line)["text"][:3000] for line in f)
    with open(os.path.join(vp_cache, "samples", "redpajama-arxiv", "arxiv.jsonl"), encoding="utf-8") as f:
        for line in list(f)[:8]:
            t = json.loads(line)["text"]
            texts.extend(t[i : i + 1200] for i in range(0, min(len(t), 3600), 1200))
    records = [{"text": t, "meta": {"pile_set_name": DOMAINS[i % len(DOMAINS)][0]}} for i, t in enumerate(texts)]
    assert len(records) >= 50
    root = tmp_path_factory.mktemp("pile")
    (root / "train").mkdir()
    layout = {"val": records[:14], "train/00": records[14:30], "train/01": records[30:50]}
    write_jsonl_zst(root / "val.jsonl.zst", layout["val"], frames=2)
    write_jsonl_zst(root / "train" / "00.jsonl.zst", layout["train/00"])
    write_jsonl_zst(root / "train" / "01.jsonl.zst", layout["train/01"], frames=3)
    # the test split must never be read: a record here with an unknown domain and no text
    write_jsonl_zst(root / "test.jsonl.zst", [{"meta": {"pile_set_name": "Nowhere"}}])
    return root, layout


def domain(record):
    return record["meta"]["pile_set_name"]


def texts(recs, dom=None):
    return [r["text"] for r in recs if dom is None or domain(r) == dom]


def test_one_val_set_and_all_train_by_default(tmp_path, pile_tree, run_script, ref_encode):
    root, layout = pile_tree
    out = tmp_path / "p"
    r = run_script("prepare_pile", "--input-dir", root, "--out-dir", out, "--shard-size", "4000",
                   "--val-tokens", "0", "--workers", "2")
    assert np.array_equal(read_tokens(out, "pile", "val"), expected_stream(ref_encode, "neox", texts(layout["val"])))
    train = texts(layout["train/00"]) + texts(layout["train/01"])
    assert np.array_equal(read_tokens(out, "pile", "train"), expected_stream(ref_encode, "neox", train))
    assert f"--val-data '{out}/pile_val_*.bin'" in r.out
    assert not any("test" in f for f in os.listdir(out))
    m = json.loads((out / "pile.manifest.json").read_text())
    assert m["tokenizer"]["name"] == "neox" and m["tokenizer"]["vocab_size"] == 50277 and m["tokenizer"]["delimiter"] == 0


def test_val_by_domain_uses_the_short_names(tmp_path, pile_tree, run_script, ref_encode):
    root, layout = pile_tree
    out = tmp_path / "d"
    r = run_script("prepare_pile", "--input-dir", root, "--out-dir", out, "--val-by-domain", "1", "--val-tokens", "900")
    for value, short in DOMAINS:
        want = first_by_quota(ref_encode, "neox", layout["val"], {value: 900}, domain)
        assert np.array_equal(read_tokens(out, "pile", f"val_{short}"), expected_stream(ref_encode, "neox", want)), value
        assert f"--val-data {short}='{out}/pile_val_{short}_*.bin'" in r.out


def test_budget_takes_the_first_tokens_and_resumes(tmp_path, pile_tree, run_script, ref_encode):
    root, layout = pile_tree
    args = ["--input-dir", root, "--budget", "6000", "--val-tokens", "500", "--shard-size", "700", "--workers", "1"]
    run_script("prepare_pile", *args, "--out-dir", tmp_path / "full")
    take = first_by_quota(ref_encode, "neox", layout["train/00"] + layout["train/01"], {"*": 6000})
    assert np.array_equal(read_tokens(tmp_path / "full", "pile", "train"), expected_stream(ref_encode, "neox", take))
    run_script("prepare_pile", *args, "--out-dir", tmp_path / "part", "--stop-after-shards", "3", expect=3)
    run_script("prepare_pile", *args, "--out-dir", tmp_path / "part")
    assert all_files_digest(tmp_path / "part") == all_files_digest(tmp_path / "full")


def test_domain_mix_and_bad_names(tmp_path, pile_tree, run_script, ref_encode, capsys):
    root, layout = pile_tree
    out = tmp_path / "m"
    r = run_script("prepare_pile", "--input-dir", root, "--out-dir", out, "--budget", "4000",
                   "--mix", "gutenberg=0.5,wikipedia=0.5", "--val-tokens", "0")
    quota = {"Gutenberg (PG-19)": 2000, "Wikipedia (en)": 2000}
    take = first_by_quota(ref_encode, "neox", layout["train/00"] + layout["train/01"], quota, domain)
    assert np.array_equal(read_tokens(out, "pile", "train"), expected_stream(ref_encode, "neox", take))
    assert "train tokens per domain (got/budget): gutenberg" in r.out
    # val: only the mixed domains' documents
    want = [rec["text"] for rec in layout["val"] if domain(rec) in quota]
    assert np.array_equal(read_tokens(out, "pile", "val"), expected_stream(ref_encode, "neox", want))
    # a bad --mix is a usage error (exit 2), like argparse's own
    from conftest import load_script

    with pytest.raises(SystemExit) as e:
        load_script("prepare_pile").main(["--input-dir", str(root), "--out-dir", str(tmp_path / "x"),
                                          "--budget", "10", "--mix", "c4=1"])
    assert e.value.code == 2
    assert "unknown Pile domain 'c4'; use one of pilecc, pubmedcentral" in capsys.readouterr().err


def test_hub_mode_reads_the_cache_offline(tmp_path, pile_tree, run_script, vp_cache):
    root, _ = pile_tree
    shutil.copytree(root, os.path.join(vp_cache, "pile", "test-owner", "pile-fixture"), dirs_exist_ok=True)
    a, b = tmp_path / "hub", tmp_path / "dir"
    run_script("prepare_pile", "--repo", "test-owner/pile-fixture", "--out-dir", a, "--max-train-files", "1")
    run_script("prepare_pile", "--input-dir", root, "--out-dir", b, "--max-train-files", "1")
    assert all_files_digest(a) == all_files_digest(b)
    r = run_script("prepare_pile", "--out-dir", tmp_path / "x", expect=1)
    assert "offline and nothing of monology/pile-uncopyrighted is cached" in r.err
    assert "../shared/data does not hold this data" in r.err  # fill_cache_from_shared.sh is no way in
