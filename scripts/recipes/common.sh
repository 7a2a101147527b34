# scripts/recipes/common.sh: what every recipe shares; sourced by them, never run itself.
#
# Environment, for every recipe (each recipe adds its own, listed in its header):
#   PATHS      value paths to train, one run each, same data, seed and schedule
#   NGPU       processes on this node (1); more than 1 runs `mpirun -np NGPU` (one GPU each)
#   LAUNCH     a launcher prefix instead of mpirun, e.g. 'srun --mpi=pmix' inside an sbatch
#              allocation (docs/distributed.md, "Slurm"); then set NGPU to the total number of
#              ranks, so the batch arithmetic below is right
#   MPI_KILL_WAIT  seconds mpirun waits before it passes a Ctrl-C or SIGTERM to its ranks, and
#              again before it kills them (30; Open MPI's own is 1 s, too short for a big save)
#   PRECISION  BF16 (default) or FP32, for the GPU trainer
#   TRAINER    a trainer binary to use instead, '{path}' replaced by the value path
#              (e.g. 'build/{path}/train_cpu'); default: the GPU build where a GPU is visible,
#              else the CPU build (far too slow at these sizes: only to try a recipe out)
#   OUT        where the runs go: OUT/<path>/ (log.jsonl, checkpoints), OUT/<path>.out (console)
#   EXTRA      flags added to every run (they must not repeat a recipe's flag), e.g.
#              EXTRA="--lr-schedule wsd --cooldown-frac 0.2" for a warmup-stable-decay schedule
#              EXTRA="--eval-mc hellaswag=data/hellaswag/hellaswag_val_neox.vpmc" for HellaSwag at
#              every eval (scripts/prepare_hellaswag.py --tokenizer neox; gpt2 for the GPT-2 recipes)
#   SEED       the seed of the init, the data order and the samples (1337), the same for every path
#   KEEP_EVERY checkpoints kept for good besides the newest two, for evaluating a run later: every
#              one whose step is a multiple of this (default: the largest multiple of the recipe's
#              CHECKPOINT_EVERY up to a quarter of STEPS, so about four per run; 0 = none)
#   DRY_RUN=1  print the commands, build and run nothing
#
# Re-running a recipe resumes every run from its newest checkpoint (--resume auto: bit-exact),
# so a preempted job is continued by submitting it again; a finished run stays finished. Ctrl-C,
# SIGTERM or SIGUSR1, sent to the recipe (which passes it on to the run in progress, once:
# scripts/forward_signals.sh) or to the trainer (or to mpirun or srun, which pass them on; Slurm's
# --signal=[B:]USR1@T and time limit do), stop the run in progress after its step, with its
# checkpoint (README, "Stopping a run"), and the recipe with the trainer's status, 128 + the
# signal, before its next run. Under Slurm: LAUNCH='srun --mpi=pmix' (docs/distributed.md, "Slurm").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

NGPU=${NGPU:-1}
LAUNCH=${LAUNCH:-}
PRECISION=${PRECISION:-BF16}
DRY_RUN=${DRY_RUN:-0}
EXTRA=${EXTRA:-}
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python
source scripts/forward_signals.sh

recipe_die() {  # $1 = what is wrong, $2 = what to do; exit 2 as the trainers' usage errors
    printf 'error: %s\n---> HINT: %s\n' "$1" "$2" >&2
    exit 2
}

MPI_KILL_WAIT=${MPI_KILL_WAIT:-30}
[[ "$MPI_KILL_WAIT" =~ ^[1-9][0-9]*$ ]] ||
    recipe_die "MPI_KILL_WAIT must be a positive number of seconds, got '$MPI_KILL_WAIT'" "e.g. MPI_KILL_WAIT=60"

# recipe_whole NAME...: each named setting must be a whole number above 0 written in digits. The
# recipes compute with STEPS and EVAL_EVERY, and bash's arithmetic takes '1e5' (a form the
# trainer accepts) as an error and carries on without what it was computing (the checkpoint flags
# among them): such a value stops the recipe here, before anything runs.
recipe_whole() {
    local name
    for name in "$@"; do
        [[ "${!name}" =~ ^[1-9][0-9]*$ ]] ||
            recipe_die "$name must be a whole number above 0 in digits, got '${!name}'" "e.g. $name=20000 (not 2e4: the recipe computes with it)"
    done
}

