#!/usr/bin/env bash
# dev/ptxas_report.sh: registers, spills and static shared memory of every kernel of the GPU
# trainer, as ptxas reports them at compile time (nvcc -Xptxas -v). Needs nvcc, not a GPU, so it
# runs on any build machine: a spill or a register count that halves the blocks per SM shows up
# here before a GPU session spends time on it.
#
#   bash dev/ptxas_report.sh                  # PRECISION=BF16, VALUE_PATH=vanilla, sm_90a
#   PRECISION=FP32 VALUE_PATH=depth ARCH=sm_80 bash dev/ptxas_report.sh
#
# Prints one row per kernel (demangled), with the blocks per SM its registers allow for the
# block size the launcher uses where the kernel declares it with __launch_bounds__ (65536
# registers per SM on sm_80/sm_90, allocated per warp in units of 256). Occupancy from shared
# memory is not included (dynamic shared memory is set at launch, not known to ptxas).
set -euo pipefail
cd "$(dirname "$0")/.."
PRECISION=${PRECISION:-BF16}
VALUE_PATH=${VALUE_PATH:-vanilla}
ARCH=${ARCH:-sm_90a}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$NVCC" ] || { echo "error: nvcc not found (set NVCC=/path/to/nvcc)"; exit 1; }
VP_ID=VP_$(echo "$VALUE_PATH" | tr a-z A-Z)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$NVCC" -O3 -std=c++17 -diag-suppress 1675,550 -gencode=arch=compute_${ARCH#sm_},code=$ARCH -I. -DENABLE_$PRECISION -DVALUE_PATH_ID=$VP_ID \
    -Xptxas -v -c train_gpt.cu -o "$tmp/train.o" 2> "$tmp/ptxas.txt"
python3 - "$tmp/ptxas.txt" "$PRECISION" "$VALUE_PATH" "$ARCH" "$("$NVCC" --version | tail -1)" <<'PYEOF'
import re, subprocess, sys
lines = open(sys.argv[1]).read().splitlines()
rows, cur = [], None
for l in lines:
    m = re.search(r"Compiling entry function '(\S+)'", l)
    if m:
        cur = {"name": m.group(1), "regs": 0, "spill": (0, 0), "smem": 0, "bounds": None}
        rows.append(cur)
        continue
    if cur is None:
        continue
    if m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", l):
        cur["spill"] = (int(m.group(1)), int(m.group(2)))
    if m := re.search(r"Used (\d+) registers", l):
        cur["regs"] = int(m.group(1))
    if m := re.search(r"(\d+) bytes smem", l):
        cur["smem"] = int(m.group(1))
names = subprocess.run(["c++filt"], input="\n".join(r["name"] for r in rows), capture_output=True, text=True).stdout.splitlines()
# block sizes of the __launch_bounds__ kernels (kernels/attention.cuh: ATT2_THREADS for versions
# 2-5 and the dQ kernel of version 8, ATT6_THREADS for the forward's version 6, ATT6_DQ_THREADS
# and ATT6_DKDV_THREADS for its backward kernels)
src = open("kernels/attention.cuh").read()
att2 = re.search(r"constexpr int ATT2_THREADS = (\d+);", src)
att6_wg = re.search(r"constexpr int ATT6_WARPGROUPS = (\d+);", src)
att6_dq = re.search(r"constexpr int ATT6_DQ_THREADS = (\d+);", src)
att6_dkdv = re.search(r"constexpr int ATT6_DKDV_THREADS = (\d+);", src)
def block_threads(name):
    if "attention" not in name:
        return None
    if "dq_kernel6" in name:
        return int(att6_dq.group(1)) if att6_dq else None
    if "dkdv_kernel6" in name:
        return int(att6_dkdv.group(1)) if att6_dkdv else None
    if "kernel6" in name:
        return 128 * int(att6_wg.group(1)) if att6_wg else None
    if "kernel2" in name or "dq_kernel8" in name:  # version 8's dQ kernel: version 4's block
        return int(att2.group(1)) if att2 else None
    return None
print(f"ptxas, {sys.argv[2]}, VALUE_PATH={sys.argv[3]}, {sys.argv[4]}, {sys.argv[5]}")
print(f"{'regs':>5} {'spill st/ld':>12} {'smem':>6} {'blocks/SM':>9}  kernel")
for r, name in sorted(zip(rows, names), key=lambda x: x[1]):
    threads = block_threads(name)
    blocks = ""
    if threads and r["regs"]:
        per_warp = (r["regs"] * 32 + 255) // 256 * 256
        blocks = str(65536 // (per_warp * (threads // 32)))
    spill = f"{r['spill'][0]}/{r['spill'][1]}"
    flag = "  <- spills" if r["spill"] != (0, 0) else ""
    print(f"{r['regs']:>5} {spill:>12} {r['smem']:>6} {blocks:>9}  {name[:120]}{flag}")
PYEOF
