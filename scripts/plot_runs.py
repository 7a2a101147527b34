#!/usr/bin/env python3
"""Plot and tabulate training runs from their log.jsonl, to compare value paths or settings.

    python scripts/plot_runs.py runs/compare_paths/*                       # ./plot.png + a table
    python scripts/plot_runs.py base=runs/a sla=runs/b --x tokens --baseline base --out cmp.svg
    python scripts/plot_runs.py runs/a runs/b --table                      # the table only

A RUN is a run directory (the --out-dir of a trainer, holding log.jsonl) or a .jsonl file, and
NAME=RUN labels it (default label: the directory's name, or a .jsonl file's own name unless it
is log.jsonl). The log format is host/logger.h's: a
config line, then one line per optimizer step and one per evaluation. A resumed run appends a
config line with "resumed_from": S; the steps and evals after S logged before the interruption
are superseded by the resumed ones, so the curves are those of an uninterrupted run (for
valuepath's bit-exact resume, identical to them).

Seeds (--group): runs labelled SETTING@SEED (vanilla@1337, vanilla@1338, ...) are one setting
under several --seed values; their configs must agree but for the seed, and they must end (and
last evaluate) at one step, which the table shows: a mean of step-2 and step-4 losses, or a
paired difference at another step than the setting's, is refused (exit 1). A second table gives each
setting's mean and standard deviation over its seeds and, with --baseline SETTING, the paired
difference of the final val loss against the baseline's run of the same seed (the same init of
every shared tensor and the same data order): its mean, a 95% Student-t interval, and in how
many seeds it is lower. The plot draws all seeds of a setting in its colour.

    python scripts/plot_runs.py vanilla@1=runs/v1 vanilla@2=runs/v2 sla@1=runs/s1 sla@2=runs/s2 --group --baseline vanilla

The table (markdown, on stdout) needs only the standard library; the plot needs matplotlib
(requirements.txt). Panels: train loss (smoothed by a debiased EMA, raw behind it), val loss
(every named set, where a run evaluated), learning rate, gradient norm, throughput, with --baseline each run's val
loss minus the baseline's at the steps both evaluated (on the baseline's first val set, for every
run; the column names it), for ResFormer runs with learnable
lambdas (--resformer-lambda learn) each layer's lambda (layers 1..L-1; layer 0's never moves),
for runs with --eval-mc (HellaSwag, ...) each set's accuracy (--mc-metric picks which of the
three the trainer logs; the table has a column per set), and for Depth-Attention runs with val
sets the weight each layer puts on its own value at each evaluation (1 - that is what it reads
from its anchors).
Runs whose configs (newer trainers') say they were evaluated on other val data, batches or
--eval-mc sets, or started from another --init-from, are not compared (exit 2). A value the log
holds as null (the trainer's word for a non-finite one) is nan in the tables and a gap in a curve.
The file is written under a temporary name and renamed, so an existing plot is replaced only by
a complete one.

Exit codes as the trainers: 0 success, 1 a missing or damaged log, 2 a usage error.
"""
import argparse
import bisect
import json
import math
import os
import statistics
import sys
import tempfile

PANELS = ["train", "val", "lr", "norm", "speed", "delta", "lambda", "mc", "depth"]
MC_METRICS = ("acc", "acc_norm", "acc_tokavg")  # host/mc_eval.h
X_AXES = {"step": "optimizer step", "tokens": "tokens", "time": "training time (min, evals excluded)"}
PATH_SETTING_PREFIXES = ("resformer", "sla", "depth")


class LogError(Exception):
    """A run whose log cannot be read: exit 1 with this message, and `hint` where one fits better
    than the general one."""

    def __init__(self, message, hint=None):
        super().__init__(message)
        self.hint = hint


def fail(message, hint, code):
    print(f"error: {message}\n---> HINT: {hint}", file=sys.stderr)
    sys.exit(code)


def warn(message):
    print(f"warning: {message}", file=sys.stderr)


def ema(values, weight):
    """Exponential moving average, debiased as Adam's moments are: with a = weight,
    s_t = a s_{t-1} + (1 - a) x_t from s_{-1} = 0, reported as s_t / (1 - a^(t+1)).
    weight 0 returns the values unchanged. (TensorBoard's smoothing slider, without its
    time-gap rescaling: every logged step counts as one.) A NaN (a null in the log) stays NaN,
    a gap in the curve, and is left out of the average: one bad value must not blank the rest."""
    out, s, t = [], 0.0, 0
    for x in values:
        if not math.isfinite(x):
            out.append(x)
            continue
        s = weight * s + (1.0 - weight) * x
        t += 1
        out.append(s / (1.0 - weight ** t) if weight > 0 else x)
    return out


def is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# The trainer writes its counts as C++ integers of at most 64 bits (seed %llu, num_params %zu). A
# JSON integer has no bound: one of 400 digits is damage, and would be an OverflowError where it
# meets a float (the x axis, a plot).
COUNT_LIMIT = 2**64


def is_count(x):
    """A whole number 0 <= x < 2^64 (JSON's true and false are not one, though Python's bool is an int)."""
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < COUNT_LIMIT


def shown(x):
    """repr(x) for a message, cut short: a damaged field may hold a 400-digit number."""
    r = repr(x)
    return r if len(r) <= 60 else f"{r[:40]}... ({len(r)} characters)"


# the fields of a step line (host/logger.h logger_step writes all five on every step)
STEP_KEYS = ("train_loss", "lr", "grad_norm", "ms", "tok_per_s")
# config fields that must be whole numbers (the x axis, the table's columns and splicing use them)
CONFIG_INTS = ("tokens_per_step", "num_params", "max_steps")
# ... and those that must be whole numbers where present (the settings column and --group use them;
# older trainers do not write world and zero)
CONFIG_OPTIONAL_INTS = ("world", "zero", "seed")


