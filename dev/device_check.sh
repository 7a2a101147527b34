#!/usr/bin/env bash
# dev/device_check.sh: everything a session with a GPU verifies, in ONE call (../.library/device/).
#
#   bash dev/device_check.sh            from the repository root, on the GPU machine
#
# Steps, each under its own time limit so the whole run stays well under the 10-minute command
# limit (and the summary is written even if a step times out):
#   1. build: every GPU target (make gpu-compile-check: trainer, test_gpt, labs, bench; bf16 + fp32)
#   2. test_gpt for every value path the GPU implements, both precisions (both families, GQA,
#      QK-norm, determinism, resume, recompute, checkpoints across builds: see test_gpt.cu)
#   3. the kernel labs' CPU checks (--check: every version of every lab, no timings)
#   4. the trainer's CLI end to end on a synthetic shard: two identical runs give identical logs,
#      --resume continues bit-exactly, and ./train_cpu resumes a checkpoint written by ./train
#   5. make bench: GPT-2 124M, B=64, T=1024, bf16, valuepath then PyTorch on this device
# and prints a short table last. With $OUT set (the device tool), results go there (at most 8
# files): summary.md (the table, in the form dev/results/ wants), build.log, test_gpt.log,
# labs.log, train_cli.log, bench.txt.
#
# Environment: SKIP_BENCH=1, SKIP_LABS=1, SKIP_CLI=1 to leave steps out; COMMIT=<sha> to name the
# commit in the summary (the device copy of the tree may have no .git); JOBS (16).
set -u
cd "$(dirname "$0")/.."
OUT_DIR="${OUT:-build/device_check}"
mkdir -p "$OUT_DIR"
JOBS="${JOBS:-16}"
START=$(date +%s)
DEADLINE=$((START + 560))  # the tool's command limit is 600 s; leave room for the summary
SUMMARY="$OUT_DIR/summary.md"
ROWS=()

remaining() { echo $((DEADLINE - $(date +%s))); }
# run_step NAME BUDGET_SECONDS LOGFILE command...: runs under min(budget, time left), appends to LOGFILE
run_step() {
    local name="$1" budget="$2" log="$3"
    shift 3
    local left
    left=$(remaining)
    [ "$left" -lt "$budget" ] && budget="$left"
    if [ "$budget" -le 5 ]; then
        echo "== $name: skipped (out of time)" | tee -a "$log"
        return 124
    fi
    echo "== $name (limit ${budget}s)" | tee -a "$log"
    local t0 rc
    t0=$(date +%s)
    timeout --kill-after=10 "$budget" "$@" >>"$log" 2>&1
    rc=$?
    echo "== $name: exit $rc after $(($(date +%s) - t0))s" | tee -a "$log"
    return $rc
}
row() { ROWS+=("| $1 | $2 |"); write_summary; }
write_summary() {
    {
        echo "# valuepath device check"
        echo
        echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
        echo "- commit: ${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
        echo "- device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
        echo "- nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo none)"
        echo "- torch: $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
        echo
        echo "| check | result |"
        echo "| --- | --- |"
        printf '%s\n' "${ROWS[@]}"
    } >"$SUMMARY"
}
counts() { grep -Eo '[0-9]+ passed, [0-9]+ failed' "$1" | tail -1; }

nvidia-smi -L || true
write_summary

# 1. build ---------------------------------------------------------------------------------
if run_step "build" 240 "$OUT_DIR/build.log" make -j"$JOBS" gpu-compile-check; then
    row "build: make gpu-compile-check (sm_90a, bf16 + fp32)" "ok"
else
    row "build: make gpu-compile-check" "FAILED (see build.log)"
    tail -30 "$OUT_DIR/build.log"
fi

# 2. test_gpt ------------------------------------------------------------------------------
GPU_PATHS=$(make -s print-gpu-paths 2>/dev/null)
GPU_PATHS=${GPU_PATHS:-vanilla}
for path in $GPU_PATHS; do
    for prec in bf16 fp32; do
        bin=build/tests/test_gpt_gpu_${path}_${prec}
        tlog="$OUT_DIR/test_gpt.log"
        if [ -x "$bin" ]; then
            run_step "test_gpt $path $prec" 150 "$tlog" "./$bin"
            rc=$?
            section=$(grep -A100000 "== test_gpt $path $prec (limit" "$tlog")
            c=$(echo "$section" | counts /dev/stdin)
            if echo "$section" | grep -q "skipped: no CUDA device"; then row "test_gpt $path $prec" "skipped: no CUDA device"
            else row "test_gpt $path $prec" "$([ $rc -eq 0 ] && echo ok || echo FAILED) ($c)"; fi
        else
            row "test_gpt $path $prec" "not built"
        fi
    done
done

# 3. kernel labs ---------------------------------------------------------------------------
if [ "${SKIP_LABS:-0}" != 1 ]; then
    for lab in attention_forward attention_backward classifier layernorm rmsnorm; do
        if [ -x build/dev/cuda/bf16/$lab ]; then
            run_step "lab $lab --check" 90 "$OUT_DIR/labs.log" ./build/dev/cuda/bf16/$lab --check
            rc=$?
            if tail -3 "$OUT_DIR/labs.log" | grep -q "skipped: no CUDA device"; then row "lab $lab --check (bf16)" "skipped: no CUDA device"
            else row "lab $lab --check (bf16)" "$([ $rc -eq 0 ] && echo 'ok: all versions match the CPU' || echo FAILED)"; fi
        else
            row "lab $lab" "not built"
        fi
    done
