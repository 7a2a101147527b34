"""The trainer's --eval-mc against lm-evaluation-harness's own hellaswag task, on the same records.

scripts/prepare_hellaswag.py --render harness promises that the trainer's mc_acc and mc_acc_norm
are the harness's acc and acc_norm. Here both score the same model on the same records: the
trainer from the .vpmc file, the harness (its `hellaswag` preprocessing, imported from lm_eval,
with the records as a local JSON dataset) from the model exported by scripts/hf_convert.py. That
checks the rendering, the tokenization and split of every ending, and the C++ scoring together,
against an implementation none of them was derived from.

HellaSwag itself is not in ../shared/data, so the records are built from TinyShakespeare in
HellaSwag's schema: the speaker as activity_label, a line as ctx_a (every fifth one in WikiHow's
markup), the next line's first word as ctx_b, and four endings: the rest of that line and the
same from three other speeches; every seventh record carries double spaces. The models have
random weights, which makes every decision a coin toss that only the same log-likelihoods
reproduce; the accuracies must be equal, not close.

Needs torch, transformers, accelerate and lm_eval (requirements-reference.txt); skipped without.
"""

import contextlib
import io
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_script
from test_hf_convert import TRAINER, convert, random_params
from vp_data import cli
from vp_data.checkpoint import make_config, write_checkpoint

REPO = Path(__file__).resolve().parents[2]
N_RECORDS = 120


def hellaswag_records(tinyshakespeare):
    speeches = [b.split("\n") for b in Path(tinyshakespeare).read_text().split("\n\n")]
    speeches = [s for s in speeches if len(s) >= 3 and s[0].endswith(":") and all(20 < len(x) < 70 for x in s[1:3])]
    rng = random.Random(0)
    records = []
    for i, s in enumerate(speeches[:N_RECORDS]):
        first, *rest = s[2].split(" ")
        endings = [" ".join(rest)] + [" ".join(o[2].split(" ")[1:]) for o in rng.sample(speeches, 3)]
        label = rng.randrange(4)
        endings[0], endings[label] = endings[label], endings[0]
        ctx_a = s[1] if i % 5 else "[header] " + s[1].replace(", ", " [title] ", 1)
        if i % 7 == 0:
            endings = [e.replace(" ", "  ", 1) for e in endings]
        records.append({"ind": i, "activity_label": s[0][:-1].title(), "ctx_a": ctx_a, "ctx_b": first.lower(),
                        "ctx": ctx_a + " " + first.lower(), "endings": endings, "label": label, "split": "val",
                        "split_type": "indomain", "source_id": f"tinyshakespeare~{i}"})
    assert len(records) == N_RECORDS
    return records


def harness_task(tmp_path, records_path):
    """lm_eval's hellaswag task (its YAML fields and its utils.process_docs), reading the local records."""
    d = tmp_path / "tasks"
    d.mkdir()
    (d / "utils.py").write_text("from lm_eval.tasks.hellaswag.utils import process_docs  # noqa: F401\n")
    import lm_eval.tasks.hellaswag as hs

    yaml = (Path(list(hs.__path__)[0]) / "hellaswag.yaml").read_text()  # a namespace package: no __file__
    yaml = yaml.replace("task: hellaswag", "task: vp_hellaswag_local")
    yaml = yaml.replace("dataset_path: Rowan/hellaswag", f"dataset_path: json\ndataset_kwargs:\n  data_files:\n"
                                                         f"    validation: {records_path}")
    yaml = yaml.replace("training_split: train\n", "").replace("tag:\n  - multiple_choice\n", "")
    assert "dataset_path: json" in yaml and "process_docs: !function utils.process_docs" in yaml
    (d / "vp_hellaswag_local.yaml").write_text(yaml)
    return d


def records_and_vpmc(tmp_path, vp_cache, tok):
    """The records as JSON lines, and the .vpmc that prepare_hellaswag.py --render harness makes."""
    records = hellaswag_records(Path(vp_cache) / "tinyshakespeare" / "input.txt")
    rec_path = tmp_path / "records.jsonl"
    rec_path.write_text("".join(json.dumps(r) + "\n" for r in records))
    mod = load_script("prepare_hellaswag")
    assert mod.main(["--input", str(rec_path), "--render", "harness", "--tokenizer", tok, "--out-dir", str(tmp_path / "mc"),
                     "--no-progress"]) == 0
    return rec_path, tmp_path / "mc" / f"hellaswag_val_{tok}.vpmc"


