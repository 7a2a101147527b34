"""What signals a launcher delivers to its ranks, and when: the facts behind the trainers' stop
handling (README "Stopping a run", docs/distributed.md "Slurm").

Each process started with this script records, until it is killed or DURATION seconds pass, every
SIGINT, SIGTERM, SIGUSR1 and SIGCONT it receives (their default actions replaced by a note) in
OUT/signals_<rank>.txt as "<seconds since the epoch> <name>", and rewrites OUT/alive_<rank>.txt
with the time every 50 ms, so the last time there is about when it died (of a SIGKILL, which no
process can catch). Then `report` prints, per rank, the signals relative to the first one and how
long the process lived after it.

    mpirun -np 2 python3 dev/signal_probe.py run OUT & sleep 3; kill -TERM %1   # then:
    python3 dev/signal_probe.py report OUT
    sbatch -n 2 --time=1 --wrap 'srun --mpi=pmix python3 dev/signal_probe.py run OUT'

dev/slurm_signals.sh runs the cases of docs/distributed.md's table on a Slurm cluster.
"""
import os
import signal
import sys
import time
from pathlib import Path

WATCHED = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGCONT)


def rank():
    for var in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if var in os.environ:
            return os.environ[var]
    return "0"


def run(out, duration):
    out.mkdir(parents=True, exist_ok=True)
    r = rank()
    log = out / f"signals_{r}.txt"

    def note(sig, frame):
        with open(log, "a") as f:
            f.write(f"{time.time():.3f} {signal.Signals(sig).name}\n")

    for sig in WATCHED:
        signal.signal(sig, note)
    t0 = time.time()
    while time.time() - t0 < duration:
        (out / f"alive_{r}.txt").write_text(f"{time.time():.3f}\n")
        time.sleep(0.05)


def report(out):
    ranks = sorted(p.name[len("alive_"):-len(".txt")] for p in out.glob("alive_*.txt"))
    if not ranks:
        sys.exit(f"signal_probe: no alive_*.txt in {out}: did the processes run?")
    for r in ranks:
        log = out / f"signals_{r}.txt"
        got = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
        alive = float((out / f"alive_{r}.txt").read_text())
        if not got:
            print(f"rank {r}: no signal")
            continue
        t0 = float(got[0][0])
        seq = ", ".join(f"{name} +{float(t) - t0:.1f}s" for t, name in got)
        print(f"rank {r}: {seq}; last alive +{alive - t0:.1f}s")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "run":
        run(Path(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else 200.0)
    elif len(sys.argv) == 3 and sys.argv[1] == "report":
        report(Path(sys.argv[2]))
    else:
        sys.exit("usage: python3 dev/signal_probe.py run OUT [DURATION] | report OUT")
