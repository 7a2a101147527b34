"""scripts/plot_runs.py on logs written by the CPU trainer: the table and the drawn curves are the
log's numbers, a resumed run comes out as its uninterrupted twin, and every bad log or flag is a
clear error that leaves an existing plot alone. Also scripts/compare_paths.sh end to end."""
import importlib.util
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from test_recipes import checkpoint_steps, kill_session, session_processes
from test_trainer_cli import PATHS, REPO, TINY_GPT2, data, logged_steps, read_log, run, spiky_data, write_shard, pattern_tokens  # noqa: F401

SCRIPT = REPO / "scripts" / "plot_runs.py"
_spec = importlib.util.spec_from_file_location("plot_runs", SCRIPT)
plot_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plot_runs)


def plot(args, expect=None, python_prefix=None):
    """Runs the script as a user does; python_prefix runs code first (to hide matplotlib)."""
    argv = [sys.executable]
    if python_prefix:
        argv += ["-c", python_prefix + f"\nimport runpy, sys; sys.argv = {[str(SCRIPT)] + [str(a) for a in args]!r}\n"
                 f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"]
    else:
        argv += [str(SCRIPT)] + [str(a) for a in args]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if expect is not None:
        assert p.returncode == expect, f"exit {p.returncode}, expected {expect}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def table_rows(stdout):
    """{label: {column: cell}} from the markdown table on stdout."""
    lines = [l for l in stdout.splitlines() if l.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(head, cells))
    return rows


def test_ema_is_the_debiased_closed_form():
    x = np.random.default_rng(0).normal(3.0, 1.0, 200)
    for a in [0.0, 0.5, 0.9, 0.99]:
        got = np.array(plot_runs.ema(list(x), a))
        # s_t = sum_i (1 - a) a^(t - i) x_i over i <= t, divided by 1 - a^(t + 1) (the weights' sum)
        want = np.array([sum((1 - a) * a ** (t - i) * x[i] for i in range(t + 1)) / (1 - a ** (t + 1)) if a > 0 else x[t]
                         for t in range(len(x))])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    # debiased: a constant series stays that constant from the first point on (no ramp from 0)
    np.testing.assert_allclose(plot_runs.ema([2.5] * 50, 0.99), [2.5] * 50, rtol=1e-12)


COMMON = TINY_GPT2 + ["--total-batch-tokens", "64", "--max-steps", "12", "--lr", "3e-3", "--warmup-steps", "3",
                      "--eval-every", "4", "--checkpoint-every", "5"]


@pytest.fixture()
def straight_and_resumed(tmp_path, data):
    """The same 12 steps run straight, and run to the end, cut back to step 5 and resumed: the
    resumed log holds steps 6..12 twice, the second copy from the resumed segment."""
    args = COMMON + ["--train-data", data / "train_*.bin", "--val-data", data / "val_*.bin"]
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    run(args + ["--out-dir", straight], expect=0)
    run(args + ["--out-dir", broken], expect=0)
    for name in ["ckpt_00000010.bin", "ckpt_00000012.bin"]:
        (broken / name).unlink()
    run(args + ["--out-dir", broken, "--resume", "1"], expect=0)
    return straight, broken


def test_resumed_run_is_spliced_into_its_uninterrupted_twin(straight_and_resumed):
    straight, broken = straight_and_resumed
    raw_steps = [r["step"] for r in read_log(broken) if "train_loss" in r]
    assert raw_steps == list(range(1, 13)) + list(range(6, 13))  # the splice is really exercised
    a, b = plot_runs.Run("a", straight / "log.jsonl"), plot_runs.Run("b", broken / "log.jsonl")
    assert a.step_numbers() == b.step_numbers() == list(range(1, 13))
    for key in ["train_loss", "lr", "grad_norm"]:
        assert a.series(key) == b.series(key)  # bit-exact resume: equal floats
    assert a.val_sets() == b.val_sets() == ["val_loss"]
    assert a.val_curve("val_loss") == b.val_curve("val_loss") and a.val_curve("val_loss")[0] == [0, 4, 8, 12]
    # the segment that counts for the broken run's steps 6..12 is the resumed one
    resumed = [r for r in read_log(broken)][-(7 + 2):]
    assert [r["train_loss"] for r in resumed if "train_loss" in r] == b.series("train_loss")[5:]
    assert b.segment_first == {1, 6}


def test_resumed_run_still_behind_its_interruption(straight_and_resumed, tmp_path):
    """Mid-way through the resumed segment (at its step 8), the interrupted segment's steps 9..12
    and its eval at 12 are not the run's: they are left out, not mixed in."""
    straight, broken = straight_and_resumed
    lines = (broken / "log.jsonl").read_text().splitlines()
    resumed_at = max(i for i, l in enumerate(lines) if '"resumed_from"' in l)
    upto = next(i for i in range(resumed_at, len(lines)) if lines[i].startswith('{"step":8,"val_loss"'))
    partial = tmp_path / "partial.jsonl"
    partial.write_text("".join(l + "\n" for l in lines[: upto + 1]))
    a, b = plot_runs.Run("a", straight / "log.jsonl"), plot_runs.Run("b", partial)
    assert b.step_numbers() == list(range(1, 9))
    assert b.series("train_loss") == a.series("train_loss")[:8]
    assert b.val_curve("val_loss") == ([0, 4, 8], a.val_curve("val_loss")[1][:3])
    assert b.tokens_at(8) == 8 * 64


def test_drawn_curves_are_the_logs_numbers(straight_and_resumed):
    straight, broken = straight_and_resumed
    log = read_log(straight)
    steps = [r for r in log if "train_loss" in r]
    evals = [r for r in log if "val_loss" in r]
    runs = [plot_runs.Run("straight", straight / "log.jsonl"), plot_runs.Run("broken", broken / "log.jsonl")]
    fig, axes = plot_runs.make_figure(runs, plot_runs.PANELS, "tokens", 0.9, baseline=runs[0])
    # train panel: per run a raw line then its EMA; x = tokens = step * 64 (--total-batch-tokens)
    raw, smooth = axes["train"].lines[0], axes["train"].lines[1]
    np.testing.assert_array_equal(raw.get_xdata(), [64 * r["step"] for r in steps])
    np.testing.assert_array_equal(raw.get_ydata(), [r["train_loss"] for r in steps])
    np.testing.assert_allclose(smooth.get_ydata(), plot_runs.ema([r["train_loss"] for r in steps], 0.9), rtol=0)
    assert smooth.get_label() == "straight"
    val = axes["val"].lines[0]
    np.testing.assert_array_equal(val.get_xdata(), [64 * r["step"] for r in evals])
    np.testing.assert_array_equal(val.get_ydata(), [r["val_loss"] for r in evals])
    np.testing.assert_array_equal(axes["lr"].lines[0].get_ydata(), [r["lr"] for r in steps])
    np.testing.assert_array_equal(axes["speed"].lines[1].get_ydata(), runs[1].series("tok_per_s"))
    # the baseline is left out of its own delta panel; the twin's delta is zero at every eval
    delta = axes["delta"].lines
    assert [l.get_label() for l in delta if l.get_label() in ("straight", "broken")] == ["broken"]
    np.testing.assert_array_equal([l for l in delta if l.get_label() == "broken"][0].get_ydata(), [0.0] * 4)
    # time axis: the steps' own milliseconds, summed
    np.testing.assert_allclose(runs[0].x_of([1, 12], "time"), [steps[0]["ms"] / 60000, sum(r["ms"] for r in steps) / 60000])


def check_layer_lines(ax, label, steps, logged):
    """The panel has one line per layer 1..2 (only the first labelled), each the log's values:
    logged(layer, step)."""
    lines = ax.lines
    assert len(lines) == 2 and lines[0].get_label().startswith(label)
    for layer, line in zip((1, 2), lines):
        np.testing.assert_array_equal(line.get_xdata(), steps)
        np.testing.assert_array_equal(line.get_ydata(), [logged(layer, s) for s in steps])


def test_resformer_lambdas_panel_draws_each_layer(tmp_path, data, straight_and_resumed):
    """A ResFormer run with learnable lambdas, resumed midway, beside a vanilla one: the lambda
    panel has one line per layer 1..L-1 of the ResFormer run (its logged values, the resumed
    segment spliced in), none for the vanilla run; without such a run there is no lambda panel."""
    out = tmp_path / "res"
    args = [("3" if prev == "--layers" else a) for prev, a in zip([None] + COMMON, COMMON)]
    del args[args.index("--eval-every"):args.index("--eval-every") + 2]  # nothing to evaluate: no val set
    args += ["--train-data", data / "train_*.bin", "--resformer-lambda", "learn", "--out-dir", out]
    run(args, expect=0, path="resformer")
    (out / "ckpt_00000012.bin").unlink()
    (out / "ckpt_00000010.bin").unlink()
    run(args + ["--resume", "1"], expect=0, path="resformer")
    steps = {r["step"]: r for r in read_log(out) if "train_loss" in r}  # the newest record of each step
    straight, _ = straight_and_resumed
    runs = [plot_runs.Run("vanilla", straight / "log.jsonl"), plot_runs.Run("res", out / "log.jsonl")]
    fig, axes = plot_runs.make_figure(runs, plot_runs.PANELS, "step", 0.9)
    check_layer_lines(axes["lambda"], "res (layers 1..2", list(range(1, 13)), lambda layer, s: steps[s]["resformer_lambdas"][layer])
    _, alone = plot_runs.make_figure(runs[:1], plot_runs.PANELS, "step", 0.9)
    assert "lambda" not in alone and "val" in alone
    # and no empty val panel when no run evaluated (this ResFormer run had no --val-data)
    _, no_val = plot_runs.make_figure(runs[1:], plot_runs.PANELS, "step", 0.9)
    assert "val" not in no_val and "lambda" in no_val


def test_mc_accuracies_in_the_panel_and_the_table(tmp_path, data, straight_and_resumed):
    """A run with two --eval-mc sets and no --val-data (its eval lines hold mc keys only): the mc
    panel draws each set's logged accuracy of the chosen metric, and the table has a column per
    set with the last value; a set named like the unnamed one's other metric cannot exist (the
    trainer refuses names starting with "norm" or "tokavg"), so the keys are read unambiguously."""
    from test_trainer_cli import successor_mc_examples, write_mc

    mcf = write_mc(tmp_path / "s.vpmc", successor_mc_examples(12))
    out = tmp_path / "mc"
    run(TINY_GPT2 + ["--train-data", data / "train_*.bin", "--max-steps", "6", "--lr", "1e-2", "--eval-every", "3",
                     "--eval-mc", mcf, "--eval-mc", f"hs={mcf}", "--out-dir", out], expect=0)
    evals = [r for r in read_log(out) if "mc_acc" in r]
    assert [r["step"] for r in evals] == [0, 3, 6] and not any("val_loss" in r for r in evals)
    straight, _ = straight_and_resumed
    runs = [plot_runs.Run("mc", out / "log.jsonl"), plot_runs.Run("plain", straight / "log.jsonl")]
    for metric in ("acc", "acc_norm", "acc_tokavg"):
        assert runs[0].mc_sets(metric) == [f"mc_{metric}", f"mc_{metric}_hs"]
        fig, axes = plot_runs.make_figure(runs, plot_runs.PANELS, "step", 0.9, mc_metric=metric)
        lines = axes["mc"].lines
        assert [l.get_label() for l in lines] == ["mc mc", "mc hs"]
        for line, key in zip(lines, [f"mc_{metric}", f"mc_{metric}_hs"]):
            np.testing.assert_array_equal(line.get_xdata(), [0, 3, 6])
            np.testing.assert_array_equal(line.get_ydata(), [r[key] for r in evals])
    _, alone = plot_runs.make_figure(runs[:1], plot_runs.PANELS, "step", 0.9)
    assert "val" not in alone and "mc" in alone  # no empty val panel for a run with mc evals only
    _, plain = plot_runs.make_figure(runs[1:], plot_runs.PANELS, "step", 0.9)
    assert "mc" not in plain
    rows = table_rows(plot(["mc=" + str(out), "plain=" + str(straight), "--table", "--mc-metric", "acc_tokavg"], expect=0).stdout)
    assert rows["mc"]["mc acc_tokavg"] == f"{evals[-1]['mc_acc_tokavg']:.4f}"
    assert rows["mc"]["hs acc_tokavg"] == f"{evals[-1]['mc_acc_tokavg_hs']:.4f}"
    assert rows["plain"]["hs acc_tokavg"] == "-" and rows["mc"]["val loss"] == "-"


def test_depth_panel_draws_each_layers_own_weight(tmp_path, data, straight_and_resumed):
    """A Depth-Attention run with a val set: the depth panel has one line per layer 1..L-1, the
    weight on the layer's own value at each evaluation, as logged; a vanilla run draws none."""
    out = tmp_path / "depth"
    args = [("3" if prev == "--layers" else a) for prev, a in zip([None] + COMMON, COMMON)]
    run(args + ["--train-data", data / "train_*.bin", "--val-data", data / "val_*.bin", "--depth-stride", "1",
                "--out-dir", out], expect=0, path="depth")
    evals = {r["step"]: r for r in read_log(out) if "depth_alpha" in r}
    assert sorted(evals) == [0, 4, 8, 12]
    straight, _ = straight_and_resumed
    runs = [plot_runs.Run("vanilla", straight / "log.jsonl"), plot_runs.Run("depth", out / "log.jsonl")]
    _, axes = plot_runs.make_figure(runs, plot_runs.PANELS, "step", 0.9)
    check_layer_lines(axes["depth"], "depth (layers 1..2", [0, 4, 8, 12], lambda layer, s: evals[s]["depth_alpha"][layer - 1][-1])
    _, alone = plot_runs.make_figure(runs[:1], plot_runs.PANELS, "step", 0.9)
    assert "depth" not in alone


def test_table_holds_the_logs_last_values(straight_and_resumed):
    straight, broken = straight_and_resumed
    p = plot(["a=" + str(straight), "b=" + str(broken / "log.jsonl"), "--table", "--baseline", "a"], expect=0)
    rows = table_rows(p.stdout)
    log = read_log(straight)
    steps = [r for r in log if "train_loss" in r]
    assert set(rows) == {"a", "b"}
    # default labels: a run directory's name, a .jsonl file's own name unless it is log.jsonl
    (broken / "copy.jsonl").write_text((broken / "log.jsonl").read_text())
    p2 = plot([straight, broken / "log.jsonl", broken / "copy.jsonl", "--table"], expect=0)
    assert set(table_rows(p2.stdout)) == {"straight", "broken", "copy"}
    for label in "ab":
        row = rows[label]
        assert row["path"] == "vanilla" and row["arch"] == "gpt2" and row["steps"] == "12/12" and row["tokens"] == "768"
        assert row["params"] == f"{log[0]['num_params']:,}"
        assert row["train loss"] == f"{steps[-1]['train_loss']:.4f}"
        assert row["val loss"] == f"{[r for r in log if 'val_loss' in r][-1]['val_loss']:.4f}"
        assert row["Δ val vs a"] == "+0.0000 @12"
    # ms/step: the median of every step but the first (warm-up)
    assert rows["a"]["ms/step"] == f"{statistics.median(r['ms'] for r in steps[1:]):.1f}"



def test_skipped_updates_are_marked_in_the_panels_and_counted_in_the_table(tmp_path, spiky_data):
    """A run with --skip-loss-z/--skip-norm-z: the table's steps cell counts the skipped updates,
    and the train loss and gradient norm panels put a cross on each, at the log's values."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "guarded"
    run(TINY_GPT2 + ["--batch-size", "4", "--lr", "1e-2", "--lr-schedule", "constant", "--max-steps", "60",
                     "--train-data", str(spiky_data / "train_*.bin"), "--skip-loss-z", "1", "--skip-norm-z", "1",
                     "--skip-window", "4", "--out-dir", out], expect=0)
    steps = [r for r in read_log(out) if "train_loss" in r]
    skipped = [r for r in steps if r.get("skipped") == 1]
    assert 0 < len(skipped) < len(steps)
    assert table_rows(plot([out, "--table"], expect=0).stdout)["guarded"]["steps"] == f"60/60 ({len(skipped)} skipped)"
    run_ = plot_runs.Run("guarded", out / "log.jsonl")
    fig, axes = plot_runs.make_figure([run_], plot_runs.PANELS, "step", 0.9)
    for panel, key in (("train", "train_loss"), ("norm", "grad_norm")):
        marks = [l for l in axes[panel].lines if l.get_label() == "guarded: update skipped"]
        assert len(marks) == 1 and marks[0].get_marker() == "x"
        np.testing.assert_array_equal(marks[0].get_xdata(), [r["step"] for r in skipped])
        np.testing.assert_array_equal(marks[0].get_ydata(), [r[key] for r in skipped])

def test_table_has_an_mfu_column_only_when_a_run_logged_mfu(straight_and_resumed, tmp_path):
    """The GPU build logs "mfu" per step where the device's peak is known (docs/formats.md): the
    table then gains an MFU column, the median over the steps after the first, in percent; a run
    without it shows "-". CPU logs have none, and no column."""
    straight, _ = straight_and_resumed
    assert "MFU" not in plot([straight, "--table"], expect=0).stdout
    lines = (straight / "log.jsonl").read_text().splitlines()
    gpu = tmp_path / "gpu.jsonl"  # the same log as a GPU run on a known device would write it
    fake_mfu = lambda step: 0.3 + 0.01 * step
    gpu.write_text("".join(
        (json.dumps({**json.loads(l), "mfu": fake_mfu(json.loads(l)["step"])}) if "train_loss" in l else l) + "\n" for l in lines))
    rows = table_rows(plot(["gpu=" + str(gpu), "cpu=" + str(straight), "--table"], expect=0).stdout)
    assert rows["gpu"]["MFU"] == f"{100 * statistics.median(fake_mfu(s) for s in range(2, 13)):.1f}%" == "37.0%"  # median step 7
    assert rows["cpu"]["MFU"] == "-"


def test_plot_file_is_written_whole_and_only_then_replaced(straight_and_resumed, tmp_path):
    straight, broken = straight_and_resumed
    out = tmp_path / "cmp.png"
    out.write_bytes(b"an older plot")
    p = plot([straight, broken, "--out", out], expect=0)
    assert f"plot: {out}" in p.stdout and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # as any new file, not mkstemp's private 0600
    svg = tmp_path / "cmp.svg"
    plot([f"first={straight}", f"second={broken}", "--out", svg, "--x", "time"], expect=0)
    text = svg.read_text()
    assert "first" in text and "second" in text and "training time" in text  # text kept as text
    # a damaged log: exit 1, and the existing plot is untouched, no temporary file left behind
    before = out.read_bytes()
    bad = tmp_path / "bad.jsonl"
    bad.write_text((straight / "log.jsonl").read_text().replace('"step":3,', '"step":3', 1))
    p = plot([straight, bad, "--out", out], expect=1)
    assert "bad.jsonl:" in p.stderr and "HINT" in p.stderr
    assert out.read_bytes() == before
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".plot_runs.")]
    # --table writes nothing
    plot([straight, "--table", "--out", tmp_path / "none.png"], expect=0)
    assert not (tmp_path / "none.png").exists()


def damaged(lines):
    """Each case: the log's lines -> lines of a damaged log, and the message it must give."""
    return [
        (lambda l: [], "is empty"),
        (lambda l: l[:2] + ["{not json"] + l[2:], ":3: not a JSON object"),
        (lambda l: l[1:], ":1: the first line is not a config line"),
        (lambda l: l + [l[0]], "two runs wrote to one log"),
        (lambda l: l[:2] + ['{"step":-4,"train_loss":1}'] + l[2:], "is not a step number"),
        (lambda l: l[:2] + ['{"stp":4,"loss":1}'] + l[2:], "neither a step nor an eval record"),
        (lambda l: [l[0].replace('"tokens_per_step"', '"tps"')] + l[1:], 'has no "tokens_per_step"'),
        (lambda l: l[:2] + ["[1, 2]"] + l[2:], ":3: not a JSON object"),
        (lambda l: l[:2] + ["[" * 100000 + "]" * 100000] + l[2:], ":3: not a JSON object"),  # nested past Python's stack
    ]


@pytest.mark.parametrize("case", range(9))
def test_damaged_log_is_a_clear_error(straight_and_resumed, tmp_path, case):
    straight, _ = straight_and_resumed
    lines = (straight / "log.jsonl").read_text().splitlines()
    change, message = damaged(lines)[case]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(l + "\n" for l in change(lines)))
    for args in ([bad, "--table"], [straight, bad, "--out", tmp_path / "x.png"]):
        p = plot(args, expect=1)
        assert message in p.stderr and "HINT" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr
    assert not (tmp_path / "x.png").exists()


