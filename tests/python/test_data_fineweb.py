"""prepare_fineweb.py on a FineWeb-format fixture: Parquet files of web documents with FineWeb's
columns (text, id, dump, url, ...), in the hub layout sample/10BT/NNN_00000.parquet."""

import gzip
import json
import os
import shutil

import numpy as np
import pytest

from vp_data import cli
from vptest import all_files_digest, expected_stream, first_by_quota, read_tokens

DUMPS = ["CC-MAIN-2013-20", "CC-MAIN-2024-10"]


@pytest.fixture(scope="module")
def fineweb_tree(tmp_path_factory, vp_cache):
    """Real web text (the C4 and Dolma Common Crawl samples) as two FineWeb Parquet files, the
    records' dump alternating so that both files hold both snapshots."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = []
    for name in ("c4-sample.01.json.gz", "c4-sample.02.json.gz", "c4-sample.03.json.gz"):
        with gzip.open(os.path.join(vp_cache, "samples", "c4", name)) as f:
            texts.extend(json.loads(line)["text"] for line in f)
    with gzip.open(os.path.join(vp_cache, "samples", "dolma-cc", "cc_en_head-0091.jsonl.gz")) as f:
        texts.extend(json.loads(line)["text"][:4000] for line in f)
    records = [{"text": t, "id": f"<urn:uuid:{i:08d}>", "dump": DUMPS[i % 2], "url": f"https://example.org/{i}",
                "date": "2019-04-20T00:00:00Z", "language": "en", "language_score": 0.9, "token_count": len(t) // 4}
               for i, t in enumerate(texts)]
    root = tmp_path_factory.mktemp("fineweb")
    files = {"000_00000.parquet": records[:18], "001_00000.parquet": records[18:]}
    for name, recs in files.items():
        pq.write_table(pa.Table.from_pylist(recs), root / name)
    return root, files


def split_expected(files, fraction, seed=2357):
    """The val and train texts the keyed hash gives, in file order."""
    docs = [r["text"] for name in sorted(files) for r in files[name]]
    is_val = [cli.hash01(t, seed) < fraction for t in docs]
    return [t for t, v in zip(docs, is_val) if v], [t for t, v in zip(docs, is_val) if not v]


def test_hash_split_with_the_gpt2_tokenizer(tmp_path, fineweb_tree, run_script, ref_encode):
    root, files = fineweb_tree
    out = tmp_path / "fw"
    r = run_script("prepare_fineweb", "--input-dir", root, "--out-dir", out, "--val-fraction", "0.25",
                   "--shard-size", "5000", "--workers", "2")
    val, train = split_expected(files, 0.25)
    assert val and train
    assert np.array_equal(read_tokens(out, "fineweb", "val"), expected_stream(ref_encode, "gpt2", val))
    assert np.array_equal(read_tokens(out, "fineweb", "train"), expected_stream(ref_encode, "gpt2", train))
    assert os.path.exists(out / "gpt2.vptok")
    assert f"--val-data '{out / 'fineweb_val_*.bin'}'" in r.out


def test_budget_and_val_by_dump(tmp_path, fineweb_tree, run_script, ref_encode):
    root, files = fineweb_tree
    out = tmp_path / "fw"
    run_script("prepare_fineweb", "--input-dir", root, "--out-dir", out, "--val-fraction", "0.25",
               "--budget", "3000", "--val-by-domain", "1", "--val-tokens", "0")
    docs = [r for name in sorted(files) for r in files[name]]
    train_recs = [r for r in docs if cli.hash01(r["text"], 2357) >= 0.25]
    want = first_by_quota(ref_encode, "gpt2", train_recs, {"*": 3000})
    assert np.array_equal(read_tokens(out, "fineweb", "train"), expected_stream(ref_encode, "gpt2", want))
    for dump in DUMPS:
        short = dump.lower().replace("-", "")
        want_val = [r["text"] for r in docs if r["dump"] == dump and cli.hash01(r["text"], 2357) < 0.25]
        assert np.array_equal(read_tokens(out, "fineweb", f"val_{short}"), expected_stream(ref_encode, "gpt2", want_val))


def test_hub_mode_reads_only_the_subset_from_the_cache(tmp_path, fineweb_tree, run_script, vp_cache):
    """Offline, `--repo` reads $VALUEPATH_CACHE/fineweb/OWNER/NAME/<--subset>/ and nothing else of
    the repository (here a decoy file of the full dataset beside the 10BT sample)."""
    root, _ = fineweb_tree
    repo = os.path.join(vp_cache, "fineweb", "HuggingFaceFW", "fineweb")
    try:
        shutil.copytree(root, os.path.join(repo, "sample", "10BT"))
        os.makedirs(os.path.join(repo, "data", "CC-MAIN-2013-20"))
        shutil.copy(os.path.join(root, "000_00000.parquet"), os.path.join(repo, "data", "CC-MAIN-2013-20", "000_00000.parquet"))
        a, b = tmp_path / "hub", tmp_path / "dir"
        common = ["--val-fraction", "0.25"]
        run_script("prepare_fineweb", "--out-dir", a, *common)
        run_script("prepare_fineweb", "--input-dir", root, "--out-dir", b, *common)
        assert all_files_digest(a) == all_files_digest(b)
        r = run_script("prepare_fineweb", "--subset", "sample/100BT", "--out-dir", tmp_path / "x", expect=1)
        assert "sample/100BT" in r.err and "offline" in r.err
        r = run_script("prepare_fineweb", "--repo", "HuggingFaceFW/fineweb-edu", "--out-dir", tmp_path / "y", expect=1)
        assert "offline and nothing of HuggingFaceFW/fineweb-edu is cached" in r.err
    finally:
        shutil.rmtree(os.path.join(vp_cache, "fineweb"))
