#!/bin/bash
# dev/bit_identity.sh REV: does the working tree's GPU trainer compute the same bits as REV's?
#
# For a change that should not move a single bit (a faster epilogue, vector loads, a reordered
# launch), on a machine without a GPU: builds the BF16 (or PRECISION=fp32) trainer of every value path under the CUDA
# emulator (tests/emu) twice, once from REV (a git worktree in build/bit_identity/REV) and once from
# the working tree, trains each for 3 steps on the same small synthetic shards, and compares the
# final checkpoints byte for byte (weights, AdamW moments, step, data position) and the logged
# losses and gradient norms. Configs: GPT-2 with D = 64 (biases, the trainer's head dim) and Llama
# with GQA, D = 32 and QK-norm; each path with its own options (ResFormer fixed and learnable λ,
# SLA ORIG and CHAIN, Depth strides 2 and 1). It checks bits, not closeness: a change that is
# meant to alter numerics fails here by design (test_gpt is the check for those).
#
#   bash dev/bit_identity.sh HEAD        # the uncommitted change against the last commit
#   bash dev/bit_identity.sh c4857c8 resformer depth   # only these paths
#
# PRECISION=fp32 compares the FP32 trainers instead (the SIMT kernels; a change that should keep
# the FP32 build's bits while it moves the BF16 build's roundings).
#   PRECISION=fp32 bash dev/bit_identity.sh HEAD resformer svformer
# PYTHON (default python3, as in the Makefile) writes the shards with the tests' helper (numpy).
# Exit status: 0 when every run is identical, 1 when one differs or fails, 2 on bad usage.
# About 2 minutes per side to build (2 cores) and 1 minute to run.
set -uo pipefail
cd "$(dirname "$0")/.."
REV=${1:-}
if [ -z "$REV" ] || ! git rev-parse --verify -q "$REV^{commit}" > /dev/null; then
    echo "usage: bash dev/bit_identity.sh REV [path ...]   (REV: a commit to compare the working tree with)" >&2
    exit 2
fi
shift
PATHS=("$@")
PREC=${PRECISION:-bf16}
PREC=${PREC,,}
case $PREC in bf16 | fp32) ;; *) echo "error: PRECISION=$PRECISION (bf16 or fp32)" >&2; exit 2 ;; esac
unset PRECISION  # the Makefile's own variable (BF16 or FP32): the emulator targets name the precision
[ ${#PATHS[@]} -eq 0 ] && PATHS=(vanilla resformer sla svformer depth)
for p in "${PATHS[@]}"; do
    case $p in vanilla | resformer | sla | svformer | depth) ;; *) echo "error: unknown path '$p' (vanilla, resformer, sla, svformer, depth)" >&2; exit 2 ;; esac
done
# an absolute PYTHON: make uses it too (the emulator's source rewrite), also inside the worktree
# (not realpath: a venv's python is a symlink, and resolving it would leave the venv)
PYTHON=$(command -v "${PYTHON:-python3}") && PYTHON="$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")" ||
    { echo "error: no python (PYTHON=${PYTHON:-python3})" >&2; exit 2; }
export PYTHON
SHA=$(git rev-parse --short=12 "$REV^{commit}")
WORK=build/bit_identity
OLD=$WORK/$SHA
mkdir -p "$WORK"
if [ ! -e "$OLD/.git" ]; then
    rm -rf "$OLD"
    git worktree prune  # a worktree whose folder went with build/ (make clean) is still registered
    git worktree add -q --detach "$OLD" "$SHA" || { echo "error: could not check out $SHA into $OLD" >&2; exit 1; }
fi
targets=()
for p in "${PATHS[@]}"; do targets+=("build/emu/$p/train_$PREC"); done
echo "building ${targets[*]} at $SHA and in the working tree"
make -s -C "$OLD" -j2 "${targets[@]}" > "$WORK/build_old.log" 2>&1 || { echo "error: the build at $SHA failed, see $WORK/build_old.log" >&2; exit 1; }
make -s -j2 "${targets[@]}" > "$WORK/build_new.log" 2>&1 || { echo "error: the working tree's build failed, see $WORK/build_new.log" >&2; exit 1; }