def test_missing_runs_are_clear_errors(tmp_path):
    p = plot([tmp_path / "nowhere", "--table"], expect=1)
    assert "no run at" in p.stderr and "--out-dir" in p.stderr
    (tmp_path / "empty_dir").mkdir()
    p = plot([tmp_path / "empty_dir", "--table"], expect=1)
    assert "has no log.jsonl" in p.stderr


def test_missing_seed_runs_point_at_a_several_seed_comparison(tmp_path):
    """An unmatched runs/compare_paths/*@* (after a one-seed run) says where PATH@SEED runs come from."""
    p = plot([str(tmp_path / "*@*"), "--group", "--table"], expect=1)
    assert "no run at" in p.stderr
    assert 'HINT: PATH@SEED run directories come from a run over several seeds, SEEDS="1337 1338" bash scripts/compare_paths.sh' in p.stderr, p.stderr


def test_help_says_where_the_default_plot_goes():
    p = plot(["--help"], expect=0)
    assert "[plot.png, in the current directory]" in " ".join(p.stdout.split()), p.stdout


def test_incomplete_last_line_is_ignored_with_a_warning(straight_and_resumed, tmp_path):
    straight, _ = straight_and_resumed
    good = plot([f"r={straight}", "--table"], expect=0).stdout
    cut = tmp_path / "cut"
    cut.mkdir()
    text = (straight / "log.jsonl").read_text()
    (cut / "log.jsonl").write_text(text + '{"step":13,"train_loss":1.2')  # killed mid-line
    p = plot([f"r={cut}", "--table"], expect=0)
    assert "incomplete last line" in p.stderr
    assert p.stdout == good
    # the same text with a newline after it is damage, not a cut-off write
    (cut / "log.jsonl").write_text(text + '{"step":13,"train_loss":1.2\n')
    plot([f"r={cut}", "--table"], expect=1)


