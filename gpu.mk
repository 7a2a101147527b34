# gpu.mk: the GPU build of valuepath (train_gpt.cu, kernels/, test_gpt.cu, dev/cuda/), included at
# the end of the Makefile, whose variables it shares (VALUE_PATH, VP_ID_<path>, INCLUDES, ...).
#
#   make train [PRECISION=BF16|FP32] [VALUE_PATH=...]   ./train, the GPU trainer (same CLI as ./train_cpu)
#   make train USE_MPI=1       the data-parallel GPU trainer (MPI + NCCL): build/<path>-mpi/train_<prec> (docs/distributed.md)
#   make test_gpt              build test_gpt for both precisions (build/tests/test_gpt_gpu_<path>_<prec>)
#   make test-gpu              build and run them ("skipped: no CUDA device" where there is no GPU)
#   make gpu-compile-check     compile every GPU target (trainer, tests, labs, bench; both precisions)
#   make gpu-compile-check-sm80   the trainer and test_gpt for sm_80 (A100) as well
#   make dev-cuda              the kernel labs, build/dev/cuda/<prec>/<lab>
#   make bench                 GPT-2 124M, B=64, T=1024, bf16: every value path, then PyTorch, same device, one call
#                              (dev/bench_paths.sh: tok/s, ms/step, MFU, memory; ratios to vanilla and to PyTorch)
#
# Variables: PRECISION (BF16), GPU_ARCH (this machine's GPU: sm_90a for H100/H200, sm_80 for A100;
# sm_90a without a GPU), NVCC (found on the
# PATH or in /usr/local/cuda), BENCH_PYTHON (python3, a Python with PyTorch), NCCL_HOME (where
# NCCL is, if not with the CUDA toolkit or in /usr), MPICXX (mpicxx, from the Makefile).
# For CI: GPU_TEST_TARGETS is what `make test` should depend on: it compiles every GPU target where
# nvcc exists and prints a ✗ line (and succeeds) where it does not. Nothing in it needs a GPU.
#
# Build outputs: build/<path>/train_<prec> (value paths never clobber each other, nor precisions);
# ./train is a copy of the VALUE_PATH + PRECISION of the last `make train`. Every value path runs
# on the GPU; a binary refuses a checkpoint or config of another path, as the CPU build does.
#   make gpu-all-paths         build/<path>/train_<prec> for every path (PRECISION as given)

NVCC ?= $(shell command -v nvcc 2>/dev/null || (test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc))
PRECISION ?= BF16
ifeq ($(filter $(PRECISION),BF16 FP32),)
$(error unknown PRECISION '$(PRECISION)': choose BF16 or FP32)
endif
PREC := $(if $(filter FP32,$(PRECISION)),fp32,bf16)
# The GPU of this machine, if any (compute capability without the dot: 90, 80, 89, ...; nothing
# where nvidia-smi prints anything else, as its "couldn't communicate with the NVIDIA driver"): its
# architecture, sm_90a for Hopper (wgmma-capable, what the kernels are tuned for); sm_90a where
# no GPU answers (the CI compile check, and bundles built off the device by dev/device_bundle.sh)
# or where it is older than compute capability 8.0 (V100, T4): the kernels need bf16 tensor cores
# and cp.async. Such a GPU counts as none (make test compiles the GPU targets without running
# test_gpt, make quickstart trains on the CPU) and `make train` says why it stops; GPU_ARCH given
# by hand (a build for another machine) still builds.
GPU_COMPUTE_CAP := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ' | grep -E '^[0-9]+\.[0-9]+$$')
GPU_CC := $(subst .,,$(GPU_COMPUTE_CAP))
GPU_TOO_OLD := $(if $(GPU_CC),$(shell [ $(GPU_CC) -lt 80 ] && echo 1))
GPU_ARCH ?= $(if $(and $(GPU_CC),$(if $(GPU_TOO_OLD),,1)),$(if $(filter 90,$(GPU_CC)),sm_90a,sm_$(GPU_CC)),sm_90a)
BENCH_PYTHON ?= python3

