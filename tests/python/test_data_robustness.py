"""Resuming, budgets, shard tails, --overwrite and other edges of the data pipeline that an
audit found: each test here failed before its fix."""

import json
import os

import pytest

from vp_data.readers import Doc
from vp_data.shards import read_header
from vp_data.tokenizer import Tokenizer
from vptest import all_files_digest, shard_files


@pytest.fixture(scope="module")
def lines_txt(tmp_path_factory, vp_cache):
    """The first 3,000 lines of Tiny Shakespeare (about 25k GPT-2 tokens as one document per line)."""
    with open(os.path.join(vp_cache, "tinyshakespeare", "input.txt"), encoding="utf-8") as f:
        text = "".join(f.readlines()[:3000])
    p = tmp_path_factory.mktemp("lines") / "lines.txt"
    p.write_text(text, encoding="utf-8")
    return p


def text_args(inp, *extra):
    return [inp, "--doc-split", "line", "--name", "r", "--workers", "1", *extra]


def resume_at_every_shard(run_script, args, out):
    """Run `args` one new shard at a time until it finishes; return how many runs it took."""
    for runs in range(1, 100):
        r = run_script("prepare_text", *args, "--out-dir", out, "--stop-after-shards", "1", expect=None)
        if r.code == 0:
            return runs
        assert r.code == 3, r
    raise AssertionError("did not finish")


@pytest.mark.parametrize("budget", [[], ["--max-tokens", "12000"]])
def test_hash_split_resumed_at_every_shard_keeps_val(tmp_path, run_script, lines_txt, budget):
    # The source feeds train and val; a run stopped after train's last shard but before val's
    # used to skip the source on resume (its only target, train, was full) and lose val.
    args = text_args(lines_txt, "--val-split", "hash", "--val-fraction", "0.2", "--shard-size", "4000", *budget)
    ref = tmp_path / "ref"
    run_script("prepare_text", *args, "--out-dir", ref)
    want = all_files_digest(ref)
    assert "r_val_000000.bin" in want and "r_train_000002.bin" in want
    if budget:  # 12,000 train tokens: three shards, the overshoot folded into the third
        assert "r_train_000003.bin" not in want
    out = tmp_path / "out"
    runs = resume_at_every_shard(run_script, args, out)
    assert runs >= len([f for f in want if f.endswith(".bin")])
    assert all_files_digest(out) == want
    with open(out / "r.manifest.json") as f:
        assert json.load(f)["complete"] is True


def test_budget_stop_does_not_depend_on_workers(tmp_path, run_script, lines_txt):
    # Val documents after the one that filled the train budget used to be taken or not depending
    # on how far reading had got ahead of the pool when that was noticed.
    args = text_args(lines_txt, "--val-split", "hash", "--val-fraction", "0.3", "--max-tokens", "6000")
    a, b = tmp_path / "a", tmp_path / "b"
    run_script("prepare_text", *args, "--out-dir", a)
    run_script("prepare_text", *args, "--workers", "2", "--out-dir", b)  # the last --workers wins
    assert all_files_digest(a) == all_files_digest(b)
    with open(a / "r.manifest.json") as f:
        m = json.load(f)
    # stopped in the middle of the input, at the document that filled the budget
    stop = m["sources"]["0"]["stop"]
    assert stop is not None and 0 < stop[1] < 2900


def test_budget_that_is_a_multiple_of_the_shard_size_leaves_no_tiny_shard(tmp_path, run_script, lines_txt):
    # The last shard used to hold only the last document's overshoot of the budget (a few tokens),
    # which the trainer refuses (a shard needs T+1 tokens); it now goes into the shard before.
    from vp_data.shards import read_header, read_shard

    args = text_args(lines_txt, "--val-split", "none", "--max-tokens", "8000")
    one, cut = tmp_path / "one", tmp_path / "cut"
    run_script("prepare_text", *args, "--out-dir", one)
    run_script("prepare_text", *args, "--shard-size", "4000", "--out-dir", cut)
    whole = read_shard(str(one / "r_train_000000.bin"))
    assert 8000 < len(whole) < 8000 + 200  # overshoot by part of one line
    assert sorted(f for f in os.listdir(cut) if f.endswith(".bin")) == ["r_train_000000.bin", "r_train_000001.bin"]
    assert read_header(str(cut / "r_train_000000.bin")).num_tokens == 4000
    assert read_header(str(cut / "r_train_000001.bin")).num_tokens == len(whole) - 4000
    joined = list(read_shard(str(cut / "r_train_000000.bin"))) + list(read_shard(str(cut / "r_train_000001.bin")))
    assert joined == list(whole)
    # a tail of half a shard or more stays a shard of its own
    run_script("prepare_text", *args, "--shard-size", "3000", "--out-dir", tmp_path / "keep")
    assert read_header(str(tmp_path / "keep" / "r_train_000002.bin")).num_tokens == len(whole) - 6000


def test_overwrite_leaves_datasets_with_a_longer_name_alone(tmp_path, run_script, lines_txt):
    out = tmp_path / "o"
    args = text_args(lines_txt, "--val-split", "none", "--max-tokens", "500", "--out-dir", out)
    run_script("prepare_text", *args, "--name", "web_c4")
    theirs = all_files_digest(out)
    # `web` has no manifest yet: the other dataset's shards are not taken for stale ones of ours
    run_script("prepare_text", *args, "--name", "web")
    run_script("prepare_text", *args, "--name", "web", "--max-tokens", "400", "--overwrite")
    now = all_files_digest(out)
    assert {k: now.get(k) for k in theirs} == theirs
    assert "web_train_000000.bin" in now
    # shards of ours without a manifest: the refusal names them, and only them
    os.remove(out / "web.manifest.json")
    r = run_script("prepare_text", *args, "--name", "web", expect=1)
    assert "web_train_000000.bin" in r.err and "web_c4" not in r.err and "--overwrite" in r.err


