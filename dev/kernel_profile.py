#!/usr/bin/env python3
"""Where a training step's GPU time goes: a table per kernel from Nsight Compute's CSV.

dev/device_check.sh, when time is left after the benchmark, runs one benchmark binary under

    ncu --metrics gpu__time_duration.sum --csv --print-units base --log-file F \\
        build/dev/cuda/bf16/bench_gpt_vanilla --steps 1 --warmup 1 ...

(two steps profiled: the warmup and the timed one) and this script turns F into a markdown
table: each kernel's calls and milliseconds per step and its share of the step, largest first.
ncu runs the kernels one at a time, so the sum is the step without overlap between kernels
and streams; compare it with the benchmark's ms/step (the launch gaps and the overlap are the
difference).

    python3 dev/kernel_profile.py F --steps 2 [--top 25] [--brief]

--brief prints one line instead (the total and the --top largest), for device_check's summary.

ncu's CSV has one row per (kernel launch, metric), with the columns named in its header line
("Kernel Name", "Metric Name", "Metric Unit", "Metric Value"); lines before the header (ncu's
==PROF== messages, the program's own output) are skipped. Only the standard library is used.
"""

import argparse
import csv
import re
import sys
from collections import defaultdict

UNIT_MS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0, "second": 1e3, "s": 1e3}


def short_name(kernel: str) -> str:
    """'void gpu::attention_forward_kernel2<64>(gpu::AttentionArgs)' -> 'attention_forward_kernel2<64>'."""
    name = re.sub(r"^void\s+", "", kernel.strip())
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the parameter list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    name = name[:cut]
    return re.sub(r"^gpu::", "", name) or kernel


def read_durations(path: str) -> dict:
    """{kernel: [milliseconds of each launch]} from an ncu CSV log."""
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        raise ValueError(f"{path}: no ncu CSV header (a line starting with \"ID\"); is it ncu --csv output?")
    rows = csv.DictReader(lines[start:])
    for col in ("Kernel Name", "Metric Name", "Metric Unit", "Metric Value"):
        if col not in (rows.fieldnames or []):
            raise ValueError(f"{path}: the CSV header has no column {col!r}: {rows.fieldnames}")
    out = defaultdict(list)
    for r in rows:
        if r["Metric Name"] != "gpu__time_duration.sum":
            continue
        unit = r["Metric Unit"].strip()
        if unit not in UNIT_MS:
            raise ValueError(f"{path}: unknown time unit {unit!r}")
        out[short_name(r["Kernel Name"])].append(float(r["Metric Value"].replace(",", "")) * UNIT_MS[unit])
    if not out:
        raise ValueError(f"{path}: no gpu__time_duration.sum rows")
    return out


def table(durations: dict, steps: int, top: int, brief: bool = False) -> str:
    total = sum(sum(v) for v in durations.values()) / steps
    ranked = sorted(durations.items(), key=lambda kv: -sum(kv[1]))
    head = f"{total:.2f} ms over {sum(len(v) for v in durations.values()) // steps} launches"
    if brief:
        return head + "; largest: " + "; ".join(f"{name} {sum(ms) / steps:.3f} ms" for name, ms in ranked[:top])
    lines = [f"kernel time per step (ncu, kernels serialised): {head}",
             "", "| kernel | calls/step | ms/step | share |", "| --- | ---: | ---: | ---: |"]
    for name, ms in ranked[:top]:
        t = sum(ms) / steps
        lines.append(f"| `{name}` | {len(ms) / steps:g} | {t:.3f} | {100 * t / total:.1f}% |")
    rest = ranked[top:]
    if rest:
        t = sum(sum(ms) for _, ms in rest) / steps
        lines.append(f"| {len(rest)} other kernels | {sum(len(ms) for _, ms in rest) / steps:g} | {t:.3f} | {100 * t / total:.1f}% |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu --csv log")
    ap.add_argument("--steps", type=int, default=1, help="training steps the log covers (default 1)")
    ap.add_argument("--top", type=int, default=25, help="kernels listed before the rest are summed (default 25)")
    ap.add_argument("--brief", action="store_true", help="one line: the total and the --top largest kernels")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.top < 1:
        ap.error("--steps and --top must be >= 1")
    try:
        print(table(read_durations(args.csv), args.steps, args.top, args.brief))
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