class Run:
    """One run's log with resumed segments spliced: the newest record of every step."""

    def __init__(self, label, log_path):
        self.label = label
        self.log_path = log_path
        self.config = None           # the newest config line
        self.steps = {}              # step -> step record (train_loss, lr, grad_norm, ms, tok_per_s)
        self.evals = {}              # step -> eval record (val_loss, val_loss_NAME...)
        self.tokens_per_step = {}    # step -> tokens per step of the segment that logged it
        self.segment_first = set()   # the first step each segment logged (its ms includes warm-up)
        self._cumulative = None      # (steps, tokens, minutes) running sums for tokens_at/minutes_at
        self._read()
        if self.config is None:
            # the first line was cut off mid-write (a run killed at its start): nothing to read
            raise LogError(f"{self.log_path}: no complete config line (the run was killed while writing its first line?); "
                           "re-run it, or leave it out")

    def _read(self):
        try:
            with open(self.log_path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise LogError(f"cannot read {self.log_path}: {e.strerror}")
        if not raw.strip():
            raise LogError(f"{self.log_path} is empty (the run wrote nothing yet?)")
        lines = raw.split(b"\n")
        ends_complete = raw.endswith(b"\n")
        if ends_complete:
            lines.pop()
        segment_first_pending = False
        for number, line in enumerate(lines, start=1):
            last = number == len(lines)
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise ValueError("not an object")
            except (ValueError, UnicodeDecodeError, RecursionError) as e:  # (JSON nested past the stack)
                if last and not ends_complete:
                    # a run killed while writing its newest line: everything before it stands
                    warn(f"{self.log_path}:{number}: ignoring an incomplete last line (a run killed while writing it?)")
                    break
                raise LogError(f"{self.log_path}:{number}: not a JSON object ({e}); the log is damaged: "
                               f"delete that line to plot the rest")
            if number == 1 and record.get("event") != "config":
                raise LogError(f"{self.log_path}:1: the first line is not a config line; is this a valuepath log.jsonl?")
            if record.get("event") == "config":
                self._start_segment(record, number)
                segment_first_pending = True
            elif "event" in record:
                continue  # an event this script does not know: written by a newer trainer
            elif "train_loss" in record:
                step = self._step_of(record, number)
                self._check_step(record, number)
                self.steps[step] = record
                self.tokens_per_step[step] = self.config["tokens_per_step"]
                if segment_first_pending:
                    self.segment_first.add(step)
                    segment_first_pending = False
            elif any(k == "val_loss" or k.startswith(("val_loss_", "mc_acc")) for k in record):
                step = self._step_of(record, number)
                self._check_eval(record, number)
                self.evals[step] = record
            else:
                raise LogError(f"{self.log_path}:{number}: neither a step nor an eval record: {line[:120]!r}")

    def _start_segment(self, record, number):
        for key in ("tokens_per_step", "num_params", "value_path", "max_steps"):
            if key not in record:
                raise LogError(f"{self.log_path}:{number}: the config line has no \"{key}\"; "
                               "was it written by an older trainer? re-run it, or add the field by hand")
        for key in CONFIG_INTS + tuple(k for k in CONFIG_OPTIONAL_INTS if k in record):
            if not is_count(record[key]):
                raise LogError(f"{self.log_path}:{number}: the config line's \"{key}\" is not a whole number: "
                               f"{shown(record[key])} (0 to 2^64 - 1); the log is damaged: fix that field by hand")
        for key in ("value_path", "arch"):
            if key in record and not isinstance(record[key], str):  # value_path is there (checked above)
                raise LogError(f"{self.log_path}:{number}: the config line's \"{key}\" is not a string: "
                               f"{shown(record[key])}; the log is damaged: fix that field by hand")
        if number > 1:
            if "resumed_from" not in record:
                raise LogError(f"{self.log_path}:{number}: a second config line without \"resumed_from\": "
                               "two runs wrote to one log; split the file at that line")
            resumed = record["resumed_from"]
            if not is_count(resumed):
                raise LogError(f"{self.log_path}:{number}: \"resumed_from\" is not a step number: {shown(resumed)}; "
                               "the log is damaged: split the file at that line")
            # what the interrupted segment logged after its checkpoint is replaced by the resumed one
            self.steps = {s: r for s, r in self.steps.items() if s <= resumed}
            self.evals = {s: r for s, r in self.evals.items() if s <= resumed}
            self.tokens_per_step = {s: t for s, t in self.tokens_per_step.items() if s <= resumed}
            self.segment_first = {s for s in self.segment_first if s <= resumed}
        self.config = record

    def _numbers(self, record, number, key, value):
        """value as a float, null read as NaN (the trainer writes null for a non-finite value)."""
        if value is None:
            return math.nan
        try:
            if not is_number(value):
                raise TypeError
            return float(value)
        except (TypeError, OverflowError):  # OverflowError: an integer past float's range (400 digits)
            raise LogError(f"{self.log_path}:{number}: \"{key}\" is not a number: {shown(value)}; "
                           "the log is damaged: delete that line to plot the rest") from None

    def _check_step(self, record, number):
        """Type-check a step line in place: the five fields present and numbers (null -> NaN)."""
        for key in STEP_KEYS:
            if key not in record:
                raise LogError(f"{self.log_path}:{number}: a step line without \"{key}\"; "
                               "the log is damaged: delete that line to plot the rest")
            record[key] = self._numbers(record, number, key, record[key])
        if "mfu" in record:
            record["mfu"] = self._numbers(record, number, "mfu", record["mfu"])
        if "resformer_lambdas" in record:
            lambdas = record["resformer_lambdas"]
            if not isinstance(lambdas, list):
                raise LogError(f"{self.log_path}:{number}: \"resformer_lambdas\" is not a list: {lambdas!r}; "
                               "the log is damaged: delete that line to plot the rest")
            record["resformer_lambdas"] = [self._numbers(record, number, "resformer_lambdas", x) for x in lambdas]

    def _check_eval(self, record, number):
        """Type-check an eval line in place: losses and accuracies numbers (null -> NaN),
        depth_alpha a list of non-empty lists of numbers."""
        for key in list(record):
            if key == "val_loss" or key.startswith(("val_loss_", "mc_")):
                record[key] = self._numbers(record, number, key, record[key])
        if "depth_alpha" in record:
            rows = record["depth_alpha"]
            if not isinstance(rows, list) or not all(isinstance(row, list) and row for row in rows):
                raise LogError(f"{self.log_path}:{number}: \"depth_alpha\" is not a list of rows: {rows!r}; "
                               "the log is damaged: delete that line to plot the rest")
            record["depth_alpha"] = [[self._numbers(record, number, "depth_alpha", x) for x in row] for row in rows]

    def _step_of(self, record, number):
        step = record.get("step")
        if not is_count(step):
            raise LogError(f"{self.log_path}:{number}: \"step\" is not a step number: {shown(step)}; "
                           "the log is damaged: delete that line to plot the rest")
        return step

    @property
    def group(self):
        """The setting a run belongs to under --group: its label before the last '@'."""
        return self.label.rsplit("@", 1)[0] if "@" in self.label else self.label

    # ---- the series, ordered by step

    def step_numbers(self):
        return sorted(self.steps)

    def skipped_steps(self):
        """Steps whose update --skip-loss-z/--skip-norm-z left out ("skipped": 1), ascending."""
        return [s for s in self.step_numbers() if self.steps[s].get("skipped")]

    def series(self, key):
        return [self.steps[s][key] for s in self.step_numbers()]

    def cumulative(self):
        """(logged steps, tokens after each, minutes after each): running sums built once, so
        that --x tokens/time costs one pass over the log, not one per point (quadratic on a long run)."""
        if self._cumulative is None:
            steps, tokens, minutes = self.step_numbers(), [], []
            total, ms, previous = 0, 0.0, 0
            for s in steps:
                total += (s - previous) * self.tokens_per_step[s]
                previous = s
                ms += self.steps[s]["ms"] if math.isfinite(self.steps[s]["ms"]) else 0.0  # a null ms: no time known, none added
                tokens.append(total)
                minutes.append(ms / 60000.0)
            self._cumulative = (steps, tokens, minutes)
        return self._cumulative

    def tokens_at(self, step):
        """Tokens trained on after `step` optimizer steps. Steps missing from the log (none, for a
        complete one) count with the tokens per step of the next logged step."""
        steps, tokens, _ = self.cumulative()
        i = bisect.bisect_right(steps, step)
        total, previous = (tokens[i - 1], steps[i - 1]) if i else (0, 0)
        return total + (step - previous) * self.config["tokens_per_step"]

    def minutes_at(self, step):
        """Training time (the steps' own ms, no evals or checkpoints) up to `step`, in minutes."""
        steps, _, minutes = self.cumulative()
        i = bisect.bisect_right(steps, step)
        return minutes[i - 1] if i else 0.0

    def x_of(self, steps, axis):
        if axis == "step":
            return list(steps)
        if axis == "tokens":
            return [self.tokens_at(s) for s in steps]
        return [self.minutes_at(s) for s in steps]

    def lambda_layers(self):
        """How many lambdas the step records carry (ResFormer, learnable lambdas), else 0."""
        steps = self.step_numbers()
        return len(self.steps[steps[-1]].get("resformer_lambdas", [])) if steps else 0

    def lambda_curve(self, layer):
        """(steps, lambda of `layer`) over the steps that logged lambdas."""
        steps = [s for s in self.step_numbers() if len(self.steps[s].get("resformer_lambdas", [])) > layer]
        return steps, [self.steps[s]["resformer_lambdas"][layer] for s in steps]

    def val_sets(self):
        """The val keys in the order the log gives them: "val_loss", "val_loss_NAME"..."""
        keys = []
        for s in sorted(self.evals):
            for k in self.evals[s]:
                if (k == "val_loss" or k.startswith("val_loss_")) and k not in keys:
                    keys.append(k)
        return keys

    def depth_layers(self):
        """How many layers 1..L-1 the evaluations' depth_alpha rows cover (Depth-Attention), else 0."""
        rows = [self.evals[s]["depth_alpha"] for s in sorted(self.evals) if "depth_alpha" in self.evals[s]]
        return len(rows[-1]) if rows else 0

    def depth_own_curve(self, layer):
        """(eval steps, the weight layer `layer` (1-based) puts on its own value) from depth_alpha."""
        steps = [s for s in sorted(self.evals) if len(self.evals[s].get("depth_alpha", [])) >= layer]
        return steps, [self.evals[s]["depth_alpha"][layer - 1][-1] for s in steps]

    def mc_sets(self, metric):
        """The --eval-mc keys of one metric in log order: "mc_acc_norm", "mc_acc_norm_NAME"..."""
        key, keys = "mc_" + metric, []
        for s in sorted(self.evals):
            for k in self.evals[s]:
                # mc_acc_NAME must not take mc_acc_norm or mc_acc_tokavg for a set's name
                other = any(k.startswith("mc_" + m) for m in MC_METRICS if len(m) > len(metric) and m.startswith(metric))
                if (k == key or k.startswith(key + "_")) and not other and k not in keys:
                    keys.append(k)
        return keys

    def val_curve(self, key):
        steps = [s for s in sorted(self.evals) if key in self.evals[s]]
        return steps, [self.evals[s][key] for s in steps]

    def settings(self):
        c = self.config
        out = {k: v for k, v in c.items() if k.startswith(PATH_SETTING_PREFIXES)}
        if c.get("world", 1) > 1:
            out.update(world=c["world"], zero=c.get("zero", 0))
        return out


def load_runs(specs):
    runs = []
    for spec in specs:
        label, path = None, spec
        if not os.path.exists(spec) and "=" in spec:
            label, path = spec.split("=", 1)
        if os.path.isdir(path):
            log = os.path.join(path, "log.jsonl")
            if not os.path.isfile(log):
                raise LogError(f"{path} has no log.jsonl (a trainer writes it where --out-dir points)")
        elif os.path.isfile(path):
            log = path
        else:
            # an unmatched glob like runs/compare_paths/*@* reaches here as itself
            seeds_hint = ("PATH@SEED run directories come from a run over several seeds, "
                          "SEEDS=\"1337 1338\" bash scripts/compare_paths.sh; a plain run writes runs/compare_paths/PATH"
                          if "@" in path else None)
            raise LogError(f"no run at {path}: give a run directory (the trainer's --out-dir) or its log.jsonl",
                           seeds_hint)
        if label is None:  # the run directory's name; a log not called log.jsonl by its own name
            if os.path.basename(log) == "log.jsonl":
                label = os.path.basename(os.path.dirname(os.path.abspath(log)))
            else:
                label = os.path.splitext(os.path.basename(log))[0]
        runs.append(Run(label, log))
    labels = [r.label for r in runs]
    for label in labels:
        if labels.count(label) > 1:
            fail(f"two runs are labelled '{label}'", "name them: NAME=RUN, e.g. a=runs/x/vanilla b=runs/y/vanilla", 2)
    return runs


# ---------------------------------------------------------------------------
# the table

def baseline_run_for(run, baseline):
    """The run that `run` is compared with: the baseline run itself, or (--group, where the
    baseline is a setting's runs) that setting's run of the same seed; None if there is none."""
    if baseline is None or isinstance(baseline, Run):
        return baseline
    return same_seed_run(run, baseline)


def baseline_label(baseline):
    return baseline.label if isinstance(baseline, Run) else baseline[0].group


def baseline_key(baseline):
    """The val set every Δ is taken on: the baseline's first (with --group, that of the first of
    its runs that has one). One set for the whole column and panel, so that no two runs' Δ are on
    different data; None where the baseline has no val set."""
    runs = [baseline] if isinstance(baseline, Run) else (baseline or [])
    return next((r.val_sets()[0] for r in runs if r.val_sets()), None)


def set_name(key):
    """"val_loss" -> "val", "val_loss_NAME" -> "val NAME": how headers and titles name a set."""
    return key.replace("val_loss_", "val ").replace("val_loss", "val")


def baseline_delta(run, base, key):
    """(steps, run's val loss - base's) on val set `key` at the steps where both evaluated it;
    ([], []) without a base, or where either has not evaluated that set."""
    if base is None or key is None or key not in run.val_sets() or key not in base.val_sets():
        return [], []
    steps, losses = run.val_curve(key)
    base_steps, base_losses = base.val_curve(key)
    base_at = dict(zip(base_steps, base_losses))
    common = [(s, l - base_at[s]) for s, l in zip(steps, losses) if s in base_at]
    return [s for s, _ in common], [d for _, d in common]


def fmt(x, spec):
    # a NaN (a null in the log: a non-finite value) prints as nan, never as a missing '-'
    return "-" if x is None else "nan" if not math.isfinite(x) else format(x, spec)


def mc_label(key, metric):
    """mc_acc_norm_hellaswag -> "hellaswag acc_norm"; mc_acc_norm -> "mc acc_norm"."""
    name = key[len("mc_" + metric):].lstrip("_")
    return f"{name or 'mc'} {metric}"


def table(runs, baseline=None, mc_metric="acc_norm"):
    """Markdown: one row per run; floats as the log holds them, rounded for reading."""
    val_keys, mc_keys = [], []
    for r in runs:
        val_keys += [k for k in r.val_sets() if k not in val_keys]
        mc_keys += [k for k in r.mc_sets(mc_metric) if k not in mc_keys]
    head = ["run", "path", "arch", "params", "steps", "tokens", "train loss"]
    head += [k.replace("val_loss_", "val ").replace("val_loss", "val loss") for k in val_keys]
    head += [mc_label(k, mc_metric) for k in mc_keys]
    delta_key = baseline_key(baseline) if baseline else None
    if baseline:
        head += [f"Δ {set_name(delta_key or 'val_loss')} vs {baseline_label(baseline)}"]
    with_mfu = any("mfu" in rec for r in runs for rec in r.steps.values())  # GPU runs on a device of known peak
    head += ["ms/step", "tok/s"] + (["MFU"] if with_mfu else []) + ["settings"]
    rows = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < 3 else "---:" for i in range(len(head) - 1)) + "|---|"]
    for r in runs:
        c = r.config
        steps = r.step_numbers()
        last = steps[-1] if steps else None
        skipped = r.skipped_steps()
        cells = [r.label, c["value_path"], c.get("arch", "-"), f"{c['num_params']:,}",
                 f"{last if last is not None else 0}/{c['max_steps']}" + (f" ({len(skipped)} skipped)" if skipped else ""),
                 f"{r.tokens_at(last) if last else 0:,}",
                 fmt(r.steps[last]["train_loss"] if steps else None, ".4f")]
        for k in val_keys + mc_keys:
            s, values = r.val_curve(k)
            cells.append(fmt(values[-1] if values else None, ".4f"))
        if baseline:
            d_steps, deltas = baseline_delta(r, baseline_run_for(r, baseline), delta_key)
            cells.append(fmt(deltas[-1], "+.4f") + f" @{d_steps[-1]}" if deltas else "-")
        # the first step of each segment pays for warm-up (allocation, page faults): left out
        timed = [r.steps[s] for s in steps if s not in r.segment_first] or [r.steps[s] for s in steps]
        # medians over the finite values: a NaN (null) would make the sort, and so the median, arbitrary
        for key, spec in (("ms", ".1f"), ("tok_per_s", ",.0f")):
            values = [x[key] for x in timed if math.isfinite(x[key])]
            cells.append(fmt(statistics.median(values) if values else None, spec))
        if with_mfu:
            mfus = [x["mfu"] for x in timed if "mfu" in x and math.isfinite(x["mfu"])]
            cells.append(fmt(100 * statistics.median(mfus), ".1f") + "%" if mfus else "-")
        cells.append(", ".join(f"{k}={v}" for k, v in r.settings().items()) or "-")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