# value paths the GPU trainer implements (test_gpt runs for each): all of them
GPU_VALUE_PATHS := $(VALUE_PATHS)

# one -gencode per architecture: GPU_ARCH may list several ("sm_80 sm_90a": one binary for a
# cluster's A100 and H100 nodes, each running its own machine code; one compile per architecture)
gencode = $(foreach a,$(1),-gencode=arch=compute_$(patsubst sm_%,%,$(a)),code=$(a))
# -O3, no --use_fast_math (the FP32 build is compared with the CPU reference to tight bounds);
# -lineinfo costs nothing at run time and lets ncu/compute-sanitizer name source lines.
# Suppressed front-end warnings, both about shared code that g++ compiles cleanly: 1675 the
# `#pragma GCC unroll` of cpu/gemm.h (g++ honours it), 550 a variable host/value_path.h marks used
# with (void).
# GPU_BUILD and GPU_OPT: where the GPU binaries go and how hard they are optimized; only the compile
# check of a machine without a GPU changes them (gpu-compile-check-fast below).
GPU_BUILD ?= build
GPU_OPT ?= -O3
NVCC_FLAGS := $(GPU_OPT) -std=c++17 -lineinfo -diag-suppress 1675,550
CUDA_LIBS := -lcublasLt -lcublas
# the trainers: OpenMP for host/params.h's init, which draws the normals on every thread (the same
# bits on any number; one core takes 5 s for GPT-2 124M and so about a minute for 1.5B parameters),
# no -march=native (a trainer may run on another node than the one that built it). The host code
# takes the CPU build's -ffp-contract=off and -fno-math-errno (Makefile, CXXFLAGS), so the code it
# shares with the CPU build (host/: the init, the schedule; the CPU reference inside test_gpt) has
# the CPU build's bits; device code is nvcc's (--fmad), which these do not touch.
NVCC_HOST_OMP := -Xcompiler -fopenmp,-ffp-contract=off,-fno-math-errno -lgomp
# programs that include the CPU reference (tests, labs): its OpenMP and the host's SIMD too
NVCC_HOST_CPU := $(NVCC_HOST_OMP) -Xcompiler -march=native
prec_define = $(if $(filter fp32,$(1)),-DENABLE_FP32,-DENABLE_BF16)

