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

import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from conftest import load_script
from test_hf_convert import TRAINER, convert, random_params
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


@pytest.mark.parametrize("tok,arch,path", [("gpt2", "gpt2", "vanilla"), ("neox", "llama", "depth")])
def test_mc_accuracies_equal_lm_evaluation_harness(tok, arch, path, tmp_path, vp_cache):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    lm_eval = pytest.importorskip("lm_eval")
    from lm_eval.tasks import TaskManager

    records = hellaswag_records(Path(vp_cache) / "tinyshakespeare" / "input.txt")
    rec_path = tmp_path / "records.jsonl"
    rec_path.write_text("".join(json.dumps(r) + "\n" for r in records))
    mod = load_script("prepare_hellaswag")
    assert mod.main(["--input", str(rec_path), "--render", "harness", "--tokenizer", tok, "--out-dir", str(tmp_path / "mc"),
                     "--no-progress"]) == 0
    vpmc = tmp_path / "mc" / f"hellaswag_val_{tok}.vpmc"

    vocab = {"gpt2": 50257, "neox": 50277}[tok]
    kw = {"Hkv": 2, "qk_norm": 1, "depth_stride": 1} if arch == "llama" else {}
    cfg = make_config(arch, 2, 4, 32, vocab, 64, path=path, **kw)
    write_checkpoint(str(tmp_path / "m.bin"), cfg, random_params(cfg, 31))
    trainer = TRAINER if path == "vanilla" else REPO / "build" / path / "train_cpu"
    p = subprocess.run([str(trainer), "--init-from", str(tmp_path / "m.bin"), "--max-steps", "0", "--seq-len", "64",
                        "--batch-size", "4", "--eval-mc", f"hs={vpmc}", "--out-dir", str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert p.returncode == 0, p.stdout + p.stderr
    ours = [json.loads(line) for line in open(tmp_path / "run" / "log.jsonl")][-1]

    convert("export", tmp_path / "m.bin", tmp_path / "hf", "--tokenizer", tok)
    model_args = f"pretrained={tmp_path / 'hf'},dtype=float32" + (",trust_remote_code=True" if path != "vanilla" else "")
    res = lm_eval.simple_evaluate(model="hf", model_args=model_args, tasks=["vp_hellaswag_local"], batch_size=8,
                                  device="cpu", task_manager=TaskManager(include_path=str(harness_task(tmp_path, rec_path))))
    theirs = res["results"]["vp_hellaswag_local"]
    assert theirs["sample_len"] == N_RECORDS
    # equal as counts out of N_RECORDS (the trainer logs 9 significant digits)
    assert round(ours["mc_acc_hs"] * N_RECORDS) == round(theirs["acc,none"] * N_RECORDS), (ours, theirs)
    assert round(ours["mc_acc_norm_hs"] * N_RECORDS) == round(theirs["acc_norm,none"] * N_RECORDS), (ours, theirs)