def test_run_without_steps_yet(straight_and_resumed, tmp_path):
    straight, _ = straight_and_resumed
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "log.jsonl").write_text((straight / "log.jsonl").read_text().splitlines()[0] + "\n")
    p = plot([fresh, "--table"], expect=0)
    assert "no step logged yet" in p.stderr and table_rows(p.stdout)["fresh"]["steps"] == "0/12"
    p = plot([fresh, "--out", tmp_path / "f.png"], expect=1)
    assert "nothing to plot" in p.stderr
    plot([fresh, straight, "--out", tmp_path / "f.png"], expect=0)
    assert (tmp_path / "f.png").exists()


@pytest.mark.parametrize("args, needle", [
    (["{s}", "{s}"], "two runs are labelled"),
    (["{s}", "--baseline", "nobody"], "--baseline 'nobody' is none of the runs' labels"),
    (["{s}", "--smooth", "1"], "--smooth must be in [0, 1)"),
    (["{s}", "--out", "x.jpg"], "--out must end in .png, .svg or .pdf"),
    (["{s}", "--panels", "train,bogus"], "--panels: unknown bogus"),
    (["{s}", "--loss-ylim", "4,3"], "--loss-ylim expects LO,HI"),
    (["{s}", "--x", "epochs"], "invalid choice: 'epochs'"),
])
def test_usage_errors(straight_and_resumed, args, needle):
    straight, _ = straight_and_resumed
    p = plot([a.format(s=straight) for a in args], expect=2)
    assert needle in p.stderr, p.stderr


