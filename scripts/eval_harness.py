#!/usr/bin/env python3
"""Downstream accuracies of valuepath runs with lm-evaluation-harness, one table for all of them.

    python scripts/eval_harness.py runs/compare_paths/* --tasks hellaswag,arc_easy,piqa
    python scripts/eval_harness.py runs/a/ckpt_00005000.bin runs/b --tasks hellaswag --limit 500

Each RUN is a run directory (its newest ckpt_*.bin) or a checkpoint file. Each is exported with
scripts/hf_convert.py into a temporary directory (vanilla as transformers' own class, the other
value paths as the trust_remote_code model that carries the PyTorch reference) with the tokenizer
its vocabulary implies (50257 gpt2, 50277 neox, 32000 llama2; --tokenizer otherwise), and
evaluated by lm_eval.simple_evaluate with the HF backend. Prints a table (acc and acc_norm with
their standard errors per task) and writes every result to --out (JSON).

Needs torch, transformers and lm-eval (requirements-reference.txt). lm-eval downloads each task's
dataset from the HF hub into its cache on first use; --include-path adds local task YAMLs.
Runs that are compared should be evaluated on the same tasks, --limit and batch size.
"""

import argparse
import glob
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vp_data import DataError, cli, hf  # noqa: E402
from vp_data.checkpoint import read_checkpoint  # noqa: E402

VOCAB_TOKENIZER = {50257: "gpt2", 50277: "neox", 32000: "llama2"}


def resolve_checkpoint(run: str) -> str:
    if os.path.isfile(run):
        return run
    if os.path.isdir(run):
        # ckpt_<step>.bin, the step zero-padded to 8 digits and longer past 99,999,999
        # (host/checkpoint.h): the newest is the largest step, not the last name
        steps = {}
        for path in glob.glob(os.path.join(run, "ckpt_*.bin")):
            m = re.fullmatch(r"ckpt_(\d{8,})\.bin", os.path.basename(path))
            if m:
                steps[int(m.group(1))] = path
        if not steps:
            raise DataError(f"{run} holds no ckpt_*.bin; pass a run directory with checkpoints or a checkpoint file")
        return steps[max(steps)]
    raise DataError(f"{run} is neither a run directory nor a checkpoint file")


def main(argv=None) -> int:
    try:
        return evaluate(argv)
    except OSError as e:
        # cli.run's own message for this names --out-dir, which this script does not have
        raise DataError(f"{e.strerror or e} ({e.filename or 'no file named'}); check the runs, --out, free space "
                        "and the temporary directory (TMPDIR) the models are exported to") from None


