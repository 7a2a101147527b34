#!/usr/bin/env bash
# tests/run_all.sh: runs every test suite of valuepath and adds up their results.
#
#   bash tests/run_all.sh [--no-python] BINARY[@FILTER]...   (make test passes the C++ test binaries)
#
# BINARY@FILTER runs `BINARY FILTER` (the tests whose names contain one of FILTER's comma-separated
# parts: tests/testing.h); --no-python skips pytest (make test-emu). `--jobs N` before a run of
# binaries runs those up to N at a time (make test: the emulated suites, single-threaded but for
# the emulated cuBLASLt, each its own temp dir; on CI's two cores they were 7 of its 12 minutes of
# tests run one by one): each one's output is kept and printed whole, in the given order, once it
# and every one before it have ended, and each gets OMP_NUM_THREADS = cores / N unless it is set.
# Each C++ suite ends with "N passed, N failed"; pytest ends with its own summary. A suite that
# crashes or exits nonzero counts as a failure even if its counts look fine. The last line is
# the total, "N passed, N failed, N skipped" (skipped: a GPU suite without a GPU counts one, and
# pytest's skipped tests each count one; pytest runs with -rs, so it lists why each was skipped),
# and the exit code is nonzero if anything failed; a skip never changes it.
set -u
cd "$(dirname "$0")/.."
total_pass=0
total_fail=0
total_skip=0
failed_suites=()

# The machine, to read the seconds by: CI's 2-core machines have differed in kind between runs (an
# AVX-512 Zen 4, an AVX2 Zen 3 on which the CPU reference's matmuls run at about half the speed,
# an Intel Xeon): dev/results/ci-times.md.
if [ -r /proc/cpuinfo ]; then
    simd=$(grep -m1 '^flags' /proc/cpuinfo | grep -qw avx512f && echo AVX-512 ||
        { grep -m1 '^flags' /proc/cpuinfo | grep -qw avx2 && echo AVX2 || echo 'no AVX2'; })
    echo "machine: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | xargs)," \
        "family $(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | xargs) model $(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2 | xargs)," \
        "$(getconf _NPROCESSORS_ONLN) CPUs, $simd"