# ---------------------------------------------------------------------------
# seeds: one setting run under several --seed values (--group)

# config fields that may differ between the seeds of one setting (the rest must agree)
SEED_FREE_KEYS = {"event", "seed", "resumed_from"}
# config fields newer trainers write and older logs lack: a missing one is unknown, so they are
# compared only where both logs have them. What a val loss is measured on (data, batches, the
# --eval-mc sets) and where the weights started: two runs that differ in one are not comparable,
# neither as seeds of one setting nor against a --baseline.
EVAL_KEYS = ("val_data", "eval_batches", "eval_mc", "init_from")


def eval_difference(a, b):
    """The first of EVAL_KEYS both runs' configs have and differ in, as (key, a's, b's), or None."""
    for k in EVAL_KEYS:
        if k in a.config and k in b.config and a.config[k] != b.config[k]:
            return k, a.config[k], b.config[k]
    return None


def check_baseline_comparable(runs, baseline):
    """A usage error (exit 2) where a run's val loss is on other data or from another start than
    its baseline's, so that their difference would not be the path's or the setting's."""
    for r in runs:
        base = baseline_run_for(r, baseline)
        if base is None and not isinstance(baseline, Run):
            base = baseline[0]  # no run of this seed: the setting is still measured against the baseline's data
        if base is None or base is r:
            continue
        d = eval_difference(r, base)
        if d:
            fail(f"--baseline: {r.label} and {base.label} differ in '{d[0]}' ({d[1]!r} vs {d[2]!r}): "
                 "their val losses are not comparable", "compare runs evaluated alike (--val-data, --eval-batches, "
                 "--eval-mc, --init-from), or leave that run out", 2)


