#!/usr/bin/env bash
# tests/run_all.sh: runs every test suite of valuepath and adds up their results.
#
#   bash tests/run_all.sh [--no-python] BINARY[@FILTER]...   (make test passes the C++ test binaries)
#
# BINARY@FILTER runs `BINARY FILTER` (the tests whose names contain one of FILTER's comma-separated
# parts: tests/testing.h); --no-python skips pytest (make test-emu).
# Each C++ suite ends with "N passed, N failed"; pytest ends with its own summary. A suite that
# crashes or exits nonzero counts as a failure even if its counts look fine. The last line is
# the total, "N passed, N failed", and the exit code is nonzero if anything failed.
set -u
cd "$(dirname "$0")/.."
total_pass=0
total_fail=0
total_skip=0
failed_suites=()

SECONDS=0  # bash's own clock: each suite's line gives its seconds, the last line the total (CI's budget)
add_counts() {  # $1 = suite name, $2 = exit code, $3 = log file, $4 = seconds it took
    local p f
    p=$(grep -Eo '[0-9]+ passed' "$3" | tail -1 | grep -Eo '[0-9]+' || true)
    f=$(grep -Eo '[0-9]+ failed' "$3" | tail -1 | grep -Eo '[0-9]+' || true)
    p=${p:-0}
    f=${f:-0}
    if [ "$2" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi  # crashed, or failed without counting
    if [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then f=1; echo "!! $1 ran no test"; fi
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
    [ "$f" -ne 0 ] && failed_suites+=("$1")
    echo "== $1: $p passed, $f failed (${4}s)"
}

run_python=1
if [ "${1:-}" = "--no-python" ]; then
    run_python=0
    shift
fi

for entry in "$@"; do
    bin=${entry%%@*}
    args=()
    [ "$bin" != "$entry" ] && args=("${entry#*@}")
    log=$(mktemp)
    echo "== running $bin ${args[*]:-}"
    t0=$SECONDS
    "$bin" "${args[@]}" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    # GPU suites on a machine without a GPU: a clean skip, counted as such (CI compiled them)
    if [ "$rc" -eq 0 ] && grep -q "^skipped: no CUDA device" "$log"; then
        total_skip=$((total_skip + 1))
        echo "== $bin: skipped (no CUDA device)"
    else
        add_counts "$entry" "$rc" "$log" $((SECONDS - t0))
    fi
    rm -f "$log"
done

if [ "$run_python" -eq 0 ]; then
    :
elif [ -x .venv/bin/python ]; then
    log=$(mktemp)
    # dev/reference: the PyTorch reference's own checks; they skip cleanly where torch is not installed
    echo "== running pytest tests/python dev/reference"
    t0=$SECONDS
    .venv/bin/python -m pytest -q --durations=5 tests/python dev/reference 2>&1 | tee "$log"
    add_counts "pytest tests/python" "${PIPESTATUS[0]}" "$log" $((SECONDS - t0))
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