# recipe_batch TOTAL B T: checks that a step of TOTAL tokens is whole micro-batches of B x T on
# each of NGPU ranks, and prints the gradient accumulation that makes it up.
recipe_batch() {
    local total=$1 b=$2 t=$3 per
    for v in "$1" "$2" "$3" "$NGPU"; do
        [[ "$v" =~ ^[1-9][0-9]*$ ]] || recipe_die "TOTAL, B, T and NGPU must be positive integers, got '$v'" "e.g. NGPU=8 B=64 T=1024"
    done
    per=$((b * t * NGPU))
    if [ $((total % per)) -ne 0 ]; then
        recipe_die "a step of $total tokens is not a whole number of micro-batches of B=$b x T=$t on $NGPU rank(s) ($per tokens)" \
            "choose B (per GPU) and NGPU so that B*T*NGPU divides $total"
    fi
    echo $((total / per))
}

# recipe_data GLOB PREPARE: stops with the preparation command when GLOB matches no shard
recipe_data() {
    [ "$DRY_RUN" = 1 ] && return 0
    compgen -G "$1" >/dev/null || recipe_die "no shards match '$1'" "prepare them first: $2 (or set DATA to where they are)"
}

# recipe_checkpoint_flags: sets the array CHECKPOINT_FLAGS: a checkpoint every CHECKPOINT_EVERY
# steps, the newest two kept (enough to resume, when the last one's write was cut off), and every
# KEEP_EVERY-th step's kept for good (the trainer's --keep-checkpoints-every: llm.c's major checkpoints)
recipe_checkpoint_flags() {
    [[ "$CHECKPOINT_EVERY" =~ ^[1-9][0-9]*$ ]] || recipe_die "CHECKPOINT_EVERY must be a positive integer, got '$CHECKPOINT_EVERY'" "e.g. CHECKPOINT_EVERY=1000"
    local every=${KEEP_EVERY:-}
    if [ -z "$every" ]; then
        every=$((STEPS / 4 / CHECKPOINT_EVERY * CHECKPOINT_EVERY))
        [ "$every" -lt "$CHECKPOINT_EVERY" ] && every=$CHECKPOINT_EVERY
    fi
    [[ "$every" =~ ^(0|[1-9][0-9]*)$ ]] || recipe_die "KEEP_EVERY must be a non-negative integer, got '$every'" "e.g. KEEP_EVERY=5000, or 0 to keep only the newest two checkpoints"
    if [ "$every" -gt 0 ] && [ $((every % CHECKPOINT_EVERY)) -ne 0 ]; then
        recipe_die "KEEP_EVERY=$every is not a multiple of CHECKPOINT_EVERY=$CHECKPOINT_EVERY: no checkpoint but the last would be kept" \
            "choose a multiple of $CHECKPOINT_EVERY, or 0"
    fi
    CHECKPOINT_FLAGS=(--checkpoint-every "$CHECKPOINT_EVERY" --keep-checkpoints 2)
    [ "$every" -gt 0 ] && CHECKPOINT_FLAGS+=(--keep-checkpoints-every "$every")
    return 0
}

