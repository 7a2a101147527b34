#!/usr/bin/env bash
# dev/device_check.sh: everything a session with a GPU verifies, in ONE call (../.library/device/).
#
#   bash dev/device_check.sh            from the repository root, on the GPU machine
#
# Steps, in the order of what the open GPU issues need first, each under its own time limit so
# the whole run stays under the 10-minute command limit (and the summary is written even if a step
# times out; a step that would start after TIME_LIMIT is "skipped: out of time"):
#   0. the machine: the tools the steps call; the toolkit's lib64 on LD_LIBRARY_PATH (cuBLAS(Lt)
#      are linked dynamically), and a row if the loader still misses a library
#   1. build: the GPU targets the enabled steps run (test_gpt of each path in both precisions, the
#      labs, ./train, the bench binaries), make -k so one broken unit does not stop the rest
#   2. test_gpt for every value path, both precisions (both families, GQA, QK-norm, each path's
#      cross-layer settings, determinism, resume, recompute, checkpoints across builds: test_gpt.cu);
#      the first binary that fails runs again with CUDA_LAUNCH_BLOCKING=1 and under
#      compute-sanitizer memcheck, so a fault is named at the launch that made it
#      2b. each path's bf16 suite again with the kernels the default leaves out throughout: attention
#      version 4 (mma.sync: forward, dQ, dK/dV, where the default runs version 6 on wgmma), the bias
#      gradients from the GEMMs' BGRADB epilogue, and Depth's fused depth kernels
#   3. the kernel labs' CPU checks (--check: every version of every lab, no timings), and the wgmma
#      probe (each shape and operand layout of attention version 6 against a CPU matmul)
#   4. make bench: GPT-2 124M, B=64, T=1024, bf16, every value path then PyTorch on this device;
#      then each build variant of dev/bench_variants.list against its path's plain build, alternating
#   5. the trainer's CLI end to end on a synthetic shard: two identical runs give identical logs,
#      --resume continues bit-exactly, ./train_cpu resumes a checkpoint written by ./train, both
#      start from the same weights, and GPT-2 124M's start to exit on every core and on one
#   6. data parallel (MPI + NCCL build; Open MPI from the bundle where the machine has none, NCCL
#      from PyTorch's wheel where the toolkit has none): mpirun -np 1, --zero 0 and 1, plain and with
#      VP_DIST_FORCE=1 (the NCCL code path with one rank), losses and checkpoints bit-identical to
#      ./train's; with >= 2 GPUs also 2 ranks against one GPU with accumulation 2, and the step
#      time at GPT-2 124M with the gradient all-reduce overlapped (--overlap-reduce 1) and not
#   7. the attention labs timed (every version), and a bench step with the attention kernels
#      without cp.async (--attention-version 2) against the trainer's, A/B in one process
#   8. the memory-bound labs timed (classifier, layernorm, rmsnorm, gelu, depth_attention: each version's ms and GB/s, fused
#      against unfused)
#   9. if time is left: each kernel's time per step under ncu (dev/kernel_profile.py), for each path
#      of PROFILE_PATHS (default "vanilla"; "vanilla resformer depth" to see where a path's time goes)
#  10. if time is left: the wgmma attention kernels (versions 6 and 7: forward, dQ, dK/dV; and
#      version 8's two backward kernels) under
#      ncu's detailed sections (throughput, pipes, shared memory, warp stalls) at the labs' first
#      shape, into labs_timed.log: what limits them, for the next kernel's design
# and prints a short table last. With $OUT set (the device tool), results go there (at most 8
# files): summary.md (the table, in the form dev/results/ wants), build.log, test_gpt.log,
# labs.log, train_cli.log, dist.log, bench.txt, labs_timed.log.
#
# DEVICE_BUNDLE=build/device_bundle.tar.xz: binaries built off the device by dev/device_bundle.sh
# (carried with the call), used instead of building when they come from these very sources.
#
# CONTINUE=1: a second call on the same (still warm) machine runs only what the first left out:
# each unit (one test_gpt binary, one lab's check, the bench, the CLI, data parallel, the attention
# timings, the memory-bound timings, the profile) that reached a verdict there (ok or FAILED, not
# cut off or skipped for time) is not run again, and its rows are copied into this call's summary,
# marked "(earlier call)". Only a call of the same sources counts (the hash of dev/device_bundle.sh
# --hash); the units' rows are kept in STATE_DIR (build/device_check_state, which the device tool
# leaves in place between calls to a warm machine, while it empties $OUT). Without CONTINUE=1 a
# call starts that record afresh.
#
# Environment: SKIP_BUILD=1, SKIP_TESTS=1, SKIP_BENCH=1, SKIP_LABS=1, SKIP_CLI=1, SKIP_DIST=1 to
# leave steps out; ONLY_PATHS ("vanilla depth") to test fewer value paths; COMMIT=<sha> to name the
# commit in the summary (the device copy of the tree may have no .git); JOBS (16); TIME_LIMIT (530:
# seconds after which no step starts); TEST_GPT_DIR (build/tests: where the test_gpt binaries are
# run from; for this script's own test, tests/python/test_device_check.py); GPU_BUILD (build: where
# every GPU binary is built and run from; the script's own test on a machine without a GPU sets
# build/check, where make test compiled them unoptimized). BENCH_PARTS ("bench variants attention
# memory profile attnprof", the default: steps 4, 4b, 7, 8, 9 and 10) picks among the bench steps, e.g.
# BENCH_PARTS=profile for a call that only profiles; MEMORY_LABS (step 8's labs, "classifier
# layernorm rmsnorm gelu depth_attention") to time fewer of them; ONLY_VARIANTS ("att_v4
# bias_bgradb") to time only those variants of dev/bench_variants.list, in that order; AB_ROUNDS (4:
# the ABBA rounds of a variant that is bench_gpt flags, step 4b); RANDOM_SHAPES (20: step 2's
# test_gpt random_shapes count, VP_TEST_RANDOM_SHAPES).
set -u
cd "$(dirname "$0")/.."
OUT_DIR="${OUT:-build/device_check}"
# where the GPU binaries are (gpu.mk GPU_BUILD): build/, but for this script's own test on a machine
# without a GPU, which points it at build/check/ (make test's unoptimized compile check)
GB="${GPU_BUILD:-build}"
mkdir -p "$OUT_DIR"
JOBS="${JOBS:-16}"
BENCH_PARTS=" ${BENCH_PARTS:-bench variants attention memory profile attnprof} "
PROFILE_PATHS=${PROFILE_PATHS:-vanilla}
[ "${SKIP_BENCH:-0}" = 1 ] && BENCH_PARTS=""
bench_part() { [[ "$BENCH_PARTS" == *" $1 "* ]]; }
START=$(date +%s)
# the tool's command limit is 600 s: stop starting steps at 530 s, so a step cut off at its limit
# (plus timeout's 10 s grace) still leaves time to write the summary
DEADLINE=$((START + ${TIME_LIMIT:-530}))
SUMMARY="$OUT_DIR/summary.md"
ROWS=()

