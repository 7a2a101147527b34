#!/usr/bin/env bash
# scripts/recipes/sla_gpt2_owt.sh: the Skip-Layer Attention paper's main comparison (its
# section 5 and Tables 1-3): GPT-2 124M on OpenWebText at a 16,384-token context, 524,288 tokens
# per step for 18,000 steps (~9.4 B tokens, one epoch), learning rate 1.5e-4, vanilla against
# SLA with 9 skip layers and 9 skip heads (its best setting, Table 2).
#
#   NGPU=8 bash scripts/recipes/sla_gpt2_owt.sh
#   SLA_LAYERS=6 SLA_HEADS=6 OUT=runs/sla_6_6 PATHS=sla bash scripts/recipes/sla_gpt2_owt.sh
#
# Settings (environment, defaults in brackets; the rest in scripts/recipes/common.sh):
#   PATHS ['vanilla sla'], DATA [data/openwebtext], B [4] per-GPU micro-batch, T [16384],
#   TOTAL [524288], STEPS [18000], LR [1.5e-4], WARMUP [2000], SLA_LAYERS [9], SLA_HEADS [9],
#   MODEL [GPT-2 124M with 16,384 learned positions], EVAL_EVERY [250], CHECKPOINT_EVERY [1000]
# The paper gives no warmup or final learning rate; it trained with nanoGPT, whose defaults
# (2,000 warmup steps, decay to a tenth) are used here. It reports the val loss on OWT's val split.
# (sbatch runs a copy of the script it is given, from its spool directory, with no common.sh beside it)
[ -f "$(dirname "$0")/common.sh" ] || { printf 'error: %s has no common.sh beside it\n---> HINT: %s\n' "$0" "run the recipe where it lies in the repository; under Slurm, from a batch script: exec bash /path/to/valuepath/scripts/recipes/<recipe>.sh" >&2; exit 2; }
source "$(dirname "$0")/common.sh"

PATHS=${PATHS:-"vanilla sla"}
DATA=${DATA:-data/openwebtext}
OUT=${OUT:-runs/sla_gpt2_owt}
B=${B:-4}
T=${T:-16384}
TOTAL=${TOTAL:-524288}
STEPS=${STEPS:-18000}
LR=${LR:-1.5e-4}
WARMUP=${WARMUP:-2000}
SLA_LAYERS=${SLA_LAYERS:-9}
SLA_HEADS=${SLA_HEADS:-9}
MODEL=${MODEL:-"--arch gpt2 --layers 12 --heads 12 --dim 768 --vocab 50257 --max-seq 16384"}
EVAL_EVERY=${EVAL_EVERY:-250}
CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-1000}

recipe_whole STEPS EVAL_EVERY
recipe_batch "$TOTAL" "$B" "$T" >/dev/null
recipe_checkpoint_flags
recipe_data "$DATA/openwebtext_train_*.bin" ".venv/bin/python scripts/prepare_openwebtext.py"
for path in $PATHS; do
    path_flags=()
    [ "$path" = sla ] && path_flags=(--sla-layers "$SLA_LAYERS" --sla-heads "$SLA_HEADS")
    # shellcheck disable=SC2086
    recipe_run "$path" $MODEL "${path_flags[@]}" \
        --train-data "$DATA/openwebtext_train_*.bin" --val-data "$DATA/openwebtext_val_*.bin" \
        --eval-every "$EVAL_EVERY" --eval-batches 8 "${CHECKPOINT_FLAGS[@]}"
done
recipe_report