def student_t_central(t, df):
    """P(|T| < t) for Student's t with an integer df >= 1: the closed trigonometric series of
    Abramowitz & Stegun 26.7.3 (odd df) and 26.7.4 (even df), theta = atan(t / sqrt(df)). Exact
    up to rounding (scipy.stats.t.cdf agrees to 3e-15 for df 1..60; tests/python/test_plot_runs.py)."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2:  # (2/pi) (theta + sin cos (1 + 2/3 c2 + 2*4/(3*5) c2^2 + ...)), powers up to cos^(df-2)
        term, total = 1.0, 0.0
        for k in range(1, (df - 1) // 2 + 1):
            total += term
            term *= 2 * k / (2 * k + 1) * c2
        return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    term, total = 1.0, 0.0  # sin (1 + 1/2 c2 + 1*3/(2*4) c2^2 + ...), powers up to cos^(df-2)
    for k in range(1, df // 2 + 1):
        total += term
        term *= (2 * k - 1) / (2 * k) * c2
    return math.sin(theta) * total


def student_t_quantile(level, df):
    """t such that P(|T| < t) = level (0.95: the 97.5th percentile), by bisection on the series."""
    lo, hi = 0.0, 1.0
    while student_t_central(hi, df) < level:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if student_t_central(mid, df) < level else (lo, mid)
    return (lo + hi) / 2


def paired_difference(diffs, level=0.95):
    """(mean, half-width of the `level` Student-t interval or None below 2 pairs) of paired diffs."""
    n = len(diffs)
    mean = sum(diffs) / n
    if n < 2:
        return mean, None
    return mean, student_t_quantile(level, n - 1) * statistics.stdev(diffs) / math.sqrt(n)


def group_runs(runs):
    """{setting: [runs]} in first-seen order. A usage error (exit 2) where a setting's runs are not
    seeds of one experiment: a config field other than the seed differs, or a seed repeats."""
    groups = {}
    for r in runs:
        groups.setdefault(r.group, []).append(r)
    for name, members in groups.items():
        first = members[0]
        seeds = [m.config.get("seed") for m in members]
        for m in members[1:]:
            keys = sorted((set(first.config) | set(m.config)) - SEED_FREE_KEYS - set(EVAL_KEYS))
            # a key only one log has is unknown for the other: compared only where both have it
            keys += [k for k in EVAL_KEYS if k in first.config and k in m.config]
            differ = [k for k in keys if first.config.get(k) != m.config.get(k)]
            if differ:
                k = differ[0]
                fail(f"--group: {first.label} and {m.label} differ in '{k}' ({first.config.get(k)!r} vs {m.config.get(k)!r}), "
                     f"not only in the seed", f"label runs SETTING@SEED only where they are seeds of one setting", 2)
        dup = sorted({x for x in seeds if seeds.count(x) > 1}, key=str)
        if dup:
            fail(f"--group: setting '{name}' has seed {dup[0]} more than once", "give each seed of a setting once", 2)
    return groups


def same_seed_run(run, baseline_group):
    """The baseline setting's run with `run`'s seed, or None."""
    return next((b for b in baseline_group if b.config.get("seed") == run.config.get("seed")), None)


def mean_sd(values, spec=".4f"):
    if not values:
        return "-"
    if not all(math.isfinite(v) for v in values):
        return "nan"  # a seed's value is null in its log: no mean over the others passes for the setting's
    if len(values) == 1:
        return format(values[0], spec)
    return f"{format(statistics.mean(values), spec)} ± {format(statistics.stdev(values), spec)}"


def last_eval_step(run, key):
    """The last step at which `run` evaluated val set `key`, or None."""
    steps = run.val_curve(key)[0]
    return steps[-1] if steps else None


def check_equal_lengths(groups, baseline=None):
    """A damaged-data error (exit 1) where the seed table would mix steps: the runs of a setting
    end at different steps or evaluated a val set last at different steps (a mean would average
    step-2 and step-4 losses), or a setting's last evaluation is not its baseline's (the paired
    differences would be taken at another step than the setting's). Every value in the table is
    therefore at one step per setting, the one its "steps" column shows."""
    def describe(members, of):
        return ", ".join(f"{r.label} at {'no step' if of(r) is None else f'step {of(r)}'}" for r in members)

    hint = "compare runs of one length: wait for the shorter ones to finish, or leave them out"
    val_keys = []
    for members in groups.values():
        for r in members:
            val_keys += [k for k in r.val_sets() if k not in val_keys]
    for name, members in groups.items():
        last = lambda r: r.step_numbers()[-1] if r.steps else None  # noqa: E731
        if len({last(r) for r in members}) > 1:
            fail(f"--group: the runs of '{name}' end at different steps ({describe(members, last)}): "
                 "their mean would mix losses of different steps", hint, 1)
        for k in val_keys:
            if len({last_eval_step(r, k) for r in members}) > 1:
                fail(f"--group: the runs of '{name}' last evaluated {set_name(k)} at different steps "
                     f"({describe(members, lambda r: last_eval_step(r, k))})", hint, 1)
    key = baseline_key(groups[baseline]) if baseline else None
    if key is None:
        return
    base_step = last_eval_step(groups[baseline][0], key)
    for name, members in groups.items():
        step = last_eval_step(members[0], key)
        if name != baseline and step is not None and step != base_step:
            fail(f"--group: '{name}' last evaluated {set_name(key)} at step {step}, its baseline '{baseline}' at "
                 f"{'no step' if base_step is None else f'step {base_step}'}: the paired differences would be "
                 "taken at another step than the setting's", hint, 1)


def seed_table(groups, baseline=None):
    """Markdown: one row per setting; losses as mean ± sample sd over its seeds (the last logged
    value of each run); with a baseline setting, the paired difference of the final val loss."""
    val_keys = []
    for members in groups.values():
        for r in members:
            val_keys += [k for k in r.val_sets() if k not in val_keys]
    head = ["setting", "path", "runs", "seeds", "steps", "train loss"]
    head += [k.replace("val_loss_", "val ").replace("val_loss", "val loss") for k in val_keys]
    delta_key = baseline_key(groups[baseline]) if baseline else None
    if baseline:
        head += [f"Δ {set_name(delta_key or 'val_loss')} vs {baseline} (paired)", "95% CI", "lower in"]
    rows = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < 2 else "---:" for i in range(len(head))) + "|"]
    for name, members in groups.items():
        c = members[0].config
        last = [r.step_numbers()[-1] for r in members if r.steps]
        cells = [name, c["value_path"], str(len(members)), ",".join(str(r.config.get("seed")) for r in members),
                 "/".join(sorted({str(x) for x in last})) or "0", mean_sd([r.steps[r.step_numbers()[-1]]["train_loss"] for r in members if r.steps])]
        for k in val_keys:
            cells.append(mean_sd([r.val_curve(k)[1][-1] for r in members if r.val_curve(k)[1]]))
        if baseline:
            deltas = [baseline_delta(r, baseline_run_for(r, groups[baseline]), delta_key)[1] for r in members]
            diffs = [d[-1] for d in deltas if d]
            if name == baseline or not diffs:
                cells += ["-", "-", "-"]
            elif not all(math.isfinite(d) for d in diffs):
                # a null val loss in a log: no mean or interval, and not one over the other seeds
                cells += [f"nan (n={len(diffs)})", "nan", "-"]
            else:
                mean, half = paired_difference(diffs)
                cells.append(f"{mean:+.4f} (n={len(diffs)})")
                cells.append(f"[{mean - half:+.4f}, {mean + half:+.4f}]" if half is not None else "-")
                cells.append(f"{sum(d < 0 for d in diffs)}/{len(diffs)}")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


# ---------------------------------------------------------------------------
# the plot

def import_pyplot():
    try:
        import matplotlib
    except ImportError:
        fail("plotting needs matplotlib, which is not installed",
             "pip install -r requirements.txt (or: pip install matplotlib); --table needs nothing", 1)
    matplotlib.use("Agg")  # files only: no display on a cluster node
    matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text, editable in a paper's figure
    import matplotlib.pyplot as plt
    return plt


def plot_layer_lines(ax, run, layers, curve, x_axis, colour, **style):
    """One line per layer 1..layers, curve(layer) -> (steps, values): the run's colour, lighter for
    shallower layers, and the layer's number at its last point (ResFormer's lambdas, Depth's weights)."""
    for layer in range(1, layers + 1):
        steps, values = curve(layer)
        ax.plot(run.x_of(steps, x_axis), values, color=colour, linewidth=1.0, alpha=0.35 + 0.65 * layer / layers,
                label=f"{run.label} (layers 1..{layers}, light to dark)" if layer == 1 else None, **style)
        ax.annotate(str(layer), (run.x_of(steps[-1:], x_axis)[0], values[-1]), fontsize=6, color=colour,
                    xytext=(2, 0), textcoords="offset points", va="center")


def applicable_panels(runs, panels, baseline, mc_metric):
    """(the panels that apply to these runs, {panel left out: why})."""
    why = {"delta": None if baseline is not None else "it needs --baseline",
           "lambda": None if any(r.lambda_layers() > 1 for r in runs) else "no run logs ResFormer's learnable lambdas",
           "val": None if any(r.val_sets() for r in runs) else "no run has a val set (--val-data)",
           "mc": None if any(r.mc_sets(mc_metric) for r in runs) else f"no run logs --eval-mc accuracies ({mc_metric})",
           "depth": None if any(r.depth_layers() for r in runs) else "no Depth-Attention run with val sets"}
    return [p for p in panels if why.get(p) is None], {p: why[p] for p in panels if why.get(p)}


def make_figure(runs, panels, x_axis, smooth, baseline=None, loss_ylim=None, logx=False, mc_metric="acc_norm", group=False):
    """The figure; one axis per panel, each run one colour in every panel (group: each setting one
    colour, its seeds' lines labelled once). baseline: a run, or with group a setting's runs.
    Returns (fig, {panel: ax})."""
    plt = import_pyplot()
    panels, _ = applicable_panels(runs, panels, baseline, mc_metric)
    delta_key = baseline_key(baseline) if baseline is not None else None
    cols = 2 if len(panels) > 1 else 1
    rows = math.ceil(len(panels) / cols)
    fig, grid = plt.subplots(rows, cols, figsize=(6.4 * cols, 3.6 * rows), squeeze=False)
    axes = {p: grid[i // cols][i % cols] for i, p in enumerate(panels)}
    for i in range(len(panels), rows * cols):
        grid[i // cols][i % cols].set_visible(False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["-", "--", ":", "-."]
    settings, labelled = [], set()
    for n, run in enumerate(runs):
        if group and run.group not in settings:
            settings.append(run.group)
        colour = colours[(settings.index(run.group) if group else n) % len(colours)]
        steps = run.step_numbers()
        if not steps:
            continue
        # the legend names each run, or (group) each setting once, at its first run with steps
        name = run.group if group else run.label
        label = None if name in labelled else name
        labelled.add(name)
        x = run.x_of(steps, x_axis)
        if "train" in axes:
            raw = run.series("train_loss")
            if smooth > 0:
                axes["train"].plot(x, raw, color=colour, alpha=0.25, linewidth=0.8)
            axes["train"].plot(x, ema(raw, smooth), color=colour, label=label)
        if "val" in axes:
            for k, key in enumerate(run.val_sets()):
                vs, losses = run.val_curve(key)
                name_of_set = key.replace("val_loss_", "").replace("val_loss", "val")
                axes["val"].plot(run.x_of(vs, x_axis), losses, styles[k % len(styles)], marker="o", markersize=3,
                                 color=colour, label=label if name_of_set == "val" or label is None else f"{label} {name_of_set}")
        if "depth" in axes and run.depth_layers():
            plot_layer_lines(axes["depth"], run, run.depth_layers(), run.depth_own_curve, x_axis, colour, marker="o", markersize=2)
        if "mc" in axes:
            for k, key in enumerate(run.mc_sets(mc_metric)):
                ms, accs = run.val_curve(key)
                axes["mc"].plot(run.x_of(ms, x_axis), accs, styles[k % len(styles)], marker="o", markersize=3, color=colour,
                                label=None if label is None else f"{label} {mc_label(key, mc_metric).split(' ')[0]}")
        for panel, key in (("lr", "lr"), ("norm", "grad_norm"), ("speed", "tok_per_s")):
            if panel in axes:
                axes[panel].plot(x, run.series(key), color=colour, label=label, linewidth=1.0)
        # steps whose update --skip-loss-z/--skip-norm-z left out: a cross on the raw value
        skipped = run.skipped_steps()
        for panel, key in (("train", "train_loss"), ("norm", "grad_norm")):
            if skipped and panel in axes:
                axes[panel].plot(run.x_of(skipped, x_axis), [run.steps[s][key] for s in skipped], "x", color=colour, markersize=5,
                                 label=None if label is None else f"{label}: update skipped")
        if "lambda" in axes and run.lambda_layers() > 1:
            plot_layer_lines(axes["lambda"], run, run.lambda_layers() - 1, run.lambda_curve, x_axis, colour)
        base = baseline_run_for(run, baseline) if "delta" in axes else None
        if base is not run:
            ds, deltas = baseline_delta(run, base, delta_key)
            if deltas:
                axes["delta"].plot(run.x_of(ds, x_axis), deltas, marker="o", markersize=3, color=colour, label=label)
    titles = {"train": f"train loss (EMA {smooth})" if smooth > 0 else "train loss", "val": "val loss",
              "lr": "learning rate", "norm": "gradient norm (before clipping)", "speed": "tokens/s",
              "delta": f"{set_name(delta_key or 'val_loss')} loss − {baseline_label(baseline) if baseline else ''}'s"
                       + (" (same seed)" if group else ""), "lambda": "ResFormer lambda per layer",
              "mc": f"multiple choice: {mc_metric}", "depth": "Depth-Attention: weight on the own value per layer"}
    for panel, ax in axes.items():
        ax.set_title(titles[panel])
        ax.set_xlabel(X_AXES[x_axis])
        ax.grid(alpha=0.3)
        if logx:
            ax.set_xscale("log")
        if panel in ("train", "val") and loss_ylim:
            ax.set_ylim(*loss_ylim)
        if panel == "delta":
            ax.axhline(0.0, color="black", linewidth=0.8)
        if ax.has_data():
            ax.legend(fontsize=8)
    fig.tight_layout()
    return fig, axes


def save_figure(fig, out):
    """Write under a temporary name in the same directory, then rename over `out`."""
    directory = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(directory):
        raise LogError(f"cannot write {out}: no directory {directory}")
    ext = os.path.splitext(out)[1]
    fd, tmp = tempfile.mkstemp(prefix=".plot_runs.", suffix=ext, dir=directory)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    try:
        fig.savefig(tmp, dpi=120)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would hide the plot from the group
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 2)[2])
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directory or log.jsonl, optionally NAME=RUN")
    p.add_argument("--out", default="plot.png", help="image to write; .png, .svg or .pdf [plot.png, in the current directory]")
    p.add_argument("--table", action="store_true", help="print the table only, write no plot (needs no matplotlib)")
    p.add_argument("--x", dest="x_axis", choices=sorted(X_AXES), default="step", help="x axis [step]")
    p.add_argument("--smooth", type=float, default=0.9, help="EMA weight for the train loss, in [0, 1); 0 = raw [0.9]")
    p.add_argument("--panels", default=",".join(PANELS),
                   help="comma-separated, from " + ",".join(PANELS) + " (delta only with --baseline, lambda only for runs "
                   "that log ResFormer's learnable lambdas, mc only for runs with --eval-mc, depth only for Depth-Attention runs "
                   "with val sets) [all]")
    p.add_argument("--mc-metric", choices=MC_METRICS, default="acc_norm",
                   help="which --eval-mc accuracy the mc panel and the table show [acc_norm]")
    p.add_argument("--baseline", metavar="LABEL", help="plot and tabulate each run's val loss minus this run's "
                   "(with --group: this setting's run of the same seed)")
    p.add_argument("--group", action="store_true",
                   help="runs labelled SETTING@SEED are seeds of one setting: add the table over seeds, one colour per setting")
    p.add_argument("--loss-ylim", metavar="LO,HI", help="y range of the loss panels, e.g. 3,4.5")
    p.add_argument("--logx", action="store_true", help="logarithmic x axis")
    a = p.parse_args(argv)
    if not 0 <= a.smooth < 1:
        p.error(f"--smooth must be in [0, 1), got {a.smooth}")
    a.panels = [x.strip() for x in a.panels.split(",") if x.strip()]
    unknown = [x for x in a.panels if x not in PANELS]
    if unknown or not a.panels:
        p.error(f"--panels: unknown {','.join(unknown) or '(none given)'}; choose from {','.join(PANELS)}")
    if a.loss_ylim:
        try:
            lo, hi = (float(v) for v in a.loss_ylim.split(","))
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise ValueError
        except ValueError:
            p.error(f"--loss-ylim expects LO,HI with LO < HI, got '{a.loss_ylim}'")
        a.loss_ylim = (lo, hi)
    if not a.table and os.path.splitext(a.out)[1].lower() not in (".png", ".svg", ".pdf"):
        p.error(f"--out must end in .png, .svg or .pdf, got '{a.out}'")
    return a


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        runs = load_runs(a.runs)
    except LogError as e:
        fail(str(e), e.hint or "check the path, or leave that run out", 1)
    baseline, groups = None, group_runs(runs) if a.group else None
    if a.baseline is not None and groups is not None:
        baseline = groups.get(a.baseline)
        if baseline is None:
            fail(f"--baseline '{a.baseline}' is none of the settings ({', '.join(groups)})",
                 "give one of those settings: the part of a label before '@'", 2)
    elif a.baseline is not None:
        baseline = next((r for r in runs if r.label == a.baseline), None)
        if baseline is None:
            fail(f"--baseline '{a.baseline}' is none of the runs' labels ({', '.join(r.label for r in runs)})",
                 "give one of those labels, or label a run with NAME=RUN", 2)
    if baseline is not None:
        check_baseline_comparable(runs, baseline)
    if groups is not None:
        check_equal_lengths(groups, a.baseline)
    if not a.table:
        # checked before anything is printed: a figure without a panel is no plot
        kept, dropped = applicable_panels(runs, a.panels, baseline, a.mc_metric)
        if not kept:
            fail("--panels: none of " + ", ".join(a.panels) + " applies to these runs: "
                 + "; ".join(f"{p}: {why}" for p, why in dropped.items()),
                 "choose panels these runs have (train, lr, norm and speed always apply), or use --table", 2)
    for r in runs:
        if not r.steps:
            warn(f"{r.log_path}: no step logged yet; its row is empty and it is left out of the plot")
    print(table(runs, baseline, a.mc_metric))
    if groups is not None:
        print()
        print(seed_table(groups, a.baseline))
    if a.table:
        return 0
    if not any(r.steps for r in runs):
        fail("no run has a logged step: nothing to plot", "wait for the first step, or use --table", 1)
    fig, _ = make_figure(runs, a.panels, a.x_axis, a.smooth, baseline, a.loss_ylim, a.logx, a.mc_metric, group=a.group)
    try:
        save_figure(fig, a.out)
    except (LogError, OSError) as e:
        fail(f"cannot write the plot: {e}", "check that the --out directory exists and is writable", 1)
    print(f"plot: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