remaining() { echo $((DEADLINE - $(date +%s))); }
# run_step NAME BUDGET_SECONDS LOGFILE command...: runs under min(budget, time left), appends to
# LOGFILE; sets UNFINISHED=1 when the command was cut off at its limit or not started for lack of
# time (the unit it belongs to then has no verdict, and a CONTINUE=1 call runs it again)
UNFINISHED=0
# "name Ns" of each step run: the summary's last row, by which the next session sizes its calls
STEP_TIMES=()
run_step() {
    local name="$1" budget="$2" log="$3"
    shift 3
    local left
    left=$(remaining)
    [ "$left" -lt "$budget" ] && budget="$left"
    if [ "$budget" -le 5 ]; then
        echo "== $name: skipped (out of time)" | tee -a "$log"
        UNFINISHED=1
        return 125
    fi
    echo "== $name (limit ${budget}s)" | tee -a "$log"
    local t0 rc
    t0=$(date +%s)
    timeout --kill-after=10 "$budget" "$@" >>"$log" 2>&1
    rc=$?
    echo "== $name: exit $rc after $(($(date +%s) - t0))s" | tee -a "$log"
    STEP_TIMES+=("$name $(($(date +%s) - t0))s")
    case $rc in 124 | 137) UNFINISHED=1 ;; esac
    return $rc
}
# verdict RC: what a step's exit status means, for the table (run_step: 124 = cut off at its
# limit, 125 = not started, out of time; neither is a failure of the code under test)
verdict() {
    case "$1" in
        0) echo "ok" ;;
        124 | 137) echo "TIMED OUT (not a verdict on the code)" ;;
        125) echo "skipped: out of time" ;;
        *) echo "FAILED (exit $1)" ;;
    esac
}
row() { ROWS+=("| $1 | $2 |"); write_summary; }
# The environment is read once (a torch import takes seconds): every row rewrites the summary.
ENV_COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
ENV_DEVICE=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
ENV_NVCC=$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo none)
ENV_TORCH=$(timeout 60 python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)
# written to a temporary file and renamed: a kill in the middle leaves the previous summary whole
write_summary() {
    {
        echo "# valuepath device check"
        echo
        echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
        echo "- commit: $ENV_COMMIT"
        echo "- device: $ENV_DEVICE"
        echo "- nvcc: $ENV_NVCC"
        echo "- torch: $ENV_TORCH"
        echo
        echo "| check | result |"
        echo "| --- | --- |"
        printf '%s\n' "${ROWS[@]}"
        if [ ${#STEP_TIMES[@]} -gt 0 ]; then
            echo "| seconds per step, $(($(date +%s) - START)) s in all | $(printf '%s; ' "${STEP_TIMES[@]}" | sed 's/; $//') |"
        fi
    } >"$SUMMARY.tmp" && mv -f "$SUMMARY.tmp" "$SUMMARY"
}
counts() { grep -Eo '[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?' "$1" | tail -1; }
# make_shard FILE: a synthetic llm.c-format shard (magic 20240520, version 1 = uint16 tokens, vocab
# 512). Synthetic because data/ is git-ignored: the device copy of the tree has no TinyShakespeare.
make_shard() {
    python3 - "$1" <<'EOF'
import struct, sys, random
random.seed(0)
n = 200000
toks = [random.randrange(512) if i % 7 else (i * 31) % 512 for i in range(n)]
hdr = [20240520, 1, n] + [0] * 253
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *hdr))
    f.write(struct.pack("<%dH" % n, *toks))
EOF
}
# losses DIR: the train_loss entries of DIR/log.jsonl, one per line
losses() { grep -o '"train_loss":[^,]*' "$1/log.jsonl" 2>/dev/null; }
# ckpt_tensors FILE: sha256 of a checkpoint's tensors (params, m, v), without its header and run text
ckpt_tensors() {
    python3 - "$1" <<'EOF'
import hashlib, struct, sys
raw = open(sys.argv[1], "rb").read()
start = struct.unpack_from("<i", raw, 8)[0] + struct.unpack_from("<q", raw, 32)[0]
print(hashlib.sha256(raw[start:]).hexdigest())
EOF
}