def test_table_needs_no_matplotlib_and_a_plot_says_how_to_get_it(straight_and_resumed, tmp_path):
    straight, _ = straight_and_resumed
    hide = "import sys; sys.modules['matplotlib'] = None"  # import matplotlib now raises ImportError
    p = plot([straight, "--table"], expect=0, python_prefix=hide)
    assert table_rows(p.stdout)["straight"]["steps"] == "12/12"
    p = plot([straight, "--out", tmp_path / "p.png"], expect=1, python_prefix=hide)
    assert "needs matplotlib" in p.stderr and "pip install -r requirements.txt" in p.stderr


def stand_in_shards(shards):
    """A small stand-in for TinyShakespeare's shards in the directory `shards` (made if missing;
    kept if it exists): what compare_paths.sh looks for."""
    if not shards.exists():
        shards.mkdir(parents=True)
        write_shard(str(shards / "tinyshakespeare_train_000.bin"), pattern_tokens(4000, seed=1), 1)
        write_shard(str(shards / "tinyshakespeare_val_000.bin"), pattern_tokens(2000, seed=2), 1)
    return shards


def compare_paths(tmp_path, timeout=600, **settings):
    """Runs scripts/compare_paths.sh at 2 steps on a small stand-in for TinyShakespeare, with the
    given environment settings (PATHS, SEEDS, TASKS...). Returns (the process, OUT)."""
    shards = stand_in_shards(tmp_path / "ts")
    out = tmp_path / "cmp"
    # 2 val batches, not 16: the val loss is what the tables show, and most of a run's time; the
    # shards' vocabulary (64), not GPT-2's: its classifier was three quarters of each run's time
    env = {**os.environ, "STEPS": "2", "EVAL_BATCHES": "2", "VOCAB": "64", "DATA": str(shards), "OUT": str(out), "OMP_NUM_THREADS": "2",
           **settings}
    p = subprocess.run(["bash", str(REPO / "scripts" / "compare_paths.sh")], capture_output=True, text=True, env=env,
                       cwd=REPO, timeout=timeout)
    return p, out


def test_compare_paths_runs_every_path_and_tabulates_them(tmp_path):
    """scripts/compare_paths.sh at 2 steps on a small stand-in for TinyShakespeare."""
    p, out = compare_paths(tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = table_rows(p.stdout)
    assert set(rows) == set(PATHS)
    for path in PATHS:
        log = read_log(out / path)
        assert rows[path]["path"] == path and rows[path]["steps"] == "2/2"
        assert rows[path]["val loss"] == f"{[r for r in log if 'val_loss' in r][-1]['val_loss']:.4f}"
    assert rows["vanilla"]["Δ val vs vanilla"] == "+0.0000 @2"
    assert re.search(r"depth_stride=3", rows["depth"]["settings"])
    assert all(read_log(out / path)[0]["vocab"] == 64 for path in PATHS)  # VOCAB reached every trainer
    assert (tmp_path / "cmp.png").read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------------------
# seeds (--group)

def tables(stdout):
    """The markdown tables on stdout, in order, each as table_rows gives it."""
    blocks, current = [], []
    for line in stdout.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            blocks.append(table_rows("\n".join(current)))
            current = []
    return blocks


def test_student_t_quantiles_are_exact():
    """The 95% two-sided quantile of Student's t from the closed series, against what needs no
    series: df 1 (Cauchy: tan(0.475 pi)), df 2 (t / sqrt(t^2 + 2) = 0.95 solved), and df 1000 (the
    normal quantile plus the Cornish-Fisher terms in 1/df and 1/df^2, whose remainder is ~1e-9)."""
    assert plot_runs.student_t_quantile(0.95, 1) == pytest.approx(np.tan(0.475 * np.pi), rel=1e-12)
    assert plot_runs.student_t_quantile(0.95, 2) == pytest.approx(np.sqrt(2 * 0.95 ** 2 / (1 - 0.95 ** 2)), rel=1e-12)
    z, nu = statistics.NormalDist().inv_cdf(0.975), 1000
    cornish_fisher = z + (z ** 3 + z) / (4 * nu) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * nu ** 2)
    assert plot_runs.student_t_quantile(0.95, nu) == pytest.approx(cornish_fisher, abs=1e-7)


def test_student_t_matches_scipy():
    """Against scipy (requirements.txt, so CI runs it too): the series and the quantile at every df to 60."""
    stats = pytest.importorskip("scipy.stats")
    for df in range(1, 61):
        assert plot_runs.student_t_quantile(0.95, df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-12)
        for t in (0.05, 0.7, 2.0, 9.0):
            assert plot_runs.student_t_central(t, df) == pytest.approx(stats.t.cdf(t, df) - stats.t.cdf(-t, df), abs=1e-14)


