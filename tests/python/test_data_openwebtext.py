"""prepare_openwebtext.py on OpenWebText-like fixtures: the hub's Parquet layout loaded
through HF `datasets` (offline), a save_to_disk dump, and plain Parquet files."""

import gzip
import json
import os

import numpy as np
import pytest

from vp_data import cli
from vptest import all_files_digest, expected_stream, read_tokens


@pytest.fixture(scope="module")
def owt(tmp_path_factory, vp_cache):
    """Real web text (the C4 and Dolma samples; no OpenWebText sample exists in shared data)
    in the layout of the hub's Skylion007/openwebtext: plain_text/train-0000N-of-0000M.parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = []
    for i in (1, 2, 3):
        with gzip.open(os.path.join(vp_cache, "samples", "c4", f"c4-sample.0{i}.json.gz")) as f:
            docs.extend(json.loads(line)["text"] for line in f)
    with gzip.open(os.path.join(vp_cache, "samples", "dolma-cc", "cc_en_head-0091.jsonl.gz")) as f:
        docs.extend(json.loads(line)["text"] for line in f)
    root = tmp_path_factory.mktemp("owt")
    (root / "plain_text").mkdir()
    pq.write_table(pa.table({"text": docs[:22]}), root / "plain_text" / "train-00000-of-00002.parquet")
    pq.write_table(pa.table({"text": docs[22:]}), root / "plain_text" / "train-00001-of-00002.parquet")
    return root, docs


def test_openwebtext_three_inputs_agree(tmp_path, owt, run_script, ref_encode):
    import datasets

    root, docs = owt
    common = ["--val-fraction", "0.15", "--shard-size", "4000", "--workers", "2"]
    a, b, c = tmp_path / "hub", tmp_path / "disk", tmp_path / "pq"
    r = run_script("prepare_openwebtext", "--hf-name", root, "--out-dir", a, *common)
    assert "summary: openwebtext: documents 40," in r.out

    dump = tmp_path / "dump"
    datasets.Dataset.from_dict({"text": docs}).save_to_disk(str(dump))
    run_script("prepare_openwebtext", "--from-disk", dump, "--out-dir", b, *common)
    run_script("prepare_openwebtext", "--parquet", root, "--out-dir", c, *common)
    assert all_files_digest(a) == all_files_digest(b) == all_files_digest(c)

    is_val = [cli.hash01(t, 2357) < 0.15 for t in docs]
    assert 0 < sum(is_val) < len(docs)
    assert np.array_equal(read_tokens(a, "openwebtext", "val"),
                          expected_stream(ref_encode, "gpt2", [t for t, v in zip(docs, is_val) if v]))
    assert np.array_equal(read_tokens(a, "openwebtext", "train"),
                          expected_stream(ref_encode, "gpt2", [t for t, v in zip(docs, is_val) if not v]))
    assert (a / "gpt2.vptok").exists()


def test_openwebtext_resume(tmp_path, owt, run_script):
    root, _ = owt
    common = ["--parquet", root, "--val-fraction", "0.1", "--shard-size", "2500"]
    run_script("prepare_openwebtext", *common, "--out-dir", tmp_path / "full")
    run_script("prepare_openwebtext", *common, "--out-dir", tmp_path / "part", "--stop-after-shards", "3", expect=3)
    r = run_script("prepare_openwebtext", *common, "--out-dir", tmp_path / "part")
    assert "(3 reused)" in r.out
    assert all_files_digest(tmp_path / "full") == all_files_digest(tmp_path / "part")


def test_openwebtext_offline_without_cache(tmp_path, run_script):
    r = run_script("prepare_openwebtext", "--out-dir", tmp_path / "o", expect=1)
    assert "Skylion007/openwebtext" in r.err and "offline" in r.err
    assert "Traceback" not in r.err