# Units for CONTINUE=1 (see the header). unit_begin KEY: 1 (skip the unit) if an earlier call of
# these sources finished it, after copying its rows into this summary; else 0, and the rows added
# from here on are the unit's. unit_end KEY: records them, unless a step of the unit was cut off.
STATE_DIR="${STATE_DIR:-build/device_check_state}"
SOURCES=$(bash dev/device_bundle.sh --hash 2>/dev/null || echo unknown)
CONTINUING=0
UNIT_ROW0=0
unit_file() { echo "$STATE_DIR/unit.$(echo "$1" | tr -c 'A-Za-z0-9_.-' '_')"; }
unit_begin() {
    local f
    f=$(unit_file "$1")
    if [ $CONTINUING = 1 ] && [ -f "$f" ]; then
        while IFS= read -r r; do ROWS+=("${r% |} (earlier call) |"); done <"$f"
        write_summary
        return 1
    fi
    UNIT_ROW0=${#ROWS[@]}
    UNFINISHED=0
    return 0
}
unit_end() {
    [ $UNFINISHED = 1 ] && return 0
    printf '%s\n' "${ROWS[@]:$UNIT_ROW0}" >"$(unit_file "$1").tmp" && mv -f "$(unit_file "$1").tmp" "$(unit_file "$1")"
}

nvidia-smi -L || true
write_summary
if [ "${CONTINUE:-0}" = 1 ] && [ "$(cat "$STATE_DIR/sources" 2>/dev/null)" = "$SOURCES" ]; then
    CONTINUING=1
    row "CONTINUE=1" "after the call of $(cat "$STATE_DIR/started" 2>/dev/null) on this machine: its $(ls "$STATE_DIR" | grep -c '^unit\.') finished units are not run again"
else
    [ "${CONTINUE:-0}" = 1 ] && row "CONTINUE=1" "no earlier call of these sources (${SOURCES:0:12}) on this machine: everything runs"
    rm -rf "$STATE_DIR"
    mkdir -p "$STATE_DIR"
    echo "$SOURCES" >"$STATE_DIR/sources"
    date -u +%Y-%m-%dT%H:%MZ >"$STATE_DIR/started"
fi

# 0. the machine: tools the steps call, and where the loader finds cuBLAS(Lt), which the binaries
# link dynamically (the toolkit's lib64 is put on LD_LIBRARY_PATH in case no ld.so.conf names it)
missing=""
for tool in make g++ nvcc timeout python3 nvidia-smi; do command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"; done
if NVCC_BIN=$(command -v nvcc); then
    CUDA_ROOT=$(dirname "$(dirname "$(readlink -f "$NVCC_BIN")")")
    export LD_LIBRARY_PATH="$CUDA_ROOT/lib64:$CUDA_ROOT/lib:$CUDA_ROOT/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
row "machine: tools" "$([ -z "$missing" ] && echo "make, g++, nvcc, timeout, python3, nvidia-smi found" || echo "MISSING:$missing")"

GPU_PATHS=$(make -s print-gpu-paths 2>/dev/null)
GPU_PATHS=${GPU_PATHS:-vanilla}
GPU_PATHS=${ONLY_PATHS:-$GPU_PATHS}
[ "${SKIP_TESTS:-0}" = 1 ] && TEST_PATHS="" || TEST_PATHS="$GPU_PATHS"
LABS=$(make -s print-dev-cuda-labs 2>/dev/null)  # gpu.mk's DEV_CUDA_LABS: one list of the labs
MEMORY_LABS=${MEMORY_LABS:-classifier layernorm rmsnorm gelu depth_attention}

# 1. build. A bundle of binaries built off the device (dev/device_bundle.sh) is used only if it
# was built from exactly these sources; its files are touched so that make takes them as up to date.
FROM_BUNDLE=0
if [ -n "${DEVICE_BUNDLE:-}" ]; then
    want=$SOURCES  # the hash of this tree's sources, read once above
    got=$(tar -xJOf "$DEVICE_BUNDLE" build/device_bundle.sources 2>/dev/null)
    if [ -n "$got" ] && [ "$got" = "$want" ]; then
        mapfile -t BUNDLED < <(tar -tJf "$DEVICE_BUNDLE" | grep -v '/$')
        if tar -xJf "$DEVICE_BUNDLE" && touch "${BUNDLED[@]}"; then
            FROM_BUNDLE=1
            SKIP_BUILD=1
            row "build" "from the bundle: $(printf '%s\n' "${BUNDLED[@]}" | grep -c -v -e '^build/openmpi/' -e '^build/device_bundle.sources$') binaries built off the device from these sources (${want:0:12})"
        else
            row "bundle $DEVICE_BUNDLE" "could not be unpacked; building here"
        fi
    else
        row "bundle $DEVICE_BUNDLE" "not used: $([ -f "$DEVICE_BUNDLE" ] && echo "built from other sources (${got:0:12} != ${want:0:12})" || echo "no such file"); building here"
    fi
fi
# Otherwise only what the steps of this call run (a second call on a fresh machine starts bare),
# with -k so that one translation unit that fails does not stop the others from building
BUILD_TARGETS=()
for path in $TEST_PATHS; do BUILD_TARGETS+=("$GB/tests/test_gpt_gpu_${path}_bf16" "$GB/tests/test_gpt_gpu_${path}_fp32"); done
[ "${SKIP_LABS:-0}" != 1 ] && for lab in $LABS; do BUILD_TARGETS+=("$GB/dev/cuda/bf16/$lab"); done
{ [ "${SKIP_CLI:-0}" != 1 ] || [ "${SKIP_DIST:-0}" != 1 ]; } && BUILD_TARGETS+=($GB/vanilla/train_bf16)
bench_part bench && for path in $GPU_PATHS; do BUILD_TARGETS+=("$GB/dev/cuda/bf16/bench_gpt_$path"); done
VARIANTS=$(make -s print-bench-variants 2>/dev/null)
if [ -n "${ONLY_VARIANTS:-}" ]; then
    for v in $ONLY_VARIANTS; do
        echo " $VARIANTS " | grep -q " $v " || { echo "error: ONLY_VARIANTS names $v, which dev/bench_variants.list does not list (it has: $VARIANTS)"; exit 2; }
    done
    VARIANTS=$ONLY_VARIANTS
fi
variant_path() { make -s print-bench-variant-path VARIANT="$1" 2>/dev/null || echo vanilla; }
# a variant with bench_gpt flags runs the plain build with them (no build of its own)
variant_run_flags() { make -s print-bench-variant-run-flags VARIANT="$1" 2>/dev/null; }
bench_part variants && for v in $VARIANTS; do
    BUILD_TARGETS+=("$GB/dev/cuda/bf16/bench_gpt_$(variant_path "$v")")
    [ -z "$(variant_run_flags "$v")" ] && BUILD_TARGETS+=("$GB/variants/$v/bench_gpt")
done
bench_part attention && BUILD_TARGETS+=($GB/dev/cuda/bf16/attention_forward $GB/dev/cuda/bf16/attention_backward $GB/dev/cuda/bf16/bench_gpt_vanilla)
bench_part memory && for lab in $MEMORY_LABS; do BUILD_TARGETS+=("$GB/dev/cuda/bf16/$lab"); done
bench_part profile && for path in $PROFILE_PATHS; do BUILD_TARGETS+=("$GB/dev/cuda/bf16/bench_gpt_$path"); done
bench_part attnprof && BUILD_TARGETS+=($GB/dev/cuda/bf16/attention_forward $GB/dev/cuda/bf16/attention_backward)
[ "${SKIP_BUILD:-0}" = 1 ] && BUILD_TARGETS=()
[ ${#BUILD_TARGETS[@]} -gt 0 ] && mapfile -t BUILD_TARGETS < <(printf '%s\n' "${BUILD_TARGETS[@]}" | awk '!seen[$0]++')
rc=0
[ ${#BUILD_TARGETS[@]} -gt 0 ] && { run_step "build" 240 "$OUT_DIR/build.log" make -k -j"$JOBS" GPU_BUILD="$GB" "${BUILD_TARGETS[@]}"; rc=$?; }
if [ $FROM_BUNDLE = 1 ]; then
    :
elif [ "${SKIP_BUILD:-0}" = 1 ]; then
    row "build" "skipped (SKIP_BUILD=1: the binaries as they are)"
elif [ $rc -eq 0 ]; then
    row "build: ${#BUILD_TARGETS[@]} targets (sm_90a)" "ok"
else
    row "build: ${#BUILD_TARGETS[@]} targets (sm_90a)" "$(verdict $rc) (see build.log; what built still runs)"
    grep -E 'error|Error' "$OUT_DIR/build.log" | head -20
fi
# find_libraries BIN: where the loader misses a library BIN links (cuBLAS(Lt) and NCCL are linked
# dynamically), the lib folders of PyTorch's pip wheels (nvidia-cublas, nvidia-nccl-cu13) as a last
# resort, and a row saying which libraries are still missing, if any
find_libraries() {
    local bin="$1" notfound pkg dir
    notfound=$(ldd "$bin" 2>/dev/null | grep 'not found' | awk '{print $1}' | tr '\n' ' ')
    [ -z "$notfound" ] && return 0
    for pkg in nvidia.cublas nvidia.nccl; do
        dir=$(python3 -c "import importlib.util as u; s = u.find_spec('$pkg'); print(list(s.submodule_search_locations)[0] + '/lib')" 2>/dev/null)
        [ -n "$dir" ] && [ -d "$dir" ] && [[ ":${LD_LIBRARY_PATH:-}:" != *":$dir:"* ]] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$dir"
    done
    notfound=$(ldd "$bin" 2>/dev/null | grep 'not found' | awk '{print $1}' | tr '\n' ' ')
    row "loader: $bin" "$([ -n "$notfound" ] && echo "MISSING libraries: $notfound" || echo "ok with PyTorch's pip-wheel libraries") (LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-})"
}
for bin in "${BUILD_TARGETS[@]}" "${BUNDLED[@]:-}"; do
    [[ "$bin" == build/openmpi/* ]] && continue
    if [ -x "$bin" ]; then
        find_libraries "$bin"
        break
    fi
done
# Open MPI from the bundle (dev/device_bundle.sh; the device image has none), first on PATH: the
# bundled MPI + NCCL trainer is linked against it, and a system mpirun of another version would not
# start it
if [ -x build/openmpi/bin/mpirun ]; then
    export PATH="$PWD/build/openmpi/bin:$PATH"
    # (the trainer's own RUNPATH names the folder it was linked in here; libmpi finds the rest itself)
    export LD_LIBRARY_PATH="$PWD/build/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    row "MPI" "$(mpirun --version 2>&1 | head -1) in build/openmpi (brought by dev/device_bundle.sh)"
fi

# 2. test_gpt ------------------------------------------------------------------------------
# The first binary that fails is run again with CUDA_LAUNCH_BLOCKING=1, so that a fault (an
# illegal or misaligned address) is reported at the launch that made it rather than at a later
# synchronisation, and under compute-sanitizer's memcheck where the machine has it.
# test_gpt's random_shapes draws RANDOM_SHAPES shapes here (default 20, test_gpt.cu's own):
# check_forward_backward on each, perhaps a few tenths of a second a shape on a GPU (an estimate:
# the CPU reference's forward and backward and one gpt_build a shape, not yet timed on a device).
# Not more by default: step 2 took 7-13 s a binary on the H200 (2026-11-28), and a device call's
# 530 s must still reach the bench; the step's summary row gives the time to size the next call
# by. A failure prints the shape's VP_TEST_RANDOM_SEED and VP_TEST_RANDOM_FIRST, which rerun it
# alone (seed 1 here).
RANDOM_SHAPES="${RANDOM_SHAPES:-20}"
RERUN_DONE=0
rerun_failure() {
    local bin="$1" tlog="$2"
    RERUN_DONE=1
    run_step "rerun $bin with CUDA_LAUNCH_BLOCKING=1" 90 "$tlog" env CUDA_LAUNCH_BLOCKING=1 "$bin"
    row "rerun of $bin, CUDA_LAUNCH_BLOCKING=1" "$(sed -n '/^== rerun /,$p' "$tlog" | grep -E 'FAIL|CHECK|rror' | head -3 | tr '\n' ' ' | cut -c1-300)"
    if command -v compute-sanitizer >/dev/null 2>&1; then
        run_step "compute-sanitizer memcheck $bin forward_backward" 120 "$tlog" compute-sanitizer --tool memcheck "$bin" forward_backward
        row "compute-sanitizer memcheck, $bin forward_backward" "$(grep -E 'ERROR SUMMARY|Invalid|misaligned' "$tlog" | tail -2 | tr '\n' ' ' | cut -c1-240)"
    fi
}
for path in $TEST_PATHS; do
    for prec in bf16 fp32; do
        bin=${TEST_GPT_DIR:-$GB/tests}/test_gpt_gpu_${path}_${prec}
        tlog="$OUT_DIR/test_gpt.log"
        unit_begin "test_gpt $path $prec" || continue
        if [ -x "$bin" ]; then
            run_step "test_gpt $path $prec" 150 "$tlog" env VP_TEST_RANDOM_SHAPES="$RANDOM_SHAPES" "$bin"
            rc=$?
            section=$(grep -A100000 "== test_gpt $path $prec (limit" "$tlog")
            c=$(echo "$section" | counts /dev/stdin)
            if echo "$section" | grep -q "skipped: no CUDA device"; then row "test_gpt $path $prec" "skipped: no CUDA device"
            else row "test_gpt $path $prec" "$(verdict $rc) ($c)"; fi
            # the unit's verdict is the binary's, whether or not its diagnostic rerun finishes
            if [[ "$(verdict $rc)" == FAILED* ]] && [ $RERUN_DONE = 0 ]; then rerun_failure "$bin" "$tlog"; UNFINISHED=0; fi
        else
            row "test_gpt $path $prec" "not built"
            UNFINISHED=1
        fi
        unit_end "test_gpt $path $prec"
    done
done
# 2b. the bf16 suites once more, in every test (test_gpt.cu's main), with the kernels that the
# defaults leave out on this GPU: attention version 4 (mma.sync: the forward, the dQ and the dK/dV
# kernels), which the default (version 6, wgmma) leaves to head dims other than 64 and to GPUs
# other than Hopper, VP_TEST_ATTENTION_WGMMA=0 (the variant att_v4 times it); the bias gradients
# from the weight-gradient GEMMs' BGRADB epilogue (variant bias_bgradb),
# VP_TEST_BIAS_GRAD_EPILOGUE=1; and Depth's depth softmax inside the attention forward and its
# backward inside the dK/dV kernel (variant depth_fused_bwd), VP_TEST_DEPTH_FUSED=1 (the forward
# joins version 4's kernel only, the backward either version's). Each has its own test in step
# 2's suites as well (attention_wgmma_versions, bias_grad_epilogue, depth_fused), which says which
# one a failure is.
for path in $TEST_PATHS; do
    bin=${TEST_GPT_DIR:-$GB/tests}/test_gpt_gpu_${path}_bf16
    tlog="$OUT_DIR/test_gpt.log"
    unit_begin "test_gpt $path bf16 other kernels" || continue
    if [ -x "$bin" ]; then
        run_step "test_gpt $path bf16 other kernels" 150 "$tlog" env VP_TEST_ATTENTION_WGMMA=0 VP_TEST_BIAS_GRAD_EPILOGUE=1 VP_TEST_DEPTH_FUSED=1 "$bin"
        rc=$?
        section=$(grep -A100000 "== test_gpt $path bf16 other kernels (limit" "$tlog")
        c=$(echo "$section" | counts /dev/stdin)
        if echo "$section" | grep -q "skipped: no CUDA device"; then row "test_gpt $path bf16, other kernels" "skipped: no CUDA device"
        else
            # the worst layer's margins (test_gpt's attention_wgmma_versions), if it printed them
            worst=$(echo "$section" | grep -o 'version 6 against 4: out [0-9.]*, lse [0-9.]*, dq [0-9.]*, dk [0-9.]*, dv [0-9.]*' | awk '{
                for (i = 6; i <= 14; i += 2) { x = $i + 0; if (x > m[i]) m[i] = x } n++ }
                END { if (n) printf "; version 6 against 4 at %d layers: out within %.3f, lse %.3f, dq %.3f, dk %.3f, dv %.3f of the bounds", n, m[6], m[8], m[10], m[12], m[14] }')
            # whether cuBLASLt had a BGRADB algorithm (test_gpt's bias_grad_epilogue), if it said
            bgrad=$(echo "$section" | grep -o 'cuBLASLt has\( NOT\)\? a BGRADB algorithm' | head -1)
            row "test_gpt $path bf16, other kernels" "$(verdict $rc) ($c$worst${bgrad:+; $bgrad})"
        fi
    else
        row "test_gpt $path bf16, other kernels" "not built"
    fi
    unit_end "test_gpt $path bf16 other kernels"
done

# 3. kernel labs ---------------------------------------------------------------------------
if [ "${SKIP_LABS:-0}" != 1 ]; then
    for lab in $LABS; do
        unit_begin "lab $lab --check" || continue
        if [ -x $GB/dev/cuda/bf16/$lab ]; then
            run_step "lab $lab --check" 90 "$OUT_DIR/labs.log" $GB/dev/cuda/bf16/$lab --check
            rc=$?
            if tail -3 "$OUT_DIR/labs.log" | grep -q "skipped: no CUDA device"; then row "lab $lab --check (bf16)" "skipped: no CUDA device"
            # a lab that cannot run on this GPU (the wgmma probe off Hopper) says so in a line of its own
            elif [ $rc -eq 0 ] && tail -3 "$OUT_DIR/labs.log" | grep -q "^$lab: not run"; then
                row "lab $lab --check (bf16)" "$(tail -3 "$OUT_DIR/labs.log" | grep "^$lab: not run" | tail -1)"
            else row "lab $lab --check (bf16)" "$([ $rc -eq 0 ] && echo 'ok: all versions match the CPU' || verdict $rc)"; fi
        else
            row "lab $lab" "not built"
            UNFINISHED=1
        fi
        unit_end "lab $lab --check"
    done
fi

# 4. bench ---------------------------------------------------------------------------------
if bench_part bench && unit_begin bench; then
    BENCH="$OUT_DIR/bench.txt"
    run_step "make bench" 300 "$BENCH" make bench GPU_BUILD="$GB"
    grep -h '^BENCH' "$BENCH" | sed 's/^/    /'
    get() { echo "$line" | grep -o "$1=[^ ]*" | cut -d= -f2; }
    for path in $GPU_PATHS; do
        line=$(grep "^BENCH impl=valuepath path=$path " "$BENCH" | tail -1)
        if [ -n "$line" ]; then
            row "bench valuepath $path (GPT-2 124M, B=64, T=1024)" "$(get tok_per_s) tok/s, $(get ms_per_step) ms/step, MFU $(awk -v m="$(get mfu)" 'BEGIN{printf "%.1f%%", 100*m}'), peak mem $(get peak_mem_gib) GiB (path buffers $(get vp_mem_gib) GiB)"
        else
            row "bench valuepath $path" "did not finish (see bench.txt)"
        fi
    done
    line=$(grep "^BENCH impl=pytorch" "$BENCH" | tail -1)
    if [ -n "$line" ]; then
        row "bench pytorch (GPT-2 124M, B=64, T=1024)" "$(get tok_per_s) tok/s, $(get ms_per_step) ms/step, MFU $(awk -v m="$(get mfu)" 'BEGIN{printf "%.1f%%", 100*m}'), peak mem $(get peak_mem_gib) GiB, micro-batch $(get micro_batch)"
    else
        row "bench pytorch" "did not finish (see bench.txt)"
    fi
    ratio=$(grep -o 'valuepath vanilla / PyTorch: .*' "$BENCH" | tail -1)
    [ -n "$ratio" ] && row "ratio" "$ratio"
    # dev/bench_paths.sh's per-path table (| path | ms/step | tok/s | vs vanilla | target | peak GiB |
    # path buffers GiB |), one two-column row per path like the rest of the summary
    while IFS='|' read -r _ p ms tok vs target peak buf _; do
        row "path $(echo $p) vs vanilla (same call)" "step time $(echo $vs) (target $(echo $target)), $(echo $ms) ms/step, $(echo $tok) tok/s, peak $(echo $peak) GiB, path buffers $(echo $buf) GiB"
    done < <(grep '^| [a-z]* | [0-9]' "$BENCH")
    unit_end bench
fi

# 4b. each build variant of dev/bench_variants.list against its path's plain benchmark, on this
# machine, alternating (variant, plain, variant, plain): a compile-time choice decided by a
# measurement that shares the machine's state. A variant that is bench_gpt flags runs instead as
# one A/B inside one process of the plain binary (bench_gpt --ab-rounds AB_ROUNDS, default 4: ABBA
# rounds of 5 steps each way after the warmup; about 12 s instead of four runs' 36). The runs'
# logs go to bench.txt.
# bench_step NAME LIMIT BINARY ARG...: one bench_gpt run at B=64, T=1024 (run_step) into the log
# $vlog, kept alone for the caller to read and appended to bench.txt; returns its exit status
vlog=build/device_check_variant.log
bench_step() {
    local name=$1 limit=$2 bin=$3 rc
    shift 3
    : >"$vlog"
    run_step "$name" "$limit" "$vlog" "$bin" --batch-size 64 --seq-len 1024 "$@"
    rc=$?
    cat "$vlog" >>"$OUT_DIR/bench.txt"
    return $rc
}
# ab_run NAME BINARY FLAG...: one A/B in one process (bench_gpt --ab-rounds AB_ROUNDS) of the
# FLAGs against the binary's defaults (steps 4b and 7); its BENCH_AB line goes into $ab (empty if
# it printed none); returns the run's exit status
ab_run() {
    local name=$1 bin=$2 rc
    shift 2
    bench_step "$name" 90 "$bin" --ab-rounds "${AB_ROUNDS:-4}" "$@"
    rc=$?
    ab=$(grep '^BENCH_AB ' "$vlog" | tail -1)
    return $rc
}
field() { echo "$ab" | grep -o " $1=[0-9.]*" | cut -d= -f2; }  # a field of ab_run's BENCH_AB line ($ab)
if bench_part variants; then
    for v in $VARIANTS; do
        vpath=$(variant_path "$v")
        PLAIN=$GB/dev/cuda/bf16/bench_gpt_$vpath
        VBIN=$GB/variants/$v/bench_gpt
        read -r -a VFLAGS <<<"$(variant_run_flags "$v")"
        [ ${#VFLAGS[@]} -gt 0 ] && VBIN=$PLAIN
        unit_begin "variant_$v" || continue
        if [ ${#VFLAGS[@]} -gt 0 ] && [ -x "$PLAIN" ]; then
            ab_run "variant $v: A/B in one process" "$PLAIN" "${VFLAGS[@]}"
            rc=$?
            refused=$(field bias_grad_refused)
            [ "${refused:-0}" = 0 ] && refused=""
            if [ $rc = 0 ] && [ -n "$ab" ]; then
                row "variant $v ($vpath, B=64 T=1024)" "$(field variant_ms) ms/step against the plain way's $(field plain_ms) in one process (ratio $(field ratio); $(field rounds) rounds of $(field steps_per_round) steps each way, ABBA)${refused:+; cuBLASLt had no BGRADB for $refused GEMM shapes}"
            elif [ $rc = 0 ]; then
                row "variant $v" "FAILED (no BENCH_AB line: bench.txt)"
            else
                row "variant $v" "$(verdict $rc) (bench.txt)"
            fi
        elif [ -x "$VBIN" ] && [ -x "$PLAIN" ]; then
            ms_v=() ms_p=() vrc=0 refused=""
            for i in 1 2; do
                for which in variant plain; do
                    bin=$PLAIN extra=()
                    [ $which = variant ] && bin=$VBIN extra=("${VFLAGS[@]}")
                    bench_step "variant $v: $which, run $i" 60 "$bin" "${extra[@]}"
                    rc=$?
                    [ $rc != 0 ] && vrc=$rc
                    ms=$(grep -o 'ms_per_step=[0-9.]*' "$vlog" | tail -1 | cut -d= -f2)
                    [ $which = variant ] && ms_v+=("${ms:-?}") || ms_p+=("${ms:-?}")
                    # GEMM shapes whose BGRADB cuBLASLt refused (bench_gpt's BENCH line): there the
                    # variant kept bias_backward, so it measured less than it names
                    [ $which = variant ] && refused=$(grep -o 'bias_grad_refused=[1-9][0-9]*' "$vlog" | tail -1 | cut -d= -f2)
                done
            done
            if [ $vrc = 0 ]; then
                row "variant $v ($vpath, B=64 T=1024)" "$(awk -v a="${ms_v[*]}" -v b="${ms_p[*]}" 'BEGIN {
                    split(a, x, " "); split(b, y, " ");
                    printf "%s and %s ms/step against the plain build'"'"'s %s and %s (mean ratio %.3f)", x[1], x[2], y[1], y[2], (x[1] + x[2]) / (y[1] + y[2]) }')${refused:+; cuBLASLt had no BGRADB for $refused GEMM shapes}"
            else
                row "variant $v" "$(verdict $vrc) (bench.txt)"
            fi
        else
            row "variant $v" "not built"
        fi
        unit_end "variant_$v"
    done
fi

# 5. the CLI end to end ----------------------------------------------------------------------
if [ "${SKIP_CLI:-0}" != 1 ] && [ -x $GB/vanilla/train_bf16 ] && unit_begin cli; then
    CLI="$OUT_DIR/train_cli.log"
    W=build/device_check_cli
    rm -rf "$W"
    mkdir -p "$W"
    make_shard "$W/synth_train_000.bin"
    FLAGS=(--arch gpt2 --layers 2 --heads 4 --dim 128 --vocab 512 --max-seq 128 --seq-len 128 --batch-size 8 --max-steps 20 --lr 1e-3 --warmup-steps 5
        --seed 7
        --train-data "$W/synth_train_*.bin" --checkpoint-every 10)
    ok=1
    run_step "train run A" 60 "$CLI" $GB/vanilla/train_bf16 "${FLAGS[@]}" --out-dir "$W/a" || ok=0
    run_step "train run B" 60 "$CLI" $GB/vanilla/train_bf16 "${FLAGS[@]}" --out-dir "$W/b" || ok=0
    if [ $ok = 1 ] && [ "$(losses "$W/a")" = "$(losses "$W/b")" ] && [ -n "$(losses "$W/a")" ]; then
        row "./train twice: identical losses" "ok"
    else
        row "./train twice: identical losses" "FAILED (see train_cli.log)"
    fi
    # --recompute 1 and 2 against each other: --recompute 0 (the default) computes GPT-2's GELU in
    # the fc GEMM's epilogue in bf16, which the recomputing levels do not (train_gpt.cu); test_gpt
    # compares all three levels with that fusion off
    ok=1
    run_step "train run C (--recompute 1)" 60 "$CLI" $GB/vanilla/train_bf16 "${FLAGS[@]}" --out-dir "$W/c1" --recompute 1 || ok=0
    run_step "train run D (--recompute 2)" 60 "$CLI" $GB/vanilla/train_bf16 "${FLAGS[@]}" --out-dir "$W/c2" --recompute 2 || ok=0
    if [ $ok = 1 ] && [ "$(losses "$W/c1")" = "$(losses "$W/c2")" ] && [ -n "$(losses "$W/c1")" ]; then
        row "./train --recompute 1 and --recompute 2: identical losses" "ok"
    else
        row "./train --recompute 1 and --recompute 2: identical losses" "FAILED (see train_cli.log)"
    fi
    # resume from step 10 in a directory holding only run A's step-10 checkpoint: steps 11..20 must match run A's
    mkdir -p "$W/r"
    cp "$W/a/ckpt_00000010.bin" "$W/r/"
    run_step "train resume" 60 "$CLI" $GB/vanilla/train_bf16 "${FLAGS[@]}" --out-dir "$W/r" --resume 1
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
        # the init from the seed runs on the host in both builds (host/params.h, on every OpenMP
        # thread since 2026-11-30): the step-0 checkpoints' tensors must be the same bytes
        STEP0=()
        for ((i = 0; i < ${#FLAGS[@]}; i++)); do
            if [ "${FLAGS[$i]}" = --max-steps ]; then i=$((i + 1)); else STEP0+=("${FLAGS[$i]}"); fi
        done
        STEP0+=(--max-steps 0)
        run_step "train step 0" 60 "$CLI" $GB/vanilla/train_bf16 "${STEP0[@]}" --out-dir "$W/i_gpu"
        run_step "train_cpu step 0" 60 "$CLI" ./train_cpu "${STEP0[@]}" --out-dir "$W/i_cpu"
        if [ -f "$W/i_gpu/ckpt_00000000.bin" ] && [ -f "$W/i_cpu/ckpt_00000000.bin" ] &&
            [ "$(ckpt_tensors "$W/i_gpu/ckpt_00000000.bin")" = "$(ckpt_tensors "$W/i_cpu/ckpt_00000000.bin")" ]; then
            row "./train and ./train_cpu: the same step-0 weights from the seed" "ok"
        else
            row "./train and ./train_cpu: the same step-0 weights from the seed" "FAILED (see train_cli.log)"
        fi
    else
        row "./train_cpu --resume 1 from ./train's checkpoint" "train_cpu did not build"
    fi
    # GPT-2 124M from start to exit with nothing to do (--max-steps 0): CUDA's start, the buffers,
    # and the init on the host, on every core and then on one; the difference is what the
    # OpenMP init saves at each start (5 s on one core of the 2-core machine)
    G124=(--arch gpt2 --layers 12 --heads 12 --dim 768 --vocab 50257 --max-seq 1024 --seq-len 1024 --batch-size 1
        --max-steps 0 --train-data "$W/synth_train_*.bin")
    t0=$(date +%s.%N)
    run_step "train 124M start ($(nproc) threads)" 60 "$CLI" $GB/vanilla/train_bf16 "${G124[@]}"
    rc_all=$?
    t1=$(date +%s.%N)
    run_step "train 124M start (1 thread)" 60 "$CLI" env OMP_NUM_THREADS=1 $GB/vanilla/train_bf16 "${G124[@]}"
    rc_one=$?
    t2=$(date +%s.%N)
    if [ $rc_all = 0 ] && [ $rc_one = 0 ]; then
        row "./train GPT-2 124M start to exit (--max-steps 0)" "$(echo "$t0 $t1 $t2" | awk -v n="$(nproc)" '{ printf "%.2f s on %d OpenMP threads, %.2f s on 1", $2 - $1, n, $3 - $2 }')"
    else
        row "./train GPT-2 124M start to exit (--max-steps 0)" "FAILED (exit $rc_all, $rc_one; see train_cli.log)"
    fi
    unit_end cli
fi

# 6. data parallel (MPI + NCCL) ------------------------------------------------------------
# One GPU cannot hold two NCCL ranks (NCCL refuses two ranks on one device), so with one GPU the
# MPI + NCCL build runs as mpirun -np 1: plainly (its one-process path) and with VP_DIST_FORCE=1,
# which runs the data-parallel code with one rank: communicator setup, the per-layer gradient
# all-reduce overlapped with the backward, the ZeRO-1 shard update and parameter all-gather, the gathered
# checkpoint. With one rank every sum over ranks has one term, so losses and checkpoint tensors
# must be bit-identical to the plain ./train's. With >= 2 GPUs: 2 ranks x B=4 against one GPU
# with B=4 x accumulation 2 (the first loss exact, the rest to bf16 round-off) and ZeRO-0 == ZeRO-1.
if [ "${SKIP_DIST:-0}" != 1 ] && [ -x $GB/vanilla/train_bf16 ] && unit_begin dist; then
    DLOG="$OUT_DIR/dist.log"
    if ! command -v mpirun >/dev/null 2>&1 || ! command -v mpicxx >/dev/null 2>&1; then
        row "data parallel (MPI + NCCL)" "skipped: no mpirun/mpicxx on this machine (a bundle from dev/device_bundle.sh brings Open MPI; or apt-get install libopenmpi-dev openmpi-bin)"
    elif ! run_step "build the MPI + NCCL trainer" 120 "$DLOG" make -j"$JOBS" GPU_BUILD="$GB" $GB/vanilla-mpi/train_bf16; then
        row "data parallel (MPI + NCCL)" "did not build (see dist.log)"
    else
        find_libraries $GB/vanilla-mpi/train_bf16
        W=build/device_check_dist
        rm -rf "$W"
        mkdir -p "$W"
        make_shard "$W/synth_train_000.bin"
        DFLAGS=(--arch gpt2 --layers 2 --heads 4 --dim 128 --vocab 512 --max-seq 128 --seq-len 128 --batch-size 4 --max-steps 10 --lr 1e-3
            --warmup-steps 3 --grad-clip 1.0 --seed 7 --train-data "$W/synth_train_*.bin")
        # as root mpirun needs --allow-run-as-root; --oversubscribe in case it counts fewer slots than ranks
        MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x VP_DIST_FORCE -x VP_DIST_TIMEOUT)
        export VP_DIST_TIMEOUT=60
        run_step "dist: plain ./train" 60 "$DLOG" $GB/vanilla/train_bf16 "${DFLAGS[@]}" --out-dir "$W/plain"
        ref_l=$(losses "$W/plain")
        ref_t=$(ckpt_tensors "$W/plain/ckpt_00000010.bin" 2>/dev/null)
        bad=""
        for force in 0 1; do
            for zero in 0 1; do
                d="$W/np1_force${force}_zero${zero}"
                VP_DIST_FORCE=$force run_step "dist: mpirun -np 1, VP_DIST_FORCE=$force, --zero $zero" 60 "$DLOG" \
                    "${MPIRUN[@]}" -np 1 $GB/vanilla-mpi/train_bf16 "${DFLAGS[@]}" --zero $zero --out-dir "$d"
                if [ -z "$ref_l" ] || [ "$(losses "$d")" != "$ref_l" ] || [ "$(ckpt_tensors "$d/ckpt_00000010.bin" 2>/dev/null)" != "$ref_t" ]; then
                    bad="$bad force=$force/zero=$zero"
                fi
            done
        done
        if [ -z "$bad" ]; then
            row "mpirun -np 1 (MPI + NCCL build), --zero 0/1, plain and VP_DIST_FORCE=1: losses and checkpoint bit-identical to ./train" "ok"
        else
            row "mpirun -np 1 (MPI + NCCL build): bit-identical to ./train" "FAILED:$bad (see dist.log)"
        fi
        ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
        if [ "$ngpu" -ge 2 ]; then
            run_step "dist: one GPU, accumulation 2" 60 "$DLOG" $GB/vanilla/train_bf16 "${DFLAGS[@]}" --total-batch-tokens 1024 --out-dir "$W/accum2"
            for zero in 0 1; do
                VP_DIST_FORCE=0 run_step "dist: mpirun -np 2, --zero $zero" 90 "$DLOG" "${MPIRUN[@]}" -np 2 $GB/vanilla-mpi/train_bf16 "${DFLAGS[@]}" \
                    --total-batch-tokens 1024 --zero $zero --out-dir "$W/np2_zero$zero"
            done
            np2=$(python3 - "$W" <<'EOF'
import json, sys
def losses(d):
    return [json.loads(l)["train_loss"] for l in open(f"{sys.argv[1]}/{d}/log.jsonl") if '"train_loss"' in l]
try:
    a, z0, z1 = losses("accum2"), losses("np2_zero0"), losses("np2_zero1")
except OSError as e:
    print(f"FAILED: {e}")
    sys.exit()
rel = max(abs(x - y) / abs(x) for x, y in zip(a, z0)) if a and len(a) == len(z0) else float("inf")
ok = len(a) == 10 and z0 == z1 and z0[0] == a[0] and rel < 1e-2
print(f"{'ok' if ok else 'FAILED'}: first loss {'equal' if z0[:1] == a[:1] else 'differs'}, "
      f"max rel. loss difference {rel:.2e} (bound 1e-2), ZeRO-0 {'==' if z0 == z1 else '!='} ZeRO-1")
EOF
            )
            row "mpirun -np 2 (2 GPUs, B=4 each) vs one GPU with accumulation 2" "$np2"
            # what the overlapped all-reduce hides, and what ZeRO-1 (reduce to the owners + bf16
            # all-gather) costs or saves, at GPT-2 124M shapes (B=16 per rank, T=1024): median ms
            # per step over steps 4..12 with --overlap-reduce 1 and 0 (ZeRO-0) and with --zero 1,
            # and whether their losses agree bit for bit (they must with 2 ranks: the same sums)
            OFLAGS=(--arch gpt2 --batch-size 16 --seq-len 1024 --max-steps 12 --lr 3e-4 --warmup-steps 2 --seed 7 --train-data "$W/synth_train_*.bin")
            for ov in 1 0; do
                VP_DIST_FORCE=0 run_step "dist: mpirun -np 2, GPT-2 124M, --overlap-reduce $ov" 300 "$DLOG" "${MPIRUN[@]}" -np 2 \
                    $GB/vanilla-mpi/train_bf16 "${OFLAGS[@]}" --overlap-reduce $ov --out-dir "$W/overlap$ov"
            done
            VP_DIST_FORCE=0 run_step "dist: mpirun -np 2, GPT-2 124M, --zero 1" 300 "$DLOG" "${MPIRUN[@]}" -np 2 \
                $GB/vanilla-mpi/train_bf16 "${OFLAGS[@]}" --zero 1 --out-dir "$W/zero1"
            ovl=$(python3 - "$W" <<'EOF'
import json, statistics, sys
def steps(d):
    return [json.loads(l) for l in open(f"{sys.argv[1]}/{d}/log.jsonl") if '"train_loss"' in l]
try:
    a, b, z = steps("overlap1"), steps("overlap0"), steps("zero1")
except OSError as e:
    print(f"FAILED: {e}")
    sys.exit()
if len(a) != 12 or len(b) != 12 or len(z) != 12:
    print(f"FAILED: {len(a)}, {len(b)} and {len(z)} of 12 steps logged (see dist.log)")
    sys.exit()
ms = lambda s: statistics.median(r["ms"] for r in s[3:])
loss = lambda s: [r["train_loss"] for r in s]
same = loss(a) == loss(b) == loss(z)
print(f"{'ok' if same else 'FAILED'}: ZeRO-0 {ms(a):.1f} ms/step overlapped, {ms(b):.1f} after the backward "
      f"(ratio {ms(a) / ms(b):.3f}); ZeRO-1 overlapped {ms(z):.1f} (ratio to ZeRO-0 {ms(z) / ms(a):.3f}); "
      f"losses {'bit-identical' if same else 'DIFFER'}")
EOF
            )
            row "2 GPUs, GPT-2 124M B=16: --overlap-reduce 1 vs 0, --zero 1 (ms/step)" "$ovl"
        else
            row "mpirun -np 2 (2 GPUs)" "not run: $ngpu GPU(s) on this machine"
        fi
    fi
    unit_end dist
fi

# 7. attention: the labs' timings per shape, every version (forward 1, 2, 4, 5, 6, 7; backward 1-4,
# 6, 7, 8, the backward's kernels at 7 one at a time, and version 8's kernels alone), and a
# whole training step with the tensor-core kernels without cp.async (bench_gpt
# --attention-version 2: forward version 2, backward version 3) against the trainer's kernels
# (version 6 at D = 64 on Hopper since 2026-11-28; before, version 4, which ran 0.983x of 2/3's
# step on an H200 that day), as one A/B in one process (ABBA rounds, as step 4b's run-time
# variants). Version 4 against version 6 is step 4b's variant att_v4.
if bench_part attention && unit_begin attention; then
    LAB="$OUT_DIR/labs_timed.log"  # one file for every timed lab: the tool brings back at most 8
    for lab in attention_forward attention_backward; do
        [ -x "$GB/dev/cuda/bf16/$lab" ] && run_step "lab $lab (timed)" 120 "$LAB" "$GB/dev/cuda/bf16/$lab"
    done
    [ -f "$LAB" ] && while IFS= read -r t; do row "${t%%|*}" "${t#*|}"; done < <(awk '
        /^attention (forward|backward):/ { if (shape != "") print shape "|" times; shape = $1 " " $2 " " $3 " " $4 " " $5 " " $6 " " $7; times = "" }
        /^  version [0-9][^:]*: .* ms/ { sub(/^  /, ""); sub(/ \(FA2.*/, ""); times = times (times == "" ? "" : "; ") $0 }
        /^  kernels alone: / { sub(/^  /, ""); times = times (times == "" ? "" : "; ") $0 }
        END { if (shape != "") print shape "|" times }' "$LAB")
    if [ -x $GB/dev/cuda/bf16/bench_gpt_vanilla ]; then
        ab_run "bench_gpt_vanilla --attention-version 2: A/B in one process" $GB/dev/cuda/bf16/bench_gpt_vanilla --attention-version 2
        rc=$?
        if [ $rc = 0 ] && [ -n "$ab" ]; then
            row "step with the trainer's attention vs versions 2/3 (no cp.async), vanilla B=64 T=1024" "$(field plain_ms) vs $(field variant_ms) ms/step in one process (ratio 2/3 to the trainer's: $(field ratio); $(field rounds) rounds of $(field steps_per_round) steps each way, ABBA)"
        elif [ $rc = 0 ]; then
            row "step with attention version 2/3" "did not finish (see bench.txt)"
        else
            row "step with attention version 2/3" "$(verdict $rc) (bench.txt)"
        fi
    fi
    unit_end attention
fi

# 8. the memory-bound labs timed: the fused classifier's versions (3, the trainer's, computes its
# exponentials as exp2f with the running max per vector; 2 as expf per element; 4, version 3 with
# the row kept in shared memory between its passes, the build variant classifier_v4), the norms' backward with the parameter sums fused into the row pass
# (version 3) against the separate column pass (version 2), GELU's backward with the fc bias
# gradient fused (version 2) against the separate bias pass (version 1), Depth-Attention's depth
# softmax with 16-byte words (version 2) against a warp per item (version 1), and fused into the
# attention kernels against the two kernels one after another: ms and GB/s at the trainer's shapes.
# These fusions (but the last, off by default) became the trainer's from the bytes they save, unmeasured.
if bench_part memory && unit_begin memory; then
    LAB="$OUT_DIR/labs_timed.log"
    LAB_FAILED=()
    for lab in $MEMORY_LABS; do
        [ -x "$GB/dev/cuda/bf16/$lab" ] || continue
        run_step "lab $lab (timed)" 90 "$LAB" "$GB/dev/cuda/bf16/$lab"
        rc=$?
        [ $rc != 0 ] && LAB_FAILED+=("lab $lab (timed)|$(verdict $rc) (labs_timed.log; the rows above from it are what it printed before)")
    done
    # a row per shape: its versions' times (the depth lab's deferred backward and its gathers with
    # them), and the depth lab's estimate of a GPT-2 step as its own row
    [ -f "$LAB" ] && while IFS= read -r t; do row "${t%%|*}" "${t#*|}"; done < <(awk '
        function flush() { if (lab != "" && times != "") print lab "|" times; lab = "" }
        function add(x) { times = times (times == "" ? "" : "; ") x }
        /^(layernorm|rmsnorm|gelu): N=/ { flush(); lab = "lab " $1 " " $2 " " $3; sub(/:/, "", lab); times = ""; cls = 0 }
        /^fused classifier: N=/ { flush(); lab = "lab classifier " $3 " " $4; times = ""; cls = 1 }
        /^depth_attention: B\*T=/ { flush(); lab = "lab depth_attention " $2 " " $5 " " $6 " " $7; times = ""; cls = 1 }
        /^  (forward|backward) version [0-9]: .* ms/ { sub(/^  /, ""); sub(/ version /, " v"); add($0) }
        cls && /^  version [0-9]( deferred)?: .* ms/ { sub(/^  /, ""); sub(/ \(counting.*/, ""); add($0) }
        /^  depth_anchor_gather, [0-9]+ readers: .* ms/ { sub(/^  /, ""); add($0) }
        /^GPT-2 124M step .*the depth backward:/ { flush(); sub(/, the depth backward: /, "|"); print "lab depth_attention, " $0 }
        /^depth fused into attention: B=/ { flush(); lab = "lab depth_attention fused into attention " $5 " " $6 " " $11; times = ""; cls = 0 }
        /^  (forward|backward): +attention alone .* ms/ { sub(/^  /, ""); gsub(/  +/, " "); add($0) }
        END { flush() }' "$LAB")
    for t in "${LAB_FAILED[@]}"; do row "${t%%|*}" "${t#*|}"; done
    unit_end memory
fi

# 9. where a step's time goes, if time is left: each kernel's time over two steps of the benchmark
# of each path in PROFILE_PATHS (default vanilla) under Nsight Compute (kernels serialised), as a
# table by dev/kernel_profile.py; the tables are appended to bench.txt (the device tool brings back
# at most 8 files)
for ppath in $PROFILE_PATHS; do
    PBIN=$GB/dev/cuda/bf16/bench_gpt_$ppath
    if bench_part profile && [ -x $PBIN ] && command -v ncu >/dev/null 2>&1 && unit_begin "profile_$ppath"; then
        NCU_CSV=build/device_check_ncu_$ppath.csv
        rm -f "$NCU_CSV"
        run_step "ncu kernel times, bench_gpt_$ppath, 2 steps" 150 "$OUT_DIR/bench.txt" ncu --metrics gpu__time_duration.sum --csv --print-units base \
            --log-file "$NCU_CSV" $PBIN --batch-size 64 --seq-len 1024 --steps 1 --warmup 1
        rc=$?
        if prof=$(python3 dev/kernel_profile.py "$NCU_CSV" --steps 2 2>&1); then
            { echo "== kernel times, $ppath"; echo "$prof"; } >>"$OUT_DIR/bench.txt"
            row "kernel time per step (ncu, $ppath, B=64 T=1024)" "$(python3 dev/kernel_profile.py "$NCU_CSV" --steps 2 --top 4 --brief)"
        else
            row "kernel time per step (ncu, $ppath)" "$(verdict $rc): $(echo "$prof" | tail -1 | cut -c1-200)"
        fi
        unit_end "profile_$ppath"
    fi
done

# 10. what limits the wgmma attention kernels, if time is left: ncu's detailed sections (speed of
# light, compute and memory workload with the shared-memory table, scheduler and warp-state
# statistics with ncu's own notes on the dominant stalls, occupancy) for the first launch of each
# version 6 and 7 kernel (forward, dQ, dK/dV) and of version 8's (its dK/dV kernel with the dS^T
# stores, its dQ kernel) in the labs' --check runs, whose first shape is
# GPT-2's (B=8 and B=4, T=1024, H=12, D=64), appended to labs_timed.log. The kernels' times are
# the timed labs' (step 7); this says why they are what they are.
if bench_part attnprof && command -v ncu >/dev/null 2>&1 && unit_begin attnprof; then
    LAB="$OUT_DIR/labs_timed.log"
    for lab in attention_forward attention_backward; do
        [ -x "$GB/dev/cuda/bf16/$lab" ] || continue
        # 2 forward launches (versions 6, 7) or 6 backward ones (dQ and dK/dV of versions 6 and 7,
        # then version 8's dK/dV kernel with its dS^T stores and its dQ kernel) at the first shape
        n=2
        [ $lab = attention_backward ] && n=6
        run_step "ncu detailed, $lab (wgmma kernels, first shape)" 150 "$LAB" ncu --set detailed --kernel-name regex:'attention_(forward|backward_dq|backward_dkdv)_kernel[68]' \
            --launch-count $n "$GB/dev/cuda/bf16/$lab" --check
        rc=$?
        row "ncu detailed sections, $lab's wgmma kernels" "$(verdict $rc) (labs_timed.log)"
    done
    unit_end attnprof
fi

write_summary
echo
echo "device check finished in $(($(date +%s) - START))s; logs in $OUT_DIR"
cat "$SUMMARY"