def write_seed_log(directory, seed, path, train, val, lr=1e-3):
    """A two-step log.jsonl as the trainer writes it: config, steps 1-2, an eval at step 2."""
    directory.mkdir(parents=True)
    config = {"event": "config", "build": "cpu-fp32", "arch": "gpt2", "layers": 2, "dim": 16, "batch_size": 2, "seq_len": 8,
              "tokens_per_step": 16, "max_steps": 2, "lr": lr, "seed": seed, "num_params": 1000, "value_path": path,
              "train_data": "x_*.bin", "world": 1, "zero": 0}
    lines = [config, {"step": 1, "train_loss": train + 0.5, "lr": lr, "grad_norm": 1.0, "ms": 10.0, "tok_per_s": 1600.0},
             {"step": 2, "train_loss": train, "lr": lr, "grad_norm": 1.0, "ms": 10.0, "tok_per_s": 1600.0},
             {"step": 2, "val_loss": val}]
    (directory / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return directory


def test_seed_table_is_mean_sd_and_the_paired_difference(tmp_path):
    """Three seeds of two settings: each cell is numpy's mean and sample sd of the logged values,
    and the paired column is the mean of the same-seed differences with the df = 2 t interval."""
    val = {"vanilla": [4.10, 4.20, 4.15], "sla": [4.08, 4.21, 4.11]}
    train = {"vanilla": [3.9, 3.95, 3.92], "sla": [3.85, 3.97, 3.9]}
    args = []
    for name in val:
        for i, seed in enumerate((7, 8, 9)):
            d = write_seed_log(tmp_path / f"{name}{seed}", seed, name, train[name][i], val[name][i])
            args.append(f"{name}@{seed}={d}")
    p = plot(args + ["--group", "--baseline", "vanilla", "--table"], expect=0)
    runs, settings = tables(p.stdout)
    assert set(runs) == {f"{n}@{s}" for n in val for s in (7, 8, 9)}
    assert runs["sla@8"]["Δ val vs vanilla"] == f"{4.21 - 4.20:+.4f} @2"  # the same seed's run, not the first
    assert set(settings) == {"vanilla", "sla"}
    for name in val:
        row = settings[name]
        assert (row["runs"], row["seeds"], row["steps"]) == ("3", "7,8,9", "2")
        assert row["val loss"] == f"{np.mean(val[name]):.4f} ± {np.std(val[name], ddof=1):.4f}"
        assert row["train loss"] == f"{np.mean(train[name]):.4f} ± {np.std(train[name], ddof=1):.4f}"
    diffs = np.array(val["sla"]) - np.array(val["vanilla"])
    half = np.sqrt(2 * 0.95 ** 2 / (1 - 0.95 ** 2)) * np.std(diffs, ddof=1) / np.sqrt(3)  # t(0.975, df 2)
    sla = settings["sla"]
    assert sla["Δ val vs vanilla (paired)"] == f"{diffs.mean():+.4f} (n=3)"
    assert sla["95% CI"] == f"[{diffs.mean() - half:+.4f}, {diffs.mean() + half:+.4f}]"
    assert sla["lower in"] == "2/3"
    assert settings["vanilla"]["95% CI"] == "-"
    # one seed in common: the difference without an interval
    p = plot([args[0], args[3], "--group", "--baseline", "vanilla", "--table"], expect=0)
    assert tables(p.stdout)[1]["sla"]["Δ val vs vanilla (paired)"] == f"{4.08 - 4.10:+.4f} (n=1)"
    assert tables(p.stdout)[1]["sla"]["95% CI"] == "-"


def test_seed_groups_refuse_what_is_not_seeds_of_one_setting(tmp_path):
    a = write_seed_log(tmp_path / "a", 1, "vanilla", 3.9, 4.1)
    b = write_seed_log(tmp_path / "b", 2, "vanilla", 3.9, 4.1, lr=2e-3)
    c = write_seed_log(tmp_path / "c", 1, "vanilla", 3.9, 4.2)
    p = plot([f"v@1={a}", f"v@2={b}", "--group", "--table"], expect=2)
    assert "v@1 and v@2 differ in 'lr' (0.001 vs 0.002), not only in the seed" in p.stderr
    p = plot([f"v@1={a}", f"v@x={c}", "--group", "--table"], expect=2)
    assert "setting 'v' has seed 1 more than once" in p.stderr
    p = plot([f"v@1={a}", "--group", "--baseline", "v@1", "--table"], expect=2)
    assert "--baseline 'v@1' is none of the settings (v)" in p.stderr
    # without --group the labels are plain names and nothing is checked
    p = plot([f"v@1={a}", f"v@2={b}", "--baseline", "v@1", "--table"], expect=0)
    assert len(tables(p.stdout)) == 1


def test_seeds_of_a_setting_share_its_colour(tmp_path):
    pytest.importorskip("matplotlib")
    runs = [plot_runs.Run(f"{name}@{seed}", str(write_seed_log(tmp_path / f"{name}{seed}", seed, name, 3.9, 4.1 + seed / 100) / "log.jsonl"))
            for name in ("vanilla", "sla") for seed in (1, 2)]
    groups = plot_runs.group_runs(runs)
    _, axes = plot_runs.make_figure(runs, ["train", "delta"], "step", 0.0, baseline=groups["vanilla"], group=True)
    colours = [line.get_color() for line in axes["train"].lines]
    assert colours[0] == colours[1] != colours[2] == colours[3]
    assert [line.get_label() for line in axes["train"].lines if not line.get_label().startswith("_")] == ["vanilla", "sla"]
    deltas = [line.get_ydata()[-1] for line in axes["delta"].lines if line.get_marker() == "o"]  # not the zero line
    # sla@s against vanilla@s, whose val loss is the same per seed here (across seeds it differs by 0.01)
    assert deltas == pytest.approx([0.0, 0.0], abs=1e-12)


def test_compare_paths_over_seeds(tmp_path):
    """SEEDS with two seeds: every path once per seed, the per-run table, and the table over seeds
    whose paired difference is that of the logs."""
    p, out = compare_paths(tmp_path, PATHS="vanilla resformer", SEEDS="5 6")
    assert p.returncode == 0, p.stdout + p.stderr
    runs, settings = tables(p.stdout)
    assert set(runs) == {"vanilla@5", "vanilla@6", "resformer@5", "resformer@6"}
    final = {name: [r for r in read_log(out / name) if "val_loss" in r][-1]["val_loss"] for name in runs}
    assert read_log(out / "resformer@6")[0]["seed"] == 6
    assert settings["resformer"]["seeds"] == "5,6" and settings["resformer"]["runs"] == "2"
    diffs = [final[f"resformer@{s}"] - final[f"vanilla@{s}"] for s in (5, 6)]
    assert settings["resformer"]["Δ val vs vanilla (paired)"] == f"{np.mean(diffs):+.4f} (n=2)"
    assert final["vanilla@5"] != final["vanilla@6"]  # the seed reached the trainer
    p, _ = compare_paths(tmp_path, PATHS="vanilla resformer", SEEDS="5 x")
    assert p.returncode == 2 and "SEEDS holds 'x', not a seed" in p.stderr
    p, _ = compare_paths(tmp_path, PATHS="vanilla", VOCAB="50k")
    assert p.returncode == 2 and "VOCAB is '50k', not a vocabulary size" in p.stderr


@pytest.mark.parametrize("sig, to_group", [(signal.SIGTERM, False), (signal.SIGUSR1, False), (signal.SIGINT, True)],
                         ids=["sigterm_to_script", "sigusr1_to_script", "ctrl_c"])
def test_a_signal_stops_compare_paths_and_its_run(tmp_path, sig, to_group):
    """A SIGTERM or SIGUSR1 sent to compare_paths.sh alone, or a Ctrl-C (the foreground group),
    stops the run in progress after its step, with its checkpoint, and the script with 128 + the
    signal, before its next path. Until 2026-11-30 a SIGTERM ended the script and left its trainer
    running on alone (here for a million steps), and a Ctrl-C gave exit 1, "vanilla failed"."""
    shards = stand_in_shards(tmp_path / "ts")
    out = tmp_path / "cmp"
    env = {**os.environ, "STEPS": "1000000", "EVAL_BATCHES": "1", "VOCAB": "64", "DATA": str(shards), "OUT": str(out),
           "PATHS": "vanilla resformer", "OMP_NUM_THREADS": "1", "TRAINER": str(REPO / "build" / "{path}" / "train_cpu")}
    proc = subprocess.Popen(["bash", str(REPO / "scripts" / "compare_paths.sh")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=REPO, start_new_session=True)  # a terminal's foreground job
    try:
        deadline = time.time() + 60
        while time.time() < deadline and proc.poll() is None and logged_steps(out / "vanilla") < 2:
            time.sleep(0.01)
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, sig) if to_group else proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
        left = session_processes(proc.pid)  # the trainer ran on after the script, before the fix
        assert not left, f"still running after the script's exit: {left}\n{stderr[-2000:]}"
    finally:
        kill_session(proc.pid)
    assert proc.returncode == 128 + sig, f"exit {proc.returncode}\n{stdout[-2000:]}\n{stderr[-2000:]}"
    assert f"the vanilla run stopped on signal {int(sig)}" in stderr, stderr[-2000:]
    log = (Path(f"{out}.vanilla.log")).read_text()
    s = int(re.search(rf"stopped by {signal.Signals(sig).name} after step (\d+) of 1000000: saved", log).group(1))
    assert checkpoint_steps(out / "vanilla") == [s]
    assert not (out / "resformer").exists() and "== resformer" not in stderr


def test_a_signal_stops_compare_paths_even_where_its_run_then_exits_0(tmp_path):
    """A run that gets the signal as it ends its last step exits 0 (there is no step left to stop
    after): compare_paths.sh still stops there, with 128 + the signal, instead of starting its next
    path (scripts/forward_signals.sh). A stand-in trainer that exits 0 on SIGTERM plays that run."""
    shards = tmp_path / "ts"
    shards.mkdir()
    (shards / "tinyshakespeare_train_000.bin").write_bytes(b"")  # only looked for; the stand-in reads nothing
    fake = tmp_path / "trainer.sh"
    fake.write_text("#!/bin/bash\ntrap 'echo got SIGTERM; exit 0' TERM\necho started\nwhile :; do sleep 0.05; done\n")
    fake.chmod(0o755)
    out = tmp_path / "cmp"
    env = {**os.environ, "DATA": str(shards), "OUT": str(out), "PATHS": "vanilla resformer", "TRAINER": str(fake)}
    proc = subprocess.Popen(["bash", str(REPO / "scripts" / "compare_paths.sh")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=REPO, start_new_session=True)
    log = Path(f"{out}.vanilla.log")
    try:
        deadline = time.time() + 30
        while time.time() < deadline and proc.poll() is None and "started" not in (log.read_text() if log.exists() else ""):
            time.sleep(0.01)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        kill_session(proc.pid)
    assert "got SIGTERM" in log.read_text()
    assert proc.returncode == 128 + signal.SIGTERM, f"exit {proc.returncode}\n{stdout[-2000:]}\n{stderr[-2000:]}"
    assert "the vanilla run stopped on signal 15" in stderr and "== resformer" not in stderr, stderr[-2000:]


# ---------------------------------------------------------------------------
# hand-written logs: each case in a few lines, no trainer run

def write_log(directory, steps=2, evals=(2,), val=4.0, seed=1, path="vanilla", config=None, step_extra=None, eval_records=None):
    """A log.jsonl as the trainer writes it: the config line (updated by `config`), steps 1..steps
    (each updated by step_extra), and a val loss at each of `evals` (or eval_records as given)."""
    directory.mkdir(parents=True)
    c = {"event": "config", "arch": "gpt2", "layers": 2, "tokens_per_step": 16, "max_steps": 8, "seed": seed,
         "num_params": 1000, "value_path": path, "world": 1, **(config or {})}
    lines = [c] + [{"step": s, "train_loss": 5.0 - s / 10, "lr": 1e-3, "grad_norm": 1.0, "ms": 10.0, "tok_per_s": 1600.0,
                    **(step_extra or {})} for s in range(1, steps + 1)]
    lines += eval_records if eval_records is not None else [{"step": s, "val_loss": val} for s in evals]
    (directory / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return directory


def test_seed_table_refuses_runs_that_end_at_different_steps(tmp_path):
    """A mean over seeds, or a paired difference, is only over values of one step: a setting whose
    runs end (or last evaluated) at different steps, or whose last evaluation is not its baseline's,
    is refused with the runs and their steps named, before any table is printed."""
    base = [f"base@{s}={write_log(tmp_path / f'b{s}', seed=s, steps=4, evals=(2, 4))}" for s in (1, 2)]
    short = f"x@2={write_log(tmp_path / 'x2', seed=2, steps=2, evals=(2,))}"
    full = f"x@1={write_log(tmp_path / 'x1', seed=1, steps=4, evals=(2, 4), val=4.1)}"
    p = plot(base + [full, short, "--group", "--baseline", "base", "--table"], expect=1)
    assert "the runs of 'x' end at different steps (x@1 at step 4, x@2 at step 2)" in p.stderr
    assert p.stdout == "" and "Traceback" not in p.stderr and "HINT" in p.stderr
    # as long, but evaluated last at another step
    late = f"x@2={write_log(tmp_path / 'x2e', seed=2, steps=4, evals=(2,))}"
    p = plot(base + [full, late, "--group", "--table"], expect=1)
    assert "the runs of 'x' last evaluated val at different steps (x@1 at step 4, x@2 at step 2)" in p.stderr
    # a setting of equal runs, but shorter than its baseline: its Δ would be at another step
    s1, s2 = (f"x@{s}={write_log(tmp_path / f'xs{s}', seed=s, steps=2, evals=(2,))}" for s in (1, 2))
    p = plot(base + [s1, s2, "--group", "--baseline", "base", "--table"], expect=1)
    assert "'x' last evaluated val at step 2, its baseline 'base' at step 4" in p.stderr
    # without --baseline they stand on their own: one step per setting, shown in its column
    p = plot(base + [s1, s2, "--group", "--table"], expect=0)
    assert tables(p.stdout)[1]["x"]["steps"] == "2" and tables(p.stdout)[1]["base"]["steps"] == "4"


def test_runs_evaluated_on_other_data_are_not_compared(tmp_path):
    """val_data, eval_batches, eval_mc and init_from (newer trainers' config keys) must agree
    between seeds of a setting and between a run and its --baseline; a log without the key (an
    older trainer) is not refused for lacking it."""
    new = {"val_data": ["v_*.bin"], "eval_batches": 4, "eval_mc": [], "init_from": ""}
    a1 = write_log(tmp_path / "a1", seed=1, config=new)
    a2 = write_log(tmp_path / "a2", seed=2, config={**new, "val_data": ["web=w_*.bin"]})
    p = plot([f"a@1={a1}", f"a@2={a2}", "--group", "--table"], expect=2)
    assert "a@1 and a@2 differ in 'val_data' (['v_*.bin'] vs ['web=w_*.bin'])" in p.stderr
    b = write_log(tmp_path / "b", config={**new, "eval_batches": 8})
    p = plot([f"a={a1}", f"b={b}", "--baseline", "a", "--table"], expect=2)
    assert "--baseline: b and a differ in 'eval_batches' (8 vs 4)" in p.stderr and "Traceback" not in p.stderr
    # across settings under --group: the same seed's baseline run
    b1 = write_log(tmp_path / "b1", seed=1, config={**new, "init_from": "ckpt.bin"})
    p = plot([f"a@1={a1}", f"b@1={b1}", "--group", "--baseline", "a", "--table"], expect=2)
    assert "b@1 and a@1 differ in 'init_from' ('ckpt.bin' vs '')" in p.stderr
    # an old log (no such keys) beside a new one: unknown, so compared in nothing but the rest
    old = write_log(tmp_path / "old", seed=2)
    plot([f"a@1={a1}", f"a@2={old}", "--group", "--table"], expect=0)
    plot([f"a={a1}", f"o={old}", "--baseline", "a", "--table"], expect=0)


def test_null_values_are_nan_in_the_tables_and_gaps_in_the_curves(tmp_path):
    """The trainer writes null for a non-finite value: read as NaN, printed as nan (never '-', which
    means 'not logged'), a gap in a curve, and a nan Δ or statistic, never a traceback."""
    base = [write_log(tmp_path / f"b{s}", seed=s, val=4.0) for s in (1, 2)]
    nulls = write_log(tmp_path / "n1", seed=1, eval_records=[{"step": 2, "val_loss": None}],
                      step_extra={"train_loss": None})
    fine = write_log(tmp_path / "n2", seed=2, val=4.2)
    p = plot([f"b={base[0]}", f"n={nulls}", "--baseline", "b", "--table"], expect=0)
    row = table_rows(p.stdout)["n"]
    assert (row["train loss"], row["val loss"], row["Δ val vs b"]) == ("nan", "nan", "nan @2")
    args = [f"b@1={base[0]}", f"b@2={base[1]}", f"n@1={nulls}", f"n@2={fine}", "--group", "--baseline", "b"]
    p = plot(args + ["--table"], expect=0)
    n = tables(p.stdout)[1]["n"]
    assert (n["train loss"], n["val loss"], n["Δ val vs b (paired)"], n["95% CI"]) == ("nan", "nan", "nan (n=2)", "nan")
    assert "Traceback" not in p.stderr
    plot(args + ["--out", tmp_path / "n.png"], expect=0)
    # the EMA leaves a null out: a gap at its step, the values after it smoothed as if it were absent
    got = plot_runs.ema([1.0, float("nan"), 3.0], 0.5)
    assert np.isnan(got[1]) and got[0] == 1.0 and got[2] == pytest.approx(plot_runs.ema([1.0, 3.0], 0.5)[1])


@pytest.mark.parametrize("change, message", [
    (lambda t: t.split("\n")[0][:30], "no complete config line"),
    (lambda t: t + t.split("\n")[0][:-1] + ', "resumed_from": null}\n', '"resumed_from" is not a step number: None'),
    (lambda t: t + t.split("\n")[0][:-1] + ', "resumed_from": "x"}\n', "\"resumed_from\" is not a step number: 'x'"),
    (lambda t: t.replace(', "ms": 10.0', "", 1), ':2: a step line without "ms"'),
    (lambda t: t.replace('"tok_per_s": 1600.0}', '"tok_per_s": 1600.0, "resformer_lambdas": 0.5}', 1),
     ':2: "resformer_lambdas" is not a list'),
    (lambda t: t.replace('"tokens_per_step": 16', '"tokens_per_step": "16"'), "\"tokens_per_step\" is not a whole number: '16'"),
    (lambda t: t.replace('"num_params": 1000', '"num_params": null'), '"num_params" is not a whole number: None'),
    (lambda t: t.replace('"val_loss": 4.0', '"val_loss": [1, 2]'), ':4: "val_loss" is not a number'),
    # a TypeError (joining the table's cells, comparing world with 1) or an OverflowError (a 400-digit
    # integer meeting a float) used to come out as a traceback
    (lambda t: t.replace('"arch": "gpt2"', '"arch": 5', 1), ':1: the config line\'s "arch" is not a string: 5'),
    (lambda t: t.replace('"arch": "gpt2"', '"arch": ["gpt2"]', 1), ':1: the config line\'s "arch" is not a string: [\'gpt2\']'),
    (lambda t: t.replace('"world": 1', '"world": "2"', 1), ':1: the config line\'s "world" is not a whole number: \'2\''),
    (lambda t: t.replace('"world": 1', '"world": null', 1), ':1: the config line\'s "world" is not a whole number: None'),
    (lambda t: t.replace('"world": 1', '"world": 2, "zero": 1.5', 1), ':1: the config line\'s "zero" is not a whole number: 1.5'),
    (lambda t: t.replace('"tokens_per_step": 16', '"tokens_per_step": 1' + "0" * 400),
     ':1: the config line\'s "tokens_per_step" is not a whole number: 1000000000000000000000000000000000000000... (401 characters) (0 to 2^64 - 1)'),
    (lambda t: t.replace('"seed": 1', '"seed": 18446744073709551616', 1), ':1: the config line\'s "seed" is not a whole number: 18446744073709551616'),
    (lambda t: t.replace('"train_loss": 4.8', '"train_loss": 1' + "0" * 400), ':3: "train_loss" is not a number: 1000000000'),
    (lambda t: t.replace('"val_loss": 4.0', '"val_loss": -1' + "0" * 400), ':4: "val_loss" is not a number: -1000000000'),
    (lambda t: t.replace('{"step": 2, "val_loss"', '{"step": 1' + "0" * 400 + ', "val_loss"'), ':4: "step" is not a step number: 100000'),
])
def test_malformed_fields_are_clear_errors(tmp_path, change, message):
    d = write_log(tmp_path / "r")
    text = (d / "log.jsonl").read_text()
    assert change(text) != text  # the case really changes the log
    (d / "log.jsonl").write_text(change(text))
    p = plot([d, "--table"], expect=1)
    assert message in p.stderr and "log.jsonl" in p.stderr and "HINT" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_the_largest_counts_the_trainer_writes_are_read(tmp_path):
    """The bound on whole numbers is the trainer's (uint64: --seed 18446744073709551615 is logged as such)."""
    d = write_log(tmp_path / "r", config={"seed": 2**64 - 1, "world": 2, "zero": 3, "arch": "llama"})
    r = plot_runs.Run("r", str(d / "log.jsonl"))
    assert r.config["seed"] == 2**64 - 1 and r.settings() == {"world": 2, "zero": 3}
    row = table_rows(plot([f"r={d}", "--table"], expect=0).stdout)["r"]
    assert (row["arch"], row["settings"]) == ("llama", "world=2, zero=3")


def test_panels_that_apply_to_no_run_are_a_usage_error(tmp_path):
    pytest.importorskip("matplotlib")
    d = write_log(tmp_path / "v")
    for panels, why in [("delta", "delta: it needs --baseline"),
                        ("lambda,mc", "lambda: no run logs ResFormer's learnable lambdas; mc: no run logs --eval-mc")]:
        p = plot([d, "--panels", panels, "--out", tmp_path / "p.png"], expect=2)
        assert why in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "p.png").exists()
    # one of them applying is enough: the others are left out as before
    plot([d, "--panels", "delta,train", "--out", tmp_path / "p.png"], expect=0)


def test_delta_column_is_on_the_baselines_first_set(tmp_path):
    """Every Δ in the column (and the panel) is on one set, the baseline's first, named in the header;
    a run that did not evaluate that set gets '-', not its Δ on some other set."""
    def sets(web, code):
        return [{"step": 2, **({"val_loss_web": web} if web is not None else {}), "val_loss_code": code}]
    base = write_log(tmp_path / "base", eval_records=sets(4.0, 6.0))
    both = write_log(tmp_path / "both", eval_records=sets(4.1, 6.3))
    code_only = write_log(tmp_path / "code", eval_records=sets(None, 5.5))
    p = plot([base, both, code_only, "--baseline", "base", "--table"], expect=0)
    rows = table_rows(p.stdout)
    assert rows["both"]["Δ val web vs base"] == "+0.1000 @2"
    assert rows["code"]["Δ val web vs base"] == "-"
    pytest.importorskip("matplotlib")
    runs = [plot_runs.Run(d.name, str(d / "log.jsonl")) for d in (base, both, code_only)]
    _, axes = plot_runs.make_figure(runs, ["delta"], "step", 0.0, baseline=runs[0])
    assert axes["delta"].get_title() == "val web loss − base's"
    assert [list(line.get_ydata()) for line in axes["delta"].lines if line.get_marker() == "o"] == [pytest.approx([0.1])]


def test_tokens_and_minutes_are_running_sums(tmp_path):
    """--x tokens/time: a gap in the steps counts with the next logged step's tokens per step;
    minutes add the steps' own ms (a null ms adds nothing)."""
    d = write_log(tmp_path / "r", steps=5)
    lines = (d / "log.jsonl").read_text().splitlines()
    del lines[3]  # step 3 missing
    lines[3] = lines[3].replace('"ms": 10.0', '"ms": null')  # step 4 (now the 4th line)
    (d / "log.jsonl").write_text("\n".join(lines) + "\n")
    r = plot_runs.Run("r", str(d / "log.jsonl"))
    assert [r.tokens_at(s) for s in (0, 1, 2, 3, 4, 5, 7)] == [0, 16, 32, 48, 64, 80, 112]
    assert [r.minutes_at(s) * 60000 for s in (0, 1, 3, 4, 5)] == pytest.approx([0, 10, 20, 20, 30])


def test_compare_paths_creates_its_output_directory(tmp_path):
    """On a fresh checkout runs/ does not exist: OUT's parent is made before the first log goes beside it."""
    out = tmp_path / "fresh" / "runs" / "cmp"
    shards = stand_in_shards(tmp_path / "ts")
    # a trainer that fails at once (no make: TRAINER is not a build/ path): the error names a log that exists
    env = {**os.environ, "STEPS": "2", "EVAL_BATCHES": "1", "DATA": str(shards), "OUT": str(out), "PATHS": "vanilla",
           "TRAINER": "false"}
    p = subprocess.run(["bash", str(REPO / "scripts" / "compare_paths.sh")], capture_output=True, text=True, env=env,
                       cwd=REPO, timeout=60)
    assert p.returncode == 1 and f"see {out}.vanilla.log" in p.stderr, p.stderr
    assert (tmp_path / "fresh" / "runs" / "cmp.vanilla.log").is_file()
    # the real trainer (built already; an absolute path runs no make) writes its run there
    env["TRAINER"] = str(REPO / "build" / "{path}" / "train_cpu")
    p = subprocess.run(["bash", str(REPO / "scripts" / "compare_paths.sh")], capture_output=True, text=True, env=env,
                       cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert table_rows(p.stdout)["vanilla"]["steps"] == "2/2"


def test_an_eval_at_the_step_a_run_resumed_from_is_kept(tmp_path, data):
    """A run resumed from a checkpoint at a step that was also evaluated does not evaluate that
    step again (its evaluations start after it): the interrupted segment's eval at that step is
    the run's, and the spliced curve is the straight run's, eval for eval."""
    args = COMMON[:-2] + ["--checkpoint-every", "4", "--train-data", data / "train_*.bin", "--val-data", data / "val_*.bin"]
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    run(args + ["--out-dir", straight], expect=0)
    run(args + ["--out-dir", broken], expect=0)
    (broken / "ckpt_00000012.bin").unlink()
    run(args + ["--out-dir", broken, "--resume", "1"], expect=0)
    log = read_log(broken)
    resumed_at = [i for i, r in enumerate(log) if "resumed_from" in r][0]
    resumed_evals = [r["step"] for r in log[resumed_at:] if "val_loss" in r]
    assert resumed_evals == [12]  # the resumed segment did not evaluate step 8 again
    a, b = plot_runs.Run("a", straight / "log.jsonl"), plot_runs.Run("b", broken / "log.jsonl")
    assert b.val_curve("val_loss") == a.val_curve("val_loss") and a.val_curve("val_loss")[0] == [0, 4, 8, 12]


def test_tokens_follow_each_segments_tokens_per_step(tmp_path):
    """A run resumed with another --total-batch-tokens: each step counts with the tokens per step
    of the segment that logged it, before and after the change (16 to 32 from step 5 on)."""
    d = write_log(tmp_path / "r", steps=4, evals=())
    with open(d / "log.jsonl", "a") as f:
        f.write(json.dumps({"event": "config", "arch": "gpt2", "layers": 2, "tokens_per_step": 32, "max_steps": 8, "seed": 1,
                            "num_params": 1000, "value_path": "vanilla", "world": 1, "resumed_from": 4}) + "\n")
        for s in range(5, 9):
            f.write(json.dumps({"step": s, "train_loss": 4.0, "lr": 1e-3, "grad_norm": 1.0, "ms": 10.0, "tok_per_s": 3200.0}) + "\n")
    r = plot_runs.Run("r", str(d / "log.jsonl"))
    assert [r.tokens_at(s) for s in range(0, 9)] == [0, 16, 32, 48, 64, 96, 128, 160, 192]


def test_the_tables_medians_leave_a_null_out_and_settings_name_only_what_differs(tmp_path):
    """ms/step and tok/s are medians of the finite values (a null ms among them must not move the
    median to wherever a NaN sorts), over the steps after each segment's first; the settings column
    names world and zero only for a data-parallel run."""
    d = write_log(tmp_path / "one", steps=6, evals=())
    lines = (d / "log.jsonl").read_text().splitlines()
    for step, ms in [(2, 12.0), (3, None), (4, 30.0), (5, 14.0), (6, 13.0)]:  # step 1 is warm-up: left out
        lines[step] = lines[step].replace('"ms": 10.0', f'"ms": {json.dumps(ms)}')
    (d / "log.jsonl").write_text("\n".join(lines) + "\n")
    two = write_log(tmp_path / "two", config={"world": 2, "zero": 1})
    rows = table_rows(plot([f"one={d}", f"two={two}", "--table"], expect=0).stdout)
    assert rows["one"]["ms/step"] == f"{statistics.median([12.0, 30.0, 14.0, 13.0]):.1f}"
    assert rows["one"]["settings"] == "-" and rows["two"]["settings"] == "world=2, zero=1"


def test_lower_in_counts_only_seeds_strictly_below_the_baseline(tmp_path):
    """"lower in": the seeds whose val loss is below the baseline's of the same seed; a tie is not
    lower."""
    args = []
    for name, vals in {"vanilla": [4.10, 4.20], "sla": [4.05, 4.20]}.items():
        for seed, v in zip((7, 8), vals):
            args.append(f"{name}@{seed}={write_seed_log(tmp_path / f'{name}{seed}', seed, name, 3.9, v)}")
    p = plot(args + ["--group", "--baseline", "vanilla", "--table"], expect=0)
    assert tables(p.stdout)[1]["sla"]["lower in"] == "1/2"
