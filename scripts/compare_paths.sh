#!/usr/bin/env bash
# scripts/compare_paths.sh: the same small model, seed, data and steps under every value path,
# one table (final train and val loss, each path's val loss minus vanilla's, median step time)
# and, where matplotlib is installed, the curves in $OUT.png (scripts/plot_runs.py).
#
#   bash scripts/compare_paths.sh                  # CPU trainers (build/<path>/train_cpu)
#   TRAINER='build/{path}/train' bash scripts/compare_paths.sh   # another build, {path} substituted
#   STEPS=400 ARCH=llama EXTRA='--kv-heads 2' bash scripts/compare_paths.sh
#   TASKS=hellaswag,arc_easy LIMIT=500 bash scripts/compare_paths.sh   # and lm-eval accuracies
#   SEEDS="1337 1338 1339" bash scripts/compare_paths.sh   # every path under each seed, and a table
#                                                          # over seeds (mean ± sd, paired Δ with 95% CI)
#   EVAL_BATCHES=4 bash scripts/compare_paths.sh   # the val loss over 4 batches of 8 x 64 tokens, not 16
#   VOCAB=50277 DATA=data/tinyshakespeare_neox bash scripts/compare_paths.sh   # shards of another tokenizer
#
# One seed says little about a difference of a few hundredths in val loss: the spread between
# seeds of one path is of that order. With several SEEDS each path runs once per seed, into
# $OUT/PATH@SEED, and scripts/plot_runs.py --group adds the table over seeds, with each path's
# val loss minus vanilla's of the same seed (same init of every shared tensor, same batches).
#
# TASKS (lm-eval task names; INCLUDE: a directory of extra task YAMLs) adds a downstream table:
# scripts/eval_harness.py on every run's final checkpoint, results in $OUT.eval.json. It needs
# torch, transformers and lm-eval (requirements-reference.txt) in .venv, or in the Python that
# PYTHON names.
#
# Ctrl-C, or SIGTERM or SIGUSR1 sent to this script, stops the run in progress after its step (it
# saves a checkpoint in its directory) and the script, with status 128 + the signal. Each run
# starts afresh, but the earlier comparison's run of that name is set aside until the new one has
# finished: a run that fails or is stopped goes to $OUT.failed/NAME, and the earlier one back.
#
# Needs the TinyShakespeare shards (.venv/bin/python scripts/prepare_tinyshakespeare.py, after
# make venv). Each path runs with its default settings (value_paths.md section 10), which this
# model's shape resolves to: with 6 layers and 6 heads, SLA n_l = 5 (round 4.5 up) and n_h = 5 (round 4.5 up), Depth stride 3.
set -euo pipefail
cd "$(dirname "$0")/.."
# each run is started by forward_signals_run, so that a Ctrl-C, or a SIGTERM or SIGUSR1 sent to this
# script alone, reaches the trainer once and stops the comparison (the trainer saves its step)
source scripts/forward_signals.sh

