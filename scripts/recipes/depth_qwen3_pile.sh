#!/usr/bin/env bash
# scripts/recipes/depth_qwen3_pile.sh: the Depth-Attention paper's setting (its Tables 8 and 9):
# Qwen3-style decoders (RMSNorm, SwiGLU, RoPE, per-head QK RMSNorm, GQA, untied embeddings) on
# the Pile with the GPT-NeoX tokenizer (vocabulary 50,304 = 50,277 padded, as the paper's),
# 2,048-token context, 1,024 sequences (2 M tokens) per step for 15,625 steps (32 B tokens), AdamW
# (0.9, 0.95), weight decay 0.1, clip 1.0, 2% warmup then cosine decay; vanilla and
# Depth-Attention with the half-depth stride, one Pile val loss.
#
#   SIZE=500M NGPU=8 bash scripts/recipes/depth_qwen3_pile.sh
#   SIZE=1.5B NGPU=8 B=4 STEPS=2000 bash scripts/recipes/depth_qwen3_pile.sh   # a shorter run
#
# Settings (environment, defaults in brackets; the rest in scripts/recipes/common.sh):
#   SIZE [500M]: 360M, 500M, 710M (Table 9, the scaling runs) or 1.5B, 3B (Table 8), as
#       (layers, heads, KV heads, width, FFN, depth stride):
#       360M (24, 15, 15, 960, 2544, 12)   500M (24, 18, 18, 1152, 3072, 12)
#       710M (32, 20, 20, 1280, 3072, 16)  1.5B (48, 24, 6, 1536, 4096, 24)
#       3B (48, 32, 8, 2048, 6912, 24); every head is 64 wide
#   PATHS ['vanilla depth'], DATA [data/pile], B [8] per-GPU micro-batch, T [2048],
#   TOTAL [2097152], STEPS [15625], LR [3e-4], WARMUP [313] (2% of 15,625, rounded up),
#   ROPE_THETA [1000000], MODEL [from SIZE], EVAL_EVERY [500], CHECKPOINT_EVERY [500]
# Where this differs from the paper, and why:
#   - LR: the paper's learning rate did not survive the text of it we have (the table cell is
#     empty); 3e-4 is a common peak for decoders of these sizes. Set LR to the paper's if known.
#   - ROPE_THETA: not given either; 1,000,000 is Qwen3's own.
#   - 360M's FFN is 2,540 in the paper; the GPU kernels need widths that are multiples of 8, so
#     this uses 2,544 (+0.2% of the MLP's parameters).
#   - Init: valuepath's (normal 0.02, projections into the residual stream scaled by 1/sqrt(2L)),
#     not the paper's HF initializer range (0.02, and 0.01 at 1.5B and 3B, unscaled).
#   - Precision: bf16 (the paper trains in fp16 with loss scaling, which valuepath does not have).
#   - Data: scripts/prepare_pile.py downloads the Pile without its copyrighted components (the
#     full release is no longer distributed), so Books3, BookCorpus2, OpenSubtitles and
#     YoutubeSubtitles are missing from train and val.
# (sbatch runs a copy of the script it is given, from its spool directory, with no common.sh beside it)
[ -f "$(dirname "$0")/common.sh" ] || { printf 'error: %s has no common.sh beside it\n---> HINT: %s\n' "$0" "run the recipe where it lies in the repository; under Slurm, from a batch script: exec bash /path/to/valuepath/scripts/recipes/<recipe>.sh" >&2; exit 2; }
source "$(dirname "$0")/common.sh"

PATHS=${PATHS:-"vanilla depth"}
SIZE=${SIZE:-500M}
DATA=${DATA:-data/pile}
OUT=${OUT:-runs/depth_qwen3_pile_$SIZE}
B=${B:-8}
T=${T:-2048}
TOTAL=${TOTAL:-2097152}
STEPS=${STEPS:-15625}
LR=${LR:-3e-4}
WARMUP=${WARMUP:-313}
ROPE_THETA=${ROPE_THETA:-1000000}
EVAL_EVERY=${EVAL_EVERY:-500}
CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-500}
case "$SIZE" in
    360M) shape="--layers 24 --heads 15 --kv-heads 15 --dim 960 --ffn-dim 2544" stride=12 ;;
    500M) shape="--layers 24 --heads 18 --kv-heads 18 --dim 1152 --ffn-dim 3072" stride=12 ;;
    710M) shape="--layers 32 --heads 20 --kv-heads 20 --dim 1280 --ffn-dim 3072" stride=16 ;;
    1.5B) shape="--layers 48 --heads 24 --kv-heads 6 --dim 1536 --ffn-dim 4096" stride=24 ;;
    3B) shape="--layers 48 --heads 32 --kv-heads 8 --dim 2048 --ffn-dim 6912" stride=24 ;;
    *) recipe_die "SIZE must be 360M, 500M, 710M, 1.5B or 3B (the paper's Tables 8 and 9), got '$SIZE'" "SIZE=500M" ;;
esac
MODEL=${MODEL:-"--arch llama $shape --qk-norm 1 --vocab 50277 --rope-theta $ROPE_THETA --max-seq $T"}
# the paper's stride for SIZE (half the depth); a MODEL of other depth gets the trainer's default, L/2
DEPTH_FLAGS=()
[[ "$MODEL" == *"$shape"* ]] && DEPTH_FLAGS=(--depth-stride "$stride")

recipe_whole STEPS EVAL_EVERY
recipe_batch "$TOTAL" "$B" "$T" >/dev/null
recipe_checkpoint_flags
recipe_data "$DATA/pile_train_*.bin" ".venv/bin/python scripts/prepare_pile.py --budget 32e9"
# the one Pile val set that scripts/prepare_pile.py writes, or (--val-by-domain 1) one per domain
if compgen -G "$DATA/pile_val_[0-9]*.bin" >/dev/null; then
    VAL_FLAGS=(--val-data "$DATA/pile_val_[0-9]*.bin")
else
    recipe_domain_vals "$DATA" pile
fi
samples=()  # decoded samples need the tokenizer file that prepare_pile.py writes
[ -e "$DATA/neox.vptok" ] && samples=(--sample-every $((EVAL_EVERY * 4)) --tokenizer "$DATA/neox.vptok")
for path in $PATHS; do
    extra=()
    [ "$path" = depth ] && extra=("${DEPTH_FLAGS[@]}")
    # shellcheck disable=SC2086
    recipe_run "$path" $MODEL "${extra[@]}" \
        --train-data "$DATA/pile_train_*.bin" "${VAL_FLAGS[@]}" \
        --eval-every "$EVAL_EVERY" --eval-batches 10 "${samples[@]}" \
        "${CHECKPOINT_FLAGS[@]}"
done
recipe_report