KERNEL_HEADERS := $(wildcard kernels/*.cuh)
# $(GPU_BUILD)/gpu_arch: the GPU_ARCH the binaries there were compiled for, a prerequisite of each.
# A make variable is no prerequisite: without it, `make train GPU_ARCH=sm_80` after a build for
# sm_90a (on a cluster's login node without a GPU, say, then on an A100 node) would copy the old
# binary, which has no code for the A100. Written as make reads this file (so that make -n and
# make -q see the change too), only when GPU_ARCH changes: an unchanged one rebuilds nothing, and
# one that did not exist yet is dated 1970 (binaries built before it, or brought for the same
# sm_90a by dev/device_bundle.sh, stay up to date).
GPU_ARCH_STAMP := $(GPU_BUILD)/gpu_arch
GPU_SOURCES := train_gpt.cu $(KERNEL_HEADERS) $(HOST_HEADERS) $(GPU_ARCH_STAMP)
new_gpu_arch_stamp = mkdir -p $(GPU_BUILD) && echo "$(strip $(GPU_ARCH))" > $(GPU_ARCH_STAMP) && touch -d @0 $(GPU_ARCH_STAMP)
ifneq ($(NVCC),)
GPU_ARCH_WAS := $(strip $(shell cat $(GPU_ARCH_STAMP) 2>/dev/null))
ifeq ($(wildcard $(GPU_ARCH_STAMP)),)
$(shell $(new_gpu_arch_stamp))
else ifneq ($(GPU_ARCH_WAS),$(strip $(GPU_ARCH)))
$(shell echo "$(strip $(GPU_ARCH))" > $(GPU_ARCH_STAMP))
# (a warning: on stderr, so that what make -s print-gpu-paths and the like print stays clean)
$(warning GPU_ARCH is $(GPU_ARCH), was $(GPU_ARCH_WAS): the GPU binaries in $(GPU_BUILD) are built again)
endif
endif
# (made again, the same way, where something removed it after make read this file: make clean train)
$(GPU_ARCH_STAMP):
	@$(new_gpu_arch_stamp)
DEV_CUDA_LABS := attention_forward attention_backward classifier layernorm rmsnorm gelu depth_attention wgmma
# build variants of a path's benchmark (dev/bench_variants.list: name | extra nvcc flags | what it
# decides | value path, vanilla if left out | extra bench_gpt flags), timed against that path's
# plain build by dev/device_check.sh: build/variants/<name>/bench_gpt, or, for a variant with no
# nvcc flags, the plain build run with its bench_gpt flags (nothing more to compile)
BENCH_VARIANTS := $(shell awk -F'|' '/^[a-z]/ { gsub(/ /, "", $$1); print $$1 }' dev/bench_variants.list)
variant_field = $(shell awk -F'|' -v name=$(1) -v f=$(2) '/^[a-z]/ { n = $$1; gsub(/ /, "", n); if (n == name) print $$f }' dev/bench_variants.list)
variant_flags = $(call variant_field,$(1),2)
variant_path = $(or $(strip $(call variant_field,$(1),4)),vanilla)
variant_run_flags = $(strip $(call variant_field,$(1),5))
BUILT_BENCH_VARIANTS := $(foreach v,$(BENCH_VARIANTS),$(if $(strip $(call variant_flags,$(v))),$(v)))
VARIANT_BINS := $(foreach v,$(BUILT_BENCH_VARIANTS),$(GPU_BUILD)/variants/$(v)/bench_gpt)
TEST_GPT_BINS := $(foreach p,$(GPU_VALUE_PATHS),$(GPU_BUILD)/tests/test_gpt_gpu_$(p)_bf16 $(GPU_BUILD)/tests/test_gpt_gpu_$(p)_fp32)
# the paths other than vanilla, whose kernels are vanilla's (the compile check's twins, below), and
# their fp32 test_gpt, which the compile check without a GPU leaves to the emulated build
TWIN_PATHS := $(filter-out vanilla,$(GPU_VALUE_PATHS))
TWIN_FP32_TEST_GPT := $(foreach p,$(TWIN_PATHS),$(GPU_BUILD)/tests/test_gpt_gpu_$(p)_fp32)
GPU_TRAINERS := $(foreach p,$(GPU_VALUE_PATHS),$(GPU_BUILD)/$(p)/train_bf16 $(GPU_BUILD)/$(p)/train_fp32)

# Data parallel: -DUSE_MPI, OpenMPI's compile and link flags (mpicxx --showme, as mpicxx itself
# would add them) and NCCL. HAVE_MPI, MPICXX and MPI_SUFFIX come from the Makefile.
HAVE_NCCL := $(if $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/include/nccl.h) $(dir $(NVCC))../include/nccl.h /usr/include/nccl.h /usr/local/include/nccl.h),1,)
MPI_SHOWME := $(if $(HAVE_MPI),$(shell $(MPICXX) --showme:compile 2>/dev/null) $(shell $(MPICXX) --showme:link 2>/dev/null),)
# nvcc takes -I -D -L -l as they are; -Wl,a,b becomes -Xlinker a,b; the rest (-pthread) goes to the host compiler
comma := ,
nvcc_wrap = $(filter -I% -D% -L% -l%,$(1)) $(patsubst -Wl$(comma)%,-Xlinker %,$(filter -Wl$(comma)%,$(1))) \
	$(addprefix -Xcompiler ,$(filter-out -I% -D% -L% -l% -Wl$(comma)%,$(1)))
NVCC_MPI := -DUSE_MPI $(call nvcc_wrap,$(MPI_SHOWME)) $(if $(NCCL_HOME),-I$(NCCL_HOME)/include -L$(NCCL_HOME)/lib) -lnccl
# the MPI + NCCL trainer that gpu-compile-check compiles, where MPI and NCCL are installed
GPU_MPI_TARGETS := $(if $(and $(HAVE_MPI),$(HAVE_NCCL)),$(GPU_BUILD)/vanilla-mpi/train_bf16,)
# PTX twins (the compile check only, GPU_PTX_TWINS=1): test_gpt, bench_gpt and the -mpi trainer of
# a path and precision hold the trainer's kernels (they include train_gpt.cu), and ptxas was half of
# each of their compiles. There they embed PTX only (no ptxas), every one keeps its PTX as <binary>.ptx
# (nvcc --keep), and tests/ptx_twins.py runs ptxas on a twin only where its PTX holds an item that
# vanilla's trainer of its precision (which ptxas did compile) lacks: a value path changes which
# kernels the host code calls, not the kernels. The other paths' trainers (where built), the bf16
# kernel labs and the benchmark's build variants are twins in the same way. The real builds
# (GPU_BUILD=build) are unchanged.
PTXAS := $(if $(NVCC),$(dir $(NVCC))ptxas)
keep_dir = $(if $(GPU_PTX_TWINS),$@.keep)
keep_ptx = $(if $(GPU_PTX_TWINS),--keep --keep-dir $@.keep)
save_ptx = $(if $(GPU_PTX_TWINS),&& mv $@.keep/*.ptx $@.ptx && rm -rf $@.keep)
ptx_twin_of = $(if $(GPU_PTX_TWINS),$(1))
twin_gencode = $(if $(GPU_PTX_TWINS),-gencode=arch=compute_$(patsubst sm_%,%,$(GPU_ARCH))$(comma)code=compute_$(patsubst sm_%,%,$(GPU_ARCH)) $(keep_ptx),$(call gencode,$(GPU_ARCH)))
twin_check = $(if $(GPU_PTX_TWINS),$(save_ptx) && $(PYTHON) tests/ptx_twins.py $@.ptx $(1).ptx --ptxas '$(PTXAS) -arch=$(GPU_ARCH) -O0')
GPU_ALL_TARGETS := $(GPU_TRAINERS) $(GPU_MPI_TARGETS) $(TEST_GPT_BINS) $(GPU_BUILD)/tests/test_gpu_routes \
	$(addprefix $(GPU_BUILD)/dev/cuda/bf16/,$(DEV_CUDA_LABS)) $(foreach p,$(GPU_VALUE_PATHS),$(GPU_BUILD)/dev/cuda/bf16/bench_gpt_$(p)) \
	$(VARIANT_BINS)

.PHONY: train gpu-too-old gpu-all-paths test_gpt test-gpu gpu-compile-check gpu-compile-check-fast gpu-compile-check-sm80 dev-cuda bench gpu-no-nvcc clean-gpu print-gpu-paths print-bench-variants print-bench-variant-path print-bench-variant-run-flags print-dev-cuda-labs

print-gpu-paths:
	@echo $(GPU_VALUE_PATHS)
print-dev-cuda-labs:
	@echo $(DEV_CUDA_LABS)
print-bench-variants:
	@echo $(BENCH_VARIANTS)
print-bench-variant-path:  # VARIANT=<name>: the value path it builds
	@echo $(call variant_path,$(VARIANT))
print-bench-variant-run-flags:  # VARIANT=<name>: its bench_gpt flags; none and a build of its own, or these and the plain build
	@echo $(call variant_run_flags,$(VARIANT))

ifeq ($(NVCC),)
# ---------------------------------------------------------------------------
# no CUDA toolkit on this machine

GPU_TEST_TARGETS := gpu-no-nvcc
GPU_TEST_RUN :=
gpu-no-nvcc:
	@echo "✗ nvcc not found: skipping the GPU targets (install the CUDA toolkit, or set NVCC=/path/to/nvcc)"
gpu-compile-check test-gpu: gpu-no-nvcc
train gpu-all-paths test_gpt gpu-compile-check-sm80 dev-cuda bench:
	@echo "✗ nvcc not found: '$@' needs the CUDA toolkit (set NVCC=/path/to/nvcc)"; exit 1

else
# ---------------------------------------------------------------------------
# the trainer

# What make test compiles and runs. With a GPU: the real binaries, and test_gpt runs. Without one
# (CI): every GPU target still compiles, so a build break fails CI, but into build/check/ with
# device and host optimization off (-O0, -Xcicc -O0, -Xptxas -O0): 14 s a binary instead of 36 s
# (measured 2026-11-26 on the 2-core machine; the fresh-clone .ci/run went from 22 min 47 s to
# 15 min 52 s, an apt-get of OpenMPI less among the difference); the
# test_gpt binaries there only print "skipped: no CUDA device", test_gpu_routes runs on the CPU.
# A separate folder, so that an unoptimized binary never stands in for a real one in build/.
HAVE_GPU := $(if $(GPU_TOO_OLD),,$(shell nvidia-smi -L >/dev/null 2>&1 && echo 1))
ifneq ($(HAVE_GPU),)
GPU_TEST_TARGETS := gpu-compile-check
GPU_TEST_RUN := $(TEST_GPT_BINS) $(GPU_BUILD)/tests/test_gpu_routes
else
GPU_TEST_TARGETS := gpu-compile-check-fast
# (the other paths' fp32 test_gpt are not in the check: CHECK_LEFT_OUT below)
GPU_TEST_RUN := $(patsubst $(GPU_BUILD)/%,build/check/%,$(filter-out $(TWIN_FP32_TEST_GPT),$(TEST_GPT_BINS)) $(GPU_BUILD)/tests/test_gpu_routes)
endif

# In the compile check the other paths' trainers are PTX twins of vanilla's: a value path changes
# which kernels the host code calls, not the kernels (each of their PTX items was vanilla's,
# 2026-11-28). ptxas runs on one only where tests/ptx_twins.py finds an item that vanilla's lacks.
# trainer_gencode and trainer_ptx are the compile's code generation and what follows it: vanilla's
# trainer (and, GPU_PTX_TWINS unset, every trainer) fully compiled, keeping its PTX in the check.
trainer_gencode = $(if $(filter-out vanilla,$*),$(twin_gencode),$(call gencode,$(GPU_ARCH)) $(keep_ptx))
trainer_ptx = $(if $(filter-out vanilla,$*),$(call twin_check,$(GPU_BUILD)/vanilla/$(notdir $@)),$(save_ptx))
$(foreach p,$(TWIN_PATHS),$(GPU_BUILD)/$(p)/train_bf16): $(call ptx_twin_of,$(GPU_BUILD)/vanilla/train_bf16)
$(foreach p,$(TWIN_PATHS),$(GPU_BUILD)/$(p)/train_fp32): $(call ptx_twin_of,$(GPU_BUILD)/vanilla/train_fp32)

$(GPU_BUILD)/%/train_bf16: $(GPU_SOURCES)
	@mkdir -p $(dir $@) $(keep_dir)
	$(NVCC) $(NVCC_FLAGS) $(trainer_gencode) $(INCLUDES) -DENABLE_BF16 -DVALUE_PATH_ID=$(VP_ID_$*) train_gpt.cu $(NVCC_HOST_OMP) $(CUDA_LIBS) -o $@ $(trainer_ptx)

$(GPU_BUILD)/%/train_fp32: $(GPU_SOURCES)
	@mkdir -p $(dir $@) $(keep_dir)
	$(NVCC) $(NVCC_FLAGS) $(trainer_gencode) $(INCLUDES) -DENABLE_FP32 -DVALUE_PATH_ID=$(VP_ID_$*) train_gpt.cu $(NVCC_HOST_OMP) $(CUDA_LIBS) -o $@ $(trainer_ptx)

# build/<path>-mpi/: the data-parallel trainer (the shorter stem wins over build/%/ above)
$(GPU_BUILD)/%-mpi/train_bf16: $(GPU_SOURCES) $(call ptx_twin_of,$(GPU_BUILD)/%/train_bf16)
	@$(if $(and $(HAVE_MPI),$(HAVE_NCCL)),true,echo "✗ $@ needs MPI (mpicxx, mpirun: apt-get install libopenmpi-dev openmpi-bin) and NCCL (nccl.h; set NCCL_HOME)"; exit 1)
	@mkdir -p $(dir $@) $(keep_dir)
	$(NVCC) $(NVCC_FLAGS) $(twin_gencode) $(INCLUDES) -DENABLE_BF16 -DVALUE_PATH_ID=$(VP_ID_$*) train_gpt.cu $(NVCC_HOST_OMP) $(NVCC_MPI) $(CUDA_LIBS) -o $@ $(call twin_check,$(GPU_BUILD)/$*/train_bf16)