fi

# 4. the CLI end to end ----------------------------------------------------------------------
if [ "${SKIP_CLI:-0}" != 1 ] && [ -x build/vanilla/train_bf16 ]; then
    CLI="$OUT_DIR/train_cli.log"
    W=build/device_check_cli
    rm -rf "$W"
    mkdir -p "$W"
    # a synthetic llm.c-format shard (magic 20240520, version 1 = uint16 tokens)
    python3 - "$W/synth_train_000.bin" <<'EOF'
import struct, sys, random
random.seed(0)
n = 200000
toks = [random.randrange(512) if i % 7 else (i * 31) % 512 for i in range(n)]
hdr = [20240520, 1, n] + [0] * 253
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *hdr))
    f.write(struct.pack("<%dH" % n, *toks))
EOF
    FLAGS=(--arch gpt2 --layers 2 --heads 4 --dim 128 --vocab 512 --max-seq 128 --seq-len 128 --batch-size 8 --max-steps 20 --lr 1e-3 --warmup-steps 5
        --seed 7
        --train-data "$W/synth_train_*.bin" --checkpoint-every 10)
    ok=1
    run_step "train run A" 60 "$CLI" ./build/vanilla/train_bf16 "${FLAGS[@]}" --out-dir "$W/a" || ok=0
    run_step "train run B" 60 "$CLI" ./build/vanilla/train_bf16 "${FLAGS[@]}" --out-dir "$W/b" --recompute 2 || ok=0
    losses() { grep -o '"train_loss":[^,]*' "$1/log.jsonl"; }
    if [ $ok = 1 ] && [ "$(losses "$W/a")" = "$(losses "$W/b")" ] && [ -n "$(losses "$W/a")" ]; then
        row "./train twice (the second with --recompute 2): identical losses" "ok"
    else
        row "./train twice: identical losses" "FAILED (see train_cli.log)"
    fi
    # resume from step 10 in a directory holding only run A's step-10 checkpoint: steps 11..20 must match run A's
    mkdir -p "$W/r"
    cp "$W/a/ckpt_00000010.bin" "$W/r/"
    run_step "train resume" 60 "$CLI" ./build/vanilla/train_bf16 "${FLAGS[@]}" --out-dir "$W/r" --resume 1
    if [ "$(losses "$W/a" | tail -10)" = "$(losses "$W/r" | tail -10)" ] && [ -n "$(losses "$W/r")" ]; then
        row "./train --resume 1 from step 10: steps 11..20 bit-identical" "ok"
    else
        row "./train --resume 1: bit-identical" "FAILED (see train_cli.log)"
    fi
    # the CPU build resumes the GPU build's checkpoint
    if run_step "build train_cpu" 90 "$CLI" make -j"$JOBS" train_cpu; then
        mkdir -p "$W/c"
        cp "$W/a/ckpt_00000010.bin" "$W/c/"
        if run_step "train_cpu resumes the GPU checkpoint" 90 "$CLI" ./train_cpu "${FLAGS[@]}" --out-dir "$W/c" --resume 1; then
            row "./train_cpu --resume 1 from ./train's step-10 checkpoint" "ok: step 11 loss $(losses "$W/c" | head -1 | cut -d: -f2) (cpu) vs $(losses "$W/a" | sed -n 11p | cut -d: -f2) (gpu bf16); step 20 $(losses "$W/c" | tail -1 | cut -d: -f2) vs $(losses "$W/a" | tail -1 | cut -d: -f2)"
        else
            row "./train_cpu --resume 1 from ./train's checkpoint" "FAILED"
        fi
    else
        row "./train_cpu --resume 1 from ./train's checkpoint" "train_cpu did not build"
    fi
fi

# 5. bench ---------------------------------------------------------------------------------
if [ "${SKIP_BENCH:-0}" != 1 ]; then
    BENCH="$OUT_DIR/bench.txt"
    run_step "make bench" 300 "$BENCH" make bench
    grep -h '^BENCH' "$BENCH" | sed 's/^/    /'
    for impl in valuepath pytorch; do
        line=$(grep "^BENCH impl=$impl" "$BENCH" | tail -1)
        if [ -n "$line" ]; then
            get() { echo "$line" | grep -o "$1=[^ ]*" | cut -d= -f2; }
            row "bench $impl (GPT-2 124M, B=64, T=1024)" "$(get tok_per_s) tok/s, $(get ms_per_step) ms/step, MFU $(awk -v m="$(get mfu)" 'BEGIN{printf "%.1f%%", 100*m}'), peak mem $(get peak_mem_gib) GiB$( [ "$impl" = pytorch ] && echo ", micro-batch $(get micro_batch)")"
        else
            row "bench $impl" "did not finish (see bench.txt)"
        fi
    done
    ratio=$(grep -o 'valuepath / PyTorch: .*' "$BENCH" | tail -1)
    [ -n "$ratio" ] && row "ratio" "$ratio"
fi

write_summary
echo
echo "device check finished in $(($(date +%s) - START))s; logs in $OUT_DIR"
cat "$SUMMARY"