def random_checkpoint(path, tok, arch, value_path, seed=31):
    vocab = {"gpt2": 50257, "neox": 50277}[tok]
    kw = {"Hkv": 2, "qk_norm": 1, "depth_stride": 1} if arch == "llama" else {}
    if arch == "gpt2" and value_path == "depth":
        kw = {"depth_stride": 1}
    cfg = make_config(arch, 2, 4, 32, vocab, 64, path=value_path, **kw)
    write_checkpoint(str(path), cfg, random_params(cfg, seed))


def trainer_mc(ckpt, value_path, vpmc, out):
    """The trainer's --eval-mc accuracies of a checkpoint: (mc_acc, mc_acc_norm) as counts."""
    trainer = TRAINER if value_path == "vanilla" else REPO / "build" / value_path / "train_cpu"
    p = subprocess.run([str(trainer), "--init-from", str(ckpt), "--max-steps", "0", "--seq-len", "64",
                        "--batch-size", "4", "--eval-mc", f"hs={vpmc}", "--out-dir", str(out)],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert p.returncode == 0, p.stdout + p.stderr
    ours = [json.loads(line) for line in open(out / "log.jsonl")][-1]
    return round(ours["mc_acc_hs"] * N_RECORDS), round(ours["mc_acc_norm_hs"] * N_RECORDS)


def needs_lm_eval():
    for m in ("torch", "transformers", "accelerate"):
        pytest.importorskip(m)
    return pytest.importorskip("lm_eval")


@pytest.mark.parametrize("tok,arch,path", [("gpt2", "gpt2", "vanilla"), ("neox", "llama", "depth")])
def test_mc_accuracies_equal_lm_evaluation_harness(tok, arch, path, tmp_path, vp_cache):
    lm_eval = needs_lm_eval()
    from lm_eval.tasks import TaskManager

    rec_path, vpmc = records_and_vpmc(tmp_path, vp_cache, tok)
    random_checkpoint(tmp_path / "m.bin", tok, arch, path)
    ours = trainer_mc(tmp_path / "m.bin", path, vpmc, tmp_path / "run")
    convert("export", tmp_path / "m.bin", tmp_path / "hf", "--tokenizer", tok)
    model_args = f"pretrained={tmp_path / 'hf'},dtype=float32" + (",trust_remote_code=True" if path != "vanilla" else "")
    res = lm_eval.simple_evaluate(model="hf", model_args=model_args, tasks=["vp_hellaswag_local"], batch_size=8,
                                  device="cpu", task_manager=TaskManager(include_path=str(harness_task(tmp_path, rec_path))))
    theirs = res["results"]["vp_hellaswag_local"]
    assert theirs["sample_len"] == N_RECORDS
    # equal as counts out of N_RECORDS (the trainer logs 9 significant digits)
    assert ours == (round(theirs["acc,none"] * N_RECORDS), round(theirs["acc_norm,none"] * N_RECORDS)), (ours, theirs)


def test_eval_harness_script_tables_several_runs(tmp_path, vp_cache):
    """scripts/eval_harness.py on a run directory (its newest checkpoint) and a checkpoint file of
    another value path: one table, and results equal to the trainer's own scoring of each."""
    needs_lm_eval()
    rec_path, vpmc = records_and_vpmc(tmp_path, vp_cache, "gpt2")
    (tmp_path / "runA").mkdir()
    random_checkpoint(tmp_path / "runA" / "ckpt_00000002.bin", "gpt2", "gpt2", "vanilla", seed=5)
    random_checkpoint(tmp_path / "runA" / "ckpt_00000010.bin", "gpt2", "gpt2", "vanilla", seed=6)
    random_checkpoint(tmp_path / "depth.bin", "gpt2", "gpt2", "depth", seed=7)
    mod = load_script("eval_harness")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.run(mod.main, [str(tmp_path / "runA"), str(tmp_path / "depth.bin"), "--tasks", "vp_hellaswag_local",
                                  "--include-path", str(harness_task(tmp_path, rec_path)), "--out", str(tmp_path / "r.json")])
    assert code == 0
    results = json.loads((tmp_path / "r.json").read_text())["results"]
    assert [(r["checkpoint"], r["value_path"], r["step"]) for r in results] == [
        (str(tmp_path / "runA" / "ckpt_00000010.bin"), "vanilla", 0), (str(tmp_path / "depth.bin"), "depth", 0)]
    for r, value_path, tag in zip(results, ("vanilla", "depth"), ("a", "b")):
        want = trainer_mc(r["checkpoint"], value_path, vpmc, tmp_path / f"run_{tag}")
        assert (round(r["acc"] * N_RECORDS), round(r["acc_norm"] * N_RECORDS)) == want, (r, want)
    table = out.getvalue().splitlines()
    assert table[0].startswith("| run | value path |") and len(table) == 4 and "| depth | 0 | vp_hellaswag_local |" in table[3]


def test_eval_harness_script_refuses_bad_runs(tmp_path):
    mod = load_script("eval_harness")
    err = io.StringIO()

    def run(*argv):
        with contextlib.redirect_stderr(err):
            return cli.run(mod.main, [str(a) for a in argv])

    assert run(tmp_path / "nowhere", "--tasks", "x") == 1 and "neither a run directory" in err.getvalue()
    (tmp_path / "empty").mkdir()
    assert run(tmp_path / "empty", "--tasks", "x") == 1 and "holds no ckpt_*.bin" in err.getvalue()
    for name in ("ckpt_00000002.bin", "ckpt_99999999.bin", "ckpt_100000000.bin", "ckpt_latest.bin"):
        (tmp_path / "empty" / name).write_bytes(b"")
    assert mod.resolve_checkpoint(str(tmp_path / "empty")) == str(tmp_path / "empty" / "ckpt_100000000.bin")
    cfg = make_config("gpt2", 1, 1, 8, 300, 8)
    write_checkpoint(str(tmp_path / "v300.bin"), cfg, random_params(cfg, 0))
    assert run(tmp_path / "v300.bin", "--tasks", "x") == 1 and "--tokenizer" in err.getvalue()
    (tmp_path / "junk.bin").write_bytes(b"junk" * 200)
    assert run(tmp_path / "junk.bin", "--tasks", "x") == 1 and "not a valuepath checkpoint" in err.getvalue()


def test_compare_paths_adds_the_downstream_table(tmp_path, vp_cache):
    """scripts/compare_paths.sh with TASKS: every path's run, then eval_harness.py's table of them."""
    needs_lm_eval()
    from test_plot_runs import compare_paths

    rec_path, _ = records_and_vpmc(tmp_path, vp_cache, "gpt2")
    # GPT-2's vocabulary, not compare_paths()'s small one: lm_eval reads the runs through the GPT-2
    # tokenizer, which eval_harness.py picks by the vocabulary's size
    p, out = compare_paths(tmp_path, timeout=900, PATHS="vanilla depth", TASKS="vp_hellaswag_local", LIMIT="40",
                           INCLUDE=str(harness_task(tmp_path, rec_path)), VOCAB="50257",
                           PYTHON=sys.executable)  # the one with lm_eval, which may not be .venv's
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    results = json.loads((tmp_path / "cmp.eval.json").read_text())["results"]
    assert [(r["value_path"], r["step"], r["n"]) for r in results] == [("vanilla", 2, 40), ("depth", 2, 40)]
    assert f"| {out / 'vanilla'} | vanilla | 2 | vp_hellaswag_local | 40 |" in p.stdout


def fake_lm_eval(monkeypatch):
    """lm_eval stood in for by a stub (CI has no lm-eval): simple_evaluate records its calls and
    returns fixed accuracies, so that eval_harness.py's own checks and output can be tested."""
    import sys
    import types

    calls = []

    def simple_evaluate(model, model_args, tasks, batch_size, device, limit, task_manager):
        # the exported model directory exists only during the call: what lm_eval would load from it
        pretrained = dict(kv.split("=", 1) for kv in model_args.split(","))["pretrained"]
        calls.append({"model_args": model_args, "tasks": tasks, "batch_size": batch_size, "device": device, "limit": limit,
                      "task_manager": task_manager, "files": sorted(os.listdir(pretrained)),
                      "config": json.loads((Path(pretrained) / "config.json").read_text())})
        return {"results": {t: {"acc,none": 0.25, "acc_stderr,none": 0.01, "acc_norm,none": 0.3, "acc_norm_stderr,none": 0.02,
                                "sample_len": 40} for t in tasks}}

    lm_eval, tasks = types.ModuleType("lm_eval"), types.ModuleType("lm_eval.tasks")
    lm_eval.simple_evaluate, lm_eval.tasks = simple_evaluate, tasks
    tasks.TaskManager = lambda include_path=None: {"include_path": include_path}
    monkeypatch.setitem(sys.modules, "lm_eval", lm_eval)
    monkeypatch.setitem(sys.modules, "lm_eval.tasks", tasks)
    return calls


def test_eval_harness_checks_everything_before_the_first_evaluation(tmp_path, monkeypatch):
    """A tokenizer of another vocabulary, NaN weights or an --out that cannot be written are found
    before any run is evaluated, not after the good runs' (slow) evaluations; the results are
    written whole or not at all, and an error names --out, the flag the script has."""
    import numpy as np

    calls = fake_lm_eval(monkeypatch)
    mod = load_script("eval_harness")
    cfg = make_config("gpt2", 1, 1, 8, 50257, 8)
    write_checkpoint(str(tmp_path / "good.bin"), cfg, random_params(cfg, 0))
    nan = random_params(cfg, 1)
    nan[5] = np.nan
    write_checkpoint(str(tmp_path / "nan.bin"), cfg, nan)
    err = io.StringIO()

    def run(*argv):
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return cli.run(mod.main, [str(a) for a in argv])

    neox = make_config("gpt2", 1, 1, 8, 50277, 8)
    write_checkpoint(str(tmp_path / "neox.bin"), neox, random_params(neox, 2))
    out = tmp_path / "r.json"
    # each time the first run is fine and the second is not: the first must not be evaluated either
    assert run(tmp_path / "good.bin", tmp_path / "neox.bin", "--tokenizer", "gpt2", "--tasks", "t", "--out", out) == 1
    assert "neox.bin: --tokenizer gpt2 has 50257 ids but the model's vocabulary is 50277" in err.getvalue() and calls == []
    assert run(tmp_path / "good.bin", tmp_path / "nan.bin", "--tasks", "t", "--out", out) == 1
    assert "nan.bin: NaN or Inf in" in err.getvalue() and calls == []
    assert run(tmp_path / "good.bin", "--tasks", "t", "--out", tmp_path / "no" / "r.json") == 1
    assert "--out" in err.getvalue() and "no directory" in err.getvalue()
    assert calls == [] and not out.exists() and "--out-dir" not in err.getvalue()

    assert run(tmp_path / "good.bin", "--tasks", "t", "--out", out) == 0 and len(calls) == 1
    before = out.read_bytes()
    assert json.loads(before)["results"][0]["acc"] == 0.25

    def full_disk(obj, f, **kw):
        f.write('{"tasks": ')
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(mod.json, "dump", full_disk)
    assert run(tmp_path / "good.bin", "--tasks", "t", "--out", out) == 1
    assert "cannot write --out" in err.getvalue() and "No space left" in err.getvalue()
    assert out.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["good.bin", "nan.bin", "neox.bin", "r.json"]


def test_eval_harness_hands_lm_eval_each_run_and_tabulates_its_results(tmp_path, monkeypatch):
    """What lm_eval receives and what comes back out, by the script's docstring: each run exported
    with the tokenizer its vocabulary implies (50257 gpt2, whose eos id is 50256; 50277 neox, eos
    0: docs/formats.md), trust_remote_code only for a value path other than vanilla, and --tasks
    (names stripped), --limit, --batch-size, --device and --include-path passed on. The table and
    --out hold the run, the checkpoint's own step, lm-eval's sample_len as n, and acc / acc_norm
    with their standard errors (lm-eval's "acc,none" keys without the filter); --out is readable
    as any new file is (0666 less the umask), not mkstemp's private 0600."""
    calls = fake_lm_eval(monkeypatch)
    mod = load_script("eval_harness")
    run_dir = tmp_path / "runA"
    run_dir.mkdir()
    gpt2 = make_config("gpt2", 1, 1, 8, 50257, 8)
    write_checkpoint(str(run_dir / "ckpt_00000007.bin"), gpt2, random_params(gpt2, 0), step=7)
    neox = make_config("gpt2", 2, 1, 8, 50277, 8, path="depth", depth_stride=1)
    write_checkpoint(str(tmp_path / "depth.bin"), neox, random_params(neox, 1), step=3)
    out, include = tmp_path / "r.json", tmp_path / "tasks"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
        code = cli.run(mod.main, [str(run_dir), str(tmp_path / "depth.bin"), "--tasks", " t1 , t2 ", "--limit", "40",
                                  "--batch-size", "3", "--device", "cuda:1", "--include-path", str(include), "--out", str(out)])
    assert code == 0
    assert len(calls) == 2
    for call in calls:
        assert (call["tasks"], call["batch_size"], call["device"], call["limit"]) == (["t1", "t2"], 3, "cuda:1", 40)
        assert call["task_manager"] == {"include_path": str(include)}
    vanilla, depth = calls
    assert vanilla["model_args"].endswith(",dtype=float32") and "trust_remote_code" not in vanilla["model_args"]
    assert depth["model_args"].endswith(",dtype=float32,trust_remote_code=True")
    assert vanilla["config"]["eos_token_id"] == 50256 and {"vocab.json", "merges.txt"} <= set(vanilla["files"])
    assert depth["config"]["eos_token_id"] == 0 and "tokenizer.json" in depth["files"]

    written = json.loads(out.read_text())
    assert (written["tasks"], written["limit"], written["batch_size"]) == (["t1", "t2"], 40, 3)
    assert [(r["run"], r["value_path"], r["step"], r["task"]) for r in written["results"]] == [
        (str(run_dir), "vanilla", 7, "t1"), (str(run_dir), "vanilla", 7, "t2"),
        (str(tmp_path / "depth.bin"), "depth", 3, "t1"), (str(tmp_path / "depth.bin"), "depth", 3, "t2")]
    assert written["results"][0] == {"run": str(run_dir), "checkpoint": str(run_dir / "ckpt_00000007.bin"), "arch": "gpt2",
                                     "value_path": "vanilla", "step": 7, "task": "t1", "n": 40, "acc": 0.25,
                                     "acc_stderr": 0.01, "acc_norm": 0.3, "acc_norm_stderr": 0.02}
    table = stdout.getvalue().splitlines()
    assert table[:2] == ["| run | value path | step | task | n | acc | acc_norm |", "|---|---|---|---|---|---|---|"]
    assert table[2] == f"| {run_dir} | vanilla | 7 | t1 | 40 | 0.2500 ± 0.0100 | 0.3000 ± 0.0200 |"
    assert table[5] == f"| {tmp_path / 'depth.bin'} | depth | 3 | t2 | 40 | 0.2500 ± 0.0100 | 0.3000 ± 0.0200 |"
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask


def test_eval_harness_refuses_an_out_directory_and_no_tasks_before_evaluating(tmp_path, monkeypatch):
    """--out naming a directory (a DataError, exit 1, saying to give a file name) and --tasks that
    names no task (a usage error, exit 2) are found before any evaluation; nothing is written."""
    calls = fake_lm_eval(monkeypatch)
    mod = load_script("eval_harness")
    cfg = make_config("gpt2", 1, 1, 8, 50257, 8)
    write_checkpoint(str(tmp_path / "good.bin"), cfg, random_params(cfg, 0))
    (tmp_path / "outdir").mkdir()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert cli.run(mod.main, [str(tmp_path / "good.bin"), "--tasks", "t", "--out", str(tmp_path / "outdir")]) == 1
        assert "is a directory; give a file name" in err.getvalue() and calls == []
        with pytest.raises(SystemExit) as e:
            cli.run(mod.main, [str(tmp_path / "good.bin"), "--tasks", " , ", "--out", str(tmp_path / "r.json")])
    assert e.value.code == 2 and "--tasks names no task" in err.getvalue() and calls == []
    assert sorted(os.listdir(tmp_path)) == ["good.bin", "outdir"] and os.listdir(tmp_path / "outdir") == []