$(GPU_BUILD)/%-mpi/train_fp32: $(GPU_SOURCES) $(call ptx_twin_of,$(GPU_BUILD)/%/train_fp32)
	@$(if $(and $(HAVE_MPI),$(HAVE_NCCL)),true,echo "✗ $@ needs MPI (mpicxx, mpirun: apt-get install libopenmpi-dev openmpi-bin) and NCCL (nccl.h; set NCCL_HOME)"; exit 1)
	@mkdir -p $(dir $@) $(keep_dir)
	$(NVCC) $(NVCC_FLAGS) $(twin_gencode) $(INCLUDES) -DENABLE_FP32 -DVALUE_PATH_ID=$(VP_ID_$*) train_gpt.cu $(NVCC_HOST_OMP) $(NVCC_MPI) $(CUDA_LIBS) -o $@ $(call twin_check,$(GPU_BUILD)/$*/train_fp32)

train: $(if $(and $(GPU_TOO_OLD),$(filter file,$(origin GPU_ARCH))),gpu-too-old,$(GPU_BUILD)/$(VALUE_PATH)$(MPI_SUFFIX)/train_$(PREC))
	cp $< train
	@echo "✓ ./train is the GPU trainer, VALUE_PATH=$(VALUE_PATH), PRECISION=$(PRECISION), GPU_ARCH=$(GPU_ARCH)$(if $(MPI_SUFFIX), with MPI + NCCL (run it under mpirun),)"