fi
SECONDS=0  # bash's own clock: each suite's line gives its seconds, the last line the total (CI's budget)
add_counts() {  # $1 = suite name, $2 = exit code, $3 = log file, $4 = seconds it took[, $5 = its skipped tests]
    local p f
    p=$(grep -Eo '[0-9]+ passed' "$3" | tail -1 | grep -Eo '[0-9]+' || true)
    f=$(grep -Eo '[0-9]+ failed' "$3" | tail -1 | grep -Eo '[0-9]+' || true)
    p=${p:-0}
    f=${f:-0}
    if [ "$2" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi  # crashed, or failed without counting
    if [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "${5:-0}" -eq 0 ]; then f=1; echo "!! $1 ran no test"; fi
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
    [ "$f" -ne 0 ] && failed_suites+=("$1")
    echo "== $1: $p passed, $f failed${5:+, $5 skipped} (${4}s)"
}

run_python=1
if [ "${1:-}" = "--no-python" ]; then
    run_python=0
    shift
fi

# adds one suite's counts, or counts it skipped: $1 = entry, $2 = exit code, $3 = log, $4 = seconds
report() {
    # GPU suites on a machine without a GPU: a clean skip, counted as such (CI compiled them)
    if [ "$2" -eq 0 ] && grep -q "^skipped: no CUDA device" "$3"; then
        total_skip=$((total_skip + 1))
        echo "== ${1%%@*}: skipped (no CUDA device)"
    else
        # a C++ suite's tests that skipped themselves (tests/testing.h SKIP_TEST): its closing
        # line ends ", N skipped"; they join the total as pytest's do
        local s
        s=$(grep -Eo '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$3" | tail -1 | grep -Eo '[0-9]+ skipped' | grep -Eo '[0-9]+' || true)
        total_skip=$((total_skip + ${s:-0}))
        add_counts "$1" "$2" "$3" "$4" "$s"
    fi
}

# splits an entry, BINARY[@FILTER], into the caller's bin and args (no args without @FILTER)
split_entry() {
    bin=${1%%@*}
    args=()
    [ "$bin" != "$1" ] && args=("${1#*@}")
}

# runs one entry (BINARY[@FILTER]) into $2, then writes "exit-code seconds" to $2.done
run_quietly() {
    local bin args t0
    split_entry "$1"
    t0=$(date +%s)
    "$bin" "${args[@]}" > "$2" 2>&1
    local rc=$?
    [ "$rc" -gt 128 ] && echo "!! $bin was killed by signal $((rc - 128)) ($(kill -l "$rc" 2>/dev/null))" >> "$2"
    echo "$rc $(($(date +%s) - t0))" > "$2.done"
}

at_once=1  # suites run at a time (--jobs)
queue=()   # "pid|log|entry" of the suites started in --jobs mode and not yet reported, oldest first
# prints and counts the suites at the front of the queue that have ended; with $1 = all, waits for
# each of them in turn. A suite killed before it could write its .done counts as a crash.
report_finished() {
    local pid log entry rc secs bin args
    while [ ${#queue[@]} -gt 0 ]; do
        IFS='|' read -r pid log entry <<< "${queue[0]}"
        if kill -0 "$pid" 2>/dev/null; then
            [ "${1:-}" = all ] || return 0
        fi
        wait "$pid" 2>/dev/null
        rc=1 secs=0
        [ -e "$log.done" ] && read -r rc secs < "$log.done"
        split_entry "$entry"
        echo "== running $bin ${args[*]:-}"
        cat "$log"
        report "$entry" "$rc" "$log" "$secs"
        rm -f "$log" "$log.done"
        queue=("${queue[@]:1}")
    done
}
running_count() {  # suites of the queue still running
    local n=0 q
    for q in "${queue[@]}"; do kill -0 "${q%%|*}" 2>/dev/null && n=$((n + 1)); done
    echo "$n"
}

# an interrupted run takes its --jobs suites with it (background jobs ignore SIGINT)
trap 'for q in "${queue[@]}"; do pkill -TERM -P "${q%%|*}" 2>/dev/null; kill "${q%%|*}" 2>/dev/null; done; exit 130' INT TERM

while [ $# -gt 0 ]; do
    entry=$1
    shift
    if [ "$entry" = --jobs ]; then
        at_once=${1:-1}
        shift
        continue
    fi
    log=$(mktemp)
    if [ "$at_once" -gt 1 ]; then
        while [ "$(running_count)" -ge "$at_once" ]; do wait -n 2>/dev/null || sleep 1; done
        report_finished
        threads=$(( $(nproc 2>/dev/null || echo "$at_once") / at_once ))
        OMP_NUM_THREADS=${OMP_NUM_THREADS:-$((threads > 0 ? threads : 1))} run_quietly "$entry" "$log" 2>/dev/null &
        queue+=("$!|$log|$entry")
        continue
    fi
    report_finished all  # a --jobs run before this one ends first
    split_entry "$entry"
    echo "== running $bin ${args[*]:-}"
    t0=$SECONDS
    "$bin" "${args[@]}" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    report "$entry" "$rc" "$log" $((SECONDS - t0))
    rm -f "$log"
done
report_finished all

if [ "$run_python" -eq 0 ]; then
    :
elif [ -x .venv/bin/python ]; then
    log=$(mktemp)
    # dev/reference: the PyTorch reference's own checks; they skip cleanly where torch is not installed.
    # One pytest worker per core (pytest-xdist, requirements.txt): most tests wait on a small
    # trainer or script in a subprocess, so one process kept 1.2 of CI's 2 cores busy.
    workers=()
    if .venv/bin/python -c "import xdist" >/dev/null 2>&1; then
        workers=(-n "$(nproc 2>/dev/null || echo 2)")
    else
        echo "note: pytest-xdist is not installed (make venv): the Python tests run one at a time"
    fi
    echo "== running pytest tests/python dev/reference ${workers[*]:-}"
    t0=$SECONDS
    # OpenMP threads wait passively at barriers (unless the caller set OMP_WAIT_POLICY): two
    # workers each start trainers on CI's two cores, and libgomp's default spin-wait burns the core
    # a thread of the other process needs (test_trainer_cli.py and test_distributed.py under -n 2:
    # 161 s spinning, 64 s passive; the whole run 569 s, 475 s; 2-core machine, 2026-11-29). Not
    # for the C++ suites run one at a time above: test_value_paths' thousands of tiny parallel
    # regions took 105 s passive, 17 s spinning. A trainer run by hand keeps libgomp's default.
    OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} .venv/bin/python -m pytest -q -rs --durations=5 "${workers[@]}" tests/python dev/reference 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    # pytest's skips join the total: its summary is the last line with its counts ("3 passed,
    # 1 skipped in 2.0s"); a skip reason above it may say "skipped" too, so only that line counts
    skipped=$(grep -E '[0-9]+ (passed|failed|skipped|errors?|deselected|xfailed|xpassed)' "$log" | tail -1 | grep -Eo '[0-9]+ skipped' | grep -Eo '[0-9]+' || true)
    skipped=${skipped:-0}
    total_skip=$((total_skip + skipped))
    add_counts "pytest tests/python" "$rc" "$log" $((SECONDS - t0)) "$skipped"
    rm -f "$log"
else
    echo "!! no .venv: run 'make venv' (make test does it) to run the Python tests"
    total_fail=$((total_fail + 1))
    failed_suites+=("pytest (no venv)")
fi

echo
[ ${#failed_suites[@]} -ne 0 ] && echo "failed suites: ${failed_suites[*]}"
echo "(the tests took ${SECONDS}s, the build before them not counted)"
echo "${total_pass} passed, ${total_fail} failed, ${total_skip} skipped"
[ "$total_fail" -eq 0 ]