PATHS=${PATHS:-"vanilla resformer svformer sla depth"}
TRAINER=${TRAINER:-"build/{path}/train_cpu"}
STEPS=${STEPS:-200}
EVAL_BATCHES=${EVAL_BATCHES:-16}
ARCH=${ARCH:-gpt2}
DATA=${DATA:-data/tinyshakespeare}
OUT=${OUT:-runs/compare_paths}
SEEDS=${SEEDS:-1337}
EXTRA=${EXTRA:-}
# the model's vocabulary: GPT-2's for prepare_tinyshakespeare.py's default shards; another
# tokenizer's shards need its size (NeoX-20B 50277, Llama-2 32000), or the trainer refuses ids past it
VOCAB=${VOCAB:-50257}
TASKS=${TASKS:-}
LIMIT=${LIMIT:-}
INCLUDE=${INCLUDE:-}
MODEL="--arch $ARCH --layers 6 --heads 6 --dim 192 --vocab $VOCAB --max-seq 64 --seq-len 64 --batch-size 8"
TRAIN="--max-steps $STEPS --lr 2e-3 --warmup-steps 20 --eval-every $STEPS --eval-batches $EVAL_BATCHES"
# (checked before anything is removed or run: a bad value must not cost the earlier comparison)
[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || { echo "error: STEPS is '$STEPS'; give a whole number of steps in digits, e.g. STEPS=400" >&2; exit 2; }
[[ "$EVAL_BATCHES" =~ ^[1-9][0-9]*$ ]] || { echo "error: EVAL_BATCHES is '$EVAL_BATCHES'; give a whole number of batches, e.g. EVAL_BATCHES=16" >&2; exit 2; }
[[ "$ARCH" =~ ^(gpt2|llama)$ ]] || { echo "error: ARCH is '$ARCH'; give gpt2 or llama" >&2; exit 2; }
read -r -a seeds <<<"$SEEDS"
[ ${#seeds[@]} -ge 1 ] || { echo "error: SEEDS is empty; give one or more seeds, e.g. SEEDS=\"1337 1338\"" >&2; exit 2; }
[[ "$VOCAB" =~ ^[1-9][0-9]*$ ]] || { echo "error: VOCAB is '$VOCAB', not a vocabulary size; give the tokenizer's, e.g. VOCAB=50257 (GPT-2)" >&2; exit 2; }
for seed in "${seeds[@]}"; do
    [[ "$seed" =~ ^[0-9]+$ ]] || { echo "error: SEEDS holds '$seed', not a seed (a non-negative integer)" >&2; exit 2; }
done

ls $DATA/tinyshakespeare_train_*.bin >/dev/null 2>&1 || {
    echo "error: no TinyShakespeare shards in $DATA; run: make venv && .venv/bin/python scripts/prepare_tinyshakespeare.py" >&2
    exit 1
}
if [[ "$TRAINER" == build/*/train_cpu || "$TRAINER" == "build/{path}/train_cpu" ]]; then
    make -s $(for p in $PATHS; do echo "build/$p/train_cpu"; done)
fi

# $OUT.NAME.log lies beside $OUT: on a fresh checkout neither runs/ nor $OUT exists yet, and the
# trainer's output redirect would fail before it starts, its error naming a log never written
mkdir -p "$OUT" || { echo "error: cannot create $OUT; set OUT to a directory you can write, e.g. OUT=/tmp/compare_paths" >&2; exit 1; }

dirs=()
run_dirs=()
for path in $PATHS; do
    bin=${TRAINER//\{path\}/$path}
    for seed in "${seeds[@]}"; do
        name=$path  # one seed: runs/compare_paths/vanilla as before; several: vanilla@1337, ...
        [ ${#seeds[@]} -gt 1 ] && name=$path@$seed
        dir=$OUT/$name
        # Each comparison starts its runs afresh, but the earlier comparison's run (and console
        # log) is only set aside until this one has finished: a run that fails or is stopped (a bad
        # EXTRA flag, a crash, Ctrl-C) puts it back, so a mistake never costs finished results.
        # (beside $OUT, not in it, where plot_runs.py $OUT/* would take them for runs)
        earlier=$OUT.earlier/$name
        rm -rf "$earlier" "$OUT.$name.earlier.log"
        [ -e "$dir" ] && mkdir -p "$OUT.earlier" && mv "$dir" "$earlier"
        [ -e "$OUT.$name.log" ] && mv "$OUT.$name.log" "$OUT.$name.earlier.log"
        echo "== $name: $bin" >&2
        : >"$OUT.$name.log"
        # shellcheck disable=SC2086
        forward_signals_run "$OUT.$name.log" 0 "$bin" $MODEL $TRAIN --seed "$seed" $EXTRA \
            --train-data "$DATA/tinyshakespeare_train_*.bin" --val-data "$DATA/tinyshakespeare_val_*.bin" --out-dir "$dir"
        rc=$FORWARDED_RC
        if [ "$rc" -ne 0 ]; then
            failed_log=$OUT.$name.log
            if [ -e "$earlier" ] || [ -e "$OUT.$name.earlier.log" ]; then
                # this run (a stopped one saved its step) goes to $OUT.failed/NAME, the earlier one back
                failed_log=$OUT.$name.failed.log
                mv "$OUT.$name.log" "$failed_log"
                rm -rf "$OUT.failed/$name"
                [ -e "$dir" ] && mkdir -p "$OUT.failed" && mv "$dir" "$OUT.failed/$name"
                [ -e "$earlier" ] && mv "$earlier" "$dir"
                rmdir "$OUT.earlier" 2>/dev/null || true
                [ -e "$OUT.$name.earlier.log" ] && mv "$OUT.$name.earlier.log" "$OUT.$name.log"
                echo "note: the earlier comparison's $name run is back in $dir; this one is in $OUT.failed/$name (if it wrote anything)" >&2
            fi
            if [ "$rc" -gt 128 ] && [ "$rc" -lt 160 ]; then
                # Ctrl-C, or SIGTERM or SIGUSR1 to this script or to the trainer
                echo "error: the $name run stopped on signal $((rc - 128)) (see $failed_log); no further run started" >&2
                exit "$rc"
            fi
            echo "error: $name failed, see $failed_log" >&2
            exit 1
        fi
        rm -rf "$earlier" "$OUT.$name.earlier.log"
        rmdir "$OUT.earlier" 2>/dev/null || true  # (when it holds no other run)
        dirs+=("$name=$dir")
        run_dirs+=("$dir")
    done
done

echo
echo "$(date -u +%Y-%m-%d), $(uname -m), $(nproc) cores, $STEPS steps, seeds $SEEDS, model: $MODEL $EXTRA"
echo
# the table (and, where matplotlib is installed, the curves) from the runs' log.jsonl
table_flags=()
[[ " $PATHS " == *" vanilla "* ]] && table_flags=(--baseline vanilla)
[ ${#seeds[@]} -gt 1 ] && table_flags+=(--group)
# PYTHON: the interpreter for the table and TASKS (.venv's by default): one with lm-eval for TASKS
PY=${PYTHON:-python3}
[ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ] && PY=.venv/bin/python
if "$PY" -c "import matplotlib" >/dev/null 2>&1; then
    "$PY" scripts/plot_runs.py "${dirs[@]}" "${table_flags[@]}" --out "$OUT.png"
else
    "$PY" scripts/plot_runs.py "${dirs[@]}" "${table_flags[@]}" --table
    echo "(no matplotlib: table only; pip install -r requirements.txt for $OUT.png)"
fi
if [ -n "$TASKS" ]; then
    echo
    "$PY" scripts/eval_harness.py "${run_dirs[@]}" --tasks "$TASKS" ${LIMIT:+--limit "$LIMIT"} \
        ${INCLUDE:+--include-path "$INCLUDE"} --out "$OUT.eval.json"
fi