gpu-too-old:
	@echo "✗ this machine's GPU has compute capability $(GPU_COMPUTE_CAP); the GPU trainer's kernels need 8.0 or newer (bf16 tensor cores, cp.async): train on the CPU with make train_cpu (./train_cpu: the same flags, data and checkpoints), or build for another machine's GPU with GPU_ARCH=sm_80 (A100), sm_86, sm_89, sm_90a (H100), ..."; exit 1

gpu-all-paths: $(foreach p,$(GPU_VALUE_PATHS),$(GPU_BUILD)/$(p)/train_$(PREC))
	@echo "✓ GPU trainers ($(PRECISION)): $^"

# ---------------------------------------------------------------------------
# tests: test_gpt.cu holds the GPU trainer and the CPU reference in one program

$(GPU_BUILD)/tests/test_gpt_gpu_%_bf16: test_gpt.cu $(GPU_SOURCES) $(CPU_SOURCES) tests/testing.h $(call ptx_twin_of,$(GPU_BUILD)/vanilla/train_bf16)
	@mkdir -p $(dir $@) $(keep_dir)
	$(NVCC) $(NVCC_FLAGS) $(twin_gencode) $(INCLUDES) $(NVCC_HOST_CPU) -DENABLE_BF16 -DVP_ERRORS_THROW -DVALUE_PATH_ID=$(VP_ID_$*) $< $(CUDA_LIBS) -o $@ $(call twin_check,$(GPU_BUILD)/vanilla/train_bf16)