def evaluate(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="RUN", help="run directories or checkpoint files")
    ap.add_argument("--tasks", required=True, help="comma-separated lm-eval task names, e.g. hellaswag,arc_easy")
    ap.add_argument("--limit", type=cli.positive_int, help="at most this many examples per task (lm-eval --limit)")
    ap.add_argument("--batch-size", type=cli.positive_int, default=8, help="lm-eval batch size (default 8)")
    ap.add_argument("--device", default="cpu", help="torch device for the model (default cpu; cuda on a GPU)")
    ap.add_argument("--tokenizer", help="the runs' tokenizer (gpt2, neox, llama2), if their vocabulary does not say")
    ap.add_argument("--include-path", help="a directory of extra lm-eval task YAMLs")
    ap.add_argument("--out", default="eval_harness.json", help="where to write all results (default eval_harness.json)")
    args = ap.parse_args(argv)

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks:
        ap.error("--tasks names no task")
    # Everything that can be wrong with the inputs is found before the (slow) evaluation starts:
    # what hf.export would refuse halfway through the runs (a tokenizer of another vocabulary, its
    # files missing from the cache, NaN weights), and an --out that cannot be written, which would
    # otherwise lose every finished evaluation at the very end.
    check_out(args.out)
    jobs = []
    for run in args.runs:
        ckpt = resolve_checkpoint(run)
        try:
            cfg, params, meta = read_checkpoint(ckpt)
        except (OSError, ValueError) as e:
            raise DataError(f"cannot read {ckpt}: {e}") from None
        tok = args.tokenizer or VOCAB_TOKENIZER.get(cfg.vocab_size)
        if tok is None:
            raise DataError(f"{ckpt}: a vocabulary of {cfg.vocab_size} is none of {sorted(VOCAB_TOKENIZER)}; pass "
                            f"--tokenizer (lm-eval needs the text tokenizer the model was trained with)")
        try:
            hf.tokenizer_files(tok, cfg.vocab_size)
        except DataError as e:
            raise DataError(f"{ckpt}: {e}") from None
        hf.check_finite(ckpt, cfg, params)
        del params  # one run's weights at a time: the checks hold none of them for the evaluation
        jobs.append((run, ckpt, cfg, meta["step"], tok))
    try:
        import lm_eval
        from lm_eval.tasks import TaskManager
    except ImportError:
        raise DataError("lm-eval is not installed: .venv/bin/pip install -r requirements-reference.txt") from None

    manager = TaskManager(include_path=args.include_path) if args.include_path else TaskManager()
    results = []
    for run, ckpt, cfg, step, tok in jobs:
        with tempfile.TemporaryDirectory(prefix="vp_eval_") as d:
            config = hf.export(ckpt, d, tokenizer=tok, force=True)
            model_args = f"pretrained={d},dtype=float32" + (",trust_remote_code=True" if "auto_map" in config else "")
            print(f"evaluating {ckpt} ({cfg.arch}, {cfg.path}, step {step}) on {', '.join(tasks)}", file=sys.stderr)
            res = lm_eval.simple_evaluate(model="hf", model_args=model_args, tasks=tasks, batch_size=args.batch_size,
                                          device=args.device, limit=args.limit, task_manager=manager)
        for task in tasks:
            r = res["results"][task]
            results.append({"run": run, "checkpoint": ckpt, "arch": cfg.arch, "value_path": cfg.path, "step": step,
                            "task": task, "n": r.get("sample_len"),
                            **{k.split(",")[0]: v for k, v in r.items() if k.startswith(("acc", "acc_norm"))}})

    print("| run | value path | step | task | n | acc | acc_norm |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        def fmt(metric):
            v, se = r.get(metric), r.get(metric + "_stderr")
            return "" if v is None else f"{v:.4f}" + (f" ± {se:.4f}" if isinstance(se, float) else "")
        print(f"| {r['run']} | {r['value_path']} | {r['step']} | {r['task']} | {r['n']} | {fmt('acc')} | {fmt('acc_norm')} |")
    write_results(args.out, {"tasks": tasks, "limit": args.limit, "batch_size": args.batch_size, "results": results})
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def check_out(out: str) -> None:
    """A DataError unless `out` can be written: its directory exists and is writable, and `out`
    itself is not a directory."""
    directory = os.path.dirname(os.path.abspath(out))
    if os.path.isdir(out):
        raise DataError(f"--out {out} is a directory; give a file name, e.g. {os.path.join(out, 'eval_harness.json')}")
    if not os.path.isdir(directory):
        raise DataError(f"--out {out}: no directory {directory}; create it or choose another --out")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise DataError(f"--out {out}: cannot write in {directory}; choose another --out")


def write_results(out: str, obj) -> None:
    """The JSON under a temporary name beside `out`, renamed over it: an existing file is replaced
    only by a complete one. An error names --out (cli.run's generic one would say --out-dir)."""
    directory = os.path.dirname(os.path.abspath(out))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".eval_harness.", suffix=".json", dir=directory)
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would hide the results from the group
        os.replace(tmp, out)
    except OSError as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise DataError(f"cannot write --out {out}: {e.strerror or e}; the table above holds the results; "
                        "free space or choose another --out") from None


if __name__ == "__main__":
    sys.exit(cli.run(main))
