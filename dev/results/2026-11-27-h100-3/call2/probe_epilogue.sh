#!/bin/bash
# One-off device probe (session 25): why the preloading dK/dV epilogue made ResFormer slower.
# Times three builds of bench_gpt_resformer alternating, then ncu details of one dK/dV launch each.
S=build/variants/att_epilogue_serial/bench_gpt
B=build/dev/cuda/bf16/bench_gpt_resformer
E=build/variants/att_epilogue_ec1/bench_gpt
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
for i in 1 2; do
  for b in $S $B $E; do echo "== $b run $i"; timeout 60 $b --batch-size 64 --seq-len 1024 2>&1 | grep -E "median|BENCH"; done
done
# layer 5's dK/dV launch of step 2 (launch-skip counts dkdv launches: 12 per step, top layer first)
for b in $S $B; do
  name=$(basename $(dirname $b))
  echo "== ncu $name"
  timeout 90 ncu --kernel-name regex:dkdv --launch-skip 18 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
    --print-units base $b --batch-size 64 --seq-len 1024 --steps 1 --warmup 1 > $OUT/ncu_$name.txt 2>&1
  echo "rc=$?"; grep -E "Duration|DRAM Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Warp Cycles Per Issued|Registers Per|Achieved Occupancy|Local" $OUT/ncu_$name.txt | head -20
done
echo "== ncu source (sass) for the preloading build"
timeout 120 ncu --kernel-name regex:dkdv --launch-skip 18 --launch-count 1 --section SourceCounters --print-units base \
  --page source --print-source sass --csv $B --batch-size 64 --seq-len 1024 --steps 1 --warmup 1 > $OUT/ncu_source_preload.csv 2>&1
echo "rc=$? $(wc -l < $OUT/ncu_source_preload.csv) lines"