$(GPU_BUILD)/tests/test_gpt_gpu_%_fp32: test_gpt.cu $(GPU_SOURCES) $(CPU_SOURCES) tests/testing.h $(call ptx_twin_of,$(GPU_BUILD)/vanilla/train_fp32)
	@mkdir -p $(dir $@) $(keep_dir)
	$(NVCC) $(NVCC_FLAGS) $(twin_gencode) $(INCLUDES) $(NVCC_HOST_CPU) -DENABLE_FP32 -DVP_ERRORS_THROW -DVALUE_PATH_ID=$(VP_ID_$*) $< $(CUDA_LIBS) -o $@ $(call twin_check,$(GPU_BUILD)/vanilla/train_fp32)

# the value paths' plumbing of the GPU trainer, run on the CPU (no GPU needed; see the file)
$(GPU_BUILD)/tests/test_gpu_routes: tests/test_gpu_routes.cu $(GPU_SOURCES) $(CPU_SOURCES) tests/testing.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(call gencode,$(GPU_ARCH)) $(INCLUDES) $(NVCC_HOST_CPU) -DENABLE_FP32 -DVP_ERRORS_THROW $< $(CUDA_LIBS) -o $@

test_gpt: $(TEST_GPT_BINS)

# runs every test_gpt binary; each prints "skipped: no CUDA device" and succeeds where there is no GPU
test-gpu: $(TEST_GPT_BINS)
	@fail=0; for t in $(TEST_GPT_BINS); do echo "== $$t"; ./$$t || fail=1; done; exit $$fail

