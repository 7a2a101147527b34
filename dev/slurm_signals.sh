#!/usr/bin/env bash
# Which signals reach the ranks, and when, for each way of starting them under Slurm and mpirun:
# the measurements behind docs/distributed.md's table ("Slurm"). Each case starts 2 processes of
# dev/signal_probe.py and prints what each received, relative to its first signal, and when it
# died. About 10 minutes: Slurm's time limits are whole minutes, and its --signal warnings come
# up to a minute early. Needs a Slurm cluster (bash dev/slurm_local.sh start; export SLURM_CONF=...)
# and mpirun; prints a table, checks nothing (the facts it shows are Slurm's and Open MPI's).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/build/slurm_signals}
PROBE="python3 $PWD/dev/signal_probe.py"
MPIRUN="mpirun --bind-to none $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root)"
rm -rf "$OUT"
mkdir -p "$OUT"

case_plain() {  # name, extra mpirun flags: SIGTERM to an mpirun started from a shell
    local dir=$OUT/$1
    $MPIRUN $2 -np 2 $PROBE run "$dir" 40 >/dev/null 2>&1 &
    local pid=$!
    sleep 3
    kill -TERM "$pid"
    wait "$pid" || true
    echo "== $1: SIGTERM to mpirun $2"
    $PROBE report "$dir"
}

case_job() {  # name, sbatch options, batch script (DIR is the case's directory)
    local dir=$OUT/$1
    sbatch --wait -N 1 -n 2 -o "$dir.out" $2 --wrap "${3//DIR/$dir}" >/dev/null || true
    echo "== $1: sbatch $2 --wrap '${3//DIR/$dir}'"
    $PROBE report "$dir"
}

case_plain mpirun_sigterm ""
case_plain mpirun_sigterm_kill_wait_5 "--mca odls_base_sigkill_timeout 5"
case_job srun_time_limit "--time=1" "srun --mpi=pmix $PROBE run DIR"
case_job mpirun_time_limit "--time=1" "$MPIRUN $PROBE run DIR"
case_job srun_signal_usr1 "--time=2 --signal=USR1@60" "srun --mpi=pmix $PROBE run DIR"
case_job mpirun_signal_usr1 "--time=2 --signal=USR1@60" "$MPIRUN $PROBE run DIR"
case_job exec_mpirun_signal_b_usr1 "--time=2 --signal=B:USR1@60" "exec $MPIRUN $PROBE run DIR"
