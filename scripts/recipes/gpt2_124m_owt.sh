#!/usr/bin/env bash
# scripts/recipes/gpt2_124m_owt.sh: GPT-2 124M on OpenWebText, llm.c's and nanoGPT's baseline
# (~9.4 B tokens, one epoch), for one or more value paths with everything else equal.
#
#   bash scripts/recipes/gpt2_124m_owt.sh                              # vanilla, one GPU
#   PATHS='vanilla resformer svformer sla depth' NGPU=8 bash scripts/recipes/gpt2_124m_owt.sh
#   DRY_RUN=1 NGPU=8 bash scripts/recipes/gpt2_124m_owt.sh             # the commands only
#
# Settings (environment, defaults in brackets; the rest in scripts/recipes/common.sh):
#   DATA [data/openwebtext]   shards of scripts/prepare_openwebtext.py
#   B [64] per-GPU micro-batch, T [1024], TOTAL [524288] tokens per step (gradient accumulation
#   makes up the rest), STEPS [18000], LR [6e-4] (llm.c's), WARMUP [700], MODEL [GPT-2 124M],
#   EVAL_EVERY [250], CHECKPOINT_EVERY [1000], SEED [1337]
# Each path runs with its defaults (value_paths.md section 10): ResFormer lambda 1/2, SLA
# (n_l, n_h) = (9, 9), Depth-Attention stride 6.
# (sbatch runs a copy of the script it is given, from its spool directory, with no common.sh beside it)
[ -f "$(dirname "$0")/common.sh" ] || { printf 'error: %s has no common.sh beside it\n---> HINT: %s\n' "$0" "run the recipe where it lies in the repository; under Slurm, from a batch script: exec bash /path/to/valuepath/scripts/recipes/<recipe>.sh" >&2; exit 2; }
source "$(dirname "$0")/common.sh"

PATHS=${PATHS:-vanilla}
DATA=${DATA:-data/openwebtext}
OUT=${OUT:-runs/gpt2_124m_owt}
B=${B:-64}
T=${T:-1024}
TOTAL=${TOTAL:-524288}
STEPS=${STEPS:-18000}
LR=${LR:-6e-4}
WARMUP=${WARMUP:-700}
MODEL=${MODEL:-"--arch gpt2 --layers 12 --heads 12 --dim 768 --vocab 50257 --max-seq 1024"}
EVAL_EVERY=${EVAL_EVERY:-250}
CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-1000}

recipe_whole STEPS EVAL_EVERY
recipe_batch "$TOTAL" "$B" "$T" >/dev/null
recipe_checkpoint_flags
recipe_data "$DATA/openwebtext_train_*.bin" ".venv/bin/python scripts/prepare_openwebtext.py"
samples=()  # decoded samples need the tokenizer file that prepare_openwebtext.py writes
[ -e "$DATA/gpt2.vptok" ] && samples=(--sample-every $((EVAL_EVERY * 8)) --tokenizer "$DATA/gpt2.vptok")
for path in $PATHS; do
    # shellcheck disable=SC2086
    recipe_run "$path" $MODEL \
        --train-data "$DATA/openwebtext_train_*.bin" --val-data "$DATA/openwebtext_val_*.bin" \
        --eval-every "$EVAL_EVERY" --eval-batches 20 "${samples[@]}" \
        "${CHECKPOINT_FLAGS[@]}"
done
recipe_report
