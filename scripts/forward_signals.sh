# scripts/forward_signals.sh: the one way valuepath's scripts run a trainer that a signal must reach
# (scripts/recipes/common.sh, scripts/compare_paths.sh); sourced by them, never run itself.
#
# forward_signals_run LOG ECHO CMD...: runs CMD (a trainer, or a launcher such as mpirun or srun)
# with its output appended to the file LOG, and also to this shell's stdout when ECHO is 1; sets
# FORWARDED_RC to its exit status, or to 128 + the signal's number when one was passed on and CMD
# still exited 0 (it was past its last step), so that the caller stops as for a run the signal
# stopped instead of going on to its next run. Every INT, TERM and USR1 this shell gets while CMD
# runs is passed on to CMD's processes, once:
# - CMD runs in a process group of its own (set -m for its start only), and the shell's traps send
#   the signal to that group. So a Ctrl-C (it reaches the terminal's foreground group, which no
#   longer holds the trainer: the trainer sees it once, not once from the terminal and once from
#   the trap, which it would take for a second Ctrl-C), a `kill <script>` and Slurm's
#   --signal=B:USR1@T (to the batch shell alone) all stop the run after its step, with its
#   checkpoint. Without this a SIGTERM to the script alone ended the script and left the trainer
#   running on to its last step (tests/python/test_recipes.py, test_plot_runs.py).
# - A trap, unlike a signal's default action, also keeps the shell alive until the run has ended:
#   at a Slurm job's time limit slurmstepd sends SIGTERM to every process of the batch script, this
#   shell too, which then says which run stopped and how to go on (tests/python/test_slurm.py); the
#   trainer gets that SIGTERM twice and acts on the first.
# - With ECHO=1 the output goes through tee, started first in the shell's own group (a process
#   group apart from the terminal's foreground one must not write to it: `stty tostop` would stop
#   it), which ignores those signals so that the trainer's last lines, after its save, still reach
#   LOG.
# - CMD's stdin is /dev/null: mpirun reads stdin, and a process group apart from the foreground
#   one that reads the terminal is stopped.
# A signal that comes before CMD has started is kept and sent as soon as it has.

# forward_signals_pass SIG: the traps' action: SIG to the run in progress (forward_signals_run's
# leader, CMD's process group), or kept for when it has started (pending)
forward_signals_pass() {
    caught=$1
    if [ -n "$leader" ]; then kill -s "$1" -- "-$leader" 2>/dev/null || true; else pending=$1; fi
}

forward_signals_run() {
    local log=$1 echo=$2
    shift 2
    # leader, pending and caught are used by forward_signals_pass, which the traps run inside this
    # function
    local leader="" pending="" caught="" output tee_pid="" s rc=0
    if [ "$echo" = 1 ]; then
        # tee must ignore the signals from its first instant. A subshell resets the caller's traps
        # to the default action, so a trap set inside it came too late when a Ctrl-C beat it (seen
        # once, 2026-11-30, in test_recipes.py's Ctrl-C test during a fresh-clone make test: tee
        # killed, no console file); ignored signals stay ignored through fork and exec. The price:
        # a signal in the microseconds of this fork, before the traps below, is not seen.
        trap '' INT TERM USR1
        exec {output}> >(exec tee -a "$log")
        tee_pid=$!
    else
        exec {output}>>"$log"
    fi
    for s in INT TERM USR1; do trap "forward_signals_pass $s" "$s"; done
    set -m
    "$@" </dev/null >&"$output" 2>&1 &
    leader=$!
    set +m
    exec {output}>&-
    [ -z "$pending" ] || forward_signals_pass "$pending"
    # wait returns early (above 128) for every signal a trap caught, so it is repeated while CMD
    # lives; then once more for its status, which bash keeps, in case the last wait was cut short
    # by a signal that came as CMD ended
    while wait "$leader" && rc=0 || rc=$?; kill -0 "$leader" 2>/dev/null; do :; done
    wait "$leader" && rc=0 || rc=$?
    [ -z "$tee_pid" ] || wait "$tee_pid" || true
    trap - INT TERM USR1
    [ "$rc" -ne 0 ] || [ -z "$caught" ] || rc=$((128 + $(kill -l "$caught")))
    FORWARDED_RC=$rc
}
