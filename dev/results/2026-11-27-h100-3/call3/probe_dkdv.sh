#!/bin/bash
# One-off device probe (session 25): the dK/dV kernel with lse/delta by cp.async and its batch
# addresses in shared memory (no spills in the loop) against the same code before (c4857c8 with
# the element-by-element epilogue), vanilla and ResFormer; plus the kernel's lab check and test_gpt.
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "== (lab not carried)"
echo "== test_gpt vanilla bf16"; timeout 60 build/tests/test_gpt_gpu_vanilla_bf16 2>&1 | tail -2
run() { echo "== $1 ($2)"; timeout 40 $2 --batch-size 64 --seq-len 1024 2>&1 | grep -E "^BENCH" | sed 's/.*ms_per_step=\([0-9.]*\).*/ms_per_step \1/'; }
for i in 1 2; do
  run "new vanilla" build/dev/cuda/bf16/bench_gpt_vanilla
  run "base vanilla" build/probe/base_vanilla
  run "new resformer" build/dev/cuda/bf16/bench_gpt_resformer
  run "base resformer" build/probe/base_resformer
done