DATA=$WORK/data
"$PYTHON" - "$DATA" << 'EOF' || exit 1
import sys
from pathlib import Path
sys.path.insert(0, "tests/python")
from test_trainer_cli import pattern_tokens, write_shard  # the tests' own shard writer
d = Path(sys.argv[1])
d.mkdir(parents=True, exist_ok=True)
for i, n in enumerate([3000, 2000]):
    write_shard(str(d / f"train_{i:03d}.bin"), pattern_tokens(n, seed=i), 1)
write_shard(str(d / "val_000.bin"), pattern_tokens(900, seed=9), 1)
EOF

GPT2=(--arch gpt2 --layers 4 --heads 2 --dim 128 --vocab 64 --max-seq 64 --seq-len 64)
LLAMA=(--arch llama --layers 4 --heads 4 --kv-heads 2 --qk-norm 1 --dim 128 --ffn-dim 192 --vocab 64 --max-seq 64 --seq-len 64)
COMMON=(--train-data "$DATA/train_*.bin" --val-data "$DATA/val_000.bin" --batch-size 2 --max-steps 3 --lr 1e-2 --warmup-steps 1)
# the losses, norms and validation losses of a log.jsonl, one line per event (timings left out)
LOSSES='import json, sys
for r in map(json.loads, open(sys.argv[1])):
    if "train_loss" in r or "val_loss" in r: print(r.get("step"), r.get("train_loss"), r.get("grad_norm"), r.get("val_loss"))'
failed=0
compare() {  # name path [flags...]
    local name=$1 p=$2
    shift 2
    for side in old new; do
        local bin=build/emu/$p/train_$PREC out=$WORK/out
        [ $side = old ] && bin=$OLD/build/emu/$p/train_$PREC
        rm -rf "$out" "$WORK/out_$side"  # the same --out-dir for both sides: it is part of the checkpoint
        if ! "$bin" "${COMMON[@]}" "$@" --out-dir "$out" > "$WORK/log_$side.txt" 2>&1; then
            echo "FAIL  $name: the $side trainer exited with an error, see $WORK/log_$side.txt"
            failed=1
            return
        fi
        mv "$out" "$WORK/out_$side"
    done
    local ck_old ck_new
    ck_old=$(ls "$WORK"/out_old/ckpt_*.bin | tail -1)
    ck_new=$(ls "$WORK"/out_new/ckpt_*.bin | tail -1)
    if [ "$(basename "$ck_old")" != "$(basename "$ck_new")" ] || ! cmp -s "$ck_old" "$ck_new"; then
        echo "FAIL  $name: the checkpoints differ ($ck_old, $ck_new)"
        failed=1
    elif ! diff <(python3 -c "$LOSSES" "$WORK/out_old/log.jsonl") <(python3 -c "$LOSSES" "$WORK/out_new/log.jsonl") > /dev/null; then
        echo "FAIL  $name: the logged losses differ"
        failed=1
    else
        echo "same  $name ($(basename "$ck_new"), $(stat -c %s "$ck_new") bytes; train losses $(python3 -c "$LOSSES" "$WORK/out_new/log.jsonl" | awk '$2 != "None" {printf "%s ", $2}'))"
    fi
}
for p in "${PATHS[@]}"; do
    case $p in
        vanilla) compare "vanilla gpt2" vanilla "${GPT2[@]}"; compare "vanilla llama gqa" vanilla "${LLAMA[@]}" ;;
        resformer) compare "resformer gpt2 fixed" resformer "${GPT2[@]}"; compare "resformer llama learn" resformer "${LLAMA[@]}" --resformer-lambda learn ;;
        sla) compare "sla gpt2 orig" sla "${GPT2[@]}" --sla-layers 1 --sla-heads 1; compare "sla llama chain" sla "${LLAMA[@]}" --sla-layers 1 --sla-heads 2 --sla-chain 1 ;;
        svformer) compare "svformer gpt2" svformer "${GPT2[@]}"; compare "svformer llama" svformer "${LLAMA[@]}" ;;
        depth) compare "depth gpt2 stride 2" depth "${GPT2[@]}" --depth-stride 2; compare "depth llama stride 1" depth "${LLAMA[@]}" --depth-stride 1 ;;
    esac
done
[ $failed = 0 ] && echo "all identical to $SHA ($PREC)" || echo "NOT identical to $SHA ($PREC)"
exit $failed