# ---------------------------------------------------------------------------
# kernel labs and the benchmark (dev/cuda/): build/dev/cuda/<prec>/<name>

# (in the compile check, a PTX twin of vanilla's bf16 trainer: the labs time the trainer's kernels)
$(GPU_BUILD)/dev/cuda/bf16/%: dev/cuda/%.cu dev/cuda/common.h $(GPU_SOURCES) $(CPU_SOURCES) $(call ptx_twin_of,$(GPU_BUILD)/vanilla/train_bf16)
	@mkdir -p $(dir $@) $(keep_dir)
	$(NVCC) $(NVCC_FLAGS) $(twin_gencode) $(INCLUDES) $(NVCC_HOST_CPU) -DENABLE_BF16 $< $(CUDA_LIBS) -o $@ $(call twin_check,$(GPU_BUILD)/vanilla/train_bf16)

$(GPU_BUILD)/dev/cuda/fp32/%: dev/cuda/%.cu dev/cuda/common.h $(GPU_SOURCES) $(CPU_SOURCES)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(call gencode,$(GPU_ARCH)) $(INCLUDES) $(NVCC_HOST_CPU) -DENABLE_FP32 $< $(CUDA_LIBS) -o $@

dev-cuda: $(addprefix build/dev/cuda/$(PREC)/,$(DEV_CUDA_LABS))
	@echo "✓ kernel labs in build/dev/cuda/$(PREC)/: $(DEV_CUDA_LABS) (run one with --check to validate only)"

# PTX / SASS of a lab, to read what the compiler made: make build/dev/cuda/bf16/attention_forward.sass
build/dev/cuda/%.sass: build/dev/cuda/%
	cuobjdump --dump-sass $< > $@

# one benchmark binary per value path (the path is compiled in, as in the trainer)
BENCH_BINS := $(foreach p,$(GPU_VALUE_PATHS),$(GPU_BUILD)/dev/cuda/bf16/bench_gpt_$(p))
$(GPU_BUILD)/dev/cuda/bf16/bench_gpt_%: dev/cuda/bench_gpt.cu dev/cuda/common.h $(GPU_SOURCES) $(CPU_SOURCES) $(call ptx_twin_of,$(GPU_BUILD)/vanilla/train_bf16)
	@mkdir -p $(dir $@) $(keep_dir)
	$(NVCC) $(NVCC_FLAGS) $(twin_gencode) $(INCLUDES) $(NVCC_HOST_CPU) -DENABLE_BF16 -DVALUE_PATH_ID=$(VP_ID_$*) $< $(CUDA_LIBS) -o $@ $(call twin_check,$(GPU_BUILD)/vanilla/train_bf16)