@pytest.mark.parametrize("flag,value,message", [
    ("--max-tokens", "inf", "expected a whole number"),
    ("--val-tokens", "1.5", "expected a whole number"),
    ("--workers", "nan", "expected a whole number"),
    ("--shard-size", "1e10", "at most 2,146,435,071 tokens"),
    ("--shard-size", "2147483647", "at most 2,146,435,071 tokens"),
    # one-token shards: no --seq-len can be trained on them (the trainer needs T+1 tokens in a shard)
    ("--shard-size", "1", "at least 2 tokens"),
    ("--shard-size", "0", "at least 2 tokens"),
    ("--val-tokens", "1", "at least 2 tokens, or 0 for no val"),
])
def test_bad_numbers_are_usage_errors(tmp_path, flag, value, message, capsys):
    # inf used to raise OverflowError (a traceback), and a --shard-size too big for the header was
    # only refused when the first shard was full, after all the tokenizing up to it.
    from conftest import load_script

    with pytest.raises(SystemExit) as e:
        load_script("prepare_text").main(["in.txt", "--out-dir", str(tmp_path), flag, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: {message}" in err and "Traceback" not in err


def test_number_forms():
    from vp_data import cli

    assert cli.positive_int("1e8") == 100_000_000 and cli.positive_int("2.5e9") == 2_500_000_000
    assert cli.integer("-7") == -7 and cli.integer("1e3") == 1000  # --seed
    assert cli.nonneg_int("12345678901234567891") == 12345678901234567891  # no float rounding
    assert cli.shard_size_arg("2146435071") == 2146435071
    assert cli.shard_size_arg("2") == 2  # the least: one sequence of --seq-len 1 and its target
    assert cli.head_tokens_arg("0") == 0 and cli.head_tokens_arg("2") == 2


@pytest.mark.parametrize("script,args", [
    ("prepare_text", ["in.txt"]),
    ("prepare_tinyshakespeare", []),
    ("prepare_openwebtext", ["--parquet", "in.parquet"]),
    ("prepare_slimpajama", []),
    ("prepare_pile", []),
    ("prepare_fineweb", []),
])
def test_a_one_token_shard_size_is_refused_by_every_script(tmp_path, capsys, monkeypatch, script, args):
    # --shard-size 1 wrote one-token shards, which the trainer refuses at every --seq-len (it reads T+1
    # tokens of a shard); `shards validate --seq-len` said so only after the whole run.
    from conftest import load_script
    from vp_data import pipeline

    # a script that got past its flags would tokenize its whole input into one-token shards: fail fast
    monkeypatch.setattr(pipeline.Job, "run", lambda *a, **k: pytest.fail("the run started"))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        load_script(script).main([*args, "--out-dir", str(out), "--shard-size", "1"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --shard-size: at least 2 tokens" in err and "T+1" in err and "Traceback" not in err
    assert not out.exists()


def test_the_pipeline_refuses_a_one_token_shard_size_too():
    # for a caller that makes a Job without the flags' checks
    from vp_data import DataError, tokenizer
    from vp_data.pipeline import Job, StreamSpec

    with pytest.raises(DataError, match="--shard-size must be at least 2"):
        Job(out_dir="unused", prefix="x", tokenizer=tokenizer.resolve("gpt2", None), config={},
            stream_factory=lambda n: StreamSpec(n, "train"), shard_size=1)


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b"\xff\xfe", b"[" * 100000 + b"]" * 100000,
                                     b'{"format": "valuepath-shards-manifest", '
                                     b'"fingerprint": "x", "streams": {"main": {"shards": [{"tokens": 1}]}}}'])
def test_damaged_manifest_is_an_error_that_overwrite_gets_past(tmp_path, run_script, lines_txt, content):
    out = tmp_path / "o"
    args = text_args(lines_txt, "--val-split", "none", "--max-tokens", "500", "--out-dir", out)
    run_script("prepare_text", *args)
    want = all_files_digest(out)
    (out / "r.manifest.json").write_bytes(content)
    r = run_script("prepare_text", *args, expect=1)
    assert "r.manifest.json" in r.err and "--overwrite" in r.err and "Traceback" not in r.err
    assert all_files_digest(out) == want  # refusing touches nothing
    run_script("prepare_text", *args, "--overwrite")
    assert all_files_digest(out) == want
    with open(out / "r.manifest.json") as f:
        assert json.load(f)["complete"] is True


def test_damaged_manifest_with_our_fingerprint(tmp_path, run_script, lines_txt):
    # right format and fingerprint, wrong structure (a hand edit): --overwrite starts over
    out = tmp_path / "o"
    args = text_args(lines_txt, "--val-split", "none", "--max-tokens", "500", "--out-dir", out)
    run_script("prepare_text", *args)
    want = all_files_digest(out)
    with open(out / "r.manifest.json") as f:
        m = json.load(f)
    m["streams"]["main"]["shards"] = [{"tokens": 1}]
    (out / "r.manifest.json").write_text(json.dumps(m))
    r = run_script("prepare_text", *args, expect=1)
    assert "damaged (streams.main.shards[0]: no 'file')" in r.err and "--overwrite" in r.err
    run_script("prepare_text", *args, "--overwrite")
    assert all_files_digest(out) == want


def test_validate_refuses_an_unfinished_or_partial_set(tmp_path, run_script, lines_txt, capsys):
    from vp_data import shards

    out = tmp_path / "o"
    args = text_args(lines_txt, "--val-tokens", "3000", "--shard-size", "4000", "--max-tokens", "12000",
                     "--out-dir", out)
    run_script("prepare_text", *args, "--stop-after-shards", "2", expect=3)
    capsys.readouterr()
    assert shards.main(["validate", str(out / "*.bin")]) == 1
    err = capsys.readouterr().err
    assert "did not finish" in err and "re-run the same prepare command" in err

    run_script("prepare_text", *args)
    capsys.readouterr()
    assert shards.main(["validate", str(out / "*.bin")]) == 0
    assert "3 shard(s)" in capsys.readouterr().out
    assert shards.main(["validate", str(out / "r_train_*.bin")]) == 0  # one whole split
    capsys.readouterr()
    os.remove(out / "r_train_000001.bin")
    assert shards.main(["validate", str(out / "r_train_*.bin")]) == 1
    err = capsys.readouterr().err
    assert "r_train_000001.bin: listed in" in err and "(it is missing)" in err


def test_no_tokens_is_an_error_and_an_empty_val_a_warning(tmp_path, run_script, lines_txt):
    (tmp_path / "empty.txt").write_text("")
    r = run_script("prepare_text", tmp_path / "empty.txt", "--name", "e", "--out-dir", tmp_path / "e", expect=1)
    assert "no tokens to write: 1 document(s) read" in r.err and "1 empty" in r.err
    assert "went to val" not in r.err  # the old, wrong advice
    # every record bad and skipped: still nothing to train on
    (tmp_path / "bad.jsonl").write_text('{"txt": "a"}\n{"txt": "b"}\n')
    r = run_script("prepare_text", tmp_path / "bad.jsonl", "--skip-bad-records", "--name", "b",
                   "--out-dir", tmp_path / "b", expect=1)
    assert "no tokens to write" in r.err and "2 bad record(s) skipped" in r.err
    # a hash split that drew no document: a warning, the train shards are fine
    r = run_script("prepare_text", *text_args(lines_txt, "--val-split", "hash", "--val-fraction", "0.00001",
                                              "--max-tokens", "300", "--out-dir", tmp_path / "h"))
    assert "warning: no document went to val" in r.err and "--val-fraction" in r.err
    assert os.listdir(tmp_path / "h").count("r_train_000000.bin") == 1


def test_fineweb_reads_records_without_a_dump_field(tmp_path, run_script, lines_txt):
    # Any directory of Parquet/JSON lines works: the domain is needed only for per-domain val sets,
    # a --mix or --domains. It used to be required unless --default-domain was given.
    import pyarrow as pa
    import pyarrow.parquet as pq

    paras = lines_txt.read_text(encoding="utf-8").split("\n\n")[:60]
    d = tmp_path / "in"
    d.mkdir()
    pq.write_table(pa.table({"text": paras}), d / "000_00000.parquet")
    base = ["prepare_fineweb", "--input-dir", d, "--val-fraction", "0.2", "--workers", "1"]
    r = run_script(*base, "--out-dir", tmp_path / "a")
    assert "fineweb_val_000000.bin" in os.listdir(tmp_path / "a") and "train: 1 shard(s)" in r.out
    r = run_script(*base, "--out-dir", tmp_path / "b", "--val-by-domain", "1", expect=1)
    assert "row 0: record has no field 'dump'" in r.err and "--default-domain" in r.err
    run_script(*base, "--out-dir", tmp_path / "c", "--val-by-domain", "1", "--default-domain", "CC-MAIN-2024-10")
    assert "fineweb_val_ccmain202410_000000.bin" in os.listdir(tmp_path / "c")


def test_budget_met_does_not_wait_for_the_next_download():
    # Closing the file iterator (the budget is met) used to wait for the prefetched next file in
    # ThreadPoolExecutor's exit, and so would the interpreter at exit: a 2 GB download for nothing.
    import subprocess
    import sys
    import time

    from vptest import SCRIPTS

    code = ("import time\n"
            "from vp_data.domains import prefetched\n"
            "def locate(rel):\n"
            "    if rel == 'b':\n"
            "        time.sleep(30)\n"
            "    return '/data/' + rel\n"
            "g = prefetched(['a', 'b', 'c'], locate)\n"
            "assert next(g) == '/data/a'\n"
            "t = time.time(); g.close(); print(round(time.time() - t, 3))\n")
    t0 = time.time()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=25,
                       env={**os.environ, "PYTHONPATH": SCRIPTS})
    assert r.returncode == 0, r.stderr
    assert float(r.stdout) < 0.5 and time.time() - t0 < 10


def test_prefetch_order_and_errors():
    from vp_data import DataError
    from vp_data.domains import prefetched

    assert list(prefetched(["x", "y"], lambda rel: rel.upper())) == ["X", "Y"]

    def locate(rel):
        if rel == "y":
            raise DataError("y is not cached and we are offline")
        return rel

    g = prefetched(["x", "y"], locate)
    assert next(g) == "x"
    with pytest.raises(DataError, match="not cached"):
        next(g)


def test_ctrl_c_before_the_main_loop(tmp_path, monkeypatch, capsys, lines_txt):
    # A KeyboardInterrupt while loading the tokenizer or the dataset used to end in a traceback.
    from conftest import load_script
    from vp_data import cli, pipeline

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "build", interrupt)
    text = load_script("prepare_text")
    assert cli.run(text.main, [str(lines_txt), "--out-dir", str(tmp_path / "t"), "--no-progress"]) == 130
    owt = load_script("prepare_openwebtext")
    monkeypatch.setattr(owt, "load_hf", interrupt)
    assert cli.run(owt.main, ["--out-dir", str(tmp_path / "o"), "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert err.count("interrupted; finished shards are kept; re-run the same command to resume") == 2


@pytest.mark.parametrize("name", ["gpt2", "neox", "llama2"])
def test_lone_surrogates_become_replacement_characters(name, tmp_path, run_script, ref_encode):
    # "\ud800" is valid JSON but not valid Unicode text: NeoX and Llama-2 used to crash with a
    # traceback; GPT-2 (tiktoken) replaced it with U+FFFD. Every tokenizer now does what GPT-2 does.
    from vptest import expected_stream, read_tokens

    (tmp_path / "s.jsonl").write_text('{"text": "hello \\ud800 world"}\n{"text": "pair \\ud83d\\ude00 \\udfff"}\n')
    out = tmp_path / "o"
    run_script("prepare_text", tmp_path / "s.jsonl", "--name", "s", "--out-dir", out, "--val-split", "none",
               "--tokenizer", name, "--workers", "1")
    want = expected_stream(ref_encode, name, ["hello \ufffd world", "pair \U0001F600 \ufffd"])
    assert list(read_tokens(out, "s", "train")) == list(want)


def test_inspect_with_a_missing_or_wrong_vptok(tmp_path, capsys):
    # a missing --vptok used to be a FileNotFoundError traceback, a token past its vocabulary an IndexError
    import numpy as np

    from vp_data import shards
    from vp_data.tokenizer import VPTOK_HEADER_INTS, VPTOK_MAGIC

    shard = tmp_path / "s.bin"
    shards.write_shard(str(shard), np.array([1, 2, 40000]), 1)
    assert shards.main(["inspect", str(shard), "--vptok", str(tmp_path / "none.vptok")]) == 1
    assert "cannot read vptok file" in capsys.readouterr().err
    small = tmp_path / "small.vptok"  # a version-1 vptok of 3 one-byte tokens
    header = np.zeros(VPTOK_HEADER_INTS, dtype="<i4")
    header[:4] = [VPTOK_MAGIC, 1, 3, 0]
    small.write_bytes(header.tobytes() + b"".join(b"\x01\x00\x00\x00" + c for c in (b"a", b"b", b"c")))
    assert shards.main(["inspect", str(shard), "--vptok", str(small), "-n", "2"]) == 0
    assert "decoded: 'bc'" in capsys.readouterr().out
    assert shards.main(["inspect", str(shard), "--vptok", str(small)]) == 1
    assert "token id 40000 is not in" in capsys.readouterr().err


def test_tokenizer_export_to_a_missing_directory(tmp_path, capsys):
    from vp_data import tokenizer

    assert tokenizer.main(["export", "--out", str(tmp_path / "no" / "x.vptok")]) == 1
    err = capsys.readouterr().err
    assert "No such file or directory" in err and str(tmp_path / "no") in err


def test_a_glob_of_directories_is_searched(tmp_path, run_script):
    # a glob that matched only directories used to leave no files (IndexError traceback)
    from vp_data import DataError
    from vp_data.readers import expand_inputs

    for sub, name in (("a", "x.txt"), ("b/deep", "y.jsonl"), ("b", "notes.bin")):
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
        (tmp_path / sub / name).write_text('{"text": "y"}\n' if name.endswith("jsonl") else "x\n")
    (tmp_path / "c").mkdir()
    want = [str(tmp_path / "a" / "x.txt"), str(tmp_path / "b" / "deep" / "y.jsonl")]
    assert expand_inputs([str(tmp_path / "*")]) == want
    # each file once (a file a glob names is taken whatever its suffix)
    assert expand_inputs([str(tmp_path / "**")]) == want + [str(tmp_path / "b" / "notes.bin")]
    with pytest.raises(DataError, match="no input files"):
        expand_inputs([str(tmp_path / "c*")])
    r = run_script("prepare_text", tmp_path / "c*", "--out-dir", tmp_path / "o", expect=1)
    assert "no input files" in r.err
    r = run_script("prepare_text", tmp_path / "[ab]", "--name", "g", "--val-split", "none",
                   "--out-dir", tmp_path / "o")
    assert "documents 2," in r.out


def test_a_wrong_neox_tokenizer_in_the_cache_is_refused(tmp_path, monkeypatch, vp_cache):
    # The cached NeoX file has no pinned hash; a different tokenizer.json was used without a word.
    import shutil

    from vp_data import DataError, tokenizer

    d = tmp_path / "c" / "tokenizers" / "gpt-neox-20b"
    d.mkdir(parents=True)
    real = os.path.join(vp_cache, "tokenizers", "gpt-neox-20b", "tokenizer.json")
    with open(real, encoding="utf-8") as f:
        doc = json.load(f)
    doc["added_tokens"].append(dict(doc["added_tokens"][-1], id=50277, content="<|extra|>"))
    (d / "tokenizer.json").write_text(json.dumps(doc))
    monkeypatch.setenv("VALUEPATH_CACHE", str(tmp_path / "c"))
    with pytest.raises(DataError, match=r"vocabulary of 50,278 with delimiter id 0, but the neox tokenizer has "
                                        r"50,277 with delimiter id 0: the wrong file"):
        tokenizer.build(tokenizer.resolve("neox"))
    shutil.copy(real, d / "tokenizer.json")
    assert tokenizer.build(tokenizer.resolve("neox")).vocab_size == 50277


@pytest.mark.parametrize("flags,message", [
    (["--mix", "arxiv=1"], "--mix needs --budget"),
    (["--budget", "100", "--mix", "arxiv=1,c4=-0.5"], "weights must be finite and >= 0 (got c4=-0.5)"),
    (["--budget", "100", "--mix", "arxiv=inf"], "weights must be finite and >= 0 (got arxiv=inf)"),
])
def test_mix_mistakes_are_usage_errors(tmp_path, capsys, flags, message):
    # --mix without --budget used to be ignored, and a negative weight dropped (the rest renormalised)
    from conftest import load_script

    with pytest.raises(SystemExit) as e:
        load_script("prepare_slimpajama").main(["--input-dir", str(tmp_path), "--out-dir", str(tmp_path / "o"),
                                                *flags])
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_fill_cache_help_is_the_comment_block():
    # it printed a fixed range of lines, which had grown to include `set -euo pipefail`
    import subprocess

    from vptest import SCRIPTS

    r = subprocess.run(["bash", os.path.join(SCRIPTS, "fill_cache_from_shared.sh"), "--help"], capture_output=True,
                       text=True, check=True)
    lines = r.stdout.splitlines()
    assert lines[0].startswith("Fill a valuepath download cache")
    assert lines[-1].startswith("in the shared MANIFEST's SHA256SUMS") and "set -e" not in r.stdout


@pytest.mark.parametrize("extra", [0, -1])
def test_a_tail_of_half_a_shard_is_kept_and_a_shorter_one_folded(tmp_path, run_script, ref_encode, extra):
    """pipeline.fold_limit: a split's last shard with fewer tokens than half of --shard-size (for
    small sizes) goes into the one before. At --shard-size 20 a tail of exactly 10 tokens is a shard
    of its own; one of 9 is folded (one shard of 29). The counts come from tiktoken's encoding."""
    text = "a" + " a" * (28 + extra)
    (tmp_path / "doc.txt").write_text(text)
    total = len(ref_encode("gpt2", text))
    assert total == 30 + extra
    out = tmp_path / "out"
    run_script("prepare_text", tmp_path / "doc.txt", "--name", "f", "--out-dir", out, "--val-split", "none",
               "--shard-size", "20", "--workers", "1")
    sizes = [read_header(f).num_tokens for f in shard_files(out, "f", "train")]
    assert sizes == ([20, 10] if extra == 0 else [29])


@pytest.mark.parametrize("size,sizes", [(2, [2, 2, 3]), (3, [3, 4]), (4, [4, 3])])
def test_no_shard_of_one_token_at_the_smallest_shard_sizes(tmp_path, run_script, ref_encode, size, sizes):
    """Half of --shard-size 2 or 3 is 1 token, so a one-token tail was a shard of its own, which no
    --seq-len can read (the trainer needs T+1 tokens): it is folded into the shard before it too. At 4
    half a shard is 2 and nothing changes (a tail of 3 is kept)."""
    text = "a" + " a" * 5
    (tmp_path / "doc.txt").write_text(text)
    assert len(ref_encode("gpt2", text)) == 7
    out = tmp_path / "out"
    run_script("prepare_text", tmp_path / "doc.txt", "--name", "f", "--out-dir", out, "--val-split", "none",
               "--shard-size", size, "--workers", "1")
    assert [read_header(f).num_tokens for f in shard_files(out, "f", "train")] == sizes


def test_a_one_token_train_shard_after_a_val_head_is_warned_of(tmp_path, run_script, ref_encode):
    """The first train shard after a val head has no train shard to be folded into: an input that
    leaves one token for train writes a one-token shard, which the trainer would refuse at its start.
    The run says so when it writes it."""
    text = "a" + " a" * 5
    (tmp_path / "doc.txt").write_text(text)
    assert len(ref_encode("gpt2", text)) == 7
    out = tmp_path / "out"
    r = run_script("prepare_text", tmp_path / "doc.txt", "--name", "f", "--out-dir", out, "--val-tokens", "6",
                   "--workers", "1")
    assert [read_header(f).num_tokens for f in shard_files(out, "f", "train")] == [1]
    assert "warning: f_train_000001.bin holds 1 token(s)" in r.err and "a smaller --val-tokens" in r.err
    r = run_script("prepare_text", tmp_path / "doc.txt", "--name", "g", "--out-dir", out, "--val-tokens", "5",
                   "--workers", "1")
    assert "warning" not in r.err  # two train tokens: one sequence of --seq-len 1 and its target


def test_a_domain_budget_met_exactly_takes_no_more_documents():
    """The budget rule (vptest.first_by_quota): a key takes documents while its count is below its
    quota. With per-domain quotas (a --mix) the source does not stop when one domain is full, so a
    domain that lands exactly on its quota must refuse the next document itself."""
    from types import SimpleNamespace

    from vp_data.pipeline import Stream, StreamSpec

    s = Stream(StreamSpec("train", "train", quota={"a": 5, "b": 5}), SimpleNamespace(shard_size=100))
    assert s.accept("a", 5) and s.key_full("a") and not s.accept("a", 1)
    assert s.accept("b", 3) and not s.key_full("b") and not s.full()
    assert s.accept("b", 4) and s.full()  # the overshoot of one document per key
    assert not s.accept("c", 1)  # a key without a quota takes nothing
    assert s.counts == {"a": 5, "b": 7}


# ---------------------------------------------------------------- a second audit

@pytest.fixture(scope="module")
def numbered_jsonl(tmp_path_factory):
    """3,000 distinct documents of 20 to 69 words ("Document 17: word0 word1 ..."), as JSON lines."""
    d = tmp_path_factory.mktemp("numbered")
    lines = [json.dumps({"text": f"Document {i}: " + " ".join(f"word{j}" for j in range(20 + i * 7 % 50))})
             for i in range(3000)]
    p = d / "corp.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p, lines


def test_a_killed_tokenizer_worker_stops_the_run_and_it_resumes(tmp_path, numbered_jsonl):
    # multiprocessing.Pool replaces a worker that dies (OOM killer, kill -9) but loses its batch,
    # whose result never came: the run waited forever. Here a pool child SIGKILLs itself when it is
    # handed the batch holding document 1500, once the run has recorded five finished shards: the
    # pool hands batches out ahead of the writer, so under load the batch can reach a worker before
    # any shard is written, and the test would then find no manifest to check the resume against.
    import signal
    import subprocess
    import sys

    from vptest import SCRIPTS

    src, _ = numbered_jsonl
    argv = [str(src), "--name", "k", "--val-split", "none", "--shard-size", "2000", "--no-progress"]
    out = tmp_path / "out"
    code = ("import json, os, runpy, signal, sys, time\n"
            f"sys.path.insert(0, {SCRIPTS!r})\n"
            "from vp_data import pipeline\n"
            "real = pipeline._encode_batch\n"
            "def five_shards_recorded():\n"
            "    try:\n"
            f"        with open({str(out / 'k.manifest.json')!r}) as f:\n"
            "            return len(json.load(f)['streams']['main']['shards']) >= 5\n"
            "    except (OSError, ValueError, KeyError, TypeError):\n"
            "        return False\n"
            "def _encode_batch(texts):\n"
            "    if any(t.startswith('Document 1500:') for t in texts):\n"
            "        # the other worker finishes the batches before this one, so the writer gets there\n"
            "        deadline = time.monotonic() + 40\n"
            "        while not five_shards_recorded() and time.monotonic() < deadline:\n"
            "            time.sleep(0.05)\n"
            "        os.kill(os.getpid(), signal.SIGKILL)\n"
            "    return real(texts)\n"
            "_encode_batch.__module__, _encode_batch.__qualname__ = 'vp_data.pipeline', '_encode_batch'\n"
            "pipeline._encode_batch = _encode_batch  # the forked workers run this one\n"
            "sys.argv = ['prepare_text.py'] + sys.argv[1:]\n"
            "runpy.run_path(os.path.join(sys.path[0], 'prepare_text.py'), run_name='__main__')\n")
    p = subprocess.Popen([sys.executable, "-c", code, *argv, "--workers", "2", "--out-dir", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the run and its pool: its own session
        p.communicate()
        pytest.fail("the run hung after a tokenizer worker was killed")
    assert p.returncode == 1, err
    assert "a tokenizer worker died (killed by SIGKILL: out of memory?)" in err
    assert "re-run the same command to resume" in err and "Traceback" not in err
    with open(out / "k.manifest.json") as f:
        m = json.load(f)
    kept = [e["file"] for e in m["streams"]["main"]["shards"]]
    assert m["complete"] is False and len(kept) >= 5  # documents 0-1279 at least were in finished shards
    assert sorted(f for f in os.listdir(out) if f.endswith(".bin")) == kept

    from conftest import load_script
    from vp_data import cli

    ref = tmp_path / "ref"
    assert cli.run(load_script("prepare_text").main, argv + ["--workers", "1", "--out-dir", str(ref)]) == 0
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli.run(load_script("prepare_text").main, argv + ["--workers", "2", "--out-dir", str(out)]) == 0
    assert f"({len(kept)} reused)" in buf.getvalue()
    assert all_files_digest(out) == all_files_digest(ref)


def stopped_after_two_shards(run_script, src, out):
    args = [src, "--name", "c", "--val-split", "none", "--shard-size", "4000", "--workers", "1", "--out-dir", out]
    run_script("prepare_text", *args, "--stop-after-shards", "2", expect=3)
    return args


def corpus_stopped_after_two_shards(tmp_path, run_script, numbered_jsonl):
    """400 numbered documents in corp.jsonl, a run stopped after two shards: (src, out, args, lines)."""
    _, lines = numbered_jsonl
    src = tmp_path / "corp.jsonl"
    src.write_text("\n".join(lines[:400]) + "\n")
    out = tmp_path / "out"
    return src, out, stopped_after_two_shards(run_script, src, out), lines


def test_an_input_replaced_by_other_content_of_the_same_size_is_not_resumed(tmp_path, run_script, numbered_jsonl):
    # The fingerprint holds the inputs' names and sizes only: a reshuffled export of the same size used
    # to resume, its shards mixing the two orders (documents written twice, others never).
    import random

    src, out, args, lines = corpus_stopped_after_two_shards(tmp_path, run_script, numbered_jsonl)
    before = all_files_digest(out)
    with open(out / "c.manifest.json") as f:
        first = json.load(f)["streams"]["main"]["shards"][0]
    assert first["resume"][:2] == [0, first["docs"] - 1] and len(first["resume_doc"]) == 32

    shuffled = lines[:400]
    random.Random(1).shuffle(shuffled)
    original = src.read_bytes()
    src.write_text("\n".join(shuffled) + "\n")
    assert len(src.read_bytes()) == len(original)
    r = run_script("prepare_text", *args, expect=1)
    assert "cannot resume 'c': the inputs changed since the earlier run" in r.err
    assert "where stream main resumes, is not the one it was" in r.err and "--overwrite" in r.err
    assert all_files_digest(out) == before  # refusing touches nothing

    # the same size, but fewer documents: the input ends before the resume point
    write_same_size(src, "\n".join(lines[:50]) + "\n", len(original))
    r = run_script("prepare_text", *args, expect=1)
    assert "input 'c' ends before document" in r.err and "the inputs changed" in r.err

    src.write_bytes(original)  # the earlier inputs resume
    run_script("prepare_text", *args)
    ref = tmp_path / "ref"
    run_script("prepare_text", *args[:-1], ref)
    assert all_files_digest(out) == all_files_digest(ref)

    # --overwrite, as the message says, starts again on the new inputs (their names and sizes match
    # the manifest's, so it used to resume them)
    out2 = tmp_path / "out2"
    args2 = stopped_after_two_shards(run_script, src, out2)
    src.write_text("\n".join(shuffled) + "\n")
    r = run_script("prepare_text", *args2, "--overwrite")
    assert "the inputs changed since the earlier run; --overwrite: starting again" in r.err
    assert "reused" not in r.out
    run_script("prepare_text", *args2[:-1], tmp_path / "ref2")
    assert all_files_digest(out2) == all_files_digest(tmp_path / "ref2") != all_files_digest(ref)


def test_a_manifest_without_the_resume_digest_still_resumes(tmp_path, run_script, numbered_jsonl):
    # manifests written before the digest existed resume as they did (unchecked)
    src, out, args, _ = corpus_stopped_after_two_shards(tmp_path, run_script, numbered_jsonl)
    path = out / "c.manifest.json"
    m = json.loads(path.read_text())
    for e in m["streams"]["main"]["shards"]:
        del e["resume_doc"]
    path.write_text(json.dumps(m))
    r = run_script("prepare_text", *args)
    assert "(2 reused)" in r.out
    run_script("prepare_text", *args[:-1], tmp_path / "ref")
    assert all_files_digest(out) == all_files_digest(tmp_path / "ref")


def hash_split_stopped(run_script, src, out, workers, shards, *flags):
    """Two streams of one input, train and val (a hash split), stopped after `shards` shards; the
    arguments of the run (more `flags` given), --out-dir OUT last."""
    args = [src, "--name", "c", "--val-split", "hash", "--val-fraction", "0.3", "--shard-size", "1500",
            "--workers", workers, *flags, "--out-dir", out]
    run_script("prepare_text", *args, "--stop-after-shards", shards, expect=3)
    return args


def hash_split_corpus_stopped(tmp_path, run_script, lines, workers, shards, *flags):
    """hash_split_stopped on the first 600 numbered documents in tmp_path/corp.jsonl, into
    tmp_path/out: (src, out, args)."""
    src = tmp_path / "corp.jsonl"
    src.write_text("\n".join(lines[:600]) + "\n")
    out = tmp_path / "out"
    return src, out, hash_split_stopped(run_script, src, out, workers, shards, *flags)


def write_same_size(src, text, size):
    """text in src, padded with spaces to `size` bytes: an input whose name and size (the
    manifest's fingerprint) are those of the earlier run's."""
    data = text.encode()
    assert len(data) <= size
    src.write_bytes(data + b" " * (size - len(data)))


def damage(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


def routed_to(line):
    """The stream prepare_text's hash split (the arguments of hash_split_stopped) sends a record to."""
    from vp_data import cli

    return "val" if cli.hash01(json.loads(line)["text"], 2357) < 0.3 else "train"


@pytest.mark.parametrize("workers", [1, 2])
def test_a_changed_input_is_refused_before_any_stream_writes_from_it(tmp_path, run_script, numbered_jsonl,
                                                                     workers):
    # Train and val of one input resume at different documents. The input is replaced (same size) by
    # one that keeps the documents up to the first resume point and has only documents of that stream
    # after it. That stream's resume document matched, so it went on writing shards from the new
    # documents; the other stream's resume point, further on, found the change only after that, and
    # the shards already written held a mix: restoring the old input could no longer repair the run.
    _, lines = numbered_jsonl
    src, out, args = hash_split_corpus_stopped(tmp_path, run_script, lines, workers, 3)
    manifest = (out / "c.manifest.json").read_bytes()
    resume = {n: st["shards"][-1]["resume"][1] for n, st in json.loads(manifest)["streams"].items() if st["shards"]}
    assert set(resume) == {"train", "val"} and resume["train"] != resume["val"], resume
    first = min(resume, key=resume.get)
    before = all_files_digest(out)

    original = src.read_bytes()
    new = "\n".join(lines[:resume[first] + 1]) + "\n"
    for line in lines[600:]:
        if routed_to(line) == first and len(new) + len(line) + 1 <= len(original):
            new += line + "\n"
    assert len(original) - len(new) < 200  # hundreds of documents for `first`: many shards of it
    write_same_size(src, new, len(original))
    r = run_script("prepare_text", *args, expect=1)
    assert "cannot resume 'c': the inputs changed since the earlier run" in r.err
    assert all_files_digest(out) == before and (out / "c.manifest.json").read_bytes() == manifest
    assert "--overwrite" in r.err and "restore the inputs" in r.err  # both remedies work now

    src.write_bytes(original)  # the remedy the message offers first
    run_script("prepare_text", *args)
    run_script("prepare_text", *args[:-1], tmp_path / "ref")
    assert all_files_digest(out) == all_files_digest(tmp_path / "ref")


def count_openings(monkeypatch):
    """How often prepare_text opens a JSON-lines input (load_script imports read_jsonl afresh)."""
    from vp_data import readers

    opened = []
    real = readers.read_jsonl

    def counted(path, *a, **k):
        opened.append(os.path.basename(path))
        return real(path, *a, **k)

    monkeypatch.setattr(readers, "read_jsonl", counted)
    return opened


def test_a_resume_of_unchanged_inputs_reads_them_once(tmp_path, run_script, numbered_jsonl, monkeypatch):
    # Checking every resume point before writing must not cost a second reading of the inputs on an
    # ordinary resume: up to the last resume point, each stream takes less than a shard (it wrote
    # none after its own), so the first write comes after every resume point has been passed.
    _, lines = numbered_jsonl
    src, out, args = hash_split_corpus_stopped(tmp_path, run_script, lines, 1, 1)
    opened = count_openings(monkeypatch)
    for runs in range(1, 100):
        opened.clear()
        r = run_script("prepare_text", *args, "--stop-after-shards", "1", expect=None)
        # (none in the run that only writes the last shard: the source was read to its end before)
        assert opened in ([], ["corp.jsonl"]), (runs, opened)
        if r.code == 0:
            break
        assert r.code == 3, r
    run_script("prepare_text", *args[:-1], tmp_path / "ref")
    assert all_files_digest(out) == all_files_digest(tmp_path / "ref")


def test_a_budget_met_before_a_later_resume_point_says_what_was_written(tmp_path, run_script, numbered_jsonl):
    # Train resumes at document a, val at b > a. The input (same size) has longer train documents
    # between a and b, so --max-tokens is met before b: no resume document changed, so the check
    # before the first write passes and train writes a shard from the new documents; the change is
    # seen only when the stop keeps b from being reached. The message must say that this run wrote
    # shards (restoring the old input would no longer resume), and --overwrite must then work.
    _, lines = numbered_jsonl
    lines = lines[:600]
    src, out, args = hash_split_corpus_stopped(tmp_path, run_script, lines, 1, 3, "--max-tokens", "4500")
    m = json.loads((out / "c.manifest.json").read_text())
    a, b = m["streams"]["train"]["shards"][-1]["resume"][1], m["streams"]["val"]["shards"][-1]["resume"][1]
    assert a < b, (a, b)
    original = src.read_text()
    new = []
    for i, line in enumerate(lines):
        if a < i < b and routed_to(line) == "train":
            k = 0  # a longer document that the hash split still sends to train
            while routed_to(cand := json.dumps({"text": json.loads(line)["text"] + " extra" * 300 + f" v{k}"})) != "train":
                k += 1
            line = cand
        new.append(line)
    text = "\n".join(new) + "\n"
    while len(text) > len(original):
        new.pop()
        text = "\n".join(new) + "\n"
    write_same_size(src, text, len(original))
    r = run_script("prepare_text", *args, expect=1)
    assert f"the token budget was met at document" in r.err and f"before document {b:,}, where stream val resumes" in r.err
    assert "this run wrote 1 shard(s) from them" in r.err and "restore the inputs" not in r.err, r.err
    r = run_script("prepare_text", *args, "--overwrite")
    assert "starting again" in r.err


def test_a_redone_shard_before_another_streams_resume_point_checks_it_first(tmp_path, run_script, numbered_jsonl,
                                                                             monkeypatch):
    # A damaged shard is redone from the one before it, so its stream writes shards before the other
    # stream's (later) resume point is reached: that point is checked first, by reading ahead to it.
    import random

    _, lines = numbered_jsonl
    src, out, args = hash_split_corpus_stopped(tmp_path, run_script, lines, 1, 7)
    m = json.loads((out / "c.manifest.json").read_text())
    train, val = m["streams"]["train"]["shards"], m["streams"]["val"]["shards"]
    assert len(train) >= 3 and train[0]["resume"] < val[-1]["resume"], m["streams"]
    damage(out / train[1]["file"])
    opened = count_openings(monkeypatch)
    r = run_script("prepare_text", *args)
    # kept: train's first shard and all of val's
    assert "does not match the sha256" in r.err and f"({len(val) + 1} reused)" in r.out
    assert opened == ["corp.jsonl", "corp.jsonl"]  # the run, and the look ahead to val's resume point
    run_script("prepare_text", *args[:-1], tmp_path / "ref")
    assert all_files_digest(out) == all_files_digest(tmp_path / "ref")

    # the same, with the input changed after train's resume point: refused with nothing written
    args2 = hash_split_stopped(run_script, src, tmp_path / "out2", 1, 7)
    damage(tmp_path / "out2" / train[1]["file"])
    before = all_files_digest(tmp_path / "out2")
    cut = train[0]["resume"][1] + 1
    rest = lines[cut:600]
    random.Random(1).shuffle(rest)  # the same size, train's resume document kept
    src.write_text("\n".join(lines[:cut] + rest) + "\n")
    r = run_script("prepare_text", *args2, expect=1)
    assert "where stream val resumes, is not the one it was" in r.err
    assert all_files_digest(tmp_path / "out2") == before


@pytest.mark.parametrize("edit,where", [
    (lambda m: m["streams"]["main"]["shards"][0].update(split=None), "streams.main.shards[0].split: None"),
    (lambda m: m["streams"]["main"]["shards"][1].update(docs=[3]), "streams.main.shards[1].docs: [3]"),
    (lambda m: m["streams"]["main"]["shards"][1].update(counts={"*": "x"}), "streams.main.shards[1].counts"),
    (lambda m: m["streams"]["main"]["shards"][1].update(tokens=True), "streams.main.shards[1].tokens: True"),
    (lambda m: m["streams"]["main"]["shards"][1].update(resume=[0, "7", 3]), "streams.main.shards[1].resume"),
    (lambda m: m["streams"]["main"]["shards"][1].update(resume_doc=7), "streams.main.shards[1].resume_doc"),
    (lambda m: m["streams"]["main"].update(shards={}), "streams.main.shards: {}"),
    (lambda m: m["streams"].update({"../x": m["streams"]["main"]}), "streams.../x: not a stream name"),
    (lambda m: m["sources"]["0"].update(stop="x"), "sources.0.stop: 'x'"),
    (lambda m: m["sources"]["0"].update(stop=[0]), "sources.0.stop: [0]"),
    (lambda m: m["sources"]["0"].update(fed=3), "sources.0.fed: 3"),
    (lambda m: m["sources"]["0"].update(fed=[None]), "sources.0.fed: [None]"),
    (lambda m: m["sources"].update({"0": []}), "sources.0: not an object"),
    (lambda m: m["sources"].update({"x": {}}), "sources.x: not a source number"),
    (lambda m: m.update(complete="no"), "complete: 'no'"),
])
def test_a_manifest_with_wrong_types_is_damaged_not_a_traceback(tmp_path, run_script, numbered_jsonl, edit, where):
    # These used to end in a TypeError, AttributeError or KeyError traceback (or resume on garbage)
    # after the manifest had been read.
    _, lines = numbered_jsonl
    src = tmp_path / "corp.jsonl"
    src.write_text("\n".join(lines[:400]) + "\n")
    out = tmp_path / "out"
    args = stopped_after_two_shards(run_script, src, out)
    path = out / "c.manifest.json"
    m = json.loads(path.read_text())
    edit(m)
    path.write_text(json.dumps(m))
    before = all_files_digest(out)
    r = run_script("prepare_text", *args, expect=1)
    assert r.err.startswith(f"error: {path}: damaged ({where}"), r.err
    assert "pass --overwrite to start over" in r.err and r.err.count("\n") == 1 and "Traceback" not in r.err
    assert all_files_digest(out) == before
    run_script("prepare_text", *args, "--overwrite")
    run_script("prepare_text", *args[:-1], tmp_path / "ref")
    assert all_files_digest(out) == all_files_digest(tmp_path / "ref")


def test_a_domain_that_cannot_name_a_file_is_refused_before_tokenizing(tmp_path, run_script, monkeypatch):
    # --domain-field text made val sets named after whole documents; the first shard's write failed
    # with ENAMETOOLONG, after the tokenizing, in a message of kilobytes.
    import pyarrow as pa
    import pyarrow.parquet as pq

    from vp_data import pipeline

    d = tmp_path / "in"
    d.mkdir()
    texts = [f"page {i} " + "some words of a web page " * 20 for i in range(20)]
    pq.write_table(pa.table({"text": texts, "dump": ["CC-MAIN-2024-10"] * 20}), d / "000_00000.parquet")
    calls = []
    real = pipeline._encode_batch
    monkeypatch.setattr(pipeline, "_encode_batch", lambda texts: calls.append(len(texts)) or real(texts))
    base = ["prepare_fineweb", "--input-dir", d, "--val-fraction", "0.5", "--val-by-domain", "1", "--workers", "1"]
    r = run_script(*base, "--domain-field", "text", "--out-dir", tmp_path / "a", expect=1)
    assert r.err.startswith("error: --domain-field text: the domain 'page ") and len(r.err) < 400, r.err
    assert "cannot name a per-domain val set" in r.err and "a file system allows 255" in r.err
    assert "--val-by-domain 0" in r.err and calls == []
    assert not [f for f in os.listdir(tmp_path / "a") if f.endswith(".bin")]
    # the real domain field, and one val set, still work
    run_script(*base, "--out-dir", tmp_path / "b")
    assert "fineweb_val_ccmain202410_000000.bin" in os.listdir(tmp_path / "b") and calls
    run_script(*base[:-4], "--domain-field", "text", "--val-by-domain", "0", "--workers", "1",
               "--out-dir", tmp_path / "c")
    assert "fineweb_val_000000.bin" in os.listdir(tmp_path / "c")


def test_shard_name_parts(tmp_path):
    from vp_data import DataError, tokenizer
    from vp_data.pipeline import Job, StreamSpec, split_name_problem

    assert split_name_problem("p", "val_x") is None
    assert "'/' or NUL" in split_name_problem("p", "val_a/b") and "'/' or NUL" in split_name_problem("p", "a\0b")
    # "p_" + split + "_999999.bin.tmp" (17 more bytes) may be 255 bytes long, not 256
    assert split_name_problem("p", "v" * 238) is None
    assert "names of 256 bytes" in split_name_problem("p", "v" * 239)
    job = Job(out_dir=str(tmp_path), prefix="p", tokenizer=tokenizer.resolve("gpt2"), config={},
              stream_factory=lambda n: StreamSpec(n, "val/" + n))
    with pytest.raises(DataError, match=r"cannot name the shards of stream 'x': a file name part cannot"):
        job.stream("x")


# ---------------------------------------------------------------- every refusal of the resume check
# Job._check_resume_points reads ahead to each stream's resume point before a resumed run writes its
# first shard, and Job._run / _run_source refuse a resume point that cannot be reached. Each test
# here is the only one that fails without the branch it names (each was tried with it removed).

class _CharTokenizer(Tokenizer):
    """One token per character (its code point modulo 250) after the delimiter: a document of n
    characters is n + 1 tokens, so resume points and offsets can be set by hand."""

    name, vocab_size, eot, eot_text = "chars", 256, 255, "<eot>"

    def encode(self, text):
        return [ord(c) % 250 for c in text]

    def token_bytes(self, i):
        return bytes([i])


@pytest.fixture
def char_job(tmp_path, monkeypatch):
    """char_job(out, **kw): a Job of dataset 'k' at --shard-size 16 with _CharTokenizer, each stream
    (train, val) written as the split of its own name. Fast: no pool, no real tokenizer."""
    from vp_data import pipeline
    from vp_data.pipeline import Job, StreamSpec
    from vp_data.tokenizer import TokenizerSpec

    monkeypatch.setattr(pipeline, "build", lambda spec: _CharTokenizer())
    spec_file = tmp_path / "chars.tok"
    spec_file.write_text("one token per character")

    def make(out, **kw):
        return Job(out_dir=str(out), prefix="k", tokenizer=TokenizerSpec("chars", (str(spec_file),)), config={},
                   stream_factory=lambda name: StreamSpec(name, name), shard_size=16, workers=1, progress=False,
                   **kw)

    return make


def keyed_docs(keys, first=0):
    """One document per key, "d<i> " and 0 to 10 x's (5 to 15 tokens), routed by its key (by_key):
    the route of a document can be changed without changing its text, and its text without its route."""
    return [Doc(f"d{i} " + "x" * (i * 7 % 11), f"doc {i}", key) for i, key in enumerate(keys, first)]


def by_key(docs, name="s"):
    from vp_data.pipeline import Source

    docs = list(docs)
    return Source(name=name, open=lambda bad: iter(docs), route=lambda doc: doc.key)


def val_resumes_after_train_is_redone(char_job, out):
    """Twenty documents of one input, every fourth to val, stopped after nine shards: train resumes at
    document 14, val at document 15 (4 tokens into it). Train's first shard is then damaged, so the
    next run redoes train from document 0 and writes a shard at document 2, long before val's resume
    point: that point is checked first, by reading ahead to it. Returns the documents."""
    docs = keyed_docs(["val" if i % 4 == 3 else "train" for i in range(20)])
    assert char_job(out, stop_after_shards=9).run([by_key(docs)]) == 3
    m = json.loads((out / "k.manifest.json").read_text())
    train, val = m["streams"]["train"]["shards"], m["streams"]["val"]["shards"]
    assert train[0]["resume"] == [0, 2, 1] and train[-1]["resume"] == [0, 14, 15], train
    assert val[-1]["resume"] == [0, 15, 4] and docs[15].key == "val", val
    damage(out / train[0]["file"])
    return docs


def refused_before_writing(char_job, out, sources, what):
    """A run over `sources` is refused for `what` and leaves the out dir as it was: the read ahead
    found the change before the redone shard was written (after it, the message would say this run
    wrote shards, and restoring the inputs would no longer be enough)."""
    from vp_data.pipeline import InputsChanged

    before, manifest = all_files_digest(out), (out / "k.manifest.json").read_bytes()
    with pytest.raises(InputsChanged) as e:
        char_job(out).run(sources)
    msg = str(e.value)
    assert f"cannot resume 'k': the inputs changed since the earlier run ({what})" in msg, msg
    assert "restore the inputs of that run to resume it" in msg, msg
    assert all_files_digest(out) == before and (out / "k.manifest.json").read_bytes() == manifest


def resumes_as_one_run(char_job, tmp_path, out, sources):
    """The earlier inputs, restored, resume to the bytes of an uninterrupted run."""
    assert char_job(out).run(sources) == 0
    assert char_job(tmp_path / "ref").run(sources) == 0
    assert all_files_digest(out) == all_files_digest(tmp_path / "ref")


def test_resume_check_refuses_a_resume_document_now_routed_to_another_stream(tmp_path, char_job):
    # Job._check_resume_doc's route check. Val's resume document has the same text (the same tokens,
    # digest and length) but is now routed to train. Without the check the read ahead passes it,
    # train writes its redone shard, and val finds its document gone only after that write.
    out = tmp_path / "out"
    docs = val_resumes_after_train_is_redone(char_job, out)
    moved = keyed_docs(["train" if i == 15 else d.key for i, d in enumerate(docs)])
    assert [d.text for d in moved] == [d.text for d in docs]
    refused_before_writing(char_job, out, [by_key(moved)],
                           "document 15 of input 's', where stream val resumes, is not the one it was")
    resumes_as_one_run(char_job, tmp_path, out, [by_key(docs)])


def test_resume_check_refuses_a_resume_document_with_other_tokens(tmp_path, char_job):
    # Job._check_resume_doc's digest check. Val's resume document is still routed to val and as long
    # as it was (the offset is inside it), but its text is another: only the digest tells.
    out = tmp_path / "out"
    docs = val_resumes_after_train_is_redone(char_job, out)
    other = list(docs)
    other[15] = Doc(docs[15].text.replace("x", "y"), docs[15].where, "val")
    assert other[15].text != docs[15].text and len(other[15].text) == len(docs[15].text)
    refused_before_writing(char_job, out, [by_key(other)],
                           "document 15 of input 's', where stream val resumes, is not the one it was")
    resumes_as_one_run(char_job, tmp_path, out, [by_key(docs)])


def test_resume_check_refuses_a_resume_document_shorter_than_the_offset(tmp_path, char_job):
    # Job._check_resume_doc's length check (offset > len(tokens)), the only check of the document's
    # content where the manifest has no digest (written before it was recorded). Val's resume
    # document, still routed to val, is now 3 tokens long; val resumes 4 tokens into it.
    out = tmp_path / "out"
    docs = val_resumes_after_train_is_redone(char_job, out)
    path = out / "k.manifest.json"
    m = json.loads(path.read_text())
    del m["streams"]["val"]["shards"][-1]["resume_doc"]
    path.write_text(json.dumps(m))
    short = list(docs)
    short[15] = Doc("d1", docs[15].where, "val")
    refused_before_writing(char_job, out, [by_key(short)],
                           "document 15 of input 's', where stream val resumes, is not the one it was")
    resumes_as_one_run(char_job, tmp_path, out, [by_key(docs)])


def test_resume_check_refuses_an_input_that_ends_before_a_resume_point_ahead(tmp_path, char_job):
    # Job._check_resume_points, "ends before document N": the input now ends at document 14, before
    # val's resume point. Without the read ahead's refusal, train writes its redone shard first and
    # the end of the input says the same only after that write.
    out = tmp_path / "out"
    docs = val_resumes_after_train_is_redone(char_job, out)
    refused_before_writing(char_job, out, [by_key(docs[:15])],
                           "input 's' ends before document 15, where stream val resumes")
    resumes_as_one_run(char_job, tmp_path, out, [by_key(docs)])


def test_resume_check_refuses_a_resume_point_in_an_input_not_given(tmp_path, char_job):
    # Job._check_resume_points, "is not among the inputs": input 0 feeds train, input 1 val, and the
    # run stopped after val's first shard. The next run is given input 0 alone, with train's first
    # shard damaged: before train writes it again, val's resume point is looked for in an input 1 that
    # this run does not have (without the refusal: an IndexError).
    out = tmp_path / "out"
    sources = [by_key(keyed_docs(["train"] * 12), "a"), by_key(keyed_docs(["val"] * 12, first=12), "b")]
    assert char_job(out, stop_after_shards=7).run(sources) == 3
    m = json.loads((out / "k.manifest.json").read_text())
    train, val = m["streams"]["train"]["shards"], m["streams"]["val"]["shards"]
    assert train[-1]["resume"] == [0, 10, 5] and [e["resume"] for e in val] == [[1, 1, 4]], m["streams"]
    damage(out / train[0]["file"])
    refused_before_writing(char_job, out, sources[:1], "input 1, where stream val resumes, is not among the inputs")
    resumes_as_one_run(char_job, tmp_path, out, sources)


def test_a_resume_point_in_an_input_the_run_does_not_read_is_refused(tmp_path, char_job):
    # Job._run's "where stream X resumes, was not read": one stream fed by two inputs, stopped after
    # its shards of input 1 began. A run given input 0 alone writes nothing (the stream resumes past
    # it), so no read ahead happens: without the refusal the stream was finished as it was and the
    # set marked complete, the rest of input 1 left out without a word.
    out = tmp_path / "out"
    sources = [by_key(keyed_docs(["train"] * 12), "a"), by_key(keyed_docs(["train"] * 12, first=12), "b")]
    assert char_job(out, stop_after_shards=8).run(sources) == 3
    m = json.loads((out / "k.manifest.json").read_text())
    assert m["streams"]["train"]["shards"][-1]["resume"] == [1, 2, 3], m["streams"]
    refused_before_writing(char_job, out, sources[:1], "input 1, where stream train resumes, was not read")
    resumes_as_one_run(char_job, tmp_path, out, sources)
