#!/usr/bin/env bash
# dev/bench_paths.sh: `make bench`, the figures of the GPU issues, in one call on one device.
#
#   1. valuepath's trainer for every value path: GPT-2 124M, B=64, T=1024, bf16, each path's
#      default settings (build/dev/cuda/bf16/bench_gpt_<path>; vanilla first);
#   2. dev/bench_pytorch.py, plain PyTorch (torch.compile + SDPA flash) at the same shapes;
# then two tables: valuepath vanilla vs PyTorch (tok/s ratio), and each path's step time relative
# to vanilla's, with its memory. The issues' targets are printed beside the figures, never
# asserted: a benchmark prints, a test asserts.
#
# Environment: BENCH_PYTHON (python3), BENCH_STEPS (20), BENCH_WARMUP (5), BENCH_PATHS
# (vanilla resformer svformer sla depth), OUT_DIR (build/bench), GPU_BUILD (build: where the
# bench_gpt binaries are; make bench passes its own).
set -u
cd "$(dirname "$0")/.."
OUT_DIR="${OUT_DIR:-build/bench}"
STEPS="${BENCH_STEPS:-20}"
WARMUP="${BENCH_WARMUP:-5}"
PATHS="${BENCH_PATHS:-vanilla resformer svformer sla depth}"
PY="${BENCH_PYTHON:-python3}"
mkdir -p "$OUT_DIR"

field() { grep -o "$2=[^ ]*" <<<"$1" | head -1 | cut -d= -f2; }

declare -A MS TOKS MEM VPMEM
for p in $PATHS; do
    bin=${GPU_BUILD:-build}/dev/cuda/bf16/bench_gpt_$p
    if [ ! -x "$bin" ]; then
        echo "✗ $bin not built (make $bin)"
        continue
    fi
    echo "== $p"
    "./$bin" --batch-size 64 --seq-len 1024 --steps "$STEPS" --warmup "$WARMUP" | tee "$OUT_DIR/valuepath_$p.txt"
    line=$(grep '^BENCH' "$OUT_DIR/valuepath_$p.txt" | tail -1)
    [ -z "$line" ] && continue
    MS[$p]=$(field "$line" ms_per_step)
    TOKS[$p]=$(field "$line" tok_per_s)
    MEM[$p]=$(field "$line" peak_mem_gib)
    VPMEM[$p]=$(field "$line" vp_mem_gib)
done

echo "== pytorch"
PYTHONUNBUFFERED=1 "$PY" dev/bench_pytorch.py --batch-size 64 --seq-len 1024 --steps "$STEPS" --warmup "$WARMUP" | tee "$OUT_DIR/pytorch.txt"
pt_line=$(grep '^BENCH' "$OUT_DIR/pytorch.txt" | tail -1)

echo
grep -h '^BENCH' "$OUT_DIR"/valuepath_*.txt "$OUT_DIR/pytorch.txt" 2>/dev/null
echo
if [ -n "${TOKS[vanilla]:-}" ] && [ -n "$pt_line" ]; then
    pt=$(field "$pt_line" tok_per_s)
    awk -v a="${TOKS[vanilla]}" -v b="$pt" 'BEGIN { printf "valuepath vanilla / PyTorch: %d / %d tok/s = %.3fx (target >= 1.25x; >= 600000 tok/s on one H100)\n", a, b, a / b }'
else
    echo "(no valuepath / PyTorch ratio: one of the two did not run)"
fi

# each path relative to vanilla, measured in this call on this device
declare -A TARGET=([vanilla]="1" [resformer]="<= 1.01" [svformer]="< 1.0" [sla]="<= 1.01" [depth]="<= 1.015")
echo
echo "| path | ms/step | tok/s | vs vanilla | target | peak GiB | path buffers GiB |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for p in $PATHS; do
    [ -z "${MS[$p]:-}" ] && { echo "| $p | not run | | | | | |"; continue; }
    ratio=$([ -n "${MS[vanilla]:-}" ] && awk -v a="${MS[$p]}" -v b="${MS[vanilla]}" 'BEGIN { printf "%.4fx", a / b }' || echo "?")
    echo "| $p | ${MS[$p]} | ${TOKS[$p]} | $ratio | ${TARGET[$p]} | ${MEM[$p]} | ${VPMEM[$p]} |"
done