# recipe_domain_vals DIR PREFIX: sets the array VAL_FLAGS to one named --val-data set per domain
# that a prepare script wrote as DIR/PREFIX_val_<domain>_000000.bin (--val-by-domain 1)
recipe_domain_vals() {
    local dir=$1 prefix=$2 f domain
    VAL_FLAGS=()
    for f in "$dir/${prefix}"_val_*_000000.bin; do
        [ -e "$f" ] || continue
        domain=${f#"$dir/${prefix}"_val_}
        domain=${domain%_000000.bin}
        VAL_FLAGS+=(--val-data "$domain=$dir/${prefix}_val_${domain}_*.bin")
    done
}

# recipe_trainer PATH: builds the trainer of one value path if needed and prints its file name
recipe_trainer() {
    local path=$1 mpi="" prec
    if [ -n "${TRAINER:-}" ]; then
        echo "${TRAINER//\{path\}/$path}"
        return
    fi
    { [ "$NGPU" -gt 1 ] || [ -n "$LAUNCH" ]; } && mpi="-mpi"
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        prec=$([ "$PRECISION" = FP32 ] && echo fp32 || echo bf16)
        local target="build/$path$mpi/train_$prec"
    else
        [ "$DRY_RUN" = 1 ] || echo "recipe: no GPU visible, using the CPU trainer (slow at this size)" >&2
        local target="build/$path$mpi/train_cpu"
    fi
    [ "$DRY_RUN" = 1 ] || make -s "$target" USE_MPI=$([ -n "$mpi" ] && echo 1 || echo 0) PRECISION="$PRECISION" >&2
    echo "$target"
}

# recipe_run PATH FLAG...: one run into OUT/PATH, resumed if it has checkpoints already (--resume
# auto). Besides FLAG..., every run gets the batch and schedule of the recipe's B T TOTAL STEPS LR
# WARMUP SEED, and the AdamW settings that GPT-2 (llm.c, nanoGPT) and both papers share: betas (0.9, 0.95),
# weight decay 0.1, clipping at norm 1, decay to a tenth of the peak (cosine unless EXTRA says otherwise).
recipe_run() {
    local path=$1
    shift
    local schedule=(--batch-size "$B" --seq-len "$T" --total-batch-tokens "$TOTAL" --max-steps "$STEPS"
        --lr "$LR" --warmup-steps "$WARMUP" --min-lr-frac 0.1 --weight-decay 0.1 --beta1 0.9 --beta2 0.95
        --grad-clip 1.0 --seed "${SEED:-1337}")
    local bin dir=$OUT/$path launch=()
    bin=$(recipe_trainer "$path")
    if [ -n "$LAUNCH" ]; then
        read -r -a launch <<<"$LAUNCH"
    elif [ "$NGPU" -gt 1 ]; then
        # Open MPI's mpirun passes a Ctrl-C or SIGTERM on to its ranks as SIGTERM only after
        # odls_base_sigkill_timeout seconds, and SIGKILLs them as long again after that: at its
        # 1 s a rank still saving its checkpoint is killed (the earlier ones stay). MPI_KILL_WAIT
        # (default 30) gives the save that long, at the price of a Ctrl-C that acts that late. Set
        # in the environment, which another MPI's mpirun ignores (a --mca flag it would refuse).
        launch=(env "OMPI_MCA_odls_base_sigkill_timeout=$MPI_KILL_WAIT" mpirun -np "$NGPU")
    fi
    local cmd=("${launch[@]}" "$bin" "$@" "${schedule[@]}" --out-dir "$dir")
    # shellcheck disable=SC2206
    cmd+=($EXTRA)
    # a new run where OUT/PATH has no checkpoint, else resumed from its newest: the printed
    # command (DRY_RUN=1) can go into a batch job that is submitted again and again as it is
    cmd+=(--resume auto)
    if [ "$DRY_RUN" = 1 ]; then
        printf '%q ' "${cmd[@]}"
        echo
        return
    fi
    mkdir -p "$OUT"
    echo "== $path: ${cmd[*]}" >&2
    # every INT, TERM and USR1 this shell gets while the run is in progress is passed on to it, once;
    # its console goes to OUT/PATH.out and to the recipe's stdout (scripts/forward_signals.sh)
    forward_signals_run "$OUT/$path.out" 1 "${cmd[@]}"
    local rc=$FORWARDED_RC
    if [ "$rc" -gt 128 ] && [ "$rc" -lt 160 ]; then
        # 128 + a signal's number: the trainer stopped on it after saving a checkpoint (or, at a
        # second Ctrl-C or a SIGKILL, was ended by it); the recipe stops with the same status
        echo "error: the $path run stopped on signal $((rc - 128)) (its console is in $OUT/$path.out); run the recipe again to resume it" >&2
        exit "$rc"
    elif [ "$rc" -ne 0 ]; then
        echo "error: the $path run failed (its console is in $OUT/$path.out); run the recipe again to resume it" >&2
        exit 1
    fi
}

# recipe_report: the table of every run (and the curves, where matplotlib is installed), with
# each run's val loss minus vanilla's when vanilla is one of them
recipe_report() {
    [ "$DRY_RUN" = 1 ] && return 0
    local runs=() baseline=() p
    for p in $PATHS; do runs+=("$p=$OUT/$p"); done
    [[ " $PATHS " == *" vanilla "* ]] && baseline=(--baseline vanilla)
    if "$PY" -c "import matplotlib" >/dev/null 2>&1; then
        "$PY" scripts/plot_runs.py "${runs[@]}" "${baseline[@]}" --x tokens --out "$OUT/plot.png"
    else
        "$PY" scripts/plot_runs.py "${runs[@]}" "${baseline[@]}" --table
    fi
}
