#!/usr/bin/env bash
# scripts/compare_paths.sh: the same small model, seed, data and steps under every value path,
# and one table of final train loss, final val loss and median step time.
#
#   bash scripts/compare_paths.sh                  # CPU trainers (build/<path>/train_cpu)
#   TRAINER='build/{path}/train' bash scripts/compare_paths.sh   # another build, {path} substituted
#   STEPS=400 ARCH=llama EXTRA='--kv-heads 2' bash scripts/compare_paths.sh
#
# Needs the TinyShakespeare shards (python scripts/prepare_tinyshakespeare.py). Each path runs
# with its default settings (value_paths.md section 10), which this model's shape resolves to:
# with 6 layers and 6 heads, SLA n_l = 5 (round 4.5 up) and n_h = 5 (round 4.5 up), Depth stride 3.
set -euo pipefail
cd "$(dirname "$0")/.."

PATHS=${PATHS:-"vanilla resformer svformer sla depth"}
TRAINER=${TRAINER:-"build/{path}/train_cpu"}
STEPS=${STEPS:-200}
ARCH=${ARCH:-gpt2}
DATA=${DATA:-data/tinyshakespeare}
OUT=${OUT:-runs/compare_paths}
EXTRA=${EXTRA:-}
MODEL="--arch $ARCH --layers 6 --heads 6 --dim 192 --max-seq 64 --seq-len 64 --batch-size 8"
TRAIN="--max-steps $STEPS --lr 2e-3 --warmup-steps 20 --seed 1337 --eval-every $STEPS --eval-batches 16"

ls $DATA/tinyshakespeare_train_*.bin >/dev/null 2>&1 || {
    echo "error: no TinyShakespeare shards in $DATA; run: python scripts/prepare_tinyshakespeare.py" >&2
    exit 1
}
if [[ "$TRAINER" == build/*/train_cpu || "$TRAINER" == "build/{path}/train_cpu" ]]; then
    make -s $(for p in $PATHS; do echo "build/$p/train_cpu"; done)
fi

rows=()
for path in $PATHS; do
    bin=${TRAINER//\{path\}/$path}
    dir=$OUT/$path
    rm -rf "$dir"
    echo "== $path: $bin" >&2
    "$bin" $MODEL $TRAIN $EXTRA --train-data "$DATA/tinyshakespeare_train_*.bin" \
        --val-data "$DATA/tinyshakespeare_val_*.bin" --out-dir "$dir" >"$OUT.$path.log" 2>&1 || {
        echo "error: $path failed, see $OUT.$path.log" >&2
        exit 1
    }
    rows+=("$(python3 - "$dir/log.jsonl" "$path" <<'PY'
import json, sys, statistics
log = [json.loads(l) for l in open(sys.argv[1])]
cfg = log[0]
steps = [r for r in log if "train_loss" in r]
val = [r for r in log if "val_loss" in r][-1]
ms = statistics.median(r["ms"] for r in steps[1:])
settings = {k: v for k, v in cfg.items() if k.startswith(("resformer", "sla", "depth"))}
print(f"| {sys.argv[2]} | {cfg['num_params']:,} | {steps[-1]['train_loss']:.4f} | {val['val_loss']:.4f} | {ms:.1f} | "
      + (", ".join(f"{k}={v}" for k, v in settings.items()) or "-") + " |")
PY
)")
done

echo
echo "$(date -u +%Y-%m-%d), $(uname -m), $(nproc) cores, $STEPS steps, model: $MODEL $EXTRA"
echo
echo "| path | params | final train loss | val loss | median ms/step | settings |"
echo "|---|---:|---:|---:|---:|---|"
printf '%s\n' "${rows[@]}"
