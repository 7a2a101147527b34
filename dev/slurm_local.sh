#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for dev/slurm_check.sh: slurmctld and slurmd started
# by hand (no systemd), their config, state and logs under $SLURM_DIR (default build/slurm), munge
# for their authentication. Root is needed (slurmd launches the tasks).
#
#   bash dev/slurm_local.sh start   # writes $SLURM_DIR/slurm.conf, starts munged, slurmctld, slurmd
#   export SLURM_CONF=$PWD/build/slurm/slurm.conf   # then sinfo, srun, sbatch use this cluster
#   bash dev/slurm_local.sh stop
#
# Debian/Ubuntu: apt-get install -y slurm-wlm munge (Slurm 22.05 on Debian 12, with the PMIx
# plugin that `srun --mpi=pmix` needs and the same libpmix as Debian's Open MPI).
set -euo pipefail
cd "$(dirname "$0")/.."
SLURM_DIR=${SLURM_DIR:-$PWD/build/slurm}
export SLURM_CONF=$SLURM_DIR/slurm.conf

die() { echo "slurm_local: $*" >&2; exit 1; }

start() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null ||
        die "slurmctld, slurmd or munged not found: apt-get install -y slurm-wlm munge"
    [ "$(id -u)" = 0 ] || die "run as root (slurmd starts the tasks as the submitting user)"
    mkdir -p "$SLURM_DIR"/{state,spool,log}
    local host cpus mem
    host=$(hostname -s)
    # What slurmd sees, so the node registers without a mismatch: CPUs and RealMemory (MB).
    cpus=$(slurmd -C | sed -n 's/.* CPUs=\([0-9]*\).*/\1/p')
    mem=$(slurmd -C | sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p')
    cat > "$SLURM_CONF" <<CONF
ClusterName=valuepath-local
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd.pid
SlurmctldLogFile=$SLURM_DIR/log/slurmctld.log
SlurmdLogFile=$SLURM_DIR/log/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
# No cgroups in a container: track a job's processes by their parent ids, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
# Slurm's defaults, stated: no limit on an idle srun, 30 s from the time limit's SIGTERM to its
# SIGKILL, and a finished job kept 300 s in slurmctld (the tests read its exit code with scontrol).
InactiveLimit=0
KillWait=30
MinJobAge=300
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
    # /run/munge is made by the service unit systemd would have run.
    install -d -o munge -g munge -m 0755 /run/munge
    pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged ||
        die "munged did not start (is /etc/munge/munge.key there, owned by munge?)"
    pgrep -x slurmctld >/dev/null || slurmctld -c
    pgrep -x slurmd >/dev/null || slurmd -c
    for _ in $(seq 60); do
        if sinfo -h -o '%T' 2>/dev/null | grep -qx idle; then
            echo "slurm_local: node $host up ($cpus CPUs); export SLURM_CONF=$SLURM_CONF"
            return 0
        fi
        sleep 1
    done
    die "the node did not come up in 60 s: see $SLURM_DIR/log/"
}

stop() {
    scancel --user="$(id -un)" 2>/dev/null || true
    pkill -x slurmd || true
    pkill -x slurmctld || true
    echo "slurm_local: stopped (munged left running)"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) die "usage: bash dev/slurm_local.sh start|stop" ;;
esac