# build/variants/<name>/bench_gpt: its path's benchmark with a variant's flags (BENCH_VARIANTS)
# (in the compile check, a PTX twin of vanilla's bf16 trainer: ptxas runs on the kernels its flags change)
$(GPU_BUILD)/variants/%/bench_gpt: dev/cuda/bench_gpt.cu dev/cuda/common.h dev/bench_variants.list $(GPU_SOURCES) $(CPU_SOURCES) $(call ptx_twin_of,$(GPU_BUILD)/vanilla/train_bf16)
	@mkdir -p $(dir $@) $(keep_dir)
	$(NVCC) $(NVCC_FLAGS) $(twin_gencode) $(INCLUDES) $(NVCC_HOST_CPU) -DENABLE_BF16 -DVALUE_PATH_ID=$(VP_ID_$(call variant_path,$*)) $(call variant_flags,$*) $< $(CUDA_LIBS) -o $@ $(call twin_check,$(GPU_BUILD)/vanilla/train_bf16)

# GPT-2 124M, B=64, T=1024, bf16: every value path, then PyTorch (torch.compile + SDPA flash), on
# the same device in the same call; prints the PyTorch ratio and each path's ratio to vanilla.
bench: $(BENCH_BINS)
	BENCH_PYTHON=$(BENCH_PYTHON) BENCH_PATHS="$(GPU_VALUE_PATHS)" GPU_BUILD=$(GPU_BUILD) bash dev/bench_paths.sh

# ---------------------------------------------------------------------------
# compile checks (what CI runs: no GPU needed)

# Without a GPU (GPU_PTX_TWINS set by gpu-compile-check-fast) the other paths' trainers,
# benchmarks and fp32 test_gpt are left out: test_gpt_gpu_<path>_bf16 compiles all of train_gpt.cu
# for its path, ./train's train_main<GpuModel> included (test_gpt.cu instantiates it), so a trainer
# adds only its one-line main; vanilla's fp32 trainer and test_gpt compile every fp32 kernel, and
# the emulated build (emu.mk) compiles every path's fp32 test_gpt and bench_gpt with g++. 16 of 36
# nvcc runs, about 420 of the check's 1045 CPU-seconds on the 2-core machine (2026-11-29, a slow
# hour), where CI's 25 minutes had run out; make gpu-compile-check builds them all.
CHECK_LEFT_OUT := $(foreach p,$(TWIN_PATHS),$(GPU_BUILD)/$(p)/train_bf16 $(GPU_BUILD)/$(p)/train_fp32 $(GPU_BUILD)/dev/cuda/bf16/bench_gpt_$(p)) \
	$(TWIN_FP32_TEST_GPT)
CHECK_TARGETS := $(if $(GPU_PTX_TWINS),$(filter-out $(CHECK_LEFT_OUT),$(GPU_ALL_TARGETS)),$(GPU_ALL_TARGETS))
gpu-compile-check: $(CHECK_TARGETS)
	@echo "✓ GPU targets compile ($(GPU_ARCH), bf16 and fp32, $(GPU_OPT)): $(CHECK_TARGETS)"

gpu-compile-check-fast:
	@$(MAKE) --no-print-directory GPU_BUILD=build/check GPU_OPT='-O0 -Xcicc -O0 -Xptxas -O0' GPU_PTX_TWINS=1 gpu-compile-check
	@$(if $(GPU_MPI_TARGETS),true,echo "✗ no MPI (mpicxx, mpirun) or no NCCL (nccl.h): the MPI + NCCL trainer was not compiled")

build/sm80/train_bf16: $(GPU_SOURCES)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(call gencode,sm_80) $(INCLUDES) -DENABLE_BF16 train_gpt.cu $(NVCC_HOST_OMP) $(CUDA_LIBS) -o $@

build/sm80/test_gpt_bf16: test_gpt.cu $(GPU_SOURCES) $(CPU_SOURCES) tests/testing.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(call gencode,sm_80) $(INCLUDES) $(NVCC_HOST_CPU) -DENABLE_BF16 -DVP_ERRORS_THROW $< $(CUDA_LIBS) -o $@

gpu-compile-check-sm80: build/sm80/train_bf16 build/sm80/test_gpt_bf16
	@echo "✓ the trainer and test_gpt compile for sm_80"

endif

clean-gpu:
	rm -f train
clean: clean-gpu
